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
//! processes (this program again, run with the argument `worker`), each with 64 slots, all
//! sharing a cap of 2 requests in flight and a rate of 10 requests per second (burst 2) per
//! host. Workers 2 and 3 give the fleet's limits to their map, which asks Redis before each
//! start (an item whose host is busy holds no slot):
//!
//! ```ignore
//! let per_host = SharedKeyLimits::new(&store, "hosts").per_key_limit(2).per_key_rate(rate);
//! map_async(urls, 64, get).per_key(host, 2).shared_limits(per_host).retry(policy).await
//! ```
//!
//! Workers 0 and 1 do it by hand in each task, as code outside a map would (the same limits,
//! shared by name):
//!
//! ```ignore
//! per_host.run(host, async {
//!     per_host_rate.until_key_ready(host).await?;
//!     get(url).await
//! })
//! ```
//!
//! Odd workers run on tokio when the example is built with `--features tokio`, even ones on
//! smol.
//!
//! At the end it prints, per host, what the *server* saw: the most requests in flight at
//! once, the most in any one second, and the achieved rate against the allowed one
//! (`min(rate, cap / latency)`). Without the shared limits, four processes would put up to 8
//! requests in flight on a host and 40 a second.
//!
//! It is the crawl of the fleet proof test (`tests/fleet.rs`, which asserts what this
//! prints), on 12 hosts rather than 50 and with leases of 2 s rather than 1 s.

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::Duration;

use support::fleet::{self, Crawl, Launch, Runtime, Scheduler};
use support::redis_server::{REDIS_URL_VAR, TestRedis, unique_namespace};

/// The proof test's crawl, on 12 hosts and with 2 s leases.
const CRAWL: Crawl = Crawl {
    hosts: 12,
    lease_ttl: Duration::from_secs(2),
    workers: 4,
};

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
    println!(
        "{} worker processes x {} tasks, {} hosts, {} requests; crawling...",
        CRAWL.workers,
        Crawl::TASKS,
        CRAWL.hosts,
        CRAWL.total()
    );
    let run = CRAWL.run(
        &Launch::current_exe(&["worker"]),
        &redis.url(),
        &unique_namespace("example"),
        Duration::from_secs(300),
    );
    for (id, summary) in run.summaries.iter().enumerate() {
        let waits = match Scheduler::alternate(id) {
            Scheduler::Map => "in its map",
            Scheduler::Tasks => "in its tasks",
        };
        println!(
            "  worker {id} ({:?}, waits {waits}): {} done, {} fenced, {} refused while Redis was unavailable",
            Runtime::alternate(id),
            summary.done,
            summary.fenced,
            summary.unavailable
        );
    }
    println!("done in {:.1?}\n", run.elapsed);
    fleet::print_hosts(&CRAWL.reports(&run), Crawl::CAP, Crawl::RATE);
}
