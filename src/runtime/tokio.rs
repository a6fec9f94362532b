//! Tokio runtime ids, their liveness, and tokio's clock (feature `tokio` only).
//!
//! Tokio exposes no "has this runtime shut down?" query, so the first time tollgate sees
//! a runtime it spawns a task that never finishes and holds a token. A runtime drops
//! all its tasks when it shuts down, and with them the token: a dead `Weak` means a dead
//! runtime. One such task per runtime, ever.

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
    let id = current_id_unwatched()?;
    if REGISTERED.with(Cell::get) != Some(id) {
        register(id);
    }
    Some(id)
}

/// The current runtime's id, without making sure the runtime is watched for its shutdown
/// (see [`watch_current`]).
#[inline]
pub(super) fn current_id_unwatched() -> Option<Id> {
    // The handle is dropped at once: only the id is kept, and the rare registration looks
    // the handle up again (the thread's runtime context cannot change in between).
    Some(Handle::try_current().ok()?.id())
}

/// Makes sure the current runtime, whose id is `id`, is watched for its shutdown.
#[cold]
#[inline(never)]
pub(super) fn watch_current(id: Id) {
    if REGISTERED.with(Cell::get) != Some(id) {
        register(id);
    }
}

/// Watches the runtime `id` (the current one) for its shutdown, once per runtime, and
/// remembers on this thread that it is watched.
#[cold]
#[inline(never)]
fn register(id: Id) {
    if let Ok(handle) = Handle::try_current() {
        watch(&handle, id);
        REGISTERED.with(|cell| cell.set(Some(id)));
    }
}

fn watch(handle: &Handle, id: Id) {
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
