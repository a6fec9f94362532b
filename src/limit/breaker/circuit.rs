//! [`CircuitBreaker`]: one breaker for code outside maps, its core behind a mutex; the
//! permit ([`CircuitBreakerPermit`]) and the wait ([`BreakerAcquire`]).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll};

use event_listener::Event;

use super::config::Breaker;
use super::core::{BreakerCore, BreakerState, Refusal, Ticket};
use super::error::CircuitBreakerError;
use super::wait::ProbeWait;
use crate::limit::outcome::Outcome;
use crate::runtime::Clock;
use crate::sync::lock;

/// A circuit **breaker**: stops attempts at a server that keeps failing, and lets a few
/// **probes** through now and then to find when it is back.
///
/// Before each attempt, [`try_acquire`](Self::try_acquire) (fail at once) or
/// [`acquire`](Self::acquire) (wait, holding nothing) takes a [`CircuitBreakerPermit`]; the attempt
/// runs under it, and [`report`](CircuitBreakerPermit::report) says how it went. The rules (when it
/// opens, for how long, how probes close it) and the defaults are in [`Breaker`]'s docs. For
/// a breaker per host, see [`KeyedCircuitBreaker`](crate::KeyedCircuitBreaker).
///
/// **A permit dropped without a report says nothing**: closed, it is ignored (a cancelled
/// attempt says nothing about the server, and counting it as a failure would let
/// cancellation open the breaker); a probe dropped so frees its place for another probe.
///
/// Time is read on the clock of the runtime (tokio's, paused or not, inside a tokio runtime
/// with the `tokio` feature). A breaker is per process.
///
/// # Examples
///
/// ```
/// use tollgate::{Breaker, CircuitBreaker, CircuitBreakerError, Outcome};
///
/// static API: CircuitBreaker = CircuitBreaker::new(Breaker::new().min_attempts(3));
///
/// async fn fetch(up: bool) -> Result<u16, CircuitBreakerError> {
///     let permit = API.try_acquire()?;
///     let status = if up { 200 } else { 503 }; // the request, simulated
///     permit.report(match status {
///         200..=399 => Outcome::success(),
///         429 | 503 => Outcome::overload(),
///         _ => Outcome::failure(),
///     });
///     Ok(status)
/// }
///
/// # futures_lite::future::block_on(async {
/// for _ in 0..3 {
///     assert_eq!(fetch(false).await, Ok(503));
/// }
/// // Three attempts, all bad: open. Attempts fail at once for 30 s.
/// assert!(fetch(true).await.is_err());
/// # });
/// ```
pub struct CircuitBreaker {
    config: Breaker,
    core: Mutex<BreakerCore>,
    /// Notified when a probe ends.
    probe_ended: Event,
}

impl CircuitBreaker {
    /// A closed breaker with the settings of `breaker`. A `const fn`, so a breaker can be a
    /// `static`.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Breaker, BreakerState, CircuitBreaker};
    ///
    /// static PAYMENTS: CircuitBreaker = CircuitBreaker::new(Breaker::new());
    /// assert_eq!(PAYMENTS.state(), BreakerState::Closed);
    /// ```
    pub const fn new(breaker: Breaker) -> Self {
        Self {
            core: Mutex::new(BreakerCore::new(&breaker)),
            config: breaker,
            probe_ended: Event::new(),
        }
    }

    /// A permit if the breaker lets an attempt go now: closed, or half-open with a probe
    /// place free (the permit is then a probe). An open breaker whose open period has
    /// passed turns half-open here.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Breaker, CircuitBreaker, Outcome};
    ///
    /// let breaker = CircuitBreaker::new(Breaker::new());
    /// let permit = breaker.try_acquire()?;
    /// permit.report(Outcome::success());
    /// # Ok::<(), tollgate::CircuitBreakerError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`CircuitBreakerError`] when the breaker is open (it says when the next probe may go), or
    /// half-open with all its probes out.
    pub fn try_acquire(&self) -> Result<CircuitBreakerPermit<'_>, CircuitBreakerError> {
        match self.ask(0) {
            (Ok(ticket), _) => Ok(CircuitBreakerPermit::new(self, ticket)),
            (Err(refusal), now) => Err(CircuitBreakerError::new(refusal, now, None)),
        }
    }

    /// Waits until the breaker lets an attempt go, then grants a permit: at once when
    /// closed; when open, at the end of the open period (as a probe); when half-open with
    /// every probe out, when one of them ends. The wait holds nothing: no probe place, no
    /// thread.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Breaker, CircuitBreaker, Outcome};
    ///
    /// let breaker = CircuitBreaker::new(
    ///     Breaker::new().min_attempts(1).open_for(Duration::from_millis(10)),
    /// );
    /// # futures_lite::future::block_on(async {
    /// breaker.acquire().await.report(Outcome::failure()); // open for 10 ms
    /// let probe = breaker.acquire().await; // 10 ms later
    /// probe.report(Outcome::success()); // closed again
    /// # });
    /// ```
    ///
    /// # Panics
    ///
    /// If the future is polled again after it completed. With the `tokio` feature, inside
    /// a tokio runtime without its time driver, when it must wait for an open period to end
    /// (as [`sleep`](crate::sleep) does).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes takes nothing: it holds no place while it
    /// waits.
    pub fn acquire(&self) -> BreakerAcquire<'_> {
        BreakerAcquire {
            breaker: self,
            wait: ProbeWait::new(),
        }
    }

    /// The state now: an open breaker whose open period has passed reads as half-open.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Breaker, BreakerState, CircuitBreaker, Outcome};
    ///
    /// let breaker = CircuitBreaker::new(Breaker::new().min_attempts(1));
    /// breaker.try_acquire()?.report(Outcome::failure());
    /// assert_eq!(breaker.state(), BreakerState::Open);
    /// # Ok::<(), tollgate::CircuitBreakerError>(())
    /// ```
    pub fn state(&self) -> BreakerState {
        lock(&self.core).state(Clock::Async.now())
    }

    /// Asks the core for a permit; returns the answer and the time it was asked at.
    ///
    /// The clock is read once the lock is held (and taken as `not_before` at least): a time
    /// read before waiting for the lock may be older than an opening another thread made
    /// meanwhile, and the wait a refusal tells would then include the time spent waiting.
    fn ask(&self, not_before: u64) -> (Result<Ticket, Refusal>, u64) {
        let (granted, transition, now) = {
            let mut core = lock(&self.core);
            let now = Clock::Async.now().max(not_before);
            let (granted, transition) = core.try_acquire(&self.config, now);
            (granted, transition, now)
        };
        if let Some(transition) = transition {
            transition.emit(None);
        }
        (granted, now)
    }

    /// A permit ends: with a report, or dropped (`None`).
    fn end(&self, ticket: Ticket, success: Option<bool>) {
        let transition = {
            let mut core = lock(&self.core);
            match success {
                Some(success) => core.report(&self.config, Clock::Async.now(), ticket, success),
                None => {
                    core.release(ticket);
                    None
                }
            }
        };
        if let Some(transition) = transition {
            transition.emit(None);
        }
        if ticket.is_probe() {
            self.probe_ended.notify(usize::MAX);
        }
    }
}

impl fmt::Debug for CircuitBreaker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let now = Clock::Async.now();
        let core = lock(&self.core);
        f.debug_struct("CircuitBreaker")
            .field("breaker", &self.config)
            .field("state", &core.state(now))
            .field("permits_out", &core.permits_out())
            .finish_non_exhaustive()
    }
}

pin_project_lite::pin_project! {
    /// Future returned by [`CircuitBreaker::acquire`]: completes with a permit once the
    /// breaker lets an attempt go.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::futures::BreakerAcquire;
    /// use tollgate::{Breaker, CircuitBreaker};
    ///
    /// struct Request<'a> {
    ///     turn: BreakerAcquire<'a>,
    /// }
    ///
    /// let breaker = CircuitBreaker::new(Breaker::new());
    /// # futures_lite::future::block_on(async {
    /// let request = Request { turn: breaker.acquire() };
    /// drop(request.turn.await);
    /// # });
    /// ```
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    pub struct BreakerAcquire<'a> {
        breaker: &'a CircuitBreaker,
        #[pin]
        wait: ProbeWait,
    }
}

impl<'a> Future for BreakerAcquire<'a> {
    type Output = CircuitBreakerPermit<'a>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<CircuitBreakerPermit<'a>> {
        let this = self.project();
        let breaker = *this.breaker;
        this.wait
            .poll(cx, "BreakerAcquire", &breaker.probe_ended, |not_before| {
                breaker.ask(not_before).0
            })
            .map(|ticket| CircuitBreakerPermit::new(breaker, ticket))
    }
}

impl fmt::Debug for BreakerAcquire<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BreakerAcquire")
            .field("waiting", &self.wait.is_waiting())
            .finish_non_exhaustive()
    }
}

/// The right to run one attempt under a [`CircuitBreaker`]; [`report`](Self::report) says
/// how it went. Dropped without a report, it says nothing (see the breaker's docs).
///
/// # Examples
///
/// ```
/// use tollgate::{Breaker, CircuitBreaker, Outcome};
///
/// let breaker = CircuitBreaker::new(Breaker::new());
/// let permit = breaker.try_acquire()?;
/// assert!(!permit.is_probe()); // closed: an ordinary attempt
/// permit.report(Outcome::success());
/// # Ok::<(), tollgate::CircuitBreakerError>(())
/// ```
#[clippy::has_significant_drop]
#[must_use = "a permit dropped at once says nothing; report how the attempt went"]
pub struct CircuitBreakerPermit<'a> {
    breaker: &'a CircuitBreaker,
    ticket: Ticket,
    reported: bool,
}

impl<'a> CircuitBreakerPermit<'a> {
    fn new(breaker: &'a CircuitBreaker, ticket: Ticket) -> Self {
        Self {
            breaker,
            ticket,
            reported: false,
        }
    }

    /// Reports how the attempt went: a success counts good, a failure or an overload bad
    /// (see [`Breaker`]'s docs for what follows).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Breaker, BreakerState, CircuitBreaker, Outcome};
    ///
    /// let breaker = CircuitBreaker::new(Breaker::new().min_attempts(2));
    /// breaker.try_acquire()?.report(Outcome::overload()); // a 503
    /// assert_eq!(breaker.state(), BreakerState::Closed); // one attempt is too few
    /// breaker.try_acquire()?.report(Outcome::failure()); // a 500
    /// assert_eq!(breaker.state(), BreakerState::Open);
    /// # Ok::<(), tollgate::CircuitBreakerError>(())
    /// ```
    pub fn report(mut self, outcome: Outcome) {
        self.reported = true;
        self.breaker.end(self.ticket, Some(outcome.is_success()));
    }

    /// Whether this permit is a probe (granted while half-open): its outcome closes the
    /// breaker or opens it again.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Breaker, CircuitBreaker, Outcome};
    ///
    /// let breaker = CircuitBreaker::new(Breaker::new().min_attempts(1).open_for(Duration::ZERO));
    /// breaker.try_acquire()?.report(Outcome::failure()); // open, for no time at all
    /// let probe = breaker.try_acquire()?;
    /// assert!(probe.is_probe());
    /// # drop(probe);
    /// # Ok::<(), tollgate::CircuitBreakerError>(())
    /// ```
    pub fn is_probe(&self) -> bool {
        self.ticket.is_probe()
    }
}

impl Drop for CircuitBreakerPermit<'_> {
    fn drop(&mut self) {
        if !self.reported {
            self.breaker.end(self.ticket, None);
        }
    }
}

impl fmt::Debug for CircuitBreakerPermit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CircuitBreakerPermit")
            .field("probe", &self.is_probe())
            .finish_non_exhaustive()
    }
}
