//! `Link`: the store's connection to Redis, the one multiplexed connection grants go
//! through. A call that finds none makes it when its turn to try comes (one attempt at a
//! time, see [`Health`]); a new connection is checked (the server's version and run id) and
//! claims the epoch before any call runs on it; a broken one is forgotten, so the next call
//! makes another. The bounded calls on it are in `call.rs`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use futures_lite::future;
use redis::aio::MultiplexedConnection;
use redis::{RedisError, Script};

use crate::error::RedisLimitsError;
use crate::health::{Attempt, Gate, Health};
use crate::helpers::lock;
use crate::target::Target;

/// The least time a connection attempt is made with: a call whose turn comes later than
/// this before its deadline gives up instead.
const MIN_ATTEMPT: Duration = Duration::from_millis(50);

/// Makes the namespace's epoch (`lua/epoch.lua`) name the Redis a new connection reached,
/// before any call of the store runs on it. The grant and rate scripts check the epoch
/// against the run id their caller read when it prepared the call; a call prepared before a
/// failover carries the old master's, which the promoted replica's copy of the epoch still
/// names, and would skip the warm-up. Claimed first, the epoch names the new server, so
/// such a call meets a mismatch and the scripts look up the real run id (and warm up).
static CLAIM_EPOCH: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("lua/epoch.lua"),
        "local t = redis.call('TIME')\n",
        "epoch_since(KEYS[1], ARGV[1], tonumber(t[1]) * 1000000 + tonumber(t[2]))\n",
        "return 0\n",
    ))
});

/// The connection grants use, where it goes, and whether Redis answers there.
pub(crate) struct Link {
    target: Target,
    /// The address errors name (see [`Target::address`]).
    pub(crate) address: String,
    /// How long one call may wait for Redis, connecting included: the call timeout.
    pub(crate) wait: Duration,
    /// The namespace's epoch key, claimed on each new connection (see `CLAIM_EPOCH`).
    epoch_key: String,
    conn: Mutex<Option<(u64, MultiplexedConnection)>>,
    /// The run id of the Redis process the current connection reached (from `INFO
    /// server`), passed to the scripts that check the epoch: a different one (a restart, a
    /// failover) restarts the warm-up.
    run_id: Mutex<String>,
    generation: AtomicU64,
    /// Whether Redis answers, shared with the keeper: the gate of every new connection and
    /// the fail-fast state.
    pub(crate) health: Arc<Health>,
}

impl Link {
    /// A link to `target` (named `address` in errors) with no connection yet: the first
    /// call makes one.
    pub(crate) fn new(
        target: Target,
        address: String,
        epoch_key: String,
        wait: Duration,
        health: Arc<Health>,
    ) -> Self {
        Self {
            target,
            address,
            wait,
            epoch_key,
            conn: Mutex::new(None),
            run_id: Mutex::new(String::new()),
            generation: AtomicU64::new(0),
            health,
        }
    }

    /// The run id of the Redis this process last connected to.
    pub(crate) fn run_id(&self) -> String {
        lock(&self.run_id).clone()
    }

    /// The connection grants use: the current one, or a new one when the turn to make an
    /// attempt comes (see [`Health`]) before `deadline`. `probe` is this call's turn when it
    /// was admitted as the probe of an unreachable Redis.
    pub(crate) async fn connection(
        &self,
        deadline: Instant,
        probe: &mut Option<Attempt<'_>>,
    ) -> Result<(u64, MultiplexedConnection), Failure> {
        loop {
            if let Some(conn) = lock(&self.conn).clone() {
                return Ok(conn);
            }
            // Listen before looking at the gate, so the end of an attempt is not missed.
            let ended = self.health.ended();
            let now = Instant::now();
            let attempt = match probe.take() {
                Some(attempt) => attempt,
                None => match self.health.begin_attempt(now, deadline) {
                    Gate::Attempt(attempt) => attempt,
                    gate => {
                        if let Some((reason, after)) = self.health.down(now) {
                            return Err(Failure::Refused(self.unreachable(&reason, after)));
                        }
                        let until = match gate {
                            Gate::NotBefore(at) => at.min(deadline),
                            _ => deadline,
                        };
                        if now >= deadline {
                            return Err(Failure::Late);
                        }
                        future::or(ended, tollgate::sleep(until - now)).await;
                        continue;
                    }
                },
            };
            if let Some(conn) = lock(&self.conn).clone() {
                // Another task connected while this one waited for the turn.
                attempt.skip();
                return Ok(conn);
            }
            let left = deadline.saturating_duration_since(now);
            if left < MIN_ATTEMPT {
                // Too late for an attempt that could be answered: give the turn back.
                attempt.skip();
                return Err(Failure::Late);
            }
            return match tollgate::timeout(left, self.open()).await {
                Ok(Ok(conn)) => {
                    attempt.reached();
                    Ok(conn)
                }
                // Dropping the turn counts the attempt as failed.
                Ok(Err(error)) => Err(Failure::Redis(error)),
                Err(_) => Err(Failure::Late),
            };
        }
    }

    /// Opens a new connection, reads the server's version and run id, and makes it the
    /// current one.
    async fn open(&self) -> Result<(u64, MultiplexedConnection), RedisError> {
        let mut conn = self.target.connect(self.wait).await?;
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query_async(&mut conn)
            .await?;
        let server = ServerInfo::parse(&info);
        if !server.is_supported() {
            return Err(RedisError::from((
                redis::ErrorKind::Client,
                "unsupported redis version",
                format!(
                    "tollgate-redis needs Redis 6.2 or newer (ZMSCORE), this one is {}",
                    server.version
                ),
            )));
        }
        // Before any call of this store runs on this server: see `CLAIM_EPOCH`.
        let mut claim = CLAIM_EPOCH.prepare_invoke();
        claim.key(&self.epoch_key).arg(&server.run_id);
        claim.invoke_async::<()>(&mut conn).await?;
        *lock(&self.run_id) = server.run_id;
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        *lock(&self.conn) = Some((generation, conn.clone()));
        Ok((generation, conn))
    }

    /// Forgets the connection of `generation` (not a newer one another task made since).
    pub(crate) fn forget(&self, generation: u64) {
        let mut conn = lock(&self.conn);
        if conn.as_ref().is_some_and(|(g, _)| *g == generation) {
            *conn = None;
        }
    }

    /// Forgets the current connection, whichever it is.
    pub(crate) fn forget_current(&self) {
        // (The guard must be gone before `forget` locks again: a temporary in an `if let`
        // head lives through its body, and that self-deadlocked.)
        let current = lock(&self.conn).as_ref().map(|(generation, _)| *generation);
        if let Some(generation) = current {
            self.forget(generation);
        }
    }

    /// The error of a call refused because Redis counts as unreachable.
    pub(crate) fn unreachable(&self, reason: &str, retry_after: Duration) -> RedisLimitsError {
        RedisLimitsError::unreachable(&self.address, reason, retry_after)
    }
}

/// Why a call got no connection, or no reply on it.
pub(crate) enum Failure {
    /// Redis counts as unreachable and this call is not the probe: fail at once.
    Refused(RedisLimitsError),
    /// No connection before the call's deadline (no turn to try, or no answer in time).
    Late,
    /// The attempt, or the call on the connection, failed.
    Redis(RedisError),
}

/// What `INFO server` says about the Redis a connection reached.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct ServerInfo {
    pub(crate) version: String,
    pub(crate) run_id: String,
}

impl ServerInfo {
    pub(crate) fn parse(info: &str) -> Self {
        let mut server = Self::default();
        for line in info.lines() {
            if let Some(v) = line.strip_prefix("redis_version:") {
                server.version = v.trim().to_owned();
            } else if let Some(v) = line.strip_prefix("run_id:") {
                server.run_id = v.trim().to_owned();
            }
        }
        server
    }

    /// Redis 6.2 or newer: renewal needs `ZMSCORE`. An unreadable version (a proxy that
    /// hides it) is let through: the first renewal would then fail and fence, loudly.
    pub(crate) fn is_supported(&self) -> bool {
        let mut parts = self.version.split('.').map(|p| p.parse::<u32>().ok());
        match (parts.next().flatten(), parts.next().flatten()) {
            (Some(major), Some(minor)) => (major, minor) >= (6, 2),
            _ => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ServerInfo;

    #[test]
    fn server_info_reads_version_and_run_id_and_needs_6_2() {
        let info = "# Server\r\nredis_version:7.0.15\r\nrun_id:ab12\r\n";
        let server = ServerInfo::parse(info);
        assert_eq!(server.version, "7.0.15");
        assert_eq!(server.run_id, "ab12");
        assert!(server.is_supported());
        assert!(!ServerInfo::parse("redis_version:6.0.16\r\n").is_supported());
        assert!(ServerInfo::parse("redis_version:6.2.0\r\n").is_supported());
        assert!(ServerInfo::parse("").is_supported());
    }
}
