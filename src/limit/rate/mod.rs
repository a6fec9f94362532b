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
//! Decisions read the cheap clock (`runtime::Clock::now`: the system's clock through the
//! CPU's counter, or tokio's); a waiter's timer is set for its reserved start as an
//! `Instant` (exactly, on the one time line) and, once fired, checked on the timer's own
//! clock (`runtime::Clock::timer_now`), so a waiter is never woken early by `Instant` and
//! never spins (the rule is in `runtime/clock.rs`).

pub(crate) mod error;
pub(crate) mod gcra;
pub(crate) mod keyed;
pub(crate) mod limiter;
pub(crate) mod wait;

pub use self::error::RateLimitError;
pub use self::gcra::Rate;
pub use self::keyed::{KeyedRateLimiter, UntilKeyReady};
pub use self::limiter::{RateLimiter, UntilReady};
