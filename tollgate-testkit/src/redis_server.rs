//! A `redis-server` of a test's own, and a small synchronous probe to look inside any Redis:
//! the one launcher of the store tests, the fleet tests, the `fleet` example and the bench.
//!
//! - [`RedisServer`] starts `redis-server` on 127.0.0.1 on a free port, without persistence
//!   (`--save '' --appendonly no`), and can be killed and restarted on the same port (the
//!   "Redis restarted mid-run" fault), paused and resumed (a Redis that is stuck, or cut off by
//!   a partition that drops packets). Dropping it kills the process.
//! - [`TestRedis::get`] is what most tests want: the instance named by the environment
//!   variable `TOLLGATE_REDIS_URL` when it is set (CI starts one), else a server of their own.
//!   A test that kills, restarts or pauses Redis always starts its own
//!   ([`RedisServer::start`]).
//! - [`unique_namespace`] gives each test its own keys, even in a shared instance.
//! - [`Probe`] speaks just enough RESP over a blocking socket to read what the store left
//!   behind (`SCAN`, `ZCARD`, `TYPE`) and what Redis itself counts (`INFO commandstats`). It
//!   is deliberately not the store's client: it is what the store is checked against.
//!   [`RedisServer::connection`] is a redis-rs connection, for a test that writes into Redis
//!   what the store would.
//!
//! `redis-server` must be on the `PATH`; `.ci/run` installs it. Without it these helpers
//! panic with a message saying so, rather than letting a test pass having proved nothing.

use std::io::{self, BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::redis_monitor::{self, CommandLog};

/// The environment variable naming a Redis the tests may share (`redis://127.0.0.1:6379`).
pub const REDIS_URL_VAR: &str = "TOLLGATE_REDIS_URL";

/// How long a freshly started `redis-server` may take to answer `PING`.
const START_DEADLINE: Duration = Duration::from_secs(10);

/// A `redis-server` process of the test's own, on 127.0.0.1.
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
    /// Arguments after the usual ones (`--replicaof host port`).
    extra: Vec<String>,
}

impl RedisServer {
    /// Starts `redis-server` on a free loopback port and waits until it answers `PING`.
    ///
    /// # Panics
    ///
    /// If `redis-server` is not installed or does not come up.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts a replica of `primary` (on a free loopback port, as [`start`](Self::start))
    /// and waits until its link to the primary is up.
    ///
    /// # Panics
    ///
    /// If it does not come up, or does not sync within a few seconds.
    pub fn start_replica_of(primary: &RedisServer) -> Self {
        let port = primary.port.to_string();
        let replica = Self::start_with(&["--replicaof", "127.0.0.1", &port]);
        let until = Instant::now() + START_DEADLINE;
        loop {
            let info = replica
                .probe()
                .command(&["INFO", "replication"])
                .ok()
                .and_then(|reply| reply.text())
                .unwrap_or_default();
            if info.contains("master_link_status:up") {
                return replica;
            }
            assert!(Instant::now() < until, "the replica never synced: {info}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts `redis-server` with `extra` after the usual arguments.
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start).
    pub fn start_with(extra: &[&str]) -> Self {
        // A port is free when we pick it and may be taken before redis-server binds it:
        // try a few.
        let mut last_error = None;
        for _ in 0..5 {
            let port = free_port();
            let dir = std::env::temp_dir()
                .join(format!("tollgate-redis-test-{}-{port}", std::process::id()));
            std::fs::create_dir_all(&dir).expect("create a scratch directory for redis-server");
            let mut server = Self {
                port,
                dir,
                child: None,
                extra: extra.iter().map(|&arg| arg.to_owned()).collect(),
            };
            match server.launch() {
                Ok(()) => return server,
                Err(error) => last_error = Some(error),
            }
        }
        panic!("redis-server did not start: {last_error:?}");
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The server's address.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// `127.0.0.1:<port>`: the address as the store's errors name it.
    pub fn address(&self) -> String {
        self.addr().to_string()
    }

    /// Kills the server at once (`SIGKILL`: no goodbye to clients, nothing saved, its data
    /// gone as with a crash of a Redis without persistence) and waits for it to be gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // A paused server must be thawed to die promptly on every platform.
            let _ = Command::new("kill")
                .arg("-CONT")
                .arg(child.id().to_string())
                .status();
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port, empty (there is no persistence): what a
    /// crashed Redis without a disk, or a failover to a blank replica, looks like.
    ///
    /// # Panics
    ///
    /// If it does not come up (for example because something else took the port meanwhile).
    pub fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + START_DEADLINE;
        // The kernel may hold the port for a moment after the old process died.
        loop {
            match self.launch() {
                Ok(()) => return,
                Err(error) if Instant::now() > deadline => {
                    panic!(
                        "redis-server did not restart on port {}: {error}",
                        self.port
                    )
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }

    /// [`kill`](Self::kill)s it with its log `log` whole: holds its writes and lets the log
    /// catch up first ([`CommandLog::hold_writes`]; a kill would take the lines the log had
    /// not read yet with it).
    ///
    /// # Panics
    ///
    /// As [`CommandLog::hold_writes`].
    pub fn kill_logged(&mut self, log: &CommandLog) {
        log.hold_writes();
        self.kill();
    }

    /// [`restart`](Self::restart)s it, its log `log` whole up to the kill
    /// ([`kill_logged`](Self::kill_logged)), with a new log attached before any client can
    /// reach it ([`start_again_logged`](Self::start_again_logged)).
    ///
    /// # Panics
    ///
    /// As those two.
    pub fn restart_logged(&mut self, log: &CommandLog) -> CommandLog {
        self.kill_logged(log);
        self.start_again_logged()
    }

    /// Starts a killed server again on its port, empty, with a [`CommandLog`] attached
    /// before any client can reach it: the new process comes up on a port no client knows,
    /// the log attaches there, and only then does the server move to its own port (`CONFIG
    /// SET port`). So the log holds everything the new process ran, its first grants
    /// included.
    ///
    /// # Panics
    ///
    /// If the server still runs, does not come up, the log cannot attach, or the port cannot
    /// be taken back within a few seconds (the kernel may hold it for a moment).
    pub fn start_again_logged(&mut self) -> CommandLog {
        assert!(
            self.child.is_none(),
            "start_again_logged on a running server"
        );
        let port = self.port;
        let mut last_error = None;
        for _ in 0..5 {
            self.port = free_port();
            match self.launch() {
                Ok(()) => break,
                Err(error) => last_error = Some(error),
            }
        }
        assert!(
            self.child.is_some(),
            "redis-server did not restart: {last_error:?}"
        );
        let mut log =
            CommandLog::attach(self.addr()).expect("attach a log to the new redis-server");
        let mut probe = self.probe();
        let deadline = Instant::now() + START_DEADLINE;
        while let Err(error) = probe.command(&["CONFIG", "SET", "port", &port.to_string()]) {
            assert!(
                Instant::now() < deadline,
                "redis-server could not take port {port} back: {error}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        self.port = port;
        log.moved_to(self.addr());
        log
    }

    /// Freezes it (`SIGSTOP`): connections stay open but nothing answers, as with a Redis
    /// stuck or cut off by a partition that drops packets.
    ///
    /// # Panics
    ///
    /// If the server is not running or the signal cannot be sent.
    pub fn pause(&self) {
        self.signal("STOP");
    }

    /// Thaws a [`pause`](Self::pause)d server (`SIGCONT`); its data is intact.
    ///
    /// # Panics
    ///
    /// If the server is not running or the signal cannot be sent.
    pub fn resume(&self) {
        self.signal("CONT");
    }

    fn signal(&self, name: &str) {
        let pid = self
            .child
            .as_ref()
            .expect("the test's redis-server is not running")
            .id();
        let status = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(pid.to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{name} {pid} failed");
    }

    /// A redis-rs connection for the test's own commands.
    ///
    /// # Panics
    ///
    /// If the server cannot be reached.
    pub fn connection(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .and_then(|client| client.get_connection())
            .expect("a redis-rs connection to the test's redis-server")
    }

    /// A probe connected to it.
    ///
    /// # Panics
    ///
    /// If the server cannot be reached.
    pub fn probe(&self) -> Probe {
        Probe::connect_addr(self.addr()).expect("connect a probe to the test's redis-server")
    }

    fn launch(&mut self) -> io::Result<()> {
        let mut child = Command::new("redis-server")
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .args(["--protected-mode", "no"])
            .args(["--dir", &self.dir.to_string_lossy()])
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|error| {
                io::Error::new(
                    error.kind(),
                    format!(
                        "cannot run redis-server (is it installed and on PATH? \
                         apt-get install redis-server): {error}"
                    ),
                )
            })?;
        let deadline = Instant::now() + START_DEADLINE;
        loop {
            if let Some(status) = child.try_wait()? {
                return Err(io::Error::other(format!(
                    "redis-server exited at start with {status} (port {} taken?)",
                    self.port
                )));
            }
            if Probe::connect_addr(self.addr())
                .and_then(|mut probe| probe.ping())
                .is_ok()
            {
                self.child = Some(child);
                return Ok(());
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(io::Error::other("redis-server did not answer PING in time"));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The Redis a test uses: a shared one named by `TOLLGATE_REDIS_URL`, or its own.
#[derive(Debug)]
pub enum TestRedis {
    /// The instance at this URL, started by someone else.
    Shared(String),
    /// A server this test started; it stops when this is dropped.
    Own(RedisServer),
}

impl TestRedis {
    /// `TOLLGATE_REDIS_URL` if set and not empty, else a new [`RedisServer`].
    ///
    /// # Panics
    ///
    /// If no URL is set and `redis-server` cannot start.
    pub fn get() -> Self {
        match std::env::var(REDIS_URL_VAR) {
            Ok(url) if !url.trim().is_empty() => Self::Shared(url.trim().to_owned()),
            _ => Self::Own(RedisServer::start()),
        }
    }

    /// The URL to connect to.
    pub fn url(&self) -> String {
        match self {
            Self::Shared(url) => url.clone(),
            Self::Own(server) => server.url(),
        }
    }

    /// A probe connected to it.
    ///
    /// # Panics
    ///
    /// If Redis cannot be reached.
    pub fn probe(&self) -> Probe {
        Probe::connect(&self.url()).expect("connect a probe to Redis")
    }
}

/// A namespace no other test, run or process shares (even in a shared Redis):
/// `tollgate-test:<label>:<pid>:<nanos>:<n>`, `n` counting this process's calls.
pub fn unique_namespace(label: &str) -> String {
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_nanos();
    format!(
        "tollgate-test:{label}:{}:{nanos}:{}",
        std::process::id(),
        CALLS.fetch_add(1, Ordering::Relaxed)
    )
}

/// A port that was free a moment ago on 127.0.0.1.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("bind an ephemeral loopback port")
        .port()
}

/// The address and database (`""` for the default) of `redis://[user:password@]host:port[/db]`.
fn url_parts(url: &str) -> io::Result<(SocketAddr, &str)> {
    let rest = url
        .strip_prefix("redis://")
        .ok_or_else(|| io::Error::other(format!("not a redis:// URL: {url}")))?;
    let (authority, db) = rest.split_once('/').unwrap_or((rest, ""));
    // Drop user:password@ if present: test instances have no ACL.
    let authority = authority.rsplit('@').next().unwrap_or(authority);
    let addr = std::net::ToSocketAddrs::to_socket_addrs(authority)?
        .next()
        .ok_or_else(|| io::Error::other(format!("no address in {url}")))?;
    Ok((addr, db))
}

/// The address of `redis://[user:password@]host:port[/db]`.
///
/// # Errors
///
/// If it is no `redis://` URL or names no address.
pub fn url_addr(url: &str) -> io::Result<SocketAddr> {
    url_parts(url).map(|(addr, _)| addr)
}

/// A Redis reply, as much of RESP2 as the probe needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// `+OK` and friends.
    Status(String),
    /// `-ERR ...`.
    Error(String),
    /// `:42`.
    Int(i64),
    /// `$...`, `None` for the null bulk string.
    Bulk(Option<Vec<u8>>),
    /// `*...`, `None` for the null array.
    Array(Option<Vec<Reply>>),
}

impl Reply {
    /// The text of a status or bulk reply.
    pub fn text(&self) -> Option<String> {
        match self {
            Self::Status(text) => Some(text.clone()),
            Self::Bulk(Some(bytes)) => Some(String::from_utf8_lossy(bytes).into_owned()),
            _ => None,
        }
    }
}

/// A blocking RESP connection for looking inside Redis (see the module docs).
#[derive(Debug)]
pub struct Probe {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Probe {
    /// Connects to `redis://host:port[/db]`, selecting the database if one is named.
    ///
    /// # Errors
    ///
    /// If the URL has no `host:port` or the connection fails.
    pub fn connect(url: &str) -> io::Result<Self> {
        let (addr, db) = url_parts(url)?;
        let mut probe = Self::connect_addr(addr)?;
        if !db.is_empty() && db != "0" {
            probe.command(&["SELECT", db])?;
        }
        Ok(probe)
    }

    /// Connects to `addr`.
    ///
    /// # Errors
    ///
    /// If the connection fails.
    pub fn connect_addr(addr: SocketAddr) -> io::Result<Self> {
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        stream.set_nodelay(true)?;
        Ok(Self {
            reader: BufReader::new(stream.try_clone()?),
            writer: stream,
        })
    }

    /// Sends one command and reads its reply; a Redis error reply is an `Err`.
    ///
    /// # Errors
    ///
    /// On a broken connection, a malformed reply, or an error reply.
    pub fn command(&mut self, args: &[&str]) -> io::Result<Reply> {
        self.writer.write_all(&redis_monitor::request(args))?;
        match self.read_reply()? {
            Reply::Error(message) => Err(io::Error::other(format!("{args:?}: {message}"))),
            reply => Ok(reply),
        }
    }

    /// `PING`.
    ///
    /// # Errors
    ///
    /// If Redis does not answer `PONG`.
    pub fn ping(&mut self) -> io::Result<()> {
        match self.command(&["PING"])? {
            Reply::Status(pong) if pong == "PONG" => Ok(()),
            other => Err(io::Error::other(format!("PING answered {other:?}"))),
        }
    }

    /// Every key matching the glob `pattern` (by `SCAN`, so a shared instance is not blocked).
    ///
    /// # Panics
    ///
    /// If Redis fails or answers something unexpected.
    pub fn keys(&mut self, pattern: &str) -> Vec<String> {
        let mut cursor = "0".to_owned();
        let mut keys = Vec::new();
        loop {
            let reply = self
                .command(&["SCAN", &cursor, "MATCH", pattern, "COUNT", "1000"])
                .expect("SCAN");
            let Reply::Array(Some(parts)) = reply else {
                panic!("SCAN answered {reply:?}");
            };
            cursor = parts[0].text().expect("SCAN cursor");
            let Reply::Array(Some(found)) = &parts[1] else {
                panic!("SCAN answered keys {:?}", parts[1]);
            };
            keys.extend(found.iter().filter_map(Reply::text));
            if cursor == "0" {
                return keys;
            }
        }
    }

    /// `TYPE key`: `"zset"`, `"hash"`, `"string"`, `"none"`, ...
    ///
    /// # Panics
    ///
    /// If Redis fails.
    pub fn key_type(&mut self, key: &str) -> String {
        self.command(&["TYPE", key])
            .expect("TYPE")
            .text()
            .expect("TYPE answers a status")
    }

    /// `ZCARD key`: members of a sorted set (0 for a missing key).
    ///
    /// # Panics
    ///
    /// If Redis fails or the key is not a sorted set.
    pub fn zcard(&mut self, key: &str) -> i64 {
        match self.command(&["ZCARD", key]).expect("ZCARD") {
            Reply::Int(count) => count,
            other => panic!("ZCARD answered {other:?}"),
        }
    }

    /// `CONFIG RESETSTAT`: zeroes `INFO commandstats` (own instances only: it is global).
    ///
    /// # Panics
    ///
    /// If Redis fails.
    pub fn reset_stats(&mut self) {
        self.command(&["CONFIG", "RESETSTAT"])
            .expect("CONFIG RESETSTAT");
    }

    /// `INFO commandstats`, one entry per command Redis has counted since the last reset.
    ///
    /// # Panics
    ///
    /// If Redis fails or the reply does not parse.
    pub fn command_stats(&mut self) -> Vec<CommandStat> {
        let info = self
            .command(&["INFO", "commandstats"])
            .expect("INFO commandstats")
            .text()
            .expect("INFO answers a bulk string");
        info.lines().filter_map(CommandStat::parse).collect()
    }

    fn read_line(&mut self) -> io::Result<String> {
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        Ok(line.trim_end_matches(['\r', '\n']).to_owned())
    }

    fn read_reply(&mut self) -> io::Result<Reply> {
        let line = self.read_line()?;
        let (kind, rest) = line.split_at(1.min(line.len()));
        let number = || {
            rest.parse::<i64>()
                .map_err(|_| io::Error::other(format!("bad RESP length in {line:?}")))
        };
        Ok(match kind {
            "+" => Reply::Status(rest.to_owned()),
            "-" => Reply::Error(rest.to_owned()),
            ":" => Reply::Int(number()?),
            "$" => match number()? {
                -1 => Reply::Bulk(None),
                len => {
                    let mut bytes = vec![0; len as usize + 2];
                    io::Read::read_exact(&mut self.reader, &mut bytes)?;
                    bytes.truncate(len as usize);
                    Reply::Bulk(Some(bytes))
                }
            },
            "*" => match number()? {
                -1 => Reply::Array(None),
                len => Reply::Array(Some(
                    (0..len)
                        .map(|_| self.read_reply())
                        .collect::<io::Result<_>>()?,
                )),
            },
            _ => return Err(io::Error::other(format!("unexpected RESP line {line:?}"))),
        })
    }
}

/// One line of `INFO commandstats`:
/// `cmdstat_evalsha:calls=10,usec=50,usec_per_call=5.00,rejected_calls=0,failed_calls=0`.
#[derive(Clone, Debug, PartialEq)]
pub struct CommandStat {
    /// The command, lowercase (`evalsha`, `fcall`, `zadd`, ...).
    pub command: String,
    /// How many times Redis ran it.
    pub calls: u64,
    /// Microseconds Redis spent in it, in total.
    pub usec: u64,
    /// Microseconds per call.
    pub usec_per_call: f64,
}

impl CommandStat {
    fn parse(line: &str) -> Option<Self> {
        let (name, fields) = line.strip_prefix("cmdstat_")?.split_once(':')?;
        let field = |wanted: &str| {
            fields
                .split(',')
                .filter_map(|pair| pair.split_once('='))
                .find(|(key, _)| *key == wanted)
                .map(|(_, value)| value)
        };
        Some(Self {
            command: name.to_owned(),
            calls: field("calls")?.parse().ok()?,
            usec: field("usec")?.parse().ok()?,
            usec_per_call: field("usec_per_call")?.parse().ok()?,
        })
    }
}

/// Total calls of every command in `stats`.
pub fn total_calls(stats: &[CommandStat]) -> u64 {
    stats.iter().map(|stat| stat.calls).sum()
}

/// Marks `namespace` in the Redis at `url` as already warm: its epoch names this Redis
/// process and began long ago, so a store there grants at once. For tests about something
/// else than the warm-up a new namespace otherwise waits (one TTL). The key's name is the
/// store's layout (`<namespace>:{epoch}`), pinned here on purpose.
pub fn mark_warm(url: &str, namespace: &str) {
    let mut conn = redis::Client::open(url)
        .expect("a redis URL")
        .get_connection()
        .expect("connect to the test's redis");
    let info: String = redis::cmd("INFO").arg("server").query(&mut conn).unwrap();
    let run = info
        .lines()
        .find_map(|line| line.strip_prefix("run_id:"))
        .expect("INFO server names its run_id")
        .trim()
        .to_owned();
    let _: () = redis::cmd("HSET")
        .arg(format!("{namespace}:{{epoch}}"))
        .arg("run")
        .arg(run)
        .arg("since")
        .arg(0)
        .query(&mut conn)
        .unwrap();
}
