//! Runtime detection: which runtime is running this code, and the sync entry point.
//!
//! This is the only module that knows about tokio. Everything else asks it
//! "which runtime am I on?" ([`RuntimeKey`]) or "give me a timer" ([`RtSleep`]),
//! so a `cfg(feature = "tokio")` never leaks into the other files.

use std::cell::Cell;
use std::collections::BTreeSet;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// Identifies the runtime the current code runs on.
///
/// - Inside [`run_sync`]: that call's own id. Each call is a fresh runtime, like each
///   `asyncio.run` in Python, so two calls (even on the same thread) get different keys.
/// - With the `tokio` feature, inside a tokio runtime (async context, `spawn_blocking`
///   thread or after `Runtime::enter`): the runtime's [`tokio::runtime::Id`].
/// - Anywhere else (smol, async-std, `futures::executor`, a plain thread): one process-wide
///   key. Those executors have no identity tollgate can observe.
///
/// [`Bulkhead`](crate) keeps one semaphore per key, so a `static` bulkhead caps each runtime
/// separately. Getting the key is cheap (two thread-local reads); it runs on every acquire.
///
/// # Examples
///
/// ```
/// use tollgate::{RuntimeKey, run_sync};
///
/// let outside = RuntimeKey::current();
/// let first = run_sync(async { RuntimeKey::current() });
/// let second = run_sync(async { RuntimeKey::current() });
/// assert_ne!(first, second);
/// assert_ne!(first, outside);
/// assert!(outside.is_alive());
/// assert!(!first.is_alive()); // that run_sync call has returned
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct RuntimeKey(Repr);

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Repr {
    Process,
    RunSync(u64),
    #[cfg(feature = "tokio")]
    Tokio(tokio::runtime::Id),
}

impl RuntimeKey {
    /// The key of the runtime running the calling code.
    pub fn current() -> Self {
        if let Some(id) = RUN_SYNC_ID.with(Cell::get) {
            return Self(Repr::RunSync(id));
        }
        #[cfg(feature = "tokio")]
        if let Some(id) = tokio_rt::current_id() {
            return Self(Repr::Tokio(id));
        }
        Self(Repr::Process)
    }

    /// The process-wide key, shared by every caller that is not inside a
    /// [`run_sync`] call or (with the `tokio` feature) a tokio runtime.
    pub const fn process() -> Self {
        Self(Repr::Process)
    }

    /// Whether the runtime this key names may still run code.
    ///
    /// The process-wide key is always alive. A [`run_sync`] key dies when its call returns.
    /// A tokio key dies when its runtime shuts down (tollgate notices it through a tiny
    /// task it parks on the runtime the first time the key is observed; it is dropped with
    /// the runtime's other tasks). Structures keyed by runtime use this to forget runtimes
    /// that are gone.
    pub fn is_alive(&self) -> bool {
        match self.0 {
            Repr::Process => true,
            Repr::RunSync(id) => lock(&LIVE_RUN_SYNC).contains(&id),
            #[cfg(feature = "tokio")]
            Repr::Tokio(id) => tokio_rt::is_alive(id),
        }
    }
}

impl fmt::Debug for RuntimeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Repr::Process => f.write_str("RuntimeKey(process)"),
            Repr::RunSync(id) => write!(f, "RuntimeKey(run_sync #{id})"),
            #[cfg(feature = "tokio")]
            Repr::Tokio(id) => write!(f, "RuntimeKey(tokio #{id})"),
        }
    }
}

/// Locks a mutex, ignoring poisoning: the sets guarded here stay consistent even if a
/// panic unwinds through a holder (every critical section is a single insert/remove/lookup).
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

static NEXT_RUN_SYNC_ID: AtomicU64 = AtomicU64::new(1);
static LIVE_RUN_SYNC: Mutex<BTreeSet<u64>> = Mutex::new(BTreeSet::new());

thread_local! {
    /// The id of the `run_sync` call driving this thread, if any.
    static RUN_SYNC_ID: Cell<Option<u64>> = const { Cell::new(None) };
}

/// Marks the thread as inside a `run_sync` call for as long as it lives; restores the
/// outer state on drop, also when the future panics.
struct RunSyncScope {
    id: u64,
}

impl RunSyncScope {
    fn enter() -> Self {
        let id = NEXT_RUN_SYNC_ID.fetch_add(1, Ordering::Relaxed);
        lock(&LIVE_RUN_SYNC).insert(id);
        RUN_SYNC_ID.with(|cell| cell.set(Some(id)));
        Self { id }
    }
}

impl Drop for RunSyncScope {
    fn drop(&mut self) {
        RUN_SYNC_ID.with(|cell| cell.set(None));
        lock(&LIVE_RUN_SYNC).remove(&self.id);
    }
}

/// Why [`try_run_sync`] refused to start: the calling thread is already driving a runtime.
///
/// Blocking that thread on a new runtime would deadlock or starve the outer one. The fix is
/// to `.await` the future instead.
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
    if RUN_SYNC_ID.with(Cell::get).is_some() {
        return Err(RunSyncError {
            inside: Inside::RunSync,
        });
    }
    #[cfg(feature = "tokio")]
    if tokio::runtime::Handle::try_current().is_ok() {
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
/// runtime. Each call is its own runtime: a `static` [`Bulkhead`](crate) caps each call
/// separately (see [`RuntimeKey`]).
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
/// Panics (with a message saying what to do instead) when called inside a running
/// runtime, where blocking the thread would deadlock it:
/// - inside another `run_sync` call on the same thread;
/// - with the `tokio` feature, anywhere a tokio runtime is current: its async context, but
///   also its `spawn_blocking` threads, because tokio offers no public way to tell the two
///   apart. There, use `tokio::runtime::Handle::current().block_on(fut)`.
///
/// A bare `smol::block_on`, `futures::executor::block_on` or async-std caller cannot be
/// detected: those executors keep no state tollgate can observe. Nesting `run_sync` inside
/// them works but blocks their thread, as any nested `block_on` does.
///
/// Use [`try_run_sync`] to get the refusal as an error. A panic inside the future
/// propagates to the caller.
#[track_caller]
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
/// [`RunSyncError`] when the thread already drives a runtime (see [`run_sync`]'s
/// `# Panics` for exactly when); the future is dropped without being polled.
pub fn try_run_sync<F: Future>(future: F) -> Result<F::Output, RunSyncError> {
    check_not_in_runtime()?;
    let _scope = RunSyncScope::enter();
    Ok(async_io::block_on(future))
}

/// The current time on the clock tollgate's timers use: tokio's (pausable) clock inside a
/// tokio runtime with the `tokio` feature, the system's monotonic clock elsewhere.
pub(crate) fn now() -> Instant {
    #[cfg(feature = "tokio")]
    if tokio::runtime::Handle::try_current().is_ok() {
        return tokio::time::Instant::now().into_std();
    }
    Instant::now()
}

// pin-project-lite takes no `cfg` on variants, hence two declarations.
#[cfg(feature = "tokio")]
pin_project_lite::pin_project! {
    /// A timer on the right clock for the current runtime, chosen when it is created.
    #[project = RtSleepProj]
    pub(crate) enum RtSleep {
        Expired { none: () },
        AsyncIo { timer: async_io::Timer },
        Tokio { #[pin] sleep: tokio::time::Sleep },
    }
}

#[cfg(not(feature = "tokio"))]
pin_project_lite::pin_project! {
    /// A timer on the right clock for the current runtime, chosen when it is created.
    #[project = RtSleepProj]
    pub(crate) enum RtSleep {
        Expired { none: () },
        AsyncIo { timer: async_io::Timer },
    }
}

thread_local! {
    /// Set while [`block_on_real_time`] blocks this thread.
    static BLOCKING: Cell<bool> = const { Cell::new(false) };
}

/// Blocks the thread on `future`, its timers on the real clock even where a tokio runtime
/// is current (a `spawn_blocking` thread): a blocked thread lives outside the runtime's
/// time, and tokio's paused clock stops advancing while a blocking task runs, so a tokio
/// timer there could never fire.
pub(crate) fn block_on_real_time<F: Future>(future: F) -> F::Output {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            BLOCKING.with(|cell| cell.set(self.0));
        }
    }
    let _restore = Restore(BLOCKING.with(|cell| cell.replace(true)));
    async_io::block_on(future)
}

impl RtSleep {
    /// A timer that fires `duration` from now on the current runtime's clock;
    /// `Duration::MAX` (or anything overflowing the clock) never fires.
    pub(crate) fn after(duration: Duration) -> Self {
        // Fires on its first poll. Tokio would round zero up to its next 1 ms tick.
        if duration.is_zero() {
            return Self::Expired { none: () };
        }
        #[cfg(feature = "tokio")]
        if !BLOCKING.with(Cell::get) && tokio::runtime::Handle::try_current().is_ok() {
            return Self::Tokio {
                sleep: tokio::time::sleep(duration),
            };
        }
        Self::AsyncIo {
            timer: async_io::Timer::after(duration),
        }
    }
}

impl Future for RtSleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match self.project() {
            RtSleepProj::Expired { .. } => Poll::Ready(()),
            RtSleepProj::AsyncIo { timer } => Pin::new(timer).poll(cx).map(drop),
            #[cfg(feature = "tokio")]
            RtSleepProj::Tokio { sleep } => sleep.poll(cx),
        }
    }
}

#[cfg(feature = "tokio")]
mod tokio_rt {
    //! Tokio runtime ids and liveness.
    //!
    //! Tokio exposes no "has this runtime shut down?" query, so the first time tollgate sees
    //! a runtime it spawns a task that never finishes and holds a token. A runtime drops
    //! all its tasks when it shuts down, and with them the token: a dead `Weak` means a dead
    //! runtime. One such task per runtime, ever.

    use std::cell::Cell;
    use std::collections::HashMap;
    use std::sync::{Arc, LazyLock, Mutex, Weak};

    use tokio::runtime::{Handle, Id};

    static SENTINELS: LazyLock<Mutex<HashMap<Id, Weak<()>>>> = LazyLock::new(Default::default);

    thread_local! {
        /// The last runtime this thread registered, so the common case skips the global map.
        static REGISTERED: Cell<Option<Id>> = const { Cell::new(None) };
    }

    // No cache by task id: a task may `Handle::enter` another runtime for a while, and
    // tokio offers no cheap way to tell that apart from the task's own runtime.
    pub(super) fn current_id() -> Option<Id> {
        let handle = Handle::try_current().ok()?;
        let id = handle.id();
        if REGISTERED.with(Cell::get) != Some(id) {
            register(&handle, id);
            REGISTERED.with(|cell| cell.set(Some(id)));
        }
        Some(id)
    }

    fn register(handle: &Handle, id: Id) {
        let mut sentinels = super::lock(&SENTINELS);
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
        super::lock(&SENTINELS)
            .get(&id)
            .is_some_and(|token| token.strong_count() > 0)
    }
}
