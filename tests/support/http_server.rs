//! A loopback HTTP/1.1 server for tests and examples: several "hosts", real sockets.
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
//! #[path = "../tests/support/http_server.rs"]
//! mod http_server;
//!
//! let server = http_server::TestServer::builder()
//!     .host("fast", Duration::from_millis(2))
//!     .host("slow", Duration::from_millis(20))
//!     .flaky_host("flaky", Duration::from_millis(2))
//!     .start();
//! let url = server.url("fast", "/page/1"); // "http://127.0.0.1:PORT/page/1"
//! // ... fetch it ...
//! assert_eq!(server.stats("fast").peak, 1);
//! ```

#![allow(dead_code)]

use std::collections::HashSet;
use std::io;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::thread::JoinHandle;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::{FuturesUnordered, SelectAll};
use smol::future;
use smol::io::{AsyncReadExt, AsyncWriteExt};
use smol::net::{TcpListener, TcpStream};

/// The body a host answers `200` with for `path`: `"<host> <path>"`.
pub fn page_body(host: &str, path: &str) -> String {
    format!("{host} {path}")
}

/// The body of every `503` answer.
pub const UNAVAILABLE_BODY: &str = "service unavailable, try again";

/// The longest request head the server reads before answering `431`.
const MAX_HEAD: usize = 16 * 1024;

/// A snapshot of one host's counters (or, from [`TestServer::global`], all hosts' together).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Connections accepted and not yet answered (see the module docs).
    pub active: usize,
    /// The highest `active` seen since start (or the last [`TestServer::reset_peaks`]).
    pub peak: usize,
    /// Connections accepted.
    pub connections: usize,
    /// Request heads read completely.
    pub requests: usize,
    /// Responses the server started to write, whatever their status. Counted before the
    /// first byte goes out, so a client holding a response always finds it counted here.
    pub responses: usize,
    /// Of those, `503` answers.
    pub unavailable: usize,
    /// Connections the client closed before its response was completely written (including
    /// the rare response whose write then failed, which `responses` also counts).
    pub disconnects: usize,
}

/// Describes the hosts of a [`TestServer`] before it starts.
#[derive(Debug, Default)]
pub struct ServerBuilder {
    hosts: Vec<(String, Duration, bool)>,
}

impl ServerBuilder {
    /// Adds a host that answers every request with `200` after `latency`.
    #[track_caller]
    pub fn host(self, name: &str, latency: Duration) -> Self {
        self.add(name, latency, false)
    }

    /// Adds a host that answers `503` to the first request for each path and `200` to every
    /// later one, each after `latency`.
    #[track_caller]
    pub fn flaky_host(self, name: &str, latency: Duration) -> Self {
        self.add(name, latency, true)
    }

    #[track_caller]
    fn add(mut self, name: &str, latency: Duration, flaky: bool) -> Self {
        assert!(
            self.hosts.iter().all(|(known, ..)| known != name),
            "host {name:?} added twice"
        );
        self.hosts.push((name.to_owned(), latency, flaky));
        self
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
        let mut listeners = Vec::new();
        let mut hosts = Vec::new();
        for (name, latency, flaky) in self.hosts {
            let listener = StdListener::bind("127.0.0.1:0").expect("bind a loopback port");
            let host = Arc::new(Host {
                addr: listener.local_addr().expect("local address of a listener"),
                name,
                latency,
                flaky,
                seen_paths: Mutex::default(),
                gauge: Gauge::default(),
                counters: Counters::default(),
                global: global.clone(),
            });
            listeners.push((listener, host.clone()));
            hosts.push(host);
        }
        let refused = RefusedPort::new();

        let (stop, stopped) = smol::channel::bounded::<()>(1);
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

    /// The counters of `host`.
    ///
    /// # Panics
    ///
    /// If there is no such host.
    #[track_caller]
    pub fn stats(&self, host: &str) -> Stats {
        self.host(host).stats()
    }

    /// The counters summed over all hosts, with the global active count and its peak.
    pub fn global(&self) -> Stats {
        let mut total = self.hosts.iter().fold(Stats::default(), |mut total, host| {
            let stats = host.stats();
            total.connections += stats.connections;
            total.requests += stats.requests;
            total.responses += stats.responses;
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
    /// Paths already answered once with `503` (flaky hosts only).
    seen_paths: Mutex<HashSet<String>>,
    gauge: Gauge,
    counters: Counters,
    global: Arc<Gauge>,
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
            unavailable: load(&self.counters.unavailable),
            disconnects: load(&self.counters.disconnects),
        }
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

#[derive(Debug, Default)]
struct Counters {
    connections: AtomicUsize,
    requests: AtomicUsize,
    responses: AtomicUsize,
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
                Poll::Ready(Some((Ok(stream), host))) => connections.push(serve(stream, host)),
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
async fn serve(mut stream: TcpStream, host: Arc<Host>) {
    bump(&host.counters.connections);
    let host_active = host.gauge.enter();
    let global_active = host.global.enter();
    let answer = answer(&mut stream, &host).await;
    // Stop counting before anything else is recorded, so a test that sees the outcome
    // (a disconnect, a response) also sees the connection no longer active; and stop
    // before the client can see a response (see the module docs).
    drop(host_active);
    drop(global_active);
    let Some((status, body)) = answer else {
        bump(&host.counters.disconnects);
        return;
    };

    // Count the response before the client can see it, too: a client that has its
    // response always finds it counted.
    bump(&host.counters.responses);
    if status == 503 {
        bump(&host.counters.unavailable);
    }
    if stream
        .write_all(response(status, &body).as_bytes())
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

/// Reads the request and waits out the latency; returns the status and body to answer
/// with, or `None` when the client left first.
async fn answer(stream: &mut TcpStream, host: &Host) -> Option<(u16, String)> {
    let path = match read_request_path(stream).await {
        Ok(Ok(path)) => path,
        Ok(Err(status)) => return Some((status, String::new())),
        Err(_) => return None,
    };
    bump(&host.counters.requests);
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
    Some(match host.status_for(&path) {
        503 => (503, UNAVAILABLE_BODY.to_owned()),
        _ => (200, page_body(&host.name, &path)),
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

fn response(status: u16, body: &str) -> String {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "Unknown",
    };
    let retry_after = if status == 503 {
        "Retry-After: 0\r\n"
    } else {
        ""
    };
    format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
         {retry_after}Connection: close\r\n\r\n{body}",
        body.len()
    )
}
