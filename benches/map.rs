//! Bounded mapping: tollgate against the anchors, on every executor a user may bring.
//!
//! One criterion group per workload; inside it one block per executor, every
//! implementation of the workload in that block, so each tollgate row has its anchors from
//! the same run beside it. Benchmark ids read `workload/executor/implementation`:
//!
//! - executors: `smol` (`smol::block_on`), `futures-executor` (`futures::executor::block_on`),
//!   `run_sync` (tollgate's own), `tokio-current` and `tokio-multi` (`Runtime::block_on` on
//!   a current-thread runtime and on a 2-worker multi-thread runtime);
//! - implementations: `tollgate` (`map_async`, ordered; `amap_iter` + collect, unordered),
//!   `tollgate-control` (the same with a `MapControl` attached: the cost of progress),
//!   `tollgate-stream` (`stream.map_bounded(..)` / `stream.map_unordered(..)` + collect),
//!   `futures-buffered` (`BufferedStreamExt::buffered_ordered` / `buffered_unordered`),
//!   `futures` (`StreamExt::buffered` / `buffer_unordered`), `sequential` (a plain loop
//!   awaiting one future after another: the floor), and on `tokio-current` only
//!   `tokio-joinset` (a `tokio::sync::Semaphore` permit and a `JoinSet::spawn` per item;
//!   a spawn per item is seconds per run of the ready workload, so once is enough).
//!
//! Workloads: `ready` (1,000,000 futures ready at once, limit 64, input order),
//! `pend_once` (200,000 futures that return `Pending` once and wake themselves, limit 64,
//! input order), `unordered_pend_once` (the same, completion order), `timers` (20,000 1 ms
//! sleeps, limit 1,000, input order: the ideal is 20 ms; no `sequential` row, it would take
//! 20 s).
//!
//! Run: `cargo bench --bench map` (about 8 minutes on a busy 2-core machine). Filter by
//! id: `-- ready/smol/` (one workload on one executor), `-- /run_sync/` (one executor),
//! `-- 'tollgate$'` (one implementation); add `--quick` for a rough pass. The throughput
//! line is items per second; divide the time by `n` for the cost per item. On a loaded
//! machine the wall-clock ratios swing by 2x between runs: repeat a row before trusting
//! it. Without the `tokio` feature every row sleeps on async-io's timers (with it,
//! tokio's 1 ms timer granularity doubles the timers workload for every tokio row alike).

use std::future::Future;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{
    BenchmarkGroup, BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group,
    criterion_main, measurement::WallTime,
};
use futures::StreamExt as _;
use futures_buffered::BufferedStreamExt as _;
use tollgate::{BoundedStreamExt as _, MapControl, amap_iter, map_async};

const READY: u64 = 1_000_000;
const PEND_ONCE: u64 = 200_000;
const TIMERS: u64 = 20_000;

#[path = "common/executors.rs"]
mod executors;

use executors::{Executor, Executors};

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
    let store = |(i, value): (u64, u64), out: &mut Vec<u64>| {
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

/// One workload: `n` items mapped by `f`, at most `limit` at once.
#[derive(Clone, Copy)]
struct Workload<F> {
    name: &'static str,
    n: u64,
    limit: usize,
    ordered: bool,
    f: F,
}

/// Every implementation of `w` on `executor`, side by side in `group`.
fn rows<F, Fut>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    executors: &Executors,
    executor: Executor,
    w: Workload<F>,
) where
    F: Fn(u64) -> Fut + Copy + Send + Sync + 'static,
    Fut: Future<Output = u64> + Send + 'static,
{
    let Workload {
        name,
        n,
        limit,
        ordered,
        f,
    } = w;
    let id = |implementation: &str| BenchmarkId::new(executor.name(), implementation);

    group.bench_function(id("tollgate"), |b| {
        b.iter(|| {
            black_box(if ordered {
                executors.block_on(executor, map_async(0..n, limit, f))
            } else {
                executors.block_on(executor, amap_iter(0..n, limit, f).collect::<Vec<_>>())
            })
        })
    });
    // The same with a MapControl attached: what publishing progress costs.
    group.bench_function(id("tollgate-control"), |b| {
        b.iter(|| {
            let control = MapControl::new();
            black_box(if ordered {
                executors.block_on(executor, map_async(0..n, limit, f).control(&control))
            } else {
                executors.block_on(
                    executor,
                    amap_iter(0..n, limit, f)
                        .control(&control)
                        .collect::<Vec<_>>(),
                )
            })
        })
    });
    group.bench_function(id("tollgate-stream"), |b| {
        b.iter(|| {
            let source = futures::stream::iter(0..n);
            black_box(if ordered {
                executors.block_on(executor, source.map_bounded(limit, f).collect::<Vec<_>>())
            } else {
                executors.block_on(executor, source.map_unordered(limit, f).collect::<Vec<_>>())
            })
        })
    });
    group.bench_function(id("futures-buffered"), |b| {
        b.iter(|| {
            let source = futures::stream::iter(0..n).map(f);
            black_box(if ordered {
                executors.block_on(executor, source.buffered_ordered(limit).collect::<Vec<_>>())
            } else {
                executors.block_on(
                    executor,
                    source.buffered_unordered(limit).collect::<Vec<_>>(),
                )
            })
        })
    });
    group.bench_function(id("futures"), |b| {
        b.iter(|| {
            let source = futures::stream::iter(0..n).map(f);
            black_box(if ordered {
                executors.block_on(executor, source.buffered(limit).collect::<Vec<_>>())
            } else {
                executors.block_on(executor, source.buffer_unordered(limit).collect::<Vec<_>>())
            })
        })
    });
    // 20,000 sequential 1 ms sleeps take 20 s: the timers workload compares with its ideal
    // (20 ms) instead.
    if name != "timers" {
        group.bench_function(id("sequential"), |b| {
            b.iter(|| black_box(executors.block_on(executor, sequential(n, f))))
        });
    }
    if executor == Executor::TokioCurrent {
        group.bench_function(id("tokio-joinset"), |b| {
            b.iter(|| black_box(executors.block_on(executor, joinset(n, limit, ordered, f))))
        });
    }
}

/// One group per workload: every executor, every implementation.
fn workload<F, Fut>(c: &mut Criterion, w: Workload<F>)
where
    F: Fn(u64) -> Fut + Copy + Send + Sync + 'static,
    Fut: Future<Output = u64> + Send + 'static,
{
    let executors = Executors::new();
    let mut group = c.benchmark_group(w.name);
    // Timer runs are short and jittery: more samples. Flat sampling: every run of `n`
    // items is long enough (milliseconds) that criterion's linear sampling gains nothing.
    let (samples, measurement) = if w.name == "timers" {
        (20, Duration::from_millis(1500))
    } else {
        (10, Duration::from_secs(1))
    };
    group
        .sample_size(samples)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(measurement)
        .throughput(Throughput::Elements(w.n));
    for executor in Executor::ALL {
        rows(&mut group, &executors, executor, w);
    }
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

async fn ready_now(i: u64) -> u64 {
    i
}

fn ready(c: &mut Criterion) {
    workload(
        c,
        Workload {
            name: "ready",
            n: READY,
            limit: 64,
            ordered: true,
            f: ready_now,
        },
    );
}

fn pend_once_ordered(c: &mut Criterion) {
    workload(
        c,
        Workload {
            name: "pend_once",
            n: PEND_ONCE,
            limit: 64,
            ordered: true,
            f: pend_once,
        },
    );
}

fn pend_once_unordered(c: &mut Criterion) {
    workload(
        c,
        Workload {
            name: "unordered_pend_once",
            n: PEND_ONCE,
            limit: 64,
            ordered: false,
            f: pend_once,
        },
    );
}

fn timers(c: &mut Criterion) {
    workload(
        c,
        Workload {
            name: "timers",
            n: TIMERS,
            limit: 1_000,
            ordered: true,
            f: timer,
        },
    );
}

criterion_group!(
    benches,
    ready,
    pend_once_ordered,
    pend_once_unordered,
    timers
);
criterion_main!(benches);
