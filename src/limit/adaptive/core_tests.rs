//! The adaptive core against a tiny host model on virtual time: no runtime, no clock, a
//! seeded generator of our own, so every figure is the same on every run. Each known failure
//! mode of adaptive limiters is a case with a measured outcome. `cargo test --lib adaptive
//! -- --nocapture` prints the curves.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::*;
use crate::limit::adaptive::tuning::MS;

const S: u64 = 1_000_000_000;

/// SplitMix64: small, seeded, ours.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Exponential with mean 1.
    fn exp(&mut self) -> f64 {
        -(1.0 - self.unit()).ln()
    }
}

/// A server as one key sees it.
#[derive(Clone, Copy, Debug)]
struct Host {
    /// Latency with nothing queued.
    base: u64,
    /// Latency is `base * (1 + noise * Exp(1))` ...
    noise: f64,
    /// ... times `max(1, in_flight / knee)`.
    knee: Option<f64>,
    /// Past the knee, a 503 with probability ramping from 0 at the knee to 1 at twice it.
    ramp: bool,
    /// A strict GCRA meter: an arrival earlier than one interval after the previous one
    /// admitted gets a 429 at once.
    rate: Option<f64>,
    /// Mean one-way jitter before the meter (exponential).
    jitter: u64,
    /// Every attempt times out after this long (an overload).
    timeout: Option<u64>,
    /// Share of attempts answered at once with an overload ...
    fast_overload: f64,
    /// ... or with a plain failure.
    fast_failure: f64,
}

impl Host {
    fn new(base_ms: u64) -> Self {
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
    outcome: Outcome,
    /// Whether it holds a place in the server's queue until it ends.
    queued: bool,
}

/// One second of a run: the values at its end and what happened in it.
#[derive(Clone, Copy, Debug, Default)]
struct Second {
    limit: usize,
    rate: f64,
    starts: u32,
    successes: u32,
    overloads: u32,
}

/// One adaptive key with endless work (up to `cap` running: something else holding it
/// back) against a host that may change over time.
struct Sim {
    rng: Rng,
    now: u64,
    seq: u64,
    events: BinaryHeap<Reverse<(u64, u64, Event)>>,
    config: Adaptive,
    key: KeyAdapt,
    gcra: Option<Gcra>,
    tat: u64,
    running: usize,
    cap: usize,
    rate_waited: bool,
    wake_at: u64,
    host: Host,
    in_flight: usize,
    meter_tat: f64,
    requests: Vec<Request>,
    seconds: Vec<Second>,
}

impl Sim {
    fn new(config: Adaptive, host: Host, seed: u64) -> Self {
        let key = KeyAdapt::new(&config, 0);
        Self {
            rng: Rng(seed),
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

    fn at(&mut self, time: u64, event: Event) {
        self.seq += 1;
        self.events.push(Reverse((time, self.seq, event)));
    }

    fn second(&mut self) -> &mut Second {
        self.seconds.last_mut().unwrap()
    }

    /// Runs until `end` (virtual nanoseconds).
    fn run_until(&mut self, end: u64) {
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
                Event::Wake => self.wake_at = u64::MAX,
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

    fn rate_now(&self) -> f64 {
        self.key
            .current_rate()
            .map_or(0.0, |rate| 1.0 / rate.interval().as_secs_f64())
    }

    /// Starts as many requests as the limit, the cap and the rate allow now.
    fn fill(&mut self) {
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
            let jitter = (self.host.jitter as f64 * self.rng.exp()) as u64;
            self.at(self.now + jitter, Event::Arrive(id));
        }
    }

    /// The server's side: timeouts, instant answers, the meter, the queue.
    fn arrive(&mut self, id: usize) {
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
        let latency = host.base as f64 * (1.0 + host.noise * self.rng.exp()) * factor;
        answer(self, Outcome::success(), latency as u64);
    }

    fn end(&mut self, id: usize) {
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
            .finished(&self.config, self.now, request.outcome, latency)
        {
            let gcra = self.key.rate();
            if let (Some(old), Some(new)) = (self.gcra, gcra) {
                self.tat = new.carry_over(&old, self.tat, self.now);
            }
            self.gcra = gcra;
        }
    }

    /// The seconds `[from, to)` of the run.
    fn span(&self, from: u64, to: u64) -> &[Second] {
        &self.seconds[from as usize..(to as usize).min(self.seconds.len())]
    }

    /// Prints one line per `every` seconds: the curve, for `--nocapture`.
    fn print(&self, name: &str, every: usize) {
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
fn mean_limit(seconds: &[Second]) -> f64 {
    seconds.iter().map(|s| s.limit as f64).sum::<f64>() / seconds.len() as f64
}

/// Least-squares slope of the limit over `seconds`, per minute.
fn limit_slope_per_minute(seconds: &[Second]) -> f64 {
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
fn goodput(seconds: &[Second]) -> f64 {
    seconds.iter().map(|s| s.successes as f64).sum::<f64>() / seconds.len() as f64
}

/// Overloads as a share of the ends over `seconds`.
fn overload_share(seconds: &[Second]) -> f64 {
    let overloads: u32 = seconds.iter().map(|s| s.overloads).sum();
    let starts: u32 = seconds.iter().map(|s| s.starts).sum();
    f64::from(overloads) / f64::from(starts.max(1))
}

#[test]
fn moderate_sustained_overload_settles_near_the_knee_and_does_not_climb() {
    // Gradient2's runaway: latency grows with the queue past the knee, no error ever comes.
    for (knee, base_ms) in [(10.0, 100), (4.0, 50), (32.0, 200)] {
        let host = Host {
            knee: Some(knee),
            ..Host::new(base_ms)
        };
        let mut sim = Sim::new(Adaptive::new(1, 1000), host, 1);
        sim.run_until(600 * S);
        sim.print(&format!("runaway knee {knee} base {base_ms} ms"), 30);
        let last_half = sim.span(300, 600);
        let (mean, slope) = (mean_limit(last_half), limit_slope_per_minute(last_half));
        println!("knee {knee}: last-half mean limit {mean:.2}, slope {slope:.3}/min");
        assert!(
            mean <= 1.5 * knee + 1.0,
            "mean limit {mean} for knee {knee}"
        );
        assert!(
            mean >= 0.9 * knee,
            "mean limit {mean} for knee {knee}: too low"
        );
        assert!(slope <= 0.05, "limit climbs {slope}/min for knee {knee}");
    }
}

/// The simulator's host: noisy latency, 503s past the knee, a strict meter after jitter.
fn sim_host(base_ms: u64, knee: f64, rate: Option<f64>, jitter_ms: f64) -> Host {
    Host {
        noise: 0.2,
        knee: Some(knee),
        ramp: true,
        rate,
        jitter: (jitter_ms * MS as f64) as u64,
        ..Host::new(base_ms)
    }
}

#[test]
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
        let mut sim = Sim::new(
            Adaptive::new(1, 64).max_rate(Rate::per_second(200)),
            host,
            7,
        );
        sim.run_until(300 * S);
        sim.print(
            &format!("base {base} knee {knee} rate {rate:?} jitter {jitter}: ideal {ideal:.1}/s"),
            20,
        );
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
