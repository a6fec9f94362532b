//! What tollgate tells a `tracing` subscriber, with the `tracing` feature.
//!
//! Every event has the target `tollgate` and a `message` naming what happened; the other
//! fields are plain numbers and short static strings, so a subscriber can filter and count
//! them (`RUST_LOG=tollgate=debug`). Retries, hedges, rejections and time-outs are
//! `DEBUG` (a bulk run makes many); a key's pause is `INFO` (a server asked the whole key to
//! back off, which an operator wants to see).
//!
//! Without the feature each function is empty and inlined away, and `tracing` is not a
//! dependency at all.

use std::time::Duration;

/// Why a retry waits before its next attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RetryReason {
    /// The attempt failed with an error the policy retries.
    Error,
    /// The attempt ran out of its `attempt_timeout`.
    AttemptTimedOut,
    /// The attempt failed and the server said how long to wait (`Retry-After`).
    RetryAfter,
}

impl RetryReason {
    #[cfg_attr(not(feature = "tracing"), allow(dead_code))]
    fn as_str(self) -> &'static str {
        match self {
            Self::Error => "error",
            Self::AttemptTimedOut => "attempt timed out",
            Self::RetryAfter => "retry-after",
        }
    }
}

/// Attempt `attempt_number` failed and another follows after `pause`.
#[inline(always)]
pub(crate) fn retry(attempt_number: u32, pause: Duration, reason: RetryReason) {
    #[cfg(feature = "tracing")]
    tracing::debug!(
        target: "tollgate",
        attempt_number,
        pause_ms = millis(pause),
        reason = reason.as_str(),
        "retry"
    );
    #[cfg(not(feature = "tracing"))]
    let _ = (attempt_number, pause, reason);
}

/// An attempt's end paused its whole key for `pause`: its retry policy's `pause_key` read
/// it from the error (`source` = `"pause_key"`), or the attempt's outcome carried a server's
/// hint with a pause (`source` = `"hint"`). `attempt_number` is that attempt's.
#[inline(always)]
pub(crate) fn key_paused(attempt_number: u32, pause: Duration, source: &'static str) {
    #[cfg(feature = "tracing")]
    tracing::info!(
        target: "tollgate",
        attempt_number,
        pause_ms = millis(pause),
        source,
        "key paused"
    );
    #[cfg(not(feature = "tracing"))]
    let _ = (attempt_number, pause, source);
}

/// A key of an adaptive map moved its limit or its rate (`None`: no rate).
#[inline(always)]
pub(crate) fn key_adapted(limit: usize, rate_per_second: Option<f64>) {
    #[cfg(feature = "tracing")]
    tracing::debug!(
        target: "tollgate",
        limit,
        rate_per_second,
        "key adapted"
    );
    #[cfg(not(feature = "tracing"))]
    let _ = (limit, rate_per_second);
}

/// A circuit breaker changed state (`from` and `to`: "closed", "open", "half-open"), for
/// `key` (its `Debug` form) when it is a keyed breaker's: `failure_ratio` and `attempts` are
/// the window's figures that opened it (or the probes' so far), `open_for` the open period
/// it starts (zero unless `to` is open). The move from open to half-open is seen, and
/// reported, by the first ask after the open period. `INFO`: an operator wants to see a
/// host cut off.
#[inline(always)]
pub(crate) fn breaker_transition(
    key: Option<&dyn std::fmt::Debug>,
    from: &'static str,
    to: &'static str,
    failure_ratio: f64,
    attempts: u32,
    open_for: Duration,
) {
    #[cfg(feature = "tracing")]
    match key {
        Some(key) => tracing::info!(
            target: "tollgate",
            ?key,
            from,
            to,
            failure_ratio,
            attempts,
            open_for_ms = millis(open_for),
            "circuit breaker"
        ),
        None => tracing::info!(
            target: "tollgate",
            from,
            to,
            failure_ratio,
            attempts,
            open_for_ms = millis(open_for),
            "circuit breaker"
        ),
    }
    #[cfg(not(feature = "tracing"))]
    let _ = (key, from, to, failure_ratio, attempts, open_for);
}

/// A hedged race started contestant `index` (0-based): nobody had won within the delay, or
/// every contestant started before had failed (`after_failures`).
#[inline(always)]
pub(crate) fn hedge(index: usize, after_failures: bool) {
    #[cfg(feature = "tracing")]
    tracing::debug!(
        target: "tollgate",
        contestant = index,
        reason = if after_failures { "every started contestant failed" } else { "hedge delay passed" },
        "hedge"
    );
    #[cfg(not(feature = "tracing"))]
    let _ = (index, after_failures);
}

/// A limiter refused a permit; `reason` says why (its `Debug` form: `QueueFull`, `TimedOut`).
#[inline(always)]
pub(crate) fn rejected(name: Option<&str>, limit: usize, reason: &dyn std::fmt::Debug) {
    #[cfg(feature = "tracing")]
    tracing::debug!(
        target: "tollgate",
        name = name.unwrap_or(""),
        limit,
        ?reason,
        "rejected"
    );
    #[cfg(not(feature = "tracing"))]
    let _ = (name, limit, reason);
}

/// A time limit ran out: `what` is the operation (`"timeout"`, `"retry"`, `"race"`).
#[inline(always)]
pub(crate) fn timed_out(what: &'static str, after: Duration) {
    #[cfg(feature = "tracing")]
    tracing::debug!(
        target: "tollgate",
        operation = what,
        after_ms = millis(after),
        "timed out"
    );
    #[cfg(not(feature = "tracing"))]
    let _ = (what, after);
}

#[cfg(feature = "tracing")]
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// A keyed map's shared limits said they grant nothing for `remaining` yet: a store
/// warming up after it may have lost the permits it granted. Once a warm-up: when the map
/// first hears of it, and not again before a grant.
#[inline(always)]
pub(crate) fn shared_limits_warming_up(remaining: Duration) {
    #[cfg(feature = "tracing")]
    tracing::info!(
        target: "tollgate",
        remaining_ms = millis(remaining),
        "shared limits warming up"
    );
    #[cfg(not(feature = "tracing"))]
    let _ = remaining;
}
