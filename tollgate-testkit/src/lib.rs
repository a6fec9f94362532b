//! What the tests, examples and benches of tollgate and tollgate-redis share. Never
//! published; a dev-dependency only.
//!
//! - [`matrix!`] runs each async test body under smol, `run_sync` and (with the calling
//!   crate's `tokio` feature) tokio current-thread and multi-thread; [`spawn`] spawns on
//!   whichever is current.
//! - The probes tests measure with: [`InFlight`] (peaks), [`DropFlag`] (cancellation),
//!   [`poll_until_panic`], [`counting_waker`].
//! - [`http_server`] and [`http_client`]: a loopback HTTP/1.1 server that judges a client's
//!   politeness, and a one-request-per-connection hyper client for smol and tokio.
//! - [`held_open`]: a loopback server that records how long a client held each request
//!   open (a consumer that stalls its stream leaves them open).
//! - [`simulated_network`]: in-process hosts with latency and their own rate meter.
//! - [`simulated_internet`]: a seeded internet of hosts with hidden capacities on tokio's
//!   paused clock, and the figures that judge a crawl against the ideal.
//! - [`nginx`]: an nginx of one's own, its `limit_req` metering each host (rates that can
//!   change while it runs).
//! - `redis_server` (feature `redis`): a `redis-server` of one's own, and a probe to look
//!   inside Redis; `redis_monitor` (feature `redis`): what a Redis ran, on its own clock.
//! - [`progress`]: the crawl examples' progress display.
//! - [`host_model`]: the adaptive core's tuning rig, a host model on virtual time that
//!   drives one adaptive key through the [`AdaptiveKey`](host_model::AdaptiveKey) trait.
//! - [`Rng`]: the seeded generator (SplitMix64) every test, example and bench draws its
//!   pseudo-random numbers from.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod held_open;
pub mod host_model;
pub mod http_client;
pub mod http_server;
mod matrix;
mod meter;
pub mod nginx;
mod probes;
pub mod progress;
#[cfg(feature = "redis")]
pub mod redis_monitor;
#[cfg(feature = "redis")]
pub mod redis_server;
mod rng;
pub mod simulated_internet;
pub mod simulated_network;

#[doc(hidden)]
pub use matrix::legs;
pub use matrix::{
    TEST_DEADLINE, VIRTUAL_DEADLINE, spawn, tokio_current, tokio_multi, tokio_paused,
};
pub use probes::{
    CountingWaker, DropFlag, DropGuard, InFlight, InFlightGuard, assert_polled_again_panics,
    counting_waker, drain, panic_message, poll_until_panic,
};
pub use rng::Rng;

/// What [`matrix!`] expands to, reached through this crate so a caller needs no dependency
/// of its own on them (and gets the same tollgate: Cargo builds one, with the command's
/// features).
#[doc(hidden)]
pub mod __private {
    pub use smol;
    pub use tollgate;
}
