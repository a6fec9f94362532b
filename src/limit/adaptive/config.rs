//! [`Adaptive`]: the one line of settings every adaptive key follows.

use crate::limit::rate::gcra::Rate;

/// The settings of adaptive keys: a floor and a ceiling for each key's limit, and maybe a
/// ceiling for its rate. Each key moves its own values between them from its own signals
/// (the rules are below).
///
/// One `Adaptive` serves every key: an [`AdaptiveLimiter`](crate::AdaptiveLimiter) (one key
/// of its own), or every key of a keyed map.
///
/// # Examples
///
/// ```
/// use tollgate::{Adaptive, Rate};
///
/// // Between 1 and 32 at once, at most 50 starts per second, found by each key itself.
/// let adaptive = Adaptive::new(1, 32).max_rate(Rate::per_second(50));
/// assert_eq!((adaptive.floor(), adaptive.ceiling()), (1, 32));
/// assert_eq!(adaptive.rate_ceiling(), Some(Rate::per_second(50)));
/// ```
#[derive(Clone, Debug)]
pub struct Adaptive {
    floor: usize,
    ceiling: usize,
    rate_ceiling: Option<Rate>,
}

impl Adaptive {
    /// A key's limit moves between `floor` and `ceiling` (both included). It starts low:
    /// at 2, or at the floor if that is higher, or at the ceiling if that is lower. Without
    /// [`max_rate`](Self::max_rate) a key has no rate until an overload shows that its pace,
    /// not its limit, is what the server objects to.
    ///
    /// A ceiling above [`Semaphore::MAX_PERMITS`](crate::Semaphore::MAX_PERMITS) counts as
    /// that.
    ///
    /// # Examples
    ///
    /// ```
    /// let adaptive = tollgate::Adaptive::new(2, 16);
    /// assert_eq!(adaptive.rate_ceiling(), None);
    /// ```
    ///
    /// # Panics
    ///
    /// If `floor` is 0 (a limit of 0 would never start anything) or `floor` is above
    /// `ceiling`; the message names both values.
    #[track_caller]
    pub fn new(floor: usize, ceiling: usize) -> Self {
        assert!(
            floor > 0 && floor <= ceiling,
            "tollgate::Adaptive::new: the floor must be at least 1 and at most the ceiling \
             (floor {floor}, ceiling {ceiling})"
        );
        Self {
            floor,
            ceiling,
            rate_ceiling: None,
        }
    }

    /// The highest rate a key may adapt to. A key then starts at a sixteenth of it (at
    /// least 1 start per second, at most `rate`) and moves below it; the burst of `rate` is
    /// the burst of every rate the key takes.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Adaptive, Rate};
    ///
    /// let adaptive = Adaptive::new(1, 8).max_rate(Rate::per_second(20));
    /// assert_eq!(adaptive.rate_ceiling(), Some(Rate::per_second(20)));
    /// ```
    #[must_use]
    pub fn max_rate(mut self, rate: Rate) -> Self {
        self.rate_ceiling = Some(rate);
        self
    }

    /// The lowest a key's limit may go.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(tollgate::Adaptive::new(3, 9).floor(), 3);
    /// ```
    pub fn floor(&self) -> usize {
        self.floor
    }

    /// The highest a key's limit may go.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(tollgate::Adaptive::new(3, 9).ceiling(), 9);
    /// ```
    pub fn ceiling(&self) -> usize {
        self.ceiling
    }

    /// The highest a key's rate may go (`None`: no ceiling, see [`new`](Self::new)).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Adaptive, Rate};
    ///
    /// assert_eq!(Adaptive::new(1, 4).rate_ceiling(), None);
    /// let capped = Adaptive::new(1, 4).max_rate(Rate::per_minute(60));
    /// assert_eq!(capped.rate_ceiling(), Some(Rate::per_second(1)));
    /// ```
    pub fn rate_ceiling(&self) -> Option<Rate> {
        self.rate_ceiling
    }
}
