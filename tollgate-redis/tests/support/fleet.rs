//! A fleet of crawler processes for tests and the `fleet` example: the worker each process
//! runs, the parent's handle on it, the judge of what the target server saw, and [`Crawl`],
//! the crawl the proof test and the example both run.
//!
//! # How a fleet runs
//!
//! The parent starts the loopback target ([`http_server`](super::http_server): one listener
//! per host, the server-side truth), writes a [`Plan`] per worker into the environment
//! variable [`PLAN_VAR`], and starts each worker as an OS process with [`Worker::spawn`]. A
//! worker connects to Redis, prints `ready`, and waits for a line on its standard input: the
//! parent's start barrier ([`Worker::go`]), so that every worker is connected before any
//! sends a request. Then it crawls its items with `tollgate::map_async` (its `tasks` at
//! once), each item under the fleet's shared per-host cap and per-host rate, and prints a
//! `done` line with its counts ([`Summary`]).
//!
//! Which program a worker process runs is the caller's [`Launch`]: a test binary re-runs
//! itself (`std::env::current_exe()`) with a filter that selects its ignored worker entry
//! (`fleet_worker`), and the example re-runs itself with the argument `worker`. Either way the
//! worker is the very code under test, built in the same `cargo` invocation, and nothing has
//! to find another binary on disk (`CARGO_BIN_EXE_*` exists only for `[[bin]]` targets).
//! [`Launch::faketime`] puts a worker under libfaketime, with its wall clock shifted.
//!
//! # What a worker does per item
//!
//! Its [`Scheduler`] says where items wait for the fleet's limits. In the map's scheduler
//! (`Scheduler::Map`), `map_async(..).per_key(host, cap).shared_limits(SharedKeyLimits)`:
//! the map asks Redis for a lease and a rate start together before each item starts, items
//! waiting for their host hold none of the worker's slots, and a fenced or refused attempt
//! is tried again by the map's `RetryPolicy`. In the worker's tasks (`Scheduler::Tasks`),
//! `bulkhead.run(host, work)`: take one of the host's shared permits (a lease in Redis), then
//! for each of the plan's `steps`, wait for the host's shared rate and send one `GET`. Taking
//! the permit before the rate is deliberate: a start the rate allows is then never delayed by
//! a wait for a permit, so starts keep the rate's spacing (the other order lets late starts
//! bunch up). An item whose permit is fenced (its lease lapsed) or whose store was
//! unreachable is tried again as the plan's [`Retry`] says: after a short pause however
//! often (the default), never, or up to a number of attempts each after the error's
//! `retry_after`; the counts say how often.
//!
//! A worker connects to the Redis URL of its plan, or through Sentinel when the plan names
//! a master (`sentinel_master`, the URL then being the sentinels').
//!
//! Each request's path names its sender, `/w<worker>/i<item>/s<step>`, so a test can tell
//! from the server's log whose request was in flight.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use super::grants::{self, Grants, HostGrants};
use super::http_server::{self, TestServer};
use super::redis_monitor::CommandLog;
use super::redis_server::url_addr;

/// The environment variable that carries a worker's [`Plan`].
pub const PLAN_VAR: &str = "TOLLGATE_FLEET_PLAN";

/// What every line a worker prints for its parent starts with.
const LINE_PREFIX: &str = "fleet-worker ";

/// The runtime a worker process runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runtime {
    /// `smol::block_on`.
    Smol,
    /// A tokio multi-thread runtime (feature `tokio`).
    Tokio,
}

impl Runtime {
    /// Smol for even workers, tokio for odd ones when the feature is on: one fleet then proves
    /// both runtimes, and that they share limits.
    pub fn alternate(worker: usize) -> Self {
        if cfg!(feature = "tokio") && worker % 2 == 1 {
            Self::Tokio
        } else {
            Self::Smol
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Smol => "smol",
            Self::Tokio => "tokio",
        }
    }

    fn parse(name: &str) -> Self {
        match name {
            "smol" => Self::Smol,
            "tokio" => Self::Tokio,
            other => panic!("unknown runtime {other:?}"),
        }
    }
}

/// Where a worker's items wait for the fleet's limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheduler {
    /// In the worker's tasks: `bulkhead.run(host, ..)` and `until_key_ready`, each waiting
    /// item holding one of the worker's `tasks` slots.
    Tasks,
    /// In the map's scheduler: `per_key(host, cap).shared_limits(SharedKeyLimits)`, waiting
    /// items holding none.
    Map,
}

impl Scheduler {
    /// Tasks for workers 0 and 1, the map for 2 and 3 (and so on): with
    /// [`Runtime::alternate`], a fleet of four runs every pair once, sharing the limits.
    pub fn alternate(worker: usize) -> Self {
        if worker / 2 % 2 == 0 {
            Self::Tasks
        } else {
            Self::Map
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Tasks => "tasks",
            Self::Map => "map",
        }
    }

    fn parse(name: &str) -> Self {
        match name {
            "tasks" => Self::Tasks,
            "map" => Self::Map,
            other => panic!("unknown scheduler {other:?}"),
        }
    }
}

/// Everything one worker process needs, passed to it in [`PLAN_VAR`].
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The worker's number, in its request paths and its printed lines.
    pub worker: usize,
    /// Where the shared store is: a Redis URL, or with `sentinel_master` the sentinels'
    /// URLs, comma-separated.
    pub redis_url: String,
    /// Through Sentinel: the master's name.
    pub sentinel_master: Option<String>,
    /// The store's namespace: every Redis key of one run starts with it.
    pub namespace: String,
    /// How long a lease lasts without renewal.
    pub lease_ttl: Duration,
    /// The hosts, by name, with their addresses.
    pub hosts: Vec<(String, SocketAddr)>,
    /// The items, in order: each is the index of its host in `hosts`.
    pub items: Vec<usize>,
    /// How many items the worker works on at once.
    pub tasks: usize,
    /// The shared cap per host.
    pub cap: usize,
    /// The shared rate per host, `(per_second, burst)`; `None` for none.
    pub rate: Option<(u32, u32)>,
    /// Requests sent per item, one after another under the item's one permit.
    pub steps: usize,
    /// The runtime.
    pub runtime: Runtime,
    /// Where items wait for the limits.
    pub scheduler: Scheduler,
    /// The store's call timeout.
    pub call_timeout: Duration,
    /// What an item does when the store refuses it (unreachable) or its permit is fenced.
    pub retry: Retry,
    /// Each item's first attempt opens its first connection and then holds it open without
    /// writing its request, until the attempt ends (in the worker's tasks only a fence ends
    /// it): a worker descheduled between its connect and its write, made to last, so that
    /// a test can stop the process in that state on purpose. Later attempts send as usual.
    pub hold_open: bool,
}

/// What a worker does with an item the store refused (Redis unreachable) or whose permit was
/// fenced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retry {
    /// Tries it again after a short pause, however often.
    Always,
    /// Nothing: the item ends with the error (the map has no retry policy).
    Never,
    /// Up to this many attempts per item, each after the error's `retry_after` (the
    /// store's next probe) when it has one.
    Hinted(u32),
}

impl Retry {
    fn name(self) -> String {
        match self {
            Self::Always => "always".to_owned(),
            Self::Never => "never".to_owned(),
            Self::Hinted(attempts) => format!("hinted:{attempts}"),
        }
    }

    fn parse(name: &str) -> Self {
        match name {
            "always" => Self::Always,
            "never" => Self::Never,
            other => Self::Hinted(
                other
                    .strip_prefix("hinted:")
                    .and_then(|n| n.parse().ok())
                    .unwrap_or_else(|| panic!("unknown retry {other:?}")),
            ),
        }
    }
}

impl Plan {
    /// One `key=value` per line.
    pub fn encode(&self) -> String {
        let hosts: Vec<String> = self
            .hosts
            .iter()
            .map(|(name, addr)| format!("{name}@{addr}"))
            .collect();
        let items: Vec<String> = self.items.iter().map(usize::to_string).collect();
        let rate = self.rate.map_or_else(
            || "none".to_owned(),
            |(per, burst)| format!("{per}/{burst}"),
        );
        [
            format!("worker={}", self.worker),
            format!("redis_url={}", self.redis_url),
            format!(
                "sentinel_master={}",
                self.sentinel_master.as_deref().unwrap_or("")
            ),
            format!("namespace={}", self.namespace),
            format!("lease_ttl_ms={}", self.lease_ttl.as_millis()),
            format!("hosts={}", hosts.join(",")),
            format!("items={}", items.join(",")),
            format!("tasks={}", self.tasks),
            format!("cap={}", self.cap),
            format!("rate={rate}"),
            format!("steps={}", self.steps),
            format!("runtime={}", self.runtime.name()),
            format!("scheduler={}", self.scheduler.name()),
            format!("call_timeout_ms={}", self.call_timeout.as_millis()),
            format!("retry={}", self.retry.name()),
            format!("hold_open={}", self.hold_open),
        ]
        .join("\n")
    }

    /// The inverse of [`Plan::encode`].
    ///
    /// # Panics
    ///
    /// On anything [`Plan::encode`] does not write.
    pub fn decode(text: &str) -> Self {
        let fields: BTreeMap<&str, &str> = text
            .lines()
            .map(|line| line.split_once('=').expect("a key=value line"))
            .collect();
        let field = |key: &str| {
            *fields
                .get(key)
                .unwrap_or_else(|| panic!("no {key} in plan"))
        };
        let number = |key: &str| -> usize { field(key).parse().expect("a number") };
        let list = |key: &str| field(key).split(',').filter(|part| !part.is_empty());
        Self {
            worker: number("worker"),
            redis_url: field("redis_url").to_owned(),
            sentinel_master: Some(field("sentinel_master"))
                .filter(|name| !name.is_empty())
                .map(str::to_owned),
            namespace: field("namespace").to_owned(),
            lease_ttl: Duration::from_millis(number("lease_ttl_ms") as u64),
            hosts: list("hosts")
                .map(|host| {
                    let (name, addr) = host.split_once('@').expect("name@addr");
                    (name.to_owned(), addr.parse().expect("a socket address"))
                })
                .collect(),
            items: list("items")
                .map(|item| item.parse().expect("a host index"))
                .collect(),
            tasks: number("tasks"),
            cap: number("cap"),
            rate: match field("rate") {
                "none" => None,
                rate => {
                    let (per, burst) = rate.split_once('/').expect("per/burst");
                    Some((
                        per.parse().expect("a rate"),
                        burst.parse().expect("a burst"),
                    ))
                }
            },
            steps: number("steps"),
            runtime: Runtime::parse(field("runtime")),
            scheduler: Scheduler::parse(field("scheduler")),
            call_timeout: Duration::from_millis(number("call_timeout_ms") as u64),
            retry: Retry::parse(field("retry")),
            hold_open: field("hold_open").parse().expect("true or false"),
        }
    }
}

/// What a worker reports when it is done.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Items completed.
    pub done: usize,
    /// Requests answered, by status.
    pub statuses: BTreeMap<u16, usize>,
    /// Attempts cut short because their permit was fenced (its lease could lapse).
    pub fenced: usize,
    /// Attempts refused because the store was unreachable (or refused to grant while it
    /// could not be sure of its state).
    pub unavailable: usize,
    /// Items that ended with the store's error (unreachable, or fenced) because their
    /// retries ran out or there were none.
    pub failed: usize,
    /// The most attempts any one item took.
    pub most_attempts: u32,
    /// Any other error, by message.
    pub errors: Vec<String>,
}

impl Summary {
    fn encode(&self) -> String {
        let statuses: Vec<String> = self
            .statuses
            .iter()
            .map(|(status, count)| format!("{status}:{count}"))
            .collect();
        format!(
            "done={} statuses={} fenced={} unavailable={} failed={} most_attempts={} errors={}",
            self.done,
            statuses.join(","),
            self.fenced,
            self.unavailable,
            self.failed,
            self.most_attempts,
            self.errors.len()
        )
    }

    fn decode(text: &str) -> Self {
        let mut summary = Self::default();
        for part in text.split(' ') {
            let (key, value) = part.split_once('=').expect("key=value");
            match key {
                "done" => summary.done = value.parse().expect("a count"),
                "statuses" => {
                    for pair in value.split(',').filter(|pair| !pair.is_empty()) {
                        let (status, count) = pair.split_once(':').expect("status:count");
                        summary.statuses.insert(
                            status.parse().expect("a status"),
                            count.parse().expect("a count"),
                        );
                    }
                }
                "fenced" => summary.fenced = value.parse().expect("a count"),
                "unavailable" => summary.unavailable = value.parse().expect("a count"),
                "failed" => summary.failed = value.parse().expect("a count"),
                "most_attempts" => summary.most_attempts = value.parse().expect("a count"),
                // The messages went to standard error; the parent only needs how many.
                "errors" => {
                    let count: usize = value.parse().expect("a count");
                    summary.errors = vec![String::from("see the worker's standard error"); count];
                }
                _ => panic!("unknown summary field {key:?}"),
            }
        }
        summary
    }

    /// Responses with status `200`.
    pub fn ok(&self) -> usize {
        self.statuses.get(&200).copied().unwrap_or(0)
    }

    /// Responses with status `200`, or `429` from a metered host's meter (see
    /// [`meter_figure`]): every request that got an answer, where a host meters a rate.
    pub fn answered(&self) -> usize {
        self.ok() + self.statuses.get(&429).copied().unwrap_or(0)
    }
}

/// The server meter's per-request verdict over `hosts`, as a printed line: how many requests
/// it found more than the allowance early, and the closest call.
///
/// A printed figure, not an assertion: the meter judges each request against the one
/// before it to within the 50 ms allowance, so it measures how evenly a machine delivers
/// the fleet's grants to the server (a worker process run late holds a granted request back,
/// and the next one, granted on time, lands right behind it). With both cores busy, a second
/// suite and a release build beside it, it refused 8 of one worker's 375 requests in one
/// run, and 4 of 1,500 in another whose windows of 1 s and 2 s all held. The fleet's rate is
/// judged at the server over those windows (see the proof test). What is asserted here:
/// every `429` the workers saw came from the meter (a `429` from anywhere else would hide
/// behind the figure).
pub fn meter_figure(server: &TestServer, reports: &[HostReport], summaries: &[Summary]) -> String {
    let refused: usize = reports
        .iter()
        .map(|report| server.stats(&report.host).over_rate)
        .sum();
    let seen: usize = summaries
        .iter()
        .map(|summary| summary.statuses.get(&429).copied().unwrap_or(0))
        .sum();
    assert_eq!(
        seen, refused,
        "429s the workers saw against the meter's refusals"
    );
    format!(
        "the meter found {refused} requests more than {} ms early; {}",
        Crawl::ALLOWANCE.as_millis(),
        closest_call(reports)
    )
}

/// How the parent starts a worker process.
#[derive(Clone, Debug)]
pub struct Launch {
    program: std::path::PathBuf,
    args: Vec<String>,
    /// `Some("+10s")`: run with libfaketime's wall clock 10 s ahead.
    faketime: Option<String>,
}

impl Launch {
    /// Re-runs the current test binary with only its ignored test `entry` selected.
    pub fn test_entry(entry: &str) -> Self {
        Self {
            program: std::env::current_exe().expect("the test binary's path"),
            args: [
                entry,
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ]
            .map(String::from)
            .to_vec(),
            faketime: None,
        }
    }

    /// Re-runs the current program with `args`.
    pub fn current_exe(args: &[&str]) -> Self {
        Self {
            program: std::env::current_exe().expect("the program's path"),
            args: args.iter().map(|&arg| arg.to_owned()).collect(),
            faketime: None,
        }
    }

    /// The same, under libfaketime with the wall clock moved by `offset` (`"+10s"`,
    /// `"-10s"`). The library is preloaded into the worker itself (`LD_PRELOAD`), rather than
    /// run through the `faketime` program, which forks: signals and the kill on failure then
    /// reach the worker, not a wrapper. Debian and Ubuntu ship it in the package `faketime`
    /// (`libfaketime`).
    pub fn faketime(mut self, offset: &str) -> Self {
        self.faketime = Some(offset.to_owned());
        self
    }

    fn command(&self) -> Command {
        let mut command = Command::new(&self.program);
        command.args(&self.args);
        if let Some(offset) = &self.faketime {
            command
                .env("LD_PRELOAD", libfaketime())
                .env("FAKETIME", offset)
                // Only the wall clock is off. The monotonic clock has no absolute meaning to
                // be wrong about, and faking it shifts the absolute deadlines std's timed
                // waits hand to the kernel (a faked `Instant` lands them 10 s away).
                .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
        }
        command
    }
}

/// Where libfaketime is, on the usual Linux layouts.
///
/// # Panics
///
/// If it is not installed.
fn libfaketime() -> std::path::PathBuf {
    let candidates = [
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/faketime/libfaketime.so.1",
        "/usr/lib64/faketime/libfaketime.so.1",
        "/usr/local/lib/faketime/libfaketime.so.1",
    ];
    candidates
        .iter()
        .map(std::path::PathBuf::from)
        .find(|path| path.exists())
        .unwrap_or_else(|| {
            panic!(
                "libfaketime is not installed (apt-get install faketime); looked in {candidates:?}"
            )
        })
}

/// The parent's handle on a worker process.
#[derive(Debug)]
pub struct Worker {
    /// The worker's number.
    pub id: usize,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<(Instant, String)>,
    /// The worker's wall clock (Unix milliseconds) when it was ready, as it read it: shows
    /// whether a faketime offset took effect.
    pub wall_clock_ms: u128,
    /// When the parent saw it ready.
    pub ready_at: Instant,
}

/// How long a worker may take to connect and say it is ready.
const READY_DEADLINE: Duration = Duration::from_secs(30);

impl Worker {
    /// Starts a worker process for `plan` and waits until it is connected and ready.
    ///
    /// # Panics
    ///
    /// If the process cannot start, or exits or stays silent instead of getting ready.
    pub fn spawn(launch: &Launch, plan: &Plan) -> Self {
        let mut child = launch
            .command()
            .env(PLAN_VAR, plan.encode())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|error| panic!("start worker {}: {error}", plan.worker));
        let stdout = child.stdout.take().expect("the worker's stdout");
        let (sender, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                // The test harness may have printed "test fleet_worker ... " on the same line.
                if let Some(at) = line.find(LINE_PREFIX) {
                    let text = line[at + LINE_PREFIX.len()..].to_owned();
                    if sender.send((Instant::now(), text)).is_err() {
                        break;
                    }
                }
            }
        });
        let mut worker = Self {
            id: plan.worker,
            stdin: child.stdin.take(),
            child,
            lines,
            wall_clock_ms: 0,
            ready_at: Instant::now(),
        };
        let (ready, _) = worker.expect_line("ready", READY_DEADLINE);
        worker.wall_clock_ms = ready
            .split(' ')
            .find_map(|part| part.strip_prefix("wall_ms="))
            .and_then(|ms| ms.parse().ok())
            .expect("the ready line carries wall_ms");
        worker.ready_at = Instant::now();
        worker
    }

    /// Lets the worker start crawling (the start barrier).
    pub fn go(&mut self) {
        let mut stdin = self.stdin.take().expect("go is sent once");
        writeln!(stdin, "go").expect("tell the worker to go");
    }

    /// The worker's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` (`"KILL"`, `"STOP"`, `"CONT"`) with the `kill` command.
    ///
    /// # Panics
    ///
    /// If `kill` fails.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([format!("-{signal}"), self.pid().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} {} failed", self.pid());
    }

    /// Waits for the worker's `done` line and its exit, within `deadline`.
    ///
    /// # Panics
    ///
    /// If it exits without reporting, fails, or takes longer (it is killed then).
    pub fn finish(self, deadline: Duration) -> Summary {
        self.finish_at(deadline).0
    }

    /// As [`finish`](Self::finish), also saying when the worker was done: when its `done`
    /// line arrived, which it prints once its store is dropped (its last releases sent, or
    /// given up), just before it exits.
    ///
    /// # Panics
    ///
    /// As [`finish`](Self::finish).
    pub fn finish_at(mut self, deadline: Duration) -> (Summary, Instant) {
        let (line, at) = self.expect_line("done", deadline);
        let status = self.child.wait().expect("wait for the worker");
        assert!(status.success(), "worker {} exited with {status}", self.id);
        (
            Summary::decode(line.strip_prefix("done ").unwrap_or(&line)),
            at,
        )
    }

    /// Waits for the process to end (after a `SIGKILL`), and reaps it.
    pub fn reap(mut self) {
        let _ = self.child.wait();
    }

    fn expect_line(&mut self, word: &str, deadline: Duration) -> (String, Instant) {
        let prefix = format!("{} {word}", self.id);
        let until = Instant::now() + deadline;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok((at, line)) if line.starts_with(&prefix) => {
                    return (line[format!("{} ", self.id).len()..].to_owned(), at);
                }
                Ok(_) => {}
                Err(error) => {
                    // How it ended, if it did: its output closing comes just before its exit
                    // can be reaped, so give that a moment.
                    let mut status = None;
                    for _ in 0..100 {
                        status = self.child.try_wait().ok().flatten();
                        if status.is_some() || error == mpsc::RecvTimeoutError::Timeout {
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    let _ = self.child.kill();
                    panic!(
                        "worker {} never said {word:?}: {error} (exit status: {status:?})",
                        self.id
                    );
                }
            }
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // A test that fails half-way must not leave worker processes behind.
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Splits `per_host` items for each of `hosts` hosts among `workers` workers, each worker's
/// list going round the hosts in turn (so every worker works on every host, evenly).
///
/// # Panics
///
/// If `per_host` is not a multiple of `workers`.
pub fn round_robin_items(hosts: usize, per_host: usize, workers: usize) -> Vec<Vec<usize>> {
    let plan: Vec<(f64, usize)> = vec![(1.0, per_host); hosts];
    scheduled_items(&plan, workers)
}

/// Splits the items of hosts given as `(allowed rate, items)` among `workers` workers, each
/// worker's list in order of when its items can start: the `k`-th item of a host is due at
/// `k / rate`, and goes to worker `k % workers`. This is a frontier sorted by due time, as a
/// crawler that knows its hosts' limits keeps it: a task never sits on an item far ahead of
/// its host's schedule while items of other hosts are due (with one list in host order, the
/// tasks would all end up waiting on the slowest hosts, and the others would starve).
///
/// # Panics
///
/// If a host's item count is not a multiple of `workers`.
pub fn scheduled_items(hosts: &[(f64, usize)], workers: usize) -> Vec<Vec<usize>> {
    let mut lists: Vec<Vec<(f64, usize)>> = vec![Vec::new(); workers];
    for (host, &(rate, items)) in hosts.iter().enumerate() {
        assert!(
            items % workers == 0,
            "{items} items of host {host} do not split evenly among {workers} workers"
        );
        for k in 0..items {
            lists[k % workers].push((k as f64 / rate, host));
        }
    }
    lists
        .into_iter()
        .map(|mut list| {
            list.sort_by(|a, b| a.partial_cmp(b).expect("due times are finite"));
            list.into_iter().map(|(_, host)| host).collect()
        })
        .collect()
}

/// The crawl of the proof test (`tests/fleet.rs`) and of the `fleet` example: `workers`
/// worker processes of [`Crawl::TASKS`] tasks each crawl `hosts` hosts through one shared
/// per-host cap ([`Crawl::CAP`] in flight) and one shared per-host rate ([`Crawl::RATE`]),
/// their leases lasting `lease_ttl`. Half the hosts answer in [`Crawl::FAST`] (the rate is
/// what limits them), half in [`Crawl::SLOW`] (the cap is: two at a time make 5 per second);
/// each host gets 4 seconds' worth of requests at its allowed rate, so the crawl takes about
/// 4 seconds for every host. Each worker's items are in order of when they can start
/// ([`scheduled_items`]); with the `tokio` feature, odd workers run on tokio and even ones on
/// smol ([`Runtime::alternate`]), sharing the same limits.
#[derive(Clone, Copy, Debug)]
pub struct Crawl {
    /// How many hosts (named `host00`, `host01`, ...).
    pub hosts: usize,
    /// How long a lease lasts without renewal.
    pub lease_ttl: Duration,
    /// How many worker processes; every host's request count must split evenly among them.
    pub workers: usize,
}

/// What a [`Crawl::run`] leaves for its caller to judge.
#[derive(Debug)]
pub struct CrawlRun {
    /// The target, with everything it saw.
    pub server: TestServer,
    /// Each worker's counts, by worker number.
    pub summaries: Vec<Summary>,
    /// From the start barrier until the last worker was done.
    pub elapsed: Duration,
    /// What the store granted, from Redis's log of the run.
    pub grants: Grants,
}

impl Crawl {
    /// Tasks per worker process.
    pub const TASKS: usize = 64;
    /// The shared cap per host.
    pub const CAP: usize = 2;
    /// The shared rate per host: 10 requests per second, bursts of 2.
    pub const RATE: (u32, u32) = (10, 2);
    /// The latency of the first half of the hosts.
    pub const FAST: Duration = Duration::from_millis(20);
    /// The latency of the other half.
    pub const SLOW: Duration = Duration::from_millis(400);
    /// How early a request may reach the server and still count as on time: loopback transit
    /// and process scheduling between the store's grant and the server's accept, on a busy
    /// 2-core machine. The server's rate meter allows it; its verdict is a printed figure
    /// ([`meter_figure`]), the fleet's rate being judged on the grants.
    pub const ALLOWANCE: Duration = Duration::from_millis(50);

    /// Host `host`'s latency: [`FAST`](Self::FAST) for the first half, else
    /// [`SLOW`](Self::SLOW).
    pub fn latency(&self, host: usize) -> Duration {
        if host < self.hosts / 2 {
            Self::FAST
        } else {
            Self::SLOW
        }
    }

    /// What host `host` can take at most: `min(rate, cap / latency)`.
    pub fn allowed(&self, host: usize) -> f64 {
        f64::from(Self::RATE.0).min(Self::CAP as f64 / self.latency(host).as_secs_f64())
    }

    /// Requests for host `host`: 4 seconds' worth at its allowed rate (40 or 20).
    pub fn requests(&self, host: usize) -> usize {
        (self.allowed(host) * 4.0).round() as usize
    }

    /// Requests for all hosts.
    pub fn total(&self) -> usize {
        (0..self.hosts).map(|host| self.requests(host)).sum()
    }

    /// The hosts' names, `host00`, `host01`, ..., in host order.
    pub fn names(&self) -> Vec<String> {
        (0..self.hosts)
            .map(|host| format!("host{host:02}"))
            .collect()
    }

    /// Runs the crawl: starts the target (its rate meter set to [`RATE`](Self::RATE) with
    /// [`ALLOWANCE`](Self::ALLOWANCE)), spawns the workers with `launch` against the Redis
    /// at `redis_url` under `namespace`, lets them all go once every one is connected, and
    /// waits for each to be done, up to `finish` each.
    ///
    /// # Panics
    ///
    /// If a worker cannot start, fails, or is not done in time.
    pub fn run(
        &self,
        launch: &Launch,
        redis_url: &str,
        namespace: &str,
        finish: Duration,
    ) -> CrawlRun {
        let mut builder = TestServer::builder()
            .rate_limit(f64::from(Self::RATE.0), Self::RATE.1)
            .rate_allowance(Self::ALLOWANCE);
        let names = self.names();
        for (host, name) in names.iter().enumerate() {
            builder = builder.host(name, self.latency(host));
        }
        let server = builder.start();
        let log = url_addr(redis_url)
            .and_then(CommandLog::attach)
            .expect("attach a log to Redis");
        let hosts: Vec<_> = names
            .iter()
            .map(|name| (name.clone(), server.addr(name)))
            .collect();
        let schedule: Vec<(f64, usize)> = (0..self.hosts)
            .map(|host| (self.allowed(host), self.requests(host)))
            .collect();
        let mut workers: Vec<Worker> = scheduled_items(&schedule, self.workers)
            .into_iter()
            .enumerate()
            .map(|(worker, items)| {
                let plan = Plan {
                    worker,
                    redis_url: redis_url.to_owned(),
                    sentinel_master: None,
                    namespace: namespace.to_owned(),
                    lease_ttl: self.lease_ttl,
                    hosts: hosts.clone(),
                    items,
                    tasks: Self::TASKS,
                    cap: Self::CAP,
                    rate: Some(Self::RATE),
                    steps: 1,
                    runtime: Runtime::alternate(worker),
                    scheduler: Scheduler::alternate(worker),
                    call_timeout: tollgate_redis::DEFAULT_CALL_TIMEOUT,
                    retry: Retry::Always,
                    hold_open: false,
                };
                Worker::spawn(launch, &plan)
            })
            .collect();
        let started = Instant::now();
        for worker in &mut workers {
            worker.go();
        }
        let summaries = workers
            .into_iter()
            .map(|worker| worker.finish(finish))
            .collect();
        let elapsed = started.elapsed();
        CrawlRun {
            server,
            summaries,
            elapsed,
            grants: Grants::read(&[&log], namespace, self.lease_ttl, Self::CAP),
        }
    }

    /// Every host of `run` judged against the shared cap and rate ([`judge_host`]), in host
    /// order, each with its latency.
    pub fn reports(&self, run: &CrawlRun) -> Vec<(Duration, HostReport)> {
        self.names()
            .iter()
            .enumerate()
            .map(|(host, name)| {
                let latency = self.latency(host);
                let report = judge_host(
                    &run.server,
                    name,
                    &run.grants.host(name),
                    Self::CAP,
                    Self::RATE,
                    latency,
                    Self::ALLOWANCE,
                );
                (latency, report)
            })
            .collect()
    }
}

/// The request's worker, from its path `/w<worker>/...`.
pub fn sender(path: &str) -> Option<usize> {
    path.strip_prefix("/w")?.split('/').next()?.parse().ok()
}

/// What one host saw, judged against its cap and rate.
#[derive(Clone, Debug)]
pub struct HostReport {
    /// The host's name.
    pub host: String,
    /// Requests that arrived.
    pub requests: usize,
    /// The most requests in flight at once.
    pub peak: usize,
    /// The most arrivals in any one second, at the server (a figure: a busy machine
    /// bunches arrivals whose grants were spaced).
    pub max_per_second: usize,
    /// The first window of rate starts (on Redis's clock) that broke `burst + rate × W`,
    /// if any: `(window, count, limit)`. See `grants::rate_violation`.
    pub window_violation: Option<(Duration, usize, usize)>,
    /// Grants the replay of the lease sets found made over the cap: `(instant, leases
    /// unexpired then)`.
    pub cap_violations: Vec<(SystemTime, usize)>,
    /// An arrival no lease or rate start accounts for, if any (see `grants::ungranted`).
    pub ungranted: Option<String>,
    /// The most any request came early on the server's meter (the same rate and
    /// allowance): how much of the allowance the closest call used.
    pub most_early: Duration,
    /// Mean arrivals per second between the first and the last arrival.
    pub achieved: f64,
    /// What the host could take at most: `min(rate, cap / latency)`.
    pub allowed: f64,
}

impl HostReport {
    /// `achieved / allowed`.
    pub fn utilisation(&self) -> f64 {
        self.achieved / self.allowed
    }
}

/// Judges `host`: its `grants` (on Redis's clock) against `cap` and `rate = (per_second,
/// burst)`, and what `server` saw against them: the cap in flight, and a grant before every
/// arrival. The server's meter (the same rate, requests allowed `allowance` early) gives
/// the per-request figure.
pub fn judge_host(
    server: &TestServer,
    host: &str,
    grants: &HostGrants,
    cap: usize,
    rate: (u32, u32),
    latency: Duration,
    allowance: Duration,
) -> HostReport {
    let times = server.arrival_times(host);
    let (per_second, burst) = rate;
    let by_cap = cap as f64 / latency.as_secs_f64();
    HostReport {
        host: host.to_owned(),
        requests: times.len(),
        peak: server.stats(host).peak,
        max_per_second: http_server::max_in_window(&times, Duration::from_secs(1)),
        window_violation: grants::rate_violation(&grants.starts, rate),
        cap_violations: grants.cap_violations().to_vec(),
        ungranted: grants::ungranted(&times, &grants.at)
            .or_else(|| grants::ungranted(&times, &grants.starts)),
        most_early: http_server::RateMeter::new(f64::from(per_second), burst, allowance)
            .most_early(&times),
        achieved: http_server::achieved_rate(&times).unwrap_or(0.0),
        allowed: f64::from(per_second).min(by_cap),
    }
}

/// Prints one row per host: what the server saw, against the cap and the rate.
pub fn print_hosts(reports: &[(Duration, HostReport)], cap: usize, rate: (u32, u32)) {
    println!(
        "per host, as the server saw it (cap {cap} in flight, {} requests/s, burst {}):",
        rate.0, rate.1
    );
    println!(
        "{:<7} {:>8} {:>8} {:>7} {:>10} {:>10} {:>9} {:>7}",
        "host", "latency", "requests", "peak", "max in 1s", "achieved", "allowed", "use"
    );
    for (latency, report) in reports {
        println!(
            "{:<7} {:>6}ms {:>8} {:>4}/{cap} {:>7}/{:<2} {:>8.2}/s {:>7.2}/s {:>6.1}%",
            report.host,
            latency.as_millis(),
            report.requests,
            report.peak,
            report.max_per_second,
            http_server::window_limit(f64::from(rate.0), rate.1, Duration::from_secs(1)),
            report.achieved,
            report.allowed,
            100.0 * report.utilisation(),
        );
    }
    let mean = reports.iter().map(|(_, r)| r.utilisation()).sum::<f64>() / reports.len() as f64;
    let peak = reports.iter().map(|(_, r)| r.peak).max().unwrap_or(0);
    let violations = reports
        .iter()
        .filter(|(_, r)| r.window_violation.is_some())
        .count();
    println!(
        "highest peak {peak}/{cap}; hosts over the rate in some window: {violations}; mean use {:.1}%",
        100.0 * mean
    );
}

/// Prints the per-host table: hosts grouped by latency, worst case of each group.
pub fn print_table(reports: &[(Duration, HostReport)], cap: usize, rate: (u32, u32)) {
    let mut groups: BTreeMap<Duration, Vec<&HostReport>> = BTreeMap::new();
    for (latency, report) in reports {
        groups.entry(*latency).or_default().push(report);
    }
    println!(
        "cap {cap} in flight and {} requests/s (burst {}) per host; server-side measurements",
        rate.0, rate.1
    );
    println!(
        "{:>6} {:>8} {:>9} {:>9} {:>12} {:>12} {:>13} {:>12}",
        "hosts",
        "latency",
        "requests",
        "max peak",
        "max in 1 s",
        "allowed/s",
        "achieved/s",
        "utilisation"
    );
    for (latency, group) in groups {
        let requests: usize = group.iter().map(|report| report.requests).sum();
        let peak = group.iter().map(|report| report.peak).max().unwrap_or(0);
        let per_second = group.iter().map(|r| r.max_per_second).max().unwrap_or(0);
        let allowed = group.iter().map(|r| r.allowed).sum::<f64>() / group.len() as f64;
        let achieved = group.iter().map(|r| r.achieved).sum::<f64>() / group.len() as f64;
        let min_use = group
            .iter()
            .map(|r| r.utilisation())
            .fold(f64::INFINITY, f64::min);
        println!(
            "{:>6} {:>6}ms {:>9} {:>9} {:>12} {:>12.2} {:>13.2} {:>5.1}% (min {:.1}%)",
            group.len(),
            latency.as_millis(),
            requests,
            peak,
            per_second,
            allowed,
            achieved,
            100.0 * achieved / allowed,
            100.0 * min_use,
        );
    }
}

/// The closest call on the servers' meters over `reports`, against the allowance: the
/// margin of the per-request check, printed by every fleet test that meters a rate.
pub fn closest_call<'a>(reports: impl IntoIterator<Item = &'a HostReport>) -> String {
    let most = reports
        .into_iter()
        .map(|r| r.most_early)
        .max()
        .unwrap_or_default();
    format!(
        "closest call on the meter: {:.1} ms early (allowance {} ms)",
        most.as_secs_f64() * 1e3,
        Crawl::ALLOWANCE.as_millis()
    )
}

// ---------------------------------------------------------------------------------------
// The worker side.
// ---------------------------------------------------------------------------------------

/// Runs the worker the environment describes, if it describes one: the body of a test
/// binary's ignored `fleet_worker` entry and of the example's `worker` mode. Returns `false`
/// when [`PLAN_VAR`] is not set (the entry was run by hand, not by a fleet).
pub fn worker_main_from_env() -> bool {
    let Ok(text) = std::env::var(PLAN_VAR) else {
        return false;
    };
    let plan = Plan::decode(&text);
    let summary = match plan.runtime {
        Runtime::Smol => smol::block_on(worker::run(&plan)),
        Runtime::Tokio => tokio_runtime().block_on(worker::run(&plan)),
    };
    println!("{LINE_PREFIX}{} done {}", plan.worker, summary.encode());
    true
}

#[cfg(feature = "tokio")]
fn tokio_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

#[cfg(not(feature = "tokio"))]
fn tokio_runtime() -> NoTokio {
    panic!("a tokio worker needs the `tokio` feature")
}

#[cfg(not(feature = "tokio"))]
struct NoTokio;

#[cfg(not(feature = "tokio"))]
impl NoTokio {
    fn block_on<F: std::future::Future>(&self, _: F) -> F::Output {
        unreachable!()
    }
}

/// Blocks until the parent's `go` line (or end of input).
fn wait_for_go() {
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
}

/// One `GET` to `addr` over a fresh connection, read to the end: the status.
///
/// The server closes every connection after its one response, so reading to end-of-file is
/// reading the response. Dropping the future closes the socket: the server sees the client
/// leave (that is how fenced work that is cancelled shows up there).
pub async fn get(addr: SocketAddr, path: &str) -> std::io::Result<u16> {
    use smol::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = smol::net::TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await?;
    let head = String::from_utf8_lossy(&response[..response.len().min(16)]).into_owned();
    head.strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP response: {head:?}")))
}

/// Opens a connection to `addr` and holds it without writing anything, for good: only
/// dropping the future closes it (see [`Plan::hold_open`]).
pub async fn hold_open(addr: SocketAddr) {
    let stream = smol::net::TcpStream::connect(addr).await;
    std::future::pending::<()>().await;
    drop(stream);
}

mod worker {
    //! The worker's crawl: the code a user of the shared limits would write.

    use std::cell::RefCell;
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    use std::sync::{Arc, Mutex};

    use tollgate::{Rate, RetryPolicy};
    use tollgate_redis::{
        RedisLimits, RedisLimitsError, SharedKeyLimits, SharedKeyedBulkhead, SharedKeyedRateLimiter,
    };

    use super::{LINE_PREFIX, Plan, Retry, Scheduler, Summary, get, hold_open, wait_for_go};

    /// How long an item waits before it is tried again after the store refused it, when
    /// the error says nothing of when to come back.
    const RETRY_PAUSE: Duration = Duration::from_millis(50);

    pub(super) async fn run(plan: &Plan) -> Summary {
        let options = match &plan.sentinel_master {
            None => RedisLimits::options(&plan.redis_url),
            Some(master) => RedisLimits::sentinel(plan.redis_url.split(','), master),
        };
        let store = options
            .namespace(&plan.namespace)
            .lease_ttl(plan.lease_ttl)
            .call_timeout(plan.call_timeout)
            .connect()
            .await
            .unwrap_or_else(|error| panic!("worker {} cannot reach Redis: {error}", plan.worker));
        let wall_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("a clock after 1970")
            .as_millis();
        println!(
            "{LINE_PREFIX}{} ready pid={} wall_ms={wall_ms}",
            plan.worker,
            std::process::id()
        );
        wait_for_go();
        match plan.scheduler {
            Scheduler::Tasks => in_tasks(plan, &store).await,
            Scheduler::Map => in_the_map(plan, &store).await,
        }
    }

    /// Whether an item that failed with `error` on its `attempt` (1-based) under `retry` is
    /// tried again, and after how long.
    fn again(retry: Retry, attempt: u32, error: &RedisLimitsError) -> Option<Duration> {
        if !(error.is_fenced() || error.is_unavailable() || error.is_warming_up()) {
            return None;
        }
        match retry {
            Retry::Always => Some(RETRY_PAUSE),
            Retry::Never => None,
            Retry::Hinted(attempts) => {
                (attempt < attempts).then(|| error.retry_after().unwrap_or(RETRY_PAUSE))
            }
        }
    }

    /// Each item takes a permit, then the rate, inside its task.
    async fn in_tasks(plan: &Plan, store: &RedisLimits) -> Summary {
        let bulkhead = SharedKeyedBulkhead::new(store, "hosts", plan.cap);
        let limiter = plan.rate.map(|(per_second, burst)| {
            SharedKeyedRateLimiter::new(store, "hosts", Rate::per_second(per_second).burst(burst))
        });
        let summary = RefCell::new(Summary::default());
        let items = plan.items.iter().copied().enumerate();
        tollgate::map_async(items, plan.tasks, |(item, host)| {
            let (name, addr) = &plan.hosts[host];
            let (bulkhead, limiter, summary) = (&bulkhead, &limiter, &summary);
            async move {
                let mut attempt = 0;
                loop {
                    attempt += 1;
                    {
                        let mut summary = summary.borrow_mut();
                        summary.most_attempts = summary.most_attempts.max(attempt);
                    }
                    let work = async {
                        if plan.hold_open && attempt == 1 {
                            hold_open(*addr).await;
                        }
                        for step in 0..plan.steps {
                            if let Some(limiter) = limiter {
                                limiter.until_key_ready(name).await?;
                            }
                            let path = format!("/w{}/i{item}/s{step}", plan.worker);
                            let status = get(*addr, &path).await;
                            let mut summary = summary.borrow_mut();
                            match status {
                                Ok(status) => *summary.statuses.entry(status).or_default() += 1,
                                Err(error) => summary.errors.push(error.to_string()),
                            }
                        }
                        Ok::<(), RedisLimitsError>(())
                    };
                    let error = match bulkhead.run(name, work).await {
                        Ok(Ok(())) => {
                            summary.borrow_mut().done += 1;
                            return;
                        }
                        Ok(Err(error)) | Err(error) => error,
                    };
                    let pause = again(plan.retry, attempt, &error);
                    {
                        let mut summary = summary.borrow_mut();
                        if error.is_fenced() {
                            summary.fenced += 1;
                        } else if error.is_unavailable() || error.is_warming_up() {
                            summary.unavailable += 1;
                        } else {
                            eprintln!("worker {}: {error}", plan.worker);
                            summary.errors.push(error.to_string());
                            return;
                        }
                        if pause.is_none() {
                            summary.failed += 1;
                            return;
                        }
                    }
                    tollgate::sleep(pause.unwrap_or_default()).await;
                }
            }
        })
        .await;
        summary.into_inner()
    }

    /// The map asks the fleet's limits before each start (one request per item): an item
    /// waiting for its host holds no slot, and a fenced or refused attempt is retried by
    /// the map's policy (or, with `Retry::Never`, not: the map has none).
    async fn in_the_map(plan: &Plan, store: &RedisLimits) -> Summary {
        assert_eq!(plan.steps, 1, "the map sends one request per item");
        let mut limits = SharedKeyLimits::new(store, "hosts").per_key_limit(plan.cap);
        if let Some((per_second, burst)) = plan.rate {
            limits = limits.per_key_rate(Rate::per_second(per_second).burst(burst));
        }
        let summary = Arc::new(Mutex::new(Summary::default()));
        let retry = plan.retry;
        let policy = RetryPolicy::new()
            .attempts(match retry {
                Retry::Hinted(attempts) => attempts,
                Retry::Always | Retry::Never => u32::MAX,
            })
            .interval(RETRY_PAUSE)
            .when(|error: &RedisLimitsError| error.is_fenced() || error.is_unavailable())
            .retry_after(move |error: &RedisLimitsError| match retry {
                Retry::Hinted(_) => error.retry_after(),
                Retry::Always | Retry::Never => None,
            })
            .on_retry({
                let summary = Arc::clone(&summary);
                move |event| {
                    let mut summary = summary.lock().unwrap();
                    summary.most_attempts = summary.most_attempts.max(event.attempt_number() + 1);
                    if event.error().is_fenced() {
                        summary.fenced += 1;
                    } else {
                        summary.unavailable += 1;
                    }
                }
            });
        let items: Vec<(usize, usize)> = plan.items.iter().copied().enumerate().collect();
        let fetch = |(item, host): (usize, usize)| {
            let addr = plan.hosts[host].1;
            let summary = Arc::clone(&summary);
            async move {
                let path = format!("/w{}/i{item}/s0", plan.worker);
                let status = get(addr, &path).await;
                let mut summary = summary.lock().unwrap();
                match status {
                    Ok(status) => *summary.statuses.entry(status).or_default() += 1,
                    Err(error) => summary.errors.push(error.to_string()),
                }
                Ok::<(), RedisLimitsError>(())
            }
        };
        let host = |&(_, host): &(usize, usize)| plan.hosts[host].0.clone();
        let outputs = if retry == Retry::Never {
            tollgate::map_async(items, plan.tasks, fetch)
                .per_key(host, plan.cap)
                .shared_limits(limits)
                .await
        } else {
            tollgate::map_async(items, plan.tasks, fetch)
                .per_key(host, plan.cap)
                .shared_limits(limits)
                .retry(policy)
                .await
        };
        let mut summary = summary.lock().unwrap().clone();
        summary.most_attempts = summary.most_attempts.max(1);
        for output in outputs {
            match output {
                Ok(()) => summary.done += 1,
                Err(error) if error.is_unavailable() || error.is_fenced() => {
                    if retry == Retry::Never {
                        if error.is_fenced() {
                            summary.fenced += 1;
                        } else {
                            summary.unavailable += 1;
                        }
                    }
                    summary.failed += 1;
                }
                Err(error) => {
                    eprintln!("worker {}: {error}", plan.worker);
                    summary.errors.push(error.to_string());
                }
            }
        }
        summary
    }
}
