//! Which of many child futures asked to be polled again: the one wake bit-set under the
//! bounded maps and `race`.
//!
//! A combinator that drives many futures (the *parent*) polls each child with a waker of
//! its own. Waking a child sets that child's bit in a [`WakeSet`]; the parent then polls
//! only the children whose bits it takes. Bits live in `AtomicU64` words, so a wake-up is
//! one atomic OR with no lock and no allocation, and finding the woken children costs one
//! `swap` per non-empty word.
//!
//! Two ways to hand out the child wakers sit on the same bits:
//! - [`ReadySet`] (the maps' pool): one waker per slot, made the first time the slot is
//!   used and kept as long as the set. A slot is reused by the next future, so its waker is
//!   too; a stale wake-up only costs a spurious poll of whatever runs there.
//! - [`Lender`] (`race`): one spare waker, renumbered for each child it is lent to, and
//!   taken away only by a child that keeps a clone of it. Most contestants of a race never
//!   keep their waker (they finish on the first poll, or only wake themselves during it),
//!   so a race of ready contestants allocates no waker at all.
//!
//! # The protocol
//!
//! The parent is one task; it alone enters, registers, takes bits and lends wakers. Wakers
//! run on any thread. State: the bit words, a summary word per 64 words (from
//! [`SUMMARY_FROM_WORDS`] words on), the `active` flag and the parent's waker. Every
//! access below is `SeqCst` unless it says otherwise.
//!
//! 1. **A wake-up** ORs its bit into its word. Only if the word was empty does it go on: it
//!    sets the word's summary bit, then reads `active`, and wakes the parent if `active`
//!    is false. A word that was not empty has already woken the parent (or will be looked
//!    at, by 2 or 3), and only the parent empties words, so one wake-up per word and per
//!    look is enough.
//! 2. **The parent enters its poll** ([`WakeSet::enter`]: sets `active`, `Relaxed`, as
//!    only the parent writes it) when it will look at the words before it returns
//!    `Pending`. Until then wake-ups only set bits: a child that wakes itself while being
//!    polled (a yield, a ready channel) costs one atomic OR and no executor round trip.
//! 3. **Before returning `Pending`** the parent calls [`WakeSet::register`] (stores `false`
//!    in `active`, then registers its waker), and only then looks at the words
//!    ([`WakeSet::has_woken`] or [`WakeSet::drain`]). A wake-up whose OR the look misses comes
//!    after the look in the `SeqCst` order, so its read of `active` comes after the
//!    store of `false`: it wakes the parent, and the waker slot (an `AtomicWaker`) hands
//!    that wake-up to the waker just registered (or to the one being registered). A
//!    wake-up that read `active` as `true` read it before that store (or from a later
//!    poll's `enter`, which ends with its own register and look), so its OR comes before
//!    the look: the look sees the bit. Either way nothing is lost.
//! 4. **Taking bits** swaps a word to zero (after a plain load finds it non-empty: a load
//!    does not take the cache line the way a swap does). With a summary, the parent swaps
//!    the summary word first, then takes the words it names. A summary bit is a hint: it
//!    may name a word already taken. A word with bits but no summary bit exists only while
//!    the wake-up that found the word empty is between its two ORs; if the parent's look
//!    misses the summary bit, that wake-up reads `active` after the look, as in 3, and
//!    wakes the parent.
//! 5. **Reusing a lent waker** for another child (a new number) is allowed only when
//!    nobody but the parent holds it: the `Arc` behind it has exactly two owners, the
//!    [`Lender`] and the `Waker` itself. Nobody else can wake it then, nor clone it; a
//!    wake-up through a clone dropped since has read the old number before its release
//!    decrement of the count, and the parent's acquire fence after reading the count
//!    orders that read before the renumbering. So a wake-up reaches the child it was lent
//!    to, or (when the child has finished, which the parent sees) a spurious poll of a slot
//!    that ignores it. A waker whose count is higher is never renumbered: the child keeps
//!    it for as long as it runs, and a finished child's waker is dropped.
//!
//! `tests/loom_wake.rs` checks 1-5 under loom: the atomics and the parent's waker slot come
//! from [`crate::sync`]. loom treats `SeqCst` loads and stores as `AcqRel`, too weak for the
//! store-buffering pair of rule 3 (a wake-up ORs then reads `active`; the parent stores
//! `active` then reads the words), so under loom a `SeqCst` fence sits between the two
//! accesses of each side ([`crate::sync::loom_seq_cst_fence`], nothing outside loom). The
//! `Arc`s behind the wakers stay `std`'s (a `Waker` can only be made safely from a `std`
//! `Arc`), so loom interleaves the strong-count reads and drops of rule 5 only at the
//! neighbouring atomic operations and does not explore their weak orderings.

mod lend;

pub(crate) use lend::{Lender, Lent};

use std::ops::ControlFlow;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Wake, Waker};

use crate::sync::{AtomicBool, AtomicU64, AtomicUsize, AtomicWaker, loom_seq_cst_fence};

const BITS: usize = u64::BITS as usize;

/// Below this many words the summary costs more than it saves: scan the words directly.
const SUMMARY_FROM_WORDS: usize = 8;

/// The bits and the parent's waker, shared with every child waker.
#[derive(Debug)]
struct Shared {
    /// The bits of slots 0..64, inline: most sets are small, and a race of two contestants
    /// should not pay an allocation for one word.
    first: AtomicU64,
    /// The bits of slots 64.., one word per 64.
    rest: Box<[AtomicU64]>,
    /// Bit `w % 64` of `summary[w / 64]`: word `w` may be non-empty. A hint, never a
    /// promise in the other direction: a set bit may point to an empty word. Empty when
    /// there are fewer than `SUMMARY_FROM_WORDS` words.
    summary: Box<[AtomicU64]>,
    /// The parent is inside its poll and will look at the words before it returns
    /// `Pending` (after [`WakeSet::register`] clears this): wake-ups need not wake it.
    active: AtomicBool,
    parent: AtomicWaker,
    /// The slot that a waker made from `Shared` itself stands for (see [`Lender`]).
    lent_index: AtomicUsize,
}

impl Shared {
    fn new(slots: usize) -> Self {
        let words = slots.div_ceil(BITS).max(1);
        Self {
            first: AtomicU64::new(0),
            // Most races are this small: skip building an empty boxed slice from an iterator.
            rest: if words == 1 {
                Box::default()
            } else {
                (1..words).map(|_| AtomicU64::new(0)).collect()
            },
            summary: if words < SUMMARY_FROM_WORDS {
                Box::default()
            } else {
                (0..words.div_ceil(BITS))
                    .map(|_| AtomicU64::new(0))
                    .collect()
            },
            active: AtomicBool::new(false),
            parent: AtomicWaker::new(),
            lent_index: AtomicUsize::new(0),
        }
    }

    #[inline]
    fn word(&self, word: usize) -> &AtomicU64 {
        match word {
            0 => &self.first,
            _ => &self.rest[word - 1],
        }
    }

    /// Rule 1 of the protocol.
    #[inline]
    fn mark(&self, index: usize) {
        let word = index / BITS;
        let previous = self
            .word(word)
            .fetch_or(1 << (index % BITS), Ordering::SeqCst);
        if previous == 0 {
            if let Some(summary) = self.summary.get(word / BITS) {
                summary.fetch_or(1 << (word % BITS), Ordering::SeqCst);
            }
            loom_seq_cst_fence();
            if !self.active.load(Ordering::SeqCst) {
                self.parent.wake();
            }
        }
    }
}

/// The bit-set and its protocol, without the child wakers: see the module docs.
#[derive(Debug)]
pub(crate) struct WakeSet {
    shared: Arc<Shared>,
}

impl WakeSet {
    /// A set of `slots` slots, none of them woken. Allocates only when `slots > 64`.
    pub(crate) fn new(slots: usize) -> Self {
        Self {
            shared: Arc::new(Shared::new(slots)),
        }
    }

    /// The parent is polling: until it calls [`register`](Self::register), wake-ups only
    /// mark their slots and do not wake it. Call it on entering the parent's poll when
    /// the parent will look for woken slots before returning `Pending`, and return
    /// `Ready` or call `register` and look again before returning `Pending`.
    #[inline]
    pub(crate) fn enter(&self) {
        if !self.shared.active.load(Ordering::Relaxed) {
            self.shared.active.store(true, Ordering::Relaxed);
        }
    }

    /// Whether [`enter`](Self::enter) was called and [`register`](Self::register) not
    /// since.
    pub(crate) fn is_entered(&self) -> bool {
        self.shared.active.load(Ordering::Relaxed)
    }

    /// Remembers the parent task to wake (and ends [`enter`](Self::enter)). Call it before
    /// looking for woken slots ([`drain`](Self::drain), [`has_woken`](Self::has_woken)) when the parent
    /// is about to return `Pending`, so that no wake-up between the two is lost.
    pub(crate) fn register(&self, cx: &Context<'_>) {
        self.shared.active.store(false, Ordering::SeqCst);
        self.shared.parent.register(cx.waker());
        loom_seq_cst_fence();
    }

    /// Marks a slot woken by hand, as if its waker had been woken.
    pub(crate) fn mark(&self, index: usize) {
        self.shared.mark(index);
    }

    /// Whether slot `index` is marked woken (a hint, for telling a child that woke itself
    /// during its poll from one woken by another).
    #[inline]
    pub(crate) fn is_marked(&self, index: usize) -> bool {
        self.shared.word(index / BITS).load(Ordering::Relaxed) & (1 << (index % BITS)) != 0
    }

    /// Whether any slot may be woken (a cheap look; it may answer `true` once for a word
    /// whose bits were just taken).
    #[inline]
    pub(crate) fn has_woken(&self) -> bool {
        let shared = &*self.shared;
        if shared.summary.is_empty() {
            shared.first.load(Ordering::SeqCst) != 0
                || shared
                    .rest
                    .iter()
                    .any(|word| word.load(Ordering::SeqCst) != 0)
        } else {
            shared
                .summary
                .iter()
                .any(|word| word.load(Ordering::SeqCst) != 0)
        }
    }

    /// Takes every woken slot, calling `f` with each index in increasing order within a
    /// word (skipping empty words through the summary when there is one). If `f` breaks,
    /// the slots not yet passed to it stay marked.
    #[inline]
    pub(crate) fn drain(&self, mut f: impl FnMut(usize) -> ControlFlow<()>) -> ControlFlow<()> {
        let shared = &*self.shared;
        if shared.summary.is_empty() {
            take_bits(shared, 0, &mut f)?;
            for word in 1..=shared.rest.len() {
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
    let slot = shared.word(word);
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
fn for_each_bit(word: usize, mut bits: u64, mut f: impl FnMut(usize)) {
    while bits != 0 {
        let bit = bits.trailing_zeros() as usize;
        bits &= bits - 1;
        f(word * BITS + bit);
    }
}

/// The waker kept by one slot of a [`ReadySet`].
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

/// A [`WakeSet`] of a fixed number of slots, each with its own waker, made on first use
/// and kept: the maps' pool, whose slots are reused by future after future.
#[derive(Debug)]
pub(crate) struct ReadySet {
    set: WakeSet,
    wakers: Box<[OnceLock<Waker>]>,
}

impl ReadySet {
    /// A set of `slots` slots, none of them ready. Allocates the bit words once; each
    /// slot's waker is allocated the first time [`waker`](Self::waker) asks for it.
    pub(crate) fn new(slots: usize) -> Self {
        Self {
            set: WakeSet::new(slots),
            wakers: (0..slots).map(|_| OnceLock::new()).collect(),
        }
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
                shared: self.set.shared.clone(),
                index,
            }))
        })
    }

    /// See [`WakeSet::enter`].
    #[inline]
    pub(crate) fn enter(&self) {
        self.set.enter();
    }

    /// See [`WakeSet::is_entered`].
    pub(crate) fn is_entered(&self) -> bool {
        self.set.is_entered()
    }

    /// See [`WakeSet::register`].
    pub(crate) fn register(&self, cx: &Context<'_>) {
        self.set.register(cx);
    }

    /// See [`WakeSet::mark`].
    pub(crate) fn mark(&self, index: usize) {
        self.set.mark(index);
    }

    /// See [`WakeSet::has_woken`].
    #[inline]
    pub(crate) fn has_woken(&self) -> bool {
        self.set.has_woken()
    }

    /// See [`WakeSet::drain`].
    #[inline]
    pub(crate) fn drain(&self, f: impl FnMut(usize) -> ControlFlow<()>) -> ControlFlow<()> {
        self.set.drain(f)
    }
}

/// The wake layer's internals, public only in loom builds so that `tests/loom_wake.rs` can
/// model them directly (hidden from docs; not an API).
#[cfg(tollgate_loom)]
pub mod model {
    use std::ops::ControlFlow;
    use std::task::{Context, Waker};

    /// A [`super::ReadySet`]: slots with kept wakers.
    #[derive(Debug)]
    pub struct ReadySet(super::ReadySet);

    impl ReadySet {
        /// A set of `slots` slots.
        pub fn new(slots: usize) -> Self {
            Self(super::ReadySet::new(slots))
        }

        /// A clone of slot `index`'s waker.
        pub fn waker(&self, index: usize) -> Waker {
            self.0.waker(index).clone()
        }

        /// Rule 2.
        pub fn enter(&self) {
            self.0.enter();
        }

        /// Rule 3.
        pub fn register(&self, cx: &Context<'_>) {
            self.0.register(cx);
        }

        /// Whether any slot may be woken.
        pub fn has_woken(&self) -> bool {
            self.0.has_woken()
        }

        /// Takes every woken slot; with `stop_after`, breaks after that many.
        pub fn drain(&self, stop_after: Option<usize>) -> Vec<usize> {
            let mut taken = Vec::new();
            let _ = self.0.drain(|index| {
                taken.push(index);
                if Some(taken.len()) == stop_after {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            });
            taken
        }
    }
}

#[cfg(all(test, not(tollgate_loom)))]
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
        assert!(!set.has_woken());
        set.waker(3).wake_by_ref();
        set.waker(3).wake_by_ref();
        set.waker(129).wake_by_ref();
        set.mark(64);
        assert!(set.has_woken());
        assert_eq!(drained(&set), [3, 64, 129]);
        assert!(drained(&set).is_empty());
        assert!(!set.has_woken());
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
        assert!(set.has_woken(), "register, then look: the mark is there");
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
        assert!(set.has_woken());
        assert_eq!(drained(&set), [4095, 4096, 9_999]);
        assert!(!set.has_woken());
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

    #[test]
    fn sets_of_up_to_64_slots_use_the_inline_word_only() {
        for slots in [0, 1, 64] {
            let set = WakeSet::new(slots);
            assert!(set.shared.rest.is_empty() && set.shared.summary.is_empty());
        }
        let set = WakeSet::new(65);
        assert_eq!(set.shared.rest.len(), 1);
        set.mark(64);
        set.mark(0);
        let mut seen = Vec::new();
        let _ = set.drain(|index| {
            seen.push(index);
            ControlFlow::Continue(())
        });
        assert_eq!(seen, [0, 64]);
    }
}
