//! A loopback HTTP/1.1 server for tests and examples: several "hosts", real sockets, and a
//! server-side judge of how politely a client behaves.
//!
//! Each host is its own listening port on 127.0.0.1 (an ephemeral port) with its own latency
//! per response. One extra address refuses every connection, and a host built with
//! [`ServerBuilder::flaky_host`] answers `503` to the first request for each path and `200`
//! afterwards (something for retries to recover from).
//!
//! The server runs on its own thread, on async-io (smol's reactor), so it works whatever
//! runtime the client uses: smol, `run_sync`, tokio, or a plain blocking thread.
//! [`TestServer::shutdown`] (or dropping the server) stops it and closes every socket.
//!
//! # What it measures
//!
//! - **Concurrency**: active connections per host and globally, with their peaks
//!   ([`Stats::active`], [`Stats::peak`]; see "What is counted" below).
//! - **Totals**: connections, requests, responses by status ([`Stats`]), and disconnects.
//! - **Arrivals**: the instant of every request to a host, with its path, status and the
//!   instant its answer went out ([`TestServer::arrivals`], [`Arrival`]). The free functions
//!   [`max_in_window`], [`count_between`] and [`achieved_rate`] turn that log into claims
//!   such as "never more than `burst + rate × W` requests in any window `W`" (bound:
//!   [`window_limit`]) or "no request to this host during the second after its `429`".
//! - **Rate violations**: with [`ServerBuilder::rate_limit`] (every host) or
//!   [`ServerBuilder::host_rate_limit`] (one host) the server meters each host itself, with
//!   its own [`RateMeter`], and answers a request that comes too soon with
//!   `429 Too Many Requests` and `Retry-After: <seconds>`, counting it in
//!   [`Stats::over_rate`]. A client that keeps to the rate sees no `429`; one that is 20%
//!   too fast is caught within a few requests.
//!
//! # Scripted answers
//!
//! - [`ServerBuilder::too_many_requests`]: a host answers `429` with `Retry-After: N` to its
//!   `k`-th request, and [`TestServer::too_many_requests_for`] makes it answer `429` to every
//!   request for a while from now: a client should then pause the whole host.
//! - [`ServerBuilder::flaky_retry_after`]: the `Retry-After` of a flaky host's `503`s
//!   (`0` unless set).
//! - [`TestServer::set_unavailable`]: a host answers `503` (no `Retry-After`) to everything
//!   that arrives from now on, until switched back: a host that goes down and recovers.
//!
//! # What a host says about its rate
//!
//! - [`ServerBuilder::rate_limit_fields`]: a metered host tells its rate on each `200`, in the
//!   IETF rate-limit fields: `RateLimit-Policy: "default";q=<per second>;w=1` (the meter's
//!   rate, rounded down, at least 1) and `RateLimit: "default";r=<remaining>;t=<reset>`,
//!   read from its meter (a GCRA, see below) as the answer goes out: `r` is how many requests
//!   in a row the meter would take at that instant (without the allowance), `t` the seconds
//!   until it would take its whole burst again (rounded up).
//! - [`TestServer::set_fields`]: header lines a host adds to each `200` from now on (a
//!   policy that changes in the middle of a run).
//!
//! Every `429` goes out as soon as the request head is read, without the host's latency: a
//! real rate limiter refuses before it does the work. `200`s and `503`s come after the latency.
//!
//! # The rate meter, and why it allows a little jitter
//!
//! A host's meter sees a request when the server *accepts* its connection (the earliest the
//! server can know of it) and decides then, in accept order. It keeps a theoretical schedule
//! (the "virtual scheduling" form of the generic cell rate algorithm): a request is on time
//! if it comes no earlier than `interval = 1 / per_second` after the previous accepted one,
//! with up to `burst` requests at once after a quiet spell. A request the meter refuses does
//! not move the schedule, so `429`s count exactly the requests beyond the rate.
//!
//! Loopback transit is not instantaneous, and a busy machine may run the server thread late:
//! a client that starts requests exactly at the rate can have two of them accepted slightly
//! closer together than the interval. So a request may arrive up to an **allowance** early
//! (20 ms unless [`ServerBuilder::rate_allowance`] says otherwise) and still be on time.
//! Earliness is never carried over (the schedule stays where it was), so a client that is
//! too fast on average is still caught: 20% too fast gains `interval / 6` per request and
//! crosses any allowance after a few requests. At rates above `1 / allowance` the allowance
//! also lets `floor(allowance × per_second)` extra requests into a burst.
//!
//! The server counts on one clock, [`std::time::Instant`], with real sockets: tokio's paused
//! clock does not reach it.
//!
//! # One request per connection
//!
//! Every response carries `Connection: close` and the server closes the connection after it:
//! there is no keep-alive. That is deliberate. A connection is then exactly one request, so
//! "concurrent connections" (what a real server's rate limiter sees) and "requests in flight"
//! (what a client-side cap limits) are the same number, and an idle pooled connection can
//! never inflate the count. Clients that do pool (hyper's pool, reqwest) see the header and
//! open a new connection for the next request.
//!
//! # What is counted
//!
//! Per host and across all hosts, the server counts **active connections**: a connection
//! counts from the moment it is accepted until its response *starts* to go out (or the
//! client goes away). It stops counting *before* the first byte of the response is written,
//! so a client can never see a response while the server still counts that connection:
//! a client that starts its next request only after the previous response arrived never
//! overlaps with itself in the server's eyes (sequential => peak 1, cap `n` => peak <= `n`).
//! The count starts at `accept`, which follows the client's `connect`: the server can only
//! under-count, never over-count, what the client has outstanding.
//!
//! One caveat is unavoidable on the server side: a request the client *cancels* (a dropped
//! future, a lost race, a timeout) still counts until its close reaches the server, a few
//! microseconds later. A test that asserts "peak <= cap" on a host should not cancel
//! requests to that host mid-flight, or should allow for it.
//!
//! A **disconnect** is a connection the client closed before its response was completely
//! written: it left while the server was reading the request, waiting out the latency
//! (the server watches the socket for end-of-file meanwhile), or writing the response.
//! That is how a test proves that a race's loser really closed its connection.
//!
//! # Example
//!
//! ```ignore
//! use tollgate_testkit::http_server;
//!
//! let server = http_server::TestServer::builder()
//!     .host("fast", Duration::from_millis(2))
//!     .host("slow", Duration::from_millis(20))
//!     .flaky_host("flaky", Duration::from_millis(2))
//!     .rate_limit(10.0, 1) // every host: 10 requests per second, no burst
//!     .too_many_requests("slow", 3, 1) // its 3rd request: `429`, `Retry-After: 1`
//!     .start();
//! let url = server.url("fast", "/page/1"); // "http://127.0.0.1:PORT/page/1"
//! // ... fetch it ...
//! assert_eq!(server.stats("fast").peak, 1);
//! assert_eq!(server.stats("fast").over_rate, 0);
//! let times = server.arrival_times("fast");
//! let second = Duration::from_secs(1);
//! // What the meter accepts keeps within the rate over any window, give or take the allowance.
//! let limit = http_server::window_limit(10.0, 1, second + http_server::DEFAULT_RATE_ALLOWANCE);
//! assert!(http_server::max_in_window(&times, second) <= limit);
//! ```

use std::collections::HashSet;
use std::io;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::{FuturesUnordered, SelectAll};
use smol::future;
use smol::io::{AsyncReadExt, AsyncWriteExt};
use smol::net::{TcpListener, TcpStream};

pub use crate::meter::{RateMeter, achieved_rate, count_between, max_in_window, window_limit};

/// The body a host answers `200` with for `path`: `"<host> <path>"`.
pub fn page_body(host: &str, path: &str) -> String {
    format!("{host} {path}")
}

/// The body of every `503` answer.
pub const UNAVAILABLE_BODY: &str = "service unavailable, try again";

/// The body of every `429` answer.
pub const TOO_MANY_BODY: &str = "too many requests, slow down";

/// How early a request may arrive and still be on time for a rate-limited host, unless
/// [`ServerBuilder::rate_allowance`] says otherwise (see the module docs).
pub const DEFAULT_RATE_ALLOWANCE: Duration = Duration::from_millis(20);

/// The longest request head the server reads before answering `431`.
const MAX_HEAD: usize = 16 * 1024;

/// A snapshot of one host's counters (or, from [`TestServer::global`], all hosts' together).
///
/// Responses by status: `ok` (`200`), `too_many` (`429`), `unavailable` (`503`); the rest of
/// `responses` are `400`/`431` answers to malformed requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Connections accepted and not yet answered (see the module docs).
    pub active: usize,
    /// The highest `active` seen since start (or the last [`TestServer::reset_peaks`]).
    pub peak: usize,
    /// Connections accepted: one per request, since there is no keep-alive.
    pub connections: usize,
    /// Request heads read completely.
    pub requests: usize,
    /// Responses the server started to write, whatever their status. Counted before the
    /// first byte goes out, so a client holding a response always finds it counted here.
    pub responses: usize,
    /// Of those, `200` answers.
    pub ok: usize,
    /// Of those, `429` answers: the rate meter's and the scripted ones.
    pub too_many: usize,
    /// Of the `429`s, those the rate meter gave: requests that came faster than the host's
    /// rate allows. Zero for a polite client.
    pub over_rate: usize,
    /// Of those, `503` answers.
    pub unavailable: usize,
    /// Connections the client closed before its response was completely written (including
    /// the rare response whose write then failed, which `responses` also counts).
    pub disconnects: usize,
}

/// One request as the server saw it, from [`TestServer::arrivals`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Arrival {
    /// When the server accepted the connection: the request's arrival, and the instant the
    /// rate meter judged. (One request per connection, see the module docs.)
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

/// How a host answers, set on the builder.
#[derive(Debug, Clone)]
struct HostPlan {
    name: String,
    latency: Duration,
    flaky: bool,
    flaky_retry_after: u64,
    /// `(per_second, burst)`; `None` takes the builder's rate for every host, if any.
    rate: Option<(f64, u32)>,
    /// `(k, retry_after)`: answer the `k`-th request (from 1) with `429`.
    scripted_429: Vec<(usize, u64)>,
    /// Whether its `200`s tell its meter's rate in the rate-limit fields.
    rate_limit_fields: bool,
}

/// Describes the hosts of a [`TestServer`] before it starts.
#[derive(Debug, Default)]
pub struct ServerBuilder {
    hosts: Vec<HostPlan>,
    /// The rate of every host without its own; applied at `start`.
    rate_for_all: Option<(f64, u32)>,
    allowance: Option<Duration>,
}

impl ServerBuilder {
    /// Adds a host that answers every request with `200` after `latency`.
    ///
    /// # Panics
    ///
    /// If a host of that name was added already.
    #[track_caller]
    pub fn host(self, name: &str, latency: Duration) -> Self {
        self.add(name, latency, false)
    }

    /// Adds a host that answers `503` to the first request for each path and `200` to every
    /// later one, each after `latency`. The `503`s say `Retry-After: 0` unless
    /// [`ServerBuilder::flaky_retry_after`] sets another value.
    ///
    /// # Panics
    ///
    /// If a host of that name was added already.
    #[track_caller]
    pub fn flaky_host(self, name: &str, latency: Duration) -> Self {
        self.add(name, latency, true)
    }

    /// Meters every host (unless [`ServerBuilder::host_rate_limit`] sets its own rate):
    /// `per_second` requests per second, bursts of up to `burst`; a request that comes too
    /// soon is answered `429` with `Retry-After` (see the module docs).
    ///
    /// # Panics
    ///
    /// If `per_second` is not finite and positive, or `burst` is 0.
    #[track_caller]
    pub fn rate_limit(mut self, per_second: f64, burst: u32) -> Self {
        RateMeter::new(per_second, burst, Duration::ZERO);
        self.rate_for_all = Some((per_second, burst));
        self
    }

    /// Meters `host` alone at `per_second` with bursts of up to `burst` (overrides
    /// [`ServerBuilder::rate_limit`] for that host).
    ///
    /// # Panics
    ///
    /// If there is no such host (yet), if `per_second` is not finite and positive, or
    /// `burst` is 0.
    #[track_caller]
    pub fn host_rate_limit(mut self, host: &str, per_second: f64, burst: u32) -> Self {
        RateMeter::new(per_second, burst, Duration::ZERO);
        self.plan(host).rate = Some((per_second, burst));
        self
    }

    /// How early a request may arrive at a rate-limited host and still be on time
    /// ([`DEFAULT_RATE_ALLOWANCE`], 20 ms, unless set). Raise it on a machine so busy that
    /// the server thread runs late; the meter still catches a client that is too fast on
    /// average, a few requests later.
    pub fn rate_allowance(mut self, allowance: Duration) -> Self {
        self.allowance = Some(allowance);
        self
    }

    /// Makes `host` answer its `k`-th request (counting every request from 1, whatever its
    /// answer) with `429 Too Many Requests` and `Retry-After: retry_after_secs`, at once.
    /// Call it again for more such requests.
    ///
    /// # Panics
    ///
    /// If there is no such host (yet) or `k` is 0.
    #[track_caller]
    pub fn too_many_requests(mut self, host: &str, k: usize, retry_after_secs: u64) -> Self {
        assert!(k >= 1, "requests count from 1");
        self.plan(host).scripted_429.push((k, retry_after_secs));
        self
    }

    /// Sets the `Retry-After` of a flaky host's `503`s, in seconds.
    ///
    /// # Panics
    ///
    /// If there is no such host (yet) or it is not flaky.
    #[track_caller]
    pub fn flaky_retry_after(mut self, host: &str, retry_after_secs: u64) -> Self {
        let plan = self.plan(host);
        assert!(plan.flaky, "host {host:?} is not flaky");
        plan.flaky_retry_after = retry_after_secs;
        self
    }

    /// Makes `host` tell its rate on each `200` in the IETF rate-limit fields,
    /// `RateLimit-Policy` and `RateLimit`, read from its meter (see the module docs). The
    /// host needs a meter: its own ([`ServerBuilder::host_rate_limit`]) or every host's
    /// ([`ServerBuilder::rate_limit`]).
    ///
    /// # Panics
    ///
    /// If there is no such host (yet); at [`start`](Self::start), if it has no meter.
    #[track_caller]
    pub fn rate_limit_fields(mut self, host: &str) -> Self {
        self.plan(host).rate_limit_fields = true;
        self
    }

    #[track_caller]
    fn add(mut self, name: &str, latency: Duration, flaky: bool) -> Self {
        assert!(
            self.hosts.iter().all(|known| known.name != name),
            "host {name:?} added twice"
        );
        self.hosts.push(HostPlan {
            name: name.to_owned(),
            latency,
            flaky,
            flaky_retry_after: 0,
            rate: None,
            scripted_429: Vec::new(),
            rate_limit_fields: false,
        });
        self
    }

    #[track_caller]
    fn plan(&mut self, host: &str) -> &mut HostPlan {
        self.hosts
            .iter_mut()
            .find(|plan| plan.name == host)
            .unwrap_or_else(|| panic!("no host named {host:?} (add it first)"))
    }

    /// Binds every port and starts the server thread.
    ///
    /// The ports are bound before this returns, so clients may connect at once.
    ///
    /// # Panics
    ///
    /// If a port cannot be bound or the thread cannot start.
    pub fn start(self) -> TestServer {
        let global = Arc::new(Gauge::default());
        let allowance = self.allowance.unwrap_or(DEFAULT_RATE_ALLOWANCE);
        let mut listeners = Vec::new();
        let mut hosts = Vec::new();
        for plan in self.hosts {
            let listener = StdListener::bind("127.0.0.1:0").expect("bind a loopback port");
            let meter = plan
                .rate
                .or(self.rate_for_all)
                .map(|(per_second, burst)| RateMeter::new(per_second, burst, allowance));
            assert!(
                meter.is_some() || !plan.rate_limit_fields,
                "host {:?} tells its rate but has no rate meter",
                plan.name
            );
            let host = Arc::new(Host {
                addr: listener.local_addr().expect("local address of a listener"),
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
                global: global.clone(),
            });
            listeners.push((listener, host.clone()));
            hosts.push(host);
        }
        let refused = RefusedPort::new();

        let (stop, stopped) = smol::channel::bounded::<()>(1);
        let started = Instant::now();
        let thread = std::thread::Builder::new()
            .name("tollgate-test-http-server".to_owned())
            .spawn(move || {
                let serving = serve_all(listeners);
                // The server runs until the sender is dropped; then every connection, timer
                // and listener is dropped with the future, which closes the sockets.
                async_io::block_on(future::or(serving, async {
                    let _ = stopped.recv().await;
                }));
            })
            .expect("start the server thread");

        TestServer {
            hosts,
            global,
            refused,
            started,
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

/// A running loopback HTTP/1.1 server; see the module docs. Stops when dropped.
#[derive(Debug)]
pub struct TestServer {
    hosts: Vec<Arc<Host>>,
    global: Arc<Gauge>,
    refused: RefusedPort,
    started: Instant,
    stop: Option<smol::channel::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl TestServer {
    /// Starts describing a server.
    pub fn builder() -> ServerBuilder {
        ServerBuilder::default()
    }

    /// The names of the hosts, in the order they were added.
    pub fn hosts(&self) -> impl Iterator<Item = &str> {
        self.hosts.iter().map(|host| host.name.as_str())
    }

    /// The address `host` listens on.
    ///
    /// # Panics
    ///
    /// If there is no such host.
    #[track_caller]
    pub fn addr(&self, host: &str) -> SocketAddr {
        self.host(host).addr
    }

    /// `http://127.0.0.1:<port of host><path>`.
    ///
    /// # Panics
    ///
    /// If there is no such host or `path` does not start with `/`.
    #[track_caller]
    pub fn url(&self, host: &str, path: &str) -> String {
        assert!(path.starts_with('/'), "path {path:?} must start with '/'");
        format!("http://{}{path}", self.addr(host))
    }

    /// An address on 127.0.0.1 that refuses every connection for as long as the server lives.
    ///
    /// A socket stays bound to the port without listening: the kernel answers connection
    /// attempts with a reset, and no other socket can take the port meanwhile.
    pub fn refused_addr(&self) -> SocketAddr {
        self.refused.addr
    }

    /// `http://<refused address><path>`.
    #[track_caller]
    pub fn refused_url(&self, path: &str) -> String {
        assert!(path.starts_with('/'), "path {path:?} must start with '/'");
        format!("http://{}{path}", self.refused.addr)
    }

    /// When the server started (just before its thread did): a zero for printing arrivals.
    pub fn started(&self) -> Instant {
        self.started
    }

    /// The counters of `host`.
    ///
    /// # Panics
    ///
    /// If there is no such host.
    #[track_caller]
    pub fn stats(&self, host: &str) -> Stats {
        self.host(host).stats()
    }

    /// Every request `host` received so far, in arrival order.
    ///
    /// # Panics
    ///
    /// If there is no such host.
    #[track_caller]
    pub fn arrivals(&self, host: &str) -> Vec<Arrival> {
        self.host(host).door.lock().unwrap().arrivals.clone()
    }

    /// The arrival instants of every request `host` received so far, in order: the input of
    /// [`max_in_window`], [`count_between`] and [`achieved_rate`].
    ///
    /// # Panics
    ///
    /// If there is no such host.
    #[track_caller]
    pub fn arrival_times(&self, host: &str) -> Vec<Instant> {
        let door = self.host(host).door.lock().unwrap();
        door.arrivals.iter().map(|arrival| arrival.at).collect()
    }

    /// Makes `host` answer `429` with `Retry-After: retry_after_secs` to every request that
    /// arrives during `duration` from now (the rate meter still judges them first). A zero
    /// `duration` ends such a spell early.
    ///
    /// # Panics
    ///
    /// If there is no such host.
    #[track_caller]
    pub fn too_many_requests_for(&self, host: &str, duration: Duration, retry_after_secs: u64) {
        let until = Instant::now() + duration;
        self.host(host).door.lock().unwrap().throttle = Some((until, retry_after_secs));
    }

    /// Meters `host` at `per_second` from now on, burst unchanged (a server that halves its
    /// rate in the middle of a run).
    ///
    /// # Panics
    ///
    /// If there is no such host, or it has no rate meter.
    #[track_caller]
    pub fn set_host_rate(&self, host: &str, per_second: f64) {
        let mut door = self.host(host).door.lock().unwrap();
        door.meter
            .as_mut()
            .expect("the host has a rate meter")
            .set_rate(per_second);
    }

    /// Makes `host` answer `503 Service Unavailable` (without `Retry-After`, after its
    /// latency) to every request that arrives from now on while `unavailable` is true, before
    /// anything else judges it (its meter does not see it); `false` brings it back.
    ///
    /// # Panics
    ///
    /// If there is no such host.
    #[track_caller]
    pub fn set_unavailable(&self, host: &str, unavailable: bool) {
        self.host(host)
            .unavailable
            .store(unavailable, Ordering::SeqCst);
    }

    /// Makes `host` add `fields` (header lines `Name: value`, replacing the ones set before;
    /// none stops) to each `200` from now on, and returns from when: every answer whose
    /// [`Arrival::answered_at`] is at or after the returned instant carries them, and no
    /// earlier one does.
    ///
    /// # Panics
    ///
    /// If there is no such host, or a field has no `:` or holds a line break.
    #[track_caller]
    pub fn set_fields(&self, host: &str, fields: &[&str]) -> Instant {
        let mut lines = String::new();
        for field in fields {
            assert!(
                field.contains(':') && !field.contains(['\r', '\n']),
                "{field:?} is not a header line"
            );
            lines.push_str(field);
            lines.push_str("\r\n");
        }
        let mut door = self.host(host).door.lock().unwrap();
        door.fields = lines;
        Instant::now()
    }

    /// The counters summed over all hosts, with the global active count and its peak.
    pub fn global(&self) -> Stats {
        let mut total = self.hosts.iter().fold(Stats::default(), |mut total, host| {
            let stats = host.stats();
            total.connections += stats.connections;
            total.requests += stats.requests;
            total.responses += stats.responses;
            total.ok += stats.ok;
            total.too_many += stats.too_many;
            total.over_rate += stats.over_rate;
            total.unavailable += stats.unavailable;
            total.disconnects += stats.disconnects;
            total
        });
        total.active = self.global.now();
        total.peak = self.global.peak();
        total
    }

    /// Lowers every peak (per host and global) to the current active count, to measure a new
    /// phase of a test.
    pub fn reset_peaks(&self) {
        self.global.reset_peak();
        for host in &self.hosts {
            host.gauge.reset_peak();
        }
    }

    /// Stops the server thread and closes every socket, waiting for the thread to end.
    ///
    /// # Panics
    ///
    /// If the server thread panicked.
    pub fn shutdown(mut self) {
        self.stop_thread();
    }

    fn stop_thread(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let result = thread.join();
            if result.is_err() && !std::thread::panicking() {
                panic!("the test HTTP server thread panicked");
            }
        }
    }

    #[track_caller]
    fn host(&self, name: &str) -> &Host {
        self.hosts
            .iter()
            .find(|host| host.name == name)
            .unwrap_or_else(|| panic!("no host named {name:?}"))
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop_thread();
    }
}

/// A port that refuses connections: bound, never listening.
#[derive(Debug)]
struct RefusedPort {
    addr: SocketAddr,
    _socket: socket2::Socket,
}

impl RefusedPort {
    fn new() -> Self {
        use socket2::{Domain, Socket, Type};
        let socket = Socket::new(Domain::IPV4, Type::STREAM, None).expect("create a socket");
        let any_port: SocketAddr = "127.0.0.1:0".parse().expect("a socket address");
        socket.bind(&any_port.into()).expect("bind a loopback port");
        let addr = socket
            .local_addr()
            .ok()
            .and_then(|addr| addr.as_socket())
            .expect("local address of the refusing socket");
        Self {
            addr,
            _socket: socket,
        }
    }
}

#[derive(Debug)]
struct Host {
    name: String,
    addr: SocketAddr,
    latency: Duration,
    flaky: bool,
    flaky_retry_after: u64,
    scripted_429: Vec<(usize, u64)>,
    /// Whether its `200`s tell its meter's rate.
    rate_limit_fields: bool,
    /// Paths already answered once with `503` (flaky hosts only).
    seen_paths: Mutex<HashSet<String>>,
    /// Answer `503` to whatever arrives ([`TestServer::set_unavailable`]).
    unavailable: AtomicBool,
    door: Mutex<Door>,
    gauge: Gauge,
    counters: Counters,
    global: Arc<Gauge>,
}

/// What a host decides when a connection arrives, and its log: one lock, taken once per
/// arrival and once per answer.
#[derive(Debug)]
struct Door {
    meter: Option<RateMeter>,
    arrivals: Vec<Arrival>,
    /// `(until, retry_after)`: answer `429` to whatever arrives before `until`.
    throttle: Option<(Instant, u64)>,
    /// Header lines added to each `200` ([`TestServer::set_fields`]), each ending in CRLF.
    fields: String,
}

/// The door's verdict on one arrival.
#[derive(Clone, Copy, Debug)]
struct Ticket {
    /// The arrival's place in the host's log.
    index: usize,
    /// `Some(retry_after)`: answer `429` at once.
    refuse: Option<u64>,
    /// Answer `503`: the host is down ([`TestServer::set_unavailable`]).
    unavailable: bool,
}

impl Host {
    fn stats(&self) -> Stats {
        let load = |counter: &AtomicUsize| counter.load(Ordering::SeqCst);
        Stats {
            active: self.gauge.now(),
            peak: self.gauge.peak(),
            connections: load(&self.counters.connections),
            requests: load(&self.counters.requests),
            responses: load(&self.counters.responses),
            ok: load(&self.counters.ok),
            too_many: load(&self.counters.too_many),
            over_rate: load(&self.counters.over_rate),
            unavailable: load(&self.counters.unavailable),
            disconnects: load(&self.counters.disconnects),
        }
    }

    /// Logs a connection accepted at `at` and decides whether it gets a `429`: first the
    /// rate meter, then the scripted `k`-th request, then a spell of `429`s.
    fn arrive(&self, at: Instant) -> Ticket {
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

    fn record_path(&self, ticket: Ticket, path: &str) {
        self.door.lock().unwrap().arrivals[ticket.index].path = Some(path.to_owned());
    }

    /// Counts a response about to go out: before its first byte, so a client that holds it
    /// finds it counted. Returns the header lines it adds to a `200`: the rate-limit fields
    /// read from the meter at this instant, and the ones [`TestServer::set_fields`] set.
    fn record_answer(&self, ticket: Ticket, status: u16) -> String {
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
    fn status_for(&self, path: &str) -> u16 {
        if self.flaky && self.seen_paths.lock().unwrap().insert(path.to_owned()) {
            503
        } else {
            200
        }
    }
}

/// `RateLimit-Policy` and `RateLimit` as `meter` stands at `now` (see the module docs).
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

#[derive(Debug, Default)]
struct Counters {
    connections: AtomicUsize,
    requests: AtomicUsize,
    responses: AtomicUsize,
    ok: AtomicUsize,
    too_many: AtomicUsize,
    over_rate: AtomicUsize,
    unavailable: AtomicUsize,
    disconnects: AtomicUsize,
}

fn bump(counter: &AtomicUsize) {
    counter.fetch_add(1, Ordering::SeqCst);
}

/// A count of active connections with its peak.
#[derive(Debug, Default)]
struct Gauge {
    now: AtomicUsize,
    peak: AtomicUsize,
}

impl Gauge {
    fn enter(&self) -> GaugeGuard<'_> {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        GaugeGuard(self)
    }

    fn now(&self) -> usize {
        self.now.load(Ordering::SeqCst)
    }

    fn peak(&self) -> usize {
        self.peak.load(Ordering::SeqCst)
    }

    fn reset_peak(&self) {
        self.peak.store(self.now(), Ordering::SeqCst);
    }
}

struct GaugeGuard<'a>(&'a Gauge);

impl Drop for GaugeGuard<'_> {
    fn drop(&mut self) {
        self.0.now.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Accepts on every listener and serves every connection, all on the current thread.
async fn serve_all(listeners: Vec<(StdListener, Arc<Host>)>) {
    let mut incoming = SelectAll::new();
    for (listener, host) in listeners {
        let listener = TcpListener::try_from(listener).expect("register a listener");
        let accepts = futures::stream::unfold(listener, |listener| async move {
            let accepted = listener.accept().await.map(|(stream, _)| stream);
            Some((accepted, listener))
        });
        incoming.push(Box::pin(
            accepts.map(move |accepted| (accepted, host.clone())),
        ));
    }
    let mut connections = FuturesUnordered::new();
    future::poll_fn(|cx| {
        loop {
            // Drive the open connections; an empty set is simply done for now.
            while let Poll::Ready(Some(())) = connections.poll_next_unpin(cx) {}
            match incoming.poll_next_unpin(cx) {
                Poll::Ready(Some((Ok(stream), host))) => {
                    // Judged here, in accept order, at the earliest instant the server knows.
                    let ticket = host.arrive(Instant::now());
                    connections.push(serve(stream, host, ticket));
                }
                // A failed accept (the client gave up in the backlog, or no file descriptor
                // was free) is the client's problem; keep accepting.
                Poll::Ready(Some((Err(_), _))) => {}
                Poll::Ready(None) | Poll::Pending => return Poll::Pending,
            }
        }
    })
    .await
}

/// Serves one request on `stream` and closes it.
async fn serve(mut stream: TcpStream, host: Arc<Host>, ticket: Ticket) {
    bump(&host.counters.connections);
    let host_active = host.gauge.enter();
    let global_active = host.global.enter();
    let answer = answer(&mut stream, &host, ticket).await;
    // Stop counting before anything else is recorded, so a test that sees the outcome
    // (a disconnect, a response) also sees the connection no longer active; and stop
    // before the client can see a response (see the module docs).
    drop(host_active);
    drop(global_active);
    let Some(answer) = answer else {
        bump(&host.counters.disconnects);
        return;
    };

    let fields = host.record_answer(ticket, answer.status);
    if stream
        .write_all(answer.to_http(&fields).as_bytes())
        .await
        .is_err()
    {
        bump(&host.counters.disconnects);
        return;
    }
    // Half-close to send end-of-file now; the socket closes when `stream` drops. An error
    // here comes after the whole response was handed to the kernel: not a disconnect.
    let _ = stream.close().await;
}

/// A response to write.
struct Answer {
    status: u16,
    retry_after: Option<u64>,
    body: String,
}

impl Answer {
    fn new(status: u16, retry_after: Option<u64>, body: impl Into<String>) -> Self {
        Self {
            status,
            retry_after,
            body: body.into(),
        }
    }

    /// The response, with `fields` (header lines, each ending in CRLF) among its headers.
    fn to_http(&self, fields: &str) -> String {
        let Self {
            status,
            retry_after,
            body,
        } = self;
        let reason = match status {
            200 => "OK",
            400 => "Bad Request",
            429 => "Too Many Requests",
            431 => "Request Header Fields Too Large",
            503 => "Service Unavailable",
            _ => "Unknown",
        };
        let retry_after =
            retry_after.map_or_else(String::new, |secs| format!("Retry-After: {secs}\r\n"));
        format!(
            "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
             {retry_after}{fields}Connection: close\r\n\r\n{body}",
            body.len()
        )
    }
}

/// Reads the request and waits out the latency; returns what to answer, or `None` when the
/// client left first. A refused request is answered `429` as soon as its head is read.
async fn answer(stream: &mut TcpStream, host: &Host, ticket: Ticket) -> Option<Answer> {
    let path = match read_request_path(stream).await {
        Ok(Ok(path)) => path,
        Ok(Err(status)) => return Some(Answer::new(status, None, "")),
        Err(_) => return None,
    };
    bump(&host.counters.requests);
    host.record_path(ticket, &path);
    if let Some(retry_after) = ticket.refuse {
        return Some(Answer::new(429, Some(retry_after), TOO_MANY_BODY));
    }
    // Wait out the latency, watching for the client to leave meanwhile.
    let left = future::or(
        async {
            async_io::Timer::after(host.latency).await;
            false
        },
        async {
            closed_by_peer(stream).await;
            true
        },
    )
    .await;
    if left {
        return None;
    }
    if ticket.unavailable {
        return Some(Answer::new(503, None, UNAVAILABLE_BODY));
    }
    Some(match host.status_for(&path) {
        503 => Answer::new(503, Some(host.flaky_retry_after), UNAVAILABLE_BODY),
        _ => Answer::new(200, None, page_body(&host.name, &path)),
    })
}

/// Reads a request head and returns its path, or the error status to answer with.
///
/// An `io::Error` (including end-of-file before the head is complete) means the client left.
async fn read_request_path(stream: &mut TcpStream) -> io::Result<Result<String, u16>> {
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0; 1024];
    while !head.windows(4).any(|window| window == b"\r\n\r\n") {
        if head.len() > MAX_HEAD {
            return Ok(Err(431));
        }
        let read = stream.read(&mut chunk).await?;
        if read == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        head.extend_from_slice(&chunk[..read]);
    }
    let line = head.split(|&byte| byte == b'\r').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split(' ');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(_method), Some(path), Some(version), None)
            if path.starts_with('/') && version.starts_with("HTTP/1.") =>
        {
            Ok(Ok(path.to_owned()))
        }
        _ => Ok(Err(400)),
    }
}

/// Completes when the peer closes its side (end-of-file) or the connection fails.
///
/// Anything the client sends after the request head is read and ignored.
async fn closed_by_peer(stream: &mut TcpStream) {
    let mut sink = [0; 512];
    while let Ok(1..) = stream.read(&mut sink).await {}
}
