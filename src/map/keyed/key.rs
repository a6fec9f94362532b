//! One key's entry in the scheduler: its waiting items, how many run, its place in the
//! lines, and the per-key state the scheduler's parts keep inline (its settings, its rate's
//! state, its pause, its retries and what it spent of its retry budget, how long it is kept
//! idle); and when its items and room alone let it start (the parts say the rest:
//! `part.rs`). A part that keeps more of a key (adaptation, a breaker) keeps it in a column
//! of its own at the entry's slot (`key_table.rs`): no allocation per key, nothing paid by
//! maps without the part.
//!
//! Invariants: items back from a failed attempt go before fresh ones once their time has
//! come (they were pulled earlier), and fresh ones start in the order they were pulled;
//! a key is idle (forgetting it changes nothing) only with nothing running or waiting and
//! no part holding anything of it that a fresh key's would not.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::budget::Spent;
use super::key_table::Recycle;
use super::pacing::Due;
use super::queues::{Queue, Queues};
use super::settings::InForce;
use crate::limit::rate::gcra::Gcra;

/// The unit of how long a key is kept: 2^24 ns, about 17 ms (a key is kept for tens of
/// seconds; 32 bits of it reach two years past the clock's origin).
const KEPT_SHIFT: u32 = 24;

/// Where a key is in the scheduler's lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Place {
    /// In no line: nothing to start, no room, or asking its shared limits.
    Out,
    /// In `turns`: may start now (checked again when its turn comes).
    Turn,
    /// In `askers`: may ask its shared limits for a permit now.
    Ask,
    /// In `sleepers`, waking at this time (at most [`LATEST_WAKE`]).
    Asleep(u64),
}

/// The latest time a key sleeps until: a key held longer (a pause of `Duration::MAX`)
/// wakes then, some 584 years on, and sleeps again.
pub(super) const LATEST_WAKE: u64 = u64::MAX - 3;

/// A [`Place`] in one word (a key's entry keeps one per key): a time to wake at, or one
/// of the three values above [`LATEST_WAKE`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PlaceWord(u64);

impl PlaceWord {
    const OUT: u64 = u64::MAX;
    const TURN: u64 = u64::MAX - 1;
    const ASK: u64 = u64::MAX - 2;

    #[inline(always)]
    pub(super) const fn get(self) -> Place {
        match self.0 {
            Self::OUT => Place::Out,
            Self::TURN => Place::Turn,
            Self::ASK => Place::Ask,
            at => Place::Asleep(at),
        }
    }

    #[inline(always)]
    pub(super) const fn new(place: Place) -> Self {
        Self(match place {
            Place::Out => Self::OUT,
            Place::Turn => Self::TURN,
            Place::Ask => Self::ASK,
            Place::Asleep(at) if at > LATEST_WAKE => LATEST_WAKE,
            Place::Asleep(at) => at,
        })
    }
}

#[derive(Debug)]
pub(super) struct KeyState<T> {
    /// Its items running (counted from their start to their end).
    running: u32,
    /// Items pulled and not started yet, oldest first (their nodes are the scheduler's).
    pub(super) fresh: Queue,
    /// Its items back from failed attempts and what it spent of its retry budget; boxed
    /// and made at the key's first retry (most keys never retry, and a key's entry is
    /// what a crawl of a million hosts keeps per host: one word here, not five).
    pub(super) retries: Option<Box<Retries<T>>>,
    /// The limit and rate the key is held to.
    pub(super) settings: InForce,
    /// GCRA state of the key's rate (0: fresh).
    pub(super) tat: u64,
    /// No start before this time (a pause asked by the server).
    pub(super) paused_until: u64,
    /// Where it is in the lines ([`place`](Self::place)).
    place: PlaceWord,
    /// Kept, even idle, until this time ([`keep_until`](Self::keep_until)), in units of
    /// [`KEPT_SHIFT`]: 60 s after a server's hint set its limit or rate (`hints.rs`), or
    /// after its last attempt on an adaptive map (`adaptation.rs`) or on a keyed map with a
    /// control (`tally.rs`).
    kept: u32,
    /// Its account in the slot-time line (`turns.rs`): the low bits of the slot time
    /// charged to it so far.
    pub(super) account: u32,
    /// The entry's slot in the scheduler's slab: where the parts that keep a column
    /// (adaptation, breakers: `key_table.rs`) keep the key's row.
    slot: u32,
}

/// A key's items back from failed attempts and what it spent of its retry budget.
#[derive(Debug)]
pub(super) struct Retries<T> {
    /// The items, earliest first (due when they may start; ties in input order).
    pub(super) due: BinaryHeap<Reverse<Due<T>>>,
    pub(super) spent: Spent,
    /// The end of the latest pause the retry policy asked for the key (`pause_key`; 0:
    /// none): a pause of the key that ends then is the policy's, any other a server's.
    pub(super) policy_pause: u64,
}

impl<T> KeyState<T> {
    #[inline]
    pub(super) fn new(settings: InForce, slot: u32) -> Self {
        Self {
            running: 0,
            fresh: Queue::EMPTY,
            retries: None,
            settings,
            tat: 0,
            paused_until: 0,
            place: PlaceWord::new(Place::Out),
            kept: 0,
            account: 0,
            slot,
        }
    }

    /// Renews, for a key made in its place, an entry another key left
    /// ([`vacate`](Recycle::vacate)): as [`new`](Self::new) makes one.
    #[inline]
    pub(super) fn renew(&mut self, settings: InForce, at: u32) {
        // Every field named (a field added to the entry must be renewed too, or this stops
        // compiling), each as `new` makes it; the queue and the retries are empty already
        // (`vacate`).
        let Self {
            running,
            fresh,
            retries,
            settings: in_force,
            tat,
            paused_until,
            place,
            kept,
            account,
            slot,
        } = self;
        debug_assert!(fresh.is_empty() && retries.is_none(), "a vacated entry");
        debug_assert_eq!(*slot, at, "an entry is renewed in its own slot");
        *running = 0;
        *in_force = settings;
        *tat = 0;
        *paused_until = 0;
        *place = PlaceWord::new(Place::Out);
        *kept = 0;
        *account = 0;
    }

    /// Keeps the key, even idle, until `at` at least (to the end of its [`KEPT_SHIFT`]
    /// unit).
    #[inline]
    pub(super) fn keep_until(&mut self, at: u64) {
        let units = ((at >> KEPT_SHIFT) + 1).min(u64::from(u32::MAX)) as u32;
        self.kept = self.kept.max(units);
    }

    /// Whether the key is still kept at `now` ([`keep_until`](Self::keep_until)).
    #[inline]
    pub(super) fn is_kept(&self, now: u64) -> bool {
        (now >> KEPT_SHIFT) < u64::from(self.kept)
    }

    /// Until when the key is kept ([`keep_until`](Self::keep_until)), in units of
    /// [`KEPT_SHIFT`] (0: not kept): a quiet key's last attempt ended 60 s before, as every
    /// part that keeps a key keeps it 60 s from an attempt's start or end.
    #[inline]
    pub(super) fn kept_until(&self) -> u32 {
        self.kept
    }

    /// How many of its items run.
    #[inline(always)]
    pub(super) fn running(&self) -> usize {
        self.running as usize
    }

    /// One of its running items ended (or, refused, never started).
    #[inline(always)]
    pub(super) fn end_one(&mut self) {
        self.running -= 1;
    }

    /// The entry's slot in the scheduler's slab (where the parts' columns keep its rows).
    #[inline(always)]
    pub(super) fn slot(&self) -> u32 {
        self.slot
    }

    /// The key's retries and spending, made empty if it has none yet.
    pub(super) fn retries_mut(&mut self) -> &mut Retries<T> {
        self.retries.get_or_insert_with(|| {
            Box::new(Retries {
                due: BinaryHeap::new(),
                spent: Spent::default(),
                policy_pause: 0,
            })
        })
    }

    /// What the key spent of its retry budget, if it ever retried (a key that never did
    /// spent nothing).
    #[inline(always)]
    pub(super) fn spent(&self) -> Option<&Spent> {
        self.retries.as_deref().map(|retries| &retries.spent)
    }

    /// The key finished an attempt and has nothing running or waiting (`quiet`), the map
    /// having pulled `pulled` items: its spending starts to lapse, and its retries keep
    /// no heap (nor their box, with nothing spent and no pause of the retry policy's in
    /// force to tell apart), kept as the key may be for long.
    pub(super) fn settle_retries(&mut self, pulled: u64, quiet: bool) {
        let Some(retries) = &mut self.retries else {
            return;
        };
        retries.spent.quiet_from(pulled);
        if quiet {
            let policy_paused =
                retries.policy_pause != 0 && retries.policy_pause == self.paused_until;
            if retries.spent.is_owed() || policy_paused {
                retries.due = BinaryHeap::new();
            } else {
                self.retries = None;
            }
        }
    }

    /// A quiet key has work again, the map having pulled `pulled` items: what it spent of
    /// its retry budget counts from here, as a forgotten key's would.
    pub(super) fn reopen_retries(&mut self, pulled: u64) {
        if let Some(retries) = &mut self.retries {
            retries.spent.come_back(pulled);
        }
    }

    /// Whether the key's pause holds it at `now`.
    #[inline(always)]
    pub(super) fn is_paused(&self, now: u64) -> bool {
        self.paused_until > now
    }

    /// Where the key is in the scheduler's lines.
    #[inline(always)]
    pub(super) fn place(&self) -> Place {
        self.place.get()
    }

    /// Moves the key to `place` (a wake-up time is held to [`LATEST_WAKE`]).
    #[inline(always)]
    pub(super) fn set_place(&mut self, place: Place) {
        self.place = PlaceWord::new(place);
    }

    /// The most items of the key that may run at once: its setting, or on an adaptive
    /// map the limit it adapted to (kept in the settings, so reading it costs the same
    /// on every map).
    #[inline(always)]
    pub(super) fn limit(&self) -> usize {
        self.settings.limit()
    }

    /// The rate the key's starts are spaced by: its setting, or on an adaptive map the
    /// rate it adapted to (kept in the settings, like the limit).
    #[inline(always)]
    pub(super) fn rate(&self) -> Option<Gcra> {
        self.settings.rate()
    }

    /// When the key's next item may start by its items alone: now for a fresh one, else
    /// the time its earliest retry is due; `None` without an item.
    pub(super) fn work_ready_at(&self) -> Option<u64> {
        if self.fresh.is_empty() {
            self.retries.as_ref()?.due.peek().map(|Reverse(due)| due.at)
        } else {
            Some(0)
        }
    }

    pub(super) fn has_items(&self) -> bool {
        !self.fresh.is_empty() || self.retries.as_ref().is_some_and(|r| !r.due.is_empty())
    }

    pub(super) fn items(&self) -> usize {
        self.fresh.len() + self.retries.as_ref().map_or(0, |r| r.due.len())
    }

    /// Queues a freshly pulled item, its nodes in `queues`.
    #[inline]
    pub(super) fn push_fresh(&mut self, queues: &mut Queues<T>, item: T) {
        queues.push_back(&mut self.fresh, item);
    }

    /// Takes every fresh item (pulled, never started) into `into`.
    pub(super) fn take_fresh(&mut self, queues: &mut Queues<T>, into: &mut Vec<T>) {
        queues.drain_into(&mut self.fresh, into);
    }

    /// Takes every item back from a failed attempt into `into` (a stop cancels them).
    pub(super) fn take_retrying(&mut self, into: &mut Vec<T>) {
        if let Some(retries) = &mut self.retries {
            into.extend(retries.due.drain().map(|Reverse(due)| due.value));
        }
    }

    /// When the key may start its next item by its items and its room alone (its parts
    /// say the rest): `None` without an item or without room.
    #[inline(always)]
    pub(super) fn ready_at(&self) -> Option<u64> {
        if self.running() >= self.limit() {
            return None;
        }
        self.work_ready_at()
    }

    /// Makes every item back from a failed attempt due by `now` (its key's breaker opened
    /// on a map where such items fail: they end at once instead of after their pauses).
    pub(super) fn due_now(&mut self, now: u64) {
        let Some(Retries { due: heap, .. }) = self.retries.as_deref_mut() else {
            return;
        };
        if heap.iter().any(|Reverse(due)| due.at > now) {
            *heap = std::mem::take(heap)
                .into_iter()
                .map(|Reverse(due)| {
                    Reverse(Due {
                        at: due.at.min(now),
                        ..due
                    })
                })
                .collect();
        }
    }

    /// Queues an item back from a failed attempt (no longer running), not to start before
    /// `not_before`; `order` is its place in the input.
    pub(super) fn push_retry(&mut self, item: T, order: u64, not_before: u64) {
        self.end_one();
        self.retries_mut().due.push(Reverse(Due {
            at: not_before,
            order,
            value: item,
        }));
    }

    /// Takes the item to start at `now`, counted as running: a retry whose time has come,
    /// else the oldest fresh item (a first attempt: `true` beside it), else the earliest
    /// retry. `None` without an item. The fresh items' nodes are in `queues`.
    #[inline(always)]
    pub(super) fn take_item(&mut self, now: u64, queues: &mut Queues<T>) -> Option<(T, bool)> {
        let due =
            |heap: &BinaryHeap<Reverse<Due<T>>>| heap.peek().is_some_and(|Reverse(d)| d.at <= now);
        let taken = match self.retries.as_deref_mut() {
            Some(Retries { due: heap, .. }) if due(heap) => {
                (heap.pop().expect("peeked").0.value, false)
            }
            retries => match queues.pop_front(&mut self.fresh) {
                Some(item) => (item, true),
                None => (retries?.due.pop()?.0.value, false),
            },
        };
        self.running += 1;
        Some(taken)
    }

    /// Whether the key has nothing running or waiting: it may be forgotten if every part
    /// holds nothing of it a fresh key's would not.
    ///
    /// A key's own settings do not keep its entry: the scheduler keeps them apart, until
    /// cleared, and a key made again takes them, so the entries stay bounded by the work
    /// in hand and the keys seen recently (and the settings by the keys a user set).
    pub(super) fn is_quiet(&self) -> bool {
        self.running == 0 && !self.has_items()
    }
}

/// A key's entry left in the scheduler's slab when the key is forgotten (it has no item):
/// its boxed states go.
impl<T> Recycle for KeyState<T> {
    fn vacate(&mut self) {
        debug_assert!(self.fresh.is_empty(), "a forgotten key has no item");
        self.retries = None;
    }
}
