//! The figures of a run on the simulated internet: what each host can take, what it saw per
//! second, the ideal and the capped ideal, and the table rows.

use std::fmt;
use std::time::Duration;

/// When the chosen hosts halve and restore, in seconds since the start.
pub(super) const HALVE_AT_SECS: u64 = 60;
pub(super) const RESTORE_AT_SECS: u64 = 180;
const HALVE_AT: f64 = HALVE_AT_SECS as f64;
const RESTORE_AT: f64 = RESTORE_AT_SECS as f64;
/// How long a settled state must hold, in whole seconds.
const HOLD: u64 = 5;

/// How far beyond a host's interval a client spaces its starts to be refused at most 1% of
/// the time: with the meter's Exp(mean 2 ms) jitter, a start sent `d` after the interval is
/// refused with probability `0.5 × exp(−d / 2 ms)`, which is 1% at `d = 2 ms × ln 50`.
pub const FEASIBLE_SLACK: Duration = Duration::from_nanos(7_824_046);

/// What a host can take, hidden from the crawler: for tests and reports.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Capacity {
    /// The base latency.
    pub base: Duration,
    /// The concurrency knee (its full value, not halved).
    pub knee: u32,
    /// The rate in requests per second (its full value, not halved).
    pub rate: f64,
    /// A dead host never answers.
    pub dead: bool,
}

impl Capacity {
    /// Knee and rate, halved (`max(1, knee / 2)`, `rate / 2`) or not.
    pub fn values(&self, halved: bool) -> (u32, f64) {
        if halved {
            ((self.knee / 2).max(1), self.rate / 2.0)
        } else {
            (self.knee, self.rate)
        }
    }

    /// The ideal rate, `min(rate, knee / (1.2 × base))` with the values halved or not; 0 for a
    /// dead host.
    pub fn ideal(&self, halved: bool) -> f64 {
        if self.dead {
            return 0.0;
        }
        let (knee, rate) = self.values(halved);
        rate.min(f64::from(knee) / (1.2 * self.base.as_secs_f64()))
    }

    /// The feasible rate: the most a client can hold with at most 1% of its requests
    /// refused, `min(1 / (1 / rate + FEASIBLE_SLACK), knee / (1.2 × base))` with the values
    /// halved or not; 0 for a dead host. Behind the meter's jitter, starts spaced by exactly
    /// the rate's interval are refused half the time; spaced [`FEASIBLE_SLACK`] beyond it,
    /// 1% of the time. The knee caps it as it caps the ideal.
    pub fn feasible(&self, halved: bool) -> f64 {
        if self.dead {
            return 0.0;
        }
        let (knee, rate) = self.values(halved);
        let spaced = 1.0 / (1.0 / rate + FEASIBLE_SLACK.as_secs_f64());
        spaced.min(f64::from(knee) / (1.2 * self.base.as_secs_f64()))
    }

    /// Slots a host at its ideal rate holds (Little's law: ideal × mean latency `1.2 × base`).
    fn slots(&self, halved: bool) -> f64 {
        self.ideal(halved) * 1.2 * self.base.as_secs_f64()
    }
}

/// What one host saw in one second of virtual time (answers count in the second they came).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Second {
    /// Attempts sent.
    pub starts: u32,
    /// 200s.
    pub ok: u32,
    /// 429s.
    pub too_many: u32,
    /// 503s.
    pub unavailable: u32,
    /// Timeouts.
    pub timed_out: u32,
}

impl Second {
    /// Answers of any kind.
    pub fn answers(&self) -> u32 {
        self.ok + self.too_many + self.unavailable + self.timed_out
    }

    /// 429s and 503s.
    pub fn overload(&self) -> u32 {
        self.too_many + self.unavailable
    }
}

/// One host, as the report reads it.
pub(super) struct HostRecord<'a> {
    pub(super) capacity: Capacity,
    pub(super) halved: bool,
    pub(super) urls: u32,
    /// When its work ended (ns), or the run's end.
    pub(super) end: u64,
    pub(super) peak: u32,
    pub(super) seconds: &'a [Second],
}

impl HostRecord<'_> {
    fn end(&self) -> f64 {
        self.end as f64 / 1e9
    }

    /// Live and with URLs: the hosts the ideal counts.
    pub(super) fn counts(&self) -> bool {
        !self.capacity.dead && self.urls > 0
    }

    fn halved_at(&self, run: &Run<'_>, t: f64) -> bool {
        run.halving && self.halved && (HALVE_AT..RESTORE_AT).contains(&t)
    }

    /// ∫ of its ideal over `[from, to)`, while it has work.
    fn ideal_over(&self, run: &Run<'_>, from: f64, to: f64) -> f64 {
        self.ideal_between(run, from, to.min(self.end()))
    }

    /// ∫ of its ideal over `[from, to)`, had it work all that time.
    pub(super) fn ideal_between(&self, run: &Run<'_>, from: f64, to: f64) -> f64 {
        if !self.counts() {
            return 0.0;
        }
        let full = self.capacity.ideal(false);
        let mut total = full * overlap(from, to, 0.0, f64::INFINITY);
        if run.halving && self.halved {
            let halved_span = overlap(from, to, HALVE_AT, RESTORE_AT);
            total += (self.capacity.ideal(true) - full) * halved_span;
        }
        total
    }

    fn second(&self, s: u64) -> Second {
        self.seconds.get(s as usize).copied().unwrap_or_default()
    }
}

/// A whole run, as the report reads it.
pub(super) struct Run<'a> {
    pub(super) hosts: Vec<HostRecord<'a>>,
    /// The run's end (ns).
    pub(super) end: u64,
    pub(super) global_limit: usize,
    /// Whether the halving took place.
    pub(super) halving: bool,
}

fn overlap(a0: f64, a1: f64, b0: f64, b1: f64) -> f64 {
    (a1.min(b1) - a0.max(b0)).max(0.0)
}

/// The figures of one run: see the [module docs](super) for the model and the ideal.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// 200s ÷ ∫ ideal dt over the run.
    pub goodput: f64,
    /// 200s ÷ ∫ capped ideal dt (the ideal within the global limit's slots).
    pub capped_goodput: f64,
    /// 200s ÷ ∫ fair-share ideal dt (the global limit's slots shared evenly among the hosts
    /// with work, none given more than it needs).
    pub fair_goodput: f64,
    /// The fluid bound: the most goodput any crawler could reach with the global limit's
    /// slots and each host at its feasible rate (an upper bound; see the module docs).
    pub fluid_bound: f64,
    /// The goodput of an ordered schedule in the same fluid model: hosts by the weighted
    /// shortest slot time first, every host's size known from the start (a reference).
    pub ordered_goodput: f64,
    /// [`host_p10`](Self::host_p10) against each host's fair share.
    pub host_p10_fair: f64,
    /// As [`halved_goodput_settled`](Self::halved_goodput_settled), against the halved
    /// hosts' fair shares.
    pub halved_fair_settled: Option<f64>,
    /// As [`restored_goodput_settled`](Self::restored_goodput_settled), against the
    /// restored hosts' fair shares.
    pub restored_fair_settled: Option<f64>,
    /// The 10th percentile, over the live hosts with URLs, of a host's 200s ÷ ∫ its ideal
    /// over the time it had work.
    pub host_p10: f64,
    /// (429s + 503s) ÷ attempts.
    pub overload: f64,
    /// 429s ÷ attempts (the rest of [`overload`](Self::overload) is 503s).
    pub too_many: f64,
    /// (429s + 503s) ÷ attempts in each [`CURVE_BUCKET_SECS`] seconds of the first
    /// [`CURVE_BUCKETS`] (the overload over time: keys climbing at the start, the halving
    /// at 60 s, the restore at 180 s).
    pub overload_curve: Vec<f64>,
    /// The halved hosts pooled: seconds after 60 s until their share of 429s and 503s among
    /// their answers stays under 1% for 5 whole seconds in a row (a second without answers
    /// counts as under), before 180 s; `None`: never.
    pub halved_overload_settled: Option<f64>,
    /// The halved hosts pooled: seconds after 60 s until their 200s stay at 90% or more of
    /// their (halved) ideal for 5 whole seconds in a row, before 180 s; `None`: never.
    pub halved_goodput_settled: Option<f64>,
    /// The halved hosts pooled: seconds after 180 s until their 200s stay at 90% or more of
    /// their restored ideal for 5 whole seconds in a row; `None`: never (or no work left).
    pub restored_goodput_settled: Option<f64>,
    /// Per halved host with work until 185 s at least (in their order in the run), how it
    /// came back after 180 s: see [`Restore`].
    pub host_restore: Vec<Restore>,
    /// The median restore time over [`host_restore`](Self::host_restore), estimated as
    /// [`restore_quantile`] does; `None`: more than half never got back.
    pub host_restore_median: Option<f64>,
    /// Its 90th percentile, the same way.
    pub host_restore_p90: Option<f64>,
    /// The most attempts in flight at once at any dead host.
    pub dead_peak: u32,
    /// The run's virtual time, in seconds.
    pub virtual_time: f64,
    /// Attempts sent.
    pub requests: u64,
    /// 200s.
    pub successes: u64,
    /// URLs.
    pub urls: u64,
}

pub(super) fn compute(run: &Run<'_>) -> Report {
    let end = run.end as f64 / 1e9;
    let mut requests = 0u64;
    let mut successes = 0u64;
    let mut overload = 0u64;
    let mut too_many = 0u64;
    let mut curve = vec![(0u64, 0u64); CURVE_BUCKETS];
    for host in &run.hosts {
        for (s, second) in host.seconds.iter().enumerate() {
            requests += u64::from(second.starts);
            successes += u64::from(second.ok);
            overload += u64::from(second.overload());
            too_many += u64::from(second.too_many);
            if let Some(bucket) = curve.get_mut(s / CURVE_BUCKET_SECS) {
                bucket.0 += u64::from(second.starts);
                bucket.1 += u64::from(second.overload());
            }
        }
    }
    let last_second = end.ceil() as u64;
    let ideals = integrate_ideals(run, end, last_second);
    let ok_of = |h: &HostRecord<'_>| h.seconds.iter().map(|s| u64::from(s.ok)).sum::<u64>() as f64;
    let counted = || run.hosts.iter().enumerate().filter(|(_, h)| h.counts());
    let host_p10 = p10(counted().map(|(_, h)| ok_of(h) / h.ideal_over(run, 0.0, end)));
    let host_p10_fair = p10(counted().map(|(i, h)| ok_of(h) / ideals.fair_per_host[i]));
    let halved = halved_series(run, last_second, &ideals.fair_halved_per_second);
    let settle = |from: u64, until: u64, pass: &dyn Fn(&Pooled) -> bool| -> Option<f64> {
        if !run.halving {
            return None;
        }
        (from..until.saturating_sub(HOLD - 1))
            .find(|&s| (s..s + HOLD).all(|t| halved.get(t as usize).is_some_and(pass)))
            .map(|s| (s - from) as f64)
    };
    let calm = |p: &Pooled| p.ideal > 0.0 && f64::from(p.overload) < 0.01 * f64::from(p.answers);
    let good = |p: &Pooled| p.ideal > 0.0 && f64::from(p.ok) >= 0.9 * p.ideal;
    let fair_good = |p: &Pooled| p.fair > 0.0 && f64::from(p.ok) >= 0.9 * p.fair;
    let (halve, restore) = (HALVE_AT_SECS, RESTORE_AT_SECS);
    let host_restore = host_restore(run, &ideals.fair_halved_per_second);
    Report {
        // The caller's, from `fluid.rs` (which stands on this file's `Run`).
        fluid_bound: 0.0,
        ordered_goodput: 0.0,
        goodput: successes as f64 / ideals.ideal,
        capped_goodput: successes as f64 / ideals.capped,
        fair_goodput: successes as f64 / ideals.fair,
        host_p10,
        host_p10_fair,
        halved_fair_settled: settle(halve, restore, &fair_good),
        restored_fair_settled: settle(restore, last_second, &fair_good),
        overload: overload as f64 / requests.max(1) as f64,
        too_many: too_many as f64 / requests.max(1) as f64,
        overload_curve: curve
            .iter()
            .map(|&(starts, overload)| overload as f64 / starts.max(1) as f64)
            .collect(),
        halved_overload_settled: settle(halve, restore, &calm),
        halved_goodput_settled: settle(halve, restore, &good),
        restored_goodput_settled: settle(restore, last_second, &good),
        host_restore_median: restore_quantile(&host_restore, 0.5),
        host_restore_p90: restore_quantile(&host_restore, 0.9),
        host_restore,
        dead_peak: run
            .hosts
            .iter()
            .filter(|h| h.capacity.dead)
            .map(|h| h.peak)
            .max()
            .unwrap_or(0),
        virtual_time: end,
        requests,
        successes,
        urls: run.hosts.iter().map(|h| u64::from(h.urls)).sum(),
    }
}

/// How one halved host came back after the restore at 180 s.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Restore {
    /// Seconds from the restore: until its 200s over 5 whole seconds in a row reached 90% of
    /// what it can take (its [feasible](Capacity::feasible) rate restored, or its fair share
    /// of the global limit when that is lower: slots are the scheduler's matter, not the
    /// host's pace), when [`reached`](Self::reached); else until its work ended (or the
    /// run's end), the last 5-second window it had.
    pub seconds: f64,
    /// Whether it got there before its work ended.
    pub reached: bool,
}

/// The `q` quantile of restore times, hosts whose work ended before they got back counted
/// as censored at that time (the Kaplan-Meier estimate: a host that ran out of work says only
/// that it had not got back by then, and drops out of those still waiting). `None`: the
/// share `q` never got back within the times seen.
pub fn restore_quantile(restores: &[Restore], q: f64) -> Option<f64> {
    let mut sorted = restores.to_vec();
    // At equal times, a host that got back goes before one that dropped out.
    sorted.sort_by(|a, b| {
        a.seconds
            .total_cmp(&b.seconds)
            .then(b.reached.cmp(&a.reached))
    });
    let mut waiting = sorted.len() as f64;
    let mut still_out = 1.0;
    for restore in sorted {
        if restore.reached {
            still_out *= 1.0 - 1.0 / waiting;
            if still_out <= 1.0 - q + 1e-12 {
                return Some(restore.seconds);
            }
        }
        waiting -= 1.0;
    }
    None
}

/// Each halved host's restore: see [`Report::host_restore`].
fn host_restore(run: &Run<'_>, fair: &[Vec<f64>]) -> Vec<Restore> {
    if !run.halving {
        return Vec::new();
    }
    let from = RESTORE_AT_SECS;
    run.hosts
        .iter()
        .zip(fair)
        .filter(|(h, _)| h.halved && h.counts() && h.end() >= (from + HOLD) as f64)
        .map(|(host, fair)| {
            let feasible = host.capacity.feasible(false);
            // What the host can take in second `t`, while it has work.
            let due = |t: u64| {
                let span = overlap(t as f64, t as f64 + 1.0, 0.0, host.end());
                (feasible * span).min(fair.get(t as usize).copied().unwrap_or(0.0))
            };
            let mut last = from;
            let reached = (from..)
                .take_while(|&s| (s + HOLD) as f64 <= host.end())
                .inspect(|&s| last = s)
                .find(|&s| {
                    let window = s..s + HOLD;
                    let ok: u32 = window.clone().map(|t| host.second(t).ok).sum();
                    f64::from(ok) >= 0.9 * window.map(due).sum::<f64>()
                });
            Restore {
                seconds: (reached.unwrap_or(last) - from) as f64,
                reached: reached.is_some(),
            }
        })
        .collect()
}

/// The 10th percentile of `shares` (NaN when there are none).
fn p10(shares: impl Iterator<Item = f64>) -> f64 {
    let mut shares: Vec<f64> = shares.collect();
    shares.sort_by(f64::total_cmp);
    if shares.is_empty() {
        return f64::NAN;
    }
    shares[(shares.len() as f64 * 0.1).ceil().max(1.0) as usize - 1]
}

/// The width of a bucket of [`Report::overload_curve`], in seconds.
pub const CURVE_BUCKET_SECS: usize = 10;

/// How many buckets [`Report::overload_curve`] has.
pub const CURVE_BUCKETS: usize = 30;

/// The three ideals integrated over a run.
struct Ideals {
    /// ∫ ideal dt.
    ideal: f64,
    /// ∫ capped ideal dt.
    capped: f64,
    /// ∫ fair-share ideal dt.
    fair: f64,
    /// ∫ of each host's fair share dt (by index in `Run::hosts`).
    fair_per_host: Vec<f64>,
    /// ∫ of each halved host's fair share over each second (by index in `Run::hosts`;
    /// empty for the other hosts).
    fair_halved_per_second: Vec<Vec<f64>>,
}

/// The ideals over `[0, end)`: see the module docs.
fn integrate_ideals(run: &Run<'_>, end: f64, last_second: u64) -> Ideals {
    // Between two of these instants, the hosts with work and their values stay the same.
    let mut instants = vec![0.0, HALVE_AT, RESTORE_AT, end];
    instants.extend(run.hosts.iter().map(HostRecord::end));
    instants.retain(|&t| t <= end);
    instants.sort_by(f64::total_cmp);
    instants.dedup();
    // The capped ideal fills slots with the hosts that give most per slot first: per slot, a
    // host at its ideal gives 1 / (1.2 × base), so the shortest latencies go first.
    let mut by_latency: Vec<&HostRecord<'_>> = run.hosts.iter().filter(|h| h.counts()).collect();
    by_latency.sort_by_key(|h| h.capacity.base);
    let (mut ideal, mut capped, mut fair) = (0.0, 0.0, 0.0);
    let mut fair_per_host = vec![0.0; run.hosts.len()];
    let seconds = last_second as usize + 1;
    let mut fair_halved_per_second: Vec<Vec<f64>> = run
        .hosts
        .iter()
        .map(|h| {
            if run.halving && h.halved {
                vec![0.0; seconds]
            } else {
                Vec::new()
            }
        })
        .collect();
    let mut needs: Vec<(f64, usize)> = Vec::new();
    for pair in instants.windows(2) {
        let (from, to) = (pair[0], pair[1]);
        let mid = (from + to) / 2.0;
        // The fair share: the global limit's slots divided evenly among the hosts with work,
        // none given more than it needs (water-filling), each slot giving 1 / (1.2 × base).
        needs.clear();
        needs.extend(
            run.hosts
                .iter()
                .enumerate()
                .filter(|(_, h)| h.counts() && mid < h.end())
                .map(|(i, h)| (h.capacity.slots(h.halved_at(run, mid)), i)),
        );
        needs.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut left = run.global_limit as f64;
        for (served, &(need, i)) in needs.iter().enumerate() {
            let given = need.min(left / (needs.len() - served) as f64);
            left -= given;
            let host = &run.hosts[i];
            let rate = given / (1.2 * host.capacity.base.as_secs_f64());
            fair += rate * (to - from);
            fair_per_host[i] += rate * (to - from);
            let first = from.floor() as usize;
            for (s, cell) in fair_halved_per_second[i].iter_mut().enumerate().skip(first) {
                let span = overlap(from, to, s as f64, s as f64 + 1.0);
                if span <= 0.0 {
                    break;
                }
                *cell += rate * span;
            }
        }
        let mut slots = run.global_limit as f64;
        let (mut sum, mut within) = (0.0, 0.0);
        for host in by_latency.iter().filter(|h| mid < h.end()) {
            let halved = host.halved_at(run, mid);
            let rate = host.capacity.ideal(halved);
            sum += rate;
            let need = host.capacity.slots(halved);
            if slots >= need {
                within += rate;
                slots -= need;
            } else if slots > 0.0 {
                within += slots / (1.2 * host.capacity.base.as_secs_f64());
                slots = 0.0;
            }
        }
        ideal += sum * (to - from);
        capped += within * (to - from);
    }
    Ideals {
        ideal,
        capped,
        fair,
        fair_per_host,
        fair_halved_per_second,
    }
}

/// The halved hosts pooled over one second.
#[derive(Clone, Copy, Default)]
struct Pooled {
    ok: u32,
    overload: u32,
    answers: u32,
    /// ∫ of their ideal over the second, while they had work.
    ideal: f64,
    /// ∫ of their fair shares over the second.
    fair: f64,
}

fn halved_series(run: &Run<'_>, last_second: u64, fair: &[Vec<f64>]) -> Vec<Pooled> {
    let mut series = vec![Pooled::default(); last_second as usize + 1];
    for host in run.hosts.iter().filter(|h| h.halved && h.counts()) {
        for (s, pooled) in series.iter_mut().enumerate() {
            let second = host.second(s as u64);
            pooled.ok += second.ok;
            pooled.overload += second.overload();
            pooled.answers += second.answers();
            pooled.ideal += host.ideal_over(run, s as f64, s as f64 + 1.0);
        }
    }
    for host_fair in fair {
        for (pooled, fair) in series.iter_mut().zip(host_fair) {
            pooled.fair += fair;
        }
    }
    series
}

/// The time a halved figure has to settle in: from the halving to the restore.
fn halved_window(_: &Report) -> f64 {
    RESTORE_AT - HALVE_AT
}

/// The time a restored figure has to settle in: from the restore to the run's end.
fn restored_window(report: &Report) -> f64 {
    (report.virtual_time - RESTORE_AT).max(0.0)
}

fn settled(seconds: Option<f64>) -> String {
    seconds.map_or_else(|| "never".to_owned(), |s| format!("{s:.0}"))
}

impl Report {
    /// The header of the rows [`Report`]'s `Display` prints.
    pub const HEADER: &'static str = "goodput  bound    ordered  capped   fair     p10 host  p10 fair  overload  halved<1%  halved≥90%  restored≥90%  halved≥90% fair  restored≥90% fair  host restore p50/p90  dead peak  virtual s  requests";

    /// A column header for [`Summary`] rows (each cell "mean (worst)").
    pub const SUMMARY_HEADER: &'static str = "goodput/ideal   fluid bound     ordered sched.  goodput/capped  goodput/fair    p10 host/ideal  p10 host/fair   overload %     halved: <1% s   halved: ≥90% s  restored: ≥90% s  halved: ≥90% fair s  restored: ≥90% fair s  host restore p50 s   host restore p90 s   dead peak  virtual s        requests";
}

impl fmt::Display for Report {
    /// One table row under [`Report::HEADER`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:>6.1}%  {:>6.1}%  {:>6.1}%  {:>6.1}%  {:>6.1}%  {:>7.1}%  {:>7.1}%  {:>7.2}%  {:>9}  {:>10}  {:>12}  {:>15}  {:>17}  {:>20}  {:>9}  {:>9.0}  {:>8}",
            self.goodput * 100.0,
            self.fluid_bound * 100.0,
            self.ordered_goodput * 100.0,
            self.capped_goodput * 100.0,
            self.fair_goodput * 100.0,
            self.host_p10 * 100.0,
            self.host_p10_fair * 100.0,
            self.overload * 100.0,
            settled(self.halved_overload_settled),
            settled(self.halved_goodput_settled),
            settled(self.restored_goodput_settled),
            settled(self.halved_fair_settled),
            settled(self.restored_fair_settled),
            format!(
                "{}/{}",
                settled(self.host_restore_median),
                settled(self.host_restore_p90)
            ),
            self.dead_peak,
            self.virtual_time,
            self.requests,
        )
    }
}

/// Mean and worst of several runs of one strategy (one per seed).
#[derive(Clone, Debug)]
pub struct Summary {
    reports: Vec<Report>,
}

impl Summary {
    /// The summary of these runs.
    ///
    /// # Panics
    ///
    /// If `reports` is empty.
    pub fn new(reports: Vec<Report>) -> Self {
        assert!(!reports.is_empty(), "a summary needs at least one run");
        Self { reports }
    }

    /// The runs.
    pub fn reports(&self) -> &[Report] {
        &self.reports
    }

    /// The mean of a figure.
    pub fn mean(&self, figure: impl Fn(&Report) -> f64) -> f64 {
        self.reports.iter().map(figure).sum::<f64>() / self.reports.len() as f64
    }

    /// The lowest value of a figure.
    pub fn min(&self, figure: impl Fn(&Report) -> f64) -> f64 {
        self.reports
            .iter()
            .map(figure)
            .fold(f64::INFINITY, f64::min)
    }

    /// The highest value of a figure.
    pub fn max(&self, figure: impl Fn(&Report) -> f64) -> f64 {
        self.reports
            .iter()
            .map(figure)
            .fold(f64::NEG_INFINITY, f64::max)
    }

    /// A settling time: the mean over the runs and the worst run. A run that never settled
    /// counts in the mean as the whole time it was given (`window`), which makes the mean a
    /// lower bound ("≥"), and is the worst ("never×n" when n runs never did).
    fn settle_cell(
        &self,
        figure: impl Fn(&Report) -> Option<f64>,
        window: impl Fn(&Report) -> f64,
    ) -> String {
        let never = self.reports.iter().filter(|r| figure(r).is_none()).count();
        let mean = self
            .reports
            .iter()
            .map(|r| figure(r).unwrap_or_else(|| window(r)))
            .sum::<f64>()
            / self.reports.len() as f64;
        if never > 0 {
            return format!("≥{mean:.1} (never×{never})");
        }
        let worst = self.max(|r| figure(r).unwrap_or(0.0));
        format!("{mean:.1} ({worst:.0})")
    }
}

impl fmt::Display for Summary {
    /// One row under [`Report::SUMMARY_HEADER`]: each cell the mean, then the worst run
    /// in parentheses (lowest goodput, highest overload, slowest to settle, ...).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pct = |mean: f64, worst: f64| format!("{:.1} ({:.1})", mean * 100.0, worst * 100.0);
        let goodput = pct(self.mean(|r| r.goodput), self.min(|r| r.goodput));
        let capped = pct(
            self.mean(|r| r.capped_goodput),
            self.min(|r| r.capped_goodput),
        );
        let fair = pct(self.mean(|r| r.fair_goodput), self.min(|r| r.fair_goodput));
        let bound = pct(self.mean(|r| r.fluid_bound), self.min(|r| r.fluid_bound));
        let ordered = pct(
            self.mean(|r| r.ordered_goodput),
            self.min(|r| r.ordered_goodput),
        );
        let p10 = pct(self.mean(|r| r.host_p10), self.min(|r| r.host_p10));
        let p10_fair = pct(
            self.mean(|r| r.host_p10_fair),
            self.min(|r| r.host_p10_fair),
        );
        let overload = format!(
            "{:.2} ({:.2})",
            self.mean(|r| r.overload) * 100.0,
            self.max(|r| r.overload) * 100.0
        );
        write!(
            f,
            "{goodput:<15} {bound:<15} {ordered:<15} {capped:<15} {fair:<15} {p10:<15} {p10_fair:<15} {overload:<14} {:<15} {:<15} {:<17} {:<20} {:<22} {:<20} {:<20} {:<10} {:<16} {:.0} ({:.0})",
            self.settle_cell(|r| r.halved_overload_settled, halved_window),
            self.settle_cell(|r| r.halved_goodput_settled, halved_window),
            self.settle_cell(|r| r.restored_goodput_settled, restored_window),
            self.settle_cell(|r| r.halved_fair_settled, halved_window),
            self.settle_cell(|r| r.restored_fair_settled, restored_window),
            self.settle_cell(|r| r.host_restore_median, restored_window),
            self.settle_cell(|r| r.host_restore_p90, restored_window),
            format!(
                "{:.1} ({:.0})",
                self.mean(|r| f64::from(r.dead_peak)),
                self.max(|r| f64::from(r.dead_peak))
            ),
            format!(
                "{:.0} ({:.0})",
                self.mean(|r| r.virtual_time),
                self.max(|r| r.virtual_time)
            ),
            self.mean(|r| r.requests as f64),
            self.max(|r| r.requests as f64),
        )
    }
}
