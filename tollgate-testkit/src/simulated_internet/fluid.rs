//! What a crawl of one simulated internet could reach at best, in a fluid model: requests
//! as a flow, the global limit's slots shared at will, each host at most at its
//! [feasible](super::Capacity::feasible) rate (the most it serves at ≤ 1% refusals), each of
//! its requests holding a slot `1.2 × base` on average (the ideal's Little's law). Goodput
//! is judged as the report judges it: 200s ÷ ∫ ideal dt while a host has work, where a
//! host's work ends at its last URL.
//!
//! - **The fluid bound**, an upper bound on any crawler's goodput in that model: no host
//!   ends before its URLs at its feasible rate (`urls / feasible`), and the slots' work
//!   cannot end sooner than on one machine of the global limit's speed that does each
//!   host's slot time in the order that minimises the weighted ends (the weighted shortest
//!   time first, with each host's lowest ideal as its weight). Either bounds ∫ ideal from
//!   below; the larger is the bound.
//! - **An ordered schedule**: one crawl the model allows, hosts in that same order, each
//!   given the slots its feasible rate needs while slots are left (the last one partly),
//!   every host's work known from the start. A crawler that reads its input lazily does
//!   not know a host's size, so this is a reference, not a bound.
//!
//! The bound's hosts alone run halved while they are; its machine and the ordered schedule
//! hold them at their full capacity (a relaxation: the bound stays an upper bound, and the
//! schedule is that much kinder than the run). Both leave the dead hosts out (their
//! attempts hold slots until they time out, at the end of either).

use super::report::{HALVE_AT_SECS, RESTORE_AT_SECS, Run};

/// One live host with URLs, as the fluid model sees it.
struct Host {
    /// Its index in `Run::hosts`.
    index: usize,
    urls: f64,
    feasible: f64,
    /// Slot time one request holds, in seconds.
    hold: f64,
    /// The lowest ideal rate it has over the run (its weight).
    weight: f64,
    /// Its feasible rate while halved, if it was.
    halved: Option<f64>,
}

impl Host {
    /// When it ends alone at its feasible rate (halved while it is), in seconds.
    fn alone_end(&self) -> f64 {
        let Some(halved) = self.halved else {
            return self.urls / self.feasible;
        };
        let (from, to) = (HALVE_AT_SECS as f64, RESTORE_AT_SECS as f64);
        let before = self.feasible * from;
        let during = halved * (to - from);
        if self.urls <= before {
            self.urls / self.feasible
        } else if self.urls <= before + during {
            from + (self.urls - before) / halved
        } else {
            to + (self.urls - before - during) / self.feasible
        }
    }
}

/// The fluid bound and the ordered schedule's goodput, as shares of the run's ideal.
pub(super) fn fluid(run: &Run<'_>) -> (f64, f64) {
    let mut hosts: Vec<Host> = run
        .hosts
        .iter()
        .enumerate()
        .filter(|(_, h)| h.counts())
        .map(|(index, h)| {
            let halved = run.halving && h.halved;
            Host {
                index,
                urls: f64::from(h.urls),
                feasible: h.capacity.feasible(false),
                hold: 1.2 * h.capacity.base.as_secs_f64(),
                weight: h.capacity.ideal(halved).min(h.capacity.ideal(false)),
                halved: halved.then(|| h.capacity.feasible(true)),
            }
        })
        .collect();
    let served: f64 = hosts.iter().map(|h| h.urls).sum();
    // The weighted shortest slot time first.
    hosts.sort_by(|a, b| {
        let ratio = |h: &Host| h.weight / (h.urls * h.hold);
        ratio(b).total_cmp(&ratio(a))
    });
    let limit = run.global_limit as f64;
    let ideal_until = |h: &Host, end: f64| run.hosts[h.index].ideal_between(run, 0.0, end);

    // The bound: each host alone, and the one machine of speed `limit`.
    let alone: f64 = hosts.iter().map(|h| ideal_until(h, h.alone_end())).sum();
    let mut done = 0.0;
    let mut machine = 0.0;
    for h in &hosts {
        done += h.urls * h.hold;
        machine += h.weight * (done / limit);
    }
    let bound = served / alone.max(machine);
    let ordered: f64 = hosts
        .iter()
        .zip(ordered_ends(&hosts, limit))
        .map(|(h, end)| ideal_until(h, end))
        .sum();
    (bound, served / ordered)
}

/// When each host (in `hosts`' order) ends in the ordered schedule under `limit` slots:
/// between two ends, each host in order takes the slots its feasible rate needs while slots
/// are left.
fn ordered_ends(hosts: &[Host], limit: f64) -> Vec<f64> {
    let mut left: Vec<f64> = hosts.iter().map(|h| h.urls).collect();
    let mut ends = vec![0.0; hosts.len()];
    let mut open: Vec<usize> = (0..hosts.len()).collect();
    let mut now = 0.0;
    while !open.is_empty() {
        let mut slots = limit;
        let mut rates = Vec::with_capacity(open.len());
        for &i in &open {
            let need = hosts[i].feasible * hosts[i].hold;
            let given = need.min(slots);
            slots -= given;
            rates.push(given / hosts[i].hold);
            if slots <= 0.0 {
                break;
            }
        }
        let step = rates
            .iter()
            .zip(&open)
            .filter(|(rate, _)| **rate > 0.0)
            .map(|(rate, &i)| left[i] / rate)
            .fold(f64::INFINITY, f64::min);
        now += step;
        for (rate, &i) in rates.iter().zip(&open) {
            left[i] -= rate * step;
            if left[i] <= 1e-9 * hosts[i].urls.max(1.0) {
                ends[i] = now;
            }
        }
        open.retain(|&i| ends[i] == 0.0);
    }
    ends
}
