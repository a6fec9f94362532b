//! The retry policy: how many attempts, how long each may take, how long to pause between
//! them (fixed or exponential backoff, with jitter), and the bound on the whole retry.
//!
//! Arithmetic, no timers: the future in `mod.rs` asks [`Policy::pause`] for the next pause
//! and sleeps it. Also the setters `Retry` and `RetryPolicy` share (`policy_setters!`),
//! written once next to the `Policy` both hold.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::time::Duration;

use crate::runtime::now;

/// Default number of attempts (the first try included).
const DEFAULT_ATTEMPTS: u32 = 3;
/// Default first pause of the exponential backoff.
const DEFAULT_INITIAL: Duration = Duration::from_millis(100);
/// Default growth factor of the exponential backoff.
const DEFAULT_FACTOR: f64 = 2.0;
/// Default longest pause of the exponential backoff.
const DEFAULT_MAX: Duration = Duration::from_secs(10);
/// Default jitter of an exponential backoff (a fixed interval has none).
const DEFAULT_JITTER: f64 = 0.5;

/// How long to wait between attempts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Pause {
    Fixed(Duration),
    Backoff {
        initial: Duration,
        factor: f64,
        max: Duration,
    },
}

/// Everything the builder sets; the future reads it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Policy {
    pub(super) attempts: u32,
    /// Bounds each attempt.
    pub(super) attempt_timeout: Option<Duration>,
    pub(super) pause: Pause,
    /// `None`: the default for the kind of pause.
    pub(super) jitter: Option<f64>,
    /// Bounds the whole retry, from its first poll.
    pub(super) timeout: Option<Duration>,
}

impl Policy {
    pub(super) const DEFAULT: Self = Self {
        attempts: DEFAULT_ATTEMPTS,
        attempt_timeout: None,
        pause: Pause::Backoff {
            initial: DEFAULT_INITIAL,
            factor: DEFAULT_FACTOR,
            max: DEFAULT_MAX,
        },
        jitter: None,
        timeout: None,
    };

    /// Sets the number of attempts; the one check for `retry` and `RetryPolicy` alike.
    #[track_caller]
    pub(super) fn set_attempts(&mut self, attempts: u32) {
        assert!(
            attempts > 0,
            "retry needs at least 1 attempt, got .attempts(0)"
        );
        self.attempts = attempts;
    }

    /// Sets a fixed pause between attempts.
    pub(super) fn set_interval(&mut self, interval: Duration) {
        self.pause = Pause::Fixed(interval);
    }

    /// Sets an exponential backoff, after checking its factor.
    #[track_caller]
    pub(super) fn set_backoff(&mut self, initial: Duration, factor: f64, max: Duration) {
        assert!(
            factor.is_finite() && factor >= 1.0,
            "retry backoff factor must be finite and at least 1, got {factor}"
        );
        self.pause = Pause::Backoff {
            initial,
            factor,
            max,
        };
    }

    /// Sets the jitter, after checking it is a fraction.
    #[track_caller]
    pub(super) fn set_jitter(&mut self, fraction: f64) {
        assert!(
            (0.0..=1.0).contains(&fraction),
            "retry jitter must be within 0.0..=1.0, got {fraction}"
        );
        self.jitter = Some(fraction);
    }

    /// The pause after the `failures`-th failed attempt (1-based), before jitter.
    fn base_pause(&self, failures: u32) -> Duration {
        match self.pause {
            Pause::Fixed(pause) => pause,
            Pause::Backoff {
                initial,
                factor,
                max,
            } => {
                if initial.is_zero() {
                    return Duration::ZERO;
                }
                let exponent = i32::try_from(failures.saturating_sub(1)).unwrap_or(i32::MAX);
                // May reach infinity (never NaN: `initial` is positive, `factor` finite).
                let secs = initial.as_secs_f64() * factor.powi(exponent);
                // `secs < max` means it fits in a Duration, so the conversion cannot fail;
                // `max` stays the fallback all the same.
                if secs >= max.as_secs_f64() {
                    max
                } else {
                    Duration::try_from_secs_f64(secs).map_or(max, |pause| pause.min(max))
                }
            }
        }
    }

    fn jitter(&self) -> f64 {
        self.jitter.unwrap_or(match self.pause {
            Pause::Fixed(_) => 0.0,
            Pause::Backoff { .. } => DEFAULT_JITTER,
        })
    }

    /// The pause after the `failures`-th failed attempt, jitter applied. Never panics, for
    /// any pause up to `Duration::MAX`.
    pub(super) fn pause(&self, failures: u32, rng: &mut Option<Rng>) -> Duration {
        let base = self.base_pause(failures);
        let jitter = self.jitter();
        if jitter == 0.0 || base.is_zero() {
            return base;
        }
        let draw = rng.get_or_insert_with(Rng::new).next_f64();
        // A factor in (0, 1]: the pause only ever shrinks, so `max` stays a true bound.
        let factor = 1.0 - jitter * draw;
        // Not `Duration::mul_f64`: it panics when the product does not fit, which a pause
        // near `Duration::MAX` with a tiny jitter reaches (the f64 rounds up past u64
        // seconds). Shrinking never needs more room than `base`, so `base` is the fallback.
        Duration::try_from_secs_f64(base.as_secs_f64() * factor).map_or(base, |p| p.min(base))
    }
}

/// The builder methods that set a [`Policy`] (attempts, pauses, jitter), written once for
/// [`Retry`](crate::futures::Retry) and [`RetryPolicy`](crate::RetryPolicy), each of which
/// holds one in a `policy` field. `$new` builds the type in the examples (for an operation
/// that always fails), `$end` is the examples' last line, `$zero` says what a zero
/// interval means for it, `$meta` are attributes every method gets.
macro_rules! policy_setters {
    (
        new: $new:literal,
        end: $end:literal,
        zero: $zero:literal,
        $(#[$meta:meta])*
    ) => {
        /// Makes at most `attempts` attempts in total, the first try included (default 3).
        /// `1` means no retry.
        ///
        /// # Examples
        ///
        /// ```
        #[doc = concat!("let retried = ", $new, ".attempts(1);")]
        #[doc = $end]
        /// ```
        ///
        /// # Panics
        ///
        /// Panics if `attempts` is 0: a retry that never tries anything has no result to give.
        #[track_caller]
        $(#[$meta])*
        pub fn attempts(mut self, attempts: u32) -> Self {
            self.policy.set_attempts(attempts);
            self
        }

        /// Pauses a fixed `interval` between attempts, with no jitter unless
        /// [`.jitter`](Self::jitter) adds some. Replaces the default backoff.
        ///
        #[doc = $zero]
        /// `Duration::MAX` is a pause that never ends.
        ///
        /// # Examples
        ///
        /// ```
        /// use std::time::Duration;
        ///
        #[doc = concat!("let retried = ", $new, ".interval(Duration::from_millis(1));")]
        #[doc = $end]
        /// ```
        $(#[$meta])*
        pub fn interval(mut self, interval: ::std::time::Duration) -> Self {
            self.policy.set_interval(interval);
            self
        }

        /// Pauses with exponential backoff: `initial` after the first failure, then multiplied
        /// by `factor` after each further failure, never more than `max`.
        ///
        /// The default is `backoff(100 ms, 2.0, 10 s)`. The backoff's jitter is 0.5 unless
        /// [`.jitter`](Self::jitter) says otherwise. An `initial` above `max` pauses `max`.
        ///
        /// # Examples
        ///
        /// ```
        /// use std::time::Duration;
        ///
        /// // Pauses of 1 ms, 2 ms, 4 ms, 5 ms, 5 ms (each cut by up to 10 %).
        #[doc = concat!("let retried = ", $new, "")]
        ///     .attempts(6)
        ///     .backoff(Duration::from_millis(1), 2.0, Duration::from_millis(5))
        ///     .jitter(0.1);
        #[doc = $end]
        /// ```
        ///
        /// # Panics
        ///
        /// Panics if `factor` is below 1 or not finite.
        #[track_caller]
        $(#[$meta])*
        pub fn backoff(
            mut self,
            initial: ::std::time::Duration,
            factor: f64,
            max: ::std::time::Duration,
        ) -> Self {
            self.policy.set_backoff(initial, factor, max);
            self
        }

        /// Randomises each pause: it is cut by a random share of up to `fraction`, drawn
        /// uniformly. A pause `p` becomes a pause in `[p × (1 − fraction), p]`.
        ///
        /// `0.0` turns jitter off; `1.0` is "full jitter" (anywhere from 0 to `p`). The pause
        /// never grows, so a backoff's `max` stays the longest pause. Jitter keeps many callers
        /// that failed together from retrying in lockstep. Defaults: 0.5 for a backoff, 0 for
        /// an [`interval`](Self::interval); set here, it applies to either.
        ///
        /// # Examples
        ///
        /// ```
        /// use std::time::Duration;
        ///
        /// // Each pause between 0 and 2 ms.
        #[doc = concat!("let retried = ", $new, ".interval(Duration::from_millis(2)).jitter(1.0);")]
        #[doc = $end]
        /// ```
        ///
        /// # Panics
        ///
        /// Panics if `fraction` is not within `0.0..=1.0`.
        #[track_caller]
        $(#[$meta])*
        pub fn jitter(mut self, fraction: f64) -> Self {
            self.policy.set_jitter(fraction);
            self
        }
    };
}
pub(super) use policy_setters;

/// A tiny PRNG for jitter (splitmix64), seeded from std's per-process random hash keys.
///
/// Jitter only needs retries of different callers not to line up; it needs no quality a
/// dependency would bring.
#[derive(Clone, Debug)]
pub(super) struct Rng(u64);

impl Rng {
    fn new() -> Self {
        // Each `RandomState` has fresh keys (random per thread, then incremented).
        Self(RandomState::new().hash_one(now()))
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(pause: Pause, jitter: f64) -> Policy {
        Policy {
            pause,
            jitter: Some(jitter),
            ..Policy::DEFAULT
        }
    }

    /// Regression: `Duration::mul_f64` panicked ("overflow") for a `Duration::MAX` pause
    /// with a jitter so small that the factor rounds to 1.
    #[test]
    fn huge_pauses_with_jitter_never_panic_and_never_grow() {
        let mut rng = None;
        for jitter in [1e-300, 1e-9, 0.5, 1.0] {
            for pause in [
                Pause::Fixed(Duration::MAX),
                Pause::Backoff {
                    initial: Duration::from_secs(1),
                    factor: 1e300,
                    max: Duration::MAX,
                },
                Pause::Backoff {
                    initial: Duration::MAX,
                    factor: 2.0,
                    max: Duration::MAX,
                },
            ] {
                let policy = policy(pause, jitter);
                for failures in [1, 2, 64, u32::MAX] {
                    let chosen = policy.pause(failures, &mut rng);
                    assert!(chosen <= Duration::MAX);
                    if jitter < 1e-6 && failures > 1 {
                        // A tiny jitter keeps the pause (near) its full length.
                        assert!(chosen > Duration::MAX / 2, "{chosen:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn backoff_doubles_up_to_its_max() {
        let policy = policy(
            Pause::Backoff {
                initial: Duration::from_millis(100),
                factor: 2.0,
                max: Duration::from_millis(500),
            },
            0.0,
        );
        let pauses: Vec<_> = (1..=5).map(|n| policy.pause(n, &mut None)).collect();
        let ms = Duration::from_millis;
        assert_eq!(pauses, [ms(100), ms(200), ms(400), ms(500), ms(500)]);
    }
}
