//! The running server: [`ServerBuilder::start`] binds every port and starts the server
//! thread; [`TestServer`] reads what the hosts counted and logged, and changes how they
//! answer while it runs; the refused address lives as long as it.

use std::net::{SocketAddr, TcpListener as StdListener};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use smol::future;

use super::builder::{DEFAULT_RATE_ALLOWANCE, ServerBuilder};
use super::counts::{Gauge, Stats};
use super::host::{Arrival, Host};
use super::serve::serve_all;
use crate::meter::RateMeter;

impl ServerBuilder {
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
            let addr = listener.local_addr().expect("local address of a listener");
            let host = Arc::new(Host::new(plan, addr, meter, global.clone()));
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

/// A running loopback HTTP/1.1 server; see the `http_server` module docs. Stops when dropped.
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
    /// [`max_in_window`](super::max_in_window), [`count_between`](super::count_between) and
    /// [`achieved_rate`](super::achieved_rate).
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
