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

/// Locks a `std` mutex, ignoring poisoning. For the limiters' own tables, whose critical
/// sections leave the data consistent at every point a panic can unwind from (a lookup, a
/// push, a sum, a rebuild from a taken list, or user code - `Hash`, `Eq`, `ToOwned` - run
/// before anything changes).
pub(crate) fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
