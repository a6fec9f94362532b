//! Instructions per item: what each workload costs tollgate, counted by valgrind's callgrind
//! (`Ir`, instructions executed), for before/after comparisons of a refactor.
//!
//! Wall-clock benches (`benches/map.rs`, `benches/keyed.rs`, ...) swing by 2x between runs
//! on a busy machine; an instruction count does not depend on what else the machine runs,
//! so two builds compare to a tenth of an instruction per item on any machine, loaded or
//! not. Instructions are not time (cache misses, mispredicted branches, contention are not
//! in them): confirm a large change with the wall-clock benches.
//!
//! Run: `cargo bench --bench instructions [filter]` (under a minute on 2 busy cores, once
//! built; callgrind runs code about 50x slower). A filter keeps the rows whose
//! `workload/executor` contains it (`keyed`, `/futures`, `map_async/run_sync`).
//! `TOLLGATE_INSTR_ITEMS=n` sets `N` (default 20,000); `VALGRIND=path` the valgrind to run.
//! Without valgrind it says so and exits with success, measuring nothing. Run without
//! `--bench` (`cargo test --bench instructions`, or the binary alone), it runs every
//! workload natively on a few items and checks the outputs: a smoke test, no counts.
//! Compare two builds by running the same command on both: counts include the bench's own
//! code inlined around tollgate's, so compare tables of the same `benches/instructions.rs`.
//!
//! # How
//!
//! The bench runs its own binary (`std::env::current_exe()`) under callgrind, one process per
//! workload, executor and size, the child's work chosen by `TOLLGATE_INSTR_WORKLOAD`
//! (`name/executor`) and `TOLLGATE_INSTR_ITEMS`. The child makes async-io's reactor, runs the
//! workload once on 256 items on `futures` (one-time costs: the clock's calibration, lazy
//! statics, thread-locals), then once on `n` items inside `instructions_measured_region`, the only
//! code counted (`--collect-atstart=no --toggle-collect=<it>`), and only on the main thread
//! (`--separate-threads=yes`, file `-01`: every workload runs on one thread). Each row runs
//! `N` and `2N` items and reports `(Ir(2N) - Ir(N)) / N`: what one more item costs, each
//! run's own setup (building the map or the executor, the first allocations) cancelled out.
//!
//! Left out as well: async-io's reactor turns (`ReactorLock::react`, a second
//! `--toggle-collect`). `run_sync` and `smol::block_on` (both async-io's `block_on`) turn
//! the reactor when a woken future finds its lock free, which depends on what async-io's own
//! thread is doing at that moment: wall time, not tollgate. Counted, they moved small rows
//! by 5-15%; left out, rows repeat to 0.1 instruction per item, except where tollgate itself
//! reads the clock or hashes with a random seed (`keyed_adaptive`: a few instructions;
//! `keyed_sorted_pend_once`: about one).
//!
//! # Workloads
//!
//! Each is deterministic, on one thread, with no timer that waits: futures ready at once
//! (`ready`) or that return `Pending` once and wake themselves (`pend_once`,
//! `futures_lite::future::yield_now`), rates so high they never bind, outcomes that are all
//! successes: what is measured is tollgate's scheduling. An item is one mapped item, one
//! acquire + release, or one race. A global limit of 64; keyed maps: 64 keys (`i % 64`),
//! 2 per key, unless said.
//! - `map_async`, `map_async_pend_once`: `map_async(0..n, 64, f)`, input order, collected.
//! - `map_bounded`, `map_unordered`: the stream forms (`BoundedStreamExt`), folded.
//! - `amap_iter_while_let`, `amap_iter_alongside`: `amap_iter(0..n, 64, f)` read by a
//!   `while let` loop; the second awaits a consumer's work on each output (an `async`
//!   block ready at once) through `.alongside(..)`; `amap_iter_pend_while_let`,
//!   `amap_iter_pend_alongside`: the same on `pend_once`, with a consumer whose work on each
//!   output pends once too.
//! - `map_control`: `map_async` with a `MapControl` attached (`.control(..)`).
//! - `map_rate`: `map_async(..).rate(..)`, a whole-map rate that never binds.
//! - `bulkhead`, `semaphore`: one task acquiring a `Bulkhead` / `Semaphore` permit (limit 64)
//!   and dropping it.
//! - `race2`: `race((a, b))` of two ready `Ok` futures (the first wins).
//! - `keyed`, `keyed_pend_once`: `.per_key(|i| i % 64, 2)`. With ready futures every key
//!   goes idle after each item (and is forgotten); with `pend_once` 64 keys stay busy.
//! - `keyed_sorted_pend_once`: `.per_key(|i| i / 100, 2)` on `pend_once`: host-sorted input,
//!   the per-key limit binds, items wait for their key and the window pulls ahead.
//! - `keyed_rate`: `keyed` with a `.per_key_rate(..)` that never binds.
//! - `keyed_result`: `keyed` over `Result`s (the output of the three below, which compare
//!   with it).
//! - `keyed_retry`: `keyed` over `Result`s with `.retry(RetryPolicy::new())`, nothing fails.
//! - `keyed_adaptive`: `keyed` over `Result`s with `.adaptive(Adaptive::new(1, 2), ..)`,
//!   every outcome a success (no `rate_ceiling`: with one, a key would start at 5 starts a
//!   second and the run would wait for real time).
//! - `keyed_unordered`, `keyed_boxed`: `keyed` as a stream (`map_unordered(..).per_key(..)`,
//!   folded), and the same stream behind `.boxed_map()` (a `BoxedMap`: one call through a
//!   pointer per output).
//! - `keyed_breaker`: `keyed` over `Result`s with `.classify(..)` (all successes) and
//!   `.breaker(Breaker::new())`.
//! - `keyed_rate_limiter`, `keyed_circuit_breaker`: one task calling a `KeyedRateLimiter`'s
//!   `check_key` (a rate that never binds) / a `KeyedCircuitBreaker`'s `try_acquire` and
//!   reporting a success, over 64 keys (`i % 64`).
//!
//! Executors: `run_sync` (tollgate's own), `smol` (`smol::block_on`), `futures`
//! (`futures::executor::block_on`, no reactor at all); with `--features tokio`, also `tokio`
//! (a current-thread runtime, which tollgate then sees).

use std::future::Future;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::pin::pin;
use std::process::{Command, ExitCode};
use std::sync::Mutex;
use std::time::Duration;

use futures_lite::StreamExt as _;
use futures_lite::future::yield_now;
use tollgate::{
    Adaptive, BoundedStreamExt as _, Breaker, Bulkhead, CircuitBreakerError, KeyedCircuitBreaker,
    KeyedRateLimiter, MapControl, Outcome, Rate, RetryPolicy, Semaphore, amap_iter, map_async,
    race,
};

/// The child's workload (`name/executor`).
const WORKLOAD_VAR: &str = "TOLLGATE_INSTR_WORKLOAD";
/// The child's number of items; in the parent, `N`.
const ITEMS_VAR: &str = "TOLLGATE_INSTR_ITEMS";
const DEFAULT_ITEMS: u64 = 20_000;
/// Items of the warm-up run before the counted one, and of the smoke test.
const WARM_UP_ITEMS: u64 = 256;
/// The function whose instructions callgrind counts (entry to exit, callees included).
const MARKER: &str = "*instructions_measured_region*";
/// async-io's reactor turn, left out of the count (see `count`).
const REACTOR_TURN: &str = "*async_io*ReactorLock*react*";

const LIMIT: usize = 64;
const KEYS: u64 = 64;
const PER_KEY: usize = 2;
/// Items per key of the host-sorted workload.
const SORTED_RUN: u64 = 100;
/// A rate that never binds: a start every nanosecond, a burst of a million.
const NEVER_BINDS: Rate = Rate::per_second(1_000_000_000).burst(1_000_000);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Executor {
    RunSync,
    Smol,
    Futures,
    #[cfg(feature = "tokio")]
    Tokio,
}

impl Executor {
    const ALL: &[Executor] = &[
        Executor::RunSync,
        Executor::Smol,
        Executor::Futures,
        #[cfg(feature = "tokio")]
        Executor::Tokio,
    ];

    fn name(self) -> &'static str {
        match self {
            Executor::RunSync => "run_sync",
            Executor::Smol => "smol",
            Executor::Futures => "futures",
            #[cfg(feature = "tokio")]
            Executor::Tokio => "tokio",
        }
    }

    fn block_on<F: Future>(self, future: F) -> F::Output {
        match self {
            Executor::RunSync => tollgate::run_sync(future),
            Executor::Smol => smol::block_on(future),
            Executor::Futures => futures::executor::block_on(future),
            #[cfg(feature = "tokio")]
            Executor::Tokio => tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(future),
        }
    }
}

/// The error of the workloads over `Result`s (never produced: every item succeeds).
#[derive(Debug)]
enum Error {
    Open(#[allow(dead_code)] CircuitBreakerError),
}

impl From<CircuitBreakerError> for Error {
    fn from(open: CircuitBreakerError) -> Self {
        Error::Open(open)
    }
}

async fn ready(i: u64) -> u64 {
    i
}

async fn ready_ok(i: u64) -> Result<u64, Error> {
    Ok(i)
}

async fn pend_once(i: u64) -> u64 {
    yield_now().await;
    i
}

fn key(i: &u64) -> u64 {
    i % KEYS
}

/// The sum of `outputs`, every one of them an `Ok`.
fn sum_ok(outputs: Vec<Result<u64, Error>>) -> u64 {
    outputs.into_iter().map(|output| output.unwrap()).sum()
}

/// One workload: runs `n` items on an executor and returns the sum of the outputs (each
/// item's output is its index, so the sum is known).
type Run = fn(Executor, u64) -> u64;

const WORKLOADS: &[(&str, Run)] = &[
    ("map_async", |ex, n| {
        ex.block_on(map_async(0..n, LIMIT, ready)).into_iter().sum()
    }),
    ("map_async_pend_once", |ex, n| {
        ex.block_on(map_async(0..n, LIMIT, pend_once))
            .into_iter()
            .sum()
    }),
    ("map_bounded", |ex, n| {
        let stream = futures_lite::stream::iter(0..n).map_bounded(LIMIT, ready);
        ex.block_on(stream.fold(0, |sum, i| sum + i))
    }),
    ("map_unordered", |ex, n| {
        let stream = futures_lite::stream::iter(0..n).map_unordered(LIMIT, ready);
        ex.block_on(stream.fold(0, |sum, i| sum + i))
    }),
    ("amap_iter_while_let", |ex, n| {
        ex.block_on(async {
            let mut outputs = pin!(amap_iter(0..n, LIMIT, ready));
            let mut sum = 0;
            while let Some(i) = outputs.next().await {
                sum += i;
            }
            sum
        })
    }),
    ("amap_iter_alongside", |ex, n| {
        ex.block_on(async {
            let mut outputs = pin!(amap_iter(0..n, LIMIT, ready));
            let mut sum = 0;
            while let Some(i) = outputs.next().await {
                outputs.alongside(async { sum += i }).await;
            }
            sum
        })
    }),
    ("amap_iter_pend_while_let", |ex, n| {
        ex.block_on(async {
            let mut outputs = pin!(amap_iter(0..n, LIMIT, pend_once));
            let mut sum = 0;
            while let Some(i) = outputs.next().await {
                sum += pend_once(i).await;
            }
            sum
        })
    }),
    ("amap_iter_pend_alongside", |ex, n| {
        ex.block_on(async {
            let mut outputs = pin!(amap_iter(0..n, LIMIT, pend_once));
            let mut sum = 0;
            while let Some(i) = outputs.next().await {
                sum += outputs.alongside(pend_once(i)).await;
            }
            sum
        })
    }),
    ("map_control", |ex, n| {
        let control = MapControl::new();
        let sum = ex
            .block_on(map_async(0..n, LIMIT, ready).control(&control))
            .into_iter()
            .sum();
        assert_eq!(control.progress().finished(), n);
        sum
    }),
    ("map_rate", |ex, n| {
        ex.block_on(map_async(0..n, LIMIT, ready).rate(NEVER_BINDS))
            .into_iter()
            .sum()
    }),
    ("bulkhead", |ex, n| {
        let bulkhead = Bulkhead::new(LIMIT);
        ex.block_on(async {
            let mut sum = 0;
            for i in 0..n {
                drop(black_box(bulkhead.acquire().await.unwrap()));
                sum += i;
            }
            sum
        })
    }),
    ("semaphore", |ex, n| {
        let semaphore = Semaphore::new(LIMIT);
        ex.block_on(async {
            let mut sum = 0;
            for i in 0..n {
                drop(black_box(semaphore.acquire().await.unwrap()));
                sum += i;
            }
            sum
        })
    }),
    ("race2", |ex, n| {
        ex.block_on(async {
            let mut sum = 0;
            for i in 0..n {
                // The first contestant wins: both are ready at the first poll.
                sum += race((ready_ok(i), ready_ok(i + 1))).await.unwrap();
            }
            sum
        })
    }),
    ("keyed", |ex, n| {
        ex.block_on(map_async(0..n, LIMIT, ready).per_key(key, PER_KEY))
            .into_iter()
            .sum()
    }),
    ("keyed_pend_once", |ex, n| {
        ex.block_on(map_async(0..n, LIMIT, pend_once).per_key(key, PER_KEY))
            .into_iter()
            .sum()
    }),
    ("keyed_sorted_pend_once", |ex, n| {
        let map = map_async(0..n, LIMIT, pend_once).per_key(|i| i / SORTED_RUN, PER_KEY);
        ex.block_on(map).into_iter().sum()
    }),
    ("keyed_rate", |ex, n| {
        let map = map_async(0..n, LIMIT, ready)
            .per_key(key, PER_KEY)
            .per_key_rate(NEVER_BINDS);
        ex.block_on(map).into_iter().sum()
    }),
    ("keyed_result", |ex, n| {
        sum_ok(ex.block_on(map_async(0..n, LIMIT, ready_ok).per_key(key, PER_KEY)))
    }),
    ("keyed_retry", |ex, n| {
        let map = map_async(0..n, LIMIT, ready_ok)
            .per_key(key, PER_KEY)
            .retry(RetryPolicy::new());
        sum_ok(ex.block_on(map))
    }),
    ("keyed_adaptive", |ex, n| {
        let map = map_async(0..n, LIMIT, ready_ok)
            .per_key(key, PER_KEY)
            .adaptive(Adaptive::new(1, PER_KEY), |_| Outcome::success());
        sum_ok(ex.block_on(map))
    }),
    ("keyed_unordered", |ex, n| {
        let stream = futures_lite::stream::iter(0..n)
            .map_unordered(LIMIT, ready)
            .per_key(key, PER_KEY);
        ex.block_on(stream.fold(0, |sum, i| sum + i))
    }),
    ("keyed_boxed", |ex, n| {
        let stream = futures_lite::stream::iter(0..n)
            .map_unordered(LIMIT, ready)
            .per_key(key, PER_KEY)
            .boxed_map();
        ex.block_on(stream.fold(0, |sum, i| sum + i))
    }),
    ("keyed_breaker", |ex, n| {
        let map = map_async(0..n, LIMIT, ready_ok)
            .per_key(key, PER_KEY)
            .classify(|_| Outcome::success())
            .breaker(Breaker::new());
        sum_ok(ex.block_on(map))
    }),
    ("keyed_rate_limiter", |ex, n| {
        let per_key = KeyedRateLimiter::new(NEVER_BINDS);
        ex.block_on(async {
            let mut sum = 0;
            for i in 0..n {
                per_key.check_key(black_box(&key(&i))).unwrap();
                sum += i;
            }
            sum
        })
    }),
    ("keyed_circuit_breaker", |ex, n| {
        let per_key = KeyedCircuitBreaker::new(Breaker::new());
        ex.block_on(async {
            let mut sum = 0;
            for i in 0..n {
                let permit = per_key.try_acquire(black_box(&key(&i))).unwrap();
                permit.report(Outcome::success());
                sum += i;
            }
            sum
        })
    }),
];

/// Runs `run` on `n` items and checks the sum of its outputs.
fn run_checked(name: &str, run: Run, executor: Executor, n: u64) {
    let sum = run(executor, n);
    assert_eq!(
        sum,
        n * n.saturating_sub(1) / 2,
        "{name}/{}: wrong outputs",
        executor.name()
    );
}

/// The code callgrind counts: nothing else of the child is (`--collect-atstart=no`).
#[inline(never)]
fn instructions_measured_region(run: Run, executor: Executor, n: u64) -> u64 {
    black_box(run(black_box(executor), black_box(n)))
}

/// The child: `spec` is `name/executor`.
fn child(spec: &str) {
    let n: u64 = std::env::var(ITEMS_VAR)
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{ITEMS_VAR} must be set to a number"));
    let (name, executor) = spec
        .split_once('/')
        .unwrap_or_else(|| panic!("{WORKLOAD_VAR}={spec}: expected `workload/executor`"));
    let &(name, run) = WORKLOADS
        .iter()
        .find(|(w, _)| *w == name)
        .unwrap_or_else(|| panic!("no workload {name}"));
    let &executor = Executor::ALL
        .iter()
        .find(|e| e.name() == executor)
        .unwrap_or_else(|| panic!("no executor {executor}"));
    // async-io's reactor (behind `run_sync` and `smol::block_on`) is made on first use,
    // which may or may not come inside the count, and its allocations then land in the
    // middle of the run, turning the output's in-place reallocations into copies: make it
    // now, by registering an async-io timer (polled once, then dropped).
    futures_lite::future::block_on(futures_lite::future::poll_once(smol::Timer::after(
        Duration::from_secs(3600),
    )));
    // One-time costs (the clock's calibration, lazy statics, thread-locals) outside the
    // count. On `futures` (no reactor): an async-io `block_on` would turn the reactor here,
    // and a turn outside the marker is counted (`--toggle-collect` flips).
    run_checked(name, run, Executor::Futures, WARM_UP_ITEMS);
    let sum = instructions_measured_region(run, executor, n);
    assert_eq!(sum, n * n.saturating_sub(1) / 2, "{spec}: wrong outputs");
}

/// Runs `spec` on `n` items under callgrind; the instructions of its main thread inside
/// the marker, async-io's reactor turns left out.
fn count(valgrind: &Path, spec: &str, n: u64) -> Result<u64, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let dir: PathBuf = std::env::temp_dir().join(format!(
        "tollgate-instr-{}-{}-{n}",
        std::process::id(),
        spec.replace('/', "-")
    ));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let output = Command::new(valgrind)
        .arg("--tool=callgrind")
        .arg(format!(
            "--callgrind-out-file={}",
            dir.join("out").display()
        ))
        // One file per thread: `out-01` is the main thread's, the only one counted.
        .arg("--separate-threads=yes")
        .arg("--collect-atstart=no")
        .arg(format!("--toggle-collect={MARKER}"))
        // async-io's `block_on` (`run_sync`, `smol`) turns the reactor (an `epoll_wait`
        // that returns at once, its timers) whenever a woken future finds the reactor's lock
        // free, which depends on what async-io's own thread is doing at that moment: wall
        // time, not tollgate. Entering `react` inside the marker flips counting off, leaving
        // it flips it back on.
        .arg(format!("--toggle-collect={REACTOR_TURN}"))
        .arg(&exe)
        .env(WORKLOAD_VAR, spec)
        .env(ITEMS_VAR, n.to_string())
        .output()
        .map_err(|e| format!("{}: {e}", valgrind.display()));
    let text = std::fs::read_to_string(dir.join("out-01"));
    let _ = std::fs::remove_dir_all(&dir);
    let output = output?;
    if !output.status.success() {
        return Err(format!(
            "{spec} n={n}: valgrind exited with {}:\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let text = text.map_err(|e| format!("{spec} n={n}: callgrind's output: {e}"))?;
    // `summary:` (newer callgrind) or `totals:`: the first event, `Ir`.
    let total = text
        .lines()
        .find_map(|line| {
            line.strip_prefix("summary:")
                .or_else(|| line.strip_prefix("totals:"))
        })
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| format!("{spec} n={n}: no `summary:` or `totals:` line"))?;
    if total == 0 {
        return Err(format!(
            "{spec} n={n}: 0 instructions counted: callgrind did not find the marker \
             function {MARKER} (a stripped binary?)"
        ));
    }
    Ok(total)
}

/// The valgrind to run, if there is one that answers `--version`.
fn find_valgrind() -> Option<PathBuf> {
    let valgrind = PathBuf::from(std::env::var_os("VALGRIND").unwrap_or_else(|| "valgrind".into()));
    let output = Command::new(&valgrind).arg("--version").output().ok()?;
    output.status.success().then_some(valgrind)
}

/// One row of the table.
struct Row {
    spec: String,
    per_item: Result<f64, String>,
}

fn measure(filters: &[String], n: u64) -> ExitCode {
    let Some(valgrind) = find_valgrind() else {
        println!(
            "instructions: valgrind not found (set VALGRIND=path, or install it): \
             NOTHING MEASURED, no instruction counts. Exiting with success so that \
             `cargo bench` passes on machines without valgrind."
        );
        return ExitCode::SUCCESS;
    };
    let specs: Vec<String> = WORKLOADS
        .iter()
        .flat_map(|(name, _)| {
            Executor::ALL
                .iter()
                .map(move |e| format!("{name}/{}", e.name()))
        })
        .filter(|spec| filters.is_empty() || filters.iter().any(|f| spec.contains(f.as_str())))
        .collect();
    if specs.is_empty() {
        println!("instructions: no workload matches {filters:?}");
        return ExitCode::SUCCESS;
    }
    let threads = std::thread::available_parallelism().map_or(1, |p| p.get());
    println!(
        "instructions: {} rows under callgrind, N = {n} and 2N, {threads} at a time",
        specs.len()
    );
    // Rows are taken in order by `threads` workers; each fills its own slot.
    let rows: Vec<Mutex<Option<Row>>> = specs.iter().map(|_| Mutex::new(None)).collect();
    let next = Mutex::new(0usize);
    std::thread::scope(|scope| {
        for _ in 0..threads.min(specs.len()) {
            scope.spawn(|| {
                loop {
                    let i = {
                        let mut next = next.lock().unwrap();
                        let i = *next;
                        *next += 1;
                        i
                    };
                    let Some(spec) = specs.get(i) else { break };
                    let per_item = count(&valgrind, spec, n).and_then(|one| {
                        let two = count(&valgrind, spec, 2 * n)?;
                        Ok((two as f64 - one as f64) / n as f64)
                    });
                    match &per_item {
                        Ok(per_item) => eprintln!("  {spec}: {per_item:.1}"),
                        Err(error) => eprintln!("  {spec}: {error}"),
                    }
                    *rows[i].lock().unwrap() = Some(Row {
                        spec: spec.clone(),
                        per_item,
                    });
                }
            });
        }
    });
    let rows: Vec<Row> = rows
        .into_iter()
        .map(|row| row.into_inner().unwrap().unwrap())
        .collect();
    let header = "workload/executor";
    let width = rows
        .iter()
        .map(|row| row.spec.len())
        .fold(header.len(), usize::max);
    println!();
    println!("| {header:width$} | instructions/item | N |");
    println!("| {:-<width$} | ----------------: | -: |", "");
    let mut failed = false;
    for row in &rows {
        match &row.per_item {
            Ok(per_item) => println!("| {:width$} | {per_item:17.1} | {n} |", row.spec),
            Err(_) => {
                failed = true;
                println!("| {:width$} | {:>17} | {n} |", row.spec, "failed")
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// Without `--bench`: every workload once, natively, on a few items.
fn smoke() {
    for &(name, run) in WORKLOADS {
        for &executor in Executor::ALL {
            run_checked(name, run, executor, WARM_UP_ITEMS);
        }
    }
    println!(
        "instructions: {} workloads ran (smoke test, nothing measured); \
         `cargo bench --bench instructions` counts their instructions",
        WORKLOADS.len()
    );
}

fn main() -> ExitCode {
    if let Ok(spec) = std::env::var(WORKLOAD_VAR) {
        child(&spec);
        return ExitCode::SUCCESS;
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !args.iter().any(|arg| arg == "--bench") {
        smoke();
        return ExitCode::SUCCESS;
    }
    let filters: Vec<String> = args
        .into_iter()
        .filter(|arg| !arg.starts_with('-'))
        .collect();
    let n = match std::env::var(ITEMS_VAR) {
        Ok(n) => match n.parse() {
            Ok(n) if n > 0 => n,
            _ => {
                eprintln!("{ITEMS_VAR}={n}: expected a positive number");
                return ExitCode::FAILURE;
            }
        },
        Err(_) => DEFAULT_ITEMS,
    };
    measure(&filters, n)
}
