//! The FIFO semaphore algorithm under [`Semaphore`](super::Semaphore) and every bulkhead.
//!
//! # How it works
//!
//! One `AtomicU64` holds the number of permits in use (the low 32 bits) and a `WAITERS`
//! flag (bit 32); the bits above are the [`Count`]er's (a bulkhead counts its admissions
//! there, so that counting costs nothing more than the compare-and-swap that takes the
//! permit; a plain semaphore leaves them zero). While nobody waits, acquiring is one
//! compare-and-swap and releasing one `fetch_sub`: no lock. The waiters live in a FIFO
//! queue behind a `Mutex`. The invariants:
//!
//! - the flag is set exactly while the queue is non-empty (it changes only under the
//!   lock), and while it is set only the lock holder adds to the permits in use;
//! - so a release that sees the flag takes the lock and hands the permit to the oldest
//!   waiter (the waiter's node is marked granted and its waker woken; the permit is never
//!   put back where a newcomer could take it);
//! - `try_acquire` and every new `acquire` fail the fast path while the flag is set, so
//!   nobody jumps the queue;
//! - a waiter sets the flag under the lock *after* failing the fast path and then checks
//!   the count again, so a release racing with it is never missed (both touch the same
//!   atomic, and every read-modify-write on one atomic is totally ordered);
//! - a node is freed only by the future that owns it (when it takes its permit or is
//!   dropped), so an index is never reused behind its owner's back (see [`queue`](super::queue)
//!   for how the nodes are stored and how a burst's memory is given back);
//! - every permit is released exactly once: by a permit's `Drop`, or, when a waiter is
//!   dropped after being granted, by that waiter's `Drop`, which passes it to the next one.

use std::mem;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

use super::queue::{NodeState, Queue, WakeList};
use crate::sync::{AtomicU64, Mutex, MutexGuard};

/// Permits in use: the low 32 bits.
pub(crate) const IN_FLIGHT: u64 = (1 << 32) - 1;
/// Set exactly while the wait queue is non-empty (changed only under the queue lock).
const WAITERS: u64 = 1 << 32;
/// The lowest state bit a [`Count`] may use.
pub(crate) const COUNT_SHIFT: u32 = 33;

/// The permits in use in a state word.
#[inline]
pub(crate) fn in_flight(state: u64) -> u64 {
    state & IN_FLIGHT
}

/// What a semaphore counts beside its permits. `()` counts nothing.
pub(crate) trait Count {
    /// What one admission adds to the state word: 1 (a permit) plus, optionally, a unit
    /// in the bits from [`COUNT_SHIFT`] up, which wrap around silently.
    const TAKE: u64;

    /// Called after every admission, with the state word from before it.
    fn admitted(&self, before: u64);
}

impl Count for () {
    const TAKE: u64 = 1;

    #[inline(always)]
    fn admitted(&self, _before: u64) {}
}

/// The queue was at its `max_waiting` bound.
#[derive(Debug)]
pub(crate) struct QueueFull;

/// An acquire future's place in the queue: the index of its node while it has one.
#[derive(Debug)]
pub(crate) struct Waiter {
    node: Option<usize>,
}

impl Waiter {
    pub(crate) const fn new() -> Self {
        Self { node: None }
    }

    /// Not in the queue and holding no granted permit.
    #[inline]
    pub(crate) fn is_idle(&self) -> bool {
        self.node.is_none()
    }
}

/// The semaphore algorithm, with `C` counting admissions (or not).
pub(crate) struct Core<C> {
    state: AtomicU64,
    limit: u64,
    queue: Mutex<Queue>,
    counts: C,
}

impl<C: Count> Core<C> {
    crate::sync::const_unless_loom! {
        /// A core with `permits` permits (checked by the caller: 1 to 2^31 - 1).
        pub(crate) const fn new(permits: usize, counts: C) -> Self {
            Self {
                state: AtomicU64::new(0),
                limit: permits as u64,
                queue: Mutex::new(Queue::new()),
                counts,
            }
        }
    }

    pub(crate) fn counts(&self) -> &C {
        &self.counts
    }

    /// The state word, for the counter's bits.
    pub(crate) fn state(&self) -> u64 {
        self.state.load(Ordering::Acquire)
    }

    pub(crate) fn limit(&self) -> usize {
        self.limit as usize
    }

    /// Permits in use right now (one being handed to a waiter counts as in use).
    pub(crate) fn in_flight(&self) -> usize {
        in_flight(self.state()) as usize
    }

    /// Waiters in the queue right now.
    pub(crate) fn waiting(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        // No user code runs under this lock (wakers are woken and dropped after it is
        // released), so a poisoned lock still guards a consistent queue.
        self.queue
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The fast path: takes a permit if one is free and nobody waits.
    #[inline]
    pub(crate) fn try_take(&self) -> bool {
        let mut state = self.state.load(Ordering::Relaxed);
        loop {
            if state & WAITERS != 0 || in_flight(state) >= self.limit {
                return false;
            }
            match self.state.compare_exchange_weak(
                state,
                state.wrapping_add(C::TAKE),
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    self.counts.admitted(state);
                    return true;
                }
                Err(actual) => state = actual,
            }
        }
    }

    /// Gives a permit back: to the oldest waiter if there is one.
    #[inline]
    pub(crate) fn release(&self) {
        let before = self.state.fetch_sub(1, Ordering::AcqRel);
        debug_assert!(in_flight(before) > 0, "released a permit nobody held");
        if before & WAITERS != 0 {
            self.hand_off();
        }
    }

    /// Grants free permits to waiters, oldest first, and wakes them outside the lock.
    #[cold]
    fn hand_off(&self) {
        loop {
            let mut wake = WakeList::new();
            let more = self.grant(&mut self.lock(), &mut wake);
            wake.wake_all();
            if !more {
                return;
            }
        }
    }

    /// Under the lock: while a permit is free and someone waits, admit the oldest waiter.
    /// Clears `WAITERS` when the queue empties. Returns true when it stopped only because
    /// `wake` is full (call again after waking those).
    fn grant(&self, queue: &mut Queue, wake: &mut WakeList) -> bool {
        while queue.len() != 0 {
            if wake.is_full() {
                return true;
            }
            // Only the lock holder adds to `in_flight` while `WAITERS` is set, so a free
            // permit seen here stays free until the `fetch_add` below.
            if in_flight(self.state.load(Ordering::Acquire)) >= self.limit {
                return false;
            }
            let before = self.state.fetch_add(C::TAKE, Ordering::AcqRel);
            self.counts.admitted(before);
            wake.push(queue.grant_front());
        }
        self.state.fetch_and(!WAITERS, Ordering::AcqRel);
        false
    }

    /// The body of every acquire future: `Ready(Ok(()))` once the caller holds a
    /// permit, `Ready(Err(QueueFull))` when the queue already holds `max_waiting` waiters.
    #[inline]
    pub(crate) fn poll_acquire(
        &self,
        waiter: &mut Waiter,
        cx: &mut Context<'_>,
        max_waiting: usize,
    ) -> Poll<Result<(), QueueFull>> {
        if waiter.node.is_none() && self.try_take() {
            return Poll::Ready(Ok(()));
        }
        self.poll_acquire_slow(waiter, cx, max_waiting)
    }

    /// [`poll_acquire`](Self::poll_acquire) when the fast path did not do: queue, or check
    /// the place in the queue.
    #[cold]
    fn poll_acquire_slow(
        &self,
        waiter: &mut Waiter,
        cx: &mut Context<'_>,
        max_waiting: usize,
    ) -> Poll<Result<(), QueueFull>> {
        if let Some(index) = waiter.node {
            let mut queue = self.lock();
            let stale = match queue.state_mut(index) {
                NodeState::Granted => None,
                NodeState::Queued(old) if old.will_wake(cx.waker()) => return Poll::Pending,
                NodeState::Queued(old) => Some(mem::replace(old, cx.waker().clone())),
                NodeState::Vacant => unreachable!("a waiter's node is freed only by its owner"),
            };
            if let Some(stale) = stale {
                drop(queue);
                drop(stale); // outside the lock: dropping a waker may run executor code
                return Poll::Pending;
            }
            queue.remove(index);
            waiter.node = None;
            return Poll::Ready(Ok(()));
        }
        let mut queue = self.lock();
        if queue.len() == 0 && self.try_take() {
            // The queue emptied between the fast path and the lock: nobody to be fair to.
            return Poll::Ready(Ok(()));
        }
        if queue.len() >= max_waiting {
            return Poll::Ready(Err(QueueFull));
        }
        let index = queue.push_back(cx.waker().clone());
        if queue.len() == 1 {
            self.state.fetch_or(WAITERS, Ordering::AcqRel);
        }
        // A permit may have been released between the failed fast path and the flag
        // (that releaser saw no flag and handed nothing off): grant it now.
        let mut wake = WakeList::new();
        let more = self.grant(&mut queue, &mut wake);
        let mine = matches!(queue.state_mut(index), NodeState::Granted);
        if mine {
            queue.remove(index);
        } else {
            waiter.node = Some(index);
        }
        drop(queue);
        wake.wake_all();
        if more {
            self.hand_off();
        }
        if mine {
            Poll::Ready(Ok(()))
        } else {
            Poll::Pending
        }
    }

    /// Leaves the queue. Returns true when a permit had already been granted to this
    /// waiter: the caller now holds it (to use, or to [`release`](Self::release)).
    pub(crate) fn cancel(&self, waiter: &mut Waiter) -> bool {
        let Some(index) = waiter.node.take() else {
            return false;
        };
        let mut queue = self.lock();
        match queue.remove(index) {
            NodeState::Granted => true,
            NodeState::Queued(waker) => {
                if queue.len() == 0 {
                    self.state.fetch_and(!WAITERS, Ordering::AcqRel);
                }
                drop(queue);
                drop(waker);
                false
            }
            NodeState::Vacant => unreachable!("a waiter's node is freed only by its owner"),
        }
    }

    /// For a dropped, unfinished acquire: leaves the queue, and passes on a permit that
    /// was granted but never handed out.
    pub(crate) fn abandon(&self, waiter: &mut Waiter) {
        if self.cancel(waiter) {
            self.release();
        }
    }
}

#[cfg(test)]
impl<C> Core<C> {
    pub(crate) fn set_state_for_test(&self, state: u64) {
        self.state.store(state, Ordering::Relaxed);
    }

    /// Bytes the wait queue holds.
    pub(crate) fn queue_footprint(&self) -> usize {
        self.queue.lock().unwrap().footprint()
    }
}
