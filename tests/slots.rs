//! How a keyed map shares its global slots among keys (`SlotPolicy`), on virtual time
//! (`virtual_time!`: `run_virtual` and tokio's paused clock), where an attempt takes exactly
//! its latency and the verdicts cannot depend on the machine's load.
//!
//! The two guarantees of slot time, with `L` the global limit, `n` the keys that may start,
//! `d` attempt latencies, `c` a start's charge (its latency times the key's attempts in
//! flight: for a key one at a time, its latency) and `B` the slot time a key may keep to
//! catch up on (1 s):
//!
//! - no key that may start waits longer than `d_max + (n − 1) × (c_k + B + c_max) / L`: one
//!   slow key among a thousand fast ones, and one fast key among a thousand slow ones (which
//!   ends its work in the first half of the crawl, where turns would keep it to the end);
//! - over a stretch in which every key may start, no key's attempts hold more slot time than
//!   its share `L × T / n` plus `d_k + d_max + B`: a hot key whose attempts take ten times as
//!   long as the others' holds no more than its share, where plain turns give it more than
//!   half the slots (shown too).

mod common;

use std::cell::RefCell;
use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::virtual_time;
use futures_lite::{StreamExt, stream};
use tollgate::testing::now;
use tollgate::{Adaptive, BoundedStreamExt, Outcome, SlotPolicy, sleep};

/// One attempt as the server saw it: its key, when it started and ended.
#[derive(Debug, Clone, Copy)]
struct Attempt {
    key: u32,
    start: Instant,
    end: Instant,
}

/// Crawls `items` keys' items (`items[k]` of key `k`, whose attempts take `latency(k)`),
/// interleaved, with a global limit of `limit`, each key `per_key` at a time (an adaptive
/// map whose keys' limits cannot move: floor and ceiling `per_key`, no rate), sharing the
/// slots by `policy`; every item is pulled at once. Returns every attempt and the start.
async fn crawl(
    items: &[u32],
    latency: impl Fn(u32) -> Duration,
    limit: usize,
    per_key: usize,
    policy: SlotPolicy,
) -> (Vec<Attempt>, Instant) {
    let most = items.iter().copied().max().unwrap_or(0);
    let input: Vec<u32> = (0..most)
        .flat_map(|i| (0..items.len() as u32).filter(move |&k| items[k as usize] > i))
        .collect();
    let total = input.len();
    let attempts = RefCell::new(Vec::with_capacity(total));
    let begin = now();
    let outputs = stream::iter(input)
        .map_unordered(limit, |key| {
            let (attempts, latency) = (&attempts, &latency);
            async move {
                let start = now();
                sleep(latency(key)).await;
                attempts.borrow_mut().push(Attempt {
                    key,
                    start,
                    end: now(),
                });
                Ok::<u32, ()>(key)
            }
        })
        .window(total.max(limit))
        .per_key(|key| *key, per_key)
        .adaptive(Adaptive::new(per_key, per_key), |_| Outcome::success())
        .slot_policy(policy)
        .count()
        .await;
    assert_eq!(outputs, total, "every item once");
    (attempts.into_inner(), begin)
}

/// The longest time each key waited for a slot: from the start (every item pulled) to its
/// first attempt, and from each attempt's end to its next start (a key that may run one at
/// a time and has work may start again as soon as its attempt ends).
fn longest_waits(attempts: &[Attempt], begin: Instant) -> HashMap<u32, Duration> {
    let mut by_key: HashMap<u32, Vec<Attempt>> = HashMap::new();
    for attempt in attempts {
        by_key.entry(attempt.key).or_default().push(*attempt);
    }
    by_key
        .into_iter()
        .map(|(key, mut list)| {
            list.sort_by_key(|a| a.start);
            let mut free = begin;
            let mut longest = Duration::ZERO;
            for attempt in list {
                longest = longest.max(attempt.start - free);
                free = attempt.end;
            }
            (key, longest)
        })
        .collect()
}

/// The slot time a key may keep to catch up on.
const BANK: Duration = Duration::from_secs(1);

/// The wait bound of slot time for keys one at a time (a start's charge is its latency):
/// `d_max + (n − 1) × (d_k + B + d_max) / L`.
fn wait_bound(keys: usize, limit: usize, own: Duration, longest: Duration) -> Duration {
    longest + (own + BANK + longest) * (keys as u32 - 1) / limit as u32
}

const LIMIT: usize = 64;
const FAST: Duration = Duration::from_millis(10);
const SLOW: Duration = Duration::from_secs(1);

virtual_time! {
    async fn one_slow_key_among_a_thousand_fast_ones_waits_at_most_its_bound() {
        // Key 0 is slow; keys 1..=1000 fast; five items each, one at a time per key.
        let keys = 1_001;
        let latency = |key: u32| if key == 0 { SLOW } else { FAST };
        let (attempts, begin) = crawl(&vec![5; keys], latency, LIMIT, 1, SlotPolicy::SlotTime).await;
        let waits = longest_waits(&attempts, begin);
        let fast = waits.iter().filter(|(k, _)| **k != 0).map(|(_, w)| *w).max().unwrap();
        println!("longest waits: slow key {:?}, fast keys {fast:?}", waits[&0]);
        assert!(waits[&0] <= wait_bound(keys, LIMIT, SLOW, SLOW), "slow key: {:?}", waits[&0]);
        assert!(fast <= wait_bound(keys, LIMIT, FAST, SLOW), "a fast key: {fast:?}");
    }

    async fn one_fast_key_among_a_thousand_slow_ones_waits_at_most_its_bound() {
        // Key 0 is fast; keys 1..=1000 slow; five items each, the fast key fifty.
        let keys = 1_001;
        let latency = |key: u32| if key == 0 { FAST } else { SLOW };
        let mut items = vec![5; keys];
        items[0] = 50;
        let (attempts, begin) = crawl(&items, latency, LIMIT, 1, SlotPolicy::SlotTime).await;
        let waits = longest_waits(&attempts, begin);
        let slow = waits.iter().filter(|(k, _)| **k != 0).map(|(_, w)| *w).max().unwrap();
        // Once its first attempt taught the map its latency, the fast key waits for a slot
        // to free and little more: its fifty attempts end long before the slow keys' work.
        let fast_done = attempts.iter().filter(|a| a.key == 0).map(|a| a.end).max().unwrap();
        let slow_done = attempts.iter().map(|a| a.end).max().unwrap();
        println!(
            "longest waits: fast key {:?}, slow keys {slow:?}; the fast key done after {:?}, \
             the crawl after {:?}",
            waits[&0],
            fast_done - begin,
            slow_done - begin
        );
        assert!(waits[&0] <= wait_bound(keys, LIMIT, FAST, SLOW), "fast key: {:?}", waits[&0]);
        assert!(slow <= wait_bound(keys, LIMIT, SLOW, SLOW), "a slow key: {slow:?}");
        assert!(
            fast_done - begin < (slow_done - begin) / 2,
            "the fast key's work ended at {:?} of {:?}",
            fast_done - begin,
            slow_done - begin
        );
    }

    async fn a_hot_key_holds_no_more_than_its_share_of_slot_time_while_others_may_start() {
        let (share, turns) = hot_key_slot_time().await;
        let (limit, keys) = (LIMIT as f64, HOT_KEYS as f64);
        let span = (STRETCH.1 - STRETCH.0).as_secs_f64();
        let bound = limit * span / keys + (HOT + HOT + BANK).as_secs_f64();
        println!(
            "the hot key's slot time over {span} s: {share:.2} s with slot time, {turns:.2} s \
             with turns; its share {:.2} s, bound {bound:.2} s",
            limit * span / keys
        );
        assert!(share <= bound, "slot time: {share:.2} s over the bound {bound:.2} s");
        assert!(turns > bound, "turns give the hot key more: {turns:.2} s");
    }
}

/// Keys of the hot-key test: key 0 is hot (attempts of [`HOT`]), the others take [`FAST`].
const HOT_KEYS: usize = 10;
const HOT: Duration = Duration::from_millis(100);
/// The stretch the hot key's slot time is judged over (every key has work and room in
/// it), after the first attempts taught the map each key's latency.
const STRETCH: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(3));

/// The hot key's slot time over [`STRETCH`] in seconds, with slot time and with turns.
async fn hot_key_slot_time() -> (f64, f64) {
    let latency = |key: u32| if key == 0 { HOT } else { FAST };
    // Enough work that no key runs out before the stretch ends, and every key may run all
    // of the global limit (it always has room).
    let items = vec![3_000; HOT_KEYS];
    let mut held = Vec::new();
    for policy in [SlotPolicy::SlotTime, SlotPolicy::Turns] {
        let (attempts, begin) = crawl(&items, latency, LIMIT, LIMIT, policy).await;
        let (from, to) = (begin + STRETCH.0, begin + STRETCH.1);
        let busy_after = |key: u32| {
            attempts
                .iter()
                .filter(|a| a.key == key)
                .map(|a| a.end)
                .max()
                .unwrap()
        };
        for key in 0..HOT_KEYS as u32 {
            assert!(
                busy_after(key) > to,
                "key {key} ran out of work within the stretch"
            );
        }
        let slot_time: f64 = attempts
            .iter()
            .filter(|a| a.key == 0)
            .map(|a| {
                let (s, e) = (a.start.max(from), a.end.min(to));
                if e > s { (e - s).as_secs_f64() } else { 0.0 }
            })
            .sum();
        held.push(slot_time);
    }
    (held[0], held[1])
}
