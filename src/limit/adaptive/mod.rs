//! Adaptive limits: each key moves its own limit and rate between a floor and a ceiling
//! from its own signals.
//!
//! - `config.rs`: [`Adaptive`], the one line of settings every key follows; its docs state
//!   the rules (what lowers a value, what raises it, by how much, rounds, defaults).
//! - `tuning.rs`: every constant of the rules, named, in one place.
//! - `core.rs`: `KeyAdapt`, one key's state (a few words) and the rules, synchronous, on
//!   explicit times; the keyed maps keep one per key, [`AdaptiveLimiter`] one in all.
//! - `limiter.rs`: [`AdaptiveLimiter`] and [`AdaptiveLimiterPermit`], one adaptive key for code
//!   outside maps, on a [`Semaphore`](crate::Semaphore) (the limit) and the rate module's
//!   GCRA and wait (the rate).

pub(crate) mod config;
pub(crate) mod core;
pub(crate) mod limiter;
mod tuning;

pub use self::config::Adaptive;
pub use self::limiter::{AdaptiveAcquire, AdaptiveLimiter, AdaptiveLimiterPermit};
