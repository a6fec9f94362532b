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
//! from the new configuration. nginx keeps a zone's state across a reload, so the new rate
//! applies from the last request let through.
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

#[derive(Debug)]
struct Host {
    name: String,
    port: u16,
    rate: u32,
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
        let binary = binary()
            .expect("nginx is not installed: `apt-get install nginx-light` (.ci/run installs it)");
        for (i, (name, rate)) in hosts.iter().enumerate() {
            assert!(
                *rate > 0,
                "host {name:?}: a rate of 0 would refuse everything"
            );
            assert!(
                hosts[..i].iter().all(|(other, _)| other != name),
                "host {name:?} named twice"
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
            let hosts = hosts
                .iter()
                .zip(free_ports(hosts.len()))
                .map(|((name, rate), port)| Host {
                    name: (*name).to_owned(),
                    port,
                    rate: *rate,
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

    /// The rate `host` is metered at now, in requests per second.
    ///
    /// # Panics
    ///
    /// If there is no such host.
    #[track_caller]
    pub fn rate(&self, host: &str) -> u32 {
        self.with_host(host, |host| host.rate)
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
        self.with_host(host, |host| host.rate = per_second);
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
            .find(|host| host.name == name)
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

/// The configuration: one server per host, each with its own `limit_req` zone, no burst.
///
/// The page is served by `try_files` (the precontent phase), after `limit_req` (preaccess):
/// a `return` would answer in the rewrite phase, before the rate limit is ever asked.
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
        let Host { port, rate, .. } = host;
        let _ = write!(
            config,
            "limit_req_zone $server_port zone=host{i}:1m rate={rate}r/s;\n\
             server {{\n  listen 127.0.0.1:{port};\n  root {dir}/www;\n\
             \x20 location = /__generation {{ return 200 'generation {generation}'; }}\n\
             \x20 location / {{ limit_req zone=host{i}; default_type text/plain; \
             try_files /page =404; }}\n}}\n"
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
