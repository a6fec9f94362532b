//! A key paused for the fleet (`pause_key`) against a real redis-server: never granted
//! whatever limits it has (a cap, a rate, both, neither), waited out by `acquire` holding
//! nothing, reported by `try_acquire`; and a pause longer than the store can represent reads
//! as a very long pause, never as none, so its waiters sleep instead of asking in a loop.
//!
//! Real redis-server: no virtual time. What is asserted holds at any speed: nothing of a
//! paused key starts or holds a lease in Redis while the pause lasts (watched from before it
//! was set, so the pause ends no sooner), a grant no sooner than the pause's end (by
//! construction), Redis's own count of the calls a waiter made (a slow machine makes fewer).
//! The one wall-clock upper bound left (a deadline for a waiter that never wakes) has far
//! more than 5x margin over the worst run measured with both cores busy.

mod common;
mod support;

use std::future::IntoFuture;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{connect, matrix, until};
use futures_lite::future;
use support::redis_server::{Probe, RedisServer, TestRedis, mark_warm, unique_namespace};
use tollgate::{Answer, LaterReason, Rate, SharedLimits, map_async};
use tollgate_redis::{
    MAX_PAUSE, RedisLimits, RedisLimitsError, SharedKeyLimits, SharedKeyedBulkhead,
    SharedKeyedRateLimiter,
};

const DAY: Duration = Duration::from_secs(24 * 60 * 60);

/// Every kind of limits one name can have: a cap, a rate, both, neither.
fn every_kind(store: &RedisLimits, name: &str) -> [(&'static str, SharedKeyLimits); 4] {
    let rate = Rate::per_second(1000);
    [
        ("a cap", SharedKeyLimits::new(store, name).per_key_limit(2)),
        (
            "a rate",
            SharedKeyLimits::new(store, name).per_key_rate(rate),
        ),
        (
            "a cap and a rate",
            SharedKeyLimits::new(store, name)
                .per_key_limit(2)
                .per_key_rate(rate),
        ),
        ("neither", SharedKeyLimits::new(store, name)),
    ]
}

/// Scripts Redis ran (`EVALSHA`, `EVAL`) since the last reset: one per call of the store.
/// The commands inside a script are counted apart by Redis and not here.
fn script_calls(probe: &mut Probe) -> u64 {
    probe
        .command_stats()
        .iter()
        .filter(|stat| stat.command.starts_with("eval"))
        .map(|stat| stat.calls)
        .sum()
}

matrix! {
    async fn a_paused_key_starts_nothing_in_a_map_whatever_its_limits() {
        let redis = TestRedis::get();
        let ns = unique_namespace("pause-map");
        let s = connect(&redis.url(), &ns, Duration::from_secs(2), Duration::from_secs(2)).await;
        mark_warm(&format!("redis://{}", s.address()), s.namespace());
        for (kind, limits) in every_kind(&s, "per-host") {
            let paused = format!("paused-{}", kind.replace(' ', "-"));
            limits.pause_key(&paused, Duration::from_secs(30)).await.unwrap();
            const FREE: usize = 20;
            let paused_started = AtomicUsize::new(0);
            let free_done = AtomicUsize::new(0);
            let input: Vec<&str> =
                [paused.as_str(); 4].into_iter().chain(["free"; FREE]).collect();
            let begin = Instant::now();
            let map = map_async(input, 4, |host: &str| {
                let is_paused = host != "free";
                if is_paused {
                    paused_started.fetch_add(1, Ordering::SeqCst);
                }
                let free_done = &free_done;
                async move {
                    tollgate::sleep(Duration::from_millis(5)).await;
                    if !is_paused {
                        free_done.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok::<_, RedisLimitsError>(host)
                }
            })
            .per_key(|host| host.to_string(), 2)
            .shared_limits(limits);
            // The map ends only if the paused key's items ran; otherwise it is dropped once
            // the other key's items are done and 300 ms have passed.
            let ended = async {
                map.await;
                paused_started.load(Ordering::SeqCst)
            };
            let watched = async {
                until(Duration::from_secs(30), "every item of the free key done", || async {
                    free_done.load(Ordering::SeqCst) == FREE
                })
                .await;
                let window = Duration::from_millis(300);
                if let Some(rest) = window.checked_sub(begin.elapsed()) {
                    tollgate::sleep(rest).await;
                }
                paused_started.load(Ordering::SeqCst)
            };
            let started = future::or(ended, watched).await;
            assert_eq!(
                started, 0,
                "limits with {kind}: {started} items of a key paused for 30 s started within {:?}",
                begin.elapsed()
            );
            assert_eq!(free_done.load(Ordering::SeqCst), FREE, "the other key was not held up");
        }
    }

    async fn acquire_waits_out_a_pause_holding_nothing_and_try_acquire_says_paused() {
        let redis = TestRedis::get();
        let ns = unique_namespace("pause-acquire");
        let s = connect(&redis.url(), &ns, Duration::from_secs(2), Duration::from_secs(2)).await;
        mark_warm(&format!("redis://{}", s.address()), s.namespace());
        // The pause is shared by name: limits and a bulkhead both named "per-host".
        let limits = SharedKeyLimits::new(&s, "per-host").per_key_limit(1);
        let bulkhead = SharedKeyedBulkhead::new(&s, "per-host", 1);
        let pause = Duration::from_millis(600);
        // Timed from before the pause is set: the pause ends after `begin + pause`.
        let begin = Instant::now();
        limits.pause_key("k", pause).await.unwrap();

        let refused = bulkhead.try_acquire("k").await.unwrap_err();
        assert!(refused.is_paused(), "{refused}");
        let after = refused.retry_after().unwrap();
        assert!(after > Duration::ZERO && after <= pause, "{after:?}");
        // Other keys are not paused.
        drop(bulkhead.try_acquire("other").await.unwrap());

        let acquired = async {
            let permit = bulkhead.acquire("k").await.unwrap();
            (begin.elapsed(), permit)
        };
        // While the pause lasts (an answer that arrives before `begin + pause` was made
        // in Redis before the pause's end), the key holds no lease in Redis.
        let watched = async {
            let mut samples = 0;
            let mut most = 0;
            loop {
                let in_use = bulkhead.in_use("k").await.unwrap();
                if begin.elapsed() >= pause {
                    break;
                }
                samples += 1;
                most = most.max(in_use);
                tollgate::sleep(Duration::from_millis(20)).await;
            }
            (samples, most)
        };
        let ((waited, permit), (samples, most)) = future::zip(acquired, watched).await;
        eprintln!("granted {waited:?} after a pause of {pause:?} was set");
        // By construction: timed from before the pause was set, on this machine's clock,
        // Redis's too.
        assert!(waited >= pause, "granted {waited:?} after a pause of {pause:?}");
        // A deadline for a waiter that never wakes: the worst run measured with both cores
        // busy was granted 61 ms after the pause's end (245x).
        assert!(waited < pause + Duration::from_secs(15), "granted only after {waited:?}");
        assert!(samples > 0, "the pause was never looked at while it lasted");
        assert_eq!(most, 0, "a lease of the paused key was held during the pause");
        assert!(!permit.is_fenced());
        drop(permit);
        until(Duration::from_secs(10), "the lease released", || async {
            bulkhead.in_use("k").await.unwrap() == 0
        })
        .await;
    }

    async fn a_pause_of_duration_max_reads_as_very_long_and_waiters_do_not_ask_in_a_loop() {
        // Its own server: `CONFIG RESETSTAT` and the command counts are global.
        let server = RedisServer::start();
        let ns = unique_namespace("pause-max");
        let s = connect(&server.url(), &ns, Duration::from_secs(2), Duration::from_secs(2)).await;
        mark_warm(&format!("redis://{}", s.address()), s.namespace());
        let rate = SharedKeyedRateLimiter::new(&s, "per-host", Rate::per_second(100));
        rate.pause_key("k", Duration::MAX).await.unwrap();
        // Asking again with the maximum keeps it (and must not fail).
        rate.pause_key("k", MAX_PAUSE).await.unwrap();

        // Every path that reads a pause reports a very long one.
        let refused = rate.check_key("k").await.unwrap_err();
        assert!(refused.is_paused(), "{refused}");
        let after = refused.retry_after().unwrap();
        assert!(after > DAY && after <= MAX_PAUSE, "{refused}");
        let bulkhead = SharedKeyedBulkhead::new(&s, "per-host", 2);
        let refused = bulkhead.try_acquire("k").await.unwrap_err();
        assert!(refused.is_paused(), "{refused}");
        assert!(refused.retry_after().unwrap() > DAY, "{refused}");
        for (kind, limits) in every_kind(&s, "per-host") {
            match SharedLimits::<&str>::ask(&limits, &"k").await {
                Answer::Later(after, LaterReason::Paused) => {
                    assert!(after > DAY, "limits with {kind}: later {after:?}")
                }
                other => panic!("limits with {kind}: expected later, got {other:?}"),
            }
        }
        // A wait beyond what the store sets is answered capped, never wrapped: a pause
        // written by hand far past `MAX_PAUSE` (the layout `<namespace>:rate:{<name's
        // length>:<name>:<key>}:paused`, pinned here), and a rate of one start per
        // `Duration::MAX`.
        let _: () = redis::cmd("SET")
            .arg(format!("{ns}:rate:{{8:per-host:far}}:paused"))
            .arg("18446744073709551616")
            .query(&mut server.connection())
            .unwrap();
        let refused = rate.check_key("far").await.unwrap_err();
        assert!(refused.is_paused() && refused.retry_after().unwrap() > DAY, "{refused}");
        let never = SharedKeyedRateLimiter::new(&s, "never", Rate::every(Duration::MAX));
        let refused = never.check_key("k").await.unwrap_err();
        assert!(refused.is_rate_limited() && refused.retry_after().unwrap() > DAY, "{refused}");

        let mut probe = server.probe();
        let window = Duration::from_millis(500);
        // One waiter of each kind, each watched for 500 ms: it stays waiting, and asks
        // Redis a handful of times at most (hundreds of times when the pause read as zero).
        probe.reset_stats();
        let waited = tollgate::timeout(window, rate.until_key_ready("k")).await;
        assert!(waited.is_err(), "until_key_ready ended during the pause: {waited:?}");
        let calls = script_calls(&mut probe);
        assert!(calls <= 5, "until_key_ready asked redis {calls} times in {window:?}");

        probe.reset_stats();
        let waited = tollgate::timeout(window, bulkhead.acquire("k")).await;
        assert!(waited.is_err(), "acquire ended during the pause: {waited:?}");
        let calls = script_calls(&mut probe);
        assert!(calls <= 5, "acquire asked redis {calls} times in {window:?}");

        for (kind, limits) in every_kind(&s, "per-host") {
            probe.reset_stats();
            let started = AtomicUsize::new(0);
            let map = map_async(["k"; 8], 4, |_| {
                started.fetch_add(1, Ordering::SeqCst);
                async { Ok::<_, RedisLimitsError>(()) }
            })
            .per_key(|key| key.to_string(), 2)
            .shared_limits(limits);
            let waited = tollgate::timeout(window, map.into_future()).await;
            assert!(waited.is_err(), "limits with {kind}: the map ended during the pause");
            assert_eq!(started.load(Ordering::SeqCst), 0, "limits with {kind}");
            let calls = script_calls(&mut probe);
            assert!(calls <= 5, "limits with {kind}: a map asked redis {calls} times in {window:?}");
        }
    }
}
