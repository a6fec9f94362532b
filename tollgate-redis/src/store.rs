//! `RedisLimits`: the store handle every shared limit stands on. It owns the one multiplexed
//! connection that grants go through (reconnected on demand, each call bounded by the store's
//! wait), the keeper thread that renews and releases leases, and the per-key local state that
//! lets only one task per key and process ask Redis at a time.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, Weak};
use std::time::{Duration, Instant};

use futures_lite::future;
use redis::aio::MultiplexedConnection;
use redis::{FromRedisValue, RedisError, Script, ScriptInvocation};

use crate::error::RedisLimitsError;
use crate::health::{Admit, Attempt, Gate, Health, PROBE_WAIT};
use crate::helpers::{lock, micros};
use crate::keeper::Keeper;
use crate::lease::KeyLocal;
use crate::stats::StoreStats;
use crate::target::{Target, sentinel_setting};

/// The default [`lease_ttl`](RedisLimitsOptions::lease_ttl).
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(10);
/// The default [`call_timeout`](RedisLimitsOptions::call_timeout).
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(2);
/// The default [`poll_interval`](RedisLimitsOptions::poll_interval).
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(20);
/// The longest [`lease_ttl`](RedisLimitsOptions::lease_ttl): one hour. The TTL is how long a
/// killed worker's permits stay taken and how long the store grants nothing after Redis
/// lost its data (a restart, a failover); beyond an hour that is an outage, not a setting.
pub const MAX_LEASE_TTL: Duration = Duration::from_secs(60 * 60);
/// The longest [`call_timeout`](RedisLimitsOptions::call_timeout): one minute. It is how
/// long a call waits before the store counts Redis as unreachable, and dropping the last
/// handle of a store may wait twice as long for its last releases: a longer wait is no
/// longer a bounded one.
pub const MAX_CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// The pause between two tries of a call that failed for a reason that can pass (a refused
/// connection, a Redis still loading its data), within the bounded wait.
const RETRY_PAUSE: Duration = Duration::from_millis(25);

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

/// A handle on the shared store: a Redis, a namespace in it, and this process's leases.
///
/// Cloning is cheap and every clone is the same process-side store (one connection, one
/// keeper thread, one set of leases). Two `RedisLimits` connected separately behave like two
/// processes of a fleet: they share only what is in Redis.
///
/// Dropping the last clone (and with it every permit and limiter made from it) sends the
/// releases still queued before it returns, waiting at most a connect and one call (twice
/// the [call timeout](RedisLimitsOptions::call_timeout)): a process that ends right after
/// its work leaves no lease for the rest of the fleet to wait out. (While Redis counts as
/// unreachable, see below, it gives them up at once: they lapse after one TTL.)
///
/// # When Redis is out of reach
///
/// Nothing is granted (fail closed), and failing is fast:
///
/// - A call waits at most the call timeout, trying again while Redis refuses connections
///   or is loading: a Redis that is back within it is ridden through.
/// - Once one call has failed after its whole call timeout, Redis counts as
///   **unreachable** ([`StoreStats::is_unreachable`]): every ask fails at once, with an
///   [`is_unavailable`](RedisLimitsError::is_unavailable) error naming the address whose
///   [`retry_after`](RedisLimitsError::retry_after) is the time to the store's next **probe**.
///   An ask made when a probe is due is that probe (one at a time per store, the keeper's
///   renewals and releases included); one that meets a probe under way waits for its
///   outcome, a fifth of a second at most. The first probe comes a fifth of a second after
///   the failure, and the pause doubles up to two seconds while they keep failing, so a
///   store knocks on a dead Redis a few times a second at most however many tasks ask.
/// - The first probe that reaches Redis ends it: asks are served again (after a warm-up if
///   Redis lost its data).
///
/// So a map whose retry policy gives up ends within about two call timeouts of an outage
/// whatever its size, and one whose policy honours `retry_after`
/// (`.retry_after(RedisLimitsError::retry_after)`) waits the outage out on a few attempts:
///
/// ```no_run
/// use tollgate::{RetryPolicy, map_async};
/// use tollgate_redis::{RedisLimits, RedisLimitsError, SharedKeyLimits};
///
/// # futures_lite::future::block_on(async {
/// let store = RedisLimits::connect("redis://127.0.0.1:6379").await?;
/// let per_host = SharedKeyLimits::new(&store, "per-host").per_key_limit(2);
/// let policy = RetryPolicy::new()
///     .attempts(10)
///     .when(|e: &RedisLimitsError| e.is_unavailable() || e.is_fenced())
///     // While Redis is out of reach: the time to the store's next probe.
///     .retry_after(RedisLimitsError::retry_after);
/// let hosts = ["example.com", "example.org"];
/// let pages = map_async(0..100usize, 16, |i| async move { Ok::<_, RedisLimitsError>(i) })
///     .per_key(|i| hosts[i % 2], 2)
///     .shared_limits(per_host)
///     .retry(policy)
///     .await;
/// # let _ = pages;
/// # Ok::<(), RedisLimitsError>(())
/// # });
/// ```
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use tollgate_redis::RedisLimits;
///
/// # futures_lite::future::block_on(async {
/// let store = RedisLimits::options("redis://127.0.0.1:6379")
///     .namespace("crawler")
///     .lease_ttl(Duration::from_secs(5))
///     .call_timeout(Duration::from_secs(1))
///     .connect()
///     .await?;
/// assert_eq!(store.address(), "127.0.0.1:6379");
/// # Ok::<(), tollgate_redis::RedisLimitsError>(())
/// # });
/// ```
#[derive(Clone)]
pub struct RedisLimits {
    pub(crate) inner: Arc<Inner>,
}

/// How to connect a [`RedisLimits`]: made by [`RedisLimits::options`], finished by
/// [`connect`](Self::connect).
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use tollgate_redis::{DEFAULT_CALL_TIMEOUT, DEFAULT_LEASE_TTL, RedisLimits};
///
/// # futures_lite::future::block_on(async {
/// let store = RedisLimits::options("redis://127.0.0.1:6379")
///     .namespace("crawler")
///     .lease_ttl(DEFAULT_LEASE_TTL * 2)
///     .call_timeout(DEFAULT_CALL_TIMEOUT)
///     .poll_interval(Duration::from_millis(50))
///     .connect()
///     .await?;
/// assert_eq!(store.namespace(), "crawler");
/// assert_eq!(store.lease_ttl(), Duration::from_secs(20));
/// assert_eq!(store.call_timeout(), Duration::from_secs(2));
/// # Ok::<(), tollgate_redis::RedisLimitsError>(())
/// # });
/// ```
#[derive(Clone, Debug)]
#[must_use = "options do nothing until `.connect().await`"]
pub struct RedisLimitsOptions {
    url: String,
    /// Through Sentinel: the sentinels' URLs and the master's name (`url` is unused).
    sentinel: Option<(Vec<String>, String)>,
    namespace: String,
    lease_ttl: Duration,
    call_timeout: Duration,
    poll_interval: Duration,
}

impl RedisLimitsOptions {
    /// The prefix of every Redis key this store uses (`"tollgate"` by default). Processes
    /// share limits exactly when they use the same Redis, namespace and limit names.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// How long a lease lives without renewal (10 s by default). The keeper renews every
    /// lease of the process once per third of it; a process that cannot renew fences its
    /// permits before their leases lapse; a killed process's permits come back after it;
    /// after Redis loses its data, nothing is granted for one TTL. Every process of a
    /// namespace should use the same TTL.
    ///
    /// # Panics
    ///
    /// If `ttl` is below 30 ms (renewal and fencing need room inside it) or above
    /// [`MAX_LEASE_TTL`] (one hour: a killed worker's permits, and the warm-up after Redis
    /// lost its data, would block the fleet for longer than that).
    #[track_caller]
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        assert!(
            ttl >= Duration::from_millis(30),
            "tollgate-redis: a lease TTL below 30 ms leaves no room to renew"
        );
        assert!(
            ttl <= MAX_LEASE_TTL,
            "tollgate-redis: a lease TTL above one hour (MAX_LEASE_TTL) would keep a killed \
             worker's permits, and the warm-up after a restart, for longer than that"
        );
        self.lease_ttl = ttl;
        self
    }

    /// How long one call may wait for Redis, connecting included (2 s by default), before
    /// it fails with an [`is_unavailable`](RedisLimitsError::is_unavailable) error. Calls are
    /// retried within this wait while Redis refuses connections or is loading. Once one
    /// call has failed after the whole wait, asks fail at once until a probe reaches Redis
    /// (see [`RedisLimits`]).
    ///
    /// # Panics
    ///
    /// If `wait` is zero or above [`MAX_CALL_TIMEOUT`] (one minute: a call that may wait
    /// longer is no longer a bounded wait, and dropping the store may wait twice as long).
    #[track_caller]
    pub fn call_timeout(mut self, wait: Duration) -> Self {
        assert!(
            !wait.is_zero(),
            "tollgate-redis: the wait for redis must not be zero"
        );
        assert!(
            wait <= MAX_CALL_TIMEOUT,
            "tollgate-redis: a call timeout above one minute (MAX_CALL_TIMEOUT) is not a \
             bounded wait"
        );
        self.call_timeout = wait;
        self
    }

    /// The longest pause between two asks of a busy key (20 ms by default). A waiting
    /// acquire asks again at once when a permit of the key is released in this process, and
    /// otherwise after a pause that starts at 1 ms and doubles up to this: releases in
    /// other processes are seen within it. An interval longer than the
    /// [lease TTL](Self::lease_ttl) counts as the TTL: every lease of a busy key lapses or
    /// is renewed within one, so a waiter looks again at least that often.
    ///
    /// # Panics
    ///
    /// If `interval` is zero.
    #[track_caller]
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        assert!(
            !interval.is_zero(),
            "tollgate-redis: the poll interval must not be zero"
        );
        self.poll_interval = interval;
        self
    }

    /// Connects: checks the URL, opens the connection grants use and starts the keeper
    /// thread (its own connection, for renewals and releases). Needs Redis 6.2 or newer.
    ///
    /// # Errors
    ///
    /// An [`is_unavailable`](RedisLimitsError::is_unavailable) error when the URL is invalid,
    /// Redis does not answer a `PING` within the wait, or it is older than 6.2; through
    /// Sentinel, also when no sentinel is given, none answers, or none names a master
    /// that says it is one; also when the operating system cannot start the keeper thread.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes leaves nothing behind.
    pub async fn connect(self) -> Result<RedisLimits, RedisLimitsError> {
        self.connect_with(std::thread::Builder::new()).await
    }

    /// [`connect`](Self::connect), with the keeper's thread made by `thread`.
    async fn connect_with(
        self,
        thread: std::thread::Builder,
    ) -> Result<RedisLimits, RedisLimitsError> {
        // No target means no address to name yet: the errors name the setting as given.
        let target = match &self.sentinel {
            None => Target::direct(&self.url).map_err(|e| {
                let url = if self.url.is_empty() {
                    "(empty url)"
                } else {
                    &self.url
                };
                RedisLimitsError::unavailable(url, format_args!("invalid url: {e}"))
            })?,
            Some((urls, master)) => Target::sentinel(urls, master).map_err(|e| {
                RedisLimitsError::unavailable(
                    &sentinel_setting(urls, master),
                    format_args!("invalid sentinel setting: {e}"),
                )
            })?,
        };
        let address = target.address();
        let health = Arc::new(Health::default());
        let keeper = Keeper::start(
            thread,
            target.clone(),
            Arc::clone(&health),
            self.lease_ttl,
            self.call_timeout,
        )
        .map_err(|e| {
            RedisLimitsError::unavailable(
                &address,
                format_args!("cannot start the keeper thread: {e}"),
            )
        })?;
        let inner = Arc::new(Inner {
            target,
            address,
            namespace: self.namespace,
            ttl: self.lease_ttl,
            wait: self.call_timeout,
            poll: self.poll_interval.min(self.lease_ttl),
            conn: Mutex::new(None),
            run_id: Mutex::new(String::new()),
            generation: AtomicU64::new(0),
            health,
            keeper,
            token: process_token(),
            counter: AtomicU64::new(0),
            locals: Mutex::new(Locals::default()),
        });
        let store = RedisLimits { inner };
        let ping = redis::cmd("PING");
        // A store that failed to connect is dropped: it will probe nothing.
        store
            .inner
            .query::<String>(&Call::Cmd(&ping))
            .await
            .map_err(RedisLimitsError::without_retry_after)?;
        Ok(store)
    }
}

impl RedisLimits {
    /// Options to connect to the Redis at `url` (`redis://host:port[/db]`).
    pub fn options(url: impl Into<String>) -> RedisLimitsOptions {
        RedisLimitsOptions {
            url: url.into(),
            sentinel: None,
            namespace: "tollgate".to_owned(),
            lease_ttl: DEFAULT_LEASE_TTL,
            call_timeout: DEFAULT_CALL_TIMEOUT,
            poll_interval: DEFAULT_POLL_INTERVAL,
        }
    }

    /// Options to connect through Redis Sentinel to the master the sentinels at
    /// `sentinels` (`redis://host:port` each) know as `master`.
    ///
    /// Every new connection (the store's, and its keeper's) asks the sentinels, in turn,
    /// which server is the master now, and uses it only once it says it is a master. So
    /// when the master fails and Sentinel promotes a replica, the store follows by itself:
    /// calls fail (fast: see [`RedisLimits`]) until Sentinel names the new master, then go
    /// to it.
    /// The new master is a different Redis process, so the store's epoch check sees it (its
    /// run id) and grants nothing for one lease TTL: leases granted just before the failover
    /// may not have reached the replica, and their holders are fenced or their leases
    /// lapse meanwhile.
    ///
    /// The master is reached on database 0 without credentials (the sentinels' URLs may
    /// carry their own). Errors name the master and the sentinels
    /// ([`address`](Self::address)).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use tollgate_redis::{RedisLimits, SharedKeyedBulkhead};
    ///
    /// # futures_lite::future::block_on(async {
    /// let store = RedisLimits::sentinel(
    ///     ["redis://10.0.0.5:26379", "redis://10.0.0.6:26379", "redis://10.0.0.7:26379"],
    ///     "crawler",
    /// )
    /// .namespace("crawler")
    /// .connect()
    /// .await?;
    /// assert_eq!(
    ///     store.address(),
    ///     "crawler via sentinel 10.0.0.5:26379,10.0.0.6:26379,10.0.0.7:26379"
    /// );
    /// let per_host = SharedKeyedBulkhead::new(&store, "fetch", 2);
    /// # let _ = per_host;
    /// # Ok::<(), tollgate_redis::RedisLimitsError>(())
    /// # });
    /// ```
    pub fn sentinel<I>(sentinels: I, master: impl Into<String>) -> RedisLimitsOptions
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        let sentinels: Vec<String> = sentinels.into_iter().map(Into::into).collect();
        RedisLimitsOptions {
            sentinel: Some((sentinels, master.into())),
            ..Self::options(String::new())
        }
    }

    /// Connects to the Redis at `url` with the default options.
    ///
    /// # Errors
    ///
    /// As [`RedisLimitsOptions::connect`].
    ///
    /// # Cancel safety
    ///
    /// As [`RedisLimitsOptions::connect`].
    pub async fn connect(url: impl Into<String>) -> Result<Self, RedisLimitsError> {
        Self::options(url).connect().await
    }

    /// The address of the Redis (`host:port`), as errors name it; through Sentinel, the
    /// master's name and the sentinels' addresses (`crawler via sentinel
    /// 10.0.0.5:26379,10.0.0.6:26379`).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use tollgate_redis::RedisLimits;
    ///
    /// # futures_lite::future::block_on(async {
    /// let store = RedisLimits::connect("redis://127.0.0.1:6379/2").await?;
    /// assert_eq!(store.address(), "127.0.0.1:6379");
    /// # Ok::<(), tollgate_redis::RedisLimitsError>(())
    /// # });
    /// ```
    pub fn address(&self) -> &str {
        &self.inner.address
    }

    /// The prefix of every Redis key of this store.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use tollgate_redis::RedisLimits;
    ///
    /// # futures_lite::future::block_on(async {
    /// let store = RedisLimits::connect("redis://127.0.0.1:6379").await?;
    /// assert_eq!(store.namespace(), "tollgate");
    /// let crawler = RedisLimits::options("redis://127.0.0.1:6379")
    ///     .namespace("crawler")
    ///     .connect()
    ///     .await?;
    /// assert_eq!(crawler.namespace(), "crawler");
    /// # Ok::<(), tollgate_redis::RedisLimitsError>(())
    /// # });
    /// ```
    pub fn namespace(&self) -> &str {
        &self.inner.namespace
    }

    /// How long a lease lives without renewal.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use tollgate_redis::{DEFAULT_LEASE_TTL, RedisLimits};
    ///
    /// # futures_lite::future::block_on(async {
    /// let store = RedisLimits::connect("redis://127.0.0.1:6379").await?;
    /// assert_eq!(store.lease_ttl(), DEFAULT_LEASE_TTL);
    /// let quick = RedisLimits::options("redis://127.0.0.1:6379")
    ///     .lease_ttl(Duration::from_secs(3))
    ///     .connect()
    ///     .await?;
    /// // A killed process's permits come back after this; its leases are renewed every second.
    /// assert_eq!(quick.lease_ttl(), Duration::from_secs(3));
    /// # Ok::<(), tollgate_redis::RedisLimitsError>(())
    /// # });
    /// ```
    pub fn lease_ttl(&self) -> Duration {
        self.inner.ttl
    }

    /// How long one call may wait for Redis.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use tollgate_redis::{DEFAULT_CALL_TIMEOUT, RedisLimits};
    ///
    /// # futures_lite::future::block_on(async {
    /// let store = RedisLimits::connect("redis://127.0.0.1:6379").await?;
    /// assert_eq!(store.call_timeout(), DEFAULT_CALL_TIMEOUT);
    /// let impatient = RedisLimits::options("redis://127.0.0.1:6379")
    ///     .call_timeout(Duration::from_millis(500))
    ///     .connect()
    ///     .await?;
    /// assert_eq!(impatient.call_timeout(), Duration::from_millis(500));
    /// # Ok::<(), tollgate_redis::RedisLimitsError>(())
    /// # });
    /// ```
    pub fn call_timeout(&self) -> Duration {
        self.inner.wait
    }

    /// This process's side of the store: leases held, renewal calls made, releases sent.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use tollgate_redis::{RedisLimits, SharedKeyedBulkhead};
    ///
    /// # futures_lite::future::block_on(async {
    /// let store = RedisLimits::connect("redis://127.0.0.1:6379").await?;
    /// let per_host = SharedKeyedBulkhead::new(&store, "fetch", 2);
    /// let permit = per_host.acquire("example.com").await?;
    /// // Every clone of the store is the same process-side store, with the same counts.
    /// assert_eq!(store.clone().stats().leases_held(), 1);
    /// drop(permit);
    /// # Ok::<(), tollgate_redis::RedisLimitsError>(())
    /// # });
    /// ```
    pub fn stats(&self) -> StoreStats {
        StoreStats {
            unreachable: self.inner.health.is_down(),
            ..self.inner.keeper.stats.snapshot()
        }
    }
}

impl fmt::Debug for RedisLimits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLimits")
            .field("address", &self.inner.address)
            .field("namespace", &self.inner.namespace)
            .field("lease_ttl", &self.inner.ttl)
            .field("call_timeout", &self.inner.wait)
            .finish_non_exhaustive()
    }
}

/// One call: a script or a plain command.
pub(crate) enum Call<'a> {
    Script(&'a ScriptInvocation<'a>),
    Cmd(&'a redis::Cmd),
}

#[derive(Default)]
struct Locals {
    map: HashMap<String, Weak<KeyLocal>>,
    /// The map's length after the last sweep of dead entries: sweeping again once it has
    /// doubled keeps the cost amortised O(1) and the map O(live keys).
    swept_at: usize,
}

pub(crate) struct Inner {
    target: Target,
    pub(crate) address: String,
    pub(crate) namespace: String,
    pub(crate) ttl: Duration,
    pub(crate) wait: Duration,
    pub(crate) poll: Duration,
    conn: Mutex<Option<(u64, MultiplexedConnection)>>,
    /// The run id of the Redis process the current connection reached (from `INFO
    /// server`), passed to the scripts that check the epoch: a different one (a restart, a
    /// failover) restarts the warm-up.
    run_id: Mutex<String>,
    generation: AtomicU64,
    /// Whether Redis answers, shared with the keeper: the gate of every new connection and
    /// the fail-fast state.
    pub(crate) health: Arc<Health>,
    pub(crate) keeper: Keeper,
    token: String,
    counter: AtomicU64,
    locals: Mutex<Locals>,
}

impl Inner {
    /// The epoch key: present while Redis holds this namespace's data; its value is the
    /// Redis time from which grants are safe.
    pub(crate) fn epoch_key(&self) -> String {
        format!("{}:{{epoch}}", self.namespace)
    }

    /// The run id of the Redis this process last connected to.
    pub(crate) fn run_id(&self) -> String {
        lock(&self.run_id).clone()
    }

    pub(crate) fn ttl_micros(&self) -> u64 {
        micros(self.ttl)
    }

    /// A lease id unique across the fleet: this process's token and a counter.
    pub(crate) fn lease_id(&self) -> String {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        format!("{}:{n}", self.token)
    }

    pub(crate) fn local(&self, name: &str) -> Arc<KeyLocal> {
        let mut locals = lock(&self.locals);
        if let Some(local) = locals.map.get(name).and_then(Weak::upgrade) {
            return local;
        }
        if locals.map.len() >= 2 * locals.swept_at.max(32) {
            locals.map.retain(|_, local| local.strong_count() > 0);
            locals.swept_at = locals.map.len();
        }
        let local = Arc::new(KeyLocal::default());
        locals.map.insert(name.to_owned(), Arc::downgrade(&local));
        local
    }

    /// The connection grants use: the current one, or a new one when the turn to make an
    /// attempt comes (see [`Health`]) before `deadline`. `probe` is this call's turn when it
    /// was admitted as the probe of an unreachable Redis.
    async fn connection(
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
        claim.key(self.epoch_key()).arg(&server.run_id);
        claim.invoke_async::<()>(&mut conn).await?;
        *lock(&self.run_id) = server.run_id;
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        *lock(&self.conn) = Some((generation, conn.clone()));
        Ok((generation, conn))
    }

    /// Forgets the connection of `generation` (not a newer one another task made since).
    fn forget(&self, generation: u64) {
        let mut conn = lock(&self.conn);
        if conn.as_ref().is_some_and(|(g, _)| *g == generation) {
            *conn = None;
        }
    }

    /// Forgets the current connection, whichever it is.
    fn forget_current(&self) {
        // (The guard must be gone before `forget` locks again: a temporary in an `if let`
        // head lives through its body, and that self-deadlocked.)
        let current = lock(&self.conn).as_ref().map(|(generation, _)| *generation);
        if let Some(generation) = current {
            self.forget(generation);
        }
    }

    /// Fails at once if a call would be refused now because Redis counts as unreachable
    /// (see [`Health`]): a check before preparing a call that would have to be undone.
    pub(crate) fn fail_fast(&self) -> Result<(), RedisLimitsError> {
        match self.health.refusal(Instant::now()) {
            Some((reason, after)) => Err(self.unreachable(&reason, after)),
            None => Ok(()),
        }
    }

    /// The error of a call refused because Redis counts as unreachable.
    fn unreachable(&self, reason: &str, retry_after: Duration) -> RedisLimitsError {
        RedisLimitsError::unreachable(&self.address, reason, retry_after)
    }

    /// Runs one call, retrying within the bounded wait while the failure can pass; fails
    /// closed with an `unavailable` error naming the address after it.
    pub(crate) async fn query<T: FromRedisValue>(
        &self,
        call: &Call<'_>,
    ) -> Result<T, RedisLimitsError> {
        self.query_counted(call).await.map(|(value, _)| value)
    }

    /// As [`query`](Self::query), also saying how many times the call was sent: a call
    /// sent more than once may have run more than once.
    ///
    /// Fails at once while Redis counts as unreachable, unless this call is the probe (then
    /// it makes one attempt). A call that fails after its whole wait makes Redis count as
    /// unreachable.
    pub(crate) async fn query_counted<T: FromRedisValue>(
        &self,
        call: &Call<'_>,
    ) -> Result<(T, u32), RedisLimitsError> {
        let begin = Instant::now();
        let deadline = begin + self.wait;
        let mut waited = false;
        let mut probe = loop {
            let ended = self.health.ended();
            let now = Instant::now();
            break match self.health.admit(now, deadline) {
                Admit::Go => None,
                Admit::Probe(attempt) => Some(attempt),
                Admit::Busy(..) if !waited => {
                    // A probe is under way: its outcome, or give up soon.
                    waited = true;
                    let wait = PROBE_WAIT.min(deadline.saturating_duration_since(now));
                    future::or(ended, tollgate::sleep(wait)).await;
                    continue;
                }
                Admit::Refuse(reason, after) | Admit::Busy(reason, after) => {
                    return Err(self.unreachable(&reason, after));
                }
            };
        };
        let probing = probe.is_some();
        let mut sends = 0u32;
        loop {
            sends += 1;
            let remaining = deadline.saturating_duration_since(Instant::now());
            let attempt = async {
                let (generation, mut conn) = self
                    .connection(deadline, &mut probe)
                    .await
                    .map_err(|e| (None, e))?;
                let reply = match call {
                    Call::Script(invocation) => invocation.invoke_async::<T>(&mut conn).await,
                    Call::Cmd(cmd) => cmd.query_async::<T>(&mut conn).await,
                };
                reply.map_err(|e| (Some(generation), Failure::Redis(e)))
            };
            let reason = match tollgate::timeout(remaining, attempt).await {
                Ok(Ok(value)) => {
                    // A probe that found an open connection answering ends the outage too.
                    match probe.take() {
                        Some(attempt) => attempt.reached(),
                        None => self.health.reached(),
                    }
                    return Ok((value, sends));
                }
                Ok(Err((_, Failure::Refused(error)))) => return Err(error),
                Ok(Err((_, Failure::Late))) => format!("no answer within {:?}", self.wait),
                Ok(Err((generation, Failure::Redis(error)))) => {
                    // READONLY / MASTERDOWN: this server was demoted (a failover behind
                    // a fixed address); a new connection may reach the new primary.
                    let demoted = matches!(error.code(), Some("READONLY" | "MASTERDOWN"));
                    let broken = error.is_io_error()
                        || error.is_timeout()
                        || error.is_connection_dropped()
                        || error.is_connection_refusal()
                        || demoted;
                    if broken {
                        if let Some(generation) = generation {
                            self.forget(generation);
                        }
                    } else if !is_passing(&error) {
                        // An answer, if not the one hoped for: Redis is there.
                        match probe.take() {
                            Some(attempt) => attempt.reached(),
                            None => self.health.reached(),
                        }
                        return Err(RedisLimitsError::unavailable(&self.address, error));
                    }
                    error.to_string()
                }
                Err(_) => {
                    // A Redis that stopped answering (paused, partitioned) may never reset
                    // the socket: start over on a new one.
                    self.forget_current();
                    format!("no answer within {:?}", self.wait)
                }
            };
            let now = Instant::now();
            if probing {
                // The probe made its one attempt and Redis is still out of reach.
                drop(probe.take());
                return Err(self.unreachable(&reason, self.health.retry_after(now)));
            }
            if let Some((down, after)) = self.health.down(now) {
                // Another call gave up meanwhile: so does this one.
                return Err(self.unreachable(&down, after));
            }
            let remaining = deadline.saturating_duration_since(now);
            if remaining.is_zero() {
                self.forget_current();
                let after = self.health.declare_down(&reason, now);
                return Err(self.unreachable(&reason, after));
            }
            tollgate::sleep(RETRY_PAUSE.min(remaining)).await;
        }
    }
}

/// Why a call got no connection, or no reply on it.
enum Failure {
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

/// Server errors that pass on their own: a Redis loading its data, a replica without its
/// primary, a busy script. (READONLY is handled with the broken connections.)
fn is_passing(error: &RedisError) -> bool {
    matches!(
        error.code(),
        Some("LOADING" | "TRYAGAIN" | "MASTERDOWN" | "BUSY" | "CLUSTERDOWN")
    )
}

/// The hash tag of one key of one named limit: `{<name's length>:<name>:<key>}`. The length
/// keeps names and keys containing `:` apart (name `a:b` with key `c` is not name `a` with
/// key `b:c`); the braces keep all of one key's state in one cluster slot.
pub(crate) fn tag(name: &str, key: &str) -> String {
    format!("{{{}:{name}:{key}}}", name.len())
}

/// A token unique to this store in the fleet: the process id and a hash of the wall clock
/// and this thread, so two stores of one process, or two hosts with equal process ids, get
/// different lease ids.
fn process_token() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    static STORES: AtomicU64 = AtomicU64::new(0);
    let seed = format!(
        "{nanos}:{:?}:{}",
        std::thread::current().id(),
        STORES.fetch_add(1, Ordering::Relaxed)
    );
    format!(
        "{}-{:016x}",
        std::process::id(),
        // Randomly keyed per process: only uniqueness matters here, not stability.
        std::hash::BuildHasher::hash_one(&std::collections::hash_map::RandomState::new(), &seed)
    )
}

impl fmt::Debug for Inner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Inner")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::{MAX_CALL_TIMEOUT, MAX_LEASE_TTL, RedisLimits, RedisLimitsError, ServerInfo, tag};
    use crate::helpers::micros_ceil;
    use std::time::Duration;

    const NANO: Duration = Duration::from_nanos(1);

    #[test]
    #[should_panic(expected = "a lease TTL above one hour (MAX_LEASE_TTL)")]
    fn a_lease_ttl_of_duration_max_is_refused_with_its_bound() {
        let _ = RedisLimits::options("redis://127.0.0.1:1").lease_ttl(Duration::MAX);
    }

    #[test]
    #[should_panic(expected = "a lease TTL above one hour (MAX_LEASE_TTL)")]
    fn a_lease_ttl_just_over_the_bound_is_refused() {
        let _ = RedisLimits::options("redis://127.0.0.1:1").lease_ttl(MAX_LEASE_TTL + NANO);
    }

    #[test]
    #[should_panic(expected = "a call timeout above one minute (MAX_CALL_TIMEOUT)")]
    fn a_call_timeout_of_duration_max_is_refused_with_its_bound() {
        let _ = RedisLimits::options("redis://127.0.0.1:1").call_timeout(Duration::MAX);
    }

    #[test]
    #[should_panic(expected = "a call timeout above one minute (MAX_CALL_TIMEOUT)")]
    fn a_call_timeout_just_over_the_bound_is_refused() {
        let _ = RedisLimits::options("redis://127.0.0.1:1").call_timeout(MAX_CALL_TIMEOUT + NANO);
    }

    #[test]
    fn the_bounds_themselves_are_accepted() {
        let options = RedisLimits::options("redis://127.0.0.1:1")
            .lease_ttl(MAX_LEASE_TTL)
            .call_timeout(MAX_CALL_TIMEOUT)
            .poll_interval(Duration::MAX);
        assert_eq!(options.lease_ttl, MAX_LEASE_TTL);
        assert_eq!(options.call_timeout, MAX_CALL_TIMEOUT);
    }

    /// Regression: `connect` panicked (`expect`) when the keeper thread could not start.
    /// A stack larger than the address space makes the operating system refuse the thread,
    /// before anything is sent to Redis (there is no Redis at this address).
    #[test]
    fn connect_returns_an_error_when_the_keeper_thread_cannot_start() {
        let connect = || {
            RedisLimits::options("redis://127.0.0.1:1")
                .connect_with(std::thread::Builder::new().stack_size(1 << 50))
        };
        let check = |result: Result<RedisLimits, RedisLimitsError>| {
            let error = result.expect_err("no keeper thread, no store");
            assert!(error.is_unavailable(), "{error}");
            assert!(
                error.to_string().contains("cannot start the keeper thread"),
                "{error}"
            );
        };
        check(futures_lite::future::block_on(connect()));
        #[cfg(feature = "tokio")]
        check(
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(connect()),
        );
    }

    /// Regression: a Sentinel setting with no sentinel failed with "redis at  is
    /// unavailable", naming nothing (the plain URL, empty under Sentinel, stood in for the
    /// address). The error names the master and says no sentinel was given.
    #[test]
    fn a_sentinel_setting_without_a_sentinel_names_its_master_in_the_error() {
        let error = futures_lite::future::block_on(
            RedisLimits::sentinel(Vec::<String>::new(), "crawler").connect(),
        )
        .expect_err("no sentinel, no store");
        assert!(error.is_unavailable(), "{error}");
        assert_eq!(error.address(), Some("crawler via sentinel (none given)"));
        assert!(
            error
                .to_string()
                .starts_with("redis at crawler via sentinel (none given) is unavailable: "),
            "{error}"
        );
    }

    /// The same for a sentinel URL that does not parse: the master, and the URLs as given.
    #[test]
    fn a_sentinel_setting_with_a_bad_url_names_its_master_and_the_url() {
        let error = futures_lite::future::block_on(
            RedisLimits::sentinel(["not a url"], "crawler").connect(),
        )
        .expect_err("a bad URL, no store");
        assert_eq!(error.address(), Some("crawler via sentinel not a url"));
    }

    /// An empty plain URL is named as such, not as an empty address.
    #[test]
    fn an_empty_url_is_named_in_the_error() {
        let error = futures_lite::future::block_on(RedisLimits::options("").connect())
            .expect_err("no URL, no store");
        assert_eq!(error.address(), Some("(empty url)"));
        assert!(!error.to_string().contains("at  is"), "{error}");
    }

    #[test]
    fn tags_keep_names_and_keys_with_colons_apart() {
        assert_ne!(tag("a:b", "c"), tag("a", "b:c"));
        assert_eq!(tag("fetch", "k"), "{5:fetch:k}");
    }

    #[test]
    fn rate_intervals_round_up_to_whole_microseconds() {
        assert_eq!(micros_ceil(Duration::from_nanos(333_333_334)), 333_334);
        assert_eq!(micros_ceil(Duration::from_micros(40)), 40);
    }

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
