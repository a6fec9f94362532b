//! What the shared limits cost, against a `redis-server` of the bench's own on loopback.
//!
//! ```text
//! cargo bench -p tollgate-redis --bench shared -- --warm-up-time 1 --measurement-time 3
//! ```
//!
//! Criterion measures acquire+release pairs of a `SharedKeyedBulkhead`, one task at a time
//! and 64 tasks at once over one store (redis-rs pipelines the concurrent calls on its one
//! multiplexed connection, as it would for a crawler's tasks), a rate check, and items of a
//! keyed map under `SharedKeyLimits` (a cap and a rate, one ask per item) beside the same map
//! with its own per-key limit only. Then the bench prints what criterion does not measure:
//!
//! - **added latency per request**: p50 and p99 of one acquire+release, of one
//!   acquire + rate check + release (what a request under both limits waits when the key is
//!   free), and of one item of a map under `SharedKeyLimits` (cap and rate in one script),
//!   one at a time;
//! - **Redis server time per call**: `usec_per_call` from `INFO commandstats` after 10,000
//!   pairs at 64 tasks (`evalsha` is the grant script, `zrem` the pipelined releases);
//! - **renewal traffic per process**: the calls Redis counts while a process holds 10 and
//!   then 1,000 permits for 4 renewal periods: the same number of calls, one per third of the
//!   TTL, whatever the number of permits (each call carries every lease, so its server time
//!   grows with them).
//!
//! Releases are sent by the store's keeper thread, in batches, after the permit is dropped:
//! a pair's time is the grant's round trip plus handing the release over.

use tollgate_testkit::redis_server;

use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use tollgate::Rate;
use tollgate_redis::{
    RedisLimits, RedisLimitsError, SharedKeyLimits, SharedKeyedBulkhead, SharedKeyedRateLimiter,
};

use redis_server::{CommandStat, Probe, RedisServer};

/// Keys the concurrent pairs spread over: as many as a crawl's busy hosts.
const KEYS: usize = 256;
/// A per-key limit no bench reaches: it measures the store, not waiting for room.
const ROOMY: usize = 1_000_000;
const CONCURRENT: usize = 64;

fn connect(server: &RedisServer, namespace: &str, ttl: Duration) -> RedisLimits {
    smol::block_on(
        RedisLimits::options(server.url())
            .namespace(namespace)
            .lease_ttl(ttl)
            .connect(),
    )
    .expect("connect the store")
}

/// Waits out the store's warm-up (a namespace new to this Redis grants nothing for one TTL).
fn warm_up(bulkhead: &SharedKeyedBulkhead) {
    drop(smol::block_on(bulkhead.acquire("warm-up")).expect("a first permit"));
}

async fn pairs(bulkhead: &SharedKeyedBulkhead, keys: &[String], count: u64, tasks: usize) {
    tollgate::map_async(0..count, tasks, |i| async move {
        let permit = bulkhead
            .acquire(&keys[i as usize % keys.len()])
            .await
            .expect("a permit");
        drop(permit);
    })
    .await;
}

/// `count` items of a keyed map over `keys`, `tasks` at once, each asking `limits` (or,
/// with `None`, under the map's own per-key limit only).
async fn map_items(limits: Option<&SharedKeyLimits>, keys: &[String], count: u64, tasks: usize) {
    let items = 0..count;
    let work = |i: u64| async move { Ok::<u64, RedisLimitsError>(i) };
    let key = |i: &u64| keys[*i as usize % keys.len()].clone();
    let done = match limits {
        Some(limits) => {
            tollgate::map_async(items, tasks, work)
                .per_key(key, tasks)
                .shared_limits(limits.clone())
                .await
        }
        None => {
            tollgate::map_async(items, tasks, work)
                .per_key(key, tasks)
                .await
        }
    };
    assert!(done.iter().all(Result::is_ok), "every item granted");
}

fn percentile(sorted: &[Duration], fraction: f64) -> Duration {
    let index = ((sorted.len() - 1) as f64 * fraction).round() as usize;
    sorted[index]
}

fn latencies(mut one: impl FnMut(usize), count: usize) -> (Duration, Duration) {
    let mut samples: Vec<Duration> = (0..count)
        .map(|i| {
            let start = Instant::now();
            one(i);
            start.elapsed()
        })
        .collect();
    samples.sort_unstable();
    (percentile(&samples, 0.5), percentile(&samples, 0.99))
}

/// The commands a client of the store sends; the rest of `INFO commandstats` are the
/// commands scripts run, and the probe's own.
const TOP_LEVEL: [&str; 3] = ["evalsha", "eval", "zrem"];

/// Calls and microseconds of the [`TOP_LEVEL`] commands.
fn top_level(stats: &[CommandStat]) -> (u64, u64) {
    stats
        .iter()
        .filter(|stat| TOP_LEVEL.contains(&stat.command.as_str()))
        .fold((0, 0), |(calls, usec), stat| {
            (calls + stat.calls, usec + stat.usec)
        })
}

fn stat<'a>(stats: &'a [CommandStat], command: &str) -> Option<&'a CommandStat> {
    stats.iter().find(|stat| stat.command == command)
}

fn shared(c: &mut Criterion) {
    let server = RedisServer::start();
    let store = connect(&server, "bench", Duration::from_secs(3));
    let bulkhead = SharedKeyedBulkhead::new(&store, "pairs", ROOMY);
    let limiter = SharedKeyedRateLimiter::new(&store, "rate", Rate::per_second(1_000_000));
    let keys: Vec<String> = (0..KEYS).map(|key| format!("host{key}")).collect();
    warm_up(&bulkhead);

    let mut group = c.benchmark_group("acquire_release");
    group.throughput(Throughput::Elements(1));
    for tasks in [1, CONCURRENT] {
        group.bench_function(BenchmarkId::new("tasks", tasks), |b| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                smol::block_on(pairs(&bulkhead, &keys, iters, tasks));
                start.elapsed()
            })
        });
    }
    group.finish();
    let mut group = c.benchmark_group("rate_check");
    group.throughput(Throughput::Elements(1));
    group.bench_function("tasks/1", |b| {
        let mut i = 0;
        b.iter(|| {
            i += 1;
            smol::block_on(limiter.check_key(&keys[i % KEYS])).expect("a start")
        })
    });
    group.finish();
    let limits = SharedKeyLimits::new(&store, "map")
        .per_key_limit(ROOMY)
        .per_key_rate(Rate::per_second(1_000_000).burst(1_000));
    smol::block_on(map_items(Some(&limits), &keys, 1, 1)); // past the namespace's warm-up
    let mut group = c.benchmark_group("map_item");
    group.throughput(Throughput::Elements(1));
    for (name, limits) in [("shared_limits", Some(&limits)), ("local_per_key", None)] {
        group.bench_function(BenchmarkId::new(name, CONCURRENT), |b| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                smol::block_on(map_items(limits, &keys, iters, CONCURRENT));
                start.elapsed()
            })
        });
    }
    group.finish();

    report(&server, &store, &bulkhead, &limiter, &keys);
    let (p50, p99) = latencies(
        |i| smol::block_on(map_items(Some(&limits), &keys[i % KEYS..=i % KEYS], 1, 1)),
        5_000,
    );
    println!(
        "added latency, one map item under SharedKeyLimits (cap and rate): p50 {p50:.2?}, p99 {p99:.2?}"
    );
}

fn report(
    server: &RedisServer,
    store: &RedisLimits,
    bulkhead: &SharedKeyedBulkhead,
    limiter: &SharedKeyedRateLimiter,
    keys: &[String],
) {
    let mut probe = Probe::connect(&server.url()).expect("a probe");
    println!("\n== tollgate-redis on loopback, one store, smol ==");

    // Throughput, once more outside criterion, with the server's own counts.
    const PAIRS: u64 = 10_000;
    probe.reset_stats();
    let start = Instant::now();
    smol::block_on(pairs(bulkhead, keys, PAIRS, CONCURRENT));
    let elapsed = start.elapsed();
    // Let the keeper send the last releases before reading the counts.
    std::thread::sleep(Duration::from_millis(100));
    let stats = probe.command_stats();
    println!(
        "acquire+release pairs, {CONCURRENT} tasks: {:.0} pairs/s ({PAIRS} in {elapsed:.2?})",
        PAIRS as f64 / elapsed.as_secs_f64()
    );
    // Redis also counts the commands a script runs (`zadd`, `time`, ...) under their own
    // names; the calls a client sends are the scripts (`evalsha`) and the releases (`zrem`).
    for command in TOP_LEVEL {
        if let Some(stat) = stat(&stats, command) {
            println!(
                "  redis {:<8} {:>7} calls, {:>6.2} us per call, {:>5.2} calls per pair",
                stat.command,
                stat.calls,
                stat.usec_per_call,
                stat.calls as f64 / PAIRS as f64
            );
        }
    }
    let (_, usec) = top_level(&stats);
    println!(
        "  redis server time per pair (scripts and releases): {:.2} us",
        usec as f64 / PAIRS as f64
    );

    // Added latency, one at a time.
    let (p50, p99) = latencies(
        |i| {
            let permit = smol::block_on(bulkhead.acquire(&keys[i % KEYS])).expect("a permit");
            drop(permit);
        },
        5_000,
    );
    println!("added latency, acquire+release: p50 {p50:.2?}, p99 {p99:.2?}");
    let (p50, p99) = latencies(
        |i| {
            let key = &keys[i % KEYS];
            smol::block_on(async {
                let permit = bulkhead.acquire(key).await.expect("a permit");
                limiter.until_key_ready(key).await.expect("a start");
                drop(permit);
            })
        },
        5_000,
    );
    println!("added latency, acquire + rate check + release: p50 {p50:.2?}, p99 {p99:.2?}");

    // Renewal traffic while holding 10, then 1,000 permits.
    let ttl = Duration::from_millis(900);
    let holder = connect(server, "bench-renewal", ttl);
    let held = SharedKeyedBulkhead::new(&holder, "held", ROOMY);
    warm_up(&held);
    let _ = store;
    for count in [10, 1_000] {
        let permits: Vec<_> = smol::block_on(async {
            let mut permits = Vec::with_capacity(count);
            for i in 0..count {
                permits.push(held.acquire(&keys[i % KEYS]).await.expect("a permit"));
            }
            permits
        });
        let before = holder.stats().renewal_calls();
        probe.reset_stats();
        let periods = 4;
        std::thread::sleep(ttl / 3 * periods);
        let stats = probe.command_stats();
        let renewals = holder.stats().renewal_calls() - before;
        let (calls, usec) = top_level(&stats);
        println!(
            "renewal traffic holding {count:>5} permits for {periods} renewal periods ({:.2?}): \
             {calls} calls at Redis ({renewals} renewals by the keeper), {usec} us of server time \
             ({:.0} us per call)",
            ttl / 3 * periods,
            usec as f64 / calls.max(1) as f64
        );
        drop(permits);
    }
}

criterion_group!(benches, shared);
criterion_main!(benches);
