//! [`RetryError`] and [`Attempt`]: the evidence a retry that never succeeded hands back,
//! and the [`Record`] that collects it in bounded memory while the retry runs.

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

/// How many of the first attempts a [`RetryError`] keeps.
pub(super) const KEPT_FIRST: usize = 8;
/// How many of the last attempts a [`RetryError`] keeps.
pub(super) const KEPT_LAST: usize = 8;

/// One attempt's outcome in a [`RetryError`]: its error, or that it timed out, how long it
/// ran, and which attempt it was.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// # futures_lite::future::block_on(async {
/// let failed = tollgate::retry(|| async { Err::<(), _>("503") })
///     .attempts(2)
///     .interval(Duration::ZERO)
///     .await
///     .unwrap_err();
/// let second = &failed.attempts()[1];
/// assert_eq!(second.number(), 2);
/// assert_eq!(second.error(), Some(&"503"));
/// assert!(!second.is_timed_out());
/// # });
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attempt<E> {
    /// `None`: timed out.
    error: Option<E>,
    elapsed: Duration,
    number: u32,
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

    /// Whether the attempt was dropped because time ran out: its
    /// [`attempt_timeout`](crate::futures::Retry::attempt_timeout), or the retry's
    /// [`timeout`](crate::futures::Retry::timeout) while it was running.
    pub fn is_timed_out(&self) -> bool {
        self.error.is_none()
    }

    /// How long the attempt ran, on the clock of [`sleep`](crate::sleep)'s timers.
    pub fn elapsed(&self) -> Duration {
        self.elapsed
    }

    /// Which attempt this was, counting from 1 (the first try) over every attempt made,
    /// including those [`RetryError`] did not keep.
    pub fn number(&self) -> u32 {
        self.number
    }

    fn map_error<E2>(self, f: impl FnOnce(E) -> E2) -> Attempt<E2> {
        Attempt {
            error: self.error.map(f),
            elapsed: self.elapsed,
            number: self.number,
        }
    }
}

/// Why a retry gave up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stop {
    Exhausted,
    Permanent,
    /// The whole-retry timeout, with its length.
    TimedOut(Duration),
}

/// The attempts of a running retry, in bounded memory: the first [`KEPT_FIRST`] and a ring
/// of the last [`KEPT_LAST`], plus a count of all.
///
/// Nothing is allocated before the first failure.
#[derive(Debug)]
pub(super) struct Record<E> {
    first: Vec<Attempt<E>>,
    last: VecDeque<Attempt<E>>,
    made: u32,
}

impl<E> Record<E> {
    pub(super) const fn new() -> Self {
        Self {
            first: Vec::new(),
            last: VecDeque::new(),
            made: 0,
        }
    }

    /// How many attempts ended so far.
    pub(super) fn made(&self) -> u32 {
        self.made
    }

    /// Records a failed (`Some`) or timed-out (`None`) attempt.
    pub(super) fn push(&mut self, error: Option<E>, elapsed: Duration) {
        // At most `u32::MAX` attempts are ever made, so this cannot saturate in practice.
        self.made = self.made.saturating_add(1);
        let attempt = Attempt {
            error,
            elapsed,
            number: self.made,
        };
        if self.first.len() < KEPT_FIRST {
            self.first.push(attempt);
            return;
        }
        if self.last.len() == KEPT_LAST {
            // The oldest of the last ones falls into the gap: dropped, only counted.
            self.last.pop_front();
        }
        self.last.push_back(attempt);
    }

    /// Hands the record out as the error; the record is empty afterwards.
    pub(super) fn finish(&mut self, stop: Stop) -> RetryError<E> {
        let mut attempts = std::mem::take(&mut self.first);
        attempts.extend(self.last.drain(..));
        RetryError {
            attempts,
            made: std::mem::take(&mut self.made),
            stop,
        }
    }
}

/// The error of [`retry`](crate::retry): every attempt failed, an error was not retryable,
/// or the retry's [`timeout`](crate::futures::Retry::timeout) passed.
///
/// It keeps the outcome of each attempt ([`Attempt`]: the error or that it timed out, how
/// long it ran, its number), in order, in bounded memory: **the first 8 and the last 8
/// attempts**, and counts the rest. A retry of up to 16 attempts keeps every one; a retry
/// that made a million keeps 16 and says how many it made
/// ([`attempts_made`](Self::attempts_made)) and how many it dropped from the middle
/// ([`attempts_dropped`](Self::attempts_dropped)). The first attempts usually show the
/// cause, the last ones the state when the retry gave up; the ones in between repeat them.
///
/// Its message names the last error, so it needs `E: Display`; it is
/// `Error + Send + Sync + 'static` whenever `E` is `Debug + Display + Send + Sync + 'static`.
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
///     .attempt_timeout(Duration::from_millis(1))
///     .interval(Duration::ZERO)
///     .await
///     .unwrap_err();
/// assert_eq!(failed.attempts().len(), 2);
/// assert!(failed.attempts().iter().all(|attempt| attempt.is_timed_out()));
/// assert!(!failed.is_timed_out()); // each attempt did, the retry as a whole did not
/// assert_eq!(failed.to_string(), "all 2 attempts failed; the last timed out");
/// # });
/// ```
///
/// A long retry keeps the first 8 and the last 8 attempts:
///
/// ```
/// use std::time::Duration;
///
/// # futures_lite::future::block_on(async {
/// let failed = tollgate::retry(|| async { Err::<(), _>("503") })
///     .attempts(1000)
///     .interval(Duration::ZERO)
///     .await
///     .unwrap_err();
/// assert_eq!(failed.attempts_made(), 1000);
/// assert_eq!(failed.attempts().len(), 16);
/// assert_eq!(failed.attempts_dropped(), 984);
/// let numbers: Vec<u32> = failed.attempts().iter().map(|attempt| attempt.number()).collect();
/// assert_eq!(numbers[..9], [1, 2, 3, 4, 5, 6, 7, 8, 993]);
/// assert_eq!(failed.to_string(), "all 1000 attempts failed; the last: 503");
/// # });
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryError<E> {
    /// The first `KEPT_FIRST` and last `KEPT_LAST` attempts, in order.
    attempts: Vec<Attempt<E>>,
    made: u32,
    stop: Stop,
}

impl<E> RetryError<E> {
    /// The attempts kept, in order: every attempt when there were at most 16, otherwise the
    /// first 8 and the last 8. [`Attempt::number`] tells where each one stood.
    pub fn attempts(&self) -> &[Attempt<E>] {
        &self.attempts
    }

    /// Takes the attempts kept (see [`attempts`](Self::attempts)).
    pub fn into_attempts(self) -> Vec<Attempt<E>> {
        self.attempts
    }

    /// How many attempts were made in all, kept or not.
    pub fn attempts_made(&self) -> u32 {
        self.made
    }

    /// How many attempts were made but not kept: those between the first 8 and the last 8.
    pub fn attempts_dropped(&self) -> u32 {
        // `attempts` holds at most 16, so the cast is exact.
        self.made - self.attempts.len() as u32
    }

    /// The last attempt's error, or `None` when it timed out. The last attempt is always
    /// kept.
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

    /// Whether the retry stopped early because [`.when`](crate::futures::Retry::when)
    /// called the last error not retryable.
    pub fn is_permanent(&self) -> bool {
        self.stop == Stop::Permanent
    }

    /// Whether the retry's [`timeout`](crate::futures::Retry::timeout) ended it: it passed,
    /// or would have passed during the next pause.
    ///
    /// Attempts that hit their own [`attempt_timeout`](crate::futures::Retry::attempt_timeout)
    /// do not count here; see [`Attempt::is_timed_out`].
    pub fn is_timed_out(&self) -> bool {
        matches!(self.stop, Stop::TimedOut(_))
    }

    /// Applies `f` to the error of every attempt kept; the counts stay.
    pub fn map_errors<E2>(self, mut f: impl FnMut(E) -> E2) -> RetryError<E2> {
        RetryError {
            attempts: self
                .attempts
                .into_iter()
                .map(|attempt| attempt.map_error(&mut f))
                .collect(),
            made: self.made,
            stop: self.stop,
        }
    }
}

impl<E: fmt::Display> fmt::Display for RetryError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let made = self.made;
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
            Stop::TimedOut(limit) => {
                let noun = if made == 1 { "attempt" } else { "attempts" };
                write!(f, "retry timed out after {limit:?} and {made} {noun}")?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_keeps_the_first_and_last_attempts() {
        let mut record = Record::new();
        for n in 1..=100_u32 {
            record.push(Some(n), Duration::ZERO);
        }
        let error = record.finish(Stop::Exhausted);
        let kept: Vec<u32> = error
            .attempts()
            .iter()
            .map(|a| *a.error().unwrap())
            .collect();
        let numbers: Vec<u32> = error.attempts().iter().map(Attempt::number).collect();
        assert_eq!(kept, numbers);
        assert_eq!(
            kept,
            [1, 2, 3, 4, 5, 6, 7, 8, 93, 94, 95, 96, 97, 98, 99, 100]
        );
        assert_eq!((error.attempts_made(), error.attempts_dropped()), (100, 84));
        assert_eq!(error.last_error(), Some(&100));
    }

    #[test]
    fn a_short_record_keeps_everything() {
        for made in 0..=16_u32 {
            let mut record = Record::new();
            for n in 1..=made {
                record.push(Some(n), Duration::ZERO);
            }
            let error = record.finish(Stop::Exhausted);
            assert_eq!(error.attempts().len(), made as usize);
            assert_eq!(error.attempts_dropped(), 0);
        }
    }
}
