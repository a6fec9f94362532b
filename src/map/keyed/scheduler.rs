//! Admission for keyed work: which pulled item may start next, and when.
//!
//! Pure bookkeeping, no futures and no clock of its own: the keyed map queues every pulled
//! item here and asks what to start whenever a global slot is free, passing the time.
//! Items wait in their key's queue (`key.rs`), holding no global slot, until their key has
//! room (fewer than its limit running) and every part of the scheduler allows a start
//! (`part.rs` is the contract, `parts.rs` the registration: the key's rate, its pause, a
//! breaker, shared limits...). Keys waiting only for time sleep (`pacing.rs`, with the
//! map's rate); keys of a map with shared limits ask them for a permit first; each key's
//! limit and rate follow the map's defaults or are its own (`settings.rs`).
//!
//! This file owns the lines and which key goes next. Keys that may start now wait in one
//! line, in the order of the map's slot policy (`turns.rs`: turns, or shares of the slots'
//! time), so no key starves while others have work. A key is forgotten once it has
//! nothing running or waiting and no part holds anything of it a fresh key's would not: the
//! map never outgrows the work in hand and the keys seen recently.
//!
//! Invariants: a key is in at most one line (its `place` says which); `waiting` is the
//! number of items in every key's queues; a key in a line may have been forgotten since
//! (whoever pops it checks).

use std::cmp::Reverse;
use std::collections::HashMap;
use std::hash::Hash;

use super::breaking::MapBreaker;
use super::budget::RetryBudget;
use super::key::{KeyState, LATEST_WAKE, Place};
use super::key_table::KeyTable;
use super::pacing::{MapRate, Sleepers};
use super::part::{Ended, Part, Verdict};
use super::parts::Parts;
use super::pause::Pauses;
use super::queues::Queues;
use super::settings::{GivenSettings, InForce};
use super::shared::LaterReason;
use super::turns::{SlotPolicy, Turns};
use crate::limit::adaptive::config::Adaptive;
use crate::limit::breaker::core::{BreakerState, Ticket};
use crate::limit::breaker::error::CircuitBreakerError;
use crate::limit::key_settings::KeySettings;
use crate::limit::rate::gcra::Gcra;
use crate::map::control::{HeldBy, KeyChange, KeyProgress, PausedBy};

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
    /// This item of this key ends at once, refused by the key's open breaker (a map where
    /// such items fail; it is not counted as running).
    Refused(K, T, CircuitBreakerError),
}

/// The lines a key waits in (besides the askers of a map with shared limits).
#[derive(Debug)]
struct Lines<K> {
    /// Keys that may start now, in the order of the map's slot policy.
    turns: Turns<K>,
    /// Keys waiting only for time.
    sleepers: Sleepers<K>,
}

/// Per-key caps, rates and pauses over a stream of pulled items.
#[derive(Debug)]
pub(crate) struct KeyScheduler<K, T> {
    /// The default key limit and default key rate, which new keys get.
    defaults: InForce,
    rate: Option<MapRate>,
    /// The per-key features (`parts.rs`): every start asks them, every end tells them.
    parts: Parts<K>,
    /// Keys with running or waiting items, or a rate or pause still in force.
    keys: KeyTable<K, KeyState<T>>,
    /// The settings given to one key, kept until cleared (also while the key is
    /// forgotten): a key made again takes them. As many as the keys the user set.
    own: HashMap<K, KeySettings>,
    /// The map's function of the key giving each key its settings, asked whenever a key
    /// is made (again) and when a control clears what it gave the key.
    given: Option<GivenSettings<K>>,
    /// `keys.len()` after the last sweep of idle keys: the next sweep comes when it
    /// doubles, so sweeping costs O(1) per key, amortised.
    swept_at: usize,
    lines: Lines<K>,
    /// The nodes of every key's queue of fresh items.
    queues: Queues<T>,
    waiting: usize,
    /// Items pushed so far: the clock a spent retry budget lapses on.
    pulled: u64,
    /// Whether the user chose the slot policy (else adaptation brings slot time).
    policy_chosen: bool,
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

    /// The default key limit: the most items of one key that may run at once, for every
    /// key without a limit of its own.
    pub(crate) fn default_limit(&self) -> usize {
        self.defaults.limit()
    }

    /// Forgets every key, waiting item and running count (the running work was dropped).
    pub(crate) fn clear(&mut self) {
        self.keys.clear();
        self.parts.clear();
        self.queues.clear();
        self.lines.turns.clear();
        self.parts.asks.clear();
        self.lines.sleepers.clear();
        self.waiting = 0;
        self.swept_at = 0;
    }

    /// Whether the keys adapt.
    #[inline(always)]
    pub(crate) fn is_adaptive(&self) -> bool {
        self.parts.adaptive.is_some()
    }

    /// Permits of the shared limits in hand, over all keys.
    pub(crate) fn granted(&self) -> usize {
        self.parts.asks.granted()
    }

    /// How many keys the shared limits told "later" that still wait at `now`, and how many
    /// of those were told the limits are warming up.
    pub(crate) fn told_later(&self, now: u64) -> (usize, usize) {
        self.parts.asks.told_later(now)
    }
}

impl<K: Hash + Eq + Clone, T> KeyScheduler<K, T> {
    /// A scheduler whose keys may each run `default_limit` items at once.
    pub(crate) fn new(default_limit: usize) -> Self {
        Self {
            defaults: InForce::defaults(default_limit, None),
            rate: None,
            parts: Parts::new(),
            keys: KeyTable::new(),
            own: HashMap::new(),
            given: None,
            swept_at: 0,
            lines: Lines {
                turns: Turns::new(),
                sleepers: Sleepers::new(),
            },
            queues: Queues::new(),
            waiting: 0,
            pulled: 0,
            policy_chosen: false,
        }
    }

    /// Gives every key a circuit breaker (before any item is pushed).
    pub(crate) fn set_breaker(&mut self, breaker: MapBreaker<K>) {
        self.parts.set_breaker(breaker);
    }

    /// Counts each key's attempts by how they ended, and keeps a key in view 60 s after
    /// its last attempt ended, for a control (before any item is pushed).
    pub(crate) fn set_tally(&mut self) {
        debug_assert!(self.keys.is_empty(), "counts before the first item");
        self.parts.set_tally();
    }

    /// Takes the keys whose breaker refused a start while they held a permit of the
    /// shared limits: the map drops one permit of the key for each (the key's standing
    /// with the limits already counts it gone).
    pub(crate) fn take_returned(&mut self) -> Vec<K> {
        self.parts.asks.take_returned()
    }

    /// The breaker ticket of the item [`next`](Self::next) just started (on a map with
    /// breakers).
    pub(crate) fn take_granted(&mut self) -> Option<Ticket> {
        self.parts
            .breaker
            .as_mut()
            .and_then(MapBreaker::take_granted)
    }

    /// An attempt of `key` ended at `now`, read by the map's classification: every part
    /// hears of it (its hints and pause, adaptation, its breaker, the shared limits), in
    /// their order; the key is placed again by the [`finish`](Self::finish) or
    /// [`retry`](Self::retry) that follows.
    pub(crate) fn ended(&mut self, key: &K, ended: &Ended<'_>, now: u64) {
        if let Some(state) = self.keys.get_mut(key) {
            self.parts.ended(key, state, ended, now);
        }
    }

    /// Sets the whole map's rate (before any item is pushed).
    pub(crate) fn set_rate(&mut self, rate: Gcra) {
        self.rate = Some(MapRate::new(rate));
    }

    /// Sets the retry budget of each key: `ratio` retries per first attempt, `floor` at
    /// once.
    pub(crate) fn set_budget(&mut self, ratio: f64, floor: u32) {
        self.parts.set_budget(RetryBudget::new(ratio, floor));
    }

    /// Sets the default key rate (before any item is pushed).
    pub(crate) fn set_default_rate(&mut self, rate: Gcra) {
        self.defaults.set_rate(Some(rate));
    }

    /// The same settings for another key type and default key limit (before any item is
    /// pushed).
    pub(crate) fn rekeyed<K2: Hash + Eq + Clone>(
        self,
        default_limit: usize,
    ) -> KeyScheduler<K2, T> {
        debug_assert!(self.keys.is_empty(), "rekeyed before the first item");
        assert!(
            self.given.is_none(),
            "tollgate: `.key_settings(..)` names the map's key: call it after `.per_key(..)`"
        );
        let mut scheduler = KeyScheduler::new(default_limit);
        scheduler.defaults.set_rate(self.defaults.rate());
        if self.parts.asks.is_gated() {
            scheduler.set_gated();
        }
        scheduler.rate = self.rate;
        scheduler.lines.turns.set_policy(self.lines.turns.policy());
        scheduler.policy_chosen = self.policy_chosen;
        if let Some(budget) = self.parts.budget {
            scheduler.parts.set_budget(budget);
        }
        scheduler
    }

    /// Whether the map's rate is what keeps anything from starting at `now`.
    pub(crate) fn rate_blocks(&self, now: u64) -> bool {
        self.rate.is_some_and(|rate| rate.allowed_at() > now)
    }

    /// Every start needs a permit of the map's shared limits from now on (before any item
    /// is pushed).
    pub(crate) fn set_gated(&mut self) {
        self.parts.set_gated();
    }

    /// `key`'s entry, made with the default settings if the key is new (sweeping the idle
    /// keys first when the map has doubled its keys since the last sweep).
    /// Also hands out the lines and the asks beside the entry, so the caller can place the
    /// key without looking it up again, and the queues' nodes.
    #[allow(clippy::type_complexity)]
    fn state(
        &mut self,
        key: K,
        now: u64,
    ) -> (
        K,
        &mut KeyState<T>,
        &mut Parts<K>,
        &mut Lines<K>,
        &mut Queues<T>,
    ) {
        // Whether or not the key is new (asking would cost every push a look-up while the
        // table sits at its threshold): the next sweep comes at twice what this one keeps,
        // and a known key forgotten here was idle, so it comes back as it would have been.
        if self.keys.len() >= 2 * self.swept_at.max(32) {
            let (pulled, parts) = (self.pulled, &mut self.parts);
            self.keys
                .retain(|_, state| !(state.is_quiet() && parts.is_idle(state, now, pulled)));
            self.swept_at = self.keys.len();
            let keys = &self.keys;
            self.parts.asks.retain(|key| keys.contains_key(key));
        }
        let Self {
            keys,
            own,
            given,
            defaults,
            parts,
            lines,
            queues,
            ..
        } = self;
        let (key, at, new) = keys.find_or_insert_with(
            key,
            |key| {
                let given = given.as_mut().map(|given| given.of(key));
                defaults.for_new_key(own.get(key), given)
            },
            KeyState::new,
            |settings, at, state| state.renew(settings, at),
        );
        let state = keys.at_mut(at);
        if new {
            state.account = lines.turns.fresh();
            parts.made(&key, state, now);
        }
        (key, state, parts, lines, queues)
    }

    /// Puts a key that is out of the lines where it belongs at `now`; returns where.
    fn place(&mut self, key: K, now: u64) -> Place {
        let state = self.keys.get_mut(&key).expect("a placed key has state");
        Self::put(state, key, now, &mut self.parts, &mut self.lines);
        state.place()
    }

    /// Puts `key`, of entry `state`, out of the lines, where its parts' verdict at `now`
    /// puts it: in the turns or sleepers of `lines`, in the askers of the shared limits,
    /// or nowhere (held).
    #[inline]
    fn put(state: &mut KeyState<T>, key: K, now: u64, parts: &mut Parts<K>, lines: &mut Lines<K>) {
        state.set_place(match parts.verdict(&key, state, now) {
            Verdict::Held => Place::Out,
            Verdict::At(at) | Verdict::Refuse(at) | Verdict::Ask(at) if at > now => {
                Place::Asleep(at.min(LATEST_WAKE))
            }
            Verdict::Ask(_) => Place::Ask,
            Verdict::At(_) | Verdict::Refuse(_) => Place::Turn,
        });
        match state.place() {
            Place::Out => {}
            Place::Ask => parts.asks.push_asker(key),
            Place::Turn => lines.turns.push(key, state.account),
            Place::Asleep(at) => lines.sleepers.push(at, key),
        }
    }

    /// Places `key` again if it is out of the lines, or asleep until later than it needs.
    #[inline]
    fn replace(&mut self, key: &K, now: u64) {
        if let Some(state) = self.keys.get_mut(key) {
            Self::replace_in(state, key, now, &mut self.parts, &mut self.lines);
        }
    }

    /// [`replace`](Self::replace) for a key whose entry the caller already holds: the hot
    /// paths (an item pushed, an attempt ended) look their key up once.
    #[inline]
    fn replace_in(
        state: &mut KeyState<T>,
        key: &K,
        now: u64,
        parts: &mut Parts<K>,
        lines: &mut Lines<K>,
    ) {
        let again = match state.place() {
            Place::Out => true,
            // An asker that got a permit or may start is checked when it is popped.
            Place::Turn | Place::Ask => false,
            Place::Asleep(at) => parts
                .verdict(key, state, now)
                .time()
                .is_none_or(|ready| ready < at),
        };
        if again {
            Self::put(state, key.clone(), now, parts, lines);
        }
    }

    /// Places every key again where it belongs at `now` (after a setting changed).
    fn replace_all(&mut self, now: u64) {
        let keys: Vec<K> = self.keys.keys().cloned().collect();
        for key in &keys {
            self.replace(key, now);
        }
    }

    /// Queues a freshly pulled item behind the older items of its key.
    pub(crate) fn push(&mut self, key: K, item: T, now: u64) {
        self.pulled += 1;
        let pulled = self.pulled;
        self.waiting += 1;
        let (key, state, parts, lines, queues) = self.state(key, now);
        if state.is_quiet() {
            // Back after its budget lapsed, not yet swept: as fresh as a forgotten key.
            state.reopen_retries(pulled);
        }
        state.push_fresh(queues, item);
        Self::replace_in(state, &key, now, parts, lines);
    }

    /// Queues an item back from a failed attempt of `key` (which no longer runs it),
    /// not to start before `not_before`. `order` is its place in the input.
    pub(crate) fn retry(&mut self, key: &K, item: T, order: u64, not_before: u64, now: u64) {
        let state = self.keys.get_mut(key).expect("a running key has state");
        let refused = matches!(
            self.parts.breaker.verdict(key, state, now),
            Verdict::Refuse(_)
        );
        // An item whose key's breaker is open (on a map where such items fail) ends now.
        let not_before = if refused { now } else { not_before };
        state.push_retry(item, order, not_before);
        self.waiting += 1;
        Self::replace_in(state, key, now, &mut self.parts, &mut self.lines);
    }

    /// Pauses `key` (the retry policy asked): none of its items starts before `until`.
    pub(crate) fn pause(&mut self, key: &K, until: u64, now: u64) {
        let Some(state) = self.keys.get_mut(key) else {
            return;
        };
        Pauses::pause(state, until, PausedBy::RetryPolicy);
        // A key in `turns` is checked when its turn comes; one asleep wakes, sees the
        // pause and sleeps on.
        self.replace(key, now);
    }

    /// Whether `key` may retry once more under the retry budget; counts the retry if so.
    pub(crate) fn take_retry(&mut self, key: &K) -> bool {
        let Some(budget) = &self.parts.budget else {
            return true;
        };
        self.keys
            .get_mut(key)
            .is_some_and(|state| budget.take(&mut state.retries_mut().spent))
    }

    /// The next item to start at `now`, counted as running, or when to ask again.
    pub(crate) fn next(&mut self, now: u64) -> Next<K, T> {
        self.wake(now);
        if let Some(rate) = &self.rate {
            // Keys waiting to ask wait for the map's rate too (asking for a permit that
            // could not start would hold it idle).
            if !self.lines.turns.is_empty() || self.parts.asks.has_askers() {
                let at = rate.allowed_at();
                if at > now {
                    return Next::NotBefore(at);
                }
            }
        }
        while let Some(key) = self.lines.turns.pop() {
            // A key forgotten since it got its turn (a drain took its items, then its
            // last item finished): nothing to start.
            let Some(state) = self.keys.get_mut(&key) else {
                continue;
            };
            state.set_place(Place::Out);
            // Every part's verdict first, then the start: no part's refusal can strand
            // what another granted.
            match self.parts.verdict(&key, state, now) {
                Verdict::At(at) if at <= now => {}
                Verdict::Refuse(at) if at <= now => return self.refuse(key, now),
                _ => {
                    if self.parts.breaker_holds(&key, state, now) {
                        // The breaker opened or filled its probes after the shared limits
                        // granted a permit: it goes back at once rather than wait in hand.
                        self.parts.asks.give_back(&key);
                    }
                    // Paused, full or held since it got its turn: back where it belongs.
                    Self::put(state, key, now, &mut self.parts, &mut self.lines);
                    continue;
                }
            }
            let (item, first) = state
                .take_item(now, &mut self.queues)
                .expect("a ready key has an item");
            self.parts.started(&key, state, now, first);
            if self.lines.turns.is_charged() {
                let latency = self.parts.latency(state);
                let in_flight = state.running();
                state.account = self.lines.turns.charge(state.account, latency, in_flight);
            }
            if let Some(rate) = &mut self.rate {
                rate.start(now);
            }
            self.waiting -= 1;
            // Still room and work: back of the line (or asleep), so other keys go first.
            let started = key.clone();
            Self::put(state, key, now, &mut self.parts, &mut self.lines);
            return Next::Start(started, item);
        }
        match self.lines.sleepers.earliest() {
            Some(at) => Next::NotBefore(at),
            None => Next::Nothing,
        }
    }

    /// The next item of `key`, whose verdict at `now` is a refusal (its breaker is open, on
    /// a map where such items fail), ends at once: it is taken out, never started, and the
    /// key gives back any permit of its shared limits.
    fn refuse(&mut self, key: K, now: u64) -> Next<K, T> {
        let state = self.keys.get_mut(&key).expect("a refused key has state");
        let breaker = self.parts.breaker.as_mut().expect("only a breaker refuses");
        let error = breaker.refuse(&key, state, now);
        self.parts.asks.give_back(&key);
        let (item, _) = state
            .take_item(now, &mut self.queues)
            .expect("a ready key has an item");
        state.end_one();
        self.waiting -= 1;
        let refused = key.clone();
        Self::put(state, key, now, &mut self.parts, &mut self.lines);
        Next::Refused(refused, item, error)
    }

    /// Moves the keys whose time has come from the sleepers to their line, a gap apart
    /// (the spread, `pacing.rs`).
    fn wake(&mut self, now: u64) {
        while let Some((at, key)) = self.lines.sleepers.pop_due(now) {
            match self.keys.get(&key) {
                Some(state) if state.place() == Place::Asleep(at) => {
                    let rate = state.settings.rate();
                    let keys = self.keys.len();
                    if matches!(self.place(key, now), Place::Turn | Place::Ask) {
                        self.lines.sleepers.woke(at, rate.as_ref(), keys);
                    }
                }
                _ => {} // stale: the key moved after this entry was made
            }
        }
    }

    /// Changes the default key limit of a running map, for every key without a limit of
    /// its own: keys that now have room get their turn; a key above the new limit starts
    /// nothing until it runs fewer.
    pub(crate) fn set_default_limit(&mut self, limit: usize, now: u64) {
        self.defaults.set_limit(limit);
        let parts = &mut self.parts;
        self.keys.for_each_mut(|state| {
            parts.change_settings(state, now, |settings, _| settings.follow_limit(limit));
        });
        self.replace_all(now);
    }

    /// Changes the map's rate; the starts its state is ahead by carry over, spaced by
    /// the new rate.
    pub(crate) fn change_rate(&mut self, rate: Gcra, now: u64) {
        self.rate = Some(MapRate::changed(self.rate, rate, now));
    }

    /// Changes the default key rate of a running map, for every key without a rate of its
    /// own, carrying each key's state over; keys asleep for longer than the new rate asks
    /// are woken earlier.
    pub(crate) fn change_default_rate(&mut self, rate: Gcra, now: u64) {
        self.defaults.set_rate(Some(rate));
        let parts = &mut self.parts;
        self.keys.for_each_mut(|state| {
            parts.change_settings(state, now, |settings, tat| {
                settings.follow_rate(rate, tat, now);
            });
        });
        self.replace_all(now);
    }

    /// The keys adapt their limits and rates as `adaptive` says, under their settings as
    /// ceilings (before the first item is pushed).
    pub(crate) fn set_adaptive(&mut self, adaptive: Adaptive) {
        debug_assert!(self.keys.is_empty(), "adaptive before the first item");
        self.parts.set_adaptive(adaptive);
        if !self.policy_chosen {
            self.lines.turns.set_policy(SlotPolicy::SlotTime);
        }
    }

    /// Shares the global slots among keys by `policy` (before the first item is pushed).
    pub(crate) fn set_slot_policy(&mut self, policy: SlotPolicy) {
        debug_assert!(self.keys.is_empty(), "a slot policy before the first item");
        self.lines.turns.set_policy(policy);
        self.policy_chosen = true;
    }

    /// Every key made from now on asks `given` for its settings (before the first item
    /// is pushed).
    pub(crate) fn set_given(&mut self, given: GivenSettings<K>) {
        debug_assert!(
            self.keys.is_empty(),
            "key settings given before the first item"
        );
        self.given = Some(given);
    }

    /// Gives `key` the values `settings` sets as its own, which a change of the default
    /// key limit or rate does not reach (its rate state carried over); what `settings`
    /// leaves unset stays as it is. Kept while the key is forgotten, until
    /// [cleared](Self::clear_own).
    pub(crate) fn set_own(&mut self, key: K, settings: KeySettings, now: u64) {
        let own = self.own.entry(key.clone()).or_default();
        *own = own.overlaid(settings);
        if let Some(state) = self.keys.get_mut(&key) {
            self.parts.change_settings(state, now, |in_force, tat| {
                in_force.set_own(settings, tat, now);
            });
            self.replace(&key, now);
        }
    }

    /// Clears the settings of `key`'s own: it follows the defaults again.
    pub(crate) fn clear_own(&mut self, key: &K, now: u64) {
        self.own.remove(key);
        if let Some(state) = self.keys.get_mut(key) {
            let given = self.given.as_mut().map(|given| given.of(key));
            let defaults = &self.defaults;
            self.parts.change_settings(state, now, |settings, tat| {
                settings.follow_defaults(defaults, given, tat, now);
            });
            self.replace(key, now);
        }
    }

    /// Moves an adaptive `key`'s values in force to what `settings` sets (held within its
    /// floor and ceilings), where its adaptation goes on from. A key the map does not hold
    /// now (never seen, or forgotten: it starts low when it comes back), or a map whose keys
    /// do not adapt, is left as it is.
    pub(crate) fn set_in_force(&mut self, key: &K, settings: KeySettings, now: u64) {
        let (Some(adaptation), Some(state)) = (&mut self.parts.adaptive, self.keys.get_mut(key))
        else {
            return;
        };
        adaptation.set_in_force(state, settings, now);
        self.replace(key, now);
    }

    /// Applies a setting of one key a control asked for.
    pub(crate) fn change_key(&mut self, change: KeyChange<K>, now: u64) {
        match change {
            KeyChange::Set(key, settings) => self.set_own(key, settings, now),
            KeyChange::Clear(key) => self.clear_own(&key, now),
            KeyChange::InForce(key, settings) => self.set_in_force(&key, settings, now),
        }
    }

    /// Removes every fresh item (pulled, never started) of every key and returns them.
    /// Items back from a failed attempt stay: they have started.
    pub(crate) fn take_fresh(&mut self) -> Vec<T> {
        let mut taken = Vec::new();
        let queues = &mut self.queues;
        self.keys
            .for_each_mut(|state| state.take_fresh(queues, &mut taken));
        self.waiting -= taken.len();
        // Keys left without items leave the lines when their turn or wake-up comes.
        taken
    }

    /// Removes every item waiting for a retry (back from a failed attempt) of every key and
    /// returns them: a stop cancels them.
    pub(crate) fn take_retrying(&mut self) -> Vec<T> {
        let mut taken = Vec::new();
        self.keys
            .for_each_mut(|state| state.take_retrying(&mut taken));
        self.waiting -= taken.len();
        taken
    }

    /// Takes back the permits granted for items that are gone (a drain took them): how
    /// many each key no longer needs. The map drops that many of the key's permits.
    pub(crate) fn take_surplus(&mut self) -> Vec<(K, usize)> {
        let keys = &self.keys;
        self.parts
            .asks
            .take_surplus(|key| keys.get(key).map_or(0, KeyState::items))
    }

    /// How many keys are paused at `now`, how many have a breaker open or half-open, and
    /// the `n` keys first in a control's view, as their parts show them: the keys with the
    /// most items waiting or running (busiest first), then those whose breaker is open or
    /// half-open, then, on a map whose control keeps keys in view (`tally.rs`), the idle
    /// keys still kept, the one whose last attempt ended latest first.
    pub(crate) fn busiest(&self, now: u64, n: usize) -> (usize, usize, Vec<KeyProgress<K>>) {
        let (mut paused, mut open) = (0, 0);
        let in_view = self.parts.tally.is_some();
        let mut loads = Vec::new();
        for (key, state) in self.keys.iter() {
            paused += usize::from(state.is_paused(now));
            let is_open = self
                .parts
                .breaker
                .as_ref()
                .is_some_and(|breaker| breaker.state(state, now) != BreakerState::Closed);
            open += usize::from(is_open);
            let load = state.items() + state.running();
            // An idle key in view: kept since its last attempt ended, to 60 s after it.
            let kept = in_view && state.is_quiet() && state.is_kept(now);
            if n > 0 && (load > 0 || is_open || kept) {
                let rank = (Reverse(load), Reverse(is_open), Reverse(state.kept_until()));
                loads.push((rank, key, state));
            }
        }
        let rank = |(rank, _, _): &(_, &K, &KeyState<T>)| *rank;
        if loads.len() > n {
            loads.select_nth_unstable_by_key(n, rank);
            loads.truncate(n);
        }
        loads.sort_by_key(rank);
        let busiest = loads
            .into_iter()
            .map(|(_, key, state)| self.progress(key, state, now))
            .collect();
        (paused, open, busiest)
    }

    /// `key`'s figures (of entry `state`) at `now`, as its parts show them.
    fn progress(&self, key: &K, state: &KeyState<T>, now: u64) -> KeyProgress<K> {
        let mut progress = KeyProgress {
            key: key.clone(),
            waiting: state.items(),
            in_flight: state.running(),
            paused: false,
            paused_by: None,
            last_cut: None,
            limit: state.limit(),
            rate_interval: 0,
            breaker: None,
            held_by: self.held_by(key, state, now),
            attempts: 0,
            successes: 0,
            overloads: 0,
            outages: 0,
            failures: 0,
        };
        self.parts.show(state, now, &mut progress);
        progress
    }

    /// What keeps `key`'s waiting items (of entry `state`) from starting at `now`: the
    /// first that applies, in the order of a start.
    fn held_by(&self, key: &K, state: &KeyState<T>, now: u64) -> HeldBy {
        let held = |verdict: Verdict| match verdict {
            Verdict::Held | Verdict::Refuse(_) => true,
            Verdict::At(at) | Verdict::Ask(at) => at > now,
        };
        let gated = self.parts.asks.is_gated();
        if !state.has_items() {
            HeldBy::Nothing
        } else if state.running() >= state.limit() {
            HeldBy::Limit
        } else if state.is_paused(now) {
            HeldBy::Pause
        } else if held(self.parts.breaker.verdict(key, state, now)) {
            HeldBy::Breaker
        } else if gated && matches!(state.place(), Place::Ask | Place::Out) {
            HeldBy::SharedLimits
        } else if held(self.parts.rate.verdict(key, state, now)) {
            HeldBy::Rate
        } else if state.work_ready_at().is_some_and(|at| at > now) {
            HeldBy::Retry
        } else if gated && matches!(state.place(), Place::Asleep(_)) {
            HeldBy::SharedLimits
        } else if self.rate_blocks(now) {
            HeldBy::MapRate
        } else {
            HeldBy::GlobalLimit
        }
    }

    /// The next key that may ask its shared limits for a permit at `now`, marked as
    /// asking (it leaves the lines until the answer); `None` when no key may.
    pub(crate) fn next_ask(&mut self, now: u64) -> Option<K> {
        self.wake(now);
        if let Some(rate) = &self.rate {
            // The map's rate comes first: ask only for starts it allows now, counting the
            // permits in hand and those asked for (a permit would wait for it in hand).
            if rate.starts_allowed(now) <= self.parts.asks.pending() as u64 {
                return None;
            }
        }
        while let Some(key) = self.parts.asks.pop_asker() {
            // A key forgotten since it got in line (see `next`): nothing to ask for.
            let Some(state) = self.keys.get_mut(&key) else {
                continue;
            };
            state.set_place(Place::Out);
            match self.parts.verdict(&key, state, now) {
                Verdict::Ask(at) if at <= now => {
                    self.parts.asks.start_ask(key.clone());
                    return Some(key);
                }
                _ => {
                    self.place(key, now);
                }
            }
        }
        None
    }

    /// The shared limits granted `key` a permit: its next item may start. `false` when the
    /// key no longer needs it (a drain took its items): the map drops the permit.
    pub(crate) fn grant(&mut self, key: &K, now: u64) -> bool {
        let items = self.keys.get(key).map_or(0, KeyState::items);
        let Some(needed) = self.parts.asks.grant(key, items) else {
            return false;
        };
        self.replace(key, now);
        needed
    }

    /// The shared limits told `key` to ask again at `until` (or when woken earlier), for
    /// `reason`. `true` when this answer starts a warm-up of the limits (the first one told
    /// since the last grant), to be reported once, not once per ask.
    pub(crate) fn later(&mut self, key: &K, until: u64, reason: LaterReason, now: u64) -> bool {
        let (warm_up_starts, known) = self.parts.asks.later(key, until, reason, now);
        if known {
            self.replace(key, now);
        }
        warm_up_starts
    }

    /// `key`'s room in its shared limits may be back: it may ask again at once, or at the
    /// floor after its last "later" if that is still ahead.
    pub(crate) fn wake_asker(&mut self, key: &K, now: u64) {
        if self.parts.asks.wake(key, now) {
            self.replace(key, now);
        }
    }

    /// The shared limits could not answer `key`'s ask: its next item is taken out,
    /// counted as running (its attempt ends at once with the error, through
    /// [`finish`](Self::finish) or [`retry`](Self::retry)). `None` if it has no item left.
    pub(crate) fn ask_failed(&mut self, key: &K, now: u64) -> Option<T> {
        self.parts.asks.ask_failed(key);
        let state = self.keys.get_mut(key)?;
        let (item, _) = state.take_item(now, &mut self.queues)?;
        if let Some(tally) = &mut self.parts.tally {
            tally.count_start(state);
        }
        self.waiting -= 1;
        self.replace(key, now);
        Some(item)
    }

    /// Records that an item of `key` finished, freeing room for the key's next one.
    pub(crate) fn finish(&mut self, key: &K, now: u64) {
        let state = self.keys.get_mut(key).expect("a running key has state");
        state.end_one();
        let quiet = state.is_quiet();
        state.settle_retries(self.pulled, quiet);
        if quiet && self.parts.is_idle(state, now, self.pulled) {
            self.keys.remove(key);
            if self.parts.asks.is_gated() {
                self.parts.asks.forget(key);
            }
        } else {
            Self::replace_in(state, key, now, &mut self.parts, &mut self.lines);
        }
    }
}

#[cfg(test)]
#[path = "scheduler_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "gated_breaker_tests.rs"]
mod gated_breaker_tests;

/// What the tests tell a scheduler the way the map would, through the parts.
#[cfg(test)]
impl<K: Hash + Eq + Clone, T> KeyScheduler<K, T> {
    /// An attempt of `key` ended at `now` with an output whose hint is `hint`, heard by the
    /// parts that read hints (the pause's and the hints'), and the key placed again.
    pub(super) fn hinted(&mut self, key: &K, hint: crate::limit::hint::Hint, now: u64) {
        let unpolled = super::latency::Unpolled::default();
        let outcome = crate::limit::outcome::Outcome::success().with_hint(hint);
        let ended = Ended {
            outcome: &outcome,
            hinted: !hint.is_empty(),
            ticket: None,
            clock: super::latency::AttemptClock::default(),
            unpolled: &unpolled,
            attempt: 1,
        };
        let Some(state) = self.keys.get_mut(key) else {
            return;
        };
        self.parts.hinted(key, state, &ended, now);
        Self::replace_in(state, key, now, &mut self.parts, &mut self.lines);
    }

    /// An attempt of `key` whose start was granted `ticket` ended at `now`, a `success` or
    /// not, heard by every part, and the key placed again.
    pub(super) fn broke(&mut self, key: &K, ticket: Ticket, success: bool, now: u64) {
        use crate::limit::outcome::Outcome;
        let unpolled = super::latency::Unpolled::default();
        let outcome = if success {
            Outcome::success()
        } else {
            Outcome::failure()
        };
        let ended = Ended {
            outcome: &outcome,
            hinted: false,
            ticket: Some(ticket),
            clock: super::latency::AttemptClock::default(),
            unpolled: &unpolled,
            attempt: 1,
        };
        self.ended(key, &ended, now);
        self.replace(key, now);
    }
}
