//! A slow consumer beside an adaptive map, on virtual time (`run_virtual` and tokio's
//! paused clock), where latencies are exact: the consumer's work awaited `alongside` the
//! map is never counted as the server's latency, so a consumer that slows down does not
//! lower its key's limit or rate; the same work done inside the mapped function is counted,
//! and lowers the limit (shown beside it, so the test can fail).

mod common;

use std::pin::pin;
use std::time::Duration;

use common::virtual_time;
use futures_lite::StreamExt;
use futures_lite::future::yield_now;
use tollgate::{
    Adaptive, BoundedStreamExt, KeyProgress, MapControl, Outcome, Rate, amap_iter, sleep,
};

/// Items of each run, all of one key.
const ITEMS: u32 = 120;

/// The server's latency, always the same.
const SERVER: Duration = Duration::from_millis(50);

/// The consumer's work on output `n`: quick for the first 40, then slow (a database that
/// got busy).
fn work_time(n: u32) -> Duration {
    if n < 40 {
        Duration::from_millis(5)
    } else {
        Duration::from_millis(300)
    }
}

async fn fetch(n: u32) -> u32 {
    sleep(SERVER).await;
    n
}

fn adaptive() -> Adaptive {
    Adaptive::new(1, 8).rate_ceiling(Rate::per_second(1_000))
}

/// The key's figures as the map last published them, and a request for the next
/// publication (the map publishes while it is driven; a key with nothing waiting or in
/// flight is not listed).
fn read(control: &MapControl<&'static str>) -> Option<KeyProgress<&'static str>> {
    control.busiest_keys(1).pop()
}

/// Keeps `read` as the last figures seen before output `BEFORE` and after output `AFTER`.
const BEFORE: u32 = 40;
const AFTER: u32 = 90;

fn note(
    n: u32,
    read: Option<KeyProgress<&'static str>>,
    before: &mut Option<KeyProgress<&'static str>>,
    after: &mut Option<KeyProgress<&'static str>>,
) {
    match (read, n) {
        (Some(key), n) if n < BEFORE => *before = Some(key),
        (Some(key), n) if n >= AFTER => *after = Some(key),
        _ => {}
    }
}

/// The rate in starts per second (0: none).
fn per_second(key: &KeyProgress<&'static str>) -> f64 {
    key.rate().map_or(0.0, |rate| rate.get_per_second())
}

virtual_time! {
    async fn a_slow_consumer_alongside_lowers_nothing() {
        let control = MapControl::new();
        let mut outputs = pin!(
            amap_iter(0..ITEMS, 8, fetch)
                .per_key(|_| "host", 8)
                .adaptive(adaptive(), |_| Outcome::success())
                .window(16)
                .control(&control)
        );
        let (mut before, mut after) = (None, None);
        let mut seen = 0;
        while let Some(n) = outputs.next().await {
            outputs.alongside(sleep(work_time(n))).await;
            note(seen, read(&control), &mut before, &mut after);
            seen += 1;
        }
        let (before, after) = (before.expect("read before"), after.expect("read after"));
        println!(
            "alongside: limit {} -> {}, rate {:.1}/s -> {:.1}/s",
            before.limit(),
            after.limit(),
            per_second(&before),
            per_second(&after)
        );
        assert!(after.limit() >= before.limit(), "{before:?} -> {after:?}");
        assert!(per_second(&after) >= per_second(&before), "{before:?} -> {after:?}");
    }

    async fn the_same_work_inside_the_mapped_function_lowers_the_limit() {
        let control = MapControl::new();
        let mut outputs = pin!(
            amap_iter(0..ITEMS, 8, |n| async move {
                let n = fetch(n).await;
                sleep(work_time(n)).await; // counted in the attempt's latency
                n
            })
            .per_key(|_| "host", 8)
            .adaptive(adaptive(), |_| Outcome::success())
            .window(16)
            .control(&control)
        );
        let (mut before, mut after) = (None, None);
        let mut seen = 0;
        while let Some(_n) = outputs.next().await {
            // Let the map poll once more (it publishes when it waits), then read: work
            // that waits twice (`alongside` drives the map from the work's second wait).
            outputs
                .alongside(async {
                    yield_now().await;
                    yield_now().await;
                })
                .await;
            note(seen, read(&control), &mut before, &mut after);
            seen += 1;
        }
        let (before, after) = (before.expect("read before"), after.expect("read after"));
        println!("inside the function: limit {} -> {}", before.limit(), after.limit());
        assert!(after.limit() < before.limit(), "{before:?} -> {after:?}");
    }
}
