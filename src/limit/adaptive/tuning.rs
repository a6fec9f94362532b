//! Every constant of the adaptive core, in one place, so the simulator can tune them.
//! Times are nanoseconds; rates are starts per second; ratios are plain factors. The rules
//! that use them are written out in [`Adaptive`](super::config::Adaptive)'s docs: keep the
//! two in step.

/// One millisecond, in nanoseconds.
pub(super) const MS: u64 = 1_000_000;

/// One second, in nanoseconds.
pub(super) const SEC: u64 = 1_000_000_000;

/// The limit a new key starts at (then raised to the floor, lowered to the ceiling): 1, so a
/// key starts at its floor and a host that never answers holds no more than that.
pub(super) const INITIAL_LIMIT: f32 = 1.0;

/// A new key's rate, in starts per second (or its rate ceiling, when that is lower): low
/// enough for most servers, whatever the ceiling (the ceiling's sixteenth was measured
/// worse with high ceilings; 5/s was above many slow hosts, and each refused its first
/// requests).
pub(super) const INITIAL_RATE: f32 = 1.8;

/// The lowest rate an overload can cut a key to, in starts per second (or its ceiling, when
/// that is lower): one start every ten seconds keeps probing a server that refuses all.
pub(super) const RATE_FLOOR: f32 = 0.1;

/// A round lasts at least this long (and at least the key's baseline latency) ...
pub(super) const ROUND_MIN: u64 = 100 * MS;

/// ... and until this many attempts ended in it (or the key's limit, when that is lower; or
/// one, once it lasted this many times its least length: a key held by a low rate).
pub(super) const ROUND_ENDS: u16 = 4;

/// A round that lasted longer than this (a key idle in between) closes without deciding
/// anything: what it saw is too old to act on.
pub(super) const STALE_ROUND: u64 = 60 * SEC;

/// An overload multiplies the value it cuts by this.
pub(super) const CUT: f32 = 0.7;

/// Before its first cut, a limit that bound its key during a clean round grows by this
/// factor (slow start). Its first cut starts from the value one rise before (the last clean
/// one).
pub(super) const LIMIT_SLOW_START_RISE: f32 = 1.5;

/// The same for the rate, by a smaller factor: a key's rate in slow start crosses its
/// host's pace by up to this factor, and a host that meters starts strictly refuses every
/// start above its pace (1.5 took two cuts and a few refusals per host).
pub(super) const RATE_SLOW_START_RISE: f32 = 1.15;

/// No round raises a value by more than this factor.
pub(super) const MAX_RISE: f32 = 1.5;

/// The exponent of the recovery curve after a cut: 3 is cubic (back to the value of the
/// last overload quickly, a long flat stretch near it, then faster and faster away from
/// it), 1 is a straight line (additive increase).
pub(super) const RECOVERY_EXPONENT: i32 = 3;

/// A limit cut by [`CUT`] is back at its value before the cut after this many clean rounds
/// in which it bound the key.
pub(super) const LIMIT_RECOVERY_ROUNDS: f32 = 8.0;

/// ... and after about this many starts (a limit-bound round sees about as many starts
/// as the limit), when that is more rounds.
pub(super) const LIMIT_RECOVERY_STARTS: f32 = 50.0;

/// An overload that took this long at least (and [`LATENCY_HIGH`] times the baseline) is
/// slow: an attempt timeout, a queue that overflowed. It speaks of what ran at once, and
/// cuts the limit alone (nothing, at the floor), whatever else bound the key.
pub(super) const SLOW_OVERLOAD: u64 = SEC;

/// A rate cut by [`CUT`] is back at its value before the cut after about this many starts
/// made while the rate bound the key ...
pub(super) const RATE_RECOVERY_STARTS: f32 = 400.0;

/// ... but after no less than this many seconds of such time ...
pub(super) const RATE_RECOVERY_MIN_SECS: f32 = 2.0;

/// ... and no more than this many.
pub(super) const RATE_RECOVERY_MAX_SECS: f32 = 480.0;

/// A rate that has gone this long without a cut, and [`EXPLORE_STARTS`] starts, explores
/// upward, whatever the recovery curve says: by [`CLIMB`] per clean round in which it bound
/// the key.
pub(super) const EXPLORE_AFTER: u64 = 60 * SEC;

/// ... and this many starts (estimated from the measured start rate): exploring a server
/// that is as it was costs about one refusal, so it comes at most once per this many starts
/// (about 0.25% of them). Without it, hosts of 1-2 starts a second paid 1% for exploring
/// every minute.
pub(super) const EXPLORE_STARTS: f32 = 400.0;

/// Exploring ([`EXPLORE_AFTER`]) and returning ([`RETURN_AFTER`]) raise the rate by this
/// factor per clean round in which it bound the key.
pub(super) const CLIMB: f32 = 1.1;

/// The first cut of a rate refused at the pace it started with, before any rise: the
/// server's pace is anywhere below, and a cut by [`CUT`] alone was often refused again.
pub(super) const INITIAL_CUT: f32 = 0.5;

/// The pace a rate held lately: this share of each cut's plateau (where the overload came:
/// a little below it held) ...
pub(super) const HELD_PACE_SHARE: f32 = 0.9;

/// ... or more while the pace held before fades towards it, by half every this many
/// seconds (a server slower for good stops drawing the rate back up within minutes).
pub(super) const HELD_PACE_HALF_LIFE: f32 = 600.0;

/// A rate below this share of the pace it held lately (a deep cut: a server that became
/// slower, or refused in a burst), once it has gone [`RETURN_AFTER`] without a cut, climbs
/// back by [`CLIMB`] per clean round until its next cut, whatever the recovery curve
/// says: a server back from a slower spell is found within about that long, and one still
/// slow costs a refusal per return. Regular cuts (by [`CUT`], from just above the pace
/// held) stay above it.
pub(super) const RETURN_BELOW: f32 = 0.55;

/// See [`RETURN_BELOW`].
pub(super) const RETURN_AFTER: u64 = 30 * SEC;

/// A latency verdict needs this many samples (successes of attempts started since the last
/// cut); fewer are carried into the next round.
pub(super) const LATENCY_SAMPLES: u16 = 8;

/// Samples carried over this many rounds without reaching [`LATENCY_SAMPLES`] are dropped.
pub(super) const LATENCY_CARRY_ROUNDS: u8 = 32;

/// A success faster than this is no latency sample (an answer from a cache or an error page
/// says nothing about the server's queue, and would pull the baseline down).
pub(super) const LATENCY_MIN_SAMPLE: u64 = MS;

/// Mean latency above the baseline times this: the server is queueing, the limit is cut to
/// `limit * baseline / mean` (by 1 at least).
pub(super) const LATENCY_HIGH: f32 = 1.5;

/// Mean latency at most the baseline times this: calm, the limit may rise. Between the two,
/// the limit holds.
pub(super) const LATENCY_CALM: f32 = 1.25;

/// A limit at its floor for this many rounds takes the next mean latency as its baseline,
/// even a higher one (a server that became slower for good must not pin the limit down).
pub(super) const REMEASURE_ROUNDS: u8 = 3;

/// The rate bound the key in a round when a start waited for it and the round's starts
/// came at this share of the rate or more.
pub(super) const RATE_BOUND_PACE: f32 = 0.8;

/// A limit cut while the key's starts were not spaced by its rate (it had none, or one far
/// above its use) caps the rate at this many times the measured start rate: a burst may
/// be what the server refused.
pub(super) const BURST_CAP: f32 = 4.0;

/// The weight of the latest round in the measured start rate (a moving average).
pub(super) const MEASURED_WEIGHT: f32 = 0.8;
