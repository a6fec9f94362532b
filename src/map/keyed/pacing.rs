//! When keys may start, over the whole map: the map's rate, and the keys asleep until
//! their time (a key's own rate, pause and retries make it sleep; see `key.rs` for when
//! one key may start).
//!
//! Keys that wait only for time sleep in one heap ordered by when they may start, so the
//! map needs one timer, for the earliest of them.
//!
//! Keys due at the same moment do not all wake in the same instant: after a key with a
//! rate wakes, the next may wake only a short gap later (the spread, see [`Spread`]).
//! Without it, keys that started together once would stay in lockstep for good: each
//! starts at the same `now`, so their rates make them due at the same time again.
//!
//! Invariants: an entry of the heap may be stale (its key moved since: the key's place
//! says another time); whoever pops it checks. Ties wake in the order keys fell asleep.
//! No key wakes before the spread allows (`Spread::at`), and the earliest wake-up the
//! map's timer is set for says so.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use crate::limit::rate::gcra::Gcra;

/// Something due at `at`: a key asleep until then, or an item back from a failed attempt
/// that may not start before then. `order` breaks ties: the lower goes first.
#[derive(Debug)]
pub(super) struct Due<X> {
    pub(super) at: u64,
    pub(super) order: u64,
    pub(super) value: X,
}

impl<X> PartialEq for Due<X> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl<X> Eq for Due<X> {}
impl<X> PartialOrd for Due<X> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<X> Ord for Due<X> {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.at, self.order).cmp(&(other.at, other.order))
    }
}

/// The longest gap between two keys waking (1 ms): what keeps two hosts' requests apart
/// on the wire and in the server's accept loop, and a tick of tokio's timer, so that each
/// key wakes in a tick of its own there too.
const MAX_GAP: u64 = 1_000_000;

/// The spread: how soon after a key wakes the next may.
///
/// After a key whose rate spaces its starts by `interval` wakes, the next key may wake
/// `min(1 ms, interval / (2 × keys))` after the later of that key's due time and the
/// previous such time (`keys`: the map's keys). Keys due together then start a gap apart,
/// and their rates keep them apart afterwards; the gap is never more than half the time
/// the keys' rates leave per key, so releasing keys never takes more than half of the time
/// and the spread never holds back the map's throughput. A key without a rate (asleep
/// for a pause or a retry) leaves no gap.
///
/// Counted from the due times, not from `now`: a timer that fires late wakes the keys it
/// owes at once, one gap's worth each, rather than falling behind.
#[derive(Debug, Clone, Copy, Default)]
struct Spread {
    /// No key wakes before this time.
    at: u64,
}

impl Spread {
    /// A key due at `due`, with `rate` (`None`: no rate) among `keys` keys, woke.
    #[inline]
    fn woke(&mut self, due: u64, rate: Option<&Gcra>, keys: usize) {
        let Some(rate) = rate else {
            return;
        };
        // One start from a fresh state moves it by one interval.
        let (interval, _) = rate.reserve(0, 0);
        let gap = (interval / (2 * keys.max(1) as u64)).min(MAX_GAP);
        self.at = self.at.max(due).saturating_add(gap);
    }
}

/// Keys waiting only for time, earliest first.
#[derive(Debug)]
pub(super) struct Sleepers<K> {
    heap: BinaryHeap<Reverse<Due<K>>>,
    /// The tie-breaker of the next key to fall asleep.
    order: u64,
    spread: Spread,
}

impl<K> Sleepers<K> {
    pub(super) fn new() -> Self {
        Self {
            heap: BinaryHeap::new(),
            order: 0,
            spread: Spread::default(),
        }
    }

    /// `key` sleeps until `at`.
    pub(super) fn push(&mut self, at: u64, key: K) {
        self.order += 1;
        self.heap.push(Reverse(Due {
            at,
            order: self.order,
            value: key,
        }));
    }

    /// The earliest sleeper whose time has come at `now` (maybe stale), and the time it
    /// slept until; `None` also while the spread holds the next wake-up back.
    #[inline]
    pub(super) fn pop_due(&mut self, now: u64) -> Option<(u64, K)> {
        if self.heap.peek()?.0.at.max(self.spread.at) > now {
            return None;
        }
        let Reverse(Due { at, value: key, .. }) = self.heap.pop().expect("peeked");
        Some((at, key))
    }

    /// The key popped as due at `due` woke and may start: with `rate` (`None`: no rate),
    /// among `keys` keys. The next key wakes a gap later (the spread).
    #[inline]
    pub(super) fn woke(&mut self, due: u64, rate: Option<&Gcra>, keys: usize) {
        self.spread.woke(due, rate, keys);
    }

    /// When the earliest sleeper wakes (the spread may hold it back).
    pub(super) fn earliest(&self) -> Option<u64> {
        self.heap
            .peek()
            .map(|Reverse(sleeper)| sleeper.at.max(self.spread.at))
    }

    pub(super) fn clear(&mut self) {
        self.heap.clear();
        self.spread = Spread::default();
    }
}

/// The whole map's rate and its state.
#[derive(Debug, Clone, Copy)]
pub(super) struct MapRate {
    gcra: Gcra,
    tat: u64,
}

impl MapRate {
    pub(super) fn new(gcra: Gcra) -> Self {
        Self { gcra, tat: 0 }
    }

    /// When the map's rate allows its next start.
    #[inline]
    pub(super) fn allowed_at(&self) -> u64 {
        self.gcra.allowed_at(self.tat)
    }

    /// How many starts the rate allows at `now`.
    pub(super) fn starts_allowed(&self, now: u64) -> u64 {
        self.gcra.starts_allowed(self.tat, now)
    }

    /// Counts a start at `now` (which the rate allows).
    #[inline]
    pub(super) fn start(&mut self, now: u64) {
        self.tat = self
            .gcra
            .decide(self.tat, now)
            .expect("the map's rate allows it");
    }

    /// The rate changed to `gcra` at `now`: the starts the state is ahead by carry over,
    /// spaced by the new rate (a map without a rate so far starts fresh).
    pub(super) fn changed(old: Option<Self>, gcra: Gcra, now: u64) -> Self {
        let tat = old.map_or(0, |old| gcra.carry_over(&old.gcra, old.tat, now));
        Self { gcra, tat }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limit::rate::Rate;

    const MS: u64 = 1_000_000;

    /// Wakes every sleeper it can at `now`, as the scheduler does: each woken key has
    /// `rate` among `keys` keys. Returns the keys woken.
    fn wake_all(
        sleepers: &mut Sleepers<u32>,
        now: u64,
        rate: Option<&Gcra>,
        keys: usize,
    ) -> Vec<u32> {
        let mut woken = Vec::new();
        while let Some((at, key)) = sleepers.pop_due(now) {
            sleepers.woke(at, rate, keys);
            woken.push(key);
        }
        woken
    }

    #[test]
    fn keys_due_together_wake_a_gap_apart_in_the_order_they_slept() {
        let rate = Gcra::new(Rate::per_second(20));
        let mut sleepers = Sleepers::new();
        for key in 0..4 {
            sleepers.push(50 * MS, key);
        }
        assert_eq!(wake_all(&mut sleepers, 50 * MS, Some(&rate), 4), [0]);
        // 50 ms / (2 × 4 keys) is more than the longest gap: 1 ms.
        assert_eq!(sleepers.earliest(), Some(51 * MS));
        assert_eq!(
            wake_all(&mut sleepers, 51 * MS - 1, Some(&rate), 4),
            [] as [u32; 0]
        );
        assert_eq!(wake_all(&mut sleepers, 51 * MS, Some(&rate), 4), [1]);
        assert_eq!(wake_all(&mut sleepers, 52 * MS, Some(&rate), 4), [2]);
        assert_eq!(wake_all(&mut sleepers, 53 * MS, Some(&rate), 4), [3]);
        assert_eq!(sleepers.earliest(), None);
    }

    #[test]
    fn a_late_wake_up_catches_up_on_the_gaps_it_owes() {
        let rate = Gcra::new(Rate::per_second(20));
        let mut sleepers = Sleepers::new();
        for key in 0..4 {
            sleepers.push(50 * MS, key);
        }
        // The timer fired 2.5 ms late: the keys of the first three gaps wake now.
        assert_eq!(
            wake_all(&mut sleepers, 52 * MS + MS / 2, Some(&rate), 4),
            [0, 1, 2]
        );
        assert_eq!(sleepers.earliest(), Some(53 * MS));
    }

    #[test]
    fn the_gap_leaves_each_key_half_its_interval_at_most() {
        // 100 keys at 200/s: 5 ms per start, 25 µs of gap per key.
        let rate = Gcra::new(Rate::per_second(200));
        let mut sleepers = Sleepers::new();
        sleepers.push(10 * MS, 0);
        sleepers.push(10 * MS, 1);
        assert_eq!(wake_all(&mut sleepers, 10 * MS, Some(&rate), 100), [0]);
        assert_eq!(sleepers.earliest(), Some(10 * MS + 25_000));
        // A rate so high that its interval is a few nanoseconds leaves no gap.
        let fast = Gcra::new(Rate::per_second(1_000_000_000));
        let mut sleepers = Sleepers::new();
        sleepers.push(10, 0);
        sleepers.push(10, 1);
        assert_eq!(wake_all(&mut sleepers, 10, Some(&fast), 20), [0, 1]);
    }

    #[test]
    fn keys_without_a_rate_wake_together() {
        let mut sleepers = Sleepers::new();
        for key in 0..3 {
            sleepers.push(7 * MS, key);
        }
        assert_eq!(wake_all(&mut sleepers, 7 * MS, None, 3), [0, 1, 2]);
    }

    #[test]
    fn keys_due_apart_are_not_held_back() {
        let rate = Gcra::new(Rate::per_second(20));
        let mut sleepers = Sleepers::new();
        sleepers.push(50 * MS, 0);
        sleepers.push(52 * MS, 1);
        assert_eq!(wake_all(&mut sleepers, 50 * MS, Some(&rate), 2), [0]);
        assert_eq!(sleepers.earliest(), Some(52 * MS));
        assert_eq!(wake_all(&mut sleepers, 52 * MS, Some(&rate), 2), [1]);
    }
}
