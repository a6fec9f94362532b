//! A key's adaptive state: its `KeyAdapt`, its ceilings and when it was last active (the
//! part that drives it is `adaptation.rs`).

use super::latency::{AttemptClock, Unpolled};
use super::settings::InForce;
use crate::limit::adaptive::config::Adaptive;
use crate::limit::adaptive::core::KeyAdapt;
use crate::limit::outcome::Outcome;
use crate::limit::rate::gcra::Gcra;

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
