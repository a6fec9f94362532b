//! [`BulkheadError`]: why a bulkhead refused.

use std::fmt;
use std::time::Duration;

use super::options::{Name, Options};

/// Why a [`Bulkhead`](crate::Bulkhead) or [`KeyedBulkhead`](crate::KeyedBulkhead)
/// refused: it had no free permit and either its acquire timeout passed
/// ([`is_timed_out`](Self::is_timed_out)) or its queue was full
/// ([`is_queue_full`](Self::is_queue_full)), or (from `try_acquire` only) it had no free
/// permit right now ([`is_busy`](Self::is_busy)), or it was closed
/// ([`is_closed`](Self::is_closed)).
///
/// It says which limiter ([`name`](Self::name), [`limit`](Self::limit)) and how it was
/// configured ([`acquire_timeout`](Self::acquire_timeout),
/// [`max_waiting`](Self::max_waiting)).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::Bulkhead;
///
/// static API: Bulkhead = Bulkhead::new(1).name("api").acquire_timeout(Duration::ZERO);
///
/// # futures_lite::future::block_on(async {
/// let _busy = API.acquire().await?;
/// let refused = API.acquire().await.unwrap_err();
/// assert_eq!(refused.name(), Some("api"));
/// assert!(refused.is_timed_out());
/// assert_eq!(refused.acquire_timeout(), Some(Duration::ZERO));
/// assert_eq!(refused.to_string(), "bulkhead `api` (limit 1) has no free permit and an acquire timeout of zero");
/// # Ok::<(), tollgate::BulkheadError>(())
/// # }).unwrap();
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BulkheadError(Box<Refusal>);

/// Boxed so that `Result<BulkheadPermit, BulkheadError>` stays small on the fast path.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Refusal {
    name: Name,
    limit: usize,
    acquire_timeout: Option<Duration>,
    max_waiting: Option<usize>,
    reason: Reason,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reason {
    TimedOut,
    QueueFull,
    Busy,
    Closed,
}

impl BulkheadError {
    pub(crate) fn new(options: &Options, limit: usize, reason: Reason) -> Self {
        Self(Box::new(Refusal {
            name: options.name.clone(),
            limit,
            acquire_timeout: options.acquire_timeout,
            max_waiting: options.max_waiting,
            reason,
        }))
    }

    /// A waiting acquire refused by a limiter with `options` and `limit`: reported (the
    /// `tracing` feature's event), then the error.
    #[cold]
    pub(crate) fn refuse(options: &Options, limit: usize, reason: Reason) -> Self {
        crate::events::rejected(options.name.as_str(), limit, &reason);
        Self::new(options, limit, reason)
    }

    /// The limiter's name, if it was given one.
    pub fn name(&self) -> Option<&str> {
        self.0.name.as_str()
    }

    /// The limiter's limit on concurrent work when it refused (per key for a
    /// [`KeyedBulkhead`](crate::KeyedBulkhead)).
    pub fn limit(&self) -> usize {
        self.0.limit
    }

    /// True when the wait for a permit lasted the whole acquire timeout (or the timeout is
    /// zero and no permit was free).
    pub fn is_timed_out(&self) -> bool {
        self.0.reason == Reason::TimedOut
    }

    /// True when the queue of waiters was already at its `max_waiting` bound.
    pub fn is_queue_full(&self) -> bool {
        self.0.reason == Reason::QueueFull
    }

    /// True when a `try_acquire` found no free permit (or callers waiting before it): try
    /// again later. The waiting forms wait instead (and fail with
    /// [`is_timed_out`](Self::is_timed_out) or [`is_queue_full`](Self::is_queue_full)).
    ///
    /// # Examples
    ///
    /// ```
    /// let bulkhead = tollgate::Bulkhead::new(1).name("db");
    /// let _held = bulkhead.try_acquire().unwrap();
    /// let busy = bulkhead.try_acquire().unwrap_err();
    /// assert!(busy.is_busy());
    /// assert_eq!(busy.to_string(), "bulkhead `db` (limit 1) has no free permit right now");
    /// ```
    pub fn is_busy(&self) -> bool {
        self.0.reason == Reason::Busy
    }

    /// True when the limiter was closed (before the call, or while the caller waited).
    ///
    /// # Examples
    ///
    /// ```
    /// let bulkhead = tollgate::Bulkhead::new(1).name("db");
    /// bulkhead.close();
    /// let refused = bulkhead.run_blocking(|| ()).unwrap_err();
    /// assert!(refused.is_closed());
    /// assert_eq!(refused.to_string(), "bulkhead `db` (limit 1) is closed");
    /// ```
    pub fn is_closed(&self) -> bool {
        self.0.reason == Reason::Closed
    }

    /// The limiter's configured acquire timeout (`None`: it waits without one).
    pub fn acquire_timeout(&self) -> Option<Duration> {
        self.0.acquire_timeout
    }

    /// The limiter's configured bound on waiters (`None`: unbounded).
    pub fn max_waiting(&self) -> Option<usize> {
        self.0.max_waiting
    }
}

impl fmt::Display for BulkheadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let refusal = &*self.0;
        let limit = refusal.limit;
        match refusal.name.as_str() {
            Some(name) => write!(f, "bulkhead `{name}` (limit {limit})")?,
            None => write!(f, "bulkhead (limit {limit})")?,
        }
        match (refusal.reason, refusal.acquire_timeout) {
            (Reason::TimedOut, Some(Duration::ZERO) | None) => {
                f.write_str(" has no free permit and an acquire timeout of zero")
            }
            (Reason::TimedOut, Some(timeout)) => {
                write!(f, " had no free permit within {timeout:?}")
            }
            (Reason::Closed, _) => f.write_str(" is closed"),
            (Reason::Busy, _) => f.write_str(" has no free permit right now"),
            (Reason::QueueFull, _) => match refusal.max_waiting.unwrap_or(0) {
                0 => f.write_str(" has no free permit and takes no waiters"),
                max => write!(f, " has no free permit and {max} callers already waiting"),
            },
        }
    }
}

impl std::error::Error for BulkheadError {}
