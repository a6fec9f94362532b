//! The scheduler knows time: rates (`.rate`, `.per_key_rate`), retries that give their
//! slots back (`.retry(RetryPolicy)`), pauses of a whole key, the retry budget, and the
//! window that grows for hot keys. Every behaviour under smol, `run_sync` and tokio
//! (current and multi-thread); the rate tests also on tokio's paused clock.
//!
//! Pins: a `retry` inside a map's function held its global and per-key slots through
//! every pause; a hot key at the head of the input kept the other keys from starting
//! until its backlog drained below the window.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::matrix;
use futures_lite::future::yield_now;
use futures_lite::{StreamExt, stream};
use tollgate::{BoundedStreamExt, Rate, RetryPolicy, map_async, sleep, try_map_async};

/// When each item started, by key.
#[derive(Default, Clone)]
struct Starts(Arc<Mutex<Vec<(u32, Instant)>>>);

impl Starts {
    fn record(&self, key: u32) {
        self.0.lock().unwrap().push((key, Instant::now()));
    }

    fn of(&self, key: u32) -> Vec<Instant> {
        let starts = self.0.lock().unwrap();
        starts
            .iter()
            .filter(|(k, _)| *k == key)
            .map(|(_, at)| *at)
            .collect()
    }

    fn keys_in_order(&self) -> Vec<u32> {
        self.0.lock().unwrap().iter().map(|(key, _)| *key).collect()
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

/// The smallest gap between two consecutive starts.
fn min_gap(starts: &[Instant]) -> Duration {
    starts
        .windows(2)
        .map(|pair| pair[1] - pair[0])
        .min()
        .unwrap_or(Duration::MAX)
}

/// Room for the clock reading in the test, taken just after the scheduler's own.
const SLACK: Duration = Duration::from_millis(3);

matrix! {
    async fn a_per_key_rate_spaces_each_keys_starts() {
        let starts = Starts::default();
        let items: Vec<(u32, u32)> = (0..3).flat_map(|key| (0..4).map(move |i| (key, i))).collect();
        let out = map_async(items, 8, |(key, i)| {
            starts.record(key);
            async move { (key, i) }
        })
        .per_key(|(key, _)| *key, 8)
        .per_key_rate(Rate::per_second(50))
        .await;
        assert_eq!(out.len(), 12);
        for key in 0..3 {
            let gap = min_gap(&starts.of(key));
            assert!(gap + SLACK >= Duration::from_millis(20), "key {key}: gap {gap:?}");
        }
    }

    async fn an_item_waiting_for_its_keys_rate_holds_no_global_slot() {
        let starts = Starts::default();
        // One global slot; each key may start one item per 150 ms. Key 0's second item
        // waits for its time while keys 1, 2 and 3 use the slot.
        let items = [(0, 0), (0, 1), (1, 0), (2, 0), (3, 0)];
        map_async(items, 1, |(key, _)| {
            starts.record(key);
            async { yield_now().await }
        })
        .per_key(|(key, _)| *key, 1)
        .per_key_rate(Rate::every(Duration::from_millis(150)))
        .await;
        assert_eq!(starts.keys_in_order(), [0, 1, 2, 3, 0]);
    }

    async fn the_maps_rate_holds_across_keys() {
        let starts = Starts::default();
        let begun = Instant::now();
        let out = map_async(0..10u32, 10, |n| {
            starts.record(0);
            async move { n }
        })
        .per_key(|n| n % 5, 2)
        .rate(Rate::per_second(100))
        .await;
        assert_eq!(out, (0..10).collect::<Vec<_>>());
        assert!(min_gap(&starts.of(0)) + SLACK >= Duration::from_millis(10));
        assert!(begun.elapsed() >= Duration::from_millis(85));
    }

    async fn a_rate_on_a_map_without_keys_works_for_streams_too() {
        let begun = Instant::now();
        let out: Vec<u32> = stream::iter(0..6u32)
            .map_unordered(6, |n| async move { n })
            .rate(Rate::per_second(100).burst(2))
            .collect()
            .await;
        assert_eq!(out.len(), 6);
        // Two at once, then one per 10 ms: four intervals.
        assert!(begun.elapsed() >= Duration::from_millis(35), "{:?}", begun.elapsed());
    }

    async fn a_failed_attempt_gives_its_slot_back_while_it_waits() {
        let starts = Starts::default();
        let failed_once = AtomicU32::new(0);
        // One global slot. Item 0 fails on its first attempt and comes back after
        // 100 ms: items 1 and 2 use the slot meanwhile.
        let out = map_async(0..3u32, 1, |n| {
            starts.record(n);
            let fail = n == 0 && failed_once.fetch_add(1, SeqCst) == 0;
            async move {
                yield_now().await;
                if fail { Err("503") } else { Ok(n) }
            }
        })
        .retry(RetryPolicy::new().interval(Duration::from_millis(100)))
        .await;
        assert_eq!(out, [Ok(0), Ok(1), Ok(2)]);
        assert_eq!(starts.keys_in_order(), [0, 1, 2, 0]);
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
        let seen = Arc::new(Mutex::new(Vec::new()));
        let calls = AtomicU32::new(0);
        let begun = Instant::now();
        let hook_seen = seen.clone();
        let out = try_map_async([7u32], 1, |n| {
            let first = calls.fetch_add(1, SeqCst) == 0;
            async move { if first { Err(Duration::from_millis(120)) } else { Ok(n) } }
        })
        .retry(
            RetryPolicy::new()
                .interval(Duration::from_secs(60))
                .retry_after(|after: &Duration| Some(*after))
                .on_retry(move |event| {
                    hook_seen.lock().unwrap().push((*event.item(), event.attempt_number(), event.pause()));
                }),
        )
        .await;
        assert_eq!(out, Ok(vec![7]));
        assert_eq!(*seen.lock().unwrap(), [(7, 1, Duration::from_millis(120))]);
        let elapsed = begun.elapsed();
        assert!(elapsed >= Duration::from_millis(115) && elapsed < Duration::from_secs(30), "{elapsed:?}");
    }

    async fn a_pause_holds_the_whole_key_and_only_that_key() {
        let starts = Starts::default();
        let calls = AtomicU32::new(0);
        let paused_at = Arc::new(Mutex::new(None));
        let mark = paused_at.clone();
        // Key 0's first request gets "429, come back in 200 ms": no item of key 0
        // starts for 200 ms; key 1 goes on.
        let items: Vec<(u32, u32)> = (0..3).map(|i| (0, i)).chain((0..3).map(|i| (1, i))).collect();
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
                .interval(Duration::from_millis(1))
                .pause_key(|status: &u16| (*status == 429).then_some(Duration::from_millis(200)))
                .on_retry(move |_| *mark.lock().unwrap() = Some(Instant::now())),
        )
        .await;
        assert!(out.iter().all(Result::is_ok));
        let paused_at = paused_at.lock().unwrap().expect("one retry");
        let key0 = starts.of(0);
        assert_eq!(key0.len(), 4);
        for later in &key0[1..] {
            assert!(*later + SLACK >= paused_at + Duration::from_millis(200), "a start of the paused key came early");
        }
        assert_eq!(starts.of(1).len(), 3);
        assert!(starts.of(1).iter().all(|at| *at < paused_at + Duration::from_millis(150)), "key 1 went on during the pause");
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
        let starts = Starts::default();
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

#[cfg(feature = "tokio")]
mod paused_clock {
    use super::*;

    /// On tokio's paused clock the rate is exact in virtual time and takes no wall time.
    #[tokio::test(start_paused = true)]
    async fn a_per_key_rate_on_the_paused_clock() {
        let wall = Instant::now();
        let virtual_start = tokio::time::Instant::now();
        let starts: Arc<Mutex<Vec<tokio::time::Instant>>> = Arc::default();
        map_async(0..20u32, 4, |_| {
            starts.lock().unwrap().push(tokio::time::Instant::now());
            async {}
        })
        .per_key(|_| 0, 4)
        .per_key_rate(Rate::per_second(2))
        .await;
        let starts = starts.lock().unwrap();
        assert_eq!(starts.len(), 20);
        for pair in starts.windows(2) {
            assert!(
                pair[1] - pair[0] >= Duration::from_millis(500),
                "{:?}",
                pair[1] - pair[0]
            );
        }
        assert!(tokio::time::Instant::now() - virtual_start >= Duration::from_millis(9_500));
        assert!(
            wall.elapsed() < Duration::from_secs(5),
            "the paused clock was not honoured"
        );
    }

    /// A retry pause on the paused clock takes virtual time only.
    #[tokio::test(start_paused = true)]
    async fn a_retry_pause_on_the_paused_clock() {
        let wall = Instant::now();
        let calls = AtomicU32::new(0);
        let out = map_async([1u32], 1, |n| {
            let first = calls.fetch_add(1, SeqCst) == 0;
            async move { if first { Err(()) } else { Ok(n) } }
        })
        .retry(RetryPolicy::new().interval(Duration::from_secs(3600)))
        .await;
        assert_eq!(out, [Ok(1)]);
        assert!(wall.elapsed() < Duration::from_secs(5));
    }
}
