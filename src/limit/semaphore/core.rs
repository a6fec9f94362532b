//! The FIFO semaphore algorithm under [`Semaphore`](super::Semaphore) and every bulkhead.
//!
//! # How it works
//!
//! One `AtomicU64` holds the number of permits in use (the low 32 bits) and a `WAITERS`
//! flag (bit 32); the bits above are the [`Count`]er's (a bulkhead counts its fast-path
//! admissions there, so that counting costs nothing more than the compare-and-swap that
//! takes the permit; a plain semaphore leaves them zero). While nobody waits, acquiring is
//! one compare-and-swap and releasing one `fetch_sub`: no lock. The waiters live in a FIFO
//! queue behind a `Mutex`, each with a ticket (its place in line, numbered from 1 in
//! arrival order). The invariants:
//!
//! - the flag is set exactly while the queue is non-empty (it changes only under the
//!   lock), and while it is set only the lock holder adds to the permits in use;
//! - a release that sees the flag takes the lock and passes its permit straight to the
//!   oldest waiter: the permit stays counted as in use, so it is never put back where a
//!   newcomer could take it, and the hand-off touches the state word not at all;
//! - a granted waiter leaves the queue at once (its node is freed by the granter) and the
//!   granter publishes its ticket in `granted`. Grants go strictly in ticket order, so a
//!   waiter still queued or granted holds a permit exactly when `granted` has reached its
//!   ticket: the woken waiter sees that with one atomic load, without the lock;
//! - `try_acquire` and every new `acquire` fail the fast path while the flag is set, so
//!   nobody jumps the queue;
//! - a waiter sets the flag under the lock *after* failing the fast path and then checks
//!   the count again, so a release racing with it is never missed (both touch the same
//!   atomic, and every read-modify-write on one atomic is totally ordered);
//! - a queued node is freed only by the lock holder that takes it out: its owner when it
//!   leaves, or the granter; an owner whose ticket was granted never touches its node
//!   index again, so a reused index is never mistaken for its own (see
//!   [`queue`](super::queue) for how the nodes are stored and how a burst's memory is
//!   given back);
//! - every permit is released exactly once: by a permit's `Drop`, or, when a waiter is
//!   dropped after being granted, by that waiter's `Drop`, which passes it to the next one.

use std::sync::atomic::Ordering;
use std::task::{Context, Poll, Waker};

use super::queue::{Queue, WakeList};
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
    /// What one fast-path admission adds to the state word: 1 (a permit) plus,
    /// optionally, a unit in the bits from [`COUNT_SHIFT`] up, which wrap around silently.
    /// (Hand-offs to waiters are counted by the queue, under its lock.)
    const TAKE: u64;

    /// Called after every fast-path admission, with the state word from before it.
    fn admitted(&self, before: u64);

    /// Called when a hand-off raised the permits in use to `now`.
    fn raised(&self, now: u64);
}

impl Count for () {
    const TAKE: u64 = 1;

    #[inline(always)]
    fn admitted(&self, _before: u64) {}

    #[inline(always)]
    fn raised(&self, _now: u64) {}
}

/// The queue was at its `max_waiting` bound.
#[derive(Debug)]
pub(crate) struct QueueFull;

/// An acquire future's place in the queue.
#[derive(Debug, Clone, Copy)]
struct Place {
    /// Its node, valid only while its ticket is not granted.
    index: usize,
    ticket: u64,
}

/// An acquire future's place in the queue, while it has one (queued, or granted and not
/// yet taken).
#[derive(Debug)]
pub(crate) struct Waiter {
    place: Option<Place>,
}

impl Waiter {
    pub(crate) const fn new() -> Self {
        Self { place: None }
    }

    /// Not in the queue and holding no granted permit.
    #[inline]
    pub(crate) fn is_idle(&self) -> bool {
        self.place.is_none()
    }
}

/// The semaphore algorithm, with `C` counting admissions (or not).
pub(crate) struct Core<C> {
    state: AtomicU64,
    /// The ticket of the last waiter granted a permit (0: none yet). Stored only under the
    /// lock, in increasing order.
    granted: AtomicU64,
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
                granted: AtomicU64::new(0),
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

    /// Waiters in the queue right now, and permits handed to waiters so far.
    pub(crate) fn waiting_and_handed(&self) -> (usize, u64) {
        let queue = self.lock();
        (queue.len(), queue.handed())
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
        // Someone waits: pass the permit on without counting it free in between (two
        // read-modify-writes of the state word fewer than a give-back and a re-take).
        if self.state.load(Ordering::Relaxed) & WAITERS != 0 {
            return self.pass_on();
        }
        let before = self.state.fetch_sub(1, Ordering::AcqRel);
        debug_assert!(in_flight(before) > 0, "released a permit nobody held");
        if before & WAITERS != 0 {
            // A waiter queued between the load and the `fetch_sub`, after its own check
            // of the count: the freed permit is its.
            self.hand_off();
        }
    }

    /// [`release`](Self::release) when someone waited: the permit goes to the oldest
    /// waiter, still counted as in use.
    #[cold]
    fn pass_on(&self) {
        let mut queue = self.lock();
        if queue.len() == 0 {
            // Everyone left between the look at the flag and the lock. The flag is clear
            // and stays so while we hold the lock: give the permit back the plain way.
            let before = self.state.fetch_sub(1, Ordering::AcqRel);
            debug_assert!(in_flight(before) > 0, "released a permit nobody held");
            debug_assert_eq!(before & WAITERS, 0, "the flag is set with an empty queue");
            return;
        }
        let waker = self.grant_front(&mut queue);
        drop(queue);
        waker.wake();
    }

    /// Under the lock: takes the oldest waiter out of the queue, publishes its ticket as
    /// granted, clears `WAITERS` if the queue empties; returns the waker to wake after
    /// the lock is released. The caller has made a permit the waiter's.
    fn grant_front(&self, queue: &mut Queue) -> Waker {
        let (waker, ticket) = queue.grant_front();
        if queue.len() == 0 {
            self.state.fetch_and(!WAITERS, Ordering::AcqRel);
        }
        self.granted.store(ticket, Ordering::Release);
        waker
    }

    /// Grants free permits to waiters, oldest first, and wakes them outside the lock.
    #[cold]
    fn hand_off(&self) {
        let mut queue = self.lock();
        loop {
            let mut wake = WakeList::new();
            while !wake.is_full() {
                match self.grant_free(&mut queue) {
                    Some(waker) => wake.push(waker),
                    None => break,
                }
            }
            let more = wake.is_full();
            drop(queue);
            wake.wake_all();
            if !more {
                return;
            }
            queue = self.lock();
        }
    }

    /// Under the lock: if a permit is free and someone waits, admits the oldest waiter
    /// and returns its waker.
    fn grant_free(&self, queue: &mut Queue) -> Option<Waker> {
        if queue.len() == 0 {
            return None;
        }
        // Only the lock holder adds to `in_flight` while `WAITERS` is set, so a free
        // permit seen here stays free until the `fetch_add` below.
        if in_flight(self.state.load(Ordering::Acquire)) >= self.limit {
            return None;
        }
        let before = self.state.fetch_add(1, Ordering::AcqRel);
        self.counts.raised(in_flight(before) + 1);
        Some(self.grant_front(queue))
    }

    /// Whether the waiter at `place` has been granted a permit.
    #[inline]
    fn is_granted(&self, place: Place) -> bool {
        self.granted.load(Ordering::Acquire) >= place.ticket
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
        match waiter.place {
            None if self.try_take() => Poll::Ready(Ok(())),
            None => self.enqueue(waiter, cx, max_waiting),
            Some(place) if self.is_granted(place) => {
                waiter.place = None;
                Poll::Ready(Ok(()))
            }
            Some(place) => self.poll_queued(waiter, place, cx),
        }
    }

    /// A queued waiter polled before its grant: keep its waker current.
    #[cold]
    fn poll_queued(
        &self,
        waiter: &mut Waiter,
        place: Place,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), QueueFull>> {
        let mut queue = self.lock();
        // Grants happen under the lock: this answer is final while we hold it.
        if self.is_granted(place) {
            waiter.place = None;
            return Poll::Ready(Ok(()));
        }
        let stale = queue.update_waker(place.index, cx.waker());
        drop(queue);
        drop(stale); // outside the lock: dropping a waker may run executor code
        Poll::Pending
    }

    /// The fast path failed: queue at the back (unless the queue is full or, now that we
    /// hold the lock, nobody waits and a permit is free).
    #[cold]
    fn enqueue(
        &self,
        waiter: &mut Waiter,
        cx: &mut Context<'_>,
        max_waiting: usize,
    ) -> Poll<Result<(), QueueFull>> {
        let mut queue = self.lock();
        if queue.len() == 0 && self.try_take() {
            // The queue emptied between the fast path and the lock: nobody to be fair to.
            return Poll::Ready(Ok(()));
        }
        if queue.len() >= max_waiting {
            return Poll::Ready(Err(QueueFull));
        }
        let (index, ticket) = queue.push_back(cx.waker().clone());
        let place = Place { index, ticket };
        if queue.len() == 1 {
            self.state.fetch_or(WAITERS, Ordering::AcqRel);
        }
        // A permit may have been released between the failed fast path and the flag
        // (that releaser saw no flag and handed nothing off): grant it now.
        if in_flight(self.state.load(Ordering::Acquire)) < self.limit {
            drop(queue);
            self.hand_off();
            if self.is_granted(place) {
                // Granted to us (and our own waker woken once, harmlessly).
                return Poll::Ready(Ok(()));
            }
        }
        waiter.place = Some(place);
        Poll::Pending
    }

    /// Leaves the queue. Returns true when a permit had already been granted to this
    /// waiter: the caller now holds it (to use, or to [`release`](Self::release)).
    pub(crate) fn cancel(&self, waiter: &mut Waiter) -> bool {
        let Some(place) = waiter.place.take() else {
            return false;
        };
        if self.is_granted(place) {
            return true;
        }
        let mut queue = self.lock();
        if self.is_granted(place) {
            return true;
        }
        let waker = queue.remove(place.index);
        if queue.len() == 0 {
            self.state.fetch_and(!WAITERS, Ordering::AcqRel);
        }
        drop(queue);
        drop(waker);
        false
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
