//! [`Semaphore`]: a strictly fair (FIFO) async semaphore that also works from blocking
//! threads, with weighted acquires, resizing and closing.
//!
//! The public type is a thin wrapper: the algorithm (and its invariants) is in [`core`],
//! the waiter queue in [`queue`], the error in [`error`]. Bulkheads use the same core with
//! admission counters, which a plain semaphore does not carry.

pub(crate) mod core;
pub(crate) mod error;
mod queue;

use std::fmt;
use std::future::Future;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

pub use self::error::SemaphoreError;

use self::core::{Core, Refusal, Waiter};
use self::error::Reason;

/// A counter for limiting concurrent work, fair to waiters and usable from any executor
/// and from blocking threads.
///
/// Permits go to waiters strictly in arrival order: permits released while anyone waits
/// go to the oldest waiter, and the `try_` forms never take a permit while someone waits.
/// (`async_lock::Semaphore` gives a released permit to whoever polls first, so a steady
/// stream of newcomers can starve an old waiter.) The semaphore counts its waiters
/// ([`waiting`](Self::waiting)).
///
/// - **Weighted**: [`acquire_many(n)`](Self::acquire_many) takes `n` permits at once (a
///   cap on bytes in flight rather than on requests). A large request at the head of the
///   queue is never starved by small ones behind it: they wait behind it even while
///   enough permits for them are free. That is the cost of fairness: while a large
///   request gathers its permits, the free ones stay unused.
/// - **Resizable** while in use: [`set_limit`](Self::set_limit),
///   [`add_permits`](Self::add_permits), [`forget_permits`](Self::forget_permits).
///   [`limit`](Self::limit) is the limit in force; once nothing is held,
///   [`available_permits`](Self::available_permits) equals it. A request for more than
///   the limit in force (one queued when the limit was lowered, or made since) **steps
///   aside**: it waits holding nothing and holding up nobody, and once the limit grows
///   back to fit it, it is served at its place in the queue. Only a request above the
///   [max weight](Self::max_weight) (by default the highest limit the semaphore has had)
///   fails, at once.
/// - **Closable**: [`close`](Self::close) refuses every waiter and every later acquire
///   with a [`SemaphoreError`]; permits already held stay valid.
///
/// It depends on no runtime: waiters are woken through their
/// [`Waker`](std::task::Waker), so it works under smol, tokio, async-std,
/// `futures::executor` and [`run_sync`](crate::run_sync), and
/// [`acquire_blocking`](Self::acquire_blocking) parks a plain thread.
///
/// Most code that limits calls wants a [`Bulkhead`](crate::Bulkhead) instead: the same
/// semaphore per runtime, plus an acquire timeout, a bounded queue and statistics.
///
/// # Examples
///
/// ```
/// use tollgate::Semaphore;
///
/// static DOWNLOADS: Semaphore = Semaphore::new(2);
///
/// # futures_lite::future::block_on(async {
/// let first = DOWNLOADS.acquire().await?;
/// let second = DOWNLOADS.acquire().await?;
/// assert!(DOWNLOADS.try_acquire().unwrap_err().is_busy());
/// drop(first);
/// assert_eq!(DOWNLOADS.available_permits(), 1);
/// # drop(second);
/// # Ok::<(), tollgate::SemaphoreError>(())
/// # }).unwrap();
/// ```
///
/// A cap on bytes in flight:
///
/// ```
/// let bytes = tollgate::Semaphore::new(1 << 20); // 1 MiB
/// # futures_lite::future::block_on(async {
/// let chunk = bytes.acquire_many(256 << 10).await?; // 256 KiB
/// assert_eq!(chunk.permits(), 256 << 10);
/// assert_eq!(bytes.available_permits(), 768 << 10);
/// # Ok::<(), tollgate::SemaphoreError>(())
/// # }).unwrap();
/// ```
///
/// A large request waits while the cap is lowered, without holding up smaller ones:
///
/// ```
/// use std::pin::pin;
/// use futures_lite::future::poll_once;
///
/// # futures_lite::future::block_on(async {
/// let bytes = tollgate::Semaphore::new(1024); // KiB
/// let held = bytes.acquire_many(1024).await?;
/// let mut large = pin!(bytes.acquire_many(512));
/// assert!(poll_once(large.as_mut()).await.is_none()); // queued
/// bytes.set_limit(256); // the link got slower: the large request steps aside
/// drop(held); // pays for the shrink, and frees 256 KiB
/// let small = bytes.acquire_many(100).await?; // not held up by the large one
/// assert!(poll_once(large.as_mut()).await.is_none()); // still waiting, no error
/// bytes.set_limit(1024); // back: the large request is served at its place
/// assert_eq!(large.await?.permits(), 512);
/// # drop(small);
/// # Ok::<(), tollgate::SemaphoreError>(())
/// # }).unwrap();
/// ```
pub struct Semaphore {
    core: Core<()>,
}

/// `n` as the core's permit count; a count above `u32::MAX` is above any limit anyway.
fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

impl Semaphore {
    /// The largest number of permits a semaphore can have: 2^31 - 1.
    pub const MAX_PERMITS: usize = (u32::MAX >> 1) as usize;

    crate::sync::const_unless_loom! {
        /// Creates a semaphore with `permits` permits.
        ///
        /// # Examples
        ///
        /// ```
        /// let semaphore = tollgate::Semaphore::new(8);
        /// assert_eq!(semaphore.available_permits(), 8);
        /// ```
        ///
        /// # Panics
        ///
        /// Panics when `permits` is 0 (nothing could ever run) or above
        /// [`MAX_PERMITS`](Self::MAX_PERMITS). In a `static`, that is a compile-time error.
        #[track_caller]
        pub const fn new(permits: usize) -> Self {
            crate::limit::check::at_least_one(permits, "tollgate::Semaphore::new: 0 permits would block every acquire forever; use at least 1");
            assert!(
                permits <= Self::MAX_PERMITS,
                "tollgate::Semaphore::new: more than Semaphore::MAX_PERMITS (2^31 - 1) permits"
            );
            Self {
                core: Core::new(permits, ()),
            }
        }
    }

    /// The error for a failed `try_` acquire of `n`.
    #[cold]
    fn try_error(&self, n: usize) -> SemaphoreError {
        let reason = match self.core.why_not(count(n)) {
            Refusal::Closed => Reason::Closed,
            Refusal::OverLimit => Reason::OverLimit,
            // (`why_not` says busy; a full queue is a waiting acquire's, and a
            // semaphore's queue is unbounded.)
            Refusal::Busy | Refusal::QueueFull => Reason::Busy,
        };
        self.error(reason, n)
    }

    /// An error for a request of `n`, with the limit and max weight in force now.
    #[cold]
    fn error(&self, reason: Reason, n: usize) -> SemaphoreError {
        SemaphoreError::new(reason, n, self.limit(), self.max_weight())
    }

    /// Takes a permit if one is free and nobody is waiting for permits.
    ///
    /// # Examples
    ///
    /// ```
    /// let semaphore = tollgate::Semaphore::new(1);
    /// let permit = semaphore.try_acquire().unwrap();
    /// assert!(semaphore.try_acquire().unwrap_err().is_busy());
    /// drop(permit);
    /// assert!(semaphore.try_acquire().is_ok());
    /// ```
    ///
    /// # Errors
    ///
    /// [`SemaphoreError`]: [`is_busy`](SemaphoreError::is_busy) when no permit is
    /// free or someone waits (try again later), [`is_closed`](SemaphoreError::is_closed) when
    /// the semaphore is closed (no use trying again). A `Result` rather than an `Option`
    /// so that a retry loop can tell the two apart.
    #[inline]
    pub fn try_acquire(&self) -> Result<SemaphorePermit<'_>, SemaphoreError> {
        self.try_acquire_many(1)
    }

    /// Takes `n` permits at once if they are all free and nobody is waiting.
    ///
    /// # Examples
    ///
    /// ```
    /// let semaphore = tollgate::Semaphore::new(10);
    /// let seven = semaphore.try_acquire_many(7).unwrap();
    /// assert!(semaphore.try_acquire_many(4).unwrap_err().is_busy());
    /// assert_eq!(semaphore.try_acquire_many(3).unwrap().permits(), 3);
    /// # drop(seven);
    /// ```
    ///
    /// # Errors
    ///
    /// As [`try_acquire`](Self::try_acquire) (also [`is_busy`](SemaphoreError::is_busy)
    /// when `n` is above the limit in force: the limit may grow), and
    /// [`is_over_limit`](SemaphoreError::is_over_limit) when `n` is above the
    /// [max weight](Self::max_weight).
    #[inline]
    pub fn try_acquire_many(&self, n: usize) -> Result<SemaphorePermit<'_>, SemaphoreError> {
        let permits = count(n);
        if self.core.try_take_weighted(permits) {
            Ok(SemaphorePermit {
                semaphore: self,
                permits,
            })
        } else {
            Err(self.try_error(n))
        }
    }

    /// Like [`try_acquire`](Self::try_acquire), with a permit that owns an `Arc` of the
    /// semaphore and so is `'static`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    ///
    /// let semaphore = Arc::new(tollgate::Semaphore::new(1));
    /// let permit = semaphore.try_acquire_arc().unwrap();
    /// assert!(semaphore.try_acquire_arc().is_err());
    /// drop(permit);
    /// ```
    ///
    /// # Errors
    ///
    /// As [`try_acquire`](Self::try_acquire).
    pub fn try_acquire_arc(self: &Arc<Self>) -> Result<SemaphorePermitArc, SemaphoreError> {
        self.try_acquire_many_arc(1)
    }

    /// Like [`try_acquire_many`](Self::try_acquire_many), with a permit that owns an `Arc`
    /// of the semaphore.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    ///
    /// let semaphore = Arc::new(tollgate::Semaphore::new(4));
    /// let permit = semaphore.try_acquire_many_arc(3).unwrap();
    /// std::thread::spawn(move || drop(permit)).join().unwrap();
    /// assert_eq!(semaphore.available_permits(), 4);
    /// ```
    ///
    /// # Errors
    ///
    /// As [`try_acquire_many`](Self::try_acquire_many).
    pub fn try_acquire_many_arc(
        self: &Arc<Self>,
        n: usize,
    ) -> Result<SemaphorePermitArc, SemaphoreError> {
        let permits = count(n);
        if self.core.try_take_weighted(permits) {
            Ok(SemaphorePermitArc {
                semaphore: self.clone(),
                permits,
            })
        } else {
            Err(self.try_error(n))
        }
    }

    /// Waits for a permit, behind everyone already waiting.
    ///
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// let semaphore = tollgate::Semaphore::new(2);
    /// let permit = semaphore.acquire().await?;
    /// assert_eq!(semaphore.available_permits(), 1);
    /// drop(permit);
    /// # Ok::<(), tollgate::SemaphoreError>(())
    /// # }).unwrap();
    /// ```
    ///
    /// # Errors
    ///
    /// [`SemaphoreError`] whose [`is_closed`](SemaphoreError::is_closed) is true when the
    /// semaphore is closed before a permit is granted.
    ///
    /// # Cancel safety
    ///
    /// Cancelling the future (dropping it before it completes) loses its place in the
    /// queue. If a permit had already been handed to it, that permit goes on to the next
    /// waiter: nothing leaks.
    #[inline]
    pub fn acquire(&self) -> SemaphoreAcquire<'_> {
        SemaphoreAcquire(Acquiring::new(self, 1))
    }

    /// Waits for `n` permits at once, behind everyone already waiting; the permit gives
    /// all `n` back when dropped.
    ///
    /// Waiters are served in arrival order whatever they ask for: a request for many
    /// permits at the head of the queue gathers released permits until it has all it
    /// asked for, and smaller requests behind it wait meanwhile, even when enough permits
    /// for them are free. Nobody is starved; the price is that those free permits stay
    /// unused until the head's request is complete.
    ///
    /// A request for more than the limit in force (but not more than the
    /// [max weight](Self::max_weight)) **steps aside** instead, whether it was made so or
    /// the limit was lowered while it waited: it holds nothing, and the requests behind
    /// it are served as if it were not there. Once a resize brings the limit up to what
    /// it asks for, it is back at its place: ahead of every request still waiting that
    /// arrived after it, behind those that arrived before. (Requests that arrived after
    /// it and were served while it stood aside have overtaken it.)
    ///
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// let memory = tollgate::Semaphore::new(100);
    /// let big = memory.acquire_many(80).await?;
    /// assert_eq!(memory.available_permits(), 20);
    /// drop(big);
    /// # Ok::<(), tollgate::SemaphoreError>(())
    /// # }).unwrap();
    /// ```
    ///
    /// # Errors
    ///
    /// [`SemaphoreError`]: [`is_closed`](SemaphoreError::is_closed) as for
    /// [`acquire`](Self::acquire); [`is_over_limit`](SemaphoreError::is_over_limit) when `n` is
    /// above the [max weight](Self::max_weight) when the future is first polled, or when
    /// [`set_max_weight`](Self::set_max_weight) lowers the max weight below `n` while it
    /// waits. Never because the limit in force is below `n`: then it steps aside and
    /// waits. `n == 0` succeeds once earlier waiters are served.
    ///
    /// # Cancel safety
    ///
    /// As [`acquire`](Self::acquire): cancelling loses the place in the queue, and permits
    /// already handed over go on to the next waiters. A request that stepped aside holds
    /// nothing: cancelling it gives nothing back and lets nobody in.
    #[inline]
    pub fn acquire_many(&self, n: usize) -> SemaphoreAcquire<'_> {
        SemaphoreAcquire(Acquiring::new(self, n))
    }

    /// Like [`acquire`](Self::acquire), with a permit that owns an `Arc` of the semaphore,
    /// so the future and the permit are `'static` and can move into a spawned task.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    ///
    /// # futures_lite::future::block_on(async {
    /// let semaphore = Arc::new(tollgate::Semaphore::new(2));
    /// let permit = semaphore.acquire_arc().await?;
    /// std::thread::spawn(move || drop(permit)).join().unwrap();
    /// assert_eq!(semaphore.available_permits(), 2);
    /// # Ok::<(), tollgate::SemaphoreError>(())
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
    pub fn acquire_arc(self: &Arc<Self>) -> SemaphoreAcquireArc {
        SemaphoreAcquireArc(Acquiring::new(self.clone(), 1))
    }

    /// Like [`acquire_many`](Self::acquire_many), with a future and a permit that own an
    /// `Arc` of the semaphore.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    ///
    /// # futures_lite::future::block_on(async {
    /// let bytes = Arc::new(tollgate::Semaphore::new(1000));
    /// let permit = bytes.acquire_many_arc(600).await?;
    /// std::thread::spawn(move || drop(permit)).join().unwrap();
    /// assert_eq!(bytes.available_permits(), 1000);
    /// # Ok::<(), tollgate::SemaphoreError>(())
    /// # }).unwrap();
    /// ```
    ///
    /// # Errors
    ///
    /// As [`acquire_many`](Self::acquire_many).
    ///
    /// # Cancel safety
    ///
    /// As [`acquire`](Self::acquire).
    #[inline]
    pub fn acquire_many_arc(self: &Arc<Self>, n: usize) -> SemaphoreAcquireArc {
        SemaphoreAcquireArc(Acquiring::new(self.clone(), n))
    }

    /// Blocks the calling thread until a permit is free, in the same queue as the async
    /// waiters.
    ///
    /// For plain threads (and tokio's `spawn_blocking`). Calling it from async code blocks
    /// the executor's thread and can deadlock it.
    ///
    /// # Examples
    ///
    /// ```
    /// let semaphore = tollgate::Semaphore::new(2);
    /// std::thread::scope(|scope| {
    ///     for _ in 0..4 {
    ///         scope.spawn(|| {
    ///             let _permit = semaphore.acquire_blocking().unwrap();
    ///             // at most two threads are here at once
    ///         });
    ///     }
    /// });
    /// assert_eq!(semaphore.available_permits(), 2);
    /// ```
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire): the semaphore was closed before a permit was granted.
    pub fn acquire_blocking(&self) -> Result<SemaphorePermit<'_>, SemaphoreError> {
        self.acquire_many_blocking(1)
    }

    /// Blocks the calling thread until `n` permits are free, in the same queue as the
    /// async waiters (see [`acquire_many`](Self::acquire_many) for the order, and for a
    /// request above the limit in force, which steps aside and waits).
    ///
    /// # Examples
    ///
    /// ```
    /// let bytes = tollgate::Semaphore::new(100);
    /// let permit = bytes.acquire_many_blocking(60).unwrap();
    /// assert_eq!(bytes.available_permits(), 40);
    /// # drop(permit);
    /// ```
    ///
    /// # Errors
    ///
    /// As [`acquire_many`](Self::acquire_many).
    pub fn acquire_many_blocking(&self, n: usize) -> Result<SemaphorePermit<'_>, SemaphoreError> {
        match self.try_acquire_many(n) {
            Ok(permit) => Ok(permit),
            Err(error) if !error.is_busy() => Err(error),
            Err(_) => crate::sync::block_on(self.acquire_many(n)),
        }
    }

    /// Closes the semaphore: every waiter (async and blocking) wakes with a
    /// [`SemaphoreError`] whose [`is_closed`](SemaphoreError::is_closed) is true, and every
    /// later acquire fails at once the same way. Permits already held stay valid and are
    /// given back as usual when dropped. Closing twice does nothing more.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::pin::pin;
    /// use futures_lite::future::poll_once;
    ///
    /// # futures_lite::future::block_on(async {
    /// let semaphore = tollgate::Semaphore::new(1);
    /// let held = semaphore.acquire().await?;
    /// let mut waiter = pin!(semaphore.acquire());
    /// assert!(poll_once(waiter.as_mut()).await.is_none());
    /// semaphore.close();
    /// assert!(waiter.await.unwrap_err().is_closed());
    /// assert!(semaphore.acquire().await.unwrap_err().is_closed());
    /// drop(held); // still fine
    /// assert!(semaphore.is_closed());
    /// # Ok::<(), tollgate::SemaphoreError>(())
    /// # }).unwrap();
    /// ```
    pub fn close(&self) {
        self.core.close();
    }

    /// Whether [`close`](Self::close) was called.
    pub fn is_closed(&self) -> bool {
        self.core.is_closed()
    }

    /// Makes `limit` the limit in force.
    ///
    /// - **Growing** takes effect at once: the new permits go to waiters in arrival order
    ///   (a shrink still owed is cancelled first).
    /// - **Shrinking** forgets free permits at once; if too few are free, the next
    ///   permits released are absorbed (nobody is admitted) until the permits held are
    ///   down to the new limit. So after the call, once the permits held above the new
    ///   limit have come back, at no moment are more than `limit` permits held. Permits
    ///   held are never revoked. Waiters asking for more than the new limit step aside
    ///   (see [`acquire_many`](Self::acquire_many)): they keep waiting, holding up nobody.
    /// - **Growing** first brings back the waiters aside that fit the new limit, each at
    ///   its place in the queue, and raises the [max weight](Self::max_weight) along
    ///   unless [`set_max_weight`](Self::set_max_weight) was called.
    ///
    /// Whatever the sequence of resizes, once no permit is held
    /// [`available_permits`](Self::available_permits) equals [`limit`](Self::limit).
    ///
    /// # Examples
    ///
    /// ```
    /// let semaphore = tollgate::Semaphore::new(4);
    /// let held: Vec<_> = (0..3).map(|_| semaphore.try_acquire().unwrap()).collect();
    /// semaphore.set_limit(2); // one free permit forgotten, one more owed
    /// assert_eq!((semaphore.limit(), semaphore.available_permits()), (2, 0));
    /// drop(held);
    /// assert_eq!(semaphore.available_permits(), 2);
    /// semaphore.set_limit(5);
    /// assert_eq!(semaphore.available_permits(), 5);
    /// ```
    ///
    /// # Panics
    ///
    /// Panics when `limit` is 0 or above [`MAX_PERMITS`](Self::MAX_PERMITS), as
    /// [`new`](Self::new) does.
    #[track_caller]
    pub fn set_limit(&self, limit: usize) {
        crate::limit::check::at_least_one(
            limit,
            "tollgate::Semaphore::set_limit: a limit of 0 would block every acquire forever; use at least 1",
        );
        assert!(
            limit <= Self::MAX_PERMITS,
            "tollgate::Semaphore::set_limit: more than Semaphore::MAX_PERMITS (2^31 - 1) permits"
        );
        self.core.set_limit(|_| Some(limit as u64));
    }

    /// Raises the limit by `n` at once: the new permits go to waiters in arrival order
    /// (waiters aside that fit the new limit back at their places). The same as
    /// `set_limit(limit() + n)`, done atomically.
    ///
    /// # Examples
    ///
    /// ```
    /// let semaphore = tollgate::Semaphore::new(1);
    /// semaphore.add_permits(2);
    /// assert_eq!((semaphore.limit(), semaphore.available_permits()), (3, 3));
    /// ```
    ///
    /// # Panics
    ///
    /// Panics when the limit would go above [`MAX_PERMITS`](Self::MAX_PERMITS).
    #[track_caller]
    pub fn add_permits(&self, n: usize) {
        let added = self.core.set_limit(|limit| {
            let limit = limit.checked_add(n as u64)?;
            (limit <= Self::MAX_PERMITS as u64).then_some(limit)
        });
        assert!(
            added,
            "tollgate::Semaphore::add_permits: the limit would go above Semaphore::MAX_PERMITS (2^31 - 1)"
        );
    }

    /// Forgets up to `n` of the permits free right now, lowering the limit by as many;
    /// returns how many. Permits held are untouched (use [`set_limit`](Self::set_limit)
    /// to lower the limit below what is held), and the limit never goes below 1.
    /// Waiters asking for more than the new limit step aside, as after
    /// [`set_limit`](Self::set_limit).
    ///
    /// # Examples
    ///
    /// ```
    /// let semaphore = tollgate::Semaphore::new(5);
    /// let held = semaphore.try_acquire_many(2).unwrap();
    /// assert_eq!(semaphore.forget_permits(10), 3); // only 3 were free
    /// assert_eq!(semaphore.limit(), 2);
    /// drop(held);
    /// assert_eq!(semaphore.forget_permits(10), 1); // the limit stays at 1 at least
    /// assert_eq!(semaphore.limit(), 1);
    /// ```
    pub fn forget_permits(&self, n: usize) -> usize {
        self.core.forget(n)
    }

    /// How many permits are free right now.
    ///
    /// Permits being handed to a waiter count as taken.
    pub fn available_permits(&self) -> usize {
        self.core.available()
    }

    /// How many acquires are waiting in the queue right now (those that stepped aside
    /// included).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::pin::pin;
    /// use futures_lite::future::poll_once;
    ///
    /// # futures_lite::future::block_on(async {
    /// let semaphore = tollgate::Semaphore::new(1);
    /// let held = semaphore.acquire().await?;
    /// let mut waiter = pin!(semaphore.acquire());
    /// assert!(poll_once(waiter.as_mut()).await.is_none());
    /// assert_eq!(semaphore.waiting(), 1);
    /// drop(held); // handed straight to the waiter
    /// assert_eq!(semaphore.waiting(), 0);
    /// assert!(poll_once(waiter).await.is_some());
    /// # Ok::<(), tollgate::SemaphoreError>(())
    /// # }).unwrap();
    /// ```
    pub fn waiting(&self) -> usize {
        self.core.waiting()
    }

    /// The limit in force: the number of permits the semaphore was created with, as
    /// changed since by [`set_limit`](Self::set_limit),
    /// [`add_permits`](Self::add_permits) and [`forget_permits`](Self::forget_permits).
    ///
    /// # Examples
    ///
    /// ```
    /// let semaphore = tollgate::Semaphore::new(3);
    /// semaphore.set_limit(7);
    /// assert_eq!(semaphore.limit(), 7);
    /// ```
    pub fn limit(&self) -> usize {
        self.core.limit()
    }

    /// The max weight: the most permits one acquire may ask for. A request above it fails
    /// at once with [`SemaphoreError::is_over_limit`]; a request above the limit in force but
    /// not above the max weight steps aside and waits for the limit to grow (see
    /// [`acquire_many`](Self::acquire_many)).
    ///
    /// By default the highest limit the semaphore has had: the one it was created with,
    /// raised by every resize above it. So a request queued while the limit is lowered
    /// waits for it to grow back, and one no limit so far could have served fails.
    /// [`set_max_weight`](Self::set_max_weight) sets it for good.
    ///
    /// # Examples
    ///
    /// ```
    /// let semaphore = tollgate::Semaphore::new(1024);
    /// semaphore.set_limit(256);
    /// assert_eq!(semaphore.max_weight(), 1024); // a shrink keeps it
    /// semaphore.set_limit(2048);
    /// assert_eq!(semaphore.max_weight(), 2048); // a grow above it raises it
    /// ```
    pub fn max_weight(&self) -> usize {
        self.core.max_weight()
    }

    /// Sets the [max weight](Self::max_weight), the most permits one acquire may ask for,
    /// for good: resizes no longer raise it. It may be below the limit in force (a cap on
    /// each request's share) or above every limit so far (so that large requests wait for
    /// a limit that is to grow).
    ///
    /// Acquires asking for more fail at once with [`SemaphoreError::is_over_limit`], and so
    /// do the waiters already queued that ask for more (they are woken with it, and the
    /// ones behind them go on).
    ///
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// let bytes = tollgate::Semaphore::new(1024);
    /// bytes.set_max_weight(512); // no single request above 512
    /// assert!(bytes.acquire_many(600).await.unwrap_err().is_over_limit());
    /// bytes.set_max_weight(4096); // requests up to 4096 wait for the limit to grow
    /// assert!(bytes.try_acquire_many(2048).unwrap_err().is_busy());
    /// # Ok::<(), tollgate::SemaphoreError>(())
    /// # }).unwrap();
    /// ```
    ///
    /// # Panics
    ///
    /// Panics when `max_weight` is 0 or above [`MAX_PERMITS`](Self::MAX_PERMITS).
    #[track_caller]
    pub fn set_max_weight(&self, max_weight: usize) {
        assert!(
            max_weight > 0,
            "tollgate::Semaphore::set_max_weight: a max weight of 0 would refuse every acquire; use at least 1"
        );
        assert!(
            max_weight <= Self::MAX_PERMITS,
            "tollgate::Semaphore::set_max_weight: more than Semaphore::MAX_PERMITS (2^31 - 1) permits"
        );
        self.core.set_max_weight(max_weight as u64);
    }
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Semaphore")
            .field("limit", &self.limit())
            .field("max_weight", &self.max_weight())
            .field("available", &self.available_permits())
            .field("waiting", &self.waiting())
            .field("closed", &self.is_closed())
            .finish_non_exhaustive()
    }
}

/// The wait both acquire futures share: a place in the queue, the number of permits
/// asked for, and the handle to the semaphore (a reference or an `Arc`) until the permits
/// are granted.
struct Acquiring<S: Deref<Target = Semaphore>> {
    semaphore: Option<S>,
    waiter: Waiter,
    /// As asked for (the error reports it).
    requested: usize,
}

impl<S: Deref<Target = Semaphore>> Acquiring<S> {
    #[inline]
    fn new(semaphore: S, requested: usize) -> Self {
        Self {
            semaphore: Some(semaphore),
            waiter: Waiter::new(),
            requested,
        }
    }

    /// Hands back the semaphore once the permits are taken for the caller.
    #[inline]
    fn poll_take(
        &mut self,
        cx: &mut Context<'_>,
        name: &str,
    ) -> Poll<Result<(S, u32), SemaphoreError>> {
        let semaphore = match &self.semaphore {
            Some(semaphore) => semaphore,
            None => panic!("{name} polled after completion"),
        };
        let permits = count(self.requested);
        match semaphore
            .core
            .poll_acquire(&mut self.waiter, cx, permits, usize::MAX)
        {
            Poll::Ready(Ok(())) => {
                Poll::Ready(Ok((self.semaphore.take().expect("checked above"), permits)))
            }
            Poll::Ready(Err(refusal)) => Poll::Ready(Err(self.refused(refusal))),
            Poll::Pending => Poll::Pending,
        }
    }

    #[cold]
    fn refused(&mut self, refusal: Refusal) -> SemaphoreError {
        let semaphore = self.semaphore.take().expect("checked by poll_take");
        let reason = match refusal {
            Refusal::OverLimit => Reason::OverLimit,
            // Only a `try_` acquire is told busy.
            Refusal::Busy => Reason::Busy,
            // The queue is unbounded: only closing refuses otherwise.
            Refusal::Closed | Refusal::QueueFull => Reason::Closed,
        };
        semaphore.error(reason, self.requested)
    }
}

impl<S: Deref<Target = Semaphore>> Drop for Acquiring<S> {
    fn drop(&mut self) {
        if let Some(semaphore) = &self.semaphore {
            semaphore.core.abandon(&mut self.waiter);
        }
    }
}

/// Future returned by [`Semaphore::acquire`] and [`Semaphore::acquire_many`].
#[must_use = "futures do nothing unless you `.await` or poll them"]
pub struct SemaphoreAcquire<'a>(Acquiring<&'a Semaphore>);

impl fmt::Debug for SemaphoreAcquire<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SemaphoreAcquire")
            .field("permits", &self.0.requested)
            .finish_non_exhaustive()
    }
}

impl<'a> Future for SemaphoreAcquire<'a> {
    type Output = Result<SemaphorePermit<'a>, SemaphoreError>;

    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.0
            .poll_take(cx, "SemaphoreAcquire")
            .map_ok(|(semaphore, permits)| SemaphorePermit { semaphore, permits })
    }
}

/// Future returned by [`Semaphore::acquire_arc`] and [`Semaphore::acquire_many_arc`].
#[must_use = "futures do nothing unless you `.await` or poll them"]
pub struct SemaphoreAcquireArc(Acquiring<Arc<Semaphore>>);

impl fmt::Debug for SemaphoreAcquireArc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SemaphoreAcquireArc")
            .field("permits", &self.0.requested)
            .finish_non_exhaustive()
    }
}

impl Future for SemaphoreAcquireArc {
    type Output = Result<SemaphorePermitArc, SemaphoreError>;

    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.0
            .poll_take(cx, "SemaphoreAcquireArc")
            .map_ok(|(semaphore, permits)| SemaphorePermitArc { semaphore, permits })
    }
}

/// Permits of a [`Semaphore`] (one, or `n` from an `acquire_many`), all given back when
/// dropped.
#[clippy::has_significant_drop]
#[must_use = "the permit is released as soon as it is dropped"]
pub struct SemaphorePermit<'a> {
    semaphore: &'a Semaphore,
    permits: u32,
}

impl SemaphorePermit<'_> {
    /// How many permits this holds (and gives back when dropped).
    ///
    /// # Examples
    ///
    /// ```
    /// let semaphore = tollgate::Semaphore::new(8);
    /// assert_eq!(semaphore.try_acquire_many(3).unwrap().permits(), 3);
    /// ```
    pub fn permits(&self) -> usize {
        self.permits as usize
    }
}

impl fmt::Debug for SemaphorePermit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SemaphorePermit")
            .field("permits", &self.permits)
            .finish_non_exhaustive()
    }
}

impl Drop for SemaphorePermit<'_> {
    #[inline]
    fn drop(&mut self) {
        self.semaphore.core.release(self.permits);
    }
}

/// Permits of a [`Semaphore`] that own an `Arc` of it, so they can move into a spawned
/// task; all given back when dropped.
#[clippy::has_significant_drop]
#[must_use = "the permit is released as soon as it is dropped"]
pub struct SemaphorePermitArc {
    semaphore: Arc<Semaphore>,
    permits: u32,
}

impl SemaphorePermitArc {
    /// How many permits this holds (and gives back when dropped).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    ///
    /// let semaphore = Arc::new(tollgate::Semaphore::new(8));
    /// assert_eq!(semaphore.try_acquire_many_arc(3).unwrap().permits(), 3);
    /// ```
    pub fn permits(&self) -> usize {
        self.permits as usize
    }
}

impl fmt::Debug for SemaphorePermitArc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SemaphorePermitArc")
            .field("permits", &self.permits)
            .finish_non_exhaustive()
    }
}

impl Drop for SemaphorePermitArc {
    #[inline]
    fn drop(&mut self) {
        self.semaphore.core.release(self.permits);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Waker;

    /// Regression: the public `Semaphore` carried the bulkheads' statistics (an admission
    /// count in its state word, a peak and a rejection count); a plain semaphore now
    /// counts nothing beside its permits.
    #[test]
    fn a_plain_semaphore_keeps_no_admission_count() {
        let semaphore = Semaphore::new(2);
        for _ in 0..1000 {
            drop(semaphore.try_acquire().unwrap());
        }
        assert_eq!(
            semaphore.core.state(),
            2,
            "two permits available, no count bits"
        );
        assert_eq!(size_of::<Core<()>>(), size_of::<Semaphore>());
    }

    /// Regression: after 1,000,000 waiters of which one stayed, the waiter queue kept
    /// about 40 MB until the last one left.
    #[test]
    fn a_burst_of_a_million_waiters_down_to_one_gives_its_memory_back() {
        const BURST: usize = 1_000_000;
        let semaphore = Semaphore::new(1);
        let held = semaphore.try_acquire().unwrap();
        let mut context = Context::from_waker(Waker::noop());
        let mut waiters: Vec<_> = (0..BURST).map(|_| semaphore.acquire()).collect();
        for waiter in &mut waiters {
            assert!(Pin::new(waiter).poll(&mut context).is_pending());
        }
        assert!(semaphore.core.queue_footprint() > 30 << 20);
        // Half leave by cancellation, then the permit goes down the queue, FIFO, until
        // only the last waiter is left.
        let mut last = waiters.pop().unwrap();
        let mut granted: Vec<_> = waiters.drain(BURST / 2..).collect();
        waiters.clear();
        drop(held);
        for waiter in &mut granted {
            let permit = Pin::new(waiter).poll(&mut context);
            assert!(permit.is_ready(), "granted in arrival order");
        }
        drop(granted);
        // The last waiter has been granted the permit (its node freed), not yet polled.
        assert_eq!((semaphore.waiting(), semaphore.available_permits()), (0, 0));
        let kept = semaphore.core.queue_footprint();
        assert!(kept < 1 << 20, "{kept} bytes kept for one waiter");
        assert!(Pin::new(&mut last).poll(&mut context).is_ready());
        assert_eq!(semaphore.core.queue_footprint(), 0);
    }
}
