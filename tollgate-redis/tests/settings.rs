//! The store's settings at their bounds: the longest lease TTL and call timeout a store
//! accepts work end to end (nothing inside overflows), and a poll interval of any length is
//! safe. Values beyond the bounds are refused by the options themselves (unit tests in
//! `src/options.rs`).

mod common;
mod support;

use std::time::Duration;

use common::matrix;
use support::redis_server::{TestRedis, mark_warm, unique_namespace};
use tollgate::Rate;
use tollgate_redis::{
    MAX_CALL_TIMEOUT, MAX_LEASE_TTL, RedisLimits, SharedKeyLimits, SharedKeyedBulkhead,
    SharedKeyedRateLimiter,
};

matrix! {
    async fn a_store_at_the_longest_ttl_and_call_timeout_grants_and_releases() {
        let redis = TestRedis::get();
        let ns = unique_namespace("bounds");
        let store = RedisLimits::options(redis.url())
            .namespace(&ns)
            .lease_ttl(MAX_LEASE_TTL)
            .call_timeout(MAX_CALL_TIMEOUT)
            .connect()
            .await
            .unwrap();
        // A new namespace warms up for one TTL (an hour here): the answer says so, with
        // the whole hour left, rather than overflowing anywhere.
        let bulkhead = SharedKeyedBulkhead::new(&store, "fetch", 1);
        let warming = bulkhead.try_acquire("k").await.unwrap_err();
        assert!(warming.is_warming_up(), "{warming}");
        let left = warming.retry_after().unwrap();
        assert!(left > MAX_LEASE_TTL - Duration::from_secs(60) && left <= MAX_LEASE_TTL, "{left:?}");
        let rate = SharedKeyedRateLimiter::new(&store, "fetch", Rate::per_second(10));
        assert!(rate.check_key("k").await.unwrap_err().is_warming_up());
        let limits = SharedKeyLimits::new(&store, "fetch").per_key_limit(1);
        // A pause as long as the TTL, on a key of its own (a paused key is never granted).
        limits.pause_key("paused", MAX_LEASE_TTL).await.unwrap();
        assert_eq!(store.lease_ttl(), MAX_LEASE_TTL);
        assert_eq!(store.call_timeout(), MAX_CALL_TIMEOUT);
        // Warm (as if the namespace had been in use for longer than the TTL): a grant, its
        // hour-long lease held by the keeper, and its release.
        mark_warm(&redis.url(), &ns);
        let permit = bulkhead.acquire("k").await.unwrap();
        assert!(!permit.is_fenced());
        assert_eq!(store.stats().leases_held(), 1);
        assert!(bulkhead.try_acquire("k").await.unwrap_err().is_busy());
        let paused = bulkhead.try_acquire("paused").await.unwrap_err();
        assert!(paused.is_paused(), "{paused}");
        let left = paused.retry_after().unwrap();
        assert!(left > MAX_LEASE_TTL - Duration::from_secs(60) && left <= MAX_LEASE_TTL, "{left:?}");
        drop(permit);
        drop(bulkhead.acquire("k").await.unwrap());
        // Dropping the store sends the last release and returns.
        let begin = std::time::Instant::now();
        drop((bulkhead, rate, limits, store));
        eprintln!("figure: the store dropped in {:?}", begin.elapsed());
        assert!(begin.elapsed() < Duration::from_secs(5), "{:?}", begin.elapsed());
    }

    async fn a_poll_interval_of_any_length_still_sees_releases_elsewhere() {
        let redis = TestRedis::get();
        let ns = unique_namespace("poll");
        let ttl = Duration::from_millis(300);
        let connect = |poll: Duration| {
            RedisLimits::options(redis.url())
                .namespace(&ns)
                .lease_ttl(ttl)
                .poll_interval(poll)
                .connect()
        };
        let (patient, other) = (connect(Duration::MAX).await.unwrap(), connect(ttl).await.unwrap());
        let (mine, theirs) = (SharedKeyedBulkhead::new(&patient, "fetch", 1), SharedKeyedBulkhead::new(&other, "fetch", 1));
        let held = theirs.acquire("k").await.unwrap();
        // The other store's release is not seen by a local wake-up: the waiter looks again
        // within a lease TTL whatever its poll interval.
        let released = std::cell::Cell::new(None);
        let (again, ()) = futures_lite::future::zip(mine.acquire("k"), async {
            tollgate::sleep(Duration::from_millis(50)).await;
            drop(held);
            released.set(Some(std::time::Instant::now()));
        })
        .await;
        let seen = released.get().unwrap().elapsed();
        drop(again.unwrap());
        eprintln!("figure: a release elsewhere seen {seen:?} after it (lease TTL {ttl:?})");
        assert!(seen < 2 * ttl + Duration::from_millis(500), "seen {seen:?} after the release");
    }

    async fn a_per_key_limit_is_taken_up_to_u32_max_and_refused_above() {
        let redis = TestRedis::get();
        let ns = unique_namespace("limit-bound");
        let store = RedisLimits::options(redis.url()).namespace(&ns).connect().await.unwrap();
        mark_warm(&redis.url(), &ns);
        // The highest limit a lease set can count reaches the grant script whole.
        let most = u32::MAX as usize;
        let bulkhead = SharedKeyedBulkhead::new(&store, "fetch", most);
        assert_eq!(bulkhead.limit(), most);
        let permit = bulkhead.acquire("k").await.unwrap();
        let limits = SharedKeyLimits::new(&store, "fetch").per_key_limit(most);
        assert_eq!(limits.limit(), Some(most));
        drop(permit);
        // One more (only on targets where a `usize` can say it) panics, for every way in.
        if let Some(above) = most.checked_add(1) {
            let message = |outcome: std::thread::Result<()>| {
                let payload = outcome.expect_err("a limit above u32::MAX must panic");
                payload.downcast_ref::<String>().cloned().unwrap_or_default()
            };
            let expected = format!("a per-key limit of {above} is above u32::MAX");
            let panics = [
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    drop(SharedKeyedBulkhead::new(&store, "fetch", above));
                })),
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| bulkhead.set_limit(above))),
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    drop(SharedKeyLimits::new(&store, "fetch").per_key_limit(above));
                })),
            ];
            for outcome in panics {
                let text = message(outcome);
                assert!(text.contains(&expected), "{text}");
            }
            assert_eq!(bulkhead.limit(), most, "a refused limit changes nothing");
        }
    }
}
