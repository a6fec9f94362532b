//! The scheduler's parts, registered once, in order (the contract: `part.rs`).
//!
//! The order is the order of a start: a key's items and room first (the scheduler's own),
//! then its rate, its pause, its breaker, its shared limits: a verdict folds them
//! ([`Verdict::and`]: a refusal skips the ask), and a start commits them in the same order
//! (the breaker's ticket, the rate's state, adaptation hearing of the start, the shared
//! limits' permit, the retry budget's share). An attempt's end reaches the parts that read
//! outcomes in the order they depend on each other: hints and pauses (what the server
//! said), adaptation, the breaker, the counts a control shows, then the shared limits (which
//! give back the permits of a key its breaker now holds).
//!
//! Adding a per-key feature: one file implementing [`Part`], and here a field, its setter
//! (which sets `more`, and `judges` for a part with a verdict of its own: the folds skip
//! every optional part in one branch on maps that have none) and its place in each fold.
//! Its per-key state is a field of the key's entry when small and common, else a column of
//! the part's own at the entry's slot (`key_table.rs`).
//!
//! Two parts depend on others, and the registration joins them: a hint's settings change
//! the key's settings through their owner ([`change_settings`](Parts::change_settings):
//! on an adaptive map they are its ceilings), and the shared limits take back the permit
//! of a key whose breaker an end opened.

use std::hash::Hash;

use super::adaptation::Adaptation;
use super::asking::Asks;
use super::breaking::MapBreaker;
use super::budget::RetryBudget;
use super::hints::Hints;
use super::key::KeyState;
use super::key_rate::KeyRates;
use super::part::{Ended, Part, Verdict};
use super::pause::Pauses;
use super::settings::InForce;
use super::tally::Tally;
use crate::events;
use crate::limit::adaptive::config::Adaptive;
use crate::limit::breaker::core::BreakerState;
use crate::limit::hint::Hint;
use crate::limit::rate::gcra::Gcra;
use crate::map::control::KeyProgress;

/// Every part of a map's scheduler: map-level values, `None` for a part the map has not.
#[derive(Debug)]
pub(super) struct Parts<K> {
    pub(super) rate: KeyRates,
    pub(super) pause: Pauses,
    pub(super) hints: Hints,
    pub(super) adaptive: Option<Adaptation>,
    pub(super) breaker: Option<MapBreaker<K>>,
    pub(super) asks: Asks<K>,
    pub(super) budget: Option<RetryBudget>,
    /// The counts a control shows, and the keys it keeps in view (a keyed map with a
    /// control only).
    pub(super) tally: Option<Tally>,
    /// Whether the map has any part beyond the key's rate, pause and hints (adaptation,
    /// a breaker, shared limits, a retry budget, the counts): a map with none of them
    /// asks one question for all of them on each start and end.
    more: bool,
    /// Whether any part but the rate and the pause has a verdict of its own (a breaker,
    /// shared limits): the others' verdicts are asked in one question.
    judges: bool,
}

impl<K> Parts<K> {
    /// How long an attempt of `state`'s key holds a slot, in nanoseconds, as its
    /// adaptation measured it (`None`: not known, or the map does not adapt).
    #[inline]
    pub(super) fn latency<T>(&self, state: &KeyState<T>) -> Option<u64> {
        self.adaptive
            .as_ref()
            .and_then(|adaptive| adaptive.latency(state))
    }

    pub(super) fn new() -> Self {
        Self {
            rate: KeyRates,
            pause: Pauses,
            hints: Hints,
            adaptive: None,
            breaker: None,
            asks: Asks::new(),
            budget: None,
            tally: None,
            more: false,
            judges: false,
        }
    }

    /// Registers a breaker per key (before the first item).
    pub(super) fn set_breaker(&mut self, breaker: MapBreaker<K>) {
        self.breaker = Some(breaker);
        self.more = true;
        self.judges = true;
    }

    /// Registers adaptation (before the first item).
    pub(super) fn set_adaptive(&mut self, adaptive: Adaptive) {
        self.adaptive = Some(Adaptation::new(adaptive));
        self.more = true;
    }

    /// Registers a retry budget (before the first item).
    pub(super) fn set_budget(&mut self, budget: RetryBudget) {
        self.budget = Some(budget);
        self.more = true;
    }

    /// Registers the counts a control shows (before the first item).
    pub(super) fn set_tally(&mut self) {
        self.tally = Some(Tally::new());
        self.more = true;
    }

    /// Forgets every key's state in the parts' columns (the scheduler forgot its keys).
    pub(super) fn clear(&mut self) {
        if let Some(tally) = &mut self.tally {
            tally.clear();
        }
        if let Some(adaptation) = &mut self.adaptive {
            adaptation.clear();
        }
        if let Some(breaker) = &mut self.breaker {
            breaker.clear();
        }
    }

    /// The limit and rate `state`'s key was given (the user's, a hint's or a control's):
    /// its settings, or on an adaptive map its ceilings.
    pub(super) fn given<T>(&self, state: &KeyState<T>) -> (usize, Option<Gcra>) {
        match &self.adaptive {
            Some(adaptation) => adaptation.given(state),
            None => (state.settings.limit(), state.settings.rate()),
        }
    }

    /// Changes the settings of `state`'s key with `change`, which gets them and the key's
    /// rate state to carry over. On an adaptive map the settings given are the key's
    /// ceilings and the values in force follow them (a change of those is told like any
    /// adaptation).
    pub(super) fn change_settings<T>(
        &mut self,
        state: &mut KeyState<T>,
        now: u64,
        change: impl FnOnce(&mut InForce, &mut u64),
    ) {
        let Some(adaptation) = &mut self.adaptive else {
            change(&mut state.settings, &mut state.tat);
            return;
        };
        let before = (state.limit(), state.rate());
        adaptation.change(state, now, change);
        let after = (state.limit(), state.rate());
        if after != before {
            events::key_adapted(after.0, after.1.map(|rate| rate.per_second()));
        }
    }

    /// Registers shared limits: every start needs a permit of them (before the first item).
    pub(super) fn set_gated(&mut self) {
        self.asks.set_gated();
        self.more = true;
        self.judges = true;
    }
}

impl<K: Hash + Eq + Clone> Parts<K> {
    /// A key's entry was made.
    pub(super) fn made<T>(&mut self, key: &K, state: &mut KeyState<T>, now: u64) {
        self.adaptive.made(key, state, now);
        self.breaker.made(key, state, now);
        self.tally.made(key, state, now);
    }

    /// When `key` may start its next item at `now`, and how: every part's verdict in one.
    /// Held without an item or without room.
    #[inline(always)]
    pub(super) fn verdict<T>(&self, key: &K, state: &KeyState<T>, now: u64) -> Verdict {
        let Some(work) = state.ready_at() else {
            return Verdict::Held;
        };
        let verdict = Verdict::At(work)
            .and(self.rate.verdict(key, state, now))
            .and(self.pause.verdict(key, state, now));
        if !self.judges {
            return verdict;
        }
        verdict
            .and(self.breaker.verdict(key, state, now))
            .and(self.asks.verdict(key, state, now))
    }

    /// Whether the key's breaker holds it back at `now` (open, or half-open with its probes
    /// out): a permit of the shared limits in hand goes back.
    pub(super) fn breaker_holds<T>(&self, key: &K, state: &KeyState<T>, now: u64) -> bool {
        self.breaker.verdict(key, state, now) != Verdict::NOW
    }

    /// An item of `key` started at `now` (`first`: its first attempt), every verdict
    /// allowing it.
    #[inline(always)]
    pub(super) fn started<T>(&mut self, key: &K, state: &mut KeyState<T>, now: u64, first: bool) {
        if !self.more {
            self.rate.started(key, state, now, first);
            return;
        }
        self.breaker.started(key, state, now, first);
        self.rate.started(key, state, now, first);
        self.adaptive.started(key, state, now, first);
        self.asks.started(key, state, now, first);
        self.budget.started(key, state, now, first);
        self.tally.started(key, state, now, first);
    }

    /// An attempt of `key` ended at `now`.
    #[inline]
    pub(super) fn ended<T>(
        &mut self,
        key: &K,
        state: &mut KeyState<T>,
        ended: &Ended<'_>,
        now: u64,
    ) {
        if ended.hinted {
            // (The parts that read only hints hear only outcomes that carry one.)
            self.hinted(key, state, ended, now);
        }
        self.adaptive.ended(key, state, ended, now);
        self.breaker.ended(key, state, ended, now);
        self.tally.ended(key, state, ended, now);
        if self.asks.is_gated()
            && self
                .breaker
                .as_ref()
                .is_some_and(|breaker| breaker.state(state, now) == BreakerState::Open)
        {
            // Its breaker is open: a permit in hand would wait idle.
            self.asks.give_back(key);
        }
    }

    /// An attempt of `key` ended at `now` with an outcome that carries a hint: the parts
    /// that read hints hear of it (its pause, and its settings, which change the key's
    /// through their owner).
    pub(super) fn hinted<T>(
        &mut self,
        key: &K,
        state: &mut KeyState<T>,
        ended: &Ended<'_>,
        now: u64,
    ) {
        let too_long = ended
            .outcome
            .hint_ref()
            .get_pause()
            .is_some_and(|pause| pause > Hint::MAX_PAUSE);
        match &mut self.breaker {
            // A server that asks for more than a map waits: the key's breaker opens.
            Some(breaker) if too_long => breaker.open_now(key, state, now),
            _ => self.pause.ended(key, state, ended, now),
        }
        if let Some(change) = Hints::change(ended, self.given(state)) {
            self.change_settings(state, now, |settings, tat| {
                settings.set_own(change, tat, now);
            });
        }
        self.hints.ended(key, state, ended, now);
    }

    /// Whether no part holds anything of the key a fresh one would not (a clean breaker is
    /// dropped on the way).
    #[inline]
    pub(super) fn is_idle<T>(&mut self, state: &mut KeyState<T>, now: u64, pulled: u64) -> bool {
        let own = Part::<K, T>::is_idle(&mut self.rate, state, now, pulled)
            && Part::<K, T>::is_idle(&mut self.pause, state, now, pulled)
            && Part::<K, T>::is_idle(&mut self.hints, state, now, pulled);
        if !self.more {
            return own;
        }
        // The breaker is asked whatever the others say: it drops a clean core even when
        // another part keeps the key; so are the counts, which keep a key that just went
        // quiet in view.
        let breaker = Part::<K, T>::is_idle(&mut self.breaker, state, now, pulled);
        let tally = Part::<K, T>::is_idle(&mut self.tally, state, now, pulled);
        own && breaker
            && tally
            && Part::<K, T>::is_idle(&mut self.adaptive, state, now, pulled)
            && Part::<K, T>::is_idle(&mut self.budget, state, now, pulled)
    }

    /// What the parts show of the key in a control's view.
    pub(super) fn show<T>(&self, state: &KeyState<T>, now: u64, progress: &mut KeyProgress<K>) {
        self.rate.show(state, now, progress);
        self.pause.show(state, now, progress);
        self.adaptive.show(state, now, progress);
        self.breaker.show(state, now, progress);
        self.tally.show(state, now, progress);
    }
}
