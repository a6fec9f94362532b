//! Which of many child futures asked to be polled again.
//!
//! Combinators that drive many futures (the bounded maps, `map_keyed`) give each child
//! slot its own waker. Waking a child sets that slot's bit; the parent then polls only the
//! slots whose bits it takes. Bits live in `AtomicU64` words, so a wake is one atomic OR
//! with no lock and no allocation, and finding the ready slots costs one `swap` per
//! non-empty word.
//!
//! Three refinements keep the hot path short:
//! - the parent task is woken only when a word goes from empty to non-empty. Until the
//!   parent takes that word, further wakes in it only set their bit: the parent, already
//!   woken, will see them. (The parent registers before it looks, so nothing is lost.)
//! - while the parent is inside its own poll ([`ReadySet::enter`] until
//!   [`ReadySet::register`]) wakes do not wake it at all: it looks at the words before it
//!   returns `Pending`. A child that wakes itself while being polled (a yield, a ready
//!   channel) then costs one atomic OR and no executor round trip.
//! - from 8 words (512 slots) on, a summary word has one bit per word (set on the same
//!   empty-to-non-empty transition), so [`ReadySet::drain`] and [`ReadySet::any`] skip
//!   empty words without touching them: with 100,000 slots a wake-up costs a handful of
//!   loads, not 1,563.
//!
//! Slot wakers are created on first use, so a set sized for a large limit costs a few bits
//! per slot until its slots are actually used.

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Wake, Waker};

use atomic_waker::AtomicWaker;

const BITS: usize = u64::BITS as usize;

/// Below this many words the summary costs more than it saves: scan the words directly.
const SUMMARY_FROM_WORDS: usize = 8;

#[derive(Debug, Default)]
struct Shared {
    words: Box<[AtomicU64]>,
    /// Bit `w % 64` of `summary[w / 64]`: word `w` may be non-empty. A hint, never a
    /// promise in the other direction: a set bit may point to an empty word. Empty when
    /// there are fewer than `SUMMARY_FROM_WORDS` words.
    summary: Box<[AtomicU64]>,
    /// The parent is inside its poll and will look at the words before it returns
    /// `Pending` (after [`ReadySet::register`] clears this): wake-ups need not wake it.
    active: AtomicBool,
    parent: AtomicWaker,
}

impl Shared {
    #[inline]
    fn mark(&self, index: usize) {
        let word = index / BITS;
        // SeqCst: the `active` check below pairs with `register`'s store and look
        // (store `active`, then load the words) so that one of the two sides sees the
        // other.
        let previous = self.words[word].fetch_or(1 << (index % BITS), Ordering::SeqCst);
        if previous == 0 {
            if let Some(summary) = self.summary.get(word / BITS) {
                summary.fetch_or(1 << (word % BITS), Ordering::SeqCst);
            }
            if !self.active.load(Ordering::SeqCst) {
                self.parent.wake();
            }
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
    wakers: Box<[OnceLock<Waker>]>,
}

impl ReadySet {
    /// A set of `slots` slots, none of them ready. Allocates the bit words once; each
    /// slot's waker is allocated the first time [`waker`](Self::waker) asks for it.
    pub(crate) fn new(slots: usize) -> Self {
        let words = slots.div_ceil(BITS);
        let shared = Arc::new(Shared {
            words: (0..words).map(|_| AtomicU64::new(0)).collect(),
            summary: if words < SUMMARY_FROM_WORDS {
                Box::default()
            } else {
                (0..words.div_ceil(BITS))
                    .map(|_| AtomicU64::new(0))
                    .collect()
            },
            active: AtomicBool::new(false),
            parent: AtomicWaker::new(),
        });
        let wakers = (0..slots).map(|_| OnceLock::new()).collect();
        Self { shared, wakers }
    }

    /// The number of slots.
    pub(crate) fn len(&self) -> usize {
        self.wakers.len()
    }

    /// The waker of slot `index`: waking it marks the slot ready and wakes the parent.
    #[inline]
    pub(crate) fn waker(&self, index: usize) -> &Waker {
        self.wakers[index].get_or_init(|| {
            Waker::from(Arc::new(SlotWaker {
                shared: self.shared.clone(),
                index,
            }))
        })
    }

    /// The parent is polling: until it calls [`register`](Self::register), wake-ups only
    /// mark their slots and do not wake it. Call it on entering the parent's poll when
    /// the parent will look for ready slots before returning `Pending`, and return
    /// `Ready` or call `register` and look again before returning `Pending`.
    #[inline]
    pub(crate) fn enter(&self) {
        if !self.shared.active.load(Ordering::Relaxed) {
            self.shared.active.store(true, Ordering::Relaxed);
        }
    }

    /// Whether [`enter`](Self::enter) was called and [`register`](Self::register) not
    /// since.
    pub(crate) fn entered(&self) -> bool {
        self.shared.active.load(Ordering::Relaxed)
    }

    /// Remembers the parent task to wake (and ends [`enter`](Self::enter)). Call it before
    /// looking for ready slots ([`drain`](Self::drain), [`any`](Self::any)) when the parent
    /// is about to return `Pending`, so that no wake-up between the two is lost.
    pub(crate) fn register(&self, cx: &Context<'_>) {
        self.shared.active.store(false, Ordering::SeqCst);
        self.shared.parent.register(cx.waker());
    }

    /// Marks a slot ready by hand, as if its waker had been woken.
    pub(crate) fn mark(&self, index: usize) {
        self.shared.mark(index);
    }

    /// Whether any slot may be ready (a cheap look; it may answer `true` once for a word
    /// whose bits were just taken).
    #[inline]
    pub(crate) fn any(&self) -> bool {
        let shared = &*self.shared;
        let hints = if shared.summary.is_empty() {
            &shared.words
        } else {
            &shared.summary
        };
        hints.iter().any(|word| word.load(Ordering::SeqCst) != 0)
    }

    /// Takes every ready slot, calling `f` with each index (skipping empty words through
    /// the summary when there is one). If `f` breaks, the slots not yet passed to it stay
    /// marked.
    #[inline]
    pub(crate) fn drain(&self, mut f: impl FnMut(usize) -> ControlFlow<()>) -> ControlFlow<()> {
        let shared = &*self.shared;
        if shared.summary.is_empty() {
            for word in 0..shared.words.len() {
                take_bits(shared, word, &mut f)?;
            }
            return ControlFlow::Continue(());
        }
        for (s, summary) in shared.summary.iter().enumerate() {
            if summary.load(Ordering::Relaxed) == 0 {
                continue;
            }
            let mut words = summary.swap(0, Ordering::SeqCst);
            while words != 0 {
                let word = s * BITS + words.trailing_zeros() as usize;
                words &= words - 1;
                if take_bits(shared, word, &mut f).is_break() {
                    if words != 0 {
                        summary.fetch_or(words, Ordering::SeqCst);
                    }
                    return ControlFlow::Break(());
                }
            }
        }
        ControlFlow::Continue(())
    }
}

/// Takes the bits of one word and hands them to `f`; on a break, marks the rest again.
#[inline]
fn take_bits(
    shared: &Shared,
    word: usize,
    f: &mut impl FnMut(usize) -> ControlFlow<()>,
) -> ControlFlow<()> {
    let slot = &shared.words[word];
    if slot.load(Ordering::Relaxed) == 0 {
        return ControlFlow::Continue(());
    }
    let mut bits = slot.swap(0, Ordering::SeqCst);
    while bits != 0 {
        let index = word * BITS + bits.trailing_zeros() as usize;
        bits &= bits - 1;
        if f(index).is_break() {
            for_each_bit(word, bits, |index| shared.mark(index));
            return ControlFlow::Break(());
        }
    }
    ControlFlow::Continue(())
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
    use std::sync::atomic::AtomicUsize;

    fn drained(set: &ReadySet) -> Vec<usize> {
        let mut out = Vec::new();
        let _ = set.drain(|index| {
            out.push(index);
            ControlFlow::Continue(())
        });
        out
    }

    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn counting_waker() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        (count.clone(), Waker::from(count))
    }

    #[test]
    fn wakes_mark_slots_once_and_taking_clears_them() {
        let set = ReadySet::new(130);
        assert_eq!(set.len(), 130);
        assert!(drained(&set).is_empty());
        assert!(!set.any());
        set.waker(3).wake_by_ref();
        set.waker(3).wake_by_ref();
        set.waker(129).wake_by_ref();
        set.mark(64);
        assert!(set.any());
        assert_eq!(drained(&set), [3, 64, 129]);
        assert!(drained(&set).is_empty());
        assert!(!set.any());
    }

    #[test]
    fn a_wake_reaches_the_registered_parent() {
        let (count, parent) = counting_waker();
        let set = ReadySet::new(2);
        set.register(&Context::from_waker(&parent));
        let owned = set.waker(1).clone(); // the by-value `wake` path
        owned.wake();
        set.waker(1).wake_by_ref(); // already marked: no second parent wake-up
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        assert_eq!(drained(&set), [1]);
    }

    #[test]
    fn the_parent_is_woken_once_per_word_until_it_looks() {
        let (count, parent) = counting_waker();
        let set = ReadySet::new(200);
        set.register(&Context::from_waker(&parent));
        for index in [0, 5, 63] {
            set.waker(index).wake_by_ref();
        }
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        set.register(&Context::from_waker(&parent));
        set.waker(64).wake_by_ref(); // another word: another wake-up
        assert_eq!(count.0.load(Ordering::SeqCst), 2);
        assert_eq!(drained(&set), [0, 5, 63, 64]);
        set.register(&Context::from_waker(&parent));
        set.waker(5).wake_by_ref(); // the word was taken: wakes again
        assert_eq!(count.0.load(Ordering::SeqCst), 3);
        assert_eq!(drained(&set), [5]);
    }

    #[test]
    fn wakes_while_the_parent_is_polling_only_mark() {
        let (count, parent) = counting_waker();
        let set = ReadySet::new(3);
        set.register(&Context::from_waker(&parent));
        set.enter();
        set.waker(0).wake_by_ref();
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            0,
            "the parent will look anyway"
        );
        set.register(&Context::from_waker(&parent));
        assert!(set.any(), "register, then look: the mark is there");
        assert_eq!(drained(&set), [0]);
        set.waker(1).wake_by_ref();
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            1,
            "after register, wakes wake"
        );
    }

    #[test]
    fn drain_finds_slots_across_summary_words_and_puts_back_on_break() {
        let set = ReadySet::new(10_000);
        let marked = [1, 70, 4095, 4096, 9_999];
        for index in marked {
            set.mark(index);
        }
        let mut seen = Vec::new();
        let flow = set.drain(|index| {
            seen.push(index);
            if index == 70 {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        });
        assert!(flow.is_break());
        assert_eq!(seen, [1, 70]);
        assert!(set.any());
        assert_eq!(drained(&set), [4095, 4096, 9_999]);
        assert!(!set.any());
        assert!(drained(&set).is_empty());
    }

    #[test]
    fn wakers_are_created_lazily_and_reused() {
        let set = ReadySet::new(1_000_000);
        assert!(set.wakers.iter().all(|waker| waker.get().is_none()));
        let first = set.waker(999_999).clone();
        assert!(first.will_wake(set.waker(999_999)));
        assert_eq!(set.wakers.iter().filter(|w| w.get().is_some()).count(), 1);
        first.wake();
        assert_eq!(drained(&set), [999_999]);
    }
}
