//! Admission for keyed work: which pulled item may start next.
//!
//! Pure bookkeeping, no futures: the keyed map queues every pulled item here and asks what
//! to start whenever a global slot is free. Items wait in their key's queue, holding no
//! global slot, until their key has room. Keys with waiting items and room take turns
//! (round robin), so no key starves while others have work, and within a key items start
//! in the order they were pulled.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

#[derive(Debug)]
struct KeyState<T> {
    running: usize,
    waiting: VecDeque<T>,
    /// Whether the key is in `KeyScheduler::turns`, so it is queued there at most once.
    has_turn: bool,
}

/// Per-key caps over a stream of pulled items.
#[derive(Debug)]
pub(crate) struct KeyScheduler<K, T> {
    per_key: usize,
    /// Only keys with running or waiting items: the map never outgrows the work in hand.
    keys: HashMap<K, KeyState<T>>,
    /// Keys that have waiting items and room to start one, in the order they get a turn.
    turns: VecDeque<K>,
    waiting: usize,
}

impl<K, T> KeyScheduler<K, T> {
    /// Items pulled but not started, over all keys.
    pub(crate) fn waiting(&self) -> usize {
        self.waiting
    }

    /// Keys with running or waiting items.
    pub(crate) fn active_keys(&self) -> usize {
        self.keys.len()
    }

    /// The most items of one key that may run at once.
    pub(crate) fn per_key(&self) -> usize {
        self.per_key
    }

    /// Forgets every key, waiting item and running count (the running work was dropped).
    pub(crate) fn clear(&mut self) {
        self.keys.clear();
        self.turns.clear();
        self.waiting = 0;
    }
}

impl<K: Hash + Eq + Clone, T> KeyScheduler<K, T> {
    pub(crate) fn new(per_key: usize) -> Self {
        Self {
            per_key,
            keys: HashMap::new(),
            turns: VecDeque::new(),
            waiting: 0,
        }
    }

    /// Queues a freshly pulled item behind the older items of its key. If the key has
    /// room, it joins the line of keys waiting for a global slot.
    pub(crate) fn push(&mut self, key: K, item: T) {
        let (key, state) = match self.keys.entry(key) {
            Entry::Occupied(occupied) => (occupied.key().clone(), occupied.into_mut()),
            Entry::Vacant(vacant) => {
                let key = vacant.key().clone();
                let state = vacant.insert(KeyState {
                    running: 0,
                    waiting: VecDeque::new(),
                    has_turn: false,
                });
                (key, state)
            }
        };
        state.waiting.push_back(item);
        self.waiting += 1;
        if !state.has_turn && state.running < self.per_key {
            state.has_turn = true;
            self.turns.push_back(key);
        }
    }

    /// The oldest waiting item of the key whose turn it is, counted as running.
    pub(crate) fn next(&mut self) -> Option<(K, T)> {
        let key = self.turns.pop_front()?;
        let state = self
            .keys
            .get_mut(&key)
            .expect("a key with a turn has state");
        let item = state
            .waiting
            .pop_front()
            .expect("a key with a turn has a waiting item");
        self.waiting -= 1;
        state.running += 1;
        if state.running < self.per_key && !state.waiting.is_empty() {
            // Still room and work: back of the line, so other keys go first.
            self.turns.push_back(key.clone());
        } else {
            state.has_turn = false;
        }
        Some((key, item))
    }

    /// Records that an item of `key` finished, freeing room for the key's next one.
    pub(crate) fn finish(&mut self, key: &K) {
        let state = self.keys.get_mut(key).expect("a running key has state");
        state.running -= 1;
        if state.waiting.is_empty() {
            // No waiting item, so no turn to take either.
            if state.running == 0 {
                self.keys.remove(key);
            }
        } else if !state.has_turn {
            state.has_turn = true;
            self.turns.push_back(key.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain<K: Hash + Eq + Clone, T>(scheduler: &mut KeyScheduler<K, T>) -> Vec<(K, T)> {
        std::iter::from_fn(|| scheduler.next()).collect()
    }

    #[test]
    fn a_full_key_waits_while_others_start() {
        let mut scheduler = KeyScheduler::new(2);
        for (key, item) in [("a", 1), ("a", 2), ("a", 3), ("b", 4)] {
            scheduler.push(key, item);
        }
        assert_eq!(drain(&mut scheduler), [("a", 1), ("b", 4), ("a", 2)]);
        assert_eq!(scheduler.waiting(), 1, "a is full");
        scheduler.finish(&"a");
        assert_eq!(drain(&mut scheduler), [("a", 3)]);
        assert_eq!(scheduler.waiting(), 0);
    }

    #[test]
    fn a_running_key_with_room_gets_a_turn_for_its_next_item() {
        let mut scheduler = KeyScheduler::new(2);
        scheduler.push("a", 1);
        assert_eq!(drain(&mut scheduler), [("a", 1)]);
        // "a" runs one of two: its next item may start at once, without a finish first.
        scheduler.push("a", 2);
        assert_eq!(drain(&mut scheduler), [("a", 2)]);
        scheduler.push("a", 3);
        assert!(drain(&mut scheduler).is_empty(), "a is full now");
    }

    #[test]
    fn order_within_a_key_is_kept() {
        let mut scheduler = KeyScheduler::new(1);
        scheduler.push("a", 1);
        scheduler.push("a", 2);
        assert_eq!(drain(&mut scheduler), [("a", 1)]);
        scheduler.push("a", 3);
        scheduler.finish(&"a");
        assert_eq!(drain(&mut scheduler), [("a", 2)]);
        scheduler.finish(&"a");
        assert_eq!(drain(&mut scheduler), [("a", 3)]);
    }

    #[test]
    fn keys_take_turns_even_when_sorted() {
        let mut scheduler = KeyScheduler::new(2);
        for key in ["a", "b", "c"] {
            for item in 0..4 {
                scheduler.push(key, item);
            }
        }
        // Take one start at a time, as a global limit of 1 would.
        let mut order = Vec::new();
        while let Some((key, _)) = scheduler.next() {
            order.push(key);
            scheduler.finish(&key);
        }
        assert_eq!(
            order,
            ["a", "b", "c", "a", "b", "c", "a", "b", "c", "a", "b", "c"]
        );
    }

    #[test]
    fn idle_keys_are_forgotten() {
        let mut scheduler = KeyScheduler::new(1);
        for key in 0..1000 {
            scheduler.push(key, ());
            assert!(scheduler.next().is_some());
            scheduler.finish(&key);
        }
        assert_eq!(scheduler.active_keys(), 0);
        assert!(scheduler.turns.is_empty());
    }
}
