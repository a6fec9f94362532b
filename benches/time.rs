//! What a deadline costs: `tollgate::timeout` around a ready future and around a future
//! that pends once, next to `tokio::time::timeout` and the bare future, under tokio.
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
    let deadline = Duration::from_secs(60);
    let mut group = c.benchmark_group("timeout_ready");
    group.bench_function("bare", |b| {
        b.iter(|| runtime.block_on(async { black_box(async { 1 }.await) }))
    });
    group.bench_function("tollgate", |b| {
        b.iter(|| {
            runtime.block_on(async { black_box(tollgate::timeout(deadline, async { 1 }).await) })
        })
    });
    group.bench_function("tokio", |b| {
        b.iter(|| {
            runtime.block_on(async { black_box(tokio::time::timeout(deadline, async { 1 }).await) })
        })
    });
    group.finish();

    let mut group = c.benchmark_group("timeout_pend_once");
    group.bench_function("tollgate", |b| {
        b.iter(|| {
            runtime.block_on(async { black_box(tollgate::timeout(deadline, yield_now()).await) })
        })
    });
    group.bench_function("tokio", |b| {
        b.iter(|| {
            runtime.block_on(async { black_box(tokio::time::timeout(deadline, yield_now()).await) })
        })
    });
    group.finish();
}

criterion_group!(benches, timeouts);
criterion_main!(benches);
