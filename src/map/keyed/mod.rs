//! Work-conserving keyed mapping: a global cap and a per-key cap that never block each
//! other.
//!
//! The naive crawler takes a global slot, then waits for its host's bulkhead while holding
//! it; with host-sorted input most global slots sit idle behind one host. Here an item is
//! started only when both its key and the global limit have room. Items whose key is full
//! wait in their key's queue (inside the [`KeyScheduler`]) holding no global slot, while
//! items of other keys go ahead. Input is pulled ahead of the running work, up to a
//! bounded look-ahead, to find those other keys.

mod scheduler;

use std::cell::Cell;
use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_lite::stream::{self, Iter, Stream};
use pin_project_lite::pin_project;

use self::scheduler::KeyScheduler;
use crate::map::Pool;

/// Look-ahead per unit of global limit, by default.
const LOOKAHEAD_PER_SLOT: usize = 64;
/// Units of work (a start or a child poll) one poll may do before yielding.
const BUDGET: usize = 512;

#[track_caller]
fn check_limits(global_limit: usize, per_key_limit: usize) {
    assert!(
        global_limit > 0,
        "tollgate: the global limit of map_keyed must be at least 1 (a limit of 0 would never run anything)"
    );
    assert!(
        per_key_limit > 0,
        "tollgate: the per-key limit of map_keyed must be at least 1 (a limit of 0 would never run anything)"
    );
}

pin_project! {
    /// A future that remembers its key and hands it back with its output, so the
    /// scheduler knows whose room to free (the pool's tag carries the input position).
    struct Keyed<K, Fut> {
        key: Option<K>,
        #[pin]
        fut: Fut,
    }
}

impl<K, Fut: Future> Future for Keyed<K, Fut> {
    type Output = (K, Fut::Output);

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let output = std::task::ready!(this.fut.poll(cx));
        let key = this.key.take().expect("Keyed polled after completion");
        Poll::Ready((key, output))
    }
}

/// The pool, the scheduler and the input bookkeeping, without the source and functions.
struct Engine<K, T, Fut> {
    pool: Pool<Keyed<K, Fut>>,
    scheduler: KeyScheduler<K, (usize, T)>,
    lookahead: usize,
    next_seq: usize,
    input_done: bool,
}

impl<K: Hash + Eq + Clone, T, Fut: Future> Engine<K, T, Fut> {
    fn new(global_limit: usize, per_key_limit: usize, expected: usize) -> Self {
        Self {
            pool: Pool::new(global_limit, expected),
            scheduler: KeyScheduler::new(per_key_limit),
            lookahead: global_limit.saturating_mul(LOOKAHEAD_PER_SLOT),
            next_seq: 0,
            input_done: false,
        }
    }

    fn is_done(&self) -> bool {
        self.input_done && self.pool.is_empty() && self.scheduler.waiting() == 0
    }

    /// Starts one admitted item; a future ready on its first poll finishes at once.
    fn start<F>(
        &mut self,
        key: K,
        seq: usize,
        item: T,
        f: &mut F,
        done: &mut impl FnMut(usize, Fut::Output),
    ) where
        F: FnMut(T) -> Fut,
    {
        let fut = Keyed {
            key: Some(key),
            fut: f(item),
        };
        if let Some((key, output)) = self.pool.start(fut, seq) {
            self.scheduler.finish(&key);
            done(seq, output);
        }
    }

    /// One round: poll the woken futures, then start items while a global slot is free.
    fn pass<S, KF, F>(
        &mut self,
        mut source: Pin<&mut S>,
        key_fn: &mut KF,
        f: &mut F,
        cx: &mut Context<'_>,
        budget: &mut usize,
        done: &mut impl FnMut(usize, Fut::Output),
    ) where
        S: Stream<Item = T>,
        KF: FnMut(&T) -> K,
        F: FnMut(T) -> Fut,
    {
        let scheduler = &mut self.scheduler;
        let polled = self.pool.poll_woken(|seq, (key, output)| {
            scheduler.finish(&key);
            done(seq, output);
            std::ops::ControlFlow::Continue(())
        });
        if let std::ops::ControlFlow::Continue(polled) = polled {
            *budget = budget.saturating_sub(polled);
        }
        loop {
            let mut progressed = false;
            // Fill the free global slots from the keys that have room, in turn.
            while *budget > 0 && !self.pool.is_full() {
                let Some((key, (seq, item))) = self.scheduler.next() else {
                    break;
                };
                *budget -= 1;
                progressed = true;
                self.start(key, seq, item, f, done);
            }
            // Pull one item ahead (up to the look-ahead), so keys with waiting items can
            // take turns; then try to start again.
            if *budget > 0 && !self.input_done && self.scheduler.waiting() < self.lookahead {
                match source.as_mut().poll_next(cx) {
                    Poll::Ready(Some(item)) => {
                        *budget -= 1;
                        progressed = true;
                        let seq = self.next_seq;
                        self.next_seq += 1;
                        self.scheduler.push(key_fn(&item), (seq, item));
                    }
                    Poll::Ready(None) => self.input_done = true,
                    Poll::Pending => {}
                }
            }
            if !progressed {
                break;
            }
        }
    }

    /// Runs rounds until everything is done, `done` asks to stop (it returns `true` when
    /// its caller has something to hand out), or nothing can move (the task is then
    /// registered for the wake-ups that matter).
    fn poll_drive<S, KF, F>(
        &mut self,
        mut source: Pin<&mut S>,
        key_fn: &mut KF,
        f: &mut F,
        cx: &mut Context<'_>,
        mut done: impl FnMut(usize, Fut::Output) -> bool,
    ) -> Drive
    where
        S: Stream<Item = T>,
        KF: FnMut(&T) -> K,
        F: FnMut(T) -> Fut,
    {
        let this = ClearOnUnwind::new(self);
        let mut budget = BUDGET;
        let stop = Cell::new(false);
        let mut accept = |seq, output| {
            if done(seq, output) {
                stop.set(true);
            }
        };
        loop {
            // Until `register`, wake-ups only mark their futures: one that wakes itself
            // during this pass costs no trip through the executor.
            this.engine.pool.enter();
            this.engine
                .pass(source.as_mut(), key_fn, f, cx, &mut budget, &mut accept);
            if this.engine.is_done() {
                return Drive::Done;
            }
            if stop.get() {
                return Drive::Yield;
            }
            if budget == 0 {
                // Cooperative: plenty done in this poll; let the executor run others.
                cx.waker().wake_by_ref();
                return Drive::Pending;
            }
            this.engine.pool.register(cx);
            if !this.engine.pool.has_woken() {
                return Drive::Pending;
            }
        }
    }
}

/// How [`Engine::poll_drive`] stopped.
enum Drive {
    /// Input exhausted, nothing waiting, nothing in flight.
    Done,
    /// An output is ready to hand out.
    Yield,
    /// Waiting for a wake-up.
    Pending,
}

/// Drops the futures in flight when a panic unwinds through a poll, so the panic reaches
/// the caller after the others are gone.
struct ClearOnUnwind<'a, K, T, Fut> {
    engine: &'a mut Engine<K, T, Fut>,
    /// Polled from a destructor during another panic: not ours to clean up after.
    already_panicking: bool,
}

impl<'a, K, T, Fut> ClearOnUnwind<'a, K, T, Fut> {
    fn new(engine: &'a mut Engine<K, T, Fut>) -> Self {
        Self {
            engine,
            already_panicking: std::thread::panicking(),
        }
    }
}

impl<K, T, Fut> Drop for ClearOnUnwind<'_, K, T, Fut> {
    fn drop(&mut self) {
        if std::thread::panicking() && !self.already_panicking {
            self.engine.pool.clear();
            self.engine.input_done = true;
        }
    }
}

pin_project! {
    /// The source, the engine and the functions: everything but where outputs go.
    struct Core<S, K, KF, F, Fut>
    where
        S: Stream,
        Fut: Future,
    {
        #[pin]
        source: S,
        engine: Engine<K, S::Item, Fut>,
        key_fn: KF,
        f: F,
    }
}

impl<S, K, KF, F, Fut> Core<S, K, KF, F, Fut>
where
    S: Stream,
    K: Hash + Eq + Clone,
    Fut: Future,
{
    #[track_caller]
    fn new(source: S, key_fn: KF, global_limit: usize, per_key_limit: usize, f: F) -> Self {
        check_limits(global_limit, per_key_limit);
        let expected = source.size_hint().1.unwrap_or(usize::MAX);
        Self {
            source,
            engine: Engine::new(global_limit, per_key_limit, expected),
            key_fn,
            f,
        }
    }

    #[track_caller]
    fn set_lookahead(&mut self, lookahead: usize) {
        assert!(
            lookahead > 0,
            "tollgate: the look-ahead of map_keyed must be at least 1 (with 0 no item could wait for its key)"
        );
        self.engine.lookahead = lookahead;
    }

    fn poll_drive(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        done: impl FnMut(usize, Fut::Output) -> bool,
    ) -> Drive
    where
        KF: FnMut(&S::Item) -> K,
        F: FnMut(S::Item) -> Fut,
    {
        let this = self.project();
        this.engine
            .poll_drive(this.source, this.key_fn, this.f, cx, done)
    }
}

pin_project! {
    /// Future for [`map_keyed`]: every output, in input order.
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    pub struct MapKeyed<S, K, KF, F, Fut>
    where
        S: Stream,
        Fut: Future,
    {
        #[pin]
        core: Core<S, K, KF, F, Fut>,
        outputs: Vec<Option<Fut::Output>>,
    }
}

impl<S, K, KF, F, Fut> MapKeyed<S, K, KF, F, Fut>
where
    S: Stream,
    Fut: Future,
    K: Hash + Eq + Clone,
{
    /// Sets the look-ahead: at most `lookahead` items are pulled and waiting for their key
    /// (items in flight not counted). The default is 64 × `global_limit`.
    ///
    /// The look-ahead is what lets other keys' items past a full key. With input sorted by
    /// key in runs of `r` items, filling every global slot needs a look-ahead of about
    /// `(global_limit / per_key_limit) × r`; interleaved input needs very little. Memory
    /// is bounded by the look-ahead whatever the input order.
    ///
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// let urls = (0..100).map(|i| (i % 4, i)); // (host, page)
    /// let pages = tollgate::map_keyed(urls, |(host, _)| *host, 8, 2, |(_, page)| async move { page })
    ///     .lookahead(16)
    ///     .await;
    /// assert_eq!(pages.len(), 100);
    /// # });
    /// ```
    ///
    /// # Panics
    ///
    /// If `lookahead` is 0.
    #[track_caller]
    pub fn lookahead(mut self, lookahead: usize) -> Self {
        self.core.set_lookahead(lookahead);
        self
    }
}

impl<S, K, KF, F, Fut> Future for MapKeyed<S, K, KF, F, Fut>
where
    S: Stream,
    K: Hash + Eq + Clone,
    KF: FnMut(&S::Item) -> K,
    F: FnMut(S::Item) -> Fut,
    Fut: Future,
{
    type Output = Vec<Fut::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let outputs = this.outputs;
        let drive = this.core.poll_drive(cx, |seq, output| {
            if seq >= outputs.len() {
                outputs.resize_with(seq + 1, || None);
            }
            outputs[seq] = Some(output);
            false
        });
        match drive {
            Drive::Done => Poll::Ready(
                std::mem::take(outputs)
                    .into_iter()
                    .map(|output| output.expect("every pulled item produced an output"))
                    .collect(),
            ),
            Drive::Yield | Drive::Pending => Poll::Pending,
        }
    }
}

impl<S: Stream, K, KF, F, Fut: Future> fmt::Debug for MapKeyed<S, K, KF, F, Fut> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_engine(f.debug_struct("MapKeyed"), &self.core.engine)
    }
}

pin_project! {
    /// Stream for [`map_keyed_unordered`](crate::BoundedStreamExt::map_keyed_unordered):
    /// outputs in completion order.
    #[must_use = "streams do nothing unless polled"]
    pub struct MapKeyedUnordered<S, K, KF, F, Fut>
    where
        S: Stream,
        Fut: Future,
    {
        #[pin]
        core: Core<S, K, KF, F, Fut>,
        finished: VecDeque<Fut::Output>,
    }
}

impl<S, K, KF, F, Fut> MapKeyedUnordered<S, K, KF, F, Fut>
where
    S: Stream,
    Fut: Future,
    K: Hash + Eq + Clone,
{
    #[track_caller]
    pub(crate) fn new(
        source: S,
        key_fn: KF,
        global_limit: usize,
        per_key_limit: usize,
        f: F,
    ) -> Self {
        Self {
            core: Core::new(source, key_fn, global_limit, per_key_limit, f),
            finished: VecDeque::new(),
        }
    }

    /// Sets the look-ahead; see [`MapKeyed::lookahead`].
    ///
    /// # Panics
    ///
    /// If `lookahead` is 0.
    #[track_caller]
    pub fn lookahead(mut self, lookahead: usize) -> Self {
        self.core.set_lookahead(lookahead);
        self
    }
}

impl<S, K, KF, F, Fut> Stream for MapKeyedUnordered<S, K, KF, F, Fut>
where
    S: Stream,
    K: Hash + Eq + Clone,
    KF: FnMut(&S::Item) -> K,
    F: FnMut(S::Item) -> Fut,
    Fut: Future,
{
    type Item = Fut::Output;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.project();
        let finished = this.finished;
        if finished.is_empty() {
            let drive = this.core.poll_drive(cx, |_, output| {
                finished.push_back(output);
                true
            });
            if let (Drive::Done, true) = (drive, finished.is_empty()) {
                return Poll::Ready(None);
            }
        }
        match finished.pop_front() {
            Some(output) => Poll::Ready(Some(output)),
            None => Poll::Pending,
        }
    }
}

impl<S: Stream, K, KF, F, Fut: Future> fmt::Debug for MapKeyedUnordered<S, K, KF, F, Fut> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_engine(f.debug_struct("MapKeyedUnordered"), &self.core.engine)
    }
}

fn debug_engine<K, T, Fut>(
    mut s: fmt::DebugStruct<'_, '_>,
    engine: &Engine<K, T, Fut>,
) -> fmt::Result {
    s.field("global_limit", &engine.pool.limit())
        .field("in_flight", &engine.pool.len())
        .field("waiting_for_key", &engine.scheduler.waiting())
        .field("active_keys", &engine.scheduler.active_keys())
        .field("lookahead", &engine.lookahead)
        .finish_non_exhaustive()
}

/// Maps every item with at most `global_limit` futures in flight and at most
/// `per_key_limit` per key (per host), without either limit blocking the other.
///
/// `key_fn` names each item's key (a URL's host, a tenant, a shard). An item starts only
/// when its key and the global limit both have room. Items whose key is full wait in a
/// per-key queue **without holding a global slot**, and items of other keys go ahead, so
/// host-sorted input still fills every global slot. Keys with waiting items take turns,
/// so none starves. Within a key, items start in input order.
///
/// Input is pulled lazily: ahead of the running work by at most the
/// [look-ahead](MapKeyed::lookahead) (64 × `global_limit` by default), so memory stays
/// bounded whatever the input order. Outputs come back in input order; with
/// `Fut::Output = Result<T, E>` failures are items like any other.
///
/// # With a `KeyedBulkhead`
///
/// `per_key_limit` caps this map alone. When several maps (or other code) hit the same
/// hosts and the cap must hold across all of them, also run each request through a
/// shared [`KeyedBulkhead`](crate::KeyedBulkhead) inside `f`. Its options then mean what
/// they say: an `acquire_timeout` or `max_waiting` turns "the host is busy with the others'
/// work" into a [`BulkheadError`](crate::BulkheadError) item instead of a long wait. Within
/// one map the bulkhead never makes an item wait while it holds a global slot as long as
/// `per_key_limit` is no larger than the bulkhead's limit.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{BulkheadError, KeyedBulkhead, map_keyed, sleep};
///
/// static PER_HOST: KeyedBulkhead<String> = KeyedBulkhead::new(2).acquire_timeout(Duration::from_secs(5));
///
/// async fn crawl(urls: Vec<String>) -> Vec<Result<(), BulkheadError>> {
///     let host = |url: &String| url.split('/').nth(2).unwrap_or_default().to_owned();
///     map_keyed(urls, host, 8, 2, |url| async move {
///         let host = url.split('/').nth(2).unwrap_or_default();
///         PER_HOST.run(host, sleep(Duration::from_millis(1))).await
///     })
///     .await
/// }
///
/// # futures_lite::future::block_on(async {
/// let urls = |n| (0..n).map(|i| format!("https://example.com/{i}")).collect();
/// // Two crawls at once: together they still send at most 2 requests to the host.
/// let (a, b) = futures_lite::future::zip(crawl(urls(10)), crawl(urls(10))).await;
/// assert!(a.iter().chain(&b).all(Result::is_ok));
/// # });
/// ```
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
/// let pages = tollgate::map_keyed(urls, host, 6, 2, fetch).await;
/// assert_eq!(pages.len(), 30);
/// assert!(pages.iter().all(Result::is_ok));
/// # });
/// ```
///
/// # Panics
///
/// If either limit is 0. If a future, `f`, `key_fn` or the input panics, the futures in
/// flight are dropped and the panic continues in the caller.
///
/// # Cancel safety
///
/// Dropping the future drops every future in flight and every item waiting for its key;
/// nothing more is pulled.
#[track_caller]
pub fn map_keyed<I, K, KF, F, Fut>(
    items: I,
    key_fn: KF,
    global_limit: usize,
    per_key_limit: usize,
    f: F,
) -> MapKeyed<Iter<I::IntoIter>, K, KF, F, Fut>
where
    I: IntoIterator,
    K: Hash + Eq + Clone,
    KF: FnMut(&I::Item) -> K,
    F: FnMut(I::Item) -> Fut,
    Fut: Future,
{
    MapKeyed {
        core: Core::new(stream::iter(items), key_fn, global_limit, per_key_limit, f),
        outputs: Vec::new(),
    }
}
