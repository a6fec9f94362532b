//! [`CircuitBreakerError`]: an attempt a circuit breaker refused, and when the next probe may go.

use std::fmt;
use std::time::Duration;

use super::core::Refusal;

/// An attempt refused by a [`CircuitBreaker`](crate::CircuitBreaker) or a
/// [`KeyedCircuitBreaker`](crate::KeyedCircuitBreaker): the breaker is open, or half-open
/// with all its probes out. It names the key (rendered with `Debug`) when there is one, and
/// says when the next probe may go ([`retry_after`](Self::retry_after)).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Breaker, KeyedCircuitBreaker, Outcome};
///
/// let hosts = KeyedCircuitBreaker::<String>::new(
///     Breaker::new().min_attempts(1).open_for(Duration::from_secs(30)),
/// );
/// hosts.try_acquire("down.example")?.report(Outcome::failure());
/// let refused = hosts.try_acquire("down.example").unwrap_err();
/// assert_eq!(refused.key(), Some("\"down.example\""));
/// assert!(refused.retry_after() <= Duration::from_secs(30));
/// assert!(refused.to_string().starts_with("circuit open for key \"down.example\": next probe in "));
/// let as_umbrella: tollgate::Error = refused.into();
/// # let _ = as_umbrella;
/// # Ok::<(), tollgate::CircuitBreakerError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CircuitBreakerError {
    /// The key, rendered with `Debug`.
    key: Option<Box<str>>,
    /// Nanoseconds until the next probe may go; `None`: half-open, its probes out.
    retry_after: Option<u64>,
}

impl CircuitBreakerError {
    /// The refusal `refusal` read at `now`, for `key` (rendered) if any. The wait is at most
    /// the open period: a `now` read before the breaker opened (a caller that waited for
    /// its lock) would otherwise add its lag to it.
    pub(crate) fn new(refusal: Refusal, now: u64, key: Option<&dyn fmt::Debug>) -> Self {
        Self {
            key: key.map(|key| format!("{key:?}").into_boxed_str()),
            retry_after: match refusal {
                Refusal::Open { until, period } => Some(until.saturating_sub(now).min(period)),
                Refusal::ProbesOut => None,
            },
        }
    }

    /// How long until the next probe may go, as of the refusal: at most the open period
    /// in force. Zero when the breaker is half-open and its
    /// probes are all out: the next may go as soon as one of them ends (which no clock can
    /// tell; `acquire` waits for it).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Breaker, CircuitBreaker, Outcome};
    ///
    /// let breaker = CircuitBreaker::new(Breaker::new().min_attempts(1));
    /// breaker.try_acquire()?.report(Outcome::overload());
    /// let refused = breaker.try_acquire().unwrap_err();
    /// assert!(refused.retry_after() > Duration::from_secs(29)); // open for 30 s
    /// # Ok::<(), tollgate::CircuitBreakerError>(())
    /// ```
    pub fn retry_after(&self) -> Duration {
        Duration::from_nanos(self.retry_after.unwrap_or(0))
    }

    /// The key whose breaker refused, as `format!("{key:?}")` renders it (a `String` key
    /// shows in quotes); `None` for a [`CircuitBreaker`](crate::CircuitBreaker).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Breaker, KeyedCircuitBreaker, Outcome};
    ///
    /// let ports = KeyedCircuitBreaker::<u16>::new(Breaker::new().min_attempts(1));
    /// ports.try_acquire(&8080)?.report(Outcome::failure());
    /// assert_eq!(ports.try_acquire(&8080).unwrap_err().key(), Some("8080"));
    /// # Ok::<(), tollgate::CircuitBreakerError>(())
    /// ```
    pub fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }
}

impl fmt::Display for CircuitBreakerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = if self.retry_after.is_some() {
            "open"
        } else {
            "half-open"
        };
        write!(f, "circuit {state}")?;
        if let Some(key) = &self.key {
            write!(f, " for key {key}")?;
        }
        match self.retry_after {
            Some(nanos) => write!(f, ": next probe in {:?}", shown(nanos)),
            None => write!(f, ": its probes are out, the next goes when one ends"),
        }
    }
}

impl std::error::Error for CircuitBreakerError {}

/// Whole milliseconds, rounded up (so "in 0ms" never promises a probe that is refused),
/// unless the wait is shorter than one.
fn shown(nanos: u64) -> Duration {
    if nanos >= 1_000_000 {
        Duration::from_millis(nanos.div_ceil(1_000_000))
    } else {
        Duration::from_nanos(nanos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_the_key_and_the_wait() {
        let open = Refusal::Open {
            until: 1_500_000_000,
            period: 30_000_000_000,
        };
        let keyed = CircuitBreakerError::new(open, 0, Some(&"a.example"));
        assert_eq!(
            keyed.to_string(),
            "circuit open for key \"a.example\": next probe in 1.5s"
        );
        assert_eq!(keyed.retry_after(), Duration::from_millis(1500));
        let single = CircuitBreakerError::new(
            Refusal::Open {
                until: 36_200_000,
                period: 30_000_000_000,
            },
            0,
            None,
        );
        assert_eq!(single.to_string(), "circuit open: next probe in 37ms");
        assert_eq!(single.key(), None);
        let busy = CircuitBreakerError::new(Refusal::ProbesOut, 5, Some(&7));
        assert_eq!(
            busy.to_string(),
            "circuit half-open for key 7: its probes are out, the next goes when one ends"
        );
        assert_eq!(busy.retry_after(), Duration::ZERO);
    }
}
