//! The fill loop of an admission that queues what it pulls (the per-key scheduler): the
//! engine pulls, starts and keeps the window; the admission only answers what may start.
//!
//! A round starts every item the admission admits while a global slot is free, lets the
//! admission do its own work between starts and pulls (a map with shared limits asks them
//! for permits), then pulls one item ahead, up to the window, even while every slot is
//! busy: keys with waiting items can only take turns if the input behind the busy ones has
//! been read. Rounds repeat until one makes no progress or the yield allowance runs out.
//!
//! The plain [`Window`](super::window::Window) has a loop of its own: every item it pulls
//! starts at once, so it pulls while a slot is free and never asks anyone.

use std::future::{Future, IntoFuture};
use std::ops::ControlFlow;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_lite::Stream;

use super::engine::{Admission, Engine};
use super::pool::Started;
use super::results::Results;

/// What an admission that queues its items answers when a slot is free.
pub(crate) enum Admit<T, M> {
    /// Start `item`, of input position `seq`, now; `memo` is what the admission keeps of
    /// the start until it knows whether the future finished at once.
    Start { seq: usize, item: T, memo: M },
    /// An item ended without starting (its output went to the results): progress, ask
    /// again.
    Ended,
    /// Nothing may start before `at` (nanoseconds since the rate origin). `stuck`: what
    /// holds the items back is their keys, not the map's rate, so idle slots may grow the
    /// window to find other keys.
    Later { at: u64, stuck: bool },
    /// Nothing may start until something finishes or more items come.
    Nothing,
}

/// An admission whose items wait in it after they are pulled: the per-key scheduler.
pub(crate) trait Queued<T, O>: Admission<T, O> + Sized {
    /// What the admission keeps of a start until [`started`](Self::started).
    type Memo;

    /// Now, on the admission's clock (0 when nothing it decides depends on time).
    fn now(&self) -> u64;

    /// The next item to start at `now`, counted as started; an item that ends without
    /// starting hands its output to `results` (a break from it stops the map).
    fn admit<R: Results<O>>(
        &mut self,
        now: u64,
        results: &mut R,
    ) -> ControlFlow<(), Admit<T, Self::Memo>>;

    /// The future of the item [`admit`](Self::admit) started (with `memo`) is in the
    /// pool, or finished at once: the output to hand on, or `None` (still running, or
    /// the item will be tried again).
    fn started(&mut self, memo: Self::Memo, seq: usize, started: Started<O>) -> Option<O>;

    /// The admission's own work between the starts and the pull of a round (asking shared
    /// limits); `true` if it made progress. Spends the allowance like a start.
    #[inline(always)]
    fn between<Fut, R>(
        _engine: &mut Engine<Fut, Self>,
        _results: &mut R,
        _now: u64,
        _allowance: &mut usize,
    ) -> ControlFlow<(), bool>
    where
        Fut: Future<Output = O>,
        R: Results<O>,
    {
        ControlFlow::Continue(false)
    }

    /// How many items may be pulled and not yet released, with `held` held now, the window
    /// as set (and whether the user set it), the global `limit`, and whether the round
    /// left slots idle behind keys that may not start (`stuck`).
    fn window(&mut self, set: (usize, bool), held: usize, limit: usize, stuck: bool) -> usize;

    /// Queues a freshly pulled `item` of input position `seq`.
    fn queue(&mut self, seq: usize, item: T, now: u64);

    /// Wake the map at `at`, or not for time (`None`).
    fn wake_at(&mut self, at: Option<u64>);
}

/// Pulls and starts items of a [`Queued`] admission while it admits them and the yield
/// allowance lasts. Outputs of futures ready at once go to `results`; a break from it
/// stops the map.
pub(crate) fn fill_queued<T, O, A, S, F, W, R>(
    engine: &mut Engine<W::IntoFuture, A>,
    mut source: Pin<&mut S>,
    f: &mut F,
    results: &mut R,
    cx: &mut Context<'_>,
    allowance: &mut usize,
) -> ControlFlow<()>
where
    A: Queued<T, O>,
    S: Stream<Item = T>,
    F: FnMut(T) -> W,
    W: IntoFuture,
    W::IntoFuture: Future<Output = O>,
    R: Results<O>,
{
    engine.admission.wake_at(None);
    loop {
        let now = engine.admission.now();
        let (mut progressed, stuck) = start_admitted(engine, f, results, now, allowance)?;
        progressed |= A::between(engine, results, now, allowance)?;
        progressed |= pull_ahead(engine, source.as_mut(), results, cx, now, stuck, allowance);
        if !progressed {
            if engine.pool.is_full() {
                // A finish wakes the map before any timed start could use a slot.
                engine.admission.wake_at(None);
            }
            return ControlFlow::Continue(());
        }
    }
}

/// Fills the free global slots with the items the admission admits at `now`. Returns
/// whether anything started or ended, and whether the round left slots idle behind keys
/// (not behind the map's rate).
#[inline(always)]
fn start_admitted<T, O, A, F, W, R>(
    engine: &mut Engine<W::IntoFuture, A>,
    f: &mut F,
    results: &mut R,
    now: u64,
    allowance: &mut usize,
) -> ControlFlow<(), (bool, bool)>
where
    A: Queued<T, O>,
    F: FnMut(T) -> W,
    W: IntoFuture,
    W::IntoFuture: Future<Output = O>,
    R: Results<O>,
{
    let (mut progressed, mut stuck) = (false, false);
    while *allowance > 0 && !engine.pool.is_full() {
        if engine.is_drain_asked() {
            // Before the next start: the fresh items go, retries of started items stay
            // and run.
            engine.begin_drain(results);
        }
        let (seq, item, memo) = match engine.admission.admit(now, results)? {
            Admit::Start { seq, item, memo } => (seq, item, memo),
            Admit::Ended => {
                *allowance -= 1;
                progressed = true;
                continue;
            }
            Admit::Later {
                at,
                stuck: behind_keys,
            } => {
                engine.admission.wake_at(Some(at));
                stuck = behind_keys;
                break;
            }
            Admit::Nothing => {
                stuck = true;
                break;
            }
        };
        *allowance -= 1;
        progressed = true;
        let started = engine.pool.start(f(item).into_future(), seq);
        if let Some(output) = engine.admission.started(memo, seq, started) {
            results.accept(seq, output)?;
        }
    }
    ControlFlow::Continue((progressed, stuck))
}

/// Pulls one item ahead, up to the window (even while every slot is busy), and queues it
/// in the admission. `true` if an item came.
#[inline(always)]
fn pull_ahead<T, O, Fut, A, S, R>(
    engine: &mut Engine<Fut, A>,
    source: Pin<&mut S>,
    results: &mut R,
    cx: &mut Context<'_>,
    now: u64,
    stuck: bool,
    allowance: &mut usize,
) -> bool
where
    A: Queued<T, O>,
    S: Stream<Item = T>,
    R: Results<O>,
{
    if *allowance == 0 || engine.input_done {
        return false;
    }
    let held = engine.next_seq - results.released();
    let set = (engine.window, engine.window_set);
    let window = engine
        .admission
        .window(set, held, engine.pool.limit(), stuck);
    if held >= window {
        return false;
    }
    match source.poll_next(cx) {
        Poll::Ready(Some(item)) => {
            *allowance -= 1;
            let seq = engine.next_seq;
            engine.next_seq += 1;
            engine.admission.queue(seq, item, now);
            true
        }
        Poll::Ready(None) => {
            engine.input_done = true;
            false
        }
        Poll::Pending => false,
    }
}
