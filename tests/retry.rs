//! `retry` and `RetryError`.
//!
//! Time is proven on virtual time (`virtual_time!` in `on_virtual_time`: smol's world on
//! `run_virtual`, and tokio's paused clock), where timers fire exactly at their deadlines:
//! pauses (fixed, backoff, jittered within their fraction), how long each attempt lasted,
//! attempt timeouts, the whole-retry timeout, the attempts that fit in it, and endless
//! pauses ended by an outer timeout. The same scenarios run on every executor (`matrix!`:
//! smol, `run_sync`, tokio current and multi-thread) for what holds at any speed: the
//! attempts made and kept, the errors and their words, cancellation, slots held or not
//! during pauses, and the order of events. Two checks stay on the real clock because they
//! need a busy loop, which never lets a virtual clock move: a zero pause yields (an outer
//! timeout still fires), and a retry's kept attempts stay bounded under a timeout.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_lock::Semaphore;
use common::{DropFlag, matrix, panic_message, virtual_time};
use futures_lite::future::{self, poll_once, yield_now};
use tollgate::testing::now;
use tollgate::{Bulkhead, RetryError, retry, sleep};

/// Counts calls; returns the 1-based number of this call.
fn next(calls: &AtomicUsize) -> usize {
    calls.fetch_add(1, Ordering::SeqCst) + 1
}

/// Four attempts that each take 2 ms and fail, checked for what holds at any speed; how
/// long each attempt took.
async fn exhausted_attempts() -> Vec<Duration> {
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
    assert_eq!(failed.attempts().len(), 4);
    assert_eq!((failed.attempts_made(), failed.attempts_dropped()), (4, 0));
    for (i, attempt) in failed.attempts().iter().enumerate() {
        assert_eq!(attempt.error(), Some(&format!("attempt {}: 503", i + 1)));
        assert_eq!(attempt.number() as usize, i + 1);
        assert!(!attempt.is_timed_out());
    }
    assert!(!failed.is_permanent());
    assert!(!failed.is_timed_out());
    assert_eq!(
        failed.last_error().map(String::as_str),
        Some("attempt 4: 503")
    );
    assert_eq!(
        failed.to_string(),
        "all 4 attempts failed; the last: attempt 4: 503"
    );
    assert_eq!(failed.clone().into_last_error().unwrap(), "attempt 4: 503");
    let elapsed = failed
        .attempts()
        .iter()
        .map(|attempt| attempt.elapsed())
        .collect();
    assert_eq!(
        failed.into_attempts()[0].clone().into_error().unwrap(),
        "attempt 1: 503"
    );
    elapsed
}

/// Hung attempts cut by a 10 ms attempt timeout, checked for what holds at any speed: how
/// long the retry that succeeds on its second attempt took, how long the one whose two
/// attempts hang took, and each of its attempts.
async fn per_attempt_timeouts() -> (Duration, Duration, Vec<Duration>) {
    let calls = AtomicUsize::new(0);
    let start = now();
    let page = retry(|| async {
        if next(&calls) == 1 {
            sleep(Duration::from_secs(3600)).await; // hung
        }
        Ok::<_, String>("<html>")
    })
    .attempt_timeout(Duration::from_millis(10))
    .interval(Duration::ZERO)
    .await;
    let succeeded_after = now() - start;
    assert_eq!(page, Ok("<html>"));
    assert_eq!(calls.load(Ordering::SeqCst), 2);

    let start = now();
    let failed = retry(|| async {
        sleep(Duration::from_secs(3600)).await;
        Ok::<(), String>(())
    })
    .attempts(2)
    .attempt_timeout(Duration::from_millis(10))
    .interval(Duration::ZERO)
    .await
    .unwrap_err();
    let failed_after = now() - start;
    assert_eq!(failed.attempts().len(), 2);
    assert!(
        !failed.is_timed_out(),
        "each attempt timed out, not the retry"
    );
    for attempt in failed.attempts() {
        assert!(attempt.is_timed_out());
        assert_eq!(attempt.error(), None);
    }
    assert_eq!(failed.last_error(), None);
    assert_eq!(
        failed.to_string(),
        "all 2 attempts failed; the last timed out"
    );
    let elapsed = failed
        .attempts()
        .iter()
        .map(|attempt| attempt.elapsed())
        .collect();
    (succeeded_after, failed_after, elapsed)
}

/// A predicate that refuses the second error, then the first: checked for what holds at
/// any speed; how long the retry refused at once (under an hour-long interval) took.
async fn predicate_stops() -> Duration {
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
    assert_eq!(failed.attempts().len(), 2);
    assert_eq!(
        failed.to_string(),
        "attempt 2 failed and is not retryable: 403"
    );

    // A non-retryable first error: one attempt, no pause.
    let start = now();
    let failed = retry(|| async { Err::<(), _>("bad request") })
        .interval(Duration::from_secs(3600))
        .when(|_| false)
        .await
        .unwrap_err();
    assert_eq!(failed.attempts_made(), 1);
    now() - start
}

/// The whole-retry timeout, checked for what holds at any speed: how long a hung attempt
/// cut by a 20 ms timeout took; how long a retry whose pause would outlast the timeout
/// took; and the attempts made, and the time taken, under 5 ms per attempt and 40 ms in all.
async fn whole_retry_timeouts() -> (Duration, Duration, (u32, Duration)) {
    // A hung attempt is cut by the timeout and recorded as timed out.
    let start = now();
    let failed = retry(|| async {
        sleep(Duration::from_secs(3600)).await;
        Ok::<(), String>(())
    })
    .attempts(100)
    .timeout(Duration::from_millis(20))
    .await
    .unwrap_err();
    let hung = now() - start;
    assert!(failed.is_timed_out());
    assert_eq!(failed.attempts().len(), 1);
    assert!(failed.attempts()[0].is_timed_out());
    assert_eq!(
        failed.to_string(),
        "retry timed out after 20ms and 1 attempt; the last timed out"
    );

    // A pause that would outlast the timeout is not taken: give up at once.
    let start = now();
    let failed = retry(|| async { Err::<(), _>("503") })
        .attempts(100)
        .interval(Duration::from_secs(60))
        .timeout(Duration::from_secs(20))
        .await
        .unwrap_err();
    let gave_up = now() - start;
    assert!(failed.is_timed_out());
    assert_eq!(failed.attempts().len(), 1);
    assert_eq!(
        failed.to_string(),
        "retry timed out after 20s and 1 attempt; the last: 503"
    );

    // Each attempt bounded by `attempt_timeout`, the whole by `timeout`: the first limit to
    // pass wins.
    let start = now();
    let failed = retry(|| async {
        sleep(Duration::from_secs(3600)).await;
        Ok::<(), String>(())
    })
    .attempts(u32::MAX)
    .attempt_timeout(Duration::from_millis(5))
    .interval(Duration::ZERO)
    .timeout(Duration::from_millis(40))
    .await
    .unwrap_err();
    let both = (failed.attempts_made(), now() - start);
    assert!(failed.is_timed_out());
    assert!(
        failed
            .attempts()
            .iter()
            .all(|attempt| attempt.is_timed_out())
    );

    // A zero timeout gives the first attempt exactly one poll.
    let mut calls = 0;
    let failed = retry(|| {
        calls += 1;
        future::pending::<Result<(), String>>()
    })
    .timeout(Duration::ZERO)
    .await
    .unwrap_err();
    assert!(failed.is_timed_out());
    assert_eq!((failed.attempts_made(), calls), (1, 1));
    (hung, gave_up, both)
}

/// Retries whose pause is `Duration::MAX` (after 1 attempt, twice; after 2, once), each
/// ended by a 20 ms outer timeout, and one ended by its own timeout before such a pause:
/// the calls each made before its outer timeout, and how long each waited.
async fn endless_pauses() -> ([usize; 3], [Duration; 3]) {
    async fn waits_forever(retrying: impl Future, calls: &AtomicUsize) -> (usize, Duration) {
        let start = now();
        let outcome = tollgate::timeout(Duration::from_millis(20), retrying).await;
        assert!(outcome.is_err(), "the pause never ends");
        (calls.load(Ordering::SeqCst), now() - start)
    }
    let calls = AtomicUsize::new(0);
    let failing = || {
        next(&calls);
        future::ready(Err::<(), _>("503"))
    };
    let flat = waits_forever(
        retry(failing).interval(Duration::MAX).jitter(1e-300),
        &calls,
    )
    .await;

    let calls = AtomicUsize::new(0);
    let failing = || {
        next(&calls);
        future::ready(Err::<(), _>("503"))
    };
    let huge = retry(failing)
        .backoff(Duration::MAX, 2.0, Duration::MAX)
        .jitter(1e-300);
    let huge = waits_forever(huge, &calls).await;

    // 1 ms, then a product far beyond any Duration, capped at the max.
    let calls = AtomicUsize::new(0);
    let failing = || {
        next(&calls);
        future::ready(Err::<(), _>("503"))
    };
    let steep = retry(failing)
        .attempts(10)
        .backoff(Duration::from_millis(1), 1e300, Duration::MAX)
        .jitter(1e-300);
    let steep = waits_forever(steep, &calls).await;

    // With a whole-retry timeout the endless pause is not even started.
    let failed = retry(|| future::ready(Err::<(), _>("503")))
        .interval(Duration::MAX)
        .jitter(1e-300)
        .timeout(Duration::from_secs(60))
        .await
        .unwrap_err();
    assert!(failed.is_timed_out());
    assert_eq!(failed.attempts_made(), 1);
    ([flat.0, huge.0, steep.0], [flat.1, huge.1, steep.1])
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
        exhausted_attempts().await;
    }

    async fn a_per_attempt_timeout_counts_as_a_failure() {
        per_attempt_timeouts().await;
    }

    async fn the_predicate_stops_early() {
        predicate_stops().await;
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
            .interval(Duration::from_secs(3600)),
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
            }),
        );
        assert!(poll_once(retrying.as_mut()).await.is_none());
        assert!(!attempt_gone.is_set());
        drop(retrying);
        assert!(attempt_gone.is_set());
    }

    async fn the_timeout_bounds_the_whole_retry() {
        whole_retry_timeouts().await;
    }

    async fn retry_outside_the_slot_holds_no_slot_during_the_pause() {
        // Retry wraps the bulkhead's `run`, so no slot is held while pausing and every
        // attempt queues for a slot again. The bulkhead's stats prove it.
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
        let (page, ()) = future::zip(retrying, other_request).await;
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
            .interval(Duration::from_millis(1)),
        )
        .await;
        assert_eq!(page, Ok("<html>"));
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    /// Regression: with a zero pause and attempts that fail at once, every attempt ran
    /// inside one poll, so 3,000,000 attempts kept the executor (and a 10 ms timeout
    /// around the retry) waiting until all were spent. Now the retry yields between attempts.
    async fn a_zero_pause_still_yields_between_attempts() {
        let calls = AtomicUsize::new(0);
        let failing = || {
            next(&calls);
            future::ready(Err::<(), _>("503"))
        };
        let mut retrying = Box::pin(retry(failing).attempts(3).interval(Duration::ZERO));
        assert!(poll_once(retrying.as_mut()).await.is_none(), "yields after attempt 1");
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        drop(retrying);

        let calls = AtomicUsize::new(0);
        let failing = || {
            next(&calls);
            future::ready(Err::<(), _>("503"))
        };
        let start = Instant::now();
        let outcome = tollgate::timeout(
            Duration::from_millis(10),
            retry(failing).attempts(3_000_000).interval(Duration::ZERO),
        )
        .await;
        assert!(outcome.is_err(), "the outer timeout fired: {:?}", outcome.map(|r| r.map_err(|e| e.attempts_made())));
        let made = calls.load(Ordering::SeqCst);
        assert!(made < 3_000_000, "{made}");
        // A busy loop cannot run on virtual time (the clock moves only when nothing is
        // woken), so this wall-clock bound stays: the worst run measured with both cores
        // busy took 0.29 s (the whole test binary, 4 legs); 30 s is 100 times that.
        assert!(start.elapsed() < Duration::from_secs(30), "generous upper bound");
    }

    /// Regression: `.interval(Duration::MAX).jitter(1e-300)` (and a backoff whose max is
    /// `Duration::MAX`) panicked inside `Duration::mul_f64`. A `Duration::MAX` pause is now
    /// a pause that never ends: an outer timeout ends the retry.
    async fn a_max_pause_with_jitter_never_panics_and_never_ends() {
        // Whether the steep backoff's 1 ms pause ended before the 20 ms outer timeout
        // depends on speed here: exactly on virtual time.
        let (calls, _) = endless_pauses().await;
        assert_eq!(calls[..2], [1, 1]);
        assert!((1..=2).contains(&calls[2]), "{calls:?}");
    }

    /// Regression: `RetryError` kept every attempt, so a retry with huge `attempts` grew
    /// without bound (3,000,000 errors kept). Now it keeps the first 8 and the last 8 and
    /// counts the rest.
    async fn retry_error_memory_stays_bounded_when_attempts_are_huge() {
        // Ended by the predicate after 50,000 attempts.
        let failed = retry({
            let mut n = 0_u32;
            move || {
                n += 1;
                future::ready(Err::<(), _>(n))
            }
        })
        .attempts(u32::MAX)
        .interval(Duration::ZERO)
        .when(|n| *n < 50_000)
        .await
        .unwrap_err();
        assert!(failed.is_permanent());
        assert_eq!(failed.attempts_made(), 50_000);
        assert_eq!(failed.attempts().len(), 16);
        assert_eq!(failed.attempts_dropped(), 50_000 - 16);
        let numbers: Vec<u32> = failed.attempts().iter().map(|a| a.number()).collect();
        let errors: Vec<u32> = failed.attempts().iter().map(|a| *a.error().unwrap()).collect();
        assert_eq!(numbers, errors);
        let expected: Vec<u32> = (1..=8).chain(49_993..=50_000).collect();
        assert_eq!(numbers, expected);
        assert_eq!(failed.last_error(), Some(&50_000));
        assert_eq!(failed.to_string(), "attempt 50000 failed and is not retryable: 50000");

        // Ended by the whole-retry timeout.
        let failed = retry(|| future::ready(Err::<(), _>("503")))
            .attempts(u32::MAX)
            .interval(Duration::ZERO)
            .timeout(Duration::from_millis(20))
            .await
            .unwrap_err();
        assert!(failed.is_timed_out());
        let made = failed.attempts_made();
        assert_eq!(failed.attempts().len(), (made as usize).min(16));
        assert_eq!(failed.attempts_dropped(), made - failed.attempts().len() as u32);
        assert_eq!(failed.attempts().last().unwrap().number(), made);
    }

    /// The builder is the future: a map's function may return it, and it joins and spawns
    /// like any future (it used to be only `IntoFuture`: E0277 "`Retry` is not a future").
    async fn a_retry_is_a_future_wherever_one_is_expected() {
        let calls = AtomicUsize::new(0);
        let pages = tollgate::map_async(1..=4_u32, 2, |id| {
            let calls = &calls;
            let mut failed_once = false;
            retry(move || {
                next(calls);
                let first = !std::mem::replace(&mut failed_once, true);
                async move { if first { Err("503") } else { Ok(id * 10) } }
            })
            .interval(Duration::ZERO)
        })
        .await;
        assert_eq!(pages, [Ok(10), Ok(20), Ok(30), Ok(40)]);
        assert_eq!(calls.load(Ordering::SeqCst), 8, "each item failed once");

        let (a, b) = futures::join!(
            retry(|| async { Ok::<_, ()>(1) }),
            retry(|| async { Err::<(), _>("503") }).attempts(2).interval(Duration::ZERO),
        );
        assert_eq!(a, Ok(1));
        assert_eq!(b.unwrap_err().attempts_made(), 2);

        let spawned = common::spawn(
            retry(|| async { Ok::<_, String>("spawned") }).timeout(Duration::from_secs(30)),
        )
        .await;
        assert_eq!(spawned, Ok("spawned"));
    }
}

#[test]
fn zero_attempts_panics_clearly() {
    let panic = std::panic::catch_unwind(|| {
        drop(retry(|| async { Ok::<(), ()>(()) }).attempts(0));
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
        drop(retry(|| async { Ok::<(), ()>(()) }).jitter(1.5));
    })
    .unwrap_err();
    assert_eq!(
        panic_message(&*jitter),
        "retry jitter must be within 0.0..=1.0, got 1.5"
    );
    let factor = std::panic::catch_unwind(|| {
        drop(retry(|| async { Ok::<(), ()>(()) }).backoff(
            Duration::from_millis(1),
            0.5,
            Duration::from_secs(1),
        ));
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
        retry(|| async { Err::<(), _>(std::io::Error::other("refused")) }).attempts(1),
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

    let failed: RetryError<&str> =
        tollgate::run_sync(retry(|| async { Err::<(), _>("x") }).attempts(1)).unwrap_err();
    assert_eq!(failed.map_errors(str::len).last_error(), Some(&1));
}

#[test]
fn the_retry_is_a_send_future() {
    fn assert_send_future<T: Future + Send>(_: &T) {}
    let retrying = retry(|| async { Ok::<(), String>(()) })
        .attempt_timeout(Duration::from_secs(1))
        .timeout(Duration::from_secs(5))
        .when(|error: &String| error.is_empty());
    assert_send_future(&retrying);
    assert!(
        format!("{retrying:?}").starts_with("Retry {"),
        "{retrying:?}"
    );
    // `IntoFuture` still works (every future is one).
    let future = retrying.into_future();
    assert_send_future(&future);
    assert_eq!(tollgate::run_sync(future), Ok(()));
}

#[test]
fn polling_after_completion_panics_clearly() {
    let mut retrying = Box::pin(retry(|| async { Ok::<_, ()>(1) }));
    assert_eq!(tollgate::run_sync(retrying.as_mut()), Ok(1));
    let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        futures_lite::future::block_on(future::poll_once(retrying.as_mut()))
    }))
    .unwrap_err();
    assert_eq!(panic_message(&*panic), "`Retry` polled after it completed");
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
        .interval(Duration::from_millis(1)),
    );
    assert_eq!(page, Ok("<html>"));
}

/// Pauses, attempt durations and timeouts on virtual time: every timer fires exactly at
/// its deadline, so each figure is exact.
mod on_virtual_time {
    use super::*;

    /// Runs a retry whose every attempt fails and returns the pauses between attempts,
    /// measured on tollgate's clock.
    async fn pauses_of(retrying: impl Future, starts: &Mutex<Vec<Instant>>) -> Vec<Duration> {
        let _ = retrying.await;
        let starts = starts.lock().unwrap();
        starts.windows(2).map(|pair| pair[1] - pair[0]).collect()
    }

    fn failing(
        starts: &Mutex<Vec<Instant>>,
    ) -> impl FnMut() -> future::Ready<Result<(), &'static str>> + '_ {
        move || {
            starts.lock().unwrap().push(now());
            future::ready(Err("503"))
        }
    }

    const fn ms(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    virtual_time! {
        async fn each_attempt_lasts_exactly_its_own_time() {
            assert_eq!(exhausted_attempts().await, [ms(2); 4]);
        }

        async fn a_per_attempt_timeout_cuts_each_attempt_exactly_then() {
            let (succeeded_after, failed_after, attempts) = per_attempt_timeouts().await;
            assert_eq!(succeeded_after, ms(10), "one hung attempt cut, then one at once");
            assert_eq!(failed_after, ms(20), "two attempts cut, no pause between");
            assert_eq!(attempts, [ms(10); 2]);
        }

        async fn a_refused_error_takes_no_pause() {
            assert_eq!(predicate_stops().await, Duration::ZERO);
        }

        async fn the_timeout_bounds_the_whole_retry_exactly() {
            let (hung, gave_up, (attempts, both)) = whole_retry_timeouts().await;
            assert_eq!(hung, ms(20), "the hung attempt is cut at the timeout");
            assert_eq!(gave_up, Duration::ZERO, "the pause that would outlast it is not taken");
            // 5 ms attempts with no pause: 8 fit in 40 ms, the 8th cut by the first limit.
            assert_eq!((attempts, both), (8, ms(40)));
        }

        async fn an_endless_pause_lasts_until_the_outer_timeout() {
            let (calls, waited) = endless_pauses().await;
            assert_eq!(calls, [1, 1, 2], "the steep backoff's 1 ms pause came first");
            assert_eq!(waited, [ms(20); 3]);
        }

        async fn backoff_delays_grow_as_specified() {
            let wall = Instant::now();
            let starts = Mutex::new(Vec::new());
            let pauses = pauses_of(
                retry(failing(&starts))
                    .attempts(7)
                    .backoff(ms(100), 2.0, Duration::from_secs(2))
                    .jitter(0.0),
                &starts,
            )
            .await;
            assert_eq!(pauses, [ms(100), ms(200), ms(400), ms(800), ms(1600), ms(2000)]);
            // 5.1 s of pauses take no wall time: the worst run measured with both
            // cores busy took 0.16 s (the whole test binary, both legs); 10 s is 60
            // times that.
            assert!(wall.elapsed() < Duration::from_secs(10), "{:?}", wall.elapsed());
        }

        async fn the_default_policy_is_three_attempts_with_jittered_doubling() {
            let starts = Mutex::new(Vec::new());
            let pauses = pauses_of(retry(failing(&starts)), &starts).await;
            assert_eq!(pauses.len(), 2, "3 attempts");
            assert!(pauses[0] >= ms(50) && pauses[0] <= ms(100), "{pauses:?}");
            assert!(pauses[1] >= ms(100) && pauses[1] <= ms(200), "{pauses:?}");
        }

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
            assert!(pauses.iter().all(|p| *p >= ms(750) && *p <= ms(1000)), "{pauses:?}");
            // Random, not all equal.
            assert!(pauses.iter().any(|p| *p != pauses[0]), "{pauses:?}");

            // A fixed interval has no jitter by default.
            let starts = Mutex::new(Vec::new());
            let pauses = pauses_of(
                retry(failing(&starts)).attempts(4).interval(ms(300)),
                &starts,
            )
            .await;
            assert_eq!(pauses, [ms(300); 3]);
        }

        async fn a_timeout_around_the_retry_cancels_it_mid_pause() {
            let calls = AtomicUsize::new(0);
            let start = now();
            let result = tollgate::timeout(
                ms(150),
                retry(|| async {
                    next(&calls);
                    Err::<(), _>("503")
                })
                .attempts(100)
                .interval(Duration::from_secs(1)),
            )
            .await;
            assert!(result.is_err());
            assert_eq!(now() - start, ms(150));
            sleep(Duration::from_secs(10)).await;
            assert_eq!(calls.load(Ordering::SeqCst), 1, "no attempt after cancellation");
        }
    }

    virtual_time! {
        // An attempt cut after an hour, after a pause of a minute: past the default deadline.
        deadline = Duration::from_secs(7_200);

        async fn attempt_durations_follow_the_virtual_clock() {
            let wall = Instant::now();
            let calls = AtomicUsize::new(0);
            let failed = retry(|| async {
                if next(&calls) == 1 {
                    sleep(ms(250)).await;
                    Err("slow 503")
                } else {
                    sleep(Duration::from_secs(7200)).await;
                    Ok(())
                }
            })
            .attempts(2)
            .attempt_timeout(Duration::from_secs(3600))
            .interval(Duration::from_secs(60))
            .await
            .unwrap_err();
            let attempts = failed.attempts();
            assert_eq!(attempts[0].elapsed(), ms(250));
            assert!(attempts[1].is_timed_out());
            assert_eq!(attempts[1].elapsed(), Duration::from_secs(3600));
            // An hour of attempts takes no wall time: the worst run measured with both
            // cores busy took 0.16 s (the whole test binary, both legs); 10 s is 60
            // times that.
            assert!(wall.elapsed() < Duration::from_secs(10), "{:?}", wall.elapsed());
        }
    }

    /// An attempt that waits on tokio's own timer is measured on tokio's clock (paused
    /// here), the one tollgate's timers follow under tokio.
    #[cfg(feature = "tokio")]
    #[tokio::test(start_paused = true)]
    async fn an_attempt_on_tokios_timer_is_measured_on_tokios_clock() {
        let failed = retry(|| async {
            tokio::time::sleep(ms(250)).await;
            Err::<(), _>("slow 503")
        })
        .attempts(1)
        .await
        .unwrap_err();
        assert_eq!(failed.attempts()[0].elapsed(), ms(250));
    }
}

/// A retry budget inside a map, with keys coming and going: each key is held to
/// `floor + ratio × its first attempts` over the whole run, while the map forgets the keys
/// with nothing running or waiting and they come back.
mod budget {
    use super::*;
    use std::sync::atomic::AtomicU8;
    use tollgate::{RetryPolicy, map_async};

    const KEYS: u64 = 3_000;
    const ITEMS: u64 = 60_000;
    const FLOOR: u32 = 2;
    const RATIO: f64 = 0.2;

    matrix! {
        async fn each_key_stays_within_its_budget_while_keys_are_forgotten_and_come_back() {
            // Key n % 3000: each key's 20 items come 3,000 items apart, far beyond the
            // window (512), so every key is idle, and may be forgotten, between two
            // of its items. Every 7th key is dead (every attempt fails); the others fail
            // one first attempt in 10.
            let attempts: Vec<AtomicU8> = (0..ITEMS).map(|_| AtomicU8::new(0)).collect();
            let first_attempts: Vec<AtomicUsize> = (0..KEYS).map(|_| AtomicUsize::new(0)).collect();
            let retries: Vec<AtomicUsize> = (0..KEYS).map(|_| AtomicUsize::new(0)).collect();
            let policy = RetryPolicy::new()
                .attempts(4)
                .interval(Duration::ZERO)
                .budget(RATIO, FLOOR);
            let outputs = map_async(0..ITEMS, 8, |n| {
                let key = (n % KEYS) as usize;
                let attempt = attempts[n as usize].fetch_add(1, Ordering::SeqCst) + 1;
                if attempt == 1 {
                    first_attempts[key].fetch_add(1, Ordering::SeqCst);
                } else {
                    retries[key].fetch_add(1, Ordering::SeqCst);
                }
                let fails = key % 7 == 0 || (attempt == 1 && n % 10 == 3);
                async move { if fails { Err(n) } else { Ok(n) } }
            })
            .per_key(|n| n % KEYS, 1)
            .retry(policy)
            .await;
            assert_eq!(outputs.len() as u64, ITEMS);
            let mut dead_retries = 0;
            for key in 0..KEYS as usize {
                let first = first_attempts[key].load(Ordering::SeqCst);
                let retried = retries[key].load(Ordering::SeqCst);
                assert_eq!(first as u64, ITEMS / KEYS);
                let bound = f64::from(FLOOR) + RATIO * first as f64;
                assert!(
                    retried as f64 <= bound + 1e-9,
                    "key {key}: {retried} retries for {first} first attempts (bound {bound})"
                );
                if key % 7 == 0 {
                    dead_retries += retried;
                }
            }
            // Each dead key used its budget and no more: its floor at its first item (whose
            // own share finds the bucket full), then one retry per 5 first attempts (at
            // its 6th, 11th and 16th items): 5. Forgotten while idle, it would have had its
            // floor back at each item: 40.
            assert_eq!(dead_retries, KEYS.div_ceil(7) as usize * 5);
        }
    }
}
