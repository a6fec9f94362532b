//! `rendezvous_slot`: a fleet of processes kept polite without shared state, by giving
//! each key to one process (highest-random-weight hashing), so the in-process per-key
//! limits are exact for the whole fleet.
//!
//! The hash is written here with fixed constants (FNV-1a over the key's bytes, then a
//! 64-bit finaliser mixing in the slot) so every process, machine, platform and Rust
//! release maps a key to the same slot; std's `DefaultHasher` promises no such thing.

/// The slot in `0..slots` that owns `key`, the same in every process and on every
/// machine.
///
/// Rendezvous (highest-random-weight) hashing: each slot gets a pseudo-random weight for
/// the key and the highest wins. Keys spread evenly over the slots, and changing the
/// number of slots from `n` to `n + 1` moves only the keys the new slot wins (about one
/// in `n + 1`); removing a slot moves only the keys it owned. The cost is O(`slots`) per
/// call, meant for tens or hundreds of workers.
///
/// Run S worker processes, worker `i` keeping the items whose key maps to `i`: each key
/// then has one worker, and a map's `.per_key` caps and `.per_key_rate` rates are exact for
/// the whole fleet. (The other way, any worker on any key with the limits kept in Redis, is
/// the `tollgate-redis` crate.)
///
/// # Examples
///
/// ```
/// use tollgate::rendezvous_slot;
///
/// let workers = 4;
/// let me = 2;
/// let urls = ["https://a.example/1", "https://b.example/2", "https://c.example/3"];
/// let mine: Vec<_> = urls
///     .iter()
///     .filter(|url| {
///         let host = url.split('/').nth(2).unwrap();
///         rendezvous_slot(host, workers) == me
///     })
///     .collect();
/// assert!(mine.len() <= urls.len());
/// assert_eq!(rendezvous_slot("a.example", workers), rendezvous_slot("a.example", workers));
/// ```
///
/// # Panics
///
/// If `slots` is 0.
#[track_caller]
pub fn rendezvous_slot(key: impl AsRef<[u8]>, slots: usize) -> usize {
    assert!(
        slots > 0,
        "tollgate: rendezvous_slot needs at least one slot"
    );
    let key = fnv1a(key.as_ref());
    let mut best = (0, 0);
    for slot in 0..slots {
        let weight = mix(key ^ mix(slot as u64 ^ 0x9e37_79b9_7f4a_7c15));
        // Ties (vanishingly rare) go to the lower slot, so the answer is still fixed.
        if slot == 0 || weight > best.1 {
            best = (slot, weight);
        }
    }
    best.0
}

/// FNV-1a, 64 bits.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &byte in bytes {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// The 64-bit finaliser of MurmurHash3 (`fmix64`): every input bit moves every output bit,
/// which FNV alone does not do well for the high bits.
fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^= x >> 33;
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_matches_the_published_test_vectors() {
        // From the FNV reference test suite.
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn a_key_keeps_its_slot_across_releases() {
        // Pinned values, computed by an independent implementation of the same definition
        // (a few lines of Python): if these change, fleets running two versions would
        // disagree on who owns a key.
        let keys = [
            "example.com",
            "a.example",
            "b.example",
            "",
            "ünïcode.example",
        ];
        let seven: Vec<usize> = keys.iter().map(|key| rendezvous_slot(key, 7)).collect();
        assert_eq!(seven, [0, 1, 5, 1, 1]);
        let hundred: Vec<usize> = keys.iter().map(|key| rendezvous_slot(key, 100)).collect();
        assert_eq!(hundred, [28, 17, 57, 79, 49]);
        let four: Vec<usize> = (0..16)
            .map(|i| rendezvous_slot(format!("host-{i}.example"), 4))
            .collect();
        assert_eq!(four, [1, 1, 1, 3, 0, 1, 3, 2, 1, 3, 2, 0, 0, 0, 0, 1]);
    }

    #[test]
    fn keys_spread_evenly_over_the_slots() {
        for slots in [2, 3, 8, 13] {
            let mut counts = vec![0usize; slots];
            let keys = 20_000;
            for i in 0..keys {
                counts[rendezvous_slot(format!("host-{i}.example"), slots)] += 1;
            }
            let mean = keys / slots;
            for (slot, &count) in counts.iter().enumerate() {
                assert!(
                    count.abs_diff(mean) * 100 <= mean * 6,
                    "slot {slot} of {slots} got {count} keys, mean {mean}: {counts:?}"
                );
            }
        }
    }

    #[test]
    fn adding_a_slot_moves_only_the_keys_it_wins() {
        let mut moved = 0;
        let keys = 10_000;
        for i in 0..keys {
            let key = format!("host-{i}.example");
            let (before, after) = (rendezvous_slot(&key, 8), rendezvous_slot(&key, 9));
            if before != after {
                assert_eq!(after, 8, "{key} moved from {before} to an old slot {after}");
                moved += 1;
            }
        }
        // About one key in 9 moves to the new slot.
        assert!(
            (800..1_400).contains(&moved),
            "{moved} of {keys} keys moved"
        );
    }

    #[test]
    fn one_slot_owns_every_key() {
        assert_eq!(rendezvous_slot("anything", 1), 0);
    }

    #[test]
    #[should_panic(expected = "at least one slot")]
    fn zero_slots_panics() {
        rendezvous_slot("anything", 0);
    }
}
