//! Peak memory of a long bounded map: 10,000,000 lazily generated items through
//! `amap_iter` + `fold`, 64 at a time. Prints the growth of the process's peak resident set
//! (`VmHWM` in `/proc/self/status`, Linux only) and fails if it reaches 1 MiB.
//!
//! Run: `cargo run --release --example map_memory`

use std::process::ExitCode;

use futures_lite::StreamExt;
use futures_lite::future::yield_now;

const ITEMS: u64 = 10_000_000;
const LIMIT: usize = 64;

/// Peak resident set size so far, in KiB.
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

async fn work(n: u64) -> u64 {
    // A third of the items wait once, so the pool's slots and wakers are exercised.
    if n % 3 == 0 {
        yield_now().await;
    }
    n % 7
}

fn main() -> ExitCode {
    // Warm up the executor and allocator on a short run first, so only the long run's
    // growth is measured.
    tollgate::run_sync(tollgate::amap_iter(0..1_000, LIMIT, work).count());
    let Some(before) = peak_rss_kib() else {
        eprintln!("no /proc/self/status: VmHWM is Linux-only");
        return ExitCode::SUCCESS;
    };
    let start = std::time::Instant::now();
    let total =
        tollgate::run_sync(tollgate::amap_iter(0..ITEMS, LIMIT, work).fold(0u64, |sum, n| sum + n));
    let elapsed = start.elapsed();
    let after = peak_rss_kib().unwrap_or(before);
    assert_eq!(total, (0..ITEMS).map(|n| n % 7).sum::<u64>());
    let growth = after.saturating_sub(before);
    println!(
        "amap_iter over {ITEMS} items, limit {LIMIT}: {elapsed:.2?}, \
         VmHWM {before} KiB -> {after} KiB, growth {growth} KiB"
    );
    if growth >= 1024 {
        eprintln!("peak RSS grew by 1 MiB or more");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
