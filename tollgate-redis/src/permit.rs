//! The permit that owns a lease (`SharedKeyedBulkheadPermit`) and the fencing signal
//! (`Fence`, `Fenced`).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use event_listener::EventListener;

use crate::lease::Lease;
use crate::store::Inner;

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
    pub fn until_fenced(&self) -> Fenced {
        self.fence().until_fenced()
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
    pub fn until_fenced(&self) -> Fenced {
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

/// The future of [`SharedKeyedBulkheadPermit::until_fenced`] and [`Fence::until_fenced`].
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
