//! `SharedKeyedBulkhead`: a cap per key for the whole fleet, as leases in Redis.

use std::fmt;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use event_listener::EventListener;
use futures_lite::future;

use crate::call::Call;
use crate::error::RedisLimitsError;
use crate::lease::{KeyLocal, Lease};
use crate::permit::{Fence, SharedKeyedBulkheadPermit};
use crate::rate::{RateArgs, paused_key};
use crate::scripts::{
    CANCELLED, FULL, GRANT, GRANTED, IN_USE, PAUSED, RATE_LIMITED, WARMING_UP, wait_from_reply,
};
use crate::store::{Inner, RedisLimits, tag};

/// The first pause before asking a busy key again; it doubles up to the store's poll
/// interval.
const FIRST_PAUSE: Duration = Duration::from_millis(1);

/// The panic message of a bulkhead's limit of 0.
const BULKHEAD_ZERO: &str = "a bulkhead needs a limit of at least 1";

/// A per-key limit as the grant script takes it. Limits are `usize`, as in tollgate, but a
/// key's leases are the members of one Redis sorted set, and Redis holds at most
/// 2^32 - 1 members in one: a limit above `u32::MAX` could never be reached, so it is
/// refused. (The script compares it with the set's size in Lua numbers, exact up to 2^53.)
///
/// # Panics
///
/// If `limit` is 0 (`zero` is the message) or above `u32::MAX`.
#[track_caller]
pub(crate) fn per_key_limit(limit: usize, zero: &str) -> u32 {
    assert!(limit > 0, "tollgate-redis: {zero}");
    match u32::try_from(limit) {
        Ok(limit) => limit,
        Err(_) => panic!(
            "tollgate-redis: a per-key limit of {limit} is above u32::MAX, the most leases \
             a Redis sorted set can hold"
        ),
    }
}

/// At most `limit` permits per key at once across every process that uses the same
/// Redis, namespace and name: the shared counterpart of tollgate's
/// [`KeyedBulkhead`](tollgate::KeyedBulkhead).
///
/// Each permit is a lease in the key's lease set in Redis (a sorted set: the lease id, scored
/// by its expiry on Redis's clock). One Lua script drops the key's lapsed leases, counts the
/// rest against the limit and adds the new lease; dropping the permit deletes it. While a
/// permit lives, the store's keeper renews its lease (one call per third of the TTL for
/// all the process's leases); if it cannot, the permit is fenced before the lease could
/// lapse (see [`run`](Self::run)). A process that dies leaves its leases to lapse after
/// one TTL.
///
/// Keys are `&str` (a host name, a tenant id): they become part of Redis key names, inside
/// a hash tag, so one key's state stays in one cluster slot.
///
/// # Examples
///
/// ```no_run
/// use tollgate_redis::{RedisLimits, SharedKeyedBulkhead};
///
/// # futures_lite::future::block_on(async {
/// let store = RedisLimits::connect("redis://127.0.0.1:6379").await?;
/// // At most 2 requests in flight per host, whatever the number of crawler processes.
/// let per_host = SharedKeyedBulkhead::new(&store, "fetch", 2);
/// let body = per_host.run("example.com", async { "fetched" }).await?;
/// assert_eq!(body, "fetched");
/// # Ok::<(), tollgate_redis::RedisLimitsError>(())
/// # });
/// ```
pub struct SharedKeyedBulkhead {
    store: Arc<Inner>,
    name: String,
    limit: AtomicU32,
}

impl SharedKeyedBulkhead {
    /// A bulkhead named `name` in `store`, allowing `limit` permits per key across the
    /// fleet. Bulkheads of the same store, namespace and name share their leases.
    ///
    /// # Panics
    ///
    /// If `limit` is 0, or above `u32::MAX`: a key's leases are the members of one Redis
    /// sorted set, which holds at most 2^32 - 1.
    #[track_caller]
    pub fn new(store: &RedisLimits, name: impl Into<String>, limit: usize) -> Self {
        let limit = per_key_limit(limit, BULKHEAD_ZERO);
        Self {
            store: Arc::clone(&store.inner),
            name: name.into(),
            limit: AtomicU32::new(limit),
        }
    }

    /// The bulkhead's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The limit per key this process grants up to.
    pub fn limit(&self) -> usize {
        self.limit.load(Ordering::Relaxed) as usize
    }

    /// Changes the limit per key for the grants this process asks for from now on. Leases
    /// already granted stay; a lower limit takes effect as they are released. Each grant
    /// counts against the limit of the process that asks, so every process should use
    /// the same limit.
    ///
    /// # Panics
    ///
    /// If `limit` is 0 or above `u32::MAX`, as [`new`](Self::new).
    #[track_caller]
    pub fn set_limit(&self, limit: usize) {
        let limit = per_key_limit(limit, BULKHEAD_ZERO);
        self.limit.store(limit, Ordering::Relaxed);
    }

    fn lease_set(&self, key: &str) -> String {
        lease_set(&self.store, &self.name, key)
    }

    /// Asks Redis once for a lease of `key`.
    ///
    /// Unlike tollgate's local `try_acquire`, this is one round trip to Redis, and it does
    /// not queue behind tasks of this process waiting in [`acquire`](Self::acquire). A
    /// scheduler can call it without holding anything, and use the error's
    /// [`retry_after`](RedisLimitsError::retry_after) to know when to ask again.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use tollgate_redis::{RedisLimits, SharedKeyedBulkhead};
    /// # futures_lite::future::block_on(async {
    /// # let store = RedisLimits::connect("redis://127.0.0.1:6379").await?;
    /// let per_host = SharedKeyedBulkhead::new(&store, "fetch", 1);
    /// let held = per_host.try_acquire("example.com").await?;
    /// let busy = per_host.try_acquire("example.com").await.unwrap_err();
    /// assert!(busy.is_busy());
    /// # Ok::<(), tollgate_redis::RedisLimitsError>(())
    /// # });
    /// ```
    ///
    /// # Errors
    ///
    /// [`is_busy`](RedisLimitsError::is_busy) when the key holds its limit across the fleet;
    /// [`is_paused`](RedisLimitsError::is_paused) while the key is paused (see
    /// [`acquire`](Self::acquire)); [`is_warming_up`](RedisLimitsError::is_warming_up) during
    /// the first TTL after Redis lost its data; [`is_unavailable`](RedisLimitsError::is_unavailable)
    /// when Redis did not answer within the store's wait. Each but the last with the time to
    /// wait as its [`retry_after`](RedisLimitsError::retry_after).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a lease granted by a call that is dropped before its reply is read is
    /// released by the keeper.
    pub async fn try_acquire(
        &self,
        key: &str,
    ) -> Result<SharedKeyedBulkheadPermit, RedisLimitsError> {
        let set = self.lease_set(key);
        let local = self.store.local(&set);
        let paused = paused_key(&self.store, &self.name, key);
        self.grant(set, local, &paused).await
    }

    async fn grant(
        &self,
        set: String,
        local: Arc<KeyLocal>,
        paused: &str,
    ) -> Result<SharedKeyedBulkheadPermit, RedisLimitsError> {
        loop {
            match grant_once(
                &self.store,
                set.clone(),
                Arc::clone(&local),
                self.limit.load(Ordering::Relaxed),
                paused,
                None,
            )
            .await?
            {
                Some(permit) => return Ok(permit),
                // Granted, but the reply came after the lease's fence point: the permit
                // would be born fenced. Let it go and ask again.
                None => continue,
            }
        }
    }

    /// Waits until `key` has room across the fleet, then takes a permit.
    ///
    /// In each process, one task per key asks Redis at a time, the others queue behind it
    /// (first come, first served within the process; across processes only roughly, as
    /// each polls). It asks again at once when a permit of the key is
    /// released in this process, and otherwise after a pause that doubles from 1 ms up to
    /// the store's [poll interval](crate::RedisLimitsOptions::poll_interval). During a
    /// warm-up it waits for the warm-up to end, and while the key is paused (a
    /// [`pause_key`](crate::SharedKeyedRateLimiter::pause_key) of a rate limiter or
    /// [`SharedKeyLimits`](crate::SharedKeyLimits) of the same name) it sleeps until the
    /// pause ends, holding nothing and asking Redis no more meanwhile (a pause set longer
    /// while it sleeps is seen when it asks again).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use tollgate_redis::{RedisLimits, SharedKeyedBulkhead};
    /// # futures_lite::future::block_on(async {
    /// # let store = RedisLimits::connect("redis://127.0.0.1:6379").await?;
    /// let per_host = SharedKeyedBulkhead::new(&store, "fetch", 2);
    /// let permit = per_host.acquire("example.com").await?;
    /// // ... fetch, watching `permit.is_fenced()` ...
    /// drop(permit);
    /// # Ok::<(), tollgate_redis::RedisLimitsError>(())
    /// # });
    /// ```
    ///
    /// # Errors
    ///
    /// [`is_unavailable`](RedisLimitsError::is_unavailable) when Redis did not answer within the
    /// store's wait: nothing is granted while Redis is unreachable (fail closed), and the
    /// next call tries again, so the process recovers on its own when Redis is back.
    ///
    /// # Cancel safety
    ///
    /// Cancelling it gives up this task's place in the key's local queue; a lease granted
    /// in the meantime is released.
    pub async fn acquire(&self, key: &str) -> Result<SharedKeyedBulkheadPermit, RedisLimitsError> {
        let set = self.lease_set(key);
        let local = self.store.local(&set);
        let paused = paused_key(&self.store, &self.name, key);
        let _turn = local.turn.lock().await;
        let mut pause = FIRST_PAUSE;
        loop {
            // Listen before asking, so a release sent while the ask is in flight is seen.
            let released = local.released.listen();
            match self.grant(set.clone(), Arc::clone(&local), &paused).await {
                Ok(permit) => return Ok(permit),
                Err(e) if e.is_busy() => {
                    let wait = pause.min(e.retry_after().unwrap_or(pause)).max(FIRST_PAUSE);
                    let woken = future::or(
                        async {
                            released.await;
                            true
                        },
                        async {
                            tollgate::sleep(wait).await;
                            false
                        },
                    )
                    .await;
                    pause = if woken {
                        FIRST_PAUSE
                    } else {
                        (pause * 2).min(self.store.poll)
                    };
                }
                // The exact wait: a release does not end a warm-up or a pause.
                Err(e) if e.is_warming_up() || e.is_paused() => {
                    tollgate::sleep(e.retry_after().unwrap_or(self.store.ttl)).await;
                    pause = FIRST_PAUSE;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Runs `work` holding a permit of `key`, and cancels it if the permit is fenced.
    ///
    /// The fence is checked before every poll of `work`, so work never takes a step once
    /// its lease may have lapsed (a process resumed from a long pause included). To keep
    /// the work running and let it decide, use [`run_with`](Self::run_with).
    ///
    /// What no check inside the process can reach: a poll already past its look at the
    /// fence when the process is stopped finishes on resuming (a write it was about to make
    /// goes out; the lease is still live for it unless the stop outlasted the fencing
    /// margin, a fifth of the TTL), and sockets the work opened stay open while the process
    /// is stopped (a server that counts connections counts them, though they carry nothing:
    /// on resuming, the work is cancelled at its next poll).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use tollgate_redis::{RedisLimits, SharedKeyedBulkhead};
    /// # futures_lite::future::block_on(async {
    /// # let store = RedisLimits::connect("redis://127.0.0.1:6379").await?;
    /// let per_host = SharedKeyedBulkhead::new(&store, "fetch", 2);
    /// match per_host.run("example.com", async { 200 }).await {
    ///     Ok(status) => assert_eq!(status, 200),
    ///     Err(e) if e.is_fenced() => { /* cancelled: retry it later */ }
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok::<(), tollgate_redis::RedisLimitsError>(())
    /// # });
    /// ```
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire), and [`is_fenced`](RedisLimitsError::is_fenced) when the
    /// work was cancelled because its permit was fenced.
    ///
    /// # Cancel safety
    ///
    /// Dropping it drops the work and releases the permit.
    pub async fn run<F: IntoFuture>(
        &self,
        key: &str,
        work: F,
    ) -> Result<F::Output, RedisLimitsError> {
        let permit = self.acquire(key).await?;
        let fenced = permit.until_fenced();
        let work = work.into_future();
        // `or` polls its first future first: the fence is looked at before each step.
        future::or(
            async {
                fenced.await;
                Err(RedisLimitsError::fenced())
            },
            async { Ok(work.await) },
        )
        .await
    }

    /// Runs the work that `work` makes from the permit's [`Fence`], holding a permit of
    /// `key`; the work keeps running if the permit is fenced, and decides itself (finish a
    /// write, stop at a safe point) by watching the fence.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use tollgate_redis::{RedisLimits, SharedKeyedBulkhead};
    /// # futures_lite::future::block_on(async {
    /// # let store = RedisLimits::connect("redis://127.0.0.1:6379").await?;
    /// let per_host = SharedKeyedBulkhead::new(&store, "fetch", 2);
    /// let pages = per_host
    ///     .run_with("example.com", |fence| async move {
    ///         let mut pages = 0;
    ///         while pages < 10 && !fence.is_fenced() {
    ///             pages += 1; // fetch one page
    ///         }
    ///         pages
    ///     })
    ///     .await?;
    /// # Ok::<(), tollgate_redis::RedisLimitsError>(())
    /// # });
    /// ```
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    ///
    /// Dropping it drops the work and releases the permit.
    pub async fn run_with<F, W>(&self, key: &str, work: F) -> Result<W::Output, RedisLimitsError>
    where
        F: FnOnce(Fence) -> W,
        W: IntoFuture,
    {
        let permit = self.acquire(key).await?;
        let output = work(permit.fence()).await;
        drop(permit);
        Ok(output)
    }

    /// Completes the next time this process sends the release of a permit of `key` to
    /// Redis: the moment to ask again for a key that was busy.
    ///
    /// The listener is registered when this is called, so call it before
    /// [`try_acquire`](Self::try_acquire) and a release that lands while the try is in
    /// flight is not missed. Releases by other processes are not seen: ask again after the
    /// error's [`retry_after`](RedisLimitsError::retry_after) or a poll interval at the latest.
    /// This is what lets a scheduler wait for a remote permit without holding anything.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use tollgate_redis::{RedisLimits, SharedKeyedBulkhead};
    /// # futures_lite::future::block_on(async {
    /// # let store = RedisLimits::connect("redis://127.0.0.1:6379").await?;
    /// let per_host = SharedKeyedBulkhead::new(&store, "fetch", 1);
    /// let held = per_host.acquire("example.com").await?;
    /// let released = per_host.released("example.com");
    /// assert!(per_host.try_acquire("example.com").await.unwrap_err().is_busy());
    /// drop(held);
    /// released.await;
    /// let permit = per_host.try_acquire("example.com").await?;
    /// # Ok::<(), tollgate_redis::RedisLimitsError>(())
    /// # });
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only watches.
    pub fn released(&self, key: &str) -> Released {
        Released::of(self.store.local(&self.lease_set(key)))
    }

    /// How many live leases `key` has across the fleet now (on Redis's clock).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use tollgate_redis::{RedisLimits, SharedKeyedBulkhead};
    /// # futures_lite::future::block_on(async {
    /// # let store = RedisLimits::connect("redis://127.0.0.1:6379").await?;
    /// let per_host = SharedKeyedBulkhead::new(&store, "fetch", 2);
    /// let permit = per_host.acquire("example.com").await?;
    /// assert!(per_host.in_use("example.com").await? >= 1);
    /// # Ok::<(), tollgate_redis::RedisLimitsError>(())
    /// # });
    /// ```
    ///
    /// # Errors
    ///
    /// [`is_unavailable`](RedisLimitsError::is_unavailable) when Redis did not answer.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn in_use(&self, key: &str) -> Result<usize, RedisLimitsError> {
        let set = self.lease_set(key);
        let mut invocation = IN_USE.prepare_invoke();
        invocation.key(&set);
        let count: u64 = self.store.link.query(&Call::Script(&invocation)).await?;
        Ok(usize::try_from(count).unwrap_or(usize::MAX))
    }
}

impl fmt::Debug for SharedKeyedBulkhead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedKeyedBulkhead")
            .field("name", &self.name)
            .field("limit", &self.limit())
            .field("store", &self.store.link.address)
            .finish()
    }
}

/// The future of [`SharedKeyedBulkhead::released`].
#[must_use = "futures do nothing unless you `.await` or poll them"]
pub struct Released {
    // Keeps the key's local state (and so the event listened to) alive.
    _local: Arc<KeyLocal>,
    listener: EventListener,
}

impl Released {
    /// Listens for the next release of the key whose local state is `local`.
    pub(crate) fn of(local: Arc<KeyLocal>) -> Self {
        let listener = local.released.listen();
        Self {
            _local: local,
            listener,
        }
    }
}

impl Future for Released {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        Pin::new(&mut self.listener).poll(cx)
    }
}

impl fmt::Debug for Released {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Released").finish_non_exhaustive()
    }
}

/// Deletes a lease whose grant may or may not have happened, unless disarmed.
struct Pending<'a> {
    store: &'a Inner,
    lease: Option<Arc<Lease>>,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if let Some(lease) = self.lease.take() {
            self.store.keeper.cancel(lease);
        }
    }
}

/// Asks Redis once for a lease in `set` under `limit`, unless the key is paused (its
/// "paused until" is `paused`), and with a start of `rate` when given, all decided together.
/// `Ok(None)`: granted, but the reply came after the lease's fence point (the permit would
/// be born fenced), so it was let go: ask again.
pub(crate) async fn grant_once(
    store: &Arc<Inner>,
    set: String,
    local: Arc<KeyLocal>,
    limit: u32,
    paused: &str,
    rate: Option<&RateArgs>,
) -> Result<Option<SharedKeyedBulkheadPermit>, RedisLimitsError> {
    if !store.keeper.stats.is_running() {
        return Err(RedisLimitsError::unavailable(
            &store.link.address,
            "the store's keeper thread has stopped (a panic): nothing would renew the lease",
        ));
    }
    store.link.fail_fast()?;
    let id = store.lease_id();
    // Beside the lease set, same hash tag, outside the `lease:` names (a scan for lease
    // sets does not meet it).
    let tombstone = format!(
        "{}:cancelled:{}:{id}",
        store.namespace,
        &set[store.namespace.len() + ":lease:".len()..]
    );
    let lease = Arc::new(Lease::new(id, set, tombstone, local));
    // Until Redis says no, the lease may exist there: if this future is dropped or the
    // reply is lost, the guard has the keeper delete it.
    let mut pending = Pending {
        store,
        lease: Some(Arc::clone(&lease)),
    };
    let epoch = store.epoch_key();
    let mut invocation = GRANT.prepare_invoke();
    invocation
        .key(&lease.set)
        .key(&epoch)
        .key(&lease.tombstone)
        .key(paused)
        .arg(limit)
        .arg(store.ttl_micros())
        .arg(&lease.id)
        .arg(store.link.run_id());
    if let Some(rate) = rate {
        invocation
            .key(&rate.tat)
            .arg(rate.interval)
            .arg(rate.tolerance);
    }
    let sent = Instant::now();
    let ((code, micros), sends): ((i64, i64), u32) =
        store.link.query_counted(&Call::Script(&invocation)).await?;
    // One send answered "no": the lease was never added. After a resend (the first
    // reply was lost) an earlier send may have run; the grant script answers "granted"
    // for an id it already holds, but keep the guard armed anyway, so any other answer
    // still has the keeper delete the id.
    if code == GRANTED || sends == 1 {
        pending.lease = None;
    }
    let after = wait_from_reply(micros);
    match code {
        GRANTED => {
            lease.extend(sent, store.keeper.life);
            if Instant::now() >= lease.fence_point() {
                store.keeper.release(lease);
                return Ok(None);
            }
            store.keeper.hold(Arc::clone(&lease));
            Ok(Some(SharedKeyedBulkheadPermit {
                lease,
                store: Arc::clone(store),
            }))
        }
        FULL => Err(RedisLimitsError::busy(after)),
        RATE_LIMITED => Err(RedisLimitsError::rate_limited(after)),
        PAUSED => Err(RedisLimitsError::paused(after)),
        WARMING_UP => Err(RedisLimitsError::warming_up(after)),
        // Only a grant whose caller gave up meets its tombstone; a caller still here
        // cannot (its id is new), so this is unreachable in practice.
        CANCELLED => Err(RedisLimitsError::busy(after)),
        other => Err(RedisLimitsError::unavailable(
            &store.link.address,
            format_args!("unexpected reply {other} from the grant script"),
        )),
    }
}

/// The name of `key`'s lease set in Redis.
pub(crate) fn lease_set(store: &Inner, name: &str, key: &str) -> String {
    format!("{}:lease:{}", store.namespace, tag(name, key))
}
