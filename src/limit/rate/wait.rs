//! The wait behind both limiters' futures ([`UntilReady`](super::UntilReady),
//! [`UntilKeyReady`](super::UntilKeyReady)): reserve a start on the first poll, sleep until
//! it, and tell a future dropped while waiting what to give back.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::runtime::Clock;
use crate::runtime::{RtSleep, instant_at};

/// Where a waiting future is: not yet reserved (futures do nothing until polled), waiting
/// for a reserved start, or done.
#[derive(Clone, Copy, Debug)]
enum Phase {
    Unpolled,
    /// Waiting for `start_at`; `reserved_tat` is the state the reservation left, which
    /// a cancelled waiter gives back if it is still the latest.
    Waiting {
        start_at: u64,
        reserved_tat: u64,
    },
    Done,
}

pin_project_lite::pin_project! {
    /// A start reserved on `clock` and the timer until it.
    pub(crate) struct ReservedWait {
        clock: Clock,
        phase: Phase,
        #[pin]
        timer: RtSleep,
    }
}

impl ReservedWait {
    /// A wait that reserves nothing until it is polled.
    pub(crate) fn new(clock: Clock) -> Self {
        Self {
            clock,
            phase: Phase::Unpolled,
            timer: RtSleep::after(Duration::ZERO),
        }
    }

    /// Polls the wait. The first poll calls `reserve(now)`, which reserves a start and
    /// returns `(reserved_tat, start_at)`; a start due now is ready at once, a later one is
    /// slept until. `name` is the owning future's, for the panic of a poll after completion.
    ///
    /// # Panics
    ///
    /// When polled again after it completed.
    #[inline]
    pub(crate) fn poll(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        name: &str,
        reserve: impl FnOnce(u64) -> (u64, u64),
    ) -> Poll<()> {
        let mut this = self.project();
        let start_at = match *this.phase {
            Phase::Unpolled => {
                let now = this.clock.now();
                let (reserved_tat, start_at) = reserve(now);
                if start_at <= now {
                    *this.phase = Phase::Done;
                    return Poll::Ready(());
                }
                *this.phase = Phase::Waiting {
                    start_at,
                    reserved_tat,
                };
                this.timer.as_mut().set(RtSleep::at(instant_at(start_at)));
                start_at
            }
            Phase::Waiting { start_at, .. } => start_at,
            Phase::Done => panic!("`{name}` polled after completion"),
        };
        std::task::ready!(poll_wait_until(this.timer, *this.clock, start_at, cx));
        *this.phase = Phase::Done;
        Poll::Ready(())
    }

    /// While a reserved start is still ahead: the state its reservation left, which the
    /// owning future gives back to its limiter when dropped.
    pub(crate) fn reserved_tat(&self) -> Option<u64> {
        match self.phase {
            Phase::Waiting { reserved_tat, .. } => Some(reserved_tat),
            Phase::Unpolled | Phase::Done => None,
        }
    }
}

/// Sleeps on `timer`, set for `start_at`, until the timer's own clock reads `start_at` or
/// later. A timer fires at or after its deadline on its own clock, so one round is the rule;
/// the loop only guards against a timer that would not, and sets it for the same deadline
/// again (it waits, it never spins).
fn poll_wait_until(
    mut timer: Pin<&mut RtSleep>,
    clock: Clock,
    start_at: u64,
    cx: &mut Context<'_>,
) -> Poll<()> {
    loop {
        std::task::ready!(timer.as_mut().poll(cx));
        if clock.timer_now() >= start_at {
            return Poll::Ready(());
        }
        timer.set(RtSleep::at(instant_at(start_at)));
    }
}
