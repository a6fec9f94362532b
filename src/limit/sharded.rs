//! [`ShardedTable`]: the table under the keyed limiters ([`KeyedRateLimiter`],
//! [`KeyedCircuitBreaker`]): a value per key, in shards picked by the key's hash, each
//! behind a read-write lock, and forgotten once it decides like a fresh one.
//!
//! # Shards and look-ups
//!
//! Threads working on different hosts rarely meet on one lock: a key's shard is picked by
//! bits of its hash, and each shard sits on cache lines of its own. Each key is hashed once
//! per call: the table stores the hash beside the key and hashes with it, and a look-up
//! borrows the caller's pair as a `dyn Lookup`, so no owned key is built to probe. A
//! limiter whose values change in place by compare-and-swap (a rate's TAT) reads under the
//! read lock; one whose values change as a whole (a breaker) under the write lock.
//!
//! # Forgetting
//!
//! A limiter says which values are *forgettable*: they decide exactly like a fresh one, so
//! dropping them changes no decision. When an insert finds its shard grown to twice what
//! its last sweep left (and at least [`SWEEP_FLOOR`]), the shard drops every forgettable
//! value, and gives the memory back once it is mostly empty. A sweep costs what the inserts
//! since the last one cost, so O(1) amortised, and a shard holds at most about twice the
//! values that were not forgettable at its last sweep. A limiter may forget more on its own
//! (a value that becomes forgettable as a permit ends, a whole shard whose keys all went
//! idle).
//!
//! [`KeyedRateLimiter`]: crate::KeyedRateLimiter
//! [`KeyedCircuitBreaker`]: crate::KeyedCircuitBreaker

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher, RandomState};
use std::sync::{LazyLock, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// How many shards a table splits its keys over (a power of two).
pub(crate) const SHARDS: usize = 32;

/// A shard sweeps no sooner than at this many keys: below it, forgettable values cost less
/// to keep than to sweep for.
pub(crate) const SWEEP_FLOOR: usize = 64;

/// A value per key, in [`SHARDS`] shards (see the module's docs); each shard also holds an
/// `X` of the limiter's own beside its lock (a waiters' event, a bound on its values).
pub(crate) struct ShardedTable<K, V, X> {
    shards: [Shard<K, V, X>; SHARDS],
}

/// One shard, on its own cache lines so that threads on different shards do not share one.
#[repr(align(128))]
pub(crate) struct Shard<K, V, X> {
    table: RwLock<Table<K, V>>,
    /// The limiter's own, beside the lock.
    pub(crate) extra: X,
}

/// The values of one shard.
pub(crate) struct Table<K, V> {
    values: HashMap<Entry<K>, V, StoredHash>,
    /// How many values the last sweep left: the next sweeps when the table doubles.
    swept_len: usize,
}

impl<K, V, X> ShardedTable<K, V, X> {
    /// A table of these shards (each made by [`Shard::new`]: a `const` array, so a keyed
    /// limiter can be a `static`).
    pub(crate) const fn new(shards: [Shard<K, V, X>; SHARDS]) -> Self {
        Self { shards }
    }

    /// The shard of a key whose hash ([`hash_of`]) is `hash`.
    #[inline]
    pub(crate) fn shard(&self, hash: u64) -> &Shard<K, V, X> {
        &self.shards[shard_of(hash)]
    }

    /// How many values the table holds.
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|shard| shard.read().len()).sum()
    }

    /// Room the shards hold, in values: the memory they keep.
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| shard.read().values.capacity())
            .sum()
    }
}

impl<K, V, X> Shard<K, V, X> {
    pub(crate) const fn new(extra: X) -> Self {
        Self {
            table: RwLock::new(Table {
                values: HashMap::with_hasher(StoredHash),
                swept_len: 0,
            }),
            extra,
        }
    }

    // A panic inside a critical section (user code: `Hash`, `Eq`, `ToOwned`) runs before
    // anything changes, so a poisoned table is still a consistent one.

    /// The shard's values, shared with other readers.
    #[inline]
    pub(crate) fn read(&self) -> RwLockReadGuard<'_, Table<K, V>> {
        self.table
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The shard's values, to change.
    #[inline]
    pub(crate) fn write(&self) -> RwLockWriteGuard<'_, Table<K, V>> {
        self.table
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl<K, V> Table<K, V> {
    /// How many values the shard holds.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.values.len()
    }

    /// Drops every value and gives the memory back.
    #[cold]
    pub(crate) fn forget_all(&mut self) {
        // A fresh map rather than `clear`: the point is to give the memory back.
        self.values = HashMap::with_hasher(StoredHash);
        self.swept_len = 0;
    }
}

impl<K: Hash + Eq, V> Table<K, V> {
    /// The value of the key (`hash`, `key`).
    #[inline]
    pub(crate) fn get<Q>(&self, hash: u64, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        self.values.get(&Probe { hash, key } as &dyn Lookup<Q>)
    }

    /// The value of the key (`hash`, `key`), to change.
    #[inline]
    pub(crate) fn get_mut<Q>(&mut self, hash: u64, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        self.values.get_mut(&Probe { hash, key } as &dyn Lookup<Q>)
    }

    /// Inserts `value` for the key (`hash`, `key`), which the table does not hold, sweeping
    /// first the values `forgettable` says decide like fresh ones if the table has doubled
    /// since its last sweep; returns the value inserted.
    pub(crate) fn insert<Q>(
        &mut self,
        hash: u64,
        key: &Q,
        value: V,
        forgettable: impl FnMut(&mut V) -> bool,
    ) -> &mut V
    where
        K: Borrow<Q>,
        Q: Eq + ToOwned<Owned = K> + ?Sized,
    {
        let len = self.values.len();
        if len >= SWEEP_FLOOR && len >= 2 * self.swept_len {
            self.sweep(forgettable);
        }
        self.values
            .entry(Entry {
                hash,
                key: key.to_owned(),
            })
            .or_insert(value)
    }

    /// Drops the value of the key (`hash`, `key`).
    pub(crate) fn remove<Q>(&mut self, hash: u64, key: &Q)
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        self.values.remove(&Probe { hash, key } as &dyn Lookup<Q>);
    }

    /// Drops the forgettable values, and the memory they took once the table is mostly
    /// empty.
    #[cold]
    fn sweep(&mut self, mut forgettable: impl FnMut(&mut V) -> bool) {
        self.values.retain(|_, value| !forgettable(value));
        let len = self.values.len();
        self.swept_len = len;
        let keep = (2 * len).max(SWEEP_FLOOR);
        if self.values.capacity() > 2 * keep {
            self.values.shrink_to(keep);
        }
    }
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
/// whoever feeds a crawler its links cannot pile up in one bucket or one shard).
static KEY_HASHER: LazyLock<RandomState> = LazyLock::new(RandomState::new);

/// The table's hasher: the stored hash, as is (it was computed with [`KEY_HASHER`]).
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
        unreachable!("a sharded table hashes only stored hashes");
    }
    fn write_u64(&mut self, hash: u64) {
        self.0 = hash;
    }
}

/// The hash of `key`, computed once per call and handed to the table with it.
#[inline]
pub(crate) fn hash_of<Q: Hash + ?Sized>(key: &Q) -> u64 {
    KEY_HASHER.hash_one(key)
}

/// The shard of `hash`: bits the map does not use (it takes the low bits for the bucket
/// and the top seven as tags, so taking the top bits here would blunt its tags).
#[inline]
pub(crate) fn shard_of(hash: u64) -> usize {
    (hash >> 40) as usize % SHARDS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shard_bits_are_not_the_maps_tag_bits() {
        // The map tags entries with the hash's top 7 bits: the shard must not fix them.
        for hash in [0u64, u64::MAX, 1 << 63, 0x7f << 57] {
            assert_eq!(shard_of(hash), shard_of(hash ^ (0x7f << 57)));
        }
    }

    #[test]
    fn an_insert_into_a_doubled_shard_sweeps_the_forgettable_values() {
        let table: ShardedTable<String, u32, ()> =
            ShardedTable::new([const { Shard::new(()) }; SHARDS]);
        // Every key in one shard, so its sweeps are seen.
        let hash = |i: u32| u64::from(i) & 0xff; // shard 0 (bits 40 and up are 0)
        let shard = table.shard(0);
        for i in 0..SWEEP_FLOOR as u32 {
            let key = i.to_string();
            let mut values = shard.write();
            assert!(values.get(hash(i), key.as_str()).is_none());
            values.insert(hash(i), key.as_str(), i, |_| {
                unreachable!("no sweep below the floor")
            });
        }
        // At the floor and twice the last sweep (0): the next insert sweeps the odd values.
        let mut values = shard.write();
        let mut swept = 0;
        values.insert(hash(1000), "1000", 1000, |value| {
            swept += 1;
            *value % 2 == 1
        });
        assert_eq!(swept, SWEEP_FLOOR, "every value was asked");
        assert_eq!(values.len(), SWEEP_FLOOR / 2 + 1);
        assert_eq!(values.get(hash(2), "2"), Some(&2));
        assert_eq!(values.get(hash(3), "3"), None, "forgotten");
        *values.get_mut(hash(2), "2").unwrap() = 7;
        values.remove(hash(2), "2");
        assert_eq!(values.get(hash(2), "2"), None);
        drop(values);
        assert_eq!(table.len(), SWEEP_FLOOR / 2);
        shard.write().forget_all();
        assert_eq!(table.len(), 0);
        assert_eq!(table.capacity(), 0, "the memory given back");
    }
}
