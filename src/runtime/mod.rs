//! The runtime layer: which runtime runs this code ([`RuntimeKey`]), the sync entry point
//! ([`run_sync`], [`try_run_sync`]), and the timer backend every other module uses.
//!
//! **This is the only code that knows about tokio.** Every `cfg(feature = "tokio")` of the
//! crate is in this folder; the rest of the crate asks "which runtime am I on?"
//! ([`RuntimeKey::current`]), "what time is it?" ([`now`]) or "give me a timer"
//! ([`RtSleep`]) and never sees which runtime answered.
//!
//! - `clock.rs`: the time line every rate counts on (nanoseconds since one origin,
//!   [`nanos_since_origin`], [`instant_at`]) and the cheap reads of it (`now_nanos`,
//!   `real_nanos`: the system's clock through the CPU's counter, anchored to it), and
//!   [`Clock`], which of them a limiter, breaker or adaptive key decides on.
//! - `key.rs`: [`RuntimeKey`], one key per `run_sync` call, per tokio runtime, or the process.
//! - `run_sync.rs`: [`run_sync`], [`try_run_sync`], [`RunSyncError`], and the per-thread
//!   marker that tells a `run_sync` call apart.
//! - `timer.rs`: the clock ([`now`]) and the timer ([`RtSleep`]): the virtual clock inside
//!   `run_virtual`, tokio's inside a tokio runtime under the feature, async-io's everywhere
//!   else; a timer polled by another runtime than the one that made it moves to its clock.
//! - `tokio.rs` (feature `tokio`): tokio runtime ids, their liveness, tokio's clock.
//! - `virtual_clock.rs` (feature `test-util`): a virtual clock per thread and the driver
//!   that moves it (`testing::run_virtual`).

mod clock;
mod key;
mod run_sync;
mod timer;
#[cfg(feature = "tokio")]
mod tokio;
#[cfg(feature = "test-util")]
mod virtual_clock;

pub(crate) use self::clock::{Clock, instant_at, nanos_since_origin};
pub use self::key::RuntimeKey;
pub use self::run_sync::{RunSyncError, run_sync, try_run_sync};
pub(crate) use self::timer::{RtSleep, block_on_real_time, now};
#[cfg(feature = "test-util")]
pub(crate) use self::virtual_clock::run_virtual;
