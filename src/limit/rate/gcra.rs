//! The arithmetic of a rate, shared by the rate limiters and the maps' scheduler: [`Rate`]
//! (what the user asks for) and [`Gcra`] (the decision, on one `u64` of state).
//!
//! GCRA, the generic cell rate algorithm: the state is the *theoretical arrival time* (TAT),
//! the moment at which the limiter would be back to empty if nothing else started. A start
//! at `now` is allowed when `TAT - now <= tolerance`, where the tolerance is what the burst
//! allows beyond one interval; it then pushes the TAT one interval further. A TAT in the
//! past counts as `now`: an idle limiter is a fresh one, which is why a keyed limiter can
//! forget a key whose TAT has passed without changing any decision.
//!
//! Times are nanoseconds since a process-wide origin (`runtime/clock.rs`), so the state fits
//! in one atomic word and compares with plain integers.

use std::num::NonZeroU64;
use std::time::Duration;

// The time line rates count on lives with the clocks; the maps' scheduler reaches it here.
pub(crate) use crate::runtime::{instant_at, nanos_since_origin};

const fn duration_nanos(duration: Duration) -> u64 {
    let nanos = duration.as_nanos();
    if nanos > u64::MAX as u128 {
        u64::MAX
    } else {
        nanos as u64
    }
}

/// How many starts are allowed per unit of time, and how many may come at once after a
/// quiet spell.
///
/// A `Rate` of 10 per second with a burst of 1 (the default) lets one start through every
/// 100 ms and never two closer together; with a burst of 5, up to 5 may start at once after
/// a quiet half-second, and the long-run average stays 10 per second. Build one with
/// [`per_second`](Rate::per_second), [`per_minute`](Rate::per_minute),
/// [`per`](Rate::per) or [`every`](Rate::every), then set [`burst`](Rate::burst).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::Rate;
///
/// let polite = Rate::per_second(2).burst(4);
/// assert_eq!(polite.interval(), Duration::from_millis(500));
/// assert_eq!(polite.get_burst(), 4);
/// assert_eq!(Rate::every(Duration::from_secs(3)).interval(), Duration::from_secs(3));
/// assert_eq!(Rate::per(30, Duration::from_secs(60)), Rate::every(Duration::from_secs(2)));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Rate {
    /// Nanoseconds between two starts at the steady rate (at least 1).
    interval: u64,
    burst: u32,
}

impl Rate {
    /// `count` starts per second.
    ///
    /// # Panics
    ///
    /// If `count` is 0 (a rate of nothing would never start anything).
    #[track_caller]
    pub const fn per_second(count: u32) -> Self {
        Self::per(count, Duration::from_secs(1))
    }

    /// `count` starts per minute.
    ///
    /// # Panics
    ///
    /// If `count` is 0.
    #[track_caller]
    pub const fn per_minute(count: u32) -> Self {
        Self::per(count, Duration::from_secs(60))
    }

    /// `count` starts per `period`, evenly spaced: one every `period / count`.
    ///
    /// # Panics
    ///
    /// If `count` is 0 or `period` is zero.
    #[track_caller]
    pub const fn per(count: u32, period: Duration) -> Self {
        assert!(
            count > 0,
            "tollgate: a rate needs at least 1 start per period (0 would never start anything)"
        );
        assert!(
            !period.is_zero(),
            "tollgate: a rate's period must not be zero"
        );
        let interval = duration_nanos(period) / count as u64;
        Self {
            interval: if interval == 0 { 1 } else { interval },
            burst: 1,
        }
    }

    /// One start every `interval` (a crawl delay).
    ///
    /// # Panics
    ///
    /// If `interval` is zero.
    #[track_caller]
    pub const fn every(interval: Duration) -> Self {
        Self::per(1, interval)
    }

    /// Allows up to `burst` starts at once after a quiet spell (1 by default: never two
    /// closer than the interval). The average over a long run stays the rate.
    ///
    /// # Panics
    ///
    /// If `burst` is 0.
    #[track_caller]
    #[must_use]
    pub const fn burst(mut self, burst: u32) -> Self {
        assert!(burst > 0, "tollgate: a rate's burst must be at least 1");
        self.burst = burst;
        self
    }

    /// The time between two starts at the steady rate.
    pub const fn interval(&self) -> Duration {
        Duration::from_nanos(self.interval)
    }

    /// How many starts may come at once after a quiet spell.
    pub const fn get_burst(&self) -> u32 {
        self.burst
    }

    /// Starts per second at the steady rate (what [`per_second`](Self::per_second) was
    /// given, or the rate any other constructor spells out): `1 / interval`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Rate;
    ///
    /// assert_eq!(Rate::per_second(20).get_per_second(), 20.0);
    /// assert_eq!(Rate::per_minute(30).get_per_second(), 0.5);
    /// assert_eq!(Rate::every(Duration::from_millis(250)).get_per_second(), 4.0);
    /// ```
    #[must_use]
    pub fn get_per_second(&self) -> f64 {
        1e9 / self.interval as f64
    }
}

/// A [`Rate`] as the two numbers GCRA decides with. The state it decides on (the TAT) is
/// kept by the caller: an atomic word, an entry of a keyed map, a field of the scheduler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Gcra {
    /// Nanoseconds one start adds to the TAT (never 0: a rate's interval is at least 1 ns,
    /// which also makes `Option<Gcra>` two words, the size of a key's rate in a map).
    interval: NonZeroU64,
    /// How far ahead of `now` the TAT may be for a start to be allowed.
    tolerance: u64,
}

impl Gcra {
    pub(crate) const fn new(rate: Rate) -> Self {
        let Some(interval) = NonZeroU64::new(rate.interval) else {
            panic!("a rate's interval is at least 1 ns");
        };
        Self {
            interval,
            tolerance: rate.interval.saturating_mul(rate.burst as u64 - 1),
        }
    }

    /// Reserves the next start at or after `now`, whether or not it is allowed yet:
    /// `(new_tat, start_at)`, where `start_at` (`>= now`) is when that start conforms.
    /// Successive reservations get successive starts, so waiters that reserve are served in
    /// the order they reserved, each at the earliest time the rate allows.
    #[inline]
    pub(crate) fn reserve(&self, tat: u64, now: u64) -> (u64, u64) {
        let tat = tat.max(now);
        let start_at = self.allowed_at(tat).max(now);
        (tat.saturating_add(self.interval.get()), start_at)
    }

    /// The state before the reservation that produced `reserved_tat` (what a cancelled
    /// reservation gives back when nothing was reserved after it).
    #[inline]
    pub(crate) fn unreserve(&self, reserved_tat: u64) -> u64 {
        reserved_tat.saturating_sub(self.interval.get())
    }

    /// A start at `now` against state `tat`: `Ok(new_tat)` if allowed, or `Err(at)`, the
    /// earliest time a start can be allowed (nanoseconds since the origin, after `now`).
    #[inline]
    pub(crate) fn decide(&self, tat: u64, now: u64) -> Result<u64, u64> {
        let tat = tat.max(now);
        let allowed_at = tat - self.tolerance.min(tat);
        if allowed_at > now {
            Err(allowed_at)
        } else {
            Ok(tat.saturating_add(self.interval.get()))
        }
    }

    /// State `tat` of `old` carried over to this rate at `now`: the starts it is ahead
    /// by are kept, each now one interval of this rate (a live change of a map's rate).
    pub(crate) fn carry_over(&self, old: &Gcra, tat: u64, now: u64) -> u64 {
        if tat <= now {
            return tat;
        }
        let ahead = u128::from(tat - now) * u128::from(self.interval.get())
            / u128::from(old.interval.get());
        now.saturating_add(u64::try_from(ahead).unwrap_or(u64::MAX))
    }

    /// A rate from its interval in nanoseconds and its burst, as [`parts`](Self::parts)
    /// gives them (`None` for an interval of 0: no rate). For who keeps a rate in 12 bytes
    /// (a key's entry in a map, a key's adaptive state).
    #[inline(always)]
    pub(crate) const fn from_parts(interval: u64, burst: u32) -> Option<Self> {
        match NonZeroU64::new(interval) {
            Some(interval) => Some(Self {
                interval,
                tolerance: interval
                    .get()
                    .saturating_mul(burst.saturating_sub(1) as u64),
            }),
            None => None,
        }
    }

    /// The interval in nanoseconds and the burst (the starts a fresh state allows at
    /// once) of `rate` (`(0, 1)` for none): [`from_parts`](Self::from_parts) makes it again.
    #[inline]
    pub(crate) fn parts(rate: Option<Self>) -> (u64, u32) {
        rate.map_or((0, 1), |gcra| (gcra.interval.get(), gcra.burst()))
    }

    /// How many starts a fresh state allows at once.
    pub(crate) const fn burst(&self) -> u32 {
        let burst = self.tolerance / self.interval.get() + 1;
        if burst > u32::MAX as u64 {
            u32::MAX
        } else {
            burst as u32
        }
    }

    /// Starts per second at the steady rate.
    pub(crate) fn per_second(&self) -> f64 {
        1e9 / self.interval.get() as f64
    }

    /// Nanoseconds between two starts at the steady rate.
    pub(crate) const fn interval_nanos(&self) -> u64 {
        self.interval.get()
    }

    /// The earliest time a start is allowed against `tat` (`now` or earlier when it is
    /// allowed already).
    #[inline]
    pub(crate) fn allowed_at(&self, tat: u64) -> u64 {
        tat.saturating_sub(self.tolerance)
    }

    /// How many starts in a row state `tat` allows at `now` (0 when the next must wait).
    #[inline]
    pub(crate) fn starts_allowed(&self, tat: u64, now: u64) -> u64 {
        let tat = tat.max(now);
        match now.saturating_add(self.tolerance).checked_sub(tat) {
            Some(room) => room / self.interval.get() + 1,
            None => 0,
        }
    }

    /// Whether state `tat` decides like a fresh limiter at `now` (so it can be forgotten).
    #[inline]
    pub(crate) fn is_idle(tat: u64, now: u64) -> bool {
        tat <= now
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn a_rate_is_made_again_from_its_parts() {
        for rate in [
            Rate::per_second(3),
            Rate::per_second(50).burst(7),
            Rate::every(Duration::from_secs(3)).burst(u32::MAX),
        ] {
            let gcra = Some(Gcra::new(rate));
            let (interval, burst) = Gcra::parts(gcra);
            assert_eq!(burst, rate.get_burst());
            assert_eq!(Gcra::from_parts(interval, burst), gcra);
        }
        assert_eq!(Gcra::parts(None), (0, 1));
        assert_eq!(Gcra::from_parts(0, 1), None);
    }

    #[test]
    fn starts_allowed_counts_the_burst_left() {
        let gcra = Gcra::new(Rate::per_second(10).burst(3));
        assert_eq!(gcra.starts_allowed(0, 0), 3);
        let tat = gcra.decide(0, 0).unwrap();
        assert_eq!(gcra.starts_allowed(tat, 0), 2);
        let tat = gcra.decide(gcra.decide(tat, 0).unwrap(), 0).unwrap();
        assert_eq!(gcra.starts_allowed(tat, 0), 0);
        assert_eq!(gcra.starts_allowed(tat, 100 * MS), 1);
    }

    #[test]
    fn a_burst_of_one_spaces_starts_by_the_interval() {
        let gcra = Gcra::new(Rate::per_second(10));
        let now = 1_000 * MS;
        let tat = gcra.decide(0, now).unwrap();
        assert_eq!(tat, now + 100 * MS);
        assert_eq!(gcra.decide(tat, now), Err(now + 100 * MS));
        assert_eq!(gcra.decide(tat, now + 99 * MS), Err(now + 100 * MS));
        assert!(gcra.decide(tat, now + 100 * MS).is_ok());
    }

    #[test]
    fn a_burst_lets_that_many_through_at_once_then_the_rate() {
        let gcra = Gcra::new(Rate::per_second(10).burst(3));
        let now = 1_000 * MS;
        let mut tat = 0;
        for _ in 0..3 {
            tat = gcra.decide(tat, now).expect("within the burst");
        }
        assert_eq!(gcra.decide(tat, now), Err(now + 100 * MS));
        // Over a long run, the average is the rate: 10 more in the next second.
        let mut allowed = 0;
        for step in 1..=1000 {
            if let Ok(next) = gcra.decide(tat, now + step * MS) {
                tat = next;
                allowed += 1;
            }
        }
        assert_eq!(allowed, 10);
    }

    #[test]
    fn an_idle_state_is_a_fresh_one() {
        let gcra = Gcra::new(Rate::per_second(10).burst(2));
        let now = 5_000 * MS;
        let tat = gcra.decide(gcra.decide(0, now).unwrap(), now).unwrap();
        assert!(!Gcra::is_idle(tat, now));
        let later = now + 300 * MS;
        assert!(Gcra::is_idle(tat, later));
        assert_eq!(gcra.decide(tat, later), gcra.decide(0, later));
    }

    #[test]
    fn reservations_queue_one_interval_apart_and_conform() {
        let gcra = Gcra::new(Rate::per_second(10).burst(2));
        let now = 1_000 * MS;
        let (tat, first) = gcra.reserve(0, now);
        let (tat, second) = gcra.reserve(tat, now);
        let (tat, third) = gcra.reserve(tat, now);
        let (tat, fourth) = gcra.reserve(tat, now);
        assert_eq!((first, second), (now, now), "the burst starts at once");
        assert_eq!((third, fourth), (now + 100 * MS, now + 200 * MS));
        assert_eq!(tat, now + 400 * MS);
        // Each reserved start is one `decide` would have allowed at its time.
        let mut state = 0;
        for at in [first, second, third, fourth] {
            state = gcra.decide(state, at).expect("a reserved start conforms");
        }
        assert_eq!(state, tat);
        assert_eq!(gcra.unreserve(tat), now + 300 * MS);
    }

    #[test]
    fn huge_rates_saturate_instead_of_overflowing() {
        let gcra = Gcra::new(Rate::every(Duration::MAX).burst(u32::MAX));
        assert!(gcra.decide(0, 0).is_ok());
        let fast = Gcra::new(Rate::per(u32::MAX, Duration::from_nanos(1)));
        assert_eq!(fast.decide(0, 10), Ok(11));
    }

    #[test]
    #[should_panic(expected = "at least 1 start")]
    fn a_rate_of_zero_panics() {
        let _ = Rate::per_second(0);
    }
}
