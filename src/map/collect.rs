//! The collecting futures: [`MapAsync`], [`TryMapAsync`] and [`GatherLimit`]. Each
//! drives the engine and moves every output straight into its result vector when it is
//! next in line.

use std::fmt;
use std::future::{Future, IntoFuture};
use std::hash::Hash;
use std::ops::ControlFlow;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_lite::stream::{self, Iter};
use pin_project_lite::pin_project;

use super::control::MapControl;
use super::engine::{Admission, Core, DebugFields, DefaultWindow, Engine};
use super::keyed::PerKey;
use super::results::{Collect, InOrder, Indexed, OutputForm, Plain, TryCollect, output_vec};
use super::schedule::scheduling_methods;
use super::window::Window;

/// The engine under a collecting map before any per-key limit: items as a stream, the
/// plain window, outputs in input order.
type Collecting<I, W, T> = Core<Iter<I>, W, InOrder<T>, Window>;

/// The start of every collecting map, with an output vector sized from the input's lower
/// bound (capped).
#[track_caller]
fn collecting<I: Iterator, W: Future<Output = T>, T, O>(
    items: I,
    limit: usize,
) -> (Collecting<I, W, T>, Vec<O>) {
    let out = output_vec(items.size_hint().0);
    let core = Core::new(
        stream::iter(items),
        limit,
        true,
        InOrder::new(),
        Window::default(),
    );
    (core, out)
}

pin_project! {
    /// Future for [`map_async`](crate::map_async).
    ///
    /// `A` is the admission: [`Window`] by default, [`PerKey`] after
    /// [`per_key`](MapAsync::per_key). `M` is the output form: [`Plain`] by default,
    /// [`Indexed`] after [`indexed`](MapAsync::indexed).
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    pub struct MapAsync<I, F, Fut, A = Window, M = Plain>
    where
        Fut: IntoFuture,
        M: OutputForm,
    {
        #[pin]
        core: Core<Iter<I>, Fut::IntoFuture, InOrder<Fut::Output>, A>,
        f: F,
        out: Vec<M::Output<Fut::Output>>,
    }
}

impl<I, F, Fut> MapAsync<I, F, Fut>
where
    I: Iterator,
    F: FnMut(I::Item) -> Fut,
    Fut: IntoFuture,
{
    #[track_caller]
    pub(crate) fn new(items: I, limit: usize, f: F) -> Self {
        let (core, out) = collecting(items, limit);
        Self { core, f, out }
    }
}

impl<I, F, Fut, M> MapAsync<I, F, Fut, Window, M>
where
    I: Iterator,
    F: FnMut(I::Item) -> Fut,
    Fut: IntoFuture,
    M: OutputForm,
{
    /// Adds a per-key limit: at most `limit` items of one key (a URL's host, a tenant, a
    /// shard, as named by `key_fn`) run at once, within the map's global limit, without
    /// either limit blocking the other.
    ///
    /// An item starts only when its key and the global limit both have room. Items whose
    /// key is full wait in a per-key queue **without holding a global slot**, and items
    /// of other keys go ahead, so host-sorted input still fills every global slot. Keys
    /// with waiting items take turns, so none starves; a key that runs fewer than `limit`
    /// items gets a turn for its next one at once. Within a key, items start in input
    /// order. Outputs still come in input order.
    ///
    /// Input is pulled ahead of the running work, up to the [window](MapAsync::window),
    /// to find items of other keys. With a per-key limit the default window is
    /// 64 × the global limit: with input sorted by key in runs of `r` items, filling
    /// every global slot needs a window of about `(global / per_key) × r`; interleaved
    /// input needs very little. Memory stays bounded by the window whatever the order.
    ///
    /// The global limit is `map_async`'s argument and the per-key limit sits beside its
    /// key function, so the two cannot be swapped by accident.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// async fn fetch(url: String) -> Result<String, std::io::Error> {
    ///     tollgate::sleep(Duration::from_millis(1)).await; // the network, simulated
    ///     Ok(format!("<html>{url}</html>"))
    /// }
    ///
    /// # futures_lite::future::block_on(async {
    /// // Sorted by host: the naive crawler would leave most global slots idle here.
    /// let urls: Vec<String> = ["a.example", "b.example", "c.example"]
    ///     .iter()
    ///     .flat_map(|host| (0..10).map(move |i| format!("https://{host}/{i}")))
    ///     .collect();
    /// let host = |url: &String| url.split('/').nth(2).unwrap_or_default().to_owned();
    /// // 6 requests at once, at most 2 per host.
    /// let pages = tollgate::map_async(urls, 6, fetch).per_key(host, 2).await;
    /// assert_eq!(pages.len(), 30);
    /// assert!(pages.iter().all(Result::is_ok));
    /// # });
    /// ```
    ///
    /// # With a `KeyedBulkhead`
    ///
    /// The per-key limit caps this map alone. When several maps (or other code) hit the
    /// same hosts and the cap must hold across all of them, also run each request
    /// through a shared [`KeyedBulkhead`](crate::KeyedBulkhead) inside `f`. Its options
    /// then mean what they say: an `acquire_timeout` or `max_waiting` turns "the host is
    /// busy with the others' work" into a [`BulkheadError`](crate::BulkheadError) item
    /// instead of a long wait. Within one map the bulkhead never makes an item wait while
    /// it holds a global slot as long as the per-key limit is no larger than the
    /// bulkhead's limit.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{BulkheadError, KeyedBulkhead, map_async, sleep};
    ///
    /// async fn crawl(per_host: &KeyedBulkhead<String>, urls: Vec<String>) -> Vec<Result<(), BulkheadError>> {
    ///     let host = |url: &String| url.split('/').nth(2).unwrap_or_default().to_owned();
    ///     map_async(urls, 8, |url| async move {
    ///         let host = url.split('/').nth(2).unwrap_or_default().to_owned();
    ///         per_host.run(&host, sleep(Duration::from_millis(1))).await
    ///     })
    ///     .per_key(host, 2)
    ///     .await
    /// }
    ///
    /// # futures_lite::future::block_on(async {
    /// let per_host = KeyedBulkhead::new(2);
    /// let urls = |n| (0..n).map(|i| format!("https://example.com/{i}")).collect();
    /// // Two crawls at once: together they still send at most 2 requests to the host.
    /// let (a, b) = futures_lite::future::zip(crawl(&per_host, urls(10)), crawl(&per_host, urls(10))).await;
    /// assert!(a.iter().chain(&b).all(Result::is_ok));
    /// # });
    /// ```
    ///
    /// # Panics
    ///
    /// If `limit` is 0. Polling panics if `key_fn` does (after dropping the work in
    /// flight and the items waiting for their key).
    #[track_caller]
    pub fn per_key<K, KF>(
        self,
        key_fn: KF,
        limit: usize,
    ) -> MapAsync<I, F, Fut, PerKey<I::Item, K, KF>, M>
    where
        K: Hash + Eq + Clone,
        KF: FnMut(&I::Item) -> K,
    {
        MapAsync {
            core: self
                .core
                .with_admission(true, |_| PerKey::new(key_fn, limit)),
            f: self.f,
            out: self.out,
        }
    }
}

impl<I: Iterator, F, Fut: IntoFuture, A, M: OutputForm> MapAsync<I, F, Fut, A, M> {
    fn engine_mut(&mut self) -> &mut Engine<Fut::IntoFuture, A> {
        &mut self.core.engine
    }

    fn admission_mut(&mut self) -> &mut A {
        &mut self.core.engine.admission
    }

    fn replace_admission<B>(self, admission: impl FnOnce(A) -> B) -> MapAsync<I, F, Fut, B, M>
    where
        B: DefaultWindow,
    {
        MapAsync {
            core: self.core.with_admission(true, admission),
            f: self.f,
            out: self.out,
        }
    }
}

scheduling_methods! {
    MapAsync<I, F, Fut>
    where [I: Iterator, F: FnMut(I::Item) -> Fut, Fut: IntoFuture,]
    item = I::Item,
    retry = <Value, Error> Error where [Fut: IntoFuture<Output = Result<Value, Error>>,],
    start = "tollgate::map_async(0..8u32, 4, |n| async move { Ok::<u32, ()>(n) })",
    finish = ".await",
}

impl<I, F, Fut: IntoFuture, A> MapAsync<I, F, Fut, A> {
    /// Pairs each output with its item's input position (0 for the first item): the map
    /// resolves to `Vec<(usize, O)>`, still in input order.
    ///
    /// The position is the map's own count of the items it pulled, the numbering of
    /// [`MapControl::not_started`](crate::MapControl::not_started) and
    /// [`Progress::pulled`](crate::Progress::pulled): it is exact whatever order items
    /// start and finish in (per-key limits, rates, retries: a retried item keeps its
    /// position). After a [drain](crate::MapControl::drain), the positions of the outputs,
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
    pub fn indexed(self) -> MapAsync<I, F, Fut, A, Indexed> {
        MapAsync {
            core: self.core.with_results(|order| order),
            f: self.f,
            out: Vec::with_capacity(self.out.capacity()),
        }
    }
}

impl<I, F, Fut: IntoFuture, A, M: OutputForm> MapAsync<I, F, Fut, A, M> {
    /// Sets the window: at most `window` items are pulled and not yet collected in order
    /// (waiting for their key, in flight, or finished and waiting for a slower earlier
    /// item). The default is 4 × `limit` (64 × `limit` with a per-key limit);
    /// `usize::MAX` never holds a slot back behind a slow item.
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
        self.core.engine.set_window(window);
        self
    }
}

impl<I, F, Fut, A, M> Future for MapAsync<I, F, Fut, A, M>
where
    I: Iterator,
    F: FnMut(I::Item) -> Fut,
    Fut: IntoFuture,
    A: Admission<I::Item, Fut::Output>,
    M: OutputForm,
{
    type Output = Vec<M::Output<Fut::Output>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let core = this.core.project();
        core.engine.check("MapAsync");
        let mut results = Collect::<_, M> {
            order: core.results,
            out: this.out,
        };
        let _ = std::task::ready!(
            core.engine
                .poll_drive(core.source, this.f, &mut results, cx)
        );
        core.engine.finish();
        Poll::Ready(std::mem::take(this.out))
    }
}

impl<I, F, Fut: IntoFuture, A: DebugFields, M: OutputForm> fmt::Debug
    for MapAsync<I, F, Fut, A, M>
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.core.engine.debug("MapAsync", f)
    }
}

pin_project! {
    /// Future for [`try_map_async`](crate::try_map_async).
    ///
    /// `A` is the admission: [`Window`] by default, [`PerKey`] after
    /// [`per_key`](TryMapAsync::per_key). `M` is the output form: [`Plain`] by default,
    /// [`Indexed`] after [`indexed`](TryMapAsync::indexed).
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    pub struct TryMapAsync<I, F, Fut, T, E, A = Window, M = Plain>
    where
        Fut: IntoFuture,
        M: OutputForm,
    {
        #[pin]
        core: Core<Iter<I>, Fut::IntoFuture, InOrder<Fut::Output>, A>,
        f: F,
        out: Vec<M::Output<T>>,
        error: Option<E>,
    }
}

/// [`TryMapAsync`] with a per-key limit (a private shorthand: the type is the public one).
type TryMapAsyncPerKey<I, F, Fut, T, E, K, KF, M> =
    TryMapAsync<I, F, Fut, T, E, PerKey<<I as Iterator>::Item, K, KF>, M>;

impl<I, F, Fut, T, E> TryMapAsync<I, F, Fut, T, E>
where
    I: Iterator,
    F: FnMut(I::Item) -> Fut,
    Fut: IntoFuture<Output = Result<T, E>>,
{
    #[track_caller]
    pub(crate) fn new(items: I, limit: usize, f: F) -> Self {
        let (core, out) = collecting(items, limit);
        Self {
            core,
            f,
            out,
            error: None,
        }
    }
}

impl<I, F, Fut, T, E, M> TryMapAsync<I, F, Fut, T, E, Window, M>
where
    I: Iterator,
    F: FnMut(I::Item) -> Fut,
    Fut: IntoFuture<Output = Result<T, E>>,
    M: OutputForm,
{
    /// Adds a per-key limit, as [`MapAsync::per_key`] does: at most `limit` items of one
    /// key run at once, within the global limit, and an item whose key is full waits
    /// without holding a global slot. The first error still stops everything.
    ///
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// let jobs = [("a", "1"), ("a", "2"), ("b", "3")];
    /// let parsed = tollgate::try_map_async(jobs, 4, |(_, n)| async move { n.parse::<u32>() })
    ///     .per_key(|(host, _)| *host, 1)
    ///     .await;
    /// assert_eq!(parsed, Ok(vec![1, 2, 3]));
    /// # });
    /// ```
    ///
    /// # Panics
    ///
    /// If `limit` is 0. Polling panics if `key_fn` does (after dropping the work in
    /// flight).
    #[track_caller]
    pub fn per_key<K, KF>(
        self,
        key_fn: KF,
        limit: usize,
    ) -> TryMapAsyncPerKey<I, F, Fut, T, E, K, KF, M>
    where
        K: Hash + Eq + Clone,
        KF: FnMut(&I::Item) -> K,
    {
        TryMapAsync {
            core: self
                .core
                .with_admission(true, |_| PerKey::new(key_fn, limit)),
            f: self.f,
            out: self.out,
            error: self.error,
        }
    }
}

impl<I: Iterator, F, Fut: IntoFuture, T, E, A, M: OutputForm> TryMapAsync<I, F, Fut, T, E, A, M> {
    fn engine_mut(&mut self) -> &mut Engine<Fut::IntoFuture, A> {
        &mut self.core.engine
    }

    fn admission_mut(&mut self) -> &mut A {
        &mut self.core.engine.admission
    }

    fn replace_admission<B>(
        self,
        admission: impl FnOnce(A) -> B,
    ) -> TryMapAsync<I, F, Fut, T, E, B, M>
    where
        B: DefaultWindow,
    {
        TryMapAsync {
            core: self.core.with_admission(true, admission),
            f: self.f,
            out: self.out,
            error: self.error,
        }
    }
}

scheduling_methods! {
    TryMapAsync<I, F, Fut, T, E>
    where [I: Iterator, F: FnMut(I::Item) -> Fut, Fut: IntoFuture<Output = Result<T, E>>,]
    item = I::Item,
    retry = <> E where [],
    start = "tollgate::try_map_async(0..8u32, 4, |n| async move { Ok::<u32, ()>(n) })",
    finish = ".await",
}

impl<I, F, Fut: IntoFuture, T, E, A> TryMapAsync<I, F, Fut, T, E, A> {
    /// Pairs each value with its item's input position (0 for the first item): the map
    /// resolves to `Result<Vec<(usize, T)>, E>`, the values still in input order.
    ///
    /// The position is the map's own count of the items it pulled, as for
    /// [`MapAsync::indexed`]: exact whatever order items start and finish in, and kept
    /// through retries. Call it anywhere before the map is first polled; a map that does
    /// not call it pays nothing for positions.
    ///
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// let parsed = tollgate::try_map_async(["7", "8", "9"], 2, |s| async move { s.parse::<u32>() })
    ///     .indexed()
    ///     .await;
    /// assert_eq!(parsed, Ok(vec![(0, 7), (1, 8), (2, 9)]));
    /// # });
    /// ```
    ///
    /// # Panics
    ///
    /// If the map was polled already.
    #[track_caller]
    pub fn indexed(self) -> TryMapAsync<I, F, Fut, T, E, A, Indexed> {
        TryMapAsync {
            core: self.core.with_results(|order| order),
            f: self.f,
            out: Vec::with_capacity(self.out.capacity()),
            error: self.error,
        }
    }
}

impl<I, F, Fut: IntoFuture, T, E, A, M: OutputForm> TryMapAsync<I, F, Fut, T, E, A, M> {
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
        self.core.engine.set_window(window);
        self
    }
}

impl<I, F, Fut, T, E, A, M> Future for TryMapAsync<I, F, Fut, T, E, A, M>
where
    I: Iterator,
    F: FnMut(I::Item) -> Fut,
    Fut: IntoFuture<Output = Result<T, E>>,
    A: Admission<I::Item, Fut::Output>,
    M: OutputForm,
{
    type Output = Result<Vec<M::Output<T>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let core = this.core.project();
        core.engine.check("TryMapAsync");
        let mut results = TryCollect::<_, _, M> {
            order: core.results,
            out: this.out,
            error: this.error,
        };
        let flow = std::task::ready!(
            core.engine
                .poll_drive(core.source, this.f, &mut results, cx)
        );
        core.engine.finish();
        match flow {
            ControlFlow::Continue(()) => Poll::Ready(Ok(std::mem::take(this.out))),
            ControlFlow::Break(()) => {
                *this.out = Vec::new();
                let error = this.error.take();
                Poll::Ready(Err(error.expect("an error stopped the map")))
            }
        }
    }
}

impl<I, F, Fut: IntoFuture, T, E, A: DebugFields, M: OutputForm> fmt::Debug
    for TryMapAsync<I, F, Fut, T, E, A, M>
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.core.engine.debug("TryMapAsync", f)
    }
}

pin_project! {
    /// Future for [`gather_limit`](crate::gather_limit).
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    pub struct GatherLimit<I>
    where
        I: Iterator,
        I::Item: IntoFuture,
    {
        #[pin]
        core: Core<
            Iter<I>,
            <I::Item as IntoFuture>::IntoFuture,
            InOrder<<I::Item as IntoFuture>::Output>,
            Window,
        >,
        out: Vec<<I::Item as IntoFuture>::Output>,
    }
}

impl<I> GatherLimit<I>
where
    I: Iterator,
    I::Item: IntoFuture,
{
    #[track_caller]
    pub(crate) fn new(futures: I, limit: usize) -> Self {
        let (core, out) = collecting(futures, limit);
        Self { core, out }
    }

    /// Attaches a [`MapControl`](crate::MapControl), as [`MapAsync::control`] does:
    /// progress, drain and a live limit.
    ///
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// let control = tollgate::MapControl::new();
    /// let jobs = (1..=3).map(|n| async move { n });
    /// assert_eq!(tollgate::gather_limit(jobs, 2).control(&control).await, [1, 2, 3]);
    /// assert_eq!(control.progress().finished(), 3);
    /// # });
    /// ```
    ///
    /// # Panics
    ///
    /// If `control` is attached to another map that has not ended.
    #[track_caller]
    pub fn control(mut self, control: &MapControl) -> Self {
        self.core.engine.attach(control.shared());
        self
    }

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
        self.core.engine.set_window(window);
        self
    }
}

impl<I> Future for GatherLimit<I>
where
    I: Iterator,
    I::Item: IntoFuture,
{
    type Output = Vec<<I::Item as IntoFuture>::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let core = this.core.project();
        core.engine.check("GatherLimit");
        let mut results = Collect::<_, Plain> {
            order: core.results,
            out: this.out,
        };
        // The item is already the work.
        let _ = std::task::ready!(core.engine.poll_drive(
            core.source,
            &mut |work: I::Item| work,
            &mut results,
            cx
        ));
        core.engine.finish();
        Poll::Ready(std::mem::take(this.out))
    }
}

impl<I> fmt::Debug for GatherLimit<I>
where
    I: Iterator,
    I::Item: IntoFuture,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.core.engine.debug("GatherLimit", f)
    }
}
