//! Bounded mapping: run a function over many items with at most `limit` futures in flight.
//!
//! Every bounded map (the collecting futures [`MapAsync`], [`TryMapAsync`] and
//! [`GatherLimit`], the streams [`MapBounded`] and [`MapUnordered`]) is one engine
//! (`engine.rs`) over a pool (`pool.rs`) of reusable slots:
//! - the engine pulls an item only when its admission allows (the plain [`Window`]: a
//!   slot is free and the window allows; or [`PerKey`]: the item's key and the global
//!   limit both have room), calls `f`, and polls the new future at once (a ready future
//!   never touches the pool's wakers and never wakes the owner);
//! - it polls only the futures that were woken, and refills every freed slot in the same
//!   poll, so `limit` futures stay in flight while input remains;
//! - completed outputs wait in a small buffer (`results.rs`): in input order (a reorder
//!   buffer) or completion order. The window bounds how many items may be pulled and not
//!   yet handed out, which bounds that buffer;
//! - after a few hundred units of work in one poll (its yield allowance) it yields to the
//!   executor, and a stream yields once after a long run of ready items, so a stream of
//!   ready futures cannot starve its task's neighbours.
//!
//! The collecting futures move each output straight into the result vector when it is
//! next in line.

mod alongside;
mod bounded;
mod boxed;
mod control;
mod delivery;
mod engine;
pub(crate) mod keyed;
mod pool;
mod queued;
mod results;
mod schedule;
mod scheduling;
mod steering;
mod window;

use std::future::IntoFuture;

use futures_lite::stream::{self as lite_stream, Iter, Stream};

pub use self::alongside::{Alongside, MapStream};
pub use self::bounded::{BoundedMap, GatherLimit, MapAsync, MapBounded, MapUnordered, TryMapAsync};
pub use self::boxed::BoxedMap;
pub use self::control::{ControlError, HeldBy, KeyProgress, MapControl, PausedBy, Progress};
pub use self::delivery::{
    Collected, CompletionOrder, Delivery, Gathered, InputOrder, TryCollected,
};
pub use self::keyed::{
    Answer, Classified, FailWhenOpen, Fixed, LaterReason, NoRetry, NoSharedLimits, PerKey,
    SharedLimits, SlotPolicy, Unkeyed, WaitWhenOpen, WithSharedLimits,
};
pub use self::results::{Indexed, OutputForm, Plain};
pub use self::window::Window;

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
    /// `f` may return any [`IntoFuture`]; add a per-key cap with
    /// [`MapBounded::per_key`].
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
    /// are dropped and the panic continues in the caller; polling the stream again after
    /// that panics too (it never hangs or yields more).
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
        Fut: IntoFuture,
    {
        BoundedMap::new(self, limit, f)
    }

    /// Maps each item to a future and runs at most `limit` of them at once, yielding
    /// outputs as they complete.
    ///
    /// An item is pulled from `self` only when a slot is free, and every freed slot is
    /// refilled in the same poll. By default at most `limit` items are pulled and not yet
    /// yielded; [`MapUnordered::window`] allows more finished outputs to wait.
    ///
    /// `f` may return any [`IntoFuture`]; add a per-key cap with
    /// [`MapUnordered::per_key`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use futures_lite::{StreamExt, stream};
    /// use tollgate::{BoundedStreamExt, sleep};
    /// # futures_lite::future::block_on(async {
    /// let mut first = stream::iter([5_000, 1])
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
    /// are dropped and the panic continues in the caller; polling the stream again after
    /// that panics too (it never hangs or yields more).
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
        Fut: IntoFuture,
    {
        BoundedMap::new(self, limit, f)
    }

    /// Awaits `work` (what the consumer does with an output: store it, send it on) while
    /// the map's attempts in flight keep being polled: the loop that reads a map keeps its
    /// shape, its `?`, its `break` and its `&mut` state, and no request the map runs
    /// waits for the consumer.
    ///
    /// A stream works only while it is polled: a loop body that awaits slow work between
    /// two `next()` calls leaves every attempt in flight unpolled (a server times such
    /// requests out; futures holding a permit that the work waits for deadlock it).
    /// Awaited through `alongside`, the work runs on the same task, and whenever it waits,
    /// the map polls its woken attempts, keeps their outputs for the next `next()` and
    /// starts new items in the freed slots, as far as its
    /// [window](MapUnordered::window) allows: finished outputs count against the window,
    /// so with the default window of a map in completion order (the limit) nothing new
    /// starts once every slot holds a finished output, and a larger window lets the map
    /// work ahead of a slow consumer by that much, never more. Nothing is spawned; it
    /// works on every executor. (At the work's first wait the map is only registered for
    /// its wake-ups, and the task asks to be polled again at once if an attempt already
    /// woke: work that waits once, a channel send after a wake-up, is done by then, and the
    /// next `next()` polls the map's woken attempts together. From the work's second poll
    /// on, every poll drives the map.)
    ///
    /// Order, keys, rates, retries and the control's figures are the map's, as with
    /// `next()` alone. An adaptive map times each attempt from its start to its end,
    /// however slow the consumer: the consumer's work is never counted as the server's
    /// latency (with plain `next()`, an attempt that ends while its stream is not polled
    /// gives no latency sample).
    ///
    /// Callable on a map stream ([`map_bounded`](Self::map_bounded),
    /// [`map_unordered`](Self::map_unordered), [`amap_iter`], keyed or not, indexed or
    /// not), a [`BoxedMap`], or one pinned with [`std::pin::pin!`] (a map whose futures
    /// are not `Unpin`, an `async fn`'s for instance).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::pin::pin;
    /// use std::time::Duration;
    /// use futures_lite::StreamExt;
    /// use tollgate::{BoundedStreamExt, amap_iter, sleep};
    ///
    /// async fn fetch(n: u32) -> String {
    ///     sleep(Duration::from_millis(1)).await; // the network, simulated
    ///     format!("page {n}")
    /// }
    ///
    /// async fn store(page: String, stored: &mut Vec<String>) -> Result<(), std::io::Error> {
    ///     sleep(Duration::from_millis(2)).await; // a slow disk, simulated
    ///     stored.push(page);
    ///     Ok(())
    /// }
    ///
    /// # futures_lite::future::block_on(async {
    /// let mut stored = Vec::new();
    /// let mut pages = pin!(amap_iter(0..20, 4, fetch));
    /// while let Some(page) = pages.next().await {
    ///     // The 4 fetches in flight go on while the page is stored.
    ///     pages.alongside(store(page, &mut stored)).await?;
    /// }
    /// assert_eq!(stored.len(), 20);
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    ///
    /// # Panics
    ///
    /// If the map's futures, its function or its source panic while the map is driven,
    /// as `next()` would (the work is dropped with the future).
    ///
    /// # Cancel safety
    ///
    /// Dropping the returned future drops `work` and leaves the map as it was: outputs
    /// finished meanwhile wait for the next `next()`.
    fn alongside<W>(&mut self, work: W) -> Alongside<'_, Self, W::IntoFuture>
    where
        Self: MapStream + Unpin,
        W: IntoFuture,
    {
        Alongside::new(self, work.into_future())
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
/// `f` may return any [`IntoFuture`], a [`retry`](crate::retry) builder for instance. A
/// per-key cap (per host) goes beside its key function:
/// `map_async(urls, 12, fetch).per_key(host, 4)`; see [`MapAsync::per_key`].
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
/// the panic continues in the caller. Polling the future again after it completed, or
/// after it propagated a panic, panics (it never hangs or returns partial data).
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
    Fut: IntoFuture,
{
    BoundedMap::new(lite_stream::iter(items), limit, f)
}

/// Runs `f` over `items` with at most `limit` futures in flight and collects the `Ok`
/// values in input order, or returns the first error.
///
/// All-or-nothing: the first future to fail (in completion order) wins. Every other future
/// in flight is dropped (cancelled) at once, nothing more is pulled from `items`, and
/// its error is returned. The input may be endless (`1u32..`): the result vector grows as
/// values arrive and is never sized from the input's `size_hint`.
///
/// `f` may return any [`IntoFuture`]; add a per-key cap with [`TryMapAsync::per_key`].
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
/// the panic continues in the caller. Polling the future again after it completed, or
/// after it propagated a panic, panics (it never hangs or returns partial data).
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
    Fut: IntoFuture<Output = Result<T, E>>,
{
    BoundedMap::new(lite_stream::iter(items), limit, f)
}

/// Runs `items`' mapped futures with at most `limit` in flight and yields their outputs as
/// they complete.
///
/// Items are pulled lazily, only when a slot is free; by default at most `limit` items
/// are pulled and not yet yielded (see [`MapUnordered::window`]). Dropping the stream
/// cancels every future in flight and pulls nothing more. This is
/// [`BoundedStreamExt::map_unordered`] over the iterator.
///
/// `f` may return any [`IntoFuture`]; add a per-key cap with [`MapUnordered::per_key`]
/// (the keyed map's stream form over an iterator).
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
/// the panic continues in the caller; polling the stream again after that panics too.
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
    Fut: IntoFuture,
{
    BoundedMap::new(lite_stream::iter(items), limit, f)
}

/// Runs `futures` with at most `limit` in flight, collecting their outputs in input order.
///
/// The futures are already created, but none is polled before its turn: at most `limit`
/// are in flight at once. This is [`map_async`] without the function; the items may be
/// any [`IntoFuture`] (a list of [`retry`](crate::retry) builders, say).
///
/// `gather_limit` has no `per_key`: its items carry no key to count by. For a per-key
/// cap, keep the keys in the items and use [`map_async`] with
/// [`per_key`](MapAsync::per_key).
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
/// continues in the caller. Polling the future again after it completed, or after it
/// propagated a panic, panics.
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
    I::Item: IntoFuture,
{
    BoundedMap::new(lite_stream::iter(futures), limit, ())
}
