//! A tiny host model on virtual time for the adaptive core's tests: one adaptive key with
//! endless work against a server with a knee, a meter, timeouts and instant answers. No
//! runtime, no clock, a seeded generator (tollgate-testkit's `Rng`): every figure is the same
//! on every run. Two ignored runs print curves and a population figure for tuning:
//! `cargo test --lib adaptive -- --ignored --nocapture` (`ADAPT_CASE=base/knee`,
//! `ADAPT_HOST=i`, `ADAPT_HOSTS`, `ADAPT_NO_MAX_RATE`, `ADAPT_CEILING=r` pick details).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use tollgate_testkit::Rng;

use crate::limit::adaptive::config::Adaptive;
use crate::limit::adaptive::core::KeyAdapt;
use crate::limit::adaptive::tuning::MS;
use crate::limit::outcome::Outcome;
use crate::limit::rate::gcra::{Gcra, Rate};

/// One second, in nanoseconds.
pub(super) const S: u64 = 1_000_000_000;

/// A server as one key sees it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Host {
    /// Latency with nothing queued.
    pub(super) base: u64,
    /// Latency is `base * (1 + noise * Exp(1))` ...
    pub(super) noise: f64,
    /// ... times `max(1, in_flight / knee)`.
    pub(super) knee: Option<f64>,
    /// Past the knee, a 503 with probability ramping from 0 at the knee to 1 at twice it.
    pub(super) ramp: bool,
    /// A strict GCRA meter: an arrival earlier than one interval after the previous one
    /// admitted gets a 429 at once.
    pub(super) rate: Option<f64>,
    /// Mean one-way jitter before the meter (exponential).
    pub(super) jitter: u64,
    /// Every attempt times out after this long (an overload).
    pub(super) timeout: Option<u64>,
    /// Share of attempts answered at once with an overload ...
    pub(super) fast_overload: f64,
    /// ... or with a plain failure.
    pub(super) fast_failure: f64,
}

impl Host {
    pub(super) fn new(base_ms: u64) -> Self {
        Self {
            base: base_ms * MS,
            noise: 0.0,
            knee: None,
            ramp: false,
            rate: None,
            jitter: 0,
            timeout: None,
            fast_overload: 0.0,
            fast_failure: 0.0,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Event {
    /// The client may be able to start again (its rate's time came).
    Wake,
    /// Request `id` reaches the server.
    Arrive(usize),
    /// Request `id`'s answer reaches the client.
    End(usize),
}

#[derive(Clone, Copy)]
pub(super) struct Request {
    pub(super) sent: u64,
    pub(super) outcome: Outcome,
    /// Whether it holds a place in the server's queue until it ends.
    pub(super) queued: bool,
}

/// One second of a run: the values at its end and what happened in it.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Second {
    pub(super) limit: usize,
    pub(super) rate: f64,
    pub(super) starts: u32,
    pub(super) successes: u32,
    pub(super) overloads: u32,
}

/// One adaptive key with endless work (up to `cap` running: something else holding it
/// back) against a host that may change over time.
pub(super) struct Sim {
    pub(super) rng: Rng,
    pub(super) now: u64,
    pub(super) seq: u64,
    pub(super) events: BinaryHeap<Reverse<(u64, u64, Event)>>,
    pub(super) config: Adaptive,
    pub(super) key: KeyAdapt,
    pub(super) gcra: Option<Gcra>,
    pub(super) tat: u64,
    pub(super) running: usize,
    pub(super) cap: usize,
    pub(super) rate_waited: bool,
    pub(super) wake_at: u64,
    pub(super) host: Host,
    pub(super) in_flight: usize,
    pub(super) meter_tat: f64,
    pub(super) requests: Vec<Request>,
    pub(super) seconds: Vec<Second>,
}

impl Sim {
    pub(super) fn new(config: Adaptive, host: Host, seed: u64) -> Self {
        let key = KeyAdapt::new(&config, 0);
        Self {
            rng: Rng::new(seed),
            now: 0,
            seq: 0,
            events: BinaryHeap::new(),
            gcra: key.rate(),
            key,
            config,
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

    pub(super) fn at(&mut self, time: u64, event: Event) {
        self.seq += 1;
        self.events.push(Reverse((time, self.seq, event)));
    }

    pub(super) fn second(&mut self) -> &mut Second {
        self.seconds.last_mut().unwrap()
    }

    /// Runs until `end` (virtual nanoseconds).
    pub(super) fn run_until(&mut self, end: u64) {
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

    pub(super) fn close_second(&mut self) {
        let (limit, rate) = (self.key.limit(), self.rate_now());
        let second = self.second();
        (second.limit, second.rate) = (limit, rate);
        self.seconds.push(Second::default());
    }

    pub(super) fn rate_now(&self) -> f64 {
        self.key
            .current_rate()
            .map_or(0.0, |rate| 1.0 / rate.interval().as_secs_f64())
    }

    /// Starts as many requests as the limit, the cap and the rate allow now.
    pub(super) fn fill(&mut self) {
        while self.running < self.key.limit().min(self.cap) {
            if let Some(gcra) = self.gcra {
                match gcra.decide(self.tat, self.now) {
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
                outcome: Outcome::success(),
                queued: false,
            });
            let jitter = (self.host.jitter as f64 * self.rng.exp(1.0)) as u64;
            self.at(self.now + jitter, Event::Arrive(id));
        }
    }

    /// The server's side: timeouts, instant answers, the meter, the queue.
    pub(super) fn arrive(&mut self, id: usize) {
        let host = self.host;
        let now = self.now;
        let answer = |sim: &mut Self, outcome: Outcome, after: u64| {
            sim.requests[id].outcome = outcome;
            sim.at(now + after, Event::End(id));
        };
        if let Some(timeout) = host.timeout {
            let sent = self.requests[id].sent;
            return answer(
                self,
                Outcome::overload(),
                (sent + timeout).saturating_sub(now),
            );
        }
        let draw = self.rng.unit();
        if draw < host.fast_overload {
            return answer(self, Outcome::overload(), MS / 10);
        }
        if draw < host.fast_overload + host.fast_failure {
            return answer(self, Outcome::failure(), MS / 10);
        }
        if let Some(rate) = host.rate {
            let t = now as f64 / S as f64;
            if t < self.meter_tat {
                return answer(self, Outcome::overload(), MS / 10);
            }
            self.meter_tat = self.meter_tat.max(t) + 1.0 / rate;
        }
        self.in_flight += 1;
        let n = self.in_flight as f64;
        let mut factor = 1.0;
        if let Some(knee) = host.knee {
            if host.ramp && n > knee && self.rng.unit() < ((n - knee) / knee).min(1.0) {
                self.in_flight -= 1;
                return answer(self, Outcome::overload(), MS);
            }
            factor = (n / knee).max(1.0);
        }
        self.requests[id].queued = true;
        let latency = host.base as f64 * (1.0 + host.noise * self.rng.exp(1.0)) * factor;
        answer(self, Outcome::success(), latency as u64);
    }

    pub(super) fn end(&mut self, id: usize) {
        let request = self.requests[id];
        if request.queued {
            self.in_flight -= 1;
        }
        self.running -= 1;
        let second = self.second();
        if request.outcome.is_success() {
            second.successes += 1;
        } else if request.outcome.is_overload() {
            second.overloads += 1;
        }
        let latency = self.now - request.sent;
        if self
            .key
            .finished_after(&self.config, self.now, request.outcome, latency)
        {
            let gcra = self.key.rate();
            if let (Some(old), Some(new)) = (self.gcra, gcra) {
                self.tat = new.carry_over(&old, self.tat, self.now);
            }
            self.gcra = gcra;
        }
    }

    /// The seconds `[from, to)` of the run.
    pub(super) fn span(&self, from: u64, to: u64) -> &[Second] {
        &self.seconds[from as usize..(to as usize).min(self.seconds.len())]
    }

    /// Prints one line per `every` seconds: the curve, for `--nocapture`.
    pub(super) fn print(&self, name: &str, every: usize) {
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
pub(super) fn mean_limit(seconds: &[Second]) -> f64 {
    seconds.iter().map(|s| s.limit as f64).sum::<f64>() / seconds.len() as f64
}

/// Least-squares slope of the limit over `seconds`, per minute.
pub(super) fn limit_slope_per_minute(seconds: &[Second]) -> f64 {
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
pub(super) fn goodput(seconds: &[Second]) -> f64 {
    seconds.iter().map(|s| s.successes as f64).sum::<f64>() / seconds.len() as f64
}

/// Overloads as a share of the ends over `seconds`.
pub(super) fn overload_share(seconds: &[Second]) -> f64 {
    let overloads: u32 = seconds.iter().map(|s| s.overloads).sum();
    let starts: u32 = seconds.iter().map(|s| s.starts).sum();
    f64::from(overloads) / f64::from(starts.max(1))
}

/// The simulator's host: noisy latency, 503s past the knee, a strict meter after jitter.
pub(super) fn sim_host(base_ms: u64, knee: f64, rate: Option<f64>, jitter_ms: f64) -> Host {
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
pub(super) fn first_second_at(sim: &Sim, from: u64, limit: usize) -> Option<u64> {
    sim.seconds[from as usize..]
        .iter()
        .position(|second| second.limit == limit)
        .map(|at| from + at as u64)
}

#[test]
#[ignore = "prints the curves for tuning"]
fn curves() {
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
        let config = match std::env::var("ADAPT_NO_MAX_RATE") {
            Ok(_) => Adaptive::new(1, 64),
            Err(_) => Adaptive::new(1, 64).rate_ceiling(Rate::per_second(200)),
        };
        let mut sim = Sim::new(config, host, 7);
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

/// Hosts drawn as the simulated internet draws them (live ones), each run alone for a
/// minute: the mean share of the ideal and the overload share, early and settled.
#[test]
#[ignore = "prints a population figure for tuning"]
fn population() {
    let mut rng = Rng::new(2024);
    let (mut early, mut settled, mut p10) = (0.0, 0.0, Vec::new());
    let (mut overloads, mut starts) = (0u32, 0u32);
    let hosts = 60;
    for i in 0..hosts {
        let base = (20.0 * (25.0f64).powf(rng.unit())) as u64;
        let knee = 1.0 + (rng.unit() * 32.0).floor();
        let rate = 2.0 * (100.0f64).powf(rng.unit());
        let host = sim_host(base, knee, Some(rate), 2.0);
        // What a strict meter after 2 ms of jitter allows at 1% refused, and the knee.
        let reachable = 1.0 / (1.0 / rate + 0.002 * 50f64.ln());
        let ideal = reachable.min(knee / (1.2 * base as f64 / 1000.0));
        let ceiling = std::env::var("ADAPT_CEILING").map_or(200, |c| c.parse().unwrap());
        let mut sim = Sim::new(
            Adaptive::new(1, 64).rate_ceiling(Rate::per_second(ceiling)),
            host,
            i,
        );
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
