//! Helpers for testing code that works in the background or depends on time.
//!
//! [`eventually`] waits for a condition without sleeping a fixed, hopeful amount of time:
//! it polls the check until it passes, and when it never does, reports why it last failed.
//!
//! [`run_virtual`] (feature `test-util`) runs a future on virtual time: every tollgate timer,
//! rate, pause, breaker and latency follows a clock that stands still while the future runs
//! and jumps to the next deadline when nothing else can happen, so a test of time-dependent
//! behaviour gives the same verdict on a busy machine as on a quiet one, and takes no wall
//! time to wait. [`now`] reads the clock tollgate's timers are on, virtual or not. Under
//! tokio, the same holds in a current-thread runtime with a paused clock
//! (`#[tokio::test(start_paused = true)]`) with the `tokio` feature.

use std::fmt;
use std::time::Duration;

use std::time::Instant;

use crate::time::sleep;

/// Now, on the clock tollgate's timers use on this thread: the virtual clock inside
/// [`run_virtual`] (feature `test-util`), tokio's clock inside a tokio runtime with the
/// `tokio` feature (paused or not), the system's monotonic clock elsewhere.
///
/// Measure the time a test's work took with it, so the figure follows the clock the work
/// waited on.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::{run_sync, sleep, testing};
///
/// run_sync(async {
///     let start = testing::now();
///     sleep(Duration::from_millis(5)).await;
///     assert!(testing::now() - start >= Duration::from_millis(5));
/// });
/// ```
pub fn now() -> Instant {
    crate::runtime::now()
}

/// Runs `future` to completion on the calling thread on **virtual time**, and returns its
/// output (feature `test-util`, for tests).
///
/// Inside it, every tollgate timer made on this thread ([`sleep`], [`timeout`](crate::timeout),
/// retry pauses, rates, a map's key pauses, breakers' open periods, bulkheads' wait
/// timeouts, hedges) and every reading of tollgate's clock ([`now`], the latencies an
/// adaptive map learns) follow a virtual clock. It starts at the real time of the call and
/// stands still while the future runs; when the future is pending and nothing woke it, the
/// clock jumps to the earliest deadline of a timer and wakes every timer due then. So:
///
/// - a test's verdict does not depend on the machine's speed: between two jumps no time
///   passes, however long a poll takes, and timers fire exactly at their deadlines;
/// - waiting takes no wall time: a crawl that waits an hour of rate limits runs in the time
///   its polls take;
/// - a future that waits forever on nothing fails fast under a [`timeout`](crate::timeout):
///   with nothing else to do, the clock jumps to the timeout's deadline.
///
/// It drives the future as [`run_sync`](crate::run_sync) does (on this thread, `Send` or
/// not), and keeps its clock in a thread-local, so tests running in parallel each have their
/// own. Only what runs on this thread follows the clock: a thread the test starts runs on the
/// system's clock, and a wake from it is seen before the next jump only if it comes before the
/// driver runs out of things to do (keep the work of a virtual-time test inside its future).
/// tokio's equivalent is a current-thread runtime with a paused clock; under tokio, tollgate
/// follows that clock (with the `tokio` feature) and this function is not needed.
///
/// # Examples
///
/// An hour of pauses, checked to the nanosecond, in no time:
///
/// ```
/// use std::time::Duration;
/// use tollgate::{sleep, testing};
///
/// let took = testing::run_virtual(async {
///     let start = testing::now();
///     for _ in 0..3_600 {
///         sleep(Duration::from_secs(1)).await;
///     }
///     testing::now() - start
/// });
/// assert_eq!(took, Duration::from_secs(3_600));
/// ```
///
/// # Panics
///
/// When called inside another `run_virtual` call on the same thread (`.await` the future
/// instead); when the future keeps waking itself while the clock stands still, ten million
/// times in a row or for 30 s of wall time, whichever comes first (a busy wait, which would
/// otherwise spin forever: a clock that moves only when nothing can happen never moves under
/// it); and when the future panics (the panic goes on, the clock is taken down).
#[cfg(feature = "test-util")]
#[track_caller]
pub fn run_virtual<F: std::future::Future>(future: F) -> F::Output {
    crate::runtime::run_virtual(future)
}

/// The outcome of one check run by [`eventually`].
///
/// Implemented for `bool` (false = not yet) and for `Result<(), E>` where the error says
/// what is not there yet.
///
/// # Examples
///
/// ```
/// use tollgate::testing::Check;
///
/// assert_eq!(true.outcome(), Ok(()));
/// assert_eq!(false.outcome(), Err("check returned false".to_owned()));
/// assert_eq!(Err::<(), _>("2 of 3 jobs done").outcome(), Err("2 of 3 jobs done".to_owned()));
/// ```
pub trait Check {
    /// `Ok(())` when the condition holds, otherwise a description of why it does not.
    fn outcome(self) -> Result<(), String>;
}

impl Check for bool {
    fn outcome(self) -> Result<(), String> {
        if self {
            Ok(())
        } else {
            Err("check returned false".to_owned())
        }
    }
}

impl<E: fmt::Display> Check for Result<(), E> {
    fn outcome(self) -> Result<(), String> {
        self.map_err(|error| error.to_string())
    }
}

/// The error of [`eventually`]: the check still failed when the time was up.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::testing::eventually;
///
/// # futures_lite::future::block_on(async {
/// let error = eventually(Duration::from_millis(5), || Err::<(), _>("queue still has 3 items"))
///     .await
///     .unwrap_err();
/// assert_eq!(error.last_failure(), "queue still has 3 items");
/// assert!(error.attempts_made() >= 2);
/// # });
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventuallyError {
    waited: Duration,
    attempts: u32,
    last_failure: String,
}

impl EventuallyError {
    /// Why the last check failed.
    pub fn last_failure(&self) -> &str {
        &self.last_failure
    }

    /// How many times the check ran.
    pub fn attempts_made(&self) -> u32 {
        self.attempts
    }
}

impl fmt::Display for EventuallyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "condition still failing after {:?} ({} checks): {}",
            self.waited, self.attempts, self.last_failure
        )
    }
}

impl std::error::Error for EventuallyError {}

/// The first pause between checks; it doubles up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(1);
const MAX_PAUSE: Duration = Duration::from_millis(20);

/// Polls `check` until it passes or `timeout` has passed.
///
/// The check runs at once, then after pauses that grow from 1 ms to 20 ms, and one last
/// time when the timeout is up. Use it to wait for background work in a test instead of sleeping
/// a fixed time and hoping.
///
/// The check returns `bool` or `Result<(), E: Display>`; return an error describing the
/// state you saw so a timeout explains itself. Panics inside the check (`assert!`) are
/// **not** caught: a panic is a bug in the check, not "not yet", and catching it would
/// print a backtrace per attempt. Use `if cond { Ok(()) } else { Err(format!(..)) }`.
///
/// Timers follow the clock of [`sleep`], so under tokio's paused clock (with
/// the `tokio` feature) the waiting takes no wall time.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use std::time::Duration;
/// use tollgate::testing::eventually;
///
/// # futures_lite::future::block_on(async {
/// let done = Arc::new(AtomicUsize::new(0));
/// let worker = done.clone();
/// std::thread::spawn(move || {
///     std::thread::sleep(Duration::from_millis(5));
///     worker.store(3, Ordering::SeqCst);
/// });
///
/// eventually(Duration::from_secs(5), || match done.load(Ordering::SeqCst) {
///     3 => Ok(()),
///     n => Err(format!("{n} of 3 jobs done")),
/// })
/// .await
/// .unwrap();
/// # });
/// ```
///
/// # Errors
///
/// [`EventuallyError`] with the last failure's message when the check never passed.
///
/// # Panics
///
/// When the check panics (the panic is not caught), and as [`sleep`] does:
/// with the `tokio` feature, inside a tokio runtime built without its time driver.
///
/// # Cancel safety
///
/// Dropping the future stops the checks; the check is never interrupted mid-run (it is
/// synchronous).
#[doc(alias = "wait_until")]
#[doc(alias = "assert_eventually")]
pub async fn eventually<C, R>(timeout: Duration, mut check: C) -> Result<(), EventuallyError>
where
    C: FnMut() -> R,
    R: Check,
{
    let start = now();
    let mut pause = FIRST_PAUSE;
    let mut attempts = 0;
    loop {
        attempts += 1;
        let last_failure = match check().outcome() {
            Ok(()) => return Ok(()),
            Err(message) => message,
        };
        let waited = now().saturating_duration_since(start);
        if waited >= timeout {
            return Err(EventuallyError {
                waited,
                attempts,
                last_failure,
            });
        }
        sleep(pause.min(timeout - waited)).await;
        pause = (pause * 2).min(MAX_PAUSE);
    }
}
