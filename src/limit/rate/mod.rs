//! Rate limits: how many starts per unit of time ([`Rate`]), decided by GCRA on one word.
//!
//! - `gcra.rs`: [`Rate`] and the decision ([`gcra::Gcra`]), shared with the maps' scheduler.
//! - `limiter.rs`: [`RateLimiter`], one rate on one atomic word.
//! - `keyed.rs`: [`KeyedRateLimiter`], one rate per key in a sharded map that forgets idle keys.
//! - `error.rs`: [`RateLimitError`].
//! - `wait.rs`: the reserved start and the sleep until it, behind both limiters' futures.
//!
//! Both limiters wait the same way: a waiter *reserves* its start at once (pushes the state
//! one interval further even when that lies ahead) and sleeps until the reserved time. So
//! waiters are served in the order they asked, each wakes exactly once, and a check never
//! takes a start a waiter already holds.

pub(crate) mod error;
pub(crate) mod gcra;
pub(crate) mod keyed;
pub(crate) mod limiter;
pub(crate) mod wait;

use std::time::Instant;

pub use self::error::RateLimitError;
pub use self::gcra::Rate;
pub use self::keyed::{KeyedRateLimiter, UntilKeyReady};
pub use self::limiter::{RateLimiter, UntilReady};

use self::gcra::nanos_since_origin;

/// Where a limiter reads the time: [`crate::runtime::now`] for async callers (the clock of
/// their runtime's timers), [`Instant::now`] for a blocked thread (whose timers run on the
/// real clock, see [`crate::runtime::block_on_real_time`]).
pub(crate) type Clock = fn() -> Instant;

/// The clock of async callers.
pub(crate) const ASYNC_CLOCK: Clock = crate::runtime::now;

/// The clock of a blocked thread.
pub(crate) const BLOCKING_CLOCK: Clock = Instant::now;

/// The current time on `clock`, as GCRA counts it.
#[inline]
pub(crate) fn read(clock: Clock) -> (Instant, u64) {
    let now = clock();
    (now, nanos_since_origin(now))
}
