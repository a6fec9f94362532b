//! Small functions every file of the crate shares: a lock that survives a panicking holder,
//! and durations in the whole microseconds the scripts count in.

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// Locks, taking the data over from a holder that panicked (every guarded state here stays
/// consistent between statements).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A whole number of microseconds not below `duration` (a rate rounded down would run
/// faster than configured).
pub(crate) fn micros_ceil(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos().div_ceil(1000)).unwrap_or(u64::MAX)
}

/// Whole microseconds, rounded down.
pub(crate) fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}
