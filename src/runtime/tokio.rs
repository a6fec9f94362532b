//! Tokio runtime ids, their liveness, and tokio's clock (feature `tokio` only).
//!
//! Tokio exposes no "has this runtime shut down?" query, so the first time a runtime's key
//! is taken ([`current_id`]: `RuntimeKey::current`, which a bulkhead that is not `.global()`
//! calls) tollgate spawns a sentinel on it: a task that never finishes and holds a token.
//! A runtime drops all its tasks when it shuts down, and with them the token: a dead `Weak`
//! means a dead runtime, whose caps can be forgotten. One such task per runtime, ever: it
//! is polled once, never wakes, and costs its allocation, one entry in [`SENTINELS`]
//! (entries of dead runtimes are dropped at the next registration) and one alive task in
//! tokio's metrics. The only task tollgate spawns.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, Weak};
use std::time::Instant;

use tokio::runtime::{Handle, Id};

use crate::sync::lock;

static SENTINELS: LazyLock<Mutex<HashMap<Id, Weak<()>>>> = LazyLock::new(Default::default);

thread_local! {
    /// The last runtime this thread registered, so the common case skips the global map.
    static REGISTERED: Cell<Option<Id>> = const { Cell::new(None) };
}

/// Whether a tokio runtime is current on this thread (its async context, a
/// `spawn_blocking` thread, or after `Runtime::enter`).
pub(super) fn is_current() -> bool {
    Handle::try_current().is_ok()
}

/// Now, on tokio's clock (which `tokio::time::pause` stops). Call only where
/// [`is_current`] holds.
pub(super) fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

// No cache by task id: a task may `Handle::enter` another runtime for a while, and
// tokio offers no cheap way to tell that apart from the task's own runtime.
#[inline]
pub(super) fn current_id() -> Option<Id> {
    let id = current_id_unregistered()?;
    register_current(id);
    Some(id)
}

/// The current runtime's id, without making sure the runtime is registered (see
/// [`register_current`]).
#[inline]
pub(super) fn current_id_unregistered() -> Option<Id> {
    // The handle is dropped at once: only the id is kept, and the rare registration looks
    // the handle up again.
    Some(Handle::try_current().ok()?.id())
}

/// Makes sure the current runtime, whose id is `id`, has its sentinel, so that
/// [`is_alive`] tells the truth about it.
#[inline]
pub(super) fn register_current(id: Id) {
    if REGISTERED.with(Cell::get) != Some(id) {
        register(id);
    }
}

#[cold]
#[inline(never)]
fn register(id: Id) {
    let Ok(handle) = Handle::try_current() else {
        return;
    };
    // The caller read `id` from this thread's context just before; checked anyway, so a
    // sentinel is never parked on a runtime under another's id.
    if handle.id() == id {
        spawn_sentinel(&handle, id);
        REGISTERED.with(|cell| cell.set(Some(id)));
    }
}

fn spawn_sentinel(handle: &Handle, id: Id) {
    let mut sentinels = lock(&SENTINELS);
    if sentinels.contains_key(&id) {
        return;
    }
    // Forget runtimes that are gone, so the map stays as small as the set of live ones.
    sentinels.retain(|_, token| token.strong_count() > 0);
    let token = Arc::new(());
    sentinels.insert(id, Arc::downgrade(&token));
    drop(sentinels);
    // If the runtime is already shutting down, tokio drops the future at once and the
    // key reads as dead, which is the truth.
    drop(handle.spawn(async move {
        let _token = token;
        std::future::pending::<()>().await;
    }));
}

pub(super) fn is_alive(id: Id) -> bool {
    lock(&SENTINELS)
        .get(&id)
        .is_some_and(|token| token.strong_count() > 0)
}
