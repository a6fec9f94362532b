//! The proof that a fleet of processes keeps one set of per-host limits through Redis, judged
//! by the target server (real `redis-server`, real processes, loopback only).
//!
//! Four worker processes with 64 tasks each crawl 50 hosts through one shared per-host cap
//! (2 in flight) and one shared per-host rate (10 requests per second, burst 2). Half the
//! hosts answer in 20 ms (the rate is what limits them: 40 requests each), half in 400 ms
//! (the cap is: two at a time make 5 per second; 20 requests each), so the crawl takes about
//! 4 seconds for every host. Each worker's items are in order of when they can start (see
//! `fleet::scheduled_items`). With the `tokio` feature, odd workers run on tokio and even
//! ones on smol, sharing the same limits.
//!
//! What the server must see, per host:
//! - never more than 2 requests in flight (its own gauge);
//! - never more than `burst + rate × (W + allowance)` arrivals in any window `W` of one
//!   interval, 0.5 s, 1 s and 2 s, and no request its own rate meter (the same rate, the same
//!   allowance) refuses. The **allowance** of 50 ms covers what lies between the store's
//!   grant and the server's accept: a process scheduled late on a busy 2-core machine, and
//!   loopback transit. A fleet that ignored the shared rate would exceed it by 4x;
//! - **utilisation** at least 90% on average over hosts, where a host's utilisation is its
//!   achieved rate (arrivals per second between its first and last request) over its allowed
//!   rate, `min(rate, cap / latency)`: the shared limits must not cost the throughput they
//!   allow.
//!
//! And at the end no lease is left in Redis.

mod support;

use std::time::{Duration, Instant};

use support::fleet::{self, HostReport, Launch, Plan, Runtime, Worker};
use support::http_server::TestServer;
use support::redis_server::TestRedis;

const WORKERS: usize = 4;
const TASKS: usize = 64;
const HOSTS: usize = 50;
const CAP: usize = 2;
/// 10 requests per second per host, bursts of 2.
const RATE: (u32, u32) = (10, 2);
const FAST: Duration = Duration::from_millis(20);
const SLOW: Duration = Duration::from_millis(400);
const ALLOWANCE: Duration = Duration::from_millis(50);
const LEASE_TTL: Duration = Duration::from_secs(1);

/// Not a test: the entry point of a worker process. The fleet tests re-run this binary with
/// only this entry selected and the worker's plan in the environment; run alone, it returns.
#[test]
#[ignore = "a fleet worker process; the fleet tests start it"]
fn fleet_worker() {
    fleet::worker_main_from_env();
}

fn latency(host: usize) -> Duration {
    if host < HOSTS / 2 { FAST } else { SLOW }
}

/// What a host can take at most: `min(rate, cap / latency)`.
fn allowed(host: usize) -> f64 {
    f64::from(RATE.0).min(CAP as f64 / latency(host).as_secs_f64())
}

/// Requests per host: 4 seconds' worth at its allowed rate (40 or 20), split evenly among
/// the workers.
fn requests(host: usize) -> usize {
    (allowed(host) * 4.0).round() as usize
}

#[test]
fn four_worker_processes_keep_every_host_within_its_shared_cap_and_rate() {
    let redis = TestRedis::get();
    let mut builder = TestServer::builder()
        .rate_limit(f64::from(RATE.0), RATE.1)
        .rate_allowance(ALLOWANCE);
    let names: Vec<String> = (0..HOSTS).map(|host| format!("host{host:02}")).collect();
    for (host, name) in names.iter().enumerate() {
        builder = builder.host(name, latency(host));
    }
    let server = builder.start();
    let hosts: Vec<_> = names
        .iter()
        .map(|name| (name.clone(), server.addr(name)))
        .collect();
    let namespace = fleet::unique_namespace("proof");

    let launch = Launch::test_entry("fleet_worker");
    let schedule: Vec<(f64, usize)> = (0..HOSTS)
        .map(|host| (allowed(host), requests(host)))
        .collect();
    let total: usize = schedule.iter().map(|&(_, items)| items).sum();
    let mut workers: Vec<Worker> = fleet::scheduled_items(&schedule, WORKERS)
        .into_iter()
        .enumerate()
        .map(|(worker, items)| {
            let plan = Plan {
                worker,
                redis_url: redis.url(),
                namespace: namespace.clone(),
                lease_ttl: LEASE_TTL,
                hosts: hosts.clone(),
                items,
                tasks: TASKS,
                cap: CAP,
                rate: Some(RATE),
                steps: 1,
                runtime: Runtime::alternate(worker),
            };
            Worker::spawn(&launch, &plan)
        })
        .collect();
    let started = Instant::now();
    for worker in &mut workers {
        worker.go();
    }
    let summaries: Vec<_> = workers
        .into_iter()
        .map(|worker| worker.finish(Duration::from_secs(120)))
        .collect();
    let elapsed = started.elapsed();

    // Every item was done once, every answer a 200: nothing was refused by the server's meter.
    for (worker, summary) in summaries.iter().enumerate() {
        assert_eq!(
            summary.done,
            total / WORKERS,
            "worker {worker}: {summary:?}"
        );
        assert_eq!(summary.ok(), summary.done, "worker {worker}: {summary:?}");
        assert!(summary.errors.is_empty(), "worker {worker}: {summary:?}");
        assert_eq!(
            summary.fenced, 0,
            "worker {worker}: nothing should be fenced"
        );
    }

    let reports: Vec<(Duration, HostReport)> = names
        .iter()
        .enumerate()
        .map(|(host, name)| {
            let report = fleet::judge_host(&server, name, CAP, RATE, latency(host), ALLOWANCE);
            (latency(host), report)
        })
        .collect();
    println!("{WORKERS} workers x {TASKS} tasks, {HOSTS} hosts, in {elapsed:.2?}");
    fleet::print_table(&reports, CAP, RATE);

    for (host, (_, report)) in reports.iter().enumerate() {
        let stats = server.stats(&report.host);
        assert_eq!(report.requests, requests(host), "{report:?}");
        assert!(report.peak <= CAP, "over the cap: {report:?}");
        assert_eq!(
            report.window_violation, None,
            "over the rate in a window: {report:?}"
        );
        assert_eq!(
            stats.over_rate, 0,
            "the server's meter refused some: {stats:?}"
        );
    }
    // The cap really was reached: the slow hosts need both permits to keep up.
    assert!(
        reports.iter().any(|(_, report)| report.peak == CAP),
        "no host ever had {CAP} in flight: the cap was not exercised"
    );
    let utilisation = reports
        .iter()
        .map(|(_, report)| report.utilisation())
        .sum::<f64>()
        / reports.len() as f64;
    println!("mean utilisation {:.1}%", 100.0 * utilisation);
    assert!(
        utilisation >= 0.9,
        "mean utilisation {utilisation:.3} < 0.9"
    );

    assert_no_leases_left(&redis, &namespace);
}

/// No lease left under the run's namespace. A lease set disappears from Redis with its last
/// lease, so any lease key at all is a lease left behind (a release lost, or not sent before
/// its process exited).
fn assert_no_leases_left(redis: &TestRedis, namespace: &str) {
    let mut probe = redis.probe();
    // The pattern does match this run's keys: the namespace's epoch key is still there.
    let keys = probe.keys(&format!("{namespace}:*"));
    assert!(
        !keys.is_empty(),
        "no key of namespace {namespace} found at all"
    );
    let left: Vec<_> = probe
        .keys(&format!("{namespace}:lease:*"))
        .into_iter()
        .map(|key| {
            let members = probe.zcard(&key);
            (key, members)
        })
        .collect();
    assert!(left.is_empty(), "leases left in Redis: {left:?}");
}
