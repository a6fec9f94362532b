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
//! | per-resource cap, wait timeout, bounded wait queue, stats; one cap per runtime | [`Bulkhead`] (+ [`BulkheadFull`], [`BulkheadStats`]) over a FIFO [`Semaphore`] that also serves blocking threads |
//! | one cap per host, created on demand, idle hosts forgotten | [`KeyedBulkhead`] |
//! | ask several mirrors, first success wins, losers cancelled | [`race`] (+ [`.timeout(d)`](futures::Race::timeout)), [`RaceFailed`] |
//! | retry transient failures with backoff and per-attempt timeouts | [`retry`], [`RetryError`] |
//! | deadline on any future | [`timeout`], [`sleep`], [`Elapsed`] |
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

mod bulkhead;
mod error;
mod key_scheduler;
mod keyed;
mod keyed_bulkhead;
mod map;
mod race;
mod ready_set;
mod retry;
mod rt;
mod semaphore;
pub mod testing;
pub mod time;

pub use crate::bulkhead::{Bulkhead, BulkheadFull, BulkheadStats, Permit, PermitArc};
pub use crate::error::Error;
pub use crate::keyed::map_keyed;
pub use crate::keyed_bulkhead::{KeyedBulkhead, KeyedPermit, KeyedPermitArc};
pub use crate::map::{BoundedStreamExt, amap_iter, gather_limit, map_async, try_map_async};
pub use crate::race::{IntoContestants, RaceFailed, race};
pub use crate::retry::{Attempt, RetryError, retry};
pub use crate::rt::{AlreadyInRuntime, RuntimeKey, run_sync, try_run_sync};
pub use crate::semaphore::{Semaphore, SemaphoreGuard, SemaphoreGuardArc};
pub use crate::time::{Elapsed, sleep, timeout};

/// The futures tollgate's functions return, named so they can be stored in structs.
pub mod futures {
    pub use crate::bulkhead::{BulkheadAcquire, BulkheadAcquireArc, BulkheadRun};
    pub use crate::keyed::{MapKeyed, MapKeyedUnordered};
    pub use crate::keyed_bulkhead::{KeyedAcquire, KeyedAcquireArc, KeyedRun};
    pub use crate::map::{GatherLimit, MapAsync, MapBounded, MapUnordered, TryMapAsync};
    pub use crate::race::{Either, Race};
    pub use crate::retry::{Retry, RetryFuture};
    pub use crate::semaphore::{SemaphoreAcquire, SemaphoreAcquireArc};
    pub use crate::time::{Sleep, Timeout};
}

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
