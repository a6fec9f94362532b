//! The contract of the scheduler's **parts**: each per-key feature (the key's rate, its
//! pause, a server's hints, adaptation, a breaker, shared limits, the retry budget, a
//! control's counts) is a part behind one interface, and the scheduler reads the parts,
//! not the features.
//!
//! A part is a map-level value (its settings: `Adaptive`, a breaker's `Breaker`, the retry
//! budget's ratio) registered once, in the order of `parts.rs`; its per-key state lives in
//! the key's entry (`KeyState`), inline, or behind a pointer that stays empty until the key
//! needs it (a breaker, an adaptive state). A map without a part holds `None` in its place:
//! one branch, no call through a pointer and no allocation per key.
//!
//! The contract, in two phases so that no part's refusal can strand what another granted:
//! 1. [`verdict`](Part::verdict) reads, and changes nothing: when may the key's next item
//!    start, as far as this part goes. The scheduler folds every part's verdict
//!    ([`Verdict::and`]) and starts an item only when all of them allow it at `now`.
//! 2. [`started`](Part::started): the start happened; each part takes what it costs it (a
//!    rate's state, a breaker's ticket, a permit of the shared limits). A part whose verdict
//!    allowed the start at `now` must not fail it here.
//!
//! Then [`ended`](Part::ended) when an attempt ends, with what the map read of its output;
//! [`is_idle`](Part::is_idle) before a key is forgotten (a key goes only when every part
//! holds nothing of it that a fresh key would not); [`show`](Part::show) for a control's
//! view of the key. A part reads the whole entry and changes only its own state; the
//! entry's items, running count and line belong to the scheduler.

use super::key::KeyState;
use super::latency::{AttemptClock, Unpolled};
use crate::limit::breaker::core::Ticket;
use crate::limit::outcome::Outcome;
use crate::map::control::KeyProgress;

/// What a part says of a key's next start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    /// It may start at this time (0: at once), as far as the part goes.
    At(u64),
    /// At this time it may ask its shared limits for a permit, and start once granted.
    Ask(u64),
    /// At this time its next item ends at once, never started and asking for nothing (an
    /// open breaker on a map whose open keys' items fail).
    Refuse(u64),
    /// It starts nothing until something of it changes (an attempt ends, a permit is
    /// granted or a setting moves), waiting out of every line.
    Held,
}

impl Verdict {
    /// No objection: the verdict of a part that does not hold the key back.
    pub(super) const NOW: Self = Self::At(0);

    /// The time of the verdict; `None` when held.
    #[inline(always)]
    pub(super) const fn time(self) -> Option<u64> {
        match self {
            Self::At(at) | Self::Ask(at) | Self::Refuse(at) => Some(at),
            Self::Held => None,
        }
    }

    /// Both verdicts in one: held if either holds the key; else at the later time, a
    /// refusal before an ask (a key whose item would end at once asks for no permit) and
    /// an ask before a plain start.
    #[inline(always)]
    pub(super) fn and(self, other: Self) -> Self {
        match (self, other) {
            // The common case, kept to one comparison.
            (Self::At(a), Self::At(b)) => Self::At(a.max(b)),
            _ => self.and_rare(other),
        }
    }

    /// [`and`](Self::and) of any two verdicts.
    #[inline(never)]
    fn and_rare(self, other: Self) -> Self {
        let (Some(a), Some(b)) = (self.time(), other.time()) else {
            return Self::Held;
        };
        let at = a.max(b);
        match (self, other) {
            (Self::Refuse(_), _) | (_, Self::Refuse(_)) => Self::Refuse(at),
            (Self::Ask(_), _) | (_, Self::Ask(_)) => Self::Ask(at),
            _ => Self::At(at),
        }
    }
}

/// What the parts hear of an attempt that ended.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ended<'a> {
    /// Its output, as the map's classification read it.
    pub(super) outcome: &'a Outcome,
    /// Whether the outcome carries a hint (read once for every part).
    pub(super) hinted: bool,
    /// The breaker ticket its start was granted (a map with breakers).
    pub(super) ticket: Option<Ticket>,
    /// When it started, for its latency (an adaptive map's).
    pub(super) clock: AttemptClock,
    /// The time the map spent handed out and not polled, for the latency.
    pub(super) unpolled: &'a Unpolled,
    /// Its attempt number (1 for the first), for what the parts report.
    pub(super) attempt: u32,
}

/// A per-key feature of the scheduler: see the module's docs for the contract. Every
/// method has a default that does nothing and objects to nothing: a part writes only what
/// it takes part in.
pub(super) trait Part<K, T> {
    /// `key`'s entry was made at `now` (a key first seen, or seen again after the map
    /// forgot it).
    fn made(&mut self, _key: &K, _state: &mut KeyState<T>, _now: u64) {}

    /// When `key` (entry `state`) may start its next item at `now`, as far as this part
    /// goes. Changes nothing.
    #[inline(always)]
    fn verdict(&self, _key: &K, _state: &KeyState<T>, _now: u64) -> Verdict {
        Verdict::NOW
    }

    /// An item of `key` started at `now`, every part's verdict allowing it; `first` when
    /// it is the item's first attempt.
    #[inline(always)]
    fn started(&mut self, _key: &K, _state: &mut KeyState<T>, _now: u64, _first: bool) {}

    /// An attempt of `key` ended at `now`: the parts hear of it before the scheduler
    /// counts it as no longer running.
    #[inline(always)]
    fn ended(&mut self, _key: &K, _state: &mut KeyState<T>, _ended: &Ended<'_>, _now: u64) {}

    /// Whether the part holds nothing of `state` that a fresh key's would not at `now`,
    /// the map having pulled `pulled` items: the key may be forgotten as far as it goes.
    /// It may drop what it holds only when dropping it changes no decision (a clean
    /// breaker).
    #[inline(always)]
    fn is_idle(&mut self, _state: &mut KeyState<T>, _now: u64, _pulled: u64) -> bool {
        true
    }

    /// What the part shows of the key in a control's view.
    fn show(&self, _state: &KeyState<T>, _now: u64, _progress: &mut KeyProgress<K>) {}
}

/// A part a map may not have: without it, no objection, nothing to do, nothing held.
impl<K, T, P: Part<K, T>> Part<K, T> for Option<P> {
    #[inline(always)]
    fn made(&mut self, key: &K, state: &mut KeyState<T>, now: u64) {
        if let Some(part) = self {
            part.made(key, state, now);
        }
    }

    #[inline(always)]
    fn verdict(&self, key: &K, state: &KeyState<T>, now: u64) -> Verdict {
        match self {
            Some(part) => part.verdict(key, state, now),
            None => Verdict::NOW,
        }
    }

    #[inline(always)]
    fn started(&mut self, key: &K, state: &mut KeyState<T>, now: u64, first: bool) {
        if let Some(part) = self {
            part.started(key, state, now, first);
        }
    }

    #[inline(always)]
    fn ended(&mut self, key: &K, state: &mut KeyState<T>, ended: &Ended<'_>, now: u64) {
        if let Some(part) = self {
            part.ended(key, state, ended, now);
        }
    }

    #[inline(always)]
    fn is_idle(&mut self, state: &mut KeyState<T>, now: u64, pulled: u64) -> bool {
        self.as_mut()
            .is_none_or(|part| part.is_idle(state, now, pulled))
    }

    #[inline(always)]
    fn show(&self, state: &KeyState<T>, now: u64, progress: &mut KeyProgress<K>) {
        if let Some(part) = self {
            part.show(state, now, progress);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Verdict::{Ask, At, Held, Refuse};

    #[test]
    fn verdicts_fold_to_the_strictest() {
        assert_eq!(At(3).and(At(5)), At(5));
        assert_eq!(At(7).and(Ask(5)), Ask(7));
        assert_eq!(
            Ask(2).and(Refuse(1)),
            Refuse(2),
            "a refused key asks for nothing"
        );
        assert_eq!(Refuse(9).and(At(1)), Refuse(9));
        assert_eq!(At(1).and(Held), Held);
        assert_eq!(Held.and(Refuse(0)), Held);
        assert_eq!(At(0).and(super::Verdict::NOW), At(0));
    }
}
