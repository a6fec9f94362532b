//! `SharedKeyLimits`: a fleet's per-key cap and rate in the form a keyed map asks for them.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tollgate::{Answer, LaterReason, Rate, SharedLimits};

use crate::bulkhead::{Released, grant_once, lease_set, per_key_limit};
use crate::error::RedisLimitsError;
use crate::permit::{Fenced, SharedKeyedBulkheadPermit};
use crate::rate::{check_pause, pause, paused_key, rate_args, take_start};
use crate::store::{Inner, RedisLimits};

/// A cap and a rate per key for a whole fleet, for tollgate's keyed maps: pass it to
/// [`shared_limits`](tollgate::futures::MapAsync::shared_limits) after `per_key`.
///
/// Each ask of the map is one round trip to Redis, one script that decides the key's pause
/// (as in [`SharedKeyedRateLimiter::pause_key`](crate::SharedKeyedRateLimiter::pause_key)),
/// its cap (a lease, as in [`SharedKeyedBulkhead`](crate::SharedKeyedBulkhead)) and its rate
/// together, on Redis's clock: a start is taken only when all of them allow it, so a
/// refused ask consumes nothing (one exception: a grant whose answer arrives too late to be
/// renewed in time is let go, and the rate start it took is lost). A paused key is refused
/// whatever limits it has: limits with neither a cap nor a rate still ask, for the pause. A
/// key that is busy (no room now), early for its rate or paused is told to come back later
/// (the rate's and pause's exact wait; a busy key after the store's
/// [poll interval](crate::RedisLimitsOptions::poll_interval), or as soon as one of its
/// permits is released in this process) and sleeps in the map holding no slot. A permit
/// that is fenced cancels its item's attempt, whose output becomes the
/// [`is_fenced`](RedisLimitsError::is_fenced) error; when Redis is out of reach, the ask fails
/// (after the store's [call timeout](crate::RedisLimitsOptions::call_timeout), then at once
/// until a probe reaches Redis) and the key's next item ends with the
/// [`is_unavailable`](RedisLimitsError::is_unavailable) error (fail closed). Add a `RetryPolicy`
/// to the map to try such items again (see [`RedisLimits`](crate::RedisLimits)).
///
/// State is shared by name: a `SharedKeyLimits` named `"per-host"` shares its leases with
/// a `SharedKeyedBulkhead` named `"per-host"`, its rate with a `SharedKeyedRateLimiter`
/// named `"per-host"`, and its pauses with both, in the same store, so maps and hand-written code can share a host.
/// Keys are anything that is `AsRef<str>`.
///
/// # Examples
///
/// ```no_run
/// use tollgate::{Rate, map_async};
/// use tollgate_redis::{RedisLimits, RedisLimitsError, SharedKeyLimits};
///
/// # futures_lite::future::block_on(async {
/// let store = RedisLimits::connect("redis://127.0.0.1:6379").await?;
/// // 2 requests in flight and 10 per second per host, for every crawler of the fleet.
/// let per_host = SharedKeyLimits::new(&store, "per-host")
///     .per_key_limit(2)
///     .per_key_rate(Rate::per_second(10));
///
/// let urls = vec![("example.com", "/a"), ("example.org", "/b")];
/// let pages = map_async(urls, 64, |(host, path)| async move {
///     Ok::<_, RedisLimitsError>(format!("{host}{path}"))
/// })
/// .per_key(|(host, _)| host.to_string(), 2)
/// .shared_limits(per_host)
/// .await;
/// assert_eq!(pages.len(), 2);
/// # Ok::<(), RedisLimitsError>(())
/// # });
/// ```
#[derive(Clone)]
pub struct SharedKeyLimits {
    store: Arc<Inner>,
    name: Arc<str>,
    /// Checked at most `u32::MAX` (see [`per_key_limit`](Self::per_key_limit)).
    limit: Option<u32>,
    rate: Option<Rate>,
}

impl SharedKeyLimits {
    /// Limits named `name` in `store`, with neither a cap nor a rate yet: add them with
    /// [`per_key_limit`](Self::per_key_limit) and [`per_key_rate`](Self::per_key_rate).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use tollgate_redis::{RedisLimits, SharedKeyLimits};
    /// # futures_lite::future::block_on(async {
    /// # let store = RedisLimits::connect("redis://127.0.0.1:6379").await?;
    /// let per_host = SharedKeyLimits::new(&store, "per-host").per_key_limit(4);
    /// assert_eq!(per_host.limit(), Some(4));
    /// # Ok::<(), tollgate_redis::RedisLimitsError>(())
    /// # });
    /// ```
    pub fn new(store: &RedisLimits, name: impl Into<String>) -> Self {
        Self {
            store: Arc::clone(&store.inner),
            name: Arc::from(name.into()),
            limit: None,
            rate: None,
        }
    }

    /// At most `limit` items of a key in flight across the fleet (a lease each): the
    /// fleet's counterpart of a map's `.per_key(key_fn, limit)`.
    ///
    /// # Panics
    ///
    /// If `limit` is 0, or above `u32::MAX`: a key's leases are the members of one Redis
    /// sorted set, which holds at most 2^32 - 1.
    #[track_caller]
    pub fn per_key_limit(mut self, limit: usize) -> Self {
        self.limit = Some(per_key_limit(limit, "a per-key limit must be at least 1"));
        self
    }

    /// At most `rate` starts per key across the fleet (GCRA on Redis's clock): the fleet's
    /// counterpart of a map's `.per_key_rate(rate)`.
    pub fn per_key_rate(mut self, rate: Rate) -> Self {
        self.rate = Some(rate);
        self
    }

    /// The name the limits share their state under.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The cap per key, if any (set by [`per_key_limit`](Self::per_key_limit)).
    pub fn limit(&self) -> Option<usize> {
        self.limit.map(|limit| limit as usize)
    }

    /// The rate per key, if any (set by [`per_key_rate`](Self::per_key_rate)).
    pub fn rate(&self) -> Option<Rate> {
        self.rate
    }

    /// Pauses `key` for every process for `duration` from now on Redis's clock (a
    /// server's `Retry-After`): no ask of the key is granted until then, whatever these
    /// limits hold (a cap, a rate, both or neither), and the map's items of the key wait,
    /// holding no slot. A pause that already lasts longer is kept.
    ///
    /// The pause is shared by name with a [`SharedKeyedRateLimiter`](crate::SharedKeyedRateLimiter)
    /// and a [`SharedKeyedBulkhead`](crate::SharedKeyedBulkhead) of the same name. A
    /// `duration` longer than [`MAX_PAUSE`](crate::MAX_PAUSE) (100 years) is set as
    /// `MAX_PAUSE`: `Duration::MAX` reads as a very long pause, never as none.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use tollgate::Rate;
    /// # use tollgate_redis::{RedisLimits, SharedKeyLimits};
    /// # futures_lite::future::block_on(async {
    /// # let store = RedisLimits::connect("redis://127.0.0.1:6379").await?;
    /// let per_host = SharedKeyLimits::new(&store, "per-host").per_key_rate(Rate::per_second(10));
    /// per_host.pause_key("example.com", Duration::from_secs(30)).await?;
    /// # Ok::<(), tollgate_redis::RedisLimitsError>(())
    /// # });
    /// ```
    ///
    /// # Errors
    ///
    /// [`is_unavailable`](RedisLimitsError::is_unavailable) when Redis did not answer within the
    /// store's wait: the pause was then perhaps not set.
    pub async fn pause_key(&self, key: &str, duration: Duration) -> Result<(), RedisLimitsError> {
        pause(&self.store, &self.name, key, duration).await
    }

    /// One ask: a lease (and a rate start, decided together), a rate start alone, or with
    /// neither, a look at the pause. The pause is checked in every case, in the script that
    /// decides.
    async fn ask_once(
        &self,
        key: &str,
    ) -> Answer<Option<SharedKeyedBulkheadPermit>, RedisLimitsError> {
        let store = &self.store;
        let paused = paused_key(store, &self.name, key);
        let rate = self
            .rate
            .map(|rate| rate_args(store, &self.name, key, rate));
        let asked = match self.limit {
            Some(limit) => {
                let set = lease_set(store, &self.name, key);
                let local = store.local(&set);
                grant_once(store, set, local, limit, &paused, rate.as_ref())
                    .await
                    // `None`: granted too late to be renewed in time, and let go.
                    .map(|permit| permit.map(Some))
            }
            None => match &rate {
                Some(rate) => take_start(store, &paused, rate).await.map(|()| Some(None)),
                None => check_pause(store, &paused).await.map(|()| Some(None)),
            },
        };
        match asked {
            Ok(Some(permit)) => Answer::Granted(permit),
            // Granted, but the answer came after the lease's fence point, so the lease was
            // let go (and the rate start it took with it is lost: under-use, never over-use).
            // Redis is slow: give it a poll interval.
            Ok(None) => Answer::Later(store.poll, LaterReason::Slow),
            // A busy key may free up any moment (a release elsewhere): ask again after the
            // poll interval, or at once on a release in this process.
            Err(e) if e.is_busy() => Answer::Later(
                e.retry_after().unwrap_or(store.poll).min(store.poll),
                LaterReason::Busy,
            ),
            Err(e) => match (e.retry_after(), later_reason(&e)) {
                // Early for the rate, paused, warming up: the exact wait.
                (Some(after), Some(reason)) => Answer::Later(after, reason),
                _ => Answer::Failed(e),
            },
        }
    }
}

/// Why a refusal that is not a failure tells the key to come back later; `None` for a
/// failure (the store out of reach), which ends the item's attempt.
fn later_reason(error: &RedisLimitsError) -> Option<LaterReason> {
    if error.is_busy() {
        Some(LaterReason::Busy)
    } else if error.is_rate_limited() {
        Some(LaterReason::RateLimited)
    } else if error.is_paused() {
        Some(LaterReason::Paused)
    } else if error.is_warming_up() {
        Some(LaterReason::WarmingUp)
    } else {
        None
    }
}

impl fmt::Debug for SharedKeyLimits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedKeyLimits")
            .field("name", &self.name)
            .field("limit", &self.limit)
            .field("rate", &self.rate)
            .field("store", &self.store.link.address)
            .finish()
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<K: AsRef<str>> SharedLimits<K> for SharedKeyLimits {
    /// The lease, with a cap (`None` for a rate alone: nothing to give back).
    type Permit = Option<SharedKeyedBulkheadPermit>;
    type Error = RedisLimitsError;
    type Ask = BoxFuture<Answer<Option<SharedKeyedBulkheadPermit>, RedisLimitsError>>;
    type Wake = Released;
    type Revoked = Revoked;

    fn ask(&self, key: &K) -> Self::Ask {
        let limits = self.clone();
        let key = key.as_ref().to_owned();
        Box::pin(async move { limits.ask_once(&key).await })
    }

    fn wake(&self, key: &K) -> Option<Released> {
        self.limit?;
        let local = self
            .store
            .local(&lease_set(&self.store, &self.name, key.as_ref()));
        Some(Released::of(local))
    }

    fn revoked(&self, permit: &Option<SharedKeyedBulkheadPermit>) -> Option<Revoked> {
        let fenced = permit.as_ref()?.until_fenced();
        Some(Revoked { fenced })
    }
}

/// Completes with the [`is_fenced`](RedisLimitsError::is_fenced) error when a map's permit is
/// fenced (see [`SharedKeyLimits`]).
#[must_use = "futures do nothing unless you `.await` or poll them"]
#[derive(Debug)]
pub struct Revoked {
    fenced: Fenced,
}

impl Future for Revoked {
    type Output = RedisLimitsError;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<RedisLimitsError> {
        Pin::new(&mut self.fenced)
            .poll(cx)
            .map(|()| RedisLimitsError::fenced())
    }
}
