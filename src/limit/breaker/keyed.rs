//! [`KeyedCircuitBreaker`]: one breaker per key (per host), created on first use, forgotten
//! once it holds nothing a fresh one would not.
//!
//! # The table
//!
//! Keys live in a [`ShardedTable`] (shards picked by hash, each behind a read-write lock, a
//! key hashed once per call and per permit) whose values are the keys' breakers, changed
//! under the write lock; beside each shard's lock, the event its waiters listen to, so a
//! probe's end wakes only the waiters of its shard.
//!
//! # Forgetting
//!
//! A core that is closed, has an empty record and no permit out decides exactly like a
//! fresh one (see `core.rs`), so it can be dropped at any time without changing a decision:
//! - when a permit's end leaves its key so (a probe closed the breaker, a dropped permit of
//!   a key that never reported), the key goes at once;
//! - a record that empties with time (a time record, a quiet count record) is found by the
//!   table's sweeps as it grows (see `sharded.rs`).

use std::borrow::Borrow;
use std::fmt;
use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::task::{Context, Poll};

use event_listener::Event;

use super::config::Breaker;
use super::core::{BreakerCore, BreakerState, Refusal, Ticket};
use super::error::CircuitBreakerError;
use super::wait::ProbeWait;
use crate::limit::outcome::Outcome;
use crate::limit::sharded::{SHARDS, Shard, ShardedTable, hash_of};
use crate::runtime::Clock;

/// One circuit breaker per key, created on first use: a breaker per host for a crawler.
///
/// Each key gets its own [`CircuitBreaker`](crate::CircuitBreaker)'s worth of state the
/// first time it is used, every key under the same [`Breaker`] settings, and everything the
/// single breaker's docs say holds per key: a host that keeps failing is refused (or waited
/// for) while the others go on. **Keys are forgotten automatically** once they hold nothing a
/// fresh key would not (closed, nothing in the record, no permit out: see the rules in
/// [`Breaker`]'s docs), so crawling a million hosts once each keeps only the keys with
/// outcomes in their records, and those that are open or half-open.
///
/// A refusal ([`CircuitBreakerError`]) names the key, rendered with `Debug` (hence the `Debug` bound
/// on keys); so do the `tracing` events. Look-ups take `&Q` where `K: Borrow<Q>`, so a
/// `KeyedCircuitBreaker<String>` is used with `&str`. A breaker is per process.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Breaker, BreakerState, KeyedCircuitBreaker, Outcome};
///
/// static PER_HOST: KeyedCircuitBreaker<String> =
///     KeyedCircuitBreaker::new(Breaker::new().min_attempts(3));
///
/// fn fetch(host: &str) -> Result<u16, tollgate::CircuitBreakerError> {
///     let permit = PER_HOST.try_acquire(host)?;
///     let status = if host == "down.example" { 503 } else { 200 }; // simulated
///     permit.report(if status < 400 { Outcome::success() } else { Outcome::overload() });
///     Ok(status)
/// }
///
/// for _ in 0..3 {
///     fetch("down.example")?;
///     fetch("up.example")?;
/// }
/// assert_eq!(PER_HOST.state("down.example"), BreakerState::Open);
/// let refused = fetch("down.example").unwrap_err();
/// assert!(refused.to_string().contains("\"down.example\""));
/// assert_eq!(fetch("up.example")?, 200); // other hosts go on
/// # Ok::<(), tollgate::CircuitBreakerError>(())
/// ```
pub struct KeyedCircuitBreaker<K: Hash + Eq> {
    config: Breaker,
    /// Each key's breaker; beside each shard's lock, the event notified when a probe of
    /// one of the shard's keys ends.
    table: ShardedTable<K, BreakerCore, Event>,
}

impl<K: Hash + Eq> KeyedCircuitBreaker<K> {
    /// A keyed breaker whose keys all follow `breaker`. A `const fn`, so it can be a
    /// `static`.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Breaker, KeyedCircuitBreaker};
    ///
    /// static PER_HOST: KeyedCircuitBreaker<String> = KeyedCircuitBreaker::new(Breaker::new());
    /// assert!(PER_HOST.is_empty());
    /// ```
    pub const fn new(breaker: Breaker) -> Self {
        Self {
            config: breaker,
            table: ShardedTable::new([const { Shard::new(Event::new()) }; SHARDS]),
        }
    }

    /// The state of `key`'s breaker now (a key never seen, or forgotten, is closed).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Breaker, BreakerState, KeyedCircuitBreaker};
    ///
    /// let per_host = KeyedCircuitBreaker::<String>::new(Breaker::new());
    /// assert_eq!(per_host.state("a.example"), BreakerState::Closed);
    /// ```
    pub fn state<Q>(&self, key: &Q) -> BreakerState
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let now = Clock::Async.now();
        let hash = hash_of(key);
        self.table
            .shard(hash)
            .read()
            .get(hash, key)
            .map_or(BreakerState::Closed, |core| core.state(now))
    }

    /// How many keys the breaker holds state for: those with outcomes in their records, a
    /// permit out, or not closed, plus forgettable ones not yet swept (at most about as many
    /// again, and a few dozen per shard).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Breaker, KeyedCircuitBreaker, Outcome};
    ///
    /// let per_host = KeyedCircuitBreaker::<String>::new(Breaker::new());
    /// per_host.try_acquire("a.example")?.report(Outcome::success());
    /// drop(per_host.try_acquire("b.example")?); // no report: nothing to remember
    /// assert_eq!(per_host.len(), 1);
    /// # Ok::<(), tollgate::CircuitBreakerError>(())
    /// ```
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Whether the breaker holds state for no key (see [`len`](Self::len)).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Breaker, KeyedCircuitBreaker};
    ///
    /// assert!(KeyedCircuitBreaker::<u64>::new(Breaker::new()).is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<K: Hash + Eq + fmt::Debug> KeyedCircuitBreaker<K> {
    /// A permit for `key` if its breaker lets an attempt go now (see
    /// [`CircuitBreaker::try_acquire`](crate::CircuitBreaker::try_acquire)). A key not
    /// held yet starts closed.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Breaker, KeyedCircuitBreaker, Outcome};
    ///
    /// let per_host = KeyedCircuitBreaker::<String>::new(Breaker::new());
    /// per_host.try_acquire("a.example")?.report(Outcome::success());
    /// # Ok::<(), tollgate::CircuitBreakerError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`CircuitBreakerError`], naming `key`, when its breaker is open (it says when the next probe
    /// may go), or half-open with all its probes out.
    pub fn try_acquire<Q>(
        &self,
        key: &Q,
    ) -> Result<KeyedCircuitBreakerPermit<'_, K>, CircuitBreakerError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + fmt::Debug + ?Sized,
    {
        let hash = hash_of(key);
        match self.ask(hash, key, 0) {
            (Ok(ticket), _) => Ok(KeyedCircuitBreakerPermit::new(
                self,
                key.to_owned(),
                hash,
                ticket,
            )),
            (Err(refusal), now) => Err(CircuitBreakerError::new(refusal, now, Some(&key))),
        }
    }

    /// Waits until `key`'s breaker lets an attempt go, then grants a permit (see
    /// [`CircuitBreaker::acquire`](crate::CircuitBreaker::acquire)). The future owns a copy
    /// of the key; other keys do not wait for it.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Breaker, KeyedCircuitBreaker, Outcome};
    ///
    /// let per_host = KeyedCircuitBreaker::<String>::new(
    ///     Breaker::new().min_attempts(1).open_for(Duration::from_millis(10)),
    /// );
    /// # futures_lite::future::block_on(async {
    /// per_host.acquire("a.example").await.report(Outcome::failure()); // open for 10 ms
    /// per_host.acquire("b.example").await.report(Outcome::success()); // at once
    /// let probe = per_host.acquire("a.example").await; // 10 ms later
    /// assert!(probe.is_probe());
    /// # drop(probe);
    /// # });
    /// ```
    ///
    /// # Panics
    ///
    /// As [`CircuitBreaker::acquire`](crate::CircuitBreaker::acquire).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes takes nothing.
    pub fn acquire<Q>(&self, key: &Q) -> KeyedBreakerAcquire<'_, K>
    where
        K: Borrow<Q> + Clone,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        KeyedBreakerAcquire {
            breaker: self,
            hash: hash_of(key),
            key: Some(key.to_owned()),
            wait: ProbeWait::new(),
        }
    }

    /// Asks the core of `key` (of hash `hash`) for a permit, making the key if it is not
    /// held; returns the answer
    /// and the time it was asked at, read once the shard's lock is held (and taken as
    /// `not_before` at least), as [`CircuitBreaker`](super::CircuitBreaker)'s does, for the
    /// same reason: a time read before the wait for the lock would overstate a refusal's wait.
    fn ask<Q>(&self, hash: u64, key: &Q, not_before: u64) -> (Result<Ticket, Refusal>, u64)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + fmt::Debug + ?Sized,
    {
        let (granted, transition, now) = {
            let mut table = self.table.shard(hash).write();
            let now = Clock::Async.now().max(not_before);
            let (granted, transition) = match table.get_mut(hash, key) {
                Some(core) => core.try_acquire(&self.config, now),
                None => table
                    .insert(hash, key, BreakerCore::new(&self.config), |core| {
                        core.is_forgettable(&self.config, now)
                    })
                    .try_acquire(&self.config, now),
            };
            (granted, transition, now)
        };
        if let Some(transition) = transition {
            transition.emit(Some(&key));
        }
        (granted, now)
    }

    /// The permit of `key` (of hash `hash`) ends: with a report, or dropped (`None`).
    fn end(&self, hash: u64, key: &K, ticket: Ticket, success: Option<bool>) {
        let shard = self.table.shard(hash);
        let transition = {
            let mut table = shard.write();
            let now = Clock::Async.now();
            let Some(core) = table.get_mut(hash, key) else {
                return; // a key with a permit out is never forgotten
            };
            let transition = match success {
                Some(success) => core.report(&self.config, now, ticket, success),
                None => {
                    core.release(ticket);
                    None
                }
            };
            let forget = core.is_forgettable(&self.config, now);
            if forget {
                table.remove(hash, key);
            }
            transition
        };
        if let Some(transition) = transition {
            transition.emit(Some(key));
        }
        if ticket.is_probe() {
            shard.extra.notify(usize::MAX);
        }
    }
}

impl<K: Hash + Eq> fmt::Debug for KeyedCircuitBreaker<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedCircuitBreaker")
            .field("breaker", &self.config)
            .field("len", &self.len())
            .finish_non_exhaustive()
    }
}

pin_project_lite::pin_project! {
    /// Future returned by [`KeyedCircuitBreaker::acquire`]: completes with a permit once
    /// the key's breaker lets an attempt go.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::futures::KeyedBreakerAcquire;
    /// use tollgate::{Breaker, KeyedCircuitBreaker};
    ///
    /// static PER_HOST: KeyedCircuitBreaker<String> = KeyedCircuitBreaker::new(Breaker::new());
    ///
    /// struct Request {
    ///     turn: KeyedBreakerAcquire<'static, String>,
    /// }
    ///
    /// # futures_lite::future::block_on(async {
    /// let request = Request { turn: PER_HOST.acquire("a.example") };
    /// drop(request.turn.await);
    /// # });
    /// ```
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    pub struct KeyedBreakerAcquire<'a, K>
    where
        K: Hash,
        K: Eq,
    {
        breaker: &'a KeyedCircuitBreaker<K>,
        hash: u64,
        // Taken by the permit.
        key: Option<K>,
        #[pin]
        wait: ProbeWait,
    }
}

impl<'a, K: Hash + Eq + Clone + fmt::Debug> Future for KeyedBreakerAcquire<'a, K> {
    type Output = KeyedCircuitBreakerPermit<'a, K>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<KeyedCircuitBreakerPermit<'a, K>> {
        let this = self.project();
        let breaker = *this.breaker;
        let key = this
            .key
            .as_ref()
            .expect("`KeyedBreakerAcquire` polled after completion");
        let hash = *this.hash;
        let ticket = std::task::ready!(this.wait.poll(
            cx,
            "KeyedBreakerAcquire",
            &breaker.table.shard(hash).extra,
            |not_before| breaker.ask(hash, key, not_before).0
        ));
        let key = this.key.take().expect("held until now");
        Poll::Ready(KeyedCircuitBreakerPermit::new(breaker, key, hash, ticket))
    }
}

impl<K: Hash + Eq> fmt::Debug for KeyedBreakerAcquire<'_, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedBreakerAcquire")
            .field("waiting", &self.wait.is_waiting())
            .finish_non_exhaustive()
    }
}

/// The right to run one attempt for one key under a [`KeyedCircuitBreaker`];
/// [`report`](Self::report) says how it went. Dropped without a report, it says nothing
/// (see [`CircuitBreaker`](crate::CircuitBreaker)'s docs).
///
/// # Examples
///
/// ```
/// use tollgate::{Breaker, KeyedCircuitBreaker, Outcome};
///
/// let per_host = KeyedCircuitBreaker::<String>::new(Breaker::new());
/// let permit = per_host.try_acquire("a.example")?;
/// assert_eq!(permit.key(), "a.example");
/// permit.report(Outcome::success());
/// # Ok::<(), tollgate::CircuitBreakerError>(())
/// ```
#[clippy::has_significant_drop]
#[must_use = "a permit dropped at once says nothing; report how the attempt went"]
pub struct KeyedCircuitBreakerPermit<'a, K: Hash + Eq + fmt::Debug> {
    breaker: &'a KeyedCircuitBreaker<K>,
    key: K,
    hash: u64,
    ticket: Ticket,
    reported: bool,
}

impl<'a, K: Hash + Eq + fmt::Debug> KeyedCircuitBreakerPermit<'a, K> {
    fn new(breaker: &'a KeyedCircuitBreaker<K>, key: K, hash: u64, ticket: Ticket) -> Self {
        Self {
            breaker,
            key,
            hash,
            ticket,
            reported: false,
        }
    }

    /// Reports how the attempt went (see
    /// [`CircuitBreakerPermit::report`](crate::CircuitBreakerPermit::report)).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Breaker, BreakerState, KeyedCircuitBreaker, Outcome};
    ///
    /// let per_host = KeyedCircuitBreaker::<String>::new(Breaker::new().min_attempts(1));
    /// per_host.try_acquire("a.example")?.report(Outcome::overload()); // a 503
    /// assert_eq!(per_host.state("a.example"), BreakerState::Open);
    /// assert_eq!(per_host.state("b.example"), BreakerState::Closed);
    /// # Ok::<(), tollgate::CircuitBreakerError>(())
    /// ```
    pub fn report(mut self, outcome: Outcome) {
        self.reported = true;
        self.breaker.end(
            self.hash,
            &self.key,
            self.ticket,
            Some(outcome.is_success()),
        );
    }

    /// Whether this permit is a probe (granted while the key's breaker was half-open).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Breaker, KeyedCircuitBreaker};
    ///
    /// let per_host = KeyedCircuitBreaker::<String>::new(Breaker::new());
    /// assert!(!per_host.try_acquire("a.example")?.is_probe());
    /// # Ok::<(), tollgate::CircuitBreakerError>(())
    /// ```
    pub fn is_probe(&self) -> bool {
        self.ticket.is_probe()
    }

    /// The key this permit is for.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Breaker, KeyedCircuitBreaker};
    ///
    /// let ports = KeyedCircuitBreaker::<u16>::new(Breaker::new());
    /// assert_eq!(*ports.try_acquire(&443)?.key(), 443);
    /// # Ok::<(), tollgate::CircuitBreakerError>(())
    /// ```
    pub fn key(&self) -> &K {
        &self.key
    }
}

impl<K: Hash + Eq + fmt::Debug> Drop for KeyedCircuitBreakerPermit<'_, K> {
    fn drop(&mut self) {
        if !self.reported {
            self.breaker.end(self.hash, &self.key, self.ticket, None);
        }
    }
}

impl<K: Hash + Eq + fmt::Debug> fmt::Debug for KeyedCircuitBreakerPermit<'_, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedCircuitBreakerPermit")
            .field("key", &self.key)
            .field("probe", &self.is_probe())
            .finish_non_exhaustive()
    }
}
