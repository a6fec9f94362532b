//! [`RateLimitError`]: a start the rate does not allow yet, and when it will.

use std::fmt;
use std::time::{Duration, Instant};

/// A start refused by a [`RateLimiter`](crate::RateLimiter) or
/// [`KeyedRateLimiter`](crate::KeyedRateLimiter) because it came too soon: it says how long
/// until a start is allowed ([`retry_after`](Self::retry_after)) and when that is
/// ([`ready_at`](Self::ready_at)).
///
/// A check at `ready_at` succeeds unless someone else takes that start first (another
/// check, or a waiter of `until_ready`, which reserves its start ahead of time).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Rate, RateLimiter};
///
/// let limiter = RateLimiter::new(Rate::per_second(10));
/// limiter.check()?;
/// let refused = limiter.check().unwrap_err();
/// assert!(refused.retry_after() <= Duration::from_millis(100));
/// assert!(refused.to_string().starts_with("rate limited: next start allowed in "));
/// let as_umbrella: tollgate::Error = refused.into();
/// # let _ = as_umbrella;
/// # Ok::<(), tollgate::RateLimitError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimitError {
    /// When the refused check read the clock; `ready_at` is computed from it on demand, so
    /// a refusal costs no clock arithmetic unless asked.
    checked_at: Instant,
    retry_after: Duration,
}

impl RateLimitError {
    /// A refusal at `now` (the caller's clock) of a start allowed `retry_after` later.
    #[inline]
    pub(crate) fn new(now: Instant, retry_after: Duration) -> Self {
        Self {
            checked_at: now,
            retry_after,
        }
    }

    /// How long after the refused check a start is allowed.
    pub fn retry_after(&self) -> Duration {
        self.retry_after
    }

    /// When a start is allowed, on the clock of the code that checked (tokio's, paused or
    /// not, inside a tokio runtime with the `tokio` feature; the system's elsewhere).
    pub fn ready_at(&self) -> Instant {
        // `checked_add` fails only for waits of centuries: say "never" as late as the
        // clock can.
        self.checked_at
            .checked_add(self.retry_after)
            .unwrap_or_else(|| super::gcra::instant_at(u64::MAX))
    }
}

impl fmt::Display for RateLimitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Whole milliseconds (rounded up, so "in 0ms" never promises a start that is
        // refused) unless the wait is shorter than one.
        let wait = self.retry_after;
        let shown = if wait >= Duration::from_millis(1) {
            Duration::from_millis(
                u64::try_from(wait.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX),
            )
        } else {
            wait
        };
        write!(f, "rate limited: next start allowed in {shown:?}")
    }
}

impl std::error::Error for RateLimitError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_rounds_up_to_whole_milliseconds() {
        let now = Instant::now();
        let shown = |wait| RateLimitError::new(now, wait).to_string();
        assert_eq!(
            shown(Duration::from_micros(36_200)),
            "rate limited: next start allowed in 37ms"
        );
        assert_eq!(
            shown(Duration::from_millis(1_500)),
            "rate limited: next start allowed in 1.5s"
        );
        assert_eq!(
            shown(Duration::from_micros(250)),
            "rate limited: next start allowed in 250µs"
        );
        let error = RateLimitError::new(now, Duration::from_millis(5));
        assert_eq!(error.ready_at(), now + Duration::from_millis(5));
        assert!(RateLimitError::new(now, Duration::MAX).ready_at() > now);
    }
}
