//! What a rate-limit check costs: tollgate's `RateLimiter::check` and
//! `KeyedRateLimiter::check_key` next to governor's `check` and `check_key` (its default
//! limiters: one atomic word direct, a `DashMap` keyed), in the same run.
//!
//! - `direct/<case>`: one limiter. `allowed`: a rate so high every check passes (the
//!   common case); `denied`: one start per hour, spent before timing (every check refused,
//!   with tollgate's `retry_after` computed).
//! - `keyed-u64/<case>` and `keyed-string/<case>`: 1,024 keys used round-robin, u64 or
//!   `String` keys (tollgate looks a `String` key up by `&str`, governor by `&String`).
//! - `...-2threads`: two threads check the same limiter at once; the time is per check of
//!   one thread (so equal to the one-thread row when nothing is shared).
//!
//! `governor` is governor's default limiter, which reads quanta's clock (the CPU's time-stamp
//! counter, scaled by quanta's calibration); tollgate reads the same counter, anchored to the
//! system's monotonic clock every millisecond (`src/runtime/clock.rs`). `governor-std-clock`
//! is governor on the system's clock (`std::time::Instant`), what every check read before
//! (the gap to `governor` is the clock's price).
//! - `clock/<source>`: one read of each clock, the floor under every check: `instant-now`
//!   (`std::time::Instant::now`), `counter` (quanta's raw counter read, what a tollgate check
//!   reads), `quanta-now` (the counter read scaled, what a governor check reads).
//!
//! Run: `cargo bench --bench rate` (the default features).

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use governor::Quota;
use governor::clock::MonotonicClock;

const KEYS: usize = 1024;

/// Runs `check(i)` for `i` in `0..iters` on `threads` threads at once; the slowest thread's
/// time.
fn run(threads: usize, iters: u64, check: &(dyn Fn(usize) + Sync)) -> Duration {
    if threads == 1 {
        let start = Instant::now();
        for i in 0..iters {
            check(i as usize);
        }
        return start.elapsed();
    }
    let barrier = Barrier::new(threads);
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|thread| {
                let barrier = &barrier;
                scope.spawn(move || {
                    barrier.wait();
                    let start = Instant::now();
                    // Threads start on different keys so keyed rows do not run in lock step.
                    let offset = thread * KEYS / threads;
                    for i in 0..iters {
                        check(i as usize + offset);
                    }
                    start.elapsed()
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|worker| worker.join().unwrap())
            .max()
            .unwrap()
    })
}

fn fast() -> (tollgate::Rate, Quota) {
    let tollgate = tollgate::Rate::per_second(u32::MAX).burst(u32::MAX);
    let governor = Quota::per_second(NonZeroU32::MAX).allow_burst(NonZeroU32::MAX);
    (tollgate, governor)
}

fn slow() -> (tollgate::Rate, Quota) {
    let tollgate = tollgate::Rate::per(1, Duration::from_secs(3600));
    let governor = Quota::per_hour(NonZeroU32::MIN);
    (tollgate, governor)
}

fn direct(c: &mut Criterion) {
    let mut group = c.benchmark_group("direct");
    configure(&mut group);
    for (case, (rate, quota), threads) in [
        ("allowed", fast(), 1),
        ("allowed-2threads", fast(), 2),
        ("denied", slow(), 1),
        ("denied-2threads", slow(), 2),
    ] {
        let ours = tollgate::RateLimiter::new(rate);
        let theirs = governor::RateLimiter::direct(quota);
        let theirs_std = governor::RateLimiter::direct_with_clock(quota, MonotonicClock);
        let _ = (ours.check(), theirs.check(), theirs_std.check());
        group.bench_function(BenchmarkId::new("tollgate", case), |b| {
            b.iter_custom(|iters| {
                run(threads, iters, &|_| {
                    let _ = black_box(ours.check());
                })
            })
        });
        group.bench_function(BenchmarkId::new("governor", case), |b| {
            b.iter_custom(|iters| {
                run(threads, iters, &|_| {
                    let _ = black_box(theirs.check());
                })
            })
        });
        group.bench_function(BenchmarkId::new("governor-std-clock", case), |b| {
            b.iter_custom(|iters| {
                run(threads, iters, &|_| {
                    let _ = black_box(theirs_std.check());
                })
            })
        });
    }
    group.finish();
}

fn keyed_u64(c: &mut Criterion) {
    let mut group = c.benchmark_group("keyed-u64");
    configure(&mut group);
    let keys: Vec<u64> = (0..KEYS as u64).map(|key| key * 7919).collect();
    for (case, (rate, quota), threads) in [
        ("allowed", fast(), 1),
        ("allowed-2threads", fast(), 2),
        ("denied", slow(), 1),
        ("denied-2threads", slow(), 2),
    ] {
        let ours = tollgate::KeyedRateLimiter::new(rate);
        let theirs = governor::RateLimiter::keyed(quota);
        let theirs_std = governor::RateLimiter::dashmap_with_clock(quota, MonotonicClock);
        for key in &keys {
            let _ = (
                ours.check_key(key),
                theirs.check_key(key),
                theirs_std.check_key(key),
            );
        }
        group.bench_function(BenchmarkId::new("tollgate", case), |b| {
            b.iter_custom(|iters| {
                run(threads, iters, &|i| {
                    let _ = black_box(ours.check_key(&keys[i % KEYS]));
                })
            })
        });
        group.bench_function(BenchmarkId::new("governor", case), |b| {
            b.iter_custom(|iters| {
                run(threads, iters, &|i| {
                    let _ = black_box(theirs.check_key(&keys[i % KEYS]));
                })
            })
        });
        group.bench_function(BenchmarkId::new("governor-std-clock", case), |b| {
            b.iter_custom(|iters| {
                run(threads, iters, &|i| {
                    let _ = black_box(theirs_std.check_key(&keys[i % KEYS]));
                })
            })
        });
    }
    group.finish();
}

fn keyed_string(c: &mut Criterion) {
    let mut group = c.benchmark_group("keyed-string");
    configure(&mut group);
    let keys: Vec<String> = (0..KEYS).map(|key| format!("host-{key}.example")).collect();
    for (case, (rate, quota), threads) in [
        ("allowed", fast(), 1),
        ("allowed-2threads", fast(), 2),
        ("denied", slow(), 1),
    ] {
        let ours = tollgate::KeyedRateLimiter::<String>::new(rate);
        let theirs = governor::RateLimiter::keyed(quota);
        let theirs_std = governor::RateLimiter::dashmap_with_clock(quota, MonotonicClock);
        for key in &keys {
            let _ = (
                ours.check_key(key.as_str()),
                theirs.check_key(key),
                theirs_std.check_key(key),
            );
        }
        group.bench_function(BenchmarkId::new("tollgate", case), |b| {
            b.iter_custom(|iters| {
                run(threads, iters, &|i| {
                    let _ = black_box(ours.check_key(keys[i % KEYS].as_str()));
                })
            })
        });
        group.bench_function(BenchmarkId::new("governor", case), |b| {
            b.iter_custom(|iters| {
                run(threads, iters, &|i| {
                    let _ = black_box(theirs.check_key(&keys[i % KEYS]));
                })
            })
        });
        group.bench_function(BenchmarkId::new("governor-std-clock", case), |b| {
            b.iter_custom(|iters| {
                run(threads, iters, &|i| {
                    let _ = black_box(theirs_std.check_key(&keys[i % KEYS]));
                })
            })
        });
    }
    group.finish();
}

fn configure(group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>) {
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(2));
    group.warm_up_time(Duration::from_millis(500));
}

fn clock(c: &mut Criterion) {
    let mut group = c.benchmark_group("clock");
    configure(&mut group);
    let quanta = quanta::Clock::new();
    group.bench_function("instant-now", |b| b.iter(|| black_box(Instant::now())));
    group.bench_function("counter", |b| b.iter(|| black_box(quanta.raw())));
    group.bench_function("quanta-now", |b| b.iter(|| black_box(quanta.now())));
    group.finish();
}

criterion_group!(benches, clock, direct, keyed_u64, keyed_string);
criterion_main!(benches);
