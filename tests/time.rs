//! `sleep`, `timeout` and `TimeoutError`.
//!
//! On virtual time (`virtual_time!`: `run_virtual` and tokio's paused clock), how long they
//! wait is exact: a timeout fires exactly at its limit and not a tick before, a sleep takes
//! exactly its duration, an hour's timeout takes an hour of virtual time and no wall time.
//! Under every runtime of the matrix, what holds at any speed: a timeout fires and returns
//! its error, never before its limit; a quick future beats it; a zero timeout polls once; a
//! ready future wins over an expired timer; huge durations never fire; a sleep waits at
//! least its duration.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use common::{matrix, virtual_time};
use futures_lite::future::{self, poll_once};
use tollgate::testing::now;
use tollgate::{TimeoutError, sleep, timeout};

/// A future that counts its polls and never completes.
struct CountPolls<'a>(&'a mut u32);

impl Future for CountPolls<'_> {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        *self.0 += 1;
        Poll::Pending
    }
}

matrix! {
    async fn timeout_fires_on_a_slow_future() {
        let start = Instant::now();
        let result = timeout(Duration::from_millis(20), sleep(Duration::from_secs(60))).await;
        let error = result.unwrap_err();
        assert_eq!(error.timeout(), Duration::from_millis(20));
        // Never before its limit; exactly at it on virtual time.
        assert!(start.elapsed() >= Duration::from_millis(20));
    }

    async fn timeout_does_not_fire_on_a_quick_future() {
        let result = timeout(Duration::from_secs(30), async {
            sleep(Duration::from_millis(2)).await;
            "done"
        })
        .await;
        assert_eq!(result, Ok("done"));
    }

    async fn zero_timeout_gives_the_inner_future_exactly_one_poll() {
        assert_eq!(timeout(Duration::ZERO, async { 1 }).await, Ok(1));
        let mut polls = 0;
        let result = timeout(Duration::ZERO, CountPolls(&mut polls)).await;
        assert!(result.is_err());
        assert_eq!(polls, 1);
    }

    async fn a_ready_future_wins_over_an_expired_timeout() {
        // The inner future finishes only after the time limit has passed, on the same poll
        // that would see the timer fire: the work that is done wins.
        let result = timeout(Duration::from_millis(1), future::poll_fn(|_| {
            std::thread::sleep(Duration::from_millis(10));
            Poll::Ready("finished late")
        }))
        .await;
        assert_eq!(result, Ok("finished late"));
    }

    async fn huge_durations_never_fire_and_never_panic() {
        assert_eq!(timeout(Duration::MAX, async { 2 }).await, Ok(2));
        let mut pending = std::pin::pin!(timeout(Duration::MAX, future::pending::<()>()));
        assert!(poll_once(pending.as_mut()).await.is_none());
        assert!(poll_once(sleep(Duration::MAX)).await.is_none());
        // Still pending after a real wait: the end time did not wrap around.
        let raced = future::or(async { pending.await.map(|_| "inner") }, async {
            sleep(Duration::from_millis(10)).await;
            Ok("other")
        })
        .await;
        assert_eq!(raced, Ok("other"));
    }

    async fn sleep_waits_at_least_its_duration() {
        let start = Instant::now();
        sleep(Duration::from_millis(15)).await;
        assert!(start.elapsed() >= Duration::from_millis(15));
        sleep(Duration::ZERO).await;
    }

    async fn timeout_accepts_into_future() {
        struct Later;
        impl IntoFuture for Later {
            type Output = u8;
            type IntoFuture = future::Ready<u8>;
            fn into_future(self) -> Self::IntoFuture {
                future::ready(9)
            }
        }
        assert_eq!(timeout(Duration::from_secs(1), Later).await, Ok(9));
    }
}

#[test]
fn timeout_error_is_an_io_timed_out_error_with_a_lowercase_message() {
    let error = tollgate::run_sync(timeout(Duration::ZERO, future::pending::<()>())).unwrap_err();
    assert_eq!(error.to_string(), "timed out after 0ns");
    assert_eq!(error.timeout(), Duration::ZERO);
    let io: std::io::Error = error.into();
    assert_eq!(io.kind(), std::io::ErrorKind::TimedOut);
    let umbrella: tollgate::Error = error.into();
    assert_eq!(umbrella.to_string(), error.to_string());
    assert!(matches!(umbrella, tollgate::Error::Timeout(_)));
    fn is_error<E: std::error::Error + Send + Sync + 'static>(_: &E) {}
    is_error::<TimeoutError>(&error);
    is_error(&umbrella);
}

#[test]
fn timers_work_under_a_plain_futures_executor() {
    // The async-std world: an executor tollgate knows nothing about. async-std itself is
    // discontinued; `futures::executor` stands in for any such executor, and async-io's
    // reactor thread drives the timers.
    let result = futures::executor::block_on(async {
        sleep(Duration::from_millis(2)).await;
        let late = timeout(Duration::from_millis(5), sleep(Duration::from_secs(60))).await;
        let quick = timeout(Duration::from_secs(5), async { 3 }).await;
        (late.is_err(), quick)
    });
    assert_eq!(result, (true, Ok(3)));
}

#[test]
fn the_futures_are_send() {
    fn assert_send<T: Send>(_: T) {}
    assert_send(sleep(Duration::from_secs(1)));
    assert_send(timeout(Duration::from_secs(1), async {}));
}

virtual_time! {
    async fn a_timeout_fires_exactly_at_its_limit() {
        let start = now();
        let error = timeout(Duration::from_millis(20), sleep(Duration::from_secs(60)))
            .await
            .unwrap_err();
        assert_eq!(error.timeout(), Duration::from_millis(20));
        assert_eq!(now() - start, Duration::from_millis(20));
    }

    async fn a_quick_future_beats_its_timeout_and_ends_when_it_is_done() {
        let start = now();
        let result = timeout(Duration::from_secs(30), async {
            sleep(Duration::from_millis(2)).await;
            "done"
        })
        .await;
        assert_eq!(result, Ok("done"));
        assert_eq!(now() - start, Duration::from_millis(2));
    }

    async fn a_sleep_takes_exactly_its_duration() {
        let start = now();
        sleep(Duration::from_millis(15)).await;
        assert_eq!(now() - start, Duration::from_millis(15));
        sleep(Duration::ZERO).await;
        assert_eq!(now() - start, Duration::from_millis(15));
    }

    async fn a_timeout_is_pending_until_exactly_its_limit() {
        let start = now();
        let mut slow = std::pin::pin!(timeout(Duration::from_secs(10), future::pending::<()>()));
        assert!(poll_once(slow.as_mut()).await.is_none());
        sleep(Duration::from_millis(9_999)).await;
        assert!(poll_once(slow.as_mut()).await.is_none());
        sleep(Duration::from_millis(1)).await;
        assert!(poll_once(slow.as_mut()).await.unwrap().is_err());
        assert_eq!(now() - start, Duration::from_secs(10));
    }

    async fn a_timeout_of_an_hour_takes_an_hour_of_virtual_time_and_no_wall_time() {
        let wall = Instant::now();
        let start = now();
        let result = timeout(Duration::from_secs(3600), sleep(Duration::from_secs(7200))).await;
        assert!(result.is_err());
        assert_eq!(now() - start, Duration::from_secs(3600));
        // The worst run measured with both cores busy took 0.1 ms of wall time.
        assert!(wall.elapsed() < Duration::from_secs(10), "{:?}", wall.elapsed());
    }
}

/// tokio's own way to move its paused clock drives tollgate's timeouts too.
#[cfg(feature = "tokio")]
mod paused_clock {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn manual_advance_drives_the_timeout() {
        let mut slow = std::pin::pin!(timeout(Duration::from_secs(10), future::pending::<()>()));
        assert!(poll_once(slow.as_mut()).await.is_none());
        tokio::time::advance(Duration::from_secs(9)).await;
        assert!(poll_once(slow.as_mut()).await.is_none());
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(poll_once(slow.as_mut()).await.unwrap().is_err());
    }
}
