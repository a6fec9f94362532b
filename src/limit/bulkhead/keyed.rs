//! [`KeyedBulkhead`]: one cap per key (per host), created on first use and forgotten
//! when idle.
//!
//! # Eviction without races
//!
//! Each (key, runtime) pair has a slot: a semaphore plus a `users` count of the acquire
//! futures and permits that hold it. `users` only grows under the map lock, while the slot
//! is in the map; it may shrink anywhere. Whoever brings it to zero takes the map lock and
//! removes the slot if `users` is still zero. So a slot can only be removed when no
//! caller holds it, and a caller that finds a slot holds it before the lock is released:
//! there is never a second semaphore for a key whose first one is still in use (the
//! dotnet/runtime#99865 race, where eviction ran between "look up" and "acquire").

use std::borrow::Borrow;
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::hash::Hash;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use super::core::{Acquire, Gated, Holder, Permit};
use super::options::{Kind, Options, options_builder};
use super::stats::{Limiter, Tally, limiter};
use super::{BulkheadError, BulkheadStats};
use crate::runtime::RuntimeKey;
use crate::sync::lock;

/// One cap per key, with the same options as [`Bulkhead`](crate::Bulkhead): the
/// per-host limit of a crawler.
///
/// Each key gets its own bulkhead the first time it is used, and loses it as soon as it is
/// idle again (no permit out, nobody waiting), so crawling a million distinct hosts keeps
/// only the busy ones in memory. Eviction never races with a new acquire: a key in use
/// always has exactly one semaphore. Like [`Bulkhead`](crate::Bulkhead), the cap applies
/// per runtime unless [`global`](Self::global), and permits go to waiters of a key in
/// arrival order.
///
/// Look-ups take `&Q` where `K: Borrow<Q>`, so a `KeyedBulkhead<String>` is used with
/// `&str`.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::KeyedBulkhead;
///
/// static PER_HOST: KeyedBulkhead<String> = KeyedBulkhead::new(2).name("per-host");
///
/// async fn fetch(host: &str, path: &str) -> Result<String, tollgate::BulkheadError> {
///     PER_HOST
///         .run(host, async {
///             tollgate::sleep(Duration::from_millis(1)).await; // the request, simulated
///             format!("https://{host}{path}")
///         })
///         .await
/// }
///
/// let page = tollgate::run_sync(fetch("example.com", "/"));
/// assert_eq!(page.unwrap(), "https://example.com/");
/// assert_eq!(PER_HOST.len(), 0); // idle hosts are forgotten
/// ```
pub struct KeyedBulkhead<K: Hash + Eq> {
    options: Options,
    /// `None` until first used, so that `new` can be `const`.
    map: Mutex<Option<Slots<K>>>,
    /// The limit in force for every key; changed only under the map lock.
    limit: AtomicUsize,
    /// Set by `close`, under the map lock.
    closed: AtomicBool,
}

/// Each key's slots, one per runtime that uses it (a single one when `global`).
type Slots<K> = HashMap<K, Vec<Arc<KeySlot<K>>>>;

/// The semaphore of one (key, runtime) pair.
struct KeySlot<K> {
    key: K,
    runtime: RuntimeKey,
    /// Acquire futures and permits holding this slot; grows only under the map lock.
    users: AtomicUsize,
    limiter: Limiter,
}

impl<K: Hash + Eq> KeyedBulkhead<K> {
    /// Creates a keyed bulkhead that lets at most `limit` callers in at once per key:
    /// one cap per key and runtime, or per key in the process with
    /// [`.global()`](Self::global) (see [`Bulkhead::new`](crate::Bulkhead::new)).
    ///
    /// # Examples
    ///
    /// ```
    /// static PER_HOST: tollgate::KeyedBulkhead<String> = tollgate::KeyedBulkhead::new(4);
    /// assert_eq!(PER_HOST.limit(), 4);
    /// ```
    ///
    /// # Panics
    ///
    /// Panics when `limit` is 0 or above
    /// [`Semaphore::MAX_PERMITS`](crate::Semaphore::MAX_PERMITS); in a `static` that is a
    /// compile-time error.
    #[track_caller]
    pub const fn new(limit: usize) -> Self {
        Self {
            options: Options::new(limit, Kind::Keyed),
            map: Mutex::new(None),
            limit: AtomicUsize::new(limit),
            closed: AtomicBool::new(false),
        }
    }

    /// The limit in force for every key.
    fn live_limit(&self) -> usize {
        self.limit.load(Ordering::Acquire)
    }

    /// Makes `limit` the limit of every key's cap, and of keys' caps created later.
    ///
    /// Growing admits waiters at once, in arrival order; shrinking admits nobody new for
    /// a key until its permits out are below the new limit (permits out are never
    /// revoked), exactly as [`Semaphore::set_limit`](crate::Semaphore::set_limit) does.
    ///
    /// # Examples
    ///
    /// ```
    /// let per_host = tollgate::KeyedBulkhead::<String>::new(1);
    /// let held = per_host.try_acquire("a.example").unwrap();
    /// per_host.set_limit(2);
    /// assert!(per_host.try_acquire("a.example").is_ok());
    /// assert_eq!(per_host.limit(), 2);
    /// # drop(held);
    /// ```
    ///
    /// # Panics
    ///
    /// Panics when `limit` is 0 or above
    /// [`Semaphore::MAX_PERMITS`](crate::Semaphore::MAX_PERMITS), as [`new`](Self::new) does.
    #[track_caller]
    pub fn set_limit(&self, limit: usize) {
        super::check_limit(
            limit,
            "tollgate::KeyedBulkhead::set_limit",
            "tollgate::KeyedBulkhead::set_limit: a limit of 0 would refuse all work; use at least 1",
        );
        let map = lock(&self.map);
        self.limit.store(limit, Ordering::Release);
        for slot in map.iter().flat_map(HashMap::values).flatten() {
            slot.limiter.set_limit(|_| Some(limit as u64));
        }
    }

    /// Closes every key's cap, and those of keys used later: every waiter wakes with a
    /// [`BulkheadError`] whose [`is_closed`](BulkheadError::is_closed) is true, every later
    /// acquire fails the same way at once (`try_acquire` too). Permits out
    /// stay valid.
    ///
    /// # Examples
    ///
    /// ```
    /// let per_host = tollgate::KeyedBulkhead::<String>::new(1);
    /// per_host.close();
    /// assert!(per_host.acquire_blocking("a.example").unwrap_err().is_closed());
    /// assert!(per_host.is_closed());
    /// assert!(per_host.is_empty());
    /// ```
    pub fn close(&self) {
        let map = lock(&self.map);
        self.closed.store(true, Ordering::Release);
        for slot in map.iter().flat_map(HashMap::values).flatten() {
            slot.limiter.close();
        }
    }

    /// Whether [`close`](Self::close) was called.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    options_builder!(
        new: "tollgate::KeyedBulkhead::<String>::new",
        key: "\"example.com\"",
        permit: "a permit of the key",
        per: " per key"
    );

    /// How many keys currently have a bulkhead: those with a permit out or a caller
    /// waiting (or an acquire future not yet finished or dropped).
    ///
    /// # Examples
    ///
    /// ```
    /// let per_host = tollgate::KeyedBulkhead::<String>::new(1);
    /// let permit = per_host.try_acquire("a.example").unwrap();
    /// assert_eq!(per_host.len(), 1);
    /// drop(permit);
    /// assert_eq!(per_host.len(), 0);
    /// ```
    pub fn len(&self) -> usize {
        lock(&self.map).as_ref().map_or(0, HashMap::len)
    }

    /// Whether no key has a bulkhead right now.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Finds or creates the slot of (`key`, current runtime) and registers one user of it.
    fn hold<Q>(&self, key: &Q) -> Arc<KeySlot<K>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let runtime = self.options.runtime();
        let mut map = lock(&self.map);
        let map = map.get_or_insert_with(HashMap::new);
        let found = map
            .get(key)
            .and_then(|slots| slots.iter().find(|slot| slot.runtime == runtime));
        let slot = match found {
            Some(slot) => slot.clone(),
            None => {
                // Everything that can panic (`to_owned`) runs before the map changes, so a
                // panic leaves no empty entry behind.
                let slot = Arc::new(KeySlot {
                    key: key.to_owned(),
                    runtime,
                    users: AtomicUsize::new(0),
                    limiter: limiter(self.live_limit()),
                });
                if self.is_closed() {
                    slot.limiter.close();
                }
                match map.get_mut(key) {
                    Some(slots) => slots.push(slot.clone()),
                    None => {
                        let owned = key.to_owned();
                        map.insert(owned, vec![slot.clone()]);
                    }
                }
                slot
            }
        };
        slot.users.fetch_add(1, Ordering::AcqRel);
        slot
    }

    /// Drops one user of `slot`; the last one out removes it from the map.
    fn unhold(&self, slot: &Arc<KeySlot<K>>) {
        if slot.users.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        let mut guard = lock(&self.map);
        // Someone may have taken the slot again between our decrement and the lock.
        if slot.users.load(Ordering::Acquire) != 0 {
            return;
        }
        let Some(map) = guard.as_mut() else {
            return;
        };
        let Some(slots) = map.get_mut(&slot.key) else {
            return;
        };
        // An earlier last user may already have removed this very slot.
        let Some(position) = slots.iter().position(|other| Arc::ptr_eq(other, slot)) else {
            return;
        };
        slots.swap_remove(position);
        if slots.is_empty() {
            map.remove(&slot.key);
            // After a burst of distinct keys, give the table's memory back.
            if map.capacity() > 64 && map.len() * 4 < map.capacity() {
                map.shrink_to(map.len() * 2);
            }
        }
    }

    /// Registers one user of (`key`, calling runtime)'s cap.
    fn hold_of<B, Q>(bulkhead: B, key: &Q) -> Hold<B, K>
    where
        B: Deref<Target = Self>,
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let slot = bulkhead.hold(key);
        Hold { bulkhead, slot }
    }

    /// Takes a permit of `key` if one is free and nobody waits for that key.
    ///
    /// # Examples
    ///
    /// ```
    /// let per_host = tollgate::KeyedBulkhead::<String>::new(1);
    /// let held = per_host.try_acquire("a.example").unwrap();
    /// assert!(per_host.try_acquire("a.example").unwrap_err().is_busy());
    /// assert!(per_host.try_acquire("b.example").is_ok());
    /// drop(held);
    /// ```
    ///
    /// # Errors
    ///
    /// [`BulkheadError`]: [`is_busy`](BulkheadError::is_busy) when no permit of `key` is
    /// free or someone waits for it (try again later), [`is_closed`](BulkheadError::is_closed)
    /// when the keyed bulkhead is closed (no use trying again), as
    /// [`Semaphore::try_acquire`](crate::Semaphore::try_acquire) tells them apart. A
    /// failed `try_acquire` is not counted in [`stats`](Self::stats)' `rejected`.
    pub fn try_acquire<Q>(&self, key: &Q) -> Result<KeyedBulkheadPermit<'_, K>, BulkheadError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        // On failure the hold drops and gives the key up.
        Permit::try_new(Self::hold_of(self, key)).map(|inner| KeyedBulkheadPermit { inner })
    }

    /// Like [`try_acquire`](Self::try_acquire), with a permit that owns an `Arc` of the
    /// keyed bulkhead, so it is `'static`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    ///
    /// let per_host = Arc::new(tollgate::KeyedBulkhead::<String>::new(1));
    /// let permit = per_host.try_acquire_arc("example.com").unwrap();
    /// assert!(per_host.try_acquire_arc("example.com").unwrap_err().is_busy());
    /// std::thread::spawn(move || drop(permit)).join().unwrap();
    /// assert!(per_host.is_empty());
    /// ```
    ///
    /// # Errors
    ///
    /// As [`try_acquire`](Self::try_acquire).
    pub fn try_acquire_arc<Q>(
        self: &Arc<Self>,
        key: &Q,
    ) -> Result<KeyedBulkheadPermitArc<K>, BulkheadError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        Permit::try_new(Self::hold_of(self.clone(), key))
            .map(|inner| KeyedBulkheadPermitArc { inner })
    }

    /// Waits for a permit of `key` in the calling runtime, behind everyone already waiting
    /// for that key.
    ///
    /// The key's cap is found (or created) when `acquire` is called, and it stays alive
    /// until the future is dropped or its permit is released.
    ///
    /// # Examples
    ///
    /// ```
    /// let per_host = tollgate::KeyedBulkhead::<String>::new(2);
    /// # futures_lite::future::block_on(async {
    /// let permit = per_host.acquire("example.com").await?;
    /// assert_eq!(per_host.stats("example.com").in_flight, 1);
    /// drop(permit);
    /// # Ok::<(), tollgate::BulkheadError>(())
    /// # }).unwrap();
    /// ```
    ///
    /// # Errors
    ///
    /// [`BulkheadError`] when the acquire timeout passes first, or when `max_waiting`
    /// callers already wait for this key.
    ///
    /// # Cancel safety
    ///
    /// Cancelling the future loses its place in the key's queue. If a permit had already
    /// been handed to it, that permit goes on to the next waiter: nothing leaks.
    pub fn acquire<Q>(&self, key: &Q) -> KeyedBulkheadAcquire<'_, K>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        KeyedBulkheadAcquire(Acquire::new(Self::hold_of(self, key)))
    }

    /// Like [`acquire`](Self::acquire), with a future and a permit that own an `Arc` of
    /// the keyed bulkhead, so they are `'static` and can move into a spawned task.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    ///
    /// # futures_lite::future::block_on(async {
    /// let per_host = Arc::new(tollgate::KeyedBulkhead::<String>::new(2));
    /// let permit = per_host.acquire_arc("example.com").await?;
    /// std::thread::spawn(move || drop(permit)).join().unwrap();
    /// assert!(per_host.is_empty());
    /// # Ok::<(), tollgate::BulkheadError>(())
    /// # }).unwrap();
    /// ```
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    ///
    /// As [`acquire`](Self::acquire).
    pub fn acquire_arc<Q>(self: &Arc<Self>, key: &Q) -> KeyedBulkheadAcquireArc<K>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        KeyedBulkheadAcquireArc(Acquire::new(Self::hold_of(self.clone(), key)))
    }

    /// Blocks the calling thread until a permit of `key` is free, in the same queue as the
    /// async callers of that key.
    ///
    /// For plain threads (and tokio's `spawn_blocking`); calling it from async code blocks
    /// the executor's thread. The acquire timeout applies, on the real clock.
    ///
    /// # Examples
    ///
    /// ```
    /// static PER_DISK: tollgate::KeyedBulkhead<String> = tollgate::KeyedBulkhead::new(1);
    ///
    /// std::thread::scope(|scope| {
    ///     for thread in 0..4 {
    ///         scope.spawn(move || {
    ///             let disk = if thread % 2 == 0 { "sda" } else { "sdb" };
    ///             let _permit = PER_DISK.acquire_blocking(disk).unwrap();
    ///             // at most one thread per disk is here at once
    ///         });
    ///     }
    /// });
    /// assert!(PER_DISK.is_empty());
    /// ```
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire).
    pub fn acquire_blocking<Q>(&self, key: &Q) -> Result<KeyedBulkheadPermit<'_, K>, BulkheadError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        Permit::blocking(Self::hold_of(self, key)).map(|inner| KeyedBulkheadPermit { inner })
    }

    /// Runs `work` holding a permit of `key`: waits for the permit, awaits `work`, then
    /// releases the permit.
    ///
    /// # Examples
    ///
    /// ```
    /// let per_host = tollgate::KeyedBulkhead::<String>::new(2);
    /// # futures_lite::future::block_on(async {
    /// let status = per_host.run("example.com", async { 200 }).await?;
    /// assert_eq!(status, 200);
    /// # Ok::<(), tollgate::BulkheadError>(())
    /// # }).unwrap();
    /// ```
    ///
    /// # Errors
    ///
    /// [`BulkheadError`] as [`acquire`](Self::acquire); `work` is dropped without being
    /// polled then.
    ///
    /// # Cancel safety
    ///
    /// Cancelling while waiting is [`acquire`](Self::acquire)'s cancellation; cancelling
    /// while `work` runs drops it mid-flight and releases the permit.
    pub fn run<Q, F>(&self, key: &Q, work: F) -> KeyedBulkheadRun<'_, K, F::IntoFuture>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
        F: IntoFuture,
    {
        KeyedBulkheadRun {
            inner: Gated::new(self.acquire(key), work.into_future()),
        }
    }

    /// Runs `work` on the calling thread holding a permit of `key`, waiting for the permit as
    /// [`acquire_blocking`](Self::acquire_blocking) does.
    ///
    /// # Examples
    ///
    /// ```
    /// let per_disk = tollgate::KeyedBulkhead::<String>::new(2);
    /// let written = per_disk.run_blocking("sda", || 4096).unwrap();
    /// assert_eq!(written, 4096);
    /// ```
    ///
    /// # Errors
    ///
    /// [`BulkheadError`] as [`acquire`](Self::acquire); `work` is not called then.
    pub fn run_blocking<Q, T>(&self, key: &Q, work: impl FnOnce() -> T) -> Result<T, BulkheadError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let _permit = self.acquire_blocking(key)?;
        Ok(work())
    }

    /// The totals of `key`'s caps over every runtime, readable from any thread (as
    /// [`Bulkhead::stats`](crate::Bulkhead::stats), for one key).
    ///
    /// A key without a cap (never used, or idle and forgotten) reports all zeros: the
    /// counters start again when a key comes back.
    ///
    /// # Examples
    ///
    /// ```
    /// let per_host = tollgate::KeyedBulkhead::<String>::new(2);
    /// let permit = per_host.try_acquire("example.com").unwrap();
    /// assert_eq!(per_host.stats("example.com").in_flight, 1);
    /// assert_eq!(per_host.stats("other.example").admitted, 0);
    /// drop(permit);
    /// ```
    pub fn stats<Q>(&self, key: &Q) -> BulkheadStats
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.key_stats(key, None)
    }

    /// The counters of `key`'s cap in the calling runtime (of the only one if
    /// [`global`](Self::global)).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{KeyedBulkhead, run_sync};
    ///
    /// let per_host = KeyedBulkhead::<String>::new(2);
    /// let permit = per_host.try_acquire("example.com").unwrap();
    /// assert_eq!(per_host.runtime_stats("example.com").in_flight, 1);
    /// run_sync(async {
    ///     assert_eq!(per_host.runtime_stats("example.com").in_flight, 0);
    ///     assert_eq!(per_host.stats("example.com").in_flight, 1);
    /// });
    /// drop(permit);
    /// ```
    pub fn runtime_stats<Q>(&self, key: &Q) -> BulkheadStats
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.key_stats(key, Some(self.options.runtime()))
    }

    /// The sum over `key`'s caps of `runtime`, or of every runtime.
    fn key_stats<Q>(&self, key: &Q, runtime: Option<RuntimeKey>) -> BulkheadStats
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let map = lock(&self.map);
        let slots = map.as_ref().and_then(|map| map.get(key));
        let mut total = Tally::default();
        let mut runtimes = 0;
        for slot in slots.into_iter().flatten() {
            if runtime.is_none_or(|runtime| slot.runtime == runtime) {
                let tally = Tally::of(&slot.limiter);
                runtimes += usize::from(tally.is_used() && slot.runtime.is_alive());
                total.add(tally);
            }
        }
        BulkheadStats::new(self.live_limit(), runtime.map_or(runtimes, |_| 1), total)
    }
}

impl<K: Hash + Eq> fmt::Debug for KeyedBulkhead<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut debug = f.debug_struct("KeyedBulkhead");
        self.options.fmt_fields(self.live_limit(), &mut debug);
        debug.field("keys", &self.len()).finish_non_exhaustive()
    }
}

/// One registered user of a key's cap; gives it up when dropped. `B` is
/// `&KeyedBulkhead<K>` or `Arc<KeyedBulkhead<K>>`.
struct Hold<B: Deref<Target = KeyedBulkhead<K>>, K: Hash + Eq> {
    bulkhead: B,
    slot: Arc<KeySlot<K>>,
}

impl<B: Deref<Target = KeyedBulkhead<K>>, K: Hash + Eq> Holder for Hold<B, K> {
    fn limiter(&self) -> &Limiter {
        &self.slot.limiter
    }

    fn options(&self) -> &Options {
        &self.bulkhead.options
    }
}

impl<B: Deref<Target = KeyedBulkhead<K>>, K: Hash + Eq> Drop for Hold<B, K> {
    fn drop(&mut self) {
        // Runs after the permit or the acquire future has given its permit back.
        self.bulkhead.unhold(&self.slot);
    }
}

/// Future returned by [`KeyedBulkhead::acquire`].
#[must_use = "futures do nothing unless you `.await` or poll them"]
pub struct KeyedBulkheadAcquire<'a, K: Hash + Eq>(Acquire<Hold<&'a KeyedBulkhead<K>, K>>);

impl<K: Hash + Eq> fmt::Debug for KeyedBulkheadAcquire<'_, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedBulkheadAcquire")
            .finish_non_exhaustive()
    }
}

impl<'a, K: Hash + Eq> Future for KeyedBulkheadAcquire<'a, K> {
    type Output = Result<KeyedBulkheadPermit<'a, K>, BulkheadError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.0
            .poll(cx, "KeyedBulkheadAcquire")
            .map_ok(|inner| KeyedBulkheadPermit { inner })
    }
}

/// Future returned by [`KeyedBulkhead::acquire_arc`].
#[must_use = "futures do nothing unless you `.await` or poll them"]
pub struct KeyedBulkheadAcquireArc<K: Hash + Eq>(Acquire<Hold<Arc<KeyedBulkhead<K>>, K>>);

impl<K: Hash + Eq> fmt::Debug for KeyedBulkheadAcquireArc<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedBulkheadAcquireArc")
            .finish_non_exhaustive()
    }
}

impl<K: Hash + Eq> Future for KeyedBulkheadAcquireArc<K> {
    type Output = Result<KeyedBulkheadPermitArc<K>, BulkheadError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.0
            .poll(cx, "KeyedBulkheadAcquireArc")
            .map_ok(|inner| KeyedBulkheadPermitArc { inner })
    }
}

/// A permit of one key of a [`KeyedBulkhead`], released when dropped (and the key forgotten
/// if it is then idle).
#[clippy::has_significant_drop]
#[must_use = "the permit is released as soon as it is dropped"]
pub struct KeyedBulkheadPermit<'a, K: Hash + Eq> {
    inner: Permit<Hold<&'a KeyedBulkhead<K>, K>>,
}

impl<K: Hash + Eq> fmt::Debug for KeyedBulkheadPermit<'_, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt_as("KeyedBulkheadPermit", f)
    }
}

/// A permit of one key of a [`KeyedBulkhead`] that owns an `Arc` of it, so it can move into
/// a spawned task; released when dropped.
#[clippy::has_significant_drop]
#[must_use = "the permit is released as soon as it is dropped"]
pub struct KeyedBulkheadPermitArc<K: Hash + Eq> {
    inner: Permit<Hold<Arc<KeyedBulkhead<K>>, K>>,
}

impl<K: Hash + Eq> fmt::Debug for KeyedBulkheadPermitArc<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt_as("KeyedBulkheadPermitArc", f)
    }
}

pin_project_lite::pin_project! {
    /// Future returned by [`KeyedBulkhead::run`].
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    pub struct KeyedBulkheadRun<'a, K, F>
    where
        K: Hash,
        K: Eq,
    {
        #[pin]
        inner: Gated<KeyedBulkheadAcquire<'a, K>, KeyedBulkheadPermit<'a, K>, F>,
    }
}

impl<K: Hash + Eq, F> fmt::Debug for KeyedBulkheadRun<'_, K, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedBulkheadRun").finish_non_exhaustive()
    }
}

impl<K: Hash + Eq, F: Future> Future for KeyedBulkheadRun<'_, K, F> {
    type Output = Result<F::Output, BulkheadError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.project().inner.poll(cx)
    }
}
