//! The synchronization primitives of the limiter core: `std`'s normally, `loom`'s when built
//! with `RUSTFLAGS="--cfg tollgate_loom"`, so that `tests/loom.rs` can explore every
//! interleaving. The only module that knows about loom. (`Arc` stays `std`'s: it only
//! carries a semaphore, and it is a method receiver.)

#[cfg(tollgate_loom)]
pub(crate) use loom::future::block_on;
#[cfg(tollgate_loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, AtomicUsize};
#[cfg(tollgate_loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};

#[cfg(not(tollgate_loom))]
pub(crate) use futures_lite::future::block_on;
#[cfg(not(tollgate_loom))]
pub(crate) use std::sync::atomic::{AtomicU64, AtomicUsize};
#[cfg(not(tollgate_loom))]
pub(crate) use std::sync::{Mutex, MutexGuard};

// The wake layer's (`crate::wake`): its flag and fence, and the parent's waker slot.
#[cfg(tollgate_loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, fence};
#[cfg(not(tollgate_loom))]
pub(crate) use std::sync::atomic::{AtomicBool, fence};

#[cfg(not(tollgate_loom))]
pub(crate) use atomic_waker::AtomicWaker;

/// loom's model of an `AtomicWaker`, with atomic-waker's method names.
#[cfg(tollgate_loom)]
#[derive(Debug, Default)]
pub(crate) struct AtomicWaker(loom::future::AtomicWaker);

#[cfg(tollgate_loom)]
impl AtomicWaker {
    pub(crate) fn new() -> Self {
        Self(loom::future::AtomicWaker::new())
    }

    pub(crate) fn register(&self, waker: &std::task::Waker) {
        self.0.register_by_ref(waker);
    }

    pub(crate) fn wake(&self) {
        self.0.wake();
    }
}

/// Declares a `const fn` that is a plain `fn` under loom, whose primitives have no
/// `const` constructors.
macro_rules! const_unless_loom {
    ($(#[$attr:meta])* $vis:vis const fn $($rest:tt)*) => {
        #[cfg(not(tollgate_loom))]
        $(#[$attr])* $vis const fn $($rest)*
        #[cfg(tollgate_loom)]
        $(#[$attr])* $vis fn $($rest)*
    };
}
pub(crate) use const_unless_loom;

/// Locks a `std` mutex, ignoring poisoning. For the limiters' and the runtime registry's own
/// tables, whose critical sections leave the data consistent at every point a panic can unwind from (a lookup, a
/// push, a sum, a rebuild from a taken list, or user code - `Hash`, `Eq`, `ToOwned` - run
/// before anything changes).
pub(crate) fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A `SeqCst` fence under loom; nothing otherwise. loom models `SeqCst` loads and stores only
/// as `AcqRel` (it models `SeqCst` fences fully), so it cannot see the order a
/// store-buffering pair of `SeqCst` accesses gets outside loom (each side stores, then loads
/// what the other stores). Code that rests on such a pair calls this between the store and
/// the load of each side, so the loom model checks the same protocol.
#[cfg(tollgate_loom)]
pub(crate) fn loom_seq_cst_fence() {
    loom::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
}

/// See the loom version: outside loom the `SeqCst` accesses themselves give the order.
#[cfg(not(tollgate_loom))]
#[inline(always)]
pub(crate) fn loom_seq_cst_fence() {}
