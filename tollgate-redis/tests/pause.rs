//! A key paused for the fleet (`pause_key`) against a real redis-server: never granted
//! whatever limits it has (a cap, a rate, both, neither), waited out by `acquire` holding
//! nothing, reported by `try_acquire`.

mod common;
mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{connect, matrix, until};
use futures_lite::future;
use support::redis_server::{TestRedis, unique_namespace};
use tollgate::{Rate, map_async};
use tollgate_redis::{RedisLimits, SharedError, SharedKeyLimits, SharedKeyedBulkhead};

/// Marks the namespace as already warm (its epoch set by this Redis, in the past), so the
/// answers these tests look at are about the pause, not the warm-up of a new namespace.
/// The key's name is the store's layout (`<namespace>:{epoch}`), pinned here on purpose.
fn warm_up(store: &RedisLimits) {
    let mut conn = redis::Client::open(format!("redis://{}", store.address()))
        .unwrap()
        .get_connection()
        .unwrap();
    let info: String = redis::cmd("INFO").arg("server").query(&mut conn).unwrap();
    let run = info
        .lines()
        .find_map(|l| l.strip_prefix("run_id:"))
        .unwrap()
        .trim()
        .to_owned();
    let _: () = redis::cmd("HSET")
        .arg(format!("{}:{{epoch}}", store.namespace()))
        .arg("run")
        .arg(run)
        .arg("since")
        .arg(0)
        .query(&mut conn)
        .unwrap();
}

/// Every kind of limits one name can have: a cap, a rate, both, neither.
fn every_kind(store: &RedisLimits, name: &str) -> [(&'static str, SharedKeyLimits); 4] {
    let rate = Rate::per_second(1000);
    [
        ("a cap", SharedKeyLimits::new(store, name).limit_per_key(2)),
        (
            "a rate",
            SharedKeyLimits::new(store, name).rate_per_key(rate),
        ),
        (
            "a cap and a rate",
            SharedKeyLimits::new(store, name)
                .limit_per_key(2)
                .rate_per_key(rate),
        ),
        ("neither", SharedKeyLimits::new(store, name)),
    ]
}

matrix! {
    async fn a_paused_key_starts_nothing_in_a_map_whatever_its_limits() {
        let redis = TestRedis::get();
        let ns = unique_namespace("pause-map");
        let s = connect(&redis.url(), &ns, Duration::from_secs(2), Duration::from_secs(2)).await;
        warm_up(&s);
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
                    Ok::<_, SharedError>(host)
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
        warm_up(&s);
        // The pause is shared by name: limits and a bulkhead both named "per-host".
        let limits = SharedKeyLimits::new(&s, "per-host").limit_per_key(1);
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
        assert!(waited >= pause, "granted {waited:?} after a pause of {pause:?}");
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
}
