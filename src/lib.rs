//! Runtime-agnostic async primitives for bulk work.
//!
//! Crawl thousands of URLs, run a nightly sync, "enrich these 50,000 rows from an API":
//! starting everything at once exhausts sockets and gets you banned, and a hand-written
//! semaphore + queue + error handling is forty lines rewritten every time. tollgate is those
//! forty lines, done once, done right, and fast: a global cap, a per-host cap that does not
//! fight it, failures collected instead of fatal, mirrors raced, retries with per-attempt
//! timeouts, and memory that does not grow with the input.
//!
//! # The crawler
//!
//! ```
//! use std::io;
//! use std::time::Duration;
//! use tollgate::{RetryError, map_keyed, race, retry, run_sync, sleep};
//!
//! async fn http_get(url: &str) -> io::Result<String> {
//!     let slow = url.contains("slow.example");
//!     sleep(Duration::from_millis(if slow { 20 } else { 2 })).await; // the network, simulated
//!     match url.ends_with("/broken") {
//!         true => Err(io::Error::other(format!("cannot reach {url}"))),
//!         false => Ok(format!("<html>{url}</html>")),
//!     }
//! }
//!
//! /// A GET with up to 3 tries, 5 s each, 10 ms apart.
//! async fn fetch(url: String) -> Result<String, RetryError<io::Error>> {
//!     let one_try = || http_get(&url);
//!     retry(one_try).attempts(3).timeout(Duration::from_secs(5)).interval(Duration::from_millis(10)).await
//! }
//!
//! let host = |url: &String| url.split('/').nth(2).unwrap_or_default().to_owned();
//! let mut urls: Vec<String> = (0..10)
//!     .flat_map(|i| ["fast.example", "slow.example"].map(|h| format!("https://{h}/page/{i}")))
//!     .collect();
//! urls.push("https://fast.example/broken".into());
//!
//! run_sync(async {
//!     // At most 8 requests in flight, at most 2 per host; failures are items.
//!     let results = map_keyed(urls, host, 8, 2, fetch).await;
//!     let failed = results.iter().filter(|page| page.is_err()).count();
//!     assert_eq!((results.len() - failed, failed), (20, 1));
//!
//!     // Two mirrors: the first good answer wins, the other request is cancelled.
//!     let mirrors = (fetch("https://slow.example/file".into()), fetch("https://fast.example/file".into()));
//!     let body = race(mirrors).timeout(Duration::from_secs(2)).await.unwrap();
//!     assert_eq!(body, "<html>https://fast.example/file</html>");
//! });
//! ```
//!
//! `cargo run --example crawl` runs the full demo on a simulated network;
//! `cargo run --example crawl_http` crawls real sockets on loopback.
//!
//! # Operations
//!
//! | | wait for all, `Vec` in input order | stream, as they complete | first success |
//! | --- | --- | --- | --- |
//! | failures are items | [`map_async`], [`gather_limit`], [`map_keyed`] | [`amap_iter`], [`.map_unordered`](BoundedStreamExt::map_unordered), [`.map_keyed_unordered`](BoundedStreamExt::map_keyed_unordered) (and [`.map_bounded`](BoundedStreamExt::map_bounded) in input order) | [`race`]: failures are skipped, all of them reported if nobody wins |
//! | the first failure stops everything | [`try_map_async`] | stop consuming: dropping the stream cancels what is in flight | - |
//!
//! | need | tollgate |
//! | --- | --- |
//! | global cap on concurrent work, lazy input | [`map_async`], [`try_map_async`], [`amap_iter`], [`gather_limit`], [`BoundedStreamExt`] |
//! | global cap AND per-host cap, neither blocking the other | [`map_keyed`] |
//! | per-resource cap, wait timeout, bounded wait queue, stats; one cap per runtime | [`Bulkhead`] (+ [`BulkheadError`], [`BulkheadStats`]) over a FIFO [`Semaphore`] that also serves blocking threads |
//! | one cap per host, created on demand, idle hosts forgotten | [`KeyedBulkhead`] |
//! | ask several mirrors, first success wins, losers cancelled | [`race`] (+ [`.timeout(d)`](futures::Race::timeout)), [`RaceError`] |
//! | retry transient failures with backoff and per-attempt timeouts | [`retry`], [`RetryError`] |
//! | deadline on any future | [`timeout`], [`sleep`], [`TimeoutError`] |
//! | sync entry point that refuses to nest | [`run_sync`], [`try_run_sync`] |
//! | which runtime am I on? | [`RuntimeKey`] |
//! | wait in a test for background work | [`testing::eventually`] |
//! | one error type over all of them | [`Error`] |
//!
//! # Runtimes
//!
//! tollgate never spawns: its futures are polled by whoever awaits them, and its timers
//! come from async-io's reactor, which runs beside any executor.
//!
//! | where your code runs | works | what tollgate sees ([`RuntimeKey`]) | timers |
//! | --- | --- | --- | --- |
//! | [`run_sync`] | yes | one key per call | async-io |
//! | smol, async-std, `futures::executor` | yes | one process-wide key | async-io |
//! | tokio, default features | yes | one process-wide key | async-io (tokio's paused clock is ignored) |
//! | tokio, feature `tokio` | yes | one key per tokio runtime | tokio's clock (`pause()` honoured) |
//!
//! The `tokio` feature adds exactly that: per-runtime keys inside tokio (so a `static`
//! [`Bulkhead`] caps each `#[tokio::test]` separately), [`run_sync`] refusing to block a
//! tokio thread, and timers on tokio's clock. Every future tollgate returns is `Send`
//! whenever what it holds is, so it can go to `tokio::spawn`.
//!
//! # A stream only works while it is polled
//!
//! Because nothing is spawned, the futures inside [`amap_iter`] or
//! [`.map_unordered`](BoundedStreamExt::map_unordered) make progress only while the stream
//! is polled. A loop that awaits something slow *in its body* between two `next()` calls
//! pauses every request in flight (futures-rs #2387 is that surprise with `buffered`).
//! tollgate keeps each slot busy for as long as it is polled (a finished slot is refilled
//! in the same poll), but it cannot poll while you are not asking. Put the slow work inside
//! the mapped function, collect with [`map_async`], or spawn the stream as a task and read
//! its results from a channel.
//!
//! # When not to use tollgate
//!
//! - CPU-bound work: a bounded map runs its futures on one task. Use rayon, or
//!   `spawn_blocking` behind a [`Bulkhead`].
//! - Requests per second: tollgate caps how many run *at once*, not how many start per
//!   second. A rate limiter (token bucket) is a different tool.
//! - One future, or a handful you can `join!`: just await them.
//! - Middleware stacks for a service (load shedding, routing, discovery): that is tower.
//!

#![forbid(unsafe_code)]
#![warn(
    missing_docs,
    missing_debug_implementations,
    rust_2018_idioms,
    unreachable_pub
)]

mod error;
mod limit;
mod map;
mod race;
mod retry;
mod runtime;
mod sync;
pub mod testing;
mod time;
mod wake;

pub use crate::error::Error;
pub use crate::limit::bulkhead::keyed::{
    KeyedBulkhead, KeyedBulkheadPermit, KeyedBulkheadPermitArc,
};
pub use crate::limit::bulkhead::{
    Bulkhead, BulkheadError, BulkheadPermit, BulkheadPermitArc, BulkheadStats,
};
pub use crate::limit::semaphore::{Semaphore, SemaphorePermit, SemaphorePermitArc};
pub use crate::map::keyed::map_keyed;
pub use crate::map::{BoundedStreamExt, amap_iter, gather_limit, map_async, try_map_async};
pub use crate::race::{IntoContestants, RaceError, race};
pub use crate::retry::{Attempt, RetryError, retry};
pub use crate::runtime::{RunSyncError, RuntimeKey, run_sync, try_run_sync};
pub use crate::time::{TimeoutError, sleep, timeout};
#[cfg(tollgate_loom)]
#[doc(hidden)]
pub use crate::wake::model as __wake_model;

/// The futures tollgate's functions return, named so they can be stored in structs.
pub mod futures {
    pub use crate::limit::bulkhead::keyed::{
        KeyedBulkheadAcquire, KeyedBulkheadAcquireArc, KeyedBulkheadRun,
    };
    pub use crate::limit::bulkhead::{BulkheadAcquire, BulkheadAcquireArc, BulkheadRun};
    pub use crate::limit::semaphore::{SemaphoreAcquire, SemaphoreAcquireArc};
    pub use crate::map::keyed::{MapKeyed, MapKeyedUnordered};
    pub use crate::map::{GatherLimit, MapAsync, MapBounded, MapUnordered, TryMapAsync};
    pub use crate::race::{Either, Race};
    pub use crate::retry::{Retry, RetryFuture};
    pub use crate::time::{Sleep, Timeout};
}

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
