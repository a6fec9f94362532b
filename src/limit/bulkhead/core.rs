//! The one acquire path of every bulkhead: wait for a permit of a cap with the options'
//! acquire timeout and queue bound, count refusals, hand out a permit that gives the slot
//! back on drop, and run work under it. [`Bulkhead`](crate::Bulkhead) and
//! [`KeyedBulkhead`](crate::KeyedBulkhead) differ only in how they find the cap (a
//! [`Holder`]): per runtime, or per key and runtime.

use std::future::Future;
use std::mem::ManuallyDrop;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use super::error::{BulkheadError, Reason};
use super::options::Options;
use super::stats::Limiter;
use crate::limit::semaphore::core::{Refusal, Waiter};
use crate::runtime::RtSleep;

/// What an acquire future and a permit hold on to: one cap of one bulkhead.
pub(crate) trait Holder {
    /// The cap's semaphore.
    fn limiter(&self) -> &Limiter;
    /// The bulkhead's options.
    fn options(&self) -> &Options;
}

/// The body of every bulkhead acquire future.
pub(crate) struct Acquire<H: Holder> {
    /// `None` once the future has completed: then dropping it is one check, as cheap as
    /// dropping the bare semaphore's. `ManuallyDrop` only so that the compiler adds no
    /// drop of its own after ours: `Drop` below takes anything left and drops it.
    pending: ManuallyDrop<Option<Pending<H>>>,
    waiter: Waiter,
}

/// What an unfinished acquire holds besides its place in the queue.
struct Pending<H> {
    holder: H,
    /// Started when the caller first has to queue; boxed because it is `!Unpin` and only
    /// the slow path needs it.
    timer: Option<Pin<Box<RtSleep>>>,
}

impl<H: Holder> Acquire<H> {
    #[inline]
    pub(crate) fn new(holder: H) -> Self {
        Self {
            pending: ManuallyDrop::new(Some(Pending {
                holder,
                timer: None,
            })),
            waiter: Waiter::new(),
        }
    }

    /// `what` names the public future in the panic message.
    #[inline(always)]
    pub(crate) fn poll(
        &mut self,
        cx: &mut Context<'_>,
        what: &'static str,
    ) -> Poll<Result<Permit<H>, BulkheadError>> {
        let Some(Pending { holder, .. }) = &*self.pending else {
            polled_after_completion(what);
        };
        // Inline, like the bare semaphore's: the fast path, and a queued waiter's check
        // (queueing itself is out of line in the semaphore). Only refusals and the acquire
        // timer leave this function.
        let limiter = holder.limiter();
        let idle = self.waiter.is_idle();
        let result = if idle && limiter.try_take(1) {
            Ok(())
        } else {
            let options = holder.options();
            // Only a caller about to queue looks at the bound (a queued one never does).
            let max_waiting = if idle {
                options.queue_bound()
            } else {
                usize::MAX
            };
            match limiter.poll_wait(&mut self.waiter, cx, 1, max_waiting) {
                Poll::Ready(Ok(())) => Ok(()),
                Poll::Pending if options.acquire_timeout.is_none() => return Poll::Pending,
                Poll::Pending => match self.poll_slow(None, cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(result) => result,
                },
                Poll::Ready(Err(refusal)) => match self.poll_slow(Some(refusal), cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(result) => result,
                },
            }
        };
        // On error the holder drops here (a keyed bulkhead may forget the key).
        let Pending { holder, timer } = self.pending.take().expect("checked above");
        if let Some(timer) = timer {
            drop_timer(timer);
        }
        Poll::Ready(result.map(|()| Permit { holder }))
    }

    /// The semaphore refused (`refusal`: the queue was full, or a zero timeout found no
    /// free permit, or the cap is closed) or the caller waits with an acquire timeout
    /// (`None`).
    #[cold]
    #[inline(never)]
    fn poll_slow(
        &mut self,
        refusal: Option<Refusal>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), BulkheadError>> {
        let Some(Pending { holder, timer }) = &mut *self.pending else {
            unreachable!("checked by poll");
        };
        let (limiter, options) = (holder.limiter(), holder.options());
        let refuse = |reason| {
            limiter.counts().note_rejected();
            Poll::Ready(Err(BulkheadError::refuse(options, limiter.limit(), reason)))
        };
        if let Some(refusal) = refusal {
            return refuse(match refusal {
                // One permit is never above a limit (at least 1); only closing is left.
                Refusal::Closed | Refusal::OverLimit => Reason::Closed,
                Refusal::QueueFull if options.acquire_timeout == Some(Duration::ZERO) => {
                    Reason::TimedOut
                }
                Refusal::QueueFull => Reason::QueueFull,
                // Only a `try_` acquire is told busy.
                Refusal::Busy => Reason::Busy,
            });
        }
        let Some(timeout) = options.acquire_timeout else {
            return Poll::Pending;
        };
        let timer = timer.get_or_insert_with(|| Box::pin(RtSleep::after(timeout)));
        if timer.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        // Time is up, but a permit granted in the meantime still counts.
        if limiter.cancel(&mut self.waiter) != 0 {
            return Poll::Ready(Ok(()));
        }
        refuse(Reason::TimedOut)
    }
}

impl<H: Holder> Drop for Acquire<H> {
    #[inline]
    fn drop(&mut self) {
        // A completed acquire (the common drop) costs one check.
        if self.pending.is_some() {
            self.abandon();
        }
    }
}

impl<H: Holder> Acquire<H> {
    /// Dropped unfinished: leave the queue, passing on a permit granted but never handed
    /// out; the holder drops after.
    #[cold]
    #[inline(never)]
    fn abandon(&mut self) {
        if let Some(pending) = self.pending.take() {
            pending.holder.limiter().abandon(&mut self.waiter);
        }
    }
}

/// Out of line, so that the name is only looked at when it is needed.
#[cold]
#[inline(never)]
#[track_caller]
fn polled_after_completion(what: &str) -> ! {
    panic!("{what} polled after completion");
}

/// Why a `try_acquire` of `holder`'s cap found no permit.
#[cold]
#[inline(never)]
fn try_error<H: Holder>(holder: &H) -> BulkheadError {
    let limiter = holder.limiter();
    let reason = match limiter.why_not(1) {
        // One permit is never above a limit (at least 1); only closing is left.
        Refusal::Closed | Refusal::OverLimit => Reason::Closed,
        Refusal::Busy => Reason::Busy,
        // A full queue is a waiting acquire's (`why_not` never says it).
        Refusal::QueueFull => Reason::QueueFull,
    };
    BulkheadError::new(holder.options(), limiter.limit(), reason)
}

/// Out of line: most acquires never start a timer.
#[cold]
#[inline(never)]
fn drop_timer(timer: Pin<Box<RtSleep>>) {
    drop(timer);
}

/// A permit of a cap, given back when dropped (then the holder drops).
pub(crate) struct Permit<H: Holder> {
    holder: H,
}

impl<H: Holder> Permit<H> {
    /// A permit if one is free and nobody waits; otherwise the holder is dropped, and the
    /// error says whether the cap is busy or closed. Not counted as a refusal in the
    /// statistics, and not reported as one.
    #[inline]
    pub(crate) fn try_new(holder: H) -> Result<Self, BulkheadError> {
        if holder.limiter().try_take(1) {
            Ok(Self { holder })
        } else {
            Err(try_error(&holder))
        }
    }

    /// Waits on the calling thread, in the same queue as async callers, with the acquire
    /// timeout on the real clock (a blocked thread lives outside any runtime's time).
    pub(crate) fn blocking(holder: H) -> Result<Self, BulkheadError> {
        if holder.limiter().try_take(1) {
            return Ok(Self { holder });
        }
        let mut acquire = Acquire::new(holder);
        crate::runtime::block_on_real_time(std::future::poll_fn(|cx| {
            acquire.poll(cx, "a blocking acquire")
        }))
    }

    /// The `Debug` output of a public permit type named `what`.
    pub(crate) fn fmt_as(&self, what: &str, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(what)
            .field("bulkhead", &self.holder.options().name.as_str())
            .finish_non_exhaustive()
    }
}

impl<H: Holder> Drop for Permit<H> {
    #[inline]
    fn drop(&mut self) {
        self.holder.limiter().release(1);
    }
}

pin_project_lite::pin_project! {
    /// Awaits `future` once `acquire` has produced a permit; holds the permit until
    /// `future` completes.
    pub(crate) struct Gated<A, P, F> {
        state: Gate<A, P>,
        #[pin]
        future: F,
    }
}

enum Gate<A, P> {
    Acquiring(A),
    Running(P),
    Done,
}

impl<A, P, F> Gated<A, P, F> {
    pub(crate) fn new(acquire: A, future: F) -> Self {
        Self {
            state: Gate::Acquiring(acquire),
            future,
        }
    }
}

impl<A, P, F> Future for Gated<A, P, F>
where
    A: Future<Output = Result<P, BulkheadError>> + Unpin,
    F: Future,
{
    type Output = Result<F::Output, BulkheadError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Gate::Acquiring(acquire) = this.state {
            match Pin::new(acquire).poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(permit)) => *this.state = Gate::Running(permit),
                Poll::Ready(Err(full)) => {
                    *this.state = Gate::Done;
                    return Poll::Ready(Err(full));
                }
            }
        }
        assert!(
            matches!(this.state, Gate::Running(_)),
            "bulkhead run future polled after completion"
        );
        let output = std::task::ready!(this.future.poll(cx));
        // Release the slot before handing the output back.
        *this.state = Gate::Done;
        Poll::Ready(Ok(output))
    }
}
