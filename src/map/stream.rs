//! The bounded map streams: [`MapBounded`] (input order) and [`MapUnordered`]
//! (completion order), over any source stream.

use std::fmt;
use std::future::IntoFuture;
use std::hash::Hash;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_lite::Stream;
use pin_project_lite::pin_project;

use super::engine::{Admission, Core, DebugFields, DefaultWindow, Engine};
use super::keyed::PerKey;
use super::results::{InCompletionOrder, InOrder, Indexed, OutputForm, Plain};
use super::schedule::scheduling_methods;
use super::window::Window;

pin_project! {
    /// Stream for [`BoundedStreamExt::map_bounded`](crate::BoundedStreamExt::map_bounded):
    /// outputs in input order.
    ///
    /// `A` is the admission: [`Window`] by default, [`PerKey`] after
    /// [`per_key`](MapBounded::per_key). `M` is the output form: [`Plain`] by default,
    /// [`Indexed`] after [`indexed`](MapBounded::indexed).
    #[must_use = "streams do nothing unless polled"]
    pub struct MapBounded<S, F, Fut, A = Window, M = Plain>
    where
        Fut: IntoFuture,
        M: OutputForm,
    {
        #[pin]
        core: Core<S, Fut::IntoFuture, InOrder<Fut::Output, M>, A>,
        f: F,
    }
}

impl<S, F, Fut> MapBounded<S, F, Fut>
where
    S: Stream,
    F: FnMut(S::Item) -> Fut,
    Fut: IntoFuture,
{
    #[track_caller]
    pub(crate) fn new(source: S, limit: usize, f: F) -> Self {
        Self {
            core: Core::new(source, limit, true, InOrder::new(), Window::default()),
            f,
        }
    }
}

impl<S, F, Fut, M> MapBounded<S, F, Fut, Window, M>
where
    S: Stream,
    F: FnMut(S::Item) -> Fut,
    Fut: IntoFuture,
    M: OutputForm,
{
    /// Adds a per-key limit: at most `limit` items of one key (as named by `key_fn`) run
    /// at once, within the stream's global limit. Outputs still come in input order.
    ///
    /// Items whose key is full wait without holding a global slot, and keys with waiting
    /// items take turns; see [`MapAsync::per_key`](crate::futures::MapAsync::per_key) for
    /// the details. The default window becomes 64 × the global limit.
    ///
    /// # Examples
    ///
    /// ```
    /// use futures_lite::{StreamExt, stream};
    /// use tollgate::BoundedStreamExt;
    /// # futures_lite::future::block_on(async {
    /// let urls = stream::iter([("a", 1), ("a", 2), ("b", 3), ("a", 4)]);
    /// let pages: Vec<u32> = urls
    ///     .map_bounded(3, |(_, page)| async move { page * 10 })
    ///     .per_key(|(host, _)| *host, 1)
    ///     .collect()
    ///     .await;
    /// assert_eq!(pages, [10, 20, 30, 40]);
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
    ) -> MapBounded<S, F, Fut, PerKey<S::Item, K, KF>, M>
    where
        K: Hash + Eq + Clone,
        KF: FnMut(&S::Item) -> K,
    {
        MapBounded {
            core: self
                .core
                .with_admission(true, |_| PerKey::new(key_fn, limit)),
            f: self.f,
        }
    }
}

impl<S: Stream, F, Fut: IntoFuture, A, M: OutputForm> MapBounded<S, F, Fut, A, M> {
    fn engine_mut(&mut self) -> &mut Engine<Fut::IntoFuture, A> {
        &mut self.core.engine
    }

    fn admission_mut(&mut self) -> &mut A {
        &mut self.core.engine.admission
    }

    fn replace_admission<B>(self, admission: impl FnOnce(A) -> B) -> MapBounded<S, F, Fut, B, M>
    where
        B: DefaultWindow,
    {
        MapBounded {
            core: self.core.with_admission(true, admission),
            f: self.f,
        }
    }
}

scheduling_methods! {
    MapBounded<S, F, Fut>
    where [S: Stream, F: FnMut(S::Item) -> Fut, Fut: IntoFuture,]
    item = S::Item,
    retry = <Value, Error> Error where [Fut: IntoFuture<Output = Result<Value, Error>>,],
    start = "tollgate::BoundedStreamExt::map_bounded(futures_lite::stream::iter(0..8u32), 4, |n| async move { Ok::<u32, ()>(n) })",
    finish = ".collect::<Vec<_>>().await",
}

impl<S, F, Fut: IntoFuture, A> MapBounded<S, F, Fut, A> {
    /// Pairs each output with its item's input position (0 for the first item): the
    /// stream yields `(usize, O)`, still in input order.
    ///
    /// The position is the map's own count of the items it pulled, as for
    /// [`MapAsync::indexed`](crate::futures::MapAsync::indexed): exact whatever order
    /// items start and finish in, kept through retries, and after a drain the positions
    /// yielded, [`not_started`](crate::MapControl::not_started) and every position from
    /// [`pulled`](crate::Progress::pulled) on partition the input. Call it anywhere
    /// before the stream is first polled; a stream that does not call it pays nothing
    /// for positions.
    ///
    /// # Examples
    ///
    /// ```
    /// use futures_lite::{StreamExt, stream};
    /// use tollgate::BoundedStreamExt;
    /// # futures_lite::future::block_on(async {
    /// let pages: Vec<(usize, String)> = stream::iter(["a", "b", "c"])
    ///     .map_bounded(2, |path| async move { format!("<html>{path}</html>") })
    ///     .indexed()
    ///     .collect()
    ///     .await;
    /// assert_eq!(pages[2], (2, "<html>c</html>".to_owned()));
    /// # });
    /// ```
    ///
    /// # Panics
    ///
    /// If the stream was polled already.
    #[track_caller]
    pub fn indexed(self) -> MapBounded<S, F, Fut, A, Indexed> {
        MapBounded {
            core: self.core.with_results(InOrder::reform),
            f: self.f,
        }
    }
}

impl<S, F, Fut: IntoFuture, A, M: OutputForm> MapBounded<S, F, Fut, A, M> {
    /// Sets the window: at most `window` items are pulled from the input and not yet
    /// yielded (waiting for their key, in flight, or finished and waiting in the reorder
    /// buffer). The default is 4 × `limit` (64 × `limit` with a per-key limit).
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
        self.core.engine.set_window(window);
        self
    }
}

impl<S, F, Fut, A, M> Stream for MapBounded<S, F, Fut, A, M>
where
    S: Stream,
    F: FnMut(S::Item) -> Fut,
    Fut: IntoFuture,
    A: Admission<S::Item, Fut::Output>,
    M: OutputForm,
{
    type Item = M::Output<Fut::Output>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.project();
        this.core.poll_next_with(this.f, cx, "MapBounded")
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.core.size_hint()
    }
}

impl<S, F, Fut: IntoFuture, A: DebugFields, M: OutputForm> fmt::Debug
    for MapBounded<S, F, Fut, A, M>
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.core.engine.debug("MapBounded", f)
    }
}

pin_project! {
    /// Stream for [`BoundedStreamExt::map_unordered`](crate::BoundedStreamExt::map_unordered)
    /// and [`amap_iter`](crate::amap_iter): outputs in completion order.
    ///
    /// `A` is the admission: [`Window`] by default, [`PerKey`] after
    /// [`per_key`](MapUnordered::per_key). `M` is the output form: [`Plain`] by default,
    /// [`Indexed`] after [`indexed`](MapUnordered::indexed).
    #[must_use = "streams do nothing unless polled"]
    pub struct MapUnordered<S, F, Fut, A = Window, M = Plain>
    where
        Fut: IntoFuture,
        M: OutputForm,
    {
        #[pin]
        core: Core<S, Fut::IntoFuture, InCompletionOrder<Fut::Output, M>, A>,
        f: F,
    }
}

impl<S, F, Fut> MapUnordered<S, F, Fut>
where
    S: Stream,
    F: FnMut(S::Item) -> Fut,
    Fut: IntoFuture,
{
    #[track_caller]
    pub(crate) fn new(source: S, limit: usize, f: F) -> Self {
        Self {
            core: Core::new(
                source,
                limit,
                false,
                InCompletionOrder::new(),
                Window::default(),
            ),
            f,
        }
    }
}

impl<S, F, Fut, M> MapUnordered<S, F, Fut, Window, M>
where
    S: Stream,
    F: FnMut(S::Item) -> Fut,
    Fut: IntoFuture,
    M: OutputForm,
{
    /// Adds a per-key limit: at most `limit` items of one key (as named by `key_fn`) run
    /// at once, within the stream's global limit.
    ///
    /// Items whose key is full wait without holding a global slot, and keys with waiting
    /// items take turns; see [`MapAsync::per_key`](crate::futures::MapAsync::per_key) for
    /// the details. The default window becomes 64 × the global limit.
    ///
    /// # Examples
    ///
    /// ```
    /// use futures_lite::StreamExt;
    /// # futures_lite::future::block_on(async {
    /// // 20 pages over 4 hosts: 8 requests at once, at most 2 per host.
    /// let mut pages: Vec<u32> = tollgate::amap_iter(0..20, 8, |n| async move { n })
    ///     .per_key(|n| n % 4, 2)
    ///     .collect()
    ///     .await;
    /// pages.sort();
    /// assert_eq!(pages, (0..20).collect::<Vec<_>>());
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
    ) -> MapUnordered<S, F, Fut, PerKey<S::Item, K, KF>, M>
    where
        K: Hash + Eq + Clone,
        KF: FnMut(&S::Item) -> K,
    {
        MapUnordered {
            core: self
                .core
                .with_admission(false, |_| PerKey::new(key_fn, limit)),
            f: self.f,
        }
    }
}

impl<S: Stream, F, Fut: IntoFuture, A, M: OutputForm> MapUnordered<S, F, Fut, A, M> {
    fn engine_mut(&mut self) -> &mut Engine<Fut::IntoFuture, A> {
        &mut self.core.engine
    }

    fn admission_mut(&mut self) -> &mut A {
        &mut self.core.engine.admission
    }

    fn replace_admission<B>(self, admission: impl FnOnce(A) -> B) -> MapUnordered<S, F, Fut, B, M>
    where
        B: DefaultWindow,
    {
        MapUnordered {
            core: self.core.with_admission(false, admission),
            f: self.f,
        }
    }
}

scheduling_methods! {
    MapUnordered<S, F, Fut>
    where [S: Stream, F: FnMut(S::Item) -> Fut, Fut: IntoFuture,]
    item = S::Item,
    retry = <Value, Error> Error where [Fut: IntoFuture<Output = Result<Value, Error>>,],
    start = "tollgate::BoundedStreamExt::map_unordered(futures_lite::stream::iter(0..8u32), 4, |n| async move { Ok::<u32, ()>(n) })",
    finish = ".collect::<Vec<_>>().await",
}

impl<S, F, Fut: IntoFuture, A> MapUnordered<S, F, Fut, A> {
    /// Pairs each output with its item's input position (0 for the first item): the
    /// stream yields `(usize, O)` in completion order, each output with the position of
    /// its own item.
    ///
    /// The position is the map's own count of the items it pulled, as for
    /// [`MapAsync::indexed`](crate::futures::MapAsync::indexed): exact whatever order
    /// items start and finish in, kept through retries, and after a drain the positions
    /// yielded, [`not_started`](crate::MapControl::not_started) and every position from
    /// [`pulled`](crate::Progress::pulled) on partition the input. Call it anywhere
    /// before the stream is first polled; a stream that does not call it pays nothing
    /// for positions.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use futures_lite::StreamExt;
    /// use tollgate::sleep;
    /// # futures_lite::future::block_on(async {
    /// let mut first = tollgate::amap_iter([5_000, 1], 2, |ms| async move {
    ///     sleep(Duration::from_millis(ms)).await;
    ///     ms
    /// })
    /// .indexed();
    /// assert_eq!(first.next().await, Some((1, 1))); // the quick one, second in the input
    /// # });
    /// ```
    ///
    /// # Panics
    ///
    /// If the stream was polled already.
    #[track_caller]
    pub fn indexed(self) -> MapUnordered<S, F, Fut, A, Indexed> {
        MapUnordered {
            core: self.core.with_results(InCompletionOrder::reform),
            f: self.f,
        }
    }
}

impl<S, F, Fut: IntoFuture, A, M: OutputForm> MapUnordered<S, F, Fut, A, M> {
    /// Sets the window: at most `window` items are pulled from the input and not yet
    /// yielded (waiting for their key, in flight, or finished and waiting to be yielded).
    /// The default is `limit` (64 × `limit` with a per-key limit): while you hold on to
    /// an output, no new item starts in its place.
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
        self.core.engine.set_window(window);
        self
    }
}

impl<S, F, Fut, A, M> Stream for MapUnordered<S, F, Fut, A, M>
where
    S: Stream,
    F: FnMut(S::Item) -> Fut,
    Fut: IntoFuture,
    A: Admission<S::Item, Fut::Output>,
    M: OutputForm,
{
    type Item = M::Output<Fut::Output>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.project();
        this.core.poll_next_with(this.f, cx, "MapUnordered")
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.core.size_hint()
    }
}

impl<S, F, Fut: IntoFuture, A: DebugFields, M: OutputForm> fmt::Debug
    for MapUnordered<S, F, Fut, A, M>
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.core.engine.debug("MapUnordered", f)
    }
}
