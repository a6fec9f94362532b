//! [`RateLimitError`]: a start the rate does not allow yet, and when it will.

use std::fmt;
use std::num::NonZeroU64;
use std::time::{Duration, Instant};

use super::gcra::instant_at;

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
    /// When the refused check read the clock, in nanoseconds since the rates' origin; the
    /// `Duration` and the `Instant` are made on demand, so a refusal costs no clock
    /// arithmetic unless asked.
    checked_at: u64,
    /// Nanoseconds from then until a start is allowed (never zero: a refusal waits).
    wait: NonZeroU64,
}

impl RateLimitError {
    /// A refusal at `now` of a start allowed at `allowed_at` (after `now`), both in
    /// nanoseconds since the origin on the caller's clock.
    #[inline]
    pub(crate) fn new(now: u64, allowed_at: u64) -> Self {
        Self {
            checked_at: now,
            wait: NonZeroU64::new(allowed_at.saturating_sub(now)).unwrap_or(NonZeroU64::MIN),
        }
    }

    /// How long after the refused check a start is allowed.
    pub fn retry_after(&self) -> Duration {
        Duration::from_nanos(self.wait.get())
    }

    /// When a start is allowed, on the clock of the code that checked (tokio's, paused or
    /// not, inside a tokio runtime with the `tokio` feature; the system's elsewhere).
    pub fn ready_at(&self) -> Instant {
        // `checked_add` fails only for waits of centuries: say "never" as late as the
        // clock can.
        instant_at(self.checked_at)
            .checked_add(self.retry_after())
            .unwrap_or_else(|| instant_at(u64::MAX))
    }
}

impl fmt::Display for RateLimitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Whole milliseconds (rounded up, so "in 0ms" never promises a start that is
        // refused) unless the wait is shorter than one.
        let wait = self.retry_after();
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
    use crate::runtime::nanos_since_origin;

    #[test]
    fn display_rounds_up_to_whole_milliseconds() {
        let now = nanos_since_origin(Instant::now());
        let shown = |wait: u64| RateLimitError::new(now, now + wait).to_string();
        assert_eq!(
            shown(36_200_000),
            "rate limited: next start allowed in 37ms"
        );
        assert_eq!(
            shown(1_500_000_000),
            "rate limited: next start allowed in 1.5s"
        );
        assert_eq!(shown(250_000), "rate limited: next start allowed in 250µs");
        let error = RateLimitError::new(now, now + 5_000_000);
        assert_eq!(error.retry_after(), Duration::from_millis(5));
        assert_eq!(error.ready_at(), instant_at(now) + Duration::from_millis(5));
        assert!(RateLimitError::new(now, u64::MAX).ready_at() > instant_at(now));
        // A refusal fits in two words, and its `Result` too (returned in registers).
        assert_eq!(std::mem::size_of::<Result<(), RateLimitError>>(), 16);
    }
}
