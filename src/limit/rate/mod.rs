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
//!
//! Decisions read the cheap clock ([`Clock::now`]: the system's clock through the CPU's
//! counter, or tokio's); a waiter's timer is set for its reserved start as an `Instant`
//! (exactly, on the one time line) and, once fired, checked on the timer's own clock
//! ([`Clock::timer_now`]), so a waiter is never woken early by `Instant` and never spins
//! (the rule is in `runtime/clock.rs`).

pub(crate) mod error;
pub(crate) mod gcra;
pub(crate) mod keyed;
pub(crate) mod limiter;
pub(crate) mod wait;

pub use self::error::RateLimitError;
pub use self::gcra::Rate;
pub use self::keyed::{KeyedRateLimiter, UntilKeyReady};
pub use self::limiter::{RateLimiter, UntilReady};

use crate::runtime::{nanos_since_origin, now_nanos, real_nanos};

/// Where a limiter reads the time, in nanoseconds since the origin (see `runtime/clock.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Clock {
    /// Async callers: the clock of their runtime's timers (tokio's inside a tokio runtime
    /// with the `tokio` feature), the system's read through the CPU's counter elsewhere.
    Async,
    /// A blocked thread: the system's clock, whose timers it sleeps on (see
    /// [`crate::runtime::block_on_real_time`]), through the counter.
    Blocking,
}

impl Clock {
    /// Now, as a rate decides: the cheap read.
    #[inline]
    pub(crate) fn now(self) -> u64 {
        match self {
            Self::Async => now_nanos(),
            Self::Blocking => real_nanos(),
        }
    }

    /// Now on the clock this caller's timers wait on, read directly: what a timer that fired
    /// is checked against, so a waiter never wakes early by its timer's clock.
    pub(crate) fn timer_now(self) -> u64 {
        match self {
            Self::Async => nanos_since_origin(crate::runtime::now()),
            Self::Blocking => nanos_since_origin(std::time::Instant::now()),
        }
    }
}
