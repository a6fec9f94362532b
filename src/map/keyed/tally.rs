//! The per-key counts a control shows, as a part: see [`Part`] for the contract. A key's
//! counts are its [`KeyTally`], in the part's column at the key's slot; the part is
//! registered only on a keyed map with a control attached, so a map without one pays
//! nothing per key; on its starts and ends, a map with no other optional part pays no
//! instruction (the parts' one question covers it), one with some (adaptation, a breaker)
//! one test of a part it has not.
//!
//! It also keeps a key in view: an idle key stays [`KEPT_IDLE`] after its last attempt
//! ended (its entry's [`keep_until`](KeyState::keep_until)), counts and all, so that a
//! control still lists it ([`busiest`](super::scheduler::KeyScheduler::busiest), after the
//! busy keys).

use super::key::KeyState;
use super::key_table::Column;
use super::part::{Ended, Part};
use crate::map::control::KeyProgress;

/// How long a key is kept in view after its last attempt ended, once it has nothing to do
/// (60 s, as an adaptive key is kept: the idle-key sweep forgets it after that).
const KEPT_IDLE: u64 = 60_000_000_000;

/// In [`KeyTally::started`]: an attempt of the key started since it last went quiet (its
/// end, once the key has nothing running or waiting, keeps it in view). The count is the
/// bits below.
const PENDING: u32 = 1 << 31;

/// One key's counts, from when its entry was made (a key forgotten and seen again starts
/// from zero). Each count saturates.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct KeyTally {
    /// Attempts started (31 bits), and [`PENDING`].
    started: u32,
    successes: u32,
    overloads: u32,
    outages: u32,
    failures: u32,
}

impl KeyTally {
    /// Attempts started, saturating below [`PENDING`].
    fn started(self) -> u32 {
        self.started & !PENDING
    }
}

/// The counts of every key of a map with a control.
#[derive(Debug)]
pub(super) struct Tally {
    keys: Column<KeyTally>,
}

impl Tally {
    pub(super) const fn new() -> Self {
        Self {
            keys: Column::new(),
        }
    }

    /// Forgets every key's counts (the scheduler forgot its keys).
    pub(super) fn clear(&mut self) {
        self.keys.clear();
    }

    /// Counts an attempt of `state`'s key that starts outside the parts' starts (the shared
    /// limits could not answer its ask: it ends at once with the error, an attempt as the
    /// map counts it, and its outcome is read like any other's).
    pub(super) fn count_start<T>(&mut self, state: &KeyState<T>) {
        let row = &mut self.keys[state.slot()];
        row.started = (row.started() + 1).min(PENDING - 1) | PENDING;
    }
}

/// The counts as a part: a start counts an attempt, an end counts its outcome's kind (on a
/// map that reads outcomes: the others hear no end), and the key going quiet keeps it in
/// view [`KEPT_IDLE`]. It never holds a start back.
impl<K, T> Part<K, T> for Tally {
    fn made(&mut self, _key: &K, state: &mut KeyState<T>, _now: u64) {
        self.keys.put(state.slot(), KeyTally::default());
    }

    #[inline]
    fn started(&mut self, _key: &K, state: &mut KeyState<T>, _now: u64, _first: bool) {
        self.count_start(state);
    }

    #[inline]
    fn ended(&mut self, _key: &K, state: &mut KeyState<T>, ended: &Ended<'_>, _now: u64) {
        let row = &mut self.keys[state.slot()];
        let outcome = ended.outcome;
        let count = if outcome.is_success() {
            &mut row.successes
        } else if outcome.is_overload() {
            &mut row.overloads
        } else if outcome.is_outage() {
            &mut row.outages
        } else {
            &mut row.failures
        };
        *count = count.saturating_add(1);
    }

    /// Asked only of a quiet key (nothing running or waiting): the first time since an
    /// attempt of it started is when that attempt, its last, ended (the scheduler asks as
    /// the key goes quiet), and keeps the key [`KEPT_IDLE`] from then.
    #[inline]
    fn is_idle(&mut self, state: &mut KeyState<T>, now: u64, _pulled: u64) -> bool {
        let row = &mut self.keys[state.slot()];
        if row.started & PENDING != 0 {
            row.started &= !PENDING;
            state.keep_until(now.saturating_add(KEPT_IDLE));
        }
        !state.is_kept(now)
    }

    fn show(&self, state: &KeyState<T>, _now: u64, progress: &mut KeyProgress<K>) {
        let row = self.keys[state.slot()];
        // The attempts started and no longer running: ended.
        let in_flight = u32::try_from(progress.in_flight).unwrap_or(u32::MAX);
        progress.attempts = row.started().saturating_sub(in_flight);
        progress.successes = row.successes;
        progress.overloads = row.overloads;
        progress.outages = row.outages;
        progress.failures = row.failures;
    }
}
