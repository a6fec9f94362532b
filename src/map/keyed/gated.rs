//! [`PerKey`]'s side of shared limits: hearing their answers (grants, "later"s, wake-ups),
//! ending the attempts whose permits were revoked or whose asks failed, asking for the keys
//! that may start while a free slot is left for each answer, and dropping the permits keys
//! gave back when their breakers refused a start. Where keys stand with the limits is
//! `asking.rs`; the limits' trait and the gate that holds the permits are `shared.rs`.

use std::future::Future;
use std::hash::Hash;
use std::ops::ControlFlow;
use std::task::Context;

use super::attempts::Attempts;
use super::classify::Classify;
use super::shared::{Gate, GateOutput, Heard};
use super::{PerKey, nanos};
use crate::events;
use crate::map::engine::Engine;
use crate::map::results::Results;

impl<T, K: Hash + Eq + Clone, KF, P, G, C> PerKey<T, K, KF, P, G, C> {
    /// Polls the shared limits' asks, wake-ups and revocations, and tells the scheduler
    /// what they answered; `true` if anything came (run another round: an item may
    /// start, or an attempt must end).
    #[cold]
    pub(super) fn poll_gate(&mut self, cx: &mut Context<'_>) -> bool
    where
        G: Gate<K>,
    {
        let now = self.now();
        let scheduler = &mut self.scheduler;
        let mut unneeded = Vec::new();
        let heard = self.gate.poll(cx, |heard| match heard {
            Heard::Granted(key) => {
                if !scheduler.grant(&key, now) {
                    unneeded.push(key);
                }
            }
            Heard::Later(key, after, reason) => {
                let until = now.saturating_add(nanos(after));
                if scheduler.later(&key, until, reason, now) {
                    events::shared_limits_warming_up(after);
                }
            }
            Heard::Woken(key) => scheduler.wake_asker(&key, now),
        });
        for key in unneeded {
            drop(self.gate.take(&key));
        }
        heard
    }

    /// Drops the permits of the shared limits that keys refused by their breakers gave
    /// back (the room goes back to the fleet at once).
    #[inline(always)]
    pub(super) fn return_permits(&mut self)
    where
        G: Gate<K>,
    {
        if G::ACTIVE {
            for key in self.scheduler.take_returned() {
                drop(self.gate.take(&key));
            }
        }
    }

    /// Cancels the attempts whose permits were revoked; each ends with the error. `true`
    /// if there were any.
    pub(super) fn end_revoked<Fut, O, R>(
        engine: &mut Engine<Fut, Self>,
        results: &mut R,
    ) -> ControlFlow<(), bool>
    where
        Fut: Future<Output = O>,
        P: Attempts<T, O>,
        C: Classify<O>,
        G: GateOutput<K, O>,
        R: Results<O>,
    {
        let mut any = false;
        let admission = &mut engine.admission;
        while let Some((slot, error)) = admission.gate.take_revoked() {
            any = true;
            let Some(seq) = engine.pool.cancel(slot) else {
                continue;
            };
            admission.gate.release(slot);
            let running = admission.running[slot]
                .take()
                .expect("a running slot has a key");
            if let Some(output) = admission.attempt_done(running, seq, G::output(error)) {
                results.accept(seq, output)?;
            }
        }
        ControlFlow::Continue(any)
    }

    /// The shared limits' part of a fill round: attempts of asks that failed and of
    /// permits revoked end with the error; keys that may ask do, while a free slot is
    /// left for each answer. `true` when something happened (the round made progress); a
    /// break from `results` stops the map.
    #[cold]
    pub(super) fn fill_gate<Fut, O, R>(
        engine: &mut Engine<Fut, Self>,
        results: &mut R,
        now: u64,
        allowance: &mut usize,
    ) -> ControlFlow<(), bool>
    where
        Fut: Future<Output = O>,
        P: Attempts<T, O>,
        C: Classify<O>,
        G: GateOutput<K, O>,
        R: Results<O>,
    {
        let mut progressed = false;
        let admission = &mut engine.admission;
        while let Some((key, error)) = admission.gate.take_failed() {
            progressed = true;
            let Some(waiting) = admission.scheduler.ask_failed(&key, now) else {
                continue;
            };
            let (running, seq, _item) = admission.begin_attempt::<O>(key, waiting);
            if let Some(output) = admission.attempt_done(running, seq, G::output(error)) {
                results.accept(seq, output)?;
            }
        }
        progressed |= Self::end_revoked(engine, results)?;
        let limit = engine.pool.limit();
        let draining = engine.is_drain_asked();
        let admission = &mut engine.admission;
        while *allowance > 0
            && !draining
            && engine.pool.len() + admission.scheduler.granted() + admission.gate.asking() < limit
        {
            let Some(key) = admission.scheduler.next_ask(now) else {
                break;
            };
            *allowance -= 1;
            progressed = true;
            admission.gate.ask(key);
        }
        ControlFlow::Continue(progressed)
    }
}
