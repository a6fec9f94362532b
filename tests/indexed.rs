//! `.indexed()`: each output paired with its item's input position, on every bounded map
//! (`map_async`, `try_map_async`, `map_bounded`, `map_unordered` / `amap_iter`), whatever
//! order the items start and finish in: per-key limits with a slow key, retries, and
//! after a drain, where the positions of the outputs, `not_started()` and everything from
//! `pulled()` on partition the input exactly. Every test under smol, `run_sync` and tokio
//! (current and multi-thread).

mod common;

use std::collections::BTreeSet;
use std::future::{Pending, Ready, ready};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::time::Duration;

use common::matrix;
use futures_lite::future::yield_now;
use futures_lite::{StreamExt, stream};
use tollgate::{
    Answer, BoundedStreamExt, MapControl, Rate, RetryPolicy, SharedLimits, amap_iter, map_async,
    try_map_async,
};

/// The input: item `i` is worth `value(i)`, so an output tells which item it came from.
fn value(position: usize) -> u64 {
    1_000 + 7 * position as u64
}

fn items(n: usize) -> Vec<u64> {
    (0..n).map(value).collect()
}

/// The position of the item worth `v`.
fn position_of(v: u64) -> usize {
    ((v - 1_000) / 7) as usize
}

/// Work that waits a few polls (0 to 2, by value): items finish out of input order.
async fn work(v: u64) -> u64 {
    for _ in 0..v % 3 {
        yield_now().await;
    }
    v * 2
}

/// Checks that every output is its item's, and returns the positions in the order they
/// came.
fn check_pairs(outputs: &[(usize, u64)]) -> Vec<usize> {
    for &(position, output) in outputs {
        assert_eq!(output, value(position) * 2, "output at position {position}");
    }
    outputs.iter().map(|&(position, _)| position).collect()
}

/// Checks that the positions handed out, the positions not started and every position
/// from `pulled` on partition `0..n`: each exactly once.
fn check_partition(handed_out: &[usize], not_started: &[usize], pulled: usize, n: usize) {
    let mut seen = vec![0u32; n];
    for &position in handed_out
        .iter()
        .chain(not_started)
        .chain(&(pulled..n).collect::<Vec<_>>())
    {
        seen[position] += 1;
    }
    let wrong: Vec<(usize, u32)> = seen
        .iter()
        .enumerate()
        .filter(|&(_, &count)| count != 1)
        .map(|(position, &count)| (position, count))
        .collect();
    assert!(
        wrong.is_empty(),
        "positions not seen exactly once: {wrong:?}"
    );
}

/// Shared limits that grant everything at once (to show `.indexed()` beside them).
struct Open;

impl SharedLimits<u64> for Open {
    type Permit = ();
    type Error = ();
    type Ask = Ready<Answer<(), ()>>;
    type Wake = Pending<()>;
    type Revoked = Pending<()>;
    fn ask(&self, _key: &u64) -> Self::Ask {
        ready(Answer::Granted(()))
    }
    fn wake(&self, _key: &u64) -> Option<Self::Wake> {
        None
    }
    fn revoked(&self, _permit: &()) -> Option<Self::Revoked> {
        None
    }
}

matrix! {
    async fn each_map_pairs_every_output_with_its_input_position() {
        let n = 300;
        let all: Vec<usize> = (0..n).collect();

        let out = map_async(items(n), 8, work).indexed().await;
        assert_eq!(check_pairs(&out), all, "map_async: in input order");

        let out = try_map_async(items(n), 8, |v| async move { Ok::<_, ()>(work(v).await) })
            .indexed()
            .await
            .unwrap();
        assert_eq!(check_pairs(&out), all, "try_map_async: in input order");

        let out: Vec<(usize, u64)> = stream::iter(items(n))
            .map_bounded(8, work)
            .indexed()
            .collect()
            .await;
        assert_eq!(check_pairs(&out), all, "map_bounded: in input order");

        let out: Vec<(usize, u64)> = amap_iter(items(n), 8, work).indexed().collect().await;
        let mut positions = check_pairs(&out);
        assert_ne!(positions, all, "the work finishes out of order");
        positions.sort_unstable();
        assert_eq!(positions, all, "amap_iter: each position once");

        let out: Vec<(usize, u64)> = stream::iter(items(n))
            .map_unordered(8, work)
            .indexed()
            .collect()
            .await;
        let mut positions = check_pairs(&out);
        positions.sort_unstable();
        assert_eq!(positions, all, "map_unordered: each position once");

        // An empty input has nothing to pair.
        assert!(map_async(Vec::<u64>::new(), 4, work).indexed().await.is_empty());
    }

    async fn a_slow_key_finishes_last_and_its_positions_still_match() {
        // Key 0 (every third item) runs one at a time and each of its items waits until
        // every item of the other keys finished: its outputs come last.
        let n = 60;
        let others = (0..n).filter(|p| p % 3 != 0).count();
        let done = AtomicUsize::new(0);
        let f = |v: u64| {
            let done = &done;
            async move {
                if position_of(v) % 3 == 0 {
                    while done.load(SeqCst) < others {
                        yield_now().await;
                    }
                } else {
                    yield_now().await;
                    done.fetch_add(1, SeqCst);
                }
                v * 2
            }
        };
        let key = |v: &u64| position_of(*v) % 3 == 0;

        let out: Vec<(usize, u64)> = amap_iter(items(n), 6, f)
            .per_key(key, 1)
            .indexed()
            .window(n)
            .collect()
            .await;
        let positions = check_pairs(&out);
        assert_eq!(positions.len(), n);
        let first_slow = positions.iter().position(|p| p % 3 == 0).unwrap();
        assert!(
            first_slow >= others - 6,
            "the slow key's first output came {first_slow}th: {positions:?}"
        );
        assert_eq!(positions.iter().copied().collect::<BTreeSet<_>>().len(), n);

        done.store(0, SeqCst);
        let out = map_async(items(n), 6, f).indexed().per_key(key, 1).window(n).await;
        assert_eq!(check_pairs(&out), (0..n).collect::<Vec<_>>(), "in input order");

        done.store(0, SeqCst);
        let out = try_map_async(items(n), 6, |v| async move { Ok::<_, ()>(f(v).await) })
            .per_key(key, 1)
            .window(n)
            .indexed()
            .await
            .unwrap();
        assert_eq!(check_pairs(&out), (0..n).collect::<Vec<_>>(), "in input order");
    }

    async fn indexed_goes_anywhere_in_the_chain_before_the_first_poll() {
        let n = 100;
        let all: Vec<usize> = (0..n).collect();
        let rate = || Rate::per_second(1_000_000).burst(1_000);
        let ok = |v: u64| async move { Ok::<_, ()>(work(v).await) };
        let pairs = |out: Vec<(usize, Result<u64, ()>)>| -> Vec<(usize, u64)> {
            out.into_iter().map(|(p, r)| (p, r.unwrap())).collect()
        };

        let control = MapControl::new();
        let out = map_async(items(n), 4, ok).control(&control).indexed().await;
        assert_eq!(check_pairs(&pairs(out)), all, "after control");
        assert_eq!(control.progress().finished(), n as u64);

        let out = map_async(items(n), 4, ok)
            .rate(rate())
            .indexed()
            .per_key(|v| v % 5, 2)
            .per_key_rate(rate())
            .await;
        assert_eq!(check_pairs(&pairs(out)), all, "between rate and per_key");

        let policy = RetryPolicy::new().attempts(2).interval(Duration::ZERO);
        let control = MapControl::new();
        let out = map_async(items(n), 4, ok)
            .per_key(|v| v % 5, 2)
            .shared_limits(Open)
            .retry(policy)
            .window(64)
            .control(&control)
            .indexed()
            .await;
        assert_eq!(check_pairs(&pairs(out)), all, "last, after everything");

        let out: Vec<(usize, Result<u64, ()>)> = stream::iter(items(n))
            .map_bounded(4, ok)
            .indexed()
            .retry(RetryPolicy::new())
            .per_key(|v| v % 5, 2)
            .shared_limits(Open)
            .collect()
            .await;
        assert_eq!(check_pairs(&pairs(out)), all, "map_bounded, first");

        let out: Vec<(usize, Result<u64, ()>)> = amap_iter(items(n), 4, ok)
            .per_key(|v| v % 5, 2)
            .indexed()
            .rate(rate())
            .collect()
            .await;
        let mut positions = check_pairs(&pairs(out));
        positions.sort_unstable();
        assert_eq!(positions, all, "amap_iter, in the middle");
    }

    async fn a_drained_map_partitions_its_input_by_position() {
        let n = 500;

        // A plain map, drained from inside the function at item 40: every pulled item
        // started and finished.
        let control = MapControl::new();
        let stop = control.clone();
        let out = map_async(items(n), 4, |v| {
            if position_of(v) == 40 {
                stop.drain();
            }
            work(v)
        })
        .indexed()
        .control(&control)
        .await;
        let positions = check_pairs(&out);
        assert_eq!(positions, (0..=40).collect::<Vec<_>>());
        let pulled = control.progress().pulled() as usize;
        assert!(control.not_started().is_empty());
        check_partition(&positions, &control.not_started(), pulled, n);

        // Keyed maps that pulled ahead: items of a key wait while the drain comes, and
        // stay unstarted.
        let control = MapControl::new();
        let stop = control.clone();
        let out = map_async(items(n), 4, |v| {
            if position_of(v) == 30 {
                stop.drain();
            }
            work(v)
        })
        .per_key(|v| v % 2, 1)
        .indexed()
        .control(&control)
        .await;
        let positions = check_pairs(&out);
        let not_started = control.not_started();
        assert!(!not_started.is_empty(), "the keyed map pulled ahead");
        assert!(positions.contains(&30));
        assert!(positions.windows(2).all(|w| w[0] < w[1]), "in input order");
        check_partition(&positions, &not_started, control.progress().pulled() as usize, n);

        let control = MapControl::new();
        let stop = control.clone();
        let out: Vec<(usize, u64)> = amap_iter(items(n), 4, |v| {
            if position_of(v) == 30 {
                stop.drain();
            }
            work(v)
        })
        .per_key(|v| v % 2, 1)
        .control(&control)
        .indexed()
        .collect()
        .await;
        let positions = check_pairs(&out);
        let not_started = control.not_started();
        assert!(!not_started.is_empty(), "the keyed stream pulled ahead");
        check_partition(&positions, &not_started, control.progress().pulled() as usize, n);

        let control = MapControl::new();
        let stop = control.clone();
        let out: Vec<(usize, u64)> = stream::iter(items(n))
            .map_bounded(4, |v| {
                if position_of(v) == 30 {
                    stop.drain();
                }
                work(v)
            })
            .indexed()
            .per_key(|v| v % 2, 1)
            .control(&control)
            .collect()
            .await;
        let positions = check_pairs(&out);
        let not_started = control.not_started();
        assert!(!not_started.is_empty(), "the keyed stream pulled ahead");
        assert!(positions.windows(2).all(|w| w[0] < w[1]), "in input order");
        check_partition(&positions, &not_started, control.progress().pulled() as usize, n);

        // A drain while the retries of some items wait: they started, so they finish
        // and keep their positions.
        let control = MapControl::new();
        let stop = control.clone();
        let failed_once = Mutex::new(BTreeSet::new());
        let policy = RetryPolicy::new().attempts(3).interval(Duration::ZERO);
        let out = map_async(items(n), 4, |v| {
            let position = position_of(v);
            if position == 30 {
                stop.drain();
            }
            let first = position % 4 == 1 && failed_once.lock().unwrap().insert(position);
            async move { if first { Err(()) } else { Ok(work(v).await) } }
        })
        .per_key(|v| v % 3, 1)
        .retry(policy)
        .indexed()
        .control(&control)
        .await;
        let out: Vec<(usize, u64)> = out.into_iter().map(|(p, r)| (p, r.unwrap())).collect();
        let positions = check_pairs(&out);
        assert!(control.progress().retries() > 0);
        check_partition(&positions, &control.not_started(), control.progress().pulled() as usize, n);
    }

    async fn a_retried_item_keeps_its_position() {
        // Every item whose position is a multiple of 3 fails its first two attempts: its
        // output comes after later items' in the stream, with its own position.
        let n = 120;
        let attempts: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
        let f = |v: u64| {
            let position = position_of(v);
            let attempt = attempts[position].fetch_add(1, SeqCst);
            async move {
                if position % 3 == 0 && attempt < 2 {
                    Err(attempt)
                } else {
                    Ok(work(v).await)
                }
            }
        };
        let policy = || RetryPolicy::new().attempts(3).interval(Duration::ZERO);

        let out: Vec<(usize, Result<u64, usize>)> =
            amap_iter(items(n), 8, f).retry(policy()).indexed().collect().await;
        let out: Vec<(usize, u64)> = out.into_iter().map(|(p, r)| (p, r.unwrap())).collect();
        let mut positions = check_pairs(&out);
        assert_ne!(positions[0], 0, "item 0 was retried: later items came first");
        positions.sort_unstable();
        assert_eq!(positions, (0..n).collect::<Vec<_>>());
        assert!(attempts.iter().enumerate().all(|(p, a)| a.load(SeqCst) == if p % 3 == 0 { 3 } else { 1 }));

        for a in &attempts {
            a.store(0, SeqCst);
        }
        let out = try_map_async(items(n), 8, f)
            .per_key(|v| v % 4, 2)
            .retry(policy())
            .indexed()
            .await
            .unwrap();
        assert_eq!(check_pairs(&out), (0..n).collect::<Vec<_>>());
    }

    async fn try_map_async_indexed_stops_at_its_first_error() {
        let n = 200;
        let out = try_map_async(items(n), 8, |v| async move {
            let output = work(v).await;
            if position_of(v) == 77 { Err(position_of(v)) } else { Ok(output) }
        })
        .indexed()
        .await;
        assert_eq!(out, Err(77));

        // Keyed, with a control: the error stops the map, and the positions it never
        // started are listed.
        let control = MapControl::new();
        let out = try_map_async(items(n), 8, |v| async move {
            let output = work(v).await;
            if position_of(v) == 77 { Err(position_of(v)) } else { Ok(output) }
        })
        .per_key(|v| v % 2, 1)
        .control(&control)
        .indexed()
        .await;
        assert_eq!(out, Err(77));
        assert!(control.progress().is_ended());
        assert!(!control.not_started().is_empty(), "the keyed map pulled ahead");
    }
}

/// `.indexed()` after the map was polled would pair outputs with the wrong positions:
/// it panics instead.
#[test]
fn indexed_after_the_first_poll_panics() {
    let mut map = map_async(0..8u32, 2, ready);
    let polled = futures_lite::future::block_on(futures_lite::future::poll_once(&mut map));
    assert!(polled.is_some());
    let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| map.indexed()))
        .expect_err("indexed after a poll");
    let message = common::panic_message(&*panic);
    assert!(
        message.contains("before the map is first polled"),
        "{message}"
    );
}
