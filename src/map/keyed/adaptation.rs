//! Adaptation as a part: see [`Part`] for the contract. A key's adaptive state is its
//! [`KeyAdapt`], in the part's column at the key's slot; its entry's settings hold the
//! values it adapted to (what the scheduler reads on every start) and the `KeyAdapt` its
//! ceilings (the settings the user, a hint or a control gave it).

use super::key::KeyState;
use super::key_table::Column;
use super::part::{Ended, Part};
use super::settings::InForce;
use crate::events;
use crate::limit::adaptive::config::Adaptive;
use crate::limit::adaptive::core::KeyAdapt;
use crate::limit::key_settings::KeySettings;
use crate::limit::rate::gcra::Gcra;
use crate::map::control::KeyProgress;

/// How long a key that adapts is kept after its last attempt, once it has nothing to do:
/// a host whose items come sparsely keeps what it learned (60 s; the idle-key sweep
/// forgets it after that, and it starts low again).
const KEPT_IDLE: u64 = 60_000_000_000;

/// An adaptive map's adaptation: its configuration and every key's state.
#[derive(Debug)]
pub(super) struct Adaptation {
    config: Adaptive,
    keys: Column<KeyAdapt>,
}

impl Adaptation {
    pub(super) const fn new(config: Adaptive) -> Self {
        Self {
            config,
            keys: Column::new(),
        }
    }

    /// How long an attempt of `state`'s key takes, as its adaptation measured it.
    #[inline]
    pub(super) fn latency<T>(&self, state: &KeyState<T>) -> Option<u64> {
        self.keys[state.slot()].latency()
    }

    /// Forgets every key's state (the scheduler forgot its keys).
    pub(super) fn clear(&mut self) {
        self.keys.clear();
    }

    /// The limit and rate `state`'s key was given: its ceilings. (An adaptive key's
    /// ceilings are always its own: [`change`](Self::change) sets them from its settings.)
    pub(super) fn given<T>(&self, state: &KeyState<T>) -> (usize, Option<Gcra>) {
        let (limit, rate) = self.keys[state.slot()].own_ceilings();
        (limit.unwrap_or(state.settings.limit()), rate)
    }

    /// Changes the key's ceilings with `change`, which gets them as settings (and a copy
    /// of the rate state, thrown away: the settings in force are the adapted values). The
    /// adapted values follow the ceilings, their rate state carried over.
    pub(super) fn change<T>(
        &mut self,
        state: &mut KeyState<T>,
        now: u64,
        change: impl FnOnce(&mut InForce, &mut u64),
    ) {
        let adapt = &mut self.keys[state.slot()];
        let in_force = state.settings.rate();
        let mut ceilings = state.settings;
        let (limit, rate) = adapt.own_ceilings();
        if let Some(limit) = limit {
            ceilings.set_limit(limit);
        }
        ceilings.set_rate(rate);
        change(&mut ceilings, &mut state.tat.clone());
        adapt.set_ceiling(Some(ceilings.limit()), ceilings.rate());
        state.settings = ceilings;
        state.settings.set_rate(in_force);
        take_values(adapt, state, now);
    }

    /// Moves the values in force of `state`'s key to what `settings` sets, within its floor
    /// and ceilings: its adaptation goes on from them (`KeyAdapt::set_current`).
    pub(super) fn set_in_force<T>(
        &mut self,
        state: &mut KeyState<T>,
        settings: KeySettings,
        now: u64,
    ) {
        let adapt = &mut self.keys[state.slot()];
        let rate = settings.get_rate().map(Gcra::new);
        adapt.set_current(&self.config, now, settings.get_limit(), rate);
        take_values(adapt, state, now);
        let (limit, rate) = (state.limit(), state.rate());
        events::key_adapted(limit, rate.map(|rate| rate.per_second()));
    }
}

/// The key's adaptive values moved (or may have): they become the settings in force, the
/// rate state carried over from the rate before.
fn take_values<T>(adapt: &KeyAdapt, state: &mut KeyState<T>, now: u64) {
    let old = state.settings.rate();
    state.settings.set_limit(adapt.limit());
    state.settings.set_rate(adapt.rate());
    if let (Some(old), Some(new)) = (old, state.settings.rate()) {
        state.tat = new.carry_over(&old, state.tat, now);
    }
}

/// Keeps the key at least [`KEPT_IDLE`] after `now`.
#[inline(always)]
fn keep<T>(state: &mut KeyState<T>, now: u64) {
    state.keep_until(now.saturating_add(KEPT_IDLE));
}

/// Adaptation as a part: each key of an adaptive map gets its adaptive state when it is
/// made (it starts low, whatever it had reached before the map forgot it), hears of each
/// start and each attempt's outcome and latency, and moves its limit and rate (the values
/// in force) under its settings as ceilings. A key is kept until it has been idle 60 s
/// (its entry's [`keep_until`](KeyState::keep_until)).
impl<K, T> Part<K, T> for Adaptation {
    fn made(&mut self, _key: &K, state: &mut KeyState<T>, now: u64) {
        self.keys
            .put(state.slot(), KeyAdapt::new(&self.config, now));
        keep(state, now);
        self.change(state, now, |_, _| {});
    }

    #[inline]
    fn started(&mut self, _key: &K, state: &mut KeyState<T>, now: u64, _first: bool) {
        // The rate is what holds the key back when, after this start, it has room and an
        // item whose time has come (and no pause), but its rate says "not yet".
        let held_by_rate = state.running() < state.limit()
            && state.work_ready_at().is_some_and(|at| at <= now)
            && !state.is_paused(now)
            && state
                .rate()
                .is_some_and(|rate| rate.allowed_at(state.tat) > now);
        self.keys[state.slot()].started(now, state.running(), held_by_rate);
        keep(state, now);
    }

    fn ended(&mut self, _key: &K, state: &mut KeyState<T>, ended: &Ended<'_>, now: u64) {
        let adapt = &mut self.keys[state.slot()];
        let latency = ended.clock.latency(now, ended.unpolled);
        let moved = adapt.finished_as(
            &self.config,
            now,
            ended.outcome,
            ended.clock.started_at,
            latency,
        );
        keep(state, now);
        if moved {
            take_values(adapt, state, now);
            let (limit, rate) = (state.limit(), state.rate());
            events::key_adapted(limit, rate.map(|rate| rate.per_second()));
        }
    }

    #[inline]
    fn is_idle(&mut self, state: &mut KeyState<T>, now: u64, _pulled: u64) -> bool {
        !state.is_kept(now)
    }

    fn show(&self, state: &KeyState<T>, now: u64, progress: &mut KeyProgress<K>) {
        progress.last_cut = self.keys[state.slot()]
            .last_cut_at()
            .map(|at| now.saturating_sub(at));
    }
}
