//! [`Hint`]: a server's word about one key's pace (pause, limit, rate).

use std::cmp::Ordering;
use std::time::Duration;

use crate::limit::check::at_least_one;
use crate::limit::rate::gcra::Rate;

/// A **hint**: what a server said about one key's pace, read from one response. It may
/// pause the key for a while, set the key's limit, set the key's rate; each is optional.
///
/// A hint sets the key's own setting (on an adaptive map, the key's ceiling: adaptivity may
/// go lower, never higher). Attach one to an attempt's [`Outcome`](crate::Outcome) with
/// [`Outcome::with_hint`](crate::Outcome::with_hint); with the `http` feature,
/// `tollgate::http::hint` reads one from a response's headers (`Retry-After`, the rate-limit
/// fields).
///
/// The fields are public to read; build a hint with [`new`](Hint::new) and the setters
/// ([`pause_for`](Hint::pause_for), [`limit`](Hint::limit), [`rate`](Hint::rate)), and
/// combine two with [`merge`](Hint::merge), where the stricter value of each wins.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Hint, Rate};
///
/// // "Slow down to 10 a second, and nothing for the next 2 seconds."
/// let hint = Hint::new()
///     .rate(Rate::per_second(10))
///     .pause_for(Duration::from_secs(2));
/// assert_eq!(hint.pause, Some(Duration::from_secs(2)));
/// assert_eq!(hint.rate, Some(Rate::per_second(10)));
/// assert_eq!(hint.limit, None);
/// assert!(Hint::new().is_empty());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Hint {
    /// Start nothing of the key for this long, counted from when the response was read
    /// (`Retry-After`, or a rate-limit counter at 0 with its reset time). Taken as given,
    /// however long: `Duration::MAX` holds the key's items for as long as the map runs (a
    /// [drain](crate::MapControl::drain) ends the map with them not started).
    pub pause: Option<Duration>,
    /// The most items of the key that may run at once. `Some(0)` is read as 1: the field
    /// lets a 0 through where the [`limit`](method@Hint::limit) setter panics, and a limit of 0
    /// would never start the key's items again, so a map would never end.
    pub limit: Option<usize>,
    /// The rate the key's starts are spaced by.
    pub rate: Option<Rate>,
}

impl Hint {
    /// A hint that says nothing: no pause, no limit, no rate.
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(tollgate::Hint::new().is_empty());
    /// ```
    #[must_use]
    pub const fn new() -> Self {
        Self {
            pause: None,
            limit: None,
            rate: None,
        }
    }

    /// Pause the key for `pause` from when the response was read (a zero pause says
    /// "no need to wait").
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let hint = tollgate::Hint::new().pause_for(Duration::from_secs(30));
    /// assert_eq!(hint.pause, Some(Duration::from_secs(30)));
    /// ```
    #[must_use]
    pub const fn pause_for(mut self, pause: Duration) -> Self {
        self.pause = Some(pause);
        self
    }

    /// Set the key's limit: the most of its items that may run at once.
    ///
    /// # Panics
    ///
    /// If `limit` is 0.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(tollgate::Hint::new().limit(4).limit, Some(4));
    /// ```
    #[must_use]
    #[track_caller]
    pub const fn limit(mut self, limit: usize) -> Self {
        at_least_one(
            limit,
            "tollgate: Hint::limit: a key limit must be at least 1 (a limit of 0 would never run the key)",
        );
        self.limit = Some(limit);
        self
    }

    /// Set the key's rate: how its starts are spaced.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Hint, Rate};
    /// assert_eq!(Hint::new().rate(Rate::per_second(5)).rate, Some(Rate::per_second(5)));
    /// ```
    #[must_use]
    pub const fn rate(mut self, rate: Rate) -> Self {
        self.rate = Some(rate);
        self
    }

    /// The limit the hint sets, as everything that applies a hint reads it: at least 1
    /// (see the field's docs).
    pub(crate) fn limit_at_least_one(&self) -> Option<usize> {
        self.limit.map(|limit| limit.max(1))
    }

    /// Whether the hint says nothing (no pause, no limit, no rate).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::Hint;
    /// assert!(Hint::new().is_empty());
    /// assert!(!Hint::new().limit(2).is_empty());
    /// ```
    pub const fn is_empty(&self) -> bool {
        self.pause.is_none() && self.limit.is_none() && self.rate.is_none()
    }

    /// Both hints in one, the stricter value of each winning: the longer pause, the lower
    /// limit, the slower rate (the longer interval; at the same interval, the smaller
    /// burst). A value said by one hint only is kept.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Hint, Rate};
    ///
    /// let a = Hint::new().limit(8).rate(Rate::per_second(10));
    /// let b = Hint::new().limit(2).rate(Rate::per_second(50)).pause_for(Duration::from_secs(1));
    /// let both = a.merge(b);
    /// assert_eq!(both.limit, Some(2));
    /// assert_eq!(both.rate, Some(Rate::per_second(10)));
    /// assert_eq!(both.pause, Some(Duration::from_secs(1)));
    /// ```
    #[must_use]
    pub fn merge(self, other: Self) -> Self {
        Self {
            pause: stricter(self.pause, other.pause, |a, b| a.cmp(b)),
            limit: stricter(self.limit, other.limit, |a, b| b.cmp(a)),
            rate: stricter(self.rate, other.rate, |a, b| {
                a.interval()
                    .cmp(&b.interval())
                    .then(b.get_burst().cmp(&a.get_burst()))
            }),
        }
    }
}

/// The stricter of two optional values, `order` ranking the stricter one greater; a value
/// is stricter than none.
fn stricter<T: Copy>(a: Option<T>, b: Option<T>, order: impl Fn(&T, &T) -> Ordering) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if order(&b, &a) == Ordering::Greater {
            b
        } else {
            a
        }),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_keeps_the_stricter_value_of_each() {
        let short = Hint::new().pause_for(Duration::from_secs(1));
        let long = Hint::new().pause_for(Duration::from_secs(5));
        assert_eq!(short.merge(long).pause, Some(Duration::from_secs(5)));
        assert_eq!(long.merge(short).pause, Some(Duration::from_secs(5)));

        let low = Hint::new().limit(1);
        let high = Hint::new().limit(9);
        assert_eq!(low.merge(high).limit, Some(1));
        assert_eq!(high.merge(low).limit, Some(1));

        let slow = Hint::new().rate(Rate::per_minute(1));
        let fast = Hint::new().rate(Rate::per_second(100));
        assert_eq!(slow.merge(fast).rate, Some(Rate::per_minute(1)));
        assert_eq!(fast.merge(slow).rate, Some(Rate::per_minute(1)));

        // The same interval: the smaller burst is stricter.
        let bursty = Hint::new().rate(Rate::per_second(2).burst(4));
        let even = Hint::new().rate(Rate::per_second(2));
        assert_eq!(bursty.merge(even).rate, Some(Rate::per_second(2)));
        assert_eq!(even.merge(bursty).rate, Some(Rate::per_second(2)));
    }

    #[test]
    fn merge_keeps_what_only_one_says_and_empty_is_neutral() {
        let a = Hint::new().limit(3);
        let b = Hint::new().rate(Rate::per_second(1));
        let both = a.merge(b);
        assert_eq!(
            (both.limit, both.rate),
            (Some(3), Some(Rate::per_second(1)))
        );
        assert_eq!(both.merge(Hint::new()), both);
        assert_eq!(Hint::new().merge(both), both);
        assert!(Hint::new().merge(Hint::new()).is_empty());
        assert_eq!(Hint::default(), Hint::new());
    }

    #[test]
    fn a_limit_of_zero_set_through_the_field_is_read_as_one() {
        let mut zero = Hint::new();
        zero.limit = Some(0);
        assert_eq!(zero.limit_at_least_one(), Some(1));
        assert_eq!(Hint::new().limit(3).limit_at_least_one(), Some(3));
        assert_eq!(Hint::new().limit_at_least_one(), None);
    }

    #[test]
    #[should_panic(expected = "at least 1")]
    fn a_limit_of_zero_panics() {
        let _ = Hint::new().limit(0);
    }
}
