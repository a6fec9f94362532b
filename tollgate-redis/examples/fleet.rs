//! A fleet of four crawler processes that keep one set of per-host limits through Redis, and
//! what the target server measured.
//!
//! ```text
//! cargo run -p tollgate-redis --example fleet
//! ```
//!
//! It uses the Redis named by `TOLLGATE_REDIS_URL` (`redis://127.0.0.1:6379`), or starts a
//! `redis-server` of its own on a free loopback port (it must be on the `PATH`). It starts a
//! loopback HTTP target with 12 hosts (half answer in 20 ms, half in 400 ms), then four worker
//! processes (this program again, run with the argument `worker`), each with 64 tasks, all
//! sharing a cap of 2 requests in flight and a rate of 10 requests per second (burst 2) per
//! host. Each worker does, per URL, what a crawler would:
//!
//! ```ignore
//! per_host.run(host, async {
//!     per_host_rate.until_key_ready(host).await?;
//!     get(url).await
//! })
//! ```
//!
//! At the end it prints, per host, what the *server* saw: the most requests in flight at
//! once, the most in any one second, and the achieved rate against the allowed one
//! (`min(rate, cap / latency)`). Without the shared limits, four processes would put up to 8
//! requests in flight on a host and 40 a second.

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use support::fleet::{self, Launch, Plan, Runtime, Worker};
use support::http_server::TestServer;
use support::redis_server::{REDIS_URL_VAR, TestRedis};

const WORKERS: usize = 4;
const TASKS: usize = 64;
const HOSTS: usize = 12;
const CAP: usize = 2;
const RATE: (u32, u32) = (10, 2);
const LEASE_TTL: Duration = Duration::from_secs(2);
/// How early a request may reach the server and still count as on time: loopback transit
/// and process scheduling between the store's grant and the server's accept.
const ALLOWANCE: Duration = Duration::from_millis(50);

fn latency(host: usize) -> Duration {
    if host < HOSTS / 2 {
        Duration::from_millis(20)
    } else {
        Duration::from_millis(400)
    }
}

/// What a host can take at most: `min(rate, cap / latency)`.
fn allowed(host: usize) -> f64 {
    f64::from(RATE.0).min(CAP as f64 / latency(host).as_secs_f64())
}

/// Requests per host: 4 seconds' worth at its allowed rate (a multiple of the workers).
fn requests(host: usize) -> usize {
    (allowed(host) * 4.0).round() as usize
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some("worker") {
        assert!(
            fleet::worker_main_from_env(),
            "the worker mode is for the processes the example starts"
        );
        return;
    }

    let redis = TestRedis::get();
    match &redis {
        TestRedis::Shared(url) => println!("Redis: {url} (from {REDIS_URL_VAR})"),
        TestRedis::Own(server) => println!("Redis: started redis-server at {}", server.url()),
    }
    let mut builder = TestServer::builder();
    let names: Vec<String> = (0..HOSTS).map(|host| format!("host{host:02}")).collect();
    for (host, name) in names.iter().enumerate() {
        builder = builder.host(name, latency(host));
    }
    let server = builder.start();
    let hosts: Vec<_> = names
        .iter()
        .map(|name| (name.clone(), server.addr(name)))
        .collect();
    let namespace = fleet::unique_namespace("example");

    let launch = Launch::current_exe(&["worker"]);
    // Each worker's list in order of when its items can start, as a crawler's frontier.
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
    println!(
        "{WORKERS} worker processes x {TASKS} tasks, {HOSTS} hosts, {total} requests; crawling..."
    );
    let started = Instant::now();
    for worker in &mut workers {
        worker.go();
    }
    for worker in workers {
        let id = worker.id;
        let summary = worker.finish(Duration::from_secs(300));
        println!(
            "  worker {id}: {} done, {} fenced, {} refused while Redis was unavailable",
            summary.done, summary.fenced, summary.unavailable
        );
    }
    println!("done in {:.1?}\n", started.elapsed());

    let reports: Vec<_> = names
        .iter()
        .enumerate()
        .map(|(host, name)| {
            let report = fleet::judge_host(&server, name, CAP, RATE, latency(host), ALLOWANCE);
            (latency(host), report)
        })
        .collect();
    fleet::print_hosts(&reports, CAP, RATE);
}
