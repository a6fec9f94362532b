//! [`RuntimeKey`]: which runtime runs the calling code.

use std::fmt;

use super::run_sync;

/// Identifies the runtime the current code runs on.
///
/// - Inside [`run_sync`](crate::run_sync): that call's own id. Each call is a fresh
///   runtime, like each `asyncio.run` in Python, so two calls (even on the same thread) get
///   different keys.
/// - With the `tokio` feature, inside a tokio runtime (async context, `spawn_blocking`
///   thread or after `Runtime::enter`): the runtime's id (`tokio::runtime::Id`).
/// - Anywhere else (smol, async-std, `futures::executor`, a plain thread, and tokio
///   *without* the `tokio` feature): one process-wide key. Those executors have no
///   identity tollgate can observe.
///
/// [`Bulkhead`](crate::Bulkhead) keeps one semaphore per key, so a `static` bulkhead caps
/// each runtime separately. Getting the key is cheap (two thread-local reads); it runs on
/// every acquire.
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
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::RuntimeKey;
    ///
    /// // A plain thread (and smol, async-std, `futures::executor`): the process-wide key.
    /// assert_eq!(RuntimeKey::current(), RuntimeKey::process());
    /// let inside = tollgate::run_sync(async { RuntimeKey::current() });
    /// assert_ne!(inside, RuntimeKey::process());
    /// ```
    #[inline]
    pub fn current() -> Self {
        if let Some(id) = run_sync::current_id() {
            return Self(Repr::RunSync(id));
        }
        #[cfg(feature = "tokio")]
        if let Some(id) = super::tokio::current_id() {
            return Self(Repr::Tokio(id));
        }
        Self(Repr::Process)
    }

    /// [`current`](Self::current) without registering a tokio runtime (parking the task
    /// whose end tells [`is_alive`](Self::is_alive) that the runtime has shut down), for a
    /// caller that remembers the keys it has [`register`](Self::register)ed: until then,
    /// such a key reads as dead.
    #[inline]
    pub(crate) fn current_unregistered() -> Self {
        if let Some(id) = run_sync::current_id() {
            return Self(Repr::RunSync(id));
        }
        #[cfg(feature = "tokio")]
        if let Some(id) = super::tokio::current_id_unregistered() {
            return Self(Repr::Tokio(id));
        }
        Self(Repr::Process)
    }

    /// Registers a key from [`current_unregistered`](Self::current_unregistered), as
    /// [`current`](Self::current) does its own: call it on the same thread with the same
    /// runtime current, before anything else sees the key.
    #[cold]
    pub(crate) fn register(self) {
        #[cfg(feature = "tokio")]
        if let Repr::Tokio(id) = self.0 {
            super::tokio::register_current(id);
        }
    }

    /// The process-wide key, shared by every caller that is not inside a
    /// [`run_sync`](crate::run_sync) call or (with the `tokio` feature) a tokio runtime.
    ///
    /// # Examples
    ///
    /// ```
    /// let key = tollgate::RuntimeKey::process();
    /// assert!(key.is_alive());
    /// assert_eq!(format!("{key:?}"), "RuntimeKey(process)");
    /// ```
    pub const fn process() -> Self {
        Self(Repr::Process)
    }

    /// Whether the runtime this key names may still run code.
    ///
    /// The process-wide key is always alive. A [`run_sync`](crate::run_sync) key dies when
    /// its call returns. A tokio key dies when its runtime shuts down (tollgate notices it
    /// through a tiny task it parks on the runtime the first time the key is observed; it
    /// is dropped with the runtime's other tasks). Structures keyed by runtime use this to
    /// forget runtimes that are gone.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{RuntimeKey, run_sync};
    ///
    /// let (key, alive_inside) = run_sync(async {
    ///     let key = RuntimeKey::current();
    ///     (key, key.is_alive())
    /// });
    /// assert!(alive_inside);
    /// assert!(!key.is_alive());
    /// ```
    pub fn is_alive(&self) -> bool {
        match self.0 {
            Repr::Process => true,
            Repr::RunSync(id) => run_sync::is_alive(id),
            #[cfg(feature = "tokio")]
            Repr::Tokio(id) => super::tokio::is_alive(id),
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
