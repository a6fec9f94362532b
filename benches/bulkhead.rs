//! What a permit costs: acquire + release of tollgate's `Bulkhead` (per-runtime lookup
//! included) and `Semaphore`, next to `async_lock::Semaphore` and `tokio::sync::Semaphore`.
//!
//! - `uncontended/<runtime>`: one task acquiring and releasing in a loop. Under `smol` the
//!   bulkhead sees the process-wide runtime key; under `run_sync` and (with the `tokio`
//!   feature) `tokio` it looks up the runtime's own semaphore on every acquire.
//!   `tokio-task` is the same inside a spawned tokio task, where most tokio code runs.
//! - `contended/<runtime>`: 64 tasks over a limit of 8, each acquiring, yielding once while
//!   holding the permit, and releasing, 100 times; the time is per acquire. Executors: smol's
//!   local executor, futures' `LocalPool`, `run_sync` (the 64 futures joined in one), and
//!   tokio's current-thread and multi-thread (2 workers) runtimes.
//!
//! Run: `cargo bench --bench bulkhead --features tokio` (without the feature, tokio code
//! sees the process-wide key, which is the `smol` case).

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use futures_lite::future::yield_now;

const LIMIT: usize = 8;
const TASKS: usize = 64;
const ROUNDS: u64 = 100;

/// Each candidate: acquire one permit and drop it, `iters` times, inside a future.
macro_rules! acquire_loop {
    ($iters:expr, $acquire:expr) => {
        async {
            let start = Instant::now();
            for _ in 0..$iters {
                drop(black_box($acquire));
            }
            start.elapsed()
        }
    };
}

fn uncontended(c: &mut Criterion) {
    let bulkhead = tollgate::Bulkhead::new(LIMIT);
    let semaphore = tollgate::Semaphore::new(LIMIT);
    let async_lock = async_lock::Semaphore::new(LIMIT);
    let tokio_semaphore = tokio::sync::Semaphore::new(LIMIT);
    let tokio_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();

    let mut group = c.benchmark_group("uncontended");
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(3));
    group.warm_up_time(Duration::from_secs(1));

    // smol: the process-wide key.
    group.bench_function(BenchmarkId::new("tollgate-bulkhead", "smol"), |b| {
        b.iter_custom(|iters| smol::block_on(acquire_loop!(iters, bulkhead.acquire().await)))
    });
    group.bench_function(BenchmarkId::new("tollgate-semaphore", "smol"), |b| {
        b.iter_custom(|iters| smol::block_on(acquire_loop!(iters, semaphore.acquire().await)))
    });
    group.bench_function(BenchmarkId::new("async-lock", "smol"), |b| {
        b.iter_custom(|iters| smol::block_on(acquire_loop!(iters, async_lock.acquire().await)))
    });
    group.bench_function(BenchmarkId::new("tokio-semaphore", "smol"), |b| {
        b.iter_custom(|iters| smol::block_on(acquire_loop!(iters, tokio_semaphore.acquire().await)))
    });

    // run_sync: a per-call runtime key, looked up on every acquire.
    group.bench_function(BenchmarkId::new("tollgate-bulkhead", "run_sync"), |b| {
        b.iter_custom(|iters| tollgate::run_sync(acquire_loop!(iters, bulkhead.acquire().await)))
    });
    group.bench_function(BenchmarkId::new("async-lock", "run_sync"), |b| {
        b.iter_custom(|iters| tollgate::run_sync(acquire_loop!(iters, async_lock.acquire().await)))
    });

    // tokio: with the `tokio` feature, the runtime's id is looked up on every acquire.
    group.bench_function(BenchmarkId::new("tollgate-bulkhead", "tokio"), |b| {
        b.iter_custom(|iters| tokio_rt.block_on(acquire_loop!(iters, bulkhead.acquire().await)))
    });
    group.bench_function(BenchmarkId::new("tollgate-semaphore", "tokio"), |b| {
        b.iter_custom(|iters| tokio_rt.block_on(acquire_loop!(iters, semaphore.acquire().await)))
    });
    group.bench_function(BenchmarkId::new("async-lock", "tokio"), |b| {
        b.iter_custom(|iters| tokio_rt.block_on(acquire_loop!(iters, async_lock.acquire().await)))
    });
    group.bench_function(BenchmarkId::new("tokio-semaphore", "tokio"), |b| {
        b.iter_custom(|iters| {
            tokio_rt.block_on(acquire_loop!(iters, tokio_semaphore.acquire().await))
        })
    });

    // tokio, inside a spawned task (where most tokio code runs).
    static TASK_BULKHEAD: tollgate::Bulkhead = tollgate::Bulkhead::new(LIMIT);
    static TASK_ASYNC_LOCK: async_lock::Semaphore = async_lock::Semaphore::new(LIMIT);
    group.bench_function(BenchmarkId::new("tollgate-bulkhead", "tokio-task"), |b| {
        b.iter_custom(|iters| {
            tokio_rt.block_on(async move {
                let task = tokio::spawn(async move {
                    acquire_loop!(iters, TASK_BULKHEAD.acquire().await).await
                });
                task.await.unwrap()
            })
        })
    });
    group.bench_function(BenchmarkId::new("async-lock", "tokio-task"), |b| {
        b.iter_custom(|iters| {
            tokio_rt.block_on(async move {
                let task = tokio::spawn(async move {
                    acquire_loop!(iters, TASK_ASYNC_LOCK.acquire().await).await
                });
                task.await.unwrap()
            })
        })
    });
    group.finish();
}

/// One contended run: `TASKS` tasks, `ROUNDS` acquires each; `spawn_all` starts them
/// with the given per-task body and waits for all.
async fn task_body<F, Fut, P>(acquire: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = P>,
{
    for _ in 0..ROUNDS {
        let permit = acquire().await;
        yield_now().await;
        drop(permit);
    }
}

fn contended(c: &mut Criterion) {
    let bulkhead = Arc::new(tollgate::Bulkhead::new(LIMIT));
    let semaphore = Arc::new(tollgate::Semaphore::new(LIMIT));
    let async_lock = Arc::new(async_lock::Semaphore::new(LIMIT));
    let tokio_semaphore = Arc::new(tokio::sync::Semaphore::new(LIMIT));
    let acquires = TASKS as u64 * ROUNDS;

    let mut group = c.benchmark_group("contended");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(3));
    group.warm_up_time(Duration::from_secs(1));

    // Per-acquire time of one run; criterion's iteration = one run.
    macro_rules! on_smol {
        ($name:expr, $shared:expr, $acquire:expr) => {
            group.bench_function(BenchmarkId::new($name, "smol"), |b| {
                b.iter_custom(|iters| {
                    let executor = smol::LocalExecutor::new();
                    let start = Instant::now();
                    for _ in 0..iters {
                        smol::block_on(executor.run(async {
                            let tasks: Vec<_> = (0..TASKS)
                                .map(|_| {
                                    let shared = $shared.clone();
                                    executor.spawn(async move {
                                        #[allow(clippy::redundant_closure_call)]
                                        task_body(|| ($acquire)(&shared)).await
                                    })
                                })
                                .collect();
                            for task in tasks {
                                task.await;
                            }
                        }));
                    }
                    start.elapsed() / acquires as u32
                })
            });
        };
    }
    // futures' single-threaded executor, tasks spawned on its pool.
    macro_rules! on_futures {
        ($name:expr, $shared:expr, $acquire:expr) => {
            group.bench_function(BenchmarkId::new($name, "futures"), |b| {
                b.iter_custom(|iters| {
                    let start = Instant::now();
                    for _ in 0..iters {
                        let mut pool = futures::executor::LocalPool::new();
                        let spawner = pool.spawner();
                        for _ in 0..TASKS {
                            let shared = $shared.clone();
                            futures::task::LocalSpawnExt::spawn_local(&spawner, async move {
                                #[allow(clippy::redundant_closure_call)]
                                task_body(|| ($acquire)(&shared)).await
                            })
                            .unwrap();
                        }
                        pool.run();
                    }
                    start.elapsed() / acquires as u32
                })
            });
        };
    }
    // run_sync runs one future: the tasks are joined inside it (`join_all` polls only
    // the woken ones).
    macro_rules! on_run_sync {
        ($name:expr, $shared:expr, $acquire:expr) => {
            group.bench_function(BenchmarkId::new($name, "run_sync"), |b| {
                b.iter_custom(|iters| {
                    let start = Instant::now();
                    for _ in 0..iters {
                        tollgate::run_sync(async {
                            let tasks: Vec<_> = (0..TASKS)
                                .map(|_| {
                                    let shared = $shared.clone();
                                    async move {
                                        #[allow(clippy::redundant_closure_call)]
                                        task_body(|| ($acquire)(&shared)).await
                                    }
                                })
                                .collect();
                            futures::future::join_all(tasks).await;
                        });
                    }
                    start.elapsed() / acquires as u32
                })
            });
        };
    }
    macro_rules! on_tokio {
        ($name:expr, $flavor:expr, $runtime:expr, $shared:expr, $acquire:expr) => {
            group.bench_function(BenchmarkId::new($name, $flavor), |b| {
                b.iter_custom(|iters| {
                    let start = Instant::now();
                    for _ in 0..iters {
                        $runtime.block_on(async {
                            let tasks: Vec<_> = (0..TASKS)
                                .map(|_| {
                                    let shared = $shared.clone();
                                    tokio::spawn(async move {
                                        #[allow(clippy::redundant_closure_call)]
                                        task_body(|| ($acquire)(&shared)).await
                                    })
                                })
                                .collect();
                            for task in tasks {
                                task.await.unwrap();
                            }
                        });
                    }
                    start.elapsed() / acquires as u32
                })
            });
        };
    }

    on_smol!("tollgate-bulkhead", bulkhead, |b: &Arc<
        tollgate::Bulkhead,
    >| b.acquire_arc());
    on_smol!("tollgate-semaphore", semaphore, |s: &Arc<
        tollgate::Semaphore,
    >| s.acquire_arc());
    on_smol!("async-lock", async_lock, |s: &Arc<
        async_lock::Semaphore,
    >| s.acquire_arc());
    on_smol!("tokio-semaphore", tokio_semaphore, |s: &Arc<
        tokio::sync::Semaphore,
    >| s
        .clone()
        .acquire_owned());

    on_futures!("tollgate-bulkhead", bulkhead, |b: &Arc<
        tollgate::Bulkhead,
    >| b.acquire_arc());
    on_futures!("tollgate-semaphore", semaphore, |s: &Arc<
        tollgate::Semaphore,
    >| s.acquire_arc());
    on_futures!("async-lock", async_lock, |s: &Arc<
        async_lock::Semaphore,
    >| s.acquire_arc());
    on_futures!("tokio-semaphore", tokio_semaphore, |s: &Arc<
        tokio::sync::Semaphore,
    >| s
        .clone()
        .acquire_owned());

    on_run_sync!("tollgate-bulkhead", bulkhead, |b: &Arc<
        tollgate::Bulkhead,
    >| b.acquire_arc());
    on_run_sync!("tollgate-semaphore", semaphore, |s: &Arc<
        tollgate::Semaphore,
    >| s.acquire_arc());
    on_run_sync!("async-lock", async_lock, |s: &Arc<
        async_lock::Semaphore,
    >| s.acquire_arc());
    on_run_sync!("tokio-semaphore", tokio_semaphore, |s: &Arc<
        tokio::sync::Semaphore,
    >| s
        .clone()
        .acquire_owned());

    let current = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let multi = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    for (flavor, runtime) in [("tokio-current", &current), ("tokio-multi", &multi)] {
        on_tokio!("tollgate-bulkhead", flavor, runtime, bulkhead, |b: &Arc<
            tollgate::Bulkhead,
        >| b
            .acquire_arc());
        on_tokio!(
            "tollgate-semaphore",
            flavor,
            runtime,
            semaphore,
            |s: &Arc<tollgate::Semaphore>| s.acquire_arc()
        );
        on_tokio!("async-lock", flavor, runtime, async_lock, |s: &Arc<
            async_lock::Semaphore,
        >| s
            .acquire_arc());
        on_tokio!(
            "tokio-semaphore",
            flavor,
            runtime,
            tokio_semaphore,
            |s: &Arc<tokio::sync::Semaphore>| s.clone().acquire_owned()
        );
    }
    group.finish();
}

criterion_group!(benches, uncontended, contended);
criterion_main!(benches);
