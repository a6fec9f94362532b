//! The `tracing` feature: retries, key pauses, hedges, rejections, time-outs, warm-ups of
//! shared limits, breakers' transitions and adaptive keys' changes reach a subscriber (it is
//! process-wide, so events from tokio's worker threads count too; one test at a time).
//!
//! On every executor (smol, `run_sync`, tokio current and multi-thread), what holds at any
//! speed: which events, in which order, with the settings they name; a warm-up reported
//! once and no grant before it ends; an adaptive key's changes each reported, in order, with
//! the values read in force. On virtual time (`virtual_time!`), what depends on time: the
//! warm-up's grants exactly at its end and the time left it reports, and how far an
//! adaptive key moves in each phase of its answers (successes raise it to its ceiling,
//! overloads lower its rate, plain failures move and report nothing).
#![cfg(feature = "tracing")]

#[macro_use]
mod common;

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering::SeqCst};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use futures_lite::future::{yield_now, zip};
use tollgate::testing::now;
use tollgate::{
    Adaptive, Answer, Breaker, Bulkhead, Hint, KeyProgress, KeySettings, KeyedCircuitBreaker,
    LaterReason, MapControl, Outcome, Rate, RetryPolicy, SharedLimits, map_async, race, retry,
    sleep, timeout,
};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// One event as the test sees it: its level and every field as text.
#[derive(Debug, Clone)]
struct Seen {
    level: Level,
    fields: BTreeMap<String, String>,
}

impl Seen {
    fn message(&self) -> &str {
        self.fields.get("message").map_or("", String::as_str)
    }

    fn field(&self, name: &str) -> &str {
        self.fields.get(name).map_or("", String::as_str)
    }
}

/// Records every event whose target is `tollgate`.
struct Recorder;

static SEEN: Mutex<Vec<Seen>> = Mutex::new(Vec::new());

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl Subscriber for Recorder {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.target() == "tollgate"
    }
    fn new_span(&self, _span: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _span: &Id, _values: &Record<'_>) {}
    fn record_follows_from(&self, _span: &Id, _follows: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        SEEN.lock().unwrap().push(Seen {
            level: *event.metadata().level(),
            fields,
        });
    }
    fn enter(&self, _span: &Id) {}
    fn exit(&self, _span: &Id) {}
}

/// Installs the recorder once, runs one test at a time (events are process-wide) and
/// starts each with an empty record.
/// (An async mutex: its guard is held across the test's awaits, and a failed test must not
/// poison the others.)
fn exclusive() -> async_lock::MutexGuard<'static, ()> {
    static INSTALL: OnceLock<()> = OnceLock::new();
    static ONE_AT_A_TIME: async_lock::Mutex<()> = async_lock::Mutex::new(());
    INSTALL.get_or_init(|| tracing::subscriber::set_global_default(Recorder).unwrap());
    let guard = ONE_AT_A_TIME.lock_blocking();
    SEEN.lock().unwrap().clear();
    guard
}

fn seen(message: &str) -> Vec<Seen> {
    SEEN.lock()
        .unwrap()
        .iter()
        .filter(|seen| seen.message() == message)
        .cloned()
        .collect()
}

/// Limits that grant nothing until `ready_at` (a store warming up), saying how long is left
/// (at most 10 ms at a time), on tollgate's clock.
struct WarmUntil(std::time::Instant);

impl SharedLimits<u32> for WarmUntil {
    type Permit = ();
    type Error = std::convert::Infallible;
    type Ask = std::future::Ready<Answer<(), Self::Error>>;
    type Wake = std::future::Pending<()>;
    type Revoked = std::future::Pending<Self::Error>;

    fn ask(&self, _key: &u32) -> Self::Ask {
        let left = self.0.saturating_duration_since(now());
        std::future::ready(if left.is_zero() {
            Answer::Granted(())
        } else {
            Answer::Later(left.min(Duration::from_millis(10)), LaterReason::WarmingUp)
        })
    }
    fn wake(&self, _key: &u32) -> Option<Self::Wake> {
        None
    }
    fn revoked(&self, _permit: &()) -> Option<Self::Revoked> {
        None
    }
}

type Contestant = Pin<Box<dyn Future<Output = Result<u32, &'static str>> + Send>>;

/// The `key adapted` events so far: each one's limit and rate as it wrote them.
fn adapted() -> Vec<(String, String)> {
    seen("key adapted")
        .iter()
        .map(|seen| {
            assert_eq!(seen.level, Level::DEBUG);
            (
                seen.field("limit").to_owned(),
                seen.field("rate_per_second").to_owned(),
            )
        })
        .collect()
}

/// A key's values as `busiest_keys` reads them, written as the event writes them (no rate:
/// no field).
fn written(key: &KeyProgress<u32>) -> (String, String) {
    let rate = key
        .rate()
        .map(|rate| 1e9 / rate.interval().as_nanos() as f64);
    (
        key.limit().to_string(),
        rate.map_or_else(String::new, |rate| format!("{rate:?}")),
    )
}

/// What the server of the adaptive tests answers: a success, an overload, a plain failure.
const OK: u8 = 0;
const BUSY: u8 = 1;
const NOT_FOUND: u8 = 2;

fn classify(answer: &u8) -> Outcome {
    match *answer {
        OK => Outcome::success(),
        BUSY => Outcome::overload(),
        _ => Outcome::failure(),
    }
}

/// An adaptive map of one key (0) whose attempts take 5 ms and are answered `answer`, under
/// `control`, beside `drive`; returns what `drive` returns, once the map drained.
async fn one_adaptive_key<R>(
    adaptive: Adaptive,
    answer: &AtomicU8,
    control: &MapControl<u32>,
    drive: impl Future<Output = R>,
) -> R {
    let map = map_async(0u32.., 16, |_| async move {
        sleep(Duration::from_millis(5)).await;
        answer.load(SeqCst)
    })
    .per_key(|_| 0u32, 8)
    .adaptive(adaptive, classify)
    .control(control);
    let drive = async {
        let out = drive.await;
        control.drain();
        out
    };
    zip(map, drive).await.1
}

/// Key 0's values in force, read between two polls of the map.
async fn read(control: &MapControl<u32>) -> (String, String) {
    let _ = control.busiest_keys(1);
    yield_now().await;
    written(control.busiest_keys(1).first().expect("key 0 has work"))
}

/// How long the limits of the warm-up tests grant nothing.
const WARM_UP: Duration = Duration::from_millis(100);

/// Eight items over four keys (two of each at once) behind limits warming up for
/// [`WARM_UP`]: how many outputs, how long they took on tollgate's clock, and the warm-up
/// events.
async fn warm_up() -> (usize, Duration, Vec<Seen>) {
    let began = now();
    let limits = WarmUntil(began + WARM_UP);
    let outputs = map_async(0..8u32, 8, |n| async move {
        Ok::<u32, std::convert::Infallible>(n)
    })
    .per_key(|n| n % 4, 2)
    .shared_limits(limits)
    .await;
    (
        outputs.len(),
        now() - began,
        seen("shared limits warming up"),
    )
}

/// A new adaptive key's values: its floor limit, and the rate it starts at (1.8 a second,
/// as `f32` rounds it and the event prints it).
fn floor() -> (String, String) {
    ("1".to_owned(), "1.7999999532000013".to_owned())
}

/// What one adaptive key showed through phases of answers, read every 5 ms.
struct Changes {
    /// Each reading, with the answer being given when it was made (the first, before any
    /// answer, with `OK`).
    readings: Vec<(u8, (String, String))>,
    /// The `key adapted` events, in order.
    events: Vec<(String, String)>,
    /// How many of them came while plain failures were answered.
    during_failures: usize,
}

impl Changes {
    /// The distinct values read, in order.
    fn values(&self) -> Vec<(String, String)> {
        let mut values: Vec<_> = self
            .readings
            .iter()
            .map(|(_, value)| value.clone())
            .collect();
        values.dedup();
        values
    }

    /// The last values read while `phase` was answered.
    fn last_in(&self, phase: u8) -> &(String, String) {
        &self
            .readings
            .iter()
            .rev()
            .find(|(answer, _)| *answer == phase)
            .unwrap()
            .1
    }

    /// Each event is a change, each change read is reported with its new values, in order,
    /// and the last values reported are the ones in force: what holds at any speed.
    fn assert_each_change_reported_in_order(&self) {
        let (values, events) = (self.values(), &self.events);
        println!("values read: {values:?}");
        let before = std::iter::once(&values[0]).chain(events);
        assert!(
            before.zip(events).all(|(before, after)| before != after),
            "{events:?}"
        );
        let mut reported = events.iter();
        for value in &values[1..] {
            assert!(
                reported.any(|event| event == value),
                "{value:?} read, not reported: {events:?}"
            );
        }
        assert_eq!(events.last(), values.last());
    }
}

/// One adaptive key (floor 1, ceiling 8, at most 40/s) answered with successes for 1.5 s
/// (its limit and rate rise), overloads for 300 ms (its rate falls), then plain failures for
/// 200 ms (nothing moves), each phase timed on tollgate's clock.
async fn adaptive_changes() -> Changes {
    let answer = AtomicU8::new(OK);
    let control = MapControl::new();
    let adaptive = Adaptive::new(1, 8).rate_ceiling(Rate::per_second(40));
    let (readings, during_failures) = one_adaptive_key(adaptive, &answer, &control, async {
        let mut readings = vec![(OK, read(&control).await)];
        let mut during_failures = 0;
        for (phase, span) in [(OK, 1_500), (BUSY, 300), (NOT_FOUND, 200)] {
            answer.store(phase, SeqCst);
            if phase == NOT_FOUND {
                during_failures = adapted().len();
            }
            let began = now();
            while now() - began < Duration::from_millis(span) {
                sleep(Duration::from_millis(5)).await;
                readings.push((phase, read(&control).await));
            }
        }
        during_failures = adapted().len() - during_failures;
        (readings, during_failures)
    })
    .await;
    Changes {
        readings,
        events: adapted(),
        during_failures,
    }
}

matrix! {
    async fn a_retry_reports_each_attempt_and_why_it_waits() {
        let _one = exclusive();
        let mut calls = 0;
        let value = retry(|| {
            calls += 1;
            let call = calls;
            async move {
                match call {
                    1 => Err("refused"),
                    2 => {
                        sleep(Duration::from_secs(3600)).await;
                        Err("never")
                    }
                    _ => Ok(call),
                }
            }
        })
        .attempts(3)
        .interval(Duration::from_millis(2))
        .attempt_timeout(Duration::from_millis(20))
        .await
        .unwrap();
        assert_eq!(value, 3);
        let retries = seen("retry");
        assert_eq!(retries.len(), 2, "{retries:?}");
        assert_eq!(retries[0].field("attempt_number"), "1");
        assert_eq!(retries[0].field("reason"), "error");
        assert_eq!(retries[0].field("pause_ms"), "2");
        assert_eq!(retries[1].field("attempt_number"), "2");
        assert_eq!(retries[1].field("reason"), "attempt timed out");
        assert!(retries.iter().all(|retry| retry.level == Level::DEBUG));
        // The attempt's own time limit is a `timeout` inside the retry: it reports too.
        let timed_out = seen("timed out");
        assert_eq!(timed_out.len(), 1, "{timed_out:?}");
        assert_eq!(timed_out[0].field("operation"), "timeout");
        assert_eq!(timed_out[0].field("after_ms"), "20");
    }

    async fn a_maps_retries_report_the_servers_pause_and_the_key_pause() {
        let _one = exclusive();
        let policy = RetryPolicy::<u32, Option<Duration>>::new()
            .attempts(3)
            .interval(Duration::from_millis(1))
            .retry_after(|pause| *pause)
            .pause_key(|pause| *pause);
        let tries = Mutex::new(BTreeMap::<u32, u32>::new());
        let tries = &tries;
        let outputs = map_async(0..4u32, 2, move |item| async move {
            let attempt = {
                let mut tries = tries.lock().unwrap();
                let count = tries.entry(item).or_default();
                *count += 1;
                *count
            };
            match (item, attempt) {
                // Item 0 is turned away once with a Retry-After of 5 ms (pausing its key),
                // item 1 fails once without one.
                (0, 1) => Err(Some(Duration::from_millis(5))),
                (1, 1) => Err(None),
                _ => Ok(item),
            }
        })
        .per_key(|item: &u32| item % 2, 1)
        .retry(policy)
        .await;
        assert_eq!(outputs, vec![Ok(0), Ok(1), Ok(2), Ok(3)]);
        let retries = seen("retry");
        assert_eq!(retries.len(), 2, "{retries:?}");
        let mut reasons: Vec<_> = retries.iter().map(|retry| retry.field("reason").to_owned()).collect();
        reasons.sort();
        assert_eq!(reasons, ["error", "retry-after"]);
        let paused = seen("key paused");
        assert_eq!(paused.len(), 1, "{paused:?}");
        assert_eq!(paused[0].field("pause_ms"), "5");
        assert_eq!(paused[0].field("attempt_number"), "1");
        assert_eq!(paused[0].field("source"), "pause_key");
        assert_eq!(paused[0].level, Level::INFO);
    }

    async fn a_servers_hint_that_pauses_a_key_reports_it_as_the_retry_policy_does() {
        let _one = exclusive();
        // Item 0's output carries a server's pause of 3 ms; item 1's a rate, no pause.
        let outputs = map_async(0..2u32, 2, |item| async move { item })
            .per_key(|item: &u32| *item, 1)
            .classify(|item: &u32| {
                let hint = match item {
                    0 => Hint::new().pause(Duration::from_millis(3)),
                    _ => Hint::new().rate(Rate::per_second(1_000)),
                };
                Outcome::success().with_hint(hint)
            })
            .await;
        assert_eq!(outputs, vec![0, 1]);
        let paused = seen("key paused");
        assert_eq!(paused.len(), 1, "{paused:?}");
        assert_eq!(paused[0].field("pause_ms"), "3");
        assert_eq!(paused[0].field("attempt_number"), "1");
        assert_eq!(paused[0].field("source"), "hint");
        assert_eq!(paused[0].level, Level::INFO);
    }

    async fn a_hedged_race_reports_each_hedge_and_why() {
        let _one = exclusive();
        // The first is slow: the second starts when the delay passes. The second fails at
        // once: the third starts without waiting.
        let contestants: Vec<Contestant> = vec![
            Box::pin(async {
                sleep(Duration::from_secs(3600)).await;
                Ok(0)
            }),
            Box::pin(async { Err("down") }),
            Box::pin(async { Ok(2) }),
        ];
        let winner = race(contestants).hedge(Duration::from_millis(5)).await.unwrap();
        assert_eq!(winner, 2);
        let hedges = seen("hedge");
        assert_eq!(hedges.len(), 2, "{hedges:?}");
        assert_eq!(hedges[0].field("contestant"), "1");
        assert_eq!(hedges[0].field("reason"), "hedge delay passed");
        assert_eq!(hedges[1].field("contestant"), "2");
        // Contestant 0 still runs, so the third start is by the delay too: it waits for it.
        assert_eq!(hedges[1].field("reason"), "hedge delay passed");
    }

    async fn a_refused_permit_and_a_race_timeout_report() {
        let _one = exclusive();
        let bulkhead = Bulkhead::new(1).name("events-api").max_waiting(0);
        let held = bulkhead.acquire().await.unwrap();
        assert!(bulkhead.acquire().await.is_err());
        drop(held);
        let rejected = seen("rejected");
        assert_eq!(rejected.len(), 1, "{rejected:?}");
        assert_eq!(rejected[0].field("name"), "events-api");
        assert_eq!(rejected[0].field("limit"), "1");
        assert_eq!(rejected[0].field("reason"), "QueueFull");

        let slow = async {
            sleep(Duration::from_secs(3600)).await;
            Ok::<u32, ()>(1)
        };
        assert!(race((slow,)).timeout(Duration::from_millis(3)).await.is_err());
        assert!(timeout(Duration::from_millis(1), sleep(Duration::from_secs(3600))).await.is_err());
        let operations: Vec<_> = seen("timed out").iter().map(|seen| seen.field("operation").to_owned()).collect();
        assert_eq!(operations, ["race", "timeout"]);
    }

    async fn a_warm_up_of_the_shared_limits_is_reported_once() {
        let _one = exclusive();
        let (outputs, took, warm_ups) = warm_up().await;
        assert_eq!(outputs, 8);
        // Granted only once the limits said so, however late the map heard it.
        assert!(took >= WARM_UP, "all granted after {took:?} of a {WARM_UP:?} warm-up");
        assert_eq!(warm_ups.len(), 1, "{warm_ups:?}");
        assert_eq!(warm_ups[0].level, Level::INFO);
        let remaining: u64 = warm_ups[0].field("remaining_ms").parse().unwrap();
        assert!(remaining <= 10, "told {remaining} ms");
    }

    async fn a_circuit_breaker_reports_each_transition_naming_its_key() {
        let _one = exclusive();
        let per_host = KeyedCircuitBreaker::<String>::new(
            Breaker::new().min_attempts(4).failure_ratio(0.5).open_for(Duration::ZERO),
        );
        for outcome in [Outcome::success(), Outcome::overload(), Outcome::success(), Outcome::failure()] {
            per_host.try_acquire("a.example").unwrap().report(outcome);
        }
        let probe = per_host.try_acquire("a.example").unwrap(); // open for no time: a probe
        probe.report(Outcome::success());
        let seen = seen("circuit breaker");
        let steps: Vec<_> = seen.iter().map(|seen| (seen.field("from"), seen.field("to"))).collect();
        assert_eq!(steps, [("closed", "open"), ("open", "half-open"), ("half-open", "closed")]);
        assert!(seen.iter().all(|seen| seen.level == Level::INFO && seen.field("key") == "\"a.example\""));
        assert_eq!(seen[0].field("attempts"), "4");
        assert_eq!(seen[0].field("failure_ratio"), "0.5");
    }

    async fn an_adaptive_key_reports_each_change_with_its_new_values() {
        let _one = exclusive();
        let changes = adaptive_changes().await;
        let values = changes.values();
        assert_eq!(values[0], floor(), "a new key: its floor, 1.8/s");
        changes.assert_each_change_reported_in_order();
    }

    async fn a_map_that_does_not_adapt_reports_no_key_adapted() {
        let _one = exclusive();
        // Per-key limits and rates, a key's own settings, changed while it runs; retries.
        let control = MapControl::new();
        let policy = RetryPolicy::<u32, u32>::new().attempts(3).interval(Duration::from_millis(1));
        let outputs = map_async(0..200u32, 8, |n| {
            let control = &control;
            async move {
                match n {
                    50 => {
                        control.set_key_settings(1, KeySettings::new().limit(1)).unwrap();
                        control.set_key_settings(2, KeySettings::new().rate(Rate::per_second(2_000))).unwrap();
                    }
                    100 => {
                        control.set_default_key_limit(2).unwrap();
                        control.set_default_key_rate(Rate::per_second(1_000)).unwrap();
                        control.clear_key_settings(1).unwrap();
                    }
                    _ => {}
                }
                sleep(Duration::from_millis(1)).await;
                if n % 7 == 0 { Err(n) } else { Ok(n) }
            }
        })
        .per_key(|n| n % 4, 4)
        .per_key_rate(Rate::per_second(5_000))
        .key_settings(|key| match *key {
            3 => KeySettings::new().limit(1),
            _ => KeySettings::new(),
        })
        .retry(policy)
        .control(&control)
        .await;
        assert_eq!(outputs.len(), 200);
        assert!(adapted().is_empty(), "{:?}", adapted());
    }

    async fn an_adaptive_key_whose_values_cannot_move_reports_nothing() {
        let _one = exclusive();
        let answer = AtomicU8::new(NOT_FOUND);
        let control = MapControl::new();
        // Plain failures only: they never lower a key, and without a success nothing rises.
        let adaptive = Adaptive::new(1, 8).rate_ceiling(Rate::per_second(40));
        let first = one_adaptive_key(adaptive, &answer, &control, async {
            sleep(Duration::from_millis(300)).await;
            read(&control).await
        })
        .await;
        assert_eq!(first, floor());
        assert!(adapted().is_empty(), "{:?}", adapted());
        // Successes, at full use, of a key whose floor is its ceiling and that has no rate:
        // its rounds close, each time finding nothing to raise.
        answer.store(OK, SeqCst);
        let control = MapControl::new();
        let last = one_adaptive_key(Adaptive::new(3, 3), &answer, &control, async {
            sleep(Duration::from_millis(300)).await;
            read(&control).await
        })
        .await;
        assert_eq!(last, ("3".to_owned(), String::new()));
        assert!(adapted().is_empty(), "{:?}", adapted());
    }

    async fn a_ceiling_that_takes_an_adaptive_keys_values_down_reports_them() {
        let _one = exclusive();
        let answer = AtomicU8::new(OK);
        let control = MapControl::new();
        let adaptive = Adaptive::new(1, 8).rate_ceiling(Rate::per_second(40));
        let (risen, lowered) = one_adaptive_key(adaptive, &answer, &control, async {
            let mut risen = read(&control).await;
            // (From 1.8/s, rising by 15% a round: above 2/s within a few seconds.)
            while risen.0 == "1" || risen.1.parse::<f64>().unwrap() < 2.5 {
                sleep(Duration::from_millis(5)).await;
                risen = read(&control).await;
            }
            let before = adapted().len();
            control.set_key_settings(0, KeySettings::new().limit(1)).unwrap();
            control.set_key_settings(0, KeySettings::new().rate(Rate::per_second(2))).unwrap();
            let lowered = read(&control).await;
            (risen, (lowered, adapted()[before..].to_vec()))
        })
        .await;
        let (lowered, reported) = lowered;
        assert_eq!(lowered, ("1".to_owned(), "2.0".to_owned()), "risen to {risen:?}");
        // The values in force moved: the change is reported with them.
        assert_eq!(
            reported.last(),
            Some(&lowered),
            "risen to {risen:?}, then reported {reported:?}"
        );
    }
}

virtual_time! {
    async fn a_warm_up_ends_exactly_when_the_limits_said() {
        let _one = exclusive();
        let (outputs, took, warm_ups) = warm_up().await;
        assert_eq!(outputs, 8);
        // Told "later" at 0, 10, .., 90 ms, granted when asked at 100 ms.
        assert_eq!(took, WARM_UP);
        assert_eq!(warm_ups.len(), 1, "{warm_ups:?}");
        // Heard at the start, when 100 ms were left, of which the limits said 10.
        assert_eq!(warm_ups[0].field("remaining_ms"), "10");
    }

    async fn an_adaptive_key_moves_with_its_answers_and_reports_each_change() {
        let _one = exclusive();
        let changes = adaptive_changes().await;
        let values = changes.values();
        assert_eq!(values[0], floor(), "a new key: its floor, 1.8/s");
        changes.assert_each_change_reported_in_order();
        // Each phase's moves, from the values in force when it began: the key starts at 1.8/s
        // (an attempt every 556 ms), so 1.5 s of successes raise its limit once (a round of
        // its limit of 1 is one attempt) and not its rate (a round of the rate is 4 attempts,
        // 2.2 s), and 300 ms of overloads halve its rate once (refused at the pace it started
        // with). On virtual time no poll is late, so these counts are exact.
        let moves = |phase: u8| {
            // (The phases come in the order of their answers: OK, BUSY, NOT_FOUND.)
            let mut last = if phase == OK { values[0].clone() } else { changes.last_in(phase - 1).clone() };
            let (mut up, mut down) = (0, 0);
            for (_, value) in changes.readings.iter().filter(|(answer, _)| *answer == phase) {
                if *value != last {
                    let rate = |value: &(String, String)| value.1.parse::<f64>().unwrap();
                    let limit = |value: &(String, String)| value.0.parse::<u32>().unwrap();
                    if limit(value) >= limit(&last) && rate(value) >= rate(&last) {
                        up += 1;
                    } else if limit(value) <= limit(&last) && rate(value) <= rate(&last) {
                        down += 1;
                    } else {
                        panic!("{last:?} to {value:?}: one value up, one down");
                    }
                    last = value.clone();
                }
            }
            (up, down)
        };
        assert_eq!(moves(OK), (1, 0), "successes: {values:?}");
        assert_eq!(changes.last_in(OK).0, "2");
        assert_eq!(moves(BUSY), (0, 1), "overloads: {values:?}");
        assert_eq!(moves(NOT_FOUND), (0, 0), "plain failures: {values:?}");
        assert_eq!(changes.during_failures, 0, "{:?}", changes.events);
        assert_eq!(changes.events.len(), 2, "{:?}", changes.events);
    }
}
