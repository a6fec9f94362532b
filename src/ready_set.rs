//! Which of many child futures asked to be polled again.
//!
//! Combinators that drive many futures (bounded maps, races) give each child slot its own
//! waker. Waking a child sets that slot's bit and wakes the parent task once; the parent
//! then polls only the slots whose bits it takes. Bits live in `AtomicU64` words, so a
//! wake is one `fetch_or` plus the parent wake-up, with no lock and no allocation, and
//! finding the ready slots costs one `swap` per 64 slots.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Wake, Waker};

use atomic_waker::AtomicWaker;

const BITS: usize = u64::BITS as usize;

#[derive(Debug, Default)]
struct Shared {
    words: Vec<AtomicU64>,
    parent: AtomicWaker,
}

impl Shared {
    fn mark(&self, index: usize) {
        let bit = 1 << (index % BITS);
        let previous = self.words[index / BITS].fetch_or(bit, Ordering::AcqRel);
        if previous & bit == 0 {
            self.parent.wake();
        }
    }
}

/// The waker handed to the future in one slot.
#[derive(Debug)]
struct SlotWaker {
    shared: Arc<Shared>,
    index: usize,
}

impl Wake for SlotWaker {
    fn wake(self: Arc<Self>) {
        self.shared.mark(self.index);
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.shared.mark(self.index);
    }
}

/// A fixed number of slots, each with its own waker, and the set of slots woken since the
/// parent last looked.
#[derive(Debug)]
pub(crate) struct ReadySet {
    shared: Arc<Shared>,
    wakers: Vec<Waker>,
}

impl ReadySet {
    /// A set of `slots` slots, none of them ready. Allocates once; never again.
    pub(crate) fn new(slots: usize) -> Self {
        let words = slots.div_ceil(BITS);
        let shared = Arc::new(Shared {
            words: (0..words).map(|_| AtomicU64::new(0)).collect(),
            parent: AtomicWaker::new(),
        });
        let wakers = (0..slots)
            .map(|index| {
                Waker::from(Arc::new(SlotWaker {
                    shared: shared.clone(),
                    index,
                }))
            })
            .collect();
        Self { shared, wakers }
    }

    /// The number of slots.
    pub(crate) fn len(&self) -> usize {
        self.wakers.len()
    }

    /// The waker of slot `index`: waking it marks the slot ready and wakes the parent.
    pub(crate) fn waker(&self, index: usize) -> &Waker {
        &self.wakers[index]
    }

    /// Remembers the parent task to wake. Call it before [`take_ready`](Self::take_ready)
    /// on every poll of the parent, so that no wake-up between the two is lost.
    pub(crate) fn register(&self, cx: &Context<'_>) {
        self.shared.parent.register(cx.waker());
    }

    /// Marks a slot ready by hand, as if its waker had been woken.
    pub(crate) fn mark(&self, index: usize) {
        self.shared.mark(index);
    }

    /// Takes the ready slots of the word `word` (slots `64 * word ..`), clearing them.
    /// Iterate words `0..self.words()` and the bits of each with [`for_each_bit`].
    pub(crate) fn take_word(&self, word: usize) -> u64 {
        // Cheap check first: most words are usually empty, and a load does not take the
        // cache line exclusively the way a swap does.
        let slot = &self.shared.words[word];
        if slot.load(Ordering::Acquire) == 0 {
            0
        } else {
            slot.swap(0, Ordering::AcqRel)
        }
    }

    /// The number of bit words; see [`take_word`](Self::take_word).
    pub(crate) fn words(&self) -> usize {
        self.shared.words.len()
    }
}

/// Calls `f` with the slot index of every set bit of `bits`, taken from word `word`.
pub(crate) fn for_each_bit(word: usize, mut bits: u64, mut f: impl FnMut(usize)) {
    while bits != 0 {
        let bit = bits.trailing_zeros() as usize;
        bits &= bits - 1;
        f(word * BITS + bit);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready(set: &ReadySet) -> Vec<usize> {
        let mut out = Vec::new();
        for word in 0..set.words() {
            for_each_bit(word, set.take_word(word), |index| out.push(index));
        }
        out
    }

    #[test]
    fn wakes_mark_slots_once_and_taking_clears_them() {
        let set = ReadySet::new(130);
        assert_eq!(set.len(), 130);
        assert!(ready(&set).is_empty());
        set.waker(3).wake_by_ref();
        set.waker(3).wake_by_ref();
        set.waker(129).wake_by_ref();
        set.mark(64);
        assert_eq!(ready(&set), [3, 64, 129]);
        assert!(ready(&set).is_empty());
    }

    #[test]
    fn a_wake_reaches_the_registered_parent() {
        use std::sync::atomic::AtomicUsize;
        struct Count(AtomicUsize);
        impl Wake for Count {
            fn wake(self: Arc<Self>) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let parent = Waker::from(count.clone());
        let set = ReadySet::new(2);
        set.register(&Context::from_waker(&parent));
        let owned = set.waker(1).clone(); // the by-value `wake` path
        owned.wake();
        set.waker(1).wake_by_ref(); // already marked: no second parent wake-up
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        assert_eq!(ready(&set), [1]);
    }
}
