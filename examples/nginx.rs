//! The proof on a real server: a loopback nginx with 13 hosts whose limits the crawler is
//! not told, crawled with reqwest twice, each time against a fresh nginx:
//!
//! - **tollgate**, as the README says: `.adaptive(..)` with every response read by
//!   `tollgate::http::outcome`, a breaker per host that holds items while the host is down
//!   (`.breaker_waiting`), retries that take the server's `Retry-After`;
//! - **told**: the same map given every host's true limit and rate (`.key_settings`), no
//!   adaptation: what a crawler could do if every site published its limits.
//!
//! The hosts (nginx's own meters, and loopback upstreams for latency):
//!
//! | host | what it does |
//! | --- | --- |
//! | `r2`, `r10`, `r50` | `limit_req` at 2, 10, 50 a second, no burst (a `429` when early) |
//! | `r5-burst`, `r20-burst` | `limit_req` at 5 and 20 a second, with a burst of 5 and 10 |
//! | `c1`, `c2`, `c4` | `limit_conn` 1, 2, 4 (a bare `503` beyond) before a 50 ms upstream |
//! | `slow` | a 500 ms upstream, no limit |
//! | `down` | 20 a second; down from 5 s to 20 s (`503`, `Retry-After: 5`) |
//! | `says-10` | 10 a second, and says so (`RateLimit-Policy: "default";q=10;w=1`) |
//! | `says-2-at-once` | `limit_conn` 2 before a 50 ms upstream, and says so |
//! | `free` | no limit |
//!
//! For each crawler it prints what nginx's access log says: the time the crawl took, the
//! requests, the `429`s, the `503`s, and the URLs that failed for good; and per host, when
//! its last answer went out, its `429`s and its `503`s.
//!
//! ```text
//! cargo run --release --example nginx --features http [-- --refused-retry-after N]
//! ```
//!
//! With `--refused-retry-after N` the metered hosts' `429`s say `Retry-After: N` (nginx's say
//! nothing by default), and a third crawler is the README's recipe with each `429` pausing its
//! host for that long: the two ways of reading a `429`'s `Retry-After`
//! (`tollgate::http::outcome` leaves a wait under a minute to the request).
//!
//! nginx must be installed (`apt-get install nginx-light`; `.ci/run` installs it).

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use reqwest::StatusCode;
use tollgate::{Adaptive, Breaker, KeySettings, Outcome, Rate, RetryPolicy, map_async};
use tollgate_testkit::http_server::TestServer;
use tollgate_testkit::nginx::{HostPlan, Nginx};

#[path = "common/fetch.rs"]
mod fetch;

use fetch::{Answer, Failure, classify, fetch};

/// When the `down` host goes down and comes back, from the crawl's start.
const DOWN: (Duration, Duration) = (Duration::from_secs(5), Duration::from_secs(20));

/// The `Retry-After` the `down` host sends.
const DOWN_RETRY_AFTER: u32 = 5;

/// One host: its name, its URLs, its true limit and rate (what `told` is given), and how
/// nginx serves it.
struct Site {
    name: &'static str,
    urls: usize,
    limit: usize,
    rate: Option<u32>,
    plan: fn(HostPlan, &Upstreams) -> HostPlan,
}

/// The loopback servers nginx passes some hosts to.
struct Upstreams {
    server: TestServer,
}

impl Upstreams {
    fn start() -> Self {
        let server = TestServer::builder()
            .host("fast", Duration::from_millis(50))
            .host("slow", Duration::from_millis(500))
            .start();
        Self { server }
    }
}

/// The hosts. About 30 s of work for each at its true pace.
const SITES: &[Site] = &[
    Site {
        name: "r2",
        urls: 60,
        limit: 64,
        rate: Some(2),
        plan: |p, _| p.rate(2),
    },
    Site {
        name: "r5-burst",
        urls: 150,
        limit: 64,
        rate: Some(5),
        plan: |p, _| p.rate(5).burst(5),
    },
    Site {
        name: "r10",
        urls: 300,
        limit: 64,
        rate: Some(10),
        plan: |p, _| p.rate(10),
    },
    Site {
        name: "r20-burst",
        urls: 600,
        limit: 64,
        rate: Some(20),
        plan: |p, _| p.rate(20).burst(10),
    },
    Site {
        name: "r50",
        urls: 1_500,
        limit: 64,
        rate: Some(50),
        plan: |p, _| p.rate(50),
    },
    Site {
        name: "c1",
        urls: 500,
        limit: 1,
        rate: None,
        plan: |p, u| p.conn(1).upstream(u.server.addr("fast")),
    },
    Site {
        name: "c2",
        urls: 1_000,
        limit: 2,
        rate: None,
        plan: |p, u| p.conn(2).upstream(u.server.addr("fast")),
    },
    Site {
        name: "c4",
        urls: 2_000,
        limit: 4,
        rate: None,
        plan: |p, u| p.conn(4).upstream(u.server.addr("fast")),
    },
    Site {
        name: "slow",
        urls: 600,
        limit: 64,
        rate: None,
        plan: |p, u| p.upstream(u.server.addr("slow")),
    },
    Site {
        name: "down",
        urls: 400,
        limit: 64,
        rate: Some(20),
        plan: |p, _| p.rate(20),
    },
    Site {
        name: "says-10",
        urls: 300,
        limit: 64,
        rate: Some(10),
        plan: |p, _| p.rate(10).policy(r#""default";q=10;w=1"#),
    },
    Site {
        name: "says-2-at-once",
        urls: 1_000,
        limit: 2,
        rate: None,
        plan: |p, u| {
            p.conn(2)
                .upstream(u.server.addr("fast"))
                .policy(r#""conc";q=2;qu="concurrent-requests""#)
        },
    },
    Site {
        name: "free",
        urls: 2_000,
        limit: 64,
        rate: None,
        plan: |p, _| p,
    },
];

/// The retry policy both crawlers share: 429s and 503s are tried again, up to 8 attempts,
/// after the server's `Retry-After` when it sends one.
fn retries() -> RetryPolicy<(usize, String), Failure> {
    RetryPolicy::new()
        .attempts(8)
        .when(|failure| {
            matches!(failure, Failure::Status(reply)
                if reply.status == StatusCode::TOO_MANY_REQUESTS
                    || reply.status == StatusCode::SERVICE_UNAVAILABLE)
        })
        .retry_after(|failure| match failure {
            Failure::Status(reply) => tollgate::http::retry_after(&reply.headers),
            _ => None,
        })
}

/// What nginx's access log says of one crawl.
struct Figures {
    took: Duration,
    requests: usize,
    too_many: usize,
    unavailable: usize,
    failed: usize,
    /// Per host: its name, when its last answer went out (from the crawl's start), its
    /// 429s and its 503s.
    hosts: Vec<(&'static str, f64, usize, usize)>,
}

/// A crawler of the comparison.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Crawler {
    /// The README's recipe: `http::outcome`'s reading (a 429's `Retry-After` under a minute
    /// delays its own URL, through the retry policy, not its host).
    Recipe,
    /// The same, but every 429's `Retry-After` pauses its host too.
    HostPauseOn429,
    /// Told every host's limit and rate.
    Told,
}

/// As `classify`, but a 429's `Retry-After` pauses its host whatever its length.
fn classify_host_pause_on_429(answer: &Answer) -> Outcome {
    let outcome = classify(answer);
    match answer {
        Err(Failure::Status(reply)) if reply.status == StatusCode::TOO_MANY_REQUESTS => {
            match tollgate::http::retry_after(&reply.headers) {
                Some(wait) => outcome.with_hint(outcome.hint().pause(wait)),
                None => outcome,
            }
        }
        _ => outcome,
    }
}

/// Crawls every site once against a fresh nginx as `crawler` does, on `runtime` (reqwest's);
/// with `refused_retry_after`, the metered hosts' 429s say `Retry-After: <that>`.
fn crawl(
    crawler: Crawler,
    refused_retry_after: Option<u32>,
    upstreams: &Upstreams,
    runtime: &tokio::runtime::Runtime,
) -> Figures {
    let plans: Vec<HostPlan> = SITES
        .iter()
        .map(|site| {
            let plan = (site.plan)(HostPlan::new(site.name), upstreams);
            match refused_retry_after {
                Some(secs) if site.rate.is_some() => plan.refused_retry_after(secs),
                _ => plan,
            }
        })
        .collect();
    let nginx = Nginx::start_plans(&plans);
    // The URLs interleaved: each host's spread evenly over the input; the key is the site.
    let mut urls: Vec<(f64, (usize, String))> = SITES
        .iter()
        .enumerate()
        .flat_map(|(i, site)| {
            let nginx = &nginx;
            (0..site.urls).map(move |n| {
                (
                    n as f64 / site.urls as f64,
                    (i, nginx.url(site.name, &format!("/{n}"))),
                )
            })
        })
        .collect();
    urls.sort_by(|a, b| a.0.total_cmp(&b.0));
    let urls: Vec<(usize, String)> = urls.into_iter().map(|(_, url)| url).collect();

    let client = reqwest::Client::new();
    let began = Instant::now();
    let began_at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_secs_f64();
    let done = AtomicBool::new(false);
    let outputs = std::thread::scope(|scope| {
        // The `down` host's outage, on a clock of its own.
        scope.spawn(|| {
            let site = SITES
                .iter()
                .find(|site| site.name == "down")
                .expect("a down host");
            let plan = (site.plan)(HostPlan::new(site.name), upstreams);
            sleep_until(began + DOWN.0, &done);
            if !done.load(Ordering::Relaxed) {
                nginx.set_plan(plan.clone().down(DOWN_RETRY_AFTER));
                sleep_until(began + DOWN.1, &done);
                nginx.set_plan(plan);
            }
        });
        let outputs = runtime.block_on(async {
            let client = &client;
            let map = map_async(urls, 64, |url: (usize, String)| async move {
                fetch(client, &url.1).await
            })
            .per_key(|url| url.0, 64);
            if crawler == Crawler::Told {
                map.key_settings(|site| {
                    let settings = KeySettings::new().limit(SITES[*site].limit);
                    match SITES[*site].rate {
                        Some(rate) => settings.rate(Rate::per_second(rate)),
                        None => settings,
                    }
                })
                .retry(retries())
                .await
            } else {
                let read: fn(&Answer) -> Outcome = if crawler == Crawler::Recipe {
                    classify
                } else {
                    classify_host_pause_on_429
                };
                map.retry(retries())
                    .adaptive(
                        Adaptive::new(1, 64).rate_ceiling(Rate::per_second(200)),
                        read,
                    )
                    .breaker_waiting(Breaker::new())
                    .await
            }
        });
        done.store(true, Ordering::Relaxed);
        outputs
    });
    let took = began.elapsed();
    let logged: Vec<u16> = SITES
        .iter()
        .flat_map(|site| nginx.statuses(site.name))
        .map(|line| line.status)
        .collect();
    let hosts = SITES
        .iter()
        .map(|site| {
            let lines = nginx.statuses(site.name);
            let last = lines.iter().map(|line| line.at).fold(began_at, f64::max) - began_at;
            let count = |status| lines.iter().filter(|line| line.status == status).count();
            (site.name, last, count(429), count(503))
        })
        .collect();
    Figures {
        hosts,
        took,
        requests: logged.len(),
        too_many: logged.iter().filter(|status| **status == 429).count(),
        unavailable: logged.iter().filter(|status| **status == 503).count(),
        failed: outputs.iter().filter(|output| output.is_err()).count(),
    }
}

/// Sleeps until `at`, or until `done` (checked every 10 ms).
fn sleep_until(at: Instant, done: &AtomicBool) {
    while Instant::now() < at && !done.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn main() -> ExitCode {
    if !Nginx::available() {
        eprintln!("nginx is not installed: `apt-get install nginx-light`");
        return ExitCode::FAILURE;
    }
    let upstreams = Upstreams::start();
    let urls: usize = SITES.iter().map(|site| site.urls).sum();
    println!(
        "{} hosts, {urls} URLs, a global limit of 64; `down` is down from {:?} to {:?}",
        SITES.len(),
        DOWN.0,
        DOWN.1
    );
    // `--refused-retry-after N`: the metered hosts' 429s say `Retry-After: N`, and a third
    // crawler pauses a host on each.
    let args: Vec<String> = std::env::args().collect();
    let refused_retry_after = match args.iter().position(|arg| arg == "--refused-retry-after") {
        Some(at) => match args.get(at + 1).and_then(|secs| secs.parse().ok()) {
            Some(secs) => Some(secs),
            None => {
                eprintln!("--refused-retry-after takes a number of seconds");
                return ExitCode::FAILURE;
            }
        },
        None => None,
    };
    let mut crawlers = vec![
        ("tollgate, the README's recipe", Crawler::Recipe),
        ("told every limit", Crawler::Told),
    ];
    if let Some(secs) = refused_retry_after {
        println!("the metered hosts' 429s say `Retry-After: {secs}`");
        crawlers.push(("tollgate, a 429 pausing its host", Crawler::HostPauseOn429));
    }
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime for reqwest");
    let mut rows = Vec::new();
    for (name, crawler) in crawlers {
        let figures = crawl(crawler, refused_retry_after, &upstreams, &runtime);
        println!(
            "{name}: {:.1} s, {} requests, {} 429s ({:.2}%), {} 503s ({:.2}%), {} failed for good",
            figures.took.as_secs_f64(),
            figures.requests,
            figures.too_many,
            100.0 * figures.too_many as f64 / figures.requests as f64,
            figures.unavailable,
            100.0 * figures.unavailable as f64 / figures.requests as f64,
            figures.failed
        );
        for (host, last, too_many, unavailable) in &figures.hosts {
            println!(
                "  {host:>15}: last answer at {last:5.1} s, {too_many:4} 429s, {unavailable:4} 503s"
            );
        }
        rows.push(figures);
    }
    let ratio = rows[0].took.as_secs_f64() / rows[1].took.as_secs_f64();
    let refused = (rows[0].too_many + rows[0].unavailable) as f64 / rows[0].requests as f64;
    println!(
        "tollgate took {ratio:.2}x the told crawler's time; 429 + 503 were {:.2}% of its requests",
        100.0 * refused
    );
    ExitCode::SUCCESS
}
