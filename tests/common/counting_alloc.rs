//! A global allocator that counts, per thread: the bytes allocated and not yet freed, and the
//! largest single request. A test binary that measures memory includes this file (it is not
//! part of `common`, so other binaries keep the system allocator) and reads its own thread's
//! counts: tests running side by side do not see each other's allocations, as long as every
//! runtime of the test polls on the test's own thread.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// The system allocator, remembering the largest single request of each thread and
/// counting the bytes each thread allocated and not yet freed.
pub struct Counting;

thread_local! {
    // Constant-initialised cells: reaching them neither allocates nor registers a
    // destructor, so the allocator may use them.
    static LARGEST: Cell<usize> = const { Cell::new(0) };
    static LIVE: Cell<isize> = const { Cell::new(0) };
}

/// Records an allocation of `size` bytes on this thread (a negative size: a free).
fn count(size: isize) {
    // `try_with`: nothing to record while the thread's locals are being torn down.
    let _ = LIVE.try_with(|live| live.set(live.get() + size));
    if let Ok(size) = usize::try_from(size) {
        let _ = LARGEST.try_with(|largest| largest.set(largest.get().max(size)));
    }
}

/// Bytes this thread allocated and has not freed (it may free what another allocated).
pub fn live() -> isize {
    LIVE.with(Cell::get)
}

/// The largest single allocation this thread asked for.
#[allow(dead_code)] // not every binary that counts reads it
pub fn largest() -> usize {
    LARGEST.with(Cell::get)
}

// SAFETY: every call goes straight to `System`, which upholds the contract; the counters
// only record sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as isize);
        // SAFETY: the caller's guarantees for `alloc` are passed on unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(-(layout.size() as isize));
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(-(layout.size() as isize));
        count(new_size as isize);
        // SAFETY: the caller's guarantees for `realloc` are passed on unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}
