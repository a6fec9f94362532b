//! A key's pause as a part: none of its items starts before the time a server asked for (a
//! hint's pause, read from an attempt's output) or the retry policy did
//! ([`RetryPolicy::pause_key`](crate::RetryPolicy::pause_key), through
//! [`KeyScheduler::pause`](super::scheduler::KeyScheduler::pause)). One pause per key: the
//! later end wins, and each pause is reported as the same `key paused` event. A hint's
//! pause is waited out for at most [`Hint::MAX_PAUSE`].

use super::key::KeyState;
use super::part::{Ended, Part, Verdict};
use crate::events;
use crate::limit::hint::Hint;
use crate::map::control::{KeyProgress, PausedBy};

/// Holds each key until the end of its pause.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Pauses;

impl Pauses {
    /// Pauses the key of `state` until `until`, as `by` asked (a later pause already in
    /// force stays). The retry policy's pauses are noted beside its retries (a key it
    /// pauses has one waiting), so that who asked for the pause in force can be told.
    pub(super) fn pause<T>(state: &mut KeyState<T>, until: u64, by: PausedBy) {
        if by == PausedBy::RetryPolicy {
            let retries = state.retries_mut();
            retries.policy_pause = retries.policy_pause.max(until);
        }
        state.paused_until = state.paused_until.max(until);
    }

    /// Who asked for the pause of the key of `state` (paused at `now`): the retry policy
    /// if its latest pause is the one in force, else a server.
    fn paused_by<T>(state: &KeyState<T>, now: u64) -> Option<PausedBy> {
        let policy = state
            .retries
            .as_ref()
            .is_some_and(|retries| retries.policy_pause == state.paused_until);
        state.is_paused(now).then_some(if policy {
            PausedBy::RetryPolicy
        } else {
            PausedBy::Server
        })
    }
}

impl<K, T> Part<K, T> for Pauses {
    #[inline(always)]
    fn verdict(&self, _key: &K, state: &KeyState<T>, _now: u64) -> Verdict {
        Verdict::At(state.paused_until)
    }

    fn ended(&mut self, _key: &K, state: &mut KeyState<T>, ended: &Ended<'_>, now: u64) {
        if !ended.hinted {
            return;
        }
        let Some(pause) = ended.outcome.hint_ref().get_pause() else {
            return;
        };
        // (A longer pause opens the key's breaker instead, on a map with breakers:
        // `Parts::hinted`.)
        let pause = pause.min(Hint::MAX_PAUSE);
        events::key_paused(ended.attempt, pause, "hint");
        let nanos = u64::try_from(pause.as_nanos()).unwrap_or(u64::MAX);
        Self::pause(state, now.saturating_add(nanos), PausedBy::Server);
    }

    #[inline]
    fn is_idle(&mut self, state: &mut KeyState<T>, now: u64, _pulled: u64) -> bool {
        !state.is_paused(now)
    }

    fn show(&self, state: &KeyState<T>, now: u64, progress: &mut KeyProgress<K>) {
        progress.paused = state.is_paused(now);
        progress.paused_by = Self::paused_by(state, now);
    }
}
