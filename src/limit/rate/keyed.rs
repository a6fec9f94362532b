//! [`KeyedRateLimiter`]: one [`Rate`] per key (per host), created on first use, forgotten
//! once idle without the user asking.
//!
//! # The table
//!
//! Keys live in a [`ShardedTable`] (shards picked by hash, each behind a read-write lock, a
//! key hashed once per call) whose values are atomic TATs: a call for a key the shard holds
//! takes the read lock and compare-and-swaps the key's TAT, so calls for different keys
//! never wait for each other (not even for a thread descheduled in the middle of one);
//! inserting and forgetting take the write lock.
//!
//! # Forgetting
//!
//! A key whose TAT has passed decides exactly like a key never seen (see `gcra.rs`), so it
//! can be dropped at any time without changing a decision: the table's sweeps drop such
//! keys as it grows (see `sharded.rs`). Besides, when any call finds the shard's latest TAT
//! passed (every key idle) and the shard holds at least [`SWEEP_FLOOR`] keys, it forgets
//! them all and gives the memory back. Each key is forgotten once per insert, so this too
//! is O(1) amortised; the floor keeps a small shard of keys that go idle between calls from
//! being rebuilt on every call. The latest TAT (beside each shard's lock) is kept as a bound
//! raised [`LATEST_SLACK`] past the TAT that passed it, so that calls under the read lock
//! rarely write it: a shard is forgotten up to that much later.

use std::borrow::Borrow;
use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use super::RateLimitError;
use super::gcra::{Gcra, Rate};
use super::wait::ReservedWait;
use crate::limit::sharded::{SHARDS, SWEEP_FLOOR, Shard, ShardedTable, Table, hash_of};
use crate::runtime::Clock;

/// How far past a TAT a shard's latest TAT is raised when that TAT passes it (1 ms), so
/// that at most one call a millisecond per shard writes it.
const LATEST_SLACK: u64 = 1_000_000;

/// One limit per key, created on demand: the per-host rate of a crawler.
///
/// Each key gets its own [`RateLimiter`](crate::RateLimiter)'s worth of state the first
/// time it is used, and loses it once idle (its last start is over one interval ago, so it
/// would decide like a fresh key anyway). **Idle keys are forgotten automatically**, as
/// calls come in, with no `retain_recent()` to call: crawling a million distinct hosts once
/// each keeps only those used within about the last interval, and once every key has been
/// idle for a millisecond the next calls empty the table (a shard keeps up to a few dozen
/// idle keys, which cost less to keep than to rebuild). Memory grows with the keys busy at
/// once, not with the keys ever seen. Checks of different keys never wait for each other.
///
/// Everything [`RateLimiter`](crate::RateLimiter)'s docs say holds per key: one rate per
/// key in the process (not per runtime), read on the caller's clock (tokio's, paused or
/// not, inside a tokio runtime with the `tokio` feature), waiters reserve their start and
/// are served per key in the order they asked, a check never jumps a key's queue. Keys do
/// not wait for one another.
///
/// Look-ups take `&Q` where `K: Borrow<Q>`, so a `KeyedRateLimiter<String>` is used with
/// `&str`.
///
/// # Examples
///
/// ```
/// use tollgate::{KeyedRateLimiter, Rate};
///
/// static PER_HOST: KeyedRateLimiter<String> = KeyedRateLimiter::new(Rate::per_second(2));
///
/// async fn fetch(host: &str, path: &str) -> String {
///     PER_HOST.until_key_ready(host).await;
///     format!("https://{host}{path}") // the request, simulated
/// }
///
/// # futures_lite::future::block_on(async {
/// assert_eq!(fetch("a.example", "/").await, "https://a.example/");
/// assert_eq!(fetch("b.example", "/").await, "https://b.example/"); // another host: no wait
/// assert!(PER_HOST.check_key("a.example").is_err()); // a.example's next start is ~500ms away
/// assert!(PER_HOST.len() <= 2);
/// # });
/// ```
#[doc(alias = "governor")]
#[doc(alias = "throttle")]
pub struct KeyedRateLimiter<K: Hash + Eq> {
    rate: Rate,
    gcra: Gcra,
    /// Each key's TAT (nanoseconds since the process origin), changed under the read lock
    /// by compare-and-swap; beside each shard's lock, at least every TAT of the shard
    /// (raised under the read lock by whoever writes a TAT past it, before that lock is
    /// released): once the clock passes it, every key of the shard is idle.
    table: ShardedTable<K, AtomicU64, AtomicU64>,
}

/// One shard of a keyed limiter's table: the TATs, and the latest of them beside.
type RateShard<K> = Shard<K, AtomicU64, AtomicU64>;

/// Moves the TAT of the key (`hash`, `key`) of `shard`, inserted as fresh (0) if absent,
/// by `step`: `step(tat)` is `Ok((new_tat, out))` to store `new_tat` and return `out`, or
/// an error to leave the TAT as it is and return that. Under the read lock with a
/// compare-and-swap (`step` may run again if another call moved the TAT meanwhile); under
/// the write lock when the key is new or the shard is due to be forgotten.
#[inline]
fn apply<K, Q, T, E>(
    shard: &RateShard<K>,
    hash: u64,
    key: &Q,
    now: u64,
    step: impl Fn(u64) -> Result<(u64, T), E>,
) -> Result<T, E>
where
    K: Hash + Eq + Borrow<Q>,
    Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
{
    {
        let table = shard.read();
        if !is_due_to_forget(&table, &shard.extra, now) {
            if let Some(tat) = table.get(hash, key) {
                let mut current = tat.load(Ordering::Relaxed);
                loop {
                    let (next, out) = step(current)?;
                    match tat.compare_exchange_weak(
                        current,
                        next,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    ) {
                        Ok(_) => {
                            raise_latest(&shard.extra, next);
                            return Ok(out);
                        }
                        Err(actual) => current = actual,
                    }
                }
            }
        }
    }
    apply_exclusive(shard, hash, key, now, step)
}

/// [`apply`] under the write lock: forgets the shard if due, inserts the key if absent.
#[inline(never)]
fn apply_exclusive<K, Q, T, E>(
    shard: &RateShard<K>,
    hash: u64,
    key: &Q,
    now: u64,
    step: impl Fn(u64) -> Result<(u64, T), E>,
) -> Result<T, E>
where
    K: Hash + Eq + Borrow<Q>,
    Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
{
    let mut table = shard.write();
    if is_due_to_forget(&table, &shard.extra, now) {
        table.forget_all();
        shard.extra.store(0, Ordering::Relaxed);
    }
    let tat = if table.get(hash, key).is_some() {
        table.get_mut(hash, key).expect("just found")
    } else {
        table.insert(hash, key, AtomicU64::new(0), |tat| {
            Gcra::is_idle(*tat.get_mut(), now)
        })
    };
    let tat = tat.get_mut();
    let (next, out) = step(*tat)?;
    *tat = next;
    // (Under the write lock: no call raises it meanwhile.)
    if next > shard.extra.load(Ordering::Relaxed) {
        shard
            .extra
            .store(next.saturating_add(LATEST_SLACK), Ordering::Relaxed);
    }
    Ok(out)
}

/// Whether every key of a shard (its values `table`, its latest TAT `latest`) is idle at
/// `now`, and there are enough to be worth forgetting.
#[inline]
fn is_due_to_forget<K>(table: &Table<K, AtomicU64>, latest: &AtomicU64, now: u64) -> bool {
    Gcra::is_idle(latest.load(Ordering::Relaxed), now) && table.len() >= SWEEP_FLOOR
}

/// Raises a shard's latest TAT past `tat` if `tat` passed it (under the read lock: a thread
/// that forgets the shard takes the write lock, so it sees this).
#[inline]
fn raise_latest(latest: &AtomicU64, tat: u64) {
    if tat > latest.load(Ordering::Relaxed) {
        latest.fetch_max(tat.saturating_add(LATEST_SLACK), Ordering::Relaxed);
    }
}

impl<K: Hash + Eq> KeyedRateLimiter<K> {
    /// Creates a keyed limiter that lets `rate` starts through per key. One rate per key in
    /// the process (see [`RateLimiter`](crate::RateLimiter)'s docs).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{KeyedRateLimiter, Rate};
    ///
    /// static CRAWL_DELAY: KeyedRateLimiter<String> =
    ///     KeyedRateLimiter::new(Rate::every(Duration::from_secs(1)));
    /// assert_eq!(CRAWL_DELAY.rate().interval(), Duration::from_secs(1));
    /// ```
    pub const fn new(rate: Rate) -> Self {
        Self {
            rate,
            gcra: Gcra::new(rate),
            table: ShardedTable::new([const { Shard::new(AtomicU64::new(0)) }; SHARDS]),
        }
    }

    /// The rate this limiter lets through per key.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{KeyedRateLimiter, Rate};
    ///
    /// let per_host = KeyedRateLimiter::<u64>::new(Rate::per_second(3));
    /// assert_eq!(per_host.rate(), Rate::per_second(3));
    /// ```
    pub fn rate(&self) -> Rate {
        self.rate
    }

    /// How many keys the limiter holds state for: the keys used within about the last
    /// interval, plus idle ones not yet swept (at most about as many again, and a few per
    /// shard).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{KeyedRateLimiter, Rate};
    ///
    /// let per_host = KeyedRateLimiter::new(Rate::per_second(1));
    /// per_host.check_key(&1)?;
    /// per_host.check_key(&2)?;
    /// assert_eq!(per_host.len(), 2);
    /// # Ok::<(), tollgate::RateLimitError>(())
    /// ```
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Whether the limiter holds state for no key (see [`len`](Self::len)).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{KeyedRateLimiter, Rate};
    ///
    /// assert!(KeyedRateLimiter::<String>::new(Rate::per_second(1)).is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[inline]
    fn shard(&self, hash: u64) -> &RateShard<K> {
        self.table.shard(hash)
    }

    /// Takes a start for `key` if its rate allows one now, without waiting.
    ///
    /// A start reserved by a waiting [`until_key_ready`](Self::until_key_ready) is not
    /// free: a check never jumps a key's queue.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{KeyedRateLimiter, Rate};
    ///
    /// let per_host: KeyedRateLimiter<String> = KeyedRateLimiter::new(Rate::per_second(1));
    /// assert!(per_host.check_key("a.example").is_ok());
    /// assert!(per_host.check_key("a.example").is_err());
    /// assert!(per_host.check_key("b.example").is_ok()); // keys are independent
    /// ```
    ///
    /// # Errors
    ///
    /// [`RateLimitError`] when `key`'s rate allows no start yet: it says how long until
    /// one ([`retry_after`](RateLimitError::retry_after)). Nothing is taken then.
    #[inline]
    pub fn check_key<Q>(&self, key: &Q) -> Result<(), RateLimitError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let now = Clock::Async.now();
        let hash = hash_of(key);
        let decided = apply(self.shard(hash), hash, key, now, |tat| {
            self.gcra.decide(tat, now).map(|next| (next, ()))
        });
        decided.map_err(|allowed_at| RateLimitError::new(now, allowed_at))
    }

    /// Waits until `key`'s rate allows a start, then takes it.
    ///
    /// The first poll reserves `key`'s next free start (waiters of one key are served in
    /// the order they first polled, each wakes once); the future completes at that time,
    /// at once if the start is free now. The future owns a copy of the key.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use tollgate::{KeyedRateLimiter, Rate};
    ///
    /// let per_host = KeyedRateLimiter::<String>::new(Rate::every(Duration::from_millis(20)));
    /// # futures_lite::future::block_on(async {
    /// let begin = Instant::now();
    /// per_host.until_key_ready("a.example").await;
    /// per_host.until_key_ready("b.example").await; // another key: no wait
    /// per_host.until_key_ready("a.example").await; // a.example's second start: 20 ms on
    /// assert!(begin.elapsed() >= Duration::from_millis(20));
    /// # });
    /// ```
    ///
    /// # Panics
    ///
    /// As [`RateLimiter::until_ready`](crate::RateLimiter::until_ready).
    ///
    /// # Cancel safety
    ///
    /// As [`RateLimiter::until_ready`](crate::RateLimiter::until_ready): a waiter dropped
    /// before its time gives its start back when no later start of the key was reserved
    /// since; otherwise that start stays unused (under-use, never over-use).
    pub fn until_key_ready<Q>(&self, key: &Q) -> UntilKeyReady<'_, K>
    where
        K: Borrow<Q> + Clone,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        UntilKeyReady::new(self, key.to_owned(), Clock::Async)
    }

    /// Blocks the calling thread until `key`'s rate allows a start, then takes it: the
    /// blocking form of [`until_key_ready`](Self::until_key_ready), in the same queue.
    ///
    /// For plain threads (and tokio's `spawn_blocking`); it reads and sleeps on the
    /// system's clock, as [`RateLimiter::until_ready_blocking`](crate::RateLimiter::until_ready_blocking).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{KeyedRateLimiter, Rate};
    ///
    /// let per_host = KeyedRateLimiter::<String>::new(Rate::every(Duration::from_millis(5)));
    /// std::thread::scope(|scope| {
    ///     for host in ["a.example", "a.example", "b.example"] {
    ///         let per_host = &per_host;
    ///         scope.spawn(move || per_host.until_key_ready_blocking(host));
    ///     }
    /// });
    /// ```
    pub fn until_key_ready_blocking<Q>(&self, key: &Q)
    where
        K: Borrow<Q> + Clone,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        crate::runtime::block_on_real_time(UntilKeyReady::new(
            self,
            key.to_owned(),
            Clock::Blocking,
        ));
    }

    /// Reserves `key`'s next free start at or after `now`: `(reserved_tat, start_at)`.
    fn reserve(&self, hash: u64, key: &K, now: u64) -> (u64, u64)
    where
        K: Clone,
    {
        let reserved = apply(self.shard(hash), hash, key, now, |tat| {
            let (next, start_at) = self.gcra.reserve(tat, now);
            Ok::<_, Infallible>((next, (next, start_at)))
        });
        match reserved {
            Ok(reserved) => reserved,
            Err(never) => match never {},
        }
    }

    /// Gives back `key`'s start reserved with `reserved_tat` if nothing was reserved or
    /// taken for the key after it.
    fn give_back(&self, hash: u64, key: &K, reserved_tat: u64) {
        let table = self.shard(hash).read();
        if let Some(tat) = table.get(hash, key) {
            let _ = tat.compare_exchange(
                reserved_tat,
                self.gcra.unreserve(reserved_tat),
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
    }
}

impl<K: Hash + Eq> fmt::Debug for KeyedRateLimiter<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedRateLimiter")
            .field("rate", &self.rate)
            .field("len", &self.len())
            .finish_non_exhaustive()
    }
}

pin_project_lite::pin_project! {
    /// Future returned by [`KeyedRateLimiter::until_key_ready`]: completes once the key's
    /// rate allows a start, having taken it.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::futures::UntilKeyReady;
    /// use tollgate::{KeyedRateLimiter, Rate};
    ///
    /// static PER_HOST: KeyedRateLimiter<String> = KeyedRateLimiter::new(Rate::per_second(10));
    ///
    /// struct Request {
    ///     turn: UntilKeyReady<'static, String>,
    /// }
    ///
    /// # futures_lite::future::block_on(async {
    /// let request = Request { turn: PER_HOST.until_key_ready("a.example") };
    /// request.turn.await;
    /// # });
    /// ```
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    pub struct UntilKeyReady<'a, K>
    where
        K: Hash,
        K: Eq,
    {
        limiter: &'a KeyedRateLimiter<K>,
        key: K,
        hash: u64,
        #[pin]
        wait: ReservedWait,
    }

    impl<K> PinnedDrop for UntilKeyReady<'_, K>
    where
        K: Hash,
        K: Eq,
    {
        fn drop(this: Pin<&mut Self>) {
            if let Some(reserved_tat) = this.wait.reserved_tat() {
                this.limiter.give_back(this.hash, &this.key, reserved_tat);
            }
        }
    }
}

impl<'a, K: Hash + Eq> UntilKeyReady<'a, K> {
    fn new(limiter: &'a KeyedRateLimiter<K>, key: K, clock: Clock) -> Self {
        Self {
            limiter,
            hash: hash_of(&key),
            key,
            wait: ReservedWait::new(clock),
        }
    }
}

impl<K: Hash + Eq + Clone> Future for UntilKeyReady<'_, K> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.project();
        let (limiter, hash, key) = (*this.limiter, *this.hash, &*this.key);
        this.wait
            .poll(cx, "UntilKeyReady", |now| limiter.reserve(hash, key, now))
    }
}

impl<K: Hash + Eq> fmt::Debug for UntilKeyReady<'_, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UntilKeyReady")
            .field("rate", &self.limiter.rate)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::sync::{Arc, Barrier};
    use std::time::Duration;

    use super::*;
    use crate::limit::sharded::shard_of;
    use std::hash::Hasher;

    impl<K: Hash + Eq> KeyedRateLimiter<K> {
        /// Entries the shards have room for: the memory they hold.
        fn capacity(&self) -> usize {
            self.table.capacity()
        }
    }

    #[test]
    fn forgetting_idle_keys_gives_their_memory_back() {
        let interval = Duration::from_millis(50);
        let per_key = KeyedRateLimiter::<u64>::new(Rate::every(interval));
        for key in 0..50_000 {
            per_key.check_key(&key).unwrap();
        }
        std::thread::sleep(interval + Duration::from_millis(10));
        for key in 0..1_000u64 {
            per_key.check_key(&(u64::MAX - key)).unwrap();
        }
        // Every shard was emptied and rebuilt with about 31 fresh keys: room for a few
        // dozen each, not for the thousands it once held.
        assert!(
            per_key.capacity() <= SHARDS * 2 * SWEEP_FLOOR,
            "{}",
            per_key.capacity()
        );
    }

    /// A key whose comparison, when it carries barriers, stops in the middle of a call
    /// (under its shard's lock) until the test lets it go on.
    #[derive(Clone)]
    struct Stalling {
        id: u64,
        stall: Option<Arc<(Barrier, Barrier)>>,
    }

    impl Hash for Stalling {
        fn hash<H: Hasher>(&self, state: &mut H) {
            self.id.hash(state);
        }
    }

    impl PartialEq for Stalling {
        fn eq(&self, other: &Self) -> bool {
            if let Some(stall) = &self.stall {
                stall.0.wait();
                stall.1.wait();
            }
            self.id == other.id
        }
    }

    impl Eq for Stalling {}

    #[test]
    fn a_call_stalled_under_a_shards_lock_holds_up_no_other_key_of_the_shard() {
        let per_key = KeyedRateLimiter::new(Rate::every(Duration::from_secs(3600)));
        let key = |id| Stalling { id, stall: None };
        let shard = |id| shard_of(hash_of(&key(id)));
        let other = (2..).find(|&id| shard(id) == shard(1)).unwrap();
        per_key.check_key(&key(1)).unwrap();
        per_key.check_key(&key(other)).unwrap();
        let stall = Arc::new((Barrier::new(2), Barrier::new(2)));
        let (done, finished) = mpsc::channel();
        std::thread::scope(|scope| {
            let stalled = Stalling {
                id: 1,
                stall: Some(stall.clone()),
            };
            let per_key = &per_key;
            scope.spawn(move || per_key.check_key(&stalled).is_err());
            // The first call is inside the shard, comparing its key.
            stall.0.wait();
            scope.spawn(move || done.send(per_key.check_key(&key(other)).is_err()));
            let answered = finished.recv_timeout(Duration::from_secs(10));
            stall.1.wait();
            assert_eq!(
                answered,
                Ok(true),
                "a call for another key of the shard waited for the stalled one"
            );
        });
    }
}
