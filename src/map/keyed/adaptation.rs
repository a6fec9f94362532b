//! Adaptation as a part: see [`Part`] for the contract; a key's adaptive state is its
//! [`KeyAdapt`], boxed in its entry.

use super::key::{KeyState, kept_idle_from};
use super::part::{Ended, Part};
use crate::events;
use crate::limit::adaptive::config::Adaptive;
use crate::limit::adaptive::core::KeyAdapt;

/// Adaptation as a part: each key of an adaptive map gets its adaptive state when it is
/// made (it starts low, whatever it had reached before the map forgot it), hears of each
/// start and each attempt's outcome and latency, and moves its limit and rate (the values
/// in force) under its settings as ceilings. A key is kept until it has been idle 60 s
/// (its entry's `kept_until`).
impl<K, T> Part<K, T> for Adaptive {
    fn made(&mut self, _key: &K, state: &mut KeyState<T>, now: u64) {
        state.adapt = Some(Box::new(KeyAdapt::new(self, now)));
        state.kept_until = state.kept_until.max(kept_idle_from(now));
        state.apply_settings(now, |_, _| {});
    }

    #[inline(always)]
    fn started(&mut self, _key: &K, state: &mut KeyState<T>, now: u64, _first: bool) {
        let rate = state.rate();
        state.adapt_started(now, rate);
    }

    fn ended(&mut self, _key: &K, state: &mut KeyState<T>, ended: &Ended<'_>, now: u64) {
        let Some(adapted) = &mut state.adapt else {
            return;
        };
        let latency = ended.clock.latency(now, ended.unpolled);
        let moved = adapted.finished(self, now, *ended.outcome, ended.clock.started_at, latency);
        state.kept_until = state.kept_until.max(kept_idle_from(now));
        if moved {
            state.adapted(now);
            let (limit, rate) = (state.limit(), state.rate());
            events::key_adapted(limit, rate.map(|rate| rate.per_second()));
        }
    }

    #[inline]
    fn is_idle(&mut self, state: &mut KeyState<T>, now: u64, _pulled: u64) -> bool {
        state.adapt.is_none() || now > state.kept_until
    }
}
