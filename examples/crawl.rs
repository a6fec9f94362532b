//! The crawler on a simulated network, offline: the main demo.
//!
//! Part 1 is the crawler built by hand: 30 pages from 3 hosts plus one broken URL, a
//! global limit of 8 (`map_async`) and a cap of 2 per host (a map from host to `Bulkhead`),
//! failures collected instead of fatal, then a race of two mirrors that the fast one wins.
//!
//! Part 2 is a bulk run: by default 100,000 requests over 50 hosts with mixed latencies and
//! failures, through `map_async(..).per_key(..)` (global and per-host caps that never block
//! each other), a per-host rate the hosts themselves enforce (they answer `429` to a
//! client that is too fast), and retries on the map itself: a failed attempt gives its
//! slots back while it waits, a `Retry-After` sets its pause, and a `429` pauses the whole
//! host. It prints throughput, per-host peaks, what the hosts measured (violations of
//! their rate, the achieved rate), the server-directed pauses, failures by kind and the
//! efficiency against the ideal schedule.
//!
//! ```text
//! cargo run --release --example crawl -- [--requests N] [--hosts H] [--global G]
//!                                        [--per-host P] [--rate R] [--burst B]
//!                                        [--fail-percent F]
//!                                        [--sorted] [--window W]
//! ```
//!
//! `--rate R` is each host's limit in requests per second (0: none), with bursts of up to
//! `--burst B` requests (4 by default: a burst lets a start that came late because a timer
//! fired late be made up, so the hosts see their full rate). With `--sorted` the
//! input comes sorted by host: the map pulls further ahead while its slots idle behind
//! busy hosts, so sorted input runs about as fast as interleaved input.
//!
//! While the bulk run goes, a progress bar (rate, time left, requests in flight and
//! waiting, retries, failures, paused hosts, and the three hosts with most left with what
//! holds each: its rate, its limit, a pause, a global slot; all read from the map's
//! `MapControl`) is drawn when stdout is a terminal; otherwise a plain line is printed every
//! second.
//! Ctrl-C drains the run: no new request starts, the ones in flight finish, and the
//! example reports what was done and what never started (a second Ctrl-C aborts).
//!
//! The example checks its own invariants (pages, failures, per-host and global peaks, no
//! request over a host's rate or into its pause) and exits non-zero if one breaks.

use std::collections::{BTreeMap, HashMap};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tollgate::{Bulkhead, MapControl, Rate, RetryPolicy, map_async, race, run_sync};

use tollgate_testkit::{progress, simulated_network};

use simulated_network::{FetchError, Network, Outcome, host_of};

// --- part 1: the hand-built crawler ------------------------------------------------

const PER_HOST: usize = 2;

async fn hand_built() -> Result<(), String> {
    let network = Network::new([
        ("fast.example".to_owned(), Duration::from_millis(2)),
        ("slow.example".to_owned(), Duration::from_millis(10)),
        ("mirror-a.example".to_owned(), Duration::from_millis(20)),
    ]);
    // A map from host to bulkhead: one named bulkhead per host, 5 s acquire timeout.
    let bulkheads: HashMap<&str, Bulkhead> = ["fast.example", "slow.example", "mirror-a.example"]
        .into_iter()
        .map(|host| {
            let bulkhead = Bulkhead::new(PER_HOST)
                .acquire_timeout(Duration::from_secs(5))
                .with_name(host);
            (host, bulkhead)
        })
        .collect();
    let fetch = |url: String| {
        let network = &network;
        let bulkhead = &bulkheads[host_of(&url)];
        async move {
            let outcome = if url.contains("broken") {
                Outcome::Unreachable
            } else {
                Outcome::Ok
            };
            bulkhead
                .run(network.get(&url, outcome))
                .await
                .map_err(FetchError::NoSlot)?
        }
    };

    let mut urls: Vec<String> = (0..10)
        .flat_map(|i| {
            ["fast.example", "slow.example", "mirror-a.example"]
                .map(|host| format!("https://{host}/page/{i}"))
        })
        .collect();
    urls.push("https://fast.example/broken".to_owned());

    let results = map_async(urls.clone(), 8, fetch).await;
    let mut pages = 0;
    let mut errors = Vec::new();
    for (url, result) in urls.iter().zip(results) {
        match result {
            Ok(_) => pages += 1,
            Err(error) => errors.push(format!("{url}: {error}")),
        }
    }
    println!("fetched {pages} pages, {} failed", errors.len());
    for error in &errors {
        println!("  {error}");
    }
    ensure(pages == 30, "30 pages")?;
    ensure(
        errors.len() == 1 && errors[0].starts_with("https://fast.example/broken"),
        "one failure: the broken URL",
    )?;

    let peaks: BTreeMap<&str, usize> = bulkheads
        .iter()
        .map(|(host, bulkhead)| (*host, bulkhead.stats().peak_in_flight))
        .collect();
    println!("peak concurrency per host: {peaks:?}");
    ensure(
        peaks.values().all(|&peak| peak <= PER_HOST),
        "no host above its cap",
    )?;
    ensure(
        network.host_peaks().values().all(|&peak| peak <= PER_HOST),
        "servers agree",
    )?;
    ensure(network.peak() <= 8, "global limit held")?;

    // Ask two mirrors; the first good answer wins and the slow one is cancelled.
    let body = race((
        fetch("https://mirror-a.example/file".to_owned()),
        fetch("https://fast.example/file".to_owned()),
    ))
    .timeout(Duration::from_secs(2))
    .await
    .map_err(|failed| format!("mirror race failed: {failed}"))?;
    ensure(
        body == "<html>https://fast.example/file</html>",
        "the fast mirror wins",
    )?;
    ensure(network.in_flight() == 0, "the loser was cancelled")?;
    println!("mirror race won by the fast mirror");
    Ok(())
}

// --- part 2: the bulk run ------------------------------------------------------------

struct Settings {
    requests: usize,
    hosts: usize,
    global: usize,
    per_host: usize,
    rate: u32,
    burst: u32,
    fail_percent: u64,
    sorted: bool,
    window: Option<usize>,
}

impl Settings {
    fn parse() -> Result<Self, String> {
        let mut settings = Settings {
            requests: 100_000,
            hosts: 50,
            global: 200,
            per_host: 4,
            rate: 250,
            burst: 4,
            fail_percent: 5,
            sorted: false,
            window: None,
        };
        let mut args = std::env::args().skip(1);
        while let Some(flag) = args.next() {
            if flag == "--sorted" {
                settings.sorted = true;
                continue;
            }
            let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
            let number: u64 = value
                .parse()
                .map_err(|_| format!("{flag}: not a number: {value}"))?;
            match flag.as_str() {
                "--requests" => settings.requests = number as usize,
                "--hosts" => settings.hosts = number as usize,
                "--global" => settings.global = number as usize,
                "--per-host" => settings.per_host = number as usize,
                "--rate" => settings.rate = u32::try_from(number).unwrap_or(u32::MAX),
                "--burst" => settings.burst = u32::try_from(number).unwrap_or(u32::MAX).max(1),
                "--fail-percent" => settings.fail_percent = number.min(100),
                "--window" => settings.window = Some(number.max(1) as usize),
                _ => return Err(format!("unknown flag {flag}")),
            }
        }
        if settings.hosts == 0 || settings.global == 0 || settings.per_host == 0 {
            return Err("--hosts, --global and --per-host must be at least 1".to_owned());
        }
        Ok(settings)
    }
}

/// A cheap, deterministic hash, so every run sees the same failures.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// How long a host asks clients to stay away when it answers `429`.
const RETRY_AFTER: Duration = Duration::from_millis(300);

/// How the server answers attempt `attempt` (1-based) of request `n`: most succeed;
/// `fail_percent` fail on their first attempt (half 503, half a hang that times out) and
/// succeed on a retry; one in 2,000 first attempts gets `429` with a `Retry-After` (the
/// host is overloaded); one in a thousand is a permanent 404.
fn outcome(n: usize, attempt: usize, fail_percent: u64) -> Outcome {
    let roll = mix(n as u64) % 2000;
    if roll >= 1998 {
        Outcome::NotFound
    } else if attempt == 1 && roll == 1997 {
        Outcome::TooManyRequests(RETRY_AFTER)
    } else if attempt == 1 && roll < fail_percent * 20 {
        if roll % 2 == 0 {
            Outcome::Unavailable
        } else {
            Outcome::Hang
        }
    } else {
        Outcome::Ok
    }
}

async fn bulk(settings: &Settings) -> Result<(), String> {
    // Mixed latencies: 1 to 4 ms depending on the host.
    let latency = |h: usize| Duration::from_millis(1 + (mix(h as u64 + 7) % 4));
    let mut network =
        Network::new((0..settings.hosts).map(|h| (format!("host-{h}.example"), latency(h))));
    if settings.rate > 0 {
        // The hosts meter the same rate; a request up to 5 ms early still passes (the
        // time between a client's start and the server's reading of it varies).
        network = network.with_rate(settings.rate, settings.burst, Duration::from_millis(5));
    }
    let attempt_timeout = Duration::from_millis(50);

    let n = settings.requests;
    let hosts = settings.hosts;
    let host_of_request = |i: usize| {
        if settings.sorted {
            i * hosts / n
        } else {
            i % hosts
        }
    };
    let urls = (0..n).map(|i| {
        (
            i,
            format!("https://host-{}.example/item/{i}", host_of_request(i)),
        )
    });

    // The ideal schedule: every host busy at its cap and its rate, every global slot busy.
    let mut per_host_work = vec![Duration::ZERO; hosts];
    let mut per_host_count = vec![0u32; hosts];
    for i in 0..n {
        per_host_work[host_of_request(i)] += latency(host_of_request(i));
        per_host_count[host_of_request(i)] += 1;
    }
    let total_work: Duration = per_host_work.iter().sum();
    let by_rate = |count: u32| {
        if settings.rate == 0 {
            Duration::ZERO
        } else {
            Duration::from_secs(1) * count.saturating_sub(1) / settings.rate
        }
    };
    let ideal = per_host_work
        .iter()
        .zip(&per_host_count)
        .map(|(work, count)| (*work / settings.per_host as u32).max(by_rate(*count)))
        .max()
        .unwrap_or_default()
        .max(total_work / settings.global as u32);

    let attempts: Vec<AtomicU8> = (0..n).map(|_| AtomicU8::new(0)).collect();
    // The retry hook sees every retry; it counts the ones that paused a host.
    let hosts_paused = Arc::new(AtomicUsize::new(0));
    let paused = Arc::clone(&hosts_paused);
    // Retries on the map: a failed attempt gives back its slots while it waits; a 429
    // pauses its whole host for the server's Retry-After.
    let policy = RetryPolicy::new()
        .attempts(3)
        .interval(Duration::from_millis(1))
        .when(|error| {
            matches!(
                error,
                FetchError::Unavailable | FetchError::TimedOut | FetchError::TooManyRequests(_)
            )
        })
        .retry_after(FetchError::retry_after)
        .pause_key(FetchError::retry_after)
        .on_retry(move |event| {
            if event.key_paused().is_some() {
                paused.fetch_add(1, Ordering::Relaxed);
            }
        });
    // The run's control: the progress display reads it, Ctrl-C drains through it.
    let control = MapControl::new();
    let stop = control.clone();
    let presses = AtomicUsize::new(0);
    ctrlc::set_handler(move || {
        if presses.fetch_add(1, Ordering::SeqCst) == 0 {
            eprintln!("\nCtrl-C: draining (no new request starts; Ctrl-C again aborts)");
            stop.drain();
        } else {
            std::process::exit(130);
        }
    })
    .map_err(|error| format!("cannot install the Ctrl-C handler: {error}"))?;
    let start = Instant::now();
    let mut crawl = map_async(urls, settings.global, |(i, url)| {
        let network = &network;
        let attempt = usize::from(attempts[i].fetch_add(1, Ordering::Relaxed)) + 1;
        async move {
            let outcome = outcome(i, attempt, settings.fail_percent);
            tollgate::timeout(attempt_timeout, network.get(&url, outcome))
                .await
                .unwrap_or(Err(FetchError::TimedOut))
        }
    })
    .per_key(|(_, url)| host_of(url).to_owned(), settings.per_host);
    if settings.rate > 0 {
        crawl = crawl.per_key_rate(Rate::per_second(settings.rate).burst(settings.burst));
    }
    if let Some(window) = settings.window {
        crawl = crawl.window(window.max(settings.global));
    }
    let crawl = crawl.retry(policy).control(&control);
    let (results, ()) =
        futures_lite::future::zip(crawl, progress::show(&control, n as u64, "crawl")).await;
    let elapsed = start.elapsed();
    let progress = control.progress();

    let mut failures: BTreeMap<String, usize> = BTreeMap::new();
    let mut ok = 0;
    for result in &results {
        match result {
            Ok(_) => ok += 1,
            Err(error) => *failures.entry(error.to_string()).or_default() += 1,
        }
    }
    let retried = progress.retries();
    let peaks = network.host_peaks();
    let max_host_peak = peaks.values().copied().max().unwrap_or(0);
    let global_peak = network.peak();
    let metered = network.metered();
    let violations: usize = metered.values().map(|m| m.violations).sum();
    let pauses: usize = metered.values().map(|m| m.pauses).sum();
    let busiest_rate = metered.values().map(|m| m.rate).fold(0.0, f64::max);
    println!(
        "\n{n} requests over {hosts} hosts ({} input), global {} / per host {}{}:",
        if settings.sorted {
            "host-sorted"
        } else {
            "interleaved"
        },
        settings.global,
        settings.per_host,
        if settings.rate > 0 {
            format!(" at {}/s", settings.rate)
        } else {
            String::new()
        }
    );
    println!(
        "  {ok} ok, {} failed, {retried} retries, in {elapsed:.2?} ({:.0} requests/s)",
        results.len() - ok,
        results.len() as f64 / elapsed.as_secs_f64()
    );
    for (kind, count) in &failures {
        println!("  failed for good: {count} x {kind}");
    }
    println!("  peak in flight: {global_peak} overall, {max_host_peak} on the busiest host");
    println!(
        "  the hosts measured: {violations} requests over the rate or into a pause; \
         {pauses} pauses asked with Retry-After ({RETRY_AFTER:?} each), {} honoured by pausing \
         the whole host; fastest host {busiest_rate:.0}/s",
        hosts_paused.load(Ordering::Relaxed)
    );
    if !progress.is_draining() {
        println!(
            "  efficiency: {:.0}% of the ideal schedule ({ideal:.2?}, retries and pauses not counted)",
            100.0 * ideal.as_secs_f64() / elapsed.as_secs_f64()
        );
    }

    ensure(max_host_peak <= settings.per_host, "no host above its cap")?;
    ensure(global_peak <= settings.global, "global limit held")?;
    ensure(network.in_flight() == 0, "nothing left running")?;
    ensure(
        violations == 0,
        "no request over a host's rate or into its pause",
    )?;
    ensure(
        results.len() as u64 == progress.finished() && progress.in_flight() == 0,
        "one result per finished request, none left in flight",
    )?;
    if progress.is_draining() {
        // Drained: the started requests finished; report what never started.
        let dropped = control.not_started().len();
        let never_pulled = n - progress.pulled() as usize;
        println!(
            "  drained: {} of {n} requests done ({ok} ok, {} failed for good); never \
             started: {} ({dropped} pulled and waiting for their host, {never_pulled} \
             never pulled)",
            results.len(),
            results.len() - ok,
            dropped + never_pulled,
        );
        ensure(
            results.len() + dropped + never_pulled == n,
            "every request done or never started",
        )?;
        return Ok(());
    }
    ensure(results.len() == n, "one result per request")?;
    let not_found = (0..n)
        .filter(|&i| outcome(i, 1, 0) == Outcome::NotFound)
        .count();
    ensure(
        n - ok == not_found,
        "only the permanent 404s failed; every transient failure was retried",
    )?;
    Ok(())
}

fn ensure(condition: bool, invariant: &str) -> Result<(), String> {
    if condition {
        Ok(())
    } else {
        Err(format!("invariant broken: {invariant}"))
    }
}

fn main() -> ExitCode {
    let settings = match Settings::parse() {
        Ok(settings) => settings,
        Err(error) => {
            eprintln!("{error}");
            return ExitCode::from(2);
        }
    };
    match run_sync(async {
        hand_built().await?;
        bulk(&settings).await
    }) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("{error}");
            ExitCode::FAILURE
        }
    }
}
