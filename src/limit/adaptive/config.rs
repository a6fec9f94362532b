//! [`Adaptive`]: the one line of settings every adaptive key follows.

use crate::limit::rate::gcra::Rate;

/// The settings of adaptive keys: a floor and a ceiling for each key's limit, and maybe a
/// ceiling for its rate. Each key moves its own values between them from its own signals,
/// by the rules below.
///
/// One `Adaptive` serves every key: an [`AdaptiveLimiter`](crate::AdaptiveLimiter) (one key
/// of its own), or every key of a keyed map. Each process adapts on its own.
///
/// # Examples
///
/// ```
/// use tollgate::{Adaptive, Rate};
///
/// // Between 1 and 32 at once, at most 50 starts per second, found by each key itself.
/// let adaptive = Adaptive::new(1, 32).rate_ceiling(Rate::per_second(50));
/// assert_eq!((adaptive.floor(), adaptive.ceiling()), (1, 32));
/// assert_eq!(adaptive.get_rate_ceiling(), Some(Rate::per_second(50)));
/// ```
///
/// # The rules
///
/// **Signals.** A key learns from its own starts (how many of its items run, whether the
/// start waited for its rate) and from the end of each attempt: its [`Outcome`](crate::Outcome)
/// and its latency (how long it ran). Only successes give latency samples, and only those of
/// 1 ms or more (an answer from a cache or an error page says nothing about a queue). A plain
/// failure changes nothing. An **outage** (the server is out for a while: a 503 with
/// `Retry-After`) changes nothing either, unless an attempt that was under way as it came back
/// succeeds: a server that serves some requests while refusing others is overloaded, and that
/// success counts as an overload (below). A server that is down refuses everything, and the
/// key keeps what it learned for when it is back (waiting out the pause the outage's hint asks
/// for).
///
/// **Rounds.** A key judges in rounds: a round lasts at least its baseline latency (below)
/// and 100 ms, and until 4 attempts ended in it (or as many as its limit, if lower; or one,
/// once it lasted four times that long). In a round, the **limit binds** if a start found
/// the key using its whole limit; the **rate binds** if a start waited for it and the
/// round's starts came at 80% of the rate or more.
///
/// **What lowers a value.** An overload cuts one value to 0.7 times itself, at most once per
/// round, and only for an attempt started after the last cut (the overloads of attempts
/// already running at a cut tell the same news again: a burst of them cuts once). Which
/// value, since an outcome does not tell a 429 from a 503:
/// - an overload that took 1 s or more (and half again the baseline): an attempt timeout,
///   a queue that overflowed. It cuts the limit (nothing at the floor), never the rate;
/// - else, if the rate bound the key (in this round or the last): the rate;
/// - else, if the limit bound and the limit in use (its whole part) is above its floor: the
///   limit, and the rate is capped at 4
///   times the measured start rate (an unspaced burst may be what the server refused; a key
///   without a rate gets one so);
/// - else (the key used neither in full): the rate, from the lower of itself and the
///   measured start rate; a key without a rate gets one, 0.7 times its measured start rate.
///
/// Latency lowers the limit too: once 8 samples of attempts started since the last cut are
/// in, their mean is compared with the key's **baseline** (the lowest such mean so far,
/// never an average that would follow a queue upward). Above 1.5 times the baseline, the
/// server is queueing: the limit goes to `limit × baseline / mean`, 1 lower at least. Up to
/// 1.25 times it, latency allows a rise; in between, the values hold. After 3 rounds at the
/// floor, the next mean becomes the baseline, even a higher one (a server that became slower
/// for good must not pin the limit down).
///
/// The first cut of slow start (below) starts from the value one rise before, the last one
/// a round found clean; a rate refused at the pace it started with, before any rise, is
/// halved (the server's pace is anywhere below it).
///
/// **What raises a value.** A round with no overload, a success at least, and latency that
/// allows it raises each value that bound the key in it. Until its first cut the limit grows
/// by half each such round and the rate by 15% (slow start: a rate crosses its server's
/// pace by at most that much, and a server with few requests to serve is rarely pushed to
/// its pace at all). After a cut a value follows a cubic curve back to its value before the
/// cut: quickly at first, flat near that value (where the last overload came), then faster
/// and faster past it. The limit is back in about 50 starts (8 such rounds at least), the rate
/// in about 400 starts (2 to 480 seconds of such rounds: a server metering starts strictly
/// refuses now and then even below its rate, when requests reach it bunched by the network,
/// so the rate spends long near the value that was refused). No round raises a value by more
/// than half, and never above its ceiling. A value that does not bind never rises: a key held
/// back by something else (a map's global limit) keeps its limit.
///
/// Two rules find a server that takes more than it did. A rate that has gone 60 seconds and
/// about 400 starts without a cut **explores**: it rises by a tenth each round it binds, until
/// the next cut (exploring a server that is as it was costs about one refused start).
/// And a rate far below the pace it held lately (under 55% of it: a server that became slower
/// for a while, or refused a burst) **returns** once it has gone 30 seconds without a cut: it
/// rises the same way until the next cut. The pace held is 90% of where recent overloads
/// came, fading by half every 10 minutes towards the latest.
///
/// **Starts, floors, ceilings.** A new key starts at its floor (a server that never answers
/// holds no more than that) and a rate of 1.8 starts per second (or the rate ceiling, if
/// lower: a start few servers refuse, which costs a fast server the first seconds of its
/// crawl); without [`rate_ceiling`](Self::rate_ceiling), with no rate. A key forgotten and seen again
/// starts afresh. The limit stays within the floor and the ceiling, the rate within one start
/// per 10 seconds (or the rate ceiling, if lower) and the rate ceiling. A ceiling set for one
/// key below its value takes the value down at once; a higher one lets it creep up from
/// there.
///
/// **How well.** On a simulated host the rules settle near what the host allows: a limit
/// whose latency grows past a knee of 4 to 32, without any error, stays within 1.5 times the
/// knee (it does not climb); every attempt timing out takes the limit to its floor within
/// 9 rounds; a strict meter is followed at about 90% of its rate. A host limited only by
/// what runs at once, under a `rate_ceiling`, is paced by the rate its first 503 cut, which
/// keeps it at about 80% of what its knee allows (without a `rate_ceiling` the limit finds the
/// knee: 93%).
#[derive(Clone, Debug)]
pub struct Adaptive {
    floor: usize,
    ceiling: usize,
    rate_ceiling: Option<Rate>,
}

impl Adaptive {
    /// A key's limit moves between `floor` and `ceiling` (both included). It starts low:
    /// at the floor (so a server that never answers holds no more than that). Without
    /// [`rate_ceiling`](Self::rate_ceiling) a key has no rate until an overload shows that its pace,
    /// not its limit, is what the server objects to (see the rules above).
    ///
    /// A ceiling above [`Semaphore::MAX_PERMITS`](crate::Semaphore::MAX_PERMITS) counts as
    /// that.
    ///
    /// # Examples
    ///
    /// ```
    /// let adaptive = tollgate::Adaptive::new(2, 16);
    /// assert_eq!(adaptive.get_rate_ceiling(), None);
    /// ```
    ///
    /// # Panics
    ///
    /// If `floor` is 0 (a limit of 0 would never start anything) or `floor` is above
    /// `ceiling`; the message names both values.
    #[track_caller]
    pub fn new(floor: usize, ceiling: usize) -> Self {
        assert!(
            floor > 0 && floor <= ceiling,
            "tollgate::Adaptive::new: the floor must be at least 1 and at most the ceiling \
             (floor {floor}, ceiling {ceiling})"
        );
        Self {
            floor,
            ceiling,
            rate_ceiling: None,
        }
    }

    /// The highest rate a key may adapt to. A key then starts at 1.8 starts per second (or
    /// `rate`, if lower) and moves below it; the burst of `rate` is the burst of every rate
    /// the key takes.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Adaptive, Rate};
    ///
    /// let adaptive = Adaptive::new(1, 8).rate_ceiling(Rate::per_second(20));
    /// assert_eq!(adaptive.get_rate_ceiling(), Some(Rate::per_second(20)));
    /// ```
    #[must_use]
    pub fn rate_ceiling(mut self, rate: Rate) -> Self {
        self.rate_ceiling = Some(rate);
        self
    }

    /// The lowest a key's limit may go.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(tollgate::Adaptive::new(3, 9).floor(), 3);
    /// ```
    pub fn floor(&self) -> usize {
        self.floor
    }

    /// The highest a key's limit may go.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(tollgate::Adaptive::new(3, 9).ceiling(), 9);
    /// ```
    pub fn ceiling(&self) -> usize {
        self.ceiling
    }

    /// The highest a key's rate may go (`None`: no ceiling, see [`new`](Self::new)).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Adaptive, Rate};
    ///
    /// assert_eq!(Adaptive::new(1, 4).get_rate_ceiling(), None);
    /// let capped = Adaptive::new(1, 4).rate_ceiling(Rate::per_minute(60));
    /// assert_eq!(capped.get_rate_ceiling(), Some(Rate::per_second(1)));
    /// ```
    pub fn get_rate_ceiling(&self) -> Option<Rate> {
        self.rate_ceiling
    }
}
