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
//! - [`SharedKeyedRateLimiter`]: a GCRA rate per key on Redis's clock, and a per-key pause
//!   for the whole fleet ([`pause_key`](SharedKeyedRateLimiter::pause_key), for a
//!   `Retry-After`).
//! - [`SharedKeyLimits`]: both, for tollgate's keyed maps (`.shared_limits(limits)` after
//!   `.per_key`): the map asks Redis before each start, one script deciding the key's lease,
//!   rate and pause together, and an item waiting for its key holds no slot in the map.
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
//! # Ok::<(), tollgate_redis::RedisLimitsError>(())
//! # });
//! ```
//!
//! # Failure behaviour
//!
//! - **Redis unreachable**: nothing new is granted (fail closed), and fast. A call waits at
//!   most the store's [`call_timeout`](RedisLimitsOptions::call_timeout), retrying, then
//!   fails with an [`is_unavailable`](RedisLimitsError::is_unavailable) error naming the
//!   address; from then on every ask fails at once, its
//!   [`retry_after`](RedisLimitsError::retry_after) the time to the store's next probe (probes
//!   one at a time, from a fifth of a second apart up to two seconds), until a probe
//!   reaches Redis: no restart needed (see [`RedisLimits`]). Permits held through an outage
//!   longer than the fencing point (four fifths of the TTL after their last renewal) are
//!   fenced.
//! - **Redis restarted, flushed or failed over**: the leases granted before may be gone
//!   from Redis (a restart without persistence, a flush) or stale (a restart from an
//!   RDB/AOF snapshot, a failover to a replica) while their holders still work. A
//!   namespace's **epoch** records which Redis process (its `run_id`) the store last saw and
//!   the Redis time it first did; when the epoch is missing or names another Redis process,
//!   it is reset and nothing is granted for one lease TTL ([`is_warming_up`]), so every
//!   lease from before has lapsed or been fenced. The same holds the first time a namespace
//!   is used: the first run on it waits one lease TTL before its first grant. No case of
//!   skipping that wait is provably safe: a missing epoch looks the same whether the
//!   namespace was never used or its keys were flushed, deleted or evicted while leases
//!   were held, and Redis keeps nothing that tells them apart. A map shows the wait (its
//!   asks are answered [`LaterReason::WarmingUp`](tollgate::LaterReason::WarmingUp),
//!   counted by `Progress::keys_warming_up`, and reported once by tollgate's `tracing`
//!   feature); a shorter [`lease_ttl`](RedisLimitsOptions::lease_ttl) shortens it. Rates
//!   wait too, and a key whose rate state was lost is treated as if it had
//!   started at the reset, so a lost state never allows an early start. A pause
//!   ([`pause_key`](SharedKeyedRateLimiter::pause_key)) lost with Redis's data is gone.
//!   Each new connection claims the epoch for the server it reached before any call runs
//!   there, so a call prepared before a failover cannot pass for one to the old server.
//!   Connected through Sentinel ([`RedisLimits::sentinel`]), a store follows a failover by
//!   itself: every new connection asks the sentinels which server is the master now.
//! - **A worker killed**: its leases lapse one TTL after their last renewal and its room
//!   comes back to the fleet.
//! - **A permit fenced**: its lease stays in Redis until it lapses or the permit is
//!   dropped; work that keeps running after the fence ([`run_with`]) is no longer covered
//!   by the cap once the lease lapses.
//! - **Clocks**: only Redis's `TIME` decides expiries and rates; a process's own clock is
//!   used only to measure durations (when to renew, when to fence), never compared with
//!   another machine's. The Redis host's clock must slew, not step: a forward step larger
//!   than a fifth of the TTL lapses leases before their holders fence. A process's
//!   monotonic clock stops while its machine (or VM) is suspended, so a suspend longer than
//!   the TTL is not seen as a pause the way a stopped process is: avoid suspending
//!   workers that hold permits.
//!
//! Requirements and limits: Redis 6.2 or newer (checked at connect); one Redis, or one
//! master behind Sentinel (no cluster client; key names carry hash tags per key, but the
//! epoch key is one per namespace); run Redis with `maxmemory-policy noeviction` (a `volatile-*` or `allkeys-*`
//! policy can evict lease sets, which over-grants); a proxy that keeps client connections
//! open across a failover hides the new server's run id until the next reconnect. Waiting
//! acquires in other processes ask again every poll interval (about 50 calls per second per
//! waiting key and process at the default) while a local release wakes local waiters at
//! once, so "first come, first served" holds within a process, only roughly across the
//! fleet.
//!
//! # Runtimes
//!
//! Feature `smol` (default): redis-rs drives its connection on smol's global executor,
//! which works under any runtime (smol, async-std, `tollgate::run_sync`, tokio). Feature
//! `tokio`: inside a tokio runtime the connection is driven by that runtime. Renewals and
//! releases run on the store's keeper thread, whatever the runtime.
//!
//! [`is_warming_up`]: RedisLimitsError::is_warming_up
//! [`run_with`]: SharedKeyedBulkhead::run_with

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
mod call;
mod connection;
mod error;
mod health;
mod helpers;
mod keeper;
mod lease;
mod limits;
mod options;
mod permit;
mod rate;
mod scripts;
mod stats;
mod store;
mod target;

pub use crate::bulkhead::SharedKeyedBulkhead;
pub use crate::error::RedisLimitsError;
pub use crate::limits::SharedKeyLimits;
pub use crate::permit::{Fence, SharedKeyedBulkheadPermit};
pub use crate::rate::{MAX_PAUSE, SharedKeyedRateLimiter};
/// Re-exported from `tollgate` (it needs no Redis): the fleet design without shared state.
pub use tollgate::rendezvous_slot;

/// The named futures some methods return, as in tollgate's own `futures` module.
pub mod futures {
    pub use crate::bulkhead::Released;
    pub use crate::limits::Revoked;
    pub use crate::permit::Fenced;
}
pub use crate::options::{
    DEFAULT_CALL_TIMEOUT, DEFAULT_LEASE_TTL, DEFAULT_POLL_INTERVAL, MAX_CALL_TIMEOUT,
    MAX_LEASE_TTL, RedisLimitsOptions,
};
pub use crate::stats::StoreStats;
pub use crate::store::RedisLimits;
