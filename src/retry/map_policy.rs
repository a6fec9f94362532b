//! [`RetryPolicy`]: retries inside a bounded map's scheduler, where a failed attempt gives
//! its slots back while it waits (unlike [`retry`](crate::retry) inside the map's function,
//! which holds them through every pause).

use std::fmt;
use std::time::Duration;

use super::policy::{Policy, Rng, policy_setters};
use crate::events::RetryReason;

type Predicate<E> = Box<dyn FnMut(&E) -> bool + Send>;
type Delay<E> = Box<dyn FnMut(&E) -> Option<Duration> + Send>;
type Hook<T, E> = Box<dyn FnMut(&RetryEvent<'_, T, E>) + Send>;

/// How a bounded map retries its items: set with `.retry(policy)` on any map
/// ([`MapAsync::retry`](crate::futures::MapAsync::retry) and its siblings).
///
/// When an attempt fails with an error the policy retries, the item **gives back its
/// global and per-key slots**, goes back to its key's queue with a time before which it
/// may not start, and the freed slots serve other items meanwhile. The map's function is
/// called again with a clone of the item (`T: Clone`). The item's output is the result
/// of its last attempt: `Ok` once one succeeds, else the last error (earlier errors are
/// shown to the [`on_retry`](Self::on_retry) hook).
///
/// `T` is the map's item type and `E` its error type (the function's futures return
/// `Result<_, E>`).
///
/// | setting | default | change with |
/// | --- | --- | --- |
/// | attempts | 3 in total | [`.attempts(n)`](Self::attempts) |
/// | pause after failure k | 100 ms × 2^(k−1), at most 10 s, jitter 0.5 | [`.backoff`](Self::backoff), [`.interval`](Self::interval), [`.jitter`](Self::jitter) |
/// | which errors are retried | all | [`.when(predicate)`](Self::when) |
/// | the server's word on the pause (`Retry-After`) | none | [`.retry_after(f)`](Self::retry_after) |
/// | pausing the whole key (a 429 slows the host) | never | [`.pause_key(f)`](Self::pause_key) |
/// | retry budget per key | none | [`.budget(ratio, floor)`](Self::budget) |
/// | a hook for each retry (logging) | none | [`.on_retry(hook)`](Self::on_retry) |
///
/// A time limit for each attempt goes around the work in the map's function
/// ([`timeout`](crate::timeout)), with the error type covering it, so that `when` and the
/// hook see it.
///
/// # Examples
///
/// ```
/// use std::sync::atomic::{AtomicU32, Ordering};
/// use std::time::Duration;
/// use tollgate::{RetryPolicy, map_async};
///
/// #[derive(Debug)]
/// enum FetchError {
///     /// 429 or 503, maybe with the server's `Retry-After`.
///     Busy(Option<Duration>),
///     NotFound,
/// }
///
/// let calls = AtomicU32::new(0);
/// let fetch = |url: String| {
///     let calls = &calls;
///     async move {
///         if url.ends_with("/missing") {
///             return Err(FetchError::NotFound);
///         }
///         // Every other call is turned away, asking for a 1 ms pause.
///         if calls.fetch_add(1, Ordering::Relaxed) % 2 == 0 {
///             return Err(FetchError::Busy(Some(Duration::from_millis(1))));
///         }
///         Ok(format!("<html>{url}</html>"))
///     }
/// };
/// let policy = RetryPolicy::new()
///     .attempts(5)
///     .when(|error| matches!(error, FetchError::Busy(_)))
///     .retry_after(|error| match error {
///         FetchError::Busy(after) => *after,
///         FetchError::NotFound => None,
///     })
///     .on_retry(|event| eprintln!("retrying {} in {:?}", event.item(), event.pause()));
///
/// # futures_lite::future::block_on(async {
/// let urls = (0..6).map(|i| format!("https://a.example/{i}")).chain(["https://a.example/missing".to_owned()]);
/// let pages = map_async(urls, 4, fetch).retry(policy).await;
/// assert!(pages[..6].iter().all(Result::is_ok));
/// assert!(matches!(pages[6], Err(FetchError::NotFound))); // not retried
/// # });
/// ```
pub struct RetryPolicy<T, E> {
    policy: Policy,
    when: Option<Predicate<E>>,
    retry_after: Option<Delay<E>>,
    pause_key: Option<Delay<E>>,
    on_retry: Option<Hook<T, E>>,
    budget: Option<(f64, u32)>,
    rng: Option<Rng>,
}

impl<T, E> Default for RetryPolicy<T, E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T, E> fmt::Debug for RetryPolicy<T, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryPolicy")
            .field("attempts", &self.policy.attempts)
            .field("pause", &self.policy.pause)
            .field("budget", &self.budget)
            .finish_non_exhaustive()
    }
}

/// What the scheduler does after a failed attempt the policy retries.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Plan {
    /// The item's pause before its next attempt.
    pub(crate) pause: Duration,
    /// A pause for the item's whole key.
    pub(crate) pause_key: Option<Duration>,
    /// The pause is the server's (`retry_after`), not the backoff's.
    pub(crate) server_said: bool,
}

impl<T, E> RetryPolicy<T, E> {
    /// The defaults: 3 attempts, exponential backoff from 100 ms (× 2, at most 10 s,
    /// jitter 0.5), every error retried, no budget.
    ///
    /// # Examples
    ///
    /// ```
    /// let policy = tollgate::RetryPolicy::<String, std::io::Error>::new();
    /// assert_eq!(policy.get_attempts(), 3);
    /// ```
    pub fn new() -> Self {
        Self {
            policy: Policy::DEFAULT,
            when: None,
            retry_after: None,
            pause_key: None,
            on_retry: None,
            budget: None,
            rng: None,
        }
    }

    /// How many attempts an item gets in total (the first included).
    pub fn get_attempts(&self) -> u32 {
        self.policy.attempts
    }

    /// The retry budget per key, `(ratio, floor)`, if one is set.
    pub(crate) fn retry_budget(&self) -> Option<(f64, u32)> {
        self.budget
    }

    policy_setters!(
        new: "tollgate::RetryPolicy::<u32, &str>::new()",
        end: "# let _ = retried;",
        zero: "`Duration::ZERO` lets the item's next attempt start as soon as the map's and its key's limits allow.",
        #[must_use]
    );

    /// Retries only errors for which `retryable` returns true; the others are the item's
    /// output at once.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::io::ErrorKind;
    /// let policy = tollgate::RetryPolicy::<String, std::io::Error>::new()
    ///     .when(|error| error.kind() != ErrorKind::NotFound);
    /// # let _ = policy;
    /// ```
    #[must_use]
    pub fn when(mut self, retryable: impl FnMut(&E) -> bool + Send + 'static) -> Self {
        self.when = Some(Box::new(retryable));
        self
    }

    /// Lets the error set the pause before the item's next attempt: where `after`
    /// returns `Some(d)` (an HTTP `Retry-After`, say), the item waits `d` instead of its
    /// backoff; `None` keeps the backoff.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// struct HttpError { status: u16, retry_after: Option<Duration> }
    ///
    /// let policy = tollgate::RetryPolicy::<String, HttpError>::new()
    ///     .when(|error| matches!(error.status, 429 | 503))
    ///     .retry_after(|error| error.retry_after);
    /// # let _ = policy;
    /// ```
    #[must_use]
    pub fn retry_after(
        mut self,
        after: impl FnMut(&E) -> Option<Duration> + Send + 'static,
    ) -> Self {
        self.retry_after = Some(Box::new(after));
        self
    }

    /// Lets the error pause the item's whole key: where `pause` returns `Some(d)`, no
    /// item of that key starts for `d` (items already running go on), and the failed
    /// item waits at least as long. A `429 Too Many Requests` then slows every request to
    /// the host, not just the one that got it. Called for retried errors only.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// struct HttpError { status: u16, retry_after: Option<Duration> }
    ///
    /// let policy = tollgate::RetryPolicy::<String, HttpError>::new()
    ///     .when(|error| matches!(error.status, 429 | 503))
    ///     .pause_key(|error| {
    ///         (error.status == 429).then(|| error.retry_after.unwrap_or(Duration::from_secs(1)))
    ///     });
    /// # let _ = policy;
    /// ```
    #[must_use]
    pub fn pause_key(mut self, pause: impl FnMut(&E) -> Option<Duration> + Send + 'static) -> Self {
        self.pause_key = Some(Box::new(pause));
        self
    }

    /// Caps the retries of each key at `ratio` × its first attempts, plus `floor`: once a
    /// key has used its budget, its failed items are not retried (their error is their
    /// output), so a failing host cannot turn the run into a retry storm. A budget of
    /// `(0.2, 10)` lets 10 retries through at once and then one retry per 5 first
    /// attempts; a healthy key earns its floor back (never more). By default there is no
    /// budget: every item gets all its attempts.
    ///
    /// # What the budget remembers
    ///
    /// A key's budget is kept while the key has items in the map, and for the next 16,384
    /// items the map pulls after its last attempt ended; a key that comes back later
    /// starts afresh, with its floor. So a key's retries stay within `floor + ratio ×
    /// first attempts`, both counted since the key was last away for that long: a key
    /// that keeps coming back, as any key with enough items to make a storm does, is held
    /// to its budget for the whole run. A key away for longer gets its floor again, at
    /// most once per 16,384 items.
    ///
    /// Why a window of the input: keeping every key that ever retried would grow with the
    /// input (about 400 bytes for each key that retried: 40 MB for a million keys of one
    /// item, 1 in 10 retried), where a map's memory is bounded by its window; carrying forgotten keys' debts in a shared
    /// table would refuse retries to keys that never failed; a window of time would bound
    /// the memory only by the throughput. A window of items keeps the keys of 16,384 items
    /// at most, whatever the input and its speed.
    ///
    /// # Examples
    ///
    /// ```
    /// let policy = tollgate::RetryPolicy::<String, std::io::Error>::new().budget(0.2, 10);
    /// # let _ = policy;
    /// ```
    ///
    /// # Panics
    ///
    /// If `ratio` is negative or not finite.
    #[track_caller]
    #[must_use]
    pub fn budget(mut self, ratio: f64, floor: u32) -> Self {
        assert!(
            ratio.is_finite() && ratio >= 0.0,
            "tollgate: a retry budget's ratio must be finite and not negative, got {ratio}"
        );
        self.budget = Some((ratio, floor));
        self
    }

    /// Calls `hook` before each retry, with the item, the attempt that failed, its error
    /// and the pause chosen: for logging and metrics.
    ///
    /// # Examples
    ///
    /// ```
    /// let policy = tollgate::RetryPolicy::<String, std::io::Error>::new().on_retry(|event| {
    ///     eprintln!(
    ///         "{}: attempt {} failed ({}), next in {:?}",
    ///         event.item(),
    ///         event.attempt_number(),
    ///         event.error(),
    ///         event.pause()
    ///     );
    /// });
    /// # let _ = policy;
    /// ```
    #[must_use]
    pub fn on_retry(mut self, hook: impl FnMut(&RetryEvent<'_, T, E>) + Send + 'static) -> Self {
        self.on_retry = Some(Box::new(hook));
        self
    }

    /// After attempt `attempt` (1-based) of an item failed with `error`: `None` when it
    /// is not retried (not retryable, or its attempts are used up), else the plan.
    pub(crate) fn plan(&mut self, attempt: u32, error: &E) -> Option<Plan> {
        if attempt >= self.policy.attempts || !self.when.as_mut().is_none_or(|when| when(error)) {
            return None;
        }
        let pause_key = self.pause_key.as_mut().and_then(|pause| pause(error));
        let server = self.retry_after.as_mut().and_then(|after| after(error));
        let pause = match server {
            Some(pause) => pause,
            None => self.policy.pause(attempt, &mut self.rng),
        };
        Some(Plan {
            pause: pause.max(pause_key.unwrap_or_default()),
            pause_key,
            server_said: server.is_some(),
        })
    }

    /// Tells the hook about a retry that will happen.
    pub(crate) fn announce(&mut self, item: &T, attempt: u32, error: &E, plan: &Plan) {
        let reason = if plan.server_said {
            RetryReason::RetryAfter
        } else {
            RetryReason::Error
        };
        crate::events::retry(attempt, plan.pause, reason);
        if let Some(hook) = self.on_retry.as_mut() {
            hook(&RetryEvent {
                item,
                attempt_number: attempt,
                error,
                pause: plan.pause,
                key_paused: plan.pause_key,
            });
        }
    }
}

/// What [`RetryPolicy::on_retry`]'s hook sees: an attempt failed and the item will be
/// tried again.
///
/// # Examples
///
/// ```
/// let policy = tollgate::RetryPolicy::<u32, &str>::new().on_retry(|event| {
///     assert!(event.attempt_number() >= 1);
///     println!("item {} failed: {}; again in {:?}", event.item(), event.error(), event.pause());
/// });
/// # let _ = policy;
/// ```
#[derive(Debug)]
pub struct RetryEvent<'a, T, E> {
    item: &'a T,
    attempt_number: u32,
    error: &'a E,
    pause: Duration,
    key_paused: Option<Duration>,
}

impl<T, E> RetryEvent<'_, T, E> {
    /// The item that will be tried again.
    pub fn item(&self) -> &T {
        self.item
    }

    /// Which attempt failed: its attempt number, 1 for the first (as
    /// [`Attempt::number`](crate::Attempt::number) counts).
    pub fn attempt_number(&self) -> u32 {
        self.attempt_number
    }

    /// The error it failed with.
    pub fn error(&self) -> &E {
        self.error
    }

    /// The pause before the next attempt.
    pub fn pause(&self) -> Duration {
        self.pause
    }

    /// How long the item's whole key is paused, if the error paused it.
    pub fn key_paused(&self) -> Option<Duration> {
        self.key_paused
    }
}
