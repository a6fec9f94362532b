//! A circuit breaker per key of a keyed map as a part: the breaker settings the scheduler
//! keeps, what a key's breaker says of its next start, and what it hears of each end.
//!
//! Each key's breaker is a `BreakerCore` in the part's column at the key's slot, fresh
//! when the key is made; each attempt carries the ticket its start was granted, and its
//! outcome (the map's classification: a failure and an overload both count bad) reports
//! on it.

use std::fmt;

use super::key::KeyState;
use super::key_table::Column;
use super::part::{Ended, Part, Verdict};
use crate::limit::breaker::config::Breaker;
use crate::limit::breaker::core::{BreakerCore, BreakerState, Refusal, Ticket, Transition};
use crate::limit::breaker::error::CircuitBreakerError;
use crate::map::control::KeyProgress;

/// A keyed map's breaker settings, and what it needs of its keys (rendered with `Debug`,
/// for the error and the event, without a `Debug` bound on every keyed map).
pub(crate) struct MapBreaker<K> {
    config: Breaker,
    /// Whether items of an open key fail at once (else they wait).
    fails: bool,
    /// The error for `key` refused at `now`.
    refused: fn(&K, Refusal, u64) -> CircuitBreakerError,
    /// Tells a transition of `key`'s breaker.
    emit: fn(&K, &Transition),
    /// The ticket of the last start's breaker permit, for the map to take.
    granted: Option<Ticket>,
    /// Every key's breaker, at its slot.
    cores: Column<BreakerCore>,
}

impl<K> MapBreaker<K> {
    pub(crate) fn new(config: Breaker, fails: bool) -> Self
    where
        K: fmt::Debug,
    {
        Self {
            config,
            fails,
            refused: |key, refusal, now| CircuitBreakerError::new(refusal, now, Some(key)),
            emit: |key, transition| transition.emit(Some(key)),
            granted: None,
            cores: Column::new(),
        }
    }

    /// Forgets every key's breaker (the scheduler forgot its keys).
    pub(super) fn clear(&mut self) {
        self.cores.clear();
    }

    /// Opens the breaker of `key` (entry `state`) at `now`, whatever its record says (its
    /// server asked to be left alone for longer than a map waits: [`Hint::MAX_PAUSE`]); one
    /// already open stays as it is.
    ///
    /// [`Hint::MAX_PAUSE`]: crate::Hint::MAX_PAUSE
    pub(super) fn open_now<T>(&mut self, key: &K, state: &mut KeyState<T>, now: u64) {
        let transition = self.cores[state.slot()].open_now(&self.config, now);
        self.tell(key, transition);
        if self.fails {
            // Items back from failed attempts end now, not after their pauses.
            state.due_now(now);
        }
    }

    /// The state of `state`'s key's breaker at `now`.
    pub(super) fn state<T>(&self, state: &KeyState<T>, now: u64) -> BreakerState {
        self.cores[state.slot()].state(now)
    }

    fn refused(&self, key: &K, refusal: Refusal, now: u64) -> CircuitBreakerError {
        (self.refused)(key, refusal, now)
    }

    fn tell(&self, key: &K, transition: Option<Transition>) {
        if let Some(transition) = transition {
            (self.emit)(key, &transition);
        }
    }

    /// The ticket of the last start's breaker permit, for the map to take.
    pub(super) fn take_granted(&mut self) -> Option<Ticket> {
        self.granted.take()
    }

    /// The error for the next item of `key` (entry `state`), refused at `now` by its open
    /// breaker (its verdict said so).
    pub(super) fn refuse<T>(
        &mut self,
        key: &K,
        state: &mut KeyState<T>,
        now: u64,
    ) -> CircuitBreakerError {
        let core = &mut self.cores[state.slot()];
        let (refused, _) = core.try_acquire(&self.config, now);
        let refusal = refused.expect_err("the verdict said the breaker is open");
        self.refused(key, refusal, now)
    }
}

impl<K> fmt::Debug for MapBreaker<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MapBreaker")
            .field("config", &self.config)
            .field("fails", &self.fails)
            .finish_non_exhaustive()
    }
}

/// A breaker per key as a part: an open key's items wait for its next probe (or end at
/// once, on a map where they fail), a half-open key whose probes are all out is held until
/// one ends; a start takes a permit (its ticket goes with the attempt), an attempt's outcome
/// reports on it. A key's core is fresh when the key is made, and made fresh again once it
/// holds nothing a fresh one would not as the key goes idle.
impl<K, T> Part<K, T> for MapBreaker<K> {
    fn made(&mut self, _key: &K, state: &mut KeyState<T>, _now: u64) {
        self.cores.put(state.slot(), BreakerCore::new(&self.config));
    }

    #[inline]
    fn verdict(&self, _key: &K, state: &KeyState<T>, now: u64) -> Verdict {
        let core = &self.cores[state.slot()];
        match core.state(now) {
            BreakerState::Open if self.fails => Verdict::Refuse(0),
            BreakerState::Open => Verdict::At(core.open_until()),
            BreakerState::HalfOpen if core.is_probing_full(&self.config) => Verdict::Held,
            _ => Verdict::NOW,
        }
    }

    #[inline]
    fn started(&mut self, key: &K, state: &mut KeyState<T>, now: u64, _first: bool) {
        let core = &mut self.cores[state.slot()];
        let (granted, transition) = core.try_acquire(&self.config, now);
        self.tell(key, transition);
        self.granted = Some(granted.expect("the breaker's verdict allowed the start"));
    }

    fn ended(&mut self, key: &K, state: &mut KeyState<T>, ended: &Ended<'_>, now: u64) {
        let Some(ticket) = ended.ticket else {
            return;
        };
        // This attempt was the key's last work: it goes idle as it ends.
        let last = state.running() <= 1 && !state.has_items();
        let transition =
            self.cores[state.slot()].report(&self.config, now, ticket, ended.outcome.is_success());
        self.tell(key, transition);
        let core = &mut self.cores[state.slot()];
        let open = core.state(now) == BreakerState::Open;
        if last && core.is_clean(&self.config, now) {
            // Its breaker holds nothing that would open it sooner than a fresh one: the key
            // may be forgotten as it goes idle, and if it is kept, its breaker starts over.
            *core = BreakerCore::new(&self.config);
        }
        if open && self.fails {
            // Items back from failed attempts end now, not after their pauses.
            state.due_now(now);
        }
    }

    #[inline]
    fn is_idle(&mut self, state: &mut KeyState<T>, now: u64, _pulled: u64) -> bool {
        let core = &mut self.cores[state.slot()];
        let clean = core.is_clean(&self.config, now);
        if clean {
            // Kept for another part, the key's breaker starts over, as a forgotten key's.
            *core = BreakerCore::new(&self.config);
        }
        clean
    }

    fn show(&self, state: &KeyState<T>, now: u64, progress: &mut KeyProgress<K>) {
        progress.breaker = Some(self.state(state, now));
    }
}
