//! The `tracing` feature: retries, key pauses, hedges, rejections and time-outs reach a
//! subscriber, under every runtime (the subscriber is process-wide, so events from tokio's
//! worker threads count too).
#![cfg(feature = "tracing")]

#[macro_use]
mod common;

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use tollgate::{
    Answer, Breaker, Bulkhead, KeyedCircuitBreaker, LaterReason, Outcome, RetryPolicy,
    SharedLimits, map_async, race, retry, sleep, timeout,
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

/// Limits that grant nothing until `ready_at` (a store warming up), saying how long is left.
struct WarmUntil(std::time::Instant);

impl SharedLimits<u32> for WarmUntil {
    type Permit = ();
    type Error = std::convert::Infallible;
    type Ask = std::future::Ready<Answer<(), Self::Error>>;
    type Wake = std::future::Pending<()>;
    type Revoked = std::future::Pending<Self::Error>;

    fn ask(&self, _key: &u32) -> Self::Ask {
        let left = self.0.saturating_duration_since(std::time::Instant::now());
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
        // Four keys, each told "later" several times during one warm-up of 100 ms.
        let limits = WarmUntil(std::time::Instant::now() + Duration::from_millis(100));
        let outputs = map_async(0..8u32, 8, |n| async move { Ok::<u32, std::convert::Infallible>(n) })
            .per_key(|n| n % 4, 2)
            .shared_limits(limits)
            .await;
        assert_eq!(outputs.len(), 8);
        let warm_ups = seen("shared limits warming up");
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
}
