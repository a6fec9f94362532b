//! Runtime-agnostic timers: [`sleep`], [`timeout`] and the [`TimeoutError`] error.
//!
//! Private module: the public paths are `tollgate::{sleep, timeout, TimeoutError}` and
//! `tollgate::futures::{Sleep, Timeout}`. The timer backend (async-io's, or tokio's clock
//! under the `tokio` feature) lives in `runtime/timer.rs`; this file only builds the
//! futures users see on top of it.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::runtime::RtSleep;

pin_project_lite::pin_project! {
    /// Future returned by [`sleep`]: completes once its duration has passed.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::futures::Sleep;
    ///
    /// struct Backoff {
    ///     pause: Sleep,
    /// }
    ///
    /// # futures_lite::future::block_on(async {
    /// let backoff = Backoff { pause: tollgate::sleep(Duration::from_millis(1)) };
    /// backoff.pause.await;
    /// # });
    /// ```
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    pub struct Sleep {
        #[pin]
        timer: RtSleep,
    }
}

impl fmt::Debug for Sleep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sleep").finish_non_exhaustive()
    }
}

impl Future for Sleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.project().timer.poll(cx)
    }
}

/// Waits until `duration` has passed.
///
/// `Duration::ZERO` completes on the first poll; `Duration::MAX` (or any duration the
/// clock cannot represent) never completes and does not panic.
///
/// # Clock
///
/// The timer is chosen when `sleep` is called. By default it is async-io's, which works
/// under any executor (smol, async-std, `futures::executor`, [`run_sync`](crate::run_sync))
/// because async-io drives it from its own reactor thread. With the `tokio` feature, a
/// timer created inside a tokio runtime uses tokio's clock instead, so
/// `tokio::time::pause()` and `#[tokio::test(start_paused = true)]` make it (and every
/// timeout, retry pause and bulkhead wait of tollgate) take no wall time. Without the
/// feature, tokio's paused clock is ignored: the timer waits in real time.
///
/// # Examples
///
/// ```
/// use std::time::{Duration, Instant};
///
/// # futures_lite::future::block_on(async {
/// let start = Instant::now();
/// tollgate::sleep(Duration::from_millis(10)).await;
/// assert!(start.elapsed() >= Duration::from_millis(10));
/// # });
/// ```
///
/// # Panics
///
/// With the `tokio` feature, inside a tokio runtime built without its time driver (no
/// `enable_time()` / `enable_all()`), with tokio's own message ("timers are disabled"):
/// tokio cannot run timers there. Build the runtime with `enable_all()`.
///
/// # Cancel safety
///
/// Dropping the future cancels the timer; nothing else is affected.
#[doc(alias = "delay")]
#[doc(alias = "sleep_for")]
pub fn sleep(duration: Duration) -> Sleep {
    Sleep {
        timer: RtSleep::after(duration),
    }
}

/// The error of [`timeout`]: the time was up before the future completed.
///
/// Converts into `std::io::Error` of kind [`TimedOut`](std::io::ErrorKind::TimedOut), so
/// it can be returned with `?` from functions that return I/O errors, and into the umbrella
/// [`tollgate::Error`](crate::Error).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::{TimeoutError, sleep, timeout};
///
/// # futures_lite::future::block_on(async {
/// let error: TimeoutError = timeout(Duration::from_millis(1), sleep(Duration::from_secs(60)))
///     .await
///     .unwrap_err();
/// assert_eq!(error.timeout(), Duration::from_millis(1));
/// assert_eq!(error.to_string(), "timed out after 1ms");
///
/// let io: std::io::Error = error.into();
/// assert_eq!(io.kind(), std::io::ErrorKind::TimedOut);
/// # });
/// ```
#[doc(alias = "Elapsed")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimeoutError {
    after: Duration,
}

impl TimeoutError {
    pub(crate) fn new(after: Duration) -> Self {
        Self { after }
    }

    /// The time limit that passed: the `duration` given to [`timeout`] (the same word as
    /// [`RaceError::timeout`](crate::RaceError::timeout)).
    pub fn timeout(&self) -> Duration {
        self.after
    }
}

impl fmt::Display for TimeoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "timed out after {:?}", self.after)
    }
}

impl std::error::Error for TimeoutError {}

impl From<TimeoutError> for std::io::Error {
    fn from(error: TimeoutError) -> Self {
        std::io::Error::new(std::io::ErrorKind::TimedOut, error)
    }
}

pin_project_lite::pin_project! {
    /// Future returned by [`timeout`]: the inner future's output, or [`TimeoutError`] once
    /// the time is up.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::futures::{Sleep, Timeout};
    ///
    /// // Named, so it can be stored in a struct.
    /// struct Probe {
    ///     wait: Timeout<Sleep>,
    /// }
    ///
    /// # futures_lite::future::block_on(async {
    /// let probe = Probe {
    ///     wait: tollgate::timeout(Duration::from_millis(1), tollgate::sleep(Duration::from_secs(60))),
    /// };
    /// assert!(probe.wait.await.is_err());
    /// # });
    /// ```
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    pub struct Timeout<F> {
        #[pin]
        future: F,
        #[pin]
        timer: RtSleep,
        after: Duration,
    }
}

impl<F> fmt::Debug for Timeout<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Timeout")
            .field("after", &self.after)
            .finish_non_exhaustive()
    }
}

impl<F: Future> Future for Timeout<F> {
    type Output = Result<F::Output, TimeoutError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        // The inner future goes first: work that is done wins over a time limit that passed
        // while it was finishing, as in tokio.
        if let Poll::Ready(output) = this.future.poll(cx) {
            return Poll::Ready(Ok(output));
        }
        match this.timer.poll(cx) {
            Poll::Ready(()) => {
                crate::events::timed_out("timeout", *this.after);
                Poll::Ready(Err(TimeoutError::new(*this.after)))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

/// Runs `future`, giving up once `duration` has passed since the `Timeout` was created.
///
/// `future` is anything that implements [`IntoFuture`] (a future, a
/// [`retry`](crate::retry), a [`race`](crate::race)). The inner future is polled before the
/// timer on every poll, so a future that is ready wins over a time limit that has passed;
/// with `Duration::ZERO` it gets exactly one poll. `Duration::MAX` never expires. The
/// timer runs on the same clock as [`sleep`] (see there: tokio's paused clock is honoured
/// under the `tokio` feature).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::{sleep, timeout};
///
/// # futures_lite::future::block_on(async {
/// let quick = timeout(Duration::from_secs(5), async { 7 }).await;
/// assert_eq!(quick, Ok(7));
///
/// let slow = timeout(Duration::from_millis(5), sleep(Duration::from_secs(60))).await;
/// assert!(slow.is_err());
/// # });
/// ```
///
/// A [`TimeoutError`] converts into `std::io::Error`, so `?` works in I/O code:
///
/// ```
/// use std::time::Duration;
///
/// async fn read_config() -> std::io::Result<String> {
///     let text = tollgate::timeout(Duration::from_secs(5), async { "limit = 8".to_owned() }).await?;
///     Ok(text)
/// }
/// # assert_eq!(tollgate::run_sync(read_config()).unwrap(), "limit = 8");
/// ```
///
/// # Errors
///
/// [`TimeoutError`] when the time is up first; the inner future is dropped then.
///
/// # Panics
///
/// As [`sleep`]: with the `tokio` feature, inside a tokio runtime built without its time
/// driver.
///
/// # Cancel safety
///
/// `timeout` is as cancel safe as `future`: when the time is up (or the `Timeout`
/// itself is dropped) the inner future is dropped mid-flight. Whatever it had done until
/// its last `.await` stays done.
#[doc(alias = "wait_for")]
#[doc(alias = "with_timeout")]
#[doc(alias = "deadline")]
pub fn timeout<F: IntoFuture>(duration: Duration, future: F) -> Timeout<F::IntoFuture> {
    Timeout {
        future: future.into_future(),
        timer: RtSleep::after(duration),
        after: duration,
    }
}
