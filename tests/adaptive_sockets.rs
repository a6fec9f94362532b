//! Adaptive maps against servers whose rate the crawler is not told, halved in the middle
//! of the run:
//!
//! - the test server's strict meter (no allowance at all: a request a nanosecond early is
//!   refused with `429` and `Retry-After: 1`), each host at 40/s, the client's rate ceiling
//!   3× that;
//! - nginx's `limit_req` without burst (an nginx of the test's own), each host at 20/s, no
//!   `Retry-After` (a refused page is tried again 50 ms later), the client's ceiling 100/s.
//!
//! How well the map adapts (how few requests are refused, how close to the ideal time it
//! finishes, the rate it reads after the halving) depends on the machine's speed against
//! real sockets: a busy machine bunches requests on their way to the server, and a strict
//! meter refuses a bunched request even below its rate. So it is proven on **virtual time**
//! (`virtual_time!`: run_virtual and tokio's paused clock) against in-process models of the
//! same servers (the testkit's `RateMeter`, a timer for the work), where the figures are
//! exact.
//!
//! Against the real servers on loopback (under smol, `run_sync` and tokio, current and
//! multi-thread) the tests assert only what holds at any speed, measured at the server
//! (nginx's log; in flight on the client's side for nginx, which does not tell): every page
//! served once, never more than the per-host and global limits in flight, no more arrivals
//! at a host in any window of 1 s or more than the client's rate ceiling allows. The
//! refused shares, times against the ideal and rates read are printed (`--nocapture`).

mod common;
use tollgate_testkit::{http_client, http_server, nginx};

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{InFlight, matrix, virtual_time};
use futures_lite::future::{yield_now, zip};
use http_client::{ClientError, get_ok};
use http_server::{RateMeter, TestServer, max_in_window, window_limit};
use nginx::Nginx;
use tollgate::{Adaptive, MapControl, Outcome, Rate, RetryPolicy, map_async, sleep, testing};

/// At most two real-socket crawls at a time: each takes a tenth of a core (its server
/// included), and four at once on two cores would only slow each other.
static TWO_AT_A_TIME: smol::lock::Semaphore = smol::lock::Semaphore::new(2);

const HOSTS: usize = 4;
const PAGES: usize = 400;
/// Pages per host of the crawls on real sockets: they assert what holds at any length of
/// crawl, so they are shorter (6 s ideal, still longer than the longest window judged).
const SOCKET_PAGES: usize = 160;
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
    Adaptive::new(1, PER_HOST).rate_ceiling(Rate::per_second(3 * RATE as u32))
}

/// The ideal time: half the pages at the full rate, half at the halved one.
fn ideal(pages: usize) -> Duration {
    Duration::from_secs_f64((pages / 2) as f64 / RATE + (pages / 2) as f64 / (RATE / 2.0))
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
        let urls: Vec<String> = (0..HOSTS * SOCKET_PAGES)
            .map(|i| server.url(&format!("h{}", i % HOSTS), &format!("/{i}")))
            .collect();
        let done = AtomicUsize::new(0);
        let started = Instant::now();
        let pages = map_async(urls, GLOBAL, |url| {
            let (server, done) = (&server, &done);
            async move {
                let page = get_ok(&url).await;
                if page.is_ok() && done.fetch_add(1, SeqCst) + 1 == HOSTS * SOCKET_PAGES / 2 {
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
            time.as_secs_f64() / ideal(SOCKET_PAGES).as_secs_f64(),
            ideal(SOCKET_PAGES)
        );
        // Nothing lost: every page served, each once, and every request answered.
        assert!(pages.iter().all(Result::is_ok));
        assert_eq!(global.ok, HOSTS * SOCKET_PAGES, "every page served once");
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
        let ratio = time.as_secs_f64() / ideal(PAGES).as_secs_f64();
        let windows = busiest_windows(&arrivals);
        eprintln!(
            "figure: adaptive vs a strict meter at {RATE}/s per host, halved at {:?} (virtual \
             time): {requests} requests, {refused} refused ({:.2}%); after the halving \
             {requests_after}, {refused_after} refused ({:.2}%); {time:?} for an ideal of {:?} \
             ({ratio:.3}x); peaks {:?}; busiest windows {windows:?}",
            halved_at - started,
            share * 100.0,
            share_after * 100.0,
            ideal(PAGES),
            hosts.iter().map(|host| host.peak).collect::<Vec<_>>(),
        );
        assert!(pages.iter().all(Result::is_ok));
        assert!(hosts.iter().all(|host| host.served == PAGES), "every page served once");
        assert!(hosts.iter().all(|host| host.peak <= PER_HOST));
        for (window, most, allowed) in windows {
            assert!(most <= allowed, "{most} arrivals in {window:?}, {allowed} allowed");
        }
        // Exact on virtual time: 1.23% refused in all and 1.96% after the halving, 1.608x the
        // ideal (1.23x before keys started safe: at 1.8/s, rising by 15% a round, a key
        // takes about 10 s to reach 40/s, a sixth of this short crawl; the simulated
        // internet's few-URLs profile asks it). The bounds were 6% and 1.5x in real time;
        // a map that did not adapt would see two requests in three refused at its ceiling.
        assert!(share <= 0.03, "refused {:.2}% of requests", share * 100.0);
        assert!(share_after <= 0.03, "refused {:.2}% after the halving", share_after * 100.0);
        assert!(ratio <= 1.7, "{time:?} against an ideal of {:?}", ideal(PAGES));
    }
}

// The halved crawl after nginx's `limit_req`: its own hosts, rates and retry policy.

fn millis(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

/// One crawl against nginx at a time: each takes a share of the machine.
static ONE_AT_A_TIME: smol::lock::Mutex<()> = smol::lock::Mutex::new(());

/// The hosts of the halved crawl, each metered like nginx's `limit_req` without burst.
const NGINX_HOSTS: [&str; 3] = ["a", "b", "c"];
/// The server's rate per host until the crawl is halfway, then half of it.
const NGINX_RATE: u32 = 20;
/// Pages per host while the server is at its rate ...
const FULL: usize = 50;
/// ... and after it halved it.
const HALVED: usize = 25;
/// The client's rate ceiling per host.
const CEILING: u32 = 100;

fn classify_status(output: &Result<String, ClientError>) -> Outcome {
    match output {
        Ok(_) => Outcome::success(),
        Err(error) if matches!(error.status(), Some(429 | 503)) => Outcome::overload(),
        Err(_) => Outcome::failure(),
    }
}

/// The mean rate `busiest_keys` reads over the hosts, in starts per second.
async fn mean_rate(control: &MapControl<usize>) -> f64 {
    let _ = control.busiest_keys(NGINX_HOSTS.len());
    yield_now().await;
    let keys = control.busiest_keys(NGINX_HOSTS.len());
    let sum: f64 = keys
        .iter()
        .filter_map(|key| key.rate())
        .map(|rate| 1.0 / rate.interval().as_secs_f64())
        .sum();
    sum / keys.len().max(1) as f64
}

/// What the server logged in one stretch of the crawl.
struct Stretch {
    requests: usize,
    refused: usize,
}

impl Stretch {
    fn of(logged: &[nginx::Logged], from: f64, to: f64) -> Self {
        let lines = logged.iter().filter(|line| (from..to).contains(&line.at));
        let (requests, refused) = lines.fold((0, 0), |(all, refused), line| {
            (all + 1, refused + usize::from(line.status == 429))
        });
        Self { requests, refused }
    }

    fn share(&self) -> f64 {
        self.refused as f64 / self.requests.max(1) as f64
    }
}

fn epoch_seconds() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// One host of the in-process model of nginx: `limit_req` without burst is a strict meter
/// (a request sooner than one interval after the last one let through is refused), and a
/// page takes 1 ms to serve. Its log is nginx's, times in seconds since `Model::start`.
struct LimitReqHost {
    meter: RateMeter,
    log: Vec<nginx::Logged>,
}

/// The server of the halved crawl: a real nginx on loopback, or the model on virtual time.
enum Limited {
    Nginx(std::sync::Arc<Nginx>),
    Model {
        start: Instant,
        hosts: Vec<Mutex<LimitReqHost>>,
    },
}

impl Limited {
    fn model() -> Self {
        let host = |_| {
            Mutex::new(LimitReqHost {
                meter: RateMeter::new(f64::from(NGINX_RATE), 1, Duration::ZERO),
                log: Vec::new(),
            })
        };
        Self::Model {
            start: testing::now(),
            hosts: (0..NGINX_HOSTS.len()).map(host).collect(),
        }
    }

    /// The server's clock, in the seconds of its log.
    fn clock(&self) -> f64 {
        match self {
            Self::Nginx(_) => epoch_seconds(),
            Self::Model { start, .. } => (testing::now() - *start).as_secs_f64(),
        }
    }

    /// Page `i`, of host `i % 3`.
    async fn fetch(&self, i: usize) -> Result<String, ClientError> {
        let host = NGINX_HOSTS[i % NGINX_HOSTS.len()];
        let path = format!("/{i}");
        let Self::Model { hosts, .. } = self else {
            let Self::Nginx(nginx) = self else {
                unreachable!()
            };
            return get_ok(&nginx.url(host, &path)).await;
        };
        let admitted = {
            let mut model = hosts[i % hosts.len()].lock().unwrap();
            let admitted = model.meter.admit(testing::now()).is_ok();
            let (at, status) = (self.clock(), if admitted { 200 } else { 429 });
            model.log.push(nginx::Logged { status, at, path });
            admitted
        };
        if !admitted {
            return Err(ClientError::Status {
                status: 429,
                retry_after: None,
            });
        }
        sleep(millis(1)).await;
        Ok(String::new())
    }

    /// Halves every host's rate.
    async fn halve(&self) {
        match self {
            Self::Nginx(nginx) => {
                // nginx reloads its configuration (blocking calls): on a thread of its own.
                let halving = std::thread::spawn({
                    let nginx = std::sync::Arc::clone(nginx);
                    move || {
                        for host in NGINX_HOSTS {
                            nginx.set_rate(host, NGINX_RATE / 2);
                        }
                    }
                });
                while !halving.is_finished() {
                    sleep(millis(5)).await;
                }
                halving.join().expect("nginx halved its rate");
            }
            Self::Model { hosts, .. } => {
                for host in hosts {
                    let rate = f64::from(NGINX_RATE / 2);
                    host.lock().unwrap().meter.set_rate(rate);
                }
            }
        }
    }

    /// The log of every host, once it holds `served` pages.
    async fn logged(&self, served: usize) -> Vec<Vec<nginx::Logged>> {
        let Self::Nginx(nginx) = self else {
            let Self::Model { hosts, .. } = self else {
                unreachable!()
            };
            return hosts
                .iter()
                .map(|host| host.lock().unwrap().log.clone())
                .collect();
        };
        // nginx logs a request after its answer went out: wait for the last lines.
        let mut logged = Vec::new();
        for _ in 0..200 {
            logged = NGINX_HOSTS.map(|host| nginx.statuses(host)).to_vec();
            let ok = logged.iter().flatten().filter(|line| line.status == 200);
            if ok.count() == served {
                break;
            }
            sleep(millis(10)).await;
        }
        logged
    }
}

/// The figures of one halved crawl.
struct Halved {
    /// Pages asked for, and those served.
    pages: usize,
    ok: usize,
    /// Lines of the server's log with a 200.
    logged_ok: usize,
    full: Stretch,
    halved: Stretch,
    full_time: f64,
    halved_time: f64,
    ideal_full: f64,
    ideal_halved: f64,
    /// The mean rate read just before the halving, and near the end.
    rate_before: f64,
    rate_after: f64,
    /// The most attempts at one host at once.
    peak: usize,
    /// The most arrivals at one host in any window (window, arrivals, what the client's
    /// ceiling allows).
    windows: Vec<(Duration, usize, usize)>,
}

impl Halved {
    fn print(&self, clock: &str) {
        eprintln!(
            "figure: adaptive (1-8, up to {CEILING}/s) against {clock} at {NGINX_RATE}/s per \
             host: refused share {} of {} ({:.1}%), time / ideal {:.2}x ({:.2} s for {:.2} s), \
             mean rate read {:.1}/s; halved to {}/s: refused share {} of {} ({:.1}%), time / \
             ideal {:.2}x ({:.2} s for {:.2} s), mean rate read {:.1}/s; peak {}; busiest \
             windows {:?}",
            self.full.refused,
            self.full.requests,
            100.0 * self.full.share(),
            self.full_time / self.ideal_full,
            self.full_time,
            self.ideal_full,
            self.rate_before,
            NGINX_RATE / 2,
            self.halved.refused,
            self.halved.requests,
            100.0 * self.halved.share(),
            self.halved_time / self.ideal_halved,
            self.halved_time,
            self.ideal_halved,
            self.rate_after,
            self.peak,
            self.windows,
        );
    }

    /// What holds at any speed: every page served once, never more than the per-host limit
    /// at once, never more arrivals at a host than the client's rate ceiling lets through.
    fn assert_invariants(&self) {
        assert_eq!(self.ok, self.pages, "every page served");
        assert_eq!(self.logged_ok, self.pages, "every page once");
        assert!(self.peak <= 8, "{} at one host at once", self.peak);
        for &(window, most, allowed) in &self.windows {
            assert!(
                most <= allowed,
                "{most} arrivals in {window:?}, {allowed} allowed"
            );
        }
    }
}

/// Crawls the hosts at their rate, halves it halfway, and measures each half.
async fn crawl_halved(server: &Limited) -> Halved {
    let hosts = NGINX_HOSTS.len();
    let pages = hosts * (FULL + HALVED);
    let done = AtomicUsize::new(0);
    let in_flight: Vec<InFlight> = (0..hosts).map(|_| InFlight::default()).collect();
    let control = MapControl::<usize>::new();
    // nginx sends no Retry-After: a refused page is tried again 50 ms later (or when its
    // host's rate allows, if later).
    let policy = RetryPolicy::new()
        .attempts(50)
        .interval(millis(50))
        .jitter(0.0)
        .when(|error: &ClientError| error.status() == Some(429));
    let started = testing::now();
    let began_at = server.clock();
    let map = map_async(0..pages, 64, |i| {
        let (done, flight) = (&done, &in_flight[i % hosts]);
        async move {
            let _guard = flight.enter();
            let page = server.fetch(i).await;
            if page.is_ok() {
                done.fetch_add(1, SeqCst);
            }
            page
        }
    })
    .per_key(|i| i % hosts, 8)
    .retry(policy)
    .adaptive(
        Adaptive::new(1, 8).rate_ceiling(Rate::per_second(CEILING)),
        classify_status,
    )
    .control(&control);
    let drive = async {
        while done.load(SeqCst) < hosts * FULL {
            sleep(millis(10)).await;
        }
        let rate_before = mean_rate(&control).await;
        server.halve().await;
        let halved = (testing::now() - started, server.clock(), done.load(SeqCst));
        let mut rate_after = 0.0;
        while done.load(SeqCst) < pages - 2 * hosts {
            rate_after = mean_rate(&control).await;
            sleep(millis(10)).await;
        }
        (rate_before, halved, rate_after)
    };
    let (answers, (rate_before, (halved_after, halved_at, done_then), rate_after)) =
        zip(map, drive).await;
    let time = testing::now() - started;
    let ok = answers.iter().filter(|page| page.is_ok()).count();
    let logs = server.logged(ok).await;
    let logged: Vec<nginx::Logged> = logs.iter().flatten().cloned().collect();
    // The ideal: each host at the server's rate until it halved, at half of it after.
    let per_host = |pages: usize| pages as f64 / hosts as f64;
    let base = Instant::now();
    let windows = [1, 2, 5].map(|secs| {
        let window = Duration::from_secs(secs);
        let at = |line: &nginx::Logged| base + Duration::from_secs_f64(line.at - began_at + 1.0);
        let most = logs.iter().map(|log| {
            let times: Vec<Instant> = log.iter().map(at).collect();
            max_in_window(&times, window)
        });
        (
            window,
            most.max().unwrap_or(0),
            window_limit(f64::from(CEILING), 1, window),
        )
    });
    Halved {
        pages,
        ok,
        logged_ok: logged.iter().filter(|line| line.status == 200).count(),
        full: Stretch::of(&logged, began_at - 1.0, halved_at),
        halved: Stretch::of(&logged, halved_at, f64::INFINITY),
        full_time: halved_after.as_secs_f64(),
        halved_time: (time - halved_after).as_secs_f64(),
        ideal_full: per_host(done_then) / f64::from(NGINX_RATE),
        ideal_halved: per_host(pages - done_then) / f64::from(NGINX_RATE / 2),
        rate_before,
        rate_after,
        peak: in_flight.iter().map(InFlight::peak).max().unwrap_or(0),
        windows: windows.to_vec(),
    }
}

matrix! {
    async fn an_adaptive_map_against_nginx_keeps_its_limits_at_any_speed() {
        let _one = ONE_AT_A_TIME.lock().await;
        let nginx = Nginx::start(&NGINX_HOSTS.map(|host| (host, NGINX_RATE)));
        let server = Limited::Nginx(std::sync::Arc::new(nginx));
        let crawl = crawl_halved(&server).await;
        // The refused shares, the times against the ideal and the rates read depend on how
        // promptly a busy machine moves requests: figures here, proven on the model below.
        crawl.print("nginx");
        crawl.assert_invariants();
    }

}

virtual_time! {
    async fn an_adaptive_map_finds_a_limit_req_rate_and_follows_it_halved() {
        let crawl = crawl_halved(&Limited::model()).await;
        crawl.print("a model of limit_req");
        crawl.assert_invariants();
        // Exact on virtual time: refused 2.0% at the server's rate and 7.4% halved; 3.42x
        // and 1.36x the ideal; rates read 7.5/s near the end. The first stretch, 2.5 s at
        // its ideal, is mostly the keys' safe start (1.8/s rising by 15% a round: 1.40x
        // before, when keys started at 5/s rising by half, which the simulated internet's
        // few-URLs profile measured at 3% refused). Against nginx the bounds were 25%,
        // 3.5x, 2.5x and 12/s. A map that did not adapt (at its ceiling, 5x the rate) would
        // see four requests in five refused; one that never cut, 46% and 66%.
        for (stretch, what) in [(&crawl.full, "at the server's rate"), (&crawl.halved, "halved")] {
            assert!(stretch.share() <= 0.15, "{what}: {:.1}% refused", 100.0 * stretch.share());
        }
        assert!(
            crawl.full_time <= 3.6 * crawl.ideal_full,
            "{:.2} s for an ideal of {:.2} s",
            crawl.full_time,
            crawl.ideal_full
        );
        assert!(
            crawl.halved_time <= 1.5 * crawl.ideal_halved,
            "halved: {:.2} s for an ideal of {:.2} s",
            crawl.halved_time,
            crawl.ideal_halved
        );
        assert!(crawl.rate_after <= 10.0, "halved to 10/s, the keys read {:.1}/s", crawl.rate_after);
    }

}
