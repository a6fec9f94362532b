//! `MapControl`: progress that equals counted truth, a drain that finishes every started
//! item and starts none after the call, live limits (raised: more start without a
//! completion; lowered: the peak never above the limit in force), the busiest keys, and
//! the settings a map cannot take. Every behaviour under smol, `run_sync` and tokio
//! (current and multi-thread), on plain and keyed maps: steered by the test's own gates and
//! yields, never by how long something took, so it holds at any speed.
//!
//! What depends on time runs on virtual time (`virtual_time!`), where it is exact: a key of
//! its own rate (from the control or a settings function) starts exactly one interval
//! apart whatever the default, and a key paused by its server is counted as paused and
//! tried again exactly when its pause ends. On every executor those keep what holds at any
//! speed: never sooner than the rate or the pause allows.
//!
//! Readers of the progress here run in the same task as the map (`zip`), between two of
//! its polls: the map publishes when a poll returns, so there the figures are exact.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::time::{Duration, Instant};

use common::{InFlight, Rng, matrix, virtual_time};
use futures_lite::future::{yield_now, zip};
use futures_lite::{StreamExt, stream};
use tollgate::testing::now;
use tollgate::{
    BoundedStreamExt, KeySettings, MapControl, Progress, Rate, RetryPolicy, amap_iter, map_async,
    sleep,
};

/// One control for the plain map and one for the keyed map of a test that runs both
/// (the keyed one names its keys, so the two have different types).
#[derive(Default)]
struct Controls {
    plain: MapControl,
    keyed: MapControl<usize>,
}

impl Controls {
    fn drain(&self, keyed: bool) {
        if keyed {
            self.keyed.drain()
        } else {
            self.plain.drain()
        }
    }

    fn progress(&self, keyed: bool) -> Progress {
        if keyed {
            self.keyed.progress()
        } else {
            self.plain.progress()
        }
    }

    fn not_started(&self, keyed: bool) -> Vec<usize> {
        if keyed {
            self.keyed.not_started()
        } else {
            self.plain.not_started()
        }
    }

    fn set_limit(&self, keyed: bool, limit: usize) {
        if keyed {
            self.keyed.set_limit(limit)
        } else {
            self.plain.set_limit(limit)
        }
        .unwrap();
    }
}

/// What the test's own items count.
#[derive(Default)]
struct Truth {
    pulled: AtomicU64,
    first_attempts: AtomicU64,
    attempts: AtomicU64,
    attempts_ended: AtomicU64,
    finished: AtomicU64,
    failed: AtomicU64,
    retried: AtomicU64,
    /// Readings the watcher made: every 100th item waits for one more, so the readings
    /// are spread over the whole run whatever the timing.
    readings: AtomicU64,
}

impl Truth {
    fn check(&self, progress: &Progress, at: &str) {
        let pulled = self.pulled.load(SeqCst);
        let started = self.first_attempts.load(SeqCst);
        let in_flight = self.attempts.load(SeqCst) - self.attempts_ended.load(SeqCst);
        let seen = (
            progress.pulled(),
            progress.started(),
            progress.finished(),
            progress.failed(),
            progress.retries(),
            progress.in_flight(),
        );
        let truth = (
            pulled,
            started,
            self.finished.load(SeqCst),
            self.failed.load(SeqCst),
            self.retried.load(SeqCst),
            in_flight,
        );
        assert_eq!(
            seen, truth,
            "{at}: (pulled, started, finished, failed, retries, in flight)"
        );
        assert_eq!(progress.waiting(), pulled - started, "{at}: waiting");
        check_one_state_each(progress, at);
    }
}

/// Every pulled item is in exactly one state: the invariant documented on `Progress`.
fn check_one_state_each(progress: &Progress, at: &str) {
    assert_eq!(
        progress.pulled(),
        progress.waiting()
            + progress.in_flight()
            + progress.awaiting_retry()
            + progress.finished()
            + progress.not_started()
            + progress.cancelled(),
        "{at}: every pulled item in one state"
    );
}

/// Reads the progress at random moments between the map's polls until the map ends,
/// comparing it with the truth each time; returns how many readings it made.
async fn watch(control: MapControl<impl Sized>, truth: &Truth, seed: u64) -> usize {
    // A seeded generator, so each run sees the same "random" moments.
    let mut dice = Rng::new(seed);
    let mut readings = 0;
    loop {
        for _ in 0..dice.below(4) {
            yield_now().await;
        }
        let progress = control.progress();
        truth.check(&progress, &format!("reading {readings}"));
        readings += 1;
        truth.readings.fetch_add(1, SeqCst);
        if progress.is_ended() {
            return readings;
        }
    }
}

/// The work of item `n` on its `attempt`: pends a few times, then fails if `fails` says
/// so; counts what it sees in `truth`.
async fn work(n: u64, attempt: u64, fails: bool, truth: &Truth) -> Result<u64, u64> {
    truth.attempts.fetch_add(1, SeqCst);
    if attempt == 1 {
        truth.first_attempts.fetch_add(1, SeqCst);
    }
    for _ in 0..(n * 7 + attempt) % 5 {
        yield_now().await;
    }
    if n % 100 == 0 {
        while truth.readings.load(SeqCst) < n / 100 {
            yield_now().await;
        }
    }
    truth.attempts_ended.fetch_add(1, SeqCst);
    if fails {
        Err(n)
    } else {
        truth.finished.fetch_add(1, SeqCst);
        Ok(n)
    }
}

/// What a map of one item saw when its server's first answer paused its key for 300 ms.
struct Paused {
    outputs: Vec<Result<u32, ()>>,
    /// When the first attempt failed and when the second started, on tollgate's clock.
    failed_at: Instant,
    retried_at: Instant,
    /// The progress read between the map's polls at the first reading that counted the key
    /// as paused, if one did.
    seen_paused: Option<Progress>,
}

async fn key_paused_by_its_server() -> Paused {
    let control = MapControl::new();
    let attempts = std::sync::Mutex::new(Vec::new());
    let policy = RetryPolicy::new()
        .attempts(2)
        .pause_key(|_: &()| Some(Duration::from_millis(300)));
    let map = map_async(0..1u32, 2, |n| {
        let mut attempts = attempts.lock().unwrap();
        attempts.push(now());
        let first = attempts.len() == 1;
        async move { if first { Err(()) } else { Ok(n) } }
    })
    .per_key(|_| "host", 1)
    .retry(policy)
    .control(&control);
    let watch = async {
        loop {
            let progress = control.progress();
            if progress.paused_keys() == 1 {
                return Some(progress);
            }
            if progress.is_ended() {
                return None;
            }
            // A timer, not a yield: on virtual time a reader that spins never lets the
            // clock reach the pause's end.
            sleep(Duration::from_millis(1)).await;
        }
    };
    let (outputs, seen_paused) = zip(map, watch).await;
    // The first attempt fails as it starts (no await), so it failed when it started.
    let attempts = attempts.into_inner().unwrap();
    assert_eq!(attempts.len(), 2);
    Paused {
        outputs,
        failed_at: attempts[0],
        retried_at: attempts[1],
        seen_paused,
    }
}

matrix! {
    async fn a_plain_maps_progress_equals_counted_truth_at_random_moments() {
        let truth = Truth::default();
        let control = MapControl::new();
        let items = (0..10_000u64).inspect(|_| {
            truth.pulled.fetch_add(1, SeqCst);
        });
        let map = map_async(items, 16, |n| work(n, 1, false, &truth)).control(&control);
        let (outputs, readings) = zip(map, watch(control.clone(), &truth, 7)).await;
        assert_eq!(outputs.len(), 10_000);
        assert!(readings >= 10, "{readings} readings");
        truth.check(&control.progress(), "end");
    }

    async fn a_keyed_map_with_retries_reports_counted_truth_at_random_moments() {
        let truth = Truth::default();
        let control = MapControl::new();
        let items = (0..1_000u64).inspect(|_| {
            truth.pulled.fetch_add(1, SeqCst);
        });
        // Every 7th item fails once; every 11th fails for good (after its 2 attempts).
        let attempts: Vec<AtomicU64> = (0..1_000).map(|_| AtomicU64::new(0)).collect();
        let policy = RetryPolicy::new().attempts(2).interval(Duration::from_millis(1));
        let map = map_async(items, 12, |n| {
            let attempt = attempts[n as usize].fetch_add(1, SeqCst) + 1;
            let fails = n % 11 == 0 || (n % 7 == 0 && attempt == 1);
            let truth = &truth;
            async move {
                let output = work(n, attempt, fails, truth).await;
                if fails {
                    if attempt == 2 {
                        truth.finished.fetch_add(1, SeqCst);
                        truth.failed.fetch_add(1, SeqCst);
                    } else {
                        truth.retried.fetch_add(1, SeqCst);
                    }
                }
                output
            }
        })
        .per_key(|n| n % 5, 3)
        .retry(policy)
        .control(&control);
        let (outputs, readings) = zip(map, watch(control.clone(), &truth, 11)).await;
        let failed = outputs.iter().filter(|output| output.is_err()).count() as u64;
        assert_eq!(failed, 1_000u64.div_ceil(11));
        assert!(readings >= 10, "{readings} readings");
        let end = control.progress();
        truth.check(&end, "end");
        assert_eq!(end.failed(), failed);
        assert!(end.retries() > 100);
    }

    async fn a_streams_progress_equals_counted_truth_at_random_moments() {
        let truth = Truth::default();
        let control = MapControl::new();
        let items = stream::iter(0..10_000u64).inspect(|_| {
            truth.pulled.fetch_add(1, SeqCst);
        });
        let outputs = items
            .map_unordered(8, |n| work(n, 1, false, &truth))
            .per_key(|n| n % 3, 2)
            .control(&control);
        // The consumer takes every output the stream has before it waits; the watcher
        // reads while it waits.
        let consume = outputs.fold(0, |count, output| {
            assert!(output.is_ok());
            count + 1
        });
        let (count, readings) = zip(consume, watch(control.clone(), &truth, 3)).await;
        assert_eq!(count, 10_000);
        assert!(readings >= 10, "{readings} readings");
        truth.check(&control.progress(), "end");
        assert!(control.progress().is_ended());
    }

    async fn a_drain_from_inside_the_nth_item_starts_nothing_after_the_call() {
        for keyed in [false, true] {
            let control = Controls::default();
            let calls = AtomicUsize::new(0);
            let calls_at_drain = AtomicUsize::new(usize::MAX);
            let ended = AtomicUsize::new(0);
            let f = |n: usize| {
                let call = calls.fetch_add(1, SeqCst);
                if call == 40 {
                    control.drain(keyed);
                    calls_at_drain.store(call + 1, SeqCst);
                }
                let ended = &ended;
                async move {
                    for _ in 0..n % 4 {
                        yield_now().await;
                    }
                    ended.fetch_add(1, SeqCst);
                    (n, n * 2)
                }
            };
            let outputs = if keyed {
                map_async(0..10_000usize, 8, f).per_key(|n| n % 3, 2).control(&control.keyed).await
            } else {
                map_async(0..10_000usize, 8, f).control(&control.plain).await
            };
            let started = calls_at_drain.load(SeqCst);
            assert_eq!(calls.load(SeqCst), started, "keyed {keyed}: no start after the drain");
            assert_eq!(ended.load(SeqCst), started, "every started item finished");
            assert_eq!(outputs.len(), started);
            // In input order, without the items that never started.
            let not_started = control.not_started(keyed);
            let pulled = control.progress(keyed).pulled() as usize;
            let expected: Vec<usize> = (0..pulled).filter(|n| !not_started.contains(n)).collect();
            let positions: Vec<usize> = outputs.iter().map(|(n, _)| *n).collect();
            assert_eq!(positions, expected, "keyed {keyed}");
            assert!(outputs.iter().all(|(n, double)| *double == n * 2));
            let progress = control.progress(keyed);
            assert_eq!(progress.finished() as usize, started);
            assert_eq!(progress.not_started() as usize, not_started.len());
            assert_eq!((progress.waiting(), progress.in_flight()), (0, 0));
            assert!(progress.is_draining() && progress.is_ended());
            if keyed {
                assert!(!not_started.is_empty(), "a keyed map pulls ahead");
            } else {
                assert!(not_started.is_empty(), "a plain map starts what it pulls");
            }
        }
    }

    async fn a_drain_after_a_barrier_lets_the_blocked_items_finish_and_starts_none() {
        for keyed in [false, true] {
            let control = Controls::default();
            let barrier = async_lock::Barrier::new(5);
            let calls = AtomicUsize::new(0);
            let ended = AtomicUsize::new(0);
            let f = |n: usize| {
                calls.fetch_add(1, SeqCst);
                let (barrier, ended) = (&barrier, &ended);
                async move {
                    if n < 4 {
                        barrier.wait().await;
                    }
                    yield_now().await;
                    ended.fetch_add(1, SeqCst);
                    n
                }
            };
            let controller = async {
                barrier.wait().await; // the first 4 items are in flight
                control.drain(keyed);
                calls.load(SeqCst)
            };
            let (outputs, calls_at_drain) = if keyed {
                let map = map_async(0..1_000usize, 4, f)
                    .per_key(|n| n % 4, 1)
                    .control(&control.keyed);
                zip(map, controller).await
            } else {
                zip(map_async(0..1_000usize, 4, f).control(&control.plain), controller).await
            };
            assert_eq!(calls.load(SeqCst), calls_at_drain, "keyed {keyed}: no start after");
            assert_eq!(ended.load(SeqCst), calls_at_drain);
            assert_eq!(outputs.len(), calls_at_drain);
            assert!(outputs.windows(2).all(|pair| pair[0] < pair[1]));
        }
    }

    async fn a_drained_stream_ends_after_the_started_items() {
        // An endless input: only the drain ends it.
        let control = MapControl::new();
        let calls = AtomicUsize::new(0);
        let mut outputs = amap_iter(0u64.., 6, |n| {
            calls.fetch_add(1, SeqCst);
            async move {
                for _ in 0..n % 3 {
                    yield_now().await;
                }
                n
            }
        })
        .control(&control);
        let mut seen = 0;
        while outputs.next().await.is_some() {
            seen += 1;
            if seen == 100 {
                control.drain();
            }
            assert!(seen < 1_000, "the drain did not end the stream");
        }
        assert_eq!(seen, calls.load(SeqCst), "every started item was handed out");
        assert!(control.progress().is_ended());
    }

    async fn a_drained_ordered_keyed_stream_skips_what_never_started() {
        let control = MapControl::new();
        let stop = control.clone();
        let mut outputs = stream::iter(0..500u32)
            .map_bounded(4, move |n| {
                if n == 30 {
                    stop.drain();
                }
                async move {
                    yield_now().await;
                    n
                }
            })
            .per_key(|n| n % 2, 1)
            .control(&control);
        let mut got = Vec::new();
        while let Some(n) = outputs.next().await {
            got.push(n);
        }
        let not_started = control.not_started();
        let pulled = control.progress().pulled() as u32;
        let expected: Vec<u32> = (0..pulled)
            .filter(|n| !not_started.contains(&(*n as usize)))
            .collect();
        assert_eq!(got, expected);
        assert!(got.contains(&30) && !not_started.is_empty());
    }

    async fn raising_the_limit_starts_more_without_a_completion_and_lowering_caps_the_peak() {
        for keyed in [false, true] {
            let control = Controls::default();
            let (release, gate) = smol::channel::unbounded::<()>();
            let flight = InFlight::default();
            let limit_in_force = AtomicUsize::new(2);
            let f = |n: usize| {
                let running = flight.now();
                assert!(
                    running < limit_in_force.load(SeqCst),
                    "started with {running} running (keyed {keyed})"
                );
                let (flight, gate) = (&flight, gate.clone());
                async move {
                    let _guard = flight.enter();
                    gate.recv().await.expect("released");
                    n
                }
            };
            let steer = async {
                let flight = &flight;
                let until = |count: usize| async move {
                    while flight.now() != count {
                        yield_now().await;
                    }
                };
                until(2).await;
                // Raised: 6 in flight, with not one completion in between.
                limit_in_force.store(6, SeqCst);
                control.set_limit(keyed, 6);
                until(6).await;
                // Lowered: the excess finishes, nothing starts until fewer than 3 run.
                limit_in_force.store(3, SeqCst);
                control.set_limit(keyed, 3);
                for _ in 0..60 {
                    release.send(()).await.unwrap();
                    for _ in 0..3 {
                        yield_now().await;
                    }
                }
            };
            let outputs = if keyed {
                let map = map_async(0..60usize, 2, f)
                    .per_key(|n| n % 7, 10)
                    .control(&control.keyed);
                zip(map, steer).await.0
            } else {
                zip(map_async(0..60usize, 2, f).control(&control.plain), steer).await.0
            };
            assert_eq!(outputs.len(), 60);
            assert_eq!(flight.peak(), 6);
        }
    }

    async fn raising_the_per_key_limit_starts_more_of_that_key_at_once() {
        let control = MapControl::new();
        let (release, gate) = smol::channel::unbounded::<()>();
        let flight = InFlight::default();
        let per_key_in_force = AtomicUsize::new(1);
        let map = map_async(0..30usize, 8, |n| {
            assert!(flight.now() < per_key_in_force.load(SeqCst));
            let (flight, gate) = (&flight, gate.clone());
            async move {
                let _guard = flight.enter();
                gate.recv().await.expect("released");
                n
            }
        })
        .per_key(|_| "one host", 1)
        .control(&control);
        let steer = async {
            while flight.now() != 1 {
                yield_now().await;
            }
            per_key_in_force.store(4, SeqCst);
            control.set_default_key_limit(4).unwrap();
            while flight.now() != 4 {
                yield_now().await;
            }
            per_key_in_force.store(2, SeqCst);
            control.set_default_key_limit(2).unwrap();
            for _ in 0..30 {
                release.send(()).await.unwrap();
            }
        };
        let (outputs, ()) = zip(map, steer).await;
        assert_eq!(outputs, (0..30).collect::<Vec<_>>());
        assert_eq!(flight.peak(), 4);
    }

    async fn the_busiest_keys_name_the_loaded_keys() {
        let control = MapControl::new();
        let (release, gate) = smol::channel::unbounded::<()>();
        // Key "a" has 5 items, "b" 3, "c" 1; one of each runs (per key 1) until released.
        let items = ["a"; 5].into_iter().chain(["b"; 3]).chain(["c"]);
        let map = map_async(items, 3, |key| {
            let gate = gate.clone();
            async move {
                gate.recv().await.expect("released");
                key
            }
        })
        .per_key(|key| *key, 1)
        .control(&control);
        let watch = async {
            let busiest = loop {
                let busiest = control.busiest_keys(2);
                if busiest.len() == 2 && busiest[0].waiting() == 4 && busiest[1].waiting() == 2 {
                    break busiest;
                }
                yield_now().await;
            };
            assert_eq!(busiest[0].key(), &"a");
            assert_eq!(busiest[1].key(), &"b");
            assert!(busiest.iter().all(|key| key.in_flight() == 1 && !key.is_paused()));
            assert_eq!(control.progress().paused_keys(), 0);
            for _ in 0..9 {
                release.send(()).await.unwrap();
            }
        };
        let (outputs, ()) = zip(map, watch).await;
        assert_eq!(outputs.len(), 9);
    }

    async fn a_key_paused_by_its_server_is_retried_no_sooner_than_its_pause() {
        let paused = key_paused_by_its_server().await;
        assert_eq!(paused.outputs, [Ok(0)]);
        // A timer only fires late (1 ms for the pause's cheaper clock).
        let gap = paused.retried_at - paused.failed_at;
        assert!(gap >= Duration::from_millis(299), "tried again {gap:?} after a pause of 300 ms");
    }

    async fn a_faster_rate_set_while_waiting_starts_the_next_item_sooner() {
        let control = MapControl::new();
        let started = AtomicUsize::new(0);
        // One start an hour: the second item would wait an hour without the change.
        let map = map_async(0..3u32, 2, |n| {
            started.fetch_add(1, SeqCst);
            async move { n }
        })
        .rate(Rate::per(1, Duration::from_secs(3_600)))
        .control(&control);
        let steer = async {
            while started.load(SeqCst) == 0 {
                yield_now().await;
            }
            for _ in 0..10 {
                yield_now().await;
            }
            assert_eq!(started.load(SeqCst), 1, "the rate holds the second item");
            control.set_rate(Rate::per_second(1_000)).unwrap();
        };
        let (outputs, ()) = zip(map, steer).await;
        assert_eq!(outputs, [0, 1, 2]);
    }

    async fn a_control_attached_before_per_key_still_counts_and_steers() {
        let control = MapControl::new();
        let map = map_async(0..50u32, 4, |n| async move { n })
            .control(&control)
            .per_key(|n| n % 3, 1);
        assert!(control.set_default_key_limit(2).is_ok(), "the map has keys now");
        let out = map.await;
        assert_eq!(out.len(), 50);
        let progress = control.progress();
        assert_eq!((progress.pulled(), progress.finished()), (50, 50));
        assert!(
            control.set_default_key_limit(3).unwrap_err().is_not_attached(),
            "its map ended"
        );
    }

    async fn a_fail_fast_collect_counts_its_error() {
        let control = MapControl::new();
        let out = tollgate::try_map_async(0..100u32, 4, |n| async move {
            yield_now().await;
            if n == 20 { Err(n) } else { Ok(n) }
        })
        .control(&control)
        .await;
        assert_eq!(out, Err(20));
        let progress = control.progress();
        assert_eq!(progress.failed(), 1);
        assert!(progress.is_ended());
        assert!(progress.finished() >= 1 && progress.finished() <= progress.pulled());
    }
}

/// The starts of the paced key (at 20/s, its own) of a map whose other key has no rate,
/// on tollgate's clock: its rate set by the control before the map runs, and a far faster
/// default set while it runs.
async fn own_rate_from_the_control() -> Vec<Instant> {
    let control = MapControl::new();
    let paced_starts = std::sync::Mutex::new(Vec::new());
    let free_done = AtomicUsize::new(0);
    // Each paced start is told to the steering (a wait on a channel: on virtual time a
    // spinning wait for the second start would never let the clock reach it).
    let (started, paced_started) = smol::channel::unbounded::<()>();
    let items = (0..10usize).map(|n| (n % 2 == 0, n));
    let map = map_async(items, 4, |(paced, n)| {
        if paced {
            paced_starts.lock().unwrap().push(now());
            started.try_send(()).unwrap();
        }
        let free_done = &free_done;
        async move {
            if !paced {
                free_done.fetch_add(1, SeqCst);
            }
            n
        }
    })
    .per_key(|(paced, _)| *paced, 1)
    .control(&control);
    control
        .set_key_settings(true, KeySettings::new().rate(Rate::per_second(20)))
        .unwrap();
    let steer = async {
        for _ in 0..2 {
            paced_started.recv().await.unwrap();
        }
        // A far faster default does not reach the key of its own rate.
        control
            .set_default_key_rate(Rate::per_second(100_000))
            .unwrap();
    };
    let (outputs, ()) = zip(map, steer).await;
    assert_eq!(outputs.len(), 10);
    assert_eq!(free_done.load(SeqCst), 5);
    paced_starts.into_inner().unwrap()
}

/// The starts of the paced key of a map whose settings function gives it 20/s while the
/// default key rate would allow all of them at once, on tollgate's clock.
async fn own_rate_from_a_function() -> Vec<Instant> {
    let paced_starts = std::sync::Mutex::new(Vec::new());
    let items = (0..10usize).map(|n| (n % 2 == 0, n));
    let outputs = map_async(items, 4, |(paced, n)| {
        if paced {
            paced_starts.lock().unwrap().push(now());
        }
        async move { n }
    })
    .per_key(|(paced, _)| *paced, 1)
    .per_key_rate(Rate::per_second(100_000).burst(10))
    .key_settings(|paced: &bool| {
        if *paced {
            KeySettings::new().rate(Rate::per_second(20))
        } else {
            KeySettings::new()
        }
    })
    .await;
    assert_eq!(outputs.len(), 10);
    paced_starts.into_inner().unwrap()
}

/// Five starts at 20/s, never sooner than 50 ms apart (a timer only fires late; 1 ms for
/// the rate's cheaper clock): what holds at any speed. (Was: the five spanned 160 ms.)
fn assert_never_outrun(starts: &[Instant]) {
    assert_eq!(starts.len(), 5);
    for pair in starts.windows(2) {
        let gap = pair[1] - pair[0];
        assert!(
            gap >= Duration::from_millis(49),
            "starts at 20/s {gap:?} apart"
        );
    }
}

/// Five starts at 20/s, on virtual time: exactly 50 ms apart.
fn assert_exactly_spaced(starts: &[Instant]) {
    assert_eq!(starts.len(), 5);
    let gaps: Vec<Duration> = starts.windows(2).map(|pair| pair[1] - pair[0]).collect();
    assert_eq!(gaps, [Duration::from_millis(50); 4]);
}

/// One key's counter, and the most of its items allowed to run at once as the test
/// steers the map.
#[derive(Default)]
struct KeyWatch {
    flight: InFlight,
    allowed: AtomicUsize,
}

impl KeyWatch {
    /// Counts a start (checking the key's limit in force) until the guard drops.
    fn start(&self, key: &str) -> common::InFlightGuard<'_> {
        let running = self.flight.now();
        let allowed = self.allowed.load(SeqCst);
        assert!(
            running < allowed,
            "key {key} started with {running} running (allowed {allowed})"
        );
        self.flight.enter()
    }

    async fn until(&self, count: usize) {
        while self.flight.now() != count {
            yield_now().await;
        }
    }
}

matrix! {
    async fn a_key_of_its_own_limit_keeps_it_until_cleared() {
        let control = MapControl::new();
        let (slow, fast) = (KeyWatch::default(), KeyWatch::default());
        slow.allowed.store(1, SeqCst);
        fast.allowed.store(3, SeqCst);
        let (release_slow, slow_gate) = smol::channel::unbounded::<()>();
        let (release_fast, fast_gate) = smol::channel::unbounded::<()>();
        let items = (0..24usize).map(|n| (if n % 2 == 0 { "slow" } else { "fast" }, n));
        let map = map_async(items, 10, |(key, n)| {
            let (watch, gate) = if key == "slow" {
                (&slow, slow_gate.clone())
            } else {
                (&fast, fast_gate.clone())
            };
            let guard = watch.start(key);
            async move {
                gate.recv().await.expect("released");
                drop(guard);
                n
            }
        })
        .per_key(|(key, _)| *key, 3)
        .control(&control);
        // Before the key is ever seen: the map keeps it for when the key comes.
        control.set_key_settings("slow", KeySettings::new().limit(1)).unwrap();
        let steer = async {
            zip(slow.until(1), fast.until(3)).await;
            // One slow item finishes: the next one starts, never two at once.
            release_slow.send(()).await.unwrap();
            slow.until(1).await;
            // The default rises to 4: the fast key takes it, the slow one keeps its 1.
            fast.allowed.store(4, SeqCst);
            control.set_default_key_limit(4).unwrap();
            fast.until(4).await;
            release_slow.send(()).await.unwrap();
            slow.until(1).await;
            assert_eq!(slow.flight.peak(), 1, "its own limit of 1");
            // Cleared: the slow key follows the default of 4 again.
            slow.allowed.store(4, SeqCst);
            control.clear_key_settings("slow").unwrap();
            slow.until(4).await;
            for _ in 0..12 {
                release_slow.send(()).await.unwrap();
                release_fast.send(()).await.unwrap();
            }
        };
        let (outputs, ()) = zip(map, steer).await;
        assert_eq!(outputs.len(), 24);
        assert_eq!((slow.flight.peak(), fast.flight.peak()), (4, 4));
    }

    async fn a_key_of_its_own_rate_is_never_outrun_whatever_the_default() {
        assert_never_outrun(&own_rate_from_the_control().await);
    }
}

matrix! {
    async fn keys_given_settings_by_a_function_keep_them_until_a_control_says_otherwise() {
        let control = MapControl::new();
        let watches = [KeyWatch::default(), KeyWatch::default(), KeyWatch::default()];
        let names = ["slow", "wide", "plain"];
        for (watch, allowed) in watches.iter().zip([1, 3, 2]) {
            watch.allowed.store(allowed, SeqCst);
        }
        let gates: Vec<_> = (0..3).map(|_| smol::channel::unbounded::<()>()).collect();
        let items = (0..36usize).map(|n| (n % 3, n));
        let map = map_async(items, 16, |(key, n)| {
            let guard = watches[key].start(names[key]);
            let gate = gates[key].1.clone();
            async move {
                gate.recv().await.expect("released");
                drop(guard);
                n
            }
        })
        .per_key(|(key, _)| names[*key], 2)
        .key_settings(|key: &&str| match *key {
            "slow" => KeySettings::new().limit(1),
            "wide" => KeySettings::new().limit(3),
            _ => KeySettings::new(),
        })
        .control(&control);
        let [slow, wide, plain] = &watches;
        let steer = async {
            zip(slow.until(1), zip(wide.until(3), plain.until(2))).await;
            // The default rises: the key without settings of its own follows, the
            // keys the function gave a limit keep theirs.
            plain.allowed.store(4, SeqCst);
            control.set_default_key_limit(4).unwrap();
            plain.until(4).await;
            // A control's setting goes before the function's.
            slow.allowed.store(2, SeqCst);
            control.set_key_settings("slow", KeySettings::new().limit(2)).unwrap();
            slow.until(2).await;
            // Cleared: back to what the function gives (1), not the default (4).
            slow.allowed.store(1, SeqCst);
            control.clear_key_settings("slow").unwrap();
            for _ in 0..12 {
                for (release, _) in &gates {
                    release.send(()).await.unwrap();
                }
            }
        };
        let (outputs, ()) = zip(map, steer).await;
        assert_eq!(outputs.len(), 36);
        let peaks: Vec<_> = watches.iter().map(|watch| watch.flight.peak()).collect();
        assert_eq!(peaks, [2, 3, 4]);
    }

    async fn a_key_given_a_rate_by_a_function_is_never_outrun_whatever_the_default() {
        assert_never_outrun(&own_rate_from_a_function().await);
    }

    async fn the_function_is_asked_again_for_a_key_the_map_forgot() {
        // Key 0, then 200 other keys, then key 0 again: with a small window the map
        // forgets idle keys (it keeps nothing for them), so key 0 is made twice.
        let asked = Arc::new(std::sync::Mutex::new(std::collections::BTreeMap::<usize, usize>::new()));
        let counter = Arc::clone(&asked);
        let items = std::iter::once(0).chain(1..=200).chain(std::iter::once(0));
        let outputs = map_async(items, 2, |n| async move { n })
            .window(4)
            .per_key(|n| *n, 1)
            .key_settings(move |key: &usize| {
                *counter.lock().unwrap().entry(*key).or_default() += 1;
                KeySettings::new().limit(1)
            })
            .await;
        assert_eq!(outputs.len(), 202);
        let asked = asked.lock().unwrap();
        assert_eq!(asked[&0], 2, "made again after it was forgotten");
        assert!(asked.iter().filter(|(key, _)| **key != 0).all(|(_, n)| *n == 1));
        assert_eq!(asked.len(), 201);
    }
}

/// Each setter of one key on `control` fails, and not for want of a map; the message of
/// the key limit's error.
fn key_setters_refused(control: &MapControl) -> String {
    for error in [
        control
            .set_key_settings((), KeySettings::new().limit(2))
            .unwrap_err(),
        control
            .set_key_settings((), KeySettings::new().rate(Rate::per_second(5)))
            .unwrap_err(),
        control.clear_key_settings(()).unwrap_err(),
    ] {
        assert!(!error.is_not_attached());
    }
    control
        .set_key_settings((), KeySettings::new().limit(2))
        .unwrap_err()
        .to_string()
}

#[test]
fn settings_of_one_key_are_errors_when_the_map_cannot_take_them() {
    let unattached: MapControl<u32> = MapControl::new();
    assert!(
        unattached
            .set_key_settings(1, KeySettings::new().limit(2))
            .unwrap_err()
            .is_not_attached()
    );
    assert!(
        unattached
            .set_key_settings(1, KeySettings::new().rate(Rate::per_second(5)))
            .unwrap_err()
            .is_not_attached()
    );
    assert!(
        unattached
            .clear_key_settings(1)
            .unwrap_err()
            .is_not_attached()
    );

    let rated: MapControl = MapControl::new();
    let _map = map_async(0..3u32, 2, |n| async move { n })
        .rate(Rate::per_second(5))
        .control(&rated);
    assert_eq!(
        key_setters_refused(&rated),
        "the map cannot change its key settings: it was built without `.per_key`"
    );

    let keyed: MapControl<u32> = MapControl::new();
    let map = map_async(0..3u32, 2, |n| async move { n })
        .per_key(|n| n % 2, 1)
        .control(&keyed);
    assert!(
        keyed
            .set_key_settings(0, KeySettings::new().limit(2))
            .is_ok()
    );
    assert!(
        keyed
            .set_key_settings(1, KeySettings::new().rate(Rate::per_second(1_000)))
            .is_ok()
    );
    assert!(keyed.clear_key_settings(0).is_ok());
    drop(map);
    assert!(
        keyed
            .set_key_settings(0, KeySettings::new().limit(2))
            .unwrap_err()
            .is_not_attached()
    );

    // Regression: a control attached before `.per_key` is typed by no key (`()`): it
    // took these settings with `Ok`, the map never saw them, and its queue grew.
    let early: MapControl = MapControl::new();
    let map = map_async(0..3u32, 2, |n| async move { n })
        .control(&early)
        .per_key(|n| n % 2, 1);
    assert!(
        early.set_default_key_limit(2).is_ok(),
        "map-wide settings still reach it"
    );
    assert_eq!(
        key_setters_refused(&early),
        "cannot change the key settings: the control was attached before `.per_key`, so it names no key of the map (attach it after `.per_key`)"
    );
    drop(map);
}

#[test]
#[should_panic(expected = "a key limit must be at least 1")]
fn a_key_limit_of_zero_panics() {
    let control: MapControl<u32> = MapControl::new();
    let _map = map_async(0..3u32, 2, |n| async move { n })
        .per_key(|n| *n, 1)
        .control(&control);
    let _ = control.set_key_settings(0, KeySettings::new().limit(0));
}

#[test]
fn settings_the_map_cannot_take_are_errors() {
    let unattached: MapControl = MapControl::new();
    assert!(unattached.set_limit(3).unwrap_err().is_not_attached());

    let plain: MapControl = MapControl::new();
    let _map = map_async(0..3u32, 2, |n| async move { n }).control(&plain);
    assert!(plain.set_limit(4).is_ok());
    for error in [
        plain.set_rate(Rate::per_second(5)).unwrap_err(),
        plain.set_default_key_rate(Rate::per_second(5)).unwrap_err(),
        plain.set_default_key_limit(2).unwrap_err(),
    ] {
        assert!(!error.is_not_attached());
    }
    assert_eq!(
        plain.set_default_key_limit(2).unwrap_err().to_string(),
        "the map cannot change its default key limit: it was built without `.per_key`"
    );

    let rated: MapControl = MapControl::new();
    let _map = map_async(0..3u32, 2, |n| async move { n })
        .rate(Rate::per_second(5))
        .control(&rated);
    assert!(rated.set_rate(Rate::per_second(50)).is_ok());
    assert!(rated.set_default_key_limit(2).is_err(), "no key function");
    let error: tollgate::Error = rated
        .set_default_key_rate(Rate::per_second(5))
        .unwrap_err()
        .into();
    assert!(error.to_string().contains("default key rate"));
}

#[test]
#[should_panic(expected = "attached to another map already")]
fn one_control_steers_one_map() {
    let control: MapControl = MapControl::new();
    let _first = map_async(0..3u32, 2, |n| async move { n }).control(&control);
    let _second = map_async(0..3u32, 2, |n| async move { n }).control(&control);
}

#[test]
#[should_panic(expected = "the global limit must be at least 1")]
fn a_live_limit_of_zero_panics() {
    let control: MapControl = MapControl::new();
    let _map = map_async(0..3u32, 2, |n| async move { n }).control(&control);
    let _ = control.set_limit(0);
}

/// Read from another thread while the map runs: the snapshot is always consistent (no
/// count ahead of the one it is part of), never torn.
#[test]
fn readings_from_another_thread_are_consistent() {
    let control = MapControl::new();
    let reader = control.clone();
    let done = Arc::new(AtomicBool::new(false));
    let stop = Arc::clone(&done);
    // Every 20,000th item waits for one more reading, so the readings are spread over the
    // whole run whatever the threads' speeds (was: at least one, if the thread ran in time).
    let made = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&made);
    let thread = std::thread::spawn(move || {
        let mut readings = 0u64;
        let mut last = 0;
        while !stop.load(SeqCst) {
            let p = reader.progress();
            assert!(p.finished() <= p.started() && p.started() <= p.pulled());
            assert!(p.failed() <= p.finished());
            assert!(p.pulled() >= last, "counts never go back");
            last = p.pulled();
            assert_eq!(
                p.pulled(),
                p.waiting() + p.in_flight() + p.awaiting_retry() + p.finished() + p.not_started()
            );
            readings += 1;
            counted.store(readings, SeqCst);
        }
        readings
    });
    let policy = RetryPolicy::new().attempts(2).interval(Duration::ZERO);
    let outputs = futures_lite::future::block_on(
        map_async(0..200_000u32, 32, |n| {
            let made = &made;
            async move {
                if n % 20_000 == 0 {
                    while made.load(SeqCst) <= u64::from(n / 20_000) {
                        yield_now().await;
                    }
                }
                if n % 3 == 0 {
                    yield_now().await;
                }
                if n % 10 == 0 { Err(n) } else { Ok(n) }
            }
        })
        .per_key(|n| n % 17, 4)
        .retry(policy)
        .control(&control),
    );
    done.store(true, SeqCst);
    let readings = thread.join().unwrap();
    assert_eq!(outputs.len(), 200_000);
    assert!(readings >= 10, "{readings} readings");
    let end = control.progress();
    assert_eq!((end.finished(), end.failed()), (200_000, 20_000));
}

#[test]
fn a_control_and_its_readings_go_to_other_threads() {
    fn check<T: Send + Sync + Clone + 'static>() {}
    check::<MapControl<String>>();
    check::<Progress>();
    check::<tollgate::KeyProgress<String>>();
    check::<tollgate::ControlError>();
}

/// What a test's own closure counts of the attempts it started: started, and run to their
/// end (an attempt the map cancels never ends).
#[derive(Default)]
struct Ran {
    started: AtomicU64,
    ended: AtomicU64,
    /// Items whose attempt failed and was sent back for another, which never started.
    sent_back: AtomicU64,
}

impl Ran {
    /// Attempts that were running when the map was cancelled, plus items left waiting for
    /// a retry: what the map must report as cancelled.
    fn cut_short(&self) -> u64 {
        self.started.load(SeqCst) - self.ended.load(SeqCst) + self.sent_back.load(SeqCst)
    }
}

/// An ended map has nothing in flight, waiting or awaiting a retry; what it cut short is
/// `cancelled`, equal to what the test counted; every pulled item is in one state.
fn check_ended(progress: &Progress, ran: &Ran, at: &str) {
    assert!(progress.is_ended(), "{at}: ended");
    assert_eq!(
        (
            progress.in_flight(),
            progress.waiting(),
            progress.awaiting_retry()
        ),
        (0, 0, 0),
        "{at}: (in flight, waiting, awaiting retry) after the end"
    );
    assert_eq!(progress.cancelled(), ran.cut_short(), "{at}: cancelled");
    check_one_state_each(progress, at);
}

/// The work of item `n` for the cancellation tests: counted in `ran`; pends for good when
/// `forever`, else yields `n % 3` times; fails when `fails`.
async fn cut_work(n: u64, ran: &Ran, forever: bool, fails: bool) -> Result<u64, u64> {
    ran.started.fetch_add(1, SeqCst);
    if forever {
        std::future::pending::<()>().await;
    }
    for _ in 0..n % 3 {
        yield_now().await;
    }
    ran.ended.fetch_add(1, SeqCst);
    if fails { Err(n) } else { Ok(n) }
}

matrix! {
    async fn a_map_stopped_by_its_first_error_reports_what_it_cancelled() {
        // Plain: items after 20 never end, item 20 fails, so 15 others run at the error.
        let ran = Ran::default();
        let control = MapControl::new();
        let out = tollgate::try_map_async(0..1_000u64, 16, |n| cut_work(n, &ran, n > 20, n == 20))
            .control(&control)
            .await;
        assert_eq!(out, Err(20));
        let progress = control.progress();
        check_ended(&progress, &ran, "plain");
        assert!(progress.cancelled() > 0);
        assert_eq!(progress.finished(), ran.ended.load(SeqCst));

        // Keyed, with retries: every 5th item fails once and waits an hour for its retry;
        // item 30 fails for good.
        let ran = Ran::default();
        let control = MapControl::new();
        let policy = RetryPolicy::new()
            .attempts(2)
            .interval(Duration::from_secs(3_600))
            .when(|n: &u64| *n != 30);
        let out = tollgate::try_map_async(0..1_000u64, 16, |n| {
            let ran = &ran;
            async move {
                let output = cut_work(n, ran, n > 30, n == 30 || n % 5 == 1).await;
                if n % 5 == 1 {
                    ran.sent_back.fetch_add(1, SeqCst);
                }
                output
            }
        })
        .per_key(|n| n % 4, 4)
        .retry(policy)
        .control(&control)
        .await;
        assert_eq!(out, Err(30));
        let progress = control.progress();
        check_ended(&progress, &ran, "keyed");
        assert_eq!(progress.retries(), ran.sent_back.load(SeqCst));
        assert!(progress.not_started() > 0, "a keyed map pulls ahead");
        assert_eq!(control.not_started().len() as u64, progress.not_started());
    }

    async fn a_map_dropped_mid_run_reports_what_it_cancelled() {
        // A collecting future, dropped between two polls: every 4th item ends, the others
        // run for good.
        let ran = Ran::default();
        let control = MapControl::new();
        {
            let map = map_async(0..1_000u64, 16, |n| cut_work(n, &ran, n % 4 != 0, false))
                .control(&control);
            let mut map = std::pin::pin!(map);
            while ran.started.load(SeqCst) < 16 {
                assert!(futures_lite::future::poll_once(map.as_mut()).await.is_none());
            }
        }
        check_ended(&control.progress(), &ran, "map_async");
        assert_eq!(control.progress().cancelled(), 16);

        // A keyed stream with retries, dropped right after an output: every 3rd item runs
        // for good, every 7th fails once and waits an hour for its retry.
        let ran = Ran::default();
        let control = MapControl::new();
        let policy = RetryPolicy::new().attempts(2).interval(Duration::from_secs(3_600));
        let mut outputs = stream::iter(0..1_000u64)
            .map_unordered(8, |n| {
                let ran = &ran;
                async move {
                    let fails = n % 7 == 1;
                    let output = cut_work(n, ran, n % 3 == 0, fails).await;
                    if fails {
                        ran.sent_back.fetch_add(1, SeqCst);
                    }
                    output
                }
            })
            .per_key(|n| n % 5, 3)
            .retry(policy)
            .control(&control);
        for _ in 0..10 {
            assert!(outputs.next().await.expect("an output").is_ok());
        }
        drop(outputs);
        let progress = control.progress();
        check_ended(&progress, &ran, "keyed stream");
        assert!(progress.cancelled() > 0 && progress.not_started() > 0);
    }

    async fn a_drained_map_cancels_nothing() {
        for keyed in [false, true] {
            let ran = Ran::default();
            let control = Controls::default();
            let f = |n: u64| {
                if n == 40 {
                    control.drain(keyed);
                }
                cut_work(n, &ran, false, false)
            };
            let outputs = if keyed {
                map_async(0..1_000u64, 8, f).per_key(|n| (n % 3) as usize, 2).control(&control.keyed).await
            } else {
                map_async(0..1_000u64, 8, f).control(&control.plain).await
            };
            let progress = control.progress(keyed);
            check_ended(&progress, &ran, &format!("keyed {keyed}"));
            assert_eq!(progress.cancelled(), 0);
            assert_eq!(outputs.len() as u64, progress.finished());
        }
    }
}

matrix! {
    async fn a_control_is_attached_again_after_its_map_ended() {
        // A run drained from inside its 11th item.
        let control = MapControl::new();
        let stop = control.clone();
        let first = map_async(0..100u64, 4, |n| {
            if n == 10 {
                stop.drain();
            }
            async move {
                yield_now().await;
                n
            }
        })
        .control(&control)
        .await;
        assert_eq!(first.len(), 11);
        let p = control.progress();
        assert!(p.is_ended() && p.is_draining());
        assert_eq!((p.pulled(), p.finished()), (11, 11));
        assert!(control.set_limit(8).unwrap_err().is_not_attached(), "no map between runs");

        // Attached again: the figures start from zero, the drain was the first run's.
        let second = map_async(0..50u64, 4, |n| async move {
            yield_now().await;
            n
        })
        .control(&control);
        let p = control.progress();
        assert_eq!((p.pulled(), p.finished(), p.is_ended(), p.is_draining()), (0, 0, false, false));
        control.set_limit(8).expect("a map is attached");
        assert_eq!(second.await, (0..50).collect::<Vec<_>>());
        let p = control.progress();
        assert_eq!((p.pulled(), p.finished(), p.cancelled(), p.not_started()), (50, 50, 0, 0));
        assert!(p.is_ended() && !p.is_draining());

        // A drain asked between two runs stops the next one before it starts anything;
        // the run after that is whole again.
        control.drain();
        let third = map_async(0..50u64, 4, |n| async move { n }).control(&control).await;
        assert!(third.is_empty());
        assert_eq!(control.progress().pulled(), 0);
        let fourth = map_async(0..50u64, 4, |n| async move { n }).control(&control).await;
        assert_eq!(fourth.len(), 50);
        assert_eq!(control.progress().finished(), 50);

        // Keyed: what a run left unstarted and its busiest keys do not outlive it.
        let control: MapControl<u64> = MapControl::new();
        let (release, gate) = smol::channel::unbounded::<()>();
        let map = map_async(0..5u64, 4, |n| {
            let gate = gate.clone();
            async move {
                if n == 0 {
                    gate.recv().await.expect("released");
                }
                n
            }
        })
        .per_key(|_| 0u64, 1)
        .control(&control);
        let watch = async {
            // Item 0 runs, the 4 others wait for the key: the board shows them.
            while control.busiest_keys(4).first().is_none_or(|key| key.waiting() != 4) {
                yield_now().await;
            }
            control.drain();
            release.send(()).await.unwrap();
        };
        let (first, ()) = zip(map, watch).await;
        assert_eq!(first, [0]);
        assert_eq!(control.not_started(), [1, 2, 3, 4]);
        let second = map_async(0..6u64, 4, |n| async move {
            yield_now().await;
            n
        })
        .per_key(|n| n % 2, 1)
        .control(&control);
        assert!(control.not_started().is_empty());
        assert!(control.busiest_keys(4).is_empty(), "the first run's keys are gone");
        assert_eq!(second.await, [0, 1, 2, 3, 4, 5]);
        let p = control.progress();
        assert_eq!((p.pulled(), p.finished(), p.not_started()), (6, 6, 0));
    }

    async fn a_control_whose_map_was_dropped_mid_run_is_attached_again() {
        let control = MapControl::new();
        let mut map =
            Box::pin(map_async(0..100u64, 4, |_| std::future::pending::<u64>()).control(&control));
        assert!(futures_lite::future::poll_once(map.as_mut()).await.is_none());
        drop(map);
        let p = control.progress();
        assert!(p.is_ended());
        assert_eq!((p.pulled(), p.cancelled()), (4, 4));

        let out = map_async(0..20u64, 4, |n| async move { n }).control(&control).await;
        assert_eq!(out.len(), 20);
        let p = control.progress();
        assert_eq!((p.pulled(), p.finished(), p.cancelled(), p.in_flight()), (20, 20, 0, 0));
        assert!(p.is_ended());

        // A stream dropped after 3 outputs, then a stream run to its end and polled again
        // once the control steers the next run: the ended stream no longer reaches it.
        let mut stream = amap_iter(0..100u64, 4, |n| async move {
            yield_now().await;
            n
        })
        .control(&control);
        for _ in 0..3 {
            assert!(stream.next().await.is_some());
        }
        drop(stream);
        assert!(control.progress().is_ended());
        let mut stream = amap_iter(0..10u64, 4, |n| async move { n }).control(&control);
        let mut count = 0;
        while stream.next().await.is_some() {
            count += 1;
        }
        assert_eq!(count, 10);
        let next = map_async(0..30u64, 4, |n| async move {
            yield_now().await;
            n
        })
        .control(&control);
        assert!(stream.next().await.is_none());
        let p = control.progress();
        assert_eq!((p.pulled(), p.is_ended()), (0, false), "the next run's figures");
        assert_eq!(next.await.len(), 30);
        assert_eq!(control.progress().finished(), 30);
    }
}

virtual_time! {
    async fn a_key_of_its_own_rate_is_spaced_by_it_whatever_the_default() {
        assert_exactly_spaced(&own_rate_from_the_control().await);
    }

    async fn a_key_given_a_rate_by_a_function_is_spaced_by_it_whatever_the_default() {
        assert_exactly_spaced(&own_rate_from_a_function().await);
    }

    async fn a_key_paused_by_its_server_is_counted() {
        let paused = key_paused_by_its_server().await;
        assert_eq!(paused.outputs, [Ok(0)]);
        // Counted as paused, with its item awaiting its retry, until the pause ends: no
        // reading could come too late to see it here.
        let progress = paused.seen_paused.expect("the pause was never seen");
        assert_eq!(progress.awaiting_retry(), 1);
        assert_eq!(paused.retried_at - paused.failed_at, Duration::from_millis(300));
    }
}
