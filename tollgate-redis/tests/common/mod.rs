//! The store tests' async helpers: the runtime matrix, which is the core crate's own (from
//! `tollgate-testkit`, so both crates' tests run on the same runtimes the same way) with this
//! crate's deadline, and [`until`]. The redis-server these tests use is
//! `tollgate_testkit::redis_server` (re-exported as `support::redis_server`).

#![allow(dead_code, unused_macros, unused_imports)]

use std::time::{Duration, Instant};

pub(crate) use tollgate_testkit::{InFlight, Rng, tokio_current, tokio_multi};

/// The testkit's `matrix!` with this crate's [`TEST_DEADLINE`].
macro_rules! matrix {
    ($($tests:tt)*) => {
        tollgate_testkit::matrix! { deadline = $crate::common::TEST_DEADLINE; $($tests)* }
    };
}
pub(crate) use matrix;

/// How long one matrix test body may run before it counts as hung: shorter than the core's,
/// since no store test needs more than a few lease TTLs, and a hang in the store (a lost
/// wake-up, a deadlocked connection) should fail the run soon.
pub const TEST_DEADLINE: Duration = Duration::from_secs(60);

/// Asks `check` again every few milliseconds until it holds; panics with `what` after
/// `timeout`. For state another thread (the keeper) changes.
pub async fn until<F, Fut>(timeout: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while !check().await {
        assert!(
            Instant::now() < deadline,
            "never happened within {timeout:?}: {what}"
        );
        tollgate::sleep(Duration::from_millis(5)).await;
    }
}

/// A store on the Redis at `url` under `namespace`, with leases of `ttl` and calls bounded
/// by `call_timeout`.
pub async fn connect(
    url: &str,
    namespace: &str,
    ttl: Duration,
    call_timeout: Duration,
) -> tollgate_redis::RedisLimits {
    // A first call of a store bounded by a short call timeout can find the test's Redis
    // (a live local process) slower than that on a machine busy past its cores: connecting
    // is not what these tests check, so an unavailable answer is tried again for a while.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let connected = tollgate_redis::RedisLimits::options(url)
            .namespace(namespace)
            .lease_ttl(ttl)
            .call_timeout(call_timeout)
            .connect()
            .await;
        match connected {
            Err(error) if error.is_unavailable() && Instant::now() < deadline => {
                tollgate::sleep(Duration::from_millis(50)).await;
            }
            connected => return connected.expect("connect to the test's redis"),
        }
    }
}
