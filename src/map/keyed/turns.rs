//! Which key gets the next free global slot: the scheduler's slot seam.
//!
//! Keys that may start now wait in one line, in one of two orders ([`SlotPolicy`]):
//!
//! - **turns**: first in, first out; a key that starts goes to the back. Every key gets one
//!   start per turn, whatever its attempts cost: a key whose attempts take 500 ms holds 25
//!   times the slots of one whose attempts take 20 ms.
//! - **slot time**: start-time fair queueing on the time each start holds a slot. The line is
//!   ordered by each key's *account*, a point on a virtual clock; a start charges the key's
//!   account its expected slot time (the latency its attempts take, as the key's adaptation
//!   measured it); the key with the lowest account goes next, ties in the order they came.
//!   The line's clock is the account of the last key that started, and a key joining the
//!   line further behind it than one start's cost is brought up to that, so an idle key
//!   banks one start at most: a fast key back from its attempt goes before the slow keys
//!   at the clock, not behind every one of them.
//!
//! Guarantees of slot time, with `L` the global limit, `n` the keys that may start and `d`
//! an attempt's latency as charged (clamped to [`MIN_CHARGE`]..=[`MAX_CHARGE`]):
//!
//! - **no key waits long**: a key joining the line is at most one charge of its own (`d_k`)
//!   ahead of the clock, and every other key, at most one charge of its own behind it,
//!   starts before it only while its account is lower, which two more starts take past
//!   it; while it waits every free slot goes to another key, so the slots' time spent
//!   before its start is at most what those starts hold plus what was running when it
//!   joined: its wait is at most `d_max + (n − 1) × (d_k + 2 × d_max) / L`.
//! - **no key takes more than its share**: over any stretch in which two keys both may start,
//!   the slot time charged to each differs by at most two charges of each (one it may
//!   bank, one in hand): a key whose attempts take 25 times as long starts a 25th as often,
//!   and holds no more slots.
//!
//! A key's account is kept in 32 bits of its entry (units of about a microsecond, wrapping): an
//! account is never more than one charge ahead of the line's clock, so its full value is
//! its distance ahead of the clock's low bits.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

/// How a keyed map shares its global slots among the keys that may start.
///
/// An adaptive map (`.adaptive(..)`) shares them by [`SlotTime`](Self::SlotTime): it
/// times every attempt, so it knows what a start of each key costs. Every other keyed map
/// takes [`Turns`](Self::Turns). Set it with
/// [`slot_policy`](crate::futures::MapAsync::slot_policy).
///
/// # Examples
///
/// ```
/// use tollgate::{Adaptive, Outcome, SlotPolicy};
///
/// # futures_lite::future::block_on(async {
/// // Plain turns on an adaptive map: every host one start per turn.
/// let pages = tollgate::map_async(0..100u32, 16, |i| async move { Ok::<u32, ()>(i) })
///     .per_key(|i| i % 8, 4)
///     .adaptive(Adaptive::new(1, 4), |_| Outcome::success())
///     .slot_policy(SlotPolicy::Turns)
///     .await;
/// assert_eq!(pages.len(), 100);
/// # });
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SlotPolicy {
    /// Keys take turns: each key that may start gets one start in turn, however long its
    /// attempts hold a slot. A key whose attempts take 25 times as long holds 25 times the
    /// slots.
    Turns,
    /// Keys share the slots' time: each start is charged the time the key's attempts hold a
    /// slot (their latency, as the key's adaptation measured it; a map that does not time
    /// its attempts charges every start alike), and the key charged least goes next. A host
    /// that answers in 20 ms starts 25 times as often as one that answers in 500 ms, and
    /// both hold the same share of the slots. No key that may start waits longer than
    /// `d_max + (n − 1) × (d_k + 2 × d_max) / L` (`L` the global limit, `n` the keys that
    /// may start, `d_k` its attempts' latency and `d_max` the longest), and over any
    /// stretch in which two keys may start, the slot time their starts hold differs by at
    /// most two attempts of each.
    SlotTime,
}

/// The unit of an account: 2^10 ns, about a microsecond.
const UNIT_SHIFT: u32 = 10;
/// The least a start is charged, in nanoseconds: a key whose latency is not
/// known yet (or a map that does not time attempts) pays this.
const MIN_CHARGE: u64 = 1_000_000;
/// The most a start is charged, in nanoseconds: a latency above it (a server that hangs
/// until the attempt's timeout) charges this.
const MAX_CHARGE: u64 = 10_000_000_000;
/// The most slot time a key keeps to catch up on, in nanoseconds: one second. A key held
/// below its share by its own limit or rate (a host that answers in 10 ms, one at a time,
/// among hosts that answer in a second) goes before keys at the clock until it has used
/// what it could not; a key away for longer keeps no more than this.
const BANK: u64 = 1_000_000_000;

/// A key in the slot-time line: its account (full value), its arrival, itself.
#[derive(Debug)]
struct Turn<K> {
    account: u64,
    arrival: u64,
    key: K,
}

impl<K> PartialEq for Turn<K> {
    fn eq(&self, other: &Self) -> bool {
        self.arrival == other.arrival
    }
}

impl<K> Eq for Turn<K> {}

impl<K> PartialOrd for Turn<K> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<K> Ord for Turn<K> {
    /// The greatest is the lowest account, then the earliest arrival (the heap pops it).
    fn cmp(&self, other: &Self) -> Ordering {
        (other.account, other.arrival).cmp(&(self.account, self.arrival))
    }
}

/// The keys that may start now, in the order of the map's [`SlotPolicy`].
#[derive(Debug)]
pub(super) struct Turns<K> {
    /// The line under [`SlotPolicy::Turns`].
    fifo: VecDeque<K>,
    /// The line under [`SlotPolicy::SlotTime`].
    fair: BinaryHeap<Turn<K>>,
    policy: SlotPolicy,
    /// The line's clock (slot time): the account of the last key that started.
    clock: u64,
    /// Arrivals so far, to break ties in order.
    arrivals: u64,
}

impl<K> Turns<K> {
    pub(super) fn new() -> Self {
        Self {
            fifo: VecDeque::new(),
            fair: BinaryHeap::new(),
            policy: SlotPolicy::Turns,
            clock: 0,
            arrivals: 0,
        }
    }

    pub(super) fn policy(&self) -> SlotPolicy {
        self.policy
    }

    /// Shares the slots by `policy` (before any key is in the line).
    pub(super) fn set_policy(&mut self, policy: SlotPolicy) {
        debug_assert!(
            self.is_empty(),
            "a slot policy is set before the first item"
        );
        self.policy = policy;
    }

    pub(super) fn is_empty(&self) -> bool {
        self.fifo.is_empty() && self.fair.is_empty()
    }

    pub(super) fn clear(&mut self) {
        self.fifo.clear();
        self.fair.clear();
    }

    /// `key`, whose entry keeps `account`, joins the line.
    #[inline]
    pub(super) fn push(&mut self, key: K, account: u32) {
        match self.policy {
            SlotPolicy::Turns => self.fifo.push_back(key),
            SlotPolicy::SlotTime => {
                let account = self.full(account);
                self.arrivals += 1;
                self.fair.push(Turn {
                    account,
                    arrival: self.arrivals,
                    key,
                });
            }
        }
    }

    /// The next key in line (checked by the scheduler: it may have moved since).
    #[inline]
    pub(super) fn pop(&mut self) -> Option<K> {
        match self.policy {
            SlotPolicy::Turns => self.fifo.pop_front(),
            SlotPolicy::SlotTime => {
                let turn = self.fair.pop()?;
                self.clock = self.clock.max(turn.account);
                Some(turn.key)
            }
        }
    }

    /// A key whose entry keeps `account` started an attempt expected to hold a slot for
    /// `latency` ns (`None`: not known): its account after the charge, to keep in its
    /// entry. Turns charge nothing.
    #[inline]
    pub(super) fn charge(&self, account: u32, latency: Option<u64>) -> u32 {
        if self.policy == SlotPolicy::Turns {
            return account;
        }
        let charged = self.full(account) + latency.unwrap_or(0).clamp(MIN_CHARGE, MAX_CHARGE);
        (charged >> UNIT_SHIFT) as u32
    }

    /// The account of a key made now: at the clock.
    #[inline]
    pub(super) fn fresh(&self) -> u32 {
        (self.clock >> UNIT_SHIFT) as u32
    }

    /// The full value of an account whose low bits are `account`: its distance from the
    /// clock, but no further behind it than [`BANK`] (a key that could not use its share,
    /// held by its own limit or rate or out of work, keeps at most that much to catch up
    /// on). The low bits wrap every 2^32 units (about 73 minutes of the clock): an account
    /// away from the line for longer may read up to one charge ahead, never more.
    fn full(&self, account: u32) -> u64 {
        let clock = self.clock >> UNIT_SHIFT;
        let floor = clock.saturating_sub(BANK >> UNIT_SHIFT);
        // The low bits' distance from the clock's, signed: an account is never more than
        // one charge ahead of the clock.
        let distance = i64::from(account.wrapping_sub(clock as u32) as i32);
        let units = if distance > (MAX_CHARGE >> UNIT_SHIFT) as i64 {
            floor
        } else {
            clock.saturating_add_signed(distance).max(floor)
        };
        units << UNIT_SHIFT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fair() -> Turns<&'static str> {
        let mut turns = Turns::new();
        turns.set_policy(SlotPolicy::SlotTime);
        turns
    }

    #[test]
    fn turns_go_in_the_order_they_came_whatever_they_cost() {
        let mut turns = Turns::new();
        turns.push("slow", turns.charge(0, Some(MAX_CHARGE)));
        turns.push("fast", 0);
        assert_eq!(turns.pop(), Some("slow"));
        assert_eq!(turns.pop(), Some("fast"));
        assert_eq!(turns.pop(), None);
    }

    #[test]
    fn a_start_that_holds_a_slot_longer_waits_longer_for_the_next() {
        // Two keys, one whose attempts take 10 ms, one 100 ms, each always ready again: in
        // 110 starts the fast one gets 100 and the slow one 10 (equal slot time).
        let mut turns = fair();
        let (mut fast, mut slow) = (0u32, 0u32);
        turns.push("fast", fast);
        turns.push("slow", slow);
        let mut starts = (0, 0);
        for _ in 0..110 {
            match turns.pop().unwrap() {
                "fast" => {
                    starts.0 += 1;
                    fast = turns.charge(fast, Some(10_000_000));
                    turns.push("fast", fast);
                }
                _ => {
                    starts.1 += 1;
                    slow = turns.charge(slow, Some(100_000_000));
                    turns.push("slow", slow);
                }
            }
        }
        assert!((99..=101).contains(&starts.0), "{starts:?}");
    }

    #[test]
    fn a_key_held_below_its_share_keeps_at_most_a_second_to_catch_up_on() {
        let mut turns = fair();
        let fast = turns.charge(turns.fresh(), Some(10_000_000));
        // The line's clock moves on to 5 s of slot time.
        let mut mover = turns.fresh();
        for _ in 0..6 {
            mover = turns.charge(mover, Some(MAX_CHARGE / 10));
            turns.push("mover", mover);
            assert_eq!(turns.pop(), Some("mover"));
        }
        assert!(turns.clock >= 5 * BANK);
        let unit = 1 << UNIT_SHIFT;
        assert!((turns.clock - turns.full(fast)).abs_diff(BANK) < unit);
        // Within its bank, a key keeps what it is behind.
        let near = turns.clock - BANK / 2;
        let near = (near >> UNIT_SHIFT) as u32;
        assert!((turns.clock - turns.full(near)).abs_diff(BANK / 2) < unit);
    }

    #[test]
    fn a_fast_key_back_from_its_attempt_goes_before_the_slow_keys_at_the_clock() {
        let mut turns = fair();
        let (slow, fast) = (Some(1_000_000_000), Some(10_000_000));
        let mut fast_account = turns.charge(turns.fresh(), fast);
        let at = turns.charge(turns.fresh(), slow);
        for key in ["a", "b", "c"] {
            turns.push(key, at);
        }
        assert_eq!(turns.pop(), Some("a"));
        // The fast key is 990 ms behind the clock: about 99 starts before the next slow key.
        let mut fast_starts = 0;
        loop {
            turns.push("fast", fast_account);
            match turns.pop() {
                Some("fast") => {
                    fast_starts += 1;
                    fast_account = turns.charge(fast_account, fast);
                }
                Some(other) => {
                    assert_eq!(other, "b");
                    break;
                }
                None => unreachable!(),
            }
        }
        assert!((98..=100).contains(&fast_starts), "{fast_starts}");
    }

    #[test]
    fn accounts_wrap_without_losing_their_order() {
        let mut turns = fair();
        turns.clock = (u64::from(u32::MAX) - 5) << UNIT_SHIFT;
        let account = turns.charge(turns.fresh(), Some(MIN_CHARGE));
        assert!(account < 1_000, "wrapped: {account}");
        let full = turns.full(account);
        assert!(full > turns.clock, "ahead of the clock after the wrap");
        assert!(full - turns.clock <= MIN_CHARGE, "by one charge");
    }
}
