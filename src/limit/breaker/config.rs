//! [`Breaker`]: the settings of a circuit breaker, and the rules they feed.

use std::time::Duration;

/// The largest count record: its outcomes are the bits of one `u128`.
pub(crate) const MAX_COUNT_RECORD: u32 = 128;

/// A count record that has heard no outcome for this long starts empty again.
pub(crate) const QUIET: Duration = Duration::from_secs(600);

/// How many times in a row a failed probe doubles the open period (so it grows to 16 times
/// [`Breaker::open_for`] at most).
pub(crate) const MAX_DOUBLINGS: u8 = 4;

/// How many buckets a time record is kept in.
pub(crate) const TIME_BUCKETS: u64 = 8;

/// The settings of a circuit **breaker**: when it opens, how long it stays open, how many
/// probes it lets through when half-open. One `Breaker` serves a
/// [`CircuitBreaker`](crate::CircuitBreaker) or every key of a
/// [`KeyedCircuitBreaker`](crate::KeyedCircuitBreaker).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::Breaker;
///
/// // Open when half of the last 40 attempts (20 at least) went wrong; probe after 10 s.
/// let breaker = Breaker::new()
///     .failure_ratio(0.5)
///     .over_last(40)
///     .min_attempts(20)
///     .open_for(Duration::from_secs(10));
/// # let _ = breaker;
/// ```
///
/// # The rules
///
/// Each attempt runs under a permit and reports its [`Outcome`](crate::Outcome): a success
/// counts good, a **failure and an overload both count bad** (an adaptive key counts only
/// overloads; a breaker counts both, so a host that answers nothing but 503 opens it).
///
/// - **Closed**: every attempt may go. The outcomes of its attempts fill the record (the last
///   [`over_last`](Self::over_last) outcomes, or those of the last
///   [`over_time`](Self::over_time)). After each report, when the record holds
///   [`min_attempts`](Self::min_attempts) outcomes or more and the bad ones are
///   [`failure_ratio`](Self::failure_ratio) of them or more, the breaker **opens**.
/// - **Open**: no attempt may go: `try_acquire` fails at once with
///   [`CircuitBreakerError`](crate::CircuitBreakerError), which says when the next probe may go; `acquire`
///   waits for it, holding nothing. After the open period the breaker is half-open.
/// - **Half-open**: up to [`probes`](Self::probes) permits are out at once, each a **probe**.
///   Once that many probes succeeded, the breaker **closes** with an empty record. The first
///   probe that fails (or overloads) opens it again, for twice the previous open period (up to
///   16 times [`open_for`](Self::open_for): a host down for an hour costs a probe every
///   eight minutes with the defaults, not one every 30 seconds, and a host that is back is
///   found within that); closing resets the period to `open_for`.
/// - **A permit dropped without a report** says nothing about the server (a cancelled attempt,
///   a lost race): when closed it is ignored; when it was a probe, its place is free again
///   for another probe.
/// - **Stale outcomes are ignored**: the report of a permit granted before the breaker last
///   changed state (an attempt that started while closed and ends while open, say) speaks of
///   a server that has been judged since.
/// - **Quiet breakers forget**: a count record that heard no outcome for ten minutes starts
///   empty again (outcomes that old say nothing about the server now), and a time record
///   forgets by itself. A [`KeyedCircuitBreaker`](crate::KeyedCircuitBreaker) forgets a closed
///   key whose record is empty and that has no permit out, so its memory follows the keys
///   heard from lately, not every key ever seen.
///
/// A breaker is per process: it judges the attempts of this process only (a fleet of
/// crawlers does not share breaker state).
///
/// # Defaults, for crawling many hosts
///
/// A breaker per host sees tens of attempts a minute, not the hundreds a second of the
/// services that resilience4j, Polly and failsafe-go guard, and a crawler skipping a host
/// that is alive costs it pages. So:
///
/// | setting | tollgate | resilience4j | Polly (v8) | failsafe-go |
/// | --- | --- | --- | --- | --- |
/// | record | last 20 outcomes | last 100 | last 30 s | last 1 (count) |
/// | min attempts | 10 | 100 | 100 | 1 |
/// | failure ratio | 0.8 | 0.5 | 0.1 | 1 failure |
/// | open for | 30 s, doubling per failed probe up to 8 min | 60 s | 5 s | 60 s |
/// | probes | 1, all must succeed | 10, judged by the ratio | 1 | 1 |
///
/// - **Record of 20 outcomes, 10 at least**: a count record judges a slow host (one request
///   every 10 s) as soon as a fast one, where a time record would never hold enough outcomes
///   for it; 100 attempts, resilience4j's and Polly's minimum, would take a host of tens of
///   attempts a minute several minutes of failures to open.
/// - **Failure ratio 0.8**: a host that is down fails every attempt, and the ratio hardly
///   changes how soon it opens (a new host at its tenth attempt whatever the ratio; one whose
///   record was full of successes after 16 failures, 10 at a ratio of 0.5). The ratio decides
///   hosts that fail in part, and the record is small, so a low ratio would open on a streak
///   of bad luck: of 20 attempts to a host that fails 30% of the time, 10 or more are bad
///   once in 21 records, 16 or more once in 180,000. Polly's 0.1 and resilience4j's 0.5 judge
///   records of 100 calls and more.
/// - **Open for 30 s**: between Polly's 5 s (a service restarting behind a load balancer)
///   and resilience4j's and failsafe-go's 60 s; the doubling (none of the three doubles by
///   default) keeps probing a host that stays down cheap.
/// - **One probe, which must succeed**: as Polly and failsafe-go; ten probes at once
///   (resilience4j) would be a burst at a host that may still be down. With more probes,
///   every one must succeed (failsafe-go's success threshold equal to its count), where
///   resilience4j judges them by the failure ratio: with a few probes a ratio is noise.
///
/// A 404 is a [`failure`](crate::Outcome::failure): a crawler whose input holds many dead
/// links may report a 404 as a success (the server answered) or raise the ratio.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Breaker {
    failure_ratio: f64,
    min_attempts: u32,
    record: RecordSpec,
    /// Nanoseconds (saturated).
    open_for: u64,
    probes: u32,
}

/// Which record a breaker judges by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RecordSpec {
    /// The last this many outcomes (1 to [`MAX_COUNT_RECORD`]).
    Count(u32),
    /// The outcomes of the last this many nanoseconds (at least 1).
    Time(u64),
}

impl Breaker {
    /// The defaults (see the table above): a record of the last 20 outcomes, at least 10
    /// attempts, a failure ratio of 0.8, open for 30 s, one probe.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::Breaker;
    ///
    /// assert_eq!(Breaker::new(), Breaker::default());
    /// ```
    pub const fn new() -> Self {
        Self {
            failure_ratio: 0.8,
            min_attempts: 10,
            record: RecordSpec::Count(20),
            open_for: 30_000_000_000,
            probes: 1,
        }
    }

    /// The share of bad outcomes (failures and overloads) in the record at which the breaker
    /// opens: it opens when `bad / attempts >= ratio` (and there are enough attempts, see
    /// [`min_attempts`](Self::min_attempts)). `1.0` opens only when every attempt of the
    /// record went wrong.
    ///
    /// # Examples
    ///
    /// ```
    /// let half = tollgate::Breaker::new().failure_ratio(0.5);
    /// # let _ = half;
    /// ```
    ///
    /// # Panics
    ///
    /// If `ratio` is not above 0 and at most 1 (NaN included).
    #[must_use]
    #[track_caller]
    pub const fn failure_ratio(mut self, ratio: f64) -> Self {
        assert!(
            ratio > 0.0 && ratio <= 1.0,
            "tollgate::Breaker::failure_ratio: the ratio must be above 0 and at most 1"
        );
        self.failure_ratio = ratio;
        self
    }

    /// How many outcomes the record must hold before the breaker judges the ratio: fewer
    /// never open it. With a count record smaller than this, a full record is enough.
    ///
    /// # Examples
    ///
    /// ```
    /// // Open on the fifth failure in a row of a fresh breaker (the ratio is 0.8).
    /// let quick = tollgate::Breaker::new().min_attempts(5);
    /// # let _ = quick;
    /// ```
    ///
    /// # Panics
    ///
    /// If `attempts` is 0.
    #[must_use]
    #[track_caller]
    pub const fn min_attempts(mut self, attempts: u32) -> Self {
        assert!(
            attempts > 0,
            "tollgate::Breaker::min_attempts: at least 1 attempt"
        );
        self.min_attempts = attempts;
        self
    }

    /// Judge the last `outcomes` outcomes (replaces a [`over_time`](Self::over_time)).
    ///
    /// # Examples
    ///
    /// ```
    /// let last_fifty = tollgate::Breaker::new().over_last(50);
    /// # let _ = last_fifty;
    /// ```
    ///
    /// # Panics
    ///
    /// If `outcomes` is 0 or above 128.
    #[must_use]
    #[track_caller]
    pub const fn over_last(mut self, outcomes: u32) -> Self {
        assert!(
            outcomes > 0 && outcomes <= MAX_COUNT_RECORD,
            "tollgate::Breaker::over_last: from 1 to 128 outcomes"
        );
        self.record = RecordSpec::Count(outcomes);
        self
    }

    /// Judge the outcomes of the last `record` of time (replaces a
    /// [`over_last`](Self::over_last)). The record is kept in eight buckets: an
    /// outcome counts for at least seven eighths of `record` and less than all of it.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let last_minute = tollgate::Breaker::new().over_time(Duration::from_secs(60));
    /// # let _ = last_minute;
    /// ```
    ///
    /// # Panics
    ///
    /// If `record` is zero.
    #[must_use]
    #[track_caller]
    pub const fn over_time(mut self, record: Duration) -> Self {
        assert!(
            !record.is_zero(),
            "tollgate::Breaker::over_time: the record must be longer than zero"
        );
        self.record = RecordSpec::Time(saturating_nanos(record));
        self
    }

    /// How long the breaker stays open after it opens from closed; each failed probe in a
    /// row doubles it, up to 16 times this (see the rules above). Zero lets the next attempt
    /// probe at once.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let brief = tollgate::Breaker::new().open_for(Duration::from_secs(5));
    /// # let _ = brief;
    /// ```
    #[must_use]
    pub const fn open_for(mut self, period: Duration) -> Self {
        self.open_for = saturating_nanos(period);
        self
    }

    /// How many probes may be out at once when half-open, and how many must succeed to
    /// close the breaker.
    ///
    /// # Examples
    ///
    /// ```
    /// let careful = tollgate::Breaker::new().probes(3);
    /// # let _ = careful;
    /// ```
    ///
    /// # Panics
    ///
    /// If `probes` is 0.
    #[must_use]
    #[track_caller]
    pub const fn probes(mut self, probes: u32) -> Self {
        assert!(probes > 0, "tollgate::Breaker::probes: at least 1 probe");
        self.probes = probes;
        self
    }

    pub(crate) const fn ratio(&self) -> f64 {
        self.failure_ratio
    }

    /// The fewest outcomes that are judged: `min_attempts`, or a full count record.
    pub(crate) const fn least_attempts(&self) -> u32 {
        match self.record {
            RecordSpec::Count(size) if size < self.min_attempts => size,
            _ => self.min_attempts,
        }
    }

    pub(crate) const fn record(&self) -> RecordSpec {
        self.record
    }

    /// The open period after `doublings` failed probes in a row, in nanoseconds.
    pub(crate) const fn open_period(&self, doublings: u8) -> u64 {
        self.open_for.saturating_mul(1 << doublings)
    }

    pub(crate) const fn probe_count(&self) -> u32 {
        self.probes
    }
}

impl Default for Breaker {
    /// [`Breaker::new`].
    fn default() -> Self {
        Self::new()
    }
}

const fn saturating_nanos(duration: Duration) -> u64 {
    let nanos = duration.as_nanos();
    if nanos > u64::MAX as u128 {
        u64::MAX
    } else {
        nanos as u64
    }
}
