//! [`KeyTable`]: the scheduler's keys and their entries, in a table of small indices and
//! a slab of entries.
//!
//! A hash table keeps spare room to stay fast (up to half its slots empty after it
//! doubles), and a crawl keeps one entry per host it saw within the last minute: with the
//! entries in the table, every spare slot costs a whole entry. Here the table holds only
//! each key and the index of its entry (a few words), and the entries live in a slab that
//! grows by a sixteenth at a time ([`GROWTH`]). A key that leaves leaves its entry in the
//! slab, emptied ([`Recycle::vacate`]); the next new key takes that slot and renews the
//! entry in place: keys that come and go cost no allocation and no move of a whole entry.
//!
//! A part of the scheduler that keeps state for every key (an adaptive map's adaptation, a
//! map's breakers) keeps it in a [`Column`]: a row per slot of the slab, grown with it, so
//! no key costs an allocation per part, and a map without the part pays nothing per key.
//!
//! Invariants: every index in the table names a slot whose entry is its key's, and every
//! slot is named by exactly one key or listed once in `free` (its entry vacated).

use std::borrow::Borrow;
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::hash::Hash;
use std::ops::{Index, IndexMut};

/// The slab (and every column beside it) grows by this share of its slots (a sixteenth),
/// and at least [`MIN_GROWTH`]: its spare room stays within a sixteenth of the entries it
/// holds. A crawl's kept hosts are most of its memory, and growing moves each entry about
/// sixteen times over its life (a large slab's growth is mostly a remap of its pages).
const GROWTH: usize = 16;

/// The fewest slots the slab grows by.
const MIN_GROWTH: usize = 64;

/// An entry a slab can empty when its key leaves and renew for the next key.
pub(super) trait Recycle {
    /// Drops what the entry holds that a new key's would not reuse.
    fn vacate(&mut self);
}

/// Keys and their entries (see the module's docs).
#[derive(Debug)]
pub(super) struct KeyTable<K, V> {
    /// Each key and the index of its entry.
    index: HashMap<K, u32>,
    /// The entries, of keys in the table or vacated.
    slab: Vec<V>,
    /// Slots whose entry is vacated, taken before new ones.
    free: Vec<u32>,
}

impl<K, V: Recycle> KeyTable<K, V> {
    pub(super) fn new() -> Self {
        Self {
            index: HashMap::new(),
            slab: Vec::new(),
            free: Vec::new(),
        }
    }

    /// How many keys the table holds.
    pub(super) fn len(&self) -> usize {
        self.index.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Forgets every key and entry.
    pub(super) fn clear(&mut self) {
        self.index.clear();
        self.slab.clear();
        self.free.clear();
    }

    /// The entry in slot `at` (an index [`find_or_insert_with`](Self::find_or_insert_with)
    /// gave: it stays while its key does, whatever else comes and goes).
    #[inline(always)]
    pub(super) fn at_mut(&mut self, at: u32) -> &mut V {
        &mut self.slab[at as usize]
    }

    /// Calls `f` on every key's entry.
    pub(super) fn for_each_mut(&mut self, mut f: impl FnMut(&mut V)) {
        for &at in self.index.values() {
            f(&mut self.slab[at as usize]);
        }
    }
}

impl<K: Hash + Eq, V: Recycle> KeyTable<K, V> {
    #[inline]
    pub(super) fn get<Q: Hash + Eq + ?Sized>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
    {
        let &at = self.index.get(key)?;
        Some(&self.slab[at as usize])
    }

    #[inline]
    pub(super) fn get_mut<Q: Hash + Eq + ?Sized>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
    {
        let &at = self.index.get(key)?;
        Some(&mut self.slab[at as usize])
    }

    pub(super) fn contains_key(&self, key: &K) -> bool {
        self.index.contains_key(key)
    }

    /// `key` and the slot of its entry; if the key is new, its entry made by `make` or, in
    /// a slot a key left, renewed by `renew`, from what `seed` says of the key (each also
    /// told the slot); whether it is new beside them.
    #[inline]
    pub(super) fn find_or_insert_with<S>(
        &mut self,
        key: K,
        seed: impl FnOnce(&K) -> S,
        make: impl FnOnce(S, u32) -> V,
        renew: impl FnOnce(S, u32, &mut V),
    ) -> (K, u32, bool)
    where
        K: Clone,
    {
        let Self { index, slab, free } = self;
        match index.entry(key) {
            Entry::Occupied(occupied) => (occupied.key().clone(), *occupied.get(), false),
            Entry::Vacant(vacant) => {
                let seed = seed(vacant.key());
                let at = if let Some(at) = free.pop() {
                    renew(seed, at, &mut slab[at as usize]);
                    at
                } else {
                    let at = u32::try_from(slab.len())
                        .expect("tollgate: more than 4 billion keys at once");
                    push(slab, make(seed, at));
                    at
                };
                let key = vacant.key().clone();
                vacant.insert(at);
                (key, at, true)
            }
        }
    }

    /// Removes `key`, vacating its entry for the next new key; whether it was there.
    pub(super) fn remove(&mut self, key: &K) -> bool {
        let Some(at) = self.index.remove(key) else {
            return false;
        };
        self.slab[at as usize].vacate();
        self.free.push(at);
        true
    }

    /// Keeps the keys `keep` says to keep (it may change their entries).
    pub(super) fn retain(&mut self, mut keep: impl FnMut(&K, &mut V) -> bool) {
        let Self { index, slab, free } = self;
        index.retain(|key, &mut at| {
            let entry = &mut slab[at as usize];
            let kept = keep(key, entry);
            if !kept {
                entry.vacate();
                free.push(at);
            }
            kept
        });
    }

    /// Every key.
    pub(super) fn keys(&self) -> impl Iterator<Item = &K> {
        self.index.keys()
    }

    /// Every key and its entry.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.index
            .iter()
            .map(|(key, &at)| (key, &self.slab[at as usize]))
    }
}

impl<K: Hash + Eq, V: Recycle> Index<&K> for KeyTable<K, V> {
    type Output = V;

    fn index(&self, key: &K) -> &V {
        self.get(key).expect("a key of the table")
    }
}

/// Pushes `value` on `rows`, growing it by a sixteenth when full (see [`GROWTH`]).
#[inline]
fn push<V>(rows: &mut Vec<V>, value: V) {
    if rows.len() == rows.capacity() {
        rows.reserve_exact((rows.len() / GROWTH).max(MIN_GROWTH));
    }
    rows.push(value);
}

/// A part's state for every key: a row per slot of a [`KeyTable`]'s slab, read and written
/// at the slot the key's entry names. A row is set ([`put`](Self::put)) when its key is
/// made, the slot's row of the key before it replaced; the column grows as the slab does.
#[derive(Debug)]
pub(super) struct Column<S> {
    rows: Vec<S>,
}

impl<S> Column<S> {
    pub(super) const fn new() -> Self {
        Self { rows: Vec::new() }
    }

    /// Sets the row of slot `at`, a slot the slab holds (so at most one past the rows:
    /// the slab makes its slots one at a time, and every key made gets its row).
    #[inline]
    pub(super) fn put(&mut self, at: u32, row: S) {
        let at = at as usize;
        if at < self.rows.len() {
            self.rows[at] = row;
        } else {
            assert_eq!(
                at,
                self.rows.len(),
                "a column's rows follow the slab's slots"
            );
            push(&mut self.rows, row);
        }
    }

    /// Forgets every row (the slab was cleared).
    pub(super) fn clear(&mut self) {
        self.rows.clear();
    }
}

impl<S> Index<u32> for Column<S> {
    type Output = S;

    #[inline(always)]
    fn index(&self, at: u32) -> &S {
        &self.rows[at as usize]
    }
}

impl<S> IndexMut<u32> for Column<S> {
    #[inline(always)]
    fn index_mut(&mut self, at: u32) -> &mut S {
        &mut self.rows[at as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An entry that counts its renewals and knows whether it was vacated.
    #[derive(Debug, PartialEq)]
    struct Entry {
        value: u32,
        slot: u32,
        vacated: bool,
    }

    impl Recycle for Entry {
        fn vacate(&mut self) {
            self.vacated = true;
        }
    }

    fn seed(key: &u32) -> u32 {
        key * 10
    }

    fn make(value: u32, slot: u32) -> Entry {
        Entry {
            value,
            slot,
            vacated: false,
        }
    }

    fn renew(value: u32, slot: u32, entry: &mut Entry) {
        assert!(entry.vacated, "only a vacated entry is renewed");
        assert_eq!(entry.slot, slot, "renewed in its own slot");
        *entry = make(value, slot);
    }

    #[test]
    fn entries_are_found_removed_and_their_slots_renewed_in_place() {
        let mut table = KeyTable::new();
        // A part's column beside the slab: each key's row at its entry's slot.
        let mut column = Column::new();
        for key in 0..3000u32 {
            let (_, at, new) = table.find_or_insert_with(key, seed, make, renew);
            assert!(new);
            assert_eq!(table.at_mut(at).value, key * 10);
            assert_eq!(table.at_mut(at).slot, at);
            column.put(at, key);
        }
        assert_eq!(table.len(), 3000);
        let room = table.slab.capacity();
        assert!(
            room <= 3000 + 3000 / GROWTH + MIN_GROWTH,
            "spare room {room}"
        );
        let (_, at, new) = table.find_or_insert_with(7, seed, make, renew);
        assert!(!new, "a known key keeps its entry");
        assert_eq!(table.at_mut(at).value, 70);
        assert!(table.remove(&7));
        assert!(!table.remove(&7));
        assert_eq!(table.get(&7), None);
        table.retain(|key, entry| {
            entry.value += 1;
            key % 2 == 0
        });
        assert_eq!(table.len(), 1500, "the even keys");
        assert_eq!(table.get(&8).map(|entry| entry.value), Some(81));
        assert_eq!(table[&2998].value, 29_981);
        // The 1,500 vacated slots are renewed before new ones are made.
        for key in 10_000..11_500u32 {
            let (_, at, _) = table.find_or_insert_with(key, seed, make, renew);
            column.put(at, key);
        }
        assert_eq!(table.slab.len(), 3000);
        assert_eq!(
            column.rows.len(),
            3000,
            "the column grew with the slab only"
        );
        for (key, entry) in table.iter() {
            assert_eq!(column[entry.slot], *key, "each key's row at its slot");
        }
        assert_eq!(table.len(), 3000);
        assert_eq!(table.iter().count(), 3000);
        let mut seen = 0;
        table.for_each_mut(|entry| {
            assert!(!entry.vacated);
            seen += 1;
        });
        assert_eq!(seen, 3000);
        assert!(table.keys().all(|key| table.contains_key(key)));
        table.clear();
        assert!(table.is_empty());
        assert_eq!(table.get(&8), None);
    }
}
