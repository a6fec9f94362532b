//! [`BoundedMap`]: the one type under every bounded map. The collecting futures
//! ([`MapAsync`], [`TryMapAsync`], [`GatherLimit`]) and the streams ([`MapBounded`],
//! [`MapUnordered`]) are this type with another [`Delivery`], the way an ordered buffer
//! can be an unordered one with the order as a parameter: each builder method is written
//! once (once per admission, for those that install or change the scheduler), here or in
//! `schedule.rs`.

use std::fmt;
use std::future::{Future, IntoFuture};
use std::ops::ControlFlow;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_lite::Stream;
use futures_lite::stream::Iter;
use pin_project_lite::pin_project;

use super::alongside::{MapStream, sealed};
use super::boxed::BoxedMap;
use super::delivery::{Collected, CompletionOrder, Delivery, Gathered, InputOrder, TryCollected};
use super::engine::{Admission, Core, DebugFields, DefaultWindow, Engine};
use super::results::{Buffer, Collect, InOrder, OutputForm, Plain, TryCollect};
use super::window::Window;

pin_project! {
    /// The one bounded map: items of the source stream `S` mapped by `F` to futures of
    /// type `Fut`, at most a limit of them in flight, admitted by `A` ([`Window`], or
    /// [`PerKey`](super::PerKey) after `per_key`, `rate` or `retry`), outputs delivered as
    /// `D` says ([`Delivery`]).
    ///
    /// Every bounded map is this type under another name, with its own
    /// [`Delivery`]: [`MapAsync`], [`TryMapAsync`], [`GatherLimit`], [`MapBounded`] and
    /// [`MapUnordered`]. Those names are the ones to use; this one is what their methods
    /// are written on, once for all of them.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::futures::{BoundedMap, MapUnordered};
    /// use tollgate::map_type::CompletionOrder;
    ///
    /// // `amap_iter` returns a `MapUnordered`, which is a `BoundedMap` in completion order.
    /// let map: MapUnordered<_, _, _> = tollgate::amap_iter(0..3, 2, |n| async move { n });
    /// let _same: BoundedMap<_, _, _, _, CompletionOrder> = map;
    /// ```
    #[must_use = "futures and streams do nothing unless polled"]
    pub struct BoundedMap<S, F, Fut, A, D>
    where
        Fut: IntoFuture,
        D: Delivery,
    {
        #[pin]
        core: Core<S, Fut::IntoFuture, D::Buffer<Fut::Output>, A>,
        f: F,
        held: D::Held<Fut::Output>,
    }
}

/// Future for [`map_async`](super::map_async).
///
/// `A` is the admission: [`Window`] by default, [`PerKey`](super::PerKey) after
/// [`per_key`](BoundedMap::per_key). `M` is the output form: [`Plain`] by default,
/// [`Indexed`](super::Indexed) after [`indexed`](BoundedMap::indexed).
pub type MapAsync<I, F, Fut, A = Window, M = Plain> = BoundedMap<Iter<I>, F, Fut, A, Collected<M>>;

/// Future for [`try_map_async`](super::try_map_async).
///
/// `A` is the admission: [`Window`] by default, [`PerKey`](super::PerKey) after
/// [`per_key`](BoundedMap::per_key). `M` is the output form: [`Plain`] by default,
/// [`Indexed`](super::Indexed) after [`indexed`](BoundedMap::indexed).
pub type TryMapAsync<I, F, Fut, T, E, A = Window, M = Plain> =
    BoundedMap<Iter<I>, F, Fut, A, TryCollected<T, E, M>>;

/// Future for [`gather_limit`](super::gather_limit): a map whose items are the futures
/// (it has no function, hence `()`), with [`control`](BoundedMap::control) and
/// [`window`](BoundedMap::window).
pub type GatherLimit<I> = BoundedMap<Iter<I>, (), <I as Iterator>::Item, Window, Gathered>;

/// Stream for [`BoundedStreamExt::map_bounded`](super::BoundedStreamExt::map_bounded):
/// outputs in input order.
///
/// `A` is the admission: [`Window`] by default, [`PerKey`](super::PerKey) after
/// [`per_key`](BoundedMap::per_key). `M` is the output form: [`Plain`] by default,
/// [`Indexed`](super::Indexed) after [`indexed`](BoundedMap::indexed).
pub type MapBounded<S, F, Fut, A = Window, M = Plain> = BoundedMap<S, F, Fut, A, InputOrder<M>>;

/// Stream for [`BoundedStreamExt::map_unordered`](super::BoundedStreamExt::map_unordered)
/// and [`amap_iter`](super::amap_iter): outputs in completion order.
///
/// `A` is the admission: [`Window`] by default, [`PerKey`](super::PerKey) after
/// [`per_key`](BoundedMap::per_key). `M` is the output form: [`Plain`] by default,
/// [`Indexed`](super::Indexed) after [`indexed`](BoundedMap::indexed).
pub type MapUnordered<S, F, Fut, A = Window, M = Plain> =
    BoundedMap<S, F, Fut, A, CompletionOrder<M>>;

impl<S: Stream, F, Fut: IntoFuture, D: Delivery> BoundedMap<S, F, Fut, Window, D> {
    #[track_caller]
    pub(crate) fn new(source: S, limit: usize, f: F) -> Self {
        let (results, held) = D::start(source.size_hint().0);
        Self {
            core: Core::new(source, limit, D::ORDERED, results, Window::default()),
            f,
            held,
        }
    }
}

impl<S, F, Fut: IntoFuture, A, D: Delivery> BoundedMap<S, F, Fut, A, D> {
    pub(crate) fn engine_mut(&mut self) -> &mut Engine<Fut::IntoFuture, A> {
        &mut self.core.engine
    }

    pub(crate) fn admission_mut(&mut self) -> &mut A {
        &mut self.core.engine.admission
    }

    /// The same map, not yet started, with another admission made from the current one.
    pub(crate) fn replace_admission<B>(
        self,
        admission: impl FnOnce(A) -> B,
    ) -> BoundedMap<S, F, Fut, B, D>
    where
        B: DefaultWindow,
    {
        BoundedMap {
            core: self.core.with_admission(D::ORDERED, admission),
            f: self.f,
            held: self.held,
        }
    }

    /// Sets the window: at most `window` items are pulled from the input and not yet
    /// handed out (waiting for their key, in flight, or finished and waiting: for a
    /// slower earlier item in input order, or to be yielded). The default is 4 × `limit`
    /// in input order (`map_async`, `try_map_async`, `gather_limit`, `map_bounded`) and
    /// `limit` in completion order (`amap_iter`, `map_unordered`: while you hold on to an
    /// output, no new item starts in its place); 64 × `limit` with a per-key limit.
    ///
    /// In input order, a slow item at the head of the line holds back its successors'
    /// outputs; the other slots keep working until the reorder buffer holds
    /// `window - limit` or more finished outputs waiting for it. `window == limit` gives
    /// the behaviour of `futures`' `buffered` (no item starts more than `limit` places
    /// after the head); `usize::MAX` never holds a slot back, at the cost of an unbounded
    /// buffer. In completion order, a larger window lets finished outputs pile up (at
    /// most `window - limit` of them) while the slots keep working, for a consumer that is
    /// slow now and then.
    ///
    /// # Examples
    ///
    /// ```
    /// use futures_lite::{StreamExt, stream};
    /// use tollgate::BoundedStreamExt;
    /// # futures_lite::future::block_on(async {
    /// let squares = tollgate::map_async(1..=4, 2, |n| async move { n * n })
    ///     .window(usize::MAX)
    ///     .await;
    /// assert_eq!(squares, [1, 4, 9, 16]);
    ///
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
        self.core.engine.set_window(window);
        self
    }

    /// The map stream as a [`BoxedMap`]: one allocation, a type that names only what it
    /// yields, to keep a map (keyed, rated, adaptive, with breakers or shared limits) in a
    /// struct field. Everything it was built with carries over; call it last.
    ///
    /// # Examples
    ///
    /// ```
    /// use futures_lite::StreamExt;
    /// use tollgate::futures::BoxedMap;
    ///
    /// fn squares<'a>(numbers: &'a [u64]) -> BoxedMap<'a, u64> {
    ///     tollgate::amap_iter(numbers, 4, |n| async move { n * n })
    ///         .per_key(|n| *n % 2, 1)
    ///         .boxed_map()
    /// }
    /// # futures_lite::future::block_on(async {
    /// let total = squares(&[1, 2, 3]).fold(0, |sum, n| sum + n).await;
    /// assert_eq!(total, 14);
    /// # });
    /// ```
    pub fn boxed_map<'a>(self) -> BoxedMap<'a, <Self as Stream>::Item>
    where
        Self: MapStream + fmt::Debug + Send + 'a,
    {
        BoxedMap::new(self)
    }
}

impl<S, F, Fut, A, D> BoundedMap<S, F, Fut, A, D>
where
    S: Stream,
    F: FnMut(S::Item) -> Fut,
    Fut: IntoFuture,
    D: Delivery<Form = Plain>,
{
    /// Pairs each output with its item's input position (0 for the first item):
    /// `map_async` resolves to `Vec<(usize, O)>` and `try_map_async` to
    /// `Result<Vec<(usize, T)>, E>`, still in input order; the streams yield `(usize, O)`,
    /// in their own order (in completion order, each output with the position of its own
    /// item).
    ///
    /// The position is the map's own count of the items it pulled, the numbering of
    /// [`MapControl::not_started`](super::MapControl::not_started) and
    /// [`Progress::pulled`](super::Progress::pulled): it is exact whatever order items
    /// start and finish in (per-key limits, rates, retries: a retried item keeps its
    /// position). After a [drain](super::MapControl::drain), the positions of the outputs,
    /// the positions not started and every position from `pulled()` on partition the
    /// input, without carrying the position through the function.
    ///
    /// Call it anywhere before the map is first polled: before or after `per_key`,
    /// `rate`, `per_key_rate`, `retry`, `shared_limits`, `control` and `window`. A map
    /// that does not call it pays nothing for positions.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{MapControl, map_async};
    /// # futures_lite::future::block_on(async {
    /// let control = MapControl::new();
    /// let stop = control.clone();
    /// let urls = (0..100).map(|i| format!("https://example.com/{i}"));
    /// let done = map_async(urls, 4, |url| {
    ///     if url.ends_with("/9") {
    ///         stop.drain(); // a Ctrl-C handler would call this
    ///     }
    ///     async move { url.len() }
    /// })
    /// .indexed()
    /// .control(&control)
    /// .await;
    /// let finished: Vec<usize> = done.iter().map(|&(position, _)| position).collect();
    /// assert_eq!(finished, (0..10).collect::<Vec<_>>());
    /// // To do next time: what was pulled and not started, and everything from `pulled`.
    /// assert!(control.not_started().is_empty());
    /// assert_eq!(control.progress().pulled(), 10);
    /// # });
    /// ```
    ///
    /// # Panics
    ///
    /// If the map was polled already.
    #[track_caller]
    pub fn indexed(self) -> BoundedMap<S, F, Fut, A, D::Indexed> {
        BoundedMap {
            core: self.core.with_results(D::index_buffer),
            f: self.f,
            held: D::index_held(self.held),
        }
    }
}

/// The core of a collecting map whose function returns `W`.
type CollectCore<S, W, A> =
    Core<S, <W as IntoFuture>::IntoFuture, InOrder<<W as IntoFuture>::Output>, A>;

/// Drives a collecting map to its end, moving each output into `out` in input order.
#[inline(always)]
fn poll_collect<S, G, W, A, M>(
    core: Pin<&mut CollectCore<S, W, A>>,
    f: &mut G,
    out: &mut Vec<M::Output<W::Output>>,
    cx: &mut Context<'_>,
    name: &str,
) -> Poll<Vec<M::Output<W::Output>>>
where
    S: Stream,
    G: FnMut(S::Item) -> W,
    W: IntoFuture,
    A: Admission<S::Item, W::Output>,
    M: OutputForm,
{
    let core = core.project();
    core.engine.check(name);
    let mut results = Collect::<_, M> {
        order: core.results,
        out,
    };
    let _ = std::task::ready!(core.engine.poll_drive(core.source, f, &mut results, cx));
    core.engine.finish();
    Poll::Ready(std::mem::take(out))
}

impl<S, F, Fut, A, M> Future for BoundedMap<S, F, Fut, A, Collected<M>>
where
    S: Stream,
    F: FnMut(S::Item) -> Fut,
    Fut: IntoFuture,
    A: Admission<S::Item, Fut::Output>,
    M: OutputForm,
{
    type Output = Vec<M::Output<Fut::Output>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        poll_collect::<_, _, _, _, M>(this.core, this.f, this.held, cx, Collected::<M>::NAME)
    }
}

impl<S, Fut, A> Future for BoundedMap<S, (), Fut, A, Gathered>
where
    S: Stream<Item = Fut>,
    Fut: IntoFuture,
    A: Admission<Fut, Fut::Output>,
{
    type Output = Vec<Fut::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        // The item is already the work.
        let work = &mut |work: Fut| work;
        poll_collect::<_, _, _, _, Plain>(this.core, work, this.held, cx, Gathered::NAME)
    }
}

impl<S, F, Fut, T, E, A, M> Future for BoundedMap<S, F, Fut, A, TryCollected<T, E, M>>
where
    S: Stream,
    F: FnMut(S::Item) -> Fut,
    Fut: IntoFuture<Output = Result<T, E>>,
    A: Admission<S::Item, Fut::Output>,
    M: OutputForm,
{
    type Output = Result<Vec<M::Output<T>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let core = this.core.project();
        core.engine.check(TryCollected::<T, E, M>::NAME);
        let (out, error) = this.held;
        let mut results = TryCollect::<_, _, M> {
            order: core.results,
            out,
            error,
        };
        let flow = std::task::ready!(
            core.engine
                .poll_drive(core.source, this.f, &mut results, cx)
        );
        core.engine.finish();
        match flow {
            ControlFlow::Continue(()) => Poll::Ready(Ok(std::mem::take(out))),
            ControlFlow::Break(()) => {
                *out = Vec::new();
                let error = error.take();
                Poll::Ready(Err(error.expect("an error stopped the map")))
            }
        }
    }
}

impl<S, F, Fut, A, D> Stream for BoundedMap<S, F, Fut, A, D>
where
    S: Stream,
    F: FnMut(S::Item) -> Fut,
    Fut: IntoFuture,
    A: Admission<S::Item, Fut::Output>,
    D: Delivery<Held<Fut::Output> = ()>,
    D::Buffer<Fut::Output>: Buffer<Fut::Output, Out = <D::Form as OutputForm>::Output<Fut::Output>>,
{
    type Item = <D::Form as OutputForm>::Output<Fut::Output>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.project();
        this.core.poll_next_with(this.f, cx, D::NAME)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.core.size_hint()
    }
}

impl<S, F, Fut, A, D> sealed::Sealed for BoundedMap<S, F, Fut, A, D>
where
    Fut: IntoFuture,
    D: Delivery,
{
}

impl<S, F, Fut, A, D> MapStream for BoundedMap<S, F, Fut, A, D>
where
    S: Stream,
    F: FnMut(S::Item) -> Fut,
    Fut: IntoFuture,
    A: Admission<S::Item, Fut::Output>,
    D: Delivery<Held<Fut::Output> = ()>,
    D::Buffer<Fut::Output>: Buffer<Fut::Output, Out = <D::Form as OutputForm>::Output<Fut::Output>>,
{
    fn poll_work(self: Pin<&mut Self>, cx: &mut Context<'_>) {
        let this = self.project();
        this.core.poll_work(this.f, cx, D::NAME);
    }

    fn poll_park(self: Pin<&mut Self>, cx: &mut Context<'_>) -> bool {
        self.project().core.poll_park(cx)
    }

    #[inline]
    fn work_done(self: Pin<&mut Self>) {
        self.project().core.work_done();
    }
}

impl<S, F, Fut: IntoFuture, A: DebugFields, D: Delivery> fmt::Debug
    for BoundedMap<S, F, Fut, A, D>
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.core.engine.debug(D::NAME, f)
    }
}
