//! tollgate's per-key caps and rates, shared by a fleet of processes through Redis.
//!
//! When several crawler processes run against the same hosts, per-process limits multiply:
//! four workers with a cap of 2 per host put 8 requests on it. `tollgate-redis` keeps the
//! per-key state in Redis so the cap and the rate hold for the whole fleet:
//!
//! - [`SharedKeyedBulkhead`]: at most N permits per key. A permit is a **lease** in Redis
//!   whose expiry is on Redis's clock; the process's keeper renews all its leases in one
//!   call per third of the lease TTL. A process that cannot renew in time **fences** its
//!   permits (they are told, and [`run`](SharedKeyedBulkhead::run) cancels the work) before
//!   the leases can lapse; a killed process's leases lapse after one TTL.
//! - [`SharedKeyedRateLimiter`]: a GCRA rate per key on Redis's clock, and a per-key block
//!   for the whole fleet ([`block_key`](SharedKeyedRateLimiter::block_key), for a
//!   `Retry-After`).
//! - [`rendezvous_slot`]: the alternative with no shared state: give each key to one worker.
//!
//! # Example
//!
//! ```no_run
//! use std::time::Duration;
//! use tollgate::Rate;
//! use tollgate_redis::{RedisLimits, SharedKeyedBulkhead, SharedKeyedRateLimiter};
//!
//! # futures_lite::future::block_on(async {
//! let store = RedisLimits::options("redis://127.0.0.1:6379")
//!     .namespace("crawler")
//!     .lease_ttl(Duration::from_secs(10))
//!     .connect()
//!     .await?;
//! let in_flight = SharedKeyedBulkhead::new(&store, "per-host", 2);
//! let rate = SharedKeyedRateLimiter::new(&store, "per-host", Rate::per_second(10));
//!
//! let host = "example.com";
//! rate.until_key_ready(host).await?;
//! let page = in_flight.run(host, async { "<html>" }).await?;
//! # let _ = page;
//! # Ok::<(), tollgate_redis::SharedError>(())
//! # });
//! ```
//!
//! # Failure behaviour
//!
//! - **Redis unreachable**: nothing new is granted (fail closed). Each call waits at most
//!   the store's [`redis_wait`](RedisLimitsOptions::redis_wait), retrying, then fails with
//!   an [`is_unavailable`](SharedError::is_unavailable) error naming the address. Calls
//!   after Redis comes back succeed: no restart needed. Permits held through an outage
//!   longer than the fencing point (four fifths of the TTL after their last renewal) are
//!   fenced.
//! - **Redis restarted empty or flushed**: the leases granted before are gone from Redis but
//!   may still be held. A namespace's **epoch** key records the Redis time from which
//!   grants are safe; when it is missing (a new or emptied Redis) the first call sets it
//!   one lease TTL ahead and nothing is granted until then ([`is_warming_up`]), so every
//!   lease from before has lapsed or been fenced. The same holds the first time a namespace
//!   is used. Rates wait too (a lost TAT would otherwise allow a burst at once).
//! - **A worker killed**: its leases lapse one TTL after their last renewal and its room
//!   comes back to the fleet.
//! - **Clocks**: only Redis's `TIME` decides expiries and rates; a process's own clock is
//!   used only to measure durations (when to renew, when to fence), never compared with
//!   another machine's.
//!
//! Limits of this design: one Redis (no cluster client; key names carry hash tags per
//! key, but the epoch key is one per namespace); a failover to a replica that missed the
//! last writes can over-grant until those leases lapse, as Redis replication is
//! asynchronous.
//!
//! # Runtimes
//!
//! Feature `smol` (default): redis-rs drives its connection on smol's global executor,
//! which works under any runtime (smol, async-std, `tollgate::run_sync`, tokio). Feature
//! `tokio`: inside a tokio runtime the connection is driven by that runtime. Renewals and
//! releases run on the store's keeper thread, whatever the runtime.
//!
//! [`is_warming_up`]: SharedError::is_warming_up

#![forbid(unsafe_code)]
#![warn(
    missing_docs,
    missing_debug_implementations,
    rust_2018_idioms,
    unreachable_pub
)]

#[cfg(not(any(feature = "smol", feature = "tokio")))]
compile_error!(
    "tollgate-redis needs a runtime feature for its Redis connection: `smol` (the default) or `tokio`"
);

mod bulkhead;
mod error;
mod keeper;
mod lease;
mod rate;
mod rendezvous;
mod scripts;
mod store;

pub use crate::bulkhead::{Released, SharedKeyedBulkhead};
pub use crate::error::SharedError;
pub use crate::lease::{Fence, Fenced, SharedPermit};
pub use crate::rate::SharedKeyedRateLimiter;
pub use crate::rendezvous::rendezvous_slot;
pub use crate::store::{
    DEFAULT_LEASE_TTL, DEFAULT_POLL_INTERVAL, DEFAULT_REDIS_WAIT, RedisLimits, RedisLimitsOptions,
    StoreStats,
};
