//! The select loop: every running contestant polled with the race's own waker, round after
//! round ([`poll_select`]), and when a race that may turn to its wake set leaves it.

use std::future::Future;
use std::ops::ControlFlow;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::core::{Core, record_failure};
use super::slot::{Slot, SlotProj, VisitEach};
use super::store::Contestants;

/// What one poll of a select loop gave.
pub(super) enum Selected<T> {
    Won(T),
    /// No winner; wait for the next poll.
    Pending,
    /// No winner, and the contestants would be better polled through a wake set: the
    /// poll ended on a round that may have woken contestants polled earlier in it.
    ToWakeSet,
}

/// One poll of a select loop: polls every running contestant with the race's own waker,
/// and once more while one failed after others had pended in the same round (its end may
/// have woken them, as one mirror's answer can unblock another's), rather than after a
/// round trip through the executor. Each extra round needs a new failure: at most as
/// many rounds as contestants.
///
/// Unless `lasting` (a select loop for good: [`Contestants::is_select_loop`]), a round
/// that would be wasted on contestants that pend again ends the select loop instead: a
/// failure after a pend in the same round (the next round would poll every pending
/// contestant to find the one it woke), or, on a poll after the first (`first` false), a
/// contestant that pends again (the race was woken for another one). With `stop_at_pend`
/// (a race of more than [`SELECT_FIRST_MAX`](super::SELECT_FIRST_MAX)), the first pending
/// contestant ends it.
#[inline]
pub(super) fn poll_select<C>(
    mut store: Pin<&mut C::Store>,
    core: &mut Core,
    cx: &mut Context<'_>,
    lasting: bool,
    first: bool,
    stop_at_pend: bool,
) -> Selected<C::Ok>
where
    C: ?Sized + Contestants,
{
    loop {
        let mut round = SelectRound {
            started: core.started,
            core: &mut *core,
            cx: &mut *cx,
            pended: false,
            again: false,
            stop_at_pend,
        };
        match C::for_each(store.as_mut(), &mut round) {
            ControlFlow::Break(Some(value)) => return Selected::Won(value),
            ControlFlow::Break(None) => return Selected::ToWakeSet,
            ControlFlow::Continue(()) => {}
        }
        let (pended, again) = (round.pended, round.again);
        if !lasting && (again || (pended && !first)) {
            return Selected::ToWakeSet;
        }
        if !again {
            return Selected::Pending;
        }
    }
}

/// One round of a select loop: polls every running contestant with the race's own waker.
struct SelectRound<'a, 'b, 'c> {
    core: &'a mut Core,
    cx: &'b mut Context<'c>,
    /// A contestant pended in this round.
    pended: bool,
    /// A contestant failed after one pended in this round.
    again: bool,
    /// End the round, and the select loop, at the first contestant that pends.
    stop_at_pend: bool,
    /// Contestants started: a hedged race's later ones wait for their start.
    started: usize,
}

impl<T, E> VisitEach<T, E> for SelectRound<'_, '_, '_> {
    /// The winner's value, or `None` for a round ended at a pending contestant.
    type Break = Option<T>;

    #[inline]
    fn visit<F>(&mut self, index: usize, mut slot: Pin<&mut Slot<F, E>>) -> ControlFlow<Option<T>>
    where
        F: Future<Output = Result<T, E>>,
    {
        if index >= self.started {
            return ControlFlow::Continue(());
        }
        // A contestant that failed in an earlier round is skipped, and does not count as
        // pending.
        let SlotProj::Running { future } = slot.as_mut().project() else {
            return ControlFlow::Continue(());
        };
        match future.poll(self.cx) {
            Poll::Pending if self.stop_at_pend => return ControlFlow::Break(None),
            Poll::Pending => self.pended = true,
            Poll::Ready(Ok(value)) => return ControlFlow::Break(Some(value)),
            Poll::Ready(Err(error)) => {
                record_failure(self.core, slot, error);
                self.again |= self.pended;
            }
        }
        ControlFlow::Continue(())
    }
}
