//! [`Error`]: one enum over every error tollgate returns.

use std::fmt;

use crate::limit::bulkhead::BulkheadFull;
use crate::race::RaceFailed;
use crate::retry::RetryError;
use crate::runtime::AlreadyInRuntime;
use crate::testing::EventuallyFailed;
use crate::time::Elapsed;

/// Any error tollgate returns, for code that wants one error type (`Box<dyn Error>` works
/// too: each variant's error implements `std::error::Error + Send + Sync + 'static`).
///
/// Every specific error converts into it with `?`.
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
    Elapsed(Elapsed),
    /// [`try_run_sync`](crate::try_run_sync) was called inside a running runtime.
    AlreadyInRuntime(AlreadyInRuntime),
    /// [`eventually`](crate::testing::eventually) gave up.
    EventuallyFailed(EventuallyFailed),
    /// A [`Bulkhead`](crate::Bulkhead) or [`KeyedBulkhead`](crate::KeyedBulkhead) refused.
    BulkheadFull(BulkheadFull),
    /// No contestant of a [`race`](crate::race) succeeded; each error is boxed.
    RaceFailed(RaceFailed<Box<dyn std::error::Error + Send + Sync>>),
    /// A [`retry`](crate::retry) gave up; each attempt's error is boxed.
    RetryError(RetryError<Box<dyn std::error::Error + Send + Sync>>),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Elapsed(error) => error.fmt(f),
            Error::AlreadyInRuntime(error) => error.fmt(f),
            Error::EventuallyFailed(error) => error.fmt(f),
            Error::BulkheadFull(error) => error.fmt(f),
            Error::RaceFailed(error) => error.fmt(f),
            Error::RetryError(error) => error.fmt(f),
        }
    }
}

impl std::error::Error for Error {
    // The enum is transparent: it displays the inner error, so it forwards the inner
    // error's source instead of repeating the inner error in the chain.
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Elapsed(error) => error.source(),
            Error::AlreadyInRuntime(error) => error.source(),
            Error::EventuallyFailed(error) => error.source(),
            Error::BulkheadFull(error) => error.source(),
            Error::RaceFailed(error) => error.source(),
            Error::RetryError(error) => error.source(),
        }
    }
}

macro_rules! from_error {
    ($($variant:ident),* $(,)?) => {$(
        impl From<$variant> for Error {
            fn from(error: $variant) -> Self {
                Error::$variant(error)
            }
        }
    )*};
}

from_error!(Elapsed, AlreadyInRuntime, EventuallyFailed, BulkheadFull);
