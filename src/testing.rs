//! Helpers for testing code that works in the background.
//!
//! [`eventually`] waits for a condition without sleeping a fixed, hopeful amount of time:
//! it polls the check until it passes, and when it never does, reports why it last failed.

use std::fmt;
use std::time::Duration;

use crate::runtime::now;
use crate::time::sleep;

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
