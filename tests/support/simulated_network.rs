//! A simulated network for the crawler demo and its tests: hosts with their own latency,
//! answers decided by the caller, and the servers' own view of what is in flight.
//!
//! Shared by `examples/crawl.rs` and `tests/crawler.rs` (included with `#[path]`).

#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

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
}

impl fmt::Display for FetchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FetchError::Unreachable(url) => write!(f, "cannot reach {url}"),
            FetchError::Unavailable => f.write_str("503 service unavailable"),
            FetchError::NotFound => f.write_str("404 not found"),
            FetchError::NoSlot(full) => full.fmt(f),
            FetchError::TimedOut => f.write_str("request timed out"),
        }
    }
}

impl std::error::Error for FetchError {}

/// Requests in flight and their peak, per host and overall, as the servers see them.
#[derive(Default)]
pub struct Network {
    latency: HashMap<String, Duration>,
    hosts: Mutex<HashMap<String, (usize, usize)>>,
    in_flight: AtomicUsize,
    peak: AtomicUsize,
    requests: AtomicUsize,
}

impl Network {
    pub fn new(latency: impl IntoIterator<Item = (String, Duration)>) -> Self {
        Self {
            latency: latency.into_iter().collect(),
            ..Self::default()
        }
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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    Unreachable,
    Unavailable,
    NotFound,
    Hang,
}

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
