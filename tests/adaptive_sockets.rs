//! Adaptive maps against a server whose rate the crawler is not told: a strict meter with no
//! allowance at all (a request a nanosecond early is refused with `429` and `Retry-After:
//! 1`), each host at 40/s, the client's rate ceiling 3× that, and the server halving every
//! host's rate in the middle of the run.
//!
//! How well the map adapts (how few requests are refused, how close to the ideal time it
//! finishes) depends on the machine's speed against real sockets: a busy machine bunches
//! requests on their way to the server, and a strict meter refuses a bunched request even
//! below its rate. So it is proven on **virtual time** (`virtual_time!`: run_virtual and
//! tokio's paused clock) against an in-process model of the same server (the testkit's
//! `RateMeter`, a timer for the work), where the figures are exact.
//!
//! Against the real server on loopback (under smol, `run_sync` and tokio, current and
//! multi-thread) the test asserts only what holds at any speed, measured at the server:
//! every page served once, never more than the per-host and global limits in flight, no
//! more arrivals at a host in any window of 1 s or more than the client's rate ceiling
//! allows. The refused share and the time against the ideal are printed (`--nocapture`).

mod common;
use tollgate_testkit::{http_client, http_server};

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::time::{Duration, Instant};

use common::{matrix, virtual_time};
use http_client::{ClientError, get_ok};
use http_server::{RateMeter, TestServer, max_in_window, window_limit};
use tollgate::{Adaptive, Outcome, Rate, RetryPolicy, map_async, sleep, testing};

/// At most two real-socket crawls at a time: each takes a tenth of a core (its server
/// included), and four at once on two cores would only slow each other.
static TWO_AT_A_TIME: smol::lock::Semaphore = smol::lock::Semaphore::new(2);

const HOSTS: usize = 4;
const PAGES: usize = 400;
/// The server's rate per host, halved once half the pages are done.
const RATE: f64 = 40.0;
/// The client's per-host limit and its map's global one.
const PER_HOST: usize = 8;
const GLOBAL: usize = 64;
/// The windows the server's arrivals are counted in.
const WINDOWS: [Duration; 3] = [
    Duration::from_secs(1),
    Duration::from_secs(2),
    Duration::from_secs(5),
];

fn adaptive() -> Adaptive {
    Adaptive::new(1, PER_HOST).max_rate(Rate::per_second(3 * RATE as u32))
}

/// The ideal time: half the pages at the full rate, half at the halved one.
fn ideal() -> Duration {
    Duration::from_secs_f64((PAGES / 2) as f64 / RATE + (PAGES / 2) as f64 / (RATE / 2.0))
}

/// The most arrivals at one host in any window of `WINDOWS`, against what the client's
/// rate ceiling (3× the server's rate, burst 1) lets through: (window, most, allowed).
fn busiest_windows(arrivals: &[Vec<Instant>]) -> Vec<(Duration, usize, usize)> {
    WINDOWS
        .iter()
        .map(|&window| {
            let most = arrivals
                .iter()
                .map(|times| max_in_window(times, window))
                .max()
                .unwrap_or(0);
            (window, most, window_limit(3.0 * RATE, 1, window))
        })
        .collect()
}

fn host_of(url: &String) -> String {
    #![allow(clippy::ptr_arg)] // the key function takes the item by reference
    url.split('/').nth(2).unwrap_or_default().to_owned()
}

fn classify(output: &Result<String, ClientError>) -> Outcome {
    match output {
        Ok(_) => Outcome::success(),
        Err(error) if matches!(error.status(), Some(429 | 503)) => Outcome::overload(),
        Err(_) => Outcome::failure(),
    }
}

matrix! {
    async fn an_adaptive_map_against_a_strict_server_keeps_its_limits_at_any_speed() {
        let _turn = TWO_AT_A_TIME.acquire().await;
        let server = (0..HOSTS)
            .fold(TestServer::builder(), |builder, host| {
                builder.host(&format!("h{host}"), Duration::from_millis(2))
            })
            .rate_limit(RATE, 1)
            .rate_allowance(Duration::ZERO)
            .start();
        let urls: Vec<String> = (0..HOSTS * PAGES)
            .map(|i| server.url(&format!("h{}", i % HOSTS), &format!("/{i}")))
            .collect();
        let done = AtomicUsize::new(0);
        let started = Instant::now();
        let pages = map_async(urls, GLOBAL, |url| {
            let (server, done) = (&server, &done);
            async move {
                let page = get_ok(&url).await;
                if page.is_ok() && done.fetch_add(1, SeqCst) + 1 == HOSTS * PAGES / 2 {
                    for host in server.hosts() {
                        server.set_host_rate(host, RATE / 2.0);
                    }
                }
                page
            }
        })
        .per_key(host_of, PER_HOST)
        .retry(
            RetryPolicy::new()
                .attempts(50)
                .when(|error: &ClientError| error.status() == Some(429))
                .retry_after(ClientError::retry_after),
        )
        .adaptive(adaptive(), classify)
        .await;
        let time = started.elapsed();
        let hosts: Vec<String> = server.hosts().map(str::to_owned).collect();
        let stats: Vec<_> = hosts.iter().map(|host| server.stats(host)).collect();
        let arrivals: Vec<Vec<Instant>> =
            hosts.iter().map(|host| server.arrival_times(host)).collect();
        let global = server.global();
        server.shutdown();
        let refused = global.too_many as f64 / global.requests as f64;
        let windows = busiest_windows(&arrivals);
        // Figures only: both depend on how promptly a busy machine moves requests.
        eprintln!(
            "figure: adaptive vs a strict meter at {RATE}/s per host, halved halfway (real \
             sockets): {} requests, {} refused, refused share {:.2}%, time / ideal {:.2}x ({time:?} for \
             {:?}); busiest windows (window, arrivals, allowed) {windows:?}",
            global.requests,
            global.too_many,
            refused * 100.0,
            time.as_secs_f64() / ideal().as_secs_f64(),
            ideal()
        );
        // Nothing lost: every page served, each once, and every request answered.
        assert!(pages.iter().all(Result::is_ok));
        assert_eq!(global.ok, HOSTS * PAGES, "every page served once");
        assert_eq!(global.responses, global.requests, "every request answered");
        // Never above the limits in flight, as the server saw it.
        for (host, stats) in hosts.iter().zip(&stats) {
            assert!(stats.peak <= PER_HOST, "{host}: {} in flight", stats.peak);
        }
        assert!(global.peak <= GLOBAL, "{} in flight in all", global.peak);
        // No host saw more than the client's rate ceiling lets through in any window.
        for (window, most, allowed) in windows {
            assert!(most <= allowed, "{most} arrivals in {window:?}, {allowed} allowed");
        }
    }
}

/// Why the model refused a request: its meter's `429`, with a `Retry-After` of 1 s.
#[derive(Debug)]
struct Refused;

/// One host of the model, as its server sees it.
struct ModelHost {
    meter: RateMeter,
    running: usize,
    peak: usize,
    arrivals: Vec<Instant>,
    /// The arrivals the meter refused.
    refused: Vec<Instant>,
    served: usize,
}

/// The in-process server: each host a strict meter at `RATE` (no allowance, burst 1) and
/// 2 ms of work per served request, on tollgate's clock.
struct Model {
    hosts: Vec<Mutex<ModelHost>>,
}

impl Model {
    fn new() -> Self {
        let host = || ModelHost {
            meter: RateMeter::new(RATE, 1, Duration::ZERO),
            running: 0,
            peak: 0,
            arrivals: Vec::new(),
            refused: Vec::new(),
            served: 0,
        };
        Self {
            hosts: (0..HOSTS).map(|_| Mutex::new(host())).collect(),
        }
    }

    async fn fetch(&self, host: usize) -> Result<(), Refused> {
        {
            let mut host = self.hosts[host].lock().unwrap();
            let now = testing::now();
            host.arrivals.push(now);
            if host.meter.admit(now).is_err() {
                host.refused.push(now);
                return Err(Refused);
            }
            host.running += 1;
            host.peak = host.peak.max(host.running);
        }
        sleep(Duration::from_millis(2)).await;
        let mut host = self.hosts[host].lock().unwrap();
        host.running -= 1;
        host.served += 1;
        Ok(())
    }

    fn halve(&self) {
        for host in &self.hosts {
            host.lock().unwrap().meter.set_rate(RATE / 2.0);
        }
    }
}

virtual_time! {
    async fn an_adaptive_map_finds_a_strict_servers_rate_and_follows_it_down() {
        let model = Model::new();
        let done = AtomicUsize::new(0);
        let halved_at = Mutex::new(None);
        let started = testing::now();
        let pages = map_async(0..HOSTS * PAGES, GLOBAL, |page| {
            let (model, done, halved_at) = (&model, &done, &halved_at);
            async move {
                let answer = model.fetch(page % HOSTS).await;
                if answer.is_ok() && done.fetch_add(1, SeqCst) + 1 == HOSTS * PAGES / 2 {
                    model.halve();
                    *halved_at.lock().unwrap() = Some(testing::now());
                }
                answer
            }
        })
        .per_key(|page| page % HOSTS, PER_HOST)
        .retry(
            RetryPolicy::new()
                .attempts(50)
                .when(|_: &Refused| true)
                .retry_after(|_: &Refused| Some(Duration::from_secs(1))),
        )
        .adaptive(adaptive(), |answer: &Result<(), Refused>| match answer {
            Ok(()) => Outcome::success(),
            Err(Refused) => Outcome::overload(),
        })
        .await;
        let time = testing::now() - started;
        let halved_at = halved_at.into_inner().unwrap().expect("halved");
        let hosts: Vec<ModelHost> = model
            .hosts
            .into_iter()
            .map(|host| host.into_inner().unwrap())
            .collect();
        let arrivals: Vec<Vec<Instant>> = hosts.iter().map(|host| host.arrivals.clone()).collect();
        let requests: usize = arrivals.iter().map(Vec::len).sum();
        let refused: usize = hosts.iter().map(|host| host.refused.len()).sum();
        // The halved half on its own: a map that kept its rate would see one request in two
        // refused there.
        let after = |times: &Vec<Instant>| times.iter().filter(|&&at| at >= halved_at).count();
        let requests_after: usize = arrivals.iter().map(after).sum();
        let refused_after: usize = hosts.iter().map(|host| after(&host.refused)).sum();
        let share = refused as f64 / requests as f64;
        let share_after = refused_after as f64 / requests_after as f64;
        let ratio = time.as_secs_f64() / ideal().as_secs_f64();
        let windows = busiest_windows(&arrivals);
        eprintln!(
            "figure: adaptive vs a strict meter at {RATE}/s per host, halved at {:?} (virtual \
             time): {requests} requests, {refused} refused ({:.2}%); after the halving \
             {requests_after}, {refused_after} refused ({:.2}%); {time:?} for an ideal of {:?} \
             ({ratio:.3}x); peaks {:?}; busiest windows {windows:?}",
            halved_at - started,
            share * 100.0,
            share_after * 100.0,
            ideal(),
            hosts.iter().map(|host| host.peak).collect::<Vec<_>>(),
        );
        assert!(pages.iter().all(Result::is_ok));
        assert!(hosts.iter().all(|host| host.served == PAGES), "every page served once");
        assert!(hosts.iter().all(|host| host.peak <= PER_HOST));
        for (window, most, allowed) in windows {
            assert!(most <= allowed, "{most} arrivals in {window:?}, {allowed} allowed");
        }
        // Exact on virtual time: 1.48% refused in all and 1.96% after the halving, 1.205x
        // the ideal on tokio's clock (it wakes at whole milliseconds) and 1.226x on
        // run_virtual. The bounds were 6% and 1.5x in real time (the issue asks 3%); a map
        // that did not adapt would see two requests in three refused at its ceiling.
        assert!(share <= 0.03, "refused {:.2}% of requests", share * 100.0);
        assert!(share_after <= 0.03, "refused {:.2}% after the halving", share_after * 100.0);
        assert!(ratio <= 1.25, "{time:?} against an ideal of {:?}", ideal());
    }
}
