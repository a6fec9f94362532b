//! [`RateLimiter`]: one [`Rate`] for the whole process, on one atomic word.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use super::RateLimitError;
use super::gcra::{Gcra, Rate};
use super::wait::ReservedWait;
use crate::runtime::Clock;

/// A limit on how many starts happen per unit of time: at most [`Rate`]'s burst at once,
/// then one per interval (GCRA, the generic cell rate algorithm, on one atomic word).
///
/// Where a [`Bulkhead`](crate::Bulkhead) caps how many requests *run at once*, a
/// `RateLimiter` caps how many *start per second*: a crawl delay, an API quota. Ask
/// before each start: [`check`](Self::check) answers at once (with when to try again),
/// [`until_ready`](Self::until_ready) waits for a start, and
/// [`until_ready_blocking`](Self::until_ready_blocking) blocks a thread until one.
///
/// **One rate per process.** A rate protects whatever is on the other side (a server does
/// not care which runtime sent a request), and unlike a bulkhead's permits nothing in it is
/// bound to a runtime: a `static` limiter used from several [`run_sync`](crate::run_sync)
/// calls, tokio runtimes and threads lets through the rate in total, not per runtime.
///
/// **The caller's clock.** Each call reads the time where it runs: with the `tokio` feature,
/// inside a tokio runtime, tokio's clock (so `tokio::time::pause()` and
/// `#[tokio::test(start_paused = true)]` tests take no wall time); the system's monotonic
/// clock everywhere else, and always in [`until_ready_blocking`](Self::until_ready_blocking).
/// A limiter shared between a paused tokio runtime and real-time code mixes two clocks that
/// disagree (the paused one jumps ahead or stands still): give each its own limiter. A check
/// reads the system's clock through the CPU's counter (the invariant time-stamp counter on
/// x86-64, the system counter on AArch64), a few nanoseconds where a read of the system clock
/// costs tens, anchored to the system's clock every millisecond and within tens of
/// nanoseconds of it; the first check of a process calibrates the counter (about a
/// millisecond, at most 200 ms). Without such a counter it reads the system's clock. A waiter
/// sleeps until its start on its timer's own clock and checks it there: it never wakes early
/// by [`Instant`](std::time::Instant).
///
/// **Waiters reserve their start.** An [`until_ready`](Self::until_ready) that cannot start
/// at once reserves the next free start (even one that lies ahead) and sleeps until then.
/// Waiters are served in the order they asked, each wakes once (no stampede when a start
/// frees up), and [`check`](Self::check) never takes a start a waiter holds. A waiter
/// dropped before its time gives its start back if nobody reserved after it; otherwise the
/// start stays unused. The limiter may under-use the rate, never exceed it. The rate holds
/// for the moments the limiter allows starts; a task its executor wakes late starts late.
///
/// # Examples
///
/// ```
/// use tollgate::{Rate, RateLimiter};
///
/// // Two requests per second, at most two at once after a quiet second.
/// static SEARCH_API: RateLimiter = RateLimiter::new(Rate::per_second(2).burst(2));
///
/// async fn search(query: &str) -> String {
///     SEARCH_API.until_ready().await;
///     format!("results for {query}") // the request, simulated
/// }
///
/// # futures_lite::future::block_on(async {
/// assert_eq!(search("a").await, "results for a");
/// assert_eq!(search("b").await, "results for b"); // the burst: no wait
/// let refused = SEARCH_API.check().unwrap_err(); // a third start must wait ~500ms
/// assert!(refused.retry_after().as_millis() <= 500);
/// # });
/// ```
#[doc(alias = "governor")]
#[doc(alias = "throttle")]
#[doc(alias = "max_per_second")]
pub struct RateLimiter {
    rate: Rate,
    gcra: Gcra,
    /// The theoretical arrival time, in nanoseconds since the process origin (see
    /// `gcra.rs`): the whole state. Relaxed ordering: no other memory is published with it,
    /// and compare-exchange on one word is ordered by itself.
    tat: AtomicU64,
}

impl RateLimiter {
    /// Creates a limiter that lets `rate` starts through: its burst at once after a quiet
    /// spell, then one per interval. One limiter per process (see the type's docs).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use tollgate::{Rate, RateLimiter};
    ///
    /// static CRAWL_DELAY: RateLimiter = RateLimiter::new(Rate::every(Duration::from_secs(2)));
    /// let quota = Arc::new(RateLimiter::new(Rate::per_minute(600).burst(10)));
    /// assert_eq!(quota.rate().interval(), Duration::from_millis(100));
    /// # let _ = &CRAWL_DELAY;
    /// ```
    pub const fn new(rate: Rate) -> Self {
        Self {
            rate,
            gcra: Gcra::new(rate),
            tat: AtomicU64::new(0),
        }
    }

    /// The rate this limiter lets through.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Rate, RateLimiter};
    ///
    /// let limiter = RateLimiter::new(Rate::per_second(5));
    /// assert_eq!(limiter.rate(), Rate::per_second(5));
    /// ```
    pub fn rate(&self) -> Rate {
        self.rate
    }

    /// Takes a start if the rate allows one now, without waiting.
    ///
    /// A start reserved by a waiting [`until_ready`](Self::until_ready) is not free: a
    /// check never jumps the queue.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Rate, RateLimiter};
    ///
    /// let limiter = RateLimiter::new(Rate::per_second(1));
    /// assert!(limiter.check().is_ok());
    /// match limiter.check() {
    ///     Ok(()) => unreachable!("one start per second"),
    ///     Err(refused) => assert!(refused.retry_after().as_millis() <= 1000),
    /// }
    /// ```
    ///
    /// # Errors
    ///
    /// [`RateLimitError`] when the rate allows no start yet: it says how long until one
    /// ([`retry_after`](RateLimitError::retry_after)). Nothing is taken then.
    #[inline]
    pub fn check(&self) -> Result<(), RateLimitError> {
        let now = Clock::Async.now();
        let mut tat = self.tat.load(Ordering::Relaxed);
        loop {
            match self.gcra.decide(tat, now) {
                Ok(next) => {
                    match self.tat.compare_exchange_weak(
                        tat,
                        next,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    ) {
                        Ok(_) => return Ok(()),
                        Err(actual) => tat = actual,
                    }
                }
                Err(allowed_at) => return Err(RateLimitError::new(now, allowed_at)),
            }
        }
    }

    /// Waits until the rate allows a start, then takes it.
    ///
    /// The first poll reserves the next free start (see the type's docs: waiters are
    /// served in the order they first polled, each wakes once); the future completes at
    /// that time, at once if the start is free now.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use tollgate::{Rate, RateLimiter};
    ///
    /// let limiter = RateLimiter::new(Rate::every(Duration::from_millis(20)));
    /// # futures_lite::future::block_on(async {
    /// let begin = Instant::now();
    /// for _ in 0..3 {
    ///     limiter.until_ready().await;
    /// }
    /// assert!(begin.elapsed() >= Duration::from_millis(40)); // 0, 20 and 40 ms
    /// # });
    /// ```
    ///
    /// # Panics
    ///
    /// If the future is polled again after it completed. With the `tokio` feature, inside
    /// a tokio runtime without its time driver, when it must wait (as
    /// [`sleep`](crate::sleep) does).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes gives its reserved start back when no
    /// later start was reserved since (the next caller can take it); otherwise that start
    /// stays unused, so a cancelled waiter can make the limiter under-use the rate but never
    /// exceed it. Dropping it after completion changes nothing: the start was taken.
    pub fn until_ready(&self) -> UntilReady<'_> {
        UntilReady::new(self, Clock::Async)
    }

    /// Blocks the calling thread until the rate allows a start, then takes it: the
    /// blocking form of [`until_ready`](Self::until_ready), in the same queue.
    ///
    /// For plain threads (and tokio's `spawn_blocking`); calling it from async code blocks
    /// the executor's thread. It reads the system's clock and sleeps on it, even where a
    /// paused tokio runtime is current (a blocked thread lives outside the runtime's time).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Rate, RateLimiter};
    ///
    /// static DISK_SCAN: RateLimiter = RateLimiter::new(Rate::every(Duration::from_millis(5)));
    ///
    /// std::thread::scope(|scope| {
    ///     for _ in 0..4 {
    ///         scope.spawn(|| {
    ///             DISK_SCAN.until_ready_blocking();
    ///             // at most one thread starts per 5 ms
    ///         });
    ///     }
    /// });
    /// ```
    pub fn until_ready_blocking(&self) {
        crate::runtime::block_on_real_time(UntilReady::new(self, Clock::Blocking));
    }

    /// Reserves the next free start at or after `now`: `(reserved_tat, start_at)`.
    #[inline]
    fn reserve(&self, now: u64) -> (u64, u64) {
        let mut tat = self.tat.load(Ordering::Relaxed);
        loop {
            let (next, start_at) = self.gcra.reserve(tat, now);
            match self
                .tat
                .compare_exchange_weak(tat, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return (next, start_at),
                Err(actual) => tat = actual,
            }
        }
    }

    /// Gives back the start reserved with `reserved_tat` if nothing was reserved or taken
    /// after it (otherwise the state has moved on and the start stays unused).
    fn give_back(&self, reserved_tat: u64) {
        let _ = self.tat.compare_exchange(
            reserved_tat,
            self.gcra.unreserve(reserved_tat),
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }
}

impl fmt::Debug for RateLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimiter")
            .field("rate", &self.rate)
            .finish_non_exhaustive()
    }
}

pin_project_lite::pin_project! {
    /// Future returned by [`RateLimiter::until_ready`]: completes once the limiter allows
    /// a start, having taken it.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::futures::UntilReady;
    /// use tollgate::{Rate, RateLimiter};
    ///
    /// static API: RateLimiter = RateLimiter::new(Rate::per_second(100));
    ///
    /// struct Request {
    ///     turn: UntilReady<'static>,
    /// }
    ///
    /// # futures_lite::future::block_on(async {
    /// let request = Request { turn: API.until_ready() };
    /// request.turn.await;
    /// # });
    /// ```
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    pub struct UntilReady<'a> {
        limiter: &'a RateLimiter,
        #[pin]
        wait: ReservedWait,
    }

    impl PinnedDrop for UntilReady<'_> {
        fn drop(this: Pin<&mut Self>) {
            if let Some(reserved_tat) = this.wait.reserved_tat() {
                this.limiter.give_back(reserved_tat);
            }
        }
    }
}

impl<'a> UntilReady<'a> {
    fn new(limiter: &'a RateLimiter, clock: Clock) -> Self {
        Self {
            limiter,
            wait: ReservedWait::new(clock),
        }
    }
}

impl Future for UntilReady<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.project();
        let limiter = *this.limiter;
        this.wait.poll(cx, "UntilReady", |now| limiter.reserve(now))
    }
}

impl fmt::Debug for UntilReady<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UntilReady")
            .field("limiter", self.limiter)
            .finish_non_exhaustive()
    }
}
