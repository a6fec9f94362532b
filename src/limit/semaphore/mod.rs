//! [`Semaphore`]: a strictly fair (FIFO) async semaphore that also works from blocking threads.
//!
//! The public type is a thin wrapper: the algorithm (and its invariants) is in [`core`],
//! the waiter queue in [`queue`]. Bulkheads use the same core with admission counters,
//! which a plain semaphore does not carry.

pub(crate) mod core;
mod queue;

use std::fmt;
use std::future::Future;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use self::core::{Core, Waiter};

/// A counter for limiting concurrent work, fair to waiters and usable from any executor
/// and from blocking threads.
///
/// Permits go to waiters strictly in arrival order: a permit released while anyone waits is
/// handed to the oldest waiter, and [`try_acquire`](Self::try_acquire) never takes a permit
/// while someone waits. (`async_lock::Semaphore` gives a released permit to whoever polls
/// first, so a steady stream of newcomers can starve an old waiter.) The semaphore counts
/// its waiters ([`waiting`](Self::waiting)).
///
/// It depends on no runtime: waiters are woken through their [`Waker`](std::task::Waker), so it works under
/// smol, tokio, async-std, `futures::executor` and [`run_sync`](crate::run_sync), and
/// [`acquire_blocking`](Self::acquire_blocking) parks a plain thread.
///
/// Most code wants a [`Bulkhead`](crate::Bulkhead) instead: the same semaphore per runtime,
/// plus an acquire timeout, a bounded queue and statistics.
///
/// # Examples
///
/// ```
/// use tollgate::Semaphore;
///
/// static DOWNLOADS: Semaphore = Semaphore::new(2);
///
/// # futures_lite::future::block_on(async {
/// let first = DOWNLOADS.acquire().await;
/// let second = DOWNLOADS.acquire().await;
/// assert!(DOWNLOADS.try_acquire().is_none());
/// drop(first);
/// assert_eq!(DOWNLOADS.available_permits(), 1);
/// # drop(second);
/// # });
/// ```
pub struct Semaphore {
    core: Core<()>,
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
            assert!(
                permits > 0,
                "tollgate::Semaphore::new: 0 permits would block every acquire forever; use at least 1"
            );
            assert!(
                permits <= Self::MAX_PERMITS,
                "tollgate::Semaphore::new: more than Semaphore::MAX_PERMITS (2^31 - 1) permits"
            );
            Self {
                core: Core::new(permits, ()),
            }
        }
    }

    /// Takes a permit if one is free and nobody is waiting for one.
    ///
    /// # Examples
    ///
    /// ```
    /// let semaphore = tollgate::Semaphore::new(1);
    /// let permit = semaphore.try_acquire().unwrap();
    /// assert!(semaphore.try_acquire().is_none());
    /// drop(permit);
    /// assert!(semaphore.try_acquire().is_some());
    /// ```
    #[inline]
    pub fn try_acquire(&self) -> Option<SemaphorePermit<'_>> {
        // Not `then_some`: a permit built for a failed attempt would release on drop.
        self.core
            .try_take()
            .then(|| SemaphorePermit { semaphore: self })
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
    /// assert!(semaphore.try_acquire_arc().is_none());
    /// drop(permit);
    /// ```
    pub fn try_acquire_arc(self: &Arc<Self>) -> Option<SemaphorePermitArc> {
        self.core.try_take().then(|| SemaphorePermitArc {
            semaphore: self.clone(),
        })
    }

    /// Waits for a permit, behind everyone already waiting.
    ///
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// let semaphore = tollgate::Semaphore::new(2);
    /// let permit = semaphore.acquire().await;
    /// assert_eq!(semaphore.available_permits(), 1);
    /// drop(permit);
    /// # });
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Cancelling the future (dropping it before it completes) loses its place in the
    /// queue. If a permit had already been handed to it, that permit goes on to the next
    /// waiter: nothing leaks.
    #[inline]
    pub fn acquire(&self) -> SemaphoreAcquire<'_> {
        SemaphoreAcquire(Acquiring::new(self))
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
    /// let permit = semaphore.acquire_arc().await;
    /// std::thread::spawn(move || drop(permit)).join().unwrap();
    /// assert_eq!(semaphore.available_permits(), 2);
    /// # });
    /// ```
    ///
    /// # Cancel safety
    ///
    /// As [`acquire`](Self::acquire): cancelling loses the place in the queue, and a
    /// permit already handed over goes on to the next waiter.
    #[inline]
    pub fn acquire_arc(self: &Arc<Self>) -> SemaphoreAcquireArc {
        SemaphoreAcquireArc(Acquiring::new(self.clone()))
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
    ///             let _permit = semaphore.acquire_blocking();
    ///             // at most two threads are here at once
    ///         });
    ///     }
    /// });
    /// assert_eq!(semaphore.available_permits(), 2);
    /// ```
    pub fn acquire_blocking(&self) -> SemaphorePermit<'_> {
        match self.try_acquire() {
            Some(permit) => permit,
            None => crate::sync::block_on(self.acquire()),
        }
    }

    /// How many permits are free right now.
    ///
    /// A permit that is being handed to a waiter counts as taken.
    pub fn available_permits(&self) -> usize {
        self.core.limit() - self.core.in_flight()
    }

    /// How many `acquire` calls are waiting in the queue right now.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::pin::pin;
    /// use futures_lite::future::poll_once;
    ///
    /// # futures_lite::future::block_on(async {
    /// let semaphore = tollgate::Semaphore::new(1);
    /// let held = semaphore.acquire().await;
    /// let mut waiter = pin!(semaphore.acquire());
    /// assert!(poll_once(waiter.as_mut()).await.is_none());
    /// assert_eq!(semaphore.waiting(), 1);
    /// drop(held); // handed straight to the waiter
    /// assert_eq!(semaphore.waiting(), 0);
    /// assert!(poll_once(waiter).await.is_some());
    /// # });
    /// ```
    pub fn waiting(&self) -> usize {
        self.core.waiting()
    }

    /// The number of permits the semaphore was created with.
    pub fn limit(&self) -> usize {
        self.core.limit()
    }
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Semaphore")
            .field("limit", &self.limit())
            .field("available", &self.available_permits())
            .field("waiting", &self.waiting())
            .finish_non_exhaustive()
    }
}

/// The wait both acquire futures share: a place in the queue, and the handle to the
/// semaphore (a reference or an `Arc`) until the permit is granted.
struct Acquiring<S: Deref<Target = Semaphore>> {
    semaphore: Option<S>,
    waiter: Waiter,
}

impl<S: Deref<Target = Semaphore>> Acquiring<S> {
    #[inline]
    fn new(semaphore: S) -> Self {
        Self {
            semaphore: Some(semaphore),
            waiter: Waiter::new(),
        }
    }

    /// Hands back the semaphore once a permit is taken for the caller.
    #[inline]
    fn poll_take(&mut self, cx: &mut Context<'_>, name: &str) -> Poll<S> {
        let semaphore = match &self.semaphore {
            Some(semaphore) => semaphore,
            None => panic!("{name} polled after completion"),
        };
        match semaphore
            .core
            .poll_acquire(&mut self.waiter, cx, usize::MAX)
        {
            Poll::Ready(_) => Poll::Ready(self.semaphore.take().expect("checked above")),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S: Deref<Target = Semaphore>> Drop for Acquiring<S> {
    fn drop(&mut self) {
        if let Some(semaphore) = &self.semaphore {
            semaphore.core.abandon(&mut self.waiter);
        }
    }
}

/// Future returned by [`Semaphore::acquire`].
#[must_use = "futures do nothing unless you `.await` or poll them"]
pub struct SemaphoreAcquire<'a>(Acquiring<&'a Semaphore>);

impl fmt::Debug for SemaphoreAcquire<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SemaphoreAcquire").finish_non_exhaustive()
    }
}

impl<'a> Future for SemaphoreAcquire<'a> {
    type Output = SemaphorePermit<'a>;

    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.0
            .poll_take(cx, "SemaphoreAcquire")
            .map(|semaphore| SemaphorePermit { semaphore })
    }
}

/// Future returned by [`Semaphore::acquire_arc`].
#[must_use = "futures do nothing unless you `.await` or poll them"]
pub struct SemaphoreAcquireArc(Acquiring<Arc<Semaphore>>);

impl fmt::Debug for SemaphoreAcquireArc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SemaphoreAcquireArc")
            .finish_non_exhaustive()
    }
}

impl Future for SemaphoreAcquireArc {
    type Output = SemaphorePermitArc;

    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.0
            .poll_take(cx, "SemaphoreAcquireArc")
            .map(|semaphore| SemaphorePermitArc { semaphore })
    }
}

/// A permit of a [`Semaphore`], released when dropped.
#[clippy::has_significant_drop]
#[must_use = "the permit is released as soon as it is dropped"]
pub struct SemaphorePermit<'a> {
    semaphore: &'a Semaphore,
}

impl fmt::Debug for SemaphorePermit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SemaphorePermit").finish_non_exhaustive()
    }
}

impl Drop for SemaphorePermit<'_> {
    #[inline]
    fn drop(&mut self) {
        self.semaphore.core.release();
    }
}

/// A permit of a [`Semaphore`] that owns an `Arc` of it, so it can move into a spawned
/// task; released when dropped.
#[clippy::has_significant_drop]
#[must_use = "the permit is released as soon as it is dropped"]
pub struct SemaphorePermitArc {
    semaphore: Arc<Semaphore>,
}

impl fmt::Debug for SemaphorePermitArc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SemaphorePermitArc").finish_non_exhaustive()
    }
}

impl Drop for SemaphorePermitArc {
    #[inline]
    fn drop(&mut self) {
        self.semaphore.core.release();
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
        assert_eq!(semaphore.core.state(), 0);
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
