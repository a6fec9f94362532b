//! The outcomes a closed breaker judges by: the last n (a ring of bits) or those of the last
//! stretch of time (a ring of buckets). Synchronous, on explicit times (nanoseconds).

use super::config::{QUIET, RecordSpec, TIME_BUCKETS};

/// [`QUIET`] in nanoseconds.
const QUIET_NANOS: u64 = QUIET.as_secs() * 1_000_000_000;

/// The record of one breaker; which kind follows its [`RecordSpec`].
///
/// A map keeps one per key whose breaker holds an outcome, so its size is a cost per
/// host of a crawl: the count record (the default) is held in place in 32 bytes, the
/// time record, 72 bytes of buckets, behind a box made at its first outcome.
#[derive(Clone, Debug)]
pub(crate) enum Record {
    Count(CountWindow),
    /// `None` until the first outcome.
    Time(Option<Box<TimeWindow>>),
}

/// The last `size` outcomes: slot `i` of the ring is bit `i % 64` of word `i / 64` (set:
/// bad). Two words rather than a `u128`, whose alignment of 16 would pad every breaker.
#[derive(Clone, Debug)]
pub(crate) struct CountWindow {
    bad: [u64; 2],
    /// When the latest outcome came: a record quiet for [`QUIET`] is empty.
    latest: u64,
    /// The slot the next outcome goes to.
    next: u8,
    /// Whether the ring went round: it holds `size` outcomes, else `next`. (A `bool`, whose
    /// spare values hold [`Record`]'s variant: the record takes no word for it.)
    wrapped: bool,
}

/// The outcomes of the last stretch of time, counted in [`TIME_BUCKETS`] buckets of
/// `width` nanoseconds: bucket `b` holds the outcomes of `[b * width, (b + 1) * width)`
/// and sits at ring slot `b % TIME_BUCKETS`.
#[derive(Clone, Debug)]
pub(crate) struct TimeWindow {
    /// The newest bucket's number; the ring holds it and the seven before it.
    newest: u64,
    attempts: [u32; TIME_BUCKETS as usize],
    bad: [u32; TIME_BUCKETS as usize],
}

impl Record {
    /// An empty record of the kind `spec` says.
    pub(crate) const fn new(spec: RecordSpec) -> Self {
        match spec {
            RecordSpec::Count(_) => Self::Count(CountWindow {
                bad: [0; 2],
                latest: 0,
                next: 0,
                wrapped: false,
            }),
            RecordSpec::Time(_) => Self::Time(None),
        }
    }

    /// Forgets every outcome.
    pub(crate) fn clear(&mut self, spec: RecordSpec) {
        *self = Self::new(spec);
    }

    /// Adds one outcome at `now`.
    #[inline]
    pub(crate) fn record(&mut self, spec: RecordSpec, now: u64, bad: bool) {
        match (self, spec) {
            (Self::Count(record), RecordSpec::Count(size)) => record.record(size, now, bad),
            (Self::Time(record), RecordSpec::Time(span)) => record
                .get_or_insert_with(|| {
                    Box::new(TimeWindow {
                        newest: 0,
                        attempts: [0; TIME_BUCKETS as usize],
                        bad: [0; TIME_BUCKETS as usize],
                    })
                })
                .record(width(span), now, bad),
            (record, spec) => {
                // A record of the other kind (a core kept under other settings): start over.
                *record = Self::new(spec);
                record.record(spec, now, bad);
            }
        }
    }

    /// `(attempts, bad)` in the record at `now`.
    #[inline]
    pub(crate) fn counts(&self, spec: RecordSpec, now: u64) -> (u32, u32) {
        match (self, spec) {
            (Self::Count(record), RecordSpec::Count(size)) => record.counts(size, now),
            (Self::Time(Some(record)), RecordSpec::Time(span)) => record.counts(width(span), now),
            _ => (0, 0),
        }
    }
}

impl CountWindow {
    fn record(&mut self, size: u32, now: u64, bad: bool) {
        if self.is_quiet(now) {
            self.bad = [0; 2];
            self.next = 0;
            self.wrapped = false;
        }
        let word = &mut self.bad[usize::from(self.next / 64)];
        let bit = 1u64 << (self.next % 64);
        if bad {
            *word |= bit;
        } else {
            *word &= !bit;
        }
        // `size` is at most 128, so slots fit in a `u8`.
        let size = size as u8;
        self.next = if self.next + 1 >= size {
            self.wrapped = true;
            0
        } else {
            self.next + 1
        };
        self.latest = self.latest.max(now);
    }

    /// Outcomes held, of a record of `size`.
    fn len(&self, size: u32) -> u32 {
        if self.wrapped {
            size
        } else {
            u32::from(self.next).min(size)
        }
    }

    fn counts(&self, size: u32, now: u64) -> (u32, u32) {
        if self.is_quiet(now) {
            (0, 0)
        } else {
            (
                self.len(size),
                self.bad[0].count_ones() + self.bad[1].count_ones(),
            )
        }
    }

    fn is_quiet(&self, now: u64) -> bool {
        (self.wrapped || self.next > 0) && now.saturating_sub(self.latest) >= QUIET_NANOS
    }
}

impl TimeWindow {
    fn record(&mut self, width: u64, now: u64, bad: bool) {
        let bucket = now / width;
        if bucket > self.newest {
            let gap = bucket - self.newest;
            if gap >= TIME_BUCKETS {
                self.attempts = [0; TIME_BUCKETS as usize];
                self.bad = [0; TIME_BUCKETS as usize];
            } else {
                for passed in self.newest + 1..=bucket {
                    let slot = (passed % TIME_BUCKETS) as usize;
                    self.attempts[slot] = 0;
                    self.bad[slot] = 0;
                }
            }
            self.newest = bucket;
        }
        // A time a little behind the newest (another thread's read of the clock) counts in
        // the newest bucket.
        let slot = (self.newest % TIME_BUCKETS) as usize;
        self.attempts[slot] = self.attempts[slot].saturating_add(1);
        if bad {
            self.bad[slot] = self.bad[slot].saturating_add(1);
        }
    }

    fn counts(&self, width: u64, now: u64) -> (u32, u32) {
        let bucket = now / width;
        // Buckets numbered `bucket - TIME_BUCKETS` or lower have left the record.
        let mut totals = (0u32, 0u32);
        for back in 0..TIME_BUCKETS {
            let Some(number) = self.newest.checked_sub(back) else {
                break;
            };
            if number + TIME_BUCKETS <= bucket {
                break;
            }
            let slot = (number % TIME_BUCKETS) as usize;
            totals.0 = totals.0.saturating_add(self.attempts[slot]);
            totals.1 = totals.1.saturating_add(self.bad[slot]);
        }
        totals
    }
}

/// A time record's bucket width: an eighth of its span, rounded up.
fn width(span: u64) -> u64 {
    span.div_ceil(TIME_BUCKETS).max(1)
}
