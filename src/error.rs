//! [`Error`]: one enum over every error tollgate returns.

use std::fmt;

use crate::limit::breaker::CircuitBreakerError;
use crate::limit::bulkhead::BulkheadError;
use crate::limit::rate::RateLimitError;
use crate::limit::semaphore::SemaphoreError;
use crate::map::ControlError;
use crate::race::error::RaceError;
use crate::retry::error::RetryError;
use crate::runtime::RunSyncError;
use crate::testing::EventuallyError;
use crate::time::TimeoutError;

/// Any error tollgate returns, for code that wants one error type (`Box<dyn Error>` works
/// too: each variant's error implements `std::error::Error + Send + Sync + 'static`).
///
/// Every specific error converts into it with `?`, the test helper's
/// [`EventuallyError`](crate::testing::EventuallyError) included: a test written against
/// `Result<(), tollgate::Error>` uses `?` on `eventually` like on anything else.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// async fn fetch() -> Result<u32, tollgate::Error> {
///     let value = tollgate::timeout(Duration::from_secs(1), async { 5 }).await?;
///     Ok(value)
/// }
/// # assert_eq!(tollgate::run_sync(fetch()).unwrap(), 5);
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A [`timeout`](crate::timeout) passed.
    Timeout(TimeoutError),
    /// [`try_run_sync`](crate::try_run_sync) was called inside a running runtime.
    RunSync(RunSyncError),
    /// [`eventually`](crate::testing::eventually) gave up.
    Eventually(EventuallyError),
    /// A [`Bulkhead`](crate::Bulkhead) or [`KeyedBulkhead`](crate::KeyedBulkhead) refused.
    Bulkhead(BulkheadError),
    /// A [`Semaphore`](crate::Semaphore) gave no permits: closed, busy (`try_acquire`), or
    /// asked for more than its max weight.
    Semaphore(SemaphoreError),
    /// A [`RateLimiter`](crate::RateLimiter) or
    /// [`KeyedRateLimiter`](crate::KeyedRateLimiter) refused a start that came too soon.
    RateLimit(RateLimitError),
    /// No contestant of a [`race`](crate::race) succeeded; each error is boxed.
    Race(RaceError<Box<dyn std::error::Error + Send + Sync>>),
    /// A [`retry`](crate::retry) gave up; each attempt's error is boxed.
    Retry(RetryError<Box<dyn std::error::Error + Send + Sync>>),
    /// A [`MapControl`](crate::MapControl) setting the map cannot take.
    Control(ControlError),
    /// A [`CircuitBreaker`](crate::CircuitBreaker) or
    /// [`KeyedCircuitBreaker`](crate::KeyedCircuitBreaker) refused an attempt.
    CircuitBreaker(CircuitBreakerError),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Timeout(error) => error.fmt(f),
            Error::RunSync(error) => error.fmt(f),
            Error::Eventually(error) => error.fmt(f),
            Error::Bulkhead(error) => error.fmt(f),
            Error::Semaphore(error) => error.fmt(f),
            Error::RateLimit(error) => error.fmt(f),
            Error::Race(error) => error.fmt(f),
            Error::Retry(error) => error.fmt(f),
            Error::Control(error) => error.fmt(f),
            Error::CircuitBreaker(error) => error.fmt(f),
        }
    }
}

impl std::error::Error for Error {
    // The enum is transparent: it displays the inner error, so it forwards the inner
    // error's source instead of repeating the inner error in the chain.
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Timeout(error) => error.source(),
            Error::RunSync(error) => error.source(),
            Error::Eventually(error) => error.source(),
            Error::Bulkhead(error) => error.source(),
            Error::Semaphore(error) => error.source(),
            Error::RateLimit(error) => error.source(),
            Error::Race(error) => error.source(),
            Error::Retry(error) => error.source(),
            Error::Control(error) => error.source(),
            Error::CircuitBreaker(error) => error.source(),
        }
    }
}

macro_rules! from_error {
    ($($variant:ident($error:ident)),* $(,)?) => {$(
        impl From<$error> for Error {
            fn from(error: $error) -> Self {
                Error::$variant(error)
            }
        }
    )*};
}

from_error!(
    Timeout(TimeoutError),
    RunSync(RunSyncError),
    Eventually(EventuallyError),
    Bulkhead(BulkheadError),
    Semaphore(SemaphoreError),
    RateLimit(RateLimitError),
    Control(ControlError),
    CircuitBreaker(CircuitBreakerError)
);

// The two generic errors convert with their contestants' and attempts' errors boxed.

impl<E> From<RaceError<E>> for Error
where
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    fn from(error: RaceError<E>) -> Self {
        Error::Race(error.map_errors(Into::into))
    }
}

impl<E> From<RetryError<E>> for Error
where
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    fn from(error: RetryError<E>) -> Self {
        Error::Retry(error.map_errors(Into::into))
    }
}
