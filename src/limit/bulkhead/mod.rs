//! [`Bulkhead`]: a named cap on concurrent work with an acquire timeout and a bounded
//! queue, one semaphore per runtime; its [`BulkheadPermit`]s.
//!
//! The parts every bulkhead shares are in their own files: [`options`] (the builder),
//! [`core`] (the acquire path, permits, `run`), [`stats`] (the counters), [`error`]; how
//! a [`Bulkhead`] finds the calling runtime's cap is in [`per_runtime`], how a
//! [`KeyedBulkhead`](crate::KeyedBulkhead) finds a key's in [`keyed`].

pub(crate) mod core;
pub(crate) mod error;
pub(crate) mod keyed;
pub(crate) mod options;
mod per_runtime;
pub(crate) mod stats;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

pub use self::error::BulkheadError;
pub use self::stats::BulkheadStats;

use self::core::{Acquire, Gated, Holder, Permit};
use self::options::{Kind, Options, options_builder};
use self::per_runtime::PerRuntime;
use self::stats::Limiter;

/// Panics, naming the setter `what`, when `limit` is not a valid bulkhead limit (`zero` is
/// the message for 0: a constant, as the one check wants).
#[track_caller]
pub(crate) fn check_limit(limit: usize, what: &str, zero: &'static str) {
    crate::limit::check::at_least_one(limit, zero);
    assert!(
        limit <= crate::limit::semaphore::Semaphore::MAX_PERMITS,
        "{what}: a limit above Semaphore::MAX_PERMITS (2^31 - 1)"
    );
}

/// A cap on how much work runs at once, with an optional acquire timeout, a bounded wait
/// queue and a name for error messages: the bulkhead pattern.
///
/// **One cap per runtime; [`.global()`](Self::global) for one cap in the process.** A
/// `static` bulkhead is shared by every runtime that uses it, and each gets its own
/// `limit` (see [`RuntimeKey`](crate::RuntimeKey)): every [`run_sync`](crate::run_sync)
/// call, every tokio runtime (with the `tokio` feature), and the process-wide rest (smol,
/// async-std, plain threads). So `static API: Bulkhead = Bulkhead::new(8)` used by four
/// threads that each call `run_sync` lets up to 32 calls in at once, 8 per call, and a
/// `static` bulkhead is safe across many `#[tokio::test]`s. [`stats`](Self::stats) shows
/// the totals over every runtime from any thread, [`runtime_stats`](Self::runtime_stats)
/// the calling runtime's own cap. The cap of a runtime that is gone is reused by the next
/// new runtime once it holds no permit and no waiter, so a bulkhead keeps only as many caps
/// as runtimes were alive at once.
///
/// Permits go to waiters in arrival order (FIFO) and [`try_acquire`](Self::try_acquire)
/// never jumps the queue.
///
/// | option | default | effect |
/// | --- | --- | --- |
/// | [`acquire_timeout(d)`](Self::acquire_timeout) | wait forever | give up waiting for a permit after `d` ([`BulkheadError::is_timed_out`]); zero = take a free permit or fail at once |
/// | [`max_waiting(n)`](Self::max_waiting) | unbounded | refuse at once when `n` callers already wait ([`BulkheadError::is_queue_full`]); 0 = no queue |
/// | [`name(s)`](Self::name) / [`with_name(s)`](Self::with_name) | none | named in [`BulkheadError`] |
/// | [`global()`](Self::global) | one cap per runtime | one cap shared by every runtime |
///
/// # Examples
///
/// One cap per runtime: four threads, each in its own `run_sync`, get 8 permits each.
///
/// ```
/// use std::sync::Barrier;
/// use tollgate::{Bulkhead, run_sync};
///
/// static API: Bulkhead = Bulkhead::new(8);
///
/// let barrier = Barrier::new(5);
/// std::thread::scope(|scope| {
///     for _ in 0..4 {
///         scope.spawn(|| {
///             run_sync(async {
///                 let permits: Vec<_> = (0..8).map(|_| API.try_acquire().unwrap()).collect();
///                 assert!(API.try_acquire().unwrap_err().is_busy()); // this runtime's cap is full
///                 barrier.wait();
///                 barrier.wait();
///                 drop(permits);
///             })
///         });
///     }
///     barrier.wait();
///     assert_eq!(API.stats().in_flight, 32); // 4 runtimes x 8, read from a plain thread
///     barrier.wait();
/// });
/// ```
///
/// The usual shape: a named `static` next to the code it protects.
///
/// ```
/// use std::time::Duration;
/// use tollgate::Bulkhead;
///
/// static SEARCH_API: Bulkhead = Bulkhead::new(4)
///     .name("search-api")
///     .acquire_timeout(Duration::from_secs(10))
///     .max_waiting(100);
///
/// async fn search(query: &str) -> Result<String, tollgate::BulkheadError> {
///     SEARCH_API
///         .run(async {
///             tollgate::sleep(Duration::from_millis(1)).await; // the request, simulated
///             format!("results for {query}")
///         })
///         .await
/// }
///
/// let answer = tollgate::run_sync(search("tollgate"));
/// assert_eq!(answer.unwrap(), "results for tollgate");
/// ```
///
/// A bulkhead with a limit of 0 does not compile as a `static`:
///
/// ```compile_fail
/// static NOTHING: tollgate::Bulkhead = tollgate::Bulkhead::new(0);
/// ```
#[doc(alias = "semaphore")]
#[doc(alias = "limiter")]
pub struct Bulkhead {
    options: Options,
    caps: PerRuntime,
}

impl Bulkhead {
    crate::sync::const_unless_loom! {
        /// Creates a bulkhead that lets at most `limit` callers in at once: **one cap per
        /// runtime** (each [`run_sync`](crate::run_sync) call, each tokio runtime with the
        /// `tokio` feature, and the process-wide rest); [`.global()`](Self::global) for one
        /// cap in the process.
        ///
        /// Callers beyond the limit wait in a FIFO queue, with no timeout and no bound
        /// unless [`acquire_timeout`](Self::acquire_timeout) and
        /// [`max_waiting`](Self::max_waiting) say otherwise.
        ///
        /// # Examples
        ///
        /// ```
        /// use tollgate::{Bulkhead, run_sync};
        ///
        /// static PER_RUNTIME: Bulkhead = Bulkhead::new(2);
        /// static ONE_CAP: Bulkhead = Bulkhead::new(2).global();
        ///
        /// let held = (PER_RUNTIME.try_acquire().unwrap(), ONE_CAP.try_acquire().unwrap());
        /// // Another runtime (each `run_sync` call is one): a cap of its own, or the one cap.
        /// run_sync(async {
        ///     assert_eq!(PER_RUNTIME.runtime_stats().available(), 2);
        ///     assert_eq!(ONE_CAP.runtime_stats().available(), 1);
        /// });
        /// assert_eq!(PER_RUNTIME.limit(), 2);
        /// # drop(held);
        /// ```
        ///
        /// # Panics
        ///
        /// Panics when `limit` is 0 (nothing could ever run) or above
        /// [`Semaphore::MAX_PERMITS`](crate::Semaphore::MAX_PERMITS). In a `static` that
        /// is a compile-time error.
        #[track_caller]
        pub const fn new(limit: usize) -> Self {
            Self {
                options: Options::new(limit, Kind::Bulkhead),
                caps: PerRuntime::new(limit),
            }
        }
    }

    options_builder!(
        new: "tollgate::Bulkhead::new",
        key: "",
        permit: "a permit",
        per: ""
    );

    /// The limit in force (the process-wide cap carries it for every cap).
    fn live_limit(&self) -> usize {
        self.caps.process().limit()
    }

    /// Makes `limit` the limit of every runtime's cap, and of caps created later.
    ///
    /// Growing admits waiters at once, in arrival order; shrinking admits nobody new in a
    /// cap until its permits out are below the new limit (permits out are never revoked),
    /// exactly as [`Semaphore::set_limit`](crate::Semaphore::set_limit) does.
    ///
    /// # Examples
    ///
    /// ```
    /// static API: tollgate::Bulkhead = tollgate::Bulkhead::new(4);
    ///
    /// let held: Vec<_> = (0..3).map(|_| API.try_acquire().unwrap()).collect();
    /// API.set_limit(2);
    /// assert!(API.try_acquire().unwrap_err().is_busy());
    /// drop(held);
    /// assert_eq!(API.runtime_stats().available(), 2);
    /// ```
    ///
    /// # Panics
    ///
    /// Panics when `limit` is 0 or above
    /// [`Semaphore::MAX_PERMITS`](crate::Semaphore::MAX_PERMITS), as [`new`](Self::new) does.
    #[track_caller]
    pub fn set_limit(&self, limit: usize) {
        check_limit(
            limit,
            "tollgate::Bulkhead::set_limit",
            "tollgate::Bulkhead::set_limit: a limit of 0 would refuse all work; use at least 1",
        );
        self.caps.set_limit(limit);
    }

    /// Closes the bulkhead in every runtime (and in runtimes that use it later): every
    /// waiter wakes with a [`BulkheadError`] whose [`is_closed`](BulkheadError::is_closed) is
    /// true, every later acquire fails the same way at once (`try_acquire` too). Permits
    /// out stay valid.
    ///
    /// # Examples
    ///
    /// ```
    /// let bulkhead = tollgate::Bulkhead::new(2);
    /// let held = bulkhead.try_acquire().unwrap();
    /// bulkhead.close();
    /// assert!(bulkhead.is_closed());
    /// assert!(bulkhead.acquire_blocking().unwrap_err().is_closed());
    /// drop(held); // still fine
    /// ```
    pub fn close(&self) {
        self.caps.close();
    }

    /// Whether [`close`](Self::close) was called.
    pub fn is_closed(&self) -> bool {
        self.caps.process().is_closed()
    }

    /// The calling runtime's cap, and its index.
    #[inline]
    fn current_cap(&self) -> (usize, &Limiter) {
        // Unregistered: the caps register a runtime before its cap is first cached.
        self.caps.find(self.options.runtime_unregistered())
    }

    #[inline]
    fn slot(&self) -> Slot<'_> {
        Slot {
            cap: self.current_cap().1,
            options: &self.options,
        }
    }

    #[inline]
    fn arc_slot(self: &Arc<Self>) -> ArcSlot {
        ArcSlot {
            cap: self.current_cap().0,
            bulkhead: self.clone(),
        }
    }

    /// How many runtimes own a cap of the bulkhead, besides the built-in process-wide one.
    ///
    /// Every [`run_sync`](crate::run_sync) call and (with the `tokio` feature) every tokio
    /// runtime that used the bulkhead owns one. The caps of runtimes that have ended and
    /// hold no permit and no waiter are freed the next time a new runtime needs a cap (and
    /// reused), so this stays at the number of live runtimes plus at most a few ended ones.
    /// Always 0 for a [`global`](Self::global) bulkhead.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Bulkhead, run_sync};
    ///
    /// static JOBS: Bulkhead = Bulkhead::new(2);
    /// for _ in 0..100 {
    ///     run_sync(async { drop(JOBS.acquire().await) });
    /// }
    /// assert!(JOBS.tracked_runtimes() <= 1);
    /// ```
    pub fn tracked_runtimes(&self) -> usize {
        self.caps.tracked()
    }

    /// Takes a permit if one is free and nobody is waiting, without waiting.
    ///
    /// # Examples
    ///
    /// ```
    /// let bulkhead = tollgate::Bulkhead::new(1);
    /// let permit = bulkhead.try_acquire().unwrap();
    /// assert!(bulkhead.try_acquire().unwrap_err().is_busy());
    /// drop(permit);
    /// assert!(bulkhead.try_acquire().is_ok());
    /// ```
    ///
    /// # Errors
    ///
    /// [`BulkheadError`]: [`is_busy`](BulkheadError::is_busy) when no permit is free or
    /// someone waits (try again later), [`is_closed`](BulkheadError::is_closed) when the
    /// bulkhead is closed (no use trying again), as
    /// [`Semaphore::try_acquire`](crate::Semaphore::try_acquire) tells them apart. A
    /// failed `try_acquire` is not counted in [`stats`](Self::stats)' `rejected`.
    #[inline]
    pub fn try_acquire(&self) -> Result<BulkheadPermit<'_>, BulkheadError> {
        Permit::try_new(self.slot()).map(|inner| BulkheadPermit { inner })
    }

    /// Like [`try_acquire`](Self::try_acquire), with a permit that owns an `Arc` of the
    /// bulkhead, so it is `'static`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    ///
    /// let bulkhead = Arc::new(tollgate::Bulkhead::new(1));
    /// let permit = bulkhead.try_acquire_arc().unwrap();
    /// std::thread::spawn(move || drop(permit)).join().unwrap();
    /// assert!(bulkhead.try_acquire().is_ok());
    /// ```
    ///
    /// # Errors
    ///
    /// As [`try_acquire`](Self::try_acquire).
    pub fn try_acquire_arc(self: &Arc<Self>) -> Result<BulkheadPermitArc, BulkheadError> {
        Permit::try_new(self.arc_slot()).map(|inner| BulkheadPermitArc { inner })
    }

    /// Waits for a permit in the calling runtime's cap, behind everyone already waiting.
    ///
    /// # Examples
    ///
    /// ```
    /// static UPLOADS: tollgate::Bulkhead = tollgate::Bulkhead::new(3);
    ///
    /// # futures_lite::future::block_on(async {
    /// let permit = UPLOADS.acquire().await?;
    /// assert_eq!(UPLOADS.runtime_stats().in_flight, 1);
    /// drop(permit);
    /// # Ok::<(), tollgate::BulkheadError>(())
    /// # }).unwrap();
    /// ```
    ///
    /// # Errors
    ///
    /// [`BulkheadError`] when the acquire timeout passes first, or when the queue already
    /// holds `max_waiting` callers.
    ///
    /// # Cancel safety
    ///
    /// Cancelling the future loses its place in the queue. If a permit had already been
    /// handed to it, that permit goes on to the next waiter: nothing leaks.
    #[inline]
    pub fn acquire(&self) -> BulkheadAcquire<'_> {
        BulkheadAcquire(Acquire::new(self.slot()))
    }

    /// Like [`acquire`](Self::acquire), with a future and a permit that own an `Arc` of the
    /// bulkhead, so they are `'static` and can move into a spawned task.
    ///
    /// (A `static` bulkhead's plain [`BulkheadPermit`] is already `'static`.)
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    ///
    /// # futures_lite::future::block_on(async {
    /// let bulkhead = Arc::new(tollgate::Bulkhead::new(2));
    /// let permit = bulkhead.acquire_arc().await?;
    /// std::thread::spawn(move || drop(permit)).join().unwrap();
    /// assert_eq!(bulkhead.stats().in_flight, 0);
    /// # Ok::<(), tollgate::BulkheadError>(())
    /// # }).unwrap();
    /// ```
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    ///
    /// As [`acquire`](Self::acquire).
    #[inline]
    pub fn acquire_arc(self: &Arc<Self>) -> BulkheadAcquireArc {
        BulkheadAcquireArc(Acquire::new(self.arc_slot()))
    }

    /// Blocks the calling thread until a permit is free, in the same queue as async callers.
    ///
    /// For plain threads (and tokio's `spawn_blocking`); calling it from async code blocks
    /// the executor's thread. The acquire timeout applies, on the real clock.
    ///
    /// # Examples
    ///
    /// ```
    /// static DISK: tollgate::Bulkhead = tollgate::Bulkhead::new(2);
    ///
    /// std::thread::scope(|scope| {
    ///     for _ in 0..4 {
    ///         scope.spawn(|| {
    ///             let _permit = DISK.acquire_blocking().unwrap();
    ///             // at most two threads are here at once
    ///         });
    ///     }
    /// });
    /// assert!(DISK.stats().peak_in_flight <= 2);
    /// ```
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire).
    pub fn acquire_blocking(&self) -> Result<BulkheadPermit<'_>, BulkheadError> {
        Permit::blocking(self.slot()).map(|inner| BulkheadPermit { inner })
    }

    /// Runs `work` holding a permit: waits for the permit, then awaits `work`, then releases
    /// the permit (the `async with bulkhead:` of Python).
    ///
    /// # Examples
    ///
    /// ```
    /// static CRAWL: tollgate::Bulkhead = tollgate::Bulkhead::new(8);
    ///
    /// # futures_lite::future::block_on(async {
    /// let length = CRAWL.run(async { "<html></html>".len() }).await?;
    /// assert_eq!(length, 13);
    /// # Ok::<(), tollgate::BulkheadError>(())
    /// # }).unwrap();
    /// ```
    ///
    /// # Errors
    ///
    /// [`BulkheadError`] as [`acquire`](Self::acquire); `work` is dropped without being
    /// polled then.
    ///
    /// # Cancel safety
    ///
    /// Cancelling while waiting is [`acquire`](Self::acquire)'s cancellation; cancelling
    /// while `work` runs drops it mid-flight and releases the permit.
    pub fn run<F: IntoFuture>(&self, work: F) -> BulkheadRun<'_, F::IntoFuture> {
        BulkheadRun {
            inner: Gated::new(self.acquire(), work.into_future()),
        }
    }

    /// Runs `work` on the calling thread holding a permit, waiting for the permit as
    /// [`acquire_blocking`](Self::acquire_blocking) does.
    ///
    /// # Examples
    ///
    /// ```
    /// static COMPRESS: tollgate::Bulkhead = tollgate::Bulkhead::new(2);
    ///
    /// let size = COMPRESS.run_blocking(|| vec![0u8; 1024].len()).unwrap();
    /// assert_eq!(size, 1024);
    /// ```
    ///
    /// # Errors
    ///
    /// [`BulkheadError`] as [`acquire`](Self::acquire); `work` is not called then.
    pub fn run_blocking<T>(&self, work: impl FnOnce() -> T) -> Result<T, BulkheadError> {
        let _permit = self.acquire_blocking()?;
        Ok(work())
    }

    /// The totals over every runtime's cap, readable from any thread: permits out and
    /// waiters now in all runtimes together, admissions and refusals so far (ended
    /// runtimes' included), the highest peak of any one cap, and how many live runtimes
    /// have used the bulkhead.
    ///
    /// Totals are what a metrics thread or an endpoint on another runtime wants to see;
    /// the calling runtime's own cap is [`runtime_stats`](Self::runtime_stats). For a
    /// [`global`](Self::global) bulkhead the two are the same.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Bulkhead, run_sync};
    ///
    /// static API: Bulkhead = Bulkhead::new(2);
    ///
    /// let held = run_sync(async { API.acquire().await.unwrap() }); // escapes its runtime
    /// let mine = API.try_acquire().unwrap();
    /// let stats = API.stats();
    /// assert_eq!((stats.in_flight, stats.admitted, stats.peak_in_flight), (2, 2, 1));
    /// assert_eq!(stats.runtimes, 1, "the run_sync call has ended");
    /// drop((held, mine));
    /// ```
    pub fn stats(&self) -> BulkheadStats {
        let (runtimes, tally) = self.caps.totals();
        BulkheadStats::new(self.live_limit(), runtimes, tally)
    }

    /// The counters of the calling runtime's cap (of the only one if
    /// [`global`](Self::global)). A runtime that has not used the bulkhead yet reports
    /// all zeros.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::Bulkhead;
    ///
    /// let bulkhead = Bulkhead::new(2);
    /// # futures_lite::future::block_on(async {
    /// let a = bulkhead.acquire().await?;
    /// let b = bulkhead.acquire().await?;
    /// drop((a, b));
    /// let stats = bulkhead.runtime_stats();
    /// assert_eq!((stats.in_flight, stats.peak_in_flight, stats.admitted), (0, 2, 2));
    /// assert_eq!(stats.available(), 2);
    /// # Ok::<(), tollgate::BulkheadError>(())
    /// # }).unwrap();
    /// ```
    pub fn runtime_stats(&self) -> BulkheadStats {
        let tally = self.caps.tally(self.options.runtime());
        BulkheadStats::new(self.live_limit(), 1, tally)
    }
}

impl fmt::Debug for Bulkhead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut debug = f.debug_struct("Bulkhead");
        self.options.fmt_fields(self.live_limit(), &mut debug);
        debug.finish_non_exhaustive()
    }
}

/// The calling runtime's cap of a borrowed bulkhead, found when the acquire starts: two
/// references, so using it costs nothing more.
struct Slot<'a> {
    cap: &'a Limiter,
    options: &'a Options,
}

impl Holder for Slot<'_> {
    #[inline]
    fn limiter(&self) -> &Limiter {
        self.cap
    }

    #[inline]
    fn options(&self) -> &Options {
        self.options
    }
}

/// The calling runtime's cap of a shared bulkhead, found when the acquire starts; named by
/// index, since a reference into the `Arc` could not be kept beside it.
struct ArcSlot {
    bulkhead: Arc<Bulkhead>,
    cap: usize,
}

impl Holder for ArcSlot {
    #[inline]
    fn limiter(&self) -> &Limiter {
        self.bulkhead.caps.cap(self.cap)
    }

    #[inline]
    fn options(&self) -> &Options {
        &self.bulkhead.options
    }
}

/// Future returned by [`Bulkhead::acquire`].
#[must_use = "futures do nothing unless you `.await` or poll them"]
pub struct BulkheadAcquire<'a>(Acquire<Slot<'a>>);

impl fmt::Debug for BulkheadAcquire<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BulkheadAcquire").finish_non_exhaustive()
    }
}

impl<'a> Future for BulkheadAcquire<'a> {
    type Output = Result<BulkheadPermit<'a>, BulkheadError>;

    #[inline(always)]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.0
            .poll(cx, "BulkheadAcquire")
            .map_ok(|inner| BulkheadPermit { inner })
    }
}

/// Future returned by [`Bulkhead::acquire_arc`].
#[must_use = "futures do nothing unless you `.await` or poll them"]
pub struct BulkheadAcquireArc(Acquire<ArcSlot>);

impl fmt::Debug for BulkheadAcquireArc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BulkheadAcquireArc").finish_non_exhaustive()
    }
}

impl Future for BulkheadAcquireArc {
    type Output = Result<BulkheadPermitArc, BulkheadError>;

    #[inline(always)]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.0
            .poll(cx, "BulkheadAcquireArc")
            .map_ok(|inner| BulkheadPermitArc { inner })
    }
}

/// A permit of a [`Bulkhead`], released when dropped.
#[clippy::has_significant_drop]
#[must_use = "the permit is released as soon as it is dropped"]
pub struct BulkheadPermit<'a> {
    inner: Permit<Slot<'a>>,
}

impl fmt::Debug for BulkheadPermit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt_as("BulkheadPermit", f)
    }
}

/// A permit of a [`Bulkhead`] that owns an `Arc` of it, so it can move into a spawned task;
/// released when dropped.
#[clippy::has_significant_drop]
#[must_use = "the permit is released as soon as it is dropped"]
pub struct BulkheadPermitArc {
    inner: Permit<ArcSlot>,
}

impl fmt::Debug for BulkheadPermitArc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt_as("BulkheadPermitArc", f)
    }
}

pin_project_lite::pin_project! {
    /// Future returned by [`Bulkhead::run`].
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    pub struct BulkheadRun<'a, F> {
        #[pin]
        inner: Gated<BulkheadAcquire<'a>, BulkheadPermit<'a>, F>,
    }
}

impl<F> fmt::Debug for BulkheadRun<'_, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BulkheadRun").finish_non_exhaustive()
    }
}

impl<F: Future> Future for BulkheadRun<'_, F> {
    type Output = Result<F::Output, BulkheadError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.project().inner.poll(cx)
    }
}
