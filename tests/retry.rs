//! `retry` and `RetryError` under every runtime of the matrix; backoff timing under
//! tokio's paused clock.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_lock::Semaphore;
use common::{DropFlag, matrix, panic_message};
use futures_lite::future::{self, poll_once, yield_now};
use tollgate::{Bulkhead, RetryError, retry, sleep};

/// Counts calls; returns the 1-based number of this call.
fn next(calls: &AtomicUsize) -> usize {
    calls.fetch_add(1, Ordering::SeqCst) + 1
}

matrix! {
    async fn succeeds_on_the_third_try() {
        let calls = AtomicUsize::new(0);
        let page = retry(|| async {
            match next(&calls) {
                1 | 2 => Err("connection reset"),
                _ => Ok("<html>"),
            }
        })
        .interval(Duration::from_millis(1))
        .await;
        assert_eq!(page, Ok("<html>"));
        assert_eq!(calls.load(Ordering::SeqCst), 3);
    }

    async fn exhausts_and_reports_each_attempt() {
        let calls = AtomicUsize::new(0);
        let failed = retry(|| async {
            let n = next(&calls);
            sleep(Duration::from_millis(2)).await;
            Err::<(), _>(format!("attempt {n}: 503"))
        })
        .attempts(4)
        .interval(Duration::ZERO)
        .await
        .unwrap_err();
        assert_eq!(calls.load(Ordering::SeqCst), 4);
        assert_eq!(failed.len(), 4);
        for (i, attempt) in failed.iter().enumerate() {
            assert_eq!(attempt.error(), Some(&format!("attempt {}: 503", i + 1)));
            assert!(!attempt.timed_out());
            assert!(attempt.duration() >= Duration::from_millis(2), "{:?}", attempt.duration());
        }
        assert!(!failed.is_permanent());
        assert!(!failed.deadline_passed());
        assert_eq!(failed.last_error().map(String::as_str), Some("attempt 4: 503"));
        assert_eq!(failed.to_string(), "all 4 attempts failed; the last: attempt 4: 503");
        assert_eq!(failed.clone().into_last_error().unwrap(), "attempt 4: 503");
        assert_eq!(failed.into_attempts()[0].clone().into_error().unwrap(), "attempt 1: 503");
    }

    async fn a_per_attempt_timeout_counts_as_a_failure() {
        let calls = AtomicUsize::new(0);
        let page = retry(|| async {
            if next(&calls) == 1 {
                sleep(Duration::from_secs(3600)).await; // hung
            }
            Ok::<_, String>("<html>")
        })
        .timeout(Duration::from_millis(10))
        .interval(Duration::ZERO)
        .await;
        assert_eq!(page, Ok("<html>"));
        assert_eq!(calls.load(Ordering::SeqCst), 2);

        let start = Instant::now();
        let failed = retry(|| async {
            sleep(Duration::from_secs(3600)).await;
            Ok::<(), String>(())
        })
        .attempts(2)
        .timeout(Duration::from_millis(10))
        .interval(Duration::ZERO)
        .await
        .unwrap_err();
        assert!(start.elapsed() < Duration::from_secs(30), "generous upper bound");
        assert_eq!(failed.len(), 2);
        for attempt in failed.iter() {
            assert!(attempt.timed_out());
            assert_eq!(attempt.error(), None);
            assert!(attempt.duration() >= Duration::from_millis(10), "{:?}", attempt.duration());
        }
        assert_eq!(failed.last_error(), None);
        assert_eq!(failed.to_string(), "all 2 attempts failed; the last timed out");
    }

    async fn the_predicate_stops_early() {
        let calls = AtomicUsize::new(0);
        let seen = Mutex::new(Vec::new());
        let failed = retry(|| async {
            match next(&calls) {
                1 => Err::<(), u16>(503),
                _ => Err(403),
            }
        })
        .attempts(10)
        .interval(Duration::ZERO)
        .when(|status: &u16| {
            seen.lock().unwrap().push(*status);
            *status >= 500
        })
        .await
        .unwrap_err();
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        assert_eq!(*seen.lock().unwrap(), [503, 403]);
        assert!(failed.is_permanent());
        assert_eq!(failed.len(), 2);
        assert_eq!(failed.to_string(), "attempt 2 failed and is not retryable: 403");

        // A non-retryable first error: one attempt, no pause.
        let start = Instant::now();
        let failed = retry(|| async { Err::<(), _>("bad request") })
            .interval(Duration::from_secs(3600))
            .when(|_| false)
            .await
            .unwrap_err();
        assert_eq!(failed.len(), 1);
        assert!(start.elapsed() < Duration::from_secs(30));
    }

    async fn cancelling_mid_pause_stops_everything() {
        let calls = AtomicUsize::new(0);
        let attempt_gone = DropFlag::default();
        let mut retrying: Pin<Box<dyn Future<Output = _>>> = Box::pin(
            retry(|| {
                next(&calls);
                let guard = attempt_gone.guard();
                async move {
                    let _guard = guard;
                    Err::<(), _>("503")
                }
            })
            .interval(Duration::from_secs(3600))
            .into_future(),
        );
        // The first attempt fails at once; the retry is now in its hour-long pause.
        assert!(poll_once(retrying.as_mut()).await.is_none());
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert!(attempt_gone.is_set(), "the failed attempt is dropped before the pause");
        drop(retrying);
        yield_now().await;
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    async fn cancelling_mid_attempt_drops_the_attempt() {
        let attempt_gone = DropFlag::default();
        let mut retrying = Box::pin(
            retry(|| {
                let guard = attempt_gone.guard();
                async move {
                    let _guard = guard;
                    sleep(Duration::from_secs(3600)).await;
                    Ok::<(), String>(())
                }
            })
            .into_future(),
        );
        assert!(poll_once(retrying.as_mut()).await.is_none());
        assert!(!attempt_gone.is_set());
        drop(retrying);
        assert!(attempt_gone.is_set());
    }

    async fn the_deadline_bounds_the_whole_retry() {
        // A hung attempt is cut by the deadline and recorded as timed out.
        let start = Instant::now();
        let failed = retry(|| async {
            sleep(Duration::from_secs(3600)).await;
            Ok::<(), String>(())
        })
        .attempts(100)
        .deadline(Duration::from_millis(20))
        .await
        .unwrap_err();
        assert!(failed.deadline_passed());
        assert_eq!(failed.len(), 1);
        assert!(failed[0].timed_out());
        assert!(start.elapsed() >= Duration::from_millis(20));
        assert!(start.elapsed() < Duration::from_secs(30), "generous upper bound");
        assert_eq!(
            failed.to_string(),
            "retry deadline of 20ms passed after 1 attempt; the last timed out"
        );

        // A pause that would outlast the deadline is not taken: give up at once.
        let start = Instant::now();
        let failed = retry(|| async { Err::<(), _>("503") })
            .attempts(100)
            .interval(Duration::from_secs(60))
            .deadline(Duration::from_secs(20))
            .await
            .unwrap_err();
        assert!(start.elapsed() < Duration::from_secs(10), "slept: {:?}", start.elapsed());
        assert!(failed.deadline_passed());
        assert_eq!(failed.len(), 1);
        assert_eq!(
            failed.to_string(),
            "retry deadline of 20s passed after 1 attempt; the last: 503"
        );
    }

    // The recipe's advice: retry goes *outside* the limit (here a one-slot semaphore
    // standing in for a bulkhead), so each attempt queues for a slot again and no slot is
    // held during the pause.
    async fn retry_outside_the_slot_holds_no_slot_during_the_pause() {
        // The recipe's advice: retry wraps the bulkhead's `run`, so no slot is held while
        // pausing and every attempt queues for a slot again. The bulkhead's stats prove it.
        let slots = Bulkhead::new(1).name("api");
        let calls = AtomicUsize::new(0);
        let fetch = || async {
            slots
                .run(async {
                    yield_now().await; // the request, in flight
                    match next(&calls) {
                        1 | 2 => Err("503"),
                        _ => Ok("<html>"),
                    }
                })
                .await
                .unwrap_or(Err("no slot"))
        };
        let in_flight_during_pauses = Mutex::new(Vec::new());
        let page = retry(fetch)
            .interval(Duration::from_millis(1))
            // The predicate runs after the attempt is dropped, right before the pause.
            .when(|_| {
                in_flight_during_pauses.lock().unwrap().push(slots.stats().in_flight);
                true
            })
            .await;
        assert_eq!(page, Ok("<html>"));
        assert_eq!(*in_flight_during_pauses.lock().unwrap(), [0, 0]);
        let stats = slots.stats();
        assert_eq!(stats.admitted, 3, "one slot per attempt");
        assert_eq!((stats.peak_in_flight, stats.in_flight, stats.rejected), (1, 0, 0));

        // The wrong way round, for contrast: retrying inside the slot holds it all along.
        let calls = AtomicUsize::new(0);
        let in_flight_during_pauses = Mutex::new(Vec::new());
        let page = slots
            .run(
                retry(|| async {
                    match next(&calls) {
                        1 => Err("503"),
                        _ => Ok("<html>"),
                    }
                })
                .interval(Duration::from_millis(1))
                .when(|_| {
                    in_flight_during_pauses.lock().unwrap().push(slots.stats().in_flight);
                    true
                }),
            )
            .await
            .unwrap();
        assert_eq!(page, Ok("<html>"));
        assert_eq!(*in_flight_during_pauses.lock().unwrap(), [1]);
    }

    async fn a_retry_queues_for_a_slot_again() {
        let slots = Arc::new(Semaphore::new(1));
        let events = Mutex::new(Vec::new());
        let competitor = Mutex::new(None);
        let calls = AtomicUsize::new(0);
        let retrying = retry(|| async {
            let _permit = slots.acquire().await;
            let n = next(&calls);
            events.lock().unwrap().push(format!("attempt {n} has the slot"));
            if n == 1 { Err("503") } else { Ok("<html>") }
        })
        .interval(Duration::from_millis(1))
        .when(|_| {
            // During the pause another request takes the free slot...
            let permit = slots.try_acquire_arc().expect("the slot is free during the pause");
            *competitor.lock().unwrap() = Some(permit);
            true
        });
        let other_request = async {
            while competitor.lock().unwrap().is_none() {
                yield_now().await;
            }
            sleep(Duration::from_millis(20)).await;
            events.lock().unwrap().push("competitor releases".to_owned());
            competitor.lock().unwrap().take();
        };
        // ...and the second attempt waits for it like any other request.
        let (page, ()) = future::zip(retrying.into_future(), other_request).await;
        assert_eq!(page, Ok("<html>"));
        assert_eq!(
            *events.lock().unwrap(),
            ["attempt 1 has the slot", "competitor releases", "attempt 2 has the slot"]
        );
    }

    async fn many_retrying_requests_never_exceed_the_slots() {
        let slots = Bulkhead::new(2);
        let calls = AtomicUsize::new(0);
        let request = |_| async {
            slots
                .run(async {
                    sleep(Duration::from_millis(1)).await;
                    // Every other call fails.
                    if next(&calls) % 2 == 1 { Err("503") } else { Ok(()) }
                })
                .await
                .unwrap_or(Err("no slot"))
        };
        let crawl = (0..8).map(|url: u32| {
            retry(move || request(url))
                .attempts(10)
                .interval(Duration::from_millis(1))
                .into_future()
        });
        let results = futures::future::join_all(crawl).await;
        assert!(results.iter().all(Result::is_ok));
        let stats = slots.stats();
        assert_eq!(stats.peak_in_flight, 2, "both slots used, never more");
        assert_eq!((stats.in_flight, stats.waiting), (0, 0));
        assert_eq!(stats.admitted, calls.load(Ordering::SeqCst) as u64);
    }

    async fn retry_futures_work_when_spawned() {
        let calls = Arc::new(AtomicUsize::new(0));
        let counter = calls.clone();
        let page = common::spawn(
            retry(move || {
                let counter = counter.clone();
                async move {
                    match next(&counter) {
                        1 => Err("503".to_owned()),
                        _ => Ok("<html>"),
                    }
                }
            })
            .interval(Duration::from_millis(1))
            .into_future(),
        )
        .await;
        assert_eq!(page, Ok("<html>"));
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }
}

#[test]
fn zero_attempts_panics_clearly() {
    let panic = std::panic::catch_unwind(|| {
        let _ = retry(|| async { Ok::<(), ()>(()) }).attempts(0);
    })
    .unwrap_err();
    assert_eq!(
        panic_message(&*panic),
        "retry needs at least 1 attempt, got .attempts(0)"
    );
}

#[test]
fn bad_jitter_and_backoff_panic_clearly() {
    let jitter = std::panic::catch_unwind(|| {
        let _ = retry(|| async { Ok::<(), ()>(()) }).jitter(1.5);
    })
    .unwrap_err();
    assert_eq!(
        panic_message(&*jitter),
        "retry jitter must be within 0.0..=1.0, got 1.5"
    );
    let factor = std::panic::catch_unwind(|| {
        let _ = retry(|| async { Ok::<(), ()>(()) }).backoff(
            Duration::from_millis(1),
            0.5,
            Duration::from_secs(1),
        );
    })
    .unwrap_err();
    assert_eq!(
        panic_message(&*factor),
        "retry backoff factor must be finite and at least 1, got 0.5"
    );
}

#[test]
fn retry_error_is_an_error_and_converts_to_the_umbrella() {
    fn is_error<E: std::error::Error + Send + Sync + 'static>(_: &E) {}

    let failed = tollgate::run_sync(
        retry(|| async { Err::<(), _>(std::io::Error::other("refused")) })
            .attempts(1)
            .into_future(),
    )
    .unwrap_err();
    is_error(&failed);
    assert_eq!(failed.to_string(), "the only attempt failed: refused");
    let umbrella: tollgate::Error = failed.into();
    is_error(&umbrella);
    assert_eq!(umbrella.to_string(), "the only attempt failed: refused");
    assert!(matches!(umbrella, tollgate::Error::Retry(_)));

    async fn fetch() -> Result<u8, tollgate::Error> {
        let value = retry(|| async { Err::<u8, _>("503") })
            .attempts(2)
            .interval(Duration::ZERO)
            .await?;
        Ok(value)
    }
    let error = tollgate::run_sync(fetch()).unwrap_err();
    assert_eq!(error.to_string(), "all 2 attempts failed; the last: 503");

    let failed: RetryError<&str> = tollgate::run_sync(
        retry(|| async { Err::<(), _>("x") })
            .attempts(1)
            .into_future(),
    )
    .unwrap_err();
    assert_eq!(failed.map_errors(str::len).last_error(), Some(&1));
}

#[test]
fn the_futures_are_send() {
    fn assert_send<T: Send>(_: &T) {}
    let builder = retry(|| async { Ok::<(), String>(()) })
        .timeout(Duration::from_secs(1))
        .deadline(Duration::from_secs(5))
        .when(|error: &String| error.is_empty());
    assert_send(&builder);
    assert!(format!("{builder:?}").starts_with("Retry {"));
    let future = builder.into_future();
    assert_send(&future);
    assert!(format!("{future:?}").starts_with("RetryFuture {"));
}

#[test]
fn retries_run_under_a_plain_futures_executor() {
    let calls = AtomicUsize::new(0);
    let page = futures::executor::block_on(
        retry(|| async {
            match next(&calls) {
                1 => Err("503"),
                _ => Ok("<html>"),
            }
        })
        .interval(Duration::from_millis(1))
        .into_future(),
    );
    assert_eq!(page, Ok("<html>"));
}

#[cfg(feature = "tokio")]
mod paused_clock {
    use super::*;

    /// Runs a retry whose every attempt fails and returns the pauses between attempts,
    /// measured on tokio's (paused) clock.
    async fn pauses_of<F, P>(
        builder: tollgate::futures::Retry<F, P>,
        starts: &Mutex<Vec<tokio::time::Instant>>,
    ) -> Vec<Duration>
    where
        tollgate::futures::Retry<F, P>: IntoFuture,
    {
        let _ = builder.await;
        let starts = starts.lock().unwrap();
        starts.windows(2).map(|pair| pair[1] - pair[0]).collect()
    }

    fn failing(
        starts: &Mutex<Vec<tokio::time::Instant>>,
    ) -> impl FnMut() -> future::Ready<Result<(), &'static str>> + '_ {
        move || {
            starts.lock().unwrap().push(tokio::time::Instant::now());
            future::ready(Err("503"))
        }
    }

    fn assert_close(actual: &[Duration], expected: &[Duration]) {
        assert_eq!(actual.len(), expected.len(), "{actual:?}");
        for (actual, expected) in actual.iter().zip(expected) {
            // Tokio's timer rounds up to its next millisecond tick.
            assert!(
                *actual >= *expected && *actual <= *expected + Duration::from_millis(2),
                "pause {actual:?}, expected {expected:?}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn backoff_delays_grow_as_specified() {
        let wall = Instant::now();
        let starts = Mutex::new(Vec::new());
        let pauses = pauses_of(
            retry(failing(&starts))
                .attempts(7)
                .backoff(Duration::from_millis(100), 2.0, Duration::from_secs(2))
                .jitter(0.0),
            &starts,
        )
        .await;
        let ms = Duration::from_millis;
        assert_close(
            &pauses,
            &[ms(100), ms(200), ms(400), ms(800), ms(1600), ms(2000)],
        );
        assert!(
            wall.elapsed() < Duration::from_secs(10),
            "{:?}",
            wall.elapsed()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_default_policy_is_three_attempts_with_jittered_doubling() {
        let starts = Mutex::new(Vec::new());
        let pauses = pauses_of(retry(failing(&starts)), &starts).await;
        assert_eq!(pauses.len(), 2, "3 attempts");
        let ms = Duration::from_millis;
        assert!(pauses[0] >= ms(50) && pauses[0] <= ms(102), "{pauses:?}");
        assert!(pauses[1] >= ms(100) && pauses[1] <= ms(202), "{pauses:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn jitter_shortens_pauses_within_its_fraction() {
        let starts = Mutex::new(Vec::new());
        let pauses = pauses_of(
            retry(failing(&starts))
                .attempts(21)
                .interval(Duration::from_secs(1))
                .jitter(0.25),
            &starts,
        )
        .await;
        assert_eq!(pauses.len(), 20);
        let low = Duration::from_millis(750);
        let high = Duration::from_millis(1002);
        assert!(pauses.iter().all(|p| *p >= low && *p <= high), "{pauses:?}");
        // Random, not all equal.
        assert!(pauses.iter().any(|p| *p != pauses[0]), "{pauses:?}");

        // A fixed interval has no jitter by default.
        let starts = Mutex::new(Vec::new());
        let pauses = pauses_of(
            retry(failing(&starts))
                .attempts(4)
                .interval(Duration::from_millis(300)),
            &starts,
        )
        .await;
        let ms = Duration::from_millis;
        assert_close(&pauses, &[ms(300), ms(300), ms(300)]);
    }

    #[tokio::test(start_paused = true)]
    async fn attempt_durations_follow_the_paused_clock() {
        let wall = Instant::now();
        let calls = AtomicUsize::new(0);
        let failed = retry(|| async {
            if next(&calls) == 1 {
                tokio::time::sleep(Duration::from_millis(250)).await;
                Err("slow 503")
            } else {
                sleep(Duration::from_secs(7200)).await;
                Ok(())
            }
        })
        .attempts(2)
        .timeout(Duration::from_secs(3600))
        .interval(Duration::from_secs(60))
        .await
        .unwrap_err();
        let ms = Duration::from_millis;
        assert_close(&[failed[0].duration()], &[ms(250)]);
        assert!(failed[1].timed_out());
        assert_close(&[failed[1].duration()], &[Duration::from_secs(3600)]);
        assert!(
            wall.elapsed() < Duration::from_secs(10),
            "{:?}",
            wall.elapsed()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_timeout_around_the_retry_cancels_it_mid_pause() {
        let calls = AtomicUsize::new(0);
        let result = tollgate::timeout(
            Duration::from_millis(150),
            retry(|| async {
                next(&calls);
                Err::<(), _>("503")
            })
            .attempts(100)
            .interval(Duration::from_secs(1)),
        )
        .await;
        assert!(result.is_err());
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(
            calls.load(Ordering::SeqCst),
            1,
            "no attempt after cancellation"
        );
    }
}
