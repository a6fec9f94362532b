//! [`KeyedRateLimiter`]: one [`Rate`] per key (per host), created on first use, forgotten
//! once idle without the user asking.
//!
//! # The table
//!
//! Keys live in [`SHARDS`] shards picked by hash, each an `RwLock<HashMap<key, TAT>>` with
//! atomic TATs: a call for a key the shard holds takes the read lock and compare-and-swaps
//! the key's TAT, so calls for different keys never wait for each other (not even for a
//! thread descheduled in the middle of one); inserting and forgetting take the write lock.
//! Each key is hashed once: the map stores the hash beside the key and hashes with it, and a
//! look-up borrows the stored pair as a `dyn Lookup`, so no owned key is built to probe.
//!
//! # Forgetting
//!
//! A key whose TAT has passed decides exactly like a key never seen (see `gcra.rs`), so it
//! can be dropped at any time without changing a decision. Each shard drops them itself:
//! - when an insert finds the shard grown to twice its size after its last sweep (and at
//!   least [`SWEEP_FLOOR`]), it drops every idle key: the sweep costs what the inserts since
//!   the last one cost, so O(1) amortised, and a shard holds at most about twice the keys
//!   that were busy at its last sweep;
//! - when any call finds the shard's latest TAT passed (every key idle) and the shard holds
//!   at least [`SWEEP_FLOOR`] keys, it forgets them all and gives the memory back. Each key
//!   is forgotten once per insert, so this too is O(1) amortised; the floor keeps a small
//!   shard of keys that go idle between calls from being rebuilt on every call. The latest
//!   TAT is kept as a bound raised [`LATEST_SLACK`] past the TAT that passed it, so that
//!   calls under the read lock rarely write it: a shard is forgotten up to that much later.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::hash::{BuildHasher, Hash, Hasher, RandomState};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::task::{Context, Poll};

use super::RateLimitError;
use super::gcra::{Gcra, Rate};
use super::wait::ReservedWait;
use crate::runtime::Clock;

/// How many shards a keyed limiter splits its keys over (a power of two).
const SHARDS: usize = 32;

/// A shard sweeps no sooner than at this many keys: below it, idle keys cost less to keep
/// than to rebuild.
const SWEEP_FLOOR: usize = 64;

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
    shards: [Shard<K>; SHARDS],
}

/// One shard, on its own cache lines so that threads on different shards do not share one.
#[repr(align(128))]
struct Shard<K> {
    table: RwLock<Table<K>>,
}

struct Table<K> {
    /// Each key's TAT (nanoseconds since the process origin), changed under the read lock
    /// by compare-and-swap.
    tats: HashMap<Entry<K>, AtomicU64, StoredHash>,
    /// How many keys the last sweep left: the next sweeps when the table doubles.
    swept_len: usize,
    /// At least every TAT of the table (raised under the read lock by whoever writes a
    /// TAT past it, before that lock is released): once the clock passes it, every key is
    /// idle.
    latest: AtomicU64,
}

/// A key and its hash, computed once per call.
struct Entry<K> {
    hash: u64,
    key: K,
}

/// What a look-up compares: the stored pair of a key (`Entry`) or the caller's borrowed one
/// (`Probe`). The map's key type borrows as `dyn Lookup<Q>` so a `Probe` can find it.
trait Lookup<Q: ?Sized> {
    fn hash(&self) -> u64;
    fn key(&self) -> &Q;
}

struct Probe<'a, Q: ?Sized> {
    hash: u64,
    key: &'a Q,
}

impl<K: Borrow<Q>, Q: ?Sized> Lookup<Q> for Entry<K> {
    fn hash(&self) -> u64 {
        self.hash
    }
    fn key(&self) -> &Q {
        self.key.borrow()
    }
}

impl<Q: ?Sized> Lookup<Q> for Probe<'_, Q> {
    fn hash(&self) -> u64 {
        self.hash
    }
    fn key(&self) -> &Q {
        self.key
    }
}

impl<'a, K: Borrow<Q> + 'a, Q: ?Sized + 'a> Borrow<dyn Lookup<Q> + 'a> for Entry<K> {
    fn borrow(&self) -> &(dyn Lookup<Q> + 'a) {
        self
    }
}

// `Hash` and `Eq` of the stored pair and of `dyn Lookup` agree (the `Borrow` contract): the
// hash is the stored one, equality is the key's.
impl<K> Hash for Entry<K> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

impl<K: Eq> PartialEq for Entry<K> {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash && self.key == other.key
    }
}

impl<K: Eq> Eq for Entry<K> {}

impl<Q: ?Sized> Hash for dyn Lookup<Q> + '_ {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(Lookup::hash(self));
    }
}

impl<Q: Eq + ?Sized> PartialEq for dyn Lookup<Q> + '_ {
    fn eq(&self, other: &Self) -> bool {
        Lookup::hash(self) == Lookup::hash(other) && self.key() == other.key()
    }
}

impl<Q: Eq + ?Sized> Eq for dyn Lookup<Q> + '_ {}

/// The keys' hasher: std's (SipHash, keyed at random once per process, so keys chosen by
/// whoever feeds a crawler its links cannot pile up in one bucket).
static KEY_HASHER: LazyLock<RandomState> = LazyLock::new(RandomState::new);

/// The map's hasher: the stored hash, as is (it was computed with [`KEY_HASHER`]).
#[derive(Clone, Copy, Default)]
struct StoredHash;

#[derive(Default)]
struct StoredHasher(u64);

impl BuildHasher for StoredHash {
    type Hasher = StoredHasher;
    fn build_hasher(&self) -> StoredHasher {
        StoredHasher(0)
    }
}

impl Hasher for StoredHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, _: &[u8]) {
        unreachable!("the keyed rate limiter's map hashes only stored hashes");
    }
    fn write_u64(&mut self, hash: u64) {
        self.0 = hash;
    }
}

#[inline]
fn hash_of<Q: Hash + ?Sized>(key: &Q) -> u64 {
    KEY_HASHER.hash_one(key)
}

/// The shard of `hash`: bits the map does not use (it takes the low bits for the bucket
/// and the top seven as tags, so taking the top bits here would blunt its tags).
#[inline]
fn shard_of(hash: u64) -> usize {
    (hash >> 40) as usize % SHARDS
}

impl<K> Shard<K> {
    const fn new() -> Self {
        Self {
            table: RwLock::new(Table {
                tats: HashMap::with_hasher(StoredHash),
                swept_len: 0,
                latest: AtomicU64::new(0),
            }),
        }
    }
}

// A panic inside a critical section (user code: `Hash`, `Eq`, `ToOwned`) runs before
// anything changes, so a poisoned table is still a consistent one.
fn read<K>(table: &RwLock<Table<K>>) -> RwLockReadGuard<'_, Table<K>> {
    table
        .read()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn write<K>(table: &RwLock<Table<K>>) -> RwLockWriteGuard<'_, Table<K>> {
    table
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl<K: Hash + Eq> Shard<K> {
    /// Moves the TAT of the key (`hash`, `key`), inserted as fresh (0) if absent, by `step`:
    /// `step(tat)` is `Ok((new_tat, out))` to store `new_tat` and return `out`, or an error
    /// to leave the TAT as it is and return that. Under the read lock with a
    /// compare-and-swap (`step` may run again if another call moved the TAT meanwhile);
    /// under the write lock when the key is new or the shard is due to be forgotten.
    #[inline]
    fn apply<Q, T, E>(
        &self,
        hash: u64,
        key: &Q,
        now: u64,
        step: impl Fn(u64) -> Result<(u64, T), E>,
    ) -> Result<T, E>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        {
            let table = read(&self.table);
            if !table.is_due_to_forget(now) {
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
                                table.raise_latest(next);
                                return Ok(out);
                            }
                            Err(actual) => current = actual,
                        }
                    }
                }
            }
        }
        self.apply_exclusive(hash, key, now, step)
    }

    /// [`apply`](Self::apply) under the write lock: forgets the shard if due, inserts the
    /// key if absent.
    #[inline(never)]
    fn apply_exclusive<Q, T, E>(
        &self,
        hash: u64,
        key: &Q,
        now: u64,
        step: impl Fn(u64) -> Result<(u64, T), E>,
    ) -> Result<T, E>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let mut table = write(&self.table);
        let table = &mut *table;
        table.forget_if_all_idle(now);
        if table.get(hash, key).is_none() {
            table.make_room(now);
        }
        let tat = table
            .tats
            .entry(Entry {
                hash,
                key: key.to_owned(),
            })
            .or_insert_with(|| AtomicU64::new(0))
            .get_mut();
        let (next, out) = step(*tat)?;
        *tat = next;
        let latest = table.latest.get_mut();
        if next > *latest {
            *latest = next.saturating_add(LATEST_SLACK);
        }
        Ok(out)
    }
}

impl<K: Hash + Eq> Table<K> {
    /// Whether every key is idle at `now` and there are enough to be worth forgetting.
    #[inline]
    fn is_due_to_forget(&self, now: u64) -> bool {
        Gcra::is_idle(self.latest.load(Ordering::Relaxed), now) && self.tats.len() >= SWEEP_FLOOR
    }

    /// Forgets every key when all are idle at `now` and there are enough to be worth it.
    #[inline]
    fn forget_if_all_idle(&mut self, now: u64) {
        if self.is_due_to_forget(now) {
            self.forget_all();
        }
    }

    #[cold]
    fn forget_all(&mut self) {
        // A fresh map rather than `clear`: the point is to give the memory back.
        self.tats = HashMap::with_hasher(StoredHash);
        self.swept_len = 0;
        *self.latest.get_mut() = 0;
    }

    /// Raises the latest TAT past `tat` if `tat` passed it (under the read lock: a thread
    /// that forgets the shard takes the write lock, so it sees this).
    #[inline]
    fn raise_latest(&self, tat: u64) {
        if tat > self.latest.load(Ordering::Relaxed) {
            self.latest
                .fetch_max(tat.saturating_add(LATEST_SLACK), Ordering::Relaxed);
        }
    }

    #[inline]
    fn get<Q>(&self, hash: u64, key: &Q) -> Option<&AtomicU64>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.tats.get(&Probe { hash, key } as &dyn Lookup<Q>)
    }

    /// Before an insert: sweeps when the table has doubled since its last sweep.
    #[inline]
    fn make_room(&mut self, now: u64) {
        let len = self.tats.len();
        if len >= SWEEP_FLOOR && len >= 2 * self.swept_len {
            self.sweep(now);
        }
    }

    /// Drops the keys idle at `now`, and the memory they took once the table is mostly
    /// empty.
    fn sweep(&mut self, now: u64) {
        self.tats
            .retain(|_, tat| !Gcra::is_idle(*tat.get_mut(), now));
        let len = self.tats.len();
        self.swept_len = len;
        let keep = (2 * len).max(SWEEP_FLOOR);
        if self.tats.capacity() > 2 * keep {
            self.tats.shrink_to(keep);
        }
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
            shards: [const { Shard::new() }; SHARDS],
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
        self.shards
            .iter()
            .map(|shard| read(&shard.table).tats.len())
            .sum()
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
    fn shard(&self, hash: u64) -> &Shard<K> {
        &self.shards[shard_of(hash)]
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
        let decided = self.shard(hash).apply(hash, key, now, |tat| {
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
        let reserved = self.shard(hash).apply(hash, key, now, |tat| {
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
        let table = read(&self.shard(hash).table);
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

    impl<K: Hash + Eq> KeyedRateLimiter<K> {
        /// Entries the shards have room for: the memory they hold.
        fn capacity(&self) -> usize {
            self.shards
                .iter()
                .map(|shard| read(&shard.table).tats.capacity())
                .sum()
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

    #[test]
    fn the_shard_bits_are_not_the_maps_tag_bits() {
        // The map tags entries with the hash's top 7 bits: the shard must not fix them.
        for hash in [0u64, u64::MAX, 1 << 63, 0x7f << 57] {
            assert_eq!(shard_of(hash), shard_of(hash ^ (0x7f << 57)));
        }
    }
}
