//! A simulated network for the crawler demo and its tests: hosts with their own latency,
//! answers decided by the caller, and the servers' own view of what is in flight.
//!
//! A network built [`with_rate`](Network::with_rate) meters each host like a polite
//! server would: a request that arrives sooner than the rate allows is answered
//! `429 Too Many Requests` at once and counted as a violation, and so is a request that
//! arrives while the host is paused after a `429` with `Retry-After` it sent.
//!
//! Shared by `examples/crawl.rs` and `tests/crawler.rs`.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tollgate::{BulkheadError, sleep};

/// Why a simulated request failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchError {
    /// The host cannot be reached (a connection error).
    Unreachable(String),
    /// 503: try again later.
    Unavailable,
    /// 404: retrying will not help.
    NotFound,
    /// The per-host bulkhead had no slot in time.
    NoSlot(BulkheadError),
    /// The request took longer than its per-attempt timeout.
    TimedOut,
    /// 429: too many requests; come back after the `Retry-After`, if the server gave one.
    TooManyRequests(Option<Duration>),
}

impl FetchError {
    /// The server's `Retry-After`, if it sent one.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            FetchError::TooManyRequests(after) => *after,
            _ => None,
        }
    }
}

impl fmt::Display for FetchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FetchError::Unreachable(url) => write!(f, "cannot reach {url}"),
            FetchError::Unavailable => f.write_str("503 service unavailable"),
            FetchError::NotFound => f.write_str("404 not found"),
            FetchError::NoSlot(full) => full.fmt(f),
            FetchError::TimedOut => f.write_str("request timed out"),
            FetchError::TooManyRequests(_) => f.write_str("429 too many requests"),
        }
    }
}

impl std::error::Error for FetchError {}

/// A host's meter: the server's own rate check, independent of tollgate's.
#[derive(Default)]
struct Meter {
    /// When the next request is due at the steady rate (a virtual schedule).
    due: Option<Instant>,
    /// A `429` with `Retry-After` asked clients to stay away until then.
    paused_until: Option<Instant>,
    arrivals: usize,
    first: Option<Instant>,
    last: Option<Instant>,
    violations: usize,
    pauses: usize,
}

/// The rate every host of a [`Network`] enforces.
#[derive(Clone, Copy)]
struct HostRate {
    interval: Duration,
    burst: u32,
    /// How early a request may arrive before it counts as too fast: the gap between a
    /// client's decision to send and the server's reading of the arrival varies a little.
    allowance: Duration,
}

/// Requests in flight and their peak, per host and overall, as the servers see them.
#[derive(Default)]
pub struct Network {
    latency: HashMap<String, Duration>,
    hosts: Mutex<HashMap<String, (usize, usize)>>,
    in_flight: AtomicUsize,
    peak: AtomicUsize,
    requests: AtomicUsize,
    rate: Option<HostRate>,
    meters: Mutex<HashMap<String, Meter>>,
}

/// What a host's meter saw, for the report.
#[derive(Debug, Clone, Copy, Default)]
pub struct Metered {
    /// Requests that reached the host.
    pub arrivals: usize,
    /// Requests answered `429` by the meter: too soon for the rate, or during a pause.
    pub violations: usize,
    /// `429`s with `Retry-After` the host sent (each pauses it).
    pub pauses: usize,
    /// Arrivals per second between the first and the last.
    pub rate: f64,
}

impl Network {
    /// A network whose hosts answer after their `latency` (5 ms for a host not listed),
    /// with no rate of their own.
    pub fn new(latency: impl IntoIterator<Item = (String, Duration)>) -> Self {
        Self {
            latency: latency.into_iter().collect(),
            ..Self::default()
        }
    }

    /// Every host allows `per_second` requests per second with a burst of `burst`, and
    /// answers a request that arrives more than `allowance` too early with a `429`.
    pub fn with_rate(mut self, per_second: u32, burst: u32, allowance: Duration) -> Self {
        self.rate = Some(HostRate {
            interval: Duration::from_secs(1) / per_second,
            burst,
            allowance,
        });
        self
    }

    /// Meters one arrival: `Err` with the 429 to answer when it came too soon or during
    /// a pause.
    fn meter(&self, host: &str, now: Instant) -> Result<(), FetchError> {
        let mut meters = self.meters.lock().unwrap();
        let meter = meters.entry(host.to_owned()).or_default();
        meter.arrivals += 1;
        meter.first.get_or_insert(now);
        meter.last = Some(now);
        if let Some(until) = meter.paused_until {
            if now + self.rate.map_or(Duration::ZERO, |rate| rate.allowance) < until {
                meter.violations += 1;
                return Err(FetchError::TooManyRequests(Some(until - now)));
            }
        }
        let Some(rate) = self.rate else {
            return Ok(());
        };
        // GCRA with the allowance added to the burst's tolerance.
        let tolerance = rate.interval * (rate.burst - 1) + rate.allowance;
        let due = meter.due.unwrap_or(now).max(now);
        if due > now + tolerance {
            meter.violations += 1;
            return Err(FetchError::TooManyRequests(Some(due - tolerance - now)));
        }
        meter.due = Some(due + rate.interval);
        Ok(())
    }

    /// The host asks clients to stay away for `after` (it answered a 429 with it).
    fn pause(&self, host: &str, after: Duration) {
        let mut meters = self.meters.lock().unwrap();
        let meter = meters.entry(host.to_owned()).or_default();
        meter.paused_until = Some(Instant::now() + after);
        meter.pauses += 1;
    }

    /// What each host's meter saw.
    pub fn metered(&self) -> BTreeMap<String, Metered> {
        let meters = self.meters.lock().unwrap();
        meters
            .iter()
            .map(|(host, meter)| {
                let span = match (meter.first, meter.last) {
                    (Some(first), Some(last)) => (last - first).as_secs_f64(),
                    _ => 0.0,
                };
                let rate = if span > 0.0 {
                    (meter.arrivals - 1) as f64 / span
                } else {
                    0.0
                };
                let metered = Metered {
                    arrivals: meter.arrivals,
                    violations: meter.violations,
                    pauses: meter.pauses,
                    rate,
                };
                (host.clone(), metered)
            })
            .collect()
    }

    fn enter(&self, host: &str) {
        let mut hosts = self.hosts.lock().unwrap();
        let (now, peak) = hosts.entry(host.to_owned()).or_default();
        *now += 1;
        *peak = (*peak).max(*now);
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        self.requests.fetch_add(1, Ordering::Relaxed);
    }

    fn leave(&self, host: &str) {
        self.hosts.lock().unwrap().get_mut(host).unwrap().0 -= 1;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
    }

    /// The most requests in flight at once, per host.
    pub fn host_peaks(&self) -> BTreeMap<String, usize> {
        let hosts = self.hosts.lock().unwrap();
        hosts
            .iter()
            .map(|(host, (_, peak))| (host.clone(), *peak))
            .collect()
    }

    /// One GET. `outcome` decides how the server answers this attempt.
    pub async fn get(&self, url: &str, outcome: Outcome) -> Result<String, FetchError> {
        let host = host_of(url);
        self.meter(host, Instant::now())?;
        self.enter(host);
        // Leaves even when the request is cancelled (a lost race, a timeout).
        let _leave = Leave(self, host);
        let latency = self
            .latency
            .get(host)
            .copied()
            .unwrap_or(Duration::from_millis(5));
        match outcome {
            Outcome::Hang => sleep(Duration::MAX).await,
            _ => sleep(latency).await,
        }
        match outcome {
            Outcome::TooManyRequests(after) => {
                self.pause(host, after);
                Err(FetchError::TooManyRequests(Some(after)))
            }
            Outcome::Ok | Outcome::Hang => Ok(format!("<html>{url}</html>")),
            Outcome::Unreachable => Err(FetchError::Unreachable(url.to_owned())),
            Outcome::Unavailable => Err(FetchError::Unavailable),
            Outcome::NotFound => Err(FetchError::NotFound),
        }
    }
}

struct Leave<'a>(&'a Network, &'a str);

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        self.0.leave(self.1);
    }
}

/// How the server answers one attempt of [`Network::get`] (the caller decides).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// 200: the page, after the host's latency.
    Ok,
    /// 429 with this `Retry-After`: the host is paused that long.
    TooManyRequests(Duration),
    /// A connection error ([`FetchError::Unreachable`]).
    Unreachable,
    /// 503 ([`FetchError::Unavailable`]).
    Unavailable,
    /// 404 ([`FetchError::NotFound`]).
    NotFound,
    /// No answer, ever: the attempt waits until it is cancelled.
    Hang,
}

/// The host of `url` (`https://host/path` gives `host`).
pub fn host_of(url: &str) -> &str {
    url.split('/').nth(2).unwrap_or_default()
}

impl Network {
    /// Requests in flight right now, on every host.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }

    /// The most requests in flight at once, on every host together.
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::SeqCst)
    }

    /// Requests received so far (every attempt counts).
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}
