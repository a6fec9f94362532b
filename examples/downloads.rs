//! A cap on bytes in flight, not on requests: downloads of mixed sizes share one
//! [`Semaphore`] whose permits are kibibytes, each download taking as many as its size
//! with `acquire_many` (simulated downloads: a sleep proportional to the size).
//!
//! Many small files run side by side, a large one runs with few others, and a file larger
//! than the whole cap is refused at once (`is_over_limit`) instead of waiting forever. Half way
//! through, the cap is lowered to a quarter (as if the link got slower), then raised again:
//! downloads under way finish, and no new one starts until the bytes in flight are under the
//! new cap. (A download asking for more than the lowered cap would step aside until the cap
//! grows back, holding up nobody.)
//! The example measures the bytes in flight itself, prints the peak against the cap in
//! force, and exits non-zero if the cap was ever exceeded or a permit was lost.
//!
//! ```text
//! cargo run --release --example downloads -- [--files N] [--cap-mib C] [--ms-per-mib T]
//! ```

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tollgate::{Semaphore, SemaphoreError, map_async, run_sync, sleep};
use tollgate_testkit::Rng;

const KIB: usize = 1024;

/// What the example measures: the kibibytes downloading now, and the highest seen under
/// each cap.
///
/// "The cap in force" for a lowered cap: downloads granted under the old cap run on, so a
/// download may see as many bytes in flight as the highest cap set since the oldest
/// download still waiting or running began. Each download records the generation (the
/// number of cap changes so far) it began in.
struct Meter {
    now: usize,
    /// The cap of each generation.
    caps: Vec<usize>,
    /// Downloads waiting or running, per generation they began in.
    active: BTreeMap<usize, usize>,
    violations: Vec<String>,
    /// (cap, peak kibibytes in flight) for each cap.
    peak_by_cap: Vec<(usize, usize)>,
    /// Kibibyte-seconds in flight, and kibibyte-seconds of cap, since the start: their
    /// ratio is how much of the cap was used. Permits left free while a large download
    /// at the head of the queue gathers its share are the price of its not being starved.
    used: f64,
    offered: f64,
    last: Instant,
}

impl Meter {
    /// Accounts for the time since the last change, before a change.
    fn tick(&mut self) {
        let now = Instant::now();
        let seconds = (now - self.last).as_secs_f64();
        self.used += self.now as f64 * seconds;
        self.offered += *self.caps.last().expect("a cap") as f64 * seconds;
        self.last = now;
    }

    fn begin(&mut self) -> usize {
        let generation = self.caps.len() - 1;
        *self.active.entry(generation).or_default() += 1;
        generation
    }

    fn start(&mut self, size: usize) {
        self.tick();
        self.now += size;
        let oldest = *self.active.keys().next().expect("this download is active");
        let in_force = *self.caps[oldest..].iter().max().expect("a cap");
        if self.now > in_force {
            let now = self.now;
            self.violations
                .push(format!("{now} KiB in flight, cap in force {in_force} KiB"));
        }
        let (cap, now) = (*self.caps.last().expect("a cap"), self.now);
        match self.peak_by_cap.iter_mut().find(|(c, _)| *c == cap) {
            Some((_, peak)) => *peak = (*peak).max(now),
            None => self.peak_by_cap.push((cap, now)),
        }
    }

    fn end(&mut self, generation: usize, size: usize) {
        self.tick();
        self.now -= size;
        let count = self.active.get_mut(&generation).expect("begun");
        *count -= 1;
        if *count == 0 {
            self.active.remove(&generation);
        }
    }
}

struct Options {
    files: usize,
    cap_kib: usize,
    ms_per_mib: u64,
}

fn options() -> Options {
    let mut options = Options {
        files: 200,
        cap_kib: 16 * KIB,
        ms_per_mib: 20,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || -> usize {
            args.next()
                .and_then(|value| value.parse().ok())
                .unwrap_or_else(|| panic!("{flag} takes a number"))
        };
        match flag.as_str() {
            "--files" => options.files = value(),
            "--cap-mib" => options.cap_kib = value() * KIB,
            "--ms-per-mib" => options.ms_per_mib = value() as u64,
            other => panic!("unknown option {other}"),
        }
    }
    options
}

/// Mixed sizes from a seeded generator: mostly small files, some large, one too large.
fn sizes_kib(files: usize, cap_kib: usize) -> Vec<usize> {
    let mut rng = Rng::new(1);
    let mut sizes: Vec<usize> = (0..files)
        .map(|_| {
            match rng.below(10) {
                // Large: up to a quarter of the cap, so that they still fit when the
                // cap is lowered to a quarter (a request above the cap would wait).
                0 => rng.range(cap_kib / 8..=cap_kib / 4 - 1),
                1..=3 => rng.range(256..=1023), // medium
                _ => rng.range(16..=255),       // small
            }
        })
        .collect();
    sizes.insert(files / 3, cap_kib + KIB); // larger than the whole cap
    sizes
}

fn main() {
    let options = options();
    let bytes = Semaphore::new(options.cap_kib);
    let meter = Mutex::new(Meter {
        now: 0,
        caps: vec![options.cap_kib],
        active: BTreeMap::new(),
        violations: Vec::new(),
        peak_by_cap: Vec::new(),
        used: 0.0,
        offered: 0.0,
        last: Instant::now(),
    });
    let sizes = sizes_kib(options.files, options.cap_kib);
    let total_kib: usize = sizes.iter().sum();
    let started = Instant::now();
    let per_kib = Duration::from_micros(options.ms_per_mib * 1000 / KIB as u64);

    let outcomes: Vec<Result<usize, SemaphoreError>> = run_sync(async {
        let (lowered, raised) = (options.files / 2, options.files * 3 / 4);
        let mut index = 0;
        map_async(sizes.iter().copied(), 64, |size| {
            // The operator turns the cap down and up again while downloads run (under the
            // meter's lock, so that the meter's cap is the semaphore's).
            index += 1;
            if index == lowered || index == raised {
                let cap = if index == lowered {
                    options.cap_kib / 4
                } else {
                    options.cap_kib
                };
                let mut meter = meter.lock().unwrap();
                meter.tick();
                bytes.set_limit(cap);
                meter.caps.push(cap);
            }
            let (bytes, meter) = (&bytes, &meter);
            async move {
                let generation = meter.lock().unwrap().begin();
                let permit = match bytes.acquire_many(size).await {
                    Ok(permit) => permit,
                    Err(error) => {
                        meter.lock().unwrap().end(generation, 0);
                        return Err(error);
                    }
                };
                meter.lock().unwrap().start(size);
                sleep(per_kib * size as u32).await;
                meter.lock().unwrap().end(generation, size);
                drop(permit);
                Ok(size)
            }
        })
        .await
    });

    let elapsed = started.elapsed();
    let done: usize = outcomes
        .iter()
        .filter_map(|outcome| outcome.as_ref().ok())
        .sum();
    let refused: Vec<_> = outcomes.iter().filter_map(|o| o.as_ref().err()).collect();
    println!(
        "{} files, {:.1} MiB, cap {} MiB in flight, in {:.2?}",
        sizes.len(),
        total_kib as f64 / KIB as f64,
        options.cap_kib / KIB,
        elapsed
    );
    let meter = meter.into_inner().unwrap();
    for (cap, peak) in &meter.peak_by_cap {
        println!(
            "  under a cap of {:>6} KiB: peak {:>6} KiB in flight ({:.0}% of the cap)",
            cap,
            peak,
            *peak as f64 * 100.0 / *cap as f64
        );
    }
    println!(
        "  the cap was {:.0}% used on average (free permits wait for a large download at the head of the queue; the run's tail counts too)",
        meter.used * 100.0 / meter.offered
    );
    println!(
        "  downloaded {:.1} MiB; refused: {}",
        done as f64 / KIB as f64,
        refused
            .iter()
            .map(|error| error.to_string())
            .collect::<Vec<_>>()
            .join("; ")
    );
    let mut broken = meter.violations;
    if refused.len() != 1 || !refused[0].is_over_limit() {
        broken.push(format!("expected one over-limit refusal, got {refused:?}"));
    }
    if bytes.available_permits() != bytes.limit() || bytes.limit() != options.cap_kib {
        broken.push(format!(
            "permits lost: {} available, limit {}",
            bytes.available_permits(),
            bytes.limit()
        ));
    }
    if !broken.is_empty() {
        eprintln!("broken: {}", broken.join("\n"));
        std::process::exit(1);
    }
    println!("  the cap held; every permit came back");
}
