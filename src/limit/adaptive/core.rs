//! [`KeyAdapt`]: one key's adaptive limit and rate, moved by the key's own signals.
//!
//! Synchronous and self-contained: the caller passes every time (`u64` nanoseconds on its
//! clock, the one its rates decide on) and every signal (a start, an attempt's end), and
//! re-reads [`limit`](KeyAdapt::limit) and [`rate`](KeyAdapt::rate) when
//! [`finished`](KeyAdapt::finished) says they changed. No I/O, no allocation, no lock:
//! the map keeps one per key in its key table, [`AdaptiveLimiter`](super::AdaptiveLimiter)
//! one behind its mutex. The rules are written out in [`Adaptive`]'s docs and every
//! constant is in [`tuning`](super::tuning).
//!
//! Values are kept as `f32` so that cuts and the recovery curve move in fractions of a
//! start; [`limit`](KeyAdapt::limit) is its integer part. A key's *cubic state* for each value is
//! `w` (the value at the last overload: the curve's plateau), `k` (how far the plateau was
//! from the cut, in the curve's units) and `x` (how far the key has come since the cut:
//! rounds for the limit, seconds for the rate, counted only while the value bound the key).

use std::time::Duration;

use super::config::Adaptive;
use super::tuning::{
    BURST_CAP, CLIMB, CUT, EXPLORE_AFTER, EXPLORE_STARTS, HELD_PACE_HALF_LIFE, HELD_PACE_SHARE,
    INITIAL_CUT, INITIAL_LIMIT, INITIAL_RATE, LATENCY_CALM, LATENCY_CARRY_ROUNDS, LATENCY_HIGH,
    LATENCY_MIN_SAMPLE, LATENCY_SAMPLES, LIMIT_RECOVERY_ROUNDS, LIMIT_RECOVERY_STARTS,
    LIMIT_SLOW_START_RISE, MAX_RISE, MEASURED_WEIGHT, RATE_BOUND_PACE, RATE_FLOOR,
    RATE_RECOVERY_MAX_SECS, RATE_RECOVERY_MIN_SECS, RATE_RECOVERY_STARTS, RATE_SLOW_START_RISE,
    RECOVERY_EXPONENT, REMEASURE_ROUNDS, RETURN_AFTER, RETURN_BELOW, ROUND_ENDS, ROUND_MIN, SEC,
    SLOW_OVERLOAD, STALE_ROUND,
};
use crate::limit::outcome::Outcome;
use crate::limit::rate::gcra::{Gcra, Rate};

// `flags`
/// The limit has not been cut yet: it grows by [`LIMIT_SLOW_START_RISE`].
const SLOW_LIMIT: u8 = 1;
/// The rate has not been cut yet.
const SLOW_RATE: u8 = 1 << 1;
/// A clean round closed since the limit's last cut (so the next cut starts a new episode).
const CLEAN_LIMIT: u8 = 1 << 2;
/// The same for the rate.
const CLEAN_RATE: u8 = 1 << 3;
/// The current round saw an overload: it raises nothing.
const OVERLOADED: u8 = 1 << 4;
/// The current round began with a cut: it cuts nothing more.
const CUT_DONE: u8 = 1 << 5;
/// The limit ceiling is the key's own (`set_ceiling`), not the configuration's.
const OWN_LIMIT: u8 = 1 << 6;
/// The rate ceiling is the key's own.
const OWN_RATE: u8 = 1 << 7;

// `round`
/// A start of the current round found the key using its whole limit.
const LIMIT_BOUND: u8 = 1;
/// A start of the current round waited for the key's rate.
const RATE_BOUND: u8 = 1 << 1;
/// How far the current round's bits shift to become the previous round's.
const PREVIOUS: u8 = 2;
/// What bound the key in the current round and the last (the bits above, shifted).
const BOUND: u8 = (LIMIT_BOUND | RATE_BOUND) | (LIMIT_BOUND | RATE_BOUND) << PREVIOUS;
/// A start of the current round came later than the key had work and room, because its
/// rate said so (what makes the rate bind, at pace: [`KeyAdapt::bound`]).
const WAITED: u8 = 1 << 4;
/// An attempt of the current round succeeded.
const SUCCEEDED: u8 = 1 << 5;
/// An attempt started after a recent outage answer came ([`KeyAdapt::is_outage_recent`]),
/// and succeeded: should another outage answer come, the server is refusing some requests
/// while serving others (an overload), not out. Forgotten at a round's start once the
/// outage is no longer recent.
const SERVED_AFTER_OUTAGE: u8 = 1 << 6;
/// The rate is climbing back to the pace it held lately (see [`KeyAdapt::raise_rate`]);
/// kept from round to round until the next cut.
const RETURNING: u8 = 1 << 7;

/// How many round lengths an outage answer stays recent: long enough for an attempt started
/// after it to come back (an attempt takes about a round length, the baseline latency), short
/// enough that a server back from an outage is not judged by it when it fails again later.
const OUTAGE_RECENT: u64 = 4;

/// The largest ceiling a key can have (a semaphore's largest limit).
const MAX_CEILING: usize = (u32::MAX >> 1) as usize;

/// One key's adaptive limit and rate (the state of the rules in [`Adaptive`]'s docs).
#[derive(Clone, Debug)]
pub(crate) struct KeyAdapt {
    /// The limit, between the floor and `ceiling`; [`limit`](Self::limit) rounds it down.
    limit: f32,
    /// The limit's plateau: its value at the last overload of the latest episode.
    limit_w: f32,
    /// Clean limit-bound rounds from the last cut to the plateau.
    limit_k: f32,
    /// The rate in starts per second; 0 when the key has none.
    rate: f32,
    /// The rate's plateau.
    rate_w: f32,
    /// Rate-bound seconds from the last rate cut to the plateau.
    rate_k: f32,
    /// Rate-bound seconds since the last rate cut.
    rate_x: f32,
    /// The rate ceiling's interval in nanoseconds, as given (0: no rate ceiling). Kept
    /// whole with its burst, not as a number of starts per second, so the key's owner can
    /// read back the ceiling it set ([`own_ceilings`](Self::own_ceilings)) and keep no copy.
    ceiling_interval: u64,
    /// The rate ceiling's burst: the burst of every rate the key takes (1 without one).
    burst: u32,
    /// Starts per second, a moving average over rounds.
    measured: f32,
    /// The limit ceiling.
    ceiling: u32,
    /// The lowest mean latency of a latency verdict, in microseconds (0: none yet).
    baseline: u32,
    /// Sum of the latency samples carried so far, in microseconds (saturating).
    latency_sum: u32,
    /// When the current round began.
    round_start: u64,
    /// When a value was last lowered (0: never). Signals of attempts started before it
    /// speak of the values before it, and are ignored.
    last_cut: u64,
    /// When the latest outage answer came (0: none): with [`SERVED_AFTER_OUTAGE`], what
    /// tells an outage from refusals the key's own load brings on.
    outage_at: u64,
    /// Starts in the current round.
    starts: u32,
    /// The pace the rate held lately (see [`held_pace`](Self::held_pace)), as
    /// [`encode_pace`] keeps it in two bytes (0: none yet).
    held_pace: u16,
    /// Latency samples carried so far.
    latency_count: u16,
    /// Attempts ended in the current round (compared only with at most [`ROUND_ENDS`]: a
    /// byte, saturating, as every key of an adaptive map keeps one).
    ends: u8,
    /// Clean limit-bound rounds since the last limit cut.
    limit_x: u16,
    /// Rounds the latency samples have been carried over.
    latency_rounds: u8,
    /// Rounds closed in a row with the limit at its floor.
    floor_rounds: u8,
    flags: u8,
    /// The current round's marks: what bound the key in it and the last ([`BOUND`]),
    /// whether a start [`WAITED`] for the rate, whether an attempt [`SUCCEEDED`], and
    /// whether one was [served after a recent outage](SERVED_AFTER_OUTAGE).
    round: u8,
}

/// What the latency samples say at a round's close.
enum Latency {
    /// Too few samples yet.
    Unknown,
    /// At most [`LATENCY_CALM`] times the baseline.
    Calm,
    /// Between calm and high.
    Hold,
    /// Above [`LATENCY_HIGH`] times the baseline: the mean, in microseconds.
    High(u32),
}

impl KeyAdapt {
    /// A new key: its limit at [`INITIAL_LIMIT`] (within floor and ceiling), its rate at
    /// [`INITIAL_RATE`] or the rate ceiling if that is lower (no rate without a ceiling),
    /// both in slow start.
    pub(crate) fn new(config: &Adaptive, now: u64) -> Self {
        let ceiling = clamp_ceiling(config.ceiling());
        let floor = (config.floor() as f32).min(ceiling as f32);
        let limit = INITIAL_LIMIT.clamp(floor, ceiling as f32);
        let (ceiling_interval, burst) = Gcra::parts(config.get_rate_ceiling().map(Gcra::new));
        Self {
            limit,
            limit_w: limit,
            limit_k: 0.0,
            rate: initial_rate(per_second_of(ceiling_interval)),
            rate_w: 0.0,
            rate_k: 0.0,
            rate_x: 0.0,
            ceiling_interval,
            burst,
            measured: 0.0,
            ceiling: ceiling as u32,
            baseline: 0,
            latency_sum: 0,
            round_start: now,
            last_cut: 0,
            outage_at: 0,
            starts: 0,
            held_pace: 0,
            latency_count: 0,
            ends: 0,
            limit_x: 0,
            latency_rounds: 0,
            floor_rounds: 0,
            flags: SLOW_LIMIT | SLOW_RATE | CLEAN_LIMIT | CLEAN_RATE,
            round: 0,
        }
    }

    /// The current limit, between the floor and the ceiling.
    #[inline]
    pub(crate) fn limit(&self) -> usize {
        limit_of(self.limit)
    }

    /// The current rate (`None`: the key has no rate).
    pub(crate) fn rate(&self) -> Option<Gcra> {
        self.current_rate().map(Gcra::new)
    }

    /// The current rate as a [`Rate`], for those who show it.
    pub(crate) fn current_rate(&self) -> Option<Rate> {
        let interval = self.interval();
        (interval > 0).then(|| Rate::every(Duration::from_nanos(interval)).burst(self.burst))
    }

    /// The ceilings the key's owner set ([`set_ceiling`](Self::set_ceiling)): its limit
    /// ceiling and its rate ceiling, each `None` where the key follows the configuration.
    pub(crate) fn own_ceilings(&self) -> (Option<usize>, Option<Gcra>) {
        (
            (self.flags & OWN_LIMIT != 0).then_some(self.ceiling as usize),
            self.rate_ceiling_gcra()
                .filter(|_| self.flags & OWN_RATE != 0),
        )
    }

    /// The rate ceiling as given (`None`: none).
    fn rate_ceiling_gcra(&self) -> Option<Gcra> {
        Gcra::from_parts(self.ceiling_interval, self.burst)
    }

    /// The rate ceiling in starts per second (infinite: none).
    fn rate_ceiling(&self) -> f32 {
        per_second_of(self.ceiling_interval)
    }

    /// A start: `running` = the key's items running, this one included; `rate_waited`: the
    /// start came later than the key had an item and room, because its rate said so.
    #[inline]
    pub(crate) fn started(&mut self, _now: u64, running: usize, rate_waited: bool) {
        self.starts = self.starts.saturating_add(1);
        if running >= self.limit() {
            self.round |= LIMIT_BOUND;
        }
        if rate_waited && self.rate > 0.0 {
            self.round |= WAITED;
        }
    }

    /// An attempt started at `started_at` ended at `now`, having taken the server `latency`
    /// (the time it ran, less time it was not polled, as the caller measured it; `None`
    /// when the caller cannot tell, which gives no latency sample and never counts as a
    /// timeout). Only attempts started after the last cut may cut again. Returns whether
    /// [`limit`](Self::limit) or [`rate`](Self::rate) changed.
    #[inline]
    pub(crate) fn finished(
        &mut self,
        config: &Adaptive,
        now: u64,
        outcome: Outcome,
        started_at: u64,
        latency: Option<u64>,
    ) -> bool {
        self.finished_as(config, now, &outcome, started_at, latency)
    }

    /// [`finished`](Self::finished) with the outcome where its owner keeps it (not copied:
    /// a map's end reads only whether it succeeded).
    #[inline]
    pub(crate) fn finished_as(
        &mut self,
        config: &Adaptive,
        now: u64,
        outcome: &Outcome,
        started_at: u64,
        latency: Option<u64>,
    ) -> bool {
        // The values themselves, not the limit and interval they give: a round that moves
        // neither (most ends) then converts nothing.
        let before = (self.limit, self.rate);
        self.follow_config(config);
        self.ends = self.ends.saturating_add(1);
        let after_cut = started_at >= self.last_cut;
        if outcome.is_success() {
            self.round |= SUCCEEDED;
            match latency {
                Some(latency) if latency >= LATENCY_MIN_SAMPLE && after_cut => {
                    self.latency_sum = self.latency_sum.saturating_add(micros(latency));
                    self.latency_count = self.latency_count.saturating_add(1);
                }
                _ => {}
            }
            if self.is_outage_recent(now) && started_at >= self.outage_at {
                // Started after a recent outage answer came, and served.
                self.round |= SERVED_AFTER_OUTAGE;
            }
        } else if outcome.is_overload() || outcome.is_outage() {
            // (Which of the two, not the outcome: a pointer to it passed out of line has the
            // whole outcome copied first, on every end.)
            self.failed(config, now, outcome.is_overload(), after_cut, latency);
        }
        let elapsed = now.saturating_sub(self.round_start);
        let len = self.round_len();
        // (A key that ends fewer attempts than that, held by a low rate, closes its round
        // on time alone once it lasted as many round lengths. The ends needed are read only
        // once the round has lasted long enough.)
        if elapsed >= len
            && (u16::from(self.ends) >= self.ends_needed()
                || (self.ends > 0 && elapsed >= u64::from(ROUND_ENDS) * len))
        {
            self.close_round(config, now, elapsed);
        }
        self.moved_from(before)
    }

    /// The attempts a round ends before it may close (with its time): [`ROUND_ENDS`], or
    /// the limit when lower.
    fn ends_needed(&self) -> u16 {
        ROUND_ENDS.min(u16::try_from(self.limit()).unwrap_or(u16::MAX))
    }

    /// Whether [`limit`](Self::limit) or the rate's [`interval`](Self::interval) differ
    /// from those of the values `before` (the limit and the rate). A value whose bits did
    /// not change gives what it gave: only one that moved is converted and compared.
    #[inline]
    fn moved_from(&self, (limit, rate): (f32, f32)) -> bool {
        (self.limit.to_bits() != limit.to_bits() && limit_of(limit) != self.limit())
            || (self.rate.to_bits() != rate.to_bits() && interval_of(rate) != self.interval())
    }

    /// An overload (`overload`) or else an outage answer ended at `now` an attempt (started
    /// after the last cut when `after_cut`, that took `latency`). Out of line:
    /// [`finished`](Self::finished) is inlined where it is called, and most attempts
    /// succeed.
    #[inline(never)]
    fn failed(
        &mut self,
        config: &Adaptive,
        now: u64,
        overload: bool,
        after_cut: bool,
        latency: Option<u64>,
    ) {
        if overload {
            self.overloaded(config, now, after_cut, latency);
        } else {
            if self.round & SERVED_AFTER_OUTAGE != 0 {
                // Refused, served, refused again: the server refuses some requests and
                // serves others, which is an overload (a server that is out refuses all;
                // one back from an outage refuses none).
                self.overloaded(config, now, after_cut, latency);
            }
            self.outage_at = self.outage_at.max(now);
        }
    }

    /// An overload (of an attempt started after the last cut when `after_cut`, that took
    /// `latency`): the round raises nothing, and its first such overload cuts.
    fn overloaded(&mut self, config: &Adaptive, now: u64, after_cut: bool, latency: Option<u64>) {
        self.flags |= OVERLOADED;
        if self.flags & CUT_DONE == 0 && after_cut {
            let slow = u64::from(self.baseline) * 1_000;
            let slow = ((slow as f32 * LATENCY_HIGH) as u64).max(SLOW_OVERLOAD);
            self.cut(config, now, latency.is_some_and(|latency| latency >= slow));
        }
    }

    /// When its limit or rate was last cut (or set by its owner's control), if ever.
    pub(crate) fn last_cut_at(&self) -> Option<u64> {
        (self.last_cut > 0).then_some(self.last_cut)
    }

    /// How long the key's successful attempts take, in nanoseconds: the mean of the samples
    /// carried so far, or the baseline latency when that is longer (or there are none);
    /// `None` before the first sample.
    #[inline]
    pub(crate) fn latency(&self) -> Option<u64> {
        let current = if self.latency_count > 0 {
            self.latency_sum / u32::from(self.latency_count)
        } else {
            0
        };
        let micros = current.max(self.baseline);
        (micros > 0).then_some(u64::from(micros) * 1_000)
    }

    /// The user set a ceiling for this key (`None`: the configuration's, from the next
    /// [`finished`](Self::finished) on). A lower ceiling takes the values down at once; a
    /// higher one lets them creep up (from the recovery curve's plateau).
    pub(crate) fn set_ceiling(&mut self, limit: Option<usize>, rate: Option<Gcra>) {
        match limit {
            Some(limit) => {
                self.flags |= OWN_LIMIT;
                self.set_limit_ceiling(clamp_ceiling(limit));
            }
            None => self.flags &= !OWN_LIMIT,
        }
        match rate {
            Some(gcra) => {
                self.flags |= OWN_RATE;
                self.set_rate_ceiling(Some(gcra));
            }
            None => self.flags &= !OWN_RATE,
        }
    }

    /// The key's owner moved its current values at `now` (`None`: that value stays as it
    /// is): the limit to `limit`, the rate to `rate`'s starts per second (its burst stays
    /// the ceiling's), each held between its floor and its ceiling. Adaptation goes on from
    /// them as from a fresh episode, not back to where it was: each value set is its
    /// curve's plateau (clean rounds keep it, then creep above it; the next overload cuts
    /// from it), out of slow start, and a new round begins, as after a cut (attempts
    /// started before `now` spoke of the old values: they cut nothing).
    pub(crate) fn set_current(
        &mut self,
        config: &Adaptive,
        now: u64,
        limit: Option<usize>,
        rate: Option<Gcra>,
    ) {
        self.follow_config(config);
        if let Some(limit) = limit {
            let value =
                (clamp_ceiling(limit) as f32).clamp(self.floor(config), self.ceiling as f32);
            self.limit = value;
            (self.limit_w, self.limit_k, self.limit_x) = (value, 0.0, 0);
            self.flags = (self.flags & !SLOW_LIMIT) | CLEAN_LIMIT;
        }
        if let Some(rate) = rate {
            let ceiling = self.rate_ceiling();
            let (interval, _) = Gcra::parts(Some(rate));
            let value = per_second_of(interval).clamp(RATE_FLOOR.min(ceiling), ceiling);
            self.rate = value;
            (self.rate_w, self.rate_k, self.rate_x) = (value, 0.0, 0.0);
            self.flags = (self.flags & !SLOW_RATE) | CLEAN_RATE;
        }
        self.last_cut = now;
        self.round &= !RETURNING;
        self.reset_latency();
        self.new_round(now, 0);
    }

    /// The rate as a GCRA interval in nanoseconds (0: no rate).
    #[inline]
    fn interval(&self) -> u64 {
        interval_of(self.rate)
    }

    /// How long a round lasts at least: the baseline latency, [`ROUND_MIN`] at least.
    #[inline]
    fn round_len(&self) -> u64 {
        (u64::from(self.baseline) * 1_000).max(ROUND_MIN)
    }

    /// The lowest the limit may go: the floor, or the ceiling when the key's own is lower.
    fn floor(&self, config: &Adaptive) -> f32 {
        (config.floor() as f32).min(self.ceiling as f32)
    }

    /// Takes the configuration's ceilings where the key has none of its own.
    #[inline]
    fn follow_config(&mut self, config: &Adaptive) {
        if self.flags & OWN_LIMIT == 0 && self.ceiling as usize != clamp_ceiling(config.ceiling()) {
            self.set_limit_ceiling(clamp_ceiling(config.ceiling()));
        }
        if self.flags & OWN_RATE == 0 {
            let ceiling = config.get_rate_ceiling().map(Gcra::new);
            if Gcra::parts(ceiling) != (self.ceiling_interval, self.burst) {
                self.set_rate_ceiling(ceiling);
            }
        }
    }

    fn set_limit_ceiling(&mut self, ceiling: usize) {
        let ceiling = ceiling as u32;
        let value = ceiling as f32;
        if value < self.limit {
            self.limit = value;
            self.limit_w = self.limit_w.min(value);
        } else if ceiling > self.ceiling && self.limit >= self.ceiling as f32 {
            // The ceiling held the limit: creep up from here, the curve's flat stretch first.
            (self.limit_w, self.limit_k, self.limit_x) = (self.limit, 0.0, 0);
            self.flags &= !SLOW_LIMIT;
        }
        self.ceiling = ceiling;
    }

    fn set_rate_ceiling(&mut self, given: Option<Gcra>) {
        let (interval, burst) = Gcra::parts(given);
        let ceiling = per_second_of(interval);
        let before = self.rate_ceiling();
        if self.rate == 0.0 && self.flags & SLOW_RATE != 0 {
            // A key that has had no rate and no cut starts low under its first ceiling.
            self.rate = initial_rate(ceiling);
        } else if ceiling < self.rate || self.rate == 0.0 {
            self.rate = ceiling;
            self.rate_w = self.rate_w.min(ceiling);
        } else if ceiling > before && self.rate >= before {
            (self.rate_w, self.rate_k, self.rate_x) = (self.rate, 0.0, 0.0);
            self.flags &= !SLOW_RATE;
        }
        (self.ceiling_interval, self.burst) = (interval, burst);
    }

    /// The first overload of a round, of an attempt started after the last cut: cuts the
    /// value that bound the key. The rate, if a start of this round or the last waited
    /// for it; else the limit, if a start of these rounds found it in full use and it is
    /// above its floor; else the rate again (made from the measured start rate if the key
    /// had none: its pace is what is left to blame). Begins a new round.
    fn cut(&mut self, config: &Adaptive, now: u64, slow: bool) {
        let current = self.bound(now);
        let bound = current | (current >> PREVIOUS);
        let floor = self.floor(config);
        let rate_bound = self.rate > 0.0 && bound & RATE_BOUND != 0;
        if slow {
            if self.limit > floor {
                let old = self.limit;
                self.lower_limit(old * CUT, floor);
            }
        } else if !rate_bound && bound & LIMIT_BOUND != 0 && self.limit() as f32 > floor {
            // (The limit in use, not its fraction: a cut that leaves the limit in use where
            // it was would change nothing, and the next overload would find the same pace.)
            let old = self.limit;
            self.lower_limit(old * CUT, floor);
            // A key whose starts were not spaced (no rate, or one far above its use)
            // could have sent a burst: its rate is now at most `BURST_CAP` times its
            // measured pace.
            let cap = (BURST_CAP * self.measured_rate(now)).min(self.rate_ceiling());
            if cap > 0.0 && (self.rate == 0.0 || cap < self.rate) {
                self.rate = cap.max(RATE_FLOOR.min(self.rate_ceiling()));
                self.rate_w = self.rate_w.min(self.rate);
            }
        } else {
            self.cut_rate(now, rate_bound);
        }
        self.last_cut = now;
        self.round &= !RETURNING;
        self.reset_latency();
        self.new_round(now, current);
        self.flags |= CUT_DONE | OVERLOADED;
    }

    /// Lowers the limit to `to` (not below `floor`), its plateau at the value before.
    fn lower_limit(&mut self, to: f32, floor: f32) {
        let mut old = self.limit;
        let mut to = to;
        if self.flags & SLOW_LIMIT != 0 && old > INITIAL_LIMIT && old < self.ceiling as f32 {
            // The end of slow start, as for the rate (`cut_rate`).
            old = (old / LIMIT_SLOW_START_RISE).max(floor);
            to = to.min(old * CUT);
        }
        self.limit_w = if self.flags & (CLEAN_LIMIT | SLOW_LIMIT) != 0 {
            old
        } else {
            self.limit_w.max(old)
        };
        self.limit = to.max(floor).min(old);
        self.limit_k =
            plateau_distance(self.limit, self.limit_w) * limit_recovery_rounds(self.limit_w);
        self.limit_x = 0;
        self.flags &= !(SLOW_LIMIT | CLEAN_LIMIT);
    }

    /// Cuts the rate: from itself if it bound the key (`bound`), else from the lower of
    /// itself and the measured start rate (a rate far above what the key used would not
    /// slow it down).
    fn cut_rate(&mut self, now: u64, bound: bool) {
        let measured = self.measured_rate(now);
        let current = match (self.rate > 0.0, measured > 0.0) {
            (true, _) if bound => self.rate,
            (true, true) => self.rate.min(measured),
            (true, false) => self.rate,
            (false, _) => measured,
        };
        let floor = RATE_FLOOR.min(self.rate_ceiling());
        let mut current = current.max(floor);
        let exiting = bound
            && self.flags & SLOW_RATE != 0
            && current > initial_rate(self.rate_ceiling())
            && current < self.rate_ceiling();
        if exiting {
            // The end of slow start: the rate rose into this overload from a value one rise
            // lower that was clean; the cut and the plateau start from the clean one.
            current = (current / RATE_SLOW_START_RISE).max(floor);
        }
        self.rate_w = if self.flags & (CLEAN_RATE | SLOW_RATE) != 0 {
            current
        } else {
            self.rate_w.max(current)
        };
        // Refused at the pace it started with, before any rise: the server's pace is
        // anywhere below, and a cut by `CUT` alone would often be refused again.
        let initial =
            !exiting && self.flags & SLOW_RATE != 0 && current <= initial_rate(self.rate_ceiling());
        let cut = if initial { INITIAL_CUT } else { CUT };
        self.rate = (current * cut).max(floor).min(self.rate_ceiling());
        self.rate_k = plateau_distance(self.rate, self.rate_w) * rate_recovery_secs(self.rate_w);
        self.rate_x = 0.0;
        self.flags &= !(SLOW_RATE | CLEAN_RATE);
        if !initial {
            self.hold_pace(now);
        }
    }

    /// Folds the plateau of a cut into the pace the rate held lately: a share of the
    /// plateau (where the overload came, so a little below it held), or more while the
    /// pace held before fades towards it, by half every [`HELD_PACE_HALF_LIFE`].
    fn hold_pace(&mut self, now: u64) {
        let plateau = self.rate_w * HELD_PACE_SHARE;
        let since = now.saturating_sub(self.last_cut) as f32 / SEC as f32;
        let fade = 0.5f32.powf(since / HELD_PACE_HALF_LIFE);
        let held = plateau + (self.held_pace() - plateau).max(0.0) * fade;
        self.held_pace = encode_pace(held);
    }

    /// The pace the rate held lately, in starts per second (0: none yet).
    fn held_pace(&self) -> f32 {
        decode_pace(self.held_pace)
    }

    /// Starts per second lately: the moving average over rounds, or this round's so far.
    fn measured_rate(&self, now: u64) -> f32 {
        if self.measured > 0.0 {
            return self.measured;
        }
        let elapsed = now.saturating_sub(self.round_start).max(ROUND_MIN);
        self.starts as f32 * SEC as f32 / elapsed as f32
    }

    fn close_round(&mut self, config: &Adaptive, now: u64, elapsed: u64) {
        let bound = self.bound(now);
        if elapsed > STALE_ROUND {
            self.new_round(now, 0);
            return;
        }
        let round_rate = self.starts as f32 * SEC as f32 / elapsed.max(1) as f32;
        self.measured = if self.measured > 0.0 {
            MEASURED_WEIGHT * round_rate + (1.0 - MEASURED_WEIGHT) * self.measured
        } else {
            round_rate
        };
        if self.flags & OVERLOADED == 0 && self.round & SUCCEEDED != 0 {
            self.flags |= CLEAN_LIMIT | CLEAN_RATE;
            match self.latency_verdict() {
                Latency::High(mean) => {
                    let floor = self.floor(config);
                    let old = self.limit;
                    let to = (old * self.baseline as f32 / mean as f32).min(old - 1.0);
                    if to.max(floor) < old {
                        self.lower_limit(to, floor);
                        self.last_cut = now;
                    }
                }
                Latency::Hold => {}
                Latency::Calm | Latency::Unknown => {
                    if bound & LIMIT_BOUND != 0 {
                        self.raise_limit();
                    }
                    if bound & RATE_BOUND != 0 && self.rate > 0.0 {
                        self.raise_rate(now, elapsed);
                    }
                }
            }
        }
        let at_floor = self.limit <= self.floor(config);
        self.floor_rounds = if at_floor {
            self.floor_rounds.saturating_add(1)
        } else {
            0
        };
        self.new_round(now, bound);
    }

    /// The verdict of the latency samples carried so far, which it consumes (and the
    /// baseline it moves) once there are [`LATENCY_SAMPLES`].
    fn latency_verdict(&mut self) -> Latency {
        if self.latency_count < LATENCY_SAMPLES {
            self.latency_rounds = self.latency_rounds.saturating_add(1);
            if self.latency_rounds >= LATENCY_CARRY_ROUNDS {
                self.reset_latency();
            }
            return Latency::Unknown;
        }
        let mean = self.latency_sum / u32::from(self.latency_count);
        self.reset_latency();
        if self.baseline == 0 || self.floor_rounds >= REMEASURE_ROUNDS {
            self.baseline = mean.max(1);
            return Latency::Calm;
        }
        let baseline = self.baseline as f32;
        let verdict = if mean as f32 > baseline * LATENCY_HIGH {
            Latency::High(mean)
        } else if mean as f32 <= baseline * LATENCY_CALM {
            Latency::Calm
        } else {
            Latency::Hold
        };
        self.baseline = self.baseline.min(mean.max(1));
        verdict
    }

    fn raise_limit(&mut self) {
        self.limit_x = self.limit_x.saturating_add(1);
        let target = if self.flags & SLOW_LIMIT != 0 {
            self.limit * LIMIT_SLOW_START_RISE
        } else {
            recovery(
                self.limit_w,
                self.limit_k,
                f32::from(self.limit_x),
                limit_recovery_rounds(self.limit_w),
            )
        };
        self.limit = target
            .min(self.limit * MAX_RISE)
            .min(self.ceiling as f32)
            .max(self.limit);
    }

    fn raise_rate(&mut self, now: u64, elapsed: u64) {
        self.rate_x += elapsed as f32 / SEC as f32;
        let target = if self.flags & SLOW_RATE != 0 {
            self.rate * RATE_SLOW_START_RISE
        } else {
            let curve = recovery(
                self.rate_w,
                self.rate_k,
                self.rate_x,
                rate_recovery_secs(self.rate_w),
            );
            let since = now.saturating_sub(self.last_cut);
            if since >= RETURN_AFTER && self.rate < RETURN_BELOW * self.held_pace() {
                // Far below the pace it held lately, and no cut for a while: the server
                // may have come back from a slower spell. Climb until the next cut.
                self.round |= RETURNING;
            }
            // A long stretch without a cut, in time and in starts (exploring finds nothing
            // new at the cost of a refusal, a share of the starts in between): the server
            // may take more than the plateau says; explore upward.
            let exploring = since >= EXPLORE_AFTER
                && since as f32 / SEC as f32 * self.measured >= EXPLORE_STARTS;
            if exploring || self.round & RETURNING != 0 {
                curve.max(self.rate * CLIMB)
            } else {
                curve
            }
        };
        self.rate = target
            .min(self.rate * MAX_RISE)
            .min(self.rate_ceiling())
            .max(self.rate);
    }

    /// What bound the key in the current round (its low bits: the limit if a start found
    /// it in full use; the rate if a start waited for it and the round's starts came at
    /// [`RATE_BOUND_PACE`] of it or more, over [`ROUND_MIN`] at least) and in the previous
    /// one (the same bits, shifted by [`PREVIOUS`]).
    /// Whether an outage answer came within the last [`OUTAGE_RECENT`] round lengths: an
    /// attempt started after it has had the time to come back.
    #[inline]
    fn is_outage_recent(&self, now: u64) -> bool {
        self.outage_at > 0 && now.saturating_sub(self.outage_at) <= OUTAGE_RECENT * self.round_len()
    }

    fn bound(&self, now: u64) -> u8 {
        let mut bound = self.round & BOUND;
        let elapsed = now.saturating_sub(self.round_start).max(ROUND_MIN) as f32 / SEC as f32;
        let pace = (self.starts as f32 + 1.0) / elapsed;
        if self.round & WAITED != 0 && pace >= RATE_BOUND_PACE * self.rate {
            bound |= RATE_BOUND;
        }
        bound
    }

    fn reset_latency(&mut self) {
        (self.latency_sum, self.latency_count, self.latency_rounds) = (0, 0, 0);
    }

    /// Begins a round at `now`; `bound` is what bound the key in the one that ends (as
    /// [`bound`](Self::bound) read it before any value moved).
    fn new_round(&mut self, now: u64, bound: u8) {
        let bound = bound & (LIMIT_BOUND | RATE_BOUND);
        // What was served after a recent outage answer is remembered while it is recent.
        let served = if self.is_outage_recent(now) {
            self.round & SERVED_AFTER_OUTAGE
        } else {
            0
        };
        self.round = bound << PREVIOUS | served | self.round & RETURNING;
        self.round_start = now;
        (self.starts, self.ends) = (0, 0);
        self.flags &= !(OVERLOADED | CUT_DONE);
    }
}

/// The recovery curve: `w` at `x = k`, the cut value at `x = 0`, flat near `k`, rising ever
/// faster beyond it; `k0` is the distance a cut by [`CUT`] puts between the two.
fn recovery(w: f32, k: f32, x: f32, k0: f32) -> f32 {
    w * (1.0 + (1.0 - CUT) * ((x - k) / k0).powi(RECOVERY_EXPONENT))
}

/// How far (in units of a cut by [`CUT`]'s distance) the curve's plateau `w` lies from `v`.
fn plateau_distance(v: f32, w: f32) -> f32 {
    if w <= v {
        return 0.0;
    }
    ((1.0 - v / w) / (1.0 - CUT)).powf(1.0 / RECOVERY_EXPONENT as f32)
}

/// Limit-bound rounds a limit cut from `w` takes to come back: about
/// [`LIMIT_RECOVERY_STARTS`] starts (a round sees about `w`), [`LIMIT_RECOVERY_ROUNDS`] at
/// least.
fn limit_recovery_rounds(w: f32) -> f32 {
    (LIMIT_RECOVERY_STARTS / w.max(1.0)).max(LIMIT_RECOVERY_ROUNDS)
}

/// Seconds of rate-bound time a rate cut from `w` takes to come back:
/// [`RATE_RECOVERY_STARTS`] starts at that rate, within the bounds.
fn rate_recovery_secs(w: f32) -> f32 {
    (RATE_RECOVERY_STARTS / w.max(f32::MIN_POSITIVE))
        .clamp(RATE_RECOVERY_MIN_SECS, RATE_RECOVERY_MAX_SECS)
}

/// A new key's rate under `ceiling` (0: no ceiling, no rate).
fn initial_rate(ceiling: f32) -> f32 {
    if ceiling.is_finite() {
        INITIAL_RATE.min(ceiling)
    } else {
        0.0
    }
}

/// The limit a key's value `limit` gives: its integer part, at least 1.
#[inline]
fn limit_of(limit: f32) -> usize {
    // (`as` truncates and saturates. The value is at most the ceiling, below 2^32: through
    // `u32` it converts the same, in fewer instructions than straight to `usize`.)
    (limit as u32 as usize).max(1)
}

/// The GCRA interval in nanoseconds of a rate of `rate` starts per second (0: no rate).
#[inline]
fn interval_of(rate: f32) -> u64 {
    if rate > 0.0 {
        ((1e9 / f64::from(rate)) as u64).max(1)
    } else {
        0
    }
}

fn clamp_ceiling(ceiling: usize) -> usize {
    ceiling.min(MAX_CEILING)
}

/// Starts per second at one start per `interval`.
fn per_second(interval: Duration) -> f32 {
    (1.0 / interval.as_secs_f64()) as f32
}

/// A rate ceiling of `interval` nanoseconds (0: none) in starts per second (infinite:
/// none).
fn per_second_of(interval: u64) -> f32 {
    if interval > 0 {
        per_second(Duration::from_nanos(interval))
    } else {
        f32::INFINITY
    }
}

/// Steps per octave of an encoded pace.
const PACE_STEPS: f32 = 2048.0;
/// The octaves below one start per second an encoded pace reaches (2^-16 per second).
const PACE_OCTAVES_BELOW: f32 = 16.0;

/// A pace in starts per second in two bytes, on a log scale: 1/2048 of an octave per step
/// (0.03%) from 2^-16 to 2^16 per second (clamped), 0 for none.
fn encode_pace(per_second: f32) -> u16 {
    if per_second <= 0.0 || per_second.is_nan() {
        return 0;
    }
    let steps = (per_second.log2() + PACE_OCTAVES_BELOW) * PACE_STEPS;
    // (`as` saturates: above the range is the highest step.)
    (steps.round() as u16).max(1)
}

/// The pace [`encode_pace`] kept.
fn decode_pace(encoded: u16) -> f32 {
    if encoded == 0 {
        return 0.0;
    }
    (f32::from(encoded) / PACE_STEPS - PACE_OCTAVES_BELOW).exp2()
}

fn micros(nanos: u64) -> u32 {
    u32::try_from(nanos / 1_000).unwrap_or(u32::MAX)
}

#[cfg(test)]
impl KeyAdapt {
    /// [`finished`](Self::finished) for an attempt of known `latency` that started then.
    pub(crate) fn finished_after(
        &mut self,
        config: &Adaptive,
        now: u64,
        outcome: Outcome,
        latency: u64,
    ) -> bool {
        let started_at = now.saturating_sub(latency);
        self.finished(config, now, outcome, started_at, Some(latency))
    }
}

#[cfg(test)]
#[path = "core_tests.rs"]
mod tests;
