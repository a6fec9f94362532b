//! [`Hint`]: a server's word about one key's pace (pause, limit, rate).

use std::time::Duration;

use crate::limit::key_settings::{KeySettings, stricter};
use crate::limit::rate::gcra::Rate;

/// A **hint**: what a server said about one key's pace, read from one response. It may
/// pause the key for a while, and set the key's own limit and rate (a [`KeySettings`]);
/// each is optional.
///
/// The settings become the key's own (on an adaptive map, the key's ceilings: adaptivity
/// may go lower, never higher). Attach a hint to an attempt's [`Outcome`](crate::Outcome)
/// with [`Outcome::with_hint`](crate::Outcome::with_hint); with the `http` feature,
/// `tollgate::http::hint` reads one from a response's headers (`Retry-After`, the
/// rate-limit fields).
///
/// Build a hint with [`new`](Hint::new) and the setters ([`pause`](Hint::pause),
/// [`limit`](Hint::limit), [`rate`](Hint::rate), or [`settings`](Hint::settings) for
/// both at once), read it back with `get_` and the same word, and combine two with
/// [`merge`](Hint::merge), where the stricter value of each wins.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Hint, KeySettings, Rate};
///
/// // "Slow down to 10 a second, and nothing for the next 2 seconds."
/// let hint = Hint::new()
///     .rate(Rate::per_second(10))
///     .pause(Duration::from_secs(2));
/// assert_eq!(hint.get_pause(), Some(Duration::from_secs(2)));
/// assert_eq!(hint.get_rate(), Some(Rate::per_second(10)));
/// assert_eq!(hint.get_limit(), None);
/// assert_eq!(hint.get_settings(), KeySettings::new().rate(Rate::per_second(10)));
/// assert!(Hint::new().is_empty());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Hint {
    /// Start nothing of the key for this long, counted from when the response was read.
    pause: Option<Duration>,
    /// The key's own limit and rate.
    settings: KeySettings,
}

impl Hint {
    /// The longest pause a map waits out for one hint: 10 minutes. A server that asks for
    /// more (a `Retry-After` of hours, a daily quota's reset) is not waited for: on a map
    /// with a breaker per key (`.breaker`, `.breaker_waiting`) the key's breaker opens (its
    /// items fail at once, or wait for its probes), elsewhere the key pauses this long and
    /// asks again. A key is never held for hours by one answer, let alone the years a
    /// malformed date could ask for.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// assert_eq!(tollgate::Hint::MAX_PAUSE, Duration::from_secs(600));
    /// ```
    pub const MAX_PAUSE: Duration = Duration::from_secs(600);

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
            settings: KeySettings::new(),
        }
    }

    /// Pause the key for `pause`, counted from when the response was read (`Retry-After`,
    /// or a rate-limit counter at 0 with its reset time); a zero pause says "no need to
    /// wait". A map waits out at most [`MAX_PAUSE`](Self::MAX_PAUSE) of it: see there for a
    /// longer one.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let hint = tollgate::Hint::new().pause(Duration::from_secs(30));
    /// assert_eq!(hint.get_pause(), Some(Duration::from_secs(30)));
    /// ```
    #[must_use]
    pub const fn pause(mut self, pause: Duration) -> Self {
        self.pause = Some(pause);
        self
    }

    /// Set the key's limit: the most of its items that may run at once.
    ///
    /// # Panics
    ///
    /// If `limit` is 0 (a limit of 0 would never run the key's items again).
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(tollgate::Hint::new().limit(4).get_limit(), Some(4));
    /// ```
    #[must_use]
    #[track_caller]
    pub const fn limit(mut self, limit: usize) -> Self {
        self.settings = self.settings.limit(limit);
        self
    }

    /// Set the key's rate: how its starts are spaced.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Hint, Rate};
    /// assert_eq!(Hint::new().rate(Rate::per_second(5)).get_rate(), Some(Rate::per_second(5)));
    /// ```
    #[must_use]
    pub const fn rate(mut self, rate: Rate) -> Self {
        self.settings = self.settings.rate(rate);
        self
    }

    /// Set the key's limit and rate at once: each value `settings` sets replaces the
    /// hint's.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Hint, KeySettings};
    /// let hint = Hint::new().settings(KeySettings::new().limit(2));
    /// assert_eq!(hint.get_limit(), Some(2));
    /// ```
    #[must_use]
    pub fn settings(mut self, settings: KeySettings) -> Self {
        self.settings = self.settings.overlaid(settings);
        self
    }

    /// The pause set with [`pause`](Self::pause), if any.
    #[must_use]
    pub const fn get_pause(&self) -> Option<Duration> {
        self.pause
    }

    /// The limit set with [`limit`](Self::limit), if any (at least 1).
    #[must_use]
    pub const fn get_limit(&self) -> Option<usize> {
        self.settings.get_limit()
    }

    /// The rate set with [`rate`](Self::rate), if any.
    #[must_use]
    pub const fn get_rate(&self) -> Option<Rate> {
        self.settings.get_rate()
    }

    /// The key's own limit and rate the hint sets.
    #[must_use]
    pub const fn get_settings(&self) -> KeySettings {
        self.settings
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
    #[must_use]
    pub const fn is_empty(&self) -> bool {
        self.pause.is_none() && self.settings.is_empty()
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
    /// let b = Hint::new().limit(2).rate(Rate::per_second(50)).pause(Duration::from_secs(1));
    /// let both = a.merge(b);
    /// assert_eq!(both.get_limit(), Some(2));
    /// assert_eq!(both.get_rate(), Some(Rate::per_second(10)));
    /// assert_eq!(both.get_pause(), Some(Duration::from_secs(1)));
    /// ```
    #[must_use]
    pub fn merge(self, other: Self) -> Self {
        Self {
            pause: stricter(self.pause, other.pause, |a, b| a.cmp(b)),
            settings: self.settings.stricter(other.settings),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_keeps_the_stricter_value_of_each() {
        let short = Hint::new().pause(Duration::from_secs(1));
        let long = Hint::new().pause(Duration::from_secs(5));
        assert_eq!(short.merge(long).get_pause(), Some(Duration::from_secs(5)));
        assert_eq!(long.merge(short).get_pause(), Some(Duration::from_secs(5)));

        let low = Hint::new().limit(1);
        let high = Hint::new().limit(9);
        assert_eq!(low.merge(high).get_limit(), Some(1));
        assert_eq!(high.merge(low).get_limit(), Some(1));

        let slow = Hint::new().rate(Rate::per_minute(1));
        let fast = Hint::new().rate(Rate::per_second(100));
        assert_eq!(slow.merge(fast).get_rate(), Some(Rate::per_minute(1)));
        assert_eq!(fast.merge(slow).get_rate(), Some(Rate::per_minute(1)));

        // The same interval: the smaller burst is stricter.
        let bursty = Hint::new().rate(Rate::per_second(2).burst(4));
        let even = Hint::new().rate(Rate::per_second(2));
        assert_eq!(bursty.merge(even).get_rate(), Some(Rate::per_second(2)));
        assert_eq!(even.merge(bursty).get_rate(), Some(Rate::per_second(2)));
    }

    #[test]
    fn merge_keeps_what_only_one_says_and_empty_is_neutral() {
        let a = Hint::new().limit(3);
        let b = Hint::new().rate(Rate::per_second(1));
        let both = a.merge(b);
        assert_eq!(
            (both.get_limit(), both.get_rate()),
            (Some(3), Some(Rate::per_second(1)))
        );
        assert_eq!(both.merge(Hint::new()), both);
        assert_eq!(Hint::new().merge(both), both);
        assert!(Hint::new().merge(Hint::new()).is_empty());
        assert_eq!(Hint::default(), Hint::new());
    }

    #[test]
    fn settings_set_both_values_and_keep_what_they_leave_unset() {
        let hint = Hint::new()
            .limit(4)
            .settings(KeySettings::new().rate(Rate::per_second(3)));
        assert_eq!(
            hint.get_settings(),
            KeySettings::new().limit(4).rate(Rate::per_second(3))
        );
    }

    #[test]
    #[should_panic(expected = "at least 1")]
    fn a_limit_of_zero_panics() {
        let _ = Hint::new().limit(0);
    }
}
