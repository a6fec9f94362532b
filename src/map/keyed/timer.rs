//! The one timer of a keyed map: set for the earliest time an item may start (or a key may
//! ask its shared limits), so a map needs one timer however many keys wait for time.
//!
//! Invariants: the timer is made once and reset, never made again; when it fired for a
//! time that the map's clock says has not come (the two clocks round differently), the
//! next wake-up is a little later, so the map never spins.

use std::future::Future;
use std::pin::Pin;
use std::task::Context;

use crate::limit::rate::gcra::instant_at;
use crate::runtime::RtSleep;

/// How much later the timer is set when it fired and the clock disagrees (1 ms).
const SPIN_GUARD: u64 = 1_000_000;

/// The map's timer and the time it should fire (nanoseconds since the rate origin).
#[derive(Default)]
pub(super) struct MapTimer {
    /// The one timer, made at the first wake-up.
    timer: Option<Pin<Box<RtSleep>>>,
    /// When the timer should fire, and whether it is set for that time already.
    wake_at: Option<u64>,
    timer_at: Option<u64>,
    /// The time the timer last fired for.
    fired_at: Option<u64>,
}

impl MapTimer {
    /// The map should wake at `at`, or (`None`) needs no wake-up.
    #[inline]
    pub(super) fn wake_at(&mut self, at: Option<u64>) {
        self.wake_at = at;
    }

    /// Polls the timer, set for the wake-up time; `true` once that time has come.
    pub(super) fn poll(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(mut at) = self.wake_at else {
            return false;
        };
        if self.fired_at == Some(at) {
            // The timer fired for this time, yet the clock read since says it has not
            // come: the timer's clock and ours round differently. Wait a little longer
            // rather than spin.
            at = at.saturating_add(SPIN_GUARD);
            self.wake_at = Some(at);
        }
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(RtSleep::at(instant_at(at))));
        if self.timer_at != Some(at) {
            timer.set(RtSleep::at(instant_at(at)));
            self.timer_at = Some(at);
        }
        if timer.as_mut().poll(cx).is_ready() {
            self.wake_at = None;
            self.timer_at = None;
            self.fired_at = Some(at);
            return true;
        }
        false
    }
}
