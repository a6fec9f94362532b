//! The judges of a pace: [`RateMeter`] (a server's own rate limit) and the sliding-window
//! counts over a log of arrival instants. Reached through [`http_server`](crate::http_server),
//! whose module docs say how they are used.

use std::time::{Duration, Instant};

/// The most instants of `times` that fit in any window `[t, t + window)`.
///
/// `times` need not be sorted. An empty list gives 0; a zero window gives 0.
pub fn max_in_window(times: &[Instant], window: Duration) -> usize {
    let mut sorted = times.to_vec();
    sorted.sort_unstable();
    let mut best = 0;
    let mut first = 0;
    for (last, &at) in sorted.iter().enumerate() {
        // The window ends just after `at`: drop from its front what is `window` or more
        // before `at` (all of it, `at` included, for a zero window).
        while first <= last && at.duration_since(sorted[first]) >= window {
            first += 1;
        }
        best = best.max(last + 1 - first);
    }
    best
}

/// How many instants of `times` fall in `[from, until)`.
pub fn count_between(times: &[Instant], from: Instant, until: Instant) -> usize {
    times.iter().filter(|&&at| from <= at && at < until).count()
}

/// The mean rate between the first and the last of `times`, in requests per second:
/// `(n - 1) / (last - first)`. `None` for fewer than two instants or when they all coincide.
pub fn achieved_rate(times: &[Instant]) -> Option<f64> {
    let first = times.iter().min()?;
    let last = times.iter().max()?;
    let span = last.duration_since(*first).as_secs_f64();
    (times.len() >= 2 && span > 0.0).then(|| (times.len() - 1) as f64 / span)
}

/// The most requests `per_second` with `burst` lets into any window of length `window`:
/// `burst + floor(per_second × window)`.
///
/// What a host's meter accepts keeps within `window_limit(per_second, burst, window +
/// allowance)`, since each request may be up to the allowance early.
pub fn window_limit(per_second: f64, burst: u32, window: Duration) -> usize {
    burst as usize + (per_second * window.as_secs_f64()).floor() as usize
}

/// The server's own judge of a rate: `per_second` requests with bursts of up to `burst`,
/// each request allowed to be up to `allowance` early (see the
/// [`http_server`](crate::http_server) module docs).
///
/// Kept apart from tollgate's limiters on purpose: it is what they are measured against.
/// Public so that a test can replay a list of instants through it ([`RateMeter::replay`]).
#[derive(Clone, Debug)]
pub struct RateMeter {
    interval: Duration,
    /// How far ahead of a request's own slot the schedule may run: `(burst - 1) × interval`.
    tolerance: Duration,
    allowance: Duration,
    /// The theoretical arrival time of the next request on an even pace; `None` before
    /// the first request.
    schedule: Option<Instant>,
}

impl RateMeter {
    /// A meter for `per_second` requests per second with bursts of up to `burst`.
    ///
    /// # Panics
    ///
    /// If `per_second` is not finite and positive, or `burst` is 0.
    #[track_caller]
    pub fn new(per_second: f64, burst: u32, allowance: Duration) -> Self {
        assert!(
            per_second.is_finite() && per_second > 0.0,
            "rate {per_second} must be finite and positive"
        );
        assert!(burst >= 1, "burst must be at least 1");
        let interval = Duration::from_secs_f64(1.0 / per_second);
        Self {
            interval,
            tolerance: interval * (burst - 1),
            allowance,
            schedule: None,
        }
    }

    /// Judges a request arriving at `now`: `Ok` if it is on time (the schedule moves on by
    /// one interval), or `Err(wait)` with how much sooner than allowed it came (the schedule
    /// stays), where `wait > allowance`.
    ///
    /// Instants should come in order; one a little out of order is judged as if it came
    /// with the latest so far.
    pub fn admit(&mut self, now: Instant) -> Result<(), Duration> {
        let early = self.earliness(now);
        if early > self.allowance {
            return Err(early);
        }
        self.schedule = Some(self.schedule.unwrap_or(now).max(now) + self.interval);
        Ok(())
    }

    /// How much sooner than its slot a request at `now` comes (zero if on time or late).
    fn earliness(&self, now: Instant) -> Duration {
        // On time if `now >= schedule - tolerance`, written without subtracting from an
        // `Instant`.
        self.schedule.map_or(Duration::ZERO, |schedule| {
            schedule
                .saturating_duration_since(now)
                .saturating_sub(self.tolerance)
        })
    }

    /// Runs `times` (in order) through a fresh copy of this meter and returns the most any
    /// of them came early: how much of the allowance the closest call used (more than the
    /// allowance if one was refused). A test prints it to show its margin.
    pub fn most_early(&self, times: &[Instant]) -> Duration {
        let mut meter = Self {
            schedule: None,
            ..self.clone()
        };
        times
            .iter()
            .map(|&at| {
                let early = meter.earliness(at);
                let _ = meter.admit(at);
                early
            })
            .max()
            .unwrap_or(Duration::ZERO)
    }

    /// Runs `times` (in order) through a fresh copy of this meter and returns how many it
    /// refuses.
    pub fn replay(&self, times: &[Instant]) -> usize {
        let mut meter = Self {
            schedule: None,
            ..self.clone()
        };
        times.iter().filter(|&&at| meter.admit(at).is_err()).count()
    }

    /// The spacing of requests on an even pace: `1 / per_second`.
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// The most requests at once after a quiet spell.
    pub fn burst(&self) -> u32 {
        (self.tolerance.as_secs_f64() / self.interval.as_secs_f64()).round() as u32 + 1
    }

    /// How many requests in a row the meter would take at `now`, without the allowance
    /// (0 to [`burst`](Self::burst)): a rate-limit field's "remaining".
    pub fn remaining(&self, now: Instant) -> u32 {
        let Some(schedule) = self.schedule else {
            return self.burst();
        };
        // The n-th request in a row is on time if `schedule + (n - 1) × interval <=
        // now + tolerance`.
        let Some(room) = (now + self.tolerance).checked_duration_since(schedule) else {
            return 0;
        };
        let more = room.as_nanos() / self.interval.as_nanos().max(1);
        u32::try_from(more + 1)
            .unwrap_or(u32::MAX)
            .min(self.burst())
    }

    /// How long from `now` until the meter would take its whole burst again: a rate-limit
    /// field's "reset".
    pub fn until_full(&self, now: Instant) -> Duration {
        self.schedule.map_or(Duration::ZERO, |schedule| {
            schedule.saturating_duration_since(now)
        })
    }

    /// Meters `per_second` from now on (the burst stays); the schedule is kept, so a
    /// client that keeps its old pace is refused from the next request.
    pub fn set_rate(&mut self, per_second: f64) {
        let burst = self.burst();
        self.interval = Duration::from_secs_f64(1.0 / per_second);
        self.tolerance = self.interval * (burst - 1);
    }
}
