//! Adaptation as a part: see [`Part`] for the contract, `adapt.rs` for a key's adaptive
//! state.

use super::adapt::Adapted;
use super::key::KeyState;
use super::part::{Ended, Part};
use crate::events;
use crate::limit::adaptive::config::Adaptive;
use crate::limit::adaptive::core::KeyAdapt;

/// Adaptation as a part: each key of an adaptive map gets its adaptive state when it is
/// made (it starts low, whatever it had reached before the map forgot it), hears of each
/// start and each attempt's outcome and latency, and moves its limit and rate (the values
/// in force) under its settings as ceilings. A key is kept until it has been idle
/// 60 s (`adapt.rs`).
impl<K, T> Part<K, T> for Adaptive {
    fn made(&mut self, _key: &K, state: &mut KeyState<T>, now: u64) {
        let core = KeyAdapt::new(self, now);
        state.adapt = Some(Box::new(Adapted::new(core, now, &state.settings)));
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
        if adapted.finished(self, now, *ended.outcome, ended.clock, ended.unpolled) {
            state.adapted(now);
            let (limit, rate) = (state.limit(), state.rate());
            events::key_adapted(limit, rate.map(|rate| rate.per_second()));
        }
    }

    #[inline]
    fn is_idle(&mut self, state: &mut KeyState<T>, now: u64, _pulled: u64) -> bool {
        state
            .adapt
            .as_ref()
            .is_none_or(|adapted| adapted.is_stale(now))
    }
}
