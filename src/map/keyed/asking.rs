//! Where the keys of a map with shared limits stand with them: the line of keys that may
//! ask for a permit, the asks in flight, the permits in hand and the "later"s heard.
//!
//! Kept beside the key entries, not in them: a map without shared limits carries none of
//! it. A key of such a map goes to its turn only with a permit in hand; without one, it
//! asks (once at a time) when its own limits would let it start and its "later" has
//! passed.
//!
//! Invariants: `granted` and `asking` are the sums over the entries; an entry that says
//! nothing a fresh one would not is removed, and an entry goes with its key.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

use super::key::KeyState;
use super::part::{Part, Verdict};
use super::shared::LaterReason;

/// The shortest "later" a key sleeps for (1 ms), whatever its shared limits said.
const MIN_LATER: u64 = 1_000_000;

/// Where one key stands with the shared limits.
#[derive(Debug, Clone, Copy)]
struct Asked {
    /// Permits granted, not yet taken by a start (the map holds the permits).
    granted: usize,
    /// Whether an ask is in flight.
    asking: bool,
    /// No ask before this time (the limits said "later").
    later_until: u64,
    /// Why the limits said "later" (meaningful while `later_until` is ahead).
    reason: LaterReason,
    /// No ask before this time even if the key is woken earlier: the floor after the last
    /// "later", so a wake-up that is always ready cannot make the key ask in a loop.
    floor_until: u64,
}

impl Asked {
    /// Whether the entry says nothing a fresh one would not.
    fn is_empty(&self) -> bool {
        self.granted == 0 && !self.asking && self.later_until == 0
    }
}

impl Default for Asked {
    fn default() -> Self {
        NOT_ASKED
    }
}

/// A key the shared limits know nothing of.
const NOT_ASKED: Asked = Asked {
    granted: 0,
    asking: false,
    later_until: 0,
    reason: LaterReason::Busy,
    floor_until: 0,
};

/// The keys' standing with the map's shared limits.
#[derive(Debug)]
pub(super) struct Asks<K> {
    /// Whether the map has shared limits: every start needs a permit of them.
    gated: bool,
    /// Keys that may ask their shared limits now, in the order they get to.
    askers: VecDeque<K>,
    /// Where keys stand (an entry goes with its key).
    asked: HashMap<K, Asked>,
    /// Permits in hand over all keys, and asks in flight.
    granted: usize,
    asking: usize,
    /// Whether the shared limits' last word on a warm-up was that one is on (set by an
    /// answer of "warming up", cleared by the next grant).
    warming_up: bool,
    /// Keys whose breaker opened or refused a start while they held a permit: the map
    /// drops one of the key's permits for each (their standing counts them gone).
    returned: Vec<K>,
}

impl<K> Asks<K> {
    pub(super) fn new() -> Self {
        Self {
            gated: false,
            askers: VecDeque::new(),
            asked: HashMap::new(),
            granted: 0,
            asking: 0,
            warming_up: false,
            returned: Vec::new(),
        }
    }

    /// Takes the keys whose permits went back (see the field).
    pub(super) fn take_returned(&mut self) -> Vec<K> {
        std::mem::take(&mut self.returned)
    }

    /// Whether every start needs a permit of the map's shared limits.
    #[inline]
    pub(super) fn is_gated(&self) -> bool {
        self.gated
    }

    /// Every start needs a permit of the map's shared limits from now on.
    pub(super) fn set_gated(&mut self) {
        self.gated = true;
    }

    /// Permits in hand over all keys.
    pub(super) fn granted(&self) -> usize {
        self.granted
    }

    /// Permits in hand and asks in flight: the starts already asked for.
    pub(super) fn pending(&self) -> usize {
        self.granted + self.asking
    }

    /// Forgets every key (the map's work was dropped).
    pub(super) fn clear(&mut self) {
        self.askers.clear();
        self.asked.clear();
        self.granted = 0;
        self.asking = 0;
    }

    pub(super) fn push_asker(&mut self, key: K) {
        self.askers.push_back(key);
    }

    pub(super) fn pop_asker(&mut self) -> Option<K> {
        self.askers.pop_front()
    }

    pub(super) fn has_askers(&self) -> bool {
        !self.askers.is_empty()
    }

    /// How many keys told "later" still wait at `now`, and how many of those were told
    /// the limits are warming up.
    pub(super) fn told_later(&self, now: u64) -> (usize, usize) {
        let mut later = 0;
        let mut warming_up = 0;
        for asked in self.asked.values() {
            if asked.later_until > now {
                later += 1;
                warming_up += usize::from(asked.reason == LaterReason::WarmingUp);
            }
        }
        (later, warming_up)
    }
}

impl<K: Hash + Eq + Clone> Asks<K> {
    /// [`Part::verdict`] on a map with shared limits (kept out of line: the other maps'
    /// hot paths pay one branch for it). With a permit in hand the key may start; while it
    /// asks, it waits out of the lines; else it asks once its "later" has passed.
    #[inline(never)]
    fn verdict_gated(&self, key: &K) -> Verdict {
        let asked = self.asked.get(key).unwrap_or(&NOT_ASKED);
        if asked.granted > 0 {
            Verdict::NOW
        } else if asked.asking {
            Verdict::Held
        } else {
            Verdict::Ask(asked.later_until)
        }
    }

    /// Gives back every permit `key` holds (its breaker holds it: an open key asks for
    /// none, and holds none through its open period).
    pub(super) fn give_back(&mut self, key: &K) {
        while self.has_permit(key) {
            self.take_permit(key);
            self.returned.push(key.clone());
        }
    }

    /// Whether `key` has a permit in hand.
    pub(super) fn has_permit(&self, key: &K) -> bool {
        self.asked.get(key).is_some_and(|asked| asked.granted > 0)
    }

    /// A start of `key` took one of its permits (or its breaker refused the start, and the
    /// map gives the permit back).
    pub(super) fn take_permit(&mut self, key: &K) {
        let asked = self.asked.get_mut(key).expect("a permit in hand");
        asked.granted -= 1;
        if asked.is_empty() {
            self.asked.remove(key);
        }
        self.granted -= 1;
    }

    /// `key` asks its shared limits for a permit.
    pub(super) fn start_ask(&mut self, key: K) {
        let asked = self.asked.entry(key).or_default();
        asked.asking = true;
        asked.later_until = 0;
        self.asking += 1;
    }

    /// The answer to `key`'s ask came (or will never come).
    fn answered(asking: &mut usize, asked: &mut Asked) {
        *asking -= usize::from(asked.asking);
        asked.asking = false;
    }

    /// The limits granted `key` a permit, which it needs while it has more than `items`
    /// waiting: whether it keeps it; `None` for a key they know nothing of (it is dropped).
    pub(super) fn grant(&mut self, key: &K, items: usize) -> Option<bool> {
        self.warming_up = false;
        let asked = self.asked.get_mut(key)?;
        Self::answered(&mut self.asking, asked);
        let needed = items > asked.granted;
        if needed {
            asked.granted += 1;
            asked.later_until = 0;
            self.granted += 1;
        } else if asked.is_empty() {
            self.asked.remove(key);
        }
        Some(needed)
    }

    /// The limits told `key` to ask again at `until` (or when woken earlier), for
    /// `reason`: whether this answer starts a warm-up of the limits (the first one told
    /// since the last grant), and whether the key is known (its place may change).
    pub(super) fn later(
        &mut self,
        key: &K,
        until: u64,
        reason: LaterReason,
        now: u64,
    ) -> (bool, bool) {
        let warm_up_starts = reason == LaterReason::WarmingUp && !self.warming_up;
        self.warming_up |= warm_up_starts;
        let Some(asked) = self.asked.get_mut(key) else {
            return (warm_up_starts, false);
        };
        Self::answered(&mut self.asking, asked);
        asked.reason = reason;
        // Never at once: an answer of "now" would have the key ask in a loop.
        asked.floor_until = now.saturating_add(MIN_LATER);
        asked.later_until = until.max(asked.floor_until);
        (warm_up_starts, true)
    }

    /// `key`'s room in its shared limits may be back: it may ask again at once, or at the
    /// floor after its last "later" if that is still ahead. Whether its place may change.
    pub(super) fn wake(&mut self, key: &K, now: u64) -> bool {
        let Some(asked) = self.asked.get_mut(key) else {
            return false;
        };
        if asked.later_until <= now {
            return false;
        }
        asked.later_until = if asked.floor_until > now {
            asked.floor_until
        } else {
            0
        };
        if asked.is_empty() {
            self.asked.remove(key);
        }
        true
    }

    /// The limits could not answer `key`'s ask.
    pub(super) fn ask_failed(&mut self, key: &K) {
        if let Some(asked) = self.asked.get_mut(key) {
            Self::answered(&mut self.asking, asked);
            if asked.is_empty() {
                self.asked.remove(key);
            }
        }
    }

    /// Forgets `key` (forgotten by the scheduler): an ask in flight is forgotten with it
    /// (its answer finds no key and a permit is dropped); so is a "later" (its next item
    /// asks afresh).
    pub(super) fn forget(&mut self, key: &K) {
        if let Some(asked) = self.asked.remove(key) {
            self.asking -= usize::from(asked.asking);
        }
    }

    /// Keeps only the keys `keep` says the scheduler still has.
    pub(super) fn retain(&mut self, keep: impl Fn(&K) -> bool) {
        let asking = &mut self.asking;
        self.asked.retain(|key, asked| {
            let kept = keep(key);
            if !kept {
                *asking -= usize::from(asked.asking);
            }
            kept
        });
    }

    /// Takes back the permits granted for items that are gone: how many each key no
    /// longer needs, given the items it has left.
    pub(super) fn take_surplus(&mut self, items: impl Fn(&K) -> usize) -> Vec<(K, usize)> {
        let mut surplus = Vec::new();
        for (key, asked) in &mut self.asked {
            let extra = asked.granted.saturating_sub(items(key));
            if extra > 0 {
                asked.granted -= extra;
                self.granted -= extra;
                surplus.push((key.clone(), extra));
            }
        }
        surplus
    }
}

/// Shared limits as a part: a key of a map with them starts only with a permit in hand
/// (it asks for one when every other part would let it start: see [`Verdict::and`]); a
/// start takes the permit; when an attempt's end leaves the key's breaker open, its
/// permits go back at once. A map without shared limits pays one branch.
impl<K: Hash + Eq + Clone, T> Part<K, T> for Asks<K> {
    #[inline(always)]
    fn verdict(&self, key: &K, _state: &KeyState<T>, _now: u64) -> Verdict {
        if self.gated {
            self.verdict_gated(key)
        } else {
            Verdict::NOW
        }
    }

    #[inline(always)]
    fn started(&mut self, key: &K, _state: &mut KeyState<T>, _now: u64, _first: bool) {
        if self.gated {
            self.take_permit(key);
        }
    }
}
