//! Whether a keyed map adapts its keys' limits and rates, and what it measures for that:
//! the outcome of each attempt (the user's function over its output) and the attempt's
//! latency, leaving out the time a stream sat handed out and not polled.
//!
//! The map's type says which ([`Fixed`] or [`Adapting`]), so a map that does not adapt
//! compiles every hook below to nothing: no clock read and no call (its keys carry one
//! empty word for the state, its running attempts two unused ones for the clock).

use super::latency::{AttemptClock, Unpolled};
use super::settings::InForce;
use crate::limit::adaptive::config::Adaptive;
use crate::limit::adaptive::core::KeyAdapt;
use crate::limit::breaker::error::CircuitBreakerError;
use crate::limit::outcome::Outcome;
use crate::limit::rate::gcra::Gcra;

/// How a keyed map reads an attempt's output `O`: for the hints its outcome carries, and
/// for its adaptive keys.
pub(crate) trait Classify<O> {
    /// Whether the map reads outcomes at all (every hook is skipped when not).
    const CLASSIFIES: bool;
    /// Whether the map adapts (the adaptive hooks are skipped when not).
    const ADAPTIVE: bool;
    /// Whether each key has a circuit breaker (the breaker hooks are skipped when not).
    const BREAKS: bool = false;
    /// What the attempt's output says; `None` on a map that reads no outcome.
    fn classify(&mut self, output: &O) -> Option<Outcome>;
    /// The output of an item whose key's breaker is open, on a map where such items fail
    /// at once; `None` where they wait.
    fn open(&mut self, _open: CircuitBreakerError) -> Option<O> {
        None
    }
}

/// The keys of a keyed map keep the limits and rates they are given: the map does not
/// adapt them (the default).
#[derive(Debug, Default, Clone, Copy)]
pub struct Fixed;

impl<O> Classify<O> for Fixed {
    const CLASSIFIES: bool = false;
    const ADAPTIVE: bool = false;

    #[inline(always)]
    fn classify(&mut self, _output: &O) -> Option<Outcome> {
        None
    }
}

/// The keys of a keyed map adapt their limits and rates from the outcome of each attempt,
/// which the function `C` reads from the attempt's output: made by
/// [`adaptive`](crate::futures::MapAsync::adaptive).
pub struct Adapting<C> {
    classify: C,
}

impl<C> Adapting<C> {
    pub(crate) fn new(classify: C) -> Self {
        Self { classify }
    }
}

impl<C> std::fmt::Debug for Adapting<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Adapting").finish_non_exhaustive()
    }
}

impl<O, C: FnMut(&O) -> Outcome> Classify<O> for Adapting<C> {
    const CLASSIFIES: bool = true;
    const ADAPTIVE: bool = true;

    #[inline]
    fn classify(&mut self, output: &O) -> Option<Outcome> {
        Some((self.classify)(output))
    }
}

/// The keys of a keyed map keep the limits and rates they are given, and follow the hints
/// of the outcomes the function `C` reads from each attempt's output: made by
/// [`classify`](crate::futures::MapAsync::classify).
pub struct Classified<C> {
    classify: C,
}

impl<C> Classified<C> {
    pub(crate) fn new(classify: C) -> Self {
        Self { classify }
    }
}

impl<C> std::fmt::Debug for Classified<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Classified").finish_non_exhaustive()
    }
}

impl<O, C: FnMut(&O) -> Outcome> Classify<O> for Classified<C> {
    const CLASSIFIES: bool = true;
    const ADAPTIVE: bool = false;

    #[inline]
    fn classify(&mut self, output: &O) -> Option<Outcome> {
        Some((self.classify)(output))
    }
}

/// How long an adaptive key is kept after its last attempt ended, once it has nothing to
/// do: a host whose items come sparsely keeps what it learned (60 s; the idle-key sweep
/// forgets it after that, and it starts low again).
const KEPT_IDLE: u64 = 60_000_000_000;

/// One key's adaptive state, its ceilings (the settings the user gave it), and when it
/// was last active.
#[derive(Debug)]
pub(super) struct Adapted {
    pub(super) core: KeyAdapt,
    pub(super) ceiling_limit: usize,
    pub(super) ceiling_rate: Option<Gcra>,
    last_active: u64,
}

impl Adapted {
    /// A key made at `now` whose settings (its ceilings) are `ceilings`.
    pub(super) fn new(core: KeyAdapt, now: u64, ceilings: &InForce) -> Self {
        Self {
            core,
            ceiling_limit: ceilings.limit,
            ceiling_rate: ceilings.rate,
            last_active: now,
        }
    }

    pub(super) fn started(&mut self, now: u64, running: usize, held_by_rate: bool) {
        self.last_active = now;
        self.core.started(now, running, held_by_rate);
    }

    /// An attempt ended; whether the key's limit or rate changed.
    pub(super) fn finished(
        &mut self,
        adaptive: &Adaptive,
        now: u64,
        outcome: Outcome,
        clock: AttemptClock,
        unpolled: &Unpolled,
    ) -> bool {
        self.last_active = now;
        let latency = clock.latency(now, unpolled);
        self.core
            .finished(adaptive, now, outcome, clock.started_at, latency)
    }

    /// Whether the key was idle long enough to be forgotten.
    pub(super) fn is_stale(&self, now: u64) -> bool {
        now.saturating_sub(self.last_active) > KEPT_IDLE
    }
}
