//! [`AdaptiveLimiter`]: one adaptive key for code outside maps. The limit is a
//! [`Semaphore`] resized to the key's limit, the rate the rate module's GCRA and reserved
//! wait; the key's state ([`KeyAdapt`]) sits behind one mutex with the rate's state.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll};

use super::config::Adaptive;
use super::core::KeyAdapt;
use crate::limit::outcome::Outcome;
use crate::limit::rate::gcra::{Gcra, Rate};
use crate::limit::rate::wait::ReservedWait;
use crate::limit::semaphore::{Semaphore, SemaphoreAcquire, SemaphorePermit};
use crate::runtime::Clock;
use crate::sync::lock;

/// One adaptive key: a limit and a rate that move by themselves between the floor and the
/// ceilings of an [`Adaptive`], from the outcomes the caller reports.
///
/// For code outside maps (a keyed map gives each of its keys the same rules with
/// `.adaptive(..)`). Before each attempt, [`acquire`](Self::acquire) waits for room under
/// the limit, then for the rate, without holding a thread; the attempt then runs under the
/// [`AdaptiveLimiterPermit`], and [`report`](AdaptiveLimiterPermit::report) says how it went: an
/// [`Outcome`] and the time since the permit was granted (its latency) are the key's
/// signals. The rules are in [`Adaptive`]'s docs.
///
/// **A permit dropped without a report is ignored**: its slot comes back, and nothing is
/// learnt from it: no latency sample, no cut, no credit. A cancelled attempt (a race that
/// another contestant won, a caller that gave up, an error before the request was sent) says
/// nothing about the server, and counting it as an overload would let cancellation lower
/// the limits.
///
/// **Latency** is the time from the permit's grant to its report, on the clock of the
/// runtime (tokio's paused clock too, with the `tokio` feature). Time the attempt's task
/// spent not polled counts as latency: report from the task that ran the attempt, as soon
/// as it ends.
///
/// # Examples
///
/// ```
/// use tollgate::{Adaptive, AdaptiveLimiter, Outcome, Rate};
///
/// async fn fetch(path: &str) -> u16 {
///     if path.is_empty() { 404 } else { 200 } // the request, simulated
/// }
///
/// let api = AdaptiveLimiter::new(Adaptive::new(1, 16).rate_ceiling(Rate::per_second(100)));
/// assert_eq!(api.limit(), 1); // starts low: at its floor
/// # futures_lite::future::block_on(async {
/// for path in ["a", "b", ""] {
///     let permit = api.acquire().await;
///     let outcome = match fetch(path).await {
///         200..=399 => Outcome::success(),
///         429 | 503 => Outcome::overload(),
///         _ => Outcome::failure(),
///     };
///     permit.report(outcome);
/// }
/// # });
/// assert!(api.limit() >= 1 && api.limit() <= 16);
/// ```
pub struct AdaptiveLimiter {
    config: Adaptive,
    /// The limit: resized to the key's limit whenever it changes.
    slots: Semaphore,
    state: Mutex<State>,
}

/// What the mutex guards: the key's state and its rate's.
#[derive(Debug)]
struct State {
    key: KeyAdapt,
    /// The key's rate as last read from `key`.
    gcra: Option<Gcra>,
    /// The rate's GCRA state (see the rate module).
    tat: u64,
    /// Permits granted and not yet reported or dropped.
    running: usize,
}

impl AdaptiveLimiter {
    /// A limiter whose limit and rate start low (see [`Adaptive::new`] and
    /// [`Adaptive::rate_ceiling`]) and move by themselves.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Adaptive, AdaptiveLimiter, Rate};
    ///
    /// let limiter = AdaptiveLimiter::new(Adaptive::new(1, 8).rate_ceiling(Rate::per_second(32)));
    /// assert_eq!(limiter.limit(), 1); // its floor
    /// // It starts low: 1.8 starts a second.
    /// let start = limiter.rate().unwrap().interval().as_secs_f64();
    /// assert!((1.0 / start - 1.8).abs() < 1e-3);
    /// ```
    pub fn new(adaptive: Adaptive) -> Self {
        let now = Clock::Async.now();
        let key = KeyAdapt::new(&adaptive, now);
        Self {
            slots: Semaphore::new(key.limit()),
            state: Mutex::new(State {
                gcra: key.rate(),
                key,
                tat: 0,
                running: 0,
            }),
            config: adaptive,
        }
    }

    /// Waits for room under the limit, then for the rate, and grants a permit.
    ///
    /// Waiters for room hold nothing and are served in the order they first polled (the
    /// [`Semaphore`]'s FIFO); a waiter that has room reserves its start under the rate (in
    /// the same order) and waits for it holding its slot.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Adaptive, AdaptiveLimiter, Outcome};
    ///
    /// let limiter = AdaptiveLimiter::new(Adaptive::new(2, 4));
    /// # futures_lite::future::block_on(async {
    /// let first = limiter.acquire().await;
    /// let second = limiter.acquire().await; // the limit starts at the floor, 2: both fit
    /// first.report(Outcome::success());
    /// drop(second); // ignored: no signal
    /// # });
    /// ```
    ///
    /// # Panics
    ///
    /// If the future is polled again after it completed. With the `tokio` feature, inside
    /// a tokio runtime without its time driver, when it must wait for the rate (as
    /// [`sleep`](crate::sleep) does).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes takes nothing and teaches the limiter
    /// nothing: a waiter for room leaves the queue; a waiter for the rate gives its slot
    /// back, and its reserved start too when nobody reserved after it (otherwise that start
    /// stays unused: the rate may be under-used, never exceeded).
    pub fn acquire(&self) -> AdaptiveAcquire<'_> {
        AdaptiveAcquire {
            limiter: self,
            slot: self.slots.acquire(),
            held: None,
            rate_waited: false,
            wait: ReservedWait::new(Clock::Async),
        }
    }

    /// The key's limit now: how many permits may be held at once.
    ///
    /// # Examples
    ///
    /// ```
    /// let limiter = tollgate::AdaptiveLimiter::new(tollgate::Adaptive::new(3, 10));
    /// assert_eq!(limiter.limit(), 3); // the floor is above the start of 2
    /// ```
    pub fn limit(&self) -> usize {
        lock(&self.state).key.limit()
    }

    /// The key's rate now (`None`: no rate yet, see [`Adaptive::new`]).
    ///
    /// # Examples
    ///
    /// ```
    /// let limiter = tollgate::AdaptiveLimiter::new(tollgate::Adaptive::new(1, 10));
    /// assert_eq!(limiter.rate(), None);
    /// ```
    pub fn rate(&self) -> Option<Rate> {
        lock(&self.state).key.current_rate()
    }

    /// The settings the limiter adapts within.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Adaptive, AdaptiveLimiter};
    ///
    /// let limiter = AdaptiveLimiter::new(Adaptive::new(1, 10));
    /// assert_eq!(limiter.adaptive().ceiling(), 10);
    /// ```
    pub fn adaptive(&self) -> &Adaptive {
        &self.config
    }

    /// Reserves the next start under the rate at `now`: `(reserved_tat, start_at)`.
    fn reserve(&self, now: u64) -> (u64, u64) {
        let mut state = lock(&self.state);
        match state.gcra {
            Some(gcra) => {
                let (tat, start_at) = gcra.reserve(state.tat, now);
                state.tat = tat;
                (tat, start_at)
            }
            None => (state.tat, now),
        }
    }

    /// A waiter for the rate was dropped: gives its start back if it was the latest.
    fn give_back(&self, reserved_tat: u64) {
        let mut state = lock(&self.state);
        if let Some(gcra) = state.gcra
            && state.tat == reserved_tat
        {
            state.tat = gcra.unreserve(reserved_tat);
        }
    }

    /// A permit is granted at `now` after waiting for the rate or not: the key's start.
    fn start(&self, now: u64, rate_waited: bool) {
        let mut state = lock(&self.state);
        state.running += 1;
        let running = state.running;
        state.key.started(now, running, rate_waited);
    }

    /// A permit granted at `started` ends: with a report, the key learns from it.
    fn end(&self, started: u64, outcome: Option<Outcome>) {
        let mut state = lock(&self.state);
        state.running -= 1;
        let Some(outcome) = outcome else { return };
        let now = Clock::Async.now();
        let latency = now.saturating_sub(started);
        if state
            .key
            .finished(&self.config, now, outcome, started, Some(latency))
        {
            let gcra = state.key.rate();
            if let (Some(old), Some(new)) = (state.gcra, gcra) {
                state.tat = new.carry_over(&old, state.tat, now);
            }
            state.gcra = gcra;
            // Under the lock, so that resizes follow the key's changes in order.
            self.slots.set_limit(state.key.limit());
        }
    }
}

impl fmt::Debug for AdaptiveLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = lock(&self.state);
        f.debug_struct("AdaptiveLimiter")
            .field("adaptive", &self.config)
            .field("limit", &state.key.limit())
            .field("rate", &state.key.current_rate())
            .field("running", &state.running)
            .finish_non_exhaustive()
    }
}

pin_project_lite::pin_project! {
    /// Future returned by [`AdaptiveLimiter::acquire`]: completes with a permit once the
    /// limiter has room and its rate allows a start.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::futures::AdaptiveAcquire;
    /// use tollgate::{Adaptive, AdaptiveLimiter};
    ///
    /// struct Request<'a> {
    ///     turn: AdaptiveAcquire<'a>,
    /// }
    ///
    /// let limiter = AdaptiveLimiter::new(Adaptive::new(1, 4));
    /// # futures_lite::future::block_on(async {
    /// let request = Request { turn: limiter.acquire() };
    /// drop(request.turn.await);
    /// # });
    /// ```
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    pub struct AdaptiveAcquire<'a> {
        limiter: &'a AdaptiveLimiter,
        slot: SemaphoreAcquire<'a>,
        held: Option<SemaphorePermit<'a>>,
        rate_waited: bool,
        #[pin]
        wait: ReservedWait,
    }

    impl PinnedDrop for AdaptiveAcquire<'_> {
        fn drop(this: Pin<&mut Self>) {
            if let Some(reserved_tat) = this.wait.reserved_tat() {
                this.limiter.give_back(reserved_tat);
            }
        }
    }
}

impl<'a> Future for AdaptiveAcquire<'a> {
    type Output = AdaptiveLimiterPermit<'a>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<AdaptiveLimiterPermit<'a>> {
        let this = self.project();
        let limiter = *this.limiter;
        if this.held.is_none() {
            let slot = std::task::ready!(Pin::new(this.slot).poll(cx))
                .expect("an adaptive limiter's semaphore is never closed, and 1 permit fits");
            *this.held = Some(slot);
        }
        let rate_waited = &mut *this.rate_waited;
        std::task::ready!(this.wait.poll(cx, "AdaptiveAcquire", |now| {
            let (tat, start_at) = limiter.reserve(now);
            *rate_waited = start_at > now;
            (tat, start_at)
        }));
        let now = Clock::Async.now();
        limiter.start(now, *this.rate_waited);
        Poll::Ready(AdaptiveLimiterPermit {
            limiter,
            slot: this.held.take(),
            started: now,
            reported: false,
        })
    }
}

impl fmt::Debug for AdaptiveAcquire<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdaptiveAcquire")
            .field("has_room", &self.held.is_some())
            .finish_non_exhaustive()
    }
}

/// The right to run one attempt under an [`AdaptiveLimiter`]; [`report`](Self::report)
/// says how it went. Dropped without a report, its slot comes back and the limiter learns
/// nothing from it (see the limiter's docs).
///
/// # Examples
///
/// ```
/// use tollgate::{Adaptive, AdaptiveLimiter, Outcome};
///
/// let limiter = AdaptiveLimiter::new(Adaptive::new(1, 4));
/// # futures_lite::future::block_on(async {
/// let permit = limiter.acquire().await; // a new limiter starts at its floor: 1 at a time
/// permit.report(Outcome::overload()); // the server said 503
/// drop(limiter.acquire().await); // cancelled: no report, nothing learnt
/// # });
/// assert_eq!(limiter.limit(), 1); // cut, but never below the floor
/// ```
#[clippy::has_significant_drop]
#[must_use = "the permit is released as soon as it is dropped; report how the attempt went"]
pub struct AdaptiveLimiterPermit<'a> {
    limiter: &'a AdaptiveLimiter,
    slot: Option<SemaphorePermit<'a>>,
    /// When it was granted, on the limiter's clock.
    started: u64,
    reported: bool,
}

impl AdaptiveLimiterPermit<'_> {
    /// Reports how the attempt went and gives the slot back: the outcome, with the time
    /// since the permit was granted as its latency, may move the limiter's limit and rate
    /// (see [`Adaptive`]'s docs).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Adaptive, AdaptiveLimiter, Outcome};
    ///
    /// let limiter = AdaptiveLimiter::new(Adaptive::new(1, 4));
    /// # futures_lite::future::block_on(async {
    /// limiter.acquire().await.report(Outcome::failure()); // a 404: changes nothing
    /// # });
    /// assert_eq!(limiter.limit(), 1);
    /// ```
    pub fn report(mut self, outcome: Outcome) {
        self.reported = true;
        self.limiter.end(self.started, Some(outcome));
    }
}

impl Drop for AdaptiveLimiterPermit<'_> {
    fn drop(&mut self) {
        if !self.reported {
            self.limiter.end(self.started, None);
        }
        // The slot goes back after the key's state moved (a shrink absorbs it first).
        drop(self.slot.take());
    }
}

impl fmt::Debug for AdaptiveLimiterPermit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdaptiveLimiterPermit")
            .field("limiter", self.limiter)
            .finish_non_exhaustive()
    }
}
