//! Runtime-agnostic async primitives for bulk work.
//!
//! Crawl thousands of URLs, run a nightly sync, "enrich these 50,000 rows from an API":
//! starting everything at once exhausts sockets and gets you banned, and a hand-written
//! semaphore + queue + error handling is forty lines rewritten every time. tollgate is those
//! forty lines, done once, done right, and fast.
//!
//! # What is here
//!
//! | need | tollgate |
//! | --- | --- |
//! | run `f` over many items, at most `limit` at once | [`map_async`], [`try_map_async`], [`amap_iter`], [`gather_limit`], [`BoundedStreamExt`] (see [Bounded mapping](#bounded-mapping)) |
//! | deadline on any future | [`timeout`], [`sleep`], [`Elapsed`] |
//! | sync entry point that refuses to nest | [`run_sync`], [`try_run_sync`] |
//! | which runtime am I on? | [`RuntimeKey`] |
//! | wait in a test for background work | [`testing::eventually`] |
//! | one error type over all of them | [`Error`] |
//!
//! # Bounded mapping
//!
//! At most `limit` futures in flight, input pulled lazily (a generator of ten million items
//! never becomes ten million futures), every freed slot refilled in the same poll, no
//! allocation per item. Ordered results never stall on a slow item: the others keep
//! running and their outputs wait in a bounded reorder buffer (`.window(n)`).
//!
//! | | collect into a `Vec` | stream as they come |
//! | --- | --- | --- |
//! | input order, failures are items | [`map_async`], [`gather_limit`] | [`map_bounded`](BoundedStreamExt::map_bounded) |
//! | input order, first error cancels the rest | [`try_map_async`] | `map_bounded` + `try_next()?` (stops at the first error in input order), then drop the stream |
//! | completion order, failures are items | `amap_iter(..).collect()` | [`amap_iter`], [`map_unordered`](BoundedStreamExt::map_unordered) |
//! | completion order, first error cancels the rest | `amap_iter(..).try_collect()` | `amap_iter` + `try_next()?`, then drop the stream |
//!
//! Dropping a stream or future cancels (drops) everything in flight and pulls nothing more.
//!
//! **Pitfall: slow work in the loop body.** A stream only runs while it is polled. In
//! `while let Some(page) = pages.next().await { save(page).await }` nobody polls the mapped
//! futures while `save` runs (futures-rs #2387): they stop at their next `.await`. tollgate
//! limits the damage (each poll starts every free slot before it returns, so all `limit`
//! requests are already out and the network keeps answering; finished outputs wait in the
//! window instead of blocking the others), but the cure is to put the slow step inside the
//! mapped future: `map_async(urls, 8, |url| async move { save(fetch(url).await).await })`.
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
//! The `tokio` feature adds exactly that: per-runtime keys inside tokio, [`run_sync`]
//! refusing to block a tokio thread, and timers on tokio's clock. Every future tollgate
//! returns is `Send` whenever what it holds is, so it can go to `tokio::spawn`.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{run_sync, sleep, timeout};
//!
//! async fn fetch(url: &str) -> String {
//!     sleep(Duration::from_millis(1)).await; // the network, simulated
//!     format!("<html>{url}</html>")
//! }
//!
//! let page = run_sync(timeout(Duration::from_secs(2), fetch("https://example.com/")));
//! assert_eq!(page.unwrap(), "<html>https://example.com/</html>");
//! ```

#![forbid(unsafe_code)]
#![warn(
    missing_docs,
    missing_debug_implementations,
    rust_2018_idioms,
    unreachable_pub
)]

mod error;
mod map;
mod ready_set;
mod rt;
pub mod testing;
pub mod time;

pub use crate::error::Error;
pub use crate::map::{BoundedStreamExt, amap_iter, gather_limit, map_async, try_map_async};
pub use crate::rt::{AlreadyInRuntime, RuntimeKey, run_sync, try_run_sync};
pub use crate::time::{Elapsed, sleep, timeout};

/// The futures tollgate's functions return, named so they can be stored in structs.
pub mod futures {
    pub use crate::map::{GatherLimit, MapAsync, MapBounded, MapUnordered, TryMapAsync};
    pub use crate::time::{Sleep, Timeout};
}

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
