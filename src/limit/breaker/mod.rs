//! Circuit breakers: stop attempts at a server that keeps failing, probe now and then to
//! find when it is back.
//!
//! - `config.rs`: [`Breaker`], the settings; its docs state the rules and the defaults.
//! - `record.rs`: the outcomes a closed breaker judges by (the last n, or the last stretch
//!   of time), a few words on explicit times.
//! - `core.rs`: `BreakerCore`, one breaker's state machine (closed, open, half-open),
//!   synchronous, on explicit times; [`BreakerState`].
//! - `circuit.rs`: [`CircuitBreaker`] and [`CircuitBreakerPermit`], one breaker behind a mutex.
//! - `keyed.rs`: [`KeyedCircuitBreaker`] and [`KeyedCircuitBreakerPermit`], one core per key in a
//!   sharded table that forgets keys holding nothing.
//! - `wait.rs`: the wait behind both `acquire` futures (an open period's timer, a probe's
//!   end).
//! - `error.rs`: [`CircuitBreakerError`].

mod circuit;
pub(crate) mod config;
pub(crate) mod core;
#[cfg(all(test, not(tollgate_loom)))]
mod core_tests;
pub(crate) mod error;
mod keyed;
mod record;
mod wait;

pub use self::circuit::{BreakerAcquire, CircuitBreaker, CircuitBreakerPermit};
pub use self::config::Breaker;
pub use self::core::BreakerState;
pub use self::error::CircuitBreakerError;
pub use self::keyed::{KeyedBreakerAcquire, KeyedCircuitBreaker, KeyedCircuitBreakerPermit};
