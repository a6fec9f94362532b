//! One host of the simulated internet, as an adaptive map sees it: every 10 s of virtual
//! time its limit and rate (from `MapControl::busiest_keys`), the mean latency of its
//! successful attempts, its successes per second, and what the host could take (hidden
//! from the crawler: its ideal rate). The host is the busiest of those halved at 60 s and
//! restored at 180 s.
//!
//! ```text
//! cargo run --release --features tokio --example adaptive_trace -- [--scale S] [--seed N]
//! ```
//!
//! The crawl is `examples/adaptive.rs`'s adaptive strategy (one line of settings for every
//! host), on the first seed of its table unless `--seed` says otherwise.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::Duration;

use futures_lite::StreamExt;
use futures_lite::future::zip;
use tollgate::{Adaptive, MapControl, Outcome, Rate, RetryPolicy, amap_iter};
use tollgate_testkit::simulated_internet::{Config, Response, SimulatedInternet, Url};

/// Seconds between two rows.
const EVERY: u64 = 10;

/// What one host showed in one row's span.
#[derive(Default, Clone, Copy)]
struct Row {
    limit: Option<usize>,
    rate: Option<f64>,
    latency_sum: Duration,
    successes: u32,
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut scale, mut seed) = (1.0, 0x7a61_0001_u64);
    while let Some(flag) = args.next() {
        let value = args.next().expect("a value after each flag");
        match flag.as_str() {
            "--scale" => scale = value.parse().expect("--scale: a number"),
            "--seed" => seed = value.parse().expect("--seed: a number"),
            _ => panic!("unknown argument {flag}"),
        }
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    runtime.block_on(trace(Config::scaled(seed, scale)));
}

async fn trace(config: Config) {
    let net = SimulatedInternet::new(config);
    let rows: RefCell<BTreeMap<(u32, u64), Row>> = RefCell::default();
    let start = net.start();
    let span = |at: tokio::time::Instant| (at - start).as_secs() / EVERY;
    let control = MapControl::new();
    let global = net.config().global_limit;
    let crawl = amap_iter(net.urls().to_vec(), global, |url: Url| {
        let (net, rows) = (&net, &rows);
        async move {
            let sent = tokio::time::Instant::now();
            let response = net.fetch(url).await;
            if response.is_ok() {
                let mut rows = rows.borrow_mut();
                let row = rows.entry((url.host, span(sent))).or_default();
                row.latency_sum += sent.elapsed();
                row.successes += 1;
            }
            if response.is_ok() {
                Ok(url)
            } else {
                Err((url, response))
            }
        }
    })
    .per_key(|url| url.host, 32)
    .retry(
        RetryPolicy::new()
            .attempts(5)
            .jitter(0.0)
            .when(|(_, response): &(Url, Response)| {
                matches!(
                    response,
                    Response::TooManyRequests { .. } | Response::Unavailable
                )
            })
            .retry_after(|(_, response)| response.retry_after()),
    )
    .adaptive(
        Adaptive::new(1, 32).rate_ceiling(Rate::per_second(400)),
        |output: &Result<Url, (Url, Response)>| match output {
            Ok(_) => Outcome::success(),
            Err((_, response)) if response.is_overload() => Outcome::overload(),
            Err(_) => Outcome::failure(),
        },
    )
    .control(&control);
    let done = std::cell::Cell::new(false);
    let consume = async {
        let mut crawl = std::pin::pin!(crawl);
        while let Some(output) = crawl.next().await {
            net.finished(output.unwrap_or_else(|(url, _)| url));
        }
        done.set(true);
    };
    let sample = async {
        // Each key's limit and rate, in the middle of each span (busiest_keys returns
        // what the previous call asked the map to publish).
        let _ = control.busiest_keys(usize::MAX);
        let mut at = EVERY / 2;
        while !done.get() && at < 400 {
            tokio::time::sleep_until(start + Duration::from_secs(at)).await;
            for key in control.busiest_keys(usize::MAX) {
                let mut rows = rows.borrow_mut();
                let row = rows.entry((*key.key(), at / EVERY)).or_default();
                row.limit = Some(key.limit());
                row.rate = key.rate().map(|rate| 1.0 / rate.interval().as_secs_f64());
            }
            at += EVERY;
        }
    };
    zip(consume, sample).await;
    let rows = rows.into_inner();
    let busiest = net
        .halved_hosts()
        .into_iter()
        .max_by_key(|host| net.urls().iter().filter(|url| url.host == *host).count())
        .expect("a halved host");
    let capacity = net.capacity(busiest);
    println!(
        "host {busiest}: base latency {:.0} ms, knee {}, rate {:.1}/s, ideal {:.1}/s ({:.1}/s while halved, 60-180 s)",
        capacity.base.as_secs_f64() * 1e3,
        capacity.knee,
        capacity.rate,
        capacity.ideal(false),
        capacity.ideal(true),
    );
    println!("| time (s) | limit | rate (/s) | latency (ms) | successes/s | ideal (/s) |");
    println!("| ---: | ---: | ---: | ---: | ---: | ---: |");
    for ((host, span), row) in &rows {
        if *host != busiest || *span * EVERY >= 400 {
            continue;
        }
        let t = span * EVERY;
        let latency = if row.successes > 0 {
            format!(
                "{:.0}",
                row.latency_sum.as_secs_f64() * 1e3 / f64::from(row.successes)
            )
        } else {
            "-".to_owned()
        };
        println!(
            "| {t}-{} | {} | {} | {latency} | {:.1} | {:.1} |",
            t + EVERY,
            row.limit.map_or("-".to_owned(), |limit| limit.to_string()),
            row.rate
                .map_or("none".to_owned(), |rate| format!("{rate:.1}")),
            f64::from(row.successes) / EVERY as f64,
            capacity.ideal((60..180).contains(&t)),
        );
    }
}
