//! Per-key limits for any bounded map: a global cap and a per-key cap that never block
//! each other.
//!
//! The naive crawler takes a global slot, then waits for its host's bulkhead while
//! holding it; with host-sorted input most global slots sit idle behind one host. Here an
//! item is started only when both its key and the global limit have room. Items whose key
//! is full wait in their key's queue (inside the [`KeyScheduler`]) holding no global slot,
//! while items of other keys go ahead. Input is pulled ahead of the running work, up to
//! the window, to find those other keys and to let keys with waiting items take turns.
//!
//! [`PerKey`] is the engine's admission for this; the maps' `per_key` methods install it.

mod scheduler;

use std::fmt;
use std::future::{Future, IntoFuture};
use std::hash::Hash;
use std::ops::ControlFlow;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_lite::Stream;

use self::scheduler::KeyScheduler;
use super::engine::{Admission, AfterYield, DebugFields, Engine};
use super::pool::Started;
use super::results::Results;

/// The default window of a map with per-key limits, in multiples of the global limit.
const PER_KEY_WINDOW: usize = 64;

#[track_caller]
fn check_per_key_limit(limit: usize) {
    assert!(
        limit > 0,
        "tollgate: the per-key limit must be at least 1 (a limit of 0 would never run anything)"
    );
}

/// The admission of a map with per-key limits: made by the maps' `per_key` methods
/// ([`MapAsync::per_key`](crate::futures::MapAsync::per_key) and its siblings).
///
/// `T` is the map's item type, `K` the key and `KF` the key function.
pub struct PerKey<T, K, KF> {
    key_fn: KF,
    scheduler: KeyScheduler<K, (usize, T)>,
    /// The key of the future running in each pool slot (`None` for an idle slot).
    keys: Vec<Option<K>>,
}

impl<T, K: Hash + Eq + Clone, KF> PerKey<T, K, KF> {
    #[track_caller]
    pub(crate) fn new(key_fn: KF, limit: usize) -> Self {
        check_per_key_limit(limit);
        Self {
            key_fn,
            scheduler: KeyScheduler::new(limit),
            keys: Vec::new(),
        }
    }
}

impl<T, K, KF> DebugFields for PerKey<T, K, KF> {
    fn fields(&self, s: &mut fmt::DebugStruct<'_, '_>) {
        s.field("per_key_limit", &self.scheduler.per_key())
            .field("waiting_for_key", &self.scheduler.waiting())
            .field("active_keys", &self.scheduler.active_keys());
    }
}

impl<T, K, KF> fmt::Debug for PerKey<T, K, KF> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct("PerKey");
        self.fields(&mut s);
        s.finish_non_exhaustive()
    }
}

impl<T, K, KF> Admission<T> for PerKey<T, K, KF>
where
    K: Hash + Eq + Clone,
    KF: FnMut(&T) -> K,
{
    fn default_window(limit: usize, _ordered: bool) -> usize {
        limit.saturating_mul(PER_KEY_WINDOW)
    }

    fn waiting(&self) -> usize {
        self.scheduler.waiting()
    }

    /// Only once fewer than `limit` outputs are left to hand out. The window is large
    /// (64 x the limit by default), so a consumer slower than the work lets it fill up
    /// with finished outputs; refilling after every yield would then start one item per
    /// output, one at a time (and its key would come and go from the scheduler each
    /// time). Handing out the backlog first restarts the work in batches of `limit`.
    fn after_yield(backlog: usize, limit: usize, _full: bool) -> AfterYield {
        if backlog < limit {
            AfterYield::Pass
        } else {
            AfterYield::Hold
        }
    }

    fn finished(&mut self, index: usize) {
        let key = self.keys[index].take().expect("a running slot has a key");
        self.scheduler.finish(&key);
    }

    fn clear(&mut self) {
        self.scheduler.clear();
        self.keys.clear();
    }

    fn fill<S, F, W, R>(
        engine: &mut Engine<W::IntoFuture, Self>,
        mut source: Pin<&mut S>,
        f: &mut F,
        results: &mut R,
        cx: &mut Context<'_>,
        budget: &mut usize,
    ) -> ControlFlow<()>
    where
        S: Stream<Item = T>,
        F: FnMut(T) -> W,
        W: IntoFuture,
        R: Results<<W::IntoFuture as Future>::Output>,
    {
        loop {
            let mut progressed = false;
            // Fill the free global slots from the keys that have room, in turn.
            while *budget > 0 && !engine.pool.is_full() {
                let Some((key, (seq, item))) = engine.admission.scheduler.next() else {
                    break;
                };
                *budget -= 1;
                progressed = true;
                match engine.pool.start(f(item).into_future(), seq) {
                    Started::Ready(output) => {
                        engine.admission.scheduler.finish(&key);
                        results.accept(seq, output)?;
                    }
                    Started::Pending(index) => {
                        let keys = &mut engine.admission.keys;
                        if index >= keys.len() {
                            keys.resize_with(index + 1, || None);
                        }
                        keys[index] = Some(key);
                    }
                }
            }
            // Pull one item ahead, up to the window (even while every slot is busy), so
            // keys with waiting items can take turns; then try to start again.
            if *budget > 0
                && !engine.input_done
                && engine.next_seq - results.released() < engine.window
            {
                match source.as_mut().poll_next(cx) {
                    Poll::Ready(Some(item)) => {
                        *budget -= 1;
                        progressed = true;
                        let seq = engine.next_seq;
                        engine.next_seq += 1;
                        let key = (engine.admission.key_fn)(&item);
                        engine.admission.scheduler.push(key, (seq, item));
                    }
                    Poll::Ready(None) => engine.input_done = true,
                    Poll::Pending => {}
                }
            }
            if !progressed {
                return ControlFlow::Continue(());
            }
        }
    }
}
