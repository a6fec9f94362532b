//! `RedisLimitsError`: every way a shared limit can say no.

use std::fmt;
use std::time::Duration;

/// Why a shared limit did not grant: Redis was unreachable, the permit was fenced, or the
/// key has no room or no start yet.
///
/// The kinds are told apart with the `is_*` accessors; [`retry_after`](Self::retry_after)
/// says when asking again can succeed.
///
/// # Examples
///
/// ```no_run
/// use tollgate_redis::{RedisLimits, SharedKeyedBulkhead};
///
/// # futures_lite::future::block_on(async {
/// let store = RedisLimits::connect("redis://127.0.0.1:6379").await?;
/// let per_host = SharedKeyedBulkhead::new(&store, "fetch", 2);
/// match per_host.try_acquire("example.com").await {
///     Ok(permit) => drop(permit),
///     Err(e) if e.is_busy() => println!("busy; ask again in {:?}", e.retry_after()),
///     Err(e) if e.is_unavailable() => eprintln!("{e}"), // names the Redis address
///     Err(e) => return Err(e),
/// }
/// # Ok::<(), tollgate_redis::RedisLimitsError>(())
/// # });
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct RedisLimitsError {
    kind: Kind,
}

#[derive(Clone, PartialEq, Eq)]
enum Kind {
    Unavailable {
        address: String,
        reason: String,
        /// The time to the store's next attempt to reach Redis, when it counts Redis as
        /// unreachable (a call failed after its whole wait).
        retry_after: Option<Duration>,
    },
    Fenced,
    Busy {
        retry_after: Duration,
    },
    RateLimited {
        retry_after: Duration,
    },
    Paused {
        retry_after: Duration,
    },
    WarmingUp {
        retry_after: Duration,
    },
}

impl RedisLimitsError {
    pub(crate) fn unavailable(address: &str, reason: impl fmt::Display) -> Self {
        Self {
            kind: Kind::Unavailable {
                address: address.to_owned(),
                reason: reason.to_string(),
                retry_after: None,
            },
        }
    }

    /// Redis counts as unreachable: asks fail at once until a probe reaches it, the next
    /// one in `retry_after`.
    pub(crate) fn unreachable(
        address: &str,
        reason: impl fmt::Display,
        retry_after: Duration,
    ) -> Self {
        Self {
            kind: Kind::Unavailable {
                address: address.to_owned(),
                reason: reason.to_string(),
                retry_after: Some(retry_after),
            },
        }
    }

    /// The same error without a time to the next probe (a store that is gone will make
    /// none).
    pub(crate) fn without_retry_after(mut self) -> Self {
        if let Kind::Unavailable { retry_after, .. } = &mut self.kind {
            *retry_after = None;
        }
        self
    }

    pub(crate) fn fenced() -> Self {
        Self { kind: Kind::Fenced }
    }

    pub(crate) fn busy(retry_after: Duration) -> Self {
        Self {
            kind: Kind::Busy { retry_after },
        }
    }

    pub(crate) fn rate_limited(retry_after: Duration) -> Self {
        Self {
            kind: Kind::RateLimited { retry_after },
        }
    }

    pub(crate) fn paused(retry_after: Duration) -> Self {
        Self {
            kind: Kind::Paused { retry_after },
        }
    }

    pub(crate) fn warming_up(retry_after: Duration) -> Self {
        Self {
            kind: Kind::WarmingUp { retry_after },
        }
    }

    /// Redis did not answer within the store's bounded wait (or refused the call): nothing
    /// was granted. [`address`](Self::address) names the Redis it tried.
    ///
    /// Once one call has failed after its whole
    /// [call timeout](crate::RedisLimitsOptions::call_timeout), the store counts Redis as
    /// unreachable: every ask fails at once with this error, its
    /// [`retry_after`](Self::retry_after) the time to the store's next attempt to reach
    /// Redis (a probe), until a probe finds it back. A retry policy that honours
    /// `retry_after` then waits without knocking on a dead Redis (see
    /// [`RedisLimits`](crate::RedisLimits)).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use tollgate_redis::RedisLimits;
    ///
    /// # futures_lite::future::block_on(async {
    /// // Nothing listens on port 1: the store gives up after its bounded wait.
    /// let error = RedisLimits::options("redis://127.0.0.1:1")
    ///     .call_timeout(Duration::from_millis(200))
    ///     .connect()
    ///     .await
    ///     .unwrap_err();
    /// assert!(error.is_unavailable());
    /// assert_eq!(error.retry_after(), None);
    /// # Ok::<(), tollgate_redis::RedisLimitsError>(())
    /// # });
    /// ```
    pub fn is_unavailable(&self) -> bool {
        matches!(self.kind, Kind::Unavailable { .. })
    }

    /// The address of the Redis that was unreachable, for an [`is_unavailable`] error.
    ///
    /// [`is_unavailable`]: Self::is_unavailable
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use tollgate_redis::{RedisLimits, SharedKeyedBulkhead};
    ///
    /// # futures_lite::future::block_on(async {
    /// let store = RedisLimits::connect("redis://127.0.0.1:6379").await?;
    /// let per_host = SharedKeyedBulkhead::new(&store, "fetch", 2);
    /// match per_host.acquire("example.com").await {
    ///     Ok(permit) => drop(permit),
    ///     Err(e) if e.is_unavailable() => {
    ///         assert_eq!(e.address(), Some("127.0.0.1:6379"));
    ///     }
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok::<(), tollgate_redis::RedisLimitsError>(())
    /// # });
    /// ```
    pub fn address(&self) -> Option<&str> {
        match &self.kind {
            Kind::Unavailable { address, .. } => Some(address),
            _ => None,
        }
    }

    /// The work's permit was fenced: its process could not renew the lease before it would
    /// lapse, so the work was cancelled (see [`SharedKeyedBulkhead::run`]).
    ///
    /// [`SharedKeyedBulkhead::run`]: crate::SharedKeyedBulkhead::run
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use tollgate_redis::{RedisLimits, SharedKeyedBulkhead};
    ///
    /// # async fn fetch(url: &str) -> String { String::new() }
    /// # futures_lite::future::block_on(async {
    /// let store = RedisLimits::connect("redis://127.0.0.1:6379").await?;
    /// let per_host = SharedKeyedBulkhead::new(&store, "fetch", 2);
    /// let page = loop {
    ///     match per_host.run("example.com", fetch("https://example.com/")).await {
    ///         Ok(page) => break page,
    ///         // Cancelled before its lease could lapse: another process may hold the
    ///         // permit now. Fetch again under a new one.
    ///         Err(e) if e.is_fenced() => continue,
    ///         Err(e) => return Err(e),
    ///     }
    /// };
    /// # drop(page);
    /// # Ok::<(), tollgate_redis::RedisLimitsError>(())
    /// # });
    /// ```
    pub fn is_fenced(&self) -> bool {
        matches!(self.kind, Kind::Fenced)
    }

    /// The key already holds its limit of leases across the fleet (from
    /// [`try_acquire`](crate::SharedKeyedBulkhead::try_acquire)).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use tollgate_redis::{RedisLimits, SharedKeyedBulkhead};
    ///
    /// # futures_lite::future::block_on(async {
    /// let store = RedisLimits::connect("redis://127.0.0.1:6379").await?;
    /// let per_host = SharedKeyedBulkhead::new(&store, "fetch", 1);
    /// let held = per_host.acquire("example.com").await?;
    /// let busy = per_host.try_acquire("example.com").await.unwrap_err();
    /// assert!(busy.is_busy());
    /// println!("look again in {:?}", busy.retry_after().unwrap());
    /// # drop(held);
    /// # Ok::<(), tollgate_redis::RedisLimitsError>(())
    /// # });
    /// ```
    pub fn is_busy(&self) -> bool {
        matches!(self.kind, Kind::Busy { .. })
    }

    /// The key's rate allows no start yet (from
    /// [`check_key`](crate::SharedKeyedRateLimiter::check_key)).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use tollgate::Rate;
    /// use tollgate_redis::{RedisLimits, SharedKeyedRateLimiter};
    ///
    /// # futures_lite::future::block_on(async {
    /// let store = RedisLimits::connect("redis://127.0.0.1:6379").await?;
    /// let per_host = SharedKeyedRateLimiter::new(&store, "fetch", Rate::per_second(1));
    /// per_host.until_key_ready("example.com").await?;
    /// let early = per_host.check_key("example.com").await.unwrap_err();
    /// assert!(early.is_rate_limited());
    /// assert!(early.retry_after().unwrap() <= Duration::from_secs(1));
    /// # Ok::<(), tollgate_redis::RedisLimitsError>(())
    /// # });
    /// ```
    pub fn is_rate_limited(&self) -> bool {
        matches!(self.kind, Kind::RateLimited { .. })
    }

    /// The key is paused for the whole fleet by a `pause_key` of the same name
    /// ([`SharedKeyedRateLimiter::pause_key`](crate::SharedKeyedRateLimiter::pause_key) or
    /// [`SharedKeyLimits::pause_key`](crate::SharedKeyLimits::pause_key)): every limiter of
    /// that name refuses the key until the pause ends, whatever limits it has
    /// ([`SharedKeyedBulkhead::try_acquire`](crate::SharedKeyedBulkhead::try_acquire)
    /// included; its `acquire` waits the pause out).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use tollgate::Rate;
    /// use tollgate_redis::{RedisLimits, SharedKeyedRateLimiter};
    ///
    /// # futures_lite::future::block_on(async {
    /// let store = RedisLimits::connect("redis://127.0.0.1:6379").await?;
    /// let per_host = SharedKeyedRateLimiter::new(&store, "fetch", Rate::per_second(10));
    /// per_host.until_key_ready("example.com").await?; // the store is warm
    /// // The server answered 429 with `Retry-After: 30`.
    /// per_host.pause_key("example.com", Duration::from_secs(30)).await?;
    /// let paused = per_host.check_key("example.com").await.unwrap_err();
    /// assert!(paused.is_paused());
    /// assert!(paused.retry_after().unwrap() <= Duration::from_secs(30));
    /// # Ok::<(), tollgate_redis::RedisLimitsError>(())
    /// # });
    /// ```
    pub fn is_paused(&self) -> bool {
        matches!(self.kind, Kind::Paused { .. })
    }

    /// The store is warming up: Redis has lost its data (a restart, a flush) or is new to
    /// this namespace, so nothing is granted until leases granted before can have lapsed
    /// (one lease TTL).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use tollgate_redis::{RedisLimits, SharedKeyedBulkhead};
    ///
    /// # futures_lite::future::block_on(async {
    /// let store = RedisLimits::connect("redis://127.0.0.1:6379").await?;
    /// let per_host = SharedKeyedBulkhead::new(&store, "fetch", 2);
    /// match per_host.try_acquire("example.com").await {
    ///     Ok(permit) => drop(permit),
    ///     Err(e) if e.is_warming_up() => {
    ///         println!("no grants for another {:?}", e.retry_after().unwrap());
    ///     }
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok::<(), tollgate_redis::RedisLimitsError>(())
    /// # });
    /// ```
    pub fn is_warming_up(&self) -> bool {
        matches!(self.kind, Kind::WarmingUp { .. })
    }

    /// How long until asking again can succeed: exact for a rate, a pause and a warm-up (on
    /// Redis's clock); for a busy key the time until its oldest lease would lapse if it were
    /// not renewed: neither a bound from above (renewals push it later) nor from below (a
    /// release frees room sooner), a hint for when to look again; for an
    /// [`is_unavailable`](Self::is_unavailable) error of a store that counts Redis as
    /// unreachable, the time to its next probe (asking sooner fails at once). `None` for a
    /// fenced permit and for the other unavailable errors (a failed `connect`, a reply the
    /// store cannot use).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use tollgate::Rate;
    /// use tollgate_redis::{RedisLimits, SharedKeyedRateLimiter};
    ///
    /// # futures_lite::future::block_on(async {
    /// let store = RedisLimits::connect("redis://127.0.0.1:6379").await?;
    /// let per_host = SharedKeyedRateLimiter::new(&store, "fetch", Rate::per_second(2));
    /// // What `until_key_ready` does, by hand.
    /// loop {
    ///     match per_host.check_key("example.com").await {
    ///         Ok(()) => break,
    ///         Err(e) => match e.retry_after() {
    ///             Some(after) => tollgate::sleep(after).await,
    ///             None => return Err(e),
    ///         },
    ///     }
    /// }
    /// # Ok::<(), tollgate_redis::RedisLimitsError>(())
    /// # });
    /// ```
    pub fn retry_after(&self) -> Option<Duration> {
        match self.kind {
            Kind::Busy { retry_after }
            | Kind::RateLimited { retry_after }
            | Kind::Paused { retry_after }
            | Kind::WarmingUp { retry_after } => Some(retry_after),
            Kind::Unavailable { retry_after, .. } => retry_after,
            Kind::Fenced => None,
        }
    }
}

impl fmt::Display for RedisLimitsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Unavailable {
                address,
                reason,
                retry_after,
            } => {
                write!(f, "redis at {address} is unavailable: {reason}")?;
                match retry_after {
                    Some(after) => write!(
                        f,
                        " (asks fail at once until a probe reaches it, the next in {after:?})"
                    ),
                    None => Ok(()),
                }
            }
            Kind::Fenced => f.write_str("the permit's lease could not be renewed in time (fenced)"),
            Kind::Busy { retry_after } => {
                write!(
                    f,
                    "the key is at its shared limit (oldest lease lapses in {retry_after:?})"
                )
            }
            Kind::RateLimited { retry_after } => {
                write!(
                    f,
                    "the key's shared rate allows no start for {retry_after:?}"
                )
            }
            Kind::Paused { retry_after } => write!(f, "the key is paused for {retry_after:?}"),
            Kind::WarmingUp { retry_after } => write!(
                f,
                "the shared store is warming up after redis lost its data ({retry_after:?} left)"
            ),
        }
    }
}

impl fmt::Debug for RedisLimitsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RedisLimitsError({self})")
    }
}

impl std::error::Error for RedisLimitsError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_answers_only_its_own_accessor() {
        let after = Duration::from_millis(250);
        let unavailable = RedisLimitsError::unavailable("127.0.0.1:6379", "connection refused");
        assert!(unavailable.is_unavailable());
        assert_eq!(unavailable.address(), Some("127.0.0.1:6379"));
        assert_eq!(unavailable.retry_after(), None);
        assert_eq!(
            unavailable.to_string(),
            "redis at 127.0.0.1:6379 is unavailable: connection refused"
        );
        let unreachable =
            RedisLimitsError::unreachable("127.0.0.1:6379", "no answer within 2s", after);
        assert!(unreachable.is_unavailable());
        assert_eq!(unreachable.address(), Some("127.0.0.1:6379"));
        assert_eq!(unreachable.retry_after(), Some(after));
        assert_eq!(
            unreachable.to_string(),
            "redis at 127.0.0.1:6379 is unavailable: no answer within 2s (asks fail at once \
             until a probe reaches it, the next in 250ms)"
        );
        assert_eq!(unreachable.without_retry_after().retry_after(), None);
        let kinds = [
            (RedisLimitsError::fenced(), "fenced"),
            (RedisLimitsError::busy(after), "busy"),
            (RedisLimitsError::rate_limited(after), "rate"),
            (RedisLimitsError::paused(after), "paused"),
            (RedisLimitsError::warming_up(after), "warming"),
        ];
        for (error, kind) in kinds {
            let flags = [
                error.is_fenced(),
                error.is_busy(),
                error.is_rate_limited(),
                error.is_paused(),
                error.is_warming_up(),
            ];
            assert_eq!(flags.iter().filter(|&&f| f).count(), 1, "{kind}: {flags:?}");
            assert!(
                !error.is_unavailable() && error.address().is_none(),
                "{kind}"
            );
            let expected = if kind == "fenced" { None } else { Some(after) };
            assert_eq!(error.retry_after(), expected, "{kind}");
            let text = error.to_string();
            assert!(
                text.chars().next().unwrap().is_lowercase() && !text.ends_with('.'),
                "{text}"
            );
        }
    }
}
