//! A store through Redis Sentinel, in one process: it finds the master by name, follows a
//! failover by itself, and grants nothing on the promoted replica for one lease TTL (the
//! replica may have missed the last grants). The fleet version, with worker processes and
//! the target's measure of the cap, is in `tests/fleet_faults.rs`.
//!
//! Real processes: no virtual time. The warm-up is checked on the new master's own clock
//! (the grant's time, read from its lease's expiry, against the epoch Redis wrote), which
//! holds at any speed; the failover's timings are printed.

mod common;
mod support;

use std::time::{Duration, Instant};

use common::matrix;
use support::redis_server::unique_namespace;
use support::sentinel::{MASTER_NAME, SentinelSet};
use tollgate_redis::{RedisLimits, SharedKeyedBulkhead};

const TTL: Duration = Duration::from_millis(600);

async fn through_sentinel(set: &SentinelSet, namespace: &str) -> RedisLimits {
    RedisLimits::sentinel([set.sentinel_url()], MASTER_NAME)
        .namespace(namespace)
        .lease_ttl(TTL)
        .call_timeout(Duration::from_millis(500))
        .connect()
        .await
        .expect("connect through the sentinel")
}

matrix! {
    async fn a_store_through_sentinel_follows_a_failover_and_warms_up_on_the_new_master() {
        let mut set = SentinelSet::start();
        let ns = unique_namespace("sentinel");
        let store = through_sentinel(&set, &ns).await;
        let sentinel = set.sentinel_url().trim_start_matches("redis://").to_owned();
        assert_eq!(store.address(), format!("{MASTER_NAME} via sentinel {sentinel}"));
        let bulkhead = SharedKeyedBulkhead::new(&store, "fetch", 1);
        // A fresh namespace warms up first; then the key is held across the failover.
        let held = bulkhead.acquire("k").await.unwrap();

        let old = set.master.addr();
        set.kill_master();
        let killed = Instant::now();
        // Until the sentinel names the replica, asks fail, and fail fast, naming the master.
        let error = bulkhead.try_acquire("other").await.unwrap_err();
        assert!(error.is_unavailable(), "{error}");
        assert!(error.to_string().contains(MASTER_NAME), "{error}");
        // A deadline for a failover that never happens: the worst run measured with both
        // cores busy was named 2.54 s after the kill (11.8x).
        let new = set.wait_for_failover(old, Duration::from_secs(30));
        assert_eq!(new, set.replica.addr());
        let switched = Instant::now();

        // The held permit's lease could not be renewed through the failover: fenced.
        assert!(held.is_fenced());
        drop(held);
        // The store reaches the new master by itself; it grants nothing there for one TTL.
        let mut warming = None;
        let permit = loop {
            match bulkhead.try_acquire("k").await {
                Ok(permit) => break permit,
                Err(e) if e.is_warming_up() => {
                    warming.get_or_insert_with(Instant::now);
                    tollgate::sleep(e.retry_after().unwrap()).await;
                }
                Err(e) if e.is_unavailable() => tollgate::sleep(e.retry_after().unwrap()).await,
                Err(e) => panic!("{e}"),
            }
        };
        let granted = Instant::now();
        let warming = warming.expect("the new master never said it was warming up");
        // On the new master's clock: the grant (its lease's expiry less the TTL) came at least
        // one TTL after the epoch it started there. (It was local: granted at least the TTL
        // less 50 ms after the first answer saying "warming up", which a late reply breaks.)
        let mut conn = set.replica.connection();
        let since: u64 = redis::cmd("HGET").arg(format!("{ns}:{{epoch}}")).arg("since").query(&mut conn).unwrap();
        let leases: Vec<(String, u64)> = redis::cmd("ZRANGE")
            .arg(format!("{ns}:lease:{{5:fetch:k}}"))
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query(&mut conn)
            .unwrap();
        let ttl = TTL.as_micros() as u64;
        let granted_at = leases.iter().map(|(_, expiry)| expiry - ttl).min().expect("the grant's lease");
        assert!(
            granted_at >= since + ttl,
            "granted {} us after the new master's epoch began, the TTL is {ttl} us",
            granted_at - since
        );
        println!(
            "failover: named {:.2?} after the kill, first answer of the new master {:.2?}, \
             first grant {:.2?}",
            switched.duration_since(killed),
            warming.duration_since(killed),
            granted.duration_since(killed)
        );
        drop(permit);
    }

    async fn a_sentinel_store_without_sentinels_or_master_fails_to_connect_clearly() {
        let none = RedisLimits::sentinel(Vec::<String>::new(), MASTER_NAME).connect().await.unwrap_err();
        assert!(none.is_unavailable(), "{none}");
        let set = SentinelSet::start();
        let unknown = RedisLimits::sentinel([set.sentinel_url()], "no-such-master")
            .call_timeout(Duration::from_millis(300))
            .connect()
            .await
            .unwrap_err();
        assert!(unknown.is_unavailable(), "{unknown}");
        assert!(unknown.to_string().contains("no-such-master"), "{unknown}");
        assert_eq!(unknown.retry_after(), None);
    }
}
