//! The crawler over real sockets: a loopback HTTP/1.1 server and hyper as the client.
//!
//! Nothing is simulated on the client side: every request is a TCP connection to
//! 127.0.0.1, answered by a test server whose ports play the "hosts", each with its own
//! latency. One address refuses connections and one host answers `503` to the first request
//! for each path. The server counts concurrent connections itself, so the limits below
//! are checked from the other end of the wire.
//!
//! 1. The crawl: `--urls` URLs (round-robin over four hosts, every 10th on the flaky host,
//!    every 100th on the refusing address) through `map_async(..).per_key(..)` with a global limit and a
//!    per-host cap, `retry` on 503s. Prints pages, failures by kind, retries, and the
//!    per-host and global peaks the server saw.
//! 2. A mirror race: a slow mirror against a fast one with `race`; the fast one wins and the
//!    server sees the slow one's connection closed.
//! 3. The headline: the same `--headline` URLs fetched one by one, then bounded-concurrent,
//!    with both times and the speed-up.
//! 4. Polite crawling: `--polite` URLs over eight hosts that each allow `--rate` requests per
//!    second and answer `429` with `Retry-After` to a client that is faster, crawled with
//!    `.per_key_rate(..)` at that rate. The last line is the servers' verdict, in this form:
//!    `polite: R requests to H hosts at P/s per host: V over the rate (server-measured),
//!    X% of the allowed rate` (V counts the requests the hosts' meters refused; X is the
//!    rate each host measured, averaged, against the rate it allows).
//!
//! ```text
//! cargo run --release --example crawl_http -- [--urls N] [--global G] [--per-host P]
//!                                             [--headline N] [--polite N] [--rate R]
//! ```
//!
//! It runs under `run_sync` with the smol-world client (hyper over async-io's socket, via
//! smol-hyper); with `--features tokio` it runs again inside a tokio runtime with the
//! tokio-world client (hyper over tokio's socket, via hyper-util). The example checks its
//! own invariants and exits non-zero if one breaks.

use tollgate_testkit::{http_client, http_server, progress};

use std::collections::BTreeMap;
use std::fmt;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use http_client::{ClientError, get};
use http_server::{TestServer, achieved_rate, page_body};
use tollgate::testing::eventually;
use tollgate::{MapControl, Rate, RetryError, RetryPolicy, map_async, race, retry};

/// The healthy hosts and their latencies in milliseconds.
const HOSTS: [(&str, u64); 4] = [("alpha", 1), ("bravo", 2), ("charlie", 3), ("delta", 5)];
/// Answers `503` to the first request for each path, `200` afterwards.
const FLAKY: &str = "flaky";
const SLOW_MIRROR: &str = "slow-mirror";
const FAST_MIRROR: &str = "fast-mirror";
/// How long anything may take before the example calls it broken.
const PATIENCE: Duration = Duration::from_secs(10);

struct Settings {
    urls: usize,
    global: usize,
    per_host: usize,
    headline: usize,
    polite: usize,
    rate: u32,
}

impl Settings {
    fn parse() -> Result<Self, String> {
        let mut settings = Settings {
            urls: 1000,
            global: 16,
            per_host: 4,
            headline: 400,
            polite: 400,
            rate: 20,
        };
        let mut args = std::env::args().skip(1);
        while let Some(flag) = args.next() {
            let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
            let number: usize = value
                .parse()
                .map_err(|_| format!("{flag}: not a number: {value}"))?;
            match flag.as_str() {
                "--urls" => settings.urls = number,
                "--global" => settings.global = number,
                "--per-host" => settings.per_host = number,
                "--headline" => settings.headline = number,
                "--polite" => settings.polite = number,
                "--rate" => settings.rate = u32::try_from(number).unwrap_or(u32::MAX).max(1),
                _ => return Err(format!("unknown flag {flag}")),
            }
        }
        if settings.global == 0 || settings.per_host == 0 {
            return Err("--global and --per-host must be at least 1".to_owned());
        }
        Ok(settings)
    }
}

// --- fetching ------------------------------------------------------------------------

/// Why a fetch failed.
#[derive(Debug)]
enum FetchError {
    /// No connection, or no valid response.
    Client(ClientError),
    /// A `503`: worth retrying.
    Unavailable,
    /// Any other status but `200`.
    Status(u16),
}

impl FetchError {
    /// A short name for the failure report.
    fn kind(&self) -> &'static str {
        match self {
            Self::Client(error) if error.is_refused() => "connection refused",
            Self::Client(ClientError::Connect(_)) => "connect failed",
            Self::Client(_) => "http error",
            Self::Unavailable => "503 after every retry",
            Self::Status(_) => "unexpected status",
        }
    }
}

impl fmt::Display for FetchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Client(error) => error.fmt(f),
            Self::Unavailable => f.write_str("503 service unavailable"),
            Self::Status(status) => write!(f, "status {status}"),
        }
    }
}

/// One request: the body of a `200`, anything else an error.
async fn fetch(url: &str) -> Result<String, FetchError> {
    let page = get(url).await.map_err(FetchError::Client)?;
    match page.status {
        200 => Ok(page.body),
        503 => Err(FetchError::Unavailable),
        status => Err(FetchError::Status(status)),
    }
}

/// A URL's host, the per-host key: its authority (`127.0.0.1:PORT`).
fn host_of(url: &str) -> String {
    url.split('/').nth(2).unwrap_or_default().to_owned()
}

/// The crawler: at most `global` requests at once and `per_host` per host, 503s retried.
///
/// `attempts` counts every request made, retries included.
async fn crawl(
    urls: &[String],
    settings: &Settings,
    attempts: &AtomicUsize,
) -> Vec<Result<String, RetryError<FetchError>>> {
    map_async(
        urls.iter().map(String::as_str),
        settings.global,
        |url| async move {
            retry(|| {
                attempts.fetch_add(1, Ordering::Relaxed);
                fetch(url)
            })
            .attempts(3)
            .interval(Duration::from_millis(1))
            .attempt_timeout(PATIENCE)
            .when(|error| matches!(error, FetchError::Unavailable))
            .await
        },
    )
    .per_key(|url| host_of(url), settings.per_host)
    .await
}

// --- the three parts -----------------------------------------------------------------

fn ensure(condition: bool, invariant: impl fmt::Display) -> Result<(), String> {
    if condition {
        Ok(())
    } else {
        Err(format!("invariant broken: {invariant}"))
    }
}

fn ms(duration: Duration) -> String {
    format!("{:.0} ms", duration.as_secs_f64() * 1e3)
}

/// Part 1: the crawl with a refusing address and a flaky host.
async fn part_crawl(server: &TestServer, settings: &Settings) -> Result<(), String> {
    let mut refused = 0;
    let mut flaky = 0;
    let mut expected = BTreeMap::new();
    let urls: Vec<String> = (0..settings.urls)
        .map(|i| {
            let path = format!("/page/{i}");
            if i % 100 == 99 {
                refused += 1;
                return server.refused_url(&path);
            }
            let host = if i % 10 == 5 {
                flaky += 1;
                FLAKY
            } else {
                HOSTS[i % HOSTS.len()].0
            };
            let url = server.url(host, &path);
            expected.insert(url.clone(), page_body(host, &path));
            url
        })
        .collect();

    let attempts = AtomicUsize::new(0);
    let start = Instant::now();
    let results = crawl(&urls, settings, &attempts).await;
    let elapsed = start.elapsed();

    let mut pages = 0;
    let mut failures: BTreeMap<&str, usize> = BTreeMap::new();
    for (url, result) in urls.iter().zip(&results) {
        match result {
            Ok(body) => {
                ensure(
                    expected.get(url) == Some(body),
                    format_args!("{url} answered with its own page, not {body:?}"),
                )?;
                pages += 1;
            }
            Err(error) => {
                let kind = error.last_error().map_or("timed out", FetchError::kind);
                *failures.entry(kind).or_default() += 1;
            }
        }
    }
    let retries = attempts.load(Ordering::Relaxed) - urls.len();
    println!(
        "  crawl: {} urls, global limit {}, {} per host: {pages} pages fetched, {} failed, in {}",
        urls.len(),
        settings.global,
        settings.per_host,
        urls.len() - pages,
        ms(elapsed),
    );
    for (kind, count) in &failures {
        println!("    failed: {count} x {kind}");
    }
    let unavailable = server.stats(FLAKY).unavailable;
    println!("    retries: {retries} (the server answered {unavailable} x 503, all recovered)");
    let crawled = || HOSTS.iter().map(|(host, _)| *host).chain([FLAKY]);
    let peaks: Vec<String> = crawled()
        .map(|host| format!("{host} {}", server.stats(host).peak))
        .collect();
    let global = server.global();
    println!(
        "    server-observed peaks: {} (cap {}); global {} (limit {})",
        peaks.join(", "),
        settings.per_host,
        global.peak,
        settings.global
    );

    ensure(
        pages == urls.len() - refused,
        "every page on a live host fetched",
    )?;
    let refusals = failures.get("connection refused").copied().unwrap_or(0);
    ensure(
        refusals == refused && urls.len() - pages == refused,
        "the refused address's URLs, and only those, failed (connection refused)",
    )?;
    ensure(
        unavailable == flaky && retries == flaky,
        "one 503 per flaky path, each recovered by one retry",
    )?;
    for host in crawled() {
        let peak = server.stats(host).peak;
        ensure(
            peak <= settings.per_host,
            format_args!("host {host}: peak {peak} within the cap"),
        )?;
    }
    ensure(
        global.peak <= settings.global,
        "global peak within the limit",
    )?;
    ensure(
        global.active == 0 && global.disconnects == 0,
        "nothing left active, nobody hung up",
    )?;
    Ok(())
}

/// Part 2: ask a slow and a fast mirror; the fast one wins, the slow one is hung up on.
async fn part_race(server: &TestServer) -> Result<(), String> {
    let path = "/release.tar.gz";
    let mirrors = [server.url(SLOW_MIRROR, path), server.url(FAST_MIRROR, path)];
    let start = Instant::now();
    let body = race(mirrors.iter().map(|url| fetch(url)))
        .timeout(PATIENCE)
        .await
        .map_err(|failed| format!("mirror race failed: {failed}"))?;
    let elapsed = start.elapsed();
    let winner = if body == page_body(FAST_MIRROR, path) {
        FAST_MIRROR
    } else {
        SLOW_MIRROR
    };
    ensure(winner == FAST_MIRROR, "the fast mirror wins")?;
    eventually(PATIENCE, || {
        let slow = server.stats(SLOW_MIRROR);
        match (
            slow.connections,
            slow.disconnects,
            slow.active,
            slow.responses,
        ) {
            (1, 1, 0, 0) => Ok(()),
            _ => Err(format!("the slow mirror sees {slow:?}")),
        }
    })
    .await
    .map_err(|failed| format!("invariant broken: the loser hangs up: {failed}"))?;
    println!(
        "  mirror race: {winner} won in {}; the server saw {SLOW_MIRROR}'s connection closed \
         by the client (1 disconnect, 0 responses)",
        ms(elapsed)
    );
    Ok(())
}

/// Part 3: the same URLs one by one, then bounded-concurrent.
async fn part_headline(server: &TestServer, settings: &Settings) -> Result<(), String> {
    let urls: Vec<String> = (0..settings.headline)
        .map(|i| server.url(HOSTS[i % HOSTS.len()].0, &format!("/headline/{i}")))
        .collect();
    let check = |results: Vec<Result<String, FetchError>>| {
        let failed = results.iter().filter(|result| result.is_err()).count();
        ensure(
            failed == 0,
            format_args!("every page fetched ({failed} failed)"),
        )
    };

    server.reset_peaks();
    let start = Instant::now();
    let mut results = Vec::new();
    for url in &urls {
        results.push(fetch(url).await);
    }
    let sequential = start.elapsed();
    check(results)?;
    let sequential_peak = server.global().peak;
    ensure(
        sequential_peak <= 1,
        "one request at a time when sequential",
    )?;

    server.reset_peaks();
    let start = Instant::now();
    let results = map_async(urls.iter().map(String::as_str), settings.global, fetch)
        .per_key(|url| host_of(url), settings.per_host)
        .await;
    let concurrent = start.elapsed();
    check(results)?;
    let peak = server.global().peak;
    ensure(peak <= settings.global, "global peak within the limit")?;

    // The best any schedule could do: the busiest host at its cap, or every global slot
    // busy, whichever takes longer (connection set-up not counted).
    let latency = |i: usize| Duration::from_millis(HOSTS[i % HOSTS.len()].1);
    let per_host_work = HOSTS.iter().enumerate().map(|(h, _)| {
        (h..urls.len())
            .step_by(HOSTS.len())
            .map(latency)
            .sum::<Duration>()
    });
    let total_work: Duration = (0..urls.len()).map(latency).sum();
    let ideal = per_host_work
        .map(|work| work / settings.per_host as u32)
        .fold(total_work / settings.global as u32, Duration::max);

    println!(
        "  headline: {} urls over {} hosts: sequential {}, bounded-concurrent {} \
         (global {}, {} per host; server peak {peak}; ideal {}): {:.1}x faster",
        urls.len(),
        HOSTS.len(),
        ms(sequential),
        ms(concurrent),
        settings.global,
        settings.per_host,
        ms(ideal),
        sequential.as_secs_f64() / concurrent.as_secs_f64().max(1e-9),
    );
    ensure(
        urls.is_empty() || concurrent < sequential,
        "bounded-concurrent beats sequential",
    )?;
    Ok(())
}

/// The hosts of the polite part.
const POLITE_HOSTS: usize = 8;

/// Part 4: a crawl at the hosts' own rate, judged by the hosts.
async fn part_polite(settings: &Settings) -> Result<(), String> {
    let hosts: Vec<String> = (0..POLITE_HOSTS).map(|h| format!("polite-{h}")).collect();
    let server = hosts
        .iter()
        .fold(TestServer::builder(), |builder, host| {
            builder.host(host, Duration::from_millis(2))
        })
        .rate_limit(f64::from(settings.rate), 1)
        .start();
    let urls: Vec<String> = (0..settings.polite)
        .map(|i| server.url(&hosts[i % POLITE_HOSTS], &format!("/polite/{i}")))
        .collect();
    // A 429 would be retried after the server's Retry-After, with the whole host paused.
    let too_many = |error: &FetchError| match error {
        FetchError::Status(429) => Some(Duration::from_secs(1)),
        _ => None,
    };
    let policy = RetryPolicy::new()
        .attempts(3)
        .when(|error| matches!(error, FetchError::Status(429) | FetchError::Unavailable))
        .retry_after(too_many)
        .pause_key(too_many);
    // Its progress, read from the map's control: a bar on a terminal, a line a second
    // otherwise (the label is not `polite:`, the verdict line's prefix).
    let control = MapControl::new();
    let start = Instant::now();
    let crawl = map_async(urls.iter().map(String::as_str), settings.global, fetch)
        .per_key(|url| host_of(url), settings.per_host)
        .per_key_rate(Rate::per_second(settings.rate))
        .retry(policy)
        .control(&control);
    let (results, ()) = futures_lite::future::zip(
        crawl,
        progress::show(&control, urls.len() as u64, "polite crawl"),
    )
    .await;
    let elapsed = start.elapsed();
    let failed = results.iter().filter(|result| result.is_err()).count();
    ensure(
        failed == 0,
        format_args!("every polite page fetched ({failed} failed)"),
    )?;
    let over: usize = hosts.iter().map(|host| server.stats(host).over_rate).sum();
    let measured: Vec<f64> = hosts
        .iter()
        .filter_map(|host| achieved_rate(&server.arrival_times(host)))
        .collect();
    let share = 100.0 * measured.iter().sum::<f64>()
        / measured.len().max(1) as f64
        / f64::from(settings.rate);
    server.shutdown();
    println!("  polite crawl took {}", ms(elapsed));
    println!(
        "polite: {} requests to {POLITE_HOSTS} hosts at {}/s per host: {over} over the rate \
         (server-measured), {share:.0}% of the allowed rate",
        urls.len(),
        settings.rate,
    );
    ensure(over == 0, "no request over a host's rate")
}

/// All four parts: the first three against one fresh server (the flaky host answers 503 once
/// per path), the polite crawl against its own rate-limited hosts.
async fn run_all(world: &str, settings: &Settings) -> Result<(), String> {
    println!("[{world}]");
    let server = HOSTS
        .iter()
        .fold(TestServer::builder(), |builder, (host, ms)| {
            builder.host(host, Duration::from_millis(*ms))
        })
        .flaky_host(FLAKY, Duration::from_millis(2))
        .host(SLOW_MIRROR, Duration::from_secs(60))
        .host(FAST_MIRROR, Duration::from_millis(20))
        .start();
    part_crawl(&server, settings).await?;
    part_race(&server).await?;
    part_headline(&server, settings).await?;
    server.shutdown();
    part_polite(settings).await
}

fn main() -> ExitCode {
    let settings = match Settings::parse() {
        Ok(settings) => settings,
        Err(error) => {
            eprintln!("{error}");
            eprintln!(
                "usage: crawl_http [--urls N] [--global G] [--per-host P] [--headline N] \
                 [--polite N] [--rate R]"
            );
            return ExitCode::from(2);
        }
    };

    let outcome = tollgate::run_sync(run_all("run_sync, smol-world client", &settings));

    #[cfg(feature = "tokio")]
    let outcome = outcome.and_then(|()| {
        let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
        runtime.block_on(run_all("tokio multi-thread, tokio-world client", &settings))
    });

    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("{error}");
            ExitCode::FAILURE
        }
    }
}
