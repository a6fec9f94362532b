//! [`Window`]: the admission of a map without per-key limits, rates or retries. An item
//! is pulled when a slot is free and the window allows, and starts at once.

use std::fmt;
use std::future::{Future, IntoFuture};
use std::ops::ControlFlow;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

use futures_lite::Stream;

use super::control::{Figures, Settings, Shared};
use super::engine::{Admission, AfterYield, DebugFields, DefaultWindow, Engine};
use super::pool::Started;
use super::results::Results;
use super::steering::ControlHooks;

/// The admission of a map without per-key limits: an item is pulled when a slot is free
/// and the window allows, and starts at once.
///
/// It is the default type parameter of every bounded map; see
/// [`MapAsync::per_key`](crate::futures::MapAsync::per_key) for the other one.
#[derive(Debug, Default, Clone, Copy)]
pub struct Window {
    _private: (),
}

/// Ordered mode's default window, in multiples of the limit.
const ORDERED_WINDOW: usize = 4;

impl DefaultWindow for Window {
    #[inline]
    fn default_window(limit: usize, ordered: bool) -> usize {
        if ordered {
            limit.saturating_mul(ORDERED_WINDOW)
        } else {
            limit
        }
    }
}

impl<T, O> Admission<T, O> for Window {
    #[inline(always)]
    fn waiting(&self) -> usize {
        0
    }

    /// Always refill: the yielded output freed a place in the window (which is the limit
    /// by default for completion order), and refilling it at once keeps `limit` futures
    /// in flight. Poll the woken futures too only when every slot is taken (then
    /// finishing some is the only way to start more): otherwise they wait until the
    /// buffer runs dry and are polled in one batch, instead of one look at the ready set
    /// per yielded output.
    #[inline(always)]
    fn after_yield(_backlog: usize, _limit: usize, full: bool) -> AfterYield {
        if full {
            AfterYield::Pass
        } else {
            AfterYield::Fill
        }
    }

    #[inline(always)]
    fn finished(&mut self, _index: usize, _seq: usize, output: O) -> Option<O> {
        Some(output)
    }

    #[inline(always)]
    fn clear(&mut self) {}

    #[inline(always)]
    fn fill<S, F, W, R>(
        engine: &mut Engine<W::IntoFuture, Self>,
        source: Pin<&mut S>,
        f: &mut F,
        results: &mut R,
        cx: &mut Context<'_>,
        allowance: &mut usize,
    ) -> ControlFlow<()>
    where
        S: Stream<Item = T>,
        F: FnMut(T) -> W,
        W: IntoFuture,
        W::IntoFuture: Future<Output = O>,
        R: Results<O>,
    {
        // A controlled map checks for a drain before each pull, in its own copy of the
        // loop: the plain map's loop has no trace of it.
        if engine.steering.shared.is_some() {
            fill_window::<true, _, _, _, _, _, _>(engine, source, f, results, cx, allowance)
        } else {
            fill_window::<false, _, _, _, _, _, _>(engine, source, f, results, cx, allowance)
        }
    }
}

/// Without a scheduler every pulled item started at once and is finished once it left the
/// pool: nothing to count per item, nothing to drop at a drain, nothing to set but the
/// global limit (which the engine applies).
impl ControlHooks for Window {
    #[inline]
    fn figures(&self, pulled: usize, in_pool: usize) -> Figures {
        let pulled = pulled as u64;
        Figures {
            started: pulled,
            attempts: pulled,
            finished: pulled - in_pool as u64,
            ..Figures::default()
        }
    }

    fn take_unstarted(&mut self) -> Vec<usize> {
        Vec::new()
    }

    fn take_retrying(&mut self) -> Vec<usize> {
        Vec::new()
    }

    fn apply(&mut self, _settings: &Settings) {}

    fn publish_keys(&mut self, _shared: &Shared) {}
}

impl DebugFields for Window {
    fn fields(&self, _s: &mut fmt::DebugStruct<'_, '_>) {}
}

/// [`Window`]'s fill: pull while a slot is free and the window allows, and start each
/// item at once. `STEERED`: a control is attached (a drain stops the pulling).
#[inline(always)]
fn fill_window<const STEERED: bool, T, O, S, F, W, R>(
    engine: &mut Engine<W::IntoFuture, Window>,
    mut source: Pin<&mut S>,
    f: &mut F,
    results: &mut R,
    cx: &mut Context<'_>,
    allowance: &mut usize,
) -> ControlFlow<()>
where
    S: Stream<Item = T>,
    F: FnMut(T) -> W,
    W: IntoFuture,
    W::IntoFuture: Future<Output = O>,
    R: Results<O>,
{
    if engine.input_done || engine.pool.is_full() {
        return ControlFlow::Continue(());
    }
    let Engine {
        pool,
        window,
        next_seq,
        input_done,
        steering,
        ..
    } = &mut *engine;
    // The drain flag, looked at before each pull of a controlled map (a drain asked from
    // inside `f` or a future stops the very next start).
    let draining = if STEERED {
        steering.shared.as_deref().map(Shared::draining_flag)
    } else {
        None
    };
    let mut drain = false;
    // One bound for the loop (the window's room, capped by the yield allowance), measured again
    // when it runs out only if collecting in order may have released items meanwhile,
    // and the pool checked only when a future stays in flight: one ready at once takes
    // no slot.
    let mut room = window
        .saturating_sub(*next_seq - results.released())
        .min(*allowance);
    loop {
        if room == 0 {
            if !R::RELEASES_ON_ACCEPT {
                break;
            }
            let held = *next_seq - results.released();
            room = window.saturating_sub(held).min(*allowance);
            if room == 0 {
                break;
            }
        }
        if STEERED && draining.is_some_and(|draining| draining.load(Ordering::Relaxed)) {
            drain = true;
            break;
        }
        match source.as_mut().poll_next(cx) {
            Poll::Ready(Some(item)) => {
                room -= 1;
                *allowance -= 1;
                let seq = *next_seq;
                *next_seq += 1;
                match pool.start(f(item).into_future(), seq) {
                    Started::Ready(output) => results.accept(seq, output)?,
                    Started::Pending(_) => {
                        if pool.is_full() {
                            break;
                        }
                    }
                }
            }
            Poll::Ready(None) => {
                *input_done = true;
                break;
            }
            Poll::Pending => break,
        }
    }
    if STEERED && drain {
        engine.begin_drain::<T, R>(results);
    }
    ControlFlow::Continue(())
}
