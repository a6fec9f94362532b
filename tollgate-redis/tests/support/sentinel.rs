//! A small highly available Redis of a test's own: a master, one replica and one Sentinel
//! (quorum 1), all on free loopback ports, with a short `down-after-milliseconds` and
//! `failover-timeout` so that a failover takes a few seconds. The sentinel runs as
//! `redis-server <conf> --sentinel` (the `redis-server` that `.ci/run` installs has the
//! mode built in), with its config file in a scratch directory (Sentinel rewrites it).
//! Dropping it stops every process.

#![allow(dead_code)]

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::redis_server::{Probe, RedisServer, Reply, free_port};

/// The name the sentinel knows the master by.
pub const MASTER_NAME: &str = "tollgate";

/// How long a master may fail to answer before the sentinel counts it as down.
const DOWN_AFTER: Duration = Duration::from_millis(1_000);

/// How long a process may take to come up or be seen.
const DEADLINE: Duration = Duration::from_secs(15);

/// A master, its replica and a sentinel watching them (see the module docs).
#[derive(Debug)]
pub struct SentinelSet {
    /// The master at the start (killed by [`kill_master`](Self::kill_master)).
    pub master: RedisServer,
    /// The replica the sentinel promotes when the master dies.
    pub replica: RedisServer,
    port: u16,
    dir: PathBuf,
    sentinel: Child,
}

impl SentinelSet {
    /// Starts the three and waits until the sentinel knows the master and the replica.
    ///
    /// # Panics
    ///
    /// If a process does not come up, or the sentinel does not see the replica in time.
    pub fn start() -> Self {
        let master = RedisServer::start();
        let replica = RedisServer::start_replica_of(&master);
        let port = free_port();
        let dir = std::env::temp_dir().join(format!(
            "tollgate-redis-sentinel-{}-{port}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).expect("a scratch directory for the sentinel");
        let config = dir.join("sentinel.conf");
        let text = format!(
            "port {port}\n\
             bind 127.0.0.1\n\
             protected-mode no\n\
             dir {dir}\n\
             sentinel monitor {MASTER_NAME} 127.0.0.1 {master_port} 1\n\
             sentinel down-after-milliseconds {MASTER_NAME} {down}\n\
             sentinel failover-timeout {MASTER_NAME} 3000\n\
             sentinel parallel-syncs {MASTER_NAME} 1\n",
            dir = dir.display(),
            master_port = master.addr().port(),
            down = DOWN_AFTER.as_millis(),
        );
        std::fs::write(&config, text).expect("write the sentinel's config");
        let sentinel = Command::new("redis-server")
            .arg(&config)
            .arg("--sentinel")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("run redis-server --sentinel (is redis-server installed?)");
        let set = Self {
            master,
            replica,
            port,
            dir,
            sentinel,
        };
        let until = Instant::now() + DEADLINE;
        while !set.sees_replica() {
            assert!(
                Instant::now() < until,
                "the sentinel never saw the master and its replica"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        set
    }

    /// `redis://127.0.0.1:<port>` of the sentinel.
    pub fn sentinel_url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The master's address as the sentinel names it now
    /// (`SENTINEL get-master-addr-by-name`), if it answers.
    pub fn master_addr(&self) -> Option<SocketAddr> {
        let reply = self
            .probe()
            .ok()?
            .command(&["SENTINEL", "get-master-addr-by-name", MASTER_NAME])
            .ok()?;
        let Reply::Array(Some(parts)) = reply else {
            return None;
        };
        let host = parts.first()?.text()?;
        let port = parts.get(1)?.text()?;
        format!("{host}:{port}").parse().ok()
    }

    /// Kills the master at once (`SIGKILL`).
    pub fn kill_master(&mut self) {
        self.master.kill();
    }

    /// Waits until the sentinel names another master than `old`, and returns it.
    ///
    /// # Panics
    ///
    /// If it does not within `deadline`.
    pub fn wait_for_failover(&self, old: SocketAddr, deadline: Duration) -> SocketAddr {
        let until = Instant::now() + deadline;
        loop {
            if let Some(addr) = self.master_addr().filter(|&addr| addr != old) {
                return addr;
            }
            assert!(
                Instant::now() < until,
                "the sentinel still names {old} after {deadline:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn probe(&self) -> io::Result<Probe> {
        Probe::connect_addr(SocketAddr::from(([127, 0, 0, 1], self.port)))
    }

    /// Whether the sentinel names the master and lists the replica as a healthy one.
    fn sees_replica(&self) -> bool {
        if self.master_addr() != Some(self.master.addr()) {
            return false;
        }
        let Ok(Reply::Array(Some(replicas))) = self
            .probe()
            .and_then(|mut probe| probe.command(&["SENTINEL", "replicas", MASTER_NAME]))
        else {
            return false;
        };
        let wanted = self.replica.addr().port().to_string();
        replicas.iter().any(|replica| {
            let Reply::Array(Some(fields)) = replica else {
                return false;
            };
            let field = |name: &str| {
                fields
                    .chunks(2)
                    .find(|pair| pair[0].text().as_deref() == Some(name))
                    .and_then(|pair| pair.get(1)?.text())
            };
            field("port").as_deref() == Some(wanted.as_str())
                && field("flags").is_some_and(|flags| !flags.contains("down"))
                && field("master-link-status").as_deref() == Some("ok")
        })
    }
}

impl Drop for SentinelSet {
    fn drop(&mut self) {
        let _ = self.sentinel.kill();
        let _ = self.sentinel.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
