//! A race that polls only its woken contestants ([`Woken`]): the wake set that tells which
//! were woken, the wakers lent to the contestants and the ones they kept
//! ([`Lending`]), the round that turns a select loop to the wake set, and the polls of
//! the woken contestants after it.

use std::future::Future;
use std::ops::ControlFlow;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::core::{Core, Polled, record_failure};
use super::slot::{Slot, SlotProj, Visit, VisitEach};
use super::store::Contestants;
use crate::wake::{Lender, Lent, WakeSet};

/// A poll of a race yields after this many polls of woken contestants (a larger race after
/// as many as it has contestants), so that the executor runs others.
const MIN_YIELD_EVERY: usize = 32;

/// What a race that polls only its woken contestants keeps: made when it turns to its
/// wake set (a hedged race of more than 4: on its first poll). Boxed, so that a select
/// loop, the common race, carries one empty pointer for it and moves as a small future.
pub(super) struct Woken {
    /// Which contestants were woken.
    pub(super) set: WakeSet,
    /// The wakers lent to them.
    pub(super) lending: Lending,
}

/// What the round that turns a select loop to its wake set gave.
pub(super) struct Turned<T> {
    /// The winner's value, if one won.
    pub(super) winner: Option<T>,
    /// A contestant woke itself (it yielded): the executor gets its turn before the
    /// contestants woken now are polled.
    pub(super) yielded: bool,
}

/// The wakers a race with a wake set lends to its contestants.
pub(super) struct Lending {
    lender: Lender,
    /// The waker each contestant kept, if it kept a clone of the one lent to it: empty
    /// until the first one does (contestants that only yield, or finish at once, never
    /// do), then one entry per contestant.
    lent: Vec<Option<Lent>>,
    /// Contestants in the race: the length of `lent` once it is made.
    len: usize,
}

impl Lending {
    /// The waker contestant `index` kept, if any.
    #[inline]
    fn kept_by(&mut self, index: usize) -> Option<&mut Lent> {
        self.lent.get_mut(index).and_then(Option::as_mut)
    }

    /// Takes the waker contestant `index` kept, if any (it has finished).
    #[inline]
    fn take_kept(&mut self, index: usize) -> Option<Lent> {
        self.lent.get_mut(index).and_then(Option::take)
    }

    /// Records that contestant `index` kept `waker`.
    #[inline]
    fn keep(&mut self, index: usize, waker: Lent) {
        if self.lent.is_empty() {
            self.make_table();
        }
        self.lent[index] = Some(waker);
    }

    /// The table of kept wakers, when the first contestant keeps one.
    #[cold]
    #[inline(never)]
    fn make_table(&mut self) {
        self.lent.resize_with(self.len, || None);
    }
}

impl Woken {
    /// The wake set and wakers of a race of `len` contestants, none woken or lent yet.
    pub(super) fn new(len: usize) -> Box<Self> {
        let set = WakeSet::new(len);
        let lender = Lender::new(&set);
        Box::new(Self {
            set,
            lending: Lending {
                lender,
                lent: Vec::new(),
                len,
            },
        })
    }

    /// The round that turns a select loop to this wake set. Every contestant still
    /// running may hold the race's own waker, which does not tell which one to poll: each
    /// is polled once more now, with a waker of its own from then on.
    #[inline]
    pub(super) fn lend_round<C>(
        &mut self,
        store: Pin<&mut C::Store>,
        core: &mut Core,
    ) -> Turned<C::Ok>
    where
        C: ?Sized + Contestants,
    {
        let Self { set, lending } = self;
        set.enter();
        let mut round = LentRound {
            core,
            set,
            lending,
            yielded: false,
        };
        let winner = match C::for_each(store, &mut round) {
            ControlFlow::Break(value) => Some(value),
            ControlFlow::Continue(()) => None,
        };
        Turned {
            winner,
            yielded: round.yielded,
        }
    }

    /// Polls the woken contestants of a race of `len`, again while polling them wakes
    /// others (one finishing wakes the next, say): within the yield allowance, until one
    /// yields. Gives the winner's value if one wins.
    ///
    /// Left to the compiler, not `#[inline]`: inlined into the race's poll, it pushed the
    /// wake set's drain out of line (measured with the race bench's probe: 3% more
    /// instructions for a race whose contestants finish one at a time).
    pub(super) fn poll_woken<C>(
        &mut self,
        mut store: Pin<&mut C::Store>,
        core: &mut Core,
        len: usize,
    ) -> Option<C::Ok>
    where
        C: ?Sized + Contestants,
    {
        // The yield allowance: polls left in this poll of the race for contestants woken
        // during it.
        let mut allowance = len.max(MIN_YIELD_EVERY);
        let mut winner = None;
        // A contestant woke itself (it yielded): the executor gets its turn before the
        // contestants woken now are polled.
        let mut yielded = false;
        let Self { set, lending } = self;
        while winner.is_none() && !yielded && allowance > 0 && set.has_woken() {
            let _ = set.drain(|index| {
                if allowance == 0 {
                    return ControlFlow::Break(());
                }
                allowance -= 1;
                match poll_one::<C>(store.as_mut(), core, index, set, lending) {
                    Polled::Won(value) => {
                        winner = Some(value);
                        ControlFlow::Break(())
                    }
                    Polled::Pending => {
                        yielded |= set.is_marked(index);
                        ControlFlow::Continue(())
                    }
                    Polled::Failed => ControlFlow::Continue(()),
                }
            });
        }
        winner
    }
}

/// Polls contestant `index` with a waker lent from the set (starting it if it never was)
/// and records a failure.
struct PollLent<'a, 'b> {
    core: &'a mut Core,
    index: usize,
    set: &'b WakeSet,
    lending: &'a mut Lending,
}

impl<T, E> Visit<T, E> for PollLent<'_, '_> {
    type Output = Polled<T>;

    #[inline]
    fn visit<F>(self, mut slot: Pin<&mut Slot<F, E>>) -> Polled<T>
    where
        F: Future<Output = Result<T, E>>,
    {
        let Self {
            core,
            index,
            set,
            lending,
        } = self;
        // A contestant that already failed may still be woken by a stale waker: skip it.
        let SlotProj::Running { future } = slot.as_mut().project() else {
            return Polled::Pending;
        };
        let (waker, had_kept) = match lending.kept_by(index) {
            Some(kept) => (kept.waker(), true),
            None => (lending.lender.lend(set, index), false),
        };
        match future.poll(&mut Context::from_waker(waker)) {
            Poll::Pending => {
                // A contestant that kept a clone of the lent waker keeps the waker.
                if !had_kept {
                    if let Some(kept) = lending.lender.kept(set) {
                        lending.keep(index, kept);
                    }
                }
                Polled::Pending
            }
            Poll::Ready(Ok(value)) => Polled::Won(value),
            Poll::Ready(Err(error)) => {
                let kept = lending.take_kept(index);
                // Dropped first: a contestant that kept a clone drops it with itself, and
                // then the waker can be reused.
                record_failure(core, slot, error);
                lending.lender.finished(set, kept);
                Polled::Failed
            }
        }
    }
}

/// Polls contestant `index` of `store` with a waker lent for `set`.
#[inline]
pub(super) fn poll_one<C>(
    store: Pin<&mut C::Store>,
    core: &mut Core,
    index: usize,
    set: &WakeSet,
    lending: &mut Lending,
) -> Polled<C::Ok>
where
    C: ?Sized + Contestants,
{
    let poll = PollLent {
        core,
        index,
        set,
        lending,
    };
    C::visit(store, index, poll)
}

/// The round that turns a select loop to its wake set: polls every running contestant
/// with a waker lent from the set.
struct LentRound<'a, 'b> {
    core: &'a mut Core,
    set: &'b WakeSet,
    lending: &'a mut Lending,
    /// A contestant woke itself.
    yielded: bool,
}

impl<T, E> VisitEach<T, E> for LentRound<'_, '_> {
    type Break = T;

    #[inline]
    fn visit<F>(&mut self, index: usize, slot: Pin<&mut Slot<F, E>>) -> ControlFlow<T>
    where
        F: Future<Output = Result<T, E>>,
    {
        if !matches!(slot.as_ref().get_ref(), Slot::Running { .. }) {
            return ControlFlow::Continue(());
        }
        let poll = PollLent {
            core: &mut *self.core,
            index,
            set: self.set,
            lending: &mut *self.lending,
        };
        match poll.visit(slot) {
            Polled::Won(value) => return ControlFlow::Break(value),
            Polled::Pending => self.yielded |= self.set.is_marked(index),
            Polled::Failed => {}
        }
        ControlFlow::Continue(())
    }
}
