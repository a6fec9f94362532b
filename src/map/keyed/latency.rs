//! An attempt's latency as the server gave it: the time it ran, less the time the stream
//! spent handed out and not polled (an attempt that ends meanwhile is seen only at the next
//! poll, so that time is the consumer's, not the server's). Read by adaptation.

/// The time a stream spent handed out and not polled: an output was returned and the
/// consumer had not asked for the next yet. An attempt that ends meanwhile is seen only
/// at the next poll, so that time is not the server's (see [`AttemptClock::latency`]).
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
    pub(super) started_at: u64,
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

    /// The attempt's latency, seen ending at `now`: the time it ran less the time the
    /// stream was handed out meanwhile; `None` when that was more than a quarter of it
    /// (the attempt may have ended any time while nobody polled, so how long the server
    /// took is not known: counting the wait would make a slow consumer look like a slow
    /// server). A consumer that polls again at once leaves a few microseconds out.
    pub(super) fn latency(&self, now: u64, unpolled: &Unpolled) -> Option<u64> {
        let ran = now.saturating_sub(self.started_at);
        let handed_out = unpolled.total() - self.unpolled_at_start;
        (handed_out.saturating_mul(4) <= ran).then(|| ran - handed_out)
    }
}
