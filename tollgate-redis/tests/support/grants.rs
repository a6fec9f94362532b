//! The store's grants, read from Redis's own log of what its scripts ran
//! (`redis_monitor::CommandLog`): the fleet's limits judged exactly, on Redis's clock.
//!
//! A grant is the `ZADD` of a new lease in `grant.lua`; its score is the lease's expiry,
//! `now + TTL`, with `now` the script's own `TIME`: so the log gives each grant's instant
//! exactly, however late the machine ran anything around it. A rate start is a script's
//! `SET` of the key's TAT (`grant.lua` with the lease, or `gcra.lua` alone), stamped by the
//! log as Redis ran it: microseconds after the script read `TIME`, as a script runs whole.
//! On those instants:
//! - the rate: no more than `burst + rate × W` starts in any window `W` (1 s, 2 s), with no
//!   allowance (see [`rate_violation`]). GCRA allows at most `burst + rate × W - 1` there,
//!   so only a Redis stalled for a whole interval inside one script could tip a stamp over;
//! - the cap: replaying each Redis's lease sets (grants, renewals, releases), no grant finds
//!   the cap's worth of leases unexpired (see [`HostGrants::cap_violations`]);
//! - silences: nothing granted from a Redis's epoch reset until one TTL later.
//!
//! And against the target's arrivals, which hold at any speed: every arrival at a host has
//! a grant of that host before it ([`ungranted`]), so the judgement of the grants is a
//! judgement of the requests.
//!
//! The key names are the store's (`<ns>:lease:{<len>:<limit>:<key>}` for a lease set,
//! `<ns>:{epoch}` for the epoch), pinned here on purpose.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant, SystemTime};

use super::http_server;
use super::redis_monitor::{CommandLog, LoggedCommand};

/// What one host was granted, read from one or more Redis logs.
#[derive(Clone, Debug, Default)]
pub struct HostGrants {
    /// Each new lease's grant instant (Redis's clock), in time order.
    pub at: Vec<SystemTime>,
    /// Each rate start's instant (Redis's clock), in time order.
    pub starts: Vec<SystemTime>,
    /// Grants that found the cap's worth of leases unexpired: `(instant, unexpired)`.
    cap_violations: Vec<(SystemTime, usize)>,
}

impl HostGrants {
    /// Grants made while the cap's worth of leases was unexpired, by the replay of the
    /// lease sets: `(instant, leases unexpired then)`. Empty when the cap held.
    pub fn cap_violations(&self) -> &[(SystemTime, usize)] {
        &self.cap_violations
    }

    /// How many grants fell in `[from, until)`.
    pub fn between(&self, from: SystemTime, until: SystemTime) -> usize {
        self.at
            .iter()
            .filter(|&&at| from <= at && at < until)
            .count()
    }
}

/// The grants of one run, per host, and the epoch resets, from the logs of every Redis
/// process the run used.
#[derive(Clone, Debug, Default)]
pub struct Grants {
    hosts: BTreeMap<String, HostGrants>,
    /// Per log, in log order: the instants at which the namespace's epoch was (re)set.
    pub epoch_resets: Vec<Vec<SystemTime>>,
}

impl Grants {
    /// Reads the grants under `namespace` from `logs` (one per Redis process, each replayed
    /// on its own: a restarted Redis starts empty), for leases of `ttl` and a cap of `cap`.
    pub fn read(logs: &[&CommandLog], namespace: &str, ttl: Duration, cap: usize) -> Self {
        let mut grants = Self::default();
        for log in logs {
            let mut replay = Replay::new(namespace, ttl, cap);
            for command in log.commands() {
                replay.apply(&command);
            }
            for (host, mut replayed) in replay.hosts {
                let entry = grants.hosts.entry(host).or_default();
                entry.at.append(&mut replayed.at);
                entry.starts.append(&mut replayed.starts);
                entry.cap_violations.append(&mut replayed.cap_violations);
            }
            grants.epoch_resets.push(replay.epoch_resets);
        }
        for host in grants.hosts.values_mut() {
            host.at.sort_unstable();
            host.starts.sort_unstable();
        }
        grants
    }

    /// Host `name`'s grants (none if it was never granted anything).
    pub fn host(&self, name: &str) -> HostGrants {
        self.hosts.get(name).cloned().unwrap_or_default()
    }

    /// Every grant of any host in `[from, until)`.
    pub fn between(&self, from: SystemTime, until: SystemTime) -> usize {
        self.hosts
            .values()
            .map(|host| host.between(from, until))
            .sum()
    }

    /// The first grant of any host at or after `from`.
    pub fn first_after(&self, from: SystemTime) -> Option<SystemTime> {
        self.hosts
            .values()
            .filter_map(|host| host.at.iter().find(|&&at| at >= from).copied())
            .min()
    }

    /// The first epoch reset in log `log`, asserted to exist.
    ///
    /// # Panics
    ///
    /// If that Redis never reset the namespace's epoch.
    pub fn first_reset(&self, log: usize) -> SystemTime {
        *self.epoch_resets[log]
            .first()
            .unwrap_or_else(|| panic!("log {log} shows no epoch reset"))
    }
}

/// One Redis's lease sets rebuilt from its log.
struct Replay {
    lease_prefix: String,
    rate_prefix: String,
    epoch_key: String,
    ttl_micros: u64,
    cap: usize,
    /// Per lease set: lease id → expiry (Redis microseconds).
    sets: HashMap<String, HashMap<String, u64>>,
    hosts: BTreeMap<String, HostGrants>,
    epoch_resets: Vec<SystemTime>,
}

impl Replay {
    fn new(namespace: &str, ttl: Duration, cap: usize) -> Self {
        Self {
            lease_prefix: format!("{namespace}:lease:"),
            rate_prefix: format!("{namespace}:rate:"),
            epoch_key: format!("{namespace}:{{epoch}}"),
            ttl_micros: ttl.as_micros() as u64,
            cap,
            sets: HashMap::new(),
            hosts: BTreeMap::new(),
            epoch_resets: Vec::new(),
        }
    }

    fn apply(&mut self, command: &LoggedCommand) {
        let args = &command.args;
        let Some(key) = args.get(1) else { return };
        if command.is_script("HSET") && *key == self.epoch_key {
            self.epoch_resets.push(command.at);
            return;
        }
        if command.is_script("SET") {
            let tag = key
                .strip_prefix(&self.rate_prefix)
                .and_then(|rest| rest.strip_suffix(":tat"));
            if let Some(host) = tag.and_then(host_of_tag) {
                self.hosts.entry(host).or_default().starts.push(command.at);
            }
            return;
        }
        let Some(host) = key.strip_prefix(&self.lease_prefix).and_then(host_of_tag) else {
            return;
        };
        let name = args[0].to_ascii_uppercase();
        if command.by_script && name == "ZADD" {
            let renewal = args
                .get(2)
                .is_some_and(|flag| flag.eq_ignore_ascii_case("XX"));
            let pairs = &args[if renewal { 3 } else { 2 }..];
            for pair in pairs.chunks(2) {
                let expiry = parse_micros(&pair[0]);
                if !renewal {
                    self.grant(key, host.clone(), expiry - self.ttl_micros);
                }
                self.sets
                    .entry(key.clone())
                    .or_default()
                    .insert(pair[1].clone(), expiry);
            }
        } else if name == "ZREM" {
            if let Some(set) = self.sets.get_mut(key) {
                for id in &args[2..] {
                    set.remove(id);
                }
            }
        } else if name == "DEL" || name == "UNLINK" {
            self.sets.remove(key);
        }
    }

    fn grant(&mut self, set: &str, host: String, now: u64) {
        let unexpired = self.sets.get(set).map_or(0, |leases| {
            leases.values().filter(|&&end| end > now).count()
        });
        let at = SystemTime::UNIX_EPOCH + Duration::from_micros(now);
        let entry = self.hosts.entry(host).or_default();
        entry.at.push(at);
        if unexpired >= self.cap {
            entry.cap_violations.push((at, unexpired));
        }
    }
}

/// `host0` of the tag `{5:hosts:host0}`.
fn host_of_tag(tag: &str) -> Option<String> {
    let inner = tag.strip_prefix('{')?.strip_suffix('}')?;
    let mut parts = inner.splitn(3, ':');
    let (_len, _limit) = (parts.next()?, parts.next()?);
    parts.next().map(str::to_owned)
}

/// A score as the scripts write it: a whole number of microseconds (Redis may print it in
/// `%.17g`, which is exact for these).
fn parse_micros(text: &str) -> u64 {
    text.parse::<u64>().unwrap_or_else(|_| {
        text.parse::<f64>()
            .unwrap_or_else(|_| panic!("a lease score that is no number: {text:?}")) as u64
    })
}

/// The first window (1 s, then 2 s) in which rate `starts` exceed `burst + rate × W`:
/// `(window, starts in it, limit)`. Judged on Redis's clock, so with no allowance.
pub fn rate_violation(starts: &[SystemTime], rate: (u32, u32)) -> Option<(Duration, usize, usize)> {
    let on_this_clock = as_instants(starts);
    [Duration::from_secs(1), Duration::from_secs(2)]
        .into_iter()
        .find_map(|window| {
            let count = http_server::max_in_window(&on_this_clock, window);
            let limit = http_server::window_limit(f64::from(rate.0), rate.1, window);
            (count > limit).then_some((window, count, limit))
        })
}

/// A request no grant accounts for, described, or `None` when every arrival at a host has
/// a grant of its own before it. By rank: the `k`-th arrival must come after the `k`-th
/// grant (if each arrival has a distinct grant before it, at least `k` grants precede the
/// `k`-th arrival), and there are no more arrivals than grants. Holds at any speed: a
/// machine that runs a worker late only delays its arrivals.
pub fn ungranted(arrivals: &[Instant], grants: &[SystemTime]) -> Option<String> {
    let granted = as_instants(grants);
    if arrivals.len() > granted.len() {
        return Some(format!(
            "{} arrivals but {} grants",
            arrivals.len(),
            granted.len()
        ));
    }
    let mut sorted = arrivals.to_vec();
    sorted.sort_unstable();
    // The k-th arrival must come after the k-th grant: each arrival has a grant of its own
    // before it. The two clocks (Redis's wall clock, this process's monotonic one) are read
    // side by side once; a millisecond covers reading them.
    let slack = Duration::from_millis(1);
    sorted
        .iter()
        .zip(&granted)
        .position(|(&arrived, &grant)| arrived + slack < grant)
        .map(|rank| {
            format!(
                "arrival {rank} came {:?} before the grant of its rank",
                granted[rank] - sorted[rank]
            )
        })
}

/// `times` on this process's monotonic clock (read side by side with the wall clock once).
pub fn as_instants(times: &[SystemTime]) -> Vec<Instant> {
    let (now, wall) = (Instant::now(), SystemTime::now());
    times
        .iter()
        .map(|&at| match wall.duration_since(at) {
            Ok(ago) => now - ago,
            Err(ahead) => now + ahead.duration(),
        })
        .collect()
}
