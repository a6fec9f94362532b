//! [`RaceError`]: nobody won.

use std::fmt;
use std::time::Duration;

/// The error of [`race`](crate::race): no contestant succeeded.
///
/// Carries every contestant's error with its index, in the order they failed (a contestant
/// that was still running when the race timed out has no entry, nor has one that a
/// [hedged](crate::futures::Race::hedge) race never started), read through
/// [`errors`](Self::errors) and [`into_errors`](Self::into_errors);
/// [`started`](Self::started) says how many contestants were started.
/// The error types of the contestants need only be `Debug` for this to be an error:
/// `RaceError<E>` is `Error + Send + Sync + 'static` whenever `E` is `Debug + Send + Sync
/// + 'static`.
///
/// Converts into the umbrella [`tollgate::Error`](crate::Error) when `E` converts into
/// `Box<dyn Error + Send + Sync>` (each error is boxed).
///
/// # Examples
///
/// ```
/// use std::future::ready;
///
/// # futures_lite::future::block_on(async {
/// let failed = tollgate::race([ready(Err::<(), _>("a")), ready(Err("b"))])
///     .await
///     .unwrap_err();
/// assert_eq!(failed.to_string(), "all 2 contestants failed");
/// assert!(!failed.is_timed_out());
/// assert_eq!(failed.errors().len(), 2);
/// assert_eq!(failed.started(), 2);
/// assert_eq!(failed.into_errors(), [(0, "a"), (1, "b")]);
/// # });
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RaceError<E> {
    errors: Vec<(usize, E)>,
    timed_out: Option<Duration>,
    started: usize,
}

impl<E> RaceError<E> {
    pub(super) fn new(
        errors: Vec<(usize, E)>,
        timed_out: Option<Duration>,
        started: usize,
    ) -> Self {
        Self {
            errors,
            timed_out,
            started,
        }
    }

    /// Every `(contestant index, error)`, in the order the contestants failed.
    pub fn errors(&self) -> &[(usize, E)] {
        &self.errors
    }

    /// Takes the list of `(contestant index, error)`.
    pub fn into_errors(self) -> Vec<(usize, E)> {
        self.errors
    }

    /// Whether the race ended because its [timeout](crate::futures::Race::timeout) passed
    /// (rather than because every contestant failed).
    pub fn is_timed_out(&self) -> bool {
        self.timed_out.is_some()
    }

    /// The timeout that passed, when [`is_timed_out`](Self::is_timed_out).
    pub fn timeout(&self) -> Option<Duration> {
        self.timed_out
    }

    /// How many contestants were started (polled at least once): those numbered
    /// `0..started()`.
    ///
    /// Every contestant, in a plain race. A [hedged](crate::futures::Race::hedge) race
    /// starts them one after another, so when its timeout passes the ones after these were
    /// never started: they did nothing and have no entry in [`errors`](Self::errors).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::future::pending;
    /// use std::time::Duration;
    ///
    /// # futures_lite::future::block_on(async {
    /// let stuck = [pending::<Result<u8, ()>>(), pending(), pending()];
    /// let failed = tollgate::race(stuck)
    ///     .hedge(Duration::from_secs(60))
    ///     .timeout(Duration::from_millis(5))
    ///     .await
    ///     .unwrap_err();
    /// assert!(failed.is_timed_out());
    /// assert_eq!(failed.started(), 1);
    /// # });
    /// ```
    pub fn started(&self) -> usize {
        self.started
    }

    /// Applies `f` to every error, keeping indices, the timeout and the count started.
    pub fn map_errors<E2>(self, mut f: impl FnMut(E) -> E2) -> RaceError<E2> {
        RaceError {
            errors: self
                .errors
                .into_iter()
                .map(|(index, error)| (index, f(error)))
                .collect(),
            timed_out: self.timed_out,
            started: self.started,
        }
    }
}

impl<E> fmt::Display for RaceError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let failed = self.errors.len();
        match self.timed_out {
            Some(after) => {
                let noun = if failed == 1 { "failure" } else { "failures" };
                write!(f, "race timed out after {after:?} with {failed} {noun}")
            }
            None if failed == 0 => f.write_str("race had no contestants"),
            None if failed == 1 => f.write_str("the only contestant failed"),
            None => write!(f, "all {failed} contestants failed"),
        }
    }
}

impl<E: fmt::Debug> std::error::Error for RaceError<E> {}
