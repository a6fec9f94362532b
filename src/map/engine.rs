//! The one drive loop under every bounded map.
//!
//! An [`Engine`] owns the [`Pool`] of futures in flight and the input bookkeeping; the
//! source stream and the mapping function live beside it and are lent to each call. One
//! poll runs passes until nothing can move:
//! - poll the futures that were woken, handing each output to a [`Results`] consumer;
//! - refill: the plain [`Window`] pulls while a slot is free and the window allows, and
//!   starts each item at once; an admission that queues what it pulls (the per-key
//!   scheduler, [`PerKey`](super::keyed::PerKey)) runs the engine's other loop
//!   (`queued.rs`): the engine pulls, starts and keeps the window, the admission answers
//!   which item may start now, or not before when;
//! - a poll yields after `YIELD_EVERY` units of work (its yield allowance): it wakes the
//!   task and returns, so a long run of ready futures cannot starve the executor; a
//!   stream also yields after a streak of ready items.
//!
//! A panic that unwinds through a poll (from a future, the function, the key function or
//! the source) drops everything in flight and marks the engine as panicked: polled again,
//! it panics with a clear message instead of hanging or returning partial data.
//!
//! The admission is a type parameter, so each map is monomorphised for its own: the
//! window path compiles to the same code as if the keyed path did not exist.

use std::fmt;
use std::future::{Future, IntoFuture};
use std::ops::ControlFlow;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_lite::Stream;
use pin_project_lite::pin_project;

use super::control::{Figures, Shared};
use super::pool::Pool;
use super::results::{Buffer, Results};
use super::steering::{ControlHooks, Steering};
use crate::limit::check::at_least_one;

/// A poll yields after this many units of work (a child poll, a pull or a start): its
/// yield allowance.
const YIELD_EVERY: usize = 512;
/// Items a stream may yield in a row, without ever returning `Pending`, before it yields.
const STREAK: u32 = 256;

#[track_caller]
fn check_window(window: usize, limit: usize) {
    assert!(
        window >= limit,
        "tollgate: the window ({window}) must be at least the global limit ({limit})"
    );
}

/// Decides which pulled items start, and when to pull more. `T` is the item type, `O`
/// the output of the futures.
pub(crate) trait Admission<T, O>: DefaultWindow + ControlHooks {
    /// Items pulled and not started yet.
    fn waiting(&self) -> usize;

    /// A stream returns an output: until it is polled again, the consumer holds it.
    #[inline(always)]
    fn handed_out(&mut self) {}

    /// A stream is polled (again).
    #[inline(always)]
    fn polled(&mut self) {}

    /// What a stream that just took an output from its buffer does before returning it,
    /// with `backlog` outputs still held there and the pool `full` or not.
    fn after_yield(backlog: usize, limit: usize, full: bool) -> AfterYield;

    /// The future in slot `index`, started for the item at input position `seq`,
    /// finished with `output`: the output to hand on, or `None` when the item will be
    /// tried again.
    fn finished(&mut self, index: usize, seq: usize, output: O) -> Option<O>;

    /// Forgets every waiting item and every running one (the pool was cleared).
    fn clear(&mut self);

    /// Polls the admission's timer, if it waits for a time; `true` once that time has
    /// come (run another round: an item may start now).
    #[inline(always)]
    fn poll_timer(&mut self, _cx: &mut Context<'_>) -> bool {
        false
    }

    /// Ends the attempts whose permits were revoked before the pool polls its futures
    /// again (a map with shared limits only): work takes no step once its permit is
    /// revoked. A break from `results` stops the map.
    #[inline(always)]
    fn revoke<Fut, R>(
        _engine: &mut Engine<Fut, Self>,
        _results: &mut R,
        _cx: &mut Context<'_>,
    ) -> ControlFlow<()>
    where
        Self: Sized,
        Fut: Future<Output = O>,
        R: Results<O>,
    {
        ControlFlow::Continue(())
    }

    /// Pulls and starts items while the admission allows and the yield allowance lasts.
    /// Outputs of futures ready at once go to `results`; a break from it stops the map.
    fn fill<S, F, W, R>(
        engine: &mut Engine<W::IntoFuture, Self>,
        source: Pin<&mut S>,
        f: &mut F,
        results: &mut R,
        cx: &mut Context<'_>,
        allowance: &mut usize,
    ) -> ControlFlow<()>
    where
        Self: Sized,
        S: Stream<Item = T>,
        F: FnMut(T) -> W,
        W: IntoFuture,
        W::IntoFuture: Future<Output = O>,
        R: Results<O>;
}

/// The window of an admission when none is set (apart from [`Admission`], so that a map
/// can swap its admission before the types that make it run are known).
pub(crate) trait DefaultWindow {
    /// The window when none is set, for a map with this global `limit` whose outputs
    /// come in input order (`ordered`) or completion order.
    fn default_window(limit: usize, ordered: bool) -> usize;

    /// Which settings a control may change while the map runs
    /// ([`CAN_RATE`](super::control::CAN_RATE), [`CAN_PER_KEY`](super::control::CAN_PER_KEY)).
    fn changeable(&self) -> u8 {
        0
    }
}

/// What a stream does after taking an output from its buffer, before returning it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AfterYield {
    /// Nothing: hand out the backlog first.
    Hold,
    /// Pull and start items, leaving the woken futures for later.
    Fill,
    /// A whole pass: poll the woken futures, then refill.
    Pass,
}

/// Where a map is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Running,
    /// A future returned its output.
    Finished,
    /// A panic unwound through a poll; everything in flight was dropped.
    Panicked,
}

/// The pool, the admission and the input bookkeeping.
pub(crate) struct Engine<Fut, A> {
    pub(crate) pool: Pool<Fut>,
    pub(crate) admission: A,
    /// At most this many items pulled and not yet released (yielded or collected).
    pub(crate) window: usize,
    /// Whether the user set the window (a default follows the admission, and only a
    /// default window grows by itself).
    pub(crate) window_set: bool,
    /// Items pulled so far; the next item's input position.
    pub(crate) next_seq: usize,
    pub(crate) input_done: bool,
    /// Outputs in input order (the default window depends on it).
    ordered: bool,
    state: State,
    pub(crate) steering: Steering,
}

impl<Fut, A> Engine<Fut, A> {
    #[track_caller]
    pub(crate) fn new(limit: usize, expected: usize, ordered: bool, admission: A) -> Self
    where
        A: DefaultWindow,
    {
        at_least_one(
            limit,
            "tollgate: the global limit must be at least 1 (a limit of 0 would never run anything)",
        );
        Self {
            pool: Pool::new(limit, expected),
            admission,
            window: A::default_window(limit, ordered),
            window_set: false,
            next_seq: 0,
            input_done: false,
            ordered,
            state: State::Running,
            steering: Steering::default(),
        }
    }

    /// The same engine, not yet started, with another admission made from the current
    /// one; an unset window follows the new admission's default.
    pub(crate) fn with_admission<B: DefaultWindow>(
        self,
        ordered: bool,
        admission: impl FnOnce(A) -> B,
    ) -> Engine<Fut, B> {
        debug_assert!(
            self.next_seq == 0,
            "the admission changes before the first poll"
        );
        let limit = self.pool.limit();
        let admission = admission(self.admission);
        if let Some(shared) = &self.steering.shared {
            shared.set_changeable(admission.changeable());
        }
        Engine {
            pool: self.pool,
            admission,
            window: if self.window_set {
                self.window
            } else {
                B::default_window(limit, ordered)
            },
            window_set: self.window_set,
            next_seq: 0,
            input_done: false,
            ordered,
            state: State::Running,
            steering: self.steering,
        }
    }

    /// Attaches a control: the map publishes its figures into it and takes its settings.
    #[track_caller]
    pub(crate) fn attach(&mut self, shared: &Arc<Shared>)
    where
        A: DefaultWindow,
    {
        shared.attach(self.admission.changeable());
        self.steering.shared = Some(Arc::clone(shared));
    }

    /// Whether a drain was asked and has not taken effect yet.
    #[inline(always)]
    pub(crate) fn is_drain_asked(&self) -> bool {
        !self.steering.drained
            && self
                .steering
                .shared
                .as_ref()
                .is_some_and(|shared| shared.is_draining())
    }

    /// Applies a new global limit: the pool's, and the window's when it follows the
    /// limit.
    fn set_limit(&mut self, limit: usize)
    where
        A: DefaultWindow,
    {
        self.pool.set_limit(limit);
        self.window = if self.window_set {
            self.window.max(limit)
        } else {
            A::default_window(limit, self.ordered)
        };
    }

    #[track_caller]
    pub(crate) fn set_window(&mut self, window: usize) {
        check_window(window, self.pool.limit());
        self.window = window;
        self.window_set = true;
    }

    /// Panics if the map may not be polled: it finished (a future) or a panic went
    /// through it.
    #[inline]
    pub(crate) fn check(&self, name: &str) {
        if self.state != State::Running {
            self.polled_when_not_running(name);
        }
    }

    #[cold]
    fn polled_when_not_running(&self, name: &str) -> ! {
        match self.state {
            State::Finished => panic!("`{name}` polled after completion"),
            _ => panic!(
                "`{name}` polled after a panic it propagated (the work in flight was dropped)"
            ),
        }
    }

    /// Marks a future's engine as finished: polling it again panics.
    pub(crate) fn finish(&mut self) {
        self.state = State::Finished;
    }

    pub(crate) fn debug(&self, name: &str, f: &mut fmt::Formatter<'_>) -> fmt::Result
    where
        A: DebugFields,
    {
        let mut s = f.debug_struct(name);
        s.field("limit", &self.pool.limit())
            .field("in_flight", &self.pool.len())
            .field("window", &self.window);
        self.admission.fields(&mut s);
        s.finish_non_exhaustive()
    }
}

/// The admission's part of a map's `Debug`, without bounds on the item type.
pub(crate) trait DebugFields {
    fn fields(&self, s: &mut fmt::DebugStruct<'_, '_>);
}

impl<Fut: Future, A> Engine<Fut, A> {
    /// Stops pulling and drops the pulled items that have not started, telling
    /// `results` their positions will never come.
    pub(crate) fn begin_drain<T, R>(&mut self, results: &mut R)
    where
        A: Admission<T, Fut::Output>,
        R: Results<Fut::Output>,
    {
        self.steering.drained = true;
        self.input_done = true;
        let positions = self.admission.take_unstarted();
        for &seq in &positions {
            results.skip(seq);
        }
        self.steering.skipped += positions.len();
        self.steering.not_started += positions.len();
        if let Some(shared) = &self.steering.shared {
            shared.record_not_started(positions);
        }
    }

    /// Applies what the control asked for since the last look.
    #[cold]
    #[inline(never)]
    fn steer<T, R>(&mut self, results: &mut R)
    where
        A: Admission<T, Fut::Output>,
        R: Results<Fut::Output>,
    {
        let Some(shared) = &self.steering.shared else {
            return;
        };
        let generation = shared.generation();
        if generation == self.steering.seen {
            return;
        }
        self.steering.seen = generation;
        let settings = shared.take_settings();
        if let Some(limit) = settings.limit {
            self.set_limit(limit);
        }
        self.admission.apply(&settings);
        if self.is_stop_asked() {
            self.begin_stop(results);
        } else if self.is_drain_asked() {
            self.begin_drain(results);
        }
    }

    /// Whether a stop was asked and has not taken effect yet.
    #[inline]
    fn is_stop_asked(&self) -> bool {
        self.steering.stopped.is_none()
            && self
                .steering
                .shared
                .as_ref()
                .is_some_and(|shared| shared.is_stopping())
    }

    /// Ends the map's work at once (`MapControl::stop`): nothing more is pulled or
    /// started, the pulled items that never started are not started, the attempts in
    /// flight and the items waiting for a retry are cancelled (their futures dropped, their
    /// permits and shared leases given back), and `results` is told none of their positions
    /// will come: what finished before is still handed out. The figures are final from
    /// here.
    #[cold]
    #[inline(never)]
    fn begin_stop<T, R>(&mut self, results: &mut R)
    where
        A: Admission<T, Fut::Output>,
        R: Results<Fut::Output>,
    {
        self.begin_drain(results);
        // What runs or waits for a retry now is cancelled: the figures count it so before
        // the work goes.
        let figures = self.figures().at_end();
        let mut cancelled = self.admission.take_retrying();
        cancelled.extend(self.pool.cancel_all());
        self.admission.clear();
        for &seq in &cancelled {
            results.skip(seq);
        }
        self.steering.skipped += cancelled.len();
        if let Some(shared) = &self.steering.shared {
            shared.record_cancelled(cancelled);
        }
        self.steering.stopped = Some(figures);
    }

    /// The running totals for the control.
    fn figures<T>(&self) -> Figures
    where
        A: Admission<T, Fut::Output>,
    {
        let mut figures = match self.steering.stopped {
            Some(stopped) => stopped,
            None => {
                let mut figures = self.admission.figures(self.next_seq, self.pool.len());
                figures.pulled = self.next_seq as u64;
                figures.not_started = self.steering.not_started as u64;
                // A fail-fast collect stops at its first error, which the admission
                // counted only if it knew the output for an error (a retry policy): it
                // is one failure either way.
                figures.failed = figures.failed.max(u64::from(self.steering.broke));
                figures
            }
        };
        // Finished and not released yet (handed out or collected); the positions a drain
        // or a stop skipped were released without an output.
        let handed_out = self.steering.released.saturating_sub(self.steering.skipped);
        figures.buffered = figures.finished.saturating_sub(handed_out as u64);
        figures
    }

    /// Publishes the running totals (and the per-key figures if asked) into the
    /// control.
    fn publish<T>(&mut self)
    where
        A: Admission<T, Fut::Output>,
    {
        if self.steering.shared.is_none() {
            return;
        }
        let figures = self.figures();
        self.steering.last = figures;
        if let Some(shared) = &self.steering.shared {
            shared.publish(&figures);
            self.admission.publish_keys(shared);
        }
    }

    /// Publishes the figures if a control is attached. A stream publishes when it
    /// waits (returns `Pending`), ends, or yields to the executor after a run of
    /// `STREAK` outputs, not after each output it hands out (a publication costs as much
    /// as a ready item).
    #[cold]
    #[inline(never)]
    fn publish_if_steered<T>(&mut self, released: usize)
    where
        A: Admission<T, Fut::Output>,
    {
        self.steering.released = released;
        self.publish();
    }

    /// A stream about to hand out an output after a round of work: it does not publish
    /// (see [`publish_if_steered`](Self::publish_if_steered)), but keeps the figures for
    /// the end, should it be dropped before its next poll.
    #[inline(always)]
    fn note_if_steered<T>(&mut self, released: usize)
    where
        A: Admission<T, Fut::Output>,
    {
        if self.steering.shared.is_some() {
            self.steering.released = released;
            self.note();
        }
    }

    #[cold]
    #[inline(never)]
    fn note<T>(&mut self)
    where
        A: Admission<T, Fut::Output>,
    {
        self.steering.last = self.figures();
    }

    /// Publishes the last figures and tells the control the map ended.
    fn end_steering<T>(&mut self)
    where
        A: Admission<T, Fut::Output>,
    {
        if self.steering.shared.is_some() {
            let figures = self.figures();
            self.steering.end(figures);
        }
    }

    /// Publishes after a poll of a controlled map: the figures while the map runs, the
    /// end once it is done. Out of line: the plain map's poll keeps its shape.
    #[cold]
    #[inline(never)]
    fn after_poll<T>(&mut self, done: bool, released: usize)
    where
        A: Admission<T, Fut::Output>,
    {
        self.steering.released = released;
        if done {
            self.end_steering();
        } else {
            self.publish();
        }
    }

    /// Ends a round that has nothing to hand out: `true` when the poll must return
    /// `Pending`, because the yield allowance is spent (after asking to be polled again:
    /// plenty was done in this poll, the executor runs the others first) or because nothing woke
    /// since the pass looked (the task is registered for the next wake-up). `false`: a
    /// wake-up came in meanwhile, run another round.
    #[inline(always)]
    fn should_park<T>(&mut self, cx: &mut Context<'_>, allowance: usize) -> bool
    where
        A: Admission<T, Fut::Output>,
    {
        if allowance == 0 {
            cx.waker().wake_by_ref();
            return true;
        }
        if let Some(shared) = &self.steering.shared {
            // A setting changed after this poll looked wakes the task; one changed
            // before the waker was in place is seen here.
            shared.register(cx.waker());
            if shared.generation() != self.steering.seen {
                return false;
            }
        }
        self.pool.register(cx);
        if self.admission.poll_timer(cx) {
            return false;
        }
        !self.pool.has_woken()
    }

    /// [`should_park`](Self::should_park) for a stream, which publishes to its control
    /// when it parks (`released`: the items that left it so far).
    #[inline(always)]
    fn park_stream<T>(&mut self, cx: &mut Context<'_>, allowance: usize, released: usize) -> bool
    where
        A: Admission<T, Fut::Output>,
    {
        let park = self.should_park(cx, allowance);
        if park && self.steering.shared.is_some() {
            self.after_poll(false, released);
        }
        park
    }

    fn is_done<T>(&self) -> bool
    where
        A: Admission<T, Fut::Output>,
    {
        self.input_done && self.pool.is_empty() && self.admission.waiting() == 0
    }

    /// Drops every future in flight and every waiting item, and pulls nothing more.
    /// `unwinding`: a panic goes through the map, whose admission is left as it was.
    fn stop<T>(&mut self, unwinding: bool)
    where
        A: Admission<T, Fut::Output>,
    {
        if self.steering.shared.is_some() {
            if !unwinding {
                // The positions of the pulled items that never started, for the control
                // (after a panic, only their number: the admission is not asked for more).
                let positions = self.admission.take_unstarted();
                self.steering.not_started += positions.len();
                if let Some(shared) = &self.steering.shared {
                    shared.record_not_started(positions);
                }
            }
            // The control sees what finished and what is cancelled before the rest is
            // dropped.
            self.end_steering();
        }
        self.input_done = true;
        self.pool.clear();
        self.admission.clear();
    }

    /// One round: poll the woken futures, then refill.
    #[inline(always)]
    fn pass<T, S, F, W, R>(
        &mut self,
        source: Pin<&mut S>,
        f: &mut F,
        results: &mut R,
        cx: &mut Context<'_>,
        allowance: &mut usize,
    ) -> ControlFlow<()>
    where
        A: Admission<T, Fut::Output>,
        S: Stream<Item = T>,
        F: FnMut(T) -> W,
        W: IntoFuture<IntoFuture = Fut>,
        R: Results<Fut::Output>,
    {
        if self.steering.shared.is_some() {
            self.steer(results);
        }
        A::revoke(self, results, cx)?;
        if self.pool.has_woken() {
            let admission = &mut self.admission;
            let polled = self.pool.poll_woken(|seq, index, output| {
                match admission.finished(index, seq, output) {
                    Some(output) => results.accept(seq, output),
                    None => ControlFlow::Continue(()),
                }
            })?;
            *allowance = allowance.saturating_sub(polled);
        }
        A::fill(self, source, f, results, cx, allowance)
    }

    /// Drives everything to the end, handing outputs to `results`. `Ready(Break)` means
    /// `results` stopped the map; the futures in flight are dropped by then.
    ///
    /// Inlined into each collecting future's poll, so that the output vector's fields
    /// stay in registers through the loop.
    #[inline(always)]
    pub(crate) fn poll_drive<T, S, F, W, R>(
        &mut self,
        mut source: Pin<&mut S>,
        f: &mut F,
        results: &mut R,
        cx: &mut Context<'_>,
    ) -> Poll<ControlFlow<()>>
    where
        A: Admission<T, Fut::Output>,
        S: Stream<Item = T>,
        F: FnMut(T) -> W,
        W: IntoFuture<IntoFuture = Fut>,
        R: Results<Fut::Output>,
    {
        let poll = StopOnUnwind::run(self, |engine| {
            let mut allowance = YIELD_EVERY;
            loop {
                // Until `register`, wake-ups only mark their futures: one that wakes itself
                // during this pass costs no trip through the executor.
                engine.pool.enter();
                if engine
                    .pass(source.as_mut(), f, results, cx, &mut allowance)
                    .is_break()
                {
                    engine.steering.broke = true;
                    engine.stop(false);
                    return Poll::Ready(ControlFlow::Break(()));
                }
                if engine.is_done() {
                    return Poll::Ready(ControlFlow::Continue(()));
                }
                if engine.should_park(cx, allowance) {
                    return Poll::Pending;
                }
            }
        });
        if self.steering.shared.is_some() {
            self.after_poll(poll.is_ready(), results.released());
        }
        poll
    }
}

/// Drops the work in flight and marks the engine as panicked when a panic (in a future,
/// in `f`, in the key function, in the source) unwinds through a poll, so the panic
/// reaches the caller after the others are gone and a later poll cannot hang.
///
/// The guard is forgotten when the poll returns, so its destructor runs only while this
/// poll unwinds: no `thread::panicking()` check on every poll, and a poll made from a
/// destructor during another panic, which returns normally, leaves the map alone.
struct StopOnUnwind<'a, T, Fut: Future, A: Admission<T, Fut::Output>> {
    engine: &'a mut Engine<Fut, A>,
    _item: std::marker::PhantomData<fn(T)>,
}

impl<'a, T, Fut: Future, A: Admission<T, Fut::Output>> StopOnUnwind<'a, T, Fut, A> {
    /// Runs `body` on the engine under the guard.
    #[inline(always)]
    fn run<O>(engine: &'a mut Engine<Fut, A>, body: impl FnOnce(&mut Engine<Fut, A>) -> O) -> O {
        let guard = Self {
            engine,
            _item: std::marker::PhantomData,
        };
        let out = body(&mut *guard.engine);
        std::mem::forget(guard);
        out
    }
}

impl<T, Fut: Future, A: Admission<T, Fut::Output>> Drop for StopOnUnwind<'_, T, Fut, A> {
    fn drop(&mut self) {
        self.engine.stop(true);
        self.engine.state = State::Panicked;
    }
}

pin_project! {
    /// A source, the engine and where outputs go: everything but the function.
    pub(crate) struct Core<S, Fut, R, A> {
        #[pin]
        pub(crate) source: S,
        pub(crate) engine: Engine<Fut, A>,
        pub(crate) results: R,
        // Items yielded in a row without returning `Pending`.
        streak: u32,
    }
}

impl<S, Fut, R, A> Core<S, Fut, R, A> {
    /// The same core, not yet started, with its results consumer made anew (for another
    /// output form).
    #[track_caller]
    pub(crate) fn with_results<Q>(self, results: impl FnOnce(R) -> Q) -> Core<S, Fut, Q, A> {
        assert!(
            self.engine.next_seq == 0,
            "tollgate: `.indexed()` must be called before the map is first polled"
        );
        Core {
            source: self.source,
            engine: self.engine,
            results: results(self.results),
            streak: self.streak,
        }
    }

    /// The same core with another admission, made from the current one; see
    /// [`Engine::with_admission`].
    pub(crate) fn with_admission<B: DefaultWindow>(
        self,
        ordered: bool,
        admission: impl FnOnce(A) -> B,
    ) -> Core<S, Fut, R, B> {
        Core {
            source: self.source,
            engine: self.engine.with_admission(ordered, admission),
            results: self.results,
            streak: self.streak,
        }
    }
}

impl<S: Stream, Fut: Future, R, A> Core<S, Fut, R, A> {
    #[track_caller]
    pub(crate) fn new(source: S, limit: usize, ordered: bool, results: R, admission: A) -> Self
    where
        A: DefaultWindow,
    {
        let expected = source.size_hint().1.unwrap_or(usize::MAX);
        Self {
            engine: Engine::new(limit, expected, ordered, admission),
            source,
            results,
            streak: 0,
        }
    }

    /// Pulled and not yet yielded, plus what the source still promises.
    pub(crate) fn size_hint(&self) -> (usize, Option<usize>)
    where
        R: Results<Fut::Output>,
        Fut: Future,
    {
        let held = self.engine.next_seq - self.results.released();
        let (lower, upper) = if self.engine.input_done {
            (0, Some(0))
        } else {
            self.source.size_hint()
        };
        (
            lower.saturating_add(held),
            upper.and_then(|upper| upper.checked_add(held)),
        )
    }
}

impl<S, Fut, R, A> Core<S, Fut, R, A>
where
    S: Stream,
    Fut: Future,
    R: Buffer<Fut::Output>,
    A: Admission<S::Item, Fut::Output>,
{
    /// The next output for a stream. `name` is the stream's type, for panic messages.
    pub(crate) fn poll_next_with<F, W>(
        self: Pin<&mut Self>,
        f: &mut F,
        cx: &mut Context<'_>,
        name: &str,
    ) -> Poll<Option<R::Out>>
    where
        F: FnMut(S::Item) -> W,
        W: IntoFuture<IntoFuture = Fut>,
    {
        let this = self.project();
        this.engine.check(name);
        let mut source = this.source;
        let results = this.results;
        let streak = this.streak;
        if *streak >= STREAK {
            // Cooperative: a long run of ready items yields once to the executor.
            *streak = 0;
            this.engine.publish_if_steered(results.released());
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        StopOnUnwind::run(this.engine, |engine| {
            let mut allowance = YIELD_EVERY;
            engine.admission.polled();
            engine.pool.enter();
            if let Some(value) = results.pop() {
                // Yielding `value` released a place in the window: refill before
                // returning, as the admission says. Futures woken and not polled here stay
                // marked: the pass that runs when the buffer is empty polls them.
                match A::after_yield(
                    results.backlog(),
                    engine.pool.limit(),
                    engine.pool.is_full(),
                ) {
                    AfterYield::Hold => {}
                    AfterYield::Fill => {
                        let _ = A::fill(engine, source.as_mut(), f, results, cx, &mut allowance);
                        engine.note_if_steered(results.released());
                    }
                    AfterYield::Pass => {
                        let _ = engine.pass(source.as_mut(), f, results, cx, &mut allowance);
                        engine.note_if_steered(results.released());
                    }
                }
                *streak += 1;
                engine.admission.handed_out();
                return Poll::Ready(Some(value));
            }
            loop {
                let _ = engine.pass(source.as_mut(), f, results, cx, &mut allowance);
                if let Some(value) = results.pop() {
                    let _ = A::fill(engine, source.as_mut(), f, results, cx, &mut allowance);
                    engine.note_if_steered(results.released());
                    *streak += 1;
                    engine.admission.handed_out();
                    return Poll::Ready(Some(value));
                }
                if engine.is_done() {
                    engine.steering.released = results.released();
                    engine.end_steering();
                    return Poll::Ready(None);
                }
                *streak = 0;
                if engine.park_stream(cx, allowance, results.released()) {
                    return Poll::Pending;
                }
                engine.pool.enter();
            }
        })
    }

    /// Drives the map while its consumer works on an output (`alongside.rs`): polls the
    /// woken futures and refills, keeping every output in the buffer (the window counts
    /// them, so the buffer stays bounded), until nothing moves; registers `cx`.
    pub(crate) fn poll_work<F, W>(self: Pin<&mut Self>, f: &mut F, cx: &mut Context<'_>, name: &str)
    where
        F: FnMut(S::Item) -> W,
        W: IntoFuture<IntoFuture = Fut>,
    {
        let this = self.project();
        this.engine.check(name);
        let mut source = this.source;
        let results = this.results;
        StopOnUnwind::run(this.engine, |engine| {
            let mut allowance = YIELD_EVERY;
            engine.admission.polled();
            loop {
                if engine.is_done() {
                    return;
                }
                engine.pool.enter();
                let _ = engine.pass(source.as_mut(), f, results, cx, &mut allowance);
                if engine.park_stream(cx, allowance, results.released()) {
                    return;
                }
            }
        });
    }

    /// Registers `cx` for the map's next wake-up, polling nothing: `true` when nothing
    /// waits to be polled now (no woken future, no timer due, no setting changed).
    pub(crate) fn poll_park(self: Pin<&mut Self>, cx: &mut Context<'_>) -> bool {
        let this = self.project();
        let engine = this.engine;
        engine.is_done() || engine.should_park(cx, YIELD_EVERY)
    }

    /// The consumer's work ended: the map is not polled until its next `next()`.
    #[inline]
    pub(crate) fn work_done(self: Pin<&mut Self>) {
        self.project().engine.admission.handed_out();
    }
}

#[cfg(test)]
#[path = "engine_tests.rs"]
mod tests;
