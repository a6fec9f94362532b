//! The adaptive core against the host model (tollgate-testkit's `host_model`, virtual time,
//! seeded): each known failure mode of adaptive limiters is a case with a measured outcome,
//! and unit cases pin the rules. `cargo test --lib adaptive -- --nocapture` prints the
//! curves; `-- --ignored` runs the tuning rig's curves and population figure.

use tollgate_testkit::host_model::{
    self, AdaptiveKey, Answer, Host, Pace, S, Second, Sim, first_second_at, goodput,
    limit_slope_per_minute, mean_limit, overload_share, sim_host,
};

use super::*;
use crate::limit::adaptive::tuning::MS;

/// A [`KeyAdapt`] and the configuration it follows: what the host model drives.
struct Key {
    adapt: KeyAdapt,
    config: Adaptive,
}

impl Key {
    fn new(config: Adaptive) -> Self {
        let adapt = KeyAdapt::new(&config, 0);
        Self { adapt, config }
    }

    /// A key of floor 1 and ceiling 64 under `rate_ceiling` starts per second: the tuning
    /// runs' key.
    fn tuned(rate_ceiling: Option<u32>) -> Self {
        let config = Adaptive::new(1, 64);
        Self::new(match rate_ceiling {
            Some(ceiling) => config.rate_ceiling(Rate::per_second(ceiling)),
            None => config,
        })
    }
}

impl AdaptiveKey for Key {
    fn limit(&self) -> usize {
        self.adapt.limit()
    }

    fn rate(&self) -> Option<Pace> {
        let rate = self.adapt.current_rate()?;
        let interval = u64::try_from(rate.interval().as_nanos()).unwrap();
        let burst = rate.get_burst();
        Some(Pace { interval, burst })
    }

    fn started(&mut self, now: u64, running: usize, rate_waited: bool) {
        self.adapt.started(now, running, rate_waited);
    }

    fn finished(&mut self, now: u64, answer: Answer, latency: u64) -> bool {
        let outcome = match answer {
            Answer::Success => Outcome::success(),
            Answer::Overload => Outcome::overload(),
            Answer::Outage => Outcome::outage(),
            Answer::Failure => Outcome::failure(),
        };
        self.adapt
            .finished_after(&self.config, now, outcome, latency)
    }
}

#[test]
#[ignore = "prints the curves for tuning"]
fn curves() {
    host_model::curves(Key::tuned);
}

#[test]
#[ignore = "prints a population figure for tuning"]
fn population() {
    host_model::population(Key::tuned);
}

#[test]
fn moderate_sustained_overload_settles_near_the_knee_and_does_not_climb() {
    // Gradient2's runaway: latency grows with the queue past the knee, no error ever comes.
    for (knee, base_ms) in [(10.0, 100), (4.0, 50), (32.0, 200)] {
        let host = Host {
            knee: Some(knee),
            ..Host::new(base_ms)
        };
        let mut sim = Sim::new(Key::new(Adaptive::new(1, 1000)), host, 1);
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

#[test]
fn a_new_key_starts_low_in_a_few_words() {
    let capped = Adaptive::new(1, 64).rate_ceiling(Rate::per_second(160));
    let key = KeyAdapt::new(&capped, 0);
    assert_eq!(key.limit(), 1, "at its floor");
    assert_eq!(KeyAdapt::new(&Adaptive::new(3, 64), 0).limit(), 3);
    let initial = Rate::every(Duration::from_nanos((1e9 / f64::from(INITIAL_RATE)) as u64));
    assert_eq!(key.current_rate(), Some(initial));
    let crawl = Adaptive::new(1, 64).rate_ceiling(Rate::per_minute(30));
    assert_eq!(
        KeyAdapt::new(&crawl, 0).current_rate(),
        Some(Rate::per_minute(30))
    );
    assert_eq!(KeyAdapt::new(&Adaptive::new(1, 64), 0).rate(), None);
    assert_eq!(
        KeyAdapt::new(&Adaptive::new(5, 64), 0).limit(),
        5,
        "the floor"
    );
    assert_eq!(
        KeyAdapt::new(&Adaptive::new(1, 1), 0).limit(),
        1,
        "the ceiling"
    );
    let size = size_of::<KeyAdapt>();
    println!("KeyAdapt: {size} bytes");
    assert!(size <= 96, "{size} bytes");
}

#[test]
fn stable_timeouts_take_the_limit_to_its_floor_and_keep_it_there() {
    // Every attempt takes exactly the attempt timeout: no variance, no success.
    let healthy = Host {
        knee: Some(32.0),
        ..Host::new(100)
    };
    let mut sim = Sim::new(Key::new(Adaptive::new(1, 64)), healthy, 3);
    sim.run_until(30 * S);
    let grown = sim.key.limit();
    sim.host = Host {
        timeout: Some(5 * S),
        ..healthy
    };
    sim.run_until(630 * S);
    sim.print("timeouts from 30 s", 10);
    let floor_at = first_second_at(&sim, 30, 1).expect("reaches the floor");
    println!(
        "limit {grown} at 30 s, at the floor {} s later",
        floor_at - 30
    );
    assert!(grown >= 32, "grew to {grown} on the healthy host");
    // One cut per round of about one timeout: 11 cuts from 48 at most.
    assert!(
        floor_at - 30 <= 12 * 5 + 10,
        "{} s to the floor",
        floor_at - 30
    );
    assert!(sim.span(floor_at, 630).iter().all(|s| s.limit == 1));
    assert!(sim.span(floor_at + 10, 630).iter().all(|s| s.starts <= 1));
}

#[test]
fn instant_overloads_make_the_key_back_off() {
    // 90% of attempts refused at once: the limit falls, then the pace (the key's limit no
    // longer binds, its rate does), by one cut per round.
    let healthy = Host {
        knee: Some(32.0),
        ..Host::new(100)
    };
    let mut sim = Sim::new(Key::new(Adaptive::new(1, 64)), healthy, 4);
    sim.run_until(30 * S);
    let (grown, pace) = (sim.key.limit(), goodput(sim.span(20, 30)));
    sim.host.fast_overload = 0.9;
    sim.run_until(90 * S);
    sim.print("90% instant overloads from 30 s", 5);
    let starts = |span: &[Second]| span.iter().map(|s| f64::from(s.starts)).sum::<f64>();
    let late = starts(sim.span(60, 90)) / 30.0;
    println!(
        "limit {grown} -> {}, {pace:.0} -> {late:.2} starts/s",
        sim.key.limit()
    );
    assert!(grown >= 32 && sim.key.limit() <= grown * 7 / 10);
    assert!(late <= pace / 100.0, "{late} starts/s");
}

#[test]
fn instant_plain_failures_change_nothing() {
    // The same host with and without 90% of instant 404s: failures neither lower the limit
    // nor pull the baseline down, nor count as credit.
    let host = Host {
        knee: Some(16.0),
        noise: 0.2,
        ramp: true,
        ..Host::new(100)
    };
    let mut clean = Sim::new(Key::new(Adaptive::new(1, 64)), host, 5);
    clean.run_until(120 * S);
    let mut failing = Sim::new(
        Key::new(Adaptive::new(1, 64)),
        Host {
            fast_failure: 0.9,
            ..host
        },
        5,
    );
    failing.run_until(120 * S);
    failing.print("90% instant failures", 10);
    let (a, b) = (
        mean_limit(clean.span(30, 120)),
        mean_limit(failing.span(30, 120)),
    );
    let (base_a, base_b) = (clean.key.adapt.baseline, failing.key.adapt.baseline);
    println!("mean limit {a:.1} clean, {b:.1} failing; baseline {base_a} us, {base_b} us");
    assert!(b >= 0.8 * a && b <= 1.25 * a, "{b} against {a}");
    assert!(
        base_b as f64 >= 0.9 * base_a as f64,
        "baseline {base_b} against {base_a}"
    );
    assert!(failing.span(30, 120).iter().all(|s| s.limit > 1));
}

#[test]
fn successes_faster_than_a_millisecond_are_no_latency_samples() {
    let config = Adaptive::new(1, 64);
    let mut key = KeyAdapt::new(&config, 0);
    let mut now = 0;
    for _ in 0..200 {
        key.started(now, 1, false);
        now += MS / 2;
        key.finished_after(&config, now, Outcome::success(), MS / 2);
        now += MS;
    }
    assert_eq!((key.baseline, key.latency_count), (0, 0));
    for _ in 0..40 {
        key.started(now, 1, false);
        now += 20 * MS;
        key.finished_after(&config, now, Outcome::success(), 20 * MS);
    }
    assert_eq!(key.baseline, 20_000, "microseconds");
}

/// A key grown to `limit` at least by rounds of full use and 100 ms successes; returns
/// the time reached.
fn grow(key: &mut KeyAdapt, config: &Adaptive, limit: usize) -> u64 {
    let mut now = S;
    while key.limit() < limit {
        let running = key.limit();
        for i in 1..=running {
            key.started(now, i, false);
        }
        now += 100 * MS;
        for _ in 0..running {
            key.finished_after(config, now, Outcome::success(), 100 * MS);
        }
    }
    now
}

#[test]
fn a_correlated_burst_of_overloads_cuts_once() {
    let config = Adaptive::new(1, 64);
    let mut key = KeyAdapt::new(&config, 0);
    let mut now = grow(&mut key, &config, 16);
    let before = key.limit;
    let running = key.limit();
    for i in 1..=running {
        key.started(now, i, false);
    }
    // Every attempt in flight answers 503, one per millisecond from 50 ms on.
    for j in 0..running as u64 {
        let latency = 50 * MS + j * MS;
        key.finished_after(&config, now + latency, Outcome::overload(), latency);
    }
    let cut = key.limit;
    // (The first cut ends slow start: from the value one rise before, the last clean one.)
    assert_eq!(
        cut,
        before / LIMIT_SLOW_START_RISE * CUT,
        "exactly one cut for {running} overloads"
    );
    // An attempt started after the cut, answered in the round the cut began: no cut.
    now += 50 * MS + running as u64 * MS;
    key.started(now, 1, false);
    key.finished_after(&config, now + MS, Outcome::overload(), MS);
    assert_eq!(key.limit, cut);
    // Once that round has closed, an overload of an attempt started since cuts again.
    now += 150 * MS;
    key.started(now, 1, false);
    key.finished_after(&config, now + 10 * MS, Outcome::success(), 10 * MS);
    key.started(now + 20 * MS, key.limit(), false);
    key.finished_after(&config, now + 21 * MS, Outcome::overload(), MS);
    assert_eq!(key.limit, cut * CUT);
}

#[test]
fn a_key_held_back_by_something_else_does_not_raise_its_limit() {
    // Three items at most run at once, whatever the key's limit (a global limit binds).
    let host = Host {
        knee: Some(100.0),
        ..Host::new(100)
    };
    let mut sim = Sim::new(Key::new(Adaptive::new(1, 64)), host, 6);
    sim.cap = 3;
    sim.run_until(600 * S);
    let highest = sim.seconds.iter().map(|s| s.limit).max().unwrap();
    println!("held at 3 running: the limit reached {highest}");
    // From its floor of 1 by halves (1, 1.5, 2.25, 3.4): using all 3 of its 3.4, it
    // rises once more, to 5, and never again.
    assert!(
        highest <= 5,
        "one rise (by half) past the 3 it used, at most: {highest}"
    );
}

#[test]
fn a_key_at_its_floor_after_an_overload_recovers_once_it_ends() {
    // A minute of refusals (every attempt answered 503 at once, then every attempt timing
    // out), then a healthy host: the key climbs back to what the host allows.
    for (name, outage) in [
        (
            "503s",
            Host {
                fast_overload: 1.0,
                ..Host::new(100)
            },
        ),
        (
            "timeouts",
            Host {
                timeout: Some(5 * S),
                ..Host::new(100)
            },
        ),
    ] {
        let healthy = Host {
            knee: Some(16.0),
            ..Host::new(100)
        };
        let ideal = 16.0 / 0.1;
        let mut sim = Sim::new(
            Key::new(Adaptive::new(1, 64).rate_ceiling(Rate::per_second(500))),
            healthy,
            8,
        );
        sim.run_until(20 * S);
        sim.host = outage;
        sim.run_until(80 * S);
        let (limit, rate) = (sim.key.limit(), sim.rate_now());
        sim.host = healthy;
        sim.run_until(200 * S);
        sim.print(&format!("{name} from 20 s to 80 s"), 5);
        let back = (80..200)
            .find(|&t| goodput(sim.span(t, t + 5)) >= 0.9 * ideal)
            .expect("recovers");
        println!(
            "{name}: limit {limit}, rate {rate:.2}/s at 80 s; 90% of the ideal {} s later",
            back - 80
        );
        assert!(back - 80 <= 60, "{name}: {} s", back - 80);
        assert!(
            goodput(sim.span(back + 5, 200)) >= 0.85 * ideal,
            "{name}: stays"
        );
    }
}

#[test]
fn a_lower_ceiling_takes_the_values_down_at_once_a_higher_one_lets_them_creep() {
    let config = Adaptive::new(1, 64).rate_ceiling(Rate::per_second(100));
    let mut key = KeyAdapt::new(&config, 0);
    let now = grow(&mut key, &config, 20);
    let grown = key.limit();
    key.set_ceiling(Some(8), Some(Gcra::new(Rate::per_second(1))));
    assert_eq!(key.limit(), 8);
    assert_eq!(key.current_rate(), Some(Rate::per_second(1)));
    // Ends of attempts at full use raise it by one round's rise at most.
    key.set_ceiling(Some(64), None);
    let mut now = now;
    let mut seen = vec![key.limit()];
    for _ in 0..40 {
        let running = key.limit();
        for i in 1..=running {
            key.started(now, i, false);
        }
        now += 100 * MS;
        for _ in 0..running {
            key.finished_after(&config, now, Outcome::success(), 100 * MS);
        }
        seen.push(key.limit());
    }
    println!("grown to {grown}, ceiling 8 then 64: {seen:?}");
    assert!(
        seen.windows(2)
            .all(|w| w[1] as f32 <= w[0] as f32 * MAX_RISE + 1.0)
    );
    assert!(seen[1] <= 9, "creeps from the plateau: {seen:?}");
    assert!(*seen.last().unwrap() > 8, "and rises");
    // The key follows the configuration's rate ceiling again from its next end on.
    assert_eq!(key.own_ceilings(), (Some(64), None));
    assert_eq!(key.rate_ceiling(), 100.0);
}

#[test]
fn values_set_by_their_owner_are_where_adaptation_goes_on_from() {
    let config = Adaptive::new(2, 16).rate_ceiling(Rate::per_second(100));
    let mut key = KeyAdapt::new(&config, 0);
    // Held between floor and ceiling.
    key.set_current(&config, S, Some(64), Some(Gcra::new(Rate::per_second(500))));
    assert_eq!((key.limit(), key.rate), (16, 100.0));
    key.set_current(&config, S, Some(1), None);
    assert_eq!((key.limit(), key.rate), (2, 100.0), "the rate stays");
    // Up from slow start's low values: one start per rate interval, each waited for,
    // answered in 20 ms (the rate binds).
    let mut key = KeyAdapt::new(&config, 0);
    let mut now = S;
    key.set_current(&config, now, Some(6), Some(Gcra::new(Rate::per_second(40))));
    assert_eq!((key.limit(), key.rate), (6, 40.0));
    let mut run = |key: &mut KeyAdapt, outcome: Outcome| {
        let interval = key.rate().map_or(0, |g| g.decide(0, 0).unwrap());
        now += interval;
        key.started(now, 1, true);
        key.finished_after(&config, now + 20 * MS, outcome, 20 * MS);
    };
    // Clean rounds keep it: no snap back, no slow start's doubling; it creeps.
    let mut seen = vec![key.rate];
    for _ in 0..10 {
        for _ in 0..10 {
            run(&mut key, Outcome::success());
        }
        seen.push(key.rate);
    }
    println!("rate set to 40, every 10 starts: {seen:.1?}");
    assert!(seen.windows(2).all(|w| w[1] >= w[0]), "{seen:?}");
    let before = key.rate;
    assert!((40.0..=44.0).contains(&before), "kept near 40: {seen:?}");
    assert_eq!(key.limit(), 6, "the limit did not bind: it stays");
    // An overload cuts from it.
    run(&mut key, Outcome::overload());
    assert_eq!(key.rate, before * CUT);
    assert_eq!(key.limit(), 6);
}

#[test]
fn an_overload_while_the_rate_binds_cuts_the_rate_which_creeps_back() {
    let config = Adaptive::new(1, 64).rate_ceiling(Rate::per_second(100));
    let mut key = KeyAdapt::new(&config, 0);
    // One start per rate interval, each waited for, answered in 20 ms: the rate binds.
    let mut now = S;
    let mut run = |key: &mut KeyAdapt, outcome: Outcome| {
        let interval = key.rate().map_or(0, |g| g.decide(0, 0).unwrap());
        now += interval;
        key.started(now, 1, true);
        key.finished_after(&config, now + 20 * MS, outcome, 20 * MS);
    };
    for _ in 0..400 {
        run(&mut key, Outcome::success());
    }
    let before = (key.limit(), key.rate);
    assert_eq!(before.1, 100.0, "slow start up to the ceiling");
    run(&mut key, Outcome::overload());
    assert_eq!((key.limit(), key.rate), (before.0, before.1 * CUT));
    let mut curve = vec![key.rate];
    for _ in 0..40 {
        for _ in 0..20 {
            run(&mut key, Outcome::success());
        }
        curve.push(key.rate);
    }
    println!("rate after the cut, every 20 starts: {curve:.1?}");
    assert!(curve.windows(2).all(|w| w[1] >= w[0]), "creeps up");
    assert!(curve[1] < 90.0, "not at once");
    assert!(*curve.last().unwrap() >= 99.0, "back at the ceiling");
}

#[test]
fn keys_converge_on_what_their_host_allows() {
    // (base ms, knee, metered rate, max_rate, the share of the ideal it settles at least
    // at): a knee alone, an exact meter below the knee, a fast meter. Noisy latency, 503s
    // past the knee. A knee alone under a max_rate is paced by the rate the first 503
    // cuts, which keeps it below the knee (measured: 80%); without a max_rate the limit
    // finds the knee.
    let hosts = [
        (100, 4.0, None, None, 0.9),
        (100, 8.0, None, Some(200), 0.75),
        (200, 32.0, Some(20.0), Some(200), 0.85),
        (50, 32.0, Some(200.0), Some(400), 0.9),
    ];
    for (base, knee, rate, max_rate, share) in hosts {
        let host = sim_host(base, knee, rate, 0.0);
        let ideal = rate
            .unwrap_or(f64::INFINITY)
            .min(knee / (1.2 * base as f64 / 1e3));
        let config = match max_rate {
            Some(max) => Adaptive::new(1, 64).rate_ceiling(Rate::per_second(max)),
            None => Adaptive::new(1, 64),
        };
        let mut sim = Sim::new(Key::new(config), host, 9);
        sim.run_until(120 * S);
        let reached = (0..120)
            .find(|&t| goodput(sim.span(t, t + 5)) >= share * ideal)
            .unwrap_or(120);
        let settled = goodput(sim.span(30, 120)) / ideal;
        let overload = overload_share(sim.span(30, 120));
        println!(
            "base {base} knee {knee} rate {rate:?}: {:.0}% of {ideal:.0}/s at {reached} s, \
             {:.0}% over 30-120 s, {:.2}% overload",
            100.0 * share,
            100.0 * settled,
            100.0 * overload
        );
        assert!(reached <= 20, "{reached} s");
        assert!(settled >= share, "{settled}");
        assert!(overload <= 0.03, "{overload}");
    }
}

/// The key's limit and rate per second over `seconds`, lowest first.
fn lowest(seconds: &[Second]) -> (usize, f64) {
    let limit = seconds.iter().map(|s| s.limit).min().unwrap_or(0);
    let rate = seconds.iter().map(|s| s.rate).fold(f64::INFINITY, f64::min);
    (limit, rate)
}

#[test]
fn an_outage_cuts_nothing_and_the_key_comes_back_where_it_was() {
    // A host at its pace for a minute, then down for 15 s (every new attempt a 503 with
    // `Retry-After`, at once; the attempts it holds are served, some of them after its
    // first 503s came back), then back. No pause here (the map's pause part waits out
    // `Retry-After`): the key keeps asking through the outage, the hardest case.
    for (seed, base_ms, knee) in [(21, 100, 16.0), (22, 50, 8.0), (23, 300, 32.0)] {
        let host = Host {
            knee: Some(knee),
            noise: 0.2,
            ramp: true,
            ..Host::new(base_ms)
        };
        let config = Adaptive::new(1, 64).rate_ceiling(Rate::per_second(400));
        let mut sim = Sim::new(Key::new(config), host, seed);
        sim.run_until(60 * S);
        let before = lowest(sim.span(59, 60));
        sim.host = Host { down: true, ..host };
        sim.run_until(75 * S);
        sim.host = host;
        sim.run_until(90 * S);
        sim.print(&format!("down from 60 s to 75 s, seed {seed}"), 5);
        let outages: u32 = sim.span(60, 75).iter().map(|s| s.outages).sum();
        // Over the outage alone: from 75 s on the host is back and refuses past its knee
        // again, and a cut then is the key's usual one.
        let (limit, rate) = lowest(sim.span(60, 75));
        let (served_before, served_after) = (goodput(sim.span(45, 60)), goodput(sim.span(76, 90)));
        println!(
            "seed {seed}: before {before:?}; lowest over the outage: limit {limit}, rate \
             {rate:.1}/s; {outages} outage answers; served {served_before:.1}/s before, \
             {served_after:.1}/s after"
        );
        assert!(
            served_after >= 0.9 * served_before,
            "seed {seed}: not back where it was: {served_after:.1}/s after, {served_before:.1}/s before"
        );
        assert!(outages > 100, "the host was down: {outages} outages");
        assert!(
            limit >= before.0 && rate >= before.1,
            "seed {seed}: the outage cut the key: limit {limit} (was {}), rate {rate:.1} (was \
             {:.1})",
            before.0,
            before.1
        );
    }
}

#[test]
fn refusals_only_above_a_knee_lower_the_limit_even_with_retry_after() {
    // The same host twice: past its knee it refuses with plain 503s (overloads), or with
    // 503s that carry a `Retry-After` (read as outages). An outage a key's own concurrency
    // brings on is an overload all the same: attempts under way beside the refused ones
    // are served. The limit must settle near the knee either way.
    for (seed, knee, base_ms) in [(31, 10.0, 100), (32, 4.0, 50), (33, 24.0, 200)] {
        let host = Host {
            knee: Some(knee),
            ramp: true,
            noise: 0.2,
            ..Host::new(base_ms)
        };
        let mut plain = Sim::new(Key::new(Adaptive::new(1, 1000)), host, seed);
        plain.run_until(300 * S);
        let mut told = Sim::new(
            Key::new(Adaptive::new(1, 1000)),
            Host {
                ramp_says_retry_after: true,
                ..host
            },
            seed,
        );
        told.run_until(300 * S);
        told.print(&format!("knee {knee}, refusals with Retry-After"), 30);
        let last = told.span(150, 300);
        let mean = mean_limit(last);
        let refused: u32 = last.iter().map(|s| s.outages + s.overloads).sum();
        let starts: u32 = last.iter().map(|s| s.starts).sum();
        let share = f64::from(refused) / f64::from(starts.max(1));
        let plain_mean = mean_limit(plain.span(150, 300));
        let plain_share = overload_share(plain.span(150, 300));
        println!(
            "knee {knee}: mean limit {mean:.1} with Retry-After, {plain_mean:.1} without; \
             {:.2}% refused, {:.2}% without",
            100.0 * share,
            100.0 * plain_share
        );
        assert!(
            mean <= 1.5 * knee + 1.0,
            "knee {knee}: the limit did not come down to the knee: {mean:.1}"
        );
        assert!(share <= 0.06, "knee {knee}: {:.2}% refused", 100.0 * share);
    }
}

#[test]
fn a_host_that_halves_then_restores_is_followed() {
    let host = sim_host(100, 16.0, Some(100.0), 0.0);
    let halved = Host {
        knee: Some(8.0),
        rate: Some(50.0),
        ..host
    };
    let config = Adaptive::new(1, 64).rate_ceiling(Rate::per_second(400));
    let mut sim = Sim::new(Key::new(config), host, 10);
    sim.run_until(60 * S);
    sim.host = halved;
    sim.run_until(120 * S);
    sim.host = host;
    sim.run_until(240 * S);
    sim.print("halved at 60 s, restored at 120 s", 5);
    let calm = (60..120)
        .find(|&t| overload_share(sim.span(t, t + 5)) < 0.01)
        .unwrap_or(120);
    let follows = (60..120)
        .find(|&t| goodput(sim.span(t, t + 5)) >= 0.9 * 50.0)
        .unwrap_or(120);
    let back = (120..240)
        .find(|&t| goodput(sim.span(t, t + 5)) >= 0.9 * 100.0)
        .unwrap_or(240);
    println!(
        "halved: overload under 1% after {} s, 90% of the new ideal after {} s; restored: 90% after {} s",
        calm - 60,
        follows - 60,
        back - 120
    );
    assert!(calm - 60 <= 10 && follows - 60 <= 20 && back - 120 <= 60);
}

#[test]
fn a_meter_back_from_a_slower_spell_is_found_again_within_a_minute() {
    // A strict meter (behind 2 ms of jitter) at 20/s, at 10/s from 60 s to 180 s, then 20/s
    // again: the rate the halving cut climbs back (a return: far below the pace it held, and
    // no cut for 30 s) instead of creeping up along its recovery curve for minutes. One
    // that stays slow pays a refusal per return at most.
    for seed in [31, 32, 33] {
        let full = sim_host(50, 32.0, Some(20.0), 2.0);
        let halved = Host {
            rate: Some(10.0),
            ..full
        };
        let config = Adaptive::new(1, 32).rate_ceiling(Rate::per_second(400));
        let mut sim = Sim::new(Key::new(config), full, seed);
        sim.run_until(60 * S);
        sim.host = halved;
        sim.run_until(180 * S);
        sim.host = full;
        sim.run_until(300 * S);
        sim.print(&format!("seed {seed}: 20/s, 10/s from 60 s to 180 s"), 10);
        // Feasible: spaced 7.8 ms beyond the interval, 1% refused behind the jitter.
        let feasible = 1.0 / (1.0 / 20.0 + 0.0078);
        let back = (180..295)
            .find(|&t| goodput(sim.span(t, t + 5)) >= 0.9 * feasible)
            .map(|t| t - 180);
        let halved_overload = overload_share(sim.span(90, 180));
        println!(
            "seed {seed}: back at 90% of {feasible:.1}/s {back:?} s after the restore; \
             {:.2}% refused while halved (after the first 30 s)",
            100.0 * halved_overload
        );
        assert!(back.is_some_and(|s| s <= 60), "seed {seed}: {back:?}");
        assert!(halved_overload <= 0.02, "seed {seed}: {halved_overload}");
    }
}

#[test]
fn a_held_pace_keeps_to_a_three_hundredth_of_a_percent_in_two_bytes() {
    for pace in [1e-4_f32, 0.1, 1.0, 1.8, 20.0, 399.0, 6.5e4] {
        let back = decode_pace(encode_pace(pace));
        assert!((back / pace - 1.0).abs() < 2e-4, "{pace}: {back}");
    }
    assert_eq!(encode_pace(0.0), 0);
    assert_eq!(decode_pace(0), 0.0);
    assert_eq!(encode_pace(1e9), u16::MAX, "above the range: its top");
    assert!(
        encode_pace(1e-9) >= 1,
        "below the range: its bottom, never none"
    );
}
