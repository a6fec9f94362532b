//! The FIFO semaphore algorithm under [`Semaphore`](super::Semaphore) and every bulkhead.
//!
//! # How it works
//!
//! One `AtomicU64` holds the number of *available* permits (the low 32 bits) and three
//! flags: `WAITERS` (bit 32), `DEBT` (bit 33) and `CLOSED` (bit 34); the bits above are
//! the [`Count`]er's (a bulkhead counts its fast-path admissions there, so that counting
//! costs nothing more than the compare-and-swap that takes the permits; a plain semaphore
//! leaves them zero). While no flag is set, acquiring is one compare-and-swap and
//! releasing one `fetch_add`: no lock. The waiters live in a queue behind a `Mutex`, each
//! with a ticket (numbered from 1 in arrival order) and the number of permits it wants, in
//! one of two lines, each in ticket order: *in line* (it wants no more than the limit in
//! force) or *aside* (it wants more: it waits for the limit to grow back, and must not
//! hold up the waiters behind it meanwhile). Nobody asks for more than the *max weight*:
//! the user's, or else the highest limit so far. The permits in existence (`total`:
//! available plus held, a permit being handed to a waiter counting as held) are the limit
//! in force plus the queue's `debt`. The invariants:
//!
//! - `WAITERS` is set exactly while the line is non-empty (waiters aside do not count:
//!   they could not use available permits, so newcomers may take them), `DEBT` exactly
//!   while the debt is non-zero (both change only under the lock); `CLOSED` is set once,
//!   under the lock, and never cleared. `total`, `limit`, the max weight and the debt
//!   change only under the lock;
//! - every waiter in line wants at most the limit in force, every waiter aside more, and
//!   every queued waiter at most the max weight: a resize moves waiters between the lines
//!   (each to its place by ticket, so one back in line is where it would have been had it
//!   never stepped aside), and lowering the max weight refuses the waiters above it;
//! - the fast path takes permits only while no flag is set, so while a flag is set only
//!   the lock holder takes available permits (releases may still add to them);
//! - grants go only to the head of the line, and only when all the permits it wants are
//!   available: in ticket order among the waiters in line, and a large request at the
//!   head is never overtaken by small ones behind it (they wait even when enough permits
//!   for them are free). A waiter aside holds nothing, so it is overtaken by later
//!   arrivals while it is aside, and by none once it is back in line;
//! - a release that sees `WAITERS` or `DEBT` takes the lock, pays the debt first and then
//!   passes its permits straight to the head of the line when they are enough: they stay
//!   counted as held, so they are never put back where a newcomer could take them;
//! - a granted waiter leaves the queue at once (its node is freed by the granter) and the
//!   granter publishes in `passed` the highest ticket below every waiter still queued; a
//!   refused waiter (closed, or asking for more than a lowered max weight) leaves the
//!   queue too, but its node stays its own, marked, until it collects the refusal. While
//!   no refusal is uncollected (`refusals` is 0), a waiter whose ticket `passed` has
//!   reached holds its permits (it left the queue, and not by itself): the woken waiter
//!   sees that with two atomic loads, without the lock. Otherwise (a refusal
//!   uncollected, or an older waiter aside keeping `passed` back) it asks its node, under
//!   the lock: still its ticket and queued, refused, or else granted (only a grant frees
//!   a node its owner has not given up);
//! - a waiter sets `WAITERS` under the lock *after* failing the fast path and then checks
//!   the available permits again, and a shrink sets `DEBT` in the same compare-and-swap
//!   that takes the available permits, so a release racing with either is never missed
//!   (every read-modify-write on one atomic is totally ordered);
//! - a queued node is freed only by the lock holder that takes it out: its owner when it
//!   leaves or collects its refusal, or the granter; an owner looks at its node only
//!   under the lock and through its ticket (tickets are never issued twice), so a reused
//!   index is never mistaken for its own (see [`queue`](super::queue) for how the nodes
//!   are stored and how a burst's memory is given back);
//! - every permit is released exactly once: by a permit's `Drop`, or, when a waiter is
//!   dropped after being granted, by that waiter's `Drop`, which passes them on;
//! - conservation: `available + held == limit + debt`, and `debt <= held` (a shrink puts
//!   into debt only what it could not take from the available permits), so once nothing
//!   is held, `available == limit`.

use std::sync::atomic::Ordering;
use std::task::{Context, Poll, Waker};

use super::queue::{Queue, Refused, Status, WakeList};
use crate::sync::{AtomicU64, AtomicUsize, Mutex, MutexGuard};

/// Available permits: the low 32 bits.
pub(crate) const AVAILABLE: u64 = (1 << 32) - 1;
/// Set exactly while the line of waiters (those not aside) is non-empty (changed only under
/// the queue lock).
const WAITERS: u64 = 1 << 32;
/// Set exactly while releases owe permits to a shrink (changed only under the lock).
const DEBT: u64 = 1 << 33;
/// Set once the semaphore is closed.
const CLOSED: u64 = 1 << 34;
/// The fast path takes nothing while any of these is set.
const TAKE_BLOCKED: u64 = WAITERS | DEBT | CLOSED;
/// A release takes the lock while any of these is set.
const RELEASE_SLOW: u64 = WAITERS | DEBT;
/// The lowest state bit a [`Count`] may use.
pub(crate) const COUNT_SHIFT: u32 = 35;

/// The available permits in a state word.
#[inline]
pub(crate) fn available(state: u64) -> u64 {
    state & AVAILABLE
}

/// What a semaphore counts beside its permits. `()` counts nothing.
pub(crate) trait Count {
    /// What one fast-path admission adds to the state word besides taking its permits:
    /// 0, or a unit in the bits from [`COUNT_SHIFT`] up, which wrap around silently.
    /// (Hand-offs to waiters are counted by the queue, under its lock.)
    const ADMIT: u64;

    /// Called after every fast-path admission, with the state word from before it and
    /// the permits it took.
    fn admitted(&self, before: u64, taken: u64);

    /// Called when a grant to a waiter lowered the available permits to `available`.
    fn lowered(&self, available: u64);

    /// Called under the lock after the permits in existence went from `before` to
    /// `after` (a resize, or a release paying debt), with the permits available now.
    fn rebased(&self, before: u64, after: u64, available: u64);
}

impl Count for () {
    const ADMIT: u64 = 0;

    #[inline(always)]
    fn admitted(&self, _before: u64, _taken: u64) {}

    #[inline(always)]
    fn lowered(&self, _available: u64) {}

    #[inline(always)]
    fn rebased(&self, _before: u64, _after: u64, _available: u64) {}
}

/// Why an acquire got no permits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The queue was at its `max_waiting` bound.
    QueueFull,
    /// No permit free now (only `why_not` says so, for a `try_` acquire).
    Busy,
    /// The semaphore is closed.
    Closed,
    /// More permits asked for than the max weight.
    OverLimit,
}

impl From<Refused> for Refusal {
    fn from(refused: Refused) -> Self {
        match refused {
            Refused::Closed => Refusal::Closed,
            Refused::OverLimit => Refusal::OverLimit,
        }
    }
}

/// An acquire future's place in the queue.
#[derive(Debug, Clone, Copy)]
struct Place {
    /// Its node, its own only while its ticket is neither granted nor refused (then
    /// looked at only through [`Queue::status`], which checks the ticket).
    index: usize,
    ticket: u64,
    want: u32,
}

/// An acquire future's place in the queue, while it has one (queued, or granted and not
/// yet taken, or refused and not yet told).
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
    /// Every waiter with this ticket or a lower one has left the queue: granted, refused,
    /// or gone (0: none yet). Stored only under the lock, never lowered.
    passed: AtomicU64,
    /// Refused waiters that have not collected their refusal (the queue's count, mirrored
    /// for the lock-free check of a grant). Stored only under the lock.
    refusals: AtomicUsize,
    /// The limit in force. Stored only under the lock.
    limit: AtomicU64,
    /// The most permits one acquire may ask for: set by the user, or else the highest
    /// limit so far. Stored only under the lock.
    max_weight: AtomicU64,
    /// Permits in existence: `limit` plus the debt. Stored only under the lock.
    total: AtomicU64,
    queue: Mutex<Queue>,
    counts: C,
}

impl<C: Count> Core<C> {
    crate::sync::const_unless_loom! {
        /// A core with `permits` permits (checked by the caller: 1 to 2^31 - 1).
        pub(crate) const fn new(permits: usize, counts: C) -> Self {
            Self {
                state: AtomicU64::new(permits as u64),
                passed: AtomicU64::new(0),
                refusals: AtomicUsize::new(0),
                limit: AtomicU64::new(permits as u64),
                max_weight: AtomicU64::new(permits as u64),
                total: AtomicU64::new(permits as u64),
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

    /// The limit in force.
    pub(crate) fn limit(&self) -> usize {
        self.limit.load(Ordering::Acquire) as usize
    }

    /// The most permits one acquire may ask for.
    pub(crate) fn max_weight(&self) -> usize {
        self.max_weight.load(Ordering::Acquire) as usize
    }

    /// Permits free right now.
    pub(crate) fn available(&self) -> usize {
        available(self.state()) as usize
    }

    /// Permits held right now (ones being handed to a waiter count as held).
    pub(crate) fn in_flight(&self) -> usize {
        let available = available(self.state());
        self.total.load(Ordering::Acquire).saturating_sub(available) as usize
    }

    /// Whether [`close`](Self::close) was called.
    pub(crate) fn is_closed(&self) -> bool {
        self.state() & CLOSED != 0
    }

    /// Waiters in the queue right now (in line or aside).
    pub(crate) fn waiting(&self) -> usize {
        self.lock().waiting()
    }

    /// Waiters in the queue right now, and grants to waiters so far.
    pub(crate) fn waiting_and_handed(&self) -> (usize, u64) {
        let queue = self.lock();
        (queue.waiting(), queue.handed())
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        // No user code runs under this lock (wakers are woken and dropped after it is
        // released), so a poisoned lock still guards a consistent queue.
        self.queue
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The fast path: takes `n` permits if they are free and no flag is set.
    #[inline]
    pub(crate) fn try_take(&self, n: u32) -> bool {
        let n = u64::from(n);
        let mut state = self.state.load(Ordering::Relaxed);
        loop {
            if state & TAKE_BLOCKED != 0 || available(state) < n {
                return false;
            }
            match self.state.compare_exchange_weak(
                state,
                (state - n).wrapping_add(C::ADMIT),
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    self.counts.admitted(state, n);
                    return true;
                }
                Err(actual) => state = actual,
            }
        }
    }

    /// The fast path of a weighted acquire: [`try_take`](Self::try_take), only for `n` no
    /// larger than the max weight (which may be below the limit once the user set it).
    #[inline]
    pub(crate) fn try_take_weighted(&self, n: u32) -> bool {
        // Relaxed: a take racing a `set_max_weight` is ordered before it.
        (n <= 1 || u64::from(n) <= self.max_weight.load(Ordering::Relaxed)) && self.try_take(n)
    }

    /// Why [`try_take`](Self::try_take) of `n` failed: closed, more than the max weight,
    /// or busy (no permits now).
    #[cold]
    pub(crate) fn why_not(&self, n: u32) -> Refusal {
        if self.is_closed() {
            Refusal::Closed
        } else if u64::from(n) > self.max_weight.load(Ordering::Acquire) {
            Refusal::OverLimit
        } else {
            Refusal::Busy
        }
    }

    /// Gives `n` permits back: to the debt or the oldest waiter first, if any.
    #[inline]
    pub(crate) fn release(&self, n: u32) {
        // Someone waits or a shrink is owed: pay it or pass the permits on without
        // counting them free in between (no newcomer can take them meanwhile).
        if self.state.load(Ordering::Relaxed) & RELEASE_SLOW != 0 {
            return self.pass_on(u64::from(n));
        }
        let before = self.state.fetch_add(u64::from(n), Ordering::AcqRel);
        if before & RELEASE_SLOW != 0 {
            // A waiter queued (or a shrink ran) between the load and the `fetch_add`,
            // after its own look at the available permits: settle now.
            self.settle();
        }
    }

    /// [`release`](Self::release) when someone waited or a debt was owed.
    #[cold]
    fn pass_on(&self, mut n: u64) {
        let mut queue = self.lock();
        n -= self.pay_debt(&mut queue, n);
        if n == 0 {
            return;
        }
        match queue.front_want() {
            // The common case: the permits go straight to the oldest waiter, still
            // counted as held (no read-modify-write of the state word).
            Some(want) if u64::from(want) == n => {
                let waker = self.grant_front(&mut queue);
                if want > 1 {
                    return self.granted_many(queue, waker, want);
                }
                drop(queue);
                waker.wake();
            }
            _ => {
                // Nobody waits (everyone left between the look at the flags and the
                // lock: the flags are clear and stay so while we hold the lock), or the
                // oldest wants another number: put them back and grant what fits.
                self.state.fetch_add(n, Ordering::AcqRel);
                drop(queue);
                self.settle();
            }
        }
    }

    /// [`pass_on`](Self::pass_on) after handing `want` permits to the head of the line:
    /// the next waiter may fit in the permits already available. Fewer were available than
    /// the one just served waited for (or whoever made them available settles after us),
    /// so only if it asks for fewer.
    #[cold]
    fn granted_many(&self, queue: MutexGuard<'_, Queue>, waker: Waker, want: u32) {
        let next_fits = queue.front_want().is_some_and(|next| {
            next < want && u64::from(next) <= available(self.state.load(Ordering::Acquire))
        });
        drop(queue);
        waker.wake();
        if next_fits {
            self.settle();
        }
    }

    /// Under the lock: changes the permits in existence, and tells the counter.
    fn retotal(&self, change: impl FnOnce(u64) -> u64) {
        let before = self.total.load(Ordering::Acquire);
        let after = change(before);
        self.total.store(after, Ordering::Release);
        self.counts
            .rebased(before, after, available(self.state.load(Ordering::Acquire)));
    }

    /// The permits in existence (available plus held).
    pub(crate) fn total(&self) -> u64 {
        self.total.load(Ordering::Acquire)
    }

    /// Under the lock: pays up to `n` released permits towards the debt; returns how
    /// many it took (they leave existence).
    fn pay_debt(&self, queue: &mut Queue, n: u64) -> u64 {
        let paid = queue.debt.min(n);
        if paid != 0 {
            queue.debt -= paid;
            self.retotal(|total| total - paid);
            if queue.debt == 0 {
                self.state.fetch_and(!DEBT, Ordering::AcqRel);
            }
        }
        paid
    }

    /// Under the lock: takes the oldest waiter in line out of the queue, publishes the
    /// tickets passed, clears `WAITERS` if the line empties; returns the waker to wake
    /// after the lock is released. The caller has made the permits the waiter's.
    fn grant_front(&self, queue: &mut Queue) -> Waker {
        let (waker, passed) = queue.grant_front();
        if queue.len() == 0 {
            self.state.fetch_and(!WAITERS, Ordering::AcqRel);
        }
        self.passed.store(passed, Ordering::Release);
        waker
    }

    /// Pays the debt from the available permits, then grants available permits to
    /// waiters, oldest first, and wakes them outside the lock.
    #[cold]
    fn settle(&self) {
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

    /// Under the lock: pays the debt from the available permits; then, if the oldest
    /// waiter's permits are all available, admits it and returns its waker.
    fn grant_free(&self, queue: &mut Queue) -> Option<Waker> {
        // While a flag is set only the lock holder takes available permits, so what is
        // seen available here stays available until the `fetch_sub`s below.
        if queue.debt != 0 {
            let paid = queue
                .debt
                .min(available(self.state.load(Ordering::Acquire)));
            if paid != 0 {
                // Out of the available permits before `DEBT` may be cleared, so that
                // no fast path can take them in between.
                self.state.fetch_sub(paid, Ordering::AcqRel);
                self.pay_debt(queue, paid);
            }
            if queue.debt != 0 {
                return None;
            }
        }
        let want = u64::from(queue.front_want()?);
        let free = available(self.state.load(Ordering::Acquire));
        if free < want {
            return None;
        }
        self.state.fetch_sub(want, Ordering::AcqRel);
        self.counts.lowered(free - want);
        Some(self.grant_front(queue))
    }

    /// Whether the waiter at `place` surely holds its permits, seen without the lock: its
    /// ticket is passed (it left the queue), it did not leave by itself (it asks), and no
    /// refusal is uncollected (so it was not refused).
    #[inline]
    fn is_surely_granted(&self, place: Place) -> bool {
        // `passed` first: a refusal is published under the lock before the store that
        // passes the refused ticket, so seeing that store makes the refusal count visible.
        self.passed.load(Ordering::Acquire) >= place.ticket
            && self.refusals.load(Ordering::Acquire) == 0
    }

    /// Under the lock: what became of the waiter at `place` (a refusal is collected).
    fn fate(&self, queue: &mut Queue, place: Place) -> Status {
        let status = queue.status(place.index, place.ticket);
        if let Status::Refused(_) = status {
            self.refusals.store(queue.refused(), Ordering::Release);
        }
        status
    }

    /// The body of every semaphore acquire future for `n` permits: `Ready(Ok(()))` once
    /// the caller holds them, `Ready(Err(_))` when the queue already holds `max_waiting`
    /// waiters, the semaphore is closed, or `n` is above the max weight.
    #[inline]
    pub(crate) fn poll_acquire(
        &self,
        waiter: &mut Waiter,
        cx: &mut Context<'_>,
        n: u32,
        max_waiting: usize,
    ) -> Poll<Result<(), Refusal>> {
        if waiter.place.is_none() && self.try_take_weighted(n) {
            return Poll::Ready(Ok(()));
        }
        self.poll_wait(waiter, cx, n, max_waiting)
    }

    /// [`poll_acquire`](Self::poll_acquire) for a caller that already tried the fast path
    /// (if its waiter was idle): the fast path is not tried twice.
    #[inline]
    pub(crate) fn poll_wait(
        &self,
        waiter: &mut Waiter,
        cx: &mut Context<'_>,
        n: u32,
        max_waiting: usize,
    ) -> Poll<Result<(), Refusal>> {
        match waiter.place {
            None => self.enqueue(waiter, cx, n, max_waiting),
            Some(place) if self.is_surely_granted(place) => {
                waiter.place = None;
                Poll::Ready(Ok(()))
            }
            Some(place) => self.poll_queued(waiter, place, cx),
        }
    }

    /// A queued waiter polled before it was seen granted: keep its waker current.
    #[cold]
    fn poll_queued(
        &self,
        waiter: &mut Waiter,
        place: Place,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), Refusal>> {
        let mut queue = self.lock();
        // Grants and refusals happen under the lock: this answer is final while we hold it.
        match self.fate(&mut queue, place) {
            Status::Granted => {
                waiter.place = None;
                Poll::Ready(Ok(()))
            }
            Status::Refused(refused) => {
                waiter.place = None;
                Poll::Ready(Err(refused.into()))
            }
            Status::Queued => {
                let stale = queue.update_waker(place.index, cx.waker());
                drop(queue);
                drop(stale); // outside the lock: dropping a waker may run executor code
                Poll::Pending
            }
        }
    }

    /// The fast path failed: queue at the back of the line, or aside if `n` is above the
    /// limit in force (unless the queue is full, the semaphore closed, `n` above the max
    /// weight, or, now that we hold the lock, nobody is in line and the permits are free).
    #[cold]
    fn enqueue(
        &self,
        waiter: &mut Waiter,
        cx: &mut Context<'_>,
        n: u32,
        max_waiting: usize,
    ) -> Poll<Result<(), Refusal>> {
        let mut queue = self.lock();
        let state = self.state.load(Ordering::Acquire);
        if state & CLOSED != 0 {
            return Poll::Ready(Err(Refusal::Closed));
        }
        if u64::from(n) > self.max_weight.load(Ordering::Acquire) {
            return Poll::Ready(Err(Refusal::OverLimit));
        }
        if queue.len() == 0 && queue.debt == 0 && self.try_take(n) {
            // The line emptied between the fast path and the lock: nobody to be fair to
            // (waiters aside could not use these permits).
            return Poll::Ready(Ok(()));
        }
        // Only bulkheads bound the queue, and they ask for 1 permit: never aside.
        if queue.len() >= max_waiting {
            return Poll::Ready(Err(Refusal::QueueFull));
        }
        // A request for 1 always fits (the limit is 1 at least).
        if n > 1 && u64::from(n) > self.limit.load(Ordering::Acquire) {
            // Served only once a resize lets it back in line. (The `try_take` above
            // failed: no more than the limit is ever available.)
            let (index, ticket) = queue.push_aside(cx.waker().clone(), n);
            waiter.place = Some(Place {
                index,
                ticket,
                want: n,
            });
            return Poll::Pending;
        }
        let (index, ticket) = queue.push_back(cx.waker().clone(), n);
        let place = Place {
            index,
            ticket,
            want: n,
        };
        if queue.len() == 1 {
            self.state.fetch_or(WAITERS, Ordering::AcqRel);
        }
        // Permits may have been released between the failed fast path and the flag
        // (those releasers saw no flag and handed nothing off): grant them now.
        let head = queue.front_want().map_or(0, u64::from);
        if available(self.state.load(Ordering::Acquire)) >= head || queue.debt != 0 {
            drop(queue);
            self.settle();
            if self.is_surely_granted(place) {
                // Granted to us (and our own waker woken once, harmlessly).
                return Poll::Ready(Ok(()));
            }
        }
        waiter.place = Some(place);
        Poll::Pending
    }

    /// Leaves the queue. Returns the permits already granted to this waiter (0 if none):
    /// the caller now holds them (to use, or to [`release`](Self::release)).
    pub(crate) fn cancel(&self, waiter: &mut Waiter) -> u32 {
        let Some(place) = waiter.place.take() else {
            return 0;
        };
        if self.is_surely_granted(place) {
            return place.want;
        }
        let mut queue = self.lock();
        match self.fate(&mut queue, place) {
            Status::Granted => return place.want,
            Status::Refused(_) => return 0,
            Status::Queued => {}
        }
        // In line or aside: it holds nothing either way.
        let waker = queue.remove(place.index);
        if queue.len() == 0 {
            self.state.fetch_and(!WAITERS, Ordering::AcqRel);
        }
        // Leaving the head may let the next waiter (asking for fewer) in.
        let next = queue.front_want().map(u64::from);
        drop(queue);
        drop(waker);
        if next.is_some_and(|want| available(self.state.load(Ordering::Acquire)) >= want) {
            self.settle();
        }
        0
    }

    /// For a dropped, unfinished acquire: leaves the queue, and passes on permits that
    /// were granted but never handed out.
    pub(crate) fn abandon(&self, waiter: &mut Waiter) {
        let granted = self.cancel(waiter);
        if granted != 0 {
            self.release(granted);
        }
    }

    /// Closes the semaphore: every waiter is refused and woken, every later acquire
    /// refused. Permits held stay valid and are given back as usual.
    pub(crate) fn close(&self) {
        let mut queue = self.lock();
        self.state.fetch_or(CLOSED, Ordering::AcqRel);
        let mut wakers = Vec::new();
        self.refuse(&mut queue, Refused::Closed, &mut wakers);
        drop(queue);
        for waker in wakers {
            waker.wake();
        }
    }

    /// Under the lock: refuses the waiters `reason` applies to (every one when closing,
    /// those asking for more than the max weight otherwise).
    fn refuse(&self, queue: &mut Queue, reason: Refused, wakers: &mut Vec<Waker>) {
        let max = self.max_weight.load(Ordering::Acquire);
        queue.refuse(reason, max, wakers);
        self.refusals.store(queue.refused(), Ordering::Release);
        if queue.len() == 0 {
            self.state.fetch_and(!WAITERS, Ordering::AcqRel);
        }
    }

    /// Makes `limit` the limit in force (1 to 2^31 - 1, checked by the caller). Growing
    /// first brings the waiters aside that fit back in line, at their places, then cancels
    /// debt, then adds permits and grants them to waiters in order (and raises the max
    /// weight along, unless the user set it); shrinking forgets available permits and puts
    /// the rest in debt, paid by the next releases, and moves the waiters in line asking
    /// for more than the new limit aside. `resize` gets the limit in force and returns the
    /// new one, or `None` to change nothing (then `set_limit` returns false).
    pub(crate) fn set_limit(&self, resize: impl FnOnce(u64) -> Option<u64>) -> bool {
        let mut queue = self.lock();
        let old = self.limit.load(Ordering::Acquire);
        let Some(limit) = resize(old) else {
            return false;
        };
        self.limit.store(limit, Ordering::Release);
        if limit >= old {
            if !queue.max_weight_set && limit > self.max_weight.load(Ordering::Acquire) {
                self.max_weight.store(limit, Ordering::Release);
            }
            // Back in line before the new permits are counted available, so that no
            // newcomer takes them ahead of older waiters.
            if queue.step_back(limit) {
                self.state.fetch_or(WAITERS, Ordering::AcqRel);
            }
            let mut grow = limit - old;
            let cancelled = queue.debt.min(grow);
            if cancelled != 0 {
                // Held permits that were to vanish on release are simply kept.
                queue.debt -= cancelled;
                grow -= cancelled;
                if queue.debt == 0 {
                    self.state.fetch_and(!DEBT, Ordering::AcqRel);
                }
            }
            self.state.fetch_add(grow, Ordering::AcqRel);
            self.retotal(|total| total + grow);
            drop(queue);
            self.settle();
            return true;
        }
        let shrink = old - limit;
        let mut state = self.state.load(Ordering::Acquire);
        let taken = loop {
            let taken = shrink.min(available(state));
            let owed = if taken < shrink { DEBT } else { 0 };
            match self.state.compare_exchange_weak(
                state,
                (state - taken) | owed,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break taken,
                Err(actual) => state = actual,
            }
        };
        self.retotal(|total| total - taken);
        queue.debt += shrink - taken;
        self.step_aside(&mut queue, limit);
        drop(queue);
        // Stepping the head aside may let the next one in.
        self.settle();
        true
    }

    /// Under the lock: moves the waiters in line asking for more than `limit` aside (they
    /// hold nothing; the ones behind them go on); returns whether any moved.
    fn step_aside(&self, queue: &mut Queue, limit: u64) -> bool {
        let moved = queue.step_aside(limit);
        if moved && queue.len() == 0 {
            self.state.fetch_and(!WAITERS, Ordering::AcqRel);
        }
        moved
    }

    /// Forgets up to `n` available permits now, keeping the limit at 1 at least; returns
    /// how many (the limit in force drops by as many, and the waiters in line asking for
    /// more step aside).
    pub(crate) fn forget(&self, n: usize) -> usize {
        let mut queue = self.lock();
        let limit = self.limit.load(Ordering::Acquire);
        let most = (n as u64).min(limit - 1);
        let mut state = self.state.load(Ordering::Acquire);
        let taken = loop {
            let taken = most.min(available(state));
            if taken == 0 {
                return 0;
            }
            match self.state.compare_exchange_weak(
                state,
                state - taken,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break taken,
                Err(actual) => state = actual,
            }
        };
        self.retotal(|total| total - taken);
        self.limit.store(limit - taken, Ordering::Release);
        let moved = self.step_aside(&mut queue, limit - taken);
        drop(queue);
        if moved {
            self.settle();
        }
        taken as usize
    }

    /// Makes `max` the max weight (1 to 2^31 - 1, checked by the caller), from now on
    /// independent of the limit: queued waiters asking for more are refused, in line or
    /// aside.
    pub(crate) fn set_max_weight(&self, max: u64) {
        let mut queue = self.lock();
        queue.max_weight_set = true;
        self.max_weight.store(max, Ordering::Release);
        let mut wakers = Vec::new();
        self.refuse(&mut queue, Refused::OverLimit, &mut wakers);
        drop(queue);
        if !wakers.is_empty() {
            for waker in wakers {
                waker.wake();
            }
            // Refusing the head may let the next one in.
            self.settle();
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
