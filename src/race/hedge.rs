//! What a timeout and a hedge add to a race ([`Extra`]): the timeout's timer, and a hedged
//! race's one timer for its next start, with the start of each contestant that is due
//! (see the module docs of [`race`](super) for how a hedged race is polled).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use super::core::{Core, Polled, record_failure};
use super::slot::{Slot, SlotProj, Visit};
use super::store::Contestants;
use super::woken::{Lending, poll_one};
use crate::runtime::RtSleep;
use crate::time::{Sleep, sleep};
use crate::wake::WakeSet;

pin_project_lite::pin_project! {
    /// What a timeout and a hedge add to a race, apart so a plain race carries one empty
    /// pointer for both.
    pub(super) struct Extra {
        timeout: Option<Duration>,
        // Started on the first poll when there is a timeout.
        #[pin]
        timer: Option<Sleep>,
        // Set for a hedged race.
        hedge: Option<Duration>,
        // Fires `hedge` after the latest start; set again at each start after which the
        // race has to wait (one timer for the race, not one per contestant). `None` until
        // then.
        #[pin]
        next_start: Option<RtSleep>,
    }
}

impl Extra {
    pub(super) fn new() -> Self {
        Self {
            timeout: None,
            timer: None,
            hedge: None,
            next_start: None,
        }
    }

    /// The race's timeout, if it has one.
    #[inline]
    pub(super) fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// The delay between two starts of a hedged race (`None`: not hedged).
    #[inline]
    pub(super) fn hedge(&self) -> Option<Duration> {
        self.hedge
    }

    /// Sets the race's timeout.
    #[inline]
    pub(super) fn set_timeout(self: Pin<&mut Self>, timeout: Duration) {
        *self.project().timeout = Some(timeout);
    }

    /// Makes the race hedged with this delay between two starts, or plain (`None`).
    #[inline]
    pub(super) fn set_hedge(self: Pin<&mut Self>, hedge: Option<Duration>) {
        *self.project().hedge = hedge;
    }

    /// On the race's first poll: starts the timeout's timer, if there is a timeout.
    /// Returns whether the race is hedged.
    #[inline]
    pub(super) fn arm(self: Pin<&mut Self>) -> bool {
        let mut this = self.project();
        if let Some(duration) = *this.timeout {
            this.timer.set(Some(sleep(duration)));
        }
        this.hedge.is_some()
    }

    /// Polls the timeout's timer: `Ready` with the timeout once it has fired, `Pending`
    /// until then and for a race without a timeout.
    #[inline]
    pub(super) fn poll_timeout(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Duration>> {
        let this = self.project();
        if let Some(timer) = this.timer.as_pin_mut() {
            if timer.poll(cx).is_ready() {
                return Poll::Ready(*this.timeout);
            }
        }
        Poll::Pending
    }

    /// Starts every contestant that is due: while some are left, the next one once every
    /// started one has failed or the timer has fired. Returns the winner's value if one
    /// of them wins on its first poll.
    ///
    /// Never inlined: kept out of the race's poll, so the plain race's poll stays small.
    #[inline(never)]
    pub(super) fn start_due<C>(
        self: Pin<&mut Self>,
        mut store: Pin<&mut C::Store>,
        core: &mut Core,
        mut start: Start<'_>,
        cx: &mut Context<'_>,
    ) -> Option<C::Ok>
    where
        C: ?Sized + Contestants,
    {
        let this = self.project();
        let delay = (*this.hedge)?;
        let mut next_start = this.next_start;
        let len = C::len(&store);
        while core.started < len {
            if core.running > 0 {
                // The timer was set at the latest start: that start left `running > 0`.
                let timer = next_start.as_mut().as_pin_mut()?;
                if timer.poll(cx).is_pending() {
                    return None;
                }
            }
            if core.started > 0 {
                crate::events::hedge(core.started, core.running == 0);
            }
            if let Polled::Won(value) = start.next::<C>(store.as_mut(), core, cx) {
                return Some(value);
            }
            // Set the timer only when the race will wait on it: a contestant that failed
            // at once, with nobody else running, lets the next one start right away.
            if core.running > 0 && core.started < len {
                next_start.set(Some(RtSleep::after(delay)));
            }
        }
        None
    }
}

/// The waker a hedged race starts its next contestant with.
pub(super) enum Start<'a> {
    /// The race's own: a select loop.
    Own,
    /// One lent from the race's wake set.
    Lent(&'a WakeSet, &'a mut Lending),
}

impl Start<'_> {
    /// Starts the next contestant of `core`: its first poll.
    fn next<C>(
        &mut self,
        store: Pin<&mut C::Store>,
        core: &mut Core,
        cx: &mut Context<'_>,
    ) -> Polled<C::Ok>
    where
        C: ?Sized + Contestants,
    {
        let index = core.started;
        core.started += 1;
        core.running += 1;
        match self {
            Start::Own => C::visit(store, index, PollOwn { core, cx }),
            Start::Lent(set, lending) => poll_one::<C>(store, core, index, set, lending),
        }
    }
}

/// Polls one contestant with the race's own waker (a hedged select loop's start).
struct PollOwn<'a, 'b, 'c> {
    core: &'a mut Core,
    cx: &'b mut Context<'c>,
}

impl<T, E> Visit<T, E> for PollOwn<'_, '_, '_> {
    type Output = Polled<T>;

    #[inline]
    fn visit<F>(self, slot: Pin<&mut Slot<F, E>>) -> Polled<T>
    where
        F: Future<Output = Result<T, E>>,
    {
        poll_own(self.core, slot, self.cx)
    }
}

/// Polls the contestant in `slot` (running) with the race's own waker, and records a
/// failure.
#[inline]
fn poll_own<F, T, E>(
    core: &mut Core,
    mut slot: Pin<&mut Slot<F, E>>,
    cx: &mut Context<'_>,
) -> Polled<T>
where
    F: Future<Output = Result<T, E>>,
{
    let SlotProj::Running { future } = slot.as_mut().project() else {
        unreachable!("only a running contestant is polled");
    };
    match future.poll(cx) {
        Poll::Pending => Polled::Pending,
        Poll::Ready(Ok(value)) => Polled::Won(value),
        Poll::Ready(Err(error)) => {
            record_failure(core, slot, error);
            Polled::Failed
        }
    }
}
