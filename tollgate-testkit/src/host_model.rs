//! The adaptive core's tuning rig: a tiny host model on virtual time, one adaptive key with
//! endless work against a server with a knee, a meter, timeouts and instant answers. No
//! runtime, no clock, a seeded generator ([`Rng`]): every figure is the same on every run.
//!
//! The key is tollgate's crate-private adaptive core, which this crate cannot see: the
//! model drives it through [`AdaptiveKey`] (`u64` nanoseconds, an [`Answer`], a [`Pace`]),
//! which the core's unit tests (`src/limit/adaptive/core_tests.rs`) implement in a few
//! lines. Those tests are the cases with a measured outcome; two of them, ignored, run
//! [`curves`] and [`population`], which print curves and a population figure for tuning:
//! `cargo test --lib adaptive -- --ignored --nocapture` (`ADAPT_CASE=base/knee`,
//! `ADAPT_HOST=i`, `ADAPT_HOSTS`, `ADAPT_NO_MAX_RATE`, `ADAPT_CEILING=r` pick details).
//!
//! ```ignore
//! let mut sim = Sim::new(key, Host { knee: Some(10.0), ..Host::new(100) }, 1);
//! sim.run_until(600 * S);
//! sim.print("runaway", 30);
//! assert!(mean_limit(sim.span(300, 600)) <= 16.0);
//! ```

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use crate::rng::Rng;

/// One millisecond, in nanoseconds.
pub const MS: u64 = 1_000_000;

/// One second, in nanoseconds.
pub const S: u64 = 1_000_000_000;

/// How the host answered an attempt, as an adaptive key reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Served.
    Success,
    /// Too much: a 503, a refusal of the meter, a timeout.
    Overload,
    /// Out for a while: a 503 with `Retry-After`.
    Outage,
    /// A plain failure (a 404): it says nothing about the host's load.
    Failure,
}

/// A key's rate as the model paces its starts: one every `interval` nanoseconds, up to
/// `burst` at once after a quiet spell (GCRA on `u64` nanoseconds, as tollgate's maps pace a
/// key).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pace {
    /// Nanoseconds between two starts at the steady rate (at least 1).
    pub interval: u64,
    /// How many starts may come at once (at least 1).
    pub burst: u32,
}

impl Pace {
    /// How far ahead of `now` the state may be for a start to be allowed.
    fn tolerance(self) -> u64 {
        self.interval.saturating_mul(u64::from(self.burst) - 1)
    }

    /// A start at `now` against state `tat`: `Ok(new_tat)` if allowed, or `Err(at)`, the
    /// earliest time a start can be allowed.
    fn decide(self, tat: u64, now: u64) -> Result<u64, u64> {
        let tat = tat.max(now);
        let allowed_at = tat - self.tolerance().min(tat);
        if allowed_at > now {
            Err(allowed_at)
        } else {
            Ok(tat.saturating_add(self.interval))
        }
    }

    /// State `tat` of `old` carried over to this pace at `now`: the starts it is ahead by
    /// are kept, each now one interval of this pace.
    fn carry_over(self, old: Pace, tat: u64, now: u64) -> u64 {
        if tat <= now || old.interval == 0 {
            return tat;
        }
        let ahead = u128::from(tat - now) * u128::from(self.interval) / u128::from(old.interval);
        now.saturating_add(u64::try_from(ahead).unwrap_or(u64::MAX))
    }
}

/// What the model drives: one adaptive key, on the model's virtual time (`u64` nanoseconds
/// from 0).
pub trait AdaptiveKey {
    /// The most attempts that may run at once.
    fn limit(&self) -> usize;

    /// The pace the key's starts keep (`None`: the key has no rate).
    fn rate(&self) -> Option<Pace>;

    /// A start at `now`: `running` = the key's attempts running, this one included;
    /// `rate_waited`: the start came later than the key had work and room, because its rate
    /// said so.
    fn started(&mut self, now: u64, running: usize, rate_waited: bool);

    /// An attempt that took `latency` ended at `now` with `answer`. Returns whether
    /// [`limit`](Self::limit) or [`rate`](Self::rate) changed.
    fn finished(&mut self, now: u64, answer: Answer, latency: u64) -> bool;
}

/// A server as one key sees it.
#[derive(Clone, Copy, Debug)]
pub struct Host {
    /// Latency with nothing queued.
    pub base: u64,
    /// Latency is `base * (1 + noise * Exp(1))` ...
    pub noise: f64,
    /// ... times `max(1, in_flight / knee)`.
    pub knee: Option<f64>,
    /// Past the knee, a 503 with probability ramping from 0 at the knee to 1 at twice it.
    pub ramp: bool,
    /// Those 503s carry a `Retry-After` (read as outages, not overloads).
    pub ramp_says_retry_after: bool,
    /// The host is down: every attempt that arrives is answered at once with a 503 and a
    /// `Retry-After` (an outage); attempts it already holds are served.
    pub down: bool,
    /// A strict GCRA meter: an arrival earlier than one interval after the previous one
    /// admitted gets a 429 at once.
    pub rate: Option<f64>,
    /// Mean one-way jitter before the meter (exponential).
    pub jitter: u64,
    /// Every attempt times out after this long (an overload).
    pub timeout: Option<u64>,
    /// Share of attempts answered at once with an overload ...
    pub fast_overload: f64,
    /// ... or with a plain failure.
    pub fast_failure: f64,
}

impl Host {
    /// A host that answers every attempt in `base_ms` milliseconds, whatever its load.
    pub fn new(base_ms: u64) -> Self {
        Self {
            base: base_ms * MS,
            noise: 0.0,
            knee: None,
            ramp: false,
            ramp_says_retry_after: false,
            down: false,
            rate: None,
            jitter: 0,
            timeout: None,
            fast_overload: 0.0,
            fast_failure: 0.0,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// The client may be able to start again (its rate's time came).
    Wake,
    /// Request `id` reaches the server.
    Arrive(usize),
    /// Request `id`'s answer reaches the client.
    End(usize),
}

#[derive(Clone, Copy)]
struct Request {
    sent: u64,
    answer: Answer,
    /// Whether it holds a place in the server's queue until it ends.
    queued: bool,
}

/// One second of a run: the values at its end and what happened in it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Second {
    /// The key's limit at the second's end.
    pub limit: usize,
    /// The key's rate at the second's end, in starts per second (0: none).
    pub rate: f64,
    /// Attempts started.
    pub starts: u32,
    /// Attempts ended with a success.
    pub successes: u32,
    /// Attempts ended with an overload.
    pub overloads: u32,
    /// Attempts ended with an outage.
    pub outages: u32,
}

/// One adaptive key with endless work (up to `cap` running: something else holding it
/// back) against a host that may change over time (set `host` between runs).
pub struct Sim<K> {
    rng: Rng,
    now: u64,
    seq: u64,
    events: BinaryHeap<Reverse<(u64, u64, Event)>>,
    /// The key the model drives.
    pub key: K,
    pace: Option<Pace>,
    tat: u64,
    running: usize,
    /// The most attempts that run at once, whatever the key's limit (`usize::MAX`: none).
    pub cap: usize,
    rate_waited: bool,
    wake_at: u64,
    /// The host, from now on.
    pub host: Host,
    in_flight: usize,
    meter_tat: f64,
    requests: Vec<Request>,
    /// The seconds run so far, the current one last.
    pub seconds: Vec<Second>,
}

impl<K: AdaptiveKey> Sim<K> {
    /// `key` against `host` from time 0, drawing from `seed`.
    pub fn new(key: K, host: Host, seed: u64) -> Self {
        Self {
            rng: Rng::new(seed),
            now: 0,
            seq: 0,
            events: BinaryHeap::new(),
            pace: key.rate(),
            key,
            tat: 0,
            running: 0,
            cap: usize::MAX,
            rate_waited: false,
            wake_at: u64::MAX,
            host,
            in_flight: 0,
            meter_tat: 0.0,
            requests: Vec::new(),
            seconds: vec![Second::default()],
        }
    }

    fn at(&mut self, time: u64, event: Event) {
        self.seq += 1;
        self.events.push(Reverse((time, self.seq, event)));
    }

    fn second(&mut self) -> &mut Second {
        self.seconds.last_mut().unwrap()
    }

    /// Runs until `end` (virtual nanoseconds).
    pub fn run_until(&mut self, end: u64) {
        loop {
            self.fill();
            let Some(&Reverse((time, _, event))) = self.events.peek() else {
                break;
            };
            if time > end {
                break;
            }
            self.events.pop();
            while time >= self.seconds.len() as u64 * S {
                self.close_second();
            }
            self.now = time;
            match event {
                Event::Wake if time == self.wake_at => self.wake_at = u64::MAX,
                Event::Wake => {}
                Event::Arrive(id) => self.arrive(id),
                Event::End(id) => self.end(id),
            }
        }
        while end >= self.seconds.len() as u64 * S {
            self.close_second();
        }
        self.now = end;
    }

    fn close_second(&mut self) {
        let (limit, rate) = (self.key.limit(), self.rate_now());
        let second = self.second();
        (second.limit, second.rate) = (limit, rate);
        self.seconds.push(Second::default());
    }

    /// The key's rate now, in starts per second (0: none).
    pub fn rate_now(&self) -> f64 {
        self.key.rate().map_or(0.0, |pace| {
            1.0 / Duration::from_nanos(pace.interval).as_secs_f64()
        })
    }

    /// Starts as many requests as the limit, the cap and the rate allow now.
    fn fill(&mut self) {
        while self.running < self.key.limit().min(self.cap) {
            if let Some(pace) = self.pace {
                match pace.decide(self.tat, self.now) {
                    Ok(tat) => self.tat = tat,
                    Err(at) => {
                        self.rate_waited = true;
                        if at < self.wake_at {
                            self.wake_at = at;
                            self.at(at, Event::Wake);
                        }
                        return;
                    }
                }
            }
            self.running += 1;
            self.key.started(self.now, self.running, self.rate_waited);
            self.rate_waited = false;
            self.second().starts += 1;
            let id = self.requests.len();
            self.requests.push(Request {
                sent: self.now,
                answer: Answer::Success,
                queued: false,
            });
            let jitter = (self.host.jitter as f64 * self.rng.exp(1.0)) as u64;
            self.at(self.now + jitter, Event::Arrive(id));
        }
    }

    /// The server's side: timeouts, instant answers, the meter, the queue.
    fn arrive(&mut self, id: usize) {
        let host = self.host;
        let now = self.now;
        let answer = |sim: &mut Self, answer: Answer, after: u64| {
            sim.requests[id].answer = answer;
            sim.at(now + after, Event::End(id));
        };
        if let Some(timeout) = host.timeout {
            let sent = self.requests[id].sent;
            return answer(self, Answer::Overload, (sent + timeout).saturating_sub(now));
        }
        if host.down {
            return answer(self, Answer::Outage, MS / 10);
        }
        let draw = self.rng.unit();
        if draw < host.fast_overload {
            return answer(self, Answer::Overload, MS / 10);
        }
        if draw < host.fast_overload + host.fast_failure {
            return answer(self, Answer::Failure, MS / 10);
        }
        if let Some(rate) = host.rate {
            let t = now as f64 / S as f64;
            if t < self.meter_tat {
                return answer(self, Answer::Overload, MS / 10);
            }
            self.meter_tat = self.meter_tat.max(t) + 1.0 / rate;
        }
        self.in_flight += 1;
        let n = self.in_flight as f64;
        let mut factor = 1.0;
        if let Some(knee) = host.knee {
            if host.ramp && n > knee && self.rng.unit() < ((n - knee) / knee).min(1.0) {
                self.in_flight -= 1;
                let refused = if host.ramp_says_retry_after {
                    Answer::Outage
                } else {
                    Answer::Overload
                };
                return answer(self, refused, MS);
            }
            factor = (n / knee).max(1.0);
        }
        self.requests[id].queued = true;
        let latency = host.base as f64 * (1.0 + host.noise * self.rng.exp(1.0)) * factor;
        answer(self, Answer::Success, latency as u64);
    }

    fn end(&mut self, id: usize) {
        let request = self.requests[id];
        if request.queued {
            self.in_flight -= 1;
        }
        self.running -= 1;
        let second = self.second();
        match request.answer {
            Answer::Success => second.successes += 1,
            Answer::Overload => second.overloads += 1,
            Answer::Outage => second.outages += 1,
            Answer::Failure => {}
        }
        let latency = self.now - request.sent;
        if self.key.finished(self.now, request.answer, latency) {
            let pace = self.key.rate();
            if let (Some(old), Some(new)) = (self.pace, pace) {
                self.tat = new.carry_over(old, self.tat, self.now);
            }
            self.pace = pace;
        }
    }

    /// The seconds `[from, to)` of the run.
    pub fn span(&self, from: u64, to: u64) -> &[Second] {
        &self.seconds[from as usize..(to as usize).min(self.seconds.len())]
    }

    /// Prints one line per `every` seconds: the curve, for `--nocapture`.
    pub fn print(&self, name: &str, every: usize) {
        println!("{name}: second limit rate starts ok overload");
        for (t, chunk) in self.seconds.chunks(every).enumerate() {
            let last = chunk.last().unwrap();
            let sum = |f: fn(&Second) -> u32| chunk.iter().map(f).sum::<u32>();
            println!(
                "  {:>5} {:>4} {:>7.1} {:>6} {:>6} {:>5}",
                t * every,
                last.limit,
                last.rate,
                sum(|s| s.starts),
                sum(|s| s.successes),
                sum(|s| s.overloads),
            );
        }
    }
}

/// Mean limit over `seconds`.
pub fn mean_limit(seconds: &[Second]) -> f64 {
    seconds.iter().map(|s| s.limit as f64).sum::<f64>() / seconds.len() as f64
}

/// Least-squares slope of the limit over `seconds`, per minute.
pub fn limit_slope_per_minute(seconds: &[Second]) -> f64 {
    let n = seconds.len() as f64;
    let mean_t = (n - 1.0) / 2.0;
    let mean_l = mean_limit(seconds);
    let (mut num, mut den) = (0.0, 0.0);
    for (t, second) in seconds.iter().enumerate() {
        num += (t as f64 - mean_t) * (second.limit as f64 - mean_l);
        den += (t as f64 - mean_t).powi(2);
    }
    num / den * 60.0
}

/// Successes per second over `seconds`.
pub fn goodput(seconds: &[Second]) -> f64 {
    seconds.iter().map(|s| s.successes as f64).sum::<f64>() / seconds.len() as f64
}

/// Overloads as a share of the starts over `seconds`.
pub fn overload_share(seconds: &[Second]) -> f64 {
    let overloads: u32 = seconds.iter().map(|s| s.overloads).sum();
    let starts: u32 = seconds.iter().map(|s| s.starts).sum();
    f64::from(overloads) / f64::from(starts.max(1))
}

/// The simulator's host: noisy latency, 503s past the knee, a strict meter after jitter.
pub fn sim_host(base_ms: u64, knee: f64, rate: Option<f64>, jitter_ms: f64) -> Host {
    Host {
        noise: 0.2,
        knee: Some(knee),
        ramp: true,
        rate,
        jitter: (jitter_ms * MS as f64) as u64,
        ..Host::new(base_ms)
    }
}

/// The first second from `from` on whose limit is `limit`.
pub fn first_second_at<K>(sim: &Sim<K>, from: u64, limit: usize) -> Option<u64> {
    sim.seconds[from as usize..]
        .iter()
        .position(|second| second.limit == limit)
        .map(|at| from + at as u64)
}

/// Prints, for tuning, the curves of a few hosts (a knee alone, meters below and above
/// it) over 300 s: the share of the ideal and the overload share, early and settled.
/// `new_key(rate_ceiling)` makes a key of floor 1 and ceiling 64 with that rate ceiling in
/// starts per second (200, or none with `ADAPT_NO_MAX_RATE`); `ADAPT_CASE=base/knee` also
/// prints that case's curve second by second.
pub fn curves<K: AdaptiveKey>(new_key: impl Fn(Option<u32>) -> K) {
    let cases = [
        (100, 4.0, None, 2.0),
        (200, 16.0, None, 2.0),
        (50, 32.0, Some(200.0), 0.0),
        (200, 32.0, Some(20.0), 0.0),
        (200, 32.0, Some(20.0), 2.0),
        (500, 8.0, Some(5.0), 2.0),
        (20, 2.0, Some(100.0), 2.0),
    ];
    for (base, knee, rate, jitter) in cases {
        let host = sim_host(base, knee, rate, jitter);
        let ideal = rate
            .unwrap_or(f64::INFINITY)
            .min(knee / (1.2 * base as f64 / 1000.0));
        let ceiling = match std::env::var("ADAPT_NO_MAX_RATE") {
            Ok(_) => None,
            Err(_) => Some(200),
        };
        let mut sim = Sim::new(new_key(ceiling), host, 7);
        sim.run_until(300 * S);
        let detail = std::env::var("ADAPT_CASE").ok() == Some(format!("{base}/{knee}"));
        if detail {
            sim.print("detail", 1);
        }
        println!("base {base} knee {knee} rate {rate:?} jitter {jitter}: ideal {ideal:.1}/s");
        for (from, to) in [(0, 10), (10, 30), (30, 60), (60, 300)] {
            let span = sim.span(from, to);
            println!(
                "   {from}-{to} s: goodput {:.0}% of ideal, overload {:.2}%",
                100.0 * goodput(span) / ideal,
                100.0 * overload_share(span)
            );
        }
    }
}

/// Prints, for tuning, a population figure: hosts drawn as the simulated internet draws
/// them (live ones), each run alone for a minute; the mean share of the ideal and the
/// overload share, early and settled. `new_key` as for [`curves`], with the rate ceiling
/// 200 or `ADAPT_CEILING`; `ADAPT_HOSTS` prints every host's figures, `ADAPT_HOST=i` host
/// `i`'s curve.
pub fn population<K: AdaptiveKey>(new_key: impl Fn(Option<u32>) -> K) {
    let mut rng = Rng::new(2024);
    let (mut early, mut settled, mut p10) = (0.0, 0.0, Vec::new());
    let (mut overloads, mut starts) = (0u32, 0u32);
    let hosts = 60;
    for i in 0..hosts {
        // The simulated internet's draws, in its order, in milliseconds.
        let base = rng.log_uniform(20.0, 500.0) as u64;
        let knee = (1 + rng.below(32)) as f64;
        let rate = rng.log_uniform(2.0, 200.0);
        let host = sim_host(base, knee, Some(rate), 2.0);
        // What a strict meter after 2 ms of jitter allows at 1% refused, and the knee.
        let reachable = 1.0 / (1.0 / rate + 0.002 * 50f64.ln());
        let ideal = reachable.min(knee / (1.2 * base as f64 / 1000.0));
        let ceiling = std::env::var("ADAPT_CEILING").map_or(200, |c| c.parse().unwrap());
        let mut sim = Sim::new(new_key(Some(ceiling)), host, i);
        sim.run_until(60 * S);
        let (e, s) = (
            goodput(sim.span(0, 10)) / ideal,
            goodput(sim.span(10, 60)) / ideal,
        );
        if std::env::var("ADAPT_HOST").ok() == Some(i.to_string()) {
            sim.print("detail", 1);
        }
        if std::env::var("ADAPT_HOSTS").is_ok() {
            println!(
                "host {i}: base {base} knee {knee} rate {rate:.1} ideal {ideal:.1}: early {:.0}% settled {:.0}% overload {:.2}%",
                100.0 * e,
                100.0 * s,
                100.0 * overload_share(sim.span(10, 60))
            );
        }
        early += e;
        settled += s;
        p10.push(s);
        for second in sim.span(10, 60) {
            overloads += second.overloads;
            starts += second.starts;
        }
    }
    p10.sort_by(f64::total_cmp);
    println!(
        "population: early {:.1}% settled {:.1}% (p10 {:.0}%) overload {:.2}%",
        100.0 * early / hosts as f64,
        100.0 * settled / hosts as f64,
        100.0 * p10[hosts as usize / 10],
        100.0 * f64::from(overloads) / f64::from(starts)
    );
}
