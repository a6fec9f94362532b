//! [`KeySettings`]: one key's own limit and rate, wherever they come from (a map's function
//! of the key, a server's hint, a control).

use std::cmp::Ordering;

use crate::limit::check::at_least_one;
use crate::limit::rate::gcra::Rate;

/// One key's own limit and rate: a **per-key setting**, in place of a keyed map's default
/// key limit and default key rate. What it leaves unset follows the defaults.
///
/// The one type for a key's own settings, wherever they come from: the map's function of
/// the key ([`key_settings`](crate::futures::BoundedMap::key_settings)), a server's
/// [`Hint`](crate::Hint) (which carries one beside its pause), or a
/// [`MapControl`](crate::MapControl) while the map runs
/// ([`set_key_settings`](crate::MapControl::set_key_settings)). Each value is checked when
/// it is set: a key's limit is at least 1.
///
/// # Examples
///
/// ```
/// use tollgate::{KeySettings, Rate};
/// // This host: 2 at a time, 5 starts a second; other hosts: the map's defaults.
/// let slow = KeySettings::new().limit(2).rate(Rate::per_second(5));
/// assert_eq!(slow.get_limit(), Some(2));
/// assert_eq!(slow.get_rate(), Some(Rate::per_second(5)));
/// assert!(KeySettings::new().is_empty());
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeySettings {
    limit: Option<usize>,
    rate: Option<Rate>,
}

impl KeySettings {
    /// Settings that follow the map's defaults in everything.
    #[must_use]
    pub const fn new() -> Self {
        Self {
            limit: None,
            rate: None,
        }
    }

    /// The most items of the key that may run at once, instead of the default key limit.
    ///
    /// # Panics
    ///
    /// If `limit` is 0 (a limit of 0 would never run the key).
    #[must_use]
    #[track_caller]
    pub const fn limit(mut self, limit: usize) -> Self {
        at_least_one(
            limit,
            "tollgate: KeySettings::limit: a key limit must be at least 1 (a limit of 0 would never run the key)",
        );
        self.limit = Some(limit);
        self
    }

    /// The rate the key's starts are spaced by, instead of the default key rate (a map
    /// without a default key rate spaces this key only).
    #[must_use]
    pub const fn rate(mut self, rate: Rate) -> Self {
        self.rate = Some(rate);
        self
    }

    /// The limit set with [`limit`](Self::limit), if any (at least 1).
    #[must_use]
    pub const fn get_limit(&self) -> Option<usize> {
        self.limit
    }

    /// The rate set with [`rate`](Self::rate), if any.
    #[must_use]
    pub const fn get_rate(&self) -> Option<Rate> {
        self.rate
    }

    /// Whether the settings set nothing (the key follows the defaults in everything).
    #[must_use]
    pub const fn is_empty(&self) -> bool {
        self.limit.is_none() && self.rate.is_none()
    }

    /// `other`'s values over these: each value `other` sets replaces this one's.
    #[must_use]
    pub(crate) fn overlaid(self, other: Self) -> Self {
        Self {
            limit: other.limit.or(self.limit),
            rate: other.rate.or(self.rate),
        }
    }

    /// Both in one, the stricter value of each winning: the lower limit, the slower rate
    /// (the longer interval; at the same interval, the smaller burst). A value set by one
    /// only is kept.
    #[must_use]
    pub(crate) fn stricter(self, other: Self) -> Self {
        Self {
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
pub(crate) fn stricter<T: Copy>(
    a: Option<T>,
    b: Option<T>,
    order: impl Fn(&T, &T) -> Ordering,
) -> Option<T> {
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
    fn overlaid_takes_each_value_the_other_sets() {
        let own = KeySettings::new().limit(3).rate(Rate::per_second(5));
        let change = KeySettings::new().limit(1);
        let both = own.overlaid(change);
        assert_eq!(both, KeySettings::new().limit(1).rate(Rate::per_second(5)));
        assert_eq!(own.overlaid(KeySettings::new()), own);
        assert_eq!(KeySettings::new().overlaid(own), own);
    }

    #[test]
    #[should_panic(expected = "at least 1")]
    fn a_limit_of_zero_panics() {
        let _ = KeySettings::new().limit(0);
    }
}
