//! Regression: `try_map_async(0..1 << 33, ..)` sized its output vector from `size_hint`
//! up front and asked for 64 GiB (the process aborted) before pulling anything. Every
//! allocation is watched here by a counting global allocator, in this binary alone.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

use common::matrix;
use tollgate::{map_async, try_map_async};

/// The system allocator, remembering the largest single request.
struct Largest;

static LARGEST: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call goes straight to `System`, which upholds the contract; the counter
// only records sizes.
unsafe impl GlobalAlloc for Largest {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), SeqCst);
        // SAFETY: the caller's guarantees for `alloc` are passed on unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LARGEST.fetch_max(new_size, SeqCst);
        // SAFETY: the caller's guarantees for `realloc` are passed on unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Largest = Largest;

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
        let largest = LARGEST.load(SeqCst);
        assert!(largest < SMALL, "an allocation of {largest} bytes");
    }
}
