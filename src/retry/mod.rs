//! [`retry`]: run an operation again after transient failures, pausing in between, and
//! keep the evidence ([`RetryError`]) when it never succeeds.

use std::collections::hash_map::RandomState;
use std::fmt;
use std::future::{Future, IntoFuture};
use std::hash::BuildHasher;
use std::mem;
use std::ops::Deref;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::runtime::now;
use crate::time::{Sleep, Timeout, sleep, timeout};

/// Default number of attempts (the first try included).
const DEFAULT_ATTEMPTS: u32 = 3;
/// Default first pause of the exponential backoff.
const DEFAULT_INITIAL: Duration = Duration::from_millis(100);
/// Default growth factor of the exponential backoff.
const DEFAULT_FACTOR: f64 = 2.0;
/// Default longest pause of the exponential backoff.
const DEFAULT_MAX: Duration = Duration::from_secs(10);
/// Default jitter of an exponential backoff (a fixed interval has none).
const DEFAULT_JITTER: f64 = 0.5;

/// How long to wait between attempts.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Pause {
    Fixed(Duration),
    Backoff {
        initial: Duration,
        factor: f64,
        max: Duration,
    },
}

/// Everything the builder sets; the future reads it.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Policy {
    attempts: u32,
    per_attempt: Option<Duration>,
    pause: Pause,
    /// `None`: the default for the kind of pause.
    jitter: Option<f64>,
    deadline: Option<Duration>,
}

impl Policy {
    const DEFAULT: Self = Self {
        attempts: DEFAULT_ATTEMPTS,
        per_attempt: None,
        pause: Pause::Backoff {
            initial: DEFAULT_INITIAL,
            factor: DEFAULT_FACTOR,
            max: DEFAULT_MAX,
        },
        jitter: None,
        deadline: None,
    };

    /// The pause after the `failures`-th failed attempt (1-based), before jitter.
    fn base_pause(&self, failures: usize) -> Duration {
        match self.pause {
            Pause::Fixed(pause) => pause,
            Pause::Backoff {
                initial,
                factor,
                max,
            } => {
                if initial.is_zero() {
                    return Duration::ZERO;
                }
                let exponent = i32::try_from(failures.saturating_sub(1)).unwrap_or(i32::MAX);
                // May reach infinity (never NaN: `initial` is positive, `factor` finite).
                let secs = initial.as_secs_f64() * factor.powi(exponent);
                if secs >= max.as_secs_f64() {
                    max
                } else {
                    Duration::from_secs_f64(secs)
                }
            }
        }
    }

    fn jitter(&self) -> f64 {
        self.jitter.unwrap_or(match self.pause {
            Pause::Fixed(_) => 0.0,
            Pause::Backoff { .. } => DEFAULT_JITTER,
        })
    }

    /// The pause after the `failures`-th failed attempt, jitter applied.
    fn pause(&self, failures: usize, rng: &mut Option<Rng>) -> Duration {
        let base = self.base_pause(failures);
        let jitter = self.jitter();
        if jitter == 0.0 || base.is_zero() {
            return base;
        }
        let draw = rng.get_or_insert_with(Rng::new).next_f64();
        // A factor in (0, 1]: the pause only ever shrinks, so `max` stays a true bound.
        base.mul_f64(1.0 - jitter * draw)
    }
}

/// A tiny PRNG for jitter (splitmix64), seeded from std's per-process random hash keys.
///
/// Jitter only needs retries of different callers not to line up; it needs no quality a
/// dependency would bring.
#[derive(Clone, Debug)]
struct Rng(u64);

impl Rng {
    fn new() -> Self {
        // Each `RandomState` has fresh keys (random per thread, then incremented).
        Self(RandomState::new().hash_one(now()))
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Retries an operation: `make_attempt` is called for each attempt and its future awaited,
/// until one returns `Ok`, an error is not retryable, or the attempts run out.
///
/// `retry` returns a builder; `.await` it (it implements [`IntoFuture`]). The defaults are
/// ones you can live with:
///
/// | setting | default | change with |
/// | --- | --- | --- |
/// | attempts | 3 in total (the first try and 2 retries) | [`.attempts(n)`](Retry::attempts) |
/// | pause after failure k | exponential backoff: 100 ms × 2^(k−1), at most 10 s (100 ms, 200 ms, 400 ms, …) | [`.backoff(initial, factor, max)`](Retry::backoff), [`.interval(d)`](Retry::interval) |
/// | jitter | 0.5 for a backoff: each pause is cut by a random 0–50 % (50–100 ms, then 100–200 ms, …); 0 for an interval | [`.jitter(fraction)`](Retry::jitter) |
/// | timeout per attempt | none | [`.timeout(d)`](Retry::timeout) |
/// | deadline for the whole retry | none | [`.deadline(d)`](Retry::deadline) |
/// | which errors are retried | all of them | [`.when(predicate)`](Retry::when) |
///
/// Timers and durations use [`tollgate::time`](crate::time)'s clock, so under the `tokio`
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
///     .timeout(Duration::from_secs(2))
///     .interval(Duration::from_millis(1))
///     .await
///     .unwrap();
/// assert_eq!(page, "<html>");
/// assert_eq!(calls.load(Ordering::SeqCst), 3);
/// # });
/// ```
///
/// The article's `TooManyRetries(url)`, with the evidence attached:
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
/// assert_eq!(failed.len(), 3);
/// assert!(failed.iter().all(|attempt| attempt.error() == Some(&"503")));
/// # });
/// ```
///
/// # Errors
///
/// [`RetryError`], keeping every attempt's outcome (its error, or that it timed out) and
/// how long it took, when the attempts run out, an error is not retryable, or the deadline
/// passes.
///
/// # Cancel safety
///
/// Dropping the future stops everything at once: the running attempt is dropped
/// mid-flight, or the pause ends and no further attempt starts.
#[doc(alias = "backoff")]
#[doc(alias = "retry_if")]
pub fn retry<F, Fut, T, E>(make_attempt: F) -> Retry<F, fn(&E) -> bool>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    Retry {
        make_attempt,
        retryable: |_| true,
        policy: Policy::DEFAULT,
    }
}

/// Builder returned by [`retry`]: set the policy, then `.await` it.
///
/// `F` makes one attempt's future; `P` decides which errors are retryable.
#[derive(Clone)]
#[must_use = "a retry does nothing unless you `.await` it"]
pub struct Retry<F, P> {
    make_attempt: F,
    retryable: P,
    policy: Policy,
}

impl<F, P> fmt::Debug for Retry<F, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Retry")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl<F, P> Retry<F, P> {
    /// Makes at most `attempts` attempts in total, the first try included (default 3).
    /// `1` means no retry.
    ///
    /// # Panics
    ///
    /// Panics if `attempts` is 0: a retry that never tries anything has no result to give.
    #[track_caller]
    pub fn attempts(mut self, attempts: u32) -> Self {
        assert!(
            attempts > 0,
            "retry needs at least 1 attempt, got .attempts(0)"
        );
        self.policy.attempts = attempts;
        self
    }

    /// Gives each attempt at most `duration`; an attempt that takes longer is dropped and
    /// counts as a failed attempt (it is always retryable: [`.when`](Self::when) sees errors
    /// only).
    ///
    /// `Duration::ZERO` gives each attempt exactly one poll; by default there is no limit.
    pub fn timeout(mut self, duration: Duration) -> Self {
        self.policy.per_attempt = Some(duration);
        self
    }

    /// Pauses a fixed `interval` between attempts, with no jitter unless
    /// [`.jitter`](Self::jitter) adds some. Replaces the default backoff.
    pub fn interval(mut self, interval: Duration) -> Self {
        self.policy.pause = Pause::Fixed(interval);
        self
    }

    /// Pauses with exponential backoff: `initial` after the first failure, then multiplied
    /// by `factor` after each further failure, never more than `max`.
    ///
    /// The default is `backoff(100 ms, 2.0, 10 s)`. The backoff's jitter is 0.5 unless
    /// [`.jitter`](Self::jitter) says otherwise. An `initial` above `max` pauses `max`.
    ///
    /// # Panics
    ///
    /// Panics if `factor` is below 1 or not finite.
    #[track_caller]
    pub fn backoff(mut self, initial: Duration, factor: f64, max: Duration) -> Self {
        assert!(
            factor.is_finite() && factor >= 1.0,
            "retry backoff factor must be finite and at least 1, got {factor}"
        );
        self.policy.pause = Pause::Backoff {
            initial,
            factor,
            max,
        };
        self
    }

    /// Randomises each pause: it is cut by a random share of up to `fraction`, drawn
    /// uniformly. A pause `p` becomes a pause in `[p × (1 − fraction), p]`.
    ///
    /// `0.0` turns jitter off; `1.0` is "full jitter" (anywhere from 0 to `p`). The pause
    /// never grows, so a backoff's `max` stays the longest pause. Jitter keeps many callers
    /// that failed together from retrying in lockstep. Defaults: 0.5 for a backoff, 0 for
    /// an [`interval`](Self::interval); set here, it applies to either.
    ///
    /// # Panics
    ///
    /// Panics if `fraction` is not within `0.0..=1.0`.
    #[track_caller]
    pub fn jitter(mut self, fraction: f64) -> Self {
        assert!(
            (0.0..=1.0).contains(&fraction),
            "retry jitter must be within 0.0..=1.0, got {fraction}"
        );
        self.policy.jitter = Some(fraction);
        self
    }

    /// Gives up once `duration` has passed since the retry was first polled, counting
    /// attempts and pauses.
    ///
    /// An attempt still running at the deadline is dropped and recorded as timed out. A
    /// pause that would end at or after the deadline is not taken: the retry gives up at
    /// once instead of sleeping for nothing.
    pub fn deadline(mut self, duration: Duration) -> Self {
        self.policy.deadline = Some(duration);
        self
    }
}

impl<F, Fut, T, E, P> Retry<F, P>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
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
    /// assert_eq!(failed.len(), 1); // no second attempt
    /// # });
    /// ```
    pub fn when<Q>(self, retryable: Q) -> Retry<F, Q>
    where
        Q: FnMut(&E) -> bool,
    {
        Retry {
            make_attempt: self.make_attempt,
            retryable,
            policy: self.policy,
        }
    }
}

impl<F, Fut, T, E, P> IntoFuture for Retry<F, P>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    P: FnMut(&E) -> bool,
{
    type Output = Result<T, RetryError<E>>;
    type IntoFuture = RetryFuture<F, Fut, P, E>;

    fn into_future(self) -> Self::IntoFuture {
        RetryFuture {
            make_attempt: self.make_attempt,
            retryable: self.retryable,
            policy: self.policy,
            step: Step::Start,
            deadline: Deadline::Off,
            deadline_at: None,
            attempt_started: None,
            attempts: Vec::new(),
            rng: None,
        }
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
    /// The timer of [`Retry::deadline`], armed on the first poll.
    #[project = DeadlineProj]
    enum Deadline {
        Off,
        On { #[pin] timer: Sleep },
    }
}

pin_project_lite::pin_project! {
    /// Future of a [`Retry`], returned by its `into_future` (what `.await` calls).
    #[project = RetryFutureProj]
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    pub struct RetryFuture<F, Fut, P, E> {
        make_attempt: F,
        retryable: P,
        policy: Policy,
        #[pin]
        step: Step<Fut>,
        #[pin]
        deadline: Deadline,
        deadline_at: Option<Instant>,
        attempt_started: Option<Instant>,
        attempts: Vec<Attempt<E>>,
        rng: Option<Rng>,
    }
}

impl<F, Fut, P, E> fmt::Debug for RetryFuture<F, Fut, P, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryFuture")
            .field("policy", &self.policy)
            .field("attempts", &self.attempts.len())
            .finish_non_exhaustive()
    }
}

/// What one poll of an attempt gave.
enum Outcome<T, E> {
    Pending,
    Won(T),
    /// `None`: the attempt timed out.
    Failed(Option<E>),
}

impl<F, Fut, T, E, P> Future for RetryFuture<F, Fut, P, E>
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
                    let started = now();
                    if this.attempts.is_empty() {
                        if let Some(limit) = this.policy.deadline {
                            this.deadline.set(Deadline::On {
                                timer: sleep(limit),
                            });
                            *this.deadline_at = started.checked_add(limit);
                        }
                    }
                    *this.attempt_started = Some(started);
                    let attempt = (this.make_attempt)();
                    match this.policy.per_attempt {
                        Some(limit) => this.step.set(Step::Limited {
                            attempt: timeout(limit, attempt),
                        }),
                        None => this.step.set(Step::Running { attempt }),
                    }
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
                    Poll::Ready(Err(_elapsed)) => Outcome::Failed(None),
                },
                StepProj::Pausing { pause } => {
                    if pause.poll(cx).is_pending() {
                        break;
                    }
                    this.step.set(Step::Start);
                    continue;
                }
                StepProj::Done => panic!("`RetryFuture` polled after it completed"),
            };
            let error = match outcome {
                Outcome::Pending => break,
                Outcome::Won(value) => {
                    this.step.set(Step::Done);
                    this.deadline.set(Deadline::Off);
                    return Poll::Ready(Ok(value));
                }
                Outcome::Failed(error) => error,
            };
            // The attempt's future goes before the pause (it may hold a connection or a slot).
            this.step.set(Step::Start);
            let retryable = error.as_ref().is_none_or(|error| (this.retryable)(error));
            let ended = now();
            this.attempts.push(Attempt {
                duration: ended.saturating_duration_since(this.attempt_started.unwrap_or(ended)),
                error,
            });
            let stop = if !retryable {
                Some(Stop::Permanent)
            } else if this.attempts.len() >= this.policy.attempts as usize {
                Some(Stop::Exhausted)
            } else {
                None
            };
            if let Some(stop) = stop {
                return Poll::Ready(Err(finish(&mut this, stop)));
            }
            let pause = this.policy.pause(this.attempts.len(), this.rng);
            if let (Some(at), Some(limit)) = (*this.deadline_at, this.policy.deadline) {
                if ended.checked_add(pause).is_none_or(|resume| resume >= at) {
                    return Poll::Ready(Err(finish(&mut this, Stop::Deadline(limit))));
                }
            }
            if !pause.is_zero() {
                this.step.set(Step::Pausing {
                    pause: sleep(pause),
                });
            }
        }
        // Pending. The deadline goes after the step, so an attempt that just finished wins.
        if let DeadlineProj::On { timer } = this.deadline.as_mut().project() {
            if timer.poll(cx).is_ready() {
                if let StepProj::Running { .. } | StepProj::Limited { .. } =
                    this.step.as_mut().project()
                {
                    let ended = now();
                    this.attempts.push(Attempt {
                        duration: ended
                            .saturating_duration_since(this.attempt_started.unwrap_or(ended)),
                        error: None,
                    });
                }
                let limit = this.policy.deadline.unwrap_or_default();
                return Poll::Ready(Err(finish(&mut this, Stop::Deadline(limit))));
            }
        }
        Poll::Pending
    }
}

/// Ends the retry: drops the attempt or pause and the deadline timer, hands out the record.
fn finish<F, Fut, P, E>(this: &mut RetryFutureProj<'_, F, Fut, P, E>, stop: Stop) -> RetryError<E> {
    this.step.set(Step::Done);
    this.deadline.set(Deadline::Off);
    RetryError {
        attempts: mem::take(this.attempts),
        stop,
    }
}

/// One attempt's outcome in a [`RetryError`]: its error, or that it timed out, and how
/// long it ran.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attempt<E> {
    /// `None`: timed out.
    error: Option<E>,
    duration: Duration,
}

impl<E> Attempt<E> {
    /// The error the attempt returned, or `None` when it timed out.
    pub fn error(&self) -> Option<&E> {
        self.error.as_ref()
    }

    /// Takes the error; `None` when the attempt timed out.
    pub fn into_error(self) -> Option<E> {
        self.error
    }

    /// Whether the attempt was dropped because its [timeout](Retry::timeout) or the
    /// retry's [deadline](Retry::deadline) passed.
    pub fn timed_out(&self) -> bool {
        self.error.is_none()
    }

    /// How long the attempt ran, on [`tollgate::time`](crate::time)'s clock.
    pub fn duration(&self) -> Duration {
        self.duration
    }

    fn map_error<E2>(self, f: impl FnOnce(E) -> E2) -> Attempt<E2> {
        Attempt {
            error: self.error.map(f),
            duration: self.duration,
        }
    }
}

/// Why a retry gave up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    Exhausted,
    Permanent,
    Deadline(Duration),
}

/// The error of [`retry`]: every attempt failed, an error was not retryable, or the
/// deadline passed.
///
/// Keeps every attempt's outcome ([`Attempt`]: the error or that it timed out, and how long
/// it took), in order; it derefs to that list. Its message names the last error, so it
/// needs `E: Display`; it is `Error + Send + Sync + 'static` whenever `E` is
/// `Debug + Display + Send + Sync + 'static`.
///
/// Converts into the umbrella [`tollgate::Error`](crate::Error) when `E` converts into
/// `Box<dyn Error + Send + Sync>` (each error is boxed).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// # futures_lite::future::block_on(async {
/// let hung = || async {
///     tollgate::sleep(Duration::from_secs(60)).await;
///     Ok::<(), std::io::Error>(())
/// };
/// let failed = tollgate::retry(hung)
///     .attempts(2)
///     .timeout(Duration::from_millis(1))
///     .interval(Duration::ZERO)
///     .await
///     .unwrap_err();
/// assert_eq!(failed.len(), 2);
/// assert!(failed.iter().all(|attempt| attempt.timed_out()));
/// assert_eq!(failed.to_string(), "all 2 attempts failed; the last timed out");
/// # });
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryError<E> {
    attempts: Vec<Attempt<E>>,
    stop: Stop,
}

impl<E> RetryError<E> {
    /// Every attempt's outcome, in order.
    pub fn attempts(&self) -> &[Attempt<E>] {
        &self.attempts
    }

    /// Takes the list of attempts.
    pub fn into_attempts(self) -> Vec<Attempt<E>> {
        self.attempts
    }

    /// The last attempt's error, or `None` when it timed out.
    pub fn last_error(&self) -> Option<&E> {
        self.attempts.last().and_then(Attempt::error)
    }

    /// Takes the last attempt's error, or `None` when it timed out.
    pub fn into_last_error(self) -> Option<E> {
        self.attempts
            .into_iter()
            .last()
            .and_then(Attempt::into_error)
    }

    /// Whether the retry stopped early because [`.when`](Retry::when) called the last
    /// error not retryable.
    pub fn is_permanent(&self) -> bool {
        self.stop == Stop::Permanent
    }

    /// Whether the retry stopped because its [deadline](Retry::deadline) passed (or would
    /// have passed during the next pause).
    pub fn deadline_passed(&self) -> bool {
        matches!(self.stop, Stop::Deadline(_))
    }

    /// Applies `f` to every attempt's error, keeping the rest.
    pub fn map_errors<E2>(self, mut f: impl FnMut(E) -> E2) -> RetryError<E2> {
        RetryError {
            attempts: self
                .attempts
                .into_iter()
                .map(|attempt| attempt.map_error(&mut f))
                .collect(),
            stop: self.stop,
        }
    }
}

impl<E> Deref for RetryError<E> {
    type Target = [Attempt<E>];

    fn deref(&self) -> &Self::Target {
        &self.attempts
    }
}

impl<E: fmt::Display> fmt::Display for RetryError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let made = self.attempts.len();
        let last = self.attempts.last().and_then(Attempt::error);
        match self.stop {
            Stop::Exhausted if made == 1 => {
                return match last {
                    Some(error) => write!(f, "the only attempt failed: {error}"),
                    None => f.write_str("the only attempt timed out"),
                };
            }
            Stop::Exhausted => write!(f, "all {made} attempts failed")?,
            Stop::Permanent => {
                return match last {
                    Some(error) => write!(f, "attempt {made} failed and is not retryable: {error}"),
                    None => write!(f, "attempt {made} failed and is not retryable"),
                };
            }
            Stop::Deadline(limit) => {
                let noun = if made == 1 { "attempt" } else { "attempts" };
                write!(f, "retry deadline of {limit:?} passed after {made} {noun}")?;
            }
        }
        match (made, last) {
            (0, _) => Ok(()),
            (_, Some(error)) => write!(f, "; the last: {error}"),
            (_, None) => f.write_str("; the last timed out"),
        }
    }
}

impl<E: fmt::Debug + fmt::Display> std::error::Error for RetryError<E> {}

impl<E> From<RetryError<E>> for crate::Error
where
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    fn from(error: RetryError<E>) -> Self {
        crate::Error::Retry(error.map_errors(Into::into))
    }
}
