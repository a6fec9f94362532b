//! A consumer that awaits its own work on each output, beside the map's work in flight:
//! tollgate's `alongside` against the shapes users write today, on every executor a user may
//! bring. Benchmark ids read `workload/executor/implementation`:
//!
//! - executors: `smol` (`smol::block_on`), `futures-executor`
//!   (`futures::executor::block_on`), `run_sync` (tollgate's own), `tokio-current` and
//!   `tokio-multi` (`Runtime::block_on` on a current-thread runtime and on a 2-worker
//!   multi-thread runtime);
//! - implementations: `tollgate-alongside` (`amap_iter` read by a `while let` loop that
//!   awaits the consumer's work through `.alongside(..)`), `tollgate-while-let` (the same
//!   loop awaiting the work directly: the stall this replaces, the cost to compare with),
//!   `futures-buffered-joined` (`BufferedStreamExt::buffered_unordered` feeding a bounded
//!   `futures::channel::mpsc` from one future, the consumer reading it in another, both
//!   joined on the task: what works on any executor), and on `smol` and the tokio runtimes
//!   `futures-buffered-spawned` (the same map spawned as a task, `smol::spawn` with an
//!   `async-channel`, `tokio::spawn` with a `tokio::sync::mpsc`: what a user of that runtime
//!   writes to keep the stream polled).
//!
//! Workloads: `ready` (1,000,000 futures ready at once, limit 64, a consumer ready at once:
//! the cost of the shapes themselves), `pend_once` (200,000 futures that return `Pending`
//! once, limit 64, a consumer that returns `Pending` once per output: work that waits, so
//! the map is driven while it does). Every channel holds 64 outputs (the map's limit).
//!
//! Run: `cargo bench --bench consume` (a few minutes on a busy 2-core machine); filter by id
//! as with the other benches (`-- ready/smol/`).

use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::time::Duration;

use criterion::{
    BenchmarkGroup, BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group,
    criterion_main, measurement::WallTime,
};
use futures::{SinkExt as _, StreamExt as _};
use futures_buffered::BufferedStreamExt as _;
use tollgate::{BoundedStreamExt as _, amap_iter};

const LIMIT: usize = 64;

#[path = "common/executors.rs"]
mod executors;

use executors::{Executor, Executors};

/// One workload: `n` items mapped by `work`, each output taken by `consume`.
#[derive(Clone, Copy)]
struct Workload<W, C> {
    name: &'static str,
    n: u64,
    work: W,
    consume: C,
}

async fn ready_now(i: u64) -> u64 {
    i
}

async fn pend_once(i: u64) -> u64 {
    futures_lite::future::yield_now().await;
    i
}

/// The consumer's work on an output (what it adds to the sum): ready at once.
async fn take_now(i: u64) -> u64 {
    i
}

/// The consumer's work on an output: it waits once.
async fn take_after_a_pend(i: u64) -> u64 {
    futures_lite::future::yield_now().await;
    i
}

/// The sum every implementation must reach.
fn expected(n: u64) -> u64 {
    n * (n - 1) / 2
}

async fn alongside<W, Fut, C, CF>(n: u64, work: W, consume: C) -> u64
where
    W: Fn(u64) -> Fut,
    Fut: Future<Output = u64>,
    C: Fn(u64) -> CF,
    CF: Future<Output = u64>,
{
    let mut outputs = pin!(amap_iter(0..n, LIMIT, work));
    let mut sum = 0;
    while let Some(i) = outputs.next().await {
        sum += outputs.alongside(consume(i)).await;
    }
    sum
}

async fn while_let<W, Fut, C, CF>(n: u64, work: W, consume: C) -> u64
where
    W: Fn(u64) -> Fut,
    Fut: Future<Output = u64>,
    C: Fn(u64) -> CF,
    CF: Future<Output = u64>,
{
    let mut outputs = pin!(amap_iter(0..n, LIMIT, work));
    let mut sum = 0;
    while let Some(i) = outputs.next().await {
        sum += consume(i).await;
    }
    sum
}

/// The anchor's map: futures-buffered over `n` items, completion order.
fn buffered<W, Fut>(n: u64, work: W) -> impl futures::Stream<Item = u64>
where
    W: Fn(u64) -> Fut,
    Fut: Future<Output = u64>,
{
    futures::stream::iter(0..n)
        .map(work)
        .buffered_unordered(LIMIT)
}

/// futures-buffered feeding a channel from one future, the consumer in another, joined.
async fn joined<W, Fut, C, CF>(n: u64, work: W, consume: C) -> u64
where
    W: Fn(u64) -> Fut,
    Fut: Future<Output = u64>,
    C: Fn(u64) -> CF,
    CF: Future<Output = u64>,
{
    let (mut tx, mut rx) = futures::channel::mpsc::channel(LIMIT);
    let driver = async move {
        let mut outputs = pin!(buffered(n, work));
        while let Some(i) = outputs.next().await {
            tx.send(i).await.expect("the consumer reads to the end");
        }
    };
    let consumer = async {
        let mut sum = 0;
        while let Some(i) = rx.next().await {
            sum += consume(i).await;
        }
        sum
    };
    futures::future::join(driver, consumer).await.1
}

/// futures-buffered spawned on smol, feeding an `async-channel`.
async fn spawned_smol<W, Fut, C, CF>(n: u64, work: W, consume: C) -> u64
where
    W: Fn(u64) -> Fut + Send + 'static,
    Fut: Future<Output = u64> + Send + 'static,
    C: Fn(u64) -> CF,
    CF: Future<Output = u64>,
{
    let (tx, rx) = smol::channel::bounded(LIMIT);
    let driver = smol::spawn(async move {
        let mut outputs = pin!(buffered(n, work));
        while let Some(i) = outputs.next().await {
            tx.send(i).await.expect("the consumer reads to the end");
        }
    });
    let mut sum = 0;
    while let Ok(i) = rx.recv().await {
        sum += consume(i).await;
    }
    driver.await;
    sum
}

/// futures-buffered spawned on the current tokio runtime, feeding a `tokio::sync::mpsc`.
async fn spawned_tokio<W, Fut, C, CF>(n: u64, work: W, consume: C) -> u64
where
    W: Fn(u64) -> Fut + Send + 'static,
    Fut: Future<Output = u64> + Send + 'static,
    C: Fn(u64) -> CF,
    CF: Future<Output = u64>,
{
    let (tx, mut rx) = tokio::sync::mpsc::channel(LIMIT);
    let driver = tokio::spawn(async move {
        let mut outputs = pin!(buffered(n, work));
        while let Some(i) = outputs.next().await {
            tx.send(i).await.expect("the consumer reads to the end");
        }
    });
    let mut sum = 0;
    while let Some(i) = rx.recv().await {
        sum += consume(i).await;
    }
    driver.await.expect("the driver ends");
    sum
}

/// Every implementation of `w` on `executor`, side by side in `group`.
fn rows<W, Fut, C, CF>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    executors: &Executors,
    executor: Executor,
    w: Workload<W, C>,
) where
    W: Fn(u64) -> Fut + Copy + Send + 'static,
    Fut: Future<Output = u64> + Send + 'static,
    C: Fn(u64) -> CF + Copy,
    CF: Future<Output = u64>,
{
    let Workload {
        n, work, consume, ..
    } = w;
    let id = |implementation: &str| BenchmarkId::new(executor.name(), implementation);
    let check = |sum: u64| assert_eq!(black_box(sum), expected(n));
    group.bench_function(id("tollgate-alongside"), |b| {
        b.iter(|| check(executors.block_on(executor, alongside(n, work, consume))))
    });
    group.bench_function(id("tollgate-while-let"), |b| {
        b.iter(|| check(executors.block_on(executor, while_let(n, work, consume))))
    });
    group.bench_function(id("futures-buffered-joined"), |b| {
        b.iter(|| check(executors.block_on(executor, joined(n, work, consume))))
    });
    match executor {
        Executor::Smol => {
            group.bench_function(id("futures-buffered-spawned"), |b| {
                b.iter(|| check(executors.block_on(executor, spawned_smol(n, work, consume))))
            });
        }
        Executor::TokioCurrent | Executor::TokioMulti => {
            group.bench_function(id("futures-buffered-spawned"), |b| {
                b.iter(|| check(executors.block_on(executor, spawned_tokio(n, work, consume))))
            });
        }
        Executor::Futures | Executor::RunSync => {}
    }
}

fn workload<W, Fut, C, CF>(c: &mut Criterion, w: Workload<W, C>)
where
    W: Fn(u64) -> Fut + Copy + Send + 'static,
    Fut: Future<Output = u64> + Send + 'static,
    C: Fn(u64) -> CF + Copy,
    CF: Future<Output = u64>,
{
    let executors = Executors::new();
    let mut group = c.benchmark_group(w.name);
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .throughput(Throughput::Elements(w.n));
    for executor in Executor::ALL {
        rows(&mut group, &executors, executor, w);
    }
    group.finish();
}

fn ready(c: &mut Criterion) {
    workload(
        c,
        Workload {
            name: "ready",
            n: 1_000_000,
            work: ready_now,
            consume: take_now,
        },
    );
}

fn pend_once_both(c: &mut Criterion) {
    workload(
        c,
        Workload {
            name: "pend_once",
            n: 200_000,
            work: pend_once,
            consume: take_after_a_pend,
        },
    );
}

criterion_group!(benches, ready, pend_once_both);
criterion_main!(benches);
