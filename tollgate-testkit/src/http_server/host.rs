//! One host of the server: how it answers (its plan, made a [`Host`]), what it decides
//! when a connection arrives (the door: `503` while down, its rate meter, the scripted and
//! timed `429`s), and its log of [`Arrival`]s, completed as the request is read and
//! answered.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::builder::HostPlan;
use super::counts::{Counters, Gauge, Stats, bump};
use crate::meter::RateMeter;

/// The body a host answers `200` with for `path`: `"<host> <path>"`.
pub fn page_body(host: &str, path: &str) -> String {
    format!("{host} {path}")
}

/// The body of every `503` answer.
pub const UNAVAILABLE_BODY: &str = "service unavailable, try again";

/// The body of every `429` answer.
pub const TOO_MANY_BODY: &str = "too many requests, slow down";

/// One request as the server saw it, from
/// [`TestServer::arrivals`](super::TestServer::arrivals).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Arrival {
    /// When the server accepted the connection: the request's arrival, and the instant the
    /// rate meter judged. (One request per connection, see the `http_server` module docs.)
    pub at: Instant,
    /// The request's path, once its head was read.
    pub path: Option<String>,
    /// The status answered, set when the response starts to go out; `None` while the
    /// request is in progress, or for good if the client left first.
    pub status: Option<u16>,
    /// When the response started to go out (just before its first byte is written).
    pub answered_at: Option<Instant>,
    /// Whether the rate meter refused this request (its answer is then `429`).
    pub over_rate: bool,
}

/// How much the delays from each request's start to its arrival varied (the most less the
/// least): `started` gives the start of the request to a path (each path asked once).
/// Starts keep a client's pace; arrivals shift by their delays, so in any window `W` a
/// server sees at most what the pace allows in `W` plus this spread, however slow the
/// machine. Zero without arrivals.
///
/// # Panics
///
/// If an arrival's head was not read (no path to match a start by).
pub fn delay_spread(arrivals: &[Arrival], started: impl Fn(&str) -> Instant) -> Duration {
    let delays: Vec<Duration> = arrivals
        .iter()
        .map(|arrival| {
            let path = arrival
                .path
                .as_deref()
                .expect("every request's head was read");
            arrival.at.saturating_duration_since(started(path))
        })
        .collect();
    match (delays.iter().max(), delays.iter().min()) {
        (Some(most), Some(least)) => *most - *least,
        _ => Duration::ZERO,
    }
}

#[derive(Debug)]
pub(super) struct Host {
    pub(super) name: String,
    pub(super) addr: SocketAddr,
    pub(super) latency: Duration,
    flaky: bool,
    pub(super) flaky_retry_after: u64,
    scripted_429: Vec<(usize, u64)>,
    /// Whether its `200`s tell its meter's rate.
    rate_limit_fields: bool,
    /// Paths already answered once with `503` (flaky hosts only).
    seen_paths: Mutex<HashSet<String>>,
    /// Answer `503` to whatever arrives
    /// ([`TestServer::set_unavailable`](super::TestServer::set_unavailable)).
    pub(super) unavailable: AtomicBool,
    pub(super) door: Mutex<Door>,
    pub(super) gauge: Gauge,
    pub(super) counters: Counters,
    pub(super) global: Arc<Gauge>,
}

/// What a host decides when a connection arrives, and its log: one lock, taken once per
/// arrival and once per answer.
#[derive(Debug)]
pub(super) struct Door {
    pub(super) meter: Option<RateMeter>,
    pub(super) arrivals: Vec<Arrival>,
    /// `(until, retry_after)`: answer `429` to whatever arrives before `until`.
    pub(super) throttle: Option<(Instant, u64)>,
    /// Header lines added to each `200`
    /// ([`TestServer::set_fields`](super::TestServer::set_fields)), each ending in CRLF.
    pub(super) fields: String,
}

/// The door's verdict on one arrival.
#[derive(Clone, Copy, Debug)]
pub(super) struct Ticket {
    /// The arrival's place in the host's log.
    index: usize,
    /// `Some(retry_after)`: answer `429` at once.
    pub(super) refuse: Option<u64>,
    /// Answer `503`: the host is down
    /// ([`TestServer::set_unavailable`](super::TestServer::set_unavailable)).
    pub(super) unavailable: bool,
}

impl Host {
    /// The host `plan` describes, listening on `addr`, with `meter` judging its arrivals;
    /// its connections count in `global` too.
    pub(super) fn new(
        plan: HostPlan,
        addr: SocketAddr,
        meter: Option<RateMeter>,
        global: Arc<Gauge>,
    ) -> Self {
        Self {
            addr,
            name: plan.name,
            latency: plan.latency,
            flaky: plan.flaky,
            flaky_retry_after: plan.flaky_retry_after,
            scripted_429: plan.scripted_429,
            rate_limit_fields: plan.rate_limit_fields,
            seen_paths: Mutex::default(),
            unavailable: AtomicBool::new(false),
            door: Mutex::new(Door {
                meter,
                arrivals: Vec::new(),
                throttle: None,
                fields: String::new(),
            }),
            gauge: Gauge::default(),
            counters: Counters::default(),
            global,
        }
    }

    pub(super) fn stats(&self) -> Stats {
        self.counters.snapshot(&self.gauge)
    }

    /// Logs a connection accepted at `at` and decides whether it gets a `429`: first the
    /// rate meter, then the scripted `k`-th request, then a spell of `429`s.
    pub(super) fn arrive(&self, at: Instant) -> Ticket {
        let mut door = self.door.lock().unwrap();
        let index = door.arrivals.len();
        if self.unavailable.load(Ordering::SeqCst) {
            door.arrivals.push(Arrival {
                at,
                path: None,
                status: None,
                answered_at: None,
                over_rate: false,
            });
            return Ticket {
                index,
                refuse: None,
                unavailable: true,
            };
        }
        let over_rate = match door.meter.as_mut().map(|meter| meter.admit(at)) {
            // Whole seconds, rounded up: the client must not come back before it may.
            Some(Err(early)) => Some(early.as_secs() + u64::from(early.subsec_nanos() > 0)),
            _ => None,
        };
        let scripted = self
            .scripted_429
            .iter()
            .find(|(k, _)| *k == index + 1)
            .map(|(_, retry_after)| *retry_after);
        let throttled = door
            .throttle
            .filter(|(until, _)| at < *until)
            .map(|(_, retry_after)| retry_after);
        door.arrivals.push(Arrival {
            at,
            path: None,
            status: None,
            answered_at: None,
            over_rate: over_rate.is_some(),
        });
        Ticket {
            index,
            refuse: over_rate.or(scripted).or(throttled),
            unavailable: false,
        }
    }

    pub(super) fn record_path(&self, ticket: Ticket, path: &str) {
        self.door.lock().unwrap().arrivals[ticket.index].path = Some(path.to_owned());
    }

    /// Counts a response about to go out: before its first byte, so a client that holds it
    /// finds it counted. Returns the header lines it adds to a `200`: the rate-limit fields
    /// read from the meter at this instant, and the ones
    /// [`TestServer::set_fields`](super::TestServer::set_fields) set.
    pub(super) fn record_answer(&self, ticket: Ticket, status: u16) -> String {
        let (over_rate, fields) = {
            let mut door = self.door.lock().unwrap();
            // Taken under the lock, so `set_fields` can say from when its fields go out.
            let now = Instant::now();
            let arrival = &mut door.arrivals[ticket.index];
            arrival.status = Some(status);
            arrival.answered_at = Some(now);
            let over_rate = arrival.over_rate;
            let mut fields = String::new();
            if status == 200 {
                if let Some(meter) = door.meter.as_ref().filter(|_| self.rate_limit_fields) {
                    fields = rate_limit_fields(meter, now);
                }
                fields.push_str(&door.fields);
            }
            (over_rate, fields)
        };
        bump(&self.counters.responses);
        match status {
            200 => bump(&self.counters.ok),
            429 => bump(&self.counters.too_many),
            503 => bump(&self.counters.unavailable),
            _ => {}
        }
        if over_rate {
            bump(&self.counters.over_rate);
        }
        fields
    }

    /// The status for the next request to `path`: `503` the first time on a flaky host.
    pub(super) fn status_for(&self, path: &str) -> u16 {
        if self.flaky && self.seen_paths.lock().unwrap().insert(path.to_owned()) {
            503
        } else {
            200
        }
    }
}

/// `RateLimit-Policy` and `RateLimit` as `meter` stands at `now` (see the `http_server`
/// module docs).
fn rate_limit_fields(meter: &RateMeter, now: Instant) -> String {
    let per_second = (1.0 / meter.interval().as_secs_f64()).floor().max(1.0) as u64;
    let reset = meter.until_full(now);
    let reset = reset.as_secs() + u64::from(reset.subsec_nanos() > 0);
    format!(
        "RateLimit-Policy: \"default\";q={per_second};w=1\r\n\
         RateLimit: \"default\";r={};t={reset}\r\n",
        meter.remaining(now)
    )
}
