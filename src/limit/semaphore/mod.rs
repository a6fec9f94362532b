//! [`Semaphore`]: a strictly fair (FIFO) async semaphore that also works from blocking threads.
//!
//! # How it works
//!
//! One `AtomicU64` holds the number of permits in use, a `WAITERS` flag and a wrapping
//! count of admissions. While nobody waits, acquiring is one compare-and-swap and releasing
//! one `fetch_sub`: no lock. The waiters live in a FIFO queue behind a `Mutex`; the flag is
//! set exactly while that queue is non-empty, and while it is set only the lock holder may
//! take permits. So:
//!
//! - a release that sees the flag takes the lock and hands the permit to the oldest waiter
//!   (the waiter's node is marked granted and its waker woken; the permit is never put back
//!   where a newcomer could take it);
//! - `try_acquire` and every new `acquire` fail the fast path while the flag is set, so
//!   nobody jumps the queue;
//! - a waiter sets the flag under the lock *after* failing the fast path and then checks the
//!   count again, so a release racing with it is never missed (both touch the same atomic,
//!   and every read-modify-write on one atomic is totally ordered).
//!
//! Waiter nodes live in a slab (`Vec<Node>` with a free list) linked into a doubly linked
//! list by index, so leaving the queue from the middle is O(1) and no pointer is shared
//! with the future: a future only remembers its node's index. A node is freed only by the
//! future that owns it (when it takes its permit or is dropped), so an index is never
//! reused behind its owner's back.
//!
//! Every permit is released exactly once: by a guard's `Drop`, or, when a waiter is
//! dropped after being granted, by that waiter's `Drop`, which passes it to the next one.

use std::fmt;
use std::future::Future;
use std::mem;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll, Waker};

use crate::sync::{AtomicU64, AtomicUsize, Mutex, MutexGuard};

/// Permits in use: the low 32 bits.
const IN_FLIGHT: u64 = (1 << 32) - 1;
/// Set exactly while the wait queue is non-empty (changed only under the queue lock).
const WAITERS: u64 = 1 << 32;
/// Admissions, counted modulo 2^31 in the top bits so that admitting costs nothing more
/// than the compare-and-swap that takes the permit; wrap-arounds go to `admitted_wraps`.
const ADMIT_SHIFT: u32 = 33;
const ADMIT_ONE: u64 = 1 << ADMIT_SHIFT;
const ADMIT_MAX: u64 = u64::MAX >> ADMIT_SHIFT;
/// The state change of one admission: one more permit in use, one more admission.
const TAKE: u64 = 1 + ADMIT_ONE;

fn in_flight(state: u64) -> u64 {
    state & IN_FLIGHT
}

/// Index meaning "no node" in the queue's links.
const NIL: usize = usize::MAX;

/// A counter for limiting concurrent work, fair to waiters and usable from any executor
/// and from blocking threads.
///
/// Permits go to waiters strictly in arrival order: a permit released while anyone waits is
/// handed to the oldest waiter, and [`try_acquire`](Self::try_acquire) never takes a permit
/// while someone waits. (`async_lock::Semaphore` gives a released permit to whoever polls
/// first, so a steady stream of newcomers can starve an old waiter.) The semaphore counts
/// its waiters ([`waiting`](Self::waiting)).
///
/// It depends on no runtime: waiters are woken through their [`Waker`], so it works under
/// smol, tokio, async-std, `futures::executor` and [`run_sync`](crate::run_sync), and
/// [`acquire_blocking`](Self::acquire_blocking) parks a plain thread.
///
/// Most code wants a [`Bulkhead`](crate::Bulkhead) instead: the same semaphore per runtime,
/// plus a wait timeout, a bounded queue and statistics.
///
/// # Examples
///
/// ```
/// use tollgate::Semaphore;
///
/// static DOWNLOADS: Semaphore = Semaphore::new(2);
///
/// # futures_lite::future::block_on(async {
/// let first = DOWNLOADS.acquire().await;
/// let second = DOWNLOADS.acquire().await;
/// assert!(DOWNLOADS.try_acquire().is_none());
/// drop(first);
/// assert_eq!(DOWNLOADS.available_permits(), 1);
/// # drop(second);
/// # });
/// ```
pub struct Semaphore {
    state: AtomicU64,
    limit: u64,
    /// Highest number of permits in use at once.
    peak: AtomicUsize,
    /// How many times the admission counter in `state` wrapped around.
    admitted_wraps: AtomicU64,
    /// Acquisitions a [`Bulkhead`](crate::Bulkhead) refused (timeout or full queue).
    rejected: AtomicU64,
    queue: Mutex<Queue>,
}

impl Semaphore {
    /// The largest number of permits a semaphore can have: 2^31 - 1.
    pub const MAX_PERMITS: usize = (u32::MAX >> 1) as usize;

    crate::sync::const_unless_loom! {
        /// Creates a semaphore with `permits` permits.
        ///
        /// # Examples
        ///
        /// ```
        /// let semaphore = tollgate::Semaphore::new(8);
        /// assert_eq!(semaphore.available_permits(), 8);
        /// ```
        ///
        /// # Panics
        ///
        /// Panics when `permits` is 0 (nothing could ever run) or above
        /// [`MAX_PERMITS`](Self::MAX_PERMITS). In a `static`, that is a compile-time error.
        #[track_caller]
        pub const fn new(permits: usize) -> Self {
            assert!(
                permits > 0,
                "tollgate::Semaphore::new: 0 permits would block every acquire forever; use at least 1"
            );
            assert!(
                permits <= Self::MAX_PERMITS,
                "tollgate::Semaphore::new: more than Semaphore::MAX_PERMITS (2^31 - 1) permits"
            );
            Self {
                state: AtomicU64::new(0),
                limit: permits as u64,
                peak: AtomicUsize::new(0),
                admitted_wraps: AtomicU64::new(0),
                rejected: AtomicU64::new(0),
                queue: Mutex::new(Queue::new()),
            }
        }
    }

    /// Takes a permit if one is free and nobody is waiting for one.
    ///
    /// # Examples
    ///
    /// ```
    /// let semaphore = tollgate::Semaphore::new(1);
    /// let guard = semaphore.try_acquire().unwrap();
    /// assert!(semaphore.try_acquire().is_none());
    /// drop(guard);
    /// assert!(semaphore.try_acquire().is_some());
    /// ```
    #[inline]
    pub fn try_acquire(&self) -> Option<SemaphorePermit<'_>> {
        // Not `then_some`: a guard built for a failed attempt would release on drop.
        self.try_take().then(|| SemaphorePermit { semaphore: self })
    }

    /// Like [`try_acquire`](Self::try_acquire), with a guard that owns an `Arc` of the
    /// semaphore and so is `'static`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    ///
    /// let semaphore = Arc::new(tollgate::Semaphore::new(1));
    /// let guard = semaphore.try_acquire_arc().unwrap();
    /// assert!(semaphore.try_acquire_arc().is_none());
    /// drop(guard);
    /// ```
    pub fn try_acquire_arc(self: &Arc<Self>) -> Option<SemaphorePermitArc> {
        self.try_take().then(|| SemaphorePermitArc {
            semaphore: self.clone(),
        })
    }

    /// Waits for a permit, behind everyone already waiting.
    ///
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// let semaphore = tollgate::Semaphore::new(2);
    /// let guard = semaphore.acquire().await;
    /// assert_eq!(semaphore.available_permits(), 1);
    /// drop(guard);
    /// # });
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Cancelling the future (dropping it before it completes) loses its place in the
    /// queue. If a permit had already been handed to it, that permit goes on to the next
    /// waiter: nothing leaks.
    #[inline]
    pub fn acquire(&self) -> SemaphoreAcquire<'_> {
        SemaphoreAcquire {
            semaphore: Some(self),
            waiter: Waiter::new(),
        }
    }

    /// Like [`acquire`](Self::acquire), with a guard that owns an `Arc` of the semaphore,
    /// so the future and the guard are `'static` and can move into a spawned task.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    ///
    /// # futures_lite::future::block_on(async {
    /// let semaphore = Arc::new(tollgate::Semaphore::new(2));
    /// let guard = semaphore.acquire_arc().await;
    /// std::thread::spawn(move || drop(guard)).join().unwrap();
    /// assert_eq!(semaphore.available_permits(), 2);
    /// # });
    /// ```
    ///
    /// # Cancel safety
    ///
    /// As [`acquire`](Self::acquire): cancelling loses the place in the queue, and a
    /// permit already handed over goes on to the next waiter.
    #[inline]
    pub fn acquire_arc(self: &Arc<Self>) -> SemaphoreAcquireArc {
        SemaphoreAcquireArc {
            semaphore: Some(self.clone()),
            waiter: Waiter::new(),
        }
    }

    /// Blocks the calling thread until a permit is free, in the same queue as the async
    /// waiters.
    ///
    /// For plain threads (and tokio's `spawn_blocking`). Calling it from async code blocks
    /// the executor's thread and can deadlock it.
    ///
    /// # Examples
    ///
    /// ```
    /// let semaphore = tollgate::Semaphore::new(2);
    /// std::thread::scope(|scope| {
    ///     for _ in 0..4 {
    ///         scope.spawn(|| {
    ///             let _guard = semaphore.acquire_blocking();
    ///             // at most two threads are here at once
    ///         });
    ///     }
    /// });
    /// assert_eq!(semaphore.available_permits(), 2);
    /// ```
    pub fn acquire_blocking(&self) -> SemaphorePermit<'_> {
        match self.try_acquire() {
            Some(guard) => guard,
            None => crate::sync::block_on(self.acquire()),
        }
    }

    /// How many permits are free right now.
    ///
    /// A permit that is being handed to a waiter counts as taken.
    pub fn available_permits(&self) -> usize {
        (self.limit - in_flight(self.state.load(Ordering::Acquire))) as usize
    }

    /// How many `acquire` calls are waiting in the queue right now.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::pin::pin;
    /// use futures_lite::future::poll_once;
    ///
    /// # futures_lite::future::block_on(async {
    /// let semaphore = tollgate::Semaphore::new(1);
    /// let held = semaphore.acquire().await;
    /// let mut waiter = pin!(semaphore.acquire());
    /// assert!(poll_once(waiter.as_mut()).await.is_none());
    /// assert_eq!(semaphore.waiting(), 1);
    /// drop(held); // handed straight to the waiter
    /// assert_eq!(semaphore.waiting(), 0);
    /// assert!(poll_once(waiter).await.is_some());
    /// # });
    /// ```
    pub fn waiting(&self) -> usize {
        self.lock().len
    }

    /// The number of permits the semaphore was created with.
    pub fn limit(&self) -> usize {
        self.limit as usize
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
                state.wrapping_add(TAKE),
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    self.note_admitted(state);
                    return true;
                }
                Err(actual) => state = actual,
            }
        }
    }

    /// Bookkeeping after an admission; `before` is the state it started from.
    #[inline]
    fn note_admitted(&self, before: u64) {
        let now = (in_flight(before) + 1) as usize;
        if now > self.peak.load(Ordering::Relaxed) {
            self.peak.fetch_max(now, Ordering::Relaxed);
        }
        if before >> ADMIT_SHIFT == ADMIT_MAX {
            self.admitted_wraps.fetch_add(1, Ordering::Relaxed);
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
        while queue.head != NIL {
            if wake.is_full() {
                return true;
            }
            // Only the lock holder adds to `in_flight` while `WAITERS` is set, so a free
            // permit seen here stays free until the `fetch_add` below.
            if in_flight(self.state.load(Ordering::Acquire)) >= self.limit {
                return false;
            }
            let before = self.state.fetch_add(TAKE, Ordering::AcqRel);
            self.note_admitted(before);
            if let Some(waker) = queue.grant_front() {
                wake.push(waker);
            }
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
            let stale = match &mut queue.nodes[index].state {
                NodeState::Granted => None,
                NodeState::Queued(slot) => match slot {
                    Some(old) if old.will_wake(cx.waker()) => return Poll::Pending,
                    _ => Some(slot.replace(cx.waker().clone())),
                },
                NodeState::Vacant => unreachable!("a waiter's node is freed only by its owner"),
            };
            if let Some(stale) = stale {
                drop(queue);
                drop(stale); // outside the lock: dropping a waker may run executor code
                return Poll::Pending;
            }
            queue.free(index);
            waiter.node = None;
            return Poll::Ready(Ok(()));
        }
        let mut queue = self.lock();
        if queue.len == 0 && self.try_take() {
            // The queue emptied between the fast path and the lock: nobody to be fair to.
            return Poll::Ready(Ok(()));
        }
        if queue.len >= max_waiting {
            return Poll::Ready(Err(QueueFull));
        }
        let index = queue.push_back(cx.waker().clone());
        if queue.len == 1 {
            self.state.fetch_or(WAITERS, Ordering::AcqRel);
        }
        // A permit may have been released between the failed fast path and the flag
        // (that releaser saw no flag and handed nothing off): grant it now.
        let mut wake = WakeList::new();
        let more = self.grant(&mut queue, &mut wake);
        let mine = matches!(queue.nodes[index].state, NodeState::Granted);
        if mine {
            queue.free(index);
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
        match mem::replace(&mut queue.nodes[index].state, NodeState::Vacant) {
            NodeState::Granted => {
                queue.free(index);
                true
            }
            NodeState::Queued(waker) => {
                queue.unlink(index);
                queue.free(index);
                if queue.len == 0 {
                    self.state.fetch_and(!WAITERS, Ordering::AcqRel);
                }
                drop(queue);
                drop(waker);
                false
            }
            NodeState::Vacant => unreachable!("a waiter's node is freed only by its owner"),
        }
    }

    #[cold]
    pub(crate) fn note_rejected(&self) {
        self.rejected.fetch_add(1, Ordering::Relaxed);
    }

    /// A snapshot of the counters. The fields are read one after the other, so under
    /// concurrent use they may be a few operations apart.
    pub(crate) fn counters(&self) -> Counters {
        let wraps = self.admitted_wraps.load(Ordering::Relaxed);
        let state = self.state.load(Ordering::Acquire);
        Counters {
            in_flight: in_flight(state) as usize,
            waiting: self.waiting(),
            peak: self.peak.load(Ordering::Relaxed),
            admitted: wraps
                .wrapping_mul(ADMIT_MAX + 1)
                .wrapping_add(state >> ADMIT_SHIFT),
            rejected: self.rejected.load(Ordering::Relaxed),
        }
    }
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Semaphore")
            .field("limit", &self.limit)
            .field("available", &self.available_permits())
            .field("waiting", &self.waiting())
            .finish_non_exhaustive()
    }
}

/// Counters of one semaphore, for [`BulkheadStats`](crate::BulkheadStats).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Counters {
    pub(crate) in_flight: usize,
    pub(crate) waiting: usize,
    pub(crate) peak: usize,
    pub(crate) admitted: u64,
    pub(crate) rejected: u64,
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

/// The FIFO of waiters: nodes in a slab, linked by index.
struct Queue {
    nodes: Vec<Node>,
    /// First vacant node; vacant nodes are chained through `next`.
    free: usize,
    head: usize,
    tail: usize,
    /// Queued nodes (not counting granted ones whose owner has not looked yet).
    len: usize,
    /// Nodes not vacant: queued plus granted.
    used: usize,
}

struct Node {
    prev: usize,
    next: usize,
    state: NodeState,
}

enum NodeState {
    Vacant,
    /// In the queue; the waker of the future that owns the node.
    Queued(Option<Waker>),
    /// Out of the queue, holding a permit its owner has not taken yet.
    Granted,
}

impl Queue {
    const fn new() -> Self {
        Self {
            nodes: Vec::new(),
            free: NIL,
            head: NIL,
            tail: NIL,
            len: 0,
            used: 0,
        }
    }

    fn push_back(&mut self, waker: Waker) -> usize {
        let node = Node {
            prev: self.tail,
            next: NIL,
            state: NodeState::Queued(Some(waker)),
        };
        let index = if self.free == NIL {
            self.nodes.push(node);
            self.nodes.len() - 1
        } else {
            let index = self.free;
            self.free = self.nodes[index].next;
            self.nodes[index] = node;
            index
        };
        if self.tail == NIL {
            self.head = index;
        } else {
            self.nodes[self.tail].next = index;
        }
        self.tail = index;
        self.len += 1;
        self.used += 1;
        index
    }

    /// Takes the oldest waiter out of the queue, marks it granted, returns its waker.
    fn grant_front(&mut self) -> Option<Waker> {
        let index = self.head;
        self.unlink(index);
        match mem::replace(&mut self.nodes[index].state, NodeState::Granted) {
            NodeState::Queued(waker) => waker,
            _ => unreachable!("only queued nodes are linked"),
        }
    }

    fn unlink(&mut self, index: usize) {
        let Node { prev, next, .. } = self.nodes[index];
        if prev == NIL {
            self.head = next;
        } else {
            self.nodes[prev].next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            self.nodes[next].prev = prev;
        }
        self.len -= 1;
    }

    /// Returns an unlinked node to the free list.
    fn free(&mut self, index: usize) {
        self.nodes[index] = Node {
            prev: NIL,
            next: self.free,
            state: NodeState::Vacant,
        };
        self.free = index;
        self.used -= 1;
        if self.used == 0 && self.nodes.len() > 64 {
            // A burst of waiters is over: give its memory back.
            self.nodes = Vec::new();
            self.free = NIL;
        }
    }
}

/// Wakers to wake once the lock is released; a fixed array, so no allocation.
struct WakeList {
    wakers: [Option<Waker>; 8],
    len: usize,
}

impl WakeList {
    fn new() -> Self {
        Self {
            wakers: [const { None }; 8],
            len: 0,
        }
    }

    fn is_full(&self) -> bool {
        self.len == self.wakers.len()
    }

    fn push(&mut self, waker: Waker) {
        self.wakers[self.len] = Some(waker);
        self.len += 1;
    }

    fn wake_all(&mut self) {
        for waker in self.wakers[..self.len].iter_mut() {
            if let Some(waker) = waker.take() {
                waker.wake();
            }
        }
        self.len = 0;
    }
}

/// Releases the permit a future was granted but never handed out, or leaves the queue.
fn abandon(semaphore: &Semaphore, waiter: &mut Waiter) {
    if semaphore.cancel(waiter) {
        semaphore.release();
    }
}

/// Future returned by [`Semaphore::acquire`].
#[must_use = "futures do nothing unless you `.await` or poll them"]
pub struct SemaphoreAcquire<'a> {
    semaphore: Option<&'a Semaphore>,
    waiter: Waiter,
}

impl fmt::Debug for SemaphoreAcquire<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SemaphoreAcquire").finish_non_exhaustive()
    }
}

impl<'a> Future for SemaphoreAcquire<'a> {
    type Output = SemaphorePermit<'a>;

    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let semaphore = this
            .semaphore
            .expect("SemaphoreAcquire polled after completion");
        match semaphore.poll_acquire(&mut this.waiter, cx, usize::MAX) {
            Poll::Ready(_) => {
                this.semaphore = None;
                Poll::Ready(SemaphorePermit { semaphore })
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for SemaphoreAcquire<'_> {
    fn drop(&mut self) {
        if let Some(semaphore) = self.semaphore {
            abandon(semaphore, &mut self.waiter);
        }
    }
}

/// Future returned by [`Semaphore::acquire_arc`].
#[must_use = "futures do nothing unless you `.await` or poll them"]
pub struct SemaphoreAcquireArc {
    semaphore: Option<Arc<Semaphore>>,
    waiter: Waiter,
}

impl fmt::Debug for SemaphoreAcquireArc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SemaphoreAcquireArc")
            .finish_non_exhaustive()
    }
}

impl Future for SemaphoreAcquireArc {
    type Output = SemaphorePermitArc;

    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let semaphore = this
            .semaphore
            .as_ref()
            .expect("SemaphoreAcquireArc polled after completion");
        match semaphore.poll_acquire(&mut this.waiter, cx, usize::MAX) {
            Poll::Ready(_) => Poll::Ready(SemaphorePermitArc {
                semaphore: this.semaphore.take().expect("checked above"),
            }),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for SemaphoreAcquireArc {
    fn drop(&mut self) {
        if let Some(semaphore) = &self.semaphore {
            abandon(semaphore, &mut self.waiter);
        }
    }
}

/// A permit of a [`Semaphore`], released when dropped.
#[clippy::has_significant_drop]
#[must_use = "the permit is released as soon as the guard is dropped"]
pub struct SemaphorePermit<'a> {
    semaphore: &'a Semaphore,
}

impl fmt::Debug for SemaphorePermit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SemaphorePermit").finish_non_exhaustive()
    }
}

impl Drop for SemaphorePermit<'_> {
    #[inline]
    fn drop(&mut self) {
        self.semaphore.release();
    }
}

/// A permit of a [`Semaphore`] that owns an `Arc` of it, so it can move into a spawned
/// task; released when dropped.
#[clippy::has_significant_drop]
#[must_use = "the permit is released as soon as the guard is dropped"]
pub struct SemaphorePermitArc {
    semaphore: Arc<Semaphore>,
}

impl fmt::Debug for SemaphorePermitArc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SemaphorePermitArc").finish_non_exhaustive()
    }
}

impl Drop for SemaphorePermitArc {
    #[inline]
    fn drop(&mut self) {
        self.semaphore.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_admission_count_survives_its_wrap_around() {
        let semaphore = Semaphore::new(2);
        semaphore
            .state
            .store(ADMIT_MAX << ADMIT_SHIFT, Ordering::Relaxed);
        assert_eq!(semaphore.counters().admitted, ADMIT_MAX);
        let guard = semaphore.try_acquire().unwrap(); // the counter wraps here
        let counters = semaphore.counters();
        assert_eq!(counters.admitted, ADMIT_MAX + 1);
        assert_eq!(counters.in_flight, 1);
        drop(guard);
        assert_eq!(semaphore.counters().in_flight, 0);
        assert_eq!(semaphore.available_permits(), 2);
    }
}
