//! Global + per-host limits on host-sorted versus interleaved input.
//!
//! 20 hosts x 100 requests of 1 ms (timers), 2 per host, 16 overall. The ideal schedule
//! takes 2000 x 1 ms / 16 = 125 ms whatever the input order.
//! - `per_key/interleaved` and `per_key/sorted`: `map_async(..).per_key(..)`, the
//!   work-conserving scheduler; the
//!   target is sorted >= 0.9x the throughput of interleaved.
//! - `naive/*`: `map_async` + `KeyedBulkhead`, the hand-built way: a request takes a global
//!   slot and then waits for its host while holding it, so sorted input runs ~2 at a time.
//!
//! Run: `cargo bench --bench keyed`.

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use tollgate::{KeyedBulkhead, map_async, run_sync, sleep};

const HOSTS: usize = 20;
const PER_HOST_ITEMS: usize = 100;
const PER_HOST: usize = 2;
const GLOBAL: usize = 16;
const LATENCY: Duration = Duration::from_millis(1);

fn inputs() -> [(&'static str, Vec<usize>); 2] {
    let interleaved = (0..PER_HOST_ITEMS).flat_map(|_| 0..HOSTS).collect();
    let sorted = (0..HOSTS)
        .flat_map(|h| std::iter::repeat_n(h, PER_HOST_ITEMS))
        .collect();
    [("interleaved", interleaved), ("sorted", sorted)]
}

fn keyed(c: &mut Criterion) {
    let mut group = c.benchmark_group("keyed_2000x1ms");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(8));
    for (order, hosts) in inputs() {
        group.bench_with_input(BenchmarkId::new("per_key", order), &hosts, |b, hosts| {
            b.iter(|| {
                run_sync(
                    map_async(hosts.iter().copied(), GLOBAL, |_| sleep(LATENCY))
                        .per_key(|h| *h, PER_HOST),
                )
            })
        });
        group.bench_with_input(BenchmarkId::new("naive", order), &hosts, |b, hosts| {
            let per_host = KeyedBulkhead::<usize>::new(PER_HOST);
            b.iter(|| {
                run_sync(map_async(hosts.iter().copied(), GLOBAL, |h| {
                    let per_host = &per_host;
                    // The timer starts once the host's slot is taken, like a request.
                    async move { per_host.run(&h, async { sleep(LATENCY).await }).await }
                }))
            })
        });
    }
    group.finish();
}

criterion_group!(benches, keyed);
criterion_main!(benches);
