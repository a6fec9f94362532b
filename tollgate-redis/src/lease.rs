//! A lease as this process sees it (`Lease`: what the keeper renews and fences, and what a
//! permit owns), and the per-key local state leases share (`KeyLocal`).
//!
//! A lease's fence point is a local `Instant`: the send time of the last grant or renewal
//! that Redis confirmed, plus the TTL, minus a margin. Redis computed the lease's expiry
//! from its own clock at some moment after that send, so the lease cannot lapse in Redis
//! before the fence point (up to clock-rate drift, which the margin covers). Past the fence
//! point the lease counts as lost, whether or not the keeper has noticed yet: a process
//! resuming from a pause sees its permits fenced on the first look, before any thread of it
//! could renew.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use event_listener::Event;

/// One lease of this process: its id and where it lives in Redis, and its fence point.
pub(crate) struct Lease {
    pub(crate) id: String,
    /// The Redis key of the lease set it lives in.
    pub(crate) set: String,
    /// The key whose presence makes the grant script refuse this lease id: set when a grant
    /// is cancelled. It shares the lease set's hash tag.
    pub(crate) tombstone: String,
    pub(crate) local: Arc<KeyLocal>,
    /// The clock fence points are measured from.
    base: Instant,
    /// Nanoseconds from `base` to the fence point.
    fence_at: AtomicU64,
    fenced: AtomicBool,
    pub(crate) event: Event,
}

impl Lease {
    pub(crate) fn new(id: String, set: String, tombstone: String, local: Arc<KeyLocal>) -> Self {
        Self {
            id,
            set,
            tombstone,
            local,
            base: Instant::now(),
            fence_at: AtomicU64::new(0),
            fenced: AtomicBool::new(false),
            event: Event::new(),
        }
    }

    /// Moves the fence point to `sent + life`, where `sent` is when the grant or renewal
    /// Redis confirmed was sent and `life` the TTL less the fencing margin. Never moves it
    /// back (a late reply to an older renewal must not shorten a newer one).
    pub(crate) fn extend(&self, sent: Instant, life: Duration) {
        let at = u64::try_from(
            (sent + life)
                .saturating_duration_since(self.base)
                .as_nanos(),
        )
        .unwrap_or(u64::MAX);
        self.fence_at.fetch_max(at, Ordering::AcqRel);
    }

    pub(crate) fn fence_point(&self) -> Instant {
        self.base + Duration::from_nanos(self.fence_at.load(Ordering::Acquire))
    }

    /// Fenced for good once the fence point has passed: a renewal that lands later does not
    /// un-fence a permit whose holder may already have stopped.
    pub(crate) fn is_fenced(&self) -> bool {
        if self.fenced.load(Ordering::Acquire) {
            return true;
        }
        if Instant::now() >= self.fence_point() {
            self.fence();
            return true;
        }
        false
    }

    /// Marks the lease fenced and tells every waiter.
    pub(crate) fn fence(&self) {
        if !self.fenced.swap(true, Ordering::AcqRel) {
            self.event.notify(usize::MAX);
        }
    }
}

/// Per key (one Redis key name) and process: the turn that lets one task ask Redis at a
/// time, and the event a local release fires so that task asks again at once.
#[derive(Default)]
pub(crate) struct KeyLocal {
    pub(crate) turn: async_lock::Mutex<()>,
    pub(crate) released: Event,
}
