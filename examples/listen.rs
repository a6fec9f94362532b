//! Listening to the server, with reqwest: a crawl that reads every response with
//! `tollgate::http::outcome` and keeps a circuit breaker per host.
//!
//! The hosts are the loopback test server's, started in this process (plain HTTP on
//! 127.0.0.1, so reqwest needs no TLS):
//!
//! - `told` meters itself at 10 requests a second and says so on each answer
//!   (`RateLimit-Policy: "default";q=10;w=1` and `RateLimit` with what its meter has left);
//! - `one-at-a-time` says `RateLimit-Policy: "conc";q=1;qu="concurrent-requests"`;
//! - `plain` says nothing;
//! - `down` answers 503 to everything from 0.3 s to 1.2 s after the start.
//!
//! The map is given a limit of 4 per host and no rate: what each host gets beyond that, it
//! gets from what its server said. Items come from a lazy input, one every 4 ms. At the end
//! it prints, per host, what the server said and what the map did (measured at the server:
//! arrivals a second, peak in flight, refusals; and the items its breaker refused).
//!
//! ```text
//! cargo run --example listen --features http
//! ```
//!
//! It checks its own claims and exits non-zero if one breaks.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures::StreamExt;
use tollgate::{BoundedStreamExt, Breaker, MapControl, Rate};
use tollgate_testkit::http_server::{TestServer, achieved_rate};

#[path = "common/fetch.rs"]
mod fetch;

use fetch::{Answer, Failure, classify, fetch};

const TOLD: &str = "told";
const ONE: &str = "one-at-a-time";
const PLAIN: &str = "plain";
const DOWN: &str = "down";
/// Items per host, in this order of interleaving.
const ITEMS: [(&str, usize); 4] = [(TOLD, 16), (ONE, 80), (PLAIN, 200), (DOWN, 100)];
const EVERY: Duration = Duration::from_millis(4);
const DOWN_FROM: Duration = Duration::from_millis(300);
const DOWN_UNTIL: Duration = Duration::from_millis(1200);

/// The limit and the rate the map had in force for a host the last time it was looked at.
#[derive(Default, Clone, Copy)]
struct InForce {
    limit: usize,
    rate: Option<Rate>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let latency = Duration::from_millis(10);
    let server = TestServer::builder()
        .host(TOLD, latency)
        .host_rate_limit(TOLD, 10.0, 4)
        .rate_limit_fields(TOLD)
        .host(ONE, latency)
        .host(PLAIN, latency)
        .host(DOWN, latency)
        .start();
    server.set_fields(
        ONE,
        &[r#"RateLimit-Policy: "conc";q=1;qu="concurrent-requests""#],
    );
    let name_of: BTreeMap<String, &str> = ITEMS
        .iter()
        .map(|(host, _)| (server.addr(host).to_string(), *host))
        .collect();

    // The URLs interleaved: each host's items spread evenly over the input.
    let mut urls: Vec<(f64, String)> = ITEMS
        .iter()
        .flat_map(|&(host, n)| {
            let server = &server;
            (0..n).map(move |i| (i as f64 / n as f64, server.url(host, &format!("/{i}"))))
        })
        .collect();
    urls.sort_by(|a, b| a.0.total_cmp(&b.0));

    let client = reqwest::Client::new();
    let control = MapControl::new();
    let started = Instant::now();
    let input =
        futures::stream::iter(urls.into_iter().enumerate()).then(|(k, (_, url))| async move {
            tokio::time::sleep_until((started + EVERY * k as u32).into()).await;
            url
        });
    let crawl = input
        .map_unordered(16, |url: String| {
            let client = &client;
            async move { fetch(client, &url).await }
        })
        .per_key(|url: &String| fetch::authority(url), 4)
        .classify(classify)
        .breaker(
            Breaker::new()
                .min_attempts(4)
                .over_last(4)
                .open_for(Duration::from_millis(300)),
        )
        .control(&control)
        .collect::<Vec<Answer>>();

    // Beside the crawl: the failing host goes down and comes back, and what the map has in
    // force per host is looked at every 50 ms.
    let in_force = Mutex::new(BTreeMap::<String, InForce>::new());
    let beside = async {
        let mut down = false;
        loop {
            let elapsed = started.elapsed();
            if !down && elapsed >= DOWN_FROM {
                server.set_unavailable(DOWN, true);
                down = true;
            }
            if elapsed >= DOWN_UNTIL {
                server.set_unavailable(DOWN, false);
            }
            for key in control.busiest_keys(8) {
                let seen = InForce {
                    limit: key.limit(),
                    rate: key.rate(),
                };
                in_force.lock().unwrap().insert(key.key().clone(), seen);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let answers = tokio::select! {
        answers = crawl => answers,
        () = beside => unreachable!("looks until the crawl ends"),
    };
    let took = started.elapsed();

    // Per host: what the server said (the client's view), and what its breaker refused.
    let mut said: BTreeMap<&str, String> = BTreeMap::new();
    let mut refused: BTreeMap<&str, usize> = BTreeMap::new();
    let mut opens: BTreeMap<&str, usize> = BTreeMap::new();
    let mut last_refused: BTreeMap<&str, bool> = BTreeMap::new();
    for answer in &answers {
        if let Ok(reply) | Err(Failure::Status(reply)) = answer {
            let host = name_of[&reply.authority];
            let policy = ["ratelimit-policy", "ratelimit"]
                .iter()
                .filter_map(|name| reply.headers.get(*name))
                .filter_map(|value| value.to_str().ok())
                .collect::<Vec<_>>()
                .join("; ");
            if !policy.is_empty() {
                said.insert(host, policy);
            }
            last_refused.insert(host, false);
        }
        if let Err(Failure::Open(open)) = answer {
            let key = open.key().unwrap_or_default().trim_matches('"');
            let host = name_of[key];
            *refused.entry(host).or_default() += 1;
            if !last_refused.insert(host, true).unwrap_or(false) {
                *opens.entry(host).or_default() += 1;
            }
        }
    }

    println!(
        "{} items in {took:.2?}, a limit of 4 per host and no rate given",
        answers.len()
    );
    let in_force = in_force.into_inner().unwrap();
    let mut broken = Vec::new();
    for (host, _) in ITEMS {
        let stats = server.stats(host);
        let rate = achieved_rate(&server.arrival_times(host)).unwrap_or(0.0);
        let seen = in_force
            .get(&server.addr(host).to_string())
            .copied()
            .unwrap_or_default();
        println!("{host}:");
        println!(
            "  the server said: {}; answered {} x 200, {} x 429, {} x 503",
            said.get(host)
                .map_or("nothing about its rate", String::as_str),
            stats.ok,
            stats.too_many,
            stats.unavailable
        );
        println!(
            "  the map: {rate:.1} arrivals/s, peak {} in flight, limit {} and rate {} in force; the breaker opened {} time(s) and refused {} item(s)",
            stats.peak,
            seen.limit,
            seen.rate.map_or("none".to_owned(), |rate| format!(
                "{:.1}/s",
                1.0 / rate.interval().as_secs_f64()
            )),
            opens.get(host).copied().unwrap_or(0),
            refused.get(host).copied().unwrap_or(0),
        );
        match host {
            TOLD if stats.too_many > 0 || rate > 11.0 => broken.push("told: over its rate"),
            ONE if stats.peak > 1 => broken.push("one-at-a-time: more than one at once"),
            PLAIN if rate < 50.0 => broken.push("plain: slower than the map's settings"),
            DOWN if !opens.contains_key(host) => broken.push("down: its breaker never opened"),
            _ => {}
        }
    }
    if broken.is_empty() {
        ExitCode::SUCCESS
    } else {
        eprintln!("broken: {}", broken.join("; "));
        ExitCode::FAILURE
    }
}
