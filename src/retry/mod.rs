//! [`retry`]: run an operation again after transient failures, pausing in between, and
//! keep the evidence ([`RetryError`]) when it never succeeds.
//!
//! - `mod.rs`: [`retry`] and [`Retry`], which is both the builder and the future.
//! - `policy.rs`: attempts, pauses (fixed or exponential backoff), jitter, and the setters
//!   both retry policies share.
//! - `map_policy.rs`: [`RetryPolicy`], retries inside a map's scheduler.
//! - `error.rs`: [`RetryError`], [`Attempt`] and the bounded record of attempts.

pub(crate) mod error;
mod map_policy;
mod policy;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures_core::TryFuture;

use self::error::{Record, Stop};
use self::policy::{Policy, Rng, policy_setters};
use crate::events::RetryReason;
use crate::runtime::now;
use crate::time::{Sleep, Timeout, sleep, timeout};

pub use self::error::{Attempt, RetryError};
pub(crate) use self::map_policy::Plan;
pub use self::map_policy::{RetryEvent, RetryPolicy};

/// Retries an operation: `make_attempt` is called for each attempt and its future awaited,
/// until one returns `Ok`, an error is not retryable, or the attempts run out.
///
/// `retry` returns a [`Retry`](crate::futures::Retry): set the policy on it, then `.await`
/// it. It is a future itself, so it can also be returned from a map's function, handed to
/// `tokio::spawn` or joined with other futures. The defaults are ones you can live with:
///
/// | setting | default | change with |
/// | --- | --- | --- |
/// | attempts | 3 in total (the first try and 2 retries) | [`.attempts(n)`](Retry::attempts) |
/// | pause after failure k | exponential backoff: 100 ms × 2^(k−1), at most 10 s (100 ms, 200 ms, 400 ms, …) | [`.backoff(initial, factor, max)`](Retry::backoff), [`.interval(d)`](Retry::interval) |
/// | jitter | 0.5 for a backoff: each pause is cut by a random 0–50 % (50–100 ms, then 100–200 ms, …); 0 for an interval | [`.jitter(fraction)`](Retry::jitter) |
/// | time limit of each attempt | none | [`.attempt_timeout(d)`](Retry::attempt_timeout) |
/// | time limit of the whole retry | none | [`.timeout(d)`](Retry::timeout) |
/// | which errors are retried | all of them | [`.when(predicate)`](Retry::when) |
///
/// Timers and durations use the clock of [`sleep`](crate::sleep), so under the `tokio`
/// feature a test with tokio's paused clock takes no wall time.
///
/// Put `retry` *outside* any limit the operation takes (a semaphore, a bulkhead): then
/// each attempt queues for a slot again and no slot is held during the pause.
///
/// # Examples
///
/// ```
/// use std::sync::atomic::{AtomicU32, Ordering};
/// use std::time::Duration;
/// use tollgate::retry;
///
/// let calls = AtomicU32::new(0);
/// let flaky = || async {
///     match calls.fetch_add(1, Ordering::SeqCst) {
///         0 | 1 => Err("connection reset"),
///         _ => Ok("<html>"),
///     }
/// };
///
/// # futures_lite::future::block_on(async {
/// let page = retry(flaky)
///     .attempts(5)
///     .attempt_timeout(Duration::from_secs(2))
///     .timeout(Duration::from_secs(10))
///     .interval(Duration::from_millis(1))
///     .await
///     .unwrap();
/// assert_eq!(page, "<html>");
/// assert_eq!(calls.load(Ordering::SeqCst), 3);
/// # });
/// ```
///
/// When every attempt fails, the error says so and keeps the evidence (the equivalent of
/// Python's `TooManyRetries`, with each attempt's error attached):
///
/// ```
/// use std::time::Duration;
/// use tollgate::retry;
///
/// # futures_lite::future::block_on(async {
/// let failed = retry(|| async { Err::<(), _>("503") })
///     .interval(Duration::ZERO)
///     .await
///     .unwrap_err();
/// assert_eq!(failed.to_string(), "all 3 attempts failed; the last: 503");
/// assert_eq!(failed.attempts_made(), 3);
/// assert!(failed.attempts().iter().all(|attempt| attempt.error() == Some(&"503")));
/// # });
/// ```
///
/// A retry is a future, so it is the function of a bounded map as it is:
///
/// ```
/// use std::time::Duration;
/// use tollgate::{map_async, retry};
///
/// async fn get(id: u32) -> Result<u32, &'static str> {
///     Ok(id * 10)
/// }
///
/// # futures_lite::future::block_on(async {
/// let pages = map_async(1..=3, 2, |id| retry(move || get(id)).interval(Duration::ZERO)).await;
/// assert_eq!(pages, [Ok(10), Ok(20), Ok(30)]);
/// # });
/// ```
///
/// # Errors
///
/// [`RetryError`], keeping the attempts' outcomes (each error, or that it timed out, and
/// how long it took; see there for which are kept), when the attempts run out, an error is
/// not retryable, or the retry's [`timeout`](Retry::timeout) passes.
///
/// # Cancel safety
///
/// Dropping the future stops everything at once: the running attempt is dropped
/// mid-flight, or the pause ends and no further attempt starts.
#[doc(alias = "backoff")]
#[doc(alias = "retry_if")]
#[doc(alias = "tenacity")]
pub fn retry<F, Fut, T, E>(make_attempt: F) -> Retry<F, Fut, fn(&E) -> bool>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    Retry {
        make_attempt,
        retryable: |_| true,
        policy: Policy::DEFAULT,
        step: Step::Start,
        whole: WholeTimer::Off,
        run: Run::new(),
    }
}

pin_project_lite::pin_project! {
    /// Where the retry is.
    #[project = StepProj]
    enum Step<Fut> {
        /// Next: start an attempt (first poll, or a pause just ended).
        Start,
        /// An attempt without a time limit.
        Running { #[pin] attempt: Fut },
        /// An attempt with a time limit.
        Limited { #[pin] attempt: Timeout<Fut> },
        /// Between two attempts.
        Pausing { #[pin] pause: Sleep },
        /// The output was returned.
        Done,
    }
}

pin_project_lite::pin_project! {
    /// The timer of [`Retry::timeout`], armed on the first poll.
    #[project = WholeTimerProj]
    enum WholeTimer {
        Off,
        On { #[pin] timer: Sleep },
    }
}

/// The bookkeeping of a running retry.
struct Run<E> {
    /// When the whole-retry timeout passes (`None`: no timeout, or beyond the clock).
    ends_at: Option<Instant>,
    attempt_started: Option<Instant>,
    record: Record<E>,
    rng: Option<Rng>,
}

impl<E> Run<E> {
    const fn new() -> Self {
        Self {
            ends_at: None,
            attempt_started: None,
            record: Record::new(),
            rng: None,
        }
    }

    /// Records the attempt that just ended (`None`: timed out).
    fn record(&mut self, error: Option<E>) {
        let ended = now();
        let started = self.attempt_started.take().unwrap_or(ended);
        self.record
            .push(error, ended.saturating_duration_since(started));
    }
}

pin_project_lite::pin_project! {
    /// A retry: the builder [`retry`](crate::retry) returns, and the future that runs it.
    ///
    /// Set the policy with the methods below, then `.await` it (or poll it, spawn it,
    /// return it from a map's function: it is a [`Future`]). Nothing runs before the first
    /// poll; the first attempt starts there.
    ///
    /// `F` makes one attempt's future, a `Fut`; `P` decides which errors are retryable. The
    /// retry is `Send` when `F`, `Fut`, `P` and the attempt's error are. `Fut` is a
    /// [`TryFuture`](https://docs.rs/futures-core/0.3/futures_core/future/trait.TryFuture.html):
    /// any future whose output is a `Result`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::futures::Retry;
    ///
    /// async fn ping() -> Result<(), std::io::Error> {
    ///     Ok(())
    /// }
    ///
    /// // Named, so a policy can be built in one place and used in another.
    /// fn patient<F, Fut>(attempt: F) -> Retry<F, Fut, fn(&std::io::Error) -> bool>
    /// where
    ///     F: FnMut() -> Fut,
    ///     Fut: Future<Output = Result<(), std::io::Error>>,
    /// {
    ///     tollgate::retry(attempt).attempts(5).timeout(Duration::from_secs(30))
    /// }
    ///
    /// # futures_lite::future::block_on(async {
    /// patient(ping).await.unwrap();
    /// # });
    /// ```
    ///
    /// # Panics
    ///
    /// Polling it again after it returned `Ready` panics.
    ///
    /// # Cancel safety
    ///
    /// Dropping it stops everything at once: the running attempt is dropped mid-flight, or
    /// the pause ends and no further attempt starts. The attempts' errors are dropped too;
    /// to keep them when time runs out, bound the retry with [`.timeout`](Self::timeout)
    /// instead of dropping it.
    #[project = RetryProj]
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    pub struct Retry<F, Fut, P>
    where
        Fut: TryFuture,
    {
        make_attempt: F,
        retryable: P,
        policy: Policy,
        #[pin]
        step: Step<Fut>,
        #[pin]
        whole: WholeTimer,
        run: Run<Fut::Error>,
    }
}

impl<F, Fut: TryFuture, P> fmt::Debug for Retry<F, Fut, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Retry")
            .field("policy", &self.policy)
            .field("attempts_made", &self.run.record.made())
            .finish_non_exhaustive()
    }
}

impl<F, Fut: TryFuture, P> Retry<F, Fut, P> {
    policy_setters!(
        new: "tollgate::retry(|| async { Err::<(), _>(\"503\") })",
        end: "assert!(futures_lite::future::block_on(retried).is_err());",
        zero: "`Duration::ZERO` starts the next attempt at once, yet the retry still yields to the executor between attempts, so other tasks and timers (a timeout around it) run.",
    );

    /// Gives each attempt at most `duration`; an attempt that takes longer is dropped and
    /// counts as a failed attempt (it is always retryable: [`.when`](Self::when) sees errors
    /// only; [`Attempt::is_timed_out`] tells it apart).
    ///
    /// `Duration::ZERO` gives each attempt exactly one poll; by default there is no limit.
    /// To bound the whole retry, pauses included, use [`.timeout`](Self::timeout).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// # futures_lite::future::block_on(async {
    /// let hung = || async {
    ///     tollgate::sleep(Duration::from_secs(3600)).await;
    ///     Ok::<(), &str>(())
    /// };
    /// let failed = tollgate::retry(hung)
    ///     .attempts(2)
    ///     .attempt_timeout(Duration::from_millis(1))
    ///     .interval(Duration::ZERO)
    ///     .await
    ///     .unwrap_err();
    /// assert!(failed.attempts().iter().all(|attempt| attempt.is_timed_out()));
    /// # });
    /// ```
    pub fn attempt_timeout(mut self, duration: Duration) -> Self {
        self.policy.attempt_timeout = Some(duration);
        self
    }

    /// Bounds the whole retry: gives up once `duration` has passed since its first poll,
    /// attempts and pauses included.
    ///
    /// An attempt still running then is dropped and recorded as timed out. A pause that
    /// would end at or after that point is not taken: the retry gives up at once instead
    /// of sleeping for nothing. Either way the error's [`is_timed_out`](RetryError::is_timed_out)
    /// is true. `Duration::ZERO` gives the first attempt exactly one poll. By default there
    /// is no limit; [`.attempt_timeout`](Self::attempt_timeout) bounds each attempt instead.
    ///
    /// Unlike a [`timeout`](crate::timeout) around the retry, which drops it and returns
    /// only a [`TimeoutError`](crate::TimeoutError), this keeps the attempts' errors.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// # futures_lite::future::block_on(async {
    /// let failed = tollgate::retry(|| async { Err::<(), _>("503") })
    ///     .attempts(100)
    ///     .interval(Duration::from_millis(2))
    ///     .timeout(Duration::from_millis(20))
    ///     .await
    ///     .unwrap_err();
    /// assert!(failed.is_timed_out());
    /// assert!(failed.attempts_made() < 100);
    /// assert_eq!(failed.last_error(), Some(&"503"));
    /// # });
    /// ```
    pub fn timeout(mut self, duration: Duration) -> Self {
        self.policy.timeout = Some(duration);
        self
    }

    /// Retries only errors for which `retryable` returns true; any other error is
    /// returned at once (as a [`RetryError`] whose [`is_permanent`](RetryError::is_permanent)
    /// is true).
    ///
    /// By default every error is retried. Timed-out attempts are always retried.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::io::{Error, ErrorKind};
    /// use std::time::Duration;
    ///
    /// # futures_lite::future::block_on(async {
    /// let failed = tollgate::retry(|| async {
    ///     Err::<(), _>(Error::new(ErrorKind::PermissionDenied, "403"))
    /// })
    /// .attempts(10)
    /// .when(|error| error.kind() != ErrorKind::PermissionDenied)
    /// .await
    /// .unwrap_err();
    /// assert!(failed.is_permanent());
    /// assert_eq!(failed.attempts_made(), 1); // no second attempt
    /// # });
    /// ```
    pub fn when<Q>(self, retryable: Q) -> Retry<F, Fut, Q>
    where
        Q: FnMut(&Fut::Error) -> bool,
    {
        Retry {
            make_attempt: self.make_attempt,
            retryable,
            policy: self.policy,
            step: self.step,
            whole: self.whole,
            run: self.run,
        }
    }
}

/// What one poll of an attempt gave.
enum Outcome<T, E> {
    Pending,
    Won(T),
    /// `None`: the attempt timed out.
    Failed(Option<E>),
}

/// What a failed attempt leads to.
enum AfterFailure<E> {
    /// The retry gives up with this error.
    GiveUp(RetryError<E>),
    /// The next attempt starts on the next poll: the task is woken for it.
    NextPoll,
    /// A pause began.
    Pausing,
}

impl<F, Fut, T, E, P> Future for Retry<F, Fut, P>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    P: FnMut(&E) -> bool,
{
    type Output = Result<T, RetryError<E>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            let outcome = match this.step.as_mut().project() {
                StepProj::Start => {
                    start_attempt(&mut this);
                    continue;
                }
                StepProj::Running { attempt } => match attempt.poll(cx) {
                    Poll::Pending => Outcome::Pending,
                    Poll::Ready(Ok(value)) => Outcome::Won(value),
                    Poll::Ready(Err(error)) => Outcome::Failed(Some(error)),
                },
                StepProj::Limited { attempt } => match attempt.poll(cx) {
                    Poll::Pending => Outcome::Pending,
                    Poll::Ready(Ok(Ok(value))) => Outcome::Won(value),
                    Poll::Ready(Ok(Err(error))) => Outcome::Failed(Some(error)),
                    Poll::Ready(Err(_timed_out)) => Outcome::Failed(None),
                },
                StepProj::Pausing { pause } => {
                    if pause.poll(cx).is_pending() {
                        break;
                    }
                    this.step.set(Step::Start);
                    continue;
                }
                StepProj::Done => panic!("`Retry` polled after it completed"),
            };
            let error = match outcome {
                Outcome::Pending => break,
                Outcome::Won(value) => {
                    this.step.set(Step::Done);
                    this.whole.set(WholeTimer::Off);
                    return Poll::Ready(Ok(value));
                }
                Outcome::Failed(error) => error,
            };
            match after_failure(&mut this, error, cx) {
                AfterFailure::GiveUp(error) => return Poll::Ready(Err(error)),
                AfterFailure::NextPoll => break,
                AfterFailure::Pausing => {}
            }
        }
        poll_whole_timer(&mut this, cx)
    }
}

/// Starts an attempt: makes its future, under its time limit if there is one. On the
/// retry's first poll, the whole-retry timeout starts first.
#[inline]
fn start_attempt<F, Fut, T, E, P>(this: &mut RetryProj<'_, F, Fut, P>)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let started = now();
    if this.run.record.made() == 0 && this.run.attempt_started.is_none() {
        // The first poll: the whole-retry timeout starts now.
        if let Some(limit) = this.policy.timeout {
            this.whole.set(WholeTimer::On {
                timer: sleep(limit),
            });
            this.run.ends_at = started.checked_add(limit);
        }
    }
    this.run.attempt_started = Some(started);
    let attempt = (this.make_attempt)();
    match this.policy.attempt_timeout {
        Some(limit) => this.step.set(Step::Limited {
            attempt: timeout(limit, attempt),
        }),
        None => this.step.set(Step::Running { attempt }),
    }
}

/// After a failed attempt (`error` `None`: it timed out): records it, then gives up (the
/// error is not retryable, the attempts are spent, or the pause would end at or after the
/// whole-retry timeout) or pauses before the next attempt.
#[inline]
fn after_failure<F, Fut, T, E, P>(
    this: &mut RetryProj<'_, F, Fut, P>,
    error: Option<E>,
    cx: &mut Context<'_>,
) -> AfterFailure<E>
where
    Fut: Future<Output = Result<T, E>>,
    P: FnMut(&E) -> bool,
{
    // The attempt's future goes before the pause (it may hold a connection or a slot).
    this.step.set(Step::Start);
    let retryable = error.as_ref().is_none_or(|error| (this.retryable)(error));
    let attempt_timed_out = error.is_none();
    this.run.record(error);
    let made = this.run.record.made();
    let stop = if !retryable {
        Some(Stop::Permanent)
    } else if made >= this.policy.attempts {
        Some(Stop::Exhausted)
    } else {
        None
    };
    if let Some(stop) = stop {
        return AfterFailure::GiveUp(finish(this, stop));
    }
    let pause = this.policy.pause(made, &mut this.run.rng);
    let reason = if attempt_timed_out {
        RetryReason::AttemptTimedOut
    } else {
        RetryReason::Error
    };
    crate::events::retry(made, pause, reason);
    if let (Some(ends_at), Some(limit)) = (this.run.ends_at, this.policy.timeout) {
        if now()
            .checked_add(pause)
            .is_none_or(|resume| resume >= ends_at)
        {
            return AfterFailure::GiveUp(finish(this, Stop::TimedOut(limit)));
        }
    }
    if pause.is_zero() {
        // Start the next attempt on the next poll, not in this one: a run of attempts
        // that fail at once must not keep the executor (and a timeout around the retry)
        // waiting until every attempt is spent.
        cx.waker().wake_by_ref();
        return AfterFailure::NextPoll;
    }
    this.step.set(Step::Pausing {
        pause: sleep(pause),
    });
    AfterFailure::Pausing
}

/// The end of a poll that is pending on the step: checks the whole-retry timer. It goes
/// after the step, so an attempt that just finished wins; an attempt still running when
/// it fires is recorded as timed out.
#[inline]
fn poll_whole_timer<F, Fut, T, P>(
    this: &mut RetryProj<'_, F, Fut, P>,
    cx: &mut Context<'_>,
) -> Poll<Result<T, RetryError<Fut::Error>>>
where
    Fut: TryFuture,
{
    if let WholeTimerProj::On { timer } = this.whole.as_mut().project() {
        if timer.poll(cx).is_ready() {
            if let StepProj::Running { .. } | StepProj::Limited { .. } =
                this.step.as_mut().project()
            {
                this.run.record(None);
            }
            let limit = this.policy.timeout.unwrap_or_default();
            return Poll::Ready(Err(finish(this, Stop::TimedOut(limit))));
        }
    }
    Poll::Pending
}

/// Ends the retry: drops the attempt or pause and the whole-retry timer, hands out the
/// record.
fn finish<F, Fut: TryFuture, P>(
    this: &mut RetryProj<'_, F, Fut, P>,
    stop: Stop,
) -> RetryError<Fut::Error> {
    if let Stop::TimedOut(limit) = stop {
        crate::events::timed_out("retry", limit);
    }
    this.step.set(Step::Done);
    this.whole.set(WholeTimer::Off);
    this.run.record.finish(stop)
}
