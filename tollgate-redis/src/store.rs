//! `RedisLimits`: the store handle every shared limit stands on, and its process-side state
//! (`Inner`). It owns the one connection that grants go through (its [`Link`], reconnected
//! on demand, each call bounded by the store's wait), the keeper thread that renews and
//! releases leases, and the per-key local state that lets only one task per key and process
//! ask Redis at a time. How a store is made is in `options.rs`.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use crate::connection::Link;
use crate::helpers::{lock, micros};
use crate::keeper::Keeper;
use crate::lease::KeyLocal;
use crate::stats::StoreStats;

/// A handle on the shared store: a Redis, a namespace in it, and this process's leases.
///
/// Cloning is cheap and every clone is the same process-side store (one connection, one
/// keeper thread, one set of leases). Two `RedisLimits` connected separately behave like two
/// processes of a fleet: they share only what is in Redis.
///
/// Dropping the last clone (and with it every permit and limiter made from it) sends the
/// releases still queued before it returns, waiting at most a connect and one call (twice
/// the [call timeout](crate::RedisLimitsOptions::call_timeout)): a process that ends right after
/// its work leaves no lease for the rest of the fleet to wait out. (While Redis counts as
/// unreachable, see below, it gives them up at once: they lapse after one TTL.)
///
/// # When Redis is out of reach
///
/// Nothing is granted (fail closed), and failing is fast:
///
/// - A call waits at most the call timeout, trying again while Redis refuses connections
///   or is loading: a Redis that is back within it is ridden through.
/// - Once one call has failed after its whole call timeout, Redis counts as **unreachable**
///   ([`StoreStats::is_unreachable`]): every ask fails at once, with an
///   [`is_unavailable`](crate::RedisLimitsError::is_unavailable) error naming the address
///   whose [`retry_after`](crate::RedisLimitsError::retry_after) is the time to the store's
///   next **probe**. An ask made when a probe is due is that probe (one at a time per
///   store, the keeper's renewals and releases included); one that meets a probe under way
///   waits for its outcome, a fifth of a second at most. The first probe comes a fifth of a
///   second after the failure, and the pause doubles up to two seconds while they keep
///   failing, so a store knocks on a dead Redis a few times a second at most however many
///   tasks ask.
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

impl RedisLimits {
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
        &self.inner.link.address
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
        self.inner.link.wait
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
            unreachable: self.inner.link.health.is_down(),
            ..self.inner.keeper.stats.snapshot()
        }
    }
}

impl fmt::Debug for RedisLimits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLimits")
            .field("address", &self.inner.link.address)
            .field("namespace", &self.inner.namespace)
            .field("lease_ttl", &self.inner.ttl)
            .field("call_timeout", &self.inner.link.wait)
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct Locals {
    map: HashMap<String, Weak<KeyLocal>>,
    /// The map's length after the last sweep of dead entries: sweeping again once it has
    /// doubled keeps the cost amortised O(1) and the map O(live keys).
    swept_at: usize,
}

/// The process-side store every clone of a [`RedisLimits`] shares.
pub(crate) struct Inner {
    /// The connection grants use, and the bounded calls on it (with the address errors
    /// name, the call timeout and whether Redis answers).
    pub(crate) link: Link,
    pub(crate) namespace: String,
    pub(crate) ttl: Duration,
    pub(crate) poll: Duration,
    pub(crate) keeper: Keeper,
    token: String,
    counter: AtomicU64,
    locals: Mutex<Locals>,
}

impl Inner {
    /// The store of `namespace` over `link`, with `keeper` renewing its leases of `ttl`;
    /// waiting acquires ask again at least every `poll`.
    pub(crate) fn new(
        link: Link,
        namespace: String,
        ttl: Duration,
        poll: Duration,
        keeper: Keeper,
    ) -> Self {
        Self {
            link,
            namespace,
            ttl,
            poll,
            keeper,
            token: process_token(),
            counter: AtomicU64::new(0),
            locals: Mutex::new(Locals::default()),
        }
    }

    /// The epoch key: present while Redis holds this namespace's data; its value is the
    /// Redis time from which grants are safe.
    pub(crate) fn epoch_key(&self) -> String {
        epoch_key(&self.namespace)
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
}

/// The epoch key of `namespace` (see [`Inner::epoch_key`]).
pub(crate) fn epoch_key(namespace: &str) -> String {
    format!("{namespace}:{{epoch}}")
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
            .field("address", &self.link.address)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::tag;
    use crate::helpers::micros_ceil;
    use std::time::Duration;

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
}
