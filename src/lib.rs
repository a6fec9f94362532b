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
pub use crate::limit::outcome::Outcome;
pub use crate::limit::rate::{KeyedRateLimiter, Rate, RateLimitError, RateLimiter};
pub use crate::limit::semaphore::{Semaphore, SemaphoreError, SemaphorePermit, SemaphorePermitArc};
pub use crate::map::{
    Answer, BoundedStreamExt, ControlError, KeyProgress, KeySettings, LaterReason, MapControl,
    Progress, SharedLimits, amap_iter, gather_limit, map_async, try_map_async,
};
pub use crate::race::{IntoContestants, RaceError, race};
pub use crate::rendezvous::rendezvous_slot;
pub use crate::retry::{Attempt, RetryError, RetryEvent, RetryPolicy, retry};
pub use crate::runtime::{RunSyncError, RuntimeKey, run_sync, try_run_sync};
pub use crate::time::{TimeoutError, sleep, timeout};
#[cfg(tollgate_loom)]
#[doc(hidden)]
pub use crate::wake::model as __wake_model;

/// The futures and streams tollgate's functions return (and the admission types of the
/// bounded maps), named so they can be stored in structs. One public path each.
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
        Adapting, BoundedMap, Classified, Classifying, Collected, CompletionOrder, Delivery,
        FailWhenOpen, Fixed, GatherLimit, Gathered, Indexed, InputOrder, MapAsync, MapBounded,
        MapUnordered, NoRetry, NoSharedLimits, OutputForm, PerKey, Plain, TryCollected,
        TryMapAsync, Unkeyed, WaitWhenOpen, Window, WithBreaker, WithSharedLimits,
    };
    pub use crate::race::Race;
    pub use crate::retry::Retry;
    pub use crate::time::{Sleep, Timeout};
}
