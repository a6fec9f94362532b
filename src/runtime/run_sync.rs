//! [`run_sync`] and [`try_run_sync`]: drive a future on the calling thread, refusing to
//! nest inside a runtime that this thread already drives.

use std::cell::Cell;
use std::collections::BTreeSet;
use std::fmt;
use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::sync::lock;

static NEXT_ID: AtomicU64 = AtomicU64::new(1);
/// The ids of the `run_sync` calls still running, on any thread.
static LIVE: Mutex<BTreeSet<u64>> = Mutex::new(BTreeSet::new());

thread_local! {
    /// The id of the `run_sync` call driving this thread, if any.
    static CURRENT: Cell<Option<u64>> = const { Cell::new(None) };
}

/// The id of the `run_sync` call driving this thread, if any.
#[inline]
pub(super) fn current_id() -> Option<u64> {
    CURRENT.with(Cell::get)
}

/// Whether the `run_sync` call with this id is still running.
pub(super) fn is_alive(id: u64) -> bool {
    lock(&LIVE).contains(&id)
}

/// Marks the thread as inside a `run_sync` call for as long as it lives; restores the
/// outer state on drop, also when the future panics.
struct Scope {
    id: u64,
}

impl Scope {
    fn enter() -> Self {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        lock(&LIVE).insert(id);
        CURRENT.with(|cell| cell.set(Some(id)));
        Self { id }
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        CURRENT.with(|cell| cell.set(None));
        lock(&LIVE).remove(&self.id);
    }
}

/// Why [`try_run_sync`] refused to start: the calling thread is already driving a runtime.
///
/// Blocking that thread on a new runtime would deadlock or starve the outer one. The fix is
/// to `.await` the future instead.
///
/// # Examples
///
/// ```
/// use tollgate::{RunSyncError, run_sync, try_run_sync};
///
/// let refused: RunSyncError = run_sync(async { try_run_sync(async { 1 }) }).unwrap_err();
/// assert_eq!(
///     refused.to_string(),
///     "run_sync called inside another run_sync call; `.await` the future instead"
/// );
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunSyncError {
    inside: Inside,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Inside {
    RunSync,
    #[cfg(feature = "tokio")]
    Tokio,
}

impl fmt::Display for RunSyncError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.inside {
            Inside::RunSync => f.write_str(
                "run_sync called inside another run_sync call; `.await` the future instead",
            ),
            #[cfg(feature = "tokio")]
            Inside::Tokio => f.write_str(
                "run_sync called inside a tokio runtime; `.await` the future instead \
                 (from a spawn_blocking thread use `tokio::runtime::Handle::current().block_on(fut)`)",
            ),
        }
    }
}

impl std::error::Error for RunSyncError {}

fn check_not_in_runtime() -> Result<(), RunSyncError> {
    if current_id().is_some() {
        return Err(RunSyncError {
            inside: Inside::RunSync,
        });
    }
    #[cfg(feature = "tokio")]
    if super::tokio::is_current() {
        return Err(RunSyncError {
            inside: Inside::Tokio,
        });
    }
    Ok(())
}

/// Runs a future to completion on the calling thread: the sync entry point of a script.
///
/// The future need not be `Send`. It is driven by async-io's `block_on`, so tollgate's
/// timers, async-io sockets and anything else runtime-agnostic work without installing a
/// runtime. Each call is its own runtime: a `static` [`Bulkhead`](crate::Bulkhead) caps
/// each call separately (see [`RuntimeKey`](crate::RuntimeKey)).
///
/// # Examples
///
/// ```
/// use std::rc::Rc;
/// use std::time::Duration;
///
/// let answer = tollgate::run_sync(async {
///     let not_send = Rc::new(21);
///     tollgate::sleep(Duration::from_millis(1)).await;
///     *not_send * 2
/// });
/// assert_eq!(answer, 42);
/// ```
///
/// # Panics
///
/// Panics (with a message saying what to do instead) where [`try_run_sync`] returns an
/// error: inside another `run_sync` call on the same thread, and, with the `tokio`
/// feature, wherever a tokio runtime is current (see [`try_run_sync`]'s `# Errors` for
/// exactly when, and for what happens without the feature). A panic inside the future
/// propagates to the caller.
#[track_caller]
#[doc(alias = "block_on")]
#[doc(alias = "asyncio.run")]
pub fn run_sync<F: Future>(future: F) -> F::Output {
    match try_run_sync(future) {
        Ok(output) => output,
        Err(refused) => panic!("{refused}"),
    }
}

/// Like [`run_sync`], but returns an error instead of panicking inside a running runtime.
///
/// # Examples
///
/// ```
/// use tollgate::{run_sync, try_run_sync};
///
/// run_sync(async {
///     let nested = try_run_sync(async { 1 });
///     assert!(nested.is_err());
/// });
/// assert_eq!(try_run_sync(async { 1 }), Ok(1));
/// ```
///
/// # Errors
///
/// [`RunSyncError`] when the calling thread already drives a runtime tollgate can see;
/// the future is dropped without being polled. That is:
/// - inside another `run_sync` call on the same thread;
/// - **with the `tokio` feature**, anywhere a tokio runtime is current: its async context,
///   but also its `spawn_blocking` threads, because tokio offers no public way to tell the
///   two apart. There, use `tokio::runtime::Handle::current().block_on(fut)`.
///
/// **Without the `tokio` feature, tollgate cannot see tokio**: inside a tokio runtime this
/// returns `Ok` and blocks the tokio worker thread until the future completes. On a
/// current-thread runtime that stalls every other task of the runtime meanwhile, and a
/// future that waits for one of them (or for tokio's timers or I/O) never completes:
/// a deadlock. Enable the feature if your program uses tokio.
///
/// Likewise a bare `smol::block_on`, `futures::executor::block_on` or async-std caller
/// cannot be detected: those executors keep no state tollgate can observe. Nesting
/// `try_run_sync` inside them returns `Ok` and blocks their thread, as any nested
/// `block_on` does.
pub fn try_run_sync<F: Future>(future: F) -> Result<F::Output, RunSyncError> {
    check_not_in_runtime()?;
    let _scope = Scope::enter();
    Ok(async_io::block_on(future))
}
