//! `SharedKeyedRateLimiter`: a rate per key for the whole fleet, GCRA on Redis's clock.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tollgate::Rate;

use crate::call::Call;
use crate::error::RedisLimitsError;
use crate::helpers::{micros, micros_ceil};
use crate::scripts::{
    FULL, GCRA, GRANTED, PAUSE, PAUSE_CHECK, PAUSED, WARMING_UP, wait_from_reply,
};
use crate::store::{Inner, RedisLimits, tag};

/// The longest pause [`pause_key`](SharedKeyedRateLimiter::pause_key) sets: 100 years of 365
/// days. A longer one (`Duration::MAX` for "until further notice") is set as this, so it
/// reads as a very long pause everywhere (a [`retry_after`](RedisLimitsError::retry_after) of up
/// to 100 years, waiters sleeping through it), never as none.
///
/// Why this bound: a pause is kept in Redis as the Redis time it ends, in microseconds, and
/// the scripts compute with Lua numbers, which hold whole numbers exactly only below 2^53
/// (about 285 years after 1970); now plus 100 years stays below that until the year 2155.
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use tollgate::Rate;
/// use tollgate_redis::{MAX_PAUSE, RedisLimits, SharedKeyedRateLimiter};
///
/// # futures_lite::future::block_on(async {
/// let store = RedisLimits::connect("redis://127.0.0.1:6379").await?;
/// let per_host = SharedKeyedRateLimiter::new(&store, "fetch", Rate::per_second(10));
/// per_host.until_key_ready("example.com").await?; // the store is warm
/// // The host asked never to be crawled again.
/// per_host.pause_key("example.com", Duration::MAX).await?;
/// let paused = per_host.check_key("example.com").await.unwrap_err();
/// assert!(paused.retry_after().unwrap() > MAX_PAUSE - Duration::from_secs(60));
/// # Ok::<(), tollgate_redis::RedisLimitsError>(())
/// # });
/// ```
pub const MAX_PAUSE: Duration = Duration::from_secs(100 * 365 * 24 * 60 * 60);

/// A rate per key across every process that uses the same Redis, namespace and name: the
/// shared counterpart of tollgate's [`KeyedRateLimiter`](tollgate::KeyedRateLimiter).
///
/// Each key's state is one number in Redis, its TAT (theoretical arrival time, GCRA), read
/// and moved by a Lua script on Redis's clock (`TIME`): the processes' own clocks never
/// enter the decision, so a machine whose clock is off changes nothing. A key can also be
/// paused for the whole fleet ([`pause_key`](Self::pause_key)), e.g. for a server's
/// `Retry-After`. Keys are `&str`; their state keys share a hash tag, so one key's TAT and
/// pause stay in one cluster slot.
///
/// # Examples
///
/// ```no_run
/// use tollgate::Rate;
/// use tollgate_redis::{RedisLimits, SharedKeyedRateLimiter};
///
/// # futures_lite::future::block_on(async {
/// let store = RedisLimits::connect("redis://127.0.0.1:6379").await?;
/// // 10 requests per second per host for the whole fleet.
/// let per_host = SharedKeyedRateLimiter::new(&store, "fetch", Rate::per_second(10));
/// per_host.until_key_ready("example.com").await?;
/// // ... fetch ...
/// # Ok::<(), tollgate_redis::RedisLimitsError>(())
/// # });
/// ```
pub struct SharedKeyedRateLimiter {
    store: Arc<Inner>,
    name: String,
    rate: Rate,
}

impl SharedKeyedRateLimiter {
    /// A rate limiter named `name` in `store`, allowing `rate` per key across the fleet.
    /// Limiters of the same store, namespace and name share their state; they should
    /// share the rate too (each start is decided with the rate of the process asking).
    pub fn new(store: &RedisLimits, name: impl Into<String>, rate: Rate) -> Self {
        Self {
            store: Arc::clone(&store.inner),
            name: name.into(),
            rate,
        }
    }

    /// The limiter's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The rate per key.
    pub fn rate(&self) -> Rate {
        self.rate
    }

    /// Takes a start for `key` if the fleet's rate allows one now, without waiting.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use tollgate::Rate;
    /// # use tollgate_redis::{RedisLimits, SharedKeyedRateLimiter};
    /// # futures_lite::future::block_on(async {
    /// # let store = RedisLimits::connect("redis://127.0.0.1:6379").await?;
    /// let per_host = SharedKeyedRateLimiter::new(&store, "fetch", Rate::per_second(1));
    /// per_host.check_key("example.com").await?;
    /// let early = per_host.check_key("example.com").await.unwrap_err();
    /// assert!(early.is_rate_limited() && early.retry_after().is_some());
    /// # Ok::<(), tollgate_redis::RedisLimitsError>(())
    /// # });
    /// ```
    ///
    /// # Errors
    ///
    /// [`is_rate_limited`](RedisLimitsError::is_rate_limited), [`is_paused`](RedisLimitsError::is_paused)
    /// or [`is_warming_up`](RedisLimitsError::is_warming_up) with the time until a start can be
    /// taken ([`retry_after`](RedisLimitsError::retry_after)); nothing is taken then.
    /// [`is_unavailable`](RedisLimitsError::is_unavailable) when Redis did not answer within the
    /// store's wait (fail closed).
    ///
    /// # Cancel safety
    ///
    /// A call dropped after Redis took the start loses that start (under-use, never
    /// over-use).
    pub async fn check_key(&self, key: &str) -> Result<(), RedisLimitsError> {
        take_start(
            &self.store,
            &paused_key(&self.store, &self.name, key),
            &rate_args(&self.store, &self.name, key, self.rate),
        )
        .await
    }

    /// Waits until the fleet's rate (and any pause) allows a start for `key`, then takes it.
    ///
    /// In each process one task per key asks Redis at a time, first come first served; it
    /// sleeps for the time Redis says, then asks again (another process may have taken
    /// the start in between).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use tollgate::Rate;
    /// # use tollgate_redis::{RedisLimits, SharedKeyedRateLimiter};
    /// # futures_lite::future::block_on(async {
    /// # let store = RedisLimits::connect("redis://127.0.0.1:6379").await?;
    /// let per_host = SharedKeyedRateLimiter::new(&store, "fetch", Rate::every(Duration::from_millis(50)));
    /// per_host.until_key_ready("example.com").await?;
    /// per_host.until_key_ready("example.com").await?; // about 50 ms later
    /// # Ok::<(), tollgate_redis::RedisLimitsError>(())
    /// # });
    /// ```
    ///
    /// # Errors
    ///
    /// [`is_unavailable`](RedisLimitsError::is_unavailable) when Redis did not answer within the
    /// store's wait.
    ///
    /// # Cancel safety
    ///
    /// Cancelling it gives up this task's place in the key's local queue; nothing is taken
    /// unless Redis had already taken the start (as [`check_key`](Self::check_key)).
    pub async fn until_key_ready(&self, key: &str) -> Result<(), RedisLimitsError> {
        let local = self
            .store
            .local(&state_key(&self.store, &self.name, key, "tat"));
        let _turn = local.turn.lock().await;
        loop {
            match self.check_key(key).await {
                Ok(()) => return Ok(()),
                Err(e) if e.is_unavailable() => return Err(e),
                Err(e) => match e.retry_after() {
                    Some(after) => tollgate::sleep(after.max(Duration::from_micros(100))).await,
                    None => return Err(e),
                },
            }
        }
    }

    /// Pauses `key` for every process for `duration` from now on Redis's clock, e.g. from a
    /// server's `Retry-After`. A pause that already lasts longer is kept.
    ///
    /// The pause is shared by name, whatever limits ask: no start of the key is taken and
    /// no lease of it granted until it ends, by this limiter, a
    /// [`SharedKeyedBulkhead`](crate::SharedKeyedBulkhead) or a
    /// [`SharedKeyLimits`](crate::SharedKeyLimits) of the same name (cap, rate, both or
    /// neither). Waiters ([`until_key_ready`](Self::until_key_ready),
    /// [`acquire`](crate::SharedKeyedBulkhead::acquire), a map) sleep until it ends,
    /// holding nothing.
    ///
    /// A `duration` longer than [`MAX_PAUSE`] (100 years) is set as `MAX_PAUSE`:
    /// `Duration::MAX` reads as a very long pause, never as none.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use tollgate::Rate;
    /// # use tollgate_redis::{RedisLimits, SharedKeyedRateLimiter};
    /// # futures_lite::future::block_on(async {
    /// # let store = RedisLimits::connect("redis://127.0.0.1:6379").await?;
    /// let per_host = SharedKeyedRateLimiter::new(&store, "fetch", Rate::per_second(10));
    /// // The server answered 429 with `Retry-After: 30`.
    /// per_host.pause_key("example.com", Duration::from_secs(30)).await?;
    /// assert!(per_host.check_key("example.com").await.unwrap_err().is_paused());
    /// # Ok::<(), tollgate_redis::RedisLimitsError>(())
    /// # });
    /// ```
    ///
    /// # Errors
    ///
    /// [`is_unavailable`](RedisLimitsError::is_unavailable) when Redis did not answer within the
    /// store's wait: the pause was then perhaps not set.
    ///
    /// # Cancel safety
    ///
    /// A call dropped before its reply may or may not have set the pause; calling again is
    /// harmless (a pause never shortens another).
    pub async fn pause_key(&self, key: &str, duration: Duration) -> Result<(), RedisLimitsError> {
        pause(&self.store, &self.name, key, duration).await
    }
}

impl fmt::Debug for SharedKeyedRateLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedKeyedRateLimiter")
            .field("name", &self.name)
            .field("rate", &self.rate)
            .field("store", &self.store.link.address)
            .finish()
    }
}

/// The name of one of a key's rate states (`tat` or `paused`) in Redis.
pub(crate) fn state_key(store: &Inner, name: &str, key: &str, what: &str) -> String {
    format!("{}:rate:{}:{what}", store.namespace, tag(name, key))
}

/// The name of `key`'s "paused until" in Redis: one per name and key, whatever limits use
/// it (a rate limiter, a bulkhead, a map's limits).
pub(crate) fn paused_key(store: &Inner, name: &str, key: &str) -> String {
    state_key(store, name, key, "paused")
}

/// The rate a start also takes (see `rate.lua`): the key's TAT, the interval and the burst
/// tolerance in microseconds.
pub(crate) struct RateArgs {
    pub(crate) tat: String,
    pub(crate) interval: u64,
    pub(crate) tolerance: u64,
}

/// What the scripts need to decide a start of `rate` for `key`.
pub(crate) fn rate_args(store: &Inner, name: &str, key: &str, rate: Rate) -> RateArgs {
    let interval = micros_ceil(rate.interval()).max(1);
    RateArgs {
        tat: state_key(store, name, key, "tat"),
        interval,
        tolerance: interval.saturating_mul(u64::from(rate.get_burst() - 1)),
    }
}

/// Takes one start of a key's rate if its pause and rate allow it now (`gcra.lua`).
pub(crate) async fn take_start(
    store: &Inner,
    paused: &str,
    rate: &RateArgs,
) -> Result<(), RedisLimitsError> {
    let epoch = store.epoch_key();
    let mut invocation = GCRA.prepare_invoke();
    invocation
        .key(&rate.tat)
        .key(paused)
        .key(&epoch)
        .arg(rate.interval)
        .arg(rate.tolerance)
        .arg(store.ttl_micros())
        .arg(store.link.run_id());
    let (code, after): (i64, i64) = store.link.query(&Call::Script(&invocation)).await?;
    let after = wait_from_reply(after);
    match code {
        GRANTED => Ok(()),
        FULL => Err(RedisLimitsError::rate_limited(after)),
        PAUSED => Err(RedisLimitsError::paused(after)),
        WARMING_UP => Err(RedisLimitsError::warming_up(after)),
        other => Err(RedisLimitsError::unavailable(
            &store.link.address,
            format_args!("unexpected reply {other} from the rate script"),
        )),
    }
}

/// Whether a key is paused now (`pause_check.lua`), for limits with neither a cap nor a
/// rate: `Ok` when it is not.
pub(crate) async fn check_pause(store: &Inner, paused: &str) -> Result<(), RedisLimitsError> {
    let mut invocation = PAUSE_CHECK.prepare_invoke();
    invocation.key(paused);
    let (code, after): (i64, i64) = store.link.query(&Call::Script(&invocation)).await?;
    match code {
        GRANTED => Ok(()),
        PAUSED => Err(RedisLimitsError::paused(wait_from_reply(after))),
        other => Err(RedisLimitsError::unavailable(
            &store.link.address,
            format_args!("unexpected reply {other} from the pause check script"),
        )),
    }
}

/// Pauses `key` for the fleet for `duration`, at most [`MAX_PAUSE`] (`pause.lua`).
pub(crate) async fn pause(
    store: &Inner,
    name: &str,
    key: &str,
    duration: Duration,
) -> Result<(), RedisLimitsError> {
    let paused = paused_key(store, name, key);
    let mut invocation = PAUSE.prepare_invoke();
    invocation.key(&paused).arg(micros(duration.min(MAX_PAUSE)));
    store
        .link
        .query::<i64>(&Call::Script(&invocation))
        .await
        .map(drop)
}
