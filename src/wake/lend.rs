//! Child wakers lent for one poll and reused (rule 5 of the protocol in the module docs).
//!
//! A [`ReadySet`](super::ReadySet) makes one waker per slot, an allocation each. But many
//! of a race's contestants never keep their waker: one that finishes on its first poll (a
//! cached answer, a refused connection), or one that only wakes itself during the poll
//! (`yield_now`). So a [`Lender`] polls each child with its one spare waker, renumbered
//! for that child, and only a child that keeps a clone of it (a socket or timer
//! registration) takes it away, as a [`Lent`], for as long as it runs. The first spare is
//! the set's shared state itself: a race whose contestants keep no waker allocates no
//! waker at all.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::task::{Wake, Waker};

use super::{Shared, WakeSet};
use crate::sync::{AtomicUsize, fence};

/// A waker made from the shared state itself marks slot `lent_index`.
impl Wake for Shared {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.mark(self.lent_index.load(Ordering::Relaxed));
    }
}

/// A lent waker of its own, made when the one in [`Shared`] is taken.
///
/// It holds `Shared` weakly, so that the strong count of `Shared` counts exactly the set,
/// the waker made from `Shared` and its clones (and, for an instant, a `LentWaker` that is
/// waking: that only makes [`Lent::unshared`] a cautious no).
#[derive(Debug)]
struct LentWaker {
    shared: Weak<Shared>,
    /// Changed only while nobody but the lender holds the waker.
    index: AtomicUsize,
}

impl Wake for LentWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // Once the set is gone there is nobody to wake.
        if let Some(shared) = self.shared.upgrade() {
            shared.mark(self.index.load(Ordering::Relaxed));
        }
    }
}

/// A child's waker, with the `Arc` it was made from (`None`: the set's [`Shared`]), so the
/// lender can tell whether anyone else holds a clone.
#[derive(Debug)]
pub(crate) struct Lent {
    waker: Waker,
    own: Option<Arc<LentWaker>>,
}

impl Lent {
    /// The waker made from `Shared` itself.
    fn shared(shared: &Arc<Shared>) -> Self {
        Self {
            waker: Waker::from(shared.clone()),
            own: None,
        }
    }

    /// A waker of its own, standing for slot `index`.
    fn own(shared: &Arc<Shared>, index: usize) -> Self {
        let slot = Arc::new(LentWaker {
            shared: Arc::downgrade(shared),
            index: AtomicUsize::new(index),
        });
        Self {
            waker: Waker::from(slot.clone()),
            own: Some(slot),
        }
    }

    /// The waker to poll the child with.
    #[inline]
    pub(crate) fn waker(&self) -> &Waker {
        &self.waker
    }

    /// Whether only the lender holds this waker: the `Arc` it was made from has two
    /// owners, the lender (`shared` or `own`) and `waker`. Then nobody else can wake it (a
    /// wake-up during the last poll has already set its bit) and nobody can clone it, so
    /// it may be renumbered.
    #[inline]
    fn is_unshared(&self, shared: &Arc<Shared>) -> bool {
        let owners = match &self.own {
            Some(slot) => Arc::strong_count(slot),
            None => Arc::strong_count(shared),
        };
        if owners == 2 {
            // Pairs with the release decrement of a clone dropped on another thread: its
            // last read of the number happens before we renumber it.
            fence(Ordering::Acquire);
            true
        } else {
            false
        }
    }

    /// Makes the waker stand for slot `index`. Only while [`Self::unshared`].
    #[inline]
    fn renumber(&self, shared: &Shared, index: usize) {
        let number = match &self.own {
            Some(slot) => &slot.index,
            None => &shared.lent_index,
        };
        number.store(index, Ordering::Relaxed);
    }
}

/// The spare waker of a [`WakeSet`], lent to one child per poll.
///
/// Use with one set only, and give the set's children no other wakers: the reuse check
/// counts the owners of the set's shared state.
#[derive(Debug)]
pub(crate) struct Lender {
    spare: Option<Lent>,
}

impl Lender {
    /// A lender whose first spare is `set`'s shared state itself (no allocation).
    pub(crate) fn new(set: &WakeSet) -> Self {
        Self {
            spare: Some(Lent::shared(&set.shared)),
        }
    }

    /// The spare waker, numbered for slot `index` (made if there is none). After polling
    /// the child with it, call [`kept`](Self::kept) if the child is pending and
    /// [`finished`](Self::finished) if it is done.
    #[inline]
    pub(crate) fn lend(&mut self, set: &WakeSet, index: usize) -> &Waker {
        let lent = match &mut self.spare {
            Some(spare) => {
                spare.renumber(&set.shared, index);
                spare
            }
            none => none.insert(Lent::own(&set.shared, index)),
        };
        &lent.waker
    }

    /// After a pending poll with the spare: the spare, if the child kept a clone of it (it
    /// may still be woken and must keep its number: the child keeps it from now on); else
    /// `None`, and the spare stays for the next child.
    #[inline]
    pub(crate) fn kept(&mut self, set: &WakeSet) -> Option<Lent> {
        if self
            .spare
            .as_ref()
            .is_some_and(|spare| !spare.is_unshared(&set.shared))
        {
            self.spare.take()
        } else {
            None
        }
    }

    /// A child finished (it will never be polled again) after a poll with `lent`, the
    /// waker it kept, or with the spare when `None`. That waker becomes the spare if
    /// nobody else holds a clone of it (else it may still be woken, and must keep its
    /// number: it is dropped).
    #[inline]
    pub(crate) fn finished(&mut self, set: &WakeSet, lent: Option<Lent>) {
        match lent {
            Some(lent) => {
                if self.spare.is_none() && lent.is_unshared(&set.shared) {
                    self.spare = Some(lent);
                }
            }
            None => drop(self.kept(set)),
        }
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use std::ops::ControlFlow;

    use super::*;

    fn drained(set: &WakeSet) -> Vec<usize> {
        let mut out = Vec::new();
        let _ = set.drain(|index| {
            out.push(index);
            ControlFlow::Continue(())
        });
        out
    }

    #[test]
    fn an_unshared_waker_is_renumbered_and_reused() {
        let set = WakeSet::new(130);
        let mut lender = Lender::new(&set);
        let kept = lender.lend(&set, 0).clone();
        let first = lender
            .kept(&set)
            .expect("a clone is around: the child keeps it");
        // Someone still holds it: it is not reused once its child finished.
        lender.finished(&set, Some(first));
        let second = lender.lend(&set, 1).clone();
        assert!(!kept.will_wake(&second));
        drop(second);
        assert!(
            lender.kept(&set).is_none(),
            "no clone left: it stays the spare"
        );
        let third = lender.lend(&set, 129).clone();
        assert!(third.will_wake(lender.lend(&set, 129)));
        assert!(!set.has_woken());

        third.wake_by_ref();
        kept.wake();
        assert!(set.has_woken());
        assert_eq!(drained(&set), [0, 129]);
        assert!(!set.has_woken());
        // A waker that outlives its set wakes nobody.
        drop(lender);
        drop(set);
        third.wake();
    }

    #[test]
    fn the_first_spare_is_the_shared_state_and_allocates_nothing() {
        let set = WakeSet::new(2);
        let mut lender = Lender::new(&set);
        // Two children that finish on their first poll, one that wakes itself only.
        lender.lend(&set, 0);
        lender.finished(&set, None);
        lender.lend(&set, 1).wake_by_ref();
        assert!(lender.kept(&set).is_none());
        assert!(
            lender
                .spare
                .as_ref()
                .is_some_and(|spare| spare.own.is_none())
        );
        assert_eq!(drained(&set), [1]);
    }

    #[test]
    fn a_finished_childs_waker_still_held_elsewhere_is_dropped_not_reused() {
        let set = WakeSet::new(4);
        let mut lender = Lender::new(&set);
        let held = lender.lend(&set, 2).clone();
        lender.finished(&set, None);
        // A new spare, with a number of its own; the held clone still marks 2.
        let next = lender.lend(&set, 3).clone();
        assert!(!held.will_wake(&next));
        held.wake();
        next.wake();
        assert_eq!(drained(&set), [2, 3]);
    }
}
