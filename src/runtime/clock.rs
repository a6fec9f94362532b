//! The time a rate decides on: nanoseconds since one process-wide origin, on the clock of the
//! caller's timers, read cheaply.
//!
//! # One time line
//!
//! Every rate (a limiter's, a map's) counts time in nanoseconds since [`ORIGIN`], so its
//! state fits in one `u64`. [`nanos_since_origin`] and [`instant_at`] convert between that
//! line and `Instant`s exactly: a time computed on the line is an `Instant` a timer can wait
//! for, to the nanosecond.
//!
//! # The counter clock
//!
//! [`real_nanos`] reads the system's monotonic clock (the clock of `Instant::now()` and of
//! every timer) through the CPU's counter, which costs a fraction of a system clock read:
//! quanta's raw counter, the invariant time-stamp counter on x86-64 and the system counter on
//! AArch64.
//!
//! - An *anchor* is a counter reading and the system clock's time then, with a scale (the
//!   counter's nanoseconds per tick). A reading is the anchor's time plus the ticks since it,
//!   scaled. An anchor serves [`WINDOW`] (1 ms) at most: the first reading past it reads the
//!   system clock instead and makes the next anchor, so while reads come the system clock is
//!   read once a millisecond, and no reading is ever extrapolated further than that. The
//!   system clock is read between two counter reads, whose middle is its counter time; a read
//!   that took over [`MAX_BRACKET`] (interrupted) makes no anchor.
//! - The scale is the counter's rate against the system clock over the last one to two seconds
//!   (quanta's calibration, made when the clock is first used, until 20 ms have passed), so
//!   it follows the system clock when NTP slews it. A measured scale more than an eighth away
//!   from quanta's (a suspend, a counter that went back) is thrown away and measuring starts
//!   again: the calibration is checked against drift at every anchor.
//! - A new anchor continues the old one's line (no jump) with its scale steered to meet the
//!   system clock one window later, so the two stay within about one system clock read of
//!   each other (tens of nanoseconds). A gap over [`MAX_STEER`] is not steered but closed at
//!   once, and so is the gap after a quiet spell of over two windows (nobody read the line
//!   since: it cannot jump under a reader).
//! - Where there is no such counter (quanta then reads the system clock itself),
//!   [`real_nanos`] reads `Instant::now()`; so does a read that finds another thread setting
//!   the next anchor.
//!
//! # The rule: a rate decides on this clock, a wait wakes on its timer's
//!
//! A wait for a time on the line sets its timer for [`instant_at`] of that time, and when the
//! timer fires it checks the time on the timer's own clock ([`super::now`], `Instant::now`),
//! not on the counter: a timer fires at or after its deadline on its own clock, so a waiter
//! wakes once, never early by `Instant`, and never spins. Decisions made on the counter clock
//! stand within the anchor's error (above) of the same decisions on the system clock.

use std::sync::atomic::{AtomicU64, Ordering, fence};
use std::sync::{LazyLock, Mutex, TryLockError};
use std::time::{Duration, Instant};

/// The instant that clock readings count from: up to an hour before the first reading, so
/// that a clock which lags the system's (tokio's paused clock stays at the instant its
/// runtime was paused, which may be before the origin was first read) still reads distinct
/// times. Readings before it count as the origin itself.
static ORIGIN: LazyLock<Instant> = LazyLock::new(|| {
    let now = Instant::now();
    // `Instant` cannot go before the system's boot on some platforms: take the largest
    // step back that it can represent.
    [3600, 60, 1, 0]
        .into_iter()
        .find_map(|secs| now.checked_sub(Duration::from_secs(secs)))
        .unwrap_or(now)
});

/// Nanoseconds from the origin to `instant`, saturating at both ends.
#[inline]
pub(crate) fn nanos_since_origin(instant: Instant) -> u64 {
    let since = instant.saturating_duration_since(*ORIGIN);
    u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
}

/// The instant `nanos` after the origin (the far future when it does not fit).
#[inline]
pub(crate) fn instant_at(nanos: u64) -> Instant {
    let origin = *ORIGIN;
    origin
        .checked_add(Duration::from_nanos(nanos))
        .unwrap_or_else(|| far_future(origin))
}

/// About thirty years after `from`: later than anything a run waits for, and always
/// representable.
fn far_future(from: Instant) -> Instant {
    from + Duration::from_secs(60 * 60 * 24 * 365 * 30)
}

/// Now for async code, in nanoseconds since the origin: the virtual clock inside
/// `run_virtual` (feature `test-util`), tokio's clock (paused or not) inside
/// a tokio runtime with the `tokio` feature, as [`super::now`] reads it; the counter clock
/// ([`real_nanos`]) elsewhere.
#[inline]
pub(crate) fn now_nanos() -> u64 {
    #[cfg(feature = "test-util")]
    if let Some(now) = super::timer::virtual_now() {
        return nanos_since_origin(now);
    }
    #[cfg(feature = "tokio")]
    if super::tokio::is_current() {
        return nanos_since_origin(super::tokio::now());
    }
    real_nanos()
}

/// Now on the system's monotonic clock, in nanoseconds since the origin, read through the
/// CPU's counter where there is one (see the module's docs).
#[inline(always)]
pub(crate) fn real_nanos() -> u64 {
    match &*COUNTER {
        Some(counter) => counter.now(),
        None => system_nanos(),
    }
}

/// Now on the system's monotonic clock, read directly.
#[inline(never)]
fn system_nanos() -> u64 {
    nanos_since_origin(Instant::now())
}

/// The longest an anchor serves, in nanoseconds.
const WINDOW: u64 = 1_000_000;
/// The scale is measured over a span this long at least once it can be (then between one
/// and two of them).
const BASELINE: u64 = 1_000_000_000;
/// A span shorter than this measures no scale (quanta's serves until then).
const MIN_BASELINE: u64 = 20_000_000;
/// The largest gap between the line and the system clock that a new anchor steers away
/// (over one window: a 0.1% faster or slower line for a millisecond); a larger one is closed
/// at once.
const MAX_STEER: u64 = 1_000;
/// A system clock read that took longer than this (interrupted, preempted) sets no anchor,
/// unless reads never take less than a quarter of it: its time is known to half of that.
const MAX_BRACKET: u64 = 250;
/// Scales are nanoseconds per tick with 32 fractional bits.
const SCALE_BITS: u32 = 32;

static COUNTER: LazyLock<Option<Counter>> = LazyLock::new(Counter::new);

/// The counter and the anchor the line is read from.
struct Counter {
    clock: quanta::Clock,
    /// The anchor, behind a sequence lock: odd while it is being written, bumped by two per
    /// anchor, so a reader that sees the same even number before and after read one anchor.
    seq: AtomicU64,
    raw: AtomicU64,
    nanos: AtomicU64,
    scale: AtomicU64,
    /// [`WINDOW`] and [`MAX_BRACKET`] in ticks.
    window: u64,
    max_bracket: u64,
    /// Whoever sets the next anchor holds this (others read the system clock meanwhile).
    calibration: Mutex<Calibration>,
}

/// A counter reading and the time on the line then, with the scale from there on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Anchor {
    raw: u64,
    nanos: u64,
    scale: u64,
}

/// A counter reading and the system clock's time then.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Sample {
    raw: u64,
    nanos: u64,
}

/// What the scale is measured from: the samples anchors were made from.
#[derive(Debug)]
struct Calibration {
    /// quanta's scale, which a measured one must stay near.
    initial: u64,
    /// The counter's rate against the system clock from `base` to the latest sample.
    scale: u64,
    base: Sample,
    /// The next base, once it is one `BASELINE` old.
    next: Sample,
    /// The shortest system clock read seen, in ticks.
    narrowest: u64,
}

/// `ticks` scaled to nanoseconds. Fits in 64 bits: anchors are read at most two windows on,
/// and a scale stays within an eighth (and a steer) of quanta's, so the product stays under
/// `2.3 * WINDOW << SCALE_BITS`, whatever the counter's frequency.
#[inline(always)]
fn scaled(ticks: u64, scale: u64) -> u64 {
    ticks.wrapping_mul(scale) >> SCALE_BITS
}

impl Anchor {
    /// The time on this anchor's line at counter reading `raw`, if no more than `window`
    /// ticks after the anchor.
    #[inline(always)]
    fn read(&self, raw: u64, window: u64) -> Option<u64> {
        let ticks = raw.wrapping_sub(self.raw);
        if ticks <= window {
            Some(self.nanos.saturating_add(scaled(ticks, self.scale)))
        } else {
            None
        }
    }
}

impl Calibration {
    fn new(initial: u64, first: Sample, bracket: u64) -> Self {
        Self {
            initial,
            scale: initial,
            base: first,
            next: first,
            narrowest: bracket,
        }
    }

    /// Whether a system clock read that took `bracket` ticks is close enough to set an
    /// anchor.
    fn accepts(&mut self, bracket: u64, max_bracket: u64) -> bool {
        self.narrowest = self.narrowest.min(bracket);
        bracket <= max_bracket.max(self.narrowest.saturating_mul(4))
    }

    /// The anchor after `old`, from the system clock's sample `at`; `window` is the window
    /// in ticks.
    fn next_anchor(&mut self, old: Anchor, at: Sample, window: u64) -> Anchor {
        self.measure(at);
        let continued = old
            .read(at.raw, window.saturating_mul(2))
            .and_then(|continued| {
                let gap = i128::from(at.nanos) - i128::from(continued);
                if gap.unsigned_abs() > u128::from(MAX_STEER) {
                    return None;
                }
                // Reach the system clock's line one window on: `gap` more nanoseconds over
                // `window` ticks.
                let steer = (gap << SCALE_BITS) / i128::from(window.max(1));
                let scale = u64::try_from(i128::from(self.scale) + steer).ok()?;
                Some(Anchor {
                    raw: at.raw,
                    nanos: continued,
                    scale,
                })
            });
        continued.unwrap_or(Anchor {
            raw: at.raw,
            nanos: at.nanos,
            scale: self.scale,
        })
    }

    /// Measures the scale up to the sample `at`.
    fn measure(&mut self, at: Sample) {
        if at.nanos.saturating_sub(self.next.nanos) >= BASELINE {
            self.base = self.next;
            self.next = at;
        }
        let nanos = at.nanos.saturating_sub(self.base.nanos);
        let ticks = at.raw.wrapping_sub(self.base.raw);
        if nanos < MIN_BASELINE || ticks == 0 {
            return;
        }
        let scale = (u128::from(nanos) << SCALE_BITS) / u128::from(ticks);
        let initial = u128::from(self.initial);
        match u64::try_from(scale) {
            Ok(scale) if u128::from(scale).abs_diff(initial) <= initial / 8 => self.scale = scale,
            // Not the counter's rate: the span held a suspend, or the counter went back.
            // Measure again from here.
            _ => {
                self.base = at;
                self.next = at;
            }
        }
    }
}

impl Counter {
    /// The counter clock, or `None` where quanta has no counter and reads the system clock.
    fn new() -> Option<Self> {
        let clock = quanta::Clock::new();
        // quanta's scale, as nanoseconds per 2^32 ticks: exactly 2^32 when its "ticks" are
        // the system clock's nanoseconds (no counter to read).
        let initial = clock.delta_as_nanos(0, 1 << SCALE_BITS);
        if initial == 1 << SCALE_BITS || initial == 0 {
            return None;
        }
        let ticks = |nanos: u64| {
            let ticks = (u128::from(nanos) << SCALE_BITS) / u128::from(initial);
            u64::try_from(ticks).unwrap_or(u64::MAX).max(1)
        };
        let mut counter = Self {
            clock,
            seq: AtomicU64::new(0),
            raw: AtomicU64::new(0),
            nanos: AtomicU64::new(0),
            scale: AtomicU64::new(initial),
            window: ticks(WINDOW),
            max_bracket: ticks(MAX_BRACKET),
            calibration: Mutex::new(Calibration::new(initial, Sample { raw: 0, nanos: 0 }, 0)),
        };
        let (first, bracket) = counter.sample();
        counter.publish(Anchor {
            raw: first.raw,
            nanos: first.nanos,
            scale: initial,
        });
        *counter
            .calibration
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) =
            Calibration::new(initial, first, bracket);
        Some(counter)
    }

    #[inline(always)]
    fn now(&self) -> u64 {
        let raw = self.clock.raw();
        let seq = self.seq.load(Ordering::Acquire);
        let anchor = self.anchor();
        fence(Ordering::Acquire);
        if seq & 1 == 0 && self.seq.load(Ordering::Relaxed) == seq {
            if let Some(nanos) = anchor.read(raw, self.window) {
                return nanos;
            }
        }
        self.reanchor()
    }

    /// The anchor's fields (a reader checks `seq` around this; the writer holds the lock).
    #[inline(always)]
    fn anchor(&self) -> Anchor {
        Anchor {
            raw: self.raw.load(Ordering::Relaxed),
            nanos: self.nanos.load(Ordering::Relaxed),
            scale: self.scale.load(Ordering::Relaxed),
        }
    }

    /// Reads the system clock and sets the next anchor from that read, unless another thread
    /// is setting one (the system clock answers then) or the read was too slow to anchor on
    /// (it answers too).
    #[cold]
    #[inline(never)]
    fn reanchor(&self) -> u64 {
        let mut calibration = match self.calibration.try_lock() {
            Ok(calibration) => calibration,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => return system_nanos(),
        };
        // Another thread may have set one since this thread found none.
        if let Some(nanos) = self.anchor().read(self.clock.raw(), self.window) {
            return nanos;
        }
        let (at, bracket) = self.sample();
        if !calibration.accepts(bracket, self.max_bracket) {
            return at.nanos;
        }
        let next = calibration.next_anchor(self.anchor(), at, self.window);
        self.publish(next);
        // The line's time, not the system clock's: the line goes on from there without
        // stepping back.
        next.nanos
    }

    /// The system clock's time and the counter's reading halfway through reading it, and
    /// how many ticks the read took.
    fn sample(&self) -> (Sample, u64) {
        let before = self.clock.raw();
        let nanos = nanos_since_origin(Instant::now());
        let after = self.clock.raw();
        let bracket = after.wrapping_sub(before);
        let raw = before.wrapping_add(bracket / 2);
        (Sample { raw, nanos }, bracket)
    }

    /// Writes `anchor` (only under the calibration lock, or before the counter is shared).
    fn publish(&self, anchor: Anchor) {
        let seq = self.seq.load(Ordering::Relaxed);
        self.seq.store(seq.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        self.raw.store(anchor.raw, Ordering::Relaxed);
        self.nanos.store(anchor.nanos, Ordering::Relaxed);
        self.scale.store(anchor.scale, Ordering::Relaxed);
        self.seq.store(seq.wrapping_add(2), Ordering::Release);
    }
}

/// Where a limiter, a breaker or an adaptive key reads the time, in nanoseconds since the
/// origin (see this file's docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Clock {
    /// Async callers: the clock of their runtime's timers (tokio's inside a tokio runtime
    /// with the `tokio` feature), the system's read through the CPU's counter elsewhere.
    Async,
    /// A blocked thread: the system's clock, whose timers it sleeps on (see
    /// [`super::block_on_real_time`]), through the counter.
    Blocking,
}

impl Clock {
    /// Now, as a rate decides: the cheap read.
    #[inline]
    pub(crate) fn now(self) -> u64 {
        match self {
            Self::Async => now_nanos(),
            Self::Blocking => real_nanos(),
        }
    }

    /// Now on the clock this caller's timers wait on, read directly: what a timer that fired
    /// is checked against, so a waiter never wakes early by its timer's clock.
    pub(crate) fn timer_now(self) -> u64 {
        match self {
            Self::Async => nanos_since_origin(super::timer::now()),
            Self::Blocking => nanos_since_origin(std::time::Instant::now()),
        }
    }
}

#[cfg(test)]
#[path = "clock_tests.rs"]
mod tests;
