//! [`KeyedCircuitBreaker`]: one breaker per key (per host), created on first use, forgotten
//! once it holds nothing a fresh one would not.
//!
//! # The table
//!
//! Keys live in [`SHARDS`] shards picked by hash, each a `Mutex<HashMap<key, core>>` and
//! the event its waiters listen to, so threads working on different hosts rarely meet on
//! one lock and a probe's end wakes only the waiters of its shard.
//!
//! # Forgetting
//!
//! A core that is closed, has an empty record and no permit out decides exactly like a
//! fresh one (see `core.rs`), so it can be dropped at any time without changing a decision:
//! - when a permit's end leaves its key so (a probe closed the breaker, a dropped permit of
//!   a key that never reported), the key goes at once;
//! - a record that empties with time (a time record, a quiet count record) is found by a
//!   sweep: when an insert finds the shard grown to twice its size after its last sweep (and
//!   at least [`SWEEP_FLOOR`]), it drops every such key. The sweep costs what the inserts
//!   since the last one cost, so O(1) amortised, and a shard holds at most about twice the
//!   keys that were not forgettable at its last sweep.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::fmt;
use std::future::Future;
use std::hash::{BuildHasher, Hash, RandomState};
use std::pin::Pin;
use std::sync::{LazyLock, Mutex};
use std::task::{Context, Poll};

use event_listener::Event;

use super::config::Breaker;
use super::core::{BreakerCore, BreakerState, Refusal, Ticket};
use super::error::CircuitBreakerError;
use super::wait::ProbeWait;
use crate::limit::outcome::Outcome;
use crate::runtime::Clock;
use crate::sync::lock;

/// How many shards a keyed breaker splits its keys over.
const SHARDS: usize = 16;

/// A shard sweeps no sooner than at this many keys: below it, forgettable keys cost less to
/// keep than to sweep for.
const SWEEP_FLOOR: usize = 64;

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
    shards: [Shard<K>; SHARDS],
}

/// One shard, on its own cache lines so that threads on different shards do not share one.
#[repr(align(128))]
struct Shard<K> {
    table: Mutex<Table<K>>,
    /// Notified when a probe of one of the shard's keys ends.
    probe_ended: Event,
}

struct Table<K> {
    cores: HashMap<K, BreakerCore, KeyHasher>,
    /// How many keys the last sweep left: the next sweeps when the table doubles.
    swept_len: usize,
}

/// The keys' hasher: std's (SipHash, keyed at random once per process, so keys chosen by
/// whoever feeds a crawler its links cannot pile up in one bucket), behind a `const`
/// builder.
static KEY_HASHER: LazyLock<RandomState> = LazyLock::new(RandomState::new);

#[derive(Clone, Copy, Default)]
struct KeyHasher;

impl BuildHasher for KeyHasher {
    type Hasher = DefaultHasher;
    fn build_hasher(&self) -> DefaultHasher {
        KEY_HASHER.build_hasher()
    }
}

/// The shard of `key`: bits of its hash that the table uses neither for its buckets (the
/// low bits) nor for its tags (the top seven).
fn shard_of<Q: Hash + ?Sized>(key: &Q) -> usize {
    (KEY_HASHER.hash_one(key) >> 40) as usize % SHARDS
}

impl<K> Shard<K> {
    const fn new() -> Self {
        Self {
            table: Mutex::new(Table {
                cores: HashMap::with_hasher(KeyHasher),
                swept_len: 0,
            }),
            probe_ended: Event::new(),
        }
    }
}

impl<K: Hash + Eq> Table<K> {
    /// Before an insert: drops the forgettable keys when the table has doubled since its
    /// last sweep.
    fn make_room(&mut self, config: &Breaker, now: u64) {
        let len = self.cores.len();
        if len >= SWEEP_FLOOR && len >= 2 * self.swept_len {
            self.cores
                .retain(|_, core| !core.is_forgettable(config, now));
            let len = self.cores.len();
            self.swept_len = len;
            let keep = (2 * len).max(SWEEP_FLOOR);
            if self.cores.capacity() > 2 * keep {
                self.cores.shrink_to(keep);
            }
        }
    }
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
            shards: [const { Shard::new() }; SHARDS],
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
        lock(&self.shards[shard_of(key)].table)
            .cores
            .get(key)
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
        self.shards
            .iter()
            .map(|shard| lock(&shard.table).cores.len())
            .sum()
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
        match self.ask(key, 0) {
            (Ok(ticket), _) => Ok(KeyedCircuitBreakerPermit::new(self, key.to_owned(), ticket)),
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
            key: Some(key.to_owned()),
            wait: ProbeWait::new(),
        }
    }

    /// Asks `key`'s core for a permit, making the key if it is not held; returns the answer
    /// and the time it was asked at, read once the shard's lock is held (and taken as
    /// `not_before` at least), as [`CircuitBreaker`](super::CircuitBreaker)'s does, for the
    /// same reason: a time read before the wait for the lock would overstate a refusal's wait.
    fn ask<Q>(&self, key: &Q, not_before: u64) -> (Result<Ticket, Refusal>, u64)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + fmt::Debug + ?Sized,
    {
        let (granted, transition, now) = {
            let mut table = lock(&self.shards[shard_of(key)].table);
            let now = Clock::Async.now().max(not_before);
            let (granted, transition) = match table.cores.get_mut(key) {
                Some(core) => core.try_acquire(&self.config, now),
                None => {
                    table.make_room(&self.config, now);
                    let mut core = BreakerCore::new(&self.config);
                    let asked = core.try_acquire(&self.config, now);
                    table.cores.insert(key.to_owned(), core);
                    asked
                }
            };
            (granted, transition, now)
        };
        if let Some(transition) = transition {
            transition.emit(Some(&key));
        }
        (granted, now)
    }

    /// `key`'s permit ends: with a report, or dropped (`None`).
    fn end(&self, key: &K, ticket: Ticket, success: Option<bool>) {
        let shard = &self.shards[shard_of(key)];
        let transition = {
            let mut table = lock(&shard.table);
            let now = Clock::Async.now();
            let Some(core) = table.cores.get_mut(key) else {
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
                table.cores.remove(key);
            }
            transition
        };
        if let Some(transition) = transition {
            transition.emit(Some(key));
        }
        if ticket.is_probe() {
            shard.probe_ended.notify(usize::MAX);
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
        let shard = &breaker.shards[shard_of(key)];
        let ticket = std::task::ready!(this.wait.poll(
            cx,
            "KeyedBreakerAcquire",
            &shard.probe_ended,
            |not_before| breaker.ask(key, not_before).0
        ));
        let key = this.key.take().expect("held until now");
        Poll::Ready(KeyedCircuitBreakerPermit::new(breaker, key, ticket))
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
    ticket: Ticket,
    reported: bool,
}

impl<'a, K: Hash + Eq + fmt::Debug> KeyedCircuitBreakerPermit<'a, K> {
    fn new(breaker: &'a KeyedCircuitBreaker<K>, key: K, ticket: Ticket) -> Self {
        Self {
            breaker,
            key,
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
        self.breaker
            .end(&self.key, self.ticket, Some(outcome.is_success()));
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
            self.breaker.end(&self.key, self.ticket, None);
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
