//! Admission for keyed work: which pulled item may start next, and when.
//!
//! Pure bookkeeping, no futures and no clock of its own: the keyed map queues every pulled
//! item here and asks what to start whenever a global slot is free, passing the time.
//! Items wait in their key's queue, holding no global slot, until their key has room
//! (fewer than the per-key limit running) and its time has come:
//! - the key's rate (GCRA on one `u64` per key) allows another start;
//! - the key is not paused (a server asked the whole host to wait);
//! - for an item coming back after a failed attempt, its not-before time has passed.
//!
//! Keys that may start now take turns (round robin), so no key starves while others have
//! work; within a key, items that come back from a failed attempt go before fresh ones
//! (they were pulled earlier), and fresh ones start in the order they were pulled. Keys
//! that wait only for time sleep in one heap ordered by when they may start, so the map
//! needs one timer, for the earliest of them.
//!
//! A key is forgotten once it has nothing running or waiting and its rate, pause and
//! retry budget would decide like a fresh key's: the map never outgrows the work in hand
//! and the keys seen recently. A rate and a pause lapse with time; a retry budget that
//! was spent lapses once the map has pulled [`BUDGET_MEMORY`] items since the key last
//! had anything running or waiting (a key that keeps coming back within that is held to
//! its whole budget; one that comes back later starts afresh).

use std::cmp::{Ordering, Reverse};
use std::collections::hash_map::Entry;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::hash::Hash;

use super::shared::LaterReason;
use crate::limit::rate::gcra::Gcra;

/// How many items the map pulls, after a key last had anything running or waiting,
/// before the key's spent retry budget lapses and the key may be forgotten. A window of
/// the input rather than of time: the keys it keeps are at most the keys of that many
/// items, whatever the throughput.
pub(crate) const BUDGET_MEMORY: u64 = 16_384;

/// How far below a whole retry a budget's balance may be and still pay for one: what
/// adding up ratios in floating point loses (far less than any ratio's share of one).
const ROUNDING: f64 = 1e-9;

/// An item back from a failed attempt, with the time before which it may not start.
#[derive(Debug)]
struct Delayed<T> {
    not_before: u64,
    /// Its place in the input: ties start in input order.
    order: u64,
    item: T,
}

impl<T> PartialEq for Delayed<T> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl<T> Eq for Delayed<T> {}
impl<T> PartialOrd for Delayed<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<T> Ord for Delayed<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.not_before, self.order).cmp(&(other.not_before, other.order))
    }
}

/// Where a key is in the scheduler's lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// In no line: nothing to start, no room, or asking its shared limits.
    Out,
    /// In `turns`: may start now (checked again when its turn comes).
    Turn,
    /// In `askers`: may ask its shared limits for a permit now.
    Ask,
    /// In `sleepers`, waking at this time.
    Asleep(u64),
}

#[derive(Debug)]
struct KeyState<T> {
    running: usize,
    fresh: VecDeque<T>,
    /// Items back from a failed attempt, earliest first.
    delayed: BinaryHeap<Reverse<Delayed<T>>>,
    /// GCRA state of the key's rate (0: fresh).
    tat: u64,
    /// No start before this time (a pause asked by the server).
    paused_until: u64,
    /// Retry budget spent: 0 for a fresh key, up by 1 per retry, down by the budget's
    /// ratio per first attempt (never below what a fresh key could hold).
    spent: f64,
    /// Items the map had pulled when the key last finished an attempt: once it has
    /// nothing running or waiting, its spent budget lapses [`BUDGET_MEMORY`] pulls later.
    quiet_since: u64,
    place: Place,
}

/// Where a key of a map with shared limits stands with them. Kept beside the key states,
/// not in them: a map without shared limits carries none of it.
#[derive(Debug, Clone, Copy)]
struct Asked {
    /// Permits granted, not yet taken by a start (the map holds the permits).
    granted: usize,
    /// Whether an ask is in flight.
    asking: bool,
    /// No ask before this time (the limits said "later").
    later_until: u64,
    /// Why the limits said "later" (meaningful while `later_until` is ahead).
    reason: LaterReason,
    /// No ask before this time even if the key is woken earlier: the floor after the last
    /// "later", so a wake-up that is always ready cannot make the key ask in a loop.
    floor_until: u64,
}

impl Asked {
    /// Whether the entry says nothing a fresh one would not.
    fn is_empty(&self) -> bool {
        self.granted == 0 && !self.asking && self.later_until == 0
    }
}

/// The shortest "later" a key sleeps for (1 ms), whatever its shared limits said.
const MIN_LATER: u64 = 1_000_000;

impl Default for Asked {
    fn default() -> Self {
        NOT_ASKED
    }
}

/// A key the shared limits know nothing of.
const NOT_ASKED: Asked = Asked {
    granted: 0,
    asking: false,
    later_until: 0,
    reason: LaterReason::Full,
    floor_until: 0,
};

impl<T> KeyState<T> {
    fn new() -> Self {
        Self {
            running: 0,
            fresh: VecDeque::new(),
            delayed: BinaryHeap::new(),
            tat: 0,
            paused_until: 0,
            spent: 0.0,
            quiet_since: 0,
            place: Place::Out,
        }
    }

    fn has_items(&self) -> bool {
        !self.fresh.is_empty() || !self.delayed.is_empty()
    }

    fn items(&self) -> usize {
        self.fresh.len() + self.delayed.len()
    }

    /// In a map with shared limits, where the key goes next and from when: with a permit
    /// in hand, to its turn when its own limits let it start; while it asks, nowhere; else
    /// to ask, when its own limits would let it start and its "later" has passed.
    fn gated_ready_at(
        &self,
        per_key: usize,
        rate: Option<&Gcra>,
        asked: &Asked,
    ) -> (Option<u64>, Place) {
        if asked.granted > 0 {
            (self.ready_at(per_key, rate), Place::Turn)
        } else if asked.asking {
            (None, Place::Out)
        } else {
            let at = self
                .ready_at(per_key, rate)
                .map(|at| at.max(asked.later_until));
            (at, Place::Ask)
        }
    }

    /// When the key may start its next item (by its own limits): `None` without an item
    /// or without room.
    fn ready_at(&self, per_key: usize, rate: Option<&Gcra>) -> Option<u64> {
        if self.running >= per_key {
            return None;
        }
        let work = if !self.fresh.is_empty() {
            0
        } else {
            self.delayed.peek()?.0.not_before
        };
        let rate = rate.map_or(0, |rate| rate.allowed_at(self.tat));
        Some(work.max(rate).max(self.paused_until))
    }

    /// Whether forgetting the key changes nothing (or only errs on the careful side): no
    /// work, and its rate, pause and retry budget would decide like a fresh key's (a
    /// budget with credit is forgotten with it: a fresh key has less), with the map
    /// having pulled `pulled` items so far.
    fn is_idle(&self, now: u64, pulled: u64) -> bool {
        self.running == 0
            && !self.has_items()
            && Gcra::is_idle(self.tat, now)
            && self.paused_until <= now
            && (self.spent <= 0.0 || self.budget_lapsed(pulled))
    }

    /// Whether the key, with nothing running or waiting, has been so for
    /// [`BUDGET_MEMORY`] pulled items: its spent budget no longer counts.
    fn budget_lapsed(&self, pulled: u64) -> bool {
        pulled.saturating_sub(self.quiet_since) >= BUDGET_MEMORY
    }
}

/// A key asleep until `at`; `order` breaks ties in the order keys fell asleep.
#[derive(Debug)]
struct Sleeper<K> {
    at: u64,
    order: u64,
    key: K,
}

impl<K> PartialEq for Sleeper<K> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl<K> Eq for Sleeper<K> {}
impl<K> PartialOrd for Sleeper<K> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<K> Ord for Sleeper<K> {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.at, self.order).cmp(&(other.at, other.order))
    }
}

/// What [`KeyScheduler::next`] found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Next<K, T> {
    /// Start this item of this key now (it is counted as running). In a map with shared
    /// limits, the start took one of the key's granted permits.
    Start(K, T),
    /// Nothing may start before this time (nanoseconds since the rate origin).
    NotBefore(u64),
    /// Nothing may start until something finishes or more items come.
    Nothing,
}

/// Per-key caps, rates and pauses over a stream of pulled items.
#[derive(Debug)]
pub(crate) struct KeyScheduler<K, T> {
    per_key: usize,
    /// Whether a start needs a permit of the map's shared limits.
    gated: bool,
    per_key_rate: Option<Gcra>,
    /// The whole map's rate and its state.
    rate: Option<(Gcra, u64)>,
    /// The retry budget per key: retries per first attempt, and retries at once.
    budget: Option<(f64, f64)>,
    /// Keys with running or waiting items, or a rate or pause still in force.
    keys: HashMap<K, KeyState<T>>,
    /// `keys.len()` after the last sweep of idle keys: the next sweep comes when it
    /// doubles, so sweeping costs O(1) per key, amortised.
    swept_at: usize,
    /// Keys that may start now, in the order they get a turn.
    turns: VecDeque<K>,
    /// Keys that may ask their shared limits now, in the order they get to.
    askers: VecDeque<K>,
    /// Where keys stand with the shared limits (a map with them only); an entry goes with
    /// its key.
    asked: HashMap<K, Asked>,
    /// Permits in hand over all keys, and asks in flight.
    granted: usize,
    asking: usize,
    /// Whether the shared limits' last word on a warm-up was that one is on (set by an
    /// answer of "warming up", cleared by the next grant).
    warming_up: bool,
    /// Keys waiting only for time, earliest first. An entry whose key has moved since
    /// (its `place` says another time) is stale and skipped.
    sleepers: BinaryHeap<Reverse<Sleeper<K>>>,
    /// Tie-breakers for the heaps.
    order: u64,
    waiting: usize,
    /// Items pushed so far: the clock a spent retry budget lapses on.
    pulled: u64,
}

impl<K, T> KeyScheduler<K, T> {
    /// Items pulled and not started, over all keys (those back from a failed attempt
    /// included).
    pub(crate) fn waiting(&self) -> usize {
        self.waiting
    }

    /// Keys with running or waiting items, or with a rate or pause still in force.
    pub(crate) fn active_keys(&self) -> usize {
        self.keys.len()
    }

    /// The most items of one key that may run at once.
    pub(crate) fn per_key(&self) -> usize {
        self.per_key
    }

    /// Forgets every key, waiting item and running count (the running work was dropped).
    pub(crate) fn clear(&mut self) {
        self.keys.clear();
        self.turns.clear();
        self.askers.clear();
        self.asked.clear();
        self.granted = 0;
        self.asking = 0;
        self.sleepers.clear();
        self.waiting = 0;
        self.swept_at = 0;
    }

    /// Permits of the shared limits in hand, over all keys.
    pub(crate) fn granted(&self) -> usize {
        self.granted
    }
}

impl<K: Hash + Eq + Clone, T> KeyScheduler<K, T> {
    pub(crate) fn new(per_key: usize) -> Self {
        Self {
            per_key,
            gated: false,
            per_key_rate: None,
            rate: None,
            budget: None,
            keys: HashMap::new(),
            swept_at: 0,
            turns: VecDeque::new(),
            askers: VecDeque::new(),
            asked: HashMap::new(),
            granted: 0,
            asking: 0,
            warming_up: false,
            sleepers: BinaryHeap::new(),
            order: 0,
            waiting: 0,
            pulled: 0,
        }
    }

    /// Sets the whole map's rate.
    pub(crate) fn set_rate(&mut self, rate: Gcra) {
        self.rate = Some((rate, 0));
    }

    /// Sets the retry budget of each key: `ratio` retries per first attempt, `floor` at
    /// once.
    pub(crate) fn set_budget(&mut self, ratio: f64, floor: u32) {
        self.budget = Some((ratio, f64::from(floor)));
    }

    /// Sets each key's rate.
    pub(crate) fn set_per_key_rate(&mut self, rate: Gcra) {
        self.per_key_rate = Some(rate);
    }

    /// The same settings for another key type and per-key limit (before any item is
    /// pushed).
    pub(crate) fn rekeyed<K2: Hash + Eq + Clone>(self, per_key: usize) -> KeyScheduler<K2, T> {
        debug_assert!(self.keys.is_empty(), "rekeyed before the first item");
        let mut scheduler = KeyScheduler::new(per_key);
        scheduler.gated = self.gated;
        scheduler.per_key_rate = self.per_key_rate;
        scheduler.rate = self.rate;
        scheduler.budget = self.budget;
        scheduler
    }

    /// Whether the map's rate is what keeps anything from starting at `now`.
    pub(crate) fn rate_blocks(&self, now: u64) -> bool {
        self.rate
            .as_ref()
            .is_some_and(|(rate, tat)| rate.allowed_at(*tat) > now)
    }

    /// Every start needs a permit of the map's shared limits from now on (before any item
    /// is pushed).
    pub(crate) fn set_gated(&mut self) {
        self.gated = true;
    }

    fn state(&mut self, key: K, now: u64) -> (K, &mut KeyState<T>) {
        if !self.keys.contains_key(&key) && self.keys.len() >= 2 * self.swept_at.max(32) {
            let pulled = self.pulled;
            self.keys.retain(|_, state| !state.is_idle(now, pulled));
            self.swept_at = self.keys.len();
            let (keys, asking) = (&self.keys, &mut self.asking);
            self.asked.retain(|key, asked| {
                let keep = keys.contains_key(key);
                if !keep {
                    *asking -= usize::from(asked.asking);
                }
                keep
            });
        }
        match self.keys.entry(key) {
            Entry::Occupied(occupied) => (occupied.key().clone(), occupied.into_mut()),
            Entry::Vacant(vacant) => {
                let key = vacant.key().clone();
                (key, vacant.insert(KeyState::new()))
            }
        }
    }

    /// Puts a key that is out of both lines where it belongs at `now`.
    fn place(&mut self, key: K, now: u64) {
        let state = self.keys.get_mut(&key).expect("a placed key has state");
        let rate = self.per_key_rate.as_ref();
        let (ready, line) = if self.gated {
            let asked = self.asked.get(&key).unwrap_or(&NOT_ASKED);
            state.gated_ready_at(self.per_key, rate, asked)
        } else {
            (state.ready_at(self.per_key, rate), Place::Turn)
        };
        match ready {
            None => state.place = Place::Out,
            Some(at) if at <= now => {
                state.place = line;
                match line {
                    Place::Ask => self.askers.push_back(key),
                    _ => self.turns.push_back(key),
                }
            }
            Some(at) => {
                state.place = Place::Asleep(at);
                self.order += 1;
                self.sleepers.push(Reverse(Sleeper {
                    at,
                    order: self.order,
                    key,
                }));
            }
        }
    }

    /// Places `key` again if it is out of the lines, or asleep until later than it needs.
    #[inline]
    fn replace(&mut self, key: &K, now: u64) {
        let Some(state) = self.keys.get(key) else {
            return;
        };
        let again = match state.place {
            Place::Out => true,
            // An asker that got a permit or may start is checked when it is popped.
            Place::Turn | Place::Ask => false,
            Place::Asleep(at) => {
                let rate = self.per_key_rate.as_ref();
                let ready = if self.gated {
                    let asked = self.asked.get(key).unwrap_or(&NOT_ASKED);
                    state.gated_ready_at(self.per_key, rate, asked).0
                } else {
                    state.ready_at(self.per_key, rate)
                };
                ready.is_none_or(|ready| ready < at)
            }
        };
        if again {
            self.place(key.clone(), now);
        }
    }

    /// Queues a freshly pulled item behind the older items of its key.
    pub(crate) fn push(&mut self, key: K, item: T, now: u64) {
        self.pulled += 1;
        let pulled = self.pulled;
        let (key, state) = self.state(key, now);
        if state.running == 0 && !state.has_items() && state.budget_lapsed(pulled) {
            // Back after its budget lapsed, not yet swept: as fresh as a forgotten key.
            state.spent = state.spent.min(0.0);
        }
        state.fresh.push_back(item);
        self.waiting += 1;
        self.replace(&key, now);
    }

    /// Queues an item back from a failed attempt of `key` (which no longer runs it),
    /// not to start before `not_before`. `order` is its place in the input.
    pub(crate) fn retry(&mut self, key: &K, item: T, order: u64, not_before: u64, now: u64) {
        let state = self.keys.get_mut(key).expect("a running key has state");
        state.running -= 1;
        state.delayed.push(Reverse(Delayed {
            not_before,
            order,
            item,
        }));
        self.waiting += 1;
        self.replace(key, now);
    }

    /// Pauses `key`: none of its items starts before `until`.
    pub(crate) fn pause(&mut self, key: &K, until: u64, now: u64) {
        let Some(state) = self.keys.get_mut(key) else {
            return;
        };
        state.paused_until = state.paused_until.max(until);
        // A key in `turns` is checked when its turn comes; one asleep wakes, sees the
        // pause and sleeps on.
        self.replace(key, now);
    }

    /// Whether `key` may retry once more under the retry budget; counts the retry if so.
    ///
    /// The budget is a bucket per key: it holds `floor` retries when the key is fresh,
    /// each retry takes one out, each first attempt puts `ratio` back, and it never holds
    /// more than `floor` (or 1, when the floor is 0). So retries stay within
    /// `floor + ratio × first attempts`. A key whose bucket is full again can be
    /// forgotten without changing any decision (one with credit beyond a fresh key's only
    /// loses it: the careful side); a key whose bucket is not full is kept until it has had
    /// nothing running or waiting for [`BUDGET_MEMORY`] pulled items, when its bucket
    /// lapses to full: the bound holds over each stretch in which the key keeps coming
    /// back within that.
    pub(crate) fn take_retry(&mut self, key: &K) -> bool {
        let Some((_, floor)) = self.budget else {
            return true;
        };
        let Some(state) = self.keys.get_mut(key) else {
            return false;
        };
        // Within rounding of a whole retry counts as one: five first attempts at 0.2 add
        // up to 0.9999999999999998 in floating point.
        if floor - state.spent >= 1.0 - ROUNDING {
            state.spent += 1.0;
            true
        } else {
            false
        }
    }

    /// The next item to start at `now`, counted as running, or when to ask again.
    pub(crate) fn next(&mut self, now: u64) -> Next<K, T> {
        self.wake(now);
        if let Some((rate, tat)) = &self.rate {
            // Keys waiting to ask wait for the map's rate too (asking for a permit that
            // could not start would hold it idle).
            if !self.turns.is_empty() || !self.askers.is_empty() {
                let at = rate.allowed_at(*tat);
                if at > now {
                    return Next::NotBefore(at);
                }
            }
        }
        while let Some(key) = self.turns.pop_front() {
            // A key forgotten since it got its turn (a drain took its items, then its
            // last item finished): nothing to start.
            let Some(state) = self.keys.get_mut(&key) else {
                continue;
            };
            state.place = Place::Out;
            let ready = if self.gated {
                let asked = self.asked.get(&key).unwrap_or(&NOT_ASKED);
                match state.gated_ready_at(self.per_key, self.per_key_rate.as_ref(), asked) {
                    (at, Place::Turn) => at,
                    _ => None,
                }
            } else {
                state.ready_at(self.per_key, self.per_key_rate.as_ref())
            };
            match ready {
                Some(at) if at <= now => {}
                // Paused or full since it got its turn: back where it belongs.
                _ => {
                    self.place(key, now);
                    continue;
                }
            }
            let item = match state.delayed.peek() {
                Some(Reverse(delayed)) if delayed.not_before <= now => {
                    state.delayed.pop().expect("peeked").0.item
                }
                _ => match state.fresh.pop_front() {
                    Some(item) => {
                        if let Some((ratio, floor)) = self.budget {
                            state.spent = (state.spent - ratio).max((floor - 1.0).min(0.0));
                        }
                        item
                    }
                    None => state.delayed.pop().expect("a ready key has an item").0.item,
                },
            };
            state.running += 1;
            if self.gated {
                let asked = self.asked.get_mut(&key).expect("a permit in hand");
                asked.granted -= 1;
                if asked.is_empty() {
                    self.asked.remove(&key);
                }
                self.granted -= 1;
            }
            if let Some(rate) = &self.per_key_rate {
                state.tat = rate
                    .decide(state.tat, now)
                    .expect("the key's rate allows it");
            }
            if let Some((rate, tat)) = &mut self.rate {
                *tat = rate.decide(*tat, now).expect("the map's rate allows it");
            }
            self.waiting -= 1;
            // Still room and work: back of the line (or asleep), so other keys go first.
            self.place(key.clone(), now);
            return Next::Start(key, item);
        }
        match self.sleepers.peek() {
            Some(Reverse(sleeper)) => Next::NotBefore(sleeper.at),
            None => Next::Nothing,
        }
    }

    /// Moves the keys whose time has come from `sleepers` to `turns`.
    fn wake(&mut self, now: u64) {
        while let Some(Reverse(sleeper)) = self.sleepers.peek() {
            if sleeper.at > now {
                break;
            }
            let Reverse(Sleeper { at, key, .. }) = self.sleepers.pop().expect("peeked");
            match self.keys.get(&key) {
                Some(state) if state.place == Place::Asleep(at) => self.place(key, now),
                _ => {} // stale: the key moved after this entry was made
            }
        }
    }

    /// Changes the per-key limit of a running map: keys that now have room get their
    /// turn; a key above the new limit starts nothing until it runs fewer.
    pub(crate) fn set_per_key(&mut self, per_key: usize, now: u64) {
        self.per_key = per_key;
        self.replace_all(now);
    }

    /// Changes the map's rate; the starts its state is ahead by carry over, spaced by
    /// the new rate.
    pub(crate) fn change_rate(&mut self, rate: Gcra, now: u64) {
        let tat = self
            .rate
            .map_or(0, |(old, tat)| rate.carry_over(&old, tat, now));
        self.rate = Some((rate, tat));
    }

    /// Changes each key's rate, carrying each key's state over; keys asleep for longer
    /// than the new rate asks are woken earlier.
    pub(crate) fn change_per_key_rate(&mut self, rate: Gcra, now: u64) {
        if let Some(old) = self.per_key_rate {
            for state in self.keys.values_mut() {
                state.tat = rate.carry_over(&old, state.tat, now);
            }
        }
        self.per_key_rate = Some(rate);
        self.replace_all(now);
    }

    /// Places every key again where it belongs at `now` (after a setting changed).
    fn replace_all(&mut self, now: u64) {
        let keys: Vec<K> = self.keys.keys().cloned().collect();
        for key in &keys {
            self.replace(key, now);
        }
    }

    /// Removes every fresh item (pulled, never started) of every key and returns them.
    /// Items back from a failed attempt stay: they have started.
    pub(crate) fn take_fresh(&mut self) -> Vec<T> {
        let mut taken = Vec::new();
        for state in self.keys.values_mut() {
            taken.extend(state.fresh.drain(..));
        }
        self.waiting -= taken.len();
        // Keys left without items leave the lines when their turn or wake-up comes.
        taken
    }

    /// Takes back the permits granted for items that are gone (a drain took them): how
    /// many each key no longer needs. The map drops that many of the key's permits.
    pub(crate) fn take_surplus(&mut self) -> Vec<(K, usize)> {
        let mut surplus = Vec::new();
        for (key, asked) in &mut self.asked {
            let items = self.keys.get(key).map_or(0, KeyState::items);
            let extra = asked.granted.saturating_sub(items);
            if extra > 0 {
                asked.granted -= extra;
                self.granted -= extra;
                surplus.push((key.clone(), extra));
            }
        }
        surplus
    }

    /// How many keys are paused at `now`, and the `n` keys with the most items waiting
    /// or running (busiest first): key, waiting, running, paused.
    pub(crate) fn busiest(&self, now: u64, n: usize) -> (usize, Vec<(K, usize, usize, bool)>) {
        let mut paused = 0;
        let mut loads = Vec::new();
        for (key, state) in &self.keys {
            let is_paused = state.paused_until > now;
            paused += usize::from(is_paused);
            let waiting = state.fresh.len() + state.delayed.len();
            if n > 0 && waiting + state.running > 0 {
                loads.push((key, waiting, state.running, is_paused));
            }
        }
        let load = |entry: &(&K, usize, usize, bool)| std::cmp::Reverse(entry.1 + entry.2);
        if loads.len() > n {
            loads.select_nth_unstable_by_key(n, load);
            loads.truncate(n);
        }
        loads.sort_by_key(load);
        let busiest = loads
            .into_iter()
            .map(|(key, waiting, running, paused)| (key.clone(), waiting, running, paused))
            .collect();
        (paused, busiest)
    }

    /// How many keys the shared limits told "later" that still wait at `now`, and how many
    /// of those were told the limits are warming up.
    pub(crate) fn told_later(&self, now: u64) -> (usize, usize) {
        let mut later = 0;
        let mut warming_up = 0;
        for asked in self.asked.values() {
            if asked.later_until > now {
                later += 1;
                warming_up += usize::from(asked.reason == LaterReason::WarmingUp);
            }
        }
        (later, warming_up)
    }

    /// The next key that may ask its shared limits for a permit at `now`, marked as
    /// asking (it leaves the lines until the answer); `None` when no key may.
    pub(crate) fn next_ask(&mut self, now: u64) -> Option<K> {
        self.wake(now);
        if let Some((rate, tat)) = &self.rate {
            // The map's rate comes first: ask only for starts it allows now, counting the
            // permits in hand and those asked for (a permit would wait for it in hand).
            let pending = (self.granted + self.asking) as u64;
            if rate.starts_allowed(*tat, now) <= pending {
                return None;
            }
        }
        while let Some(key) = self.askers.pop_front() {
            // A key forgotten since it got in line (see `next`): nothing to ask for.
            let Some(state) = self.keys.get_mut(&key) else {
                continue;
            };
            state.place = Place::Out;
            let asked = self.asked.get(&key).unwrap_or(&NOT_ASKED);
            match state.gated_ready_at(self.per_key, self.per_key_rate.as_ref(), asked) {
                (Some(at), Place::Ask) if at <= now => {
                    let asked = self.asked.entry(key.clone()).or_default();
                    asked.asking = true;
                    asked.later_until = 0;
                    self.asking += 1;
                    return Some(key);
                }
                _ => self.place(key, now),
            }
        }
        None
    }

    /// The shared limits granted `key` a permit: its next item may start. `false` when the
    /// key no longer needs it (a drain took its items): the map drops the permit.
    pub(crate) fn grant(&mut self, key: &K, now: u64) -> bool {
        self.warming_up = false;
        let items = self.keys.get(key).map_or(0, KeyState::items);
        let Some(asked) = self.asked.get_mut(key) else {
            return false;
        };
        self.asking -= usize::from(asked.asking);
        asked.asking = false;
        let needed = items > asked.granted;
        if needed {
            asked.granted += 1;
            asked.later_until = 0;
            self.granted += 1;
        } else if asked.is_empty() {
            self.asked.remove(key);
        }
        self.replace(key, now);
        needed
    }

    /// The shared limits told `key` to ask again at `until` (or when woken earlier), for
    /// `reason`. `true` when this answer starts a warm-up of the limits (the first one told
    /// since the last grant), to be reported once, not once per ask.
    pub(crate) fn later(&mut self, key: &K, until: u64, reason: LaterReason, now: u64) -> bool {
        let warm_up_starts = reason == LaterReason::WarmingUp && !self.warming_up;
        self.warming_up |= warm_up_starts;
        let Some(asked) = self.asked.get_mut(key) else {
            return warm_up_starts;
        };
        self.asking -= usize::from(asked.asking);
        asked.asking = false;
        asked.reason = reason;
        // Never at once: an answer of "now" would have the key ask in a loop.
        asked.floor_until = now.saturating_add(MIN_LATER);
        asked.later_until = until.max(asked.floor_until);
        self.replace(key, now);
        warm_up_starts
    }

    /// `key`'s room in its shared limits may be back: it may ask again at once, or at the
    /// floor after its last "later" if that is still ahead.
    pub(crate) fn wake_asker(&mut self, key: &K, now: u64) {
        let Some(asked) = self.asked.get_mut(key) else {
            return;
        };
        if asked.later_until > now {
            asked.later_until = if asked.floor_until > now {
                asked.floor_until
            } else {
                0
            };
            if asked.is_empty() {
                self.asked.remove(key);
            }
            self.replace(key, now);
        }
    }

    /// The shared limits could not answer `key`'s ask: its next item is taken out,
    /// counted as running (its attempt ends at once with the error, through
    /// [`finish`](Self::finish) or [`retry`](Self::retry)). `None` if it has no item left.
    pub(crate) fn ask_failed(&mut self, key: &K, now: u64) -> Option<T> {
        if let Some(asked) = self.asked.get_mut(key) {
            self.asking -= usize::from(asked.asking);
            asked.asking = false;
            if asked.is_empty() {
                self.asked.remove(key);
            }
        }
        let state = self.keys.get_mut(key)?;
        let item = match state.delayed.peek() {
            Some(Reverse(delayed)) if delayed.not_before <= now => {
                state.delayed.pop().expect("peeked").0.item
            }
            _ => match state.fresh.pop_front() {
                Some(item) => item,
                None => state.delayed.pop()?.0.item,
            },
        };
        state.running += 1;
        self.waiting -= 1;
        self.replace(key, now);
        Some(item)
    }

    /// Records that an item of `key` finished, freeing room for the key's next one.
    pub(crate) fn finish(&mut self, key: &K, now: u64) {
        let state = self.keys.get_mut(key).expect("a running key has state");
        state.running -= 1;
        state.quiet_since = self.pulled;
        if state.running == 0 && !state.has_items() && state.spent > 0.0 {
            // Kept for its spent budget, maybe for long: without the queues it no longer
            // needs.
            state.fresh = VecDeque::new();
            state.delayed = BinaryHeap::new();
        }
        if state.running == 0 && !state.has_items() && state.is_idle(now, self.pulled) {
            self.keys.remove(key);
            if self.gated {
                // An ask in flight is forgotten with the key (its answer finds no key and
                // a permit is dropped); so is a "later" (its next item asks afresh).
                if let Some(asked) = self.asked.remove(key) {
                    self.asking -= usize::from(asked.asking);
                }
            }
        } else {
            self.replace(key, now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Rate;

    const MS: u64 = 1_000_000;

    fn drain<K: Hash + Eq + Clone, T>(scheduler: &mut KeyScheduler<K, T>) -> Vec<(K, T)> {
        drain_at(scheduler, 0)
    }

    fn drain_at<K: Hash + Eq + Clone, T>(
        scheduler: &mut KeyScheduler<K, T>,
        now: u64,
    ) -> Vec<(K, T)> {
        std::iter::from_fn(|| match scheduler.next(now) {
            Next::Start(key, item) => Some((key, item)),
            _ => None,
        })
        .collect()
    }

    #[test]
    fn a_full_key_waits_while_others_start() {
        let mut scheduler = KeyScheduler::new(2);
        for (key, item) in [("a", 1), ("a", 2), ("a", 3), ("b", 4)] {
            scheduler.push(key, item, 0);
        }
        assert_eq!(drain(&mut scheduler), [("a", 1), ("b", 4), ("a", 2)]);
        assert_eq!(scheduler.waiting(), 1, "a is full");
        scheduler.finish(&"a", 0);
        assert_eq!(drain(&mut scheduler), [("a", 3)]);
        assert_eq!(scheduler.waiting(), 0);
    }

    #[test]
    fn a_running_key_with_room_gets_a_turn_for_its_next_item() {
        let mut scheduler = KeyScheduler::new(2);
        scheduler.push("a", 1, 0);
        assert_eq!(drain(&mut scheduler), [("a", 1)]);
        // "a" runs one of two: its next item may start at once, without a finish first.
        scheduler.push("a", 2, 0);
        assert_eq!(drain(&mut scheduler), [("a", 2)]);
        scheduler.push("a", 3, 0);
        assert!(drain(&mut scheduler).is_empty(), "a is full now");
    }

    #[test]
    fn order_within_a_key_is_kept() {
        let mut scheduler = KeyScheduler::new(1);
        scheduler.push("a", 1, 0);
        scheduler.push("a", 2, 0);
        assert_eq!(drain(&mut scheduler), [("a", 1)]);
        scheduler.push("a", 3, 0);
        scheduler.finish(&"a", 0);
        assert_eq!(drain(&mut scheduler), [("a", 2)]);
        scheduler.finish(&"a", 0);
        assert_eq!(drain(&mut scheduler), [("a", 3)]);
    }

    #[test]
    fn keys_take_turns_even_when_sorted() {
        let mut scheduler = KeyScheduler::new(2);
        for key in ["a", "b", "c"] {
            for item in 0..4 {
                scheduler.push(key, item, 0);
            }
        }
        // Take one start at a time, as a global limit of 1 would.
        let mut order = Vec::new();
        while let Next::Start(key, _) = scheduler.next(0) {
            order.push(key);
            scheduler.finish(&key, 0);
        }
        assert_eq!(
            order,
            ["a", "b", "c", "a", "b", "c", "a", "b", "c", "a", "b", "c"]
        );
    }

    #[test]
    fn idle_keys_are_forgotten() {
        let mut scheduler = KeyScheduler::new(1);
        for key in 0..1000 {
            scheduler.push(key, (), 0);
            assert!(matches!(scheduler.next(0), Next::Start(..)));
            scheduler.finish(&key, 0);
        }
        assert_eq!(scheduler.active_keys(), 0);
        assert!(scheduler.turns.is_empty());
    }

    #[test]
    fn a_keys_rate_spaces_its_starts_and_others_go_meanwhile() {
        let mut scheduler = KeyScheduler::new(10);
        scheduler.set_per_key_rate(Gcra::new(Rate::per_second(10)));
        for item in 0..3 {
            scheduler.push("a", item, 0);
        }
        scheduler.push("b", 9, 0);
        assert_eq!(drain_at(&mut scheduler, 0), [("a", 0), ("b", 9)]);
        assert_eq!(scheduler.next(0), Next::NotBefore(100 * MS));
        assert_eq!(scheduler.next(99 * MS), Next::NotBefore(100 * MS));
        assert_eq!(drain_at(&mut scheduler, 100 * MS), [("a", 1)]);
        assert_eq!(drain_at(&mut scheduler, 250 * MS), [("a", 2)]);
    }

    #[test]
    fn a_key_with_a_rate_is_remembered_until_the_rate_forgets() {
        let mut scheduler = KeyScheduler::new(1);
        scheduler.set_per_key_rate(Gcra::new(Rate::per_second(10)));
        scheduler.push("a", 1, 0);
        assert_eq!(drain_at(&mut scheduler, 0), [("a", 1)]);
        scheduler.finish(&"a", MS);
        assert_eq!(scheduler.active_keys(), 1, "its rate is still in force");
        // Coming back within the interval must wait for it.
        scheduler.push("a", 2, 2 * MS);
        assert_eq!(scheduler.next(2 * MS), Next::NotBefore(100 * MS));
        assert_eq!(drain_at(&mut scheduler, 100 * MS), [("a", 2)]);
        scheduler.finish(&"a", 300 * MS);
        assert_eq!(scheduler.active_keys(), 0);
    }

    #[test]
    fn the_maps_rate_holds_every_key() {
        let mut scheduler = KeyScheduler::new(10);
        scheduler.set_rate(Gcra::new(Rate::per_second(10).burst(2)));
        for key in ["a", "b", "c"] {
            scheduler.push(key, (), 0);
        }
        assert_eq!(drain_at(&mut scheduler, 0).len(), 2);
        assert_eq!(scheduler.next(0), Next::NotBefore(100 * MS));
        assert_eq!(drain_at(&mut scheduler, 100 * MS), [("c", ())]);
    }

    #[test]
    fn a_retry_waits_for_its_time_without_holding_the_key() {
        let mut scheduler = KeyScheduler::new(1);
        scheduler.push("a", 1, 0);
        scheduler.push("a", 2, 0);
        assert_eq!(drain_at(&mut scheduler, 0), [("a", 1)]);
        // Item 1 failed: it comes back at 50 ms; item 2 takes the key meanwhile.
        scheduler.retry(&"a", 1, 0, 50 * MS, 10 * MS);
        assert_eq!(drain_at(&mut scheduler, 10 * MS), [("a", 2)]);
        scheduler.finish(&"a", 20 * MS);
        assert_eq!(scheduler.next(20 * MS), Next::NotBefore(50 * MS));
        assert_eq!(drain_at(&mut scheduler, 50 * MS), [("a", 1)]);
        assert_eq!(scheduler.waiting(), 0);
    }

    #[test]
    fn a_due_retry_goes_before_fresh_items() {
        let mut scheduler = KeyScheduler::new(1);
        scheduler.push("a", 1, 0);
        assert_eq!(drain_at(&mut scheduler, 0), [("a", 1)]);
        scheduler.push("a", 2, 0);
        scheduler.retry(&"a", 1, 0, 0, 0);
        assert_eq!(drain_at(&mut scheduler, 0), [("a", 1)]);
    }

    #[test]
    fn a_paused_key_starts_nothing_until_the_pause_ends() {
        let mut scheduler = KeyScheduler::new(4);
        scheduler.push("a", 1, 0);
        assert_eq!(drain_at(&mut scheduler, 0), [("a", 1)]);
        scheduler.push("a", 2, 0);
        scheduler.push("b", 3, 0);
        scheduler.pause(&"a", 1_000 * MS, 0);
        assert_eq!(drain_at(&mut scheduler, 0), [("b", 3)]);
        assert_eq!(scheduler.next(500 * MS), Next::NotBefore(1_000 * MS));
        assert_eq!(drain_at(&mut scheduler, 1_000 * MS), [("a", 2)]);
    }

    #[test]
    fn the_retry_budget_allows_a_share_of_first_attempts_plus_a_floor() {
        let mut scheduler = KeyScheduler::new(100);
        scheduler.set_budget(0.2, 3);
        for item in 0..10 {
            scheduler.push("a", item, 0);
        }
        // The floor at once, whatever the first attempts.
        assert!(matches!(scheduler.next(0), Next::Start(..)));
        let granted = (0..100).filter(|_| scheduler.take_retry(&"a")).count();
        assert_eq!(granted, 3);
        // Then one retry per 5 first attempts.
        assert_eq!(drain_at(&mut scheduler, 0).len(), 9);
        let granted = (0..100).filter(|_| scheduler.take_retry(&"a")).count();
        assert_eq!(granted, 1);
    }

    #[test]
    fn raising_the_per_key_limit_gives_full_keys_their_turn() {
        let mut scheduler = KeyScheduler::new(1);
        for item in 0..3 {
            scheduler.push("a", item, 0);
        }
        assert_eq!(drain(&mut scheduler), [("a", 0)]);
        scheduler.set_per_key(3, 0);
        assert_eq!(drain(&mut scheduler), [("a", 1), ("a", 2)]);
        scheduler.set_per_key(1, 0);
        scheduler.finish(&"a", 0);
        scheduler.push("a", 3, 0);
        assert!(
            drain(&mut scheduler).is_empty(),
            "two still run, above the new limit of 1"
        );
        scheduler.finish(&"a", 0);
        scheduler.finish(&"a", 0);
        assert_eq!(drain(&mut scheduler), [("a", 3)]);
    }

    #[test]
    fn a_faster_per_key_rate_wakes_a_sleeping_key_earlier() {
        let mut scheduler = KeyScheduler::new(10);
        scheduler.set_per_key_rate(Gcra::new(Rate::per_second(1)));
        scheduler.push("a", 0, 0);
        scheduler.push("a", 1, 0);
        assert_eq!(drain_at(&mut scheduler, 0), [("a", 0)]);
        assert_eq!(scheduler.next(0), Next::NotBefore(1_000 * MS));
        // 999 ms ahead at 1/s is 9.99 ms ahead at 100/s.
        scheduler.change_per_key_rate(Gcra::new(Rate::per_second(100)), MS);
        assert_eq!(scheduler.next(MS), Next::NotBefore(MS + 9_990_000));
        assert!(matches!(scheduler.next(20 * MS), Next::Start("a", 1)));
    }

    #[test]
    fn taking_the_fresh_items_leaves_the_retries() {
        let mut scheduler = KeyScheduler::new(1);
        scheduler.push("a", 0, 0);
        scheduler.push("a", 1, 0);
        scheduler.push("b", 2, 0);
        assert_eq!(drain(&mut scheduler), [("a", 0), ("b", 2)]);
        scheduler.retry(&"a", 0, 0, 0, 0);
        let mut taken = scheduler.take_fresh();
        taken.sort_unstable();
        assert_eq!(taken, [1]);
        assert_eq!(scheduler.waiting(), 1);
        assert_eq!(drain(&mut scheduler), [("a", 0)]);
        assert_eq!(scheduler.waiting(), 0);
    }

    #[test]
    fn the_busiest_keys_come_first() {
        let mut scheduler = KeyScheduler::new(1);
        for (key, items) in [("a", 2), ("b", 5), ("c", 1), ("d", 3)] {
            for item in 0..items {
                scheduler.push(key, item, 0);
            }
        }
        scheduler.pause(&"c", 10, 0);
        let (paused, busiest) = scheduler.busiest(0, 2);
        assert_eq!(paused, 1);
        assert_eq!(busiest, [("b", 5, 0, false), ("d", 3, 0, false)]);
    }

    #[test]
    fn a_key_with_budget_spent_is_remembered() {
        let mut scheduler = KeyScheduler::new(1);
        scheduler.set_budget(0.5, 1);
        scheduler.push("a", 1, 0);
        assert!(matches!(scheduler.next(0), Next::Start(..)));
        assert!(scheduler.take_retry(&"a"));
        scheduler.finish(&"a", 0);
        assert_eq!(scheduler.active_keys(), 1, "its spent budget is remembered");
        scheduler.push("a", 2, 0);
        assert!(matches!(scheduler.next(0), Next::Start(..)));
        assert!(!scheduler.take_retry(&"a"), "half a retry is not one");
    }

    #[test]
    fn five_first_attempts_at_a_ratio_of_a_fifth_pay_for_one_retry() {
        // Before, 10 − 5 × 0.2 was 9.000000000000004 in floating point: one retry per 6.
        let mut scheduler = KeyScheduler::new(1);
        scheduler.set_budget(0.2, 10);
        scheduler.push(0, (), 0);
        assert_eq!(scheduler.next(0), Next::Start(0, ()));
        assert_eq!((0..20).filter(|_| scheduler.take_retry(&0)).count(), 10);
        scheduler.finish(&0, 0);
        for round in 0..100 {
            for _ in 0..4 {
                assert!(!one_item(&mut scheduler, 0, true), "round {round}");
            }
            assert!(one_item(&mut scheduler, 0, true), "round {round}");
        }
    }

    /// One item of `key` starts and finishes at `now`; `retry`: its attempt failed and
    /// asks the budget for a retry (which is then started and finishes). Returns whether
    /// the budget allowed the retry.
    fn one_item(scheduler: &mut KeyScheduler<u64, ()>, key: u64, retry: bool) -> bool {
        scheduler.push(key, (), 0);
        assert_eq!(scheduler.next(0), Next::Start(key, ()));
        let retried = retry && scheduler.take_retry(&key);
        if retried {
            scheduler.retry(&key, (), 0, 0, 0);
            assert_eq!(scheduler.next(0), Next::Start(key, ()));
        }
        scheduler.finish(&key, 0);
        retried
    }

    #[test]
    fn keys_that_spent_their_budget_are_forgotten_within_the_budget_memory() {
        // One key per item, each retried once: before, every key stayed for the rest of
        // the run (100,000 keys here).
        let mut scheduler = KeyScheduler::new(1);
        scheduler.set_budget(0.5, 1);
        let mut most = 0;
        for key in 0..100_000 {
            assert!(one_item(&mut scheduler, key, true), "its floor");
            most = most.max(scheduler.active_keys());
        }
        // Kept: the keys of the last BUDGET_MEMORY items, and at most as many again
        // between two sweeps.
        assert!(most <= 2 * BUDGET_MEMORY as usize + 64, "{most} keys");
    }

    #[test]
    fn a_spent_budget_holds_while_its_key_comes_back_within_the_budget_memory() {
        // Key 0 may retry once, ever (floor 1, ratio 0), while thousands of other keys
        // come and go between its items and are swept.
        let mut scheduler = KeyScheduler::new(1);
        scheduler.set_budget(0.0, 1);
        let mut retries = 0;
        for round in 0..10u64 {
            retries += u64::from(one_item(&mut scheduler, 0, true));
            for other in 1..1_000 {
                one_item(&mut scheduler, round * 1_000 + other, other % 2 == 0);
            }
        }
        assert_eq!(
            retries, 1,
            "the floor, once: its spent budget was remembered"
        );
    }

    #[test]
    fn a_spent_budget_lapses_once_its_key_stays_away_for_the_budget_memory() {
        let mut scheduler = KeyScheduler::new(1);
        scheduler.set_budget(0.0, 1);
        assert!(one_item(&mut scheduler, 0, true));
        assert!(!one_item(&mut scheduler, 0, true), "spent");
        // Away for BUDGET_MEMORY items: it comes back afresh, with its floor.
        for other in 1..=BUDGET_MEMORY {
            one_item(&mut scheduler, other, false);
        }
        assert!(
            scheduler.keys.contains_key(&0),
            "no sweep since: still there"
        );
        assert!(one_item(&mut scheduler, 0, true), "afresh");
        assert!(!one_item(&mut scheduler, 0, true), "spent");
        // Away for longer, among keys that spend their budget too (the map sweeps):
        // forgotten, and afresh again.
        for other in 1..=3 * BUDGET_MEMORY {
            one_item(&mut scheduler, other, true);
        }
        assert!(!scheduler.keys.contains_key(&0), "swept");
        assert!(one_item(&mut scheduler, 0, true), "afresh");
        // Away for fewer: not afresh.
        for other in 0..BUDGET_MEMORY / 2 {
            one_item(&mut scheduler, 1_000_000 + other, true);
        }
        assert!(
            !one_item(&mut scheduler, 0, true),
            "spent again, and remembered"
        );
    }

    #[test]
    fn a_gated_key_asks_once_and_starts_only_with_a_permit() {
        let mut scheduler = KeyScheduler::new(2);
        scheduler.set_gated();
        for item in 0..3 {
            scheduler.push("a", item, 0);
        }
        scheduler.push("b", 9, 0);
        assert!(
            drain(&mut scheduler).is_empty(),
            "nothing starts without a permit"
        );
        assert_eq!(scheduler.next_ask(0), Some("a"));
        assert_eq!(scheduler.next_ask(0), Some("b"));
        assert_eq!(scheduler.next_ask(0), None, "one ask per key at a time");
        assert!(scheduler.grant(&"a", 0));
        assert_eq!(scheduler.granted(), 1);
        assert_eq!(drain(&mut scheduler), [("a", 0)]);
        assert_eq!(scheduler.granted(), 0);
        // "a" runs one of two: it may ask for its next item.
        assert_eq!(scheduler.next_ask(0), Some("a"));
        assert!(scheduler.grant(&"a", 0));
        assert_eq!(drain(&mut scheduler), [("a", 1)]);
        assert_eq!(scheduler.next_ask(0), None, "a is full, b still asks");
    }

    #[test]
    fn a_key_told_later_sleeps_until_then_or_until_woken() {
        let mut scheduler = KeyScheduler::new(4);
        scheduler.set_gated();
        scheduler.push("a", 1, 0);
        scheduler.push("b", 2, 0);
        assert_eq!(scheduler.next_ask(0), Some("a"));
        scheduler.later(&"a", 50 * MS, LaterReason::Full, 0);
        assert_eq!(scheduler.next_ask(0), Some("b"), "other keys ask meanwhile");
        assert_eq!(scheduler.next_ask(10 * MS), None);
        assert_eq!(scheduler.next(10 * MS), Next::NotBefore(50 * MS));
        assert_eq!(scheduler.next_ask(50 * MS), Some("a"));
        scheduler.later(&"a", 90 * MS, LaterReason::Full, 50 * MS);
        scheduler.wake_asker(&"a", 60 * MS);
        assert_eq!(
            scheduler.next_ask(60 * MS),
            Some("a"),
            "woken before its time"
        );
    }

    #[test]
    fn a_failed_ask_hands_out_the_keys_next_item_as_running() {
        let mut scheduler = KeyScheduler::new(1);
        scheduler.set_gated();
        scheduler.push("a", 1, 0);
        scheduler.push("a", 2, 0);
        assert_eq!(scheduler.next_ask(0), Some("a"));
        assert_eq!(scheduler.ask_failed(&"a", 0), Some(1));
        assert_eq!(scheduler.waiting(), 1);
        assert_eq!(scheduler.next_ask(0), None, "its item counts as running");
        scheduler.finish(&"a", 0);
        assert_eq!(scheduler.next_ask(0), Some("a"));
    }

    #[test]
    fn permits_for_items_a_drain_took_come_back() {
        let mut scheduler = KeyScheduler::new(2);
        scheduler.set_gated();
        scheduler.push("a", 1, 0);
        scheduler.push("a", 2, 0);
        assert_eq!(scheduler.next_ask(0), Some("a"));
        assert!(scheduler.grant(&"a", 0));
        assert_eq!(scheduler.take_fresh().len(), 2);
        assert_eq!(scheduler.take_surplus(), [("a", 1)]);
        assert_eq!(scheduler.granted(), 0);
        // A grant arriving for a key with nothing left is not kept.
        scheduler.push("b", 3, 0);
        assert_eq!(scheduler.next_ask(0), Some("b"));
        assert_eq!(scheduler.take_fresh().len(), 1);
        assert!(!scheduler.grant(&"b", 0));
    }

    #[test]
    fn a_key_forgotten_while_in_line_is_skipped() {
        // Gated: in line to ask, drained, its last item finished.
        let mut scheduler = KeyScheduler::new(2);
        scheduler.set_gated();
        scheduler.push("k", 1, 0);
        assert_eq!(scheduler.next_ask(0), Some("k"));
        assert!(scheduler.grant(&"k", 0));
        assert_eq!(drain(&mut scheduler), [("k", 1)]);
        scheduler.push("k", 2, 0);
        assert_eq!(scheduler.take_fresh().len(), 1);
        assert!(scheduler.take_surplus().is_empty());
        scheduler.finish(&"k", 0);
        assert_eq!(scheduler.next_ask(0), None);
        // Not gated: the same in line for a turn.
        let mut scheduler = KeyScheduler::new(2);
        scheduler.push("k", 1, 0);
        assert_eq!(scheduler.next(0), Next::Start("k", 1));
        scheduler.push("k", 2, 0);
        assert_eq!(scheduler.take_fresh().len(), 1);
        scheduler.finish(&"k", 0);
        assert_eq!(scheduler.next(0), Next::Nothing);
    }

    #[test]
    fn keys_ask_only_for_the_starts_the_maps_rate_allows() {
        let mut scheduler = KeyScheduler::new(1);
        scheduler.set_gated();
        scheduler.set_rate(Gcra::new(Rate::per_second(10).burst(2)));
        for key in ["a", "b", "c"] {
            scheduler.push(key, (), 0);
        }
        assert_eq!(scheduler.next_ask(0), Some("a"));
        assert_eq!(scheduler.next_ask(0), Some("b"));
        assert_eq!(scheduler.next_ask(0), None, "the burst is asked for");
        assert!(scheduler.grant(&"a", 0));
        scheduler.later(&"b", 0, LaterReason::Full, 0);
        assert_eq!(drain(&mut scheduler), [("a", ())]);
        // One start of the burst left: one ask.
        let asker = scheduler.next_ask(2 * MS).expect("one more start allowed");
        assert_eq!(scheduler.next_ask(2 * MS), None);
        assert!(scheduler.grant(&asker, 2 * MS));
        assert_eq!(drain_at(&mut scheduler, 2 * MS), [(asker, ())]);
        // The burst is spent and a key waits to ask: the rate's time is the map's timer.
        assert_eq!(scheduler.next(2 * MS), Next::NotBefore(100 * MS));
        assert!(scheduler.next_ask(100 * MS).is_some());
    }
}
