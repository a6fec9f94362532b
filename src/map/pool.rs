//! The in-flight pool under every bounded map: up to `limit` futures, polled in place.
//!
//! Each future lives in a slot allocated once and reused in place (`Pin::set` on a
//! `Pin<Box<Slot>>`), so starting and finishing a future allocates nothing. Every slot has
//! its own waker from a [`ReadySet`]: a wake-up marks the slot's bit, and the owner polls
//! only the marked slots. A future is polled as soon as it is started; if it is ready on
//! that first poll it never touches the ready set and never wakes the owner.
//!
//! Slots and their wakers are created on demand, so a pool with a large limit costs only
//! what is actually in flight. When more slots are needed than the ready set was sized
//! for, a ready set twice as large replaces it and every running future is polled once
//! with its new waker (a spurious poll, which futures must tolerate), after which the old
//! wakers no longer matter.
//!
//! Each running future carries a `tag` (the bounded maps use the input position) that
//! comes back with its output.

use std::fmt;
use std::future::Future;
use std::ops::ControlFlow;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use pin_project_lite::pin_project;

use crate::wake::ReadySet;

/// The first ready set is at most this large; it doubles from there up to the limit.
const FIRST_SLOTS: usize = 1024;

pin_project! {
    #[project = SlotProj]
    enum Slot<Fut> {
        Idle,
        Busy { #[pin] fut: Fut, tag: usize },
    }
}

/// What [`Pool::start`] did with a new future.
pub(crate) enum Started<T> {
    /// Ready on its first poll: its output; the slot is free again.
    Ready(T),
    /// In flight in the slot with this index (the index comes back with its output).
    Pending(usize),
}

/// A slot and its waker, cloned once from the ready set (which creates its wakers
/// lazily, at the cost of a check per call) and replaced when the set grows.
struct Entry<Fut> {
    slot: Pin<Box<Slot<Fut>>>,
    waker: Waker,
}

/// Up to `limit` futures in flight, each in its own reusable slot.
pub(crate) struct Pool<Fut> {
    /// The created slots, each beside its waker (one bounds check reaches both).
    slots: Vec<Entry<Fut>>,
    /// Created slots that hold no future, most recently freed last (reused first: warm).
    idle: Vec<usize>,
    busy: usize,
    limit: usize,
    ready: ReadySet,
}

impl<Fut> Pool<Fut> {
    /// An empty pool for at most `limit` futures. `expected` (an upper bound on how many
    /// futures will ever be started, `usize::MAX` if unknown) only sizes the first
    /// allocation.
    pub(crate) fn new(limit: usize, expected: usize) -> Self {
        debug_assert!(limit > 0);
        Self {
            slots: Vec::new(),
            idle: Vec::new(),
            busy: 0,
            limit,
            ready: ReadySet::new(limit.min(expected).clamp(1, FIRST_SLOTS)),
        }
    }

    /// The most futures in flight at once.
    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// Changes the limit of a running pool. Lowered, the futures in flight above it
    /// finish and no new one starts until fewer than `limit` run; the slots created for
    /// them stay, idle (a later raise reuses them).
    pub(crate) fn set_limit(&mut self, limit: usize) {
        debug_assert!(limit > 0);
        self.limit = limit;
    }

    /// The number of futures in flight.
    pub(crate) fn len(&self) -> usize {
        self.busy
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.busy == 0
    }

    /// Whether `limit` futures are in flight.
    pub(crate) fn is_full(&self) -> bool {
        self.busy >= self.limit
    }

    /// The owner is polling: wake-ups only mark their futures until
    /// [`register`](Self::register). The owner must return `Ready`, or `register` and
    /// check [`has_woken`](Self::has_woken) before it returns `Pending`.
    #[inline]
    pub(crate) fn enter(&self) {
        self.ready.enter();
    }

    /// Remembers the owner's task; call before [`has_woken`](Self::has_woken) when about
    /// to return `Pending`.
    pub(crate) fn register(&self, cx: &Context<'_>) {
        self.ready.register(cx);
    }

    /// Whether some future may want to be polled.
    #[inline]
    pub(crate) fn has_woken(&self) -> bool {
        self.ready.has_woken()
    }

    /// Drops the future in flight in slot `index`, if any, and returns its tag.
    pub(crate) fn cancel(&mut self, index: usize) -> Option<usize> {
        let entry = self.slots.get_mut(index)?;
        let tag = match entry.slot.as_mut().project() {
            SlotProj::Busy { tag, .. } => *tag,
            SlotProj::Idle => return None,
        };
        // A wake-up already marked for the slot finds it idle and is skipped.
        entry.slot.as_mut().set(Slot::Idle);
        self.idle.push(index);
        self.busy -= 1;
        Some(tag)
    }

    /// Drops every future in flight and returns their tags.
    pub(crate) fn cancel_all(&mut self) -> Vec<usize> {
        let tags = self
            .slots
            .iter_mut()
            .filter_map(|entry| match entry.slot.as_mut().project() {
                SlotProj::Busy { tag, .. } => Some(*tag),
                SlotProj::Idle => None,
            })
            .collect();
        self.clear();
        tags
    }

    /// Drops every future in flight.
    pub(crate) fn clear(&mut self) {
        for entry in &mut self.slots {
            entry.slot.as_mut().set(Slot::Idle);
        }
        self.idle.clear();
        self.idle.extend((0..self.slots.len()).rev());
        self.busy = 0;
    }

    /// A slot with no future in it, left on the idle list (creating one if needed). The
    /// pool must not be full.
    #[inline(always)]
    fn idle_slot(&mut self) -> usize {
        match self.idle.last() {
            Some(&index) => index,
            None => self.new_slot(),
        }
    }

    #[cold]
    fn new_slot(&mut self) -> usize {
        // No idle slot: every created slot is busy, and the pool is not full.
        let index = self.slots.len();
        assert!(index < self.limit, "tollgate: pool overfilled");
        if index == self.ready.len() {
            let ready = ReadySet::new(index.saturating_mul(2).min(self.limit));
            if self.ready.is_entered() {
                ready.enter();
            }
            // The running futures hold the old wakers: poll each once with its new one.
            for busy in 0..index {
                ready.mark(busy);
            }
            self.ready = ready;
            for (busy, entry) in self.slots.iter_mut().enumerate() {
                entry.waker = self.ready.waker(busy).clone();
            }
        }
        self.slots.push(Entry {
            slot: Box::pin(Slot::Idle),
            waker: self.ready.waker(index).clone(),
        });
        self.idle.push(index);
        index
    }
}

impl<Fut: Future> Pool<Fut> {
    /// Starts `fut` in a slot and polls it once. A ready future's output is returned at
    /// once and leaves no trace; otherwise it stays in flight under `tag` in the slot
    /// whose index is returned.
    ///
    /// The pool must not be full.
    #[inline(always)]
    pub(crate) fn start(&mut self, fut: Fut, tag: usize) -> Started<Fut::Output> {
        // The slot leaves the idle list only if the future stays in flight: a future ready
        // at once leaves the list as it was.
        let index = self.idle_slot();
        let Entry { slot, waker } = &mut self.slots[index];
        slot.as_mut().set(Slot::Busy { fut, tag });
        let SlotProj::Busy { fut, .. } = slot.as_mut().project() else {
            unreachable!()
        };
        match fut.poll(&mut Context::from_waker(waker)) {
            Poll::Ready(output) => {
                slot.as_mut().set(Slot::Idle);
                Started::Ready(output)
            }
            Poll::Pending => {
                self.idle.pop();
                self.busy += 1;
                Started::Pending(index)
            }
        }
    }

    /// Polls every future woken since the last call, handing each finished one's tag,
    /// slot index and output to `done`. Stops early, leaving the rest marked, when `done` breaks.
    /// Returns how many futures it polled.
    #[inline]
    pub(crate) fn poll_woken(
        &mut self,
        mut done: impl FnMut(usize, usize, Fut::Output) -> ControlFlow<()>,
    ) -> ControlFlow<(), usize> {
        let Self {
            slots,
            idle,
            busy,
            ready,
            ..
        } = self;
        let mut polled = 0;
        let freed_from = idle.len();
        let flow = ready.drain(|index| {
            // Stale bits (a finished future's waker, a slot not yet created by this ready
            // set's predecessor) point at idle slots: nothing to poll.
            let Some(Entry { slot, waker }) = slots.get_mut(index) else {
                return ControlFlow::Continue(());
            };
            let SlotProj::Busy { fut, tag } = slot.as_mut().project() else {
                return ControlFlow::Continue(());
            };
            let tag = *tag;
            polled += 1;
            match fut.poll(&mut Context::from_waker(waker)) {
                Poll::Ready(output) => {
                    slot.as_mut().set(Slot::Idle);
                    idle.push(index);
                    *busy -= 1;
                    done(tag, index, output)
                }
                Poll::Pending => ControlFlow::Continue(()),
            }
        });
        // Slots finish here in index order; reuse them in that order too (the lowest on
        // top), so that items started in input order sit in increasing slots and the
        // next drain finds them in input order: the reorder buffer stays empty.
        idle[freed_from..].reverse();
        match flow {
            ControlFlow::Continue(()) => ControlFlow::Continue(polled),
            ControlFlow::Break(()) => ControlFlow::Break(()),
        }
    }
}

impl<Fut> fmt::Debug for Pool<Fut> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pool")
            .field("in_flight", &self.busy)
            .field("limit", &self.limit)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Pending until woken `polls` times by hand; counts its polls and drops.
    struct Manual {
        left: usize,
        polls: Arc<AtomicUsize>,
        drops: Arc<AtomicUsize>,
        waker: Arc<std::sync::Mutex<Option<Waker>>>,
    }

    impl Future for Manual {
        type Output = usize;
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<usize> {
            self.polls.fetch_add(1, Ordering::SeqCst);
            if self.left == 0 {
                return Poll::Ready(7);
            }
            self.left -= 1;
            *self.waker.lock().unwrap() = Some(cx.waker().clone());
            Poll::Pending
        }
    }

    impl Drop for Manual {
        fn drop(&mut self) {
            self.drops.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn woken(pool: &mut Pool<Manual>) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        let _ = pool.poll_woken(|tag, _, output| {
            out.push((tag, output));
            ControlFlow::Continue(())
        });
        out
    }

    #[test]
    fn ready_futures_reuse_one_slot_and_pending_ones_are_polled_when_woken() {
        let polls = Arc::new(AtomicUsize::new(0));
        let drops = Arc::new(AtomicUsize::new(0));
        let manual = |left| Manual {
            left,
            polls: polls.clone(),
            drops: drops.clone(),
            waker: Arc::default(),
        };
        let mut pool = Pool::new(3, usize::MAX);
        for _ in 0..10 {
            assert!(matches!(pool.start(manual(0), 0), Started::Ready(7)));
        }
        assert_eq!(pool.slots.len(), 1, "a ready future frees its slot at once");
        let waiting = manual(1);
        let handle = waiting.waker.clone();
        assert!(matches!(pool.start(waiting, 42), Started::Pending(_)));
        assert!(matches!(pool.start(manual(5), 43), Started::Pending(_)));
        assert_eq!(pool.len(), 2);
        assert!(!pool.has_woken());
        assert!(woken(&mut pool).is_empty());
        handle.lock().unwrap().take().unwrap().wake();
        assert!(pool.has_woken());
        let before = polls.load(Ordering::SeqCst);
        assert_eq!(woken(&mut pool), [(42, 7)]);
        assert_eq!(
            polls.load(Ordering::SeqCst),
            before + 1,
            "only the woken slot"
        );
        assert_eq!(pool.len(), 1);
        pool.clear();
        assert!(pool.is_empty());
        assert_eq!(drops.load(Ordering::SeqCst), 12);
    }

    #[test]
    fn growing_the_ready_set_repolls_running_futures_with_new_wakers() {
        let polls = Arc::new(AtomicUsize::new(0));
        let drops = Arc::new(AtomicUsize::new(0));
        let mut pool = Pool::new(5000, 2);
        assert_eq!(pool.ready.len(), 2);
        for tag in 0..3 {
            let fut = Manual {
                left: 1,
                polls: polls.clone(),
                drops: drops.clone(),
                waker: Arc::default(),
            };
            assert!(matches!(pool.start(fut, tag), Started::Pending(_)));
        }
        assert_eq!(pool.ready.len(), 4);
        assert!(
            !pool.ready.is_entered(),
            "an owner that never enters keeps its wake-ups"
        );
        // The first two were marked for a poll with their new wakers: they finish.
        assert_eq!(woken(&mut pool), [(0, 7), (1, 7)]);
        assert_eq!(pool.len(), 1);
        // Growing inside `enter` stays inside it.
        pool.enter();
        for tag in 3..7 {
            let fut = Manual {
                left: 1,
                polls: polls.clone(),
                drops: drops.clone(),
                waker: Arc::default(),
            };
            assert!(matches!(pool.start(fut, tag), Started::Pending(_)));
        }
        assert_eq!(pool.ready.len(), 8);
        assert!(pool.ready.is_entered());
    }
}
