//! What a race costs: `tollgate::race` of 2, 16 and 256 futures next to
//! `futures::future::select_ok` and futures-concurrency's `race_ok`, under smol and tokio.
//!
//! Three workloads; in each, every contestant fails but the one that finishes last:
//! - `ready`: every contestant finishes on its first poll: mostly set-up cost.
//! - `pend_once`: every contestant pends once, wakes itself, then finishes.
//! - `one_at_a_time`: contestants finish one after the other, last index first, each woken
//!   by the one before (mirrors answering at different times). Polling every contestant on
//!   each wake-up makes this quadratic; tollgate polls only the woken one.
//!
//! A fourth group, `race_hedged`, prices `.hedge(delay)` against the plain race under smol:
//! `first_wins` (contestant 0 is ready and wins: neither race polls another) and `ready`
//! (as above: each contestant fails at once, so the hedged race starts the next at once).
//! Both should cost about the same as the plain race.
//!
//! Each workload also races tuples of 2 and 12 (`tollgate_tuple`, `race_ok_tuple`: the
//! same contestants, passed as a tuple).
//!
//! `select_ok` needs `Unpin` futures, so its contestants are boxed; tollgate and `race_ok`
//! take the futures as they are (tollgate keeps a tuple's inside the race, and an
//! iterable's in boxed blocks, a first one sized to the iterator then blocks of 32, as it
//! forbids `unsafe`).
//!
//! Run: `cargo bench --bench race`. Instruction counts per race (repeatable where wall clock
//! is not): see `probe` below.

use std::future::Future;
use std::hint::black_box;
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group};
use futures_concurrency::future::RaceOk;
use futures_lite::future::{poll_fn, yield_now};

const SIZES: [usize; 3] = [2, 16, 256];

/// The contestants of one race, for one workload.
#[derive(Clone, Copy)]
enum Workload {
    Ready,
    PendOnce,
    OneAtATime,
}

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Workload::Ready => "ready",
            Workload::PendOnce => "pend_once",
            Workload::OneAtATime => "one_at_a_time",
        }
    }

    fn contestants(
        self,
        n: usize,
    ) -> Vec<impl Future<Output = Result<usize, usize>> + Send + 'static> {
        let baton = Arc::new(Mutex::new((0, vec![None::<Waker>; n])));
        (0..n)
            .map(|me| {
                let baton = baton.clone();
                async move {
                    let winner = match self {
                        Workload::Ready | Workload::PendOnce => n - 1,
                        Workload::OneAtATime => 0,
                    };
                    match self {
                        Workload::Ready => {}
                        Workload::PendOnce => yield_now().await,
                        // Contestant n - 1 finishes first, then n - 2, ...: each wakes the
                        // next, which has already been polled once and is waiting.
                        Workload::OneAtATime => {
                            poll_fn(|cx| {
                                let mut state = baton.lock().unwrap();
                                let (done, wakers) = &mut *state;
                                if *done + me + 1 != n {
                                    wakers[me] = Some(cx.waker().clone());
                                    return Poll::Pending;
                                }
                                *done += 1;
                                if let Some(waker) =
                                    me.checked_sub(1).and_then(|next| wakers[next].take())
                                {
                                    waker.wake();
                                }
                                Poll::Ready(())
                            })
                            .await
                        }
                    }
                    if me == winner { Ok(me) } else { Err(me) }
                }
            })
            .collect()
    }
}

async fn with_tollgate(workload: Workload, n: usize) -> usize {
    tollgate::race(workload.contestants(n)).await.unwrap()
}

/// Contestant 0 is ready and wins; the others would fail at once if polled.
fn first_wins(n: usize) -> Vec<std::future::Ready<Result<usize, usize>>> {
    (0..n)
        .map(|me| std::future::ready(if me == 0 { Ok(me) } else { Err(me) }))
        .collect()
}

/// The same contestants as a tuple of 2 or 12 (all of one type here; a tuple's may differ).
async fn with_tollgate_tuple(workload: Workload, n: usize) -> usize {
    let mut c = workload.contestants(n).into_iter();
    let mut next = || c.next().unwrap();
    match n {
        2 => tollgate::race((next(), next())).await.unwrap(),
        3 => tollgate::race((next(), next(), next())).await.unwrap(),
        12 => {
            let race = tollgate::race((
                next(),
                next(),
                next(),
                next(),
                next(),
                next(),
                next(),
                next(),
                next(),
                next(),
                next(),
                next(),
            ));
            race.await.unwrap()
        }
        _ => unreachable!("tuples of 2, 3 or 12"),
    }
}

/// futures-concurrency's tuple form of `race_ok`, which keeps the contestants inline.
async fn with_race_ok_tuple(workload: Workload, n: usize) -> usize {
    let mut c = workload.contestants(n).into_iter();
    let mut next = || c.next().unwrap();
    let result = match n {
        2 => (next(), next()).race_ok().await.ok(),
        3 => (next(), next(), next()).race_ok().await.ok(),
        12 => {
            let race = (
                next(),
                next(),
                next(),
                next(),
                next(),
                next(),
                next(),
                next(),
                next(),
                next(),
                next(),
                next(),
            )
                .race_ok();
            race.await.ok()
        }
        _ => unreachable!("tuples of 2, 3 or 12"),
    };
    result.unwrap()
}

async fn with_select_ok(workload: Workload, n: usize) -> usize {
    let boxed: Vec<_> = workload.contestants(n).into_iter().map(Box::pin).collect();
    futures::future::select_ok(boxed).await.unwrap().0
}

async fn with_race_ok(workload: Workload, n: usize) -> usize {
    workload.contestants(n).race_ok().await.unwrap()
}

fn races(c: &mut Criterion) {
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for workload in [Workload::Ready, Workload::PendOnce, Workload::OneAtATime] {
        let mut group = c.benchmark_group(format!("race_{}", workload.name()));
        group
            .sample_size(20)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(2));
        for n in SIZES {
            group.bench_with_input(BenchmarkId::new("tollgate/smol", n), &n, |b, &n| {
                b.iter(|| smol::block_on(async { black_box(with_tollgate(workload, n).await) }))
            });
            group.bench_with_input(BenchmarkId::new("select_ok/smol", n), &n, |b, &n| {
                b.iter(|| smol::block_on(async { black_box(with_select_ok(workload, n).await) }))
            });
            group.bench_with_input(BenchmarkId::new("race_ok/smol", n), &n, |b, &n| {
                b.iter(|| smol::block_on(async { black_box(with_race_ok(workload, n).await) }))
            });
            group.bench_with_input(BenchmarkId::new("tollgate/tokio", n), &n, |b, &n| {
                b.iter(|| tokio.block_on(async { black_box(with_tollgate(workload, n).await) }))
            });
            group.bench_with_input(BenchmarkId::new("select_ok/tokio", n), &n, |b, &n| {
                b.iter(|| tokio.block_on(async { black_box(with_select_ok(workload, n).await) }))
            });
            group.bench_with_input(BenchmarkId::new("race_ok/tokio", n), &n, |b, &n| {
                b.iter(|| tokio.block_on(async { black_box(with_race_ok(workload, n).await) }))
            });
        }
        for n in [2, 12] {
            group.bench_with_input(BenchmarkId::new("tollgate_tuple/smol", n), &n, |b, &n| {
                b.iter(|| {
                    smol::block_on(async { black_box(with_tollgate_tuple(workload, n).await) })
                })
            });
            group.bench_with_input(BenchmarkId::new("race_ok_tuple/smol", n), &n, |b, &n| {
                b.iter(|| {
                    smol::block_on(async { black_box(with_race_ok_tuple(workload, n).await) })
                })
            });
            group.bench_with_input(BenchmarkId::new("tollgate_tuple/tokio", n), &n, |b, &n| {
                b.iter(|| {
                    tokio.block_on(async { black_box(with_tollgate_tuple(workload, n).await) })
                })
            });
            group.bench_with_input(BenchmarkId::new("race_ok_tuple/tokio", n), &n, |b, &n| {
                b.iter(|| {
                    tokio.block_on(async { black_box(with_race_ok_tuple(workload, n).await) })
                })
            });
        }
        group.finish();
    }

    let mut group = c.benchmark_group("race_hedged");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    let delay = Duration::from_secs(60);
    for n in [2, 256] {
        group.bench_with_input(BenchmarkId::new("plain/first_wins", n), &n, |b, &n| {
            b.iter(|| smol::block_on(async { black_box(tollgate::race(first_wins(n)).await) }))
        });
        group.bench_with_input(BenchmarkId::new("hedged/first_wins", n), &n, |b, &n| {
            b.iter(|| {
                smol::block_on(async {
                    black_box(tollgate::race(first_wins(n)).hedge(delay).await)
                })
            })
        });
        group.bench_with_input(BenchmarkId::new("plain/ready", n), &n, |b, &n| {
            b.iter(|| smol::block_on(async { black_box(with_tollgate(Workload::Ready, n).await) }))
        });
        group.bench_with_input(BenchmarkId::new("hedged/ready", n), &n, |b, &n| {
            b.iter(|| {
                smol::block_on(async {
                    let race = tollgate::race(Workload::Ready.contestants(n)).hedge(delay);
                    black_box(race.await.unwrap())
                })
            })
        });
    }
    group.finish();
}

/// Runs one race of `implementation` on `runtime`, in its own `block_on` as the bench
/// does: each implementation's future is awaited alone, so its size is its own.
fn run_one(implementation: &str, runtime: &Runtime, workload: Workload, n: usize) -> usize {
    macro_rules! on {
        ($race:expr) => {
            match runtime {
                Runtime::Smol => smol::block_on(async { black_box($race.await) }),
                Runtime::Tokio(tokio) => tokio.block_on(async { black_box($race.await) }),
            }
        };
    }
    match implementation {
        "tollgate" => on!(with_tollgate(workload, n)),
        "tollgate_tuple" => on!(with_tollgate_tuple(workload, n)),
        "select_ok" => on!(with_select_ok(workload, n)),
        "race_ok" => on!(with_race_ok(workload, n)),
        "race_ok_tuple" => on!(with_race_ok_tuple(workload, n)),
        // The `race_hedged` group's rows (the workload is ignored).
        "plain_first_wins" => on!(async { tollgate::race(first_wins(n)).await.unwrap() }),
        "hedged_first_wins" => on!(async {
            let race = tollgate::race(first_wins(n)).hedge(Duration::from_secs(60));
            race.await.unwrap()
        }),
        "hedged_ready" => on!(async {
            let race = tollgate::race(Workload::Ready.contestants(n));
            race.hedge(Duration::from_secs(60)).await.unwrap()
        }),
        other => panic!("no implementation {other}"),
    }
}

/// The executor a probe runs on.
enum Runtime {
    Smol,
    Tokio(tokio::runtime::Runtime),
}

/// `RACE_PROBE="<implementation> <smol|tokio> <workload> <n> <races>"` runs that many races,
/// each in its own `block_on` as in the bench, and exits: for instruction counts, which
/// are repeatable on a loaded machine where wall clock is not. Two runs with different
/// numbers of races, subtracted, give the instructions of one race:
/// `RACE_PROBE="tollgate smol ready 2 1000" valgrind --tool=callgrind target/release/deps/race-*`
fn probe(spec: &str) {
    let words: Vec<&str> = spec.split_whitespace().collect();
    let [implementation, runtime, workload, n, races] = words[..] else {
        panic!("RACE_PROBE wants `<implementation> <runtime> <workload> <n> <races>`");
    };
    let workload = match workload {
        "ready" => Workload::Ready,
        "pend_once" => Workload::PendOnce,
        "one_at_a_time" => Workload::OneAtATime,
        other => panic!("no workload {other}"),
    };
    let n: usize = n.parse().expect("n is a number");
    let races: usize = races.parse().expect("races is a number");
    let runtime = match runtime {
        "smol" => Runtime::Smol,
        "tokio" => Runtime::Tokio(
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
        ),
        other => panic!("no runtime {other}"),
    };
    for _ in 0..races {
        black_box(run_one(implementation, &runtime, workload, n));
    }
}

criterion_group!(benches, races);

fn main() {
    if let Ok(spec) = std::env::var("RACE_PROBE") {
        probe(&spec);
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
