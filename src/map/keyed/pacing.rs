//! When keys may start, over the whole map: the map's rate, and the keys asleep until
//! their time (a key's own rate, pause and retries make it sleep; see `key.rs` for when
//! one key may start).
//!
//! Keys that wait only for time sleep in one heap ordered by when they may start, so the
//! map needs one timer, for the earliest of them.
//!
//! Invariants: an entry of the heap may be stale (its key moved since: the key's place
//! says another time); whoever pops it checks. Ties wake in the order keys fell asleep.

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

/// Keys waiting only for time, earliest first.
#[derive(Debug)]
pub(super) struct Sleepers<K> {
    heap: BinaryHeap<Reverse<Due<K>>>,
    /// The tie-breaker of the next key to fall asleep.
    order: u64,
}

impl<K> Sleepers<K> {
    pub(super) fn new() -> Self {
        Self {
            heap: BinaryHeap::new(),
            order: 0,
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
    /// slept until.
    pub(super) fn pop_due(&mut self, now: u64) -> Option<(u64, K)> {
        if self.heap.peek()?.0.at > now {
            return None;
        }
        let Reverse(Due { at, value: key, .. }) = self.heap.pop().expect("peeked");
        Some((at, key))
    }

    /// When the earliest sleeper wakes.
    pub(super) fn earliest(&self) -> Option<u64> {
        self.heap.peek().map(|Reverse(sleeper)| sleeper.at)
    }

    pub(super) fn clear(&mut self) {
        self.heap.clear();
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
