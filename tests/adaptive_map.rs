//! `.adaptive(..)` on a keyed map: each key finds its own limit from its own outcomes and
//! latencies.
//!
//! The servers are in the test: a key's attempt takes a few milliseconds (a timer), and a
//! "busy" host answers overload whenever more than its knee of attempts are in flight.
//! Adaptation reads latencies, so its proofs run on virtual time (`virtual_time!`: smol's
//! world on `run_virtual`, and tokio's paused clock), where a busy machine's scheduling
//! delays are no latency: overloads keep the busy key near its knee, a key that is never
//! overloaded and uses its whole limit rises above where it started, and plain failures
//! change nothing. What holds at any speed (no key above its ceiling, every item answered)
//! is checked on every executor too.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::time::Duration;

use common::{InFlight, matrix, virtual_time};
use futures_lite::StreamExt;
use tollgate::{Adaptive, Outcome, Rate, amap_iter, map_async, sleep};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Ok,
    Busy,
    NotFound,
}

fn classify(answer: &Answer) -> Outcome {
    match answer {
        Answer::Ok => Outcome::success(),
        Answer::Busy => Outcome::overload(),
        Answer::NotFound => Outcome::failure(),
    }
}

/// The busy and calm keys of the first proof, run once: (answers, overloads ÷ busy items,
/// the busy key's peak, the calm key's peak).
async fn busy_and_calm() -> (usize, f64, usize, usize) {
    const KNEE: usize = 2;
    let (busy, calm) = (InFlight::default(), InFlight::default());
    let overloads = AtomicUsize::new(0);
    let busy_items = AtomicUsize::new(0);
    let items = (0..1_200usize).map(|n| n % 2 == 0);
    let answers = map_async(items, 64, |is_busy| {
        let flight = if is_busy { &busy } else { &calm };
        let guard = flight.enter();
        let over = is_busy && flight.now() > KNEE;
        if is_busy {
            busy_items.fetch_add(1, SeqCst);
            if over {
                overloads.fetch_add(1, SeqCst);
            }
        }
        async move {
            // An overload is answered at once, a success after the work.
            if !over {
                sleep(Duration::from_millis(4)).await;
            }
            drop(guard);
            if over { Answer::Busy } else { Answer::Ok }
        }
    })
    .per_key(|is_busy| *is_busy, 16)
    .adaptive(Adaptive::new(1, 16), classify)
    .await;
    let share = overloads.load(SeqCst) as f64 / busy_items.load(SeqCst) as f64;
    (answers.len(), share, busy.peak(), calm.peak())
}

matrix! {
    async fn keys_stay_within_their_ceilings_on_every_executor() {
        let (answers, _, busy, calm) = busy_and_calm().await;
        assert_eq!(answers, 1_200);
        assert!(busy <= 16 && calm <= 16, "never above the ceiling ({busy}, {calm})");
    }
}

virtual_time! {
    async fn overloads_keep_a_key_near_its_knee_and_a_calm_key_rises() {
        let (answers, share, busy, calm) = busy_and_calm().await;
        assert_eq!(answers, 1_200);
        assert!(share < 0.25, "the busy key was overloaded on {share:.2} of its attempts");
        assert!(busy <= 16 && calm <= 16, "never above the ceiling");
        assert!(
            calm >= 3,
            "the calm key used its whole limit and was never overloaded: it rose from 2 (peak {calm})"
        );
    }

    async fn plain_failures_never_lower_a_key() {
        // Every attempt fails with a plain failure, instantly: the key neither falls
        // nor learns a latency from them; successes in between keep it rising.
        let flight = InFlight::default();
        let answers = map_async(0..600usize, 32, |n| {
            let guard = flight.enter();
            async move {
                let answer = if n % 2 == 0 {
                    Answer::NotFound
                } else {
                    sleep(Duration::from_millis(4)).await;
                    Answer::Ok
                };
                drop(guard);
                answer
            }
        })
        .per_key(|_| "host", 8)
        .adaptive(Adaptive::new(1, 8), classify)
        .await;
        assert_eq!(answers.len(), 600);
        assert!(flight.peak() >= 4, "plain failures held the key down (peak {})", flight.peak());
        assert!(flight.peak() <= 8);
    }

    async fn a_key_starts_low_never_at_its_ceiling() {
        // All items ready at once, a ceiling of 32: the first attempts of the key start
        // at most a few at a time, however many slots are free.
        let flight = InFlight::default();
        let answers = map_async(0..40usize, 64, |_| {
            let guard = flight.enter();
            async move {
                sleep(Duration::from_millis(20)).await;
                drop(guard);
                Answer::Ok
            }
        })
        .per_key(|_| "host", 32)
        .adaptive(Adaptive::new(1, 32), classify)
        .await;
        assert_eq!(answers.len(), 40);
        assert!(flight.peak() < 32, "started at its ceiling (peak {})", flight.peak());
    }

    async fn time_the_stream_is_not_polled_is_no_latency() {
        // 180 attempts of 4 ms each. The consumer takes the first 100 outputs at once
        // (the key learns its latency), then sits 30 ms on each of the next 40: attempts
        // that ended meanwhile are seen late, yet the server was as fast as before. Then
        // it is fast again: the key must start its last items with its whole limit, not
        // from a limit cut by latencies that were the consumer's.
        let flight = InFlight::default();
        let late_peak = AtomicUsize::new(0);
        let mut outputs = std::pin::pin!(
            amap_iter(0..180usize, 16, |n| {
                let guard = flight.enter();
                if n >= 155 {
                    late_peak.fetch_max(flight.now(), SeqCst);
                }
                async move {
                    sleep(Duration::from_millis(4)).await;
                    drop(guard);
                    Answer::Ok
                }
            })
            .per_key(|_| "host", 8)
            .adaptive(Adaptive::new(1, 8), classify)
        );
        let mut seen = 0;
        while let Some(answer) = outputs.next().await {
            assert_eq!(answer, Answer::Ok);
            seen += 1;
            if (100..140).contains(&seen) {
                sleep(Duration::from_millis(30)).await;
            }
        }
        assert_eq!(seen, 180);
        let late_peak = late_peak.load(SeqCst);
        assert!(
            late_peak >= 3,
            "the key's last items ran at most {late_peak} at once: a slow consumer cut its limit"
        );
    }

    async fn a_server_slower_under_load_caps_the_key_in_a_stream_too() {
        // The server takes 4 ms × the attempts in flight: latency says "queueing" above
        // one at a time. A stream whose consumer polls again at once must see it as the
        // awaited map does (the few microseconds it holds each output are not the
        // server's), so the key stays far below its ceiling of 32.
        let flight = InFlight::default();
        let mut outputs = std::pin::pin!(
            amap_iter(0..400usize, 64, |_| {
                let guard = flight.enter();
                let load = flight.now() as u64;
                async move {
                    sleep(Duration::from_millis(4 * load)).await;
                    drop(guard);
                    Answer::Ok
                }
            })
            .per_key(|_| "host", 32)
            .adaptive(Adaptive::new(1, 32), classify)
        );
        let mut seen = 0;
        while let Some(answer) = outputs.next().await {
            assert_eq!(answer, Answer::Ok);
            seen += 1;
        }
        assert_eq!(seen, 400);
        assert!(
            flight.peak() <= 12,
            "the key ran {} at once against a server that queues",
            flight.peak()
        );
    }
}

#[test]
#[should_panic(expected = "call it after `.per_key(..)`")]
fn key_settings_before_per_key_panics() {
    let map = map_async(0..4u32, 2, |n| async move { Ok::<u32, ()>(n) })
        .rate(Rate::per_second(1_000))
        .key_settings(|_: &()| tollgate::KeySettings::new().limit(1))
        .per_key(|n| *n, 1);
    drop(map);
}
