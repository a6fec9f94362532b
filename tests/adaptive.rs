//! `AdaptiveLimiter`: never more permits out than its limit, successes at full use raise
//! the limit, an overload at full use cuts it and one while the rate binds cuts the rate, a
//! permit dropped without a report teaches nothing, a cancelled acquire gives its slot and
//! its start back; and, under `--features tokio`, tokio's paused clock is honoured.

mod common;

use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{InFlight, matrix, panic_message, spawn};
use futures_lite::future::poll_once;
use tollgate::futures::AdaptiveAcquire;
use tollgate::{Adaptive, AdaptiveLimiter, AdaptivePermit, Outcome, Rate, sleep};

#[test]
fn limiters_futures_and_permits_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<AdaptiveLimiter>();
    send_sync::<AdaptiveAcquire<'static>>();
    send_sync::<AdaptivePermit<'static>>();
    send_sync::<Outcome>();
    send_sync::<Adaptive>();
}

#[test]
fn a_floor_of_zero_or_above_the_ceiling_panics_naming_both() {
    for (floor, ceiling) in [(0, 4), (5, 3)] {
        let panic = std::panic::catch_unwind(|| Adaptive::new(floor, ceiling)).unwrap_err();
        let message = panic_message(&*panic);
        assert!(
            message.contains(&format!("floor {floor}, ceiling {ceiling}")),
            "{message}"
        );
    }
}

#[test]
fn outcomes_say_what_they_are() {
    let all = [Outcome::success(), Outcome::overload(), Outcome::failure()];
    let flags: Vec<_> = all
        .iter()
        .map(|o| (o.is_success(), o.is_overload(), o.is_failure()))
        .collect();
    assert_eq!(
        flags,
        [
            (true, false, false),
            (false, true, false),
            (false, false, true)
        ]
    );
}

matrix! {
    async fn never_more_in_flight_than_the_limit_and_full_use_raises_it() {
        let limiter = Arc::new(AdaptiveLimiter::new(Adaptive::new(1, 16)));
        let in_flight = Arc::new(InFlight::default());
        let over = Arc::new(AtomicUsize::new(0));
        assert_eq!(limiter.limit(), 1, "a new limiter starts at its floor");
        // Rounds of 64 attempts of 20 ms: every start finds the limit in full use, every
        // window ends in successes. A window lasts 100 ms at least; slow start raises the
        // limit by half each window, so a few rounds suffice even on a busy machine.
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut rounds = 0;
        while limiter.limit() < 8 && Instant::now() < deadline {
            rounds += 1;
            let tasks: Vec<_> = (0..64)
                .map(|_| {
                    let (limiter, in_flight, over) =
                        (limiter.clone(), in_flight.clone(), over.clone());
                    spawn(async move {
                        let permit = limiter.acquire().await;
                        let inside = in_flight.enter();
                        // Successes only: the limit never falls, so none may be over it.
                        if in_flight.now() > limiter.limit() {
                            over.fetch_add(1, Ordering::Relaxed);
                        }
                        sleep(Duration::from_millis(20)).await;
                        drop(inside);
                        permit.report(Outcome::success());
                    })
                })
                .collect();
            for task in tasks {
                task.await;
            }
        }
        assert_eq!(over.load(Ordering::Relaxed), 0);
        assert!(limiter.limit() >= 8, "{} after {rounds} rounds", limiter.limit());
        assert!(in_flight.peak() <= limiter.limit());
        assert!(in_flight.peak() >= 4, "the raised limit was used: {}", in_flight.peak());
    }

    async fn an_overload_at_full_use_cuts_the_limit_and_a_drop_without_report_is_ignored() {
        let limiter = AdaptiveLimiter::new(Adaptive::new(1, 8));
        // From its floor of 1 to 2: rounds of one attempt in full use, each over 100 ms
        // long (a round's least length), raise the limit by half.
        while limiter.limit() < 2 {
            let permit = limiter.acquire().await;
            sleep(Duration::from_millis(110)).await;
            permit.report(Outcome::success());
        }
        let first = limiter.acquire().await;
        let second = limiter.acquire().await; // the whole limit of 2 in use
        drop(first); // cancelled: no report, nothing learnt
        assert_eq!(limiter.limit(), 2);
        second.report(Outcome::overload());
        assert_eq!(limiter.limit(), 1);
        // The slots follow: one permit at a time now.
        let held = limiter.acquire().await;
        let mut next = pin!(limiter.acquire());
        assert!(poll_once(next.as_mut()).await.is_none());
        drop(held);
        let next = next.await;
        // Plain failures change nothing.
        next.report(Outcome::failure());
        assert_eq!(limiter.limit(), 1);
    }

    async fn an_overload_while_the_rate_binds_cuts_the_rate_not_the_limit() {
        let limiter = AdaptiveLimiter::new(Adaptive::new(1, 4).max_rate(Rate::per_second(50)));
        assert_eq!(limiter.rate(), Some(Rate::per_second(5)), "starts low");
        // One at a time: every start after the first waits for the rate.
        for _ in 0..3 {
            limiter.acquire().await.report(Outcome::success());
        }
        let before = limiter.rate().unwrap().interval();
        limiter.acquire().await.report(Outcome::overload());
        let after = limiter.rate().unwrap().interval();
        assert!(after > before, "{after:?} after {before:?}: slower");
        assert_eq!(limiter.limit(), 2, "the limit did not bind");
    }

    async fn a_cancelled_acquire_gives_its_slot_and_its_start_back() {
        let limiter = AdaptiveLimiter::new(Adaptive::new(1, 1).max_rate(Rate::per_second(2)));
        drop(limiter.acquire().await); // the first start of the rate, at once
        // The next waits 500 ms for the rate, holding the one slot.
        let mut waiting = Box::pin(limiter.acquire());
        assert!(poll_once(waiting.as_mut()).await.is_none());
        drop(waiting);
        // Slot and start given back: the next acquire waits those 500 ms, not 1 s more.
        let began = Instant::now();
        let permit = limiter.acquire().await;
        let waited = began.elapsed();
        assert!(waited < Duration::from_millis(950), "{waited:?}");
        drop(permit);
    }
}

/// Under tokio's paused clock the limiter's waits take virtual time, not wall time.
#[cfg(feature = "tokio")]
mod paused {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn twenty_starts_at_five_per_second_take_four_virtual_seconds() {
        let limiter = AdaptiveLimiter::new(Adaptive::new(1, 1).max_rate(Rate::per_second(5)));
        let began = tokio::time::Instant::now();
        let wall = Instant::now();
        for _ in 0..20 {
            // Dropped without a report: the rate stays at 5 per second.
            drop(limiter.acquire().await);
        }
        assert_eq!(began.elapsed(), Duration::from_millis(3800));
        assert!(wall.elapsed() < Duration::from_secs(2));
        assert_eq!(limiter.rate(), Some(Rate::per_second(5)));
    }
}
