//! What a control shows of each key of a keyed map (`MapControl::busiest_keys`): its counts
//! of attempts by how they ended, idle keys kept in view 60 s after their last attempt, in
//! their order, and an adaptive key's values in force moved by the control
//! (`set_key_in_force`). On virtual time (`virtual_time!`: `run_virtual` and tokio's paused
//! clock), where every figure at a given instant is exact.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::SeqCst};
use std::time::Duration;

use common::virtual_time;
use futures_lite::future::{yield_now, zip};

use tollgate::{
    Adaptive, Breaker, BreakerState, KeyProgress, KeySettings, MapControl, Outcome, Rate,
    RetryPolicy, map_async, sleep,
};

/// Every key in view as the map publishes it now: ask, let the map poll, read.
async fn read(control: &MapControl<&'static str>) -> Vec<KeyProgress<&'static str>> {
    let _ = control.busiest_keys(16);
    yield_now().await;
    control.busiest_keys(16)
}

fn names(keys: &[KeyProgress<&'static str>]) -> Vec<&'static str> {
    keys.iter().map(|key| *key.key()).collect()
}

fn find<'a>(keys: &'a [KeyProgress<&'static str>], name: &str) -> &'a KeyProgress<&'static str> {
    keys.iter()
        .find(|key| *key.key() == name)
        .unwrap_or_else(|| panic!("{name} not in view: {keys:?}"))
}

/// How long an item of each key takes: `busy` outlasts every reading.
fn takes(key: &str) -> Duration {
    Duration::from_secs(match key {
        "busy" => 200,
        "late" => 3,
        _ => 1,
    })
}

/// Each answer by its status: 200 a success, 429 an overload, 503 an outage, the rest
/// failures.
fn classify(output: &Result<u16, u16>) -> Outcome {
    match output {
        Ok(_) => Outcome::success(),
        Err(429) => Outcome::overload(),
        Err(503) => Outcome::outage(),
        Err(_) => Outcome::failure(),
    }
}

/// The sum of a key's counts by kind.
fn kinds(key: &KeyProgress<&'static str>) -> [u32; 4] {
    [
        key.successes(),
        key.overloads(),
        key.outages(),
        key.failures(),
    ]
}

virtual_time! {
    async fn an_idle_key_stays_in_view_60_s_after_its_last_attempt_latest_first() {
        // `early` ends its two attempts at 1 s and 2 s, `late` its one at 3 s; `busy` runs
        // through every reading.
        let control = MapControl::new();
        let items = ["early", "late", "busy", "early"];
        let map = map_async(items, 4, |key| async move {
            sleep(takes(key)).await;
            key
        })
        .per_key(|key| *key, 1)
        .control(&control);
        let watch = async {
            sleep(Duration::from_millis(1_500)).await;
            let at_one = read(&control).await;
            sleep(Duration::from_millis(3_500)).await;
            let at_five = read(&control).await;
            // 61.5 s: `early` ended its last 59.5 s ago, `late` 58.5 s ago.
            sleep(Duration::from_millis(56_500)).await;
            let at_sixty_one = read(&control).await;
            // 62.5 s: `early` is out of view; 63.5 s: `late` too.
            sleep(Duration::from_secs(1)).await;
            let at_sixty_two = read(&control).await;
            sleep(Duration::from_secs(1)).await;
            let at_sixty_three = read(&control).await;
            (at_one, at_five, [at_sixty_one, at_sixty_two, at_sixty_three])
        };
        let (outputs, (at_one, at_five, after)) = zip(map, watch).await;
        assert_eq!(outputs, items);
        // Busy keys first, as before: `early` has one ended, one running.
        let early = find(&at_one, "early");
        assert_eq!((early.in_flight(), early.waiting(), early.attempts()), (1, 0, 1));
        assert_eq!(early.successes() + early.failures(), 0, "this map reads no outcome");
        // Then the idle keys, the one whose last attempt ended latest first.
        assert_eq!(names(&at_five), ["busy", "late", "early"], "{at_five:?}");
        let [busy, late, early] = [0, 1, 2].map(|at| &at_five[at]);
        assert_eq!((busy.in_flight(), busy.attempts()), (1, 0));
        assert_eq!((late.in_flight(), late.waiting(), late.attempts()), (0, 0, 1));
        assert_eq!((early.in_flight(), early.waiting(), early.attempts()), (0, 0, 2));
        assert_eq!(kinds(early), [0; 4]);
        let [sixty_one, sixty_two, sixty_three] = after;
        assert_eq!(names(&sixty_one), ["busy", "late", "early"], "{sixty_one:?}");
        assert_eq!(names(&sixty_two), ["busy", "late"], "{sixty_two:?}");
        assert_eq!(names(&sixty_three), ["busy"], "{sixty_three:?}");
    }

    async fn a_key_counts_its_attempts_by_the_kind_of_their_outcome() {
        // `host` answers 200, 429, 503, 404, 200, one a second, one at a time.
        let control = MapControl::new();
        let answers: [(&str, u16); 6] = [
            ("host", 200),
            ("busy", 200),
            ("host", 429),
            ("host", 503),
            ("host", 404),
            ("host", 200),
        ];
        let map = map_async(answers, 4, |(key, status)| async move {
            sleep(takes(key)).await;
            if status == 200 { Ok(status) } else { Err(status) }
        })
        .per_key(|(key, _)| *key, 1)
        .classify(classify)
        .control(&control);
        let watch = async {
            sleep(Duration::from_millis(2_500)).await;
            let mid_way = read(&control).await;
            sleep(Duration::from_secs(5)).await;
            let done = read(&control).await;
            (mid_way, done)
        };
        let (outputs, (mid_way, done)) = zip(map, watch).await;
        assert_eq!(outputs.len(), 6);
        // At 2.5 s: the 200 and the 429 ended, the 503 runs, two wait.
        let host = find(&mid_way, "host");
        assert_eq!((host.attempts(), host.in_flight(), host.waiting()), (2, 1, 2));
        assert_eq!(kinds(host), [1, 1, 0, 0], "{host:?}");
        let host = find(&done, "host");
        assert_eq!((host.attempts(), host.in_flight(), host.waiting()), (5, 0, 0));
        assert_eq!(kinds(host), [2, 1, 1, 1], "{host:?}");
        assert_eq!(names(&done), ["busy", "host"], "{done:?}");
    }

    async fn retries_are_attempts_and_a_map_without_outcomes_counts_only_those() {
        // `flaky` fails twice, then succeeds: three attempts, one item.
        let control = MapControl::new();
        let tries = AtomicU32::new(0);
        let map = map_async(["flaky", "busy"], 4, |key| {
            let tries = &tries;
            async move {
                sleep(takes(key)).await;
                if key == "flaky" && tries.fetch_add(1, SeqCst) < 2 {
                    Err(key)
                } else {
                    Ok(key)
                }
            }
        })
        .per_key(|key| *key, 1)
        .retry(RetryPolicy::new().attempts(3).interval(Duration::from_secs(1)).jitter(0.0))
        .control(&control);
        let watch = async {
            sleep(Duration::from_secs(10)).await;
            read(&control).await
        };
        let (outputs, at_ten) = zip(map, watch).await;
        assert_eq!(outputs, [Ok("flaky"), Ok("busy")]);
        let flaky = find(&at_ten, "flaky");
        assert_eq!((flaky.attempts(), flaky.in_flight()), (3, 0), "{flaky:?}");
        assert_eq!(kinds(flaky), [0; 4], "no outcome read");
    }

    async fn keys_with_an_open_breaker_come_after_busy_ones_and_before_idle_ones() {
        // `broken` fails twice (at 1 s and 2 s) and its breaker opens for 100 s; `late`
        // succeeds at 3 s, after it. (Its open key's items would wait: it has none left.)
        let control = MapControl::new();
        let answers: [(&str, u16); 4] = [("broken", 500), ("late", 200), ("busy", 200), ("broken", 500)];
        let map = map_async(answers, 4, |(key, status)| async move {
            sleep(takes(key)).await;
            if status == 200 { Ok(status) } else { Err(status) }
        })
        .per_key(|(key, _)| *key, 1)
        .classify(classify)
        .breaker_waiting(Breaker::new().min_attempts(2).over_last(2).open_for(Duration::from_secs(100)));
        let map = map.control(&control);
        let watch = async {
            sleep(Duration::from_secs(5)).await;
            read(&control).await
        };
        let (outputs, at_five) = zip(map, watch).await;
        assert_eq!(outputs.len(), 4);
        assert_eq!(names(&at_five), ["busy", "broken", "late"], "{at_five:?}");
        let broken = find(&at_five, "broken");
        assert_eq!(broken.breaker(), Some(BreakerState::Open));
        assert_eq!((broken.attempts(), kinds(broken)), (2, [0, 0, 0, 2]));
        assert_eq!(find(&at_five, "late").breaker(), Some(BreakerState::Closed));
    }

    async fn a_control_moves_an_adaptive_keys_values_in_force_and_adaptation_goes_on_from_them() {
        // `host` has a long run of items, 100 ms each, all successes but one 429 after 8 s;
        // at 1 s the control moves its values to 10 at once and 50 a second.
        let control = MapControl::new();
        let overloaded = AtomicBool::new(false);
        let started = tollgate::testing::now();
        let items = std::iter::repeat_n("host", 2_000).chain(["busy"]);
        let map = map_async(items, 32, |key| {
            let overloaded = &overloaded;
            async move {
                sleep(if key == "busy" { takes(key) } else { Duration::from_millis(100) }).await;
                let late = tollgate::testing::now() - started >= Duration::from_secs(8);
                if late && !overloaded.swap(true, SeqCst) { Err(429) } else { Ok(200) }
            }
        })
        .per_key(|key| *key, 16)
        .adaptive(Adaptive::new(1, 16).rate_ceiling(Rate::per_second(200)), classify)
        .control(&control);
        let rate = |key: &KeyProgress<&'static str>| {
            1.0 / key.rate().expect("an adaptive key under a rate ceiling has a rate").interval().as_secs_f64()
        };
        let watch = async {
            sleep(Duration::from_secs(1)).await;
            let before = read(&control).await;
            let set = KeySettings::new().limit(10).rate(Rate::per_second(50));
            control.set_key_in_force("host", set).unwrap();
            // A key the map does not hold: nothing to move, and no error.
            control.set_key_in_force("unknown", set).unwrap();
            sleep(Duration::from_millis(100)).await;
            let after = read(&control).await;
            sleep(Duration::from_millis(6_800)).await;
            let at_eight = read(&control).await;
            // The 429 comes with the first item to end from 8 s on.
            sleep(Duration::from_millis(250)).await;
            let cut = read(&control).await;
            let [before, after, at_eight, cut] = [before, after, at_eight, cut]
                .map(|keys| find(&keys, "host").clone());
            (before, after, at_eight, cut)
        };
        let (outputs, (before, after, at_eight, cut)) = zip(map, watch).await;
        assert_eq!(outputs.len(), 2_001);
        assert!(rate(&before) < 50.0 && before.limit() < 10, "starts low: {before:?}");
        assert_eq!(after.limit(), 10, "{after:?}");
        assert!((rate(&after) - 50.0).abs() < 0.5, "{after:?}");
        // Seven seconds of clean rounds: kept (creeping above), not back to slow start.
        assert_eq!(at_eight.limit(), 10, "the limit did not bind: {at_eight:?}");
        assert!((50.0..60.0).contains(&rate(&at_eight)), "{at_eight:?}");
        // The 429 cut the rate that bound, from where it was.
        assert!(rate(&cut) <= rate(&at_eight) * 0.75, "{at_eight:?} then {cut:?}");
        assert!(rate(&cut) >= 30.0, "{cut:?}");
        assert_eq!(cut.overloads(), 1);
    }

    async fn values_in_force_are_an_adaptive_maps_alone() {
        let control = MapControl::new();
        let map = map_async(["host"], 4, |key| async move {
            sleep(Duration::from_secs(1)).await;
            key
        })
        .per_key(|key| *key, 1)
        .control(&control);
        let set = async {
            yield_now().await;
            let error = control
                .set_key_in_force("host", KeySettings::new().limit(2))
                .unwrap_err();
            assert!(!error.is_not_attached());
            assert!(error.to_string().contains("its keys do not adapt"), "{error}");
        };
        let (outputs, ()) = zip(map, set).await;
        assert_eq!(outputs, ["host"]);
        let error = control
            .set_key_in_force("host", KeySettings::new().limit(2))
            .unwrap_err();
        assert!(error.is_not_attached(), "{error}");
    }
}
