//! A future is polled by whoever awaits it: every tollgate wait that started under one
//! runtime finishes under another. Each wait below is polled once inside a tokio
//! current-thread runtime (so its timer is made on tokio's clock), then awaited under
//! `smol::block_on`, with that runtime shut down (tokio would panic: "A Tokio 1.x context was
//! found, but it is being shutdown") or alive but idle (nobody drives its clock: a tokio
//! timer would never fire). The timer must move to the clock of the runtime that polls it.
//!
//! Feature `tokio` only: without it tollgate's timers are async-io's, which fire wherever
//! they are polled.
#![cfg(feature = "tokio")]

mod common;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use common::tokio_current;
use futures_lite::future::{pending, poll_once};
use tollgate::{
    Breaker, Bulkhead, CircuitBreaker, Outcome, Rate, RateLimiter, map_async, race, sleep, timeout,
};

/// How long a moved wait may take before it counts as lost: each wait below is a few
/// milliseconds of timer, so a wait that ends at all ends far sooner (a lost timer never
/// ends, and is what this catches).
const LOST: Duration = Duration::from_secs(20);

type Wait<'a> = Pin<Box<dyn Future<Output = ()> + 'a>>;

/// Polls `wait` once inside a fresh tokio current-thread runtime, then (with that runtime
/// shut down or kept alive and idle) finishes it under `smol::block_on`.
fn moved(wait: Wait<'_>, keep_runtime: bool) {
    let runtime = tokio_current();
    let mut wait = wait;
    let first = runtime.block_on(poll_once(&mut wait));
    assert!(
        first.is_none(),
        "the wait ended on its first poll: nothing was proven"
    );
    let alive = keep_runtime.then_some(runtime);
    smol::block_on(timeout(LOST, wait)).expect("the moved wait never ended: its timer was lost");
    drop(alive);
}

/// Each wait of the crate that sleeps on a timer, made fresh for each run.
fn each_wait(mut check: impl FnMut(&str, Wait<'_>)) {
    check("sleep", Box::pin(sleep(Duration::from_millis(30))));
    check(
        "timeout",
        Box::pin(async {
            timeout(Duration::from_millis(30), pending::<()>())
                .await
                .unwrap_err();
        }),
    );
    let limiter = RateLimiter::new(Rate::per_second(50));
    check(
        "rate limiter",
        Box::pin(async {
            limiter.until_ready().await;
            limiter.until_ready().await;
        }),
    );
    let breaker = CircuitBreaker::new(
        Breaker::new()
            .over_last(1)
            .min_attempts(1)
            .open_for(Duration::from_millis(30)),
    );
    breaker.try_acquire().unwrap().report(Outcome::failure());
    check(
        "breaker",
        Box::pin(async {
            breaker.acquire().await.report(Outcome::success());
        }),
    );
    let bulkhead = Bulkhead::new(1)
        .global()
        .acquire_timeout(Duration::from_millis(30));
    check(
        "bulkhead",
        Box::pin(async {
            let _held = bulkhead.try_acquire().unwrap();
            assert!(bulkhead.acquire().await.unwrap_err().is_timed_out());
        }),
    );
    check(
        "race hedge",
        Box::pin(async {
            let first: Pin<Box<dyn Future<Output = Result<u8, ()>>>> =
                Box::pin(pending::<Result<u8, ()>>());
            let second: Pin<Box<dyn Future<Output = Result<u8, ()>>>> = Box::pin(async { Ok(2) });
            let won = race([first, second]).hedge(Duration::from_millis(30)).await;
            assert_eq!(won.unwrap(), 2);
        }),
    );
    check(
        "keyed map with a rate",
        Box::pin(async {
            let outputs = map_async(0..8u32, 4, |n| async move { n })
                .per_key(|n| n % 2, 4)
                .per_key_rate(Rate::per_second(100))
                .await;
            assert_eq!(outputs, (0..8).collect::<Vec<_>>());
        }),
    );
    check(
        "map with a rate",
        Box::pin(async {
            let outputs = map_async(0..6u32, 4, |n| async move { n })
                .rate(Rate::per_second(100))
                .await;
            assert_eq!(outputs.len(), 6);
        }),
    );
}

/// The waits that failed to finish once moved (panicked, or lost their timer).
fn failures(keep_runtime: bool) -> Vec<String> {
    let mut failed = Vec::new();
    each_wait(|name, wait| {
        let moved =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| moved(wait, keep_runtime)));
        if moved.is_err() {
            failed.push(name.to_owned());
        }
    });
    failed
}

#[test]
fn a_wait_moved_from_a_runtime_that_shut_down_finishes_on_the_new_one() {
    let failed = failures(false);
    assert!(
        failed.is_empty(),
        "moved from a shut-down runtime, these failed: {failed:?}"
    );
}

#[test]
fn a_wait_moved_from_an_idle_runtime_finishes_on_the_new_one() {
    let failed = failures(true);
    assert!(
        failed.is_empty(),
        "moved from an idle runtime, these never ended: {failed:?}"
    );
}
