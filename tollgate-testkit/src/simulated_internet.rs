//! A simulated internet on tokio's paused clock: hosts with hidden capacities a crawler is
//! never told, URLs spread over them with a Zipf skew, and the figures that judge a crawl
//! against the ideal (in [`Report`]).
//!
//! # The hosts
//!
//! [`Config::full`] is the scale the adaptive-limits proof runs at: 1,000 hosts, 200,000 URLs,
//! a global limit of 512 (the crawler's; the capped ideal assumes it), 100 hosts halved.
//! Each host draws its capacity once, from its own random stream:
//!
//! - **base latency** `b`: log-uniform in 20-500 ms. A request the host serves takes
//!   `b × (1 + 0.2 × Exp(1)) × max(1, n / k)`, drawn when it arrives, where `n` is the number
//!   of requests in service at the host, this one included, and `k` the knee;
//! - **knee** `k`: uniform over the integers 1..=32 (the issue leaves the distribution open);
//!   an admitted request with `n > k` is answered `503` with probability `min(1, (n − k) / k)`
//!   (0 at the knee, 1 at twice the knee) after 1 ms of service, during which it holds its
//!   place in the host's queue;
//! - **rate** `r`: log-uniform in 2-200/s (the issue leaves the distribution open), metered
//!   GCRA-strict with zero tolerance on the arrival times in nanoseconds: a request that
//!   arrives before the meter's theoretical arrival time `tat` is answered `429` at once, with a
//!   `Retry-After` of `max(1, ⌈tat − arrival⌉)` whole seconds (never a fraction that gives the
//!   rate away), and `tat` is left alone; otherwise `tat = arrival + 1 / r`. A 429 costs the host
//!   no service;
//! - **jitter**: each request reaches the host `Exp(mean 2 ms)` after it was sent (one way:
//!   answers travel back at once), so the meter judges the arrival, not the send;
//! - **dead**: 5% of the hosts (rounded, chosen by the seed) never answer.
//!
//! Every attempt with no answer 5 s after it was sent ends as [`Response::TimedOut`] (the
//! crawler's attempt timeout, built in): every attempt at a dead host, and in principle a
//! request stuck behind a long queue. The host serves a request the client gave up on to
//! its end: a host's queue is a list of departure times, so a dropped `fetch` future (a
//! cancelled attempt) leaves the host's view as it was.
//!
//! At 60 s of virtual time, 100 hosts (10% of the hosts at other scales), chosen by the seed
//! among the live hosts that still have work, halve their knee (`max(1, k / 2)`, an integer)
//! and their rate; at 180 s they restore both. Both changes take effect at the first
//! `fetch`, `finished` or `report` at or after that instant (nothing happens in between).
//!
//! # The URLs
//!
//! Each URL's host is drawn from a Zipf(1.1) distribution over host ranks 1..=hosts; a seeded
//! permutation maps ranks to host ids, so a host's id says nothing about its size.
//! [`urls`](SimulatedInternet::urls) gives them in the order they were drawn (an interleaved
//! frontier). At full scale the biggest host has about 36,000 URLs, the smallest about 18.
//! A host **has work** from time 0 until the crawler reports its last URL
//! [`finished`](SimulatedInternet::finished) (succeeded or given up); the figures depend on
//! it, so a crawler must report every URL as its output comes.
//!
//! # Determinism
//!
//! All randomness comes from SplitMix64 streams of our own ([`Rng`]): one per host,
//! seeded from `(seed, host id)`, drawn in the order the host sees requests, and a few for the
//! layout (URLs, the dead hosts, the halved hosts). No iteration over a std `HashMap` feeds a
//! figure. Time is tokio's clock: run the crawl on a current-thread runtime started paused
//! (`Builder::new_current_thread().enable_time().start_paused(true)`), where time advances only
//! while every task waits, so a run is a function of its seed and the crawler, and takes
//! seconds of wall time for hours of virtual time. Create the [`SimulatedInternet`] inside the
//! runtime (its time 0 is the moment of creation) and call it only from that runtime's
//! thread: it is not `Sync`.
//!
//! tokio's timer wakes at whole milliseconds: a request is judged at its exact arrival
//! time in nanoseconds, but two arrivals at the same host within one millisecond are judged in
//! the order their timers wake, which may not be their arrival order.
//!
//! # The recorder and the ideal
//!
//! Per host and per second of virtual time: starts (attempts sent), 200s, 429s, 503s,
//! timeouts ([`Second`]); per host, the most attempts in flight at once as the client sees
//! them (from `fetch` to its answer). A host's ideal rate is `min(r, k / (1.2 × b))` with its
//! current (possibly halved) values: the most it serves without overload. The ideal at time
//! `t` is the sum over the live hosts that still have work (a dead host contributes 0). It
//! ignores the crawler's global limit, and while most hosts have work it is far out of reach
//! of 512 slots, so [`Report`] also integrates the **capped ideal**: by Little's law a host at
//! its ideal rate holds `ideal × 1.2 × b` slots; the global limit's slots go first to the hosts
//! that give most per slot (the shortest latencies), the last one partly.
//!
//! Both are upper bounds. The capped ideal's slots go to the fastest hosts, where a scheduler
//! whose hosts take turns spreads them over every host with work: while most hosts have work
//! (the first 20 s or so at full scale), an oracle that knows every capacity gets about 2,600
//! answers/s out of 512 slots against a capped ideal near 13,000/s, and at most 40-45% of the
//! capped ideal over the run (the `oracle` line of `examples/adaptive.rs`). And a host metered
//! GCRA-strict behind Exp(2 ms) jitter refuses a client spaced `d` beyond its interval with
//! probability `0.5 × exp(−d / 2 ms)`: within 1% of 429s, a 200/s host gives 1 / (5 ms + 7.8 ms)
//! = 78/s. The per-host figure divides by the ideal over the whole time a host had work,
//! from time 0, so the hosts waiting for slots at the start weigh on it for every strategy.
//! That rate, capped by the knee, is a host's [feasible](Capacity::feasible) rate: the
//! per-host restore figure ([`Report::host_restore`]) times each halved host from the restore
//! to 90% of it (or of its fair share of the global limit, when that is lower); a host whose
//! work ends first counts as not back by then ([`restore_quantile`]), and a seed that never
//! settles counts in every figure (in a mean over seeds, as the whole time it had, marked
//! "≥").

use std::cell::{Cell, RefCell};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt;
use std::time::Duration;

use tokio::time::{Instant, sleep_until};

use crate::rng::Rng;

mod fluid;
mod report;

pub use report::{
    CURVE_BUCKET_SECS, CURVE_BUCKETS, Capacity, FEASIBLE_SLACK, Report, Restore, Second, Summary,
    restore_quantile,
};
use report::{HostRecord, Run};

/// When the chosen hosts halve their knee and rate, since the start.
pub const HALVE_AT: Duration = Duration::from_secs(report::HALVE_AT_SECS);
/// When the halved hosts restore their knee and rate, since the start.
pub const RESTORE_AT: Duration = Duration::from_secs(report::RESTORE_AT_SECS);
/// How long an attempt waits for an answer before it times out.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);
/// The mean one-way jitter between sending a request and its arrival at the host.
pub const JITTER_MEAN: Duration = Duration::from_millis(2);
/// How long a host takes to answer a 503.
pub const UNAVAILABLE_SERVICE: Duration = Duration::from_millis(1);

const NANOS: f64 = 1e9;

/// The shape of a simulated internet.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// The seed every random draw derives from.
    pub seed: u64,
    /// How many hosts.
    pub hosts: usize,
    /// How many URLs, spread over the hosts.
    pub urls: usize,
    /// The crawler's global limit, which the capped ideal assumes.
    pub global_limit: usize,
    /// How many hosts halve their knee and rate at 60 s.
    pub halved: usize,
    /// The share of dead hosts.
    pub dead_share: f64,
    /// Keep every admitted arrival's time per host ([`SimulatedInternet::admitted`]), for
    /// tests of the meter.
    pub record_arrivals: bool,
    /// What the hosts are like ([`Profile`]).
    pub profile: Profile,
}

/// What the hosts of a simulated internet are like.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Profile {
    /// Base latency 20-500 ms, knees 1-32, rates 2-200/s (log-uniform).
    #[default]
    Default,
    /// Slow hosts: base latency 0.1-1 s, knees 1-8, rates 1-20/s.
    SlowHosts,
    /// The default hosts with a tenth of the URLs (20,000 over 1,000 hosts at full scale):
    /// each host's start is a larger share of its requests.
    FewUrls,
}

impl Profile {
    /// The profile named `name` (`default`, `slow-hosts`, `few-urls`).
    pub fn named(name: &str) -> Option<Self> {
        match name {
            "default" => Some(Self::Default),
            "slow-hosts" => Some(Self::SlowHosts),
            "few-urls" => Some(Self::FewUrls),
            _ => None,
        }
    }

    /// Base latency (seconds), largest knee, and rate (per second) ranges of a host.
    fn ranges(self) -> ((f64, f64), u64, (f64, f64)) {
        match self {
            Self::Default | Self::FewUrls => ((0.020, 0.500), 32, (2.0, 200.0)),
            Self::SlowHosts => ((0.100, 1.000), 8, (1.0, 20.0)),
        }
    }
}

impl Config {
    /// The full scale: 1,000 hosts, 200,000 URLs, global limit 512, 100 hosts halved, 5% dead.
    pub fn full(seed: u64) -> Self {
        Self::scaled(seed, 1.0)
    }

    /// The full scale times `scale` for the hosts, the URLs, the global limit and the halved
    /// hosts (each at least 1); the times (60 s, 180 s, 5 s) and capacities stay.
    ///
    /// # Panics
    ///
    /// If `scale` is not positive.
    pub fn scaled(seed: u64, scale: f64) -> Self {
        assert!(scale > 0.0, "a scale must be positive, got {scale}");
        let of = |n: f64| ((n * scale).round() as usize).max(1);
        Self {
            seed,
            hosts: of(1_000.0),
            urls: of(200_000.0),
            global_limit: of(512.0),
            halved: of(100.0),
            dead_share: 0.05,
            record_arrivals: false,
            profile: Profile::Default,
        }
    }

    /// This configuration with the hosts of `profile` (and, for [`Profile::FewUrls`], a
    /// tenth of the URLs, at least 1).
    #[must_use]
    pub fn with_profile(mut self, profile: Profile) -> Self {
        if profile == Profile::FewUrls && self.profile != Profile::FewUrls {
            self.urls = (self.urls / 10).max(1);
        }
        self.profile = profile;
        self
    }
}

/// One URL: a page of a host. Hosts are numbered `0..hosts`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Url {
    /// The host's id.
    pub host: u32,
    /// The page, numbered per host.
    pub page: u32,
}

impl fmt::Display for Url {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "https://h{}.example/{}", self.host, self.page)
    }
}

/// A host's answer to one attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Response {
    /// 200: the page.
    Ok,
    /// 429: too early for the host's rate; come back after `retry_after` (whole seconds).
    TooManyRequests {
        /// The `Retry-After`, at least 1 s.
        retry_after: Duration,
    },
    /// 503: the host has more requests than it can serve.
    Unavailable,
    /// No answer within [`ATTEMPT_TIMEOUT`].
    TimedOut,
}

impl Response {
    /// A 200.
    pub fn is_ok(self) -> bool {
        self == Response::Ok
    }

    /// An answer that says the host has too much: a 429, a 503 or a timeout.
    pub fn is_overload(self) -> bool {
        !self.is_ok()
    }

    /// The `Retry-After` of a 429.
    pub fn retry_after(self) -> Option<Duration> {
        match self {
            Response::TooManyRequests { retry_after } => Some(retry_after),
            _ => None,
        }
    }
}

/// Stream `stream` of `seed`: streams of one seed, and one stream of different seeds, are
/// unrelated.
fn stream(seed: u64, stream: u64) -> Rng {
    let first = Rng::new(seed).next_u64();
    Rng::new(Rng::new(first ^ stream.wrapping_mul(0xd1b5_4a32_d192_ed03)).next_u64())
}

/// The layout's streams (hosts use their id as their stream).
const URL_STREAM: u64 = u64::MAX;
const DEAD_STREAM: u64 = u64::MAX - 1;
const HALVED_STREAM: u64 = u64::MAX - 2;
const RANK_STREAM: u64 = u64::MAX - 3;

/// Where the run is: before 60 s, halved, restored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    Normal,
    Halved,
    Restored,
}

/// One host's changing state.
struct HostState {
    rng: Rng,
    /// The meter's theoretical arrival time, ns since the start.
    tat: u64,
    /// Departure times (ns) of the requests in service.
    queue: BinaryHeap<Reverse<u64>>,
    halved: bool,
    /// Attempts in flight as the client sees them, and their peak.
    in_flight: u32,
    peak: u32,
    /// URLs in all, and not finished yet.
    urls: u32,
    remaining: u32,
    /// When the last URL finished (ns).
    end: Option<u64>,
    seconds: Vec<Second>,
    admitted: Vec<u64>,
}

impl HostState {
    fn second(&mut self, at: u64) -> &mut Second {
        let s = (at / 1_000_000_000) as usize;
        if self.seconds.len() <= s {
            self.seconds.resize(s + 1, Second::default());
        }
        &mut self.seconds[s]
    }
}

/// Everything that changes during a run.
struct State {
    hosts: Vec<HostState>,
    phase: Phase,
    halved_rng: Rng,
}

/// A seeded simulated internet: see the [module docs](self).
pub struct SimulatedInternet {
    config: Config,
    capacity: Vec<Capacity>,
    urls: Vec<Url>,
    start: Instant,
    last: Cell<u64>,
    state: RefCell<State>,
}

impl SimulatedInternet {
    /// Draws the hosts and the URLs of `config`. Its time 0 is now, on tokio's clock: create
    /// it inside the runtime that runs the crawl.
    ///
    /// # Panics
    ///
    /// If `config.hosts` is 0 or above `u32::MAX`.
    pub fn new(config: Config) -> Self {
        assert!(
            config.hosts > 0 && u32::try_from(config.hosts).is_ok(),
            "hosts must be in 1..=u32::MAX, got {}",
            config.hosts
        );
        let seed = config.seed;
        let n = config.hosts;
        let mut capacity = Vec::with_capacity(n);
        let mut hosts = Vec::with_capacity(n);
        let (latency, knees, rates) = config.profile.ranges();
        for id in 0..n {
            let mut rng = stream(seed, id as u64);
            let base = rng.log_uniform(latency.0, latency.1);
            let knee = 1 + rng.below(knees) as u32;
            let rate = rng.log_uniform(rates.0, rates.1);
            capacity.push(Capacity {
                base: Duration::from_secs_f64(base),
                knee,
                rate,
                dead: false,
            });
            hosts.push(HostState {
                rng,
                tat: 0,
                queue: BinaryHeap::new(),
                halved: false,
                in_flight: 0,
                peak: 0,
                urls: 0,
                remaining: 0,
                end: None,
                seconds: Vec::new(),
                admitted: Vec::new(),
            });
        }
        let mut ids: Vec<usize> = (0..n).collect();
        stream(seed, DEAD_STREAM).shuffle(&mut ids);
        let dead = (n as f64 * config.dead_share).round() as usize;
        for &id in &ids[..dead.min(n)] {
            capacity[id].dead = true;
        }
        // Rank r (0-based) weighs (r + 1)^-1.1; ranks map to hosts by a permutation.
        let mut rank_to_host: Vec<u32> = (0..n as u32).collect();
        stream(seed, RANK_STREAM).shuffle(&mut rank_to_host);
        let mut cumulative = Vec::with_capacity(n);
        let mut total = 0.0;
        for rank in 0..n {
            total += ((rank + 1) as f64).powf(-1.1);
            cumulative.push(total);
        }
        let mut url_rng = stream(seed, URL_STREAM);
        let mut urls = Vec::with_capacity(config.urls);
        for _ in 0..config.urls {
            let draw = url_rng.unit() * total;
            let rank = cumulative.partition_point(|&c| c <= draw).min(n - 1);
            let host = rank_to_host[rank];
            let state = &mut hosts[host as usize];
            urls.push(Url {
                host,
                page: state.remaining,
            });
            state.remaining += 1;
            state.urls += 1;
        }
        let halved_rng = stream(seed, HALVED_STREAM);
        Self {
            config,
            capacity,
            urls,
            start: Instant::now(),
            last: Cell::new(0),
            state: RefCell::new(State {
                hosts,
                phase: Phase::Normal,
                halved_rng,
            }),
        }
    }

    /// The configuration it was built from.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Every URL, in the order a crawler should take them (the order they were drawn).
    pub fn urls(&self) -> &[Url] {
        &self.urls
    }

    /// The hidden capacity of `host` (for tests and reports; a crawler must not look).
    pub fn capacity(&self, host: u32) -> Capacity {
        self.capacity[host as usize]
    }

    /// Time 0 of the simulation, on tokio's clock.
    pub fn start(&self) -> Instant {
        self.start
    }

    /// The hosts halved at 60 s (empty before), by id.
    pub fn halved_hosts(&self) -> Vec<u32> {
        self.now();
        let state = self.state.borrow();
        (0..self.capacity.len() as u32)
            .filter(|&h| state.hosts[h as usize].halved)
            .collect()
    }

    /// What `host` saw, second by second.
    pub fn seconds(&self, host: u32) -> Vec<Second> {
        self.state.borrow().hosts[host as usize].seconds.clone()
    }

    /// The most attempts at `host` in flight at once, as the client saw them.
    pub fn peak_in_flight(&self, host: u32) -> u32 {
        self.state.borrow().hosts[host as usize].peak
    }

    /// The arrival times (since the start) of the requests `host`'s meter admitted, in the
    /// order they were judged; empty unless [`Config::record_arrivals`].
    pub fn admitted(&self, host: u32) -> Vec<Duration> {
        let state = self.state.borrow();
        state.hosts[host as usize]
            .admitted
            .iter()
            .map(|&ns| Duration::from_nanos(ns))
            .collect()
    }

    /// Virtual time since the start, in ns; applies the halving and the restore when due.
    fn now(&self) -> u64 {
        let now = u64::try_from((Instant::now() - self.start).as_nanos()).unwrap_or(u64::MAX);
        // Monotonic even if a caller's clock read raced ahead of ours.
        let now = now.max(self.last.get());
        self.last.set(now);
        self.advance_phase(now);
        now
    }

    fn advance_phase(&self, now: u64) {
        let mut state = self.state.borrow_mut();
        let state = &mut *state;
        if state.phase == Phase::Normal && now >= HALVE_AT.as_nanos() as u64 {
            state.phase = Phase::Halved;
            let mut with_work: Vec<usize> = (0..self.capacity.len())
                .filter(|&h| !self.capacity[h].dead && state.hosts[h].remaining > 0)
                .collect();
            state.halved_rng.shuffle(&mut with_work);
            with_work.truncate(self.config.halved);
            for h in with_work {
                state.hosts[h].halved = true;
            }
        }
        if state.phase == Phase::Halved && now >= RESTORE_AT.as_nanos() as u64 {
            state.phase = Phase::Restored;
        }
    }

    /// Knee and rate of `host` now.
    fn current(&self, host: usize, state: &State) -> (u32, f64) {
        self.capacity[host].values(state.phase == Phase::Halved && state.hosts[host].halved)
    }

    /// One attempt at `url`: sent now, answered (or timed out) later.
    ///
    /// # Panics
    ///
    /// If `url`'s host does not exist, or outside a tokio runtime with time enabled.
    pub async fn fetch(&self, url: Url) -> Response {
        let host = url.host as usize;
        let sent = self.now();
        let timeout = sent + ATTEMPT_TIMEOUT.as_nanos() as u64;
        let arrival = {
            let mut state = self.state.borrow_mut();
            let hs = &mut state.hosts[host];
            hs.second(sent).starts += 1;
            hs.in_flight += 1;
            hs.peak = hs.peak.max(hs.in_flight);
            let jitter = hs.rng.exp(JITTER_MEAN.as_secs_f64() * NANOS);
            sent + jitter as u64
        };
        let _in_flight = InFlight(self, host);
        if self.capacity[host].dead {
            self.sleep_until(timeout).await;
            return self.answer(host, timeout, Response::TimedOut);
        }
        self.sleep_until(arrival).await;
        self.advance_phase(arrival);
        let (response, at) = {
            let mut state = self.state.borrow_mut();
            let (knee, rate) = self.current(host, &state);
            let hs = &mut state.hosts[host];
            if arrival < hs.tat {
                let early = (hs.tat - arrival) as f64 / NANOS;
                let retry_after = Duration::from_secs((early.ceil() as u64).max(1));
                (Response::TooManyRequests { retry_after }, arrival)
            } else {
                hs.tat = arrival + (NANOS / rate) as u64;
                if self.config.record_arrivals {
                    hs.admitted.push(arrival);
                }
                while hs.queue.peek().is_some_and(|&Reverse(d)| d <= arrival) {
                    hs.queue.pop();
                }
                let in_service = hs.queue.len() as u32 + 1;
                let over = f64::from(in_service.saturating_sub(knee)) / f64::from(knee);
                let (response, service) = if over > 0.0 && hs.rng.unit() < over {
                    (Response::Unavailable, UNAVAILABLE_SERVICE.as_nanos() as u64)
                } else {
                    let base = self.capacity[host].base.as_secs_f64() * NANOS;
                    let queueing = (f64::from(in_service) / f64::from(knee)).max(1.0);
                    let latency = base * (1.0 + 0.2 * hs.rng.exp(1.0)) * queueing;
                    (Response::Ok, latency as u64)
                };
                hs.queue.push(Reverse(arrival + service));
                (response, arrival + service)
            }
        };
        if at > timeout {
            self.sleep_until(timeout).await;
            return self.answer(host, timeout, Response::TimedOut);
        }
        self.sleep_until(at).await;
        self.answer(host, at, response)
    }

    async fn sleep_until(&self, at: u64) {
        sleep_until(self.start + Duration::from_nanos(at)).await;
    }

    /// Records an answer given at `at` (ns).
    fn answer(&self, host: usize, at: u64, response: Response) -> Response {
        self.now();
        let mut state = self.state.borrow_mut();
        let second = state.hosts[host].second(at);
        match response {
            Response::Ok => second.ok += 1,
            Response::TooManyRequests { .. } => second.too_many += 1,
            Response::Unavailable => second.unavailable += 1,
            Response::TimedOut => second.timed_out += 1,
        }
        response
    }

    /// The crawler is done with `url` (its page came, or the crawler gave up): call it once
    /// per URL, as its output comes. A host's work ends with its last URL.
    ///
    /// # Panics
    ///
    /// If `url`'s host has no URL left.
    pub fn finished(&self, url: Url) {
        let now = self.now();
        let mut state = self.state.borrow_mut();
        let hs = &mut state.hosts[url.host as usize];
        assert!(hs.remaining > 0, "{url} finished twice");
        hs.remaining -= 1;
        if hs.remaining == 0 {
            hs.end = Some(now);
        }
    }

    /// The figures of the run so far (call it when the crawl is done; a host with URLs not
    /// finished has work until now).
    pub fn report(&self) -> Report {
        let now = self.now();
        let state = self.state.borrow();
        let hosts = state
            .hosts
            .iter()
            .zip(&self.capacity)
            .map(|(hs, capacity)| HostRecord {
                capacity: *capacity,
                halved: hs.halved,
                urls: hs.urls,
                end: if hs.remaining == 0 {
                    hs.end.unwrap_or(0)
                } else {
                    now
                },
                peak: hs.peak,
                seconds: &hs.seconds,
            })
            .collect();
        let run = Run {
            hosts,
            end: now,
            global_limit: self.config.global_limit,
            halving: state.phase >= Phase::Halved,
        };
        let mut report = report::compute(&run);
        (report.fluid_bound, report.ordered_goodput) = fluid::fluid(&run);
        report
    }
}

/// Counts an attempt out of flight when its `fetch` ends or is dropped.
struct InFlight<'a>(&'a SimulatedInternet, usize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.state.borrow_mut().hosts[self.1].in_flight -= 1;
    }
}
