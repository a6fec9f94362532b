//! The breaker's core on virtual time: the rules of [`Breaker`]'s docs, one by one, and
//! against a model of them under seeded random outcomes. No runtime, no clock: every figure
//! is the same on every run.

use std::collections::VecDeque;
use std::time::Duration;

use tollgate_testkit::Rng;

use super::config::{Breaker, MAX_COUNT_RECORD, QUIET};
use super::core::{BreakerCore, BreakerState, Refusal, Ticket, Transition};
use crate::limit::outcome::Outcome;

const MS: u64 = 1_000_000;
const SEC: u64 = 1_000 * MS;

/// A permit granted at `now`, or the refusal.
fn acquire(core: &mut BreakerCore, config: &Breaker, now: u64) -> Result<Ticket, Refusal> {
    core.try_acquire(config, now).0
}

/// One attempt at `now` that ends at once with `outcome`; panics if refused.
fn attempt(
    core: &mut BreakerCore,
    config: &Breaker,
    now: u64,
    outcome: Outcome,
) -> Option<Transition> {
    let ticket = acquire(core, config, now).expect("an attempt may go");
    core.report(config, now, ticket, outcome.is_success())
}

fn until(refusal: Result<Ticket, Refusal>) -> u64 {
    match refusal {
        Err(Refusal::Open { until, .. }) => until,
        other => panic!("expected an open refusal, got {other:?}"),
    }
}

#[test]
fn trips_at_exactly_the_ratio_once_min_attempts_are_in_not_before() {
    let config = Breaker::new()
        .failure_ratio(0.5)
        .min_attempts(10)
        .over_last(20);
    // Nine bad of nine: too few attempts.
    let mut core = BreakerCore::new(&config);
    for n in 0..9 {
        assert_eq!(
            attempt(&mut core, &config, n * MS, Outcome::failure()),
            None
        );
    }
    assert_eq!(core.state(9 * MS), BreakerState::Closed);
    let opened = attempt(&mut core, &config, 10 * MS, Outcome::failure()).unwrap();
    assert_eq!(
        (opened.from, opened.to),
        (BreakerState::Closed, BreakerState::Open)
    );
    assert_eq!((opened.attempts, opened.bad), (10, 10));
    assert_eq!(opened.failure_ratio(), 1.0);
    // Four bad of ten: below; the fifth bad of eleven (0.45): below; a sixth of twelve (0.5):
    // exactly the ratio, open.
    let mut core = BreakerCore::new(&config);
    for n in 0..10 {
        let outcome = if n < 4 {
            Outcome::failure()
        } else {
            Outcome::success()
        };
        assert_eq!(attempt(&mut core, &config, n * MS, outcome), None);
    }
    assert_eq!(
        attempt(&mut core, &config, 11 * MS, Outcome::overload()),
        None
    );
    let opened = attempt(&mut core, &config, 12 * MS, Outcome::failure()).unwrap();
    assert_eq!((opened.attempts, opened.bad), (12, 6));
    assert_eq!(core.state(12 * MS), BreakerState::Open);
}

#[test]
fn overload_and_failure_both_count_bad() {
    let config = Breaker::new().failure_ratio(1.0).min_attempts(4);
    let mut core = BreakerCore::new(&config);
    for (n, outcome) in [Outcome::overload(), Outcome::failure(), Outcome::overload()]
        .into_iter()
        .enumerate()
    {
        assert_eq!(attempt(&mut core, &config, n as u64, outcome), None);
    }
    let opened = attempt(&mut core, &config, 3, Outcome::failure()).unwrap();
    assert_eq!((opened.attempts, opened.bad), (4, 4));
}

#[test]
fn success_only_never_opens() {
    let mut rng = Rng::new(7);
    for config in [
        Breaker::new().min_attempts(1).failure_ratio(0.01),
        Breaker::new()
            .over_time(Duration::from_millis(50))
            .min_attempts(1),
    ] {
        let mut core = BreakerCore::new(&config);
        let mut now = 0;
        for _ in 0..10_000 {
            now += rng.below(20 * MS);
            assert_eq!(attempt(&mut core, &config, now, Outcome::success()), None);
            assert_eq!(core.state(now), BreakerState::Closed);
        }
    }
}

#[test]
fn a_over_last_opens_exactly_when_the_rule_says() {
    // Against a model in exact arithmetic: the last `size` outcomes, open once at least
    // min(min_attempts, size) are in and bad * n >= k * attempts for a ratio of k / n.
    let mut opened = 0;
    for seed in 0..300 {
        let mut rng = Rng::new(seed);
        let size = 1 + rng.below(u64::from(MAX_COUNT_RECORD)) as u32;
        let min = 1 + rng.below(150) as u32;
        let n = 1 + rng.below(20) as u32;
        let k = 1 + rng.below(u64::from(n)) as u32;
        let config = Breaker::new()
            .over_last(size)
            .min_attempts(min)
            .failure_ratio(f64::from(k) / f64::from(n))
            .open_for(Duration::from_secs(1));
        let bad_percent = rng.below(101);
        let mut core = BreakerCore::new(&config);
        let mut model: VecDeque<bool> = VecDeque::new();
        let mut now = 0;
        for _ in 0..1_000 {
            now += rng.below(100 * MS);
            if core.state(now) != BreakerState::Closed {
                // Wait out the open period; a successful probe closes it, empty.
                now = now.max(until(acquire(&mut core, &config, now)));
                assert!(attempt(&mut core, &config, now, Outcome::success()).is_some());
                assert_eq!(core.counts(&config, now), (0, 0));
                continue;
            }
            let bad = rng.chance(bad_percent as f64 / 100.0);
            model.push_back(bad);
            if model.len() > size as usize {
                model.pop_front();
            }
            let outcome = if bad {
                Outcome::failure()
            } else {
                Outcome::success()
            };
            let transition = attempt(&mut core, &config, now, outcome);
            let attempts = model.len() as u32;
            let bads = model.iter().filter(|bad| **bad).count() as u32;
            let expected = attempts >= min.min(size) && bads * n >= k * attempts;
            assert_eq!(
                transition.is_some(),
                expected,
                "seed {seed}: {bads} bad of {attempts}, ratio {k}/{n}, min {min}, size {size}"
            );
            if expected {
                opened += 1;
                model.clear();
            }
        }
    }
    assert!(
        opened > 1_000,
        "the runs opened the breaker often: {opened}"
    );
}

#[test]
fn a_over_time_counts_an_outcome_for_seven_eighths_of_it_at_least_and_never_longer() {
    for seed in 0..50 {
        let mut rng = Rng::new(seed);
        let span = (1 + rng.below(10_000)) * MS;
        let config = Breaker::new()
            .over_time(Duration::from_nanos(span))
            .min_attempts(u32::MAX);
        let mut core = BreakerCore::new(&config);
        let mut times = Vec::new();
        let mut now = rng.below(span);
        for _ in 0..2_000 {
            now += rng.below(span / 50 + 1);
            if rng.chance(0.7) {
                assert_eq!(attempt(&mut core, &config, now, Outcome::failure()), None);
                times.push(now);
            }
            // Outcomes a whole span old never count again: the model drops them.
            times.retain(|t| now - *t < span);
            let (attempts, bad) = core.counts(&config, now);
            let surely = times.iter().filter(|t| now - **t < span / 8 * 7).count();
            let at_most = times.len();
            assert!(
                (surely..=at_most).contains(&(attempts as usize)),
                "seed {seed}: {attempts} counted, {surely} to {at_most} expected"
            );
            assert_eq!(attempts, bad);
        }
    }
}

#[test]
fn a_over_time_forgets_old_outcomes() {
    let config = Breaker::new()
        .over_time(Duration::from_secs(8))
        .min_attempts(4)
        .failure_ratio(0.5);
    // Three failures, then a fourth 6.5 s later: all four in the record, open.
    let mut core = BreakerCore::new(&config);
    for n in 0..3 {
        assert_eq!(
            attempt(&mut core, &config, n * MS, Outcome::failure()),
            None
        );
    }
    assert!(attempt(&mut core, &config, 6_500 * MS, Outcome::failure()).is_some());
    // The same, the fourth 8.5 s later: the first three have left, one attempt is too few.
    let mut core = BreakerCore::new(&config);
    for n in 0..3 {
        assert_eq!(
            attempt(&mut core, &config, n * MS, Outcome::failure()),
            None
        );
    }
    assert_eq!(
        attempt(&mut core, &config, 8_500 * MS, Outcome::failure()),
        None
    );
    assert_eq!(core.counts(&config, 8_500 * MS), (1, 1));
    assert_eq!(core.counts(&config, 20 * SEC), (0, 0));
    assert!(core.is_forgettable(&config, 20 * SEC));
}

#[test]
fn a_quiet_over_last_starts_empty() {
    let config = Breaker::new().min_attempts(3).failure_ratio(0.5);
    let quiet = QUIET.as_secs() * SEC;
    let mut core = BreakerCore::new(&config);
    for n in 0..2 {
        assert_eq!(attempt(&mut core, &config, n, Outcome::failure()), None);
    }
    assert_eq!(core.counts(&config, quiet - 1), (2, 2));
    assert!(!core.is_forgettable(&config, quiet - 1));
    assert_eq!(core.counts(&config, quiet + 1), (0, 0));
    assert!(core.is_forgettable(&config, quiet + 1));
    // A third failure after the quiet spell is the first of a new record.
    assert_eq!(
        attempt(&mut core, &config, quiet + 1, Outcome::failure()),
        None
    );
    assert_eq!(core.counts(&config, quiet + 1), (1, 1));
}

#[test]
fn half_open_lets_at_most_probes_out_and_all_must_succeed() {
    let config = Breaker::new()
        .min_attempts(1)
        .probes(3)
        .open_for(Duration::from_secs(10));
    let mut core = BreakerCore::new(&config);
    attempt(&mut core, &config, 0, Outcome::failure()).unwrap();
    assert_eq!(
        acquire(&mut core, &config, 10 * SEC - 1),
        Err(Refusal::Open {
            until: 10 * SEC,
            period: 10 * SEC
        })
    );
    assert_eq!(core.state(10 * SEC), BreakerState::HalfOpen);
    let (first, half_open) = core.try_acquire(&config, 10 * SEC);
    let half_open = half_open.unwrap();
    assert_eq!(
        (half_open.from, half_open.to),
        (BreakerState::Open, BreakerState::HalfOpen)
    );
    let probes: Vec<_> = [
        first,
        acquire(&mut core, &config, 10 * SEC),
        acquire(&mut core, &config, 10 * SEC),
    ]
    .into_iter()
    .map(Result::unwrap)
    .collect();
    assert!(probes.iter().all(|probe| probe.is_probe()));
    assert_eq!(
        acquire(&mut core, &config, 10 * SEC),
        Err(Refusal::ProbesOut)
    );
    // A success keeps its place (three must succeed), a dropped probe frees its own.
    assert_eq!(core.report(&config, 11 * SEC, probes[0], true), None);
    assert_eq!(
        acquire(&mut core, &config, 11 * SEC),
        Err(Refusal::ProbesOut)
    );
    core.release(probes[1]);
    let again = acquire(&mut core, &config, 11 * SEC).unwrap();
    assert_eq!(
        acquire(&mut core, &config, 11 * SEC),
        Err(Refusal::ProbesOut)
    );
    assert_eq!(core.report(&config, 12 * SEC, probes[2], true), None);
    let closed = core.report(&config, 12 * SEC, again, true).unwrap();
    assert_eq!(
        (closed.from, closed.to),
        (BreakerState::HalfOpen, BreakerState::Closed)
    );
    assert_eq!(closed.attempts, 3);
    assert_eq!(core.state(12 * SEC), BreakerState::Closed);
    assert_eq!(core.counts(&config, 12 * SEC), (0, 0));
    assert!(core.is_forgettable(&config, 12 * SEC));
}

#[test]
fn a_failed_probe_reopens_for_twice_as_long_up_to_sixteen_times() {
    let config = Breaker::new()
        .min_attempts(1)
        .open_for(Duration::from_secs(10));
    let mut core = BreakerCore::new(&config);
    let opened = attempt(&mut core, &config, 0, Outcome::overload()).unwrap();
    assert_eq!(opened.open_for, 10 * SEC);
    let mut now = 0;
    for expected in [20, 40, 80, 160, 160, 160] {
        now = until(acquire(&mut core, &config, now));
        let reopened = attempt(&mut core, &config, now, Outcome::failure()).unwrap();
        assert_eq!(
            (reopened.from, reopened.to),
            (BreakerState::HalfOpen, BreakerState::Open)
        );
        assert_eq!(reopened.open_for, expected * SEC);
        assert_eq!(
            until(acquire(&mut core, &config, now)),
            now + expected * SEC
        );
    }
    // A probe that succeeds closes the breaker and resets the period.
    now = until(acquire(&mut core, &config, now));
    attempt(&mut core, &config, now, Outcome::success()).unwrap();
    let opened = attempt(&mut core, &config, now, Outcome::failure()).unwrap();
    assert_eq!(opened.open_for, 10 * SEC);
}

#[test]
fn a_dropped_permit_says_nothing_when_closed() {
    let config = Breaker::new().min_attempts(2);
    let mut core = BreakerCore::new(&config);
    for _ in 0..100 {
        let ticket = acquire(&mut core, &config, 0).unwrap();
        assert!(!ticket.is_probe());
        assert_eq!(core.permits_out(), 1);
        core.release(ticket);
    }
    assert_eq!(core.counts(&config, 0), (0, 0));
    assert_eq!(core.permits_out(), 0);
    assert!(core.is_forgettable(&config, 0));
}

#[test]
fn stale_reports_are_ignored() {
    let config = Breaker::new()
        .min_attempts(2)
        .probes(2)
        .open_for(Duration::from_secs(1));
    let mut core = BreakerCore::new(&config);
    // Two attempts start while closed; two others fail and open the breaker.
    let late_failure = acquire(&mut core, &config, 0).unwrap();
    let late_success = acquire(&mut core, &config, 0).unwrap();
    attempt(&mut core, &config, 0, Outcome::failure());
    attempt(&mut core, &config, 0, Outcome::failure()).unwrap();
    assert_eq!(core.report(&config, SEC / 2, late_success, true), None);
    assert_eq!(core.state(SEC / 2), BreakerState::Open);
    // Half-open: the late failure of the closed epoch does not reopen it.
    let failing = acquire(&mut core, &config, SEC).unwrap();
    let late_probe = acquire(&mut core, &config, SEC).unwrap();
    assert_eq!(core.report(&config, SEC, late_failure, false), None);
    assert_eq!(core.state(SEC), BreakerState::HalfOpen);
    assert_eq!(acquire(&mut core, &config, SEC), Err(Refusal::ProbesOut));
    core.report(&config, SEC, failing, false).unwrap(); // reopens, for 2 s
    // A probe of an earlier half-open epoch neither closes the breaker nor frees a place.
    let first = acquire(&mut core, &config, 3 * SEC).unwrap();
    let second = acquire(&mut core, &config, 3 * SEC).unwrap();
    assert_eq!(core.report(&config, 3 * SEC, late_probe, true), None);
    assert_eq!(core.state(3 * SEC), BreakerState::HalfOpen);
    assert_eq!(
        acquire(&mut core, &config, 3 * SEC),
        Err(Refusal::ProbesOut)
    );
    assert_eq!(core.permits_out(), 2);
    assert_eq!(core.report(&config, 3 * SEC, first, true), None);
    core.report(&config, 3 * SEC, second, true).unwrap();
    assert_eq!(core.state(3 * SEC), BreakerState::Closed);
    assert_eq!(core.permits_out(), 0);
}

#[test]
fn a_zero_open_period_probes_at_once() {
    let config = Breaker::new().min_attempts(1).open_for(Duration::ZERO);
    let mut core = BreakerCore::new(&config);
    attempt(&mut core, &config, 5, Outcome::failure()).unwrap();
    assert_eq!(core.state(5), BreakerState::HalfOpen);
    assert!(acquire(&mut core, &config, 5).unwrap().is_probe());
}

#[test]
fn a_core_is_a_few_words() {
    println!("BreakerCore: {} bytes", std::mem::size_of::<BreakerCore>());
    assert!(
        std::mem::size_of::<BreakerCore>() <= 112,
        "{}",
        std::mem::size_of::<BreakerCore>()
    );
}

#[test]
fn a_refusal_read_with_a_stale_now_says_no_more_than_the_open_period() {
    use super::error::CircuitBreakerError;
    let config = Breaker::new()
        .min_attempts(1)
        .open_for(Duration::from_secs(1));
    let mut core = BreakerCore::new(&config);
    // Opened at 10 s, until 11 s. A caller whose clock said 4 s before it waited for the
    // lock is refused with a wait counted from its stale now: at most the open period.
    attempt(&mut core, &config, 10 * SEC, Outcome::failure()).unwrap();
    let stale = CircuitBreakerError::new(
        acquire(&mut core, &config, 4 * SEC).unwrap_err(),
        4 * SEC,
        None,
    );
    assert_eq!(stale.retry_after(), Duration::from_secs(1), "not 7 s");
    let fresh = CircuitBreakerError::new(
        acquire(&mut core, &config, 10 * SEC + 400 * MS).unwrap_err(),
        10 * SEC + 400 * MS,
        None,
    );
    assert_eq!(fresh.retry_after(), Duration::from_millis(600));
    // A failed probe at 11 s opens it for twice as long: the bound is the period in force.
    let probe = acquire(&mut core, &config, 11 * SEC).unwrap();
    core.report(&config, 11 * SEC, probe, false).unwrap();
    let stale = CircuitBreakerError::new(
        acquire(&mut core, &config, 9 * SEC).unwrap_err(),
        9 * SEC,
        None,
    );
    assert_eq!(stale.retry_after(), Duration::from_secs(2), "not 4 s");
}
