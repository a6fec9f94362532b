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

/// How many low bits of a [`Turn`]'s order in the heap count arrivals (ties of one account
/// go in the order they came; arrivals wrap after a million, which only reorders keys whose
/// accounts are equal to the microsecond).
const ARRIVAL_BITS: u32 = 20;

/// A key in the slot-time line: its order, itself. In the heap the order is its account in
/// units, then its arrival, in one word (one comparison a step of the heap); in order it
/// is its account alone (its place keeps its arrival).
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

/// The bank in units.
const BANK_UNITS: u64 = BANK >> UNIT_SHIFT;
/// The most an account runs ahead of the clock, in units: one charge at its deepest.
const MAX_AHEAD: u64 = (MAX_CHARGE >> UNIT_SHIFT) * MAX_DEPTH as u64;
/// Where an account may lie, in units above the floor (the clock less the bank): from the
/// floor to one charge ahead of the clock. Below 2^31: the low bits' distance tells it.
const SPAN: u32 = (BANK_UNITS + MAX_AHEAD) as u32;
const _: () = assert!(BANK_UNITS + MAX_AHEAD < 1 << 31);

/// The keys that may start now, in the order of the map's [`SlotPolicy`].
#[derive(Debug)]
pub(super) struct Turns<K> {
    /// The line under [`SlotPolicy::Turns`].
    fifo: VecDeque<K>,
    /// The line under [`SlotPolicy::SlotTime`] (empty under turns: a map that takes turns
    /// pays its few empty words, held in place so that a step of slot time follows no
    /// pointer).
    fair: FairLine<K>,
    /// Whether the policy is slot time: which of the two lines is in use.
    charged: bool,
}

/// The line of slot time.
#[derive(Debug)]
struct FairLine<K> {
    /// The keys that joined in order (each at or after the one before: most do, a key that
    /// just started joins behind the others), first in, first out; the others in a heap.
    /// The next key is the lower of their heads: a step costs O(1) while keys come back
    /// in order. A key in order needs no arrival in its order (its place keeps it), and
    /// wins a tie with the heap's head: a key goes to the heap only behind a later account
    /// of the keys in order, so every key in order with its account came before it.
    in_order: VecDeque<Turn<K>>,
    heap: BinaryHeap<Turn<K>>,
    /// The account of the last key in `in_order` (stale while it is empty): one
    /// comparison tells whether a key joins in order, without finding the deque's back.
    last: u64,
    /// The line's clock (slot time, in units of 2^10 ns): the account of the last key
    /// that started. It starts at the bank, so the floor below it never goes under zero.
    clock: u64,
    /// Keys that went to the heap so far, to break its ties in the order they came.
    arrivals: u64,
    /// The account of the key popped last, in full (units).
    popped: u64,
}

impl<K> Turns<K> {
    pub(super) fn new() -> Self {
        Self {
            fifo: VecDeque::new(),
            fair: FairLine {
                in_order: VecDeque::new(),
                heap: BinaryHeap::new(),
                last: 0,
                clock: BANK_UNITS,
                arrivals: 0,
                popped: BANK_UNITS,
            },
            charged: false,
        }
    }

    pub(super) fn policy(&self) -> SlotPolicy {
        if self.charged {
            SlotPolicy::SlotTime
        } else {
            SlotPolicy::Turns
        }
    }

    /// Whether starts are charged (slot time).
    #[inline(always)]
    pub(super) fn is_charged(&self) -> bool {
        self.charged
    }

    /// Shares the slots by `policy` (before any key is in the line).
    pub(super) fn set_policy(&mut self, policy: SlotPolicy) {
        debug_assert!(
            self.is_empty(),
            "a slot policy is set before the first item"
        );
        self.charged = policy == SlotPolicy::SlotTime;
    }

    pub(super) fn is_empty(&self) -> bool {
        self.fifo.is_empty() && self.fair.in_order.is_empty() && self.fair.heap.is_empty()
    }

    pub(super) fn clear(&mut self) {
        self.fifo.clear();
        self.fair.in_order.clear();
        self.fair.heap.clear();
    }

    /// `key`, whose entry keeps `account`, joins the line.
    #[inline]
    pub(super) fn push(&mut self, key: K, account: u32) {
        if self.charged {
            self.fair.push(key, account);
        } else {
            self.fifo.push_back(key);
        }
    }

    /// The next key in line (checked by the scheduler: it may have moved since).
    #[inline]
    pub(super) fn pop(&mut self) -> Option<K> {
        if self.charged {
            self.fair.pop()
        } else {
            self.fifo.pop_front()
        }
    }

    /// The account of a key made now: at the clock (turns read none).
    #[inline]
    pub(super) fn fresh(&self) -> u32 {
        self.fair.clock as u32
    }

    /// A key whose entry keeps `account` started an attempt expected to hold a slot for
    /// `latency` ns (`None`: not known), and has `in_flight` attempts running with it (at
    /// least this one): its account after the charge (the latency times the attempts in
    /// flight), to keep in its entry. Turns charge nothing.
    #[inline]
    pub(super) fn charge(&mut self, account: u32, latency: Option<u64>, in_flight: usize) -> u32 {
        if self.charged {
            self.fair.charge(account, latency, in_flight)
        } else {
            account
        }
    }
}

impl<K> FairLine<K> {
    #[inline]
    fn push(&mut self, key: K, account: u32) {
        let full = self.full(account);
        if full >= self.last || self.in_order.is_empty() {
            self.last = full;
            self.in_order.push_back(Turn { order: full, key });
        } else {
            self.push_heap(key, full);
        }
    }

    /// A key whose account (`full`) is below the last key's in order joins the heap (out
    /// of line: keys mostly come back in order).
    #[inline(never)]
    fn push_heap(&mut self, key: K, full: u64) {
        let arrival = self.arrivals & ((1 << ARRIVAL_BITS) - 1);
        self.arrivals += 1;
        self.heap.push(Turn {
            order: (full << ARRIVAL_BITS) | arrival,
            key,
        });
    }

    #[inline]
    fn pop(&mut self) -> Option<K> {
        let (account, key) = if self.heap.is_empty() {
            let turn = self.in_order.pop_front()?;
            (turn.order, turn.key)
        } else {
            self.pop_either()
        };
        self.popped = account;
        self.clock = self.clock.max(account);
        Some(key)
    }

    /// The lower of the two heads, the heap holding one, and its account (out of line:
    /// keys mostly come back in order).
    #[inline(never)]
    fn pop_either(&mut self) -> (u64, K) {
        let from_heap = match (self.heap.peek(), self.in_order.front()) {
            (Some(top), Some(first)) => top.order < first.order << ARRIVAL_BITS,
            (top, _) => top.is_some(),
        };
        if from_heap {
            let turn = self.heap.pop().expect("the heap holds a key");
            (turn.order >> ARRIVAL_BITS, turn.key)
        } else {
            let turn = self.in_order.pop_front().expect("a key in order");
            (turn.order, turn.key)
        }
    }

    #[inline]
    fn charge(&mut self, account: u32, latency: Option<u64>, in_flight: usize) -> u32 {
        debug_assert!(in_flight >= 1, "the attempt charged is in flight");
        // At most `MAX_AHEAD` (below 2^30): the low bits hold it.
        let per_attempt = (latency.unwrap_or(0).clamp(MIN_CHARGE, MAX_CHARGE) >> UNIT_SHIFT) as u32;
        let cost = per_attempt * in_flight.min(MAX_DEPTH) as u32;
        // The key just popped: its account is the one it was popped at (its low bits
        // differ only where the floor lifted it, and then reading it again finds the floor).
        let from = if account == self.popped as u32 {
            account
        } else {
            self.full(account) as u32
        };
        from.wrapping_add(cost)
    }

    /// The full value (in units) of an account whose low bits are `account`: its distance
    /// from the clock, but no further behind it than [`BANK`] (a key that could not use its
    /// share, held by its own limit or rate or out of work, keeps at most that much to
    /// catch up on). The low bits wrap every 2^32 units (about 73 minutes of the clock): an
    /// account away from the line for longer may read up to one charge ahead, never more.
    #[inline]
    fn full(&self, account: u32) -> u64 {
        // The low bits' distance above the floor (the clock less the bank), unsigned: an
        // account more than the bank behind the clock wraps far above `SPAN`, as does one
        // further ahead than one charge (`MAX_AHEAD`: never, but for one away past a wrap);
        // both read as the floor. One comparison where a signed distance takes two.
        let above = account
            .wrapping_sub(self.clock as u32)
            .wrapping_add(BANK_UNITS as u32);
        let above = if above > SPAN { 0 } else { above };
        self.clock - BANK_UNITS + u64::from(above)
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
            assert!(self.charged, "slot time");
            &mut self.fair
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

    #[test]
    fn an_account_reads_in_full_from_the_floor_to_one_charge_ahead() {
        let mut turns = fair();
        // At its start the clock is the bank: the floor is zero, nothing reads below it.
        assert_eq!(turns.line().clock, units(BANK));
        assert_eq!(turns.line().full(0), 0);
        assert_eq!(turns.line().full(u32::MAX), 0);
        // Both sides of each edge, with the clock's low bits away from a wrap and across one.
        for clock in [
            7 * units(BANK) + 12_345,
            u64::from(u32::MAX) + 3 * units(BANK) / 2,
        ] {
            let line = turns.line();
            line.clock = clock;
            let floor = clock - units(BANK);
            assert_eq!(line.full(clock as u32), clock);
            assert_eq!(line.full(floor as u32), floor, "the bank's edge is kept");
            assert_eq!(
                line.full((floor - 1) as u32),
                floor,
                "past the bank: the floor"
            );
            assert_eq!(line.full((clock - 1_000) as u32), clock - 1_000);
            assert_eq!(line.full((clock + MAX_AHEAD) as u32), clock + MAX_AHEAD);
            // Further ahead than one charge: only an account away past a wrap reads so.
            assert_eq!(line.full((clock + MAX_AHEAD + 1) as u32), floor);
        }
    }

    #[test]
    fn keys_out_of_order_go_by_account_and_ties_in_the_order_they_came() {
        let mut turns = fair();
        let at = |turns: &mut Turns<&'static str>, ahead: u64| (turns.line().clock + ahead) as u32;
        for (key, ahead) in [("a", 100), ("b", 50), ("c", 50), ("d", 100), ("e", 75)] {
            let account = at(&mut turns, ahead);
            turns.push(key, account);
        }
        // a and d joined in order; b, c and e behind a later account, in the heap.
        assert_eq!(turns.line().in_order.len(), 2);
        assert_eq!(turns.line().heap.len(), 3);
        let order: Vec<_> = std::iter::from_fn(|| turns.pop()).collect();
        assert_eq!(order, ["b", "c", "e", "a", "d"]);
        // A tie between a key in order and the heap's head: the one in order came first.
        for (key, ahead) in [("x", 10), ("y", 20), ("z", 10)] {
            let account = at(&mut turns, ahead);
            turns.push(key, account);
        }
        assert_eq!(turns.line().heap.len(), 1, "z went to the heap");
        let order: Vec<_> = std::iter::from_fn(|| turns.pop()).collect();
        assert_eq!(order, ["x", "z", "y"]);
    }

    #[test]
    fn a_key_joins_in_order_once_the_line_has_emptied() {
        let mut turns = fair();
        let clock = turns.line().clock;
        turns.push("a", (clock + 100) as u32);
        assert_eq!(turns.pop(), Some("a"));
        // The last key in order left: a lower account joins in order, not the heap.
        turns.push("b", (clock + 50) as u32);
        turns.push("c", (clock + 60) as u32);
        assert!(turns.line().heap.is_empty());
        assert_eq!(turns.pop(), Some("b"));
        assert_eq!(turns.pop(), Some("c"));
        assert_eq!(turns.pop(), None);
    }

    #[test]
    fn a_charge_counts_the_attempts_in_flight_from_the_account_it_was_popped_at() {
        let mut turns = fair();
        turns.line().clock = 10 * units(BANK);
        let clock = turns.line().clock;
        let at = clock as u32;
        assert_eq!(
            turns.charge(at, Some(10_000_000), 3),
            (clock + 3 * units(10_000_000)) as u32
        );
        // Deeper than the deepest counts as the deepest; a latency past the most, the most.
        assert_eq!(
            turns.charge(at, Some(2 * MAX_CHARGE), 1_000),
            (clock + MAX_AHEAD) as u32
        );
        // A key far behind is popped at the floor, and charged from there.
        turns.push("behind", (clock - 3 * units(BANK)) as u32);
        assert_eq!(turns.pop(), Some("behind"));
        let floor = clock - units(BANK);
        assert_eq!(
            turns.charge((clock - 3 * units(BANK)) as u32, None, 1),
            (floor + units(MIN_CHARGE)) as u32
        );
        assert_eq!(turns.line().clock, clock, "a key behind leaves the clock");
    }

    #[test]
    fn the_one_comparison_reads_an_account_as_its_signed_distance_does() {
        // The reading by signed distance from the clock, clamped to the floor: what the
        // unsigned distance above the floor replaces.
        let signed = |clock: u64, account: u32| {
            let floor = clock.saturating_sub(units(BANK));
            let distance = i64::from(account.wrapping_sub(clock as u32) as i32);
            if distance > MAX_AHEAD as i64 {
                floor
            } else {
                clock.saturating_add_signed(distance).max(floor)
            }
        };
        let mut turns = fair();
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..2_000 {
            let clock = units(BANK) + next() % (1 << 40);
            turns.line().clock = clock;
            let near = [0, 1, units(BANK), units(BANK) + 1, MAX_AHEAD, MAX_AHEAD + 1];
            for offset in near {
                for account in [clock + offset, clock.wrapping_sub(offset)] {
                    let account = account as u32;
                    assert_eq!(turns.line().full(account), signed(clock, account));
                }
            }
            let account = next() as u32;
            assert_eq!(turns.line().full(account), signed(clock, account));
        }
    }
}
