//! Limiters: the FIFO semaphore core and the bulkheads built on it (how many run at once),
//! the rate limiters (how many start per unit of time), the circuit breakers (whether a
//! server that keeps failing is tried at all), adaptive limits; and what they read from an
//! attempt: its outcome (`outcome.rs`, which adaptive keys, breakers, maps and `http` share)
//! a server's hint about one key (`hint.rs`), and one key's own limit and rate wherever they
//! come from (`key_settings.rs`).

pub(crate) mod adaptive;
pub(crate) mod breaker;
pub(crate) mod bulkhead;
pub(crate) mod check;
pub(crate) mod hint;
pub(crate) mod key_settings;
pub(crate) mod outcome;
pub(crate) mod rate;
pub(crate) mod semaphore;
pub(crate) mod sharded;
