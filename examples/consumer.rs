//! A consumer that awaits slow work on each output (storing a page takes 200 ms), reading
//! 12 requests of 10 ms each, 4 at a time, from a loopback server that records how long
//! each request stayed open. Side by side: `futures`' `buffer_unordered` and `buffered`,
//! tollgate's `amap_iter` read the same way, and `amap_iter` with the work awaited
//! `alongside` the map.
//!
//! ```text
//! cargo run --example consumer
//! ```
//!
//! A stream works only while it is polled: in the first three, the requests in flight wait
//! for the consumer's work (a server would time them out), so each stays open for about one
//! or two stores; with `alongside`, the map polls them while the consumer works, and each is
//! open for its own 10 ms.

use std::future::Future;
use std::pin::pin;
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use tollgate::{BoundedStreamExt as _, amap_iter, sleep};
use tollgate_testkit::held_open::{HeldOpenServer, Open, get};

const REQUESTS: usize = 12;
const LIMIT: usize = 4;
const SERVER: Duration = Duration::from_millis(10);
const STORE: Duration = Duration::from_millis(200);

/// The consumer's work on a page: a slow store.
async fn store(_page: usize) {
    sleep(STORE).await;
}

/// Runs `crawl` against a fresh server and prints how long its requests stayed open.
fn run<F, Fut>(name: &str, crawl: F)
where
    F: FnOnce(std::net::SocketAddr) -> Fut,
    Fut: Future<Output = ()>,
{
    let server = HeldOpenServer::start(REQUESTS, SERVER);
    let start = Instant::now();
    smol::block_on(crawl(server.addr()));
    let took = start.elapsed();
    let opens = server.finish();
    let longest = opens.iter().map(Open::held).max().unwrap_or_default();
    let mean = opens.iter().map(Open::held).sum::<Duration>() / opens.len().max(1) as u32;
    println!(
        "{name:<34} requests open: longest {:>4} ms, mean {:>4} ms; crawl {:>5} ms",
        longest.as_millis(),
        mean.as_millis(),
        took.as_millis()
    );
}

fn main() {
    println!(
        "{REQUESTS} requests of {} ms, {LIMIT} at a time; the consumer stores each page in {} ms",
        SERVER.as_millis(),
        STORE.as_millis()
    );
    run("futures buffer_unordered + loop", |addr| async move {
        let mut pages = pin!(
            futures::stream::iter(0..REQUESTS)
                .map(|_| get(addr))
                .buffer_unordered(LIMIT)
        );
        while let Some(page) = pages.next().await {
            store(page.expect("an answer")).await;
        }
    });
    run("futures buffered + loop", |addr| async move {
        let mut pages = pin!(
            futures::stream::iter(0..REQUESTS)
                .map(|_| get(addr))
                .buffered(LIMIT)
        );
        while let Some(page) = pages.next().await {
            store(page.expect("an answer")).await;
        }
    });
    run("tollgate amap_iter + loop", |addr| async move {
        let mut pages = pin!(amap_iter(0..REQUESTS, LIMIT, |_| get(addr)));
        while let Some(page) = pages.next().await {
            store(page.expect("an answer")).await;
        }
    });
    run("tollgate amap_iter + alongside", |addr| async move {
        let mut pages = pin!(amap_iter(0..REQUESTS, LIMIT, |_| get(addr)));
        while let Some(page) = pages.next().await {
            pages.alongside(store(page.expect("an answer"))).await;
        }
    });
}
