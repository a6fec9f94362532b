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
    /// The stream returned an output at `now`, or a consumer's work beside it ended: not
    /// polled from then, unless it has not been polled since it was last handed out (a
    /// consumer's work that was done before the map was driven: the time counts from the
    /// output's return).
    pub(super) fn handed_out(&mut self, now: u64) {
        self.since.get_or_insert(now);
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

#[cfg(test)]
mod tests {
    use super::{AttemptClock, Unpolled};

    #[test]
    fn handed_out_again_before_a_poll_counts_from_the_first() {
        // An output returned at 10, the consumer's work beside the map done at 30 without
        // the map driven, the next poll at 40: 30 handed out, not 10.
        let mut unpolled = Unpolled::default();
        let clock = AttemptClock::start(0, &unpolled);
        unpolled.handed_out(10);
        unpolled.handed_out(30);
        unpolled.polled(40);
        assert_eq!(unpolled.total(), 30);
        // Driven in between: only the time after the work counts again.
        unpolled.handed_out(50);
        unpolled.polled(60);
        unpolled.handed_out(70);
        unpolled.polled(75);
        assert_eq!(unpolled.total(), 45);
        // An attempt that ran 200 with 45 of it handed out: its latency is 155.
        assert_eq!(clock.latency(200, &unpolled), Some(155));
    }
}
