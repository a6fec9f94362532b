//! Runtime-agnostic timers: [`sleep`], [`timeout`] and the [`TimeoutError`] error.
//!
//! By default the timers are async-io's, which work under any executor (smol, async-std,
//! `futures::executor`, [`run_sync`](crate::run_sync)) because async-io drives them from its
//! own reactor. With the `tokio` feature, a timer created inside a tokio runtime uses tokio's
//! clock instead, so `tokio::time::pause()` and `#[tokio::test(start_paused = true)]` make
//! tollgate's timeouts, retries and bulkhead waits take no wall time.
//!
//! A tokio runtime built without its time driver (no `enable_time()` / `enable_all()`)
//! cannot run tokio timers: creating one there panics with tokio's own message
//! ("timers are disabled"). Build the runtime with `enable_all()`.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::runtime::RtSleep;

pin_project_lite::pin_project! {
    /// Future returned by [`sleep`].
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
/// # Cancel safety
///
/// Dropping the future cancels the timer; nothing else is affected.
#[doc(alias = "delay")]
pub fn sleep(duration: Duration) -> Sleep {
    Sleep {
        timer: RtSleep::after(duration),
    }
}

/// The error of [`timeout`]: the deadline passed before the future completed.
///
/// Converts into `std::io::Error` of kind [`TimedOut`](std::io::ErrorKind::TimedOut), so
/// it can be returned with `?` from functions that return I/O errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimeoutError {
    after: Duration,
}

impl TimeoutError {
    pub(crate) fn new(after: Duration) -> Self {
        Self { after }
    }

    /// The timeout that passed.
    pub fn duration(&self) -> Duration {
        self.after
    }
}

impl fmt::Display for TimeoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "deadline of {:?} elapsed", self.after)
    }
}

impl std::error::Error for TimeoutError {}

impl From<TimeoutError> for std::io::Error {
    fn from(elapsed: TimeoutError) -> Self {
        std::io::Error::new(std::io::ErrorKind::TimedOut, elapsed)
    }
}

pin_project_lite::pin_project! {
    /// Future returned by [`timeout`].
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
        // The inner future goes first: work that is done wins over a deadline that passed
        // while it was finishing, as in tokio.
        if let Poll::Ready(output) = this.future.poll(cx) {
            return Poll::Ready(Ok(output));
        }
        match this.timer.poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(TimeoutError::new(*this.after))),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// Runs `future`, giving up once `duration` has passed.
///
/// The inner future is polled before the timer on every poll, so a future that is ready
/// wins over an expired deadline; with `Duration::ZERO` it gets exactly one poll.
/// `Duration::MAX` never expires.
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
/// # Errors
///
/// [`TimeoutError`] when the deadline passes first; the inner future is dropped then.
///
/// # Cancel safety
///
/// `timeout` is as cancel safe as `future`: when the deadline passes (or the `Timeout`
/// itself is dropped) the inner future is dropped mid-flight. Whatever it had done until
/// its last `.await` stays done.
#[doc(alias = "wait_for")]
pub fn timeout<F: IntoFuture>(duration: Duration, future: F) -> Timeout<F::IntoFuture> {
    Timeout {
        future: future.into_future(),
        timer: RtSleep::after(duration),
        after: duration,
    }
}
