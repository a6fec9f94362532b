//! The one check every limit of the crate passes when it is set: at least 1.

/// Panics with `message` when `limit` is 0: every limit (a map's, a key's, a semaphore's,
/// a bulkhead's) is at least 1, since a limit of 0 would never run anything. The caller's
/// `message` says which limit it is. A `const fn`, so a limit given to a `const`
/// constructor in a `static` is checked at compile time.
#[track_caller]
pub(crate) const fn at_least_one(limit: usize, message: &'static str) {
    if limit == 0 {
        panic!("{}", message);
    }
}
