//! A lease as this process sees it (`Lease`), the permit that owns one (`SharedKeyedBulkheadPermit`), and
//! the fencing signal (`Fence`, `Fenced`).
//!
//! A lease's fence point is a local `Instant`: the send time of the last grant or renewal
//! that Redis confirmed, plus the TTL, minus a margin. Redis computed the lease's expiry
//! from its own clock at some moment after that send, so the lease cannot lapse in Redis
//! before the fence point (up to clock-rate drift, which the margin covers). Past the fence
//! point the lease counts as lost, whether or not the keeper has noticed yet: a process
//! resuming from a pause sees its permits fenced on the first look, before any thread of it
//! could renew.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use event_listener::{Event, EventListener};

use crate::store::{Inner, KeyLocal};

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
    event: Event,
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

/// A permit of a [`SharedKeyedBulkhead`](crate::SharedKeyedBulkhead): one lease in its key's
/// lease set in Redis, renewed by this process's keeper while the permit lives, released
/// when it is dropped. A map's [`SharedKeyLimits`](crate::SharedKeyLimits), which share
/// their leases with the bulkhead of the same name, hold the same permit for each item.
///
/// Dropping the permit queues the release for the keeper thread, which sends it at once
/// (batched with other releases); another task of this process waiting for the key asks
/// again as soon as it is sent.
///
/// # Examples
///
/// ```no_run
/// use tollgate_redis::{RedisLimits, SharedKeyedBulkhead};
///
/// # futures_lite::future::block_on(async {
/// let store = RedisLimits::connect("redis://127.0.0.1:6379").await?;
/// let per_host = SharedKeyedBulkhead::new(&store, "fetch", 2);
/// let permit = per_host.acquire("example.com").await?;
/// assert!(!permit.is_fenced());
/// drop(permit); // released for the whole fleet
/// # Ok::<(), tollgate_redis::RedisLimitsError>(())
/// # });
/// ```
#[clippy::has_significant_drop]
#[must_use = "the permit is released as soon as it is dropped"]
pub struct SharedKeyedBulkheadPermit {
    pub(crate) lease: Arc<Lease>,
    pub(crate) store: Arc<Inner>,
}

impl SharedKeyedBulkheadPermit {
    /// Whether the permit is fenced: its process could not renew the lease before it would
    /// lapse, so the fleet may already have given the key's room to someone else. Work
    /// holding a fenced permit should stop.
    pub fn is_fenced(&self) -> bool {
        self.lease.is_fenced()
    }

    /// Completes when the permit is fenced (never, if it stays renewed).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only watches.
    pub fn fenced(&self) -> Fenced {
        self.fence().fenced()
    }

    /// A handle on this permit's fencing signal that can be moved into the work.
    pub fn fence(&self) -> Fence {
        Fence {
            lease: Arc::clone(&self.lease),
        }
    }

    /// The lease's id in Redis (this process's token and a counter).
    pub fn lease_id(&self) -> &str {
        &self.lease.id
    }
}

impl Drop for SharedKeyedBulkheadPermit {
    fn drop(&mut self) {
        self.store.keeper.release(Arc::clone(&self.lease));
    }
}

impl fmt::Debug for SharedKeyedBulkheadPermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedKeyedBulkheadPermit")
            .field("lease", &self.lease.id)
            .field("fenced", &self.is_fenced())
            .finish()
    }
}

/// The fencing signal of one [`SharedKeyedBulkheadPermit`], cloneable and movable into the work that
/// the permit covers (see [`SharedKeyedBulkhead::run_with`](crate::SharedKeyedBulkhead::run_with)).
///
/// A `Fence` kept after its permit is dropped reports the permit fenced once the last fence
/// point passes (nothing renews a released lease): it only means something while the permit
/// lives.
#[derive(Clone)]
pub struct Fence {
    lease: Arc<Lease>,
}

impl Fence {
    /// Whether the permit is fenced (see [`SharedKeyedBulkheadPermit::is_fenced`]).
    pub fn is_fenced(&self) -> bool {
        self.lease.is_fenced()
    }

    /// Completes when the permit is fenced.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only watches.
    pub fn fenced(&self) -> Fenced {
        Fenced {
            lease: Arc::clone(&self.lease),
            listener: None,
            timer: None,
        }
    }
}

impl fmt::Debug for Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fence")
            .field("fenced", &self.is_fenced())
            .finish()
    }
}

/// The future of [`SharedKeyedBulkheadPermit::fenced`] and [`Fence::fenced`].
///
/// It completes when the keeper fences the lease, or on its own when the lease's fence
/// point passes without a renewal (so a process resumed from a pause sees it at once).
#[must_use = "futures do nothing unless you `.await` or poll them"]
pub struct Fenced {
    lease: Arc<Lease>,
    listener: Option<EventListener>,
    timer: Option<(Instant, Pin<Box<tollgate::futures::Sleep>>)>,
}

impl Future for Fenced {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        loop {
            if this.lease.is_fenced() {
                return Poll::Ready(());
            }
            let Some(listener) = this.listener.as_mut() else {
                // Listen, then look again: a fence between the look and the listen is seen.
                this.listener = Some(this.lease.event.listen());
                continue;
            };
            if Pin::new(listener).poll(cx).is_ready() {
                this.listener = None;
                continue;
            }
            let point = this.lease.fence_point();
            match &mut this.timer {
                Some((armed, timer)) if *armed == point => {
                    if timer.as_mut().poll(cx).is_ready() {
                        // The point passed; the loop's first look says fenced.
                        this.timer = None;
                        continue;
                    }
                    return Poll::Pending;
                }
                _ => {
                    let wait = point.saturating_duration_since(Instant::now());
                    this.timer = Some((point, Box::pin(tollgate::sleep(wait))));
                }
            }
        }
    }
}

impl fmt::Debug for Fenced {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fenced").finish_non_exhaustive()
    }
}
