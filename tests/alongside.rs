//! A consumer that awaits its own work between outputs (`alongside`): the attempts in
//! flight keep being polled, under smol, `run_sync` and tokio (current and multi-thread).
//! Each hazard of a plain stream read in such a loop is shown beside the new form:
//!
//! - requests left open at a real server (loopback sockets, a server thread that records
//!   when each connection opens and when the client closes it): with a plain stream a
//!   request stays open through a whole sleep of the consumer; with `alongside`, none does
//!   (asserted at any speed: a request takes 10 ms, a sleep 200 ms, and for a request to
//!   span a sleep the client would have to be held off for 190 ms);
//! - a deadlock: the futures in flight hold permits the consumer's work also acquires;
//! - the window: while the consumer works, the map starts no more items than its window
//!   leaves room for, and never more than its limit at once.
//!
//! Time-dependent behaviour (an adaptive key under a slow consumer) is in
//! `tests/alongside_time.rs`, on virtual time.

mod common;

use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::time::{Duration, Instant};

use common::{InFlight, matrix};
use futures_lite::future::yield_now;
use futures_lite::{StreamExt, stream};
use tollgate::{BoundedStreamExt, MapControl, Semaphore, amap_iter, sleep, timeout};
use tollgate_testkit::held_open::{HeldOpenServer, Open, get};

/// How long the server takes to answer a request.
const SERVER_LATENCY: Duration = Duration::from_millis(10);

/// How long the consumer works on each output.
const CONSUMER_SLEEP: Duration = Duration::from_millis(200);

/// The consumer's work: a sleep, whose start and end it records.
async fn work(sleeps: &mut Vec<(Instant, Instant)>) {
    let start = Instant::now();
    sleep(CONSUMER_SLEEP).await;
    sleeps.push((start, Instant::now()));
}

/// The connections open from before a sleep began until after it ended.
fn spanning(opens: &[Open], sleeps: &[(Instant, Instant)]) -> usize {
    opens
        .iter()
        .filter(|open| sleeps.iter().any(|&(start, end)| open.spans(start, end)))
        .count()
}

/// Requests in each run, and at most this many at once.
const REQUESTS: usize = 8;
const LIMIT: usize = 3;

matrix! {
    async fn no_request_stays_open_through_the_consumers_work() {
        // A plain stream: the loop sleeps between two `next()` calls.
        let server = HeldOpenServer::start(REQUESTS, SERVER_LATENCY);
        let mut sleeps = Vec::new();
        let mut pages = pin!(amap_iter(0..REQUESTS, LIMIT, |_| get(server.addr())));
        while let Some(page) = pages.next().await {
            page.expect("an answer");
            work(&mut sleeps).await;
        }
        let plain = server.finish();
        let plain_spanning = spanning(&plain, &sleeps);

        // The same loop, the work awaited alongside the map.
        let server = HeldOpenServer::start(REQUESTS, SERVER_LATENCY);
        let mut sleeps = Vec::new();
        let mut pages = pin!(amap_iter(0..REQUESTS, LIMIT, |_| get(server.addr())));
        while let Some(page) = pages.next().await {
            page.expect("an answer");
            pages.alongside(work(&mut sleeps)).await;
        }
        let alongside = server.finish();
        let alongside_spanning = spanning(&alongside, &sleeps);

        println!(
            "requests open through a whole {CONSUMER_SLEEP:?} of the consumer's work: \
             {plain_spanning} of {REQUESTS} with a plain stream, {alongside_spanning} with \
             alongside"
        );
        assert_eq!((plain.len(), alongside.len()), (REQUESTS, REQUESTS));
        assert!(plain_spanning > 0, "the plain stream left requests open: {plain:?}");
        assert_eq!(alongside_spanning, 0, "{alongside:?} {sleeps:?}");
    }

    async fn futures_holding_permits_the_consumer_needs_do_not_deadlock() {
        // Each attempt holds a permit across a pause; the consumer takes one per output.
        let permits = Semaphore::new(2);
        let attempt = |n: u32| {
            let permits = &permits;
            async move {
                let _permit = permits.acquire().await.expect("open");
                yield_now().await;
                n
            }
        };

        // A plain stream: the attempts in flight hold both permits and are never polled
        // while the consumer waits for one.
        let plain = timeout(Duration::from_millis(200), async {
            let mut outputs = pin!(amap_iter(0..10u32, 2, attempt));
            let mut seen = 0;
            while let Some(_n) = outputs.next().await {
                let _permit = permits.acquire().await.expect("open");
                seen += 1;
            }
            seen
        })
        .await;
        assert!(plain.is_err(), "a plain stream deadlocks here: {plain:?}");
        assert_eq!(permits.available_permits(), 2, "the dropped map gave its permits back");

        // Alongside: the attempts finish while the consumer waits, and give their permits
        // back.
        let mut outputs = pin!(amap_iter(0..10u32, 2, attempt));
        let mut seen = Vec::new();
        while let Some(n) = outputs.next().await {
            let permit = outputs.alongside(permits.acquire()).await.expect("open");
            seen.push(n);
            drop(permit);
        }
        seen.sort_unstable();
        assert_eq!(seen, (0..10).collect::<Vec<_>>());
        assert_eq!(permits.available_permits(), 2);
    }

    async fn the_window_bounds_what_starts_while_the_consumer_works() {
        // Input order, a limit of 4 and a window of 10: while the consumer works, the map
        // runs ahead by at most the window, never more than 4 at once.
        let in_flight = InFlight::default();
        let started = AtomicUsize::new(0);
        let handed_out = AtomicUsize::new(0);
        let ahead = AtomicUsize::new(0);
        let control = MapControl::new();
        let mut buffered = 0;
        let mut outputs = pin!(
            stream::iter(0..100u32)
                .map_bounded(4, |n| {
                    let guard = in_flight.enter();
                    let now_started = started.fetch_add(1, SeqCst) + 1;
                    ahead.fetch_max(now_started - handed_out.load(SeqCst), SeqCst);
                    async move {
                        yield_now().await;
                        drop(guard);
                        n
                    }
                })
                .window(10)
                .control(&control)
        );
        let mut expected = 0;
        while let Some(n) = outputs.next().await {
            assert_eq!(n, expected, "input order");
            expected += 1;
            handed_out.fetch_add(1, SeqCst);
            // Work that waits several times: the map is driven in between.
            outputs
                .alongside(async {
                    for _ in 0..5 {
                        yield_now().await;
                        // What the map held for the consumer when it last waited.
                        buffered = buffered.max(control.progress().buffered());
                    }
                })
                .await;
        }
        assert_eq!(expected, 100);
        assert!(in_flight.peak() <= 4, "peak in flight {}", in_flight.peak());
        // Pulled and not handed out: at most the window. The map refills the place an
        // output leaves before `next()` returns it, and this count takes the output as
        // handed out only once `next()` returned: it may read one more.
        assert!(ahead.load(SeqCst) <= 10 + 1, "ran {} ahead", ahead.load(SeqCst));
        assert!(ahead.load(SeqCst) > 4, "the map worked ahead while the consumer worked");
        assert!(buffered > 0 && buffered <= 10, "outputs held for the consumer: {buffered}");
        assert_eq!(control.progress().buffered(), 0, "all handed out");
    }

    async fn the_first_error_stops_pulling_and_the_future_is_send() {
        // A consumer whose work fails at item 30: `?` leaves the loop, and dropping the map
        // ends it (nothing more pulled, what ran cancelled).
        let control = MapControl::new();
        let pulled = AtomicUsize::new(0);
        let crawl = async {
            let mut outputs = pin!(
                amap_iter(0..1_000u32, 4, |n| {
                    pulled.fetch_add(1, SeqCst);
                    async move {
                        yield_now().await;
                        n
                    }
                })
                .control(&control)
            );
            while let Some(n) = outputs.next().await {
                let stored = outputs.alongside(async move {
                    yield_now().await;
                    if n == 30 { Err(n) } else { Ok(()) }
                });
                assert_send(&stored);
                stored.await?;
            }
            Ok::<(), u32>(())
        };
        assert_eq!(crawl.await, Err(30));
        let progress = control.progress();
        assert!(progress.is_ended(), "{progress:?}");
        // Pulled: 31 outputs handed out, and at most the limit beyond them.
        assert!(pulled.load(SeqCst) <= 31 + 4, "pulled {}", pulled.load(SeqCst));
        assert_eq!(progress.pulled(), pulled.load(SeqCst) as u64);
    }
}

fn assert_send<T: Send>(_: &T) {}
