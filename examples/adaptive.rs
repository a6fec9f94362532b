//! Crawl strategies on the simulated internet: 1,000 hosts with hidden capacities, 200,000
//! URLs with a Zipf skew, a global limit of 512, hosts halved at 60 s and restored at 180 s
//! (the model and the figures: `tollgate_testkit::simulated_internet`).
//!
//! ```text
//! cargo run --release --features tokio --example adaptive -- [--seeds N] [--scale S]
//!                                                            [--threads T] [--only TEXT]
//!                                                            [--tuning] [--dead-share F]
//!                                                            [--profile P] [--max-window M]
//! ```
//!
//! Each strategy crawls every URL once per seed, on a current-thread tokio runtime started
//! paused (virtual time, no wall clock), and the table shows each figure's mean over the
//! seeds and, in parentheses, its worst seed. The strategies:
//!
//! - **static L/R**: the static grid, per-key limit L ∈ {1, 2, 4, 8, 16, 32} × per-key rate
//!   R ∈ {none, 5, 20, 50, 200}/s (`.per_key(host, L).per_key_rate(Rate::per_second(R))`);
//!   then the best cell in hindsight, by mean goodput against the capped ideal, over all
//!   cells and over the cells whose mean overload stays within 1% of requests;
//! - **autothrottle**: Scrapy's AutoThrottle with its defaults: a delay per host, starting at
//!   5 s, at most 60 s, target concurrency 1, 8 requests per host at once; after each answer
//!   `new = max(latency, (delay + latency) / 2)`, clamped to [0, 60 s], and an answer other
//!   than 200 may only raise it; a timeout (an exception in Scrapy) changes nothing. The delay
//!   is the host's own rate, `MapControl::set_key_settings(host, KeySettings::new().rate(Rate::every(delay)))`, so starts
//!   are spaced by exactly the delay (Scrapy spreads each wait over U[0.5, 1.5] × delay);
//! - **adaptive**: `.adaptive(Adaptive::new(1, 32).rate_ceiling(Rate::per_second(400)), ..)`,
//!   one line of settings for every host (and, being adaptive, slots shared by slot time:
//!   `SlotPolicy::SlotTime`); 429s, 503s and timeouts are overloads; a 429 delays
//!   its own item by its `Retry-After` but does not pause the host (the map cuts the host's
//!   rate instead);
//! - **oracle**, for calibration only (a crawler is never told a host's capacity): each host
//!   its true knee as its limit (a dead host 1) and its true rate with 8 ms of slack between
//!   starts (where the meter's jitter refuses about 1%), halved and restored with the host.
//!   It shows how much of the ideal and of the capped ideal is within reach at all.
//!
//! Beside each strategy, two figures of the seed itself (the same for every strategy but
//! for which hosts were halved): the **fluid bound**, the most goodput any crawler could
//! reach with the global limit's slots and each host at its feasible rate (an upper bound),
//! and an **ordered schedule**'s, one crawl in that model that knows every host's size from
//! the start (`tollgate_testkit::simulated_internet`'s `fluid` figures).
//!
//! Every strategy reads the URLs as a lazy stream that does not say how many come (its
//! `size_hint` is `(0, None)`, as a crawler's frontier is), and shares the global limit
//! (512 × scale), the default window (`--max-window M` caps its growth at M × the global
//! limit, for the curve of goodput against it), and one retry policy: 5 attempts, 429s and 503s retried (a 429 after its `Retry-After`, pausing its host
//! that long; a 503 after a backoff from 100 ms, doubling, without jitter so runs repeat),
//! timeouts not retried (a dead host is given up at its first timeout per URL).
//!
//! A strategy is one `async fn(&SimulatedInternet)` that crawls `net.urls()` and reports each
//! URL [`finished`](SimulatedInternet::finished) as its output comes ([`consume`] does), plus
//! one line in [`strategies`].
//!
//! The seeds of the table ([`SEEDS`]) are not used while tuning: tune and test on others
//! (the tests use 1, 2 and 3). `--seeds N` runs the first N of them, `--scale S` scales the
//! hosts, URLs, global limit and halved hosts (0.1: 100 hosts, 20,000 URLs, limit 51),
//! `--threads T` runs T runs at once (2 by default), `--only TEXT` the strategies whose name
//! contains TEXT, `--tuning` the seeds tuning uses (1, 2, 3) instead of the table's, `--dead-share F` makes that
//! share of the hosts dead instead of 5% (the same hosts otherwise: `0` shows what the dead
//! hosts cost the others), `--profile P` the hosts of another profile: `slow-hosts` (base
//! latency 0.1-1 s, knees 1-8, rates 1-20/s) or `few-urls` (a tenth of the URLs: 20,000 over
//! 1,000 hosts), `default` otherwise.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures_lite::{Stream, StreamExt};
use tollgate::futures::MapUnordered;
use tollgate::{Adaptive, BoundedStreamExt, KeySettings, MapControl, Outcome, Rate, RetryPolicy};
use tollgate_testkit::simulated_internet::{
    CURVE_BUCKET_SECS, CURVE_BUCKETS, Config, HALVE_AT, Profile, RESTORE_AT, Report, Response,
    Restore, SimulatedInternet, Summary, Url, restore_quantile,
};

/// The seeds tuning uses (`--tuning`; the tests use them too).
const TUNING_SEEDS: [u64; 3] = [1, 2, 3];

/// The seeds of the table, never used while tuning.
const SEEDS: [u64; 5] = [
    0x7a61_0001,
    0x7a61_0002,
    0x7a61_0003,
    0x7a61_0004,
    0x7a61_0005,
];

/// The max window of every strategy's map, in multiples of the global limit (0: the
/// default); `--max-window` sets it.
static MAX_WINDOW: AtomicUsize = AtomicUsize::new(0);

/// The URLs as a crawler's frontier: a lazy stream that does not say how many come.
struct Frontier<'a>(std::slice::Iter<'a, Url>);

impl Stream for Frontier<'_> {
    type Item = Url;

    fn poll_next(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Url>> {
        Poll::Ready(self.0.next().copied())
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, None)
    }
}

/// The bounded map every strategy starts from: `net`'s URLs as a [`Frontier`], `f` on each,
/// at most the global limit at once, outputs as they come.
fn crawl_map<'a, F, Fut>(net: &'a SimulatedInternet, f: F) -> MapUnordered<Frontier<'a>, F, Fut>
where
    F: FnMut(Url) -> Fut,
    Fut: Future,
{
    Frontier(net.urls().iter()).map_unordered(net.config().global_limit, f)
}

/// `--max-window`'s cap on the window's growth, if given.
fn max_window(net: &SimulatedInternet) -> Option<usize> {
    match MAX_WINDOW.load(Ordering::Relaxed) {
        0 => None,
        m => Some(m * net.config().global_limit),
    }
}

/// A crawl of one simulated internet, to its end.
type Crawl = Box<
    dyn for<'a> Fn(&'a SimulatedInternet) -> Pin<Box<dyn Future<Output = ()> + 'a>> + Send + Sync,
>;

/// A named crawl strategy.
struct Strategy {
    name: String,
    crawl: Crawl,
}

impl Strategy {
    fn new(
        name: impl Into<String>,
        crawl: impl for<'a> Fn(&'a SimulatedInternet) -> Pin<Box<dyn Future<Output = ()> + 'a>>
        + Send
        + Sync
        + 'static,
    ) -> Self {
        Self {
            name: name.into(),
            crawl: Box::new(crawl),
        }
    }
}

/// Every strategy, in the table's order.
fn strategies() -> Vec<Strategy> {
    let mut list = Vec::new();
    for limit in [1, 2, 4, 8, 16, 32] {
        for rate in [None, Some(5), Some(20), Some(50), Some(200)] {
            let name = format!(
                "static {limit}/{}",
                rate.map_or("none".to_owned(), |r| r.to_string())
            );
            list.push(Strategy::new(name, move |net| {
                Box::pin(static_cell(net, limit, rate))
            }));
        }
    }
    list.push(Strategy::new("autothrottle", |net| {
        Box::pin(autothrottle(net))
    }));
    // Calibration, last: not a strategy a crawler can follow.
    list.push(Strategy::new("oracle", |net| Box::pin(oracle(net))));
    list.push(Strategy::new("adaptive", |net| Box::pin(adaptive(net))));
    list
}

/// A failed attempt: the URL and the host's answer.
#[derive(Debug, Clone, Copy)]
struct Failed {
    url: Url,
    response: Response,
}

/// One attempt at `url`, as a crawler's result.
async fn attempt(net: &SimulatedInternet, url: Url) -> Result<Url, Failed> {
    match net.fetch(url).await {
        Response::Ok => Ok(url),
        response => Err(Failed { url, response }),
    }
}

/// The retry policy every strategy shares (see the module docs).
fn retry_policy() -> RetryPolicy<Url, Failed> {
    RetryPolicy::new()
        .attempts(5)
        .jitter(0.0)
        .when(|failed: &Failed| {
            matches!(
                failed.response,
                Response::TooManyRequests { .. } | Response::Unavailable
            )
        })
        .retry_after(|failed| failed.response.retry_after())
        .pause_key(|failed| failed.response.retry_after())
}

/// Reports each URL finished as its output comes, to the end of the crawl.
async fn consume(net: &SimulatedInternet, outputs: impl Stream<Item = Result<Url, Failed>>) {
    let mut outputs = std::pin::pin!(outputs);
    while let Some(output) = outputs.next().await {
        net.finished(output.unwrap_or_else(|failed| failed.url));
    }
}

fn host(url: &Url) -> u32 {
    url.host
}

/// A cell of the static grid.
async fn static_cell(net: &SimulatedInternet, limit: usize, rate: Option<u32>) {
    let mut map = crawl_map(net, |url| attempt(net, url)).per_key(host, limit);
    if let Some(max) = max_window(net) {
        map = map.max_window(max);
    }
    if let Some(rate) = rate {
        map = map.per_key_rate(Rate::per_second(rate));
    }
    consume(net, map.retry(retry_policy())).await;
}

/// The adaptive map: one line of settings for every host (1 to 32 at a time, at most
/// 400 starts a second), each host finding its own limit and rate from its answers.
async fn adaptive(net: &SimulatedInternet) {
    let mut map = crawl_map(net, |url| attempt(net, url)).per_key(host, 32);
    if let Some(max) = max_window(net) {
        map = map.max_window(max);
    }
    let map = map.retry(retry_policy().pause_key(|_| None)).adaptive(
        Adaptive::new(1, 32).rate_ceiling(Rate::per_second(400)),
        classify,
    );
    consume(net, map).await;
}

/// What an answer says to the adaptive map: 429, 503 and timeouts are overloads.
fn classify(output: &Result<Url, Failed>) -> Outcome {
    match output {
        Ok(_) => Outcome::success(),
        Err(failed) => match failed.response {
            Response::Ok => Outcome::success(),
            Response::TooManyRequests { .. } | Response::Unavailable | Response::TimedOut => {
                Outcome::overload()
            }
        },
    }
}

/// Scrapy's AutoThrottle defaults.
const START_DELAY: f64 = 5.0;
const MAX_DELAY: f64 = 60.0;
const MIN_DELAY: f64 = 0.0;
const TARGET_CONCURRENCY: f64 = 1.0;
const PER_HOST: usize = 8;

/// AutoThrottle: a delay per host, as the host's own rate.
async fn autothrottle(net: &SimulatedInternet) {
    let control = MapControl::new();
    let delays = RefCell::new(vec![START_DELAY; net.config().hosts]);
    let adjust = |url: Url, latency: f64, response: Response| {
        let mut delays = delays.borrow_mut();
        let delay = &mut delays[url.host as usize];
        let target = latency / TARGET_CONCURRENCY;
        let new = target
            .max((*delay + target) / 2.0)
            .clamp(MIN_DELAY, MAX_DELAY);
        if (response != Response::Ok && new <= *delay) || new == *delay {
            return;
        }
        *delay = new;
        let every = Duration::from_secs_f64(new).max(Duration::from_nanos(1));
        control
            .set_key_settings(url.host, KeySettings::new().rate(Rate::every(every)))
            .expect("the control is attached to the map");
    };
    let mut map = crawl_map(net, |url| {
        let adjust = &adjust;
        async move {
            let sent = tokio::time::Instant::now();
            let response = net.fetch(url).await;
            if response != Response::TimedOut {
                adjust(url, sent.elapsed().as_secs_f64(), response);
            }
            match response {
                Response::Ok => Ok(url),
                response => Err(Failed { url, response }),
            }
        }
    })
    .per_key(host, PER_HOST)
    .per_key_rate(Rate::every(Duration::from_secs_f64(START_DELAY)));
    if let Some(max) = max_window(net) {
        map = map.max_window(max);
    }
    consume(net, map.control(&control).retry(retry_policy())).await;
}

/// How much later than its rate's interval the oracle sends to a host: with the meter's
/// Exp(2 ms) jitter, a request sent `d` after the interval is refused with probability
/// `0.5 × exp(−d / 2 ms)`: 1% at `d = 2 ms × ln 50 ≈ 7.8 ms`.
const ORACLE_SLACK: Duration = Duration::from_millis(8);

/// The oracle: each host its true knee as its limit (a dead host 1) and its true rate,
/// `ORACLE_SLACK` apart, halved and restored with the host. Not a strategy (a crawler is never told a host's
/// capacity): it shows how much of the ideal is within reach.
async fn oracle(net: &SimulatedInternet) {
    let control = MapControl::new();
    let mut map = crawl_map(net, |url| attempt(net, url)).per_key(host, 1);
    if let Some(max) = max_window(net) {
        map = map.max_window(max);
    }
    let map = map.control(&control).retry(retry_policy());
    let set = |host: u32, halved: bool| {
        let capacity = net.capacity(host);
        let (knee, rate) = capacity.values(halved);
        // A dead host holds one slot.
        let knee = if capacity.dead { 1 } else { knee };
        let every = Duration::from_secs_f64(1.0 / rate) + ORACLE_SLACK;
        let settings = KeySettings::new()
            .limit(knee as usize)
            .rate(Rate::every(every));
        control.set_key_settings(host, settings).expect("attached");
    };
    for host in 0..net.config().hosts as u32 {
        set(host, false);
    }
    let steer = async {
        // At the halving and the restore (`halved_hosts` applies them when due).
        let start = net.start();
        tokio::time::sleep_until(start + HALVE_AT).await;
        for &host in &net.halved_hosts() {
            set(host, true);
        }
        tokio::time::sleep_until(start + RESTORE_AT).await;
        for &host in &net.halved_hosts() {
            set(host, false);
        }
        std::future::pending::<()>().await;
    };
    futures_lite::future::or(consume(net, map), steer).await;
}

/// One run of `strategy` on `config`, on a paused current-thread runtime of its own.
fn run(strategy: &Strategy, config: Config) -> Report {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    runtime.block_on(async {
        let net = SimulatedInternet::new(config);
        (strategy.crawl)(&net).await;
        net.report()
    })
}

struct Args {
    seeds: usize,
    scale: f64,
    threads: usize,
    only: Option<String>,
    tuning: bool,
    dead_share: Option<f64>,
    profile: Profile,
    max_window: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        seeds: SEEDS.len(),
        scale: 1.0,
        threads: 2,
        only: None,
        tuning: false,
        dead_share: None,
        profile: Profile::Default,
        max_window: 0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--seeds" => args.seeds = value()?.parse().map_err(|e| format!("--seeds: {e}"))?,
            "--scale" => args.scale = value()?.parse().map_err(|e| format!("--scale: {e}"))?,
            "--threads" => {
                args.threads = value()?.parse().map_err(|e| format!("--threads: {e}"))?
            }
            "--only" => args.only = Some(value()?),
            "--tuning" => args.tuning = true,
            "--profile" => {
                let name = value()?;
                args.profile = Profile::named(&name).ok_or(format!(
                    "--profile: {name:?} is none of default, slow-hosts, few-urls"
                ))?;
            }
            "--max-window" => {
                args.max_window = value()?.parse().map_err(|e| format!("--max-window: {e}"))?;
                if args.max_window == 0 {
                    return Err("--max-window must be at least 1".to_owned());
                }
            }
            "--dead-share" => {
                args.dead_share = Some(value()?.parse().map_err(|e| format!("--dead-share: {e}"))?)
            }
            _ => return Err(format!("unknown argument {flag}")),
        }
    }
    if !(1..=SEEDS.len()).contains(&args.seeds) {
        return Err(format!("--seeds must be within 1..={}", SEEDS.len()));
    }
    if args.scale <= 0.0 || args.threads == 0 {
        return Err("--scale must be positive and --threads at least 1".to_owned());
    }
    Ok(args)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(error) => {
            eprintln!("{error}");
            return ExitCode::FAILURE;
        }
    };
    MAX_WINDOW.store(args.max_window, Ordering::Relaxed);
    let strategies: Vec<Strategy> = strategies()
        .into_iter()
        .filter(|s| {
            args.only
                .as_ref()
                .is_none_or(|only| s.name.contains(only.as_str()))
        })
        .collect();
    let (seeds, which) = if args.tuning {
        (
            &TUNING_SEEDS[..args.seeds.min(TUNING_SEEDS.len())],
            "tuning seeds",
        )
    } else {
        (&SEEDS[..args.seeds], "not used while tuning")
    };
    let config = Config::scaled(0, args.scale).with_profile(args.profile);
    println!(
        "simulated internet ({:?} profile): {} hosts, {} URLs, global limit {}, {} hosts halved at 60 s and restored at 180 s, max window {}; seeds {seeds:x?} ({which})",
        args.profile,
        config.hosts,
        config.urls,
        config.global_limit,
        config.halved,
        match args.max_window {
            0 => "the default (1024 × the global limit)".to_owned(),
            m => format!("{m} × the global limit"),
        },
    );

    // Every (strategy, seed) run, on `threads` threads; results land in their own place,
    // so the table does not depend on which thread ran what.
    let jobs: Vec<(usize, u64)> = (0..strategies.len())
        .flat_map(|s| seeds.iter().map(move |&seed| (s, seed)))
        .collect();
    let results: Mutex<Vec<Option<Report>>> = Mutex::new(vec![None; jobs.len()]);
    let next = AtomicUsize::new(0);
    let wall = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..args.threads.min(jobs.len()) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&(s, seed)) = jobs.get(i) else { break };
                    let started = Instant::now();
                    let mut config = Config::scaled(seed, args.scale).with_profile(args.profile);
                    config.dead_share = args.dead_share.unwrap_or(config.dead_share);
                    let report = run(&strategies[s], config);
                    eprintln!(
                        "[{:>3}/{}] {:<16} seed {seed:x}: {report}  ({:.1} s)",
                        i + 1,
                        jobs.len(),
                        strategies[s].name,
                        started.elapsed().as_secs_f64()
                    );
                    results.lock().unwrap()[i] = Some(report);
                }
            });
        }
    });
    let wall = wall.elapsed();
    let mut results = results.into_inner().unwrap().into_iter();
    let summaries: Vec<(&str, Summary)> = strategies
        .iter()
        .map(|s| {
            let reports = results
                .by_ref()
                .take(seeds.len())
                .map(Option::unwrap)
                .collect();
            (s.name.as_str(), Summary::new(reports))
        })
        .collect();

    println!("{:<24} {}", "strategy", Report::SUMMARY_HEADER);
    for (name, summary) in &summaries {
        println!("{name:<24} {summary}");
    }
    for (strategy, summary) in &summaries {
        println!(
            "{:<24} overload {:.2}%: 429s {:.2}%, 503s {:.2}%; per {CURVE_BUCKET_SECS} s: {}",
            strategy,
            summary.mean(|r| r.overload) * 100.0,
            summary.mean(|r| r.too_many) * 100.0,
            summary.mean(|r| r.overload - r.too_many) * 100.0,
            (0..CURVE_BUCKETS)
                .map(|b| format!("{:.1}", summary.mean(|r| r.overload_curve[b]) * 100.0))
                .collect::<Vec<_>>()
                .join(" "),
        );
    }
    let capped = |s: &Summary| s.mean(|r| r.capped_goodput);
    let best = |within: f64| {
        summaries
            .iter()
            .filter(|(name, s)| name.starts_with("static") && s.mean(|r| r.overload) <= within)
            // The first of equal cells (1/none, 1/50 and 1/200 run alike: the rate never binds).
            .reduce(|best, cell| {
                if capped(&cell.1) > capped(&best.1) {
                    cell
                } else {
                    best
                }
            })
    };
    for (label, within) in [
        ("best static", f64::INFINITY),
        ("best static ≤1% overload", 0.01),
    ] {
        match best(within) {
            Some((name, summary)) => println!("{label:<24} {summary}   = {name}"),
            None if summaries.iter().any(|(name, _)| name.starts_with("static")) => {
                println!("{label:<24} none of the cells")
            }
            None => {}
        }
    }
    println!(
        "{} runs in {:.0} s of wall time on {} threads",
        jobs.len(),
        wall.as_secs_f64(),
        args.threads
    );
    if let Some((_, adaptive)) = summaries.iter().find(|(name, _)| *name == "adaptive") {
        // Settled: both the overload under 1% and the goodput at 90% of the halved ideal.
        let settled: Vec<f64> = adaptive
            .reports()
            .iter()
            .filter_map(|r| Some(r.halved_overload_settled?.max(r.halved_goodput_settled?)))
            .collect();
        let settled = if settled.len() == adaptive.reports().len() {
            format!("{:.1}", settled.iter().sum::<f64>() / settled.len() as f64)
        } else {
            "never".to_owned()
        };
        // Every seed's restored hosts pooled (a host whose work ended first is censored).
        let restore: Vec<Restore> = adaptive
            .reports()
            .iter()
            .flat_map(|r| r.host_restore.iter().copied())
            .collect();
        let quantile = |q: f64| {
            restore_quantile(&restore, q).map_or("never".to_owned(), |s| format!("{s:.0} s"))
        };
        let ended = restore.iter().filter(|r| !r.reached).count();
        println!(
            "adaptive: goodput {:.1}% of the ideal, overload responses {:.2}% of requests (worst seed {:.2}%), halved hosts settled in {settled} s, restored hosts back at 90% of their pace in {} (p90 {}; {} hosts, {ended} not back when their work ended)",
            adaptive.mean(|r| r.goodput) * 100.0,
            adaptive.mean(|r| r.overload) * 100.0,
            adaptive.max(|r| r.overload) * 100.0,
            quantile(0.5),
            quantile(0.9),
            restore.len(),
        );
    }
    ExitCode::SUCCESS
}
