//! `MapControl::stop`: a map ends at once and keeps what finished; and a map dropped
//! part-way, or left by a panic in its consumer's work, leaves nothing behind.
//!
//! What is asserted holds at any speed: the positions handed out, cancelled, not started
//! and never pulled partition the input; the figures add up; no permit of a semaphore and
//! no lease of shared limits is held once the map stopped or was dropped. Retries that a
//! stop cancels wait for long pauses, so a stop that let them run would be seen on
//! virtual time (`virtual_time!`), where the map's end is exact.

mod common;

use std::future::{Pending, Ready, pending, ready};
use std::panic::AssertUnwindSafe;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::time::Duration;

use common::{matrix, virtual_time};
use futures_lite::StreamExt;
use futures_lite::future::{FutureExt, yield_now, zip};
use tollgate::testing::now;
use tollgate::{
    Answer, BoundedStreamExt, MapControl, RetryPolicy, Semaphore, SharedLimits, amap_iter,
    map_async, sleep,
};

/// Shared limits that grant every ask at once and count the leases held (a lease is held
/// until its permit is dropped).
#[derive(Clone, Default)]
struct Leases(Arc<AtomicUsize>);

/// One lease of [`Leases`].
struct Lease(Arc<AtomicUsize>);

impl Drop for Lease {
    fn drop(&mut self) {
        self.0.fetch_sub(1, SeqCst);
    }
}

impl Leases {
    fn held(&self) -> usize {
        self.0.load(SeqCst)
    }
}

impl SharedLimits<usize> for Leases {
    type Permit = Lease;
    type Error = ();
    type Ask = Ready<Answer<Lease, ()>>;
    type Wake = Pending<()>;
    type Revoked = Pending<()>;

    fn ask(&self, _key: &usize) -> Self::Ask {
        self.0.fetch_add(1, SeqCst);
        ready(Answer::Granted(Lease(Arc::clone(&self.0))))
    }

    fn wake(&self, _key: &usize) -> Option<Self::Wake> {
        None
    }

    fn revoked(&self, _permit: &Lease) -> Option<Self::Revoked> {
        None
    }
}

/// Checks that the positions handed out, cancelled, not started and from `pulled` on
/// (never pulled) cover `0..n`, each exactly once.
fn check_partition<K>(handed_out: &[usize], control: &MapControl<K>, n: usize) {
    let progress = control.progress();
    let pulled = progress.pulled() as usize;
    let mut seen = vec![0u32; n];
    for &position in handed_out
        .iter()
        .chain(&control.cancelled())
        .chain(&control.not_started())
        .chain(&(pulled..n).collect::<Vec<_>>())
    {
        seen[position] += 1;
    }
    let wrong: Vec<usize> = (0..n).filter(|&p| seen[p] != 1).collect();
    assert!(
        wrong.is_empty(),
        "positions not seen exactly once: {wrong:?}"
    );
    assert_eq!(
        progress.pulled(),
        progress.finished() + progress.cancelled() + progress.not_started(),
        "{progress:?}"
    );
    assert_eq!(progress.cancelled() as usize, control.cancelled().len());
    assert_eq!(progress.not_started() as usize, control.not_started().len());
}

const N: usize = 200;

/// Work that returns `Pending` `times` times: the map is driven while it waits (from its
/// second wait on: `alongside` lets work that pends once finish first).
async fn pend(times: u32) {
    for _ in 0..times {
        yield_now().await;
    }
}

matrix! {
    async fn a_stop_keeps_what_finished_and_cancels_what_runs() {
        // Items below 20 finish at once; the others hold a permit and a lease and never
        // finish. Item 20 asks for the stop.
        let permits = Semaphore::new(N);
        let leases = Leases::default();
        let control = MapControl::new();
        let stopper = control.clone();
        let done = map_async(0..N, 6, |n| {
            let (permits, stopper) = (&permits, stopper.clone());
            async move {
                let _permit = permits.acquire().await.expect("open");
                if n == 20 {
                    stopper.stop();
                }
                if n >= 20 {
                    pending::<()>().await;
                }
                Ok::<usize, ()>(n)
            }
        })
        .per_key(|n| n % 3, 2)
        .shared_limits(leases.clone())
        .indexed()
        .control(&control)
        .await;
        let positions: Vec<usize> = done.iter().map(|&(position, _)| position).collect();
        // What finished before the stop, in input order (an item below 20 still waiting
        // for its key then is not started).
        assert!(positions.windows(2).all(|w| w[0] < w[1]), "{positions:?}");
        assert!(positions.iter().all(|&p| p < 20), "{positions:?}");
        assert!(positions.len() >= 10, "{positions:?}");
        assert!(!control.cancelled().is_empty(), "item 20 and its neighbours ran");
        check_partition(&positions, &control, N);
        assert!(control.progress().is_ended());
        assert_eq!(permits.available_permits(), N, "every permit given back");
        assert_eq!(leases.held(), 0, "every lease given back");
    }

    async fn a_stream_hands_out_what_finished_before_the_stop_then_ends() {
        let permits = Semaphore::new(N);
        let control = MapControl::new();
        let mut outputs = pin!(
            amap_iter(0..N, 8, |n| {
                let permits = &permits;
                async move {
                    let _permit = permits.acquire().await.expect("open");
                    if n % 2 == 1 {
                        pending::<()>().await; // odd items never finish
                    }
                    n
                }
            })
            .window(64)
            .indexed()
            .control(&control)
        );
        let mut handed_out = Vec::new();
        // The first even output; then the consumer works while the map runs ahead, and
        // asks for the stop.
        let (position, _) = outputs.next().await.expect("an output");
        handed_out.push(position);
        outputs.alongside(pend(3)).await;
        control.stop();
        outputs.alongside(pend(3)).await;
        assert_eq!(permits.available_permits(), N, "the stop dropped what ran");
        while let Some((position, n)) = outputs.next().await {
            assert_eq!(n % 2, 0, "only what finished");
            handed_out.push(position);
        }
        check_partition(&handed_out, &control, N);
        assert!(control.progress().cancelled() > 0);
    }

    async fn a_panic_in_the_consumers_work_or_a_drop_leaves_nothing_held() {
        let permits = Semaphore::new(N);
        let leases = Leases::default();
        let control = MapControl::new();
        let attempt = |n: usize| {
            let permits = &permits;
            async move {
                let _permit = permits.acquire().await.expect("open");
                yield_now().await;
                if n % 5 == 4 {
                    pending::<()>().await;
                }
                Ok::<usize, ()>(n)
            }
        };
        let crawl = AssertUnwindSafe(async {
            let mut outputs = pin!(
                amap_iter(0..N, 8, attempt)
                    .per_key(|n| n % 7, 2)
                    .shared_limits(leases.clone())
                    .control(&control)
            );
            while let Some(n) = outputs.next().await {
                let n = n.expect("granted");
                outputs
                    .alongside(async {
                        yield_now().await;
                        assert!(n < 30, "the consumer's work fails at {n}");
                    })
                    .await;
            }
        });
        let panicked = crawl.catch_unwind().await;
        assert!(panicked.is_err(), "the consumer's work panicked");
        assert_eq!(permits.available_permits(), N);
        assert_eq!(leases.held(), 0);
        let progress = control.progress();
        assert!(progress.is_ended() && progress.cancelled() > 0, "{progress:?}");

        // Dropped part-way, between two outputs.
        let mut outputs = Box::pin(
            amap_iter(0..N, 8, attempt)
                .per_key(|n| n % 7, 2)
                .shared_limits(leases.clone()),
        );
        for _ in 0..10 {
            let _ = outputs.next().await.expect("an output");
        }
        assert!(leases.held() > 0 && permits.available_permits() < N);
        drop(outputs);
        assert_eq!(permits.available_permits(), N);
        assert_eq!(leases.held(), 0);
    }
}

virtual_time! {
    async fn a_stop_ends_now_where_a_drain_would_wait_for_the_retries() {
        // Every third item fails once and is retried after 60 s. At 1 s the map is
        // stopped (or drained): the stop ends it then, the drain only after the retries.
        for stop in [true, false] {
            let control = MapControl::new();
            let attempts = AtomicUsize::new(0);
            let start = now();
            let map = map_async(0..N, 8, |n| {
                let attempts = &attempts;
                async move {
                    let attempt = attempts.fetch_add(1, SeqCst);
                    sleep(Duration::from_millis(100)).await;
                    if n % 3 == 0 && attempt < N {
                        Err(n)
                    } else {
                        Ok(n)
                    }
                }
            })
            .per_key(|n| n % 4, 2)
            .retry(RetryPolicy::new().attempts(2).interval(Duration::from_secs(60)).jitter(0.0))
            .indexed()
            .control(&control);
            let ask = async {
                sleep(Duration::from_secs(1)).await;
                if stop {
                    control.stop();
                } else {
                    control.drain();
                }
                attempts.load(SeqCst)
            };
            let (done, attempts_then) = zip(map, ask).await;
            let took = now() - start;
            let positions: Vec<usize> = done.iter().map(|&(position, _)| position).collect();
            let mut sorted = positions.clone();
            sorted.sort_unstable();
            assert_eq!(positions, sorted, "input order");
            check_partition(&positions, &control, N);
            if stop {
                assert!(took < Duration::from_secs(2), "the stop ended the map at once: {took:?}");
                assert_eq!(attempts.load(SeqCst), attempts_then, "nothing started after the stop");
                assert!(
                    done.iter().all(|(_, output)| output.is_ok()),
                    "no retry ran: {done:?}"
                );
                assert!(control.progress().cancelled() > 0);
            } else {
                assert!(took >= Duration::from_secs(60), "the drain ran the retries: {took:?}");
                assert_eq!(control.progress().cancelled(), 0);
            }
        }
    }
}
