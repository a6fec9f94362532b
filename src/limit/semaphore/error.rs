//! [`SemaphoreError`]: why a semaphore gave no permits.

use std::fmt;

/// Why a [`Semaphore`](crate::Semaphore) gave no permits: it is closed
/// ([`is_closed`](Self::is_closed)), the request is above its
/// [max weight](crate::Semaphore::max_weight) ([`is_over_limit`](Self::is_over_limit)), or (from
/// the `try_` forms only) not enough permits are free right now
/// ([`is_busy`](Self::is_busy)).
///
/// # Examples
///
/// ```
/// let semaphore = tollgate::Semaphore::new(4);
/// let error = semaphore.try_acquire_many(5).unwrap_err();
/// assert!(error.is_over_limit());
/// assert_eq!((error.requested(), error.limit(), error.max_weight()), (5, 4, 4));
/// assert_eq!(
///     error.to_string(),
///     "asked a semaphore for 5 permits, more than its max weight of 4"
/// );
///
/// semaphore.close();
/// let error = semaphore.try_acquire().unwrap_err();
/// assert!(error.is_closed());
/// assert_eq!(error.to_string(), "the semaphore is closed");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SemaphoreError {
    reason: Reason,
    requested: usize,
    limit: usize,
    max_weight: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reason {
    Closed,
    OverLimit,
    Busy,
}

impl SemaphoreError {
    pub(crate) fn new(reason: Reason, requested: usize, limit: usize, max_weight: usize) -> Self {
        Self {
            reason,
            requested,
            limit,
            max_weight,
        }
    }

    /// True when the semaphore was closed (before the call, or while it waited).
    pub fn is_closed(&self) -> bool {
        self.reason == Reason::Closed
    }

    /// True when more permits were asked for than the semaphore's
    /// [max weight](crate::Semaphore::max_weight): at the call, or after
    /// [`set_max_weight`](crate::Semaphore::set_max_weight) lowered it while the request
    /// waited. (A request above the limit in force but not above the max weight waits for
    /// the limit to grow instead.)
    pub fn is_over_limit(&self) -> bool {
        self.reason == Reason::OverLimit
    }

    /// True when a `try_` acquire found too few free permits (or others waiting before
    /// it). The async and blocking forms wait instead.
    pub fn is_busy(&self) -> bool {
        self.reason == Reason::Busy
    }

    /// How many permits were asked for.
    pub fn requested(&self) -> usize {
        self.requested
    }

    /// The limit in force when the request was refused.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// The semaphore's [max weight](crate::Semaphore::max_weight) when the request was
    /// refused.
    pub fn max_weight(&self) -> usize {
        self.max_weight
    }
}

impl fmt::Display for SemaphoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (requested, max_weight) = (self.requested, self.max_weight);
        match self.reason {
            Reason::Closed => f.write_str("the semaphore is closed"),
            Reason::OverLimit => write!(
                f,
                "asked a semaphore for {requested} permits, more than its max weight of {max_weight}"
            ),
            Reason::Busy if requested == 1 => f.write_str("no semaphore permit is free right now"),
            Reason::Busy => {
                write!(f, "{requested} semaphore permits are not free right now")
            }
        }
    }
}

impl std::error::Error for SemaphoreError {}
