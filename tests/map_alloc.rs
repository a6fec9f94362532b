//! Memory, watched by a counting global allocator in this binary alone:
//! - regression: `try_map_async(0..1 << 33, ..)` sized its output vector from `size_hint`
//!   up front and asked for 64 GiB (the process aborted) before pulling anything;
//! - regression: a retry budget kept every key that ever retried for the rest of the run
//!   (one key per item, 1 in 10 failing once: 5.1 MB live at 100,000 items, 23.5 MB at
//!   500,000; now 1.0 MB at both).
//!
//! The counts are per thread: every runtime of the matrix polls the map on the test's own
//! thread (a multi-thread tokio runtime's `block_on` too), so tests running side by side do
//! not see each other's allocations.

mod common;

use std::sync::Mutex;
use std::time::Duration;

use common::matrix;
use futures_lite::{StreamExt, stream};
use tollgate::{BoundedStreamExt, RetryPolicy, map_async, try_map_async};

#[path = "common/counting_alloc.rs"]
mod counting_alloc;

use counting_alloc::{Counting, live};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// No single allocation of the maps below comes near this (the runtimes' own are far
/// smaller too).
const SMALL: usize = 4 << 20;

matrix! {
    async fn a_huge_input_that_fails_early_allocates_little() {
        let result = try_map_async(0u64..1 << 33, 4, |n| async move {
            if n == 1_000 { Err(n) } else { Ok(n) }
        })
        .await;
        assert_eq!(result, Err(1_000));
        let some = map_async((0u64..1 << 33).take(10), 4, |n| async move { n }).await;
        assert_eq!(some.len(), 10);
        let largest = counting_alloc::largest();
        assert!(largest < SMALL, "an allocation of {largest} bytes");
    }
}

/// The item at which the live heap is first read, and the items of the run (5 times as
/// many keys at the second reading; a million items cost a debug build 8 s of CPU per
/// runtime, too close to the test deadline on a loaded machine).
const FIRST_READING: u64 = 100_000;
const ITEMS: u64 = 500_000;

/// How much more the live heap may hold at the end of the run than at the first reading:
/// the map's own memory is bounded by its window, whatever the number of items.
const SMALL_GROWTH: isize = 256 << 10;

/// An item of the budget test: its input position, and whether it is the copy the map
/// keeps for a retry (the map clones an item before each attempt that may be retried, and
/// calls the function with the copy on the retry).
#[derive(Debug)]
struct Item {
    n: u64,
    retry: bool,
}

impl Clone for Item {
    fn clone(&self) -> Self {
        Self {
            n: self.n,
            retry: true,
        }
    }
}

matrix! {
    async fn a_retry_budget_forgets_keys_and_memory_stays_flat() {
        // One key per item, 1 in 10 failing once: each of those keys spends its budget.
        let live_at = Mutex::new(Vec::new());
        let policy = RetryPolicy::new()
            .attempts(2)
            .interval(Duration::ZERO)
            .budget(0.5, 1);
        let items = (0..ITEMS).map(|n| Item { n, retry: false });
        let retried = stream::iter(items)
            .map_unordered(64, |Item { n, retry }| {
                if !retry && (n == FIRST_READING || n == ITEMS - 1) {
                    live_at.lock().unwrap().push(live());
                }
                async move { if n % 10 == 0 && !retry { Err(n) } else { Ok(retry) } }
            })
            .per_key(|item| item.n, 1)
            .retry(policy)
            .fold(0u64, |retried, output| retried + u64::from(output == Ok(true)))
            .await;
        assert_eq!(retried, ITEMS / 10, "every failed item was retried once (its floor)");
        let live_at = live_at.into_inner().unwrap();
        let (first, last) = (live_at[0], live_at[1]);
        eprintln!("live heap: {first} B at {FIRST_READING} items, {last} B at {ITEMS}");
        assert!(
            last <= first + SMALL_GROWTH,
            "the live heap grew from {first} B at {FIRST_READING} items to {last} B at {ITEMS}"
        );
    }
}
