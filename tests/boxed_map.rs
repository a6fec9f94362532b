//! `BoxedMap`: a keyed map stream kept in a struct field under a type that names only its
//! outputs (`.boxed_map()`). Whatever the map was built with carries over: its global and
//! per-key caps (peaks measured), its scheduler's rate and retries, positions from
//! `.indexed()`, and a `MapControl` that reads and drains it. Every test under smol,
//! `run_sync` and tokio (current and multi-thread).

mod common;

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

use common::{InFlight, matrix};
use futures_lite::StreamExt;
use futures_lite::future::yield_now;
use tollgate::futures::BoxedMap;
use tollgate::{MapControl, Rate, RetryPolicy, amap_iter};

const GLOBAL: usize = 6;
const PER_HOST: usize = 2;
const HOSTS: u64 = 5;

/// In-flight counters over the whole crawl and per host.
#[derive(Default)]
struct Counters {
    global: InFlight,
    hosts: Mutex<HashMap<u64, usize>>,
    host_peak: AtomicUsize,
    /// First attempts that failed (every item whose number is a multiple of 7, once).
    failed: Mutex<BTreeSet<u64>>,
}

impl Counters {
    fn enter_host(&self, host: u64) {
        let mut hosts = self.hosts.lock().unwrap();
        let running = hosts.entry(host).or_default();
        *running += 1;
        self.host_peak.fetch_max(*running, SeqCst);
    }

    fn leave_host(&self, host: u64) {
        *self.hosts.lock().unwrap().get_mut(&host).unwrap() -= 1;
    }
}

/// What a crawler keeps between calls: the crawl and its control, in named fields.
struct Crawler<'a> {
    pages: BoxedMap<'a, (usize, Result<u64, u64>)>,
    control: MapControl<u64>,
}

impl<'a> Crawler<'a> {
    /// Items `0..n`, host `i % HOSTS`; a multiple of 7 fails once, then succeeds on retry.
    fn new(n: u64, counters: &'a Counters) -> Self {
        let control = MapControl::new();
        let pages = amap_iter(0..n, GLOBAL, move |i| async move {
            let host = i % HOSTS;
            let _global = counters.global.enter();
            counters.enter_host(host);
            for _ in 0..i % 3 {
                yield_now().await;
            }
            counters.leave_host(host);
            if i % 7 == 0 && counters.failed.lock().unwrap().insert(i) {
                return Err(i);
            }
            Ok(i)
        })
        .per_key(|i| i % HOSTS, PER_HOST)
        .per_key_rate(Rate::per_second(1_000_000).burst(1_000))
        .retry(
            RetryPolicy::new()
                .attempts(2)
                .interval(std::time::Duration::ZERO),
        )
        .indexed()
        .control(&control)
        .boxed_map();
        Self { pages, control }
    }

    /// The next `count` outputs (fewer at the end).
    async fn take(&mut self, count: usize) -> Vec<(usize, Result<u64, u64>)> {
        let mut taken = Vec::new();
        while taken.len() < count {
            match self.pages.next().await {
                Some(output) => taken.push(output),
                None => break,
            }
        }
        taken
    }
}

/// A boxed map of any lifetime is `Send` when its parts are (checked at compile time).
fn assert_send<T: Send>(_: &T) {}

matrix! {
    async fn a_boxed_keyed_map_keeps_its_caps_retries_positions_and_control() {
        const N: u64 = 200;
        let counters = Counters::default();
        let mut crawler = Crawler::new(N, &counters);
        assert_send(&crawler.pages);
        assert!(
            format!("{:?}", crawler.pages).contains("limit"),
            "Debug shows the map's figures: {:?}",
            crawler.pages
        );
        // Consumed in two calls, the map kept in its field between them.
        let mut outputs = crawler.take(50).await;
        assert_eq!(outputs.len(), 50);
        outputs.extend(crawler.take(usize::MAX).await);
        assert!(crawler.pages.next().await.is_none());

        assert_eq!(counters.global.peak(), GLOBAL, "every global slot was used");
        assert_eq!(counters.global.now(), 0);
        assert_eq!(counters.host_peak.load(SeqCst), PER_HOST, "no host above its cap");
        let positions: BTreeSet<usize> = outputs.iter().map(|&(position, _)| position).collect();
        assert_eq!(positions, (0..N as usize).collect(), "each position once");
        for (position, output) in &outputs {
            assert_eq!(output, &Ok(*position as u64), "retried once, then the item's own output");
        }
        let failed = counters.failed.lock().unwrap().len() as u64;
        assert_eq!(failed, N.div_ceil(7));
        let progress = crawler.control.progress();
        assert_eq!(progress.finished(), N);
        assert_eq!(progress.in_flight(), 0);
    }

    async fn a_control_drains_a_boxed_map_and_the_positions_partition_the_input() {
        const N: u64 = 500;
        let counters = Counters::default();
        let mut crawler = Crawler::new(N, &counters);
        let mut outputs = crawler.take(40).await;
        crawler.control.drain();
        outputs.extend(crawler.take(usize::MAX).await);
        let progress = crawler.control.progress();
        let pulled = progress.pulled() as usize;
        assert!(pulled < N as usize, "the drain stopped the pulling ({pulled} of {N})");
        let mut seen: Vec<usize> = outputs.iter().map(|&(position, _)| position).collect();
        seen.extend(crawler.control.not_started());
        seen.extend(pulled..N as usize);
        seen.sort_unstable();
        assert_eq!(seen, (0..N as usize).collect::<Vec<_>>(), "outputs, not started and the rest");
        assert_eq!(counters.global.now(), 0);
    }
}
