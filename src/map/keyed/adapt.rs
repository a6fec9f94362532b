//! Whether a keyed map adapts its keys' limits and rates, and what it measures for that:
//! the outcome of each attempt (the user's function over its output) and the attempt's
//! latency, leaving out the time a stream sat handed out and not polled.
//!
//! The map's type says which ([`Fixed`] or [`Adapting`]), so a map that does not adapt
//! compiles every hook below to nothing: no clock read, no call, no state per attempt.

use crate::limit::adaptive::outcome::Outcome;

/// How a keyed map reads an attempt's output `O` for its adaptive keys.
pub(crate) trait Classify<O> {
    /// Whether the map adapts (every hook is skipped when not).
    const ADAPTIVE: bool;
    /// What the attempt's output says; `None` on a map that does not adapt.
    fn classify(&mut self, output: &O) -> Option<Outcome>;
}

/// The keys of a keyed map keep the limits and rates they are given: the map does not
/// adapt them (the default).
#[derive(Debug, Default, Clone, Copy)]
pub struct Fixed;

impl<O> Classify<O> for Fixed {
    const ADAPTIVE: bool = false;

    #[inline(always)]
    fn classify(&mut self, _output: &O) -> Option<Outcome> {
        None
    }
}

/// The keys of a keyed map adapt their limits and rates from the outcome of each attempt,
/// which the function `C` reads from the attempt's output: made by
/// [`adaptive`](crate::futures::MapAsync::adaptive).
pub struct Adapting<C> {
    classify: C,
}

impl<C> Adapting<C> {
    pub(crate) fn new(classify: C) -> Self {
        Self { classify }
    }
}

impl<C> std::fmt::Debug for Adapting<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Adapting").finish_non_exhaustive()
    }
}

impl<O, C: FnMut(&O) -> Outcome> Classify<O> for Adapting<C> {
    const ADAPTIVE: bool = true;

    #[inline]
    fn classify(&mut self, output: &O) -> Option<Outcome> {
        Some((self.classify)(output))
    }
}

/// The time a stream spent handed out and not polled: an output was returned and the
/// consumer had not asked for the next yet. An attempt that ends meanwhile is seen only
/// at the next poll, so its latency leaves this time out (the server did not take it).
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Unpolled {
    /// All such time so far, in nanoseconds.
    total: u64,
    /// Since when the stream is handed out, if it is now.
    since: Option<u64>,
}

impl Unpolled {
    /// The stream returned an output at `now`.
    pub(super) fn handed_out(&mut self, now: u64) {
        self.since = Some(now);
    }

    /// The stream is polled again at `now`.
    pub(super) fn polled(&mut self, now: u64) {
        if let Some(since) = self.since.take() {
            self.total = self.total.saturating_add(now.saturating_sub(since));
        }
    }

    /// All time handed out so far.
    pub(super) fn total(&self) -> u64 {
        self.total
    }
}

/// What an adaptive map remembers of an attempt while it runs, for its latency.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct AttemptClock {
    /// When it started.
    started_at: u64,
    /// [`Unpolled::total`] then.
    unpolled_at_start: u64,
}

impl AttemptClock {
    pub(super) fn start(now: u64, unpolled: &Unpolled) -> Self {
        Self {
            started_at: now,
            unpolled_at_start: unpolled.total(),
        }
    }

    /// The attempt's latency, seen ending at `now`; `None` when the stream was handed
    /// out meanwhile: the attempt may have ended any time while nobody polled, so the
    /// time it ran is not known (counting the wait would make a slow consumer look like
    /// a slow server; leaving the wait out would make it look fast).
    pub(super) fn latency(&self, now: u64, unpolled: &Unpolled) -> Option<u64> {
        (unpolled.total() == self.unpolled_at_start).then(|| now.saturating_sub(self.started_at))
    }
}
