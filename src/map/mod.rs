//! Bounded mapping: run a function over many items with at most `limit` futures in flight.
//!
//! Everything here is one engine over a [`Pool`] of reusable slots:
//! - the engine pulls an item only when a slot is free and the window allows it, calls
//!   `f`, and polls the new future at once (a ready future never touches the pool's wakers
//!   and never wakes the owner);
//! - it polls only the futures that were woken, and refills every freed slot in the same
//!   poll, so `limit` futures stay in flight while input remains;
//! - completed outputs wait in a small buffer: in input order ([`InOrder`], a reorder
//!   buffer) or completion order ([`InCompletionOrder`]). The window bounds how many items
//!   may be pulled and not yet yielded, which bounds that buffer;
//! - after a budget of work in one poll it yields to the executor, and a stream yields once
//!   after a long run of ready items, so a stream of ready futures cannot starve its task's
//!   neighbours.
//!
//! The collecting futures (`map_async`, `try_map_async`, `gather_limit`) drive the same
//! engine and move each output straight into the result vector when it is next in line.

pub(crate) mod keyed;
mod pool;

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::ops::ControlFlow;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_lite::stream::{self, Iter, Stream};
use pin_project_lite::pin_project;

pub(crate) use self::pool::Pool;

/// Units of work (a child poll or a start) one poll may do before yielding.
const BUDGET: usize = 512;
/// Items a stream may yield in a row, without ever returning `Pending`, before it yields.
const STREAK: u32 = 256;
/// Ordered mode's default window, in multiples of the limit.
const ORDERED_WINDOW: usize = 4;

#[track_caller]
fn check_limit(limit: usize) {
    assert!(
        limit > 0,
        "tollgate: the concurrency limit must be at least 1 (a limit of 0 would never run anything)"
    );
}

#[track_caller]
fn check_window(window: usize, limit: usize) {
    assert!(
        window >= limit,
        "tollgate: the window ({window}) must be at least the concurrency limit ({limit})"
    );
}

// ---------------------------------------------------------------------------------------
// Where finished outputs go.

/// A consumer of finished outputs, told each output's input position.
trait Results<T> {
    /// Takes the output of item `seq`. Breaking stops the whole map (fail-fast).
    fn accept(&mut self, seq: usize, value: T) -> ControlFlow<()>;
    /// How many items have left the map (yielded or collected): the window is counted
    /// from here.
    fn released(&self) -> usize;
}

/// A buffer a stream yields from.
trait Buffer<T>: Results<T> {
    fn pop(&mut self) -> Option<T>;
}

/// The reorder buffer: `waiting[k]` holds the output of item `head + k` once it is done.
struct InOrder<T> {
    waiting: VecDeque<Option<T>>,
    head: usize,
}

impl<T> InOrder<T> {
    fn new() -> Self {
        Self {
            waiting: VecDeque::new(),
            head: 0,
        }
    }
}

impl<T> InOrder<T> {
    /// Stores an output that is not the next one after the last stored: leaves gaps
    /// (`None`) for the items before it.
    #[cold]
    fn accept_out_of_line(&mut self, k: usize, value: T) {
        if k < self.waiting.len() {
            self.waiting[k] = Some(value);
        } else {
            self.waiting.resize_with(k, || None);
            self.waiting.push_back(Some(value));
        }
    }
}

impl<T> Results<T> for InOrder<T> {
    #[inline(always)]
    fn accept(&mut self, seq: usize, value: T) -> ControlFlow<()> {
        let k = seq - self.head;
        if k == self.waiting.len() {
            self.waiting.push_back(Some(value));
        } else {
            self.accept_out_of_line(k, value);
        }
        ControlFlow::Continue(())
    }

    #[inline]
    fn released(&self) -> usize {
        self.head
    }
}

impl<T> Buffer<T> for InOrder<T> {
    #[inline]
    fn pop(&mut self) -> Option<T> {
        let value = self.waiting.front_mut()?.take()?;
        self.waiting.pop_front();
        self.head += 1;
        Some(value)
    }
}

/// Outputs in the order they finished.
struct InCompletionOrder<T> {
    done: VecDeque<T>,
    yielded: usize,
}

impl<T> Results<T> for InCompletionOrder<T> {
    #[inline]
    fn accept(&mut self, _seq: usize, value: T) -> ControlFlow<()> {
        self.done.push_back(value);
        ControlFlow::Continue(())
    }

    #[inline]
    fn released(&self) -> usize {
        self.yielded
    }
}

impl<T> Buffer<T> for InCompletionOrder<T> {
    #[inline]
    fn pop(&mut self) -> Option<T> {
        let value = self.done.pop_front()?;
        self.yielded += 1;
        Some(value)
    }
}

/// Collects into a vector in input order: an output that is next in line goes straight
/// in; the others wait in the reorder buffer.
struct Collect<'a, T> {
    order: &'a mut InOrder<T>,
    out: &'a mut Vec<T>,
}

impl<T> Results<T> for Collect<'_, T> {
    #[inline]
    fn accept(&mut self, seq: usize, value: T) -> ControlFlow<()> {
        if seq == self.order.head && self.order.waiting.is_empty() {
            self.out.push(value);
            self.order.head += 1;
        } else {
            let _ = self.order.accept(seq, value);
            while let Some(value) = self.order.pop() {
                self.out.push(value);
            }
        }
        ControlFlow::Continue(())
    }

    #[inline]
    fn released(&self) -> usize {
        self.order.head
    }
}

/// Collects the `Ok` values in input order; the first `Err` stops everything. Only `Ok`
/// values ever wait in the reorder buffer.
struct TryCollect<'a, T, E> {
    order: &'a mut InOrder<Result<T, E>>,
    out: &'a mut Vec<T>,
    error: &'a mut Option<E>,
}

impl<T, E> Results<Result<T, E>> for TryCollect<'_, T, E> {
    #[inline]
    fn accept(&mut self, seq: usize, value: Result<T, E>) -> ControlFlow<()> {
        match value {
            Ok(value) if seq == self.order.head && self.order.waiting.is_empty() => {
                self.out.push(value);
                self.order.head += 1;
            }
            Ok(value) => {
                let _ = self.order.accept(seq, Ok(value));
                while let Some(Ok(value)) = self.order.pop() {
                    self.out.push(value);
                }
            }
            Err(error) => {
                *self.error = Some(error);
                return ControlFlow::Break(());
            }
        }
        ControlFlow::Continue(())
    }

    #[inline]
    fn released(&self) -> usize {
        self.order.head
    }
}

// ---------------------------------------------------------------------------------------
// The engine.

/// The pool plus the input bookkeeping; the source stream lives beside it (pinned).
struct Engine<Fut> {
    pool: Pool<Fut>,
    /// At most this many items pulled and not yet released.
    window: usize,
    /// Items pulled so far; the next item's input position.
    next_seq: usize,
    input_done: bool,
}

impl<Fut: Future> Engine<Fut> {
    fn new(limit: usize, window: usize, expected: usize) -> Self {
        Self {
            pool: Pool::new(limit, expected),
            window,
            next_seq: 0,
            input_done: false,
        }
    }

    fn is_done(&self) -> bool {
        self.input_done && self.pool.is_empty()
    }

    /// Drops every future in flight and pulls nothing more.
    fn stop(&mut self) {
        self.input_done = true;
        self.pool.clear();
    }

    /// One round: poll the woken futures, then refill every free slot.
    #[inline(always)]
    fn pass<S, F, R>(
        &mut self,
        source: Pin<&mut S>,
        f: &mut F,
        results: &mut R,
        cx: &mut Context<'_>,
        budget: &mut usize,
    ) -> ControlFlow<()>
    where
        S: Stream,
        F: FnMut(S::Item) -> Fut,
        R: Results<Fut::Output>,
    {
        if self.pool.has_woken() {
            let polled = self
                .pool
                .poll_woken(|seq, output| results.accept(seq, output))?;
            *budget = budget.saturating_sub(polled);
        }
        self.fill(source, f, results, cx, budget)
    }

    /// Starts items while a slot is free, the window allows and the budget lasts.
    #[inline(always)]
    fn fill<S, F, R>(
        &mut self,
        mut source: Pin<&mut S>,
        f: &mut F,
        results: &mut R,
        cx: &mut Context<'_>,
        budget: &mut usize,
    ) -> ControlFlow<()>
    where
        S: Stream,
        F: FnMut(S::Item) -> Fut,
        R: Results<Fut::Output>,
    {
        while *budget > 0
            && !self.input_done
            && !self.pool.is_full()
            && self.next_seq - results.released() < self.window
        {
            match source.as_mut().poll_next(cx) {
                Poll::Ready(Some(item)) => {
                    *budget -= 1;
                    let seq = self.next_seq;
                    self.next_seq += 1;
                    if let Some(output) = self.pool.start(f(item), seq) {
                        results.accept(seq, output)?;
                    }
                }
                Poll::Ready(None) => self.input_done = true,
                Poll::Pending => break,
            }
        }
        ControlFlow::Continue(())
    }

    /// Drives everything to the end, handing outputs to `results`. `Ready(Break)` means
    /// `results` stopped the map; the futures in flight are dropped by then.
    fn poll_drive<S, F, R>(
        &mut self,
        mut source: Pin<&mut S>,
        f: &mut F,
        results: &mut R,
        cx: &mut Context<'_>,
    ) -> Poll<ControlFlow<()>>
    where
        S: Stream,
        F: FnMut(S::Item) -> Fut,
        R: Results<Fut::Output>,
    {
        let this = StopOnUnwind::new(self);
        let mut budget = BUDGET;
        loop {
            this.engine.pool.enter();
            if this
                .engine
                .pass(source.as_mut(), f, results, cx, &mut budget)
                .is_break()
            {
                this.engine.stop();
                return Poll::Ready(ControlFlow::Break(()));
            }
            if this.engine.is_done() {
                return Poll::Ready(ControlFlow::Continue(()));
            }
            if budget == 0 {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            this.engine.pool.register(cx);
            if !this.engine.pool.has_woken() {
                return Poll::Pending;
            }
        }
    }
}

/// Drops the futures in flight when a panic (in a future, in `f`, in the source) unwinds
/// through a poll, so the panic reaches the caller after the others are gone.
struct StopOnUnwind<'a, Fut: Future> {
    engine: &'a mut Engine<Fut>,
    /// Polled from a destructor during another panic: not ours to clean up after.
    already_panicking: bool,
}

impl<'a, Fut: Future> StopOnUnwind<'a, Fut> {
    #[inline]
    fn new(engine: &'a mut Engine<Fut>) -> Self {
        Self {
            engine,
            already_panicking: std::thread::panicking(),
        }
    }
}

impl<Fut: Future> Drop for StopOnUnwind<'_, Fut> {
    fn drop(&mut self) {
        if std::thread::panicking() && !self.already_panicking {
            self.engine.stop();
        }
    }
}

pin_project! {
    /// A source, the engine and a buffer: everything but the function.
    struct Core<S, Fut, R> {
        #[pin]
        source: S,
        engine: Engine<Fut>,
        results: R,
        // Items yielded in a row without returning `Pending`.
        streak: u32,
    }
}

impl<S: Stream, Fut: Future, R> Core<S, Fut, R> {
    #[track_caller]
    fn new(source: S, limit: usize, window: usize, results: R) -> Self {
        check_limit(limit);
        let expected = source.size_hint().1.unwrap_or(usize::MAX);
        Self {
            source,
            engine: Engine::new(limit, window, expected),
            results,
            streak: 0,
        }
    }

    #[track_caller]
    fn set_window(&mut self, window: usize) {
        check_window(window, self.engine.pool.limit());
        self.engine.window = window;
    }

    /// Pulled and not yet yielded, plus what the source still promises.
    fn size_hint(&self) -> (usize, Option<usize>)
    where
        R: Results<Fut::Output>,
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

    fn poll_next_with<F>(
        self: Pin<&mut Self>,
        f: &mut F,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Fut::Output>>
    where
        F: FnMut(S::Item) -> Fut,
        R: Buffer<Fut::Output>,
    {
        let this = self.project();
        let mut source = this.source;
        let results = this.results;
        let streak = this.streak;
        if *streak >= STREAK {
            // Cooperative: a long run of ready items yields once to the executor.
            *streak = 0;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let engine = StopOnUnwind::new(this.engine);
        let mut budget = BUDGET;
        engine.engine.pool.enter();
        if let Some(value) = results.pop() {
            // Yielding `value` released a place in the window: refill before returning.
            let _ = engine
                .engine
                .pass(source.as_mut(), f, results, cx, &mut budget);
            *streak += 1;
            return Poll::Ready(Some(value));
        }
        loop {
            let _ = engine
                .engine
                .pass(source.as_mut(), f, results, cx, &mut budget);
            if let Some(value) = results.pop() {
                let _ = engine
                    .engine
                    .fill(source.as_mut(), f, results, cx, &mut budget);
                *streak += 1;
                return Poll::Ready(Some(value));
            }
            if engine.engine.is_done() {
                return Poll::Ready(None);
            }
            *streak = 0;
            if budget == 0 {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            engine.engine.pool.register(cx);
            if !engine.engine.pool.has_woken() {
                return Poll::Pending;
            }
            engine.engine.pool.enter();
        }
    }
}

// ---------------------------------------------------------------------------------------
// Streams.

pin_project! {
    /// Stream for [`BoundedStreamExt::map_bounded`]: outputs in input order.
    #[must_use = "streams do nothing unless polled"]
    pub struct MapBounded<S, F, Fut>
    where
        Fut: Future,
    {
        #[pin]
        core: Core<S, Fut, InOrder<Fut::Output>>,
        f: F,
    }
}

impl<S, F, Fut> MapBounded<S, F, Fut>
where
    S: Stream,
    F: FnMut(S::Item) -> Fut,
    Fut: Future,
{
    #[track_caller]
    fn new(source: S, limit: usize, f: F) -> Self {
        Self {
            core: Core::new(
                source,
                limit,
                limit.saturating_mul(ORDERED_WINDOW),
                InOrder::new(),
            ),
            f,
        }
    }

    /// Sets the window: at most `window` items are pulled from the input and not yet
    /// yielded (in flight or waiting in the reorder buffer). The default is 4 × `limit`.
    ///
    /// A slow item at the head of the line holds back its results' successors; the other
    /// slots keep working until the reorder buffer holds `window - limit` or more
    /// finished outputs waiting for it. `window == limit` gives the behaviour of
    /// `futures`' `buffered` (no item starts more than `limit` places after the head);
    /// `usize::MAX` never holds a slot back, at the cost of an unbounded buffer.
    ///
    /// # Examples
    ///
    /// ```
    /// use futures_lite::{StreamExt, stream};
    /// use tollgate::BoundedStreamExt;
    /// # futures_lite::future::block_on(async {
    /// let doubled: Vec<u32> = stream::iter(1..=5)
    ///     .map_bounded(2, |n| async move { n * 2 })
    ///     .window(16)
    ///     .collect()
    ///     .await;
    /// assert_eq!(doubled, [2, 4, 6, 8, 10]);
    /// # });
    /// ```
    ///
    /// # Panics
    ///
    /// If `window` is less than the limit.
    #[track_caller]
    pub fn window(mut self, window: usize) -> Self {
        self.core.set_window(window);
        self
    }
}

impl<S, F, Fut> Stream for MapBounded<S, F, Fut>
where
    S: Stream,
    F: FnMut(S::Item) -> Fut,
    Fut: Future,
{
    type Item = Fut::Output;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.project();
        this.core.poll_next_with(this.f, cx)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.core.size_hint()
    }
}

impl<S, F, Fut: Future> fmt::Debug for MapBounded<S, F, Fut> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_core(f.debug_struct("MapBounded"), &self.core.engine)
    }
}

pin_project! {
    /// Stream for [`BoundedStreamExt::map_unordered`] and [`amap_iter`]: outputs in
    /// completion order.
    #[must_use = "streams do nothing unless polled"]
    pub struct MapUnordered<S, F, Fut>
    where
        Fut: Future,
    {
        #[pin]
        core: Core<S, Fut, InCompletionOrder<Fut::Output>>,
        f: F,
    }
}

impl<S, F, Fut> MapUnordered<S, F, Fut>
where
    S: Stream,
    F: FnMut(S::Item) -> Fut,
    Fut: Future,
{
    #[track_caller]
    fn new(source: S, limit: usize, f: F) -> Self {
        let results = InCompletionOrder {
            done: VecDeque::new(),
            yielded: 0,
        };
        Self {
            core: Core::new(source, limit, limit, results),
            f,
        }
    }

    /// Sets the window: at most `window` items are pulled from the input and not yet
    /// yielded (in flight or finished and waiting to be yielded). The default is `limit`:
    /// while you hold on to an output, no new item starts in its place.
    ///
    /// A larger window lets finished outputs pile up (at most `window - limit` of them)
    /// while the slots keep working, for a consumer that is slow now and then.
    ///
    /// # Examples
    ///
    /// ```
    /// use futures_lite::{StreamExt, stream};
    /// use tollgate::BoundedStreamExt;
    /// # futures_lite::future::block_on(async {
    /// let mut sum = 0;
    /// let mut outputs = stream::iter(1..=5)
    ///     .map_unordered(2, |n| async move { n * 2 })
    ///     .window(8);
    /// while let Some(n) = outputs.next().await {
    ///     sum += n;
    /// }
    /// assert_eq!(sum, 30);
    /// # });
    /// ```
    ///
    /// # Panics
    ///
    /// If `window` is less than the limit.
    #[track_caller]
    pub fn window(mut self, window: usize) -> Self {
        self.core.set_window(window);
        self
    }
}

impl<S, F, Fut> Stream for MapUnordered<S, F, Fut>
where
    S: Stream,
    F: FnMut(S::Item) -> Fut,
    Fut: Future,
{
    type Item = Fut::Output;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.project();
        this.core.poll_next_with(this.f, cx)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.core.size_hint()
    }
}

impl<S, F, Fut: Future> fmt::Debug for MapUnordered<S, F, Fut> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_core(f.debug_struct("MapUnordered"), &self.core.engine)
    }
}

fn debug_core<Fut>(mut s: fmt::DebugStruct<'_, '_>, engine: &Engine<Fut>) -> fmt::Result {
    s.field("limit", &engine.pool.limit())
        .field("in_flight", &engine.pool.len())
        .field("window", &engine.window)
        .finish_non_exhaustive()
}

/// Bounded concurrent mapping for any [`Stream`]: channels, paginated APIs, other
/// combinators.
///
/// Implemented for every stream; import it to call its methods. For an iterator, the free
/// functions [`map_async`], [`try_map_async`] and [`amap_iter`] are shorter.
pub trait BoundedStreamExt: Stream {
    /// Maps each item to a future and runs at most `limit` of them at once, yielding
    /// outputs in input order.
    ///
    /// An item is pulled from `self` only when a slot is free, and every freed slot is
    /// refilled in the same poll, so `limit` futures stay in flight while input remains.
    /// A slow item does not stall the others: their outputs wait in a reorder buffer
    /// bounded by the [window](MapBounded::window) (4 × `limit` by default).
    ///
    /// Failures are items like any other: with `Fut::Output = Result<T, E>` you get every
    /// `Result`. Stop at the first error with `try_next`/`try_collect`-style consumers, or
    /// use [`try_map_async`] for an iterator.
    ///
    /// # Examples
    ///
    /// ```
    /// use futures_lite::{StreamExt, stream};
    /// use tollgate::BoundedStreamExt;
    /// # futures_lite::future::block_on(async {
    /// let pages: Vec<String> = stream::iter(["a", "b", "c"])
    ///     .map_bounded(2, |path| async move { format!("<html>{path}</html>") })
    ///     .collect()
    ///     .await;
    /// assert_eq!(pages, ["<html>a</html>", "<html>b</html>", "<html>c</html>"]);
    /// # });
    /// ```
    ///
    /// # Panics
    ///
    /// If `limit` is 0. If a future, `f` or the source panics, the other futures in flight
    /// are dropped and the panic continues in the caller.
    ///
    /// # Cancel safety
    ///
    /// Dropping the stream drops every future in flight and every finished output not
    /// yet yielded; nothing more is pulled. Between polls it keeps no state outside
    /// itself.
    #[doc(alias = "buffered")]
    #[track_caller]
    fn map_bounded<F, Fut>(self, limit: usize, f: F) -> MapBounded<Self, F, Fut>
    where
        Self: Sized,
        F: FnMut(Self::Item) -> Fut,
        Fut: Future,
    {
        MapBounded::new(self, limit, f)
    }

    /// Maps each item to a future and runs at most `limit` of them at once, yielding
    /// outputs as they complete.
    ///
    /// An item is pulled from `self` only when a slot is free, and every freed slot is
    /// refilled in the same poll. By default at most `limit` items are pulled and not yet
    /// yielded; [`MapUnordered::window`] allows more finished outputs to wait.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use futures_lite::{StreamExt, stream};
    /// use tollgate::{BoundedStreamExt, sleep};
    /// # futures_lite::future::block_on(async {
    /// let mut first = stream::iter([30, 1])
    ///     .map_unordered(2, |ms| async move {
    ///         sleep(Duration::from_millis(ms)).await;
    ///         ms
    ///     });
    /// assert_eq!(first.next().await, Some(1)); // the quick one comes out first
    /// # });
    /// ```
    ///
    /// # Panics
    ///
    /// If `limit` is 0. If a future, `f` or the source panics, the other futures in flight
    /// are dropped and the panic continues in the caller.
    ///
    /// # Cancel safety
    ///
    /// Dropping the stream drops every future in flight; nothing more is pulled.
    #[doc(alias = "buffer_unordered")]
    #[track_caller]
    fn map_unordered<F, Fut>(self, limit: usize, f: F) -> MapUnordered<Self, F, Fut>
    where
        Self: Sized,
        F: FnMut(Self::Item) -> Fut,
        Fut: Future,
    {
        MapUnordered::new(self, limit, f)
    }

    /// Maps each item with at most `global_limit` futures in flight and at most
    /// `per_key_limit` per key, yielding outputs as they complete: the stream form of
    /// [`map_keyed`](crate::map_keyed).
    ///
    /// Items whose key is full wait in a per-key queue without holding a global slot;
    /// keys with waiting items take turns. At most the
    /// [look-ahead](crate::map::keyed::MapKeyedUnordered::lookahead) (64 × `global_limit` by
    /// default) items are pulled and waiting for their key.
    ///
    /// # Examples
    ///
    /// ```
    /// use futures_lite::{StreamExt, stream};
    /// use tollgate::BoundedStreamExt;
    /// # futures_lite::future::block_on(async {
    /// let mut pages: Vec<u32> = stream::iter(0..20)
    ///     .map_keyed_unordered(|n| n % 4, 8, 2, |n| async move { n })
    ///     .collect()
    ///     .await;
    /// pages.sort();
    /// assert_eq!(pages, (0..20).collect::<Vec<_>>());
    /// # });
    /// ```
    ///
    /// # Panics
    ///
    /// If either limit is 0. If a future, `f`, `key_fn` or the source panics, the other
    /// futures in flight are dropped and the panic continues in the caller.
    ///
    /// # Cancel safety
    ///
    /// Dropping the stream drops every future in flight and every item waiting for its
    /// key; nothing more is pulled.
    #[track_caller]
    fn map_keyed_unordered<K, KF, F, Fut>(
        self,
        key_fn: KF,
        global_limit: usize,
        per_key_limit: usize,
        f: F,
    ) -> crate::map::keyed::MapKeyedUnordered<Self, K, KF, F, Fut>
    where
        Self: Sized,
        K: std::hash::Hash + Eq + Clone,
        KF: FnMut(&Self::Item) -> K,
        F: FnMut(Self::Item) -> Fut,
        Fut: Future,
    {
        crate::map::keyed::MapKeyedUnordered::new(self, key_fn, global_limit, per_key_limit, f)
    }
}

impl<S: Stream + ?Sized> BoundedStreamExt for S {}

// ---------------------------------------------------------------------------------------
// Free functions over iterators.

/// Runs `f` over `items` with at most `limit` futures in flight, collecting every output
/// in input order.
///
/// Items are pulled lazily: the next one only when a slot frees, so a generator of
/// 10,000,000 items never becomes 10,000,000 futures. Every freed slot is refilled in the
/// same poll, and a slow item does not stall the other slots (their outputs wait for it
/// in a reorder buffer; see [`MapAsync::window`]).
///
/// Failures are items like any other: with `Fut::Output = Result<T, E>` you get a
/// `Vec<Result<T, E>>` (asyncio's `return_exceptions=True`). For all-or-nothing, use
/// [`try_map_async`].
///
/// This is [`BoundedStreamExt::map_bounded`] over the iterator, collected. Each future is
/// polled inline (never spawned) as soon as it is created, and a future that is ready at
/// once costs no allocation and no wake-up. After a few hundred units of work in one poll
/// it yields to the executor, so a long run of ready futures does not starve other tasks.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::{map_async, sleep};
///
/// #[derive(Debug)]
/// struct NotFound;
///
/// async fn fetch(url: String) -> Result<String, NotFound> {
///     sleep(Duration::from_millis(1)).await; // the network, simulated
///     if url.ends_with("/missing") { Err(NotFound) } else { Ok(format!("<html>{url}</html>")) }
/// }
///
/// # futures_lite::future::block_on(async {
/// let urls = (0..20).map(|i| format!("https://example.com/{i}"))
///     .chain(["https://example.com/missing".to_owned()]);
/// let pages = map_async(urls, 8, |url| fetch(url)).await;
/// assert_eq!(pages.len(), 21);
/// assert_eq!(pages[0].as_deref().unwrap(), "<html>https://example.com/0</html>");
/// assert!(pages[20].is_err());
/// # });
/// ```
///
/// # Panics
///
/// If `limit` is 0. If a future or `f` panics, the other futures in flight are dropped and
/// the panic continues in the caller.
///
/// # Cancel safety
///
/// Dropping the future drops every future in flight and the outputs collected so far;
/// nothing more is pulled from `items`.
#[doc(alias = "gather")]
#[doc(alias = "buffered")]
#[track_caller]
pub fn map_async<I, F, Fut>(items: I, limit: usize, f: F) -> MapAsync<I::IntoIter, F, Fut>
where
    I: IntoIterator,
    F: FnMut(I::Item) -> Fut,
    Fut: Future,
{
    let items = items.into_iter();
    let capacity = items.size_hint().0;
    MapAsync {
        stream: MapBounded::new(stream::iter(items), limit, f),
        out: Vec::with_capacity(capacity),
        finished: false,
    }
}

pin_project! {
    /// Future for [`map_async`].
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    pub struct MapAsync<I, F, Fut>
    where
        Fut: Future,
    {
        #[pin]
        stream: MapBounded<Iter<I>, F, Fut>,
        out: Vec<Fut::Output>,
        finished: bool,
    }
}

impl<I, F, Fut> MapAsync<I, F, Fut>
where
    I: Iterator,
    F: FnMut(I::Item) -> Fut,
    Fut: Future,
{
    /// Sets the window: at most `window` items are pulled and not yet collected in order
    /// (in flight, or finished and waiting for a slower earlier item). The default is
    /// 4 × `limit`; `usize::MAX` never holds a slot back behind a slow item.
    ///
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// let squares = tollgate::map_async(1..=4, 2, |n| async move { n * n })
    ///     .window(usize::MAX)
    ///     .await;
    /// assert_eq!(squares, [1, 4, 9, 16]);
    /// # });
    /// ```
    ///
    /// # Panics
    ///
    /// If `window` is less than the limit.
    #[track_caller]
    pub fn window(mut self, window: usize) -> Self {
        self.stream = self.stream.window(window);
        self
    }
}

impl<I, F, Fut> Future for MapAsync<I, F, Fut>
where
    I: Iterator,
    F: FnMut(I::Item) -> Fut,
    Fut: Future,
{
    type Output = Vec<Fut::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        assert!(!*this.finished, "`MapAsync` polled after completion");
        let stream = this.stream.project();
        let core = stream.core.project();
        let mut results = Collect {
            order: core.results,
            out: this.out,
        };
        match core
            .engine
            .poll_drive(core.source, stream.f, &mut results, cx)
        {
            Poll::Ready(_) => {
                *this.finished = true;
                Poll::Ready(std::mem::take(this.out))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<I, F, Fut: Future> fmt::Debug for MapAsync<I, F, Fut> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_core(f.debug_struct("MapAsync"), &self.stream.core.engine)
    }
}

/// Runs `f` over `items` with at most `limit` futures in flight and collects the `Ok`
/// values in input order, or returns the first error.
///
/// All-or-nothing: the first future to fail (in completion order) wins. Every other future
/// in flight is dropped (cancelled) at once, nothing more is pulled from `items`, and
/// its error is returned.
///
/// # Examples
///
/// ```
/// # futures_lite::future::block_on(async {
/// let parsed = tollgate::try_map_async(["1", "2", "3"], 2, |s| async move { s.parse::<u32>() });
/// assert_eq!(parsed.await, Ok(vec![1, 2, 3]));
///
/// let failed = tollgate::try_map_async(["1", "x", "3"], 2, |s| async move { s.parse::<u32>() });
/// assert!(failed.await.is_err());
/// # });
/// ```
///
/// # Errors
///
/// The first error a future returns.
///
/// # Panics
///
/// If `limit` is 0. If a future or `f` panics, the other futures in flight are dropped and
/// the panic continues in the caller.
///
/// # Cancel safety
///
/// Dropping the future drops every future in flight and the values collected so far.
#[doc(alias = "try_join_all")]
#[track_caller]
pub fn try_map_async<I, F, Fut, T, E>(
    items: I,
    limit: usize,
    f: F,
) -> TryMapAsync<I::IntoIter, F, Fut, T, E>
where
    I: IntoIterator,
    F: FnMut(I::Item) -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let items = items.into_iter();
    let capacity = items.size_hint().0;
    TryMapAsync {
        stream: MapBounded::new(stream::iter(items), limit, f),
        out: Vec::with_capacity(capacity),
        error: None,
        finished: false,
    }
}

pin_project! {
    /// Future for [`try_map_async`].
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    pub struct TryMapAsync<I, F, Fut, T, E>
    where
        Fut: Future,
    {
        #[pin]
        stream: MapBounded<Iter<I>, F, Fut>,
        out: Vec<T>,
        error: Option<E>,
        finished: bool,
    }
}

impl<I, F, Fut, T, E> TryMapAsync<I, F, Fut, T, E>
where
    I: Iterator,
    F: FnMut(I::Item) -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    /// Sets the window, as [`MapAsync::window`] does.
    ///
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// let all = tollgate::try_map_async(1..=3, 1, |n| async move { Ok::<_, ()>(n) })
    ///     .window(10)
    ///     .await;
    /// assert_eq!(all, Ok(vec![1, 2, 3]));
    /// # });
    /// ```
    ///
    /// # Panics
    ///
    /// If `window` is less than the limit.
    #[track_caller]
    pub fn window(mut self, window: usize) -> Self {
        self.stream = self.stream.window(window);
        self
    }
}

impl<I, F, Fut, T, E> Future for TryMapAsync<I, F, Fut, T, E>
where
    I: Iterator,
    F: FnMut(I::Item) -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    type Output = Result<Vec<T>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        assert!(!*this.finished, "`TryMapAsync` polled after completion");
        let stream = this.stream.project();
        let core = stream.core.project();
        let mut results = TryCollect {
            order: core.results,
            out: this.out,
            error: this.error,
        };
        let flow =
            std::task::ready!(
                core.engine
                    .poll_drive(core.source, stream.f, &mut results, cx)
            );
        *this.finished = true;
        match flow {
            ControlFlow::Continue(()) => Poll::Ready(Ok(std::mem::take(this.out))),
            ControlFlow::Break(()) => {
                this.out.clear();
                let error = this.error.take();
                Poll::Ready(Err(error.expect("an error stopped the map")))
            }
        }
    }
}

impl<I, F, Fut: Future, T, E> fmt::Debug for TryMapAsync<I, F, Fut, T, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_core(f.debug_struct("TryMapAsync"), &self.stream.core.engine)
    }
}

/// Runs `items`' mapped futures with at most `limit` in flight and yields their outputs as
/// they complete.
///
/// Items are pulled lazily, only when a slot is free; by default at most `limit` items
/// are pulled and not yet yielded (see [`MapUnordered::window`]). Dropping the stream
/// cancels every future in flight and pulls nothing more. This is
/// [`BoundedStreamExt::map_unordered`] over the iterator.
///
/// # Examples
///
/// ```
/// use futures_lite::StreamExt;
///
/// # futures_lite::future::block_on(async {
/// // A million items, 64 at a time, in constant memory.
/// let total = tollgate::amap_iter(0..1_000_000u64, 64, |n| async move { n % 7 })
///     .fold(0, |sum, n| sum + n)
///     .await;
/// assert_eq!(total, 2_999_997);
/// # });
/// ```
///
/// # Panics
///
/// If `limit` is 0. If a future or `f` panics, the other futures in flight are dropped and
/// the panic continues in the caller.
///
/// # Cancel safety
///
/// Dropping the stream drops every future in flight; nothing more is pulled.
#[doc(alias = "as_completed")]
#[doc(alias = "buffer_unordered")]
#[track_caller]
pub fn amap_iter<I, F, Fut>(items: I, limit: usize, f: F) -> MapUnordered<Iter<I::IntoIter>, F, Fut>
where
    I: IntoIterator,
    F: FnMut(I::Item) -> Fut,
    Fut: Future,
{
    MapUnordered::new(stream::iter(items), limit, f)
}

/// Runs `futures` with at most `limit` in flight, collecting their outputs in input order.
///
/// The futures are already created, but none is polled before its turn: at most `limit`
/// are in flight at once. This is [`map_async`] without the function.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::sleep;
///
/// # futures_lite::future::block_on(async {
/// let jobs = (1..=6u64).map(|ms| async move {
///     sleep(Duration::from_millis(ms)).await;
///     ms
/// });
/// assert_eq!(tollgate::gather_limit(jobs, 3).await, [1, 2, 3, 4, 5, 6]);
/// # });
/// ```
///
/// # Panics
///
/// If `limit` is 0. If a future panics, the others in flight are dropped and the panic
/// continues in the caller.
///
/// # Cancel safety
///
/// Dropping the future drops every future in flight and the outputs collected so far.
#[doc(alias = "gather")]
#[doc(alias = "join_all")]
#[track_caller]
pub fn gather_limit<I>(futures: I, limit: usize) -> GatherLimit<I::IntoIter>
where
    I: IntoIterator,
    I::Item: Future,
{
    let futures = futures.into_iter();
    let capacity = futures.size_hint().0;
    GatherLimit {
        core: Core::new(
            stream::iter(futures),
            limit,
            limit.saturating_mul(ORDERED_WINDOW),
            InOrder::new(),
        ),
        out: Vec::with_capacity(capacity),
        finished: false,
    }
}

pin_project! {
    /// Future for [`gather_limit`].
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    pub struct GatherLimit<I>
    where
        I: Iterator,
        I::Item: Future,
    {
        #[pin]
        core: Core<Iter<I>, I::Item, InOrder<<I::Item as Future>::Output>>,
        out: Vec<<I::Item as Future>::Output>,
        finished: bool,
    }
}

impl<I> GatherLimit<I>
where
    I: Iterator,
    I::Item: Future,
{
    /// Sets the window, as [`MapAsync::window`] does.
    ///
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// let jobs = (1..=3).map(|n| async move { n });
    /// assert_eq!(tollgate::gather_limit(jobs, 1).window(8).await, [1, 2, 3]);
    /// # });
    /// ```
    ///
    /// # Panics
    ///
    /// If `window` is less than the limit.
    #[track_caller]
    pub fn window(mut self, window: usize) -> Self {
        self.core.set_window(window);
        self
    }
}

impl<I> Future for GatherLimit<I>
where
    I: Iterator,
    I::Item: Future,
{
    type Output = Vec<<I::Item as Future>::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        assert!(!*this.finished, "`GatherLimit` polled after completion");
        let core = this.core.project();
        let mut results = Collect {
            order: core.results,
            out: this.out,
        };
        let _ = std::task::ready!(core.engine.poll_drive(
            core.source,
            &mut |fut| fut,
            &mut results,
            cx
        ));
        *this.finished = true;
        Poll::Ready(std::mem::take(this.out))
    }
}

impl<I> fmt::Debug for GatherLimit<I>
where
    I: Iterator,
    I::Item: Future,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_core(f.debug_struct("GatherLimit"), &self.core.engine)
    }
}
