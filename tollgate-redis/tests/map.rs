//! tollgate's keyed maps asking a fleet's limits (`SharedKeyLimits`) in a real Redis: the
//! cap and the rate hold across stores (processes), a key full in the fleet holds no slot,
//! an unreachable Redis fails the items closed and a retry policy recovers, and a fenced
//! permit cancels its attempt.

mod common;
mod support;

use std::future::IntoFuture;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{InFlight, connect, matrix, until};
use futures_lite::future;
use support::redis_server::{RedisServer, TestRedis, unique_namespace};
use tollgate::{Answer, Breaker, LaterReason, Outcome, Rate, RetryPolicy, SharedLimits, map_async};
use tollgate_redis::{RedisLimits, RedisLimitsError, SharedKeyLimits, SharedKeyedBulkhead};

/// In flight per key, and every start's time.
struct Seen {
    in_flight: Vec<InFlight>,
    starts: Mutex<Vec<Vec<Instant>>>,
}

impl Seen {
    fn new(keys: usize) -> Arc<Self> {
        Arc::new(Self {
            in_flight: (0..keys).map(|_| InFlight::default()).collect(),
            starts: Mutex::new(vec![Vec::new(); keys]),
        })
    }
}

/// The most starts of one key in any window of `window`.
fn most_in_window(starts: &[Instant], window: Duration) -> usize {
    let mut starts = starts.to_vec();
    starts.sort();
    (0..starts.len())
        .map(|i| {
            starts[i..]
                .iter()
                .take_while(|t| **t < starts[i] + window)
                .count()
        })
        .max()
        .unwrap_or(0)
}

matrix! {
    async fn two_stores_running_maps_keep_the_fleets_cap_and_rate() {
        let redis = TestRedis::get();
        let ns = unique_namespace("map-cap");
        let ttl = Duration::from_secs(2);
        let (a, b) = (
            connect(&redis.url(), &ns, ttl, Duration::from_secs(2)).await,
            connect(&redis.url(), &ns, ttl, Duration::from_secs(2)).await,
        );
        const KEYS: usize = 4;
        // Per key and store: 96 starts of a key at 40 a second take 2.4 s, so windows of
        // 1 and 2 s see the rate hold.
        const ITEMS_PER_KEY: usize = 48;
        let rate = Rate::per_second(40).burst(2);
        let seen = Seen::new(KEYS);
        let run = |store: &RedisLimits| {
            let limits = SharedKeyLimits::new(store, "per-host")
                .per_key_limit(2)
                .per_key_rate(rate);
            let seen = Arc::clone(&seen);
            let items: Vec<usize> = (0..ITEMS_PER_KEY * KEYS).collect();
            map_async(items, 16, move |i| {
                let seen = Arc::clone(&seen);
                async move {
                    let key = i % KEYS;
                    let in_flight = seen.in_flight[key].enter();
                    seen.starts.lock().unwrap()[key].push(Instant::now());
                    tollgate::sleep(Duration::from_millis(15)).await;
                    drop(in_flight);
                    Ok::<_, RedisLimitsError>(i)
                }
            })
            // The map's own cap per key is larger: the fleet's is what holds.
            .per_key(|i| format!("host-{}", i % KEYS), 4)
            .shared_limits(limits)
        };
        let (x, y) = future::zip(run(&a), run(&b)).await;
        assert!(x.iter().chain(&y).all(Result::is_ok), "{x:?} {y:?}");
        assert_eq!(x.len() + y.len(), 2 * ITEMS_PER_KEY * KEYS);
        let peak: Vec<usize> = seen.in_flight.iter().map(InFlight::peak).collect();
        assert!(peak.iter().all(|p| *p <= 2), "in flight per key {peak:?}, fleet cap 2");
        assert!(peak.contains(&2), "the cap was reached: {peak:?}");
        for starts in seen.starts.lock().unwrap().iter() {
            for window in [1_000, 2_000] {
                let window = Duration::from_millis(window);
                // burst + rate x W over windows of 1 s and more, W widened by 100 ms: Redis's
                // clock decides a start, ours records it when the map first polls the item,
                // and on a busy machine that can come late and bunch two starts (100 ms is
                // four starts more at 40 a second). Without the fleet's rate a key would
                // start about 130 times a second here.
                let widened = window.as_secs_f64() + 0.1;
                let allowed = 2 + (40.0 * widened).floor() as usize;
                let most = most_in_window(starts, window);
                assert!(most <= allowed, "{most} starts of a key within {window:?}, allowed {allowed}");
            }
        }
        let bulkhead = SharedKeyedBulkhead::new(&a, "per-host", 2);
        for key in 0..KEYS {
            let key = format!("host-{key}");
            until(Duration::from_secs(10), "every lease released", || async {
                bulkhead.in_use(&key).await.unwrap() == 0
            })
            .await;
        }
    }

    async fn a_key_full_in_the_fleet_holds_no_slot() {
        let redis = TestRedis::get();
        let ns = unique_namespace("map-full");
        let ttl = Duration::from_secs(2);
        let (mine, theirs) = (
            connect(&redis.url(), &ns, ttl, Duration::from_secs(2)).await,
            connect(&redis.url(), &ns, ttl, Duration::from_secs(2)).await,
        );
        // Another process holds the busy host's only permit.
        let held = SharedKeyedBulkhead::new(&theirs, "per-host", 1)
            .acquire("busy")
            .await
            .unwrap();
        let started = Arc::new(Mutex::new(Vec::new()));
        let free_done = Arc::new(AtomicUsize::new(0));
        let input: Vec<&str> = ["busy"; 5].into_iter().chain(["free"; 10]).collect();
        let limits = SharedKeyLimits::new(&mine, "per-host").per_key_limit(1);
        let map = {
            let (started, free_done) = (Arc::clone(&started), Arc::clone(&free_done));
            map_async(input, 2, move |host: &str| {
                started.lock().unwrap().push(host);
                let free_done = Arc::clone(&free_done);
                async move {
                    tollgate::sleep(Duration::from_millis(2)).await;
                    if host == "free" {
                        free_done.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok::<_, RedisLimitsError>(host)
                }
            })
            .per_key(|host| host.to_string(), 1)
            .shared_limits(limits)
        };
        let release = async {
            until(Duration::from_secs(30), "every free item done", || async {
                free_done.load(Ordering::SeqCst) == 10
            })
            .await;
            assert!(
                !started.lock().unwrap().contains(&"busy"),
                "no item of the full host started"
            );
            drop(held);
        };
        let (out, ()) = future::zip(map, release).await;
        assert_eq!(out.len(), 15);
        assert!(out.iter().all(Result::is_ok), "{out:?}");
    }

    async fn an_unreachable_redis_fails_items_closed_and_a_retry_recovers() {
        let mut server = RedisServer::start();
        let ns = unique_namespace("map-down");
        let ttl = Duration::from_millis(500);
        let s = connect(&server.url(), &ns, ttl, Duration::from_millis(200)).await;
        let limits = SharedKeyLimits::new(&s, "per-host").per_key_limit(2);
        server.kill();
        let calls = AtomicUsize::new(0);
        let out = map_async(0..3, 4, |i| {
            calls.fetch_add(1, Ordering::SeqCst);
            async move { Ok::<_, RedisLimitsError>(i) }
        })
        .per_key(|_| "host", 2)
        .shared_limits(limits.clone())
        .await;
        assert_eq!(calls.load(Ordering::SeqCst), 0, "nothing ran without a grant");
        for result in &out {
            let error = result.as_ref().unwrap_err();
            assert!(error.is_unavailable(), "{error}");
            assert_eq!(error.address(), Some(server.address().as_str()));
        }

        // With a retry policy, items wait out the outage.
        let retried = Arc::new(AtomicUsize::new(0));
        let policy = RetryPolicy::new()
            .attempts(100)
            .interval(Duration::from_millis(50))
            .on_retry({
                let retried = Arc::clone(&retried);
                move |_| {
                    retried.fetch_add(1, Ordering::SeqCst);
                }
            });
        let map = map_async(0..3, 4, |i| async move { Ok::<_, RedisLimitsError>(i) })
            .per_key(|_| "host", 2)
            .shared_limits(limits)
            .retry(policy);
        let restart = async {
            until(Duration::from_secs(30), "a retry after a failed ask", || async {
                retried.load(Ordering::SeqCst) > 0
            })
            .await;
            server.restart();
        };
        let (out, ()) = future::zip(map, restart).await;
        assert_eq!(out, [Ok(0), Ok(1), Ok(2)]);
    }

    async fn a_fenced_permit_cancels_its_attempt() {
        let server = RedisServer::start();
        let ns = unique_namespace("map-fence");
        let ttl = Duration::from_millis(600);
        let s = connect(&server.url(), &ns, ttl, Duration::from_millis(200)).await;
        let limits = SharedKeyLimits::new(&s, "per-host").per_key_limit(2);
        let started = AtomicUsize::new(0);
        let map = map_async(0..2, 4, |_| {
            started.fetch_add(1, Ordering::SeqCst);
            async {
                // Would never end: only the fence does.
                future::pending::<()>().await;
                Ok::<u32, RedisLimitsError>(0)
            }
        })
        .per_key(|_| "host", 2)
        .shared_limits(limits);
        let freeze = async {
            until(Duration::from_secs(30), "both items running", || async {
                started.load(Ordering::SeqCst) == 2
            })
            .await;
            // Nothing renews the leases now: they are fenced before they could lapse.
            server.pause();
        };
        let (out, ()) = future::zip(map, freeze).await;
        server.resume();
        assert_eq!(out.len(), 2);
        assert!(out.iter().all(|r| r.as_ref().unwrap_err().is_fenced()), "{out:?}");
    }

    async fn the_cap_and_the_rate_are_taken_together_or_not_at_all() {
        let redis = TestRedis::get();
        let ns = unique_namespace("map-together");
        let ttl = Duration::from_secs(2);
        let s = connect(&redis.url(), &ns, ttl, Duration::from_secs(2)).await;
        // One start per second, one in flight.
        let limits = SharedKeyLimits::new(&s, "per-host")
            .per_key_limit(1)
            .per_key_rate(Rate::per_second(1));
        let ask = |limits: &SharedKeyLimits| SharedLimits::<&str>::ask(limits, &"k");
        // The first ask of a fresh namespace meets the warm-up (and a rate that starts
        // with it): wait them out.
        let first = loop {
            match ask(&limits).await {
                Answer::Granted(permit) => break permit,
                Answer::Later(after, _) => tollgate::sleep(after).await,
                Answer::Failed(e) => panic!("{e}"),
            }
        };
        // One interval later the rate allows a start, but the key is busy: told to come
        // back within the poll interval.
        tollgate::sleep(Duration::from_millis(1100)).await;
        match ask(&limits).await {
            Answer::Later(after, LaterReason::Busy) => {
                assert!(after <= tollgate_redis::DEFAULT_POLL_INTERVAL)
            }
            other => panic!("expected later, got {other:?}"),
        }
        let bulkhead = SharedKeyedBulkhead::new(&s, "per-host", 1);
        let released = bulkhead.released("k");
        drop(first);
        released.await;
        // The refused ask took no start of the rate: the next is granted at once.
        match ask(&limits).await {
            Answer::Granted(permit) => drop(permit),
            other => panic!("expected a grant, got {other:?}"),
        }
        until(Duration::from_secs(10), "the lease released", || async {
            bulkhead.in_use("k").await.unwrap() == 0
        })
        .await;
        // Early for the rate: told the rate's wait, and no lease taken. A rate of one start
        // per 10 s of its own (another name, so another state in Redis), so the ask is early
        // however long this machine takes between the grant and the ask (the release, seen
        // within milliseconds on a busy run, has 9 s).
        let slow = SharedKeyLimits::new(&s, "per-host-slow")
            .per_key_limit(1)
            .per_key_rate(Rate::every(Duration::from_secs(10)));
        let slow_bulkhead = SharedKeyedBulkhead::new(&s, "per-host-slow", 1);
        // Read before the ask that is granted: no later than Redis's grant.
        let granted = loop {
            let asked = Instant::now();
            match ask(&slow).await {
                Answer::Granted(permit) => {
                    drop(permit);
                    break asked;
                }
                Answer::Later(after, _) => tollgate::sleep(after).await,
                Answer::Failed(e) => panic!("{e}"),
            }
        };
        until(Duration::from_secs(9), "the slow key's lease released", || async {
            slow_bulkhead.in_use("k").await.unwrap() == 0
        })
        .await;
        match ask(&slow).await {
            Answer::Later(after, LaterReason::RateLimited) => {
                // On Redis's clock the next start is 10 s after the grant: no more than that
                // is left, and no less than 10 s less what our clock says has passed since
                // before the grant (1 ms for Redis's rounding).
                let passed = granted.elapsed();
                assert!(after <= Duration::from_secs(10), "{after:?}");
                assert!(after + passed + Duration::from_millis(1) >= Duration::from_secs(10), "{after:?} left, {passed:?} passed");
            }
            other => panic!("expected later, got {other:?}"),
        }
        assert_eq!(slow_bulkhead.in_use("k").await.unwrap(), 0, "a refused start holds no lease");
    }

    async fn the_warm_up_of_a_fresh_namespace_shows_in_the_maps_progress() {
        let redis = TestRedis::get();
        let ns = unique_namespace("map-warm-up");
        // A fresh namespace: nothing is granted for one lease TTL.
        let ttl = Duration::from_secs(1);
        let s = connect(&redis.url(), &ns, ttl, Duration::from_secs(2)).await;
        let limits = SharedKeyLimits::new(&s, "per-host").per_key_limit(2);
        let control = tollgate::MapControl::new();
        let started = Instant::now();
        let map = map_async(0..8usize, 8, |i| async move { Ok::<_, RedisLimitsError>(i) })
            .per_key(|i| format!("host-{}", i % 4), 2)
            .shared_limits(limits)
            .control(&control);
        let watch = async {
            // Every key was told the store is warming up, and nothing started: the progress
            // says why the items wait.
            loop {
                let progress = control.progress();
                if progress.keys_warming_up() == 4 {
                    assert_eq!(progress.keys_told_later(), 4);
                    assert_eq!(progress.started(), 0);
                    return;
                }
                assert!(!progress.is_ended(), "the warm-up was never seen: {progress:?}");
                tollgate::sleep(Duration::from_millis(5)).await;
            }
        };
        let (out, ()) = future::zip(map, watch).await;
        assert_eq!(out.len(), 8);
        assert!(out.iter().all(Result::is_ok), "{out:?}");
        // The warm-up was kept: no grant before one TTL.
        assert!(started.elapsed() >= ttl - Duration::from_millis(50), "{:?}", started.elapsed());
        assert_eq!(control.progress().keys_warming_up(), 0);
    }

}

/// A map under the fleet's limits can be spawned on a multi-thread runtime (checked when
/// this compiles; the future is never polled).
#[test]
fn a_map_with_shared_limits_is_send() {
    fn assert_send<T: Send>(_: &T) {}
    fn check(limits: SharedKeyLimits) {
        let map = map_async(
            vec![1u32, 2],
            2,
            |n| async move { Ok::<_, RedisLimitsError>(n) },
        )
        .per_key(|n| n.to_string(), 1)
        .shared_limits(limits)
        .retry(RetryPolicy::new())
        .into_future();
        assert_send(&map);
    }
    let _ = check;
}

/// What an item of the breaker tests ends with.
#[derive(Debug)]
enum HostError {
    /// The host answered with a failure.
    Down,
    /// The host's breaker was open (the error is shown by the assertions' messages).
    Open(#[allow(dead_code)] tollgate::CircuitBreakerError),
    /// The store failed (shown by the assertions' messages).
    Store(#[allow(dead_code)] RedisLimitsError),
}

impl From<tollgate::CircuitBreakerError> for HostError {
    fn from(open: tollgate::CircuitBreakerError) -> Self {
        HostError::Open(open)
    }
}

impl From<RedisLimitsError> for HostError {
    fn from(error: RedisLimitsError) -> Self {
        HostError::Store(error)
    }
}

/// 15 items of a host that fails (`down`) and 15 of one that answers (`up`), interleaved.
fn hosts() -> Vec<&'static str> {
    (0..30)
        .map(|i| if i % 2 == 0 { "down" } else { "up" })
        .collect()
}

/// A success, or a failure (which the breaker counts).
fn outcome(result: &Result<&str, HostError>) -> Outcome {
    if result.is_ok() {
        Outcome::success()
    } else {
        Outcome::failure()
    }
}

/// No lease of either host is left in the fleet once the map is done (a permit dropped is
/// released by the store's keeper, so this waits for it).
async fn no_lease_left(store: &RedisLimits) {
    let bulkhead = SharedKeyedBulkhead::new(store, "per-host", 2);
    until(Duration::from_secs(30), "no lease left", || async {
        bulkhead.in_use("down").await.unwrap() == 0 && bulkhead.in_use("up").await.unwrap() == 0
    })
    .await;
}

matrix! {
    async fn a_breaker_with_shared_limits_refuses_without_a_lease_and_strands_none() {
        let redis = TestRedis::get();
        let ns = unique_namespace("map-breaker");
        let store = connect(&redis.url(), &ns, Duration::from_secs(2), Duration::from_secs(2)).await;
        let limits = SharedKeyLimits::new(&store, "per-host").per_key_limit(2);
        let breaker = Breaker::new().min_attempts(3).open_for(Duration::from_secs(3600));
        // The failing host's attempts fail at once; the other host's wait until the check
        // below is done, so the map is still running when it is made.
        let (down_calls, checked) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let map = map_async(hosts(), 4, |host| {
            if host == "down" {
                down_calls.fetch_add(1, Ordering::SeqCst);
            }
            let checked = &checked;
            async move {
                if host == "down" {
                    tollgate::sleep(Duration::from_millis(2)).await;
                    return Err(HostError::Down);
                }
                until(Duration::from_secs(60), "the check", || async {
                    checked.load(Ordering::SeqCst) == 1
                })
                .await;
                Ok(host)
            }
        })
        .per_key(|host| host.to_string(), 2)
        .shared_limits(limits)
        .classify(outcome)
        .breaker(breaker);
        let check = async {
            // Once the breaker opened, the failing host holds no lease while the map runs:
            // its items end without asking, and a permit granted before it opened went back.
            let bulkhead = SharedKeyedBulkhead::new(&store, "per-host", 2);
            until(Duration::from_secs(30), "the failing host's lease back while the map runs", || async {
                down_calls.load(Ordering::SeqCst) >= 3 && bulkhead.in_use("down").await.unwrap() == 0
            })
            .await;
            checked.store(1, Ordering::SeqCst);
        };
        let (out, ()) = future::zip(map, check).await;
        assert_eq!(out.len(), 30);
        let (mut down, mut open) = (0, 0);
        for (i, result) in out.iter().enumerate() {
            match result {
                Ok(host) => assert_eq!(*host, "up"),
                Err(HostError::Down) => down += 1,
                Err(HostError::Open(_)) => open += 1,
                Err(error) => panic!("item {i}: {error:?}"),
            }
        }
        // The third failure opens the breaker; one more attempt may have been in flight.
        assert!((3..=4).contains(&down), "{down} attempts of the failing host");
        assert_eq!(down + open, 15, "every item of the failing host ended");
        assert_eq!(down_calls.load(Ordering::SeqCst), down, "refused items never ran");
        no_lease_left(&store).await;
    }

    async fn a_waiting_breaker_with_shared_limits_probes_with_a_lease_and_strands_none() {
        let redis = TestRedis::get();
        let ns = unique_namespace("map-breaker-wait");
        let store = connect(&redis.url(), &ns, Duration::from_secs(2), Duration::from_secs(2)).await;
        let limits = SharedKeyLimits::new(&store, "per-host").per_key_limit(2);
        let breaker = Breaker::new().min_attempts(3).open_for(Duration::from_millis(100));
        // The failing host's first three attempts fail (the breaker opens); the probe and
        // every attempt after it succeed.
        let failures = AtomicUsize::new(0);
        let out = map_async(hosts(), 4, |host| {
            let fails = host == "down" && failures.fetch_add(1, Ordering::SeqCst) < 3;
            async move {
                tollgate::sleep(Duration::from_millis(2)).await;
                if fails { Err(HostError::Down) } else { Ok(host) }
            }
        })
        .per_key(|host| host.to_string(), 2)
        .shared_limits(limits)
        .classify(outcome)
        .breaker_waiting(breaker)
        .await;
        assert_eq!(out.len(), 30);
        let down = out.iter().filter(|result| matches!(result, Err(HostError::Down))).count();
        let ok = out.iter().filter(|result| result.is_ok()).count();
        assert_eq!((down, ok), (3, 27), "{out:?}");
        no_lease_left(&store).await;
    }
}
