//! What a control reads from a keyed map and changes in it: its figures, the items it
//! never started, live settings, and the busiest keys.

use std::hash::Hash;
use std::sync::PoisonError;

use super::shared::Gate;
use super::{Counts, PerKey};
use crate::limit::rate::gcra::Gcra;
use crate::map::control::{Figures, KeyChange, Settings, Shared};
use crate::map::steering::ControlHooks;

impl<T, K, KF, P, G, C> ControlHooks for PerKey<T, K, KF, P, G, C>
where
    K: Hash + Eq + Clone,
    G: Gate<K>,
{
    fn figures(&self, _pulled: usize, _in_pool: usize) -> Figures {
        let Counts {
            started,
            attempts,
            finished,
            failed,
            retries,
        } = self.counts;
        Figures {
            started,
            attempts,
            finished,
            failed,
            retries,
            ..Figures::default()
        }
    }

    fn take_unstarted(&mut self) -> Vec<usize> {
        let taken = self
            .scheduler
            .take_fresh()
            .into_iter()
            .map(|waiting| waiting.seq)
            .collect();
        if G::ACTIVE {
            // Permits granted for items that will not start go back at once.
            for (key, surplus) in self.scheduler.take_surplus() {
                for _ in 0..surplus {
                    drop(self.gate.take(&key));
                }
            }
        }
        taken
    }

    fn take_retrying(&mut self) -> Vec<usize> {
        self.scheduler
            .take_retrying()
            .into_iter()
            .map(|waiting| waiting.seq)
            .collect()
    }

    fn apply(&mut self, settings: &Settings) {
        if let Some(rate) = settings.rate {
            self.timed = true;
            let now = self.now();
            self.scheduler.change_rate(Gcra::new(rate), now);
        }
        if let Some(rate) = settings.default_key_rate {
            self.timed = true;
            let now = self.now();
            self.scheduler.change_default_rate(Gcra::new(rate), now);
        }
        if let Some(limit) = settings.default_key_limit {
            let now = self.now();
            self.scheduler.set_default_limit(limit, now);
        }
        if let Some(queue) = &self.key_changes {
            let changes =
                std::mem::take(&mut *queue.lock().unwrap_or_else(PoisonError::into_inner));
            for change in changes {
                self.timed |=
                    matches!(&change, KeyChange::Set(_, settings) if settings.get_rate().is_some());
                let now = self.now();
                self.scheduler.change_key(change, now);
            }
        }
    }

    fn publish_keys(&mut self, shared: &Shared) {
        let Some(n) = shared.keys_requested() else {
            return;
        };
        // Pauses are set on the map's clock, which runs only for a map that has a rate
        // or retries (the only maps that pause).
        let now = self.now();
        let (paused, open, busiest) = self.scheduler.busiest(now, n);
        shared.publish_paused_keys(paused);
        shared.publish_open_keys(open);
        if G::ACTIVE {
            let (later, warming_up) = self.scheduler.told_later(now);
            shared.publish_told_later(later, warming_up);
        }
        if let Some(board) = &self.board {
            *board.lock().unwrap_or_else(PoisonError::into_inner) = busiest;
        }
    }
}
