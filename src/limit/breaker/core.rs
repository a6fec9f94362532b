//! [`BreakerCore`]: one breaker's state and the rules of [`Breaker`]'s docs, as a pure state
//! machine.
//!
//! Synchronous and self-contained, like the adaptive core: the caller passes every time
//! (`u64` nanoseconds on its clock) and the settings; no clock, no lock, no allocation, a
//! few words of memory. [`CircuitBreaker`](super::CircuitBreaker) keeps one behind its
//! mutex, [`KeyedCircuitBreaker`](super::KeyedCircuitBreaker) one per key, and a keyed map
//! can keep one in each key's entry.
//!
//! Each permit carries a [`Ticket`]: the epoch it was granted in (the epoch moves on every
//! change of state, so a late report of an older epoch is recognised and ignored) and
//! whether it is a probe.

use std::fmt;
use std::time::Duration;

use super::config::{Breaker, MAX_DOUBLINGS};
use super::record::Record;
use crate::events;

/// Where a circuit breaker stands.
///
/// # Examples
///
/// ```
/// use tollgate::{Breaker, BreakerState, CircuitBreaker};
///
/// let breaker = CircuitBreaker::new(Breaker::new());
/// assert_eq!(breaker.state(), BreakerState::Closed);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BreakerState {
    /// Attempts go; their outcomes fill the record.
    Closed,
    /// Attempts are refused until the open period ends.
    Open,
    /// A few probes may go; their outcomes close the breaker or open it again.
    HalfOpen,
}

impl BreakerState {
    /// The name the `tracing` events give it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Closed => "closed",
            Self::Open => "open",
            Self::HalfOpen => "half-open",
        }
    }
}

/// What a permit remembers of its grant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Ticket {
    epoch: u32,
    probe: bool,
}

impl Ticket {
    /// Whether the permit is a probe: its end may let a waiter go.
    pub(crate) fn is_probe(self) -> bool {
        self.probe
    }
}

/// Why no permit was granted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Open until this time: the next probe may go then. `period`: how long this open
    /// period lasts in all, the most a wait may be (a caller whose `now` is stale, read
    /// before the breaker opened, would otherwise count a longer one).
    Open { until: u64, period: u64 },
    /// Half-open with every probe place taken: the next may go when a probe ends.
    ProbesOut,
}

/// A change of state, for the `tracing` event: the record's figures that caused it (for a
/// half-open breaker, its probes' outcomes so far).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Transition {
    pub(crate) from: BreakerState,
    pub(crate) to: BreakerState,
    pub(crate) attempts: u32,
    pub(crate) bad: u32,
    /// When `to` is open: how long, in nanoseconds.
    pub(crate) open_for: u64,
}

impl Transition {
    /// `bad / attempts` (0 without attempts).
    pub(crate) fn failure_ratio(&self) -> f64 {
        if self.attempts == 0 {
            0.0
        } else {
            f64::from(self.bad) / f64::from(self.attempts)
        }
    }

    /// Tells the `tracing` subscriber (with the feature), naming the key if there is one.
    pub(crate) fn emit(&self, key: Option<&dyn fmt::Debug>) {
        events::breaker_transition(
            key,
            self.from.as_str(),
            self.to.as_str(),
            self.failure_ratio(),
            self.attempts,
            Duration::from_nanos(self.open_for),
        );
    }
}

/// One breaker's state.
#[derive(Clone, Debug)]
pub(crate) struct BreakerCore {
    record: Record,
    /// When open: when the open period ends.
    until: u64,
    /// Moves on every change of state (wrapping).
    epoch: u32,
    /// Permits out, of every epoch.
    out: u32,
    /// When half-open: probes out, and probes that succeeded.
    probes_out: u32,
    probes_passed: u32,
    state: BreakerState,
    /// Failed probes in a row (up to [`MAX_DOUBLINGS`]): the open period is `open_for`
    /// doubled this many times.
    doublings: u8,
}

impl BreakerCore {
    /// A closed breaker with an empty record.
    pub(crate) const fn new(config: &Breaker) -> Self {
        Self {
            record: Record::new(config.record()),
            until: 0,
            epoch: 0,
            out: 0,
            probes_out: 0,
            probes_passed: 0,
            state: BreakerState::Closed,
            doublings: 0,
        }
    }

    /// The state at `now`: an open breaker whose period has passed reads as half-open.
    pub(crate) fn state(&self, now: u64) -> BreakerState {
        match self.state {
            BreakerState::Open if now >= self.until => BreakerState::HalfOpen,
            state => state,
        }
    }

    /// `(attempts, bad)` in the record at `now` (none while open or half-open).
    pub(crate) fn counts(&self, config: &Breaker, now: u64) -> (u32, u32) {
        self.record.counts(config.record(), now)
    }

    /// When open: when the open period ends (the next probe may go then).
    pub(crate) fn open_until(&self) -> u64 {
        self.until
    }

    /// Permits out, of every epoch.
    pub(crate) fn permits_out(&self) -> u32 {
        self.out
    }

    /// Whether the core holds nothing a fresh one would not: closed, an empty record, no
    /// permit out (a keyed breaker may then forget the key).
    pub(crate) fn is_forgettable(&self, config: &Breaker, now: u64) -> bool {
        self.state == BreakerState::Closed && self.out == 0 && self.counts(config, now).0 == 0
    }

    /// Whether a keyed map may drop the core with its idle key: no permit out, and either
    /// closed with no bad outcome in its record (successes only make it slower to open) or
    /// open with its open period over (a probe would go next anyway; a key seen again
    /// starts closed, and opens again after `min_attempts` failures).
    pub(crate) fn is_clean(&self, config: &Breaker, now: u64) -> bool {
        self.out == 0
            && match self.state(now) {
                BreakerState::Closed => self.counts(config, now).1 == 0,
                BreakerState::HalfOpen => true,
                BreakerState::Open => false,
            }
    }

    /// Whether the breaker is half-open with every probe it lets through out (or passed):
    /// the next start is refused until one of them ends.
    pub(crate) fn is_probing_full(&self, config: &Breaker) -> bool {
        self.state == BreakerState::HalfOpen
            && self.probes_out.saturating_add(self.probes_passed) >= config.probe_count()
    }

    /// Grants a permit at `now` if the state allows one. An open breaker whose period has
    /// passed turns half-open first (the transition is returned).
    pub(crate) fn try_acquire(
        &mut self,
        config: &Breaker,
        now: u64,
    ) -> (Result<Ticket, Refusal>, Option<Transition>) {
        let mut transition = None;
        if self.state == BreakerState::Open {
            if now < self.until {
                // While open, `doublings` is the count this period was opened with.
                let period = config.open_period(self.doublings);
                let until = self.until;
                return (Err(Refusal::Open { until, period }), None);
            }
            transition = Some(self.half_open());
        }
        let probe = self.state == BreakerState::HalfOpen;
        if probe {
            if self.is_probing_full(config) {
                return (Err(Refusal::ProbesOut), transition);
            }
            self.probes_out += 1;
        }
        self.out = self.out.saturating_add(1);
        let ticket = Ticket {
            epoch: self.epoch,
            probe,
        };
        (Ok(ticket), transition)
    }

    /// The permit of `ticket` reports `success` (or not: a failure or an overload) at `now`.
    pub(crate) fn report(
        &mut self,
        config: &Breaker,
        now: u64,
        ticket: Ticket,
        success: bool,
    ) -> Option<Transition> {
        self.out = self.out.saturating_sub(1);
        if ticket.epoch != self.epoch {
            return None; // granted before the last change of state: stale news
        }
        match self.state {
            BreakerState::Closed => {
                self.record.record(config.record(), now, !success);
                let (attempts, bad) = self.counts(config, now);
                let tripped = attempts >= config.least_attempts()
                    && f64::from(bad) / f64::from(attempts) >= config.ratio();
                tripped.then(|| self.open(config, now, attempts, bad))
            }
            BreakerState::HalfOpen => {
                self.probes_out = self.probes_out.saturating_sub(1);
                if !success {
                    let passed = self.probes_passed;
                    self.doublings = (self.doublings + 1).min(MAX_DOUBLINGS);
                    return Some(self.open(config, now, passed + 1, 1));
                }
                self.probes_passed += 1;
                (self.probes_passed >= config.probe_count()).then(|| self.close(config))
            }
            // No ticket is granted while open, and opening moves the epoch.
            BreakerState::Open => None,
        }
    }

    /// Opens the breaker at `now`, whatever its record says (for its open period, doubled as
    /// its failed probes say); `None` if it is open already.
    pub(crate) fn open_now(&mut self, config: &Breaker, now: u64) -> Option<Transition> {
        if self.state(now) == BreakerState::Open {
            return None;
        }
        let (attempts, bad) = self.counts(config, now);
        Some(self.open(config, now, attempts, bad))
    }

    /// The permit of `ticket` was dropped without a report: a probe's place is free again.
    pub(crate) fn release(&mut self, ticket: Ticket) {
        self.out = self.out.saturating_sub(1);
        if ticket.probe && ticket.epoch == self.epoch && self.state == BreakerState::HalfOpen {
            self.probes_out = self.probes_out.saturating_sub(1);
        }
    }

    fn open(&mut self, config: &Breaker, now: u64, attempts: u32, bad: u32) -> Transition {
        let from = self.state;
        let open_for = config.open_period(self.doublings);
        self.state = BreakerState::Open;
        self.until = now.saturating_add(open_for);
        self.epoch = self.epoch.wrapping_add(1);
        self.record.clear(config.record());
        Transition {
            from,
            to: BreakerState::Open,
            attempts,
            bad,
            open_for,
        }
    }

    fn half_open(&mut self) -> Transition {
        self.state = BreakerState::HalfOpen;
        self.epoch = self.epoch.wrapping_add(1);
        self.probes_out = 0;
        self.probes_passed = 0;
        Transition {
            from: BreakerState::Open,
            to: BreakerState::HalfOpen,
            attempts: 0,
            bad: 0,
            open_for: 0,
        }
    }

    fn close(&mut self, config: &Breaker) -> Transition {
        let passed = self.probes_passed;
        self.state = BreakerState::Closed;
        self.epoch = self.epoch.wrapping_add(1);
        self.doublings = 0;
        self.probes_out = 0;
        self.probes_passed = 0;
        self.record.clear(config.record());
        Transition {
            from: BreakerState::HalfOpen,
            to: BreakerState::Closed,
            attempts: passed,
            bad: 0,
            open_for: 0,
        }
    }
}
