//! `CircuitBreaker` and `KeyedCircuitBreaker`: failures and overloads open them, successes
//! never do; half-open lets exactly its probes through while the other callers wait holding
//! nothing; a dropped probe or a cancelled wait takes nothing; a keyed breaker forgets keys
//! that hold nothing, and its hosts do not wait for one another. What depends on the open
//! periods runs on virtual time (`virtual_time!`), where `acquire` waits exactly the open
//! period.

mod common;

use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{InFlight, matrix, panic_message, spawn, virtual_time};
use futures::future::join_all;
use futures_lite::future::poll_once;
use tollgate::futures::{BreakerAcquire, KeyedBreakerAcquire};
use tollgate::testing::{eventually, now};
use tollgate::{
    Breaker, BreakerState, CircuitBreaker, CircuitBreakerError, CircuitBreakerPermit,
    KeyedCircuitBreaker, KeyedCircuitBreakerPermit, Outcome, Semaphore, sleep,
};

#[test]
fn breakers_futures_permits_and_errors_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<CircuitBreaker>();
    send_sync::<BreakerAcquire<'static>>();
    send_sync::<CircuitBreakerPermit<'static>>();
    send_sync::<KeyedCircuitBreaker<String>>();
    send_sync::<KeyedBreakerAcquire<'static, String>>();
    send_sync::<KeyedCircuitBreakerPermit<'static, String>>();
    send_sync::<CircuitBreakerError>();
    send_sync::<Breaker>();
}

#[test]
fn bad_settings_panic_naming_the_setting() {
    type Make = fn() -> Breaker;
    let cases: [(&str, Make); 8] = [
        ("failure_ratio", || Breaker::new().failure_ratio(0.0)),
        ("failure_ratio", || Breaker::new().failure_ratio(1.5)),
        ("failure_ratio", || Breaker::new().failure_ratio(f64::NAN)),
        ("min_attempts", || Breaker::new().min_attempts(0)),
        ("over_last", || Breaker::new().over_last(0)),
        ("over_last", || Breaker::new().over_last(129)),
        ("over_time", || Breaker::new().over_time(Duration::ZERO)),
        ("probes", || Breaker::new().probes(0)),
    ];
    for (setting, make) in cases {
        let panic = std::panic::catch_unwind(make).unwrap_err();
        let message = panic_message(&*panic);
        assert!(
            message.starts_with(&format!("tollgate::Breaker::{setting}: ")),
            "{message}"
        );
    }
    // The edges are settings.
    let _ = Breaker::new()
        .failure_ratio(1.0)
        .over_last(128)
        .over_last(1)
        .min_attempts(1)
        .probes(1)
        .open_for(Duration::ZERO)
        .over_time(Duration::from_nanos(1));
}

#[test]
fn a_refusal_names_the_key_and_when_the_next_probe_goes() {
    let open_for = Duration::from_secs(30);
    let per_host =
        KeyedCircuitBreaker::<String>::new(Breaker::new().min_attempts(1).open_for(open_for));
    per_host
        .try_acquire("down.example")
        .unwrap()
        .report(Outcome::overload());
    let refused = per_host.try_acquire("down.example").unwrap_err();
    assert_eq!(refused.key(), Some("\"down.example\""));
    assert!(refused.retry_after() <= open_for && refused.retry_after() > open_for / 2);
    let shown = refused.to_string();
    assert!(
        shown.starts_with("circuit open for key \"down.example\": next probe in "),
        "{shown}"
    );
    let umbrella = tollgate::Error::from(refused);
    assert_eq!(umbrella.to_string(), shown);
    assert!(matches!(umbrella, tollgate::Error::CircuitBreaker(_)));
    // The single breaker names no key.
    let single = CircuitBreaker::new(Breaker::new().min_attempts(1));
    single.try_acquire().unwrap().report(Outcome::failure());
    let refused = single.try_acquire().unwrap_err();
    assert_eq!(refused.key(), None);
    assert!(
        refused
            .to_string()
            .starts_with("circuit open: next probe in ")
    );
}

#[test]
fn a_refusal_never_says_more_than_the_open_period_under_contention() {
    // Four threads hammer one breaker that opens for an hour at its first failure: each
    // refusal's wait must be at most the hour, however long a thread waited for the lock
    // between reading its clock and being refused (a bound that holds at any speed: the
    // breaker opens once per round and never turns half-open within the test).
    const THREADS: usize = 4;
    let open_for = Duration::from_secs(3600);
    let mut worst = Duration::ZERO;
    for _ in 0..2_000 {
        let single = CircuitBreaker::new(Breaker::new().min_attempts(1).open_for(open_for));
        let per_host =
            KeyedCircuitBreaker::<u8>::new(Breaker::new().min_attempts(1).open_for(open_for));
        let start = std::sync::Barrier::new(THREADS);
        let waits: Vec<Duration> = std::thread::scope(|scope| {
            let threads: Vec<_> = (0..THREADS)
                .map(|_| {
                    scope.spawn(|| {
                        start.wait();
                        let mut waits = Vec::new();
                        for _ in 0..8 {
                            match single.try_acquire() {
                                Ok(permit) => permit.report(Outcome::failure()),
                                Err(refused) => waits.push(refused.retry_after()),
                            }
                            match per_host.try_acquire(&0) {
                                Ok(permit) => permit.report(Outcome::failure()),
                                Err(refused) => waits.push(refused.retry_after()),
                            }
                        }
                        waits
                    })
                })
                .collect();
            threads
                .into_iter()
                .flat_map(|thread| thread.join().unwrap())
                .collect()
        });
        worst = waits.into_iter().fold(worst, Duration::max);
    }
    assert!(
        worst <= open_for,
        "a refusal said the next probe was {worst:?} away, the breaker opened for {open_for:?}"
    );
}

matrix! {
    async fn failures_and_overloads_both_open_it_and_successes_never_do() {
        let breaker = CircuitBreaker::new(Breaker::new().min_attempts(4).failure_ratio(1.0));
        for outcome in [Outcome::overload(), Outcome::failure(), Outcome::overload()] {
            breaker.acquire().await.report(outcome);
            assert_eq!(breaker.state(), BreakerState::Closed);
        }
        breaker.acquire().await.report(Outcome::failure());
        assert_eq!(breaker.state(), BreakerState::Open);
        assert!(breaker.try_acquire().is_err());

        let calm = CircuitBreaker::new(Breaker::new().min_attempts(1).failure_ratio(0.001));
        for _ in 0..1_000 {
            calm.try_acquire().unwrap().report(Outcome::success());
        }
        assert_eq!(calm.state(), BreakerState::Closed);
    }

    async fn half_open_lets_exactly_its_probes_through_while_the_others_wait_holding_nothing() {
        const TASKS: usize = 16;
        let breaker = Arc::new(CircuitBreaker::new(
            Breaker::new().min_attempts(1).probes(2).open_for(Duration::from_millis(30)),
        ));
        breaker.try_acquire().unwrap().report(Outcome::failure());
        assert_eq!(breaker.state(), BreakerState::Open);
        // A gate whose one permit the test holds: probes wait at it until it closes.
        let gate = Arc::new(Semaphore::new(1));
        let held = gate.try_acquire().unwrap();
        let granted = Arc::new(AtomicUsize::new(0));
        let probes = Arc::new(InFlight::default());
        let tasks: Vec<_> = (0..TASKS)
            .map(|_| {
                let (breaker, gate, granted, probes) =
                    (breaker.clone(), gate.clone(), granted.clone(), probes.clone());
                spawn(async move {
                    let permit = breaker.acquire().await;
                    granted.fetch_add(1, Ordering::SeqCst);
                    if permit.is_probe() {
                        let _probing = probes.enter();
                        assert!(gate.acquire().await.is_err(), "the gate only closes");
                    }
                    permit.report(Outcome::success());
                })
            })
            .collect();
        eventually(Duration::from_secs(30), || {
            granted.load(Ordering::SeqCst) == 2 && gate.waiting() == 2
        })
        .await
        .unwrap();
        // Both probe places are taken: the others wait, and so would anyone else.
        assert_eq!(breaker.state(), BreakerState::HalfOpen);
        let refused = breaker.try_acquire().unwrap_err();
        assert_eq!(refused.retry_after(), Duration::ZERO);
        assert_eq!(granted.load(Ordering::SeqCst), 2);
        // Both probes succeed: closed, and every waiter goes.
        gate.close();
        drop(held);
        for task in tasks {
            task.await;
        }
        assert_eq!(granted.load(Ordering::SeqCst), TASKS);
        assert_eq!(probes.peak(), 2, "never more probes out than allowed");
        assert_eq!(breaker.state(), BreakerState::Closed);
    }

    async fn a_probe_dropped_without_a_report_lets_the_next_waiter_probe() {
        let breaker = CircuitBreaker::new(
            Breaker::new().min_attempts(1).open_for(Duration::from_millis(10)),
        );
        breaker.try_acquire().unwrap().report(Outcome::failure());
        let probe = breaker.acquire().await;
        assert!(probe.is_probe());
        let mut next = pin!(breaker.acquire());
        assert!(poll_once(next.as_mut()).await.is_none());
        drop(probe); // cancelled: says nothing, frees its place
        assert_eq!(breaker.state(), BreakerState::HalfOpen);
        let next = next.await;
        assert!(next.is_probe());
        next.report(Outcome::success());
        assert_eq!(breaker.state(), BreakerState::Closed);
    }

    async fn a_keyed_breaker_forgets_keys_that_hold_nothing() {
        let per_host = KeyedCircuitBreaker::<u64>::new(
            Breaker::new().over_time(Duration::from_millis(20)),
        );
        // Permits dropped without a report leave nothing behind.
        for key in 0..1_000 {
            drop(per_host.try_acquire(&key).unwrap());
        }
        assert!(per_host.is_empty());
        // Keys that reported are kept while their records hold outcomes ...
        for key in 0..4_096 {
            per_host.try_acquire(&key).unwrap().report(Outcome::success());
        }
        sleep(Duration::from_millis(50)).await;
        // ... and swept once they are empty: new keys take their place, no more.
        for key in 10_000..18_192 {
            per_host.try_acquire(&key).unwrap().report(Outcome::success());
        }
        assert!(per_host.len() <= 8_192, "{} keys held", per_host.len());
    }
}

// A breaker's open periods are time: proven on virtual time, where no time passes while a
// poll runs (so a wait that must still be pending is, however busy the machine), to the
// nanosecond.
virtual_time! {
    async fn a_cancelled_acquire_takes_nothing() {
        let breaker = CircuitBreaker::new(
            Breaker::new().min_attempts(1).open_for(Duration::from_millis(20)),
        );
        breaker.try_acquire().unwrap().report(Outcome::overload());
        for _ in 0..8 {
            let mut waiting = Box::pin(breaker.acquire());
            assert!(poll_once(waiting.as_mut()).await.is_none());
        }
        // After the open period the one probe place is free for the next caller.
        let probe = breaker.acquire().await;
        assert!(probe.is_probe());
        assert!(breaker.try_acquire().is_err());
        probe.report(Outcome::success());
        assert!(breaker.try_acquire().is_ok());
    }

    async fn a_keyed_breakers_hosts_do_not_wait_for_one_another() {
        let per_host = KeyedCircuitBreaker::<String>::new(
            Breaker::new().min_attempts(2).open_for(Duration::from_millis(20)),
        );
        for _ in 0..2 {
            per_host.acquire("down.example").await.report(Outcome::failure());
        }
        assert_eq!(per_host.state("down.example"), BreakerState::Open);
        let mut down = pin!(per_host.acquire("down.example"));
        assert!(poll_once(down.as_mut()).await.is_none());
        for _ in 0..10 {
            let up = poll_once(per_host.acquire("up.example")).await.expect("at once");
            assert!(!up.is_probe());
            up.report(Outcome::success());
        }
        let probe = down.await;
        assert!(probe.is_probe());
        assert_eq!(probe.key(), "down.example");
        probe.report(Outcome::success());
        assert_eq!(per_host.state("down.example"), BreakerState::Closed);
    }

    async fn acquire_waits_exactly_the_open_period_and_twice_it_after_a_failed_probe() {
        let breaker = CircuitBreaker::new(Breaker::new().min_attempts(1).open_for(Duration::from_secs(10)));
        let begin = now();
        breaker.try_acquire().unwrap().report(Outcome::overload());
        let probe = breaker.acquire().await;
        assert_eq!(now() - begin, Duration::from_secs(10));
        assert!(probe.is_probe());
        probe.report(Outcome::failure()); // open again, for 20 s
        // Eight waiters: one probes at 30 s; its success lets the others go then too.
        let waiters = (0..8).map(|_| async {
            let permit = breaker.acquire().await;
            let at = now() - begin;
            let probe = permit.is_probe();
            permit.report(Outcome::success());
            (at, probe)
        });
        let mut probes = 0;
        for (at, probe) in join_all(waiters).await {
            assert_eq!(at, Duration::from_secs(30));
            probes += usize::from(probe);
        }
        assert_eq!(probes, 1);
        assert_eq!(breaker.state(), BreakerState::Closed);
    }

    async fn a_keyed_over_last_quiet_for_ten_minutes_is_forgotten() {
        let per_host = KeyedCircuitBreaker::<u32>::new(Breaker::new());
        for key in 0..1_000 {
            per_host.try_acquire(&key).unwrap().report(Outcome::failure());
        }
        // Ten failures open a key: open keys are never forgotten.
        for _ in 0..10 {
            per_host.try_acquire(&u32::MAX).unwrap().report(Outcome::failure());
        }
        assert_eq!(per_host.state(&u32::MAX), BreakerState::Open);
        assert_eq!(per_host.len(), 1_001);
        sleep(Duration::from_secs(601)).await;
        // A shard sweeps once it holds 64 keys and twice what its last sweep left; the keys'
        // hash is seeded per process, so 2,000 new keys (62 a shard on average) left a shard
        // of few keys unswept now and then (2,029 held once). 8,000 fill every shard past 64.
        for key in 1_000..9_000 {
            per_host.try_acquire(&key).unwrap().report(Outcome::success());
        }
        assert!(per_host.len() <= 8_001, "{} keys held", per_host.len());
        // Its open period is over: half-open, still held, and its probe goes.
        assert_eq!(per_host.state(&u32::MAX), BreakerState::HalfOpen);
        let probe = per_host.try_acquire(&u32::MAX).unwrap();
        assert!(probe.is_probe());
        probe.report(Outcome::success());
        assert_eq!(per_host.state(&u32::MAX), BreakerState::Closed);
    }
}
