//! `RedisLimitsOptions`: how to connect a store (the Redis or the Sentinel setting, the
//! namespace, the lease TTL, the call timeout, the poll interval), the bounds each setting
//! is checked against, and `connect`, which turns the settings into a running store: the
//! address, the keeper thread, the connection and its first `PING`.

use std::sync::Arc;
use std::time::Duration;

use crate::call::Call;
use crate::connection::Link;
use crate::error::RedisLimitsError;
use crate::health::Health;
use crate::keeper::Keeper;
use crate::store::{Inner, RedisLimits, epoch_key};
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
        let link = Link::new(
            target,
            address,
            epoch_key(&self.namespace),
            self.call_timeout,
            health,
        );
        let poll = self.poll_interval.min(self.lease_ttl);
        let inner = Inner::new(link, self.namespace, self.lease_ttl, poll, keeper);
        let store = RedisLimits {
            inner: Arc::new(inner),
        };
        let ping = redis::cmd("PING");
        // A store that failed to connect is dropped: it will probe nothing.
        store
            .inner
            .link
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
}

#[cfg(test)]
mod tests {
    use super::{MAX_CALL_TIMEOUT, MAX_LEASE_TTL, RedisLimits};
    use crate::error::RedisLimitsError;
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
}
