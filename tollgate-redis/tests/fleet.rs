//! The proof that a fleet of processes keeps one set of per-host limits through Redis, judged
//! by the target server (real `redis-server`, real processes, loopback only).
//!
//! Four worker processes with 64 tasks each crawl 50 hosts through one shared per-host cap
//! (2 in flight) and one shared per-host rate (10 requests per second, burst 2). Half the
//! hosts answer in 20 ms (the rate is what limits them: 40 requests each), half in 400 ms
//! (the cap is: two at a time make 5 per second; 20 requests each), so the crawl takes about
//! 4 seconds for every host. Each worker's items are in order of when they can start. With
//! the `tokio` feature, odd workers run on tokio and even ones on smol, sharing the same
//! limits. The `fleet` example runs the same crawl (`fleet::Crawl`) on fewer hosts.
//!
//! What must hold, per host:
//! - at the server, never more than 2 requests in flight (its own gauge);
//! - in Redis, never more than `burst + rate × W` rate starts in any window `W` of 1 s and
//!   2 s, on Redis's own clock, read from its log of what the store's scripts ran (see
//!   `support::grants`), and no lease granted while the cap's worth was unexpired. A fleet
//!   that ignored the shared rate would exceed it by 4x;
//! - every arrival at the server has a lease and a rate start of its host before it, so
//!   what Redis granted judges the requests. Arrivals themselves are bunched by how late a
//!   busy machine runs a worker after its grant: the server's own meter (the same rate,
//!   each request allowed 50 ms early) judges each request against the one before it, and
//!   its refusals are a printed figure (see `fleet::meter_figure`), as is the most arrivals
//!   in a second.
//!
//! And at the end no lease is left in Redis. All of that holds at any speed. The mean
//! **utilisation** over hosts (a host's achieved rate, arrivals per second between its first
//! and last request, over its allowed rate, `min(rate, cap / latency)`) is a speed figure: it
//! is printed, and the bench shows it; a busy machine lowers it without anything being wrong.

mod support;

use std::time::Duration;

use support::fleet::{self, Crawl, HostReport, Launch};
use support::redis_server::{TestRedis, unique_namespace};

const CRAWL: Crawl = Crawl {
    hosts: 50,
    lease_ttl: Duration::from_secs(1),
    workers: 4,
};

/// Not a test: the entry point of a worker process. The fleet tests re-run this binary with
/// only this entry selected and the worker's plan in the environment; run alone, it returns.
#[test]
#[ignore = "a fleet worker process; the fleet tests start it"]
fn fleet_worker() {
    fleet::worker_main_from_env();
}

#[test]
fn four_worker_processes_keep_every_host_within_its_shared_cap_and_rate() {
    const CAP: usize = Crawl::CAP;
    let redis = TestRedis::get();
    let namespace = unique_namespace("proof");
    let run = CRAWL.run(
        &Launch::test_entry("fleet_worker"),
        &redis.url(),
        &namespace,
        Duration::from_secs(120),
    );

    // Every item was done once and answered (a 200, or a 429 from the meter's per-request
    // verdict, a printed figure below).
    for (worker, summary) in run.summaries.iter().enumerate() {
        assert_eq!(
            summary.done,
            CRAWL.total() / CRAWL.workers,
            "worker {worker}: {summary:?}"
        );
        assert_eq!(
            summary.answered(),
            summary.done,
            "worker {worker}: {summary:?}"
        );
        assert!(summary.errors.is_empty(), "worker {worker}: {summary:?}");
    }
    // Attempts fenced (their lease could lapse before its renewal: a keeper or a Redis run
    // late by most of a TTL) are retried; how many is a figure of the machine's speed (0 on
    // a quiet machine, 1 of 960 in a stress run with a second suite beside it), printed.
    // A fenced attempt may have reached the server before it was cut short: the hosts may
    // see that many requests more, never fewer.
    let fenced: usize = run.summaries.iter().map(|summary| summary.fenced).sum();

    let reports = CRAWL.reports(&run);
    println!(
        "{} workers x {} tasks, {} hosts, in {:.2?}",
        CRAWL.workers,
        Crawl::TASKS,
        CRAWL.hosts,
        run.elapsed
    );
    fleet::print_table(&reports, CAP, Crawl::RATE);

    let mut extra = 0;
    for (host, (_, report)) in reports.iter().enumerate() {
        assert!(report.requests >= CRAWL.requests(host), "{report:?}");
        extra += report.requests - CRAWL.requests(host);
        assert!(report.peak <= CAP, "over the cap: {report:?}");
        assert_eq!(
            report.window_violation, None,
            "started over the rate in a window: {report:?}"
        );
        assert_eq!(
            report.cap_violations,
            [],
            "granted over the cap: {report:?}"
        );
        assert_eq!(
            report.ungranted, None,
            "a request with no grant: {report:?}"
        );
    }
    assert!(
        extra <= fenced,
        "{extra} requests more than the items, with {fenced} attempts fenced"
    );
    let judged: Vec<HostReport> = reports.iter().map(|(_, report)| report.clone()).collect();
    println!(
        "{}; {fenced} attempts fenced and retried",
        fleet::meter_figure(&run.server, &judged, &run.summaries)
    );
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
    // A speed figure, printed not asserted (it was a floor of 0.8; CI's busy 2-core machine
    // measured 0.898 once, a quiet one gives more).
    println!("mean utilisation {:.1}%", 100.0 * utilisation);

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
