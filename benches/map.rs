//! Bounded mapping: tollgate against the anchors, one criterion group per case.
//!
//! Every group maps `n` items with a concurrency limit and collects the outputs:
//! - `sequential`: a plain loop awaiting one future after another (the floor);
//! - `tollgate`: `map_async` (ordered) or `amap_iter` + collect (unordered);
//!   `tollgate-stream`: `stream.map_bounded(..)` + collect;
//! - `futures`: `futures::StreamExt::buffered` / `buffer_unordered`;
//! - `futures-buffered`: `BufferedStreamExt::buffered_ordered` / `buffered_unordered`;
//! - `tokio-joinset`: a `tokio::sync::Semaphore` permit per item and `JoinSet::spawn`;
//! all of the above under a tokio current-thread runtime, and then `tollgate` again under
//! other executors: `tollgate@smol`, `tollgate@tokio-multi` (spawned onto a 2-worker
//! runtime), `tollgate@futures-executor`, `tollgate@run_sync`.
//!
//! Cases: `ready` (1,000,000 futures ready at once, limit 64), `pend_once` (200,000
//! futures that return `Pending` once and wake themselves, limit 64), `unordered_pend_once`
//! (the same, completion order), `timers` (20,000 1 ms sleeps, limit 1,000: the ideal is
//! 20 ms).
//!
//! Run: `cargo bench --bench map` (add `-- pend_once` to run one group). The numbers are
//! per run of `n` items; divide by `n` for per-item cost.

use std::future::Future;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, SamplingMode, criterion_group, criterion_main};
use futures::StreamExt as _;
use futures_buffered::BufferedStreamExt as _;
use tollgate::{BoundedStreamExt as _, amap_iter, map_async};

const READY: u64 = 1_000_000;
const PEND_ONCE: u64 = 200_000;
const TIMERS: u64 = 20_000;

fn current() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn multi() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

async fn sequential<F, Fut>(n: u64, mut f: F) -> Vec<u64>
where
    F: FnMut(u64) -> Fut,
    Fut: Future<Output = u64>,
{
    let mut out = Vec::with_capacity(n as usize);
    for i in 0..n {
        out.push(f(i).await);
    }
    out
}

/// The hand-written tokio version: a permit per item, a spawned task per item.
async fn joinset<F, Fut>(n: u64, limit: usize, ordered: bool, f: F) -> Vec<u64>
where
    F: Fn(u64) -> Fut,
    Fut: Future<Output = u64> + Send + 'static,
{
    let semaphore = Arc::new(tokio::sync::Semaphore::new(limit));
    let mut set = tokio::task::JoinSet::new();
    let mut out = if ordered {
        vec![0; n as usize]
    } else {
        Vec::with_capacity(n as usize)
    };
    let mut store = |(i, value): (u64, u64), out: &mut Vec<u64>| {
        if ordered {
            out[i as usize] = value;
        } else {
            out.push(value);
        }
    };
    for i in 0..n {
        let permit = semaphore.clone().acquire_owned().await.unwrap();
        let fut = f(i);
        set.spawn(async move {
            let value = fut.await;
            drop(permit);
            (i, value)
        });
        while let Some(done) = set.try_join_next() {
            store(done.unwrap(), &mut out);
        }
    }
    while let Some(done) = set.join_next().await {
        store(done.unwrap(), &mut out);
    }
    out
}

/// One case: every implementation and executor in one group.
fn case<F, Fut>(c: &mut Criterion, name: &str, n: u64, limit: usize, ordered: bool, f: F)
where
    F: Fn(u64) -> Fut + Copy + Send + Sync + 'static,
    Fut: Future<Output = u64> + Send + 'static,
{
    let rt = current();
    let rt_multi = multi();
    let mut group = c.benchmark_group(name);
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));

    group.bench_function(BenchmarkId::new("sequential", n), |b| {
        b.iter(|| black_box(rt.block_on(sequential(n, f))))
    });
    if ordered {
        group.bench_function(BenchmarkId::new("tollgate", n), |b| {
            b.iter(|| black_box(rt.block_on(map_async(0..n, limit, f))))
        });
        group.bench_function(BenchmarkId::new("tollgate-stream", n), |b| {
            b.iter(|| {
                black_box(rt.block_on(
                    futures::stream::iter(0..n)
                        .map_bounded(limit, f)
                        .collect::<Vec<_>>(),
                ))
            })
        });
        group.bench_function(BenchmarkId::new("futures-buffered", n), |b| {
            b.iter(|| {
                black_box(rt.block_on(
                    futures::stream::iter(0..n)
                        .map(f)
                        .buffered_ordered(limit)
                        .collect::<Vec<_>>(),
                ))
            })
        });
        group.bench_function(BenchmarkId::new("futures", n), |b| {
            b.iter(|| {
                black_box(rt.block_on(
                    futures::stream::iter(0..n)
                        .map(f)
                        .buffered(limit)
                        .collect::<Vec<_>>(),
                ))
            })
        });
    } else {
        group.bench_function(BenchmarkId::new("tollgate", n), |b| {
            b.iter(|| black_box(rt.block_on(amap_iter(0..n, limit, f).collect::<Vec<_>>())))
        });
        group.bench_function(BenchmarkId::new("futures-buffered", n), |b| {
            b.iter(|| {
                black_box(rt.block_on(
                    futures::stream::iter(0..n)
                        .map(f)
                        .buffered_unordered(limit)
                        .collect::<Vec<_>>(),
                ))
            })
        });
        group.bench_function(BenchmarkId::new("futures", n), |b| {
            b.iter(|| {
                black_box(rt.block_on(
                    futures::stream::iter(0..n)
                        .map(f)
                        .buffer_unordered(limit)
                        .collect::<Vec<_>>(),
                ))
            })
        });
    }
    group.bench_function(BenchmarkId::new("tokio-joinset", n), |b| {
        b.iter(|| black_box(rt.block_on(joinset(n, limit, ordered, f))))
    });

    // tollgate under the other executors.
    let run = move || async move {
        if ordered {
            map_async(0..n, limit, f).await
        } else {
            amap_iter(0..n, limit, f).collect::<Vec<_>>().await
        }
    };
    group.bench_function(BenchmarkId::new("tollgate@smol", n), |b| {
        b.iter(|| black_box(smol::block_on(run())))
    });
    group.bench_function(BenchmarkId::new("tollgate@tokio-multi", n), |b| {
        b.iter(|| black_box(rt_multi.block_on(rt_multi.spawn(run())).unwrap()))
    });
    group.bench_function(BenchmarkId::new("tollgate@futures-executor", n), |b| {
        b.iter(|| black_box(futures::executor::block_on(run())))
    });
    group.bench_function(BenchmarkId::new("tollgate@run_sync", n), |b| {
        b.iter(|| black_box(tollgate::run_sync(run())))
    });
    group.finish();
}

async fn pend_once(i: u64) -> u64 {
    futures_lite::future::yield_now().await;
    i
}

async fn timer(i: u64) -> u64 {
    tollgate::sleep(Duration::from_millis(1)).await;
    i
}

fn ready(c: &mut Criterion) {
    case(c, "ready", READY, 64, true, |i| async move { i });
}

fn pend_once_ordered(c: &mut Criterion) {
    case(c, "pend_once", PEND_ONCE, 64, true, pend_once);
}

fn pend_once_unordered(c: &mut Criterion) {
    case(c, "unordered_pend_once", PEND_ONCE, 64, false, pend_once);
}

fn timers(c: &mut Criterion) {
    case(c, "timers", TIMERS, 1_000, true, timer);
}

criterion_group!(
    benches,
    ready,
    pend_once_ordered,
    pend_once_unordered,
    timers
);
criterion_main!(benches);
