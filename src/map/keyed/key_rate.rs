//! The key's rate as a part: its starts are spaced by its rate (the default key rate, its
//! own, or on an adaptive map the rate it adapted to), by the GCRA state in its entry.

use super::key::KeyState;
use super::part::{Part, Verdict};
use crate::limit::rate::gcra::Gcra;
use crate::map::control::KeyProgress;

/// Spaces each key's starts by its rate (nothing to do for a key without one).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct KeyRates;

impl<K, T> Part<K, T> for KeyRates {
    #[inline(always)]
    fn verdict(&self, _key: &K, state: &KeyState<T>, _now: u64) -> Verdict {
        Verdict::At(state.rate().map_or(0, |rate| rate.allowed_at(state.tat)))
    }

    #[inline(always)]
    fn started(&mut self, _key: &K, state: &mut KeyState<T>, now: u64, _first: bool) {
        if let Some(rate) = state.rate() {
            state.tat = rate
                .decide(state.tat, now)
                .expect("the key's rate allows it");
        }
    }

    #[inline]
    fn is_idle(&mut self, state: &mut KeyState<T>, now: u64, _pulled: u64) -> bool {
        Gcra::is_idle(state.tat, now)
    }

    fn show(&self, state: &KeyState<T>, _now: u64, progress: &mut KeyProgress<K>) {
        progress.limit = state.limit();
        progress.rate_interval = state.rate().map_or(0, |rate| rate.interval_nanos());
    }
}
