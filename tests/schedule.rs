//! The scheduler knows time: rates (`.rate`, `.per_key_rate`), retries that give their
//! slots back (`.retry(RetryPolicy)`), pauses of a whole key, the retry budget, and the
//! window that grows for hot keys.
//!
//! When things start is proven on virtual time (`virtual_time!`: `run_virtual` and tokio's
//! paused clock), where timers fire exactly at their deadlines: each key's starts exactly
//! at its rate, the map's rate across keys, an item waiting for its key's rate or retry
//! holding no slot (the others start at once, it starts exactly when due), a server's
//! `Retry-After` and a key's pause taken exactly. Under every executor (smol, `run_sync`,
//! tokio current and multi-thread), what holds at any speed: every item done once, no start
//! ahead of a rate or before a pause is over, caps never exceeded, attempts that add up, a
//! hot key that does not starve the others.
//!
//! Pins: a `retry` inside a map's function held its global and per-key slots through
//! every pause; a hot key at the head of the input kept the other keys from starting
//! until its backlog drained below the window.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{matrix, virtual_time};
use futures_lite::future::yield_now;
use futures_lite::{StreamExt, stream};
use tollgate::testing::now;
use tollgate::{BoundedStreamExt, Rate, RetryPolicy, map_async, sleep, try_map_async};

const MS: Duration = Duration::from_millis(1);

/// When each item started, by key, after the beginning (when this was made).
#[derive(Clone)]
struct Starts {
    begin: Instant,
    log: Arc<Mutex<Vec<(u32, Duration)>>>,
}

impl Starts {
    fn new() -> Self {
        Self {
            begin: now(),
            log: Arc::default(),
        }
    }

    fn record(&self, key: u32) {
        self.log.lock().unwrap().push((key, now() - self.begin));
    }

    fn of(&self, key: u32) -> Vec<Duration> {
        let starts = self.log.lock().unwrap();
        starts
            .iter()
            .filter(|(k, _)| *k == key)
            .map(|(_, at)| *at)
            .collect()
    }

    fn all(&self) -> Vec<(u32, Duration)> {
        self.log.lock().unwrap().clone()
    }

    fn keys_in_order(&self) -> Vec<u32> {
        self.log
            .lock()
            .unwrap()
            .iter()
            .map(|(key, _)| *key)
            .collect()
    }
}

/// No start came ahead of `rate` (one at a time): the `n`th start (from 0) is at least `n`
/// intervals after the beginning. Exact at any speed: a start is recorded no earlier than
/// the scheduler allowed it.
fn assert_never_ahead(starts: &[Duration], rate: Rate) {
    let mut starts = starts.to_vec();
    starts.sort();
    for (n, at) in starts.iter().enumerate() {
        assert!(
            *at >= rate.interval() * n as u32,
            "start {n} at {at:?}, ahead of {rate:?}"
        );
    }
}

/// In-flight counts per key (now, peak), and over all keys (now, peak).
#[derive(Default)]
struct Counts {
    per_key: HashMap<u32, (usize, usize)>,
    all: (usize, usize),
}

#[derive(Default, Clone)]
struct Flight(Arc<Mutex<Counts>>);

impl Flight {
    fn enter(&self, key: u32) -> FlightGuard {
        let mut counts = self.0.lock().unwrap();
        let entry = counts.per_key.entry(key).or_default();
        entry.0 += 1;
        entry.1 = entry.1.max(entry.0);
        counts.all.0 += 1;
        counts.all.1 = counts.all.1.max(counts.all.0);
        FlightGuard(self.clone(), key)
    }

    fn peak_of(&self, key: u32) -> usize {
        self.0
            .lock()
            .unwrap()
            .per_key
            .get(&key)
            .map_or(0, |entry| entry.1)
    }

    fn peak(&self) -> usize {
        self.0.lock().unwrap().all.1
    }
}

struct FlightGuard(Flight, u32);

impl Drop for FlightGuard {
    fn drop(&mut self) {
        let mut counts = (self.0).0.lock().unwrap();
        counts.per_key.get_mut(&self.1).unwrap().0 -= 1;
        counts.all.0 -= 1;
    }
}

/// Three keys of four items each at 50/s per key.
async fn three_keys_at_a_per_key_rate() -> Starts {
    let starts = Starts::new();
    let items: Vec<(u32, u32)> = (0..3)
        .flat_map(|key| (0..4).map(move |i| (key, i)))
        .collect();
    let out = map_async(items, 8, |(key, i)| {
        starts.record(key);
        async move { (key, i) }
    })
    .per_key(|(key, _)| *key, 8)
    .per_key_rate(Rate::per_second(50))
    .await;
    assert_eq!(out.len(), 12);
    starts
}

/// One global slot; each key may start one item per 150 ms. Key 0's second item waits for
/// its time while keys 1, 2 and 3 use the slot.
async fn one_slot_and_a_key_waiting_for_its_rate() -> Starts {
    let starts = Starts::new();
    let items = [(0, 0), (0, 1), (1, 0), (2, 0), (3, 0)];
    map_async(items, 1, |(key, _)| {
        starts.record(key);
        async { yield_now().await }
    })
    .per_key(|(key, _)| *key, 1)
    .per_key_rate(Rate::every(150 * MS))
    .await;
    starts
}

/// Ten items over five keys, under the map's rate of 100/s (all starts under key 0).
async fn the_maps_rate_over_five_keys() -> Starts {
    let starts = Starts::new();
    let out = map_async(0..10u32, 10, |n| {
        starts.record(0);
        async move { n }
    })
    .per_key(|n| n % 5, 2)
    .rate(Rate::per_second(100))
    .await;
    assert_eq!(out, (0..10).collect::<Vec<_>>());
    starts
}

/// One global slot. Item 0 fails on its first attempt and comes back after 100 ms: items 1
/// and 2 use the slot meanwhile.
async fn a_retry_behind_one_slot() -> Starts {
    let starts = Starts::new();
    let failed_once = AtomicU32::new(0);
    let out = map_async(0..3u32, 1, |n| {
        starts.record(n);
        let fail = n == 0 && failed_once.fetch_add(1, SeqCst) == 0;
        async move {
            yield_now().await;
            if fail { Err("503") } else { Ok(n) }
        }
    })
    .retry(RetryPolicy::new().interval(100 * MS))
    .await;
    assert_eq!(out, [Ok(0), Ok(1), Ok(2)]);
    starts
}

/// An error whose `Retry-After` (120 ms) overrides the policy's minute: what the hook saw,
/// and how long the map took.
async fn retry_after_from_the_error() -> (Vec<(u32, u32, Duration)>, Duration) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let calls = AtomicU32::new(0);
    let begun = now();
    let hook_seen = seen.clone();
    let out = try_map_async([7u32], 1, |n| {
        let first = calls.fetch_add(1, SeqCst) == 0;
        async move { if first { Err(120 * MS) } else { Ok(n) } }
    })
    .retry(
        RetryPolicy::new()
            .interval(Duration::from_secs(60))
            .retry_after(|after: &Duration| Some(*after))
            .on_retry(move |event| {
                hook_seen.lock().unwrap().push((
                    *event.item(),
                    event.attempt_number(),
                    event.pause(),
                ));
            }),
    )
    .await;
    assert_eq!(out, Ok(vec![7]));
    let seen = seen.lock().unwrap().clone();
    (seen, now() - begun)
}

/// Key 0's first request gets "429, come back in 200 ms": no item of key 0 starts for
/// 200 ms; key 1 goes on. Returns the starts and when the retry hook ran.
async fn a_paused_key_beside_a_busy_one() -> (Starts, Duration) {
    let starts = Starts::new();
    let calls = AtomicU32::new(0);
    let paused_at = Arc::new(Mutex::new(None));
    let mark = paused_at.clone();
    let begin = starts.begin;
    let items: Vec<(u32, u32)> = (0..3)
        .map(|i| (0, i))
        .chain((0..3).map(|i| (1, i)))
        .collect();
    let out = map_async(items, 4, |(key, i)| {
        starts.record(key);
        let refuse = key == 0 && calls.fetch_add(1, SeqCst) == 0;
        async move {
            yield_now().await;
            if refuse { Err(429) } else { Ok((key, i)) }
        }
    })
    .per_key(|(key, _)| *key, 1)
    .retry(
        RetryPolicy::new()
            .interval(MS)
            .pause_key(|status: &u16| (*status == 429).then_some(200 * MS))
            .on_retry(move |_| *mark.lock().unwrap() = Some(now() - begin)),
    )
    .await;
    assert!(out.iter().all(Result::is_ok));
    let paused_at = paused_at.lock().unwrap().expect("one retry");
    (starts, paused_at)
}

/// `n` ready items through a stream's rate of 100/s with a burst of 2: how long it took.
async fn a_streams_rate(n: u32) -> Duration {
    let begun = now();
    let out: Vec<u32> = stream::iter(0..n)
        .map_unordered(6, |n| async move { n })
        .rate(Rate::per_second(100).burst(2))
        .collect()
        .await;
    assert_eq!(out.len(), n as usize);
    now() - begun
}

virtual_time! {
    async fn a_per_key_rate_starts_each_key_exactly_at_its_rate() {
        let starts = three_keys_at_a_per_key_rate().await;
        for key in 0..3 {
            let of = starts.of(key);
            // Fresh keys start at once; woken for their rate, keys due together are
            // spread 1 ms apart (see tests/spread.rs), then every 20 ms exactly.
            let spread = MS * key;
            let at = |n: u32| if n == 0 { Duration::ZERO } else { 20 * MS * n + spread };
            assert_eq!(of, (0..4).map(at).collect::<Vec<_>>(), "key {key}");
        }
    }

    async fn an_item_waiting_for_its_keys_rate_holds_no_global_slot_and_starts_when_due() {
        let starts = one_slot_and_a_key_waiting_for_its_rate().await;
        // Keys 1, 2 and 3 took the slot while key 0 waited; key 0 came back at 150 ms.
        let zero = Duration::ZERO;
        assert_eq!(starts.all(), [(0, zero), (1, zero), (2, zero), (3, zero), (0, 150 * MS)]);
    }

    async fn the_maps_rate_across_keys_is_exact() {
        let starts = the_maps_rate_over_five_keys().await;
        let expected: Vec<Duration> = (0..10u32).map(|n| 10 * MS * n).collect();
        assert_eq!(starts.of(0), expected);
    }

    async fn a_streams_rate_is_exact() {
        // Two at once, then one per 10 ms: four intervals.
        assert_eq!(a_streams_rate(6).await, 40 * MS);
    }

    async fn a_failed_attempt_gives_its_slot_back_and_returns_exactly_after_its_pause() {
        let starts = a_retry_behind_one_slot().await;
        let zero = Duration::ZERO;
        assert_eq!(starts.all(), [(0, zero), (1, zero), (2, zero), (0, 100 * MS)]);
    }

    async fn the_errors_retry_after_sets_the_pause_exactly() {
        let (seen, took) = retry_after_from_the_error().await;
        assert_eq!(seen, [(7, 1, 120 * MS)]);
        assert_eq!(took, 120 * MS);
    }

    async fn a_pause_holds_the_whole_key_exactly_and_only_that_key() {
        let (starts, paused_at) = a_paused_key_beside_a_busy_one().await;
        // The 429 came back at once; key 0 starts again exactly when its pause is over,
        // and key 1 never waited.
        assert_eq!(paused_at, Duration::ZERO);
        assert_eq!(starts.of(0), [Duration::ZERO, 200 * MS, 200 * MS, 200 * MS]);
        assert_eq!(starts.of(1), [Duration::ZERO; 3]);
    }

    async fn a_per_key_rate_of_two_per_second_is_exact_and_takes_no_wall_time() {
        let wall = Instant::now();
        let starts = Starts::new();
        map_async(0..20u32, 4, |_| {
            starts.record(0);
            async {}
        })
        .per_key(|_| 0, 4)
        .per_key_rate(Rate::per_second(2))
        .await;
        let expected: Vec<Duration> = (0..20u32).map(|n| 500 * MS * n).collect();
        assert_eq!(starts.of(0), expected);
        // The worst run measured with both cores busy took 0.4 ms of wall time.
        assert!(wall.elapsed() < Duration::from_secs(5), "{:?}", wall.elapsed());
    }

    async fn an_hours_retry_pause_takes_an_hour_of_virtual_time_and_no_wall_time() {
        let wall = Instant::now();
        let begun = now();
        let calls = AtomicU32::new(0);
        let out = map_async([1u32], 1, |n| {
            let first = calls.fetch_add(1, SeqCst) == 0;
            async move { if first { Err(()) } else { Ok(n) } }
        })
        .retry(RetryPolicy::new().interval(Duration::from_secs(3600)))
        .await;
        assert_eq!(out, [Ok(1)]);
        assert_eq!(now() - begun, Duration::from_secs(3600));
        // The worst run measured with both cores busy took 0.4 ms of wall time.
        assert!(wall.elapsed() < Duration::from_secs(5), "{:?}", wall.elapsed());
    }
}

matrix! {
    async fn a_per_key_rate_is_never_ahead_for_any_key() {
        let starts = three_keys_at_a_per_key_rate().await;
        for key in 0..3 {
            assert_eq!(starts.of(key).len(), 4);
            assert_never_ahead(&starts.of(key), Rate::per_second(50));
        }
    }

    async fn an_item_waiting_for_its_keys_rate_never_starts_early() {
        let starts = one_slot_and_a_key_waiting_for_its_rate().await;
        let mut keys = starts.keys_in_order();
        keys.sort_unstable();
        assert_eq!(keys, [0, 0, 1, 2, 3]);
        assert_never_ahead(&starts.of(0), Rate::every(150 * MS));
    }

    async fn the_maps_rate_holds_across_keys() {
        let starts = the_maps_rate_over_five_keys().await;
        assert_eq!(starts.of(0).len(), 10);
        assert_never_ahead(&starts.of(0), Rate::per_second(100));
    }

    async fn a_rate_on_a_map_without_keys_works_for_streams_too() {
        // Two at once, then one per 10 ms: four intervals at the least.
        let took = a_streams_rate(6).await;
        assert!(took >= 40 * MS, "{took:?}");
    }

    async fn a_failed_attempt_comes_back_no_sooner_than_its_pause() {
        let starts = a_retry_behind_one_slot().await;
        let item0 = starts.of(0);
        assert_eq!(item0.len(), 2);
        assert!(item0[1] >= item0[0] + 100 * MS, "{item0:?}");
        assert_eq!((starts.of(1).len(), starts.of(2).len()), (1, 1));
    }

    async fn retries_keep_the_per_key_slots_free_for_other_items() {
        let flight = Flight::default();
        let attempts = AtomicU32::new(0);
        // Key 0's items fail twice each with a 50 ms pause; key 1's items must keep
        // both of its slots busy meanwhile, and no key ever runs more than its limit.
        let items: Vec<(u32, u32)> = (0..4).map(|i| (0, i)).chain((0..20).map(|i| (1, i))).collect();
        let tries: Arc<Mutex<HashMap<(u32, u32), u32>>> = Arc::default();
        let out = map_async(items, 4, |(key, i)| {
            attempts.fetch_add(1, SeqCst);
            let tries = tries.clone();
            let flight = flight.clone();
            async move {
                let _guard = flight.enter(key);
                sleep(Duration::from_millis(2)).await;
                let mut tries = tries.lock().unwrap();
                let n = tries.entry((key, i)).or_insert(0);
                *n += 1;
                if key == 0 && *n < 3 { Err(*n) } else { Ok(i) }
            }
        })
        .per_key(|(key, _)| *key, 2)
        .retry(RetryPolicy::new().interval(Duration::from_millis(50)))
        .await;
        assert!(out.iter().all(Result::is_ok), "{out:?}");
        assert_eq!(attempts.load(SeqCst), 4 * 3 + 20);
        assert!(flight.peak_of(0) <= 2 && flight.peak_of(1) <= 2);
        assert!(flight.peak() <= 4);
    }

    async fn the_errors_retry_after_sets_the_pause_and_the_hook_sees_it() {
        let (seen, took) = retry_after_from_the_error().await;
        assert_eq!(seen, [(7, 1, 120 * MS)]);
        assert!(took >= 120 * MS, "{took:?}");
    }

    async fn no_start_of_a_paused_key_comes_before_its_pause_is_over() {
        let (starts, _) = a_paused_key_beside_a_busy_one().await;
        let key0 = starts.of(0);
        assert_eq!(key0.len(), 4);
        // The pause began after the first start was made: none of the later ones came
        // within 200 ms of it.
        for later in &key0[1..] {
            assert!(*later >= key0[0] + 200 * MS, "a start of the paused key came early: {key0:?}");
        }
        assert_eq!(starts.of(1).len(), 3);
    }

    async fn the_retry_budget_stops_a_retry_storm() {
        let attempts = AtomicU32::new(0);
        let out = map_async(0..10u32, 4, |_| {
            attempts.fetch_add(1, SeqCst);
            async { Err::<(), _>("down") }
        })
        .per_key(|_| "host", 4)
        .retry(RetryPolicy::new().attempts(10).interval(Duration::ZERO).budget(0.2, 1))
        .await;
        assert!(out.iter().all(Result::is_err));
        // 10 first attempts allow at most 1 + 0.2 * 10 = 3 retries, however many
        // attempts each item may make (without a budget: 100 attempts).
        let attempts = attempts.load(SeqCst);
        assert!((11..=13).contains(&attempts), "{attempts}");
    }

    async fn a_hot_key_at_the_head_does_not_starve_the_others() {
        let starts = Starts::new();
        // 500 items of key 0, then one each for keys 1..=10; global 4, per key 1. The
        // default window (64 x 4 = 256) holds only key 0's items: it must grow.
        let items = std::iter::repeat_n(0u32, 500).chain(1..=10);
        map_async(items, 4, |key| {
            starts.record(key);
            async { yield_now().await }
        })
        .per_key(|key| *key, 1)
        .await;
        let order = starts.keys_in_order();
        let last_other = order.iter().rposition(|key| *key != 0).unwrap();
        assert!(last_other < 20, "the other keys started after {last_other} starts: {:?}", &order[..30]);
    }
}

/// Interleaved input never grows the window: memory stays flat.
#[test]
fn interleaved_input_keeps_the_window() {
    let map = map_async(0..10_000u32, 8, |n| async move {
        yield_now().await;
        n
    })
    .per_key(|n| n % 64, 1);
    let out = futures_lite::future::block_on(map);
    assert_eq!(out.len(), 10_000);
}
