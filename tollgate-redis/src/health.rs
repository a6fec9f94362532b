//! Whether Redis answers, as one store sees it: the gate every new connection of the store
//! passes (its grants' connection and its keeper's alike), and the fail-fast state.
//!
//! - While Redis answers, a broken connection is replaced at once.
//! - A connection attempt that fails makes the next one wait: [`FIRST_PROBE`], doubling up
//!   to [`LAST_PROBE`] while they keep failing, and only one attempt is under way at a time.
//!   So a store knocks on a dead Redis a few times a second at most, however many tasks
//!   ask, its keeper included.
//! - Once a call has failed after its whole call timeout, Redis counts as **unreachable**:
//!   every call fails at once (no wait, no connection attempt) with an error whose
//!   `retry_after` is the time to the next attempt, except the one call that comes when an
//!   attempt is due, which makes it: the **probe**. The keeper probes the same way when it
//!   has leases to renew or releases to send. A call that meets a probe under way waits for
//!   its outcome, at most [`PROBE_WAIT`]: the calls a retry policy sends back at the time it
//!   was told then learn that outcome, instead of spending an attempt each on hearing that
//!   a probe is under way.
//! - Any answer from Redis (a probe's, or a call's on a connection still open) ends it all:
//!   attempts are free again and calls wait as usual.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use event_listener::{Event, EventListener};

use crate::helpers::lock;

/// The pause after a first failed connection attempt; it doubles with each further one.
pub(crate) const FIRST_PROBE: Duration = Duration::from_millis(200);
/// The longest pause between two connection attempts.
pub(crate) const LAST_PROBE: Duration = Duration::from_secs(2);
/// How long a call that meets a probe under way waits for its outcome.
pub(crate) const PROBE_WAIT: Duration = Duration::from_millis(200);

/// The pause before the next attempt after `failures` failed ones in a row.
fn backoff(failures: u32) -> Duration {
    match failures {
        0 => Duration::ZERO,
        n => FIRST_PROBE
            .saturating_mul(1 << (n - 1).min(16))
            .min(LAST_PROBE),
    }
}

#[derive(Default)]
pub(crate) struct Health {
    /// False while Redis answers and nothing failed since: calls skip the lock.
    troubled: AtomicBool,
    state: Mutex<State>,
    /// Notified when an attempt ends: calls waiting for their turn look again.
    ended: Event,
}

#[derive(Default)]
struct State {
    /// Failed connection attempts since Redis last answered.
    failures: u32,
    /// No attempt before this.
    next_attempt: Option<Instant>,
    /// An attempt is under way.
    attempting: bool,
    /// When the attempt under way ends at the latest.
    attempt_until: Option<Instant>,
    /// Why Redis counts as unreachable, once a call failed after its whole wait.
    down: Option<String>,
}

impl State {
    /// The time to the next attempt, as a fail-fast error carries it: never zero (a caller
    /// that honours it must not come straight back).
    fn retry_after(&self, now: Instant) -> Duration {
        let after = if self.attempting {
            // Its outcome is known by then at the latest.
            self.attempt_until
                .map_or(PROBE_WAIT, |until| until.saturating_duration_since(now))
        } else {
            self.next_attempt
                .map_or(Duration::ZERO, |at| at.saturating_duration_since(now))
        };
        after.max(Duration::from_millis(1))
    }
}

/// What a call may do, from [`Health::admit`].
pub(crate) enum Admit<'a> {
    /// Go ahead as usual.
    Go,
    /// Redis is unreachable and an attempt is due: this call is the probe, with the turn.
    Probe(Attempt<'a>),
    /// Redis is unreachable: fail at once, with the reason and the time to the next attempt.
    Refuse(String, Duration),
    /// Redis is unreachable and a probe is under way: wait for its outcome (see
    /// [`Health::ended`]) at most [`PROBE_WAIT`], then ask again; or fail with the reason
    /// and the time until it ends at the latest.
    Busy(String, Duration),
}

/// What a connection attempt may do, from [`Health::begin_attempt`].
pub(crate) enum Gate<'a> {
    /// Make it, and say how it went on the turn.
    Attempt(Attempt<'a>),
    /// Another attempt is under way: wait for it to end (see [`Health::ended`]).
    Busy,
    /// Not before this instant.
    NotBefore(Instant),
}

impl Health {
    /// Whether a call may go ahead: always while Redis answers; once it counts as
    /// unreachable, only as the probe. A probe ends by `until` at the latest.
    pub(crate) fn admit(&self, now: Instant, until: Instant) -> Admit<'_> {
        if !self.troubled.load(Ordering::Acquire) {
            return Admit::Go;
        }
        let mut state = lock(&self.state);
        let Some(reason) = state.down.clone() else {
            return Admit::Go;
        };
        let after = state.retry_after(now);
        if state.attempting {
            return Admit::Busy(reason, after);
        }
        if state.next_attempt.is_none_or(|at| now >= at) {
            state.attempting = true;
            state.attempt_until = Some(until);
            return Admit::Probe(Attempt { health: self });
        }
        Admit::Refuse(reason, after)
    }

    /// The reason and the time to the next attempt when a call would be refused at once
    /// now (Redis unreachable, no attempt due or under way), without taking any turn.
    pub(crate) fn refusal(&self, now: Instant) -> Option<(String, Duration)> {
        if !self.troubled.load(Ordering::Acquire) {
            return None;
        }
        let state = lock(&self.state);
        let due = state.next_attempt.is_none_or(|at| now >= at);
        if state.attempting || due {
            return None;
        }
        Some((state.down.clone()?, state.retry_after(now)))
    }

    /// Takes the turn for a new connection, if it is free and due; the attempt ends by
    /// `until` at the latest.
    pub(crate) fn begin_attempt(&self, now: Instant, until: Instant) -> Gate<'_> {
        let mut state = lock(&self.state);
        if state.attempting {
            return Gate::Busy;
        }
        if let Some(at) = state.next_attempt.filter(|&at| now < at) {
            return Gate::NotBefore(at);
        }
        state.attempting = true;
        state.attempt_until = Some(until);
        Gate::Attempt(Attempt { health: self })
    }

    /// Listens for the end of the attempt under way; register before looking at the gate.
    pub(crate) fn ended(&self) -> EventListener {
        self.ended.listen()
    }

    /// Redis answered: attempts are free again and calls wait as usual.
    pub(crate) fn reached(&self) {
        if !self.troubled.load(Ordering::Acquire) {
            return;
        }
        let mut state = lock(&self.state);
        state.failures = 0;
        state.next_attempt = None;
        state.down = None;
        if !state.attempting {
            self.troubled.store(false, Ordering::Release);
        }
    }

    /// A call failed after its whole wait: Redis counts as unreachable from now on. When
    /// no attempt has failed yet (the call waited on an open connection that never
    /// answered), this counts as one, so the next attempt waits too.
    pub(crate) fn declare_down(&self, reason: &str, now: Instant) -> Duration {
        let mut state = lock(&self.state);
        self.troubled.store(true, Ordering::Release);
        if state.failures == 0 {
            state.failures = 1;
            let next = now + backoff(1);
            state.next_attempt = Some(state.next_attempt.map_or(next, |at| at.max(next)));
        }
        state.down = Some(reason.to_owned());
        state.retry_after(now)
    }

    /// The reason and the time to the next attempt, if Redis counts as unreachable.
    pub(crate) fn down(&self, now: Instant) -> Option<(String, Duration)> {
        if !self.troubled.load(Ordering::Acquire) {
            return None;
        }
        let state = lock(&self.state);
        let reason = state.down.clone()?;
        Some((reason, state.retry_after(now)))
    }

    /// The time to the next attempt (for an error of a call that just gave up).
    pub(crate) fn retry_after(&self, now: Instant) -> Duration {
        lock(&self.state).retry_after(now)
    }

    /// Whether Redis counts as unreachable.
    pub(crate) fn is_down(&self) -> bool {
        self.troubled.load(Ordering::Acquire) && lock(&self.state).down.is_some()
    }
}

/// The turn to make a connection attempt. Dropped without [`reached`](Self::reached) (a
/// failure, a time-out, a cancelled caller), it counts as failed.
pub(crate) struct Attempt<'a> {
    health: &'a Health,
}

impl Attempt<'_> {
    /// The attempt reached Redis.
    pub(crate) fn reached(self) {
        {
            let mut state = lock(&self.health.state);
            state.attempting = false;
            state.attempt_until = None;
            state.failures = 0;
            state.next_attempt = None;
            state.down = None;
            self.health.troubled.store(false, Ordering::Release);
        }
        self.health.ended.notify(usize::MAX);
        std::mem::forget(self);
    }
}

impl Attempt<'_> {
    /// Ends the turn without an attempt (another task connected meanwhile).
    pub(crate) fn skip(self) {
        let mut state = lock(&self.health.state);
        state.attempting = false;
        state.attempt_until = None;
        drop(state);
        self.health.ended.notify(usize::MAX);
        std::mem::forget(self);
    }
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        {
            let mut state = lock(&self.health.state);
            state.attempting = false;
            state.attempt_until = None;
            state.failures = state.failures.saturating_add(1);
            state.next_attempt = Some(Instant::now() + backoff(state.failures));
            self.health.troubled.store(true, Ordering::Release);
        }
        self.health.ended.notify(usize::MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_back_off_from_a_fraction_of_a_second_to_a_cap() {
        let steps: Vec<Duration> = (0..8).map(backoff).collect();
        assert_eq!(steps[0], Duration::ZERO);
        assert_eq!(steps[1], FIRST_PROBE);
        assert_eq!(steps[2], FIRST_PROBE * 2);
        assert_eq!(steps[7], LAST_PROBE);
        assert_eq!(backoff(u32::MAX), LAST_PROBE);
    }

    #[test]
    fn one_attempt_at_a_time_and_calls_fail_fast_once_down_until_the_probe_reaches_redis() {
        let health = Health::default();
        let now = Instant::now();
        let until = now + Duration::from_secs(1);
        assert!(matches!(health.admit(now, until), Admit::Go));
        let Gate::Attempt(first) = health.begin_attempt(now, until) else {
            panic!("the first attempt is free");
        };
        assert!(matches!(health.begin_attempt(now, until), Gate::Busy));
        drop(first);
        // Failed: the next attempt waits, and calls still go ahead (and wait) until one has
        // failed after its whole wait.
        assert!(matches!(
            health.begin_attempt(Instant::now(), until),
            Gate::NotBefore(_)
        ));
        assert!(matches!(health.admit(Instant::now(), until), Admit::Go));
        let after = health.declare_down("no answer", Instant::now());
        assert!(after > Duration::ZERO && after <= FIRST_PROBE, "{after:?}");
        let Admit::Refuse(reason, after) = health.admit(Instant::now(), until) else {
            panic!("calls fail at once while down");
        };
        assert_eq!(reason, "no answer");
        assert!(after > Duration::ZERO);
        // Due: one call is the probe, the others still fail at once.
        let later = Instant::now() + LAST_PROBE;
        let Admit::Probe(probe) = health.admit(later, later + PROBE_WAIT) else {
            panic!("the call that comes when an attempt is due probes");
        };
        // The others learn when the probe's outcome is known at the latest.
        let Admit::Busy(_, after) = health.admit(later, later) else {
            panic!("a call that meets a probe under way is told so");
        };
        assert_eq!(after, PROBE_WAIT);
        probe.reached();
        assert!(matches!(health.admit(later, later), Admit::Go));
        assert!(!health.is_down());
        assert!(matches!(
            health.begin_attempt(later, later),
            Gate::Attempt(_)
        ));
    }
}
