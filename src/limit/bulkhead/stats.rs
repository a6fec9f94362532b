//! The bulkheads' counters: kept by the bulkhead layer in the semaphore core's spare state
//! bits (so the plain [`Semaphore`](crate::Semaphore) carries none), and
//! [`BulkheadStats`], their public snapshot.

use std::sync::atomic::Ordering;

use crate::limit::semaphore::core::{COUNT_SHIFT, Core, Count, available};
use crate::sync::{AtomicU64, AtomicUsize};

/// The semaphore of one bulkhead cap: the FIFO core with admission counters.
pub(crate) type Limiter = Core<Counters>;

/// Fast-path admissions, counted modulo 2^29 in the state word's top bits so that admitting
/// costs nothing more than the compare-and-swap that takes the permit; wrap-arounds go to
/// `admitted_wraps`. (Hand-offs to waiters are counted by the semaphore's queue.)
const ADMIT_ONE: u64 = 1 << COUNT_SHIFT;
const ADMIT_MAX: u64 = u64::MAX >> COUNT_SHIFT;

/// What a bulkhead counts beside the permits in use.
///
/// The peak is kept as the lowest number of available permits seen (one `fetch_min` when
/// it drops, like a `fetch_max` of the permits held, without reading the permits in
/// existence on the fast path): the peak held is the permits in existence minus it. A
/// resize changes the permits in existence, so it first folds the peak so far into
/// `peak` and starts the low-water mark again.
pub(crate) struct Counters {
    /// Highest number of permits in use at once before the last resize.
    peak: AtomicUsize,
    /// Lowest number of available permits since the last resize.
    low: AtomicU64,
    /// How many times the admission count in the state word wrapped around.
    admitted_wraps: AtomicU64,
    /// Acquisitions refused (timeout, full queue, closed).
    rejected: AtomicU64,
}

impl Count for Counters {
    const ADMIT: u64 = ADMIT_ONE;

    #[inline]
    fn admitted(&self, before: u64, taken: u64) {
        self.lowered(available(before) - taken);
        if before >> COUNT_SHIFT == ADMIT_MAX {
            self.admitted_wraps.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[inline]
    fn lowered(&self, available: u64) {
        if available < self.low.load(Ordering::Relaxed) {
            self.low.fetch_min(available, Ordering::Relaxed);
        }
    }

    fn rebased(&self, before: u64, _after: u64, available: u64) {
        let low = self.low.load(Ordering::Relaxed);
        self.peak
            .fetch_max(before.saturating_sub(low) as usize, Ordering::Relaxed);
        self.low.store(available, Ordering::Relaxed);
    }
}

impl Counters {
    crate::sync::const_unless_loom! {
        pub(crate) const fn new(limit: usize) -> Self {
            Self {
                peak: AtomicUsize::new(0),
                low: AtomicU64::new(limit as u64),
                admitted_wraps: AtomicU64::new(0),
                rejected: AtomicU64::new(0),
            }
        }
    }

    /// Forgets the peak so far, with `available` permits free now: for a cap that
    /// changes owners, idle.
    pub(crate) fn restart_peak(&self, available: u64) {
        self.peak.store(0, Ordering::Relaxed);
        self.low.store(available, Ordering::Relaxed);
    }

    #[cold]
    pub(crate) fn note_rejected(&self) {
        self.rejected.fetch_add(1, Ordering::Relaxed);
    }

    /// The most permits held at once so far, given the permits in existence now.
    fn peak(&self, total: u64) -> usize {
        let since = total.saturating_sub(self.low.load(Ordering::Relaxed)) as usize;
        self.peak.load(Ordering::Relaxed).max(since)
    }
}

crate::sync::const_unless_loom! {
    /// A cap's semaphore with `limit` permits.
    pub(crate) const fn limiter(limit: usize) -> Limiter {
        Core::new(limit, Counters::new(limit))
    }
}

/// The numbers of one cap, or the sum over several.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    pub(crate) in_flight: usize,
    pub(crate) waiting: usize,
    pub(crate) peak: usize,
    pub(crate) admitted: u64,
    pub(crate) rejected: u64,
}

impl Tally {
    /// A snapshot of one cap. The fields are read one after the other, so under
    /// concurrent use they may be a few operations apart.
    pub(crate) fn of(limiter: &Limiter) -> Self {
        let counts = limiter.counts();
        let wraps = counts.admitted_wraps.load(Ordering::Relaxed);
        let state = limiter.state();
        let (waiting, handed) = limiter.waiting_and_handed();
        Self {
            in_flight: limiter.in_flight(),
            waiting,
            peak: counts.peak(limiter.total()),
            admitted: wraps
                .wrapping_mul(ADMIT_MAX + 1)
                .wrapping_add(state >> COUNT_SHIFT)
                .wrapping_add(handed),
            rejected: counts.rejected.load(Ordering::Relaxed),
        }
    }

    /// Adds another cap's numbers (the peak is the highest of any one cap).
    pub(crate) fn add(&mut self, other: Tally) {
        self.in_flight += other.in_flight;
        self.waiting += other.waiting;
        self.peak = self.peak.max(other.peak);
        self.admitted = self.admitted.wrapping_add(other.admitted);
        self.rejected = self.rejected.wrapping_add(other.rejected);
    }

    /// The numbers counted since `before`, a snapshot of the same cap (the permits in
    /// use, the waiters and the peak are as of now).
    pub(crate) fn since(self, before: Tally) -> Self {
        Self {
            admitted: self.admitted.wrapping_sub(before.admitted),
            rejected: self.rejected.wrapping_sub(before.rejected),
            ..self
        }
    }

    /// Whether the cap was ever used (a cap nobody used is not counted as a runtime).
    pub(crate) fn is_used(&self) -> bool {
        self.admitted != 0 || self.rejected != 0 || self.waiting != 0
    }
}

/// A snapshot of a bulkhead's counters: the totals over every runtime from
/// [`Bulkhead::stats`](crate::Bulkhead::stats), or one runtime's from
/// [`Bulkhead::runtime_stats`](crate::Bulkhead::runtime_stats) (likewise for one key of a
/// [`KeyedBulkhead`](crate::KeyedBulkhead)).
///
/// The fields are read one after another, so while the bulkhead is busy they may be a few
/// operations apart; once it is quiet they are exact.
///
/// # Examples
///
/// ```
/// use std::sync::Barrier;
/// use tollgate::{Bulkhead, run_sync};
///
/// static API: Bulkhead = Bulkhead::new(8);
///
/// let barrier = Barrier::new(3);
/// std::thread::scope(|scope| {
///     for _ in 0..2 {
///         scope.spawn(|| {
///             run_sync(async {
///                 let _permit = API.acquire().await.unwrap();
///                 barrier.wait(); // both runtimes hold a permit
///                 barrier.wait();
///             })
///         });
///     }
///     barrier.wait();
///     // A plain thread sees the totals over both runtimes' caps.
///     let stats = API.stats();
///     assert_eq!((stats.runtimes, stats.in_flight), (2, 2));
///     // Its own runtime (the process-wide one) holds nothing.
///     assert_eq!(API.runtime_stats().in_flight, 0);
///     barrier.wait();
/// });
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct BulkheadStats {
    /// The most permits that can be out at once in one cap (one runtime's, or the only
    /// one of a `global` bulkhead).
    pub limit: usize,
    /// How many caps these numbers add up: the live runtimes that have used the bulkhead
    /// (always 1 for one runtime's stats).
    pub runtimes: usize,
    /// Permits out right now.
    pub in_flight: usize,
    /// Callers queued for a permit right now.
    pub waiting: usize,
    /// The most permits that were ever out at once in any one cap (so at most `limit`).
    pub peak_in_flight: usize,
    /// Permits handed out so far, counting one handed to a waiter that was then cancelled
    /// before it took it (the permit went on to the next waiter, which counts again). (A
    /// snapshot taken at the very moment the internal 29-bit admission counter wraps may
    /// read 2^29 low, once per 2^29 admissions.)
    pub admitted: u64,
    /// Waiting acquires refused with a [`BulkheadError`](crate::BulkheadError) so far (a
    /// failed `try_acquire` is not counted).
    pub rejected: u64,
}

impl BulkheadStats {
    pub(crate) fn new(limit: usize, runtimes: usize, tally: Tally) -> Self {
        Self {
            limit,
            runtimes,
            in_flight: tally.in_flight,
            waiting: tally.waiting,
            peak_in_flight: tally.peak,
            admitted: tally.admitted,
            rejected: tally.rejected,
        }
    }

    /// Free permits right now over the caps counted: `limit * runtimes - in_flight` (0 at
    /// least: a permit of an ended runtime still counts in `in_flight`).
    pub fn available(&self) -> usize {
        (self.limit * self.runtimes).saturating_sub(self.in_flight)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_admission_count_survives_its_wrap_around() {
        let limiter = limiter(2);
        // Start one admission short of the wrap.
        limiter.set_state_for_test(ADMIT_MAX << COUNT_SHIFT | 2);
        assert_eq!(Tally::of(&limiter).admitted, ADMIT_MAX);
        assert!(limiter.try_take(1)); // the counter wraps here
        let tally = Tally::of(&limiter);
        assert_eq!((tally.admitted, tally.in_flight), (ADMIT_MAX + 1, 1));
        limiter.release(1);
        assert_eq!(Tally::of(&limiter).in_flight, 0);
        assert_eq!(limiter.available(), 2);
    }
}
