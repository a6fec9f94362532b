//! An nginx of a test's own: real `limit_req` rate limits to crawl against, on loopback.
//!
//! [`Nginx`] starts `nginx` as the current user (no root-only path: its configuration, pid
//! file, logs and temporary folders live in a scratch directory of its own) with one server
//! per host, each on a free 127.0.0.1 port, metered by a `limit_req` zone of its own at the
//! host's rate, **without burst**: a request that comes sooner than `1 / rate` after the
//! last one nginx let through is answered `429` at once (`limit_req_status 429`; nginx sends
//! no `Retry-After`). Every other request gets a small static page. Dropping the `Nginx`
//! stops the process.
//!
//! [`Nginx::set_rate`] changes a host's rate while nginx runs: the configuration is written
//! again and nginx reloads it (`nginx -s reload`); the call returns once every host answers
//! from the new configuration and the old workers are gone (until then they may still
//! answer a new connection from the old one). nginx keeps a zone's state across a reload, so the new rate
//! applies from the last request let through.
//!
//! # Hosts with more than a rate
//!
//! [`Nginx::start_plans`] takes a [`HostPlan`] per host, for the hidden limits a real site
//! keeps: a `limit_req` rate with a burst (`burst=N nodelay`: up to N more at once, then
//! `429`), a `limit_conn` cap (beyond it, nginx's default bare `503`), an upstream with
//! latency to pass requests to (a loopback server of the test's own, so a connection cap has
//! something to hold), a `RateLimit-Policy` header on every answer, and being down (every
//! request answered `503` with `Retry-After`). [`Nginx::set_plan`] changes a host's plan while
//! nginx runs, as `set_rate` does: a host goes down and comes back.
//!
//! What nginx let through and what it refused is read from its access log
//! ([`Nginx::statuses`]): one line per request, with the instant nginx handled it.
//!
//! # How nginx measures
//!
//! `limit_req` counts in whole milliseconds of nginx's cached clock (updated once per turn
//! of its event loop): a request is let through when at least `1000 / rate` milliseconds of
//! that clock passed since the last one let through. Truncating both instants to the
//! millisecond makes the meter a little lenient: two requests 49.3 ms apart on the wire may
//! read as 50 ms. Rates are whole requests per second.
//!
//! `nginx` must be on the `PATH` (or in `/usr/sbin`); `.ci/run` installs it. Without it
//! [`Nginx::start`] panics with a message saying so, rather than letting a test pass having
//! proved nothing.
//!
//! # Example
//!
//! ```ignore
//! use tollgate_testkit::nginx::Nginx;
//!
//! let nginx = Nginx::start(&[("a", 20), ("b", 20)]);
//! let url = nginx.url("a", "/page/1"); // "http://127.0.0.1:PORT/page/1"
//! // ... crawl ...
//! nginx.set_rate("a", 10); // halve host "a"'s rate while the crawl runs
//! let refused = nginx.statuses("a").iter().filter(|line| line.status == 429).count();
//! ```

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long nginx may take to start, or to answer from a reloaded configuration.
const DEADLINE: Duration = Duration::from_secs(10);

/// The body of every page nginx serves.
pub const PAGE_BODY: &str = "a page from nginx\n";

/// One request in nginx's access log.
#[derive(Clone, Debug, PartialEq)]
pub struct Logged {
    /// The status nginx answered: `200`, or `429` for a request `limit_req` refused.
    pub status: u16,
    /// When nginx handled it, in seconds since the Unix epoch (millisecond resolution).
    pub at: f64,
    /// The request's path.
    pub path: String,
}

/// How one host of an [`Nginx`] answers: its meters, what stands behind it, what it says.
/// A plan with nothing set serves a small static page to everyone.
///
/// # Example
///
/// ```ignore
/// use tollgate_testkit::nginx::HostPlan;
///
/// // 10 a second with 5 at once beyond it, 4 connections at most, behind a slow upstream,
/// // telling its policy.
/// let plan = HostPlan::new("shop")
///     .rate(10)
///     .burst(5)
///     .conn(4)
///     .upstream(upstream_addr)
///     .policy(r#""default";q=10;w=1"#);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostPlan {
    name: String,
    rate: Option<u32>,
    burst: u32,
    conn: Option<u32>,
    upstream: Option<SocketAddr>,
    policy: Option<String>,
    down: Option<u32>,
    refused_retry_after: Option<u32>,
}

impl HostPlan {
    /// A host named `name` with no meter, serving the static page.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            rate: None,
            burst: 0,
            conn: None,
            upstream: None,
            policy: None,
            down: None,
            refused_retry_after: None,
        }
    }

    /// Meters the host with `limit_req` at `per_second` (a request sooner than its share is
    /// answered `429` at once, with no `Retry-After`).
    ///
    /// # Panics
    ///
    /// If `per_second` is 0 (it would refuse everything).
    #[must_use]
    #[track_caller]
    pub fn rate(mut self, per_second: u32) -> Self {
        assert!(
            per_second > 0,
            "host {:?}: a rate of 0 would refuse everything",
            self.name
        );
        self.rate = Some(per_second);
        self
    }

    /// Lets up to `burst` requests through at once beyond the rate (`burst=N nodelay`).
    #[must_use]
    pub fn burst(mut self, burst: u32) -> Self {
        self.burst = burst;
        self
    }

    /// Caps the requests the host holds at once at `connections` (`limit_conn`: beyond it a
    /// bare `503`, nginx's default).
    ///
    /// # Panics
    ///
    /// If `connections` is 0.
    #[must_use]
    #[track_caller]
    pub fn conn(mut self, connections: u32) -> Self {
        assert!(
            connections > 0,
            "host {:?}: a cap of 0 would refuse everything",
            self.name
        );
        self.conn = Some(connections);
        self
    }

    /// Passes every request to `upstream` (`proxy_pass`) instead of serving the page: a
    /// loopback server with the latency the host should have.
    #[must_use]
    pub fn upstream(mut self, upstream: SocketAddr) -> Self {
        self.upstream = Some(upstream);
        self
    }

    /// Sends `RateLimit-Policy: <policy>` with every answer (`policy` as the field's value,
    /// for example `"default";q=10;w=1`).
    ///
    /// # Panics
    ///
    /// If `policy` holds a `'` or a newline (nginx's configuration quotes it).
    #[must_use]
    #[track_caller]
    pub fn policy(mut self, policy: &str) -> Self {
        assert!(
            !policy.contains(['\'', '\n', '\\']),
            "host {:?}: a policy nginx cannot quote: {policy:?}",
            self.name
        );
        self.policy = Some(policy.to_owned());
        self
    }

    /// Sends `Retry-After: <secs>` with each `429` of the host's rate meter (nginx sends
    /// none by default).
    #[must_use]
    pub fn refused_retry_after(mut self, secs: u32) -> Self {
        self.refused_retry_after = Some(secs);
        self
    }

    /// Takes the host down: every request is answered `503` with `Retry-After:
    /// <retry_after_secs>`, before any meter counts it.
    #[must_use]
    pub fn down(mut self, retry_after_secs: u32) -> Self {
        self.down = Some(retry_after_secs);
        self
    }

    /// Brings the host back up: its meters and upstream answer again.
    #[must_use]
    pub fn up(mut self) -> Self {
        self.down = None;
        self
    }

    /// The host's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

#[derive(Debug)]
struct Host {
    port: u16,
    plan: HostPlan,
}

/// A running nginx of the test's own; see the module docs. Stops when dropped.
#[derive(Debug)]
pub struct Nginx {
    dir: PathBuf,
    binary: PathBuf,
    child: Child,
    hosts: Mutex<Vec<Host>>,
    /// The configuration's generation: each host answers it at `/__generation`.
    generation: AtomicU64,
}

impl Nginx {
    /// Whether an `nginx` binary can be found.
    pub fn available() -> bool {
        binary().is_some()
    }

    /// Starts nginx with one server per `(host, requests per second)` and waits until every
    /// host answers.
    ///
    /// # Panics
    ///
    /// If `nginx` is not installed, a rate is 0, a host is named twice, or nginx does not
    /// come up.
    #[track_caller]
    pub fn start(hosts: &[(&str, u32)]) -> Self {
        let plans: Vec<HostPlan> = hosts
            .iter()
            .map(|(name, rate)| HostPlan::new(name).rate(*rate))
            .collect();
        Self::start_plans(&plans)
    }

    /// Starts nginx with one server per plan and waits until every host answers.
    ///
    /// # Panics
    ///
    /// If `nginx` is not installed, a host is named twice, or nginx does not come up.
    #[track_caller]
    pub fn start_plans(plans: &[HostPlan]) -> Self {
        let binary = binary()
            .expect("nginx is not installed: `apt-get install nginx-light` (.ci/run installs it)");
        for (i, plan) in plans.iter().enumerate() {
            assert!(
                plans[..i].iter().all(|other| other.name != plan.name),
                "host {:?} named twice",
                plan.name
            );
        }
        // A port is free when we pick it and may be taken before nginx binds it: try a few.
        let mut last_error = String::new();
        for attempt in 0..5 {
            let dir = std::env::temp_dir().join(format!(
                "tollgate-nginx-{}-{}-{attempt}",
                std::process::id(),
                NEXT_DIR.fetch_add(1, Ordering::Relaxed)
            ));
            let hosts = plans
                .iter()
                .zip(free_ports(plans.len()))
                .map(|(plan, port)| Host {
                    port,
                    plan: plan.clone(),
                })
                .collect();
            match Self::launch(binary.clone(), dir, hosts) {
                Ok(nginx) => return nginx,
                Err(error) => last_error = error,
            }
        }
        panic!("nginx did not start: {last_error}");
    }

    fn launch(binary: PathBuf, dir: PathBuf, hosts: Vec<Host>) -> Result<Self, String> {
        let www = dir.join("www");
        std::fs::create_dir_all(&www).map_err(|error| format!("create {www:?}: {error}"))?;
        std::fs::write(www.join("page"), PAGE_BODY).map_err(|error| error.to_string())?;
        let config = config(&dir, &hosts, 0);
        std::fs::write(dir.join("nginx.conf"), config).map_err(|error| error.to_string())?;
        let child = Command::new(&binary)
            .args(nginx_args(&dir))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|error| format!("run {binary:?}: {error}"))?;
        let nginx = Self {
            dir,
            binary,
            child,
            hosts: Mutex::new(hosts),
            generation: AtomicU64::new(0),
        };
        // On failure the drop stops whatever started and removes the directory.
        nginx.await_generation(0)?;
        Ok(nginx)
    }

    /// The address `host` listens on.
    ///
    /// # Panics
    ///
    /// If there is no such host.
    #[track_caller]
    pub fn addr(&self, host: &str) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port(host)))
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

    /// The rate `host` is metered at now, in requests per second (0: no rate meter).
    ///
    /// # Panics
    ///
    /// If there is no such host.
    #[track_caller]
    pub fn rate(&self, host: &str) -> u32 {
        self.with_host(host, |host| host.plan.rate.unwrap_or(0))
    }

    /// `host`'s plan now.
    ///
    /// # Panics
    ///
    /// If there is no such host.
    #[track_caller]
    pub fn plan(&self, host: &str) -> HostPlan {
        self.with_host(host, |host| host.plan.clone())
    }

    /// Gives `plan`'s host that plan from now on: writes the configuration again, reloads
    /// nginx, and returns once every host answers from the new configuration (as
    /// [`set_rate`](Self::set_rate)).
    ///
    /// # Panics
    ///
    /// If there is no host of that name, or nginx does not reload.
    #[track_caller]
    pub fn set_plan(&self, plan: HostPlan) {
        let name = plan.name.clone();
        self.with_host(&name, |host| host.plan = plan);
        self.reload();
    }

    /// Meters `host` at `per_second` from now on: writes the configuration again, reloads
    /// nginx, and returns once every host answers from the new configuration.
    ///
    /// # Panics
    ///
    /// If there is no such host, `per_second` is 0, or nginx does not reload.
    #[track_caller]
    pub fn set_rate(&self, host: &str, per_second: u32) {
        assert!(per_second > 0, "a rate of 0 would refuse everything");
        self.with_host(host, |host| host.plan.rate = Some(per_second));
        self.reload();
    }

    /// Writes the configuration again and reloads nginx; returns once every host answers
    /// from it.
    #[track_caller]
    fn reload(&self) {
        let old_workers = self.workers();
        let generation = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
        let config = config(&self.dir, &self.hosts.lock().unwrap(), generation);
        std::fs::write(self.dir.join("nginx.conf"), config).expect("write nginx.conf");
        let status = Command::new(&self.binary)
            .args(nginx_args(&self.dir))
            .args(["-s", "reload"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("run nginx -s reload");
        assert!(
            status.success(),
            "nginx -s reload failed: {}",
            self.error_log()
        );
        self.await_generation(generation)
            .unwrap_or_else(|error| panic!("nginx did not reload: {error}"));
        // The old workers stop accepting only once they see the master's signal: until they
        // are gone, a new connection may still be answered from the old configuration.
        let until = Instant::now() + DEADLINE;
        while self.workers().iter().any(|pid| old_workers.contains(pid)) {
            assert!(
                Instant::now() < until,
                "nginx's old workers did not stop: {}",
                self.error_log()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The process ids of nginx's workers (the master's children), read from `/proc`.
    fn workers(&self) -> Vec<u32> {
        let master = self.child.id();
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        entries
            .filter_map(|entry| {
                let pid: u32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
                // `pid (comm) state ppid ...`: the name may hold spaces, the `)` ends it.
                let ppid: u32 = stat
                    .rsplit_once(')')?
                    .1
                    .split_whitespace()
                    .nth(1)?
                    .parse()
                    .ok()?;
                (ppid == master).then_some(pid)
            })
            .collect()
    }

    /// Every request nginx logged for `host` so far, in the order it handled them.
    ///
    /// # Panics
    ///
    /// If there is no such host or the access log cannot be read.
    #[track_caller]
    pub fn statuses(&self, host: &str) -> Vec<Logged> {
        let port = self.port(host).to_string();
        let log = std::fs::read_to_string(self.dir.join("access.log")).expect("read access.log");
        log.lines()
            .filter_map(|line| {
                let mut fields = line.split(' ');
                let (Some(line_port), Some(status), Some(at), Some(path)) =
                    (fields.next(), fields.next(), fields.next(), fields.next())
                else {
                    return None;
                };
                (line_port == port && !path.starts_with("/__")).then(|| Logged {
                    status: status.parse().unwrap_or(0),
                    at: at.parse().unwrap_or(0.0),
                    path: path.to_owned(),
                })
            })
            .collect()
    }

    /// nginx's error log so far (what it said when it would not start or reload).
    pub fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("error.log")).unwrap_or_default()
    }

    #[track_caller]
    fn port(&self, host: &str) -> u16 {
        self.with_host(host, |host| host.port)
    }

    #[track_caller]
    fn with_host<R>(&self, name: &str, f: impl FnOnce(&mut Host) -> R) -> R {
        let mut hosts = self.hosts.lock().unwrap();
        let host = hosts
            .iter_mut()
            .find(|host| host.plan.name == name)
            .unwrap_or_else(|| panic!("no host named {name:?}"));
        f(host)
    }

    /// Waits until every host answers `generation` at `/__generation`.
    fn await_generation(&self, generation: u64) -> Result<(), String> {
        let ports: Vec<u16> = self.hosts.lock().unwrap().iter().map(|h| h.port).collect();
        let expected = format!("generation {generation}");
        let until = Instant::now() + DEADLINE;
        for port in ports {
            loop {
                let body = get_body(port, "/__generation").unwrap_or_default();
                if body == expected {
                    break;
                }
                if Instant::now() > until {
                    return Err(format!(
                        "port {port} answered {body:?}: {}",
                        self.error_log()
                    ));
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        Ok(())
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // `stop` is nginx's fast shutdown: the master ends its workers, then itself (killing
        // only the master would leave the workers running).
        let stopped = Command::new(&self.binary)
            .args(nginx_args(&self.dir))
            .args(["-s", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success());
        let until = Instant::now() + DEADLINE;
        while stopped && Instant::now() < until {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

static NEXT_DIR: AtomicU64 = AtomicU64::new(0);

/// The `nginx` binary: on the `PATH`, or where Debian puts it (`/usr/sbin`, not on every
/// user's `PATH`).
fn binary() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/local/sbin")])
        .map(|dir| dir.join("nginx"))
        .find(|candidate| candidate.is_file())
}

/// The arguments that point nginx at the scratch directory: its prefix, its configuration
/// and its error log from the first line it writes (before it reads the configuration).
fn nginx_args(dir: &Path) -> Vec<String> {
    let dir = dir.to_string_lossy();
    vec![
        "-p".to_owned(),
        format!("{dir}/"),
        "-c".to_owned(),
        format!("{dir}/nginx.conf"),
        "-e".to_owned(),
        format!("{dir}/error.log"),
    ]
}

/// `count` loopback ports, free a moment ago and distinct: each is held until all are
/// picked. Picked one at a time and let go, two hosts could get the same port (the system
/// may hand a port just let go out again); nginx would then serve both from one server
/// block with one rate, and count both hosts' requests in each one's log.
fn free_ports(count: usize) -> Vec<u16> {
    let held: Vec<TcpListener> = (0..count)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral loopback port"))
        .collect();
    held.iter()
        .map(|listener| {
            listener
                .local_addr()
                .expect("a bound listener's address")
                .port()
        })
        .collect()
}

/// The configuration: one server per host, each with its own zones.
///
/// The page is served by `try_files` (the precontent phase) or passed upstream (the content
/// phase), after `limit_req` and `limit_conn` (preaccess): a `return` would answer in the
/// rewrite phase, before the limits are ever asked, which is what a host that is down does.
fn config(dir: &Path, hosts: &[Host], generation: u64) -> String {
    let dir = dir.to_string_lossy();
    // As root, nginx's workers would switch to a user that may not read the directory.
    let user = if is_root() { "user root root;\n" } else { "" };
    let mut config = format!(
        "{user}daemon off;\nworker_processes 1;\npid {dir}/nginx.pid;\n\
         error_log {dir}/error.log notice;\nevents {{ worker_connections 1024; }}\n\
         http {{\n\
         log_format tollgate '$server_port $status $msec $uri';\n\
         access_log {dir}/access.log tollgate;\n\
         client_body_temp_path {dir}/client_body;\nproxy_temp_path {dir}/proxy;\n\
         fastcgi_temp_path {dir}/fastcgi;\nuwsgi_temp_path {dir}/uwsgi;\n\
         scgi_temp_path {dir}/scgi;\n\
         limit_req_status 429;\nlimit_req_log_level info;\nkeepalive_timeout 0;\n"
    );
    for (i, host) in hosts.iter().enumerate() {
        let Host { port, plan } = host;
        let mut location = String::new();
        if let Some(retry_after) = plan.down {
            let _ = write!(
                location,
                " add_header Retry-After {retry_after} always; return 503;"
            );
        }
        let mut refused = String::new();
        if let Some(retry_after) = plan.refused_retry_after {
            // The meter's 429 goes to a named location that adds the header: an `add_header`
            // in the main location would put it on every 200 as well.
            let _ = write!(location, " error_page 429 @refused;");
            let _ = writeln!(
                refused,
                "\x20 location @refused {{ add_header Retry-After {retry_after} always; return 429; }}"
            );
        }
        if let Some(rate) = plan.rate {
            let _ = writeln!(
                config,
                "limit_req_zone $server_port zone=host{i}:1m rate={rate}r/s;"
            );
            let burst = match plan.burst {
                0 => String::new(),
                burst => format!(" burst={burst} nodelay"),
            };
            let _ = write!(location, " limit_req zone=host{i}{burst};");
        }
        if let Some(connections) = plan.conn {
            let _ = writeln!(config, "limit_conn_zone $server_port zone=conn{i}:1m;");
            let _ = write!(location, " limit_conn conn{i} {connections};");
        }
        if let Some(policy) = &plan.policy {
            let _ = write!(location, " add_header RateLimit-Policy '{policy}' always;");
        }
        match plan.upstream {
            Some(upstream) => {
                let _ = write!(location, " proxy_pass http://{upstream};");
            }
            None => location.push_str(" default_type text/plain; try_files /page =404;"),
        }
        let _ = write!(
            config,
            "server {{\n  listen 127.0.0.1:{port};\n  root {dir}/www;\n\
             \x20 location = /__generation {{ return 200 'generation {generation}'; }}\n\
             \x20 location / {{{location} }}\n{refused}}}\n"
        );
    }
    config.push_str("}\n");
    config
}

fn is_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|meta| meta.uid() == 0)
}

/// A plain blocking `GET` of `path` on `port`: the body, if the answer was `200`.
fn get_body(port: u16, path: &str) -> Option<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_owned())
}
