//! What a time limit costs: `tollgate::timeout` around a ready future and around a future
//! that pends once, next to `tokio::time::timeout` and the bare future, under tokio; and
//! what a retry costs per attempt when attempts fail at once with no pause (each attempt
//! then yields to the executor once), next to a plain loop.
//!
//! Run: `cargo bench --bench time --features tokio` (without the feature tollgate uses
//! async-io's timers everywhere).

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use futures_lite::future::yield_now;

fn timeouts(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let limit = Duration::from_secs(60);
    let mut group = c.benchmark_group("timeout_ready");
    group.bench_function("bare", |b| {
        b.iter(|| runtime.block_on(async { black_box(async { 1 }.await) }))
    });
    group.bench_function("tollgate", |b| {
        b.iter(|| {
            runtime.block_on(async { black_box(tollgate::timeout(limit, async { 1 }).await) })
        })
    });
    group.bench_function("tokio", |b| {
        b.iter(|| {
            runtime.block_on(async { black_box(tokio::time::timeout(limit, async { 1 }).await) })
        })
    });
    group.finish();

    let mut group = c.benchmark_group("timeout_pend_once");
    group.bench_function("tollgate", |b| {
        b.iter(|| {
            runtime.block_on(async { black_box(tollgate::timeout(limit, yield_now()).await) })
        })
    });
    group.bench_function("tokio", |b| {
        b.iter(|| {
            runtime.block_on(async { black_box(tokio::time::timeout(limit, yield_now()).await) })
        })
    });
    group.finish();
}

fn retries(c: &mut Criterion) {
    const ATTEMPTS: u32 = 1000;
    let mut group = c.benchmark_group("retry_1000_failing_attempts");
    group.bench_function("loop", |b| {
        b.iter(|| {
            futures_lite::future::block_on(async {
                let mut last = None;
                for n in 0..ATTEMPTS {
                    match black_box(async { Err::<(), u32>(n) }.await) {
                        Ok(()) => break,
                        Err(error) => last = Some(error),
                    }
                }
                black_box(last)
            })
        })
    });
    group.bench_function("tollgate", |b| {
        b.iter(|| {
            let mut n = 0;
            let retrying = tollgate::retry(|| {
                n += 1;
                async move { Err::<(), u32>(black_box(n)) }
            })
            .attempts(ATTEMPTS)
            .interval(Duration::ZERO);
            black_box(futures_lite::future::block_on(retrying).is_err())
        })
    });
    group.finish();
}

criterion_group!(benches, timeouts, retries);
criterion_main!(benches);
