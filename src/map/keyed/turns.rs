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
//!   measured it) times its attempts in flight, this one included (at most [`MAX_DEPTH`]);
//!   the key with the lowest account goes next, ties in the order they came. The depth makes
//!   a key's second attempt at once cost twice its first, its third three times: while
//!   others wait, a key goes deeper only where it yields as much as a shallow one (a host
//!   probing its concurrency does it when slots are to spare, not at others' expense).
//!   The line's clock is the account of the last key that started. A key joining the line
//!   keeps what it is behind the clock up to [`BANK`] (1 s): a key its own limit or rate
//!   held below its share (a host that answers in 10 ms, one at a time, among hosts that
//!   answer in a second) goes before the keys at the clock until it has used what it
//!   could not, and a key away for long banks no more than that.
//!
//! Guarantees of slot time, with `L` the global limit, `n` the keys that may start, `c` a
//! start's charge (an attempt's latency, clamped to [`MIN_CHARGE`]..=[`MAX_CHARGE`], times
//! the attempts in flight: for a key one at a time, its latency) and `B` the bank (1 s):
//!
//! - **no key waits long**: a key joining the line is at most one charge of its own (`c_k`)
//!   ahead of the clock, and every other key, at most `B` behind it, starts before it only
//!   while its account is lower: its starts before it are charged at most `c_k + B` and one
//!   start more, and hold no more than they are charged. While the key waits every free
//!   slot goes to another key, so its wait is at most `d_max + (n − 1) × (c_k + B + c_max) / L`.
//! - **no key takes more than its share**: over any stretch in which two keys both may start
//!   throughout, the slot time charged to each differs by at most one charge of each plus
//!   `B`, and a key holds no more than it is charged: a key whose attempts take 25 times as
//!   long starts a 25th as often, and holds no more slots.
//!
//! A key's account is kept in 32 bits of its entry (units of about a microsecond, wrapping): an
//! account is never more than one charge ahead of the line's clock nor more than the bank
//! behind it when it counts, so its full value is its signed distance from the clock's low
//! bits.

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
    /// its attempts charges every start alike) times its attempts in flight, and the key
    /// charged least goes next. A host that answers in 20 ms starts 25 times as often as
    /// one that answers in 500 ms, and both hold the same share of the slots; a host goes
    /// deeper than one attempt at a time where that yields as much as others' first. No
    /// key that may start waits longer than `d_max + (n − 1) × (c_k + 1 s + c_max) / L`
    /// (`L` the global limit, `n` the keys that may start, `d_max` the longest latency, `c`
    /// a start's charge: its latency times its attempts in flight), and over any stretch in
    /// which two keys may start throughout, the slot time charged to each differs by at
    /// most one charge of each plus one second (what a key held below its share by its own
    /// limit or rate may catch up on); a key holds no more than it is charged.
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
/// The deepest a charge counts a key's attempts in flight: a key with more pays as for this
/// many (an account stays within 32 bits of the clock: `MAX_CHARGE × MAX_DEPTH` units).
const MAX_DEPTH: usize = 64;
/// The most slot time a key keeps to catch up on (the bank), in nanoseconds: one second.
const BANK: u64 = 1_000_000_000;

/// How many low bits of a [`Turn`]'s order count arrivals (ties of one account go in the
/// order they came; arrivals wrap after a million, which only reorders keys whose
/// accounts are equal to the microsecond).
const ARRIVAL_BITS: u32 = 20;

/// A key in the slot-time line: its order (its account in units, then its arrival, in
/// one word: one comparison a step of the heap), itself.
#[derive(Debug)]
struct Turn<K> {
    order: u64,
    key: K,
}

impl<K> PartialEq for Turn<K> {
    fn eq(&self, other: &Self) -> bool {
        self.order == other.order
    }
}

impl<K> Eq for Turn<K> {}

impl<K> PartialOrd for Turn<K> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<K> Ord for Turn<K> {
    /// The greatest is the lowest order (the heap pops it).
    #[inline]
    fn cmp(&self, other: &Self) -> Ordering {
        other.order.cmp(&self.order)
    }
}

/// The keys that may start now, in the order of the map's [`SlotPolicy`].
#[derive(Debug)]
pub(super) struct Turns<K> {
    /// The line under [`SlotPolicy::Turns`].
    fifo: VecDeque<K>,
    /// The line under [`SlotPolicy::SlotTime`] (boxed: a map that takes turns pays one
    /// word for it, and one test of it a step).
    fair: Option<Box<FairLine<K>>>,
}

/// The line of slot time.
#[derive(Debug)]
struct FairLine<K> {
    /// The keys that joined in order (each at or after the one before: most do, a key that
    /// just started joins behind the others), first in, first out; the others in a heap.
    /// The next key is the lower of their heads: a step costs O(1) while keys come back
    /// in order.
    in_order: VecDeque<Turn<K>>,
    heap: BinaryHeap<Turn<K>>,
    /// The line's clock (slot time, in units of 2^10 ns): the account of the last key
    /// that started.
    clock: u64,
    /// Arrivals so far, to break ties in order.
    arrivals: u64,
    /// The account of the key popped last, in full (units).
    popped: u64,
    /// The account the last charge gave, in its entry's low bits and in full.
    charged: (u32, u64),
}

impl<K> Turns<K> {
    pub(super) fn new() -> Self {
        Self {
            fifo: VecDeque::new(),
            fair: None,
        }
    }

    pub(super) fn policy(&self) -> SlotPolicy {
        if self.fair.is_some() {
            SlotPolicy::SlotTime
        } else {
            SlotPolicy::Turns
        }
    }

    /// Whether starts are charged (slot time).
    #[inline(always)]
    pub(super) fn is_charged(&self) -> bool {
        self.fair.is_some()
    }

    /// Shares the slots by `policy` (before any key is in the line).
    pub(super) fn set_policy(&mut self, policy: SlotPolicy) {
        debug_assert!(
            self.is_empty(),
            "a slot policy is set before the first item"
        );
        self.fair = match policy {
            SlotPolicy::Turns => None,
            SlotPolicy::SlotTime => Some(Box::new(FairLine {
                in_order: VecDeque::new(),
                heap: BinaryHeap::new(),
                clock: 0,
                arrivals: 0,
                popped: 0,
                charged: (0, 0),
            })),
        };
    }

    pub(super) fn is_empty(&self) -> bool {
        self.fifo.is_empty()
            && self
                .fair
                .as_ref()
                .is_none_or(|line| line.in_order.is_empty() && line.heap.is_empty())
    }

    pub(super) fn clear(&mut self) {
        self.fifo.clear();
        if let Some(line) = &mut self.fair {
            line.in_order.clear();
            line.heap.clear();
        }
    }

    /// `key`, whose entry keeps `account`, joins the line.
    #[inline]
    pub(super) fn push(&mut self, key: K, account: u32) {
        match &mut self.fair {
            None => self.fifo.push_back(key),
            Some(line) => line.push(key, account),
        }
    }

    /// The next key in line (checked by the scheduler: it may have moved since).
    #[inline]
    pub(super) fn pop(&mut self) -> Option<K> {
        match &mut self.fair {
            None => self.fifo.pop_front(),
            Some(line) => line.pop(),
        }
    }

    /// The account of a key made now: at the clock (0 under turns, which read none).
    #[inline]
    pub(super) fn fresh(&self) -> u32 {
        self.fair.as_ref().map_or(0, |line| line.clock as u32)
    }

    /// A key whose entry keeps `account` started an attempt expected to hold a slot for
    /// `latency` ns (`None`: not known), and has `in_flight` attempts running with it: its
    /// account after the charge (the latency times the attempts in flight), to keep in its
    /// entry. Turns charge nothing.
    #[inline]
    pub(super) fn charge(&mut self, account: u32, latency: Option<u64>, in_flight: usize) -> u32 {
        match &mut self.fair {
            None => account,
            Some(line) => line.charge(account, latency, in_flight),
        }
    }
}

impl<K> FairLine<K> {
    fn push(&mut self, key: K, account: u32) {
        self.arrivals += 1;
        let arrival = self.arrivals & ((1 << ARRIVAL_BITS) - 1);
        // The account the last charge gave, known in full: the key that just started.
        let full = match self.charged {
            (low, full) if low == account => {
                full.max(self.clock.saturating_sub(BANK >> UNIT_SHIFT))
            }
            _ => self.full(account),
        };
        let turn = Turn {
            order: (full << ARRIVAL_BITS) | arrival,
            key,
        };
        if self
            .in_order
            .back()
            .is_none_or(|last| last.order <= turn.order)
        {
            self.in_order.push_back(turn);
        } else {
            self.heap.push(turn);
        }
    }

    fn pop(&mut self) -> Option<K> {
        let from_heap = match (self.in_order.front(), self.heap.peek()) {
            (Some(first), Some(top)) => top.order < first.order,
            (None, Some(_)) => true,
            (_, None) => false,
        };
        let turn = if from_heap {
            self.heap.pop()?
        } else {
            self.in_order.pop_front()?
        };
        self.popped = turn.order >> ARRIVAL_BITS;
        self.clock = self.clock.max(self.popped);
        Some(turn.key)
    }

    fn charge(&mut self, account: u32, latency: Option<u64>, in_flight: usize) -> u32 {
        let per_attempt = latency.unwrap_or(0).clamp(MIN_CHARGE, MAX_CHARGE) >> UNIT_SHIFT;
        let cost = per_attempt * (in_flight.clamp(1, MAX_DEPTH) as u64);
        // The key just popped: its account in full is the one it was popped at.
        let from = if account == self.popped as u32 {
            self.popped
        } else {
            self.full(account)
        };
        let charged = from + cost;
        self.charged = (charged as u32, charged);
        charged as u32
    }

    /// The full value (in units) of an account whose low bits are `account`: its distance
    /// from the clock, but no further behind it than [`BANK`] (a key that could not use its
    /// share, held by its own limit or rate or out of work, keeps at most that much to
    /// catch up on). The low bits wrap every 2^32 units (about 73 minutes of the clock): an
    /// account away from the line for longer may read up to one charge ahead, never more.
    fn full(&self, account: u32) -> u64 {
        let floor = self.clock.saturating_sub(BANK >> UNIT_SHIFT);
        // The low bits' distance from the clock's, signed: an account is never more than
        // one charge (at most `MAX_CHARGE × MAX_DEPTH`) ahead of the clock.
        let distance = i64::from(account.wrapping_sub(self.clock as u32) as i32);
        if distance > ((MAX_CHARGE >> UNIT_SHIFT) * MAX_DEPTH as u64) as i64 {
            floor
        } else {
            self.clock.saturating_add_signed(distance).max(floor)
        }
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

    impl<K> Turns<K> {
        fn line(&mut self) -> &mut FairLine<K> {
            self.fair.as_mut().expect("slot time")
        }
    }

    /// `ns` in the accounts' units.
    fn units(ns: u64) -> u64 {
        ns >> UNIT_SHIFT
    }

    #[test]
    fn turns_go_in_the_order_they_came_whatever_they_cost() {
        let mut turns = Turns::new();
        let slow = turns.charge(0, Some(MAX_CHARGE), 1);
        turns.push("slow", slow);
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
        let (mut fast, mut slow) = (turns.fresh(), turns.fresh());
        turns.push("fast", fast);
        turns.push("slow", slow);
        let mut starts = (0, 0);
        for _ in 0..110 {
            match turns.pop().unwrap() {
                "fast" => {
                    starts.0 += 1;
                    fast = turns.charge(fast, Some(10_000_000), 1);
                    turns.push("fast", fast);
                }
                _ => {
                    starts.1 += 1;
                    slow = turns.charge(slow, Some(100_000_000), 1);
                    turns.push("slow", slow);
                }
            }
        }
        assert!((99..=101).contains(&starts.0), "{starts:?}");
    }

    #[test]
    fn a_key_held_below_its_share_keeps_at_most_a_second_to_catch_up_on() {
        let mut turns = fair();
        let fresh = turns.fresh();
        let fast = turns.charge(fresh, Some(10_000_000), 1);
        // The line's clock moves on to 5 s of slot time.
        let mut mover = turns.fresh();
        for _ in 0..6 {
            mover = turns.charge(mover, Some(MAX_CHARGE / 10), 1);
            turns.push("mover", mover);
            assert_eq!(turns.pop(), Some("mover"));
        }
        assert!(turns.line().clock >= units(5 * BANK));
        assert_eq!(turns.line().clock - turns.line().full(fast), units(BANK));
        // Within its bank, a key keeps what it is behind.
        let near = (turns.line().clock - units(BANK) / 2) as u32;
        assert_eq!(
            turns.line().clock - turns.line().full(near),
            units(BANK) / 2
        );
    }

    #[test]
    fn a_fast_key_back_from_its_attempt_goes_before_the_slow_keys_at_the_clock() {
        let mut turns = fair();
        let (slow, fast) = (Some(1_000_000_000), Some(10_000_000));
        let fresh = turns.fresh();
        let mut fast_account = turns.charge(fresh, fast, 1);
        let at = turns.charge(fresh, slow, 1);
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
                    fast_account = turns.charge(fast_account, fast, 1);
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
        turns.line().clock = u64::from(u32::MAX) - 5;
        let fresh = turns.fresh();
        let account = turns.charge(fresh, Some(MIN_CHARGE), 1);
        assert!(account < 1_000, "wrapped: {account}");
        assert_eq!(
            turns.line().full(account),
            turns.line().clock + units(MIN_CHARGE)
        );
        turns.push("wrapped", account);
        turns.push("before", turns.fresh());
        assert_eq!(turns.pop(), Some("before"));
        assert_eq!(turns.pop(), Some("wrapped"));
    }
}
