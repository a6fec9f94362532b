#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![warn(
    missing_docs,
    missing_debug_implementations,
    rust_2018_idioms,
    unreachable_pub
)]

mod error;
mod events;
#[cfg(feature = "http")]
pub mod http;
mod limit;
mod map;
mod race;
mod rendezvous;
mod retry;
mod runtime;
mod sync;
pub mod testing;
mod time;
mod wake;

pub use crate::error::Error;
pub use crate::limit::adaptive::{Adaptive, AdaptiveLimiter, AdaptiveLimiterPermit};
pub use crate::limit::breaker::{
    Breaker, BreakerState, CircuitBreaker, CircuitBreakerError, CircuitBreakerPermit,
    KeyedCircuitBreaker, KeyedCircuitBreakerPermit,
};
pub use crate::limit::bulkhead::keyed::{
    KeyedBulkhead, KeyedBulkheadPermit, KeyedBulkheadPermitArc,
};
pub use crate::limit::bulkhead::{
    Bulkhead, BulkheadError, BulkheadPermit, BulkheadPermitArc, BulkheadStats,
};
pub use crate::limit::hint::Hint;
pub use crate::limit::key_settings::KeySettings;
pub use crate::limit::outcome::Outcome;
pub use crate::limit::rate::{KeyedRateLimiter, Rate, RateLimitError, RateLimiter};
pub use crate::limit::semaphore::{Semaphore, SemaphoreError, SemaphorePermit, SemaphorePermitArc};
pub use crate::map::{
    Answer, BoundedStreamExt, ControlError, HeldBy, KeyProgress, LaterReason, MapControl, PausedBy,
    Progress, SharedLimits, SlotPolicy, amap_iter, gather_limit, map_async, try_map_async,
};
pub use crate::race::{IntoContestants, RaceError, race};
pub use crate::rendezvous::rendezvous_slot;
pub use crate::retry::{Attempt, RetryError, RetryEvent, RetryPolicy, retry};
pub use crate::runtime::{RunSyncError, RuntimeKey, run_sync, try_run_sync};
pub use crate::time::{TimeoutError, sleep, timeout};
#[cfg(tollgate_loom)]
#[doc(hidden)]
pub use crate::wake::model as __wake_model;

/// The futures and streams tollgate's functions return, named so they can be stored in
/// structs, and [`BoxedMap`](futures::BoxedMap), a bounded map stream under a type that
/// names only its outputs. One public path each.
pub mod futures {
    pub use crate::limit::adaptive::AdaptiveAcquire;
    pub use crate::limit::breaker::{BreakerAcquire, KeyedBreakerAcquire};
    pub use crate::limit::bulkhead::keyed::{
        KeyedBulkheadAcquire, KeyedBulkheadAcquireArc, KeyedBulkheadRun,
    };
    pub use crate::limit::bulkhead::{BulkheadAcquire, BulkheadAcquireArc, BulkheadRun};
    pub use crate::limit::rate::{UntilKeyReady, UntilReady};
    pub use crate::limit::semaphore::{SemaphoreAcquire, SemaphoreAcquireArc};
    pub use crate::map::{
        Alongside, BoundedMap, BoxedMap, GatherLimit, MapAsync, MapBounded, MapUnordered,
        TryMapAsync,
    };
    pub use crate::race::Race;
    pub use crate::retry::Retry;
    pub use crate::time::{Sleep, Timeout};
}

/// The parameters that spell a bounded map's whole type: its admission ([`Window`](map_type::Window)
/// or [`PerKey`](map_type::PerKey) and the parts of the per-key scheduler), how it delivers
/// its outputs ([`Delivery`](map_type::Delivery)) and their form
/// ([`OutputForm`](map_type::OutputForm)).
///
/// Only code that writes out a map's full type needs them, for instance a field holding
/// a map with no allocation:
///
/// ```
/// use tollgate::futures::MapUnordered;
/// use tollgate::map_type::PerKey;
///
/// type Doubled<I, F, Fut, KF> =
///     MapUnordered<futures_lite::stream::Iter<I>, F, Fut, PerKey<u64, u64, KF>>;
///
/// fn doubled(
///     numbers: std::ops::Range<u64>,
/// ) -> Doubled<std::ops::Range<u64>, impl FnMut(u64) -> std::future::Ready<u64>, std::future::Ready<u64>, impl FnMut(&u64) -> u64>
/// {
///     tollgate::amap_iter(numbers, 4, |n| std::future::ready(2 * n)).per_key(|n| n % 2, 1)
/// }
/// # let _ = doubled(0..3);
/// ```
///
/// To keep a map without spelling its type, box it:
/// [`boxed_map`](futures::BoundedMap::boxed_map) makes a
/// [`BoxedMap`](futures::BoxedMap), which names only what the map yields.
pub mod map_type {
    pub use crate::map::{
        Classified, Collected, CompletionOrder, Delivery, FailWhenOpen, Fixed, Gathered, Indexed,
        InputOrder, MapStream, NoRetry, NoSharedLimits, OutputForm, PerKey, Plain, TryCollected,
        Unkeyed, WaitWhenOpen, Window, WithSharedLimits,
    };
}
