//! On an adaptive map every per-key setting is a ceiling, and `KeyProgress` shows the values
//! in force. What depends on time (how keys rise and fall, the spacing of starts, how fast
//! a ceiling is crept up to) is proven on **virtual
//! time** (`virtual_time!`: run_virtual and tokio's paused clock), where the figures are
//! exact:
//!
//! - a control's limit for one key takes the key's adapted limit down at once (no start
//!   after it runs more, at the server), a higher one lets it creep up to it and never above,
//!   clearing it returns the key to the map-wide ceiling, and a lower default key limit caps
//!   every key without a limit of its own; a rate the same way, measured by the spacing of
//!   the starts at the server;
//! - `KeyProgress::limit()` and `rate()` start at the floor and 5 starts per second, move as
//!   the key adapts (rise with successes, fall on overloads), and are what the scheduler
//!   enforces: at each reading, no start since the reading before ran more than the limit
//!   read, nor came sooner after the one before than the rate read allows;
//!
//! What holds at any speed is checked under smol, `run_sync` and tokio (current and
//! multi-thread): a control's ceilings cap the limits read and what runs at the server.
//! (The crawl against nginx whose rate is halved, and its model on virtual time, are in
//! `tests/adaptive_sockets.rs`.)
//!
//! The in-process server is in the test: an attempt takes a fixed time (a timer) and is
//! answered a success, or an overload while the test says the host is busy. The test reads
//! `busiest_keys` every few milliseconds from the map's own task (between two of its polls,
//! where the figures are exact), and the server counts, at each start, what runs and when.

mod common;

use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::time::{Duration, Instant};

use common::{matrix, virtual_time};
use futures_lite::future::{yield_now, zip};
use tollgate::{
    Adaptive, ControlError, KeySettings, MapControl, Outcome, Rate, map_async, sleep, testing,
};

const A: usize = 0;
const B: usize = 1;
const C: usize = 2;

/// How long a key may take to rise or fall to a value on virtual time (the readings' clock
/// is exact there). A limit rises by half per round, a rate by 15% from 1.8/s (a start
/// that no server of 2 starts a second or more refuses): 20/s took 6.4 s.
const RISE: Duration = Duration::from_secs(30);

fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Answer {
    Ok,
    Busy,
}

fn classify(answer: &Answer) -> Outcome {
    match answer {
        Answer::Ok => Outcome::success(),
        Answer::Busy => Outcome::overload(),
    }
}

/// One host, as the server sees it.
#[derive(Default)]
struct Host {
    running: AtomicUsize,
    /// The most attempts running at one start (that start included) since the test looked.
    peak: AtomicUsize,
    /// When each start came, since the test looked.
    starts: Mutex<Vec<Instant>>,
}

/// The server of a scenario: item `n` goes to host `n % hosts`.
struct Server {
    hosts: Vec<Host>,
    latency: Duration,
    /// Attempts that end while it is set are answered `Busy`.
    busy: AtomicBool,
    /// Attempts wait for it before their work: the test holds it to read a new key before
    /// any attempt ends (nothing else moves a key's values).
    gate: async_lock::RwLock<()>,
}

impl Server {
    fn new(hosts: usize, latency: Duration) -> Self {
        Self {
            hosts: (0..hosts).map(|_| Host::default()).collect(),
            latency,
            busy: AtomicBool::new(false),
            gate: async_lock::RwLock::new(()),
        }
    }

    /// Counts the start at once (the map calls this as it starts item `n`), then runs it.
    fn attempt(&self, n: usize) -> impl Future<Output = Answer> + '_ {
        let host = &self.hosts[n % self.hosts.len()];
        let running = host.running.fetch_add(1, SeqCst) + 1;
        host.peak.fetch_max(running, SeqCst);
        host.starts.lock().unwrap().push(testing::now());
        async move {
            drop(self.gate.read().await);
            sleep(self.latency).await;
            host.running.fetch_sub(1, SeqCst);
            if self.busy.load(SeqCst) {
                Answer::Busy
            } else {
                Answer::Ok
            }
        }
    }
}

/// One host's values in force, as `busiest_keys` read them, and what the server saw of its
/// starts since the reading before.
#[derive(Clone, Copy, Debug)]
struct Reading {
    limit: usize,
    /// The rate's interval (`None`: no rate).
    interval: Option<Duration>,
    /// The most running at one start since the reading before (0: no start).
    peak: usize,
    /// Starts since the reading before.
    starts: usize,
    /// The time from the last start before the reading before to the first start since.
    first_gap: Option<Duration>,
    /// The shortest time between two starts since the reading before.
    inner_gap: Option<Duration>,
}

impl Reading {
    fn per_second(&self) -> f64 {
        self.interval
            .map_or(0.0, |interval| 1.0 / interval.as_secs_f64())
    }
}

/// What a [`Watch`] keeps of one host between readings.
#[derive(Clone, Copy, Debug, Default)]
struct Track {
    reading: Option<Reading>,
    /// The host's last start so far.
    last_start: Option<Instant>,
    /// The shortest rate interval in force since that start (`None`: not known, no rate, or
    /// a control's change came since: the gap to the next start is not checked).
    span: Option<Duration>,
}

/// The shorter of two intervals, `None` (no bound) if either is.
fn shorter(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    Some(a?.min(b?))
}

/// Reads the hosts' values in force every `tick` from the map's task, and checks at each
/// reading that they are the ones the scheduler enforced.
struct Watch<'a> {
    control: &'a MapControl<usize>,
    server: &'a Server,
    tick: Duration,
    tracks: Vec<Track>,
    /// A control changed a setting since the last reading: the next one is not checked
    /// against the one before (a control's change and the key's own may both fall between
    /// them).
    changed: bool,
    /// Readings checked.
    checked: usize,
}

impl<'a> Watch<'a> {
    fn new(control: &'a MapControl<usize>, server: &'a Server) -> Self {
        Self {
            control,
            server,
            tick: ms(5),
            tracks: vec![Track::default(); server.hosts.len()],
            changed: false,
            checked: 0,
        }
    }

    /// Reads every host, and checks each reading against the one before. A key's values
    /// move at most once per round (100 ms at least) and readings are a few milliseconds
    /// apart, so every start between two readings had one of the two in force: no start
    /// ran more than the higher of the two limits. A start comes no sooner after the one
    /// before than the faster of the rates in force between them allows (a rate that
    /// changes between two starts carries the time owed over: the gap lies between the two
    /// intervals). On virtual time both clocks read the same instant: the bounds are exact.
    async fn read(&mut self) -> Vec<Reading> {
        let hosts = self.server.hosts.len();
        // A call returns what the previous one asked for: ask, let the map poll, read.
        let _ = self.control.busiest_keys(hosts);
        yield_now().await;
        let busiest = self.control.busiest_keys(hosts);
        let mut readings = Vec::with_capacity(hosts);
        for (key, host) in self.server.hosts.iter().enumerate() {
            let progress = busiest
                .iter()
                .find(|progress| *progress.key() == key)
                .unwrap_or_else(|| panic!("host {key} not among the busiest: {busiest:?}"));
            let starts = std::mem::take(&mut *host.starts.lock().unwrap());
            let track = self.tracks[key];
            let gaps: Vec<Duration> = track
                .last_start
                .iter()
                .chain(&starts)
                .zip(&starts)
                .map(|(before, after)| after.duration_since(*before))
                .collect();
            let reading = Reading {
                limit: progress.limit(),
                interval: progress.rate().map(|rate| rate.interval()),
                peak: host.peak.swap(0, SeqCst),
                starts: starts.len(),
                first_gap: track.last_start.and(gaps.first().copied()),
                inner_gap: gaps
                    .iter()
                    .skip(usize::from(track.last_start.is_some()))
                    .min()
                    .copied(),
            };
            let before = track.reading.filter(|_| !self.changed);
            // The rates in force since the reading before: this one's and that one's.
            let between = before.and_then(|before| shorter(before.interval, reading.interval));
            if let Some(before) = before {
                self.checked += 1;
                assert!(
                    reading.peak <= before.limit.max(reading.limit),
                    "host {key}: a start ran {} at once between readings of limit {} and {}",
                    reading.peak,
                    before.limit,
                    reading.limit
                );
            }
            // The first gap reaches back to the last start before, over the span since it.
            let first_bound = if track.last_start.is_some() {
                shorter(track.span, between)
            } else {
                between
            };
            for (i, gap) in gaps.iter().enumerate() {
                let bound = if i == 0 { first_bound } else { between };
                if let Some(bound) = bound {
                    assert!(
                        *gap >= bound,
                        "host {key}: two starts {gap:?} apart where the rate allows {bound:?}"
                    );
                }
            }
            self.tracks[key] = Track {
                reading: Some(reading),
                last_start: starts.last().copied().or(track.last_start),
                span: if starts.is_empty() {
                    shorter(track.span, between)
                } else {
                    between
                },
            };
            readings.push(reading);
        }
        self.changed = false;
        readings
    }

    /// Reads every tick until `done` says so, within `within` (of the runtime's clock).
    async fn until(
        &mut self,
        what: &str,
        within: Duration,
        done: impl Fn(&[Reading]) -> bool,
    ) -> Vec<Vec<Reading>> {
        let began = testing::now();
        let mut all = Vec::new();
        loop {
            let readings = self.read().await;
            let finished = done(&readings);
            all.push(readings);
            if finished {
                return all;
            }
            assert!(
                testing::now() - began <= within,
                "{what}: not within {within:?}; last readings {:?}",
                all.last()
            );
            sleep(self.tick).await;
        }
    }

    /// Reads every tick for `span`.
    async fn hold(&mut self, span: Duration) -> Vec<Vec<Reading>> {
        let began = testing::now();
        let mut all = Vec::new();
        while testing::now() - began < span {
            sleep(self.tick).await;
            all.push(self.read().await);
        }
        all
    }

    /// Changes a setting through the control, and reads once the map took it.
    async fn change(
        &mut self,
        change: impl FnOnce(&MapControl<usize>) -> Result<(), ControlError>,
    ) -> Vec<Reading> {
        change(self.control).expect("the map takes the setting");
        self.changed = true;
        self.read().await
    }
}

/// One host's readings over a stretch.
fn of(readings: &[Vec<Reading>], key: usize) -> Vec<Reading> {
    readings.iter().map(|hosts| hosts[key]).collect()
}

fn peak(readings: &[Reading]) -> usize {
    readings
        .iter()
        .map(|reading| reading.peak)
        .max()
        .unwrap_or(0)
}

fn limits(readings: &[Reading]) -> Vec<usize> {
    readings.iter().map(|reading| reading.limit).collect()
}

/// The shortest gap between two starts of a stretch, and how many starts it had.
fn spacing(readings: &[Reading]) -> (Option<Duration>, usize) {
    let mut gap: Option<Duration> = None;
    let mut started = false;
    for reading in readings {
        // A first gap reaches back to a start before the stretch until one started in it.
        let first = reading.first_gap.filter(|_| started);
        for candidate in [first, reading.inner_gap].into_iter().flatten() {
            gap = Some(gap.map_or(candidate, |gap| gap.min(candidate)));
        }
        started |= reading.starts > 0;
    }
    (gap, readings.iter().map(|reading| reading.starts).sum())
}

/// Checks that a stretch's starts at one host came no closer than `interval`, and that the
/// host started at least `least` items in it.
fn assert_spaced(what: &str, readings: &[Reading], interval: Duration, least: usize) {
    let (gap, starts) = spacing(readings);
    let gap = gap.unwrap_or_else(|| panic!("{what}: fewer than two starts"));
    assert!(
        gap >= interval,
        "{what}: two starts {gap:?} apart, rate interval {interval:?}"
    );
    assert!(
        starts >= least,
        "{what}: {starts} starts, {least} expected at least"
    );
}

/// The runtime's clock since `began`, for the figures.
fn since(began: Instant) -> String {
    format!("{:.2} s", (testing::now() - began).as_secs_f64())
}

/// Checks that no reading of a stretch showed a limit above `cap` and that no start in it
/// ran more than `cap` at once.
fn assert_capped(what: &str, readings: &[Reading], cap: usize) {
    let mut steps = limits(readings);
    steps.dedup();
    assert!(
        steps.iter().all(|&limit| limit <= cap) && peak(readings) <= cap,
        "{what}: limits {steps:?}, peak in flight {}, above {cap}",
        peak(readings)
    );
}

/// Keys a and b rise to 16 with full use (ceiling 32); c has a limit of 6 from the map's
/// function of the key. A control gives a a limit of 8 (down at once), lowers the default
/// key limit to 12 (b down at once, a and c keep theirs), raises a's to 10 (a creeps up to
/// it), and clears a's (a follows the map-wide 12; c keeps the function's 6).
async fn limit_ceilings() {
    let server = Server::new(3, ms(40));
    let control = MapControl::<usize>::new();
    let map = map_async(0usize.., 128, |n| server.attempt(n))
        .per_key(|n| n % 3, 32)
        .key_settings(|key| match *key {
            C => KeySettings::new().limit(6),
            _ => KeySettings::new(),
        })
        .adaptive(Adaptive::new(1, 32), classify)
        .control(&control);
    let drive = async {
        let began = testing::now();
        let mut watch = Watch::new(&control, &server);
        let first = watch.read().await;
        assert_eq!(limits(&first), [1, 1, 1], "a new key starts at its floor");
        let risen = watch
            .until("a and b rise to 16", RISE, |r| {
                r[A].limit >= 16 && r[B].limit >= 16
            })
            .await;
        let risen_at = since(began);
        let top = risen.last().unwrap().clone();
        assert_capped("c, by its function", &of(&risen, C), 6);
        assert_eq!(peak(&of(&risen, C)), 6, "c rose to its function's 6");

        // A's own ceiling, below its limit: down at once.
        let now = watch
            .change(|control| control.set_key_settings(A, KeySettings::new().limit(8)))
            .await;
        assert!(now[A].limit <= 8 && now[B].limit > 8, "{now:?}");
        assert_eq!(limits(&now)[..2], [8, top[B].limit], "a at 8, b as it was");
        let held = watch.hold(ms(300)).await;
        assert_capped("a under its own 8", &of(&held, A), 8);
        let b = of(&held, B);
        assert!(
            b.iter().all(|reading| reading.limit > 8),
            "b took a's ceiling: {b:?}"
        );
        let a_at_8 = peak(&of(&held, A));

        // The default key limit, below b's: b down at once, a and c keep their own.
        let now = watch
            .change(|control| control.set_default_key_limit(12))
            .await;
        assert!(now[B].limit <= 12, "{now:?}");
        assert_eq!(limits(&now), [8, 12, 6]);
        let held = watch.hold(ms(300)).await;
        let (a, b, c) = (of(&held, A), of(&held, B), of(&held, C));
        assert_capped("b under the default 12", &b, 12);
        assert_capped("a under its own 8", &a, 8);
        assert_capped("c under its function's 6", &c, 6);
        // Each key, its work waiting, runs as many as its limit.
        assert_eq!([peak(&a), peak(&b), peak(&c)], [8, 12, 6]);
        let b_at_12 = peak(&b);

        // A higher ceiling for a: it creeps up from 8, never above 10.
        let now = watch
            .change(|control| control.set_key_settings(A, KeySettings::new().limit(10)))
            .await;
        assert!(now[A].limit < 10, "a jumped to its new ceiling: {now:?}");
        assert_eq!(now[A].limit, 8);
        let raised = testing::now();
        let creep = watch
            .until("a creeps up to 10", RISE, |r| r[A].limit == 10)
            .await;
        let creep_took = since(raised);
        let held = watch.hold(ms(500)).await;
        assert_capped(
            "a under its own 10",
            &[of(&creep, A), of(&held, A)].concat(),
            10,
        );
        assert_eq!(peak(&of(&held, A)), 10);
        let mut steps = limits(&of(&creep, A));
        steps.dedup();

        // Cleared: a follows the map-wide ceiling (12, not the adaptive 32); c's limit is
        // its function's, which clearing leaves.
        watch.change(|control| control.clear_key_settings(A)).await;
        watch.change(|control| control.clear_key_settings(C)).await;
        let cleared = testing::now();
        let back = watch
            .until("a rises to the default 12", RISE, |r| r[A].limit == 12)
            .await;
        let back_took = since(cleared);
        let held = watch.hold(ms(300)).await;
        assert_capped(
            "a under the default 12",
            &[of(&back, A), of(&held, A)].concat(),
            12,
        );
        assert_capped(
            "c under its function's 6",
            &[of(&back, C), of(&held, C)].concat(),
            6,
        );
        println!(
            "limit ceilings (virtual time): a and b at {}/{} after {risen_at}; a's own 8: peak {a_at_8}; \
             default 12: b's peak {b_at_12}; a's own 10: {steps:?} in {creep_took}; \
             cleared: a at 12 in {back_took}; {} readings checked",
            top[A].limit, top[B].limit, watch.checked
        );
        control.drain();
    };
    let (outputs, ()) = zip(map, drive).await;
    assert!(outputs.iter().all(|answer| *answer == Answer::Ok));
}

/// Keys a and b rise to 20 starts per second (ceiling 40). A control gives a a rate of
/// 10/s (at once), lowers the default key rate to 8/s (b at once, a keeps its own), and
/// clears a's (a at the map-wide 8/s at once); a higher rate for a lets it creep up, never
/// above (a minute of virtual time, which costs nothing).
async fn rate_ceilings() {
    let server = Server::new(2, ms(5));
    let control = MapControl::<usize>::new();
    let map = map_async(0usize.., 64, |n| server.attempt(n))
        .per_key(|n| n % 2, 4)
        .adaptive(
            Adaptive::new(2, 4).rate_ceiling(Rate::per_second(40)),
            classify,
        )
        .control(&control);
    let per_second = |n: u32| Duration::from_secs(1) / n;
    let drive = async {
        let began = testing::now();
        let mut watch = Watch::new(&control, &server);
        let risen = watch
            .until("a and b rise to 20/s", RISE, |r| {
                r[A].per_second() >= 20.0 && r[B].per_second() >= 20.0
            })
            .await;
        let risen_at = since(began);
        let rates: Vec<f64> = risen
            .last()
            .unwrap()
            .iter()
            .map(Reading::per_second)
            .collect();

        // A's own rate ceiling, below its rate: at once.
        let now = watch
            .change(|control| {
                control.set_key_settings(A, KeySettings::new().rate(Rate::per_second(10)))
            })
            .await;
        assert_eq!(now[A].interval, Some(per_second(10)), "{now:?}");
        assert!(now[B].per_second() >= 20.0, "b took a's ceiling: {now:?}");
        let held = watch.hold(ms(600)).await;
        assert!(
            of(&held, B)
                .iter()
                .all(|reading| reading.per_second() >= 20.0)
        );
        assert_spaced("a under its own 10/s", &of(&held, A), per_second(10), 4);
        let a_at_10 = spacing(&of(&held, A));

        // The default key rate, below b's: b at once, a keeps its own.
        let now = watch
            .change(|control| control.set_default_key_rate(Rate::per_second(8)))
            .await;
        assert_eq!(
            (now[A].interval, now[B].interval),
            (Some(per_second(10)), Some(per_second(8)))
        );
        let held = watch.hold(ms(600)).await;
        assert_spaced("b under the default 8/s", &of(&held, B), per_second(8), 3);
        assert_spaced("a under its own 10/s", &of(&held, A), per_second(10), 4);
        let b_at_8 = spacing(&of(&held, B));

        // Cleared: a follows the map-wide ceiling, 8/s, at once.
        let now = watch.change(|control| control.clear_key_settings(A)).await;
        assert_eq!(now[A].interval, Some(per_second(8)), "{now:?}");
        let held = watch.hold(ms(600)).await;
        assert_spaced(
            "a back under the default 8/s",
            &of(&held, A),
            per_second(8),
            3,
        );
        let a_at_8 = spacing(&of(&held, A));

        // A higher ceiling for a: it creeps up (not at once), never above 16/s.
        let now = watch
            .change(|control| {
                control.set_key_settings(A, KeySettings::new().rate(Rate::per_second(16)))
            })
            .await;
        assert!(
            now[A].per_second() < 8.1,
            "a jumped to its new ceiling: {now:?}"
        );
        let creep = {
            // The rate of a cut comes back in about 400 starts; a rate held by its ceiling
            // creeps up as slowly: a minute of virtual time.
            let raised = testing::now();
            watch.tick = ms(20);
            let rising = watch
                .until("a creeps up to 16/s", Duration::from_secs(90), |r| {
                    r[A].interval == Some(per_second(16))
                })
                .await;
            let took = since(raised);
            let held = watch.hold(Duration::from_secs(5)).await;
            let a = [of(&rising, A), of(&held, A)].concat();
            assert!(a.iter().all(|reading| reading.per_second() <= 16.0 + 1e-9));
            assert_spaced("a under its own 16/s", &a, per_second(16), 50);
            let at: Vec<String> = [0.25, 0.5, 0.75]
                .iter()
                .map(|share| format!("{:.1}/s", a[(a.len() as f64 * share) as usize].per_second()))
                .collect();
            format!("8/s to 16/s in {took} (at a quarter, half, three quarters of it: {at:?})")
        };
        println!(
            "rate ceilings (virtual time): a and b at {rates:.1?}/s after {risen_at}; a's ceiling 10/s: \
             shortest gap and starts {a_at_10:?}; default 8/s: b {b_at_8:?}; cleared: a {a_at_8:?}; \
             {}; {} readings checked",
            creep, watch.checked
        );
        control.drain();
    };
    let (outputs, ()) = zip(map, drive).await;
    assert!(outputs.iter().all(|answer| *answer == Answer::Ok));
}

/// Which value a progress scenario follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Value {
    /// No rate ceiling, attempts of 20 ms: the limit binds.
    Limit,
    /// A rate ceiling of 40/s, attempts of 5 ms: the rate binds.
    Rate,
}

/// One key between 2 and 16: read before anything ended (the floor, and 1.8/s with a rate
/// ceiling, none without), while successes raise the value, then while every attempt is an
/// overload (the value falls, and only falls). Every reading is checked against what the
/// server saw.
async fn progress(value: Value) {
    let (adaptive, latency) = match value {
        Value::Limit => (Adaptive::new(2, 16), ms(20)),
        Value::Rate => (
            Adaptive::new(2, 16).rate_ceiling(Rate::per_second(40)),
            ms(5),
        ),
    };
    let of_value = move |reading: &Reading| match value {
        Value::Limit => reading.limit as f64,
        Value::Rate => reading.per_second(),
    };
    let server = Server::new(1, latency);
    let gate = server.gate.try_write().expect("nothing holds the gate yet");
    let control = MapControl::<usize>::new();
    let map = map_async(0usize.., 64, |n| server.attempt(n))
        .per_key(|_| A, 16)
        .adaptive(adaptive, classify)
        .control(&control);
    let drive = async {
        let mut watch = Watch::new(&control, &server);
        let first = watch.read().await[A];
        let start = match value {
            Value::Limit => None,
            // 1.8 a second, as `f32` rounds it.
            Value::Rate => Some(Duration::from_nanos(555_555_570)),
        };
        assert_eq!(
            (first.limit, first.interval),
            (2, start),
            "a new key: {first:?}"
        );
        drop(gate);

        let rising = of(
            &watch
                .until("the key rises", RISE, |r| match value {
                    Value::Limit => r[A].limit >= 10,
                    Value::Rate => r[A].per_second() >= 20.0,
                })
                .await,
            A,
        );
        let up: Vec<f64> = rising.iter().map(of_value).collect();
        // No overload while it rises, and on virtual time no latency above the baseline:
        // nothing lowers either value.
        assert!(up.windows(2).all(|pair| pair[0] <= pair[1]), "{up:?}");
        // The limit read is the one in force: the key, with work waiting, runs exactly that.
        let full = rising
            .iter()
            .filter(|reading| reading.limit > 2 && reading.peak == reading.limit)
            .count();
        if value == Value::Limit {
            assert!(full > 0, "no start ran the whole limit read: {rising:?}");
        }

        server.busy.store(true, SeqCst);
        let top = of_value(rising.last().unwrap());
        let falling = of(
            &watch
                .until("an overload cuts the key", RISE, |r| of_value(&r[A]) < top)
                .await,
            A,
        );
        let held = of(&watch.hold(ms(400)).await, A);
        let down: Vec<f64> = [falling, held.clone()]
            .concat()
            .iter()
            .map(of_value)
            .collect();
        assert!(
            down.windows(2).all(|pair| pair[0] >= pair[1]),
            "rose under overloads: {down:?}"
        );
        let bottom = down[down.len() - 1];
        assert!(bottom < top, "{down:?}");
        if value == Value::Limit {
            // A limit cut while the key's starts were unspaced caps its rate: it gets one.
            assert!(held.last().unwrap().interval.is_some(), "{held:?}");
        }
        let mut up = up;
        up.dedup();
        let mut down = down;
        down.dedup();
        println!(
            "progress of a {value:?} (virtual time): first {first:?}; rising {up:?} ({full} readings at the whole limit); \
             under overloads {down:?}; {} readings checked",
            watch.checked
        );
        control.drain();
    };
    let (outputs, ()) = zip(map, drive).await;
    assert!(!outputs.is_empty());
}

/// A map whose control caps every key: the limits read and what runs at the server after
/// each change. It holds at any speed (a start after a change sees the new ceiling),
/// unlike the rises and spacings of the scenarios above, which need virtual time.
async fn ceilings_cap_at_any_speed() {
    let server = Server::new(3, ms(10));
    let control = MapControl::<usize>::new();
    let map = map_async(0usize.., 128, |n| server.attempt(n))
        .per_key(|n| n % 3, 32)
        .key_settings(|key| match *key {
            C => KeySettings::new().limit(6),
            _ => KeySettings::new(),
        })
        .adaptive(Adaptive::new(1, 32), classify)
        .control(&control);
    // The limits in force once the map took every change so far, and the peaks reset.
    let settle = || async {
        let _ = control.busiest_keys(3);
        yield_now().await;
        let busiest = control.busiest_keys(3);
        for host in &server.hosts {
            host.peak.store(0, SeqCst);
        }
        let limit = |key| busiest.iter().find(|progress| *progress.key() == key);
        [A, B, C].map(|key| limit(key).map_or(0, |progress| progress.limit()))
    };
    let peaks = || {
        server
            .hosts
            .iter()
            .map(|host| host.peak.load(SeqCst))
            .collect::<Vec<_>>()
    };
    let drive = async {
        sleep(ms(300)).await;
        control
            .set_key_settings(A, KeySettings::new().limit(4))
            .expect("the map takes it");
        control.set_default_key_limit(5).expect("the map takes it");
        control
            .set_key_settings(B, KeySettings::new().rate(Rate::per_second(50)))
            .expect("the map takes it");
        let limits = settle().await;
        assert!(
            limits[A] <= 4 && limits[B] <= 5 && limits[C] <= 6,
            "{limits:?}"
        );
        let busiest = control.busiest_keys(3);
        let b = busiest.iter().find(|progress| *progress.key() == B);
        let rate = b.and_then(|progress| progress.rate());
        // The value in force, under its ceiling (an adaptive key starts at 1.8/s).
        let interval = rate.map(|rate| rate.interval());
        assert!(
            interval.is_some_and(|interval| interval >= ms(20)),
            "b's rate: {rate:?}"
        );
        sleep(ms(300)).await;
        let held = peaks();
        assert!(
            held[A] <= 4 && held[B] <= 5 && held[C] <= 6,
            "peaks {held:?}"
        );
        control.clear_key_settings(A).expect("the map takes it");
        let limits = settle().await;
        assert!(limits[A] <= 5, "a under the default 5: {limits:?}");
        sleep(ms(300)).await;
        let held = peaks();
        assert!(
            held[A] <= 5 && held[B] <= 5 && held[C] <= 6,
            "peaks {held:?}"
        );
        control.drain();
    };
    let (outputs, ()) = zip(map, drive).await;
    assert!(outputs.iter().all(|answer| *answer == Answer::Ok));
}

matrix! {
    async fn a_controls_ceilings_cap_what_runs_on_every_executor() {
        ceilings_cap_at_any_speed().await;
    }
}

virtual_time! {
    async fn a_controls_limit_is_a_ceiling_down_at_once_crept_up_to_and_cleared_to_the_default() {
        limit_ceilings().await;
    }

    async fn a_controls_rate_is_a_ceiling_that_spaces_the_starts_at_once() {
        rate_ceilings().await;
    }

    async fn progress_shows_the_limit_in_force_from_the_floor_up_and_down() {
        progress(Value::Limit).await;
    }

    async fn progress_shows_the_rate_in_force_from_its_start_up_and_down() {
        progress(Value::Rate).await;
    }
}
