//! [`StoreStats`]: what one process's store has done.

/// What one process's store has done, from [`RedisLimits::stats`](crate::RedisLimits::stats).
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
/// let stats = store.stats();
/// assert_eq!(stats.leases_held(), 1);
/// assert!(stats.is_keeper_running());
/// println!("{} renewals, {} releases, {} fenced", stats.renewal_calls(), stats.release_calls(), stats.fenced());
/// # Ok::<(), tollgate_redis::RedisLimitsError>(())
/// # });
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    pub(crate) leases_held: usize,
    pub(crate) renewal_calls: u64,
    pub(crate) release_calls: u64,
    pub(crate) fenced: u64,
    pub(crate) keeper_running: bool,
    pub(crate) unreachable: bool,
}

impl StoreStats {
    /// Leases the keeper is renewing now (permits held and not fenced).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use tollgate_redis::{RedisLimits, SharedKeyedBulkhead};
    ///
    /// # futures_lite::future::block_on(async {
    /// let store = RedisLimits::connect("redis://127.0.0.1:6379").await?;
    /// let per_host = SharedKeyedBulkhead::new(&store, "fetch", 2);
    /// let a = per_host.acquire("example.com").await?;
    /// let b = per_host.acquire("example.org").await?;
    /// assert_eq!(store.stats().leases_held(), 2);
    /// // A dropped permit leaves the count once the keeper thread has taken its release.
    /// drop((a, b));
    /// # Ok::<(), tollgate_redis::RedisLimitsError>(())
    /// # });
    /// ```
    pub fn leases_held(&self) -> usize {
        self.leases_held
    }

    /// Renewal calls made so far: one per third of the lease TTL while any lease is held,
    /// whatever the number of leases. Failed attempts count too (a retry follows soon).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use tollgate_redis::{RedisLimits, SharedKeyedBulkhead};
    ///
    /// # futures_lite::future::block_on(async {
    /// let store = RedisLimits::connect("redis://127.0.0.1:6379").await?;
    /// let per_host = SharedKeyedBulkhead::new(&store, "fetch", 100);
    /// let mut permits = Vec::new();
    /// for _ in 0..100 {
    ///     permits.push(per_host.acquire("example.com").await?);
    /// }
    /// let before = store.stats().renewal_calls();
    /// tollgate::sleep(store.lease_ttl()).await;
    /// // About three calls for the TTL, each renewing all 100 leases.
    /// println!("{} renewal calls", store.stats().renewal_calls() - before);
    /// # Ok::<(), tollgate_redis::RedisLimitsError>(())
    /// # });
    /// ```
    pub fn renewal_calls(&self) -> u64 {
        self.renewal_calls
    }

    /// Release calls made so far (each one pipelined round trip for every release queued
    /// since the previous).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use tollgate_redis::{RedisLimits, SharedKeyedBulkhead};
    ///
    /// # futures_lite::future::block_on(async {
    /// let store = RedisLimits::connect("redis://127.0.0.1:6379").await?;
    /// let per_host = SharedKeyedBulkhead::new(&store, "fetch", 10);
    /// let mut permits = Vec::new();
    /// for _ in 0..10 {
    ///     permits.push(per_host.acquire("example.com").await?);
    /// }
    /// let before = store.stats().release_calls();
    /// drop(permits);
    /// // The keeper thread sends the ten releases in the background, batched: often in one call.
    /// tollgate::sleep(std::time::Duration::from_millis(100)).await;
    /// println!("{} release calls", store.stats().release_calls() - before);
    /// # Ok::<(), tollgate_redis::RedisLimitsError>(())
    /// # });
    /// ```
    pub fn release_calls(&self) -> u64 {
        self.release_calls
    }

    /// Permits fenced so far.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use tollgate_redis::RedisLimits;
    ///
    /// # futures_lite::future::block_on(async {
    /// let store = RedisLimits::connect("redis://127.0.0.1:6379").await?;
    /// // ... crawl ...
    /// let fenced = store.stats().fenced();
    /// if fenced > 0 {
    ///     eprintln!("{fenced} permits fenced: their leases could not be renewed in time");
    /// }
    /// # Ok::<(), tollgate_redis::RedisLimitsError>(())
    /// # });
    /// ```
    pub fn fenced(&self) -> u64 {
        self.fenced
    }

    /// Whether the keeper thread (renewals, releases) is running. It stops only on a bug
    /// (a panic, reported by the panic hook); grants then fail with an
    /// [`is_unavailable`](crate::RedisLimitsError::is_unavailable) error, and held permits
    /// are fenced at their fence point.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use tollgate_redis::RedisLimits;
    ///
    /// # futures_lite::future::block_on(async {
    /// let store = RedisLimits::connect("redis://127.0.0.1:6379").await?;
    /// assert!(store.stats().is_keeper_running());
    /// # Ok::<(), tollgate_redis::RedisLimitsError>(())
    /// # });
    /// ```
    pub fn is_keeper_running(&self) -> bool {
        self.keeper_running
    }

    /// Whether the store counts Redis as unreachable: a call failed after its whole
    /// [call timeout](crate::RedisLimitsOptions::call_timeout) and no probe has reached Redis
    /// since. Asks fail at once meanwhile (see [`RedisLimits`](crate::RedisLimits)).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use tollgate_redis::RedisLimits;
    ///
    /// # futures_lite::future::block_on(async {
    /// let store = RedisLimits::connect("redis://127.0.0.1:6379").await?;
    /// if store.stats().is_unreachable() {
    ///     eprintln!("redis at {} is out of reach; asks fail at once", store.address());
    /// }
    /// # Ok::<(), tollgate_redis::RedisLimitsError>(())
    /// # });
    /// ```
    pub fn is_unreachable(&self) -> bool {
        self.unreachable
    }
}
