//! [`Bulkhead`]: a named cap on concurrent work with a wait timeout and a bounded queue,
//! one [`Semaphore`] per runtime; its [`BulkheadPermit`]s, [`BulkheadError`] error and
//! [`BulkheadStats`].
//!
//! # The per-runtime lookup
//!
//! A `static` bulkhead is used from many runtimes (every [`run_sync`](crate::run_sync)
//! call is one), so each acquire first finds the current runtime's semaphore:
//!
//! - the process-wide key (smol, async-std, plain threads, tokio without the `tokio`
//!   feature) and `.global()` bulkheads use a semaphore stored inline, found for free;
//! - other runtimes have an `Arc<Semaphore>` in a small mutex-protected list, and each
//!   thread caches the last few (bulkhead, runtime) pairs it used as `Weak`s, so the
//!   common acquire takes no lock;
//! - entries of runtimes that are gone and hold no permit are dropped whenever a new
//!   runtime's entry is inserted, so the list stays as long as the set of live runtimes.

pub(crate) mod keyed;

use std::cell::RefCell;
use std::fmt;
use std::future::Future;
use std::mem;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use crate::limit::semaphore::{Counters, Semaphore, Waiter};
use crate::runtime::{RtSleep, RuntimeKey};

/// Options shared by [`Bulkhead`] and [`KeyedBulkhead`](crate::KeyedBulkhead).
#[derive(Clone, Debug)]
pub(crate) struct Options {
    pub(crate) limit: usize,
    pub(crate) timeout: Option<Duration>,
    pub(crate) max_waiting: Option<usize>,
    pub(crate) name: Name,
    pub(crate) global: bool,
}

impl Options {
    pub(crate) const fn new(limit: usize) -> Self {
        Self {
            limit,
            timeout: None,
            max_waiting: None,
            name: Name::Unnamed,
            global: false,
        }
    }

    /// Sets a `'static` name in a `const fn`.
    pub(crate) const fn set_static_name(&mut self, name: &'static str) {
        let previous = mem::replace(&mut self.name, Name::Static(name));
        // A `const fn` cannot run destructors. Only a name given to `with_name` owns
        // memory, and replacing it by a static one is rare and small enough to leak.
        mem::forget(previous);
    }

    #[cold]
    fn full(&self, reason: Reason) -> BulkheadError {
        BulkheadError(Box::new(Full {
            name: self.name.clone(),
            limit: self.limit,
            reason,
        }))
    }

    /// The runtime whose semaphore the calling code uses.
    #[inline]
    pub(crate) fn runtime(&self) -> RuntimeKey {
        if self.global {
            RuntimeKey::process()
        } else {
            RuntimeKey::current()
        }
    }

    pub(crate) fn fmt_fields(&self, f: &mut fmt::DebugStruct<'_, '_>) {
        f.field("name", &self.name.as_str())
            .field("limit", &self.limit)
            .field("timeout", &self.timeout)
            .field("max_waiting", &self.max_waiting)
            .field("global", &self.global);
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Name {
    Unnamed,
    Static(&'static str),
    Shared(Arc<str>),
}

impl Name {
    fn as_str(&self) -> Option<&str> {
        match self {
            Name::Unnamed => None,
            Name::Static(name) => Some(name),
            Name::Shared(name) => Some(name),
        }
    }
}

/// Why a [`Bulkhead`] refused: it had no free slot and either its wait timeout passed or
/// its queue was full.
///
/// Says which bulkhead (its [`name`](Self::name)), its [`limit`](Self::limit) and the
/// reason: [`timed_out`](Self::timed_out) or [`queue_full`](Self::queue_full).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::Bulkhead;
///
/// static API: Bulkhead = Bulkhead::new(1).name("api").timeout(Duration::ZERO);
///
/// # futures_lite::future::block_on(async {
/// let _busy = API.acquire().await?;
/// let refused = API.acquire().await.unwrap_err();
/// assert_eq!(refused.name(), Some("api"));
/// assert_eq!(refused.timed_out(), Some(Duration::ZERO));
/// assert_eq!(refused.to_string(), "bulkhead `api` (limit 1) has no free slot and a wait timeout of zero");
/// # Ok::<(), tollgate::BulkheadError>(())
/// # }).unwrap();
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BulkheadError(Box<Full>);

/// Boxed so that `Result<BulkheadPermit, BulkheadError>` stays small on the fast path.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Full {
    name: Name,
    limit: usize,
    reason: Reason,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reason {
    TimedOut(Duration),
    QueueFull(usize),
}

impl BulkheadError {
    /// The bulkhead's name, if it was given one.
    pub fn name(&self) -> Option<&str> {
        self.0.name.as_str()
    }

    /// The bulkhead's limit on concurrent work.
    pub fn limit(&self) -> usize {
        self.0.limit
    }

    /// `Some(timeout)` when the wait for a slot lasted the whole wait timeout.
    pub fn timed_out(&self) -> Option<Duration> {
        match self.0.reason {
            Reason::TimedOut(timeout) => Some(timeout),
            Reason::QueueFull(_) => None,
        }
    }

    /// `Some(max_waiting)` when the queue of waiters was already at its bound.
    pub fn queue_full(&self) -> Option<usize> {
        match self.0.reason {
            Reason::QueueFull(max_waiting) => Some(max_waiting),
            Reason::TimedOut(_) => None,
        }
    }
}

impl fmt::Display for BulkheadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Full {
            name,
            limit,
            reason,
        } = &*self.0;
        match name.as_str() {
            Some(name) => write!(f, "bulkhead `{name}` (limit {limit})")?,
            None => write!(f, "bulkhead (limit {limit})")?,
        }
        match *reason {
            Reason::TimedOut(Duration::ZERO) => {
                f.write_str(" has no free slot and a wait timeout of zero")
            }
            Reason::TimedOut(timeout) => write!(f, " had no free slot within {timeout:?}"),
            Reason::QueueFull(0) => f.write_str(" has no free slot and takes no waiters"),
            Reason::QueueFull(max) => {
                write!(f, " has no free slot and {max} callers already waiting")
            }
        }
    }
}

impl std::error::Error for BulkheadError {}

/// A snapshot of a bulkhead's counters for the current runtime, from
/// [`Bulkhead::stats`] or [`KeyedBulkhead::stats`](crate::KeyedBulkhead::stats).
///
/// The fields are read one after another, so while the bulkhead is busy they may be a few
/// operations apart; once it is quiet they are exact.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct BulkheadStats {
    /// The most permits that can be out at once.
    pub limit: usize,
    /// Permits out right now.
    pub in_flight: usize,
    /// Callers queued for a permit right now.
    pub waiting: usize,
    /// The most permits that were ever out at once.
    pub peak_in_flight: usize,
    /// Permits handed out so far. (A snapshot taken at the very moment the internal
    /// 31-bit admission counter wraps may read 2^31 low, once per 2^31 admissions.)
    pub admitted: u64,
    /// Acquires refused with [`BulkheadError`] so far (a failed `try_acquire` is not counted).
    pub rejected: u64,
}

impl BulkheadStats {
    pub(crate) fn new(limit: usize, counters: Option<Counters>) -> Self {
        let counters = counters.unwrap_or(Counters {
            in_flight: 0,
            waiting: 0,
            peak: 0,
            admitted: 0,
            rejected: 0,
        });
        Self {
            limit,
            in_flight: counters.in_flight,
            waiting: counters.waiting,
            peak_in_flight: counters.peak,
            admitted: counters.admitted,
            rejected: counters.rejected,
        }
    }

    /// Free slots right now: `limit - in_flight`.
    pub fn available(&self) -> usize {
        self.limit - self.in_flight
    }
}

/// The waiting part of every bulkhead acquire: the place in the queue and the wait timer.
pub(crate) struct Wait {
    waiter: Waiter,
    /// Started when the caller first has to queue; boxed because it is `!Unpin` and only
    /// the slow path needs it.
    timer: Option<Pin<Box<RtSleep>>>,
}

impl Wait {
    #[inline]
    pub(crate) const fn new() -> Self {
        Self {
            waiter: Waiter::new(),
            timer: None,
        }
    }

    /// `Ready(Ok(()))` once the caller holds a permit of `semaphore`.
    #[inline]
    pub(crate) fn poll(
        &mut self,
        semaphore: &Semaphore,
        options: &Options,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), BulkheadError>> {
        if self.waiter.is_idle() && semaphore.try_take() {
            return Poll::Ready(Ok(()));
        }
        self.poll_slow(semaphore, options, cx)
    }

    #[cold]
    fn poll_slow(
        &mut self,
        semaphore: &Semaphore,
        options: &Options,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), BulkheadError>> {
        let zero_timeout = options.timeout == Some(Duration::ZERO);
        // A zero timeout means "a free slot or nothing": no queueing at all.
        let max_waiting = match options.max_waiting {
            _ if zero_timeout => 0,
            Some(max) => max,
            None => usize::MAX,
        };
        match semaphore.poll_acquire(&mut self.waiter, cx, max_waiting) {
            Poll::Ready(Ok(())) => return Poll::Ready(Ok(())),
            Poll::Ready(Err(_)) => {
                semaphore.note_rejected();
                let reason = if zero_timeout {
                    Reason::TimedOut(Duration::ZERO)
                } else {
                    Reason::QueueFull(max_waiting)
                };
                return Poll::Ready(Err(options.full(reason)));
            }
            Poll::Pending => {}
        }
        let Some(timeout) = options.timeout else {
            return Poll::Pending;
        };
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(RtSleep::after(timeout)));
        if timer.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        // Time is up, but a permit granted in the meantime still counts.
        if semaphore.cancel(&mut self.waiter) {
            return Poll::Ready(Ok(()));
        }
        semaphore.note_rejected();
        Poll::Ready(Err(options.full(Reason::TimedOut(timeout))))
    }

    /// For a dropped, unfinished acquire: leave the queue, and pass on a permit that was
    /// granted but never handed out.
    pub(crate) fn abandon(&mut self, semaphore: &Semaphore) {
        if semaphore.cancel(&mut self.waiter) {
            semaphore.release();
        }
    }
}

/// A cap on how much work runs at once, with an optional wait timeout, a bounded wait
/// queue and a name for error messages: the bulkhead pattern.
///
/// `Bulkhead::new` is a `const fn`, so a bulkhead can be a `static` next to the code it
/// protects. It keeps **one semaphore per runtime** (see [`RuntimeKey`]): each
/// [`run_sync`](crate::run_sync) call, each tokio runtime (with the `tokio` feature) and the
/// process-wide rest get their own `limit`, so a `static` bulkhead is safe across many
/// `run_sync` calls or `#[tokio::test]`s. [`global`](Self::global) makes it one cap
/// across all runtimes. Semaphores of runtimes that are gone are reclaimed.
///
/// Permits go to waiters in arrival order (FIFO) and [`try_acquire`](Self::try_acquire)
/// never jumps the queue. [`stats`](Self::stats) reports the peak in flight, admissions
/// and rejections.
///
/// | option | default | effect |
/// | --- | --- | --- |
/// | [`timeout(d)`](Self::timeout) | wait forever | give up waiting for a slot after `d` ([`BulkheadError::timed_out`]); zero = take a free slot or fail at once |
/// | [`max_waiting(n)`](Self::max_waiting) | unbounded | refuse at once when `n` callers already wait ([`BulkheadError::queue_full`]); 0 = no queue |
/// | [`name(s)`](Self::name) / [`with_name(s)`](Self::with_name) | none | named in [`BulkheadError`] |
/// | [`global()`](Self::global) | per runtime | one cap shared by every runtime |
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::Bulkhead;
///
/// static SEARCH_API: Bulkhead = Bulkhead::new(4)
///     .name("search-api")
///     .timeout(Duration::from_secs(10))
///     .max_waiting(100);
///
/// async fn search(query: &str) -> Result<String, tollgate::BulkheadError> {
///     SEARCH_API
///         .run(async {
///             tollgate::sleep(Duration::from_millis(1)).await; // the request, simulated
///             format!("results for {query}")
///         })
///         .await
/// }
///
/// let answer = tollgate::run_sync(search("tollgate"));
/// assert_eq!(answer.unwrap(), "results for tollgate");
/// ```
///
/// A bulkhead with a limit of 0 does not compile as a `static`:
///
/// ```compile_fail
/// static NOTHING: tollgate::Bulkhead = tollgate::Bulkhead::new(0);
/// ```
#[doc(alias = "semaphore")]
#[doc(alias = "limiter")]
pub struct Bulkhead {
    options: Options,
    /// The process-wide key's semaphore, and the only one of a `global` bulkhead.
    process: Semaphore,
    /// Semaphores of the other runtimes (`run_sync` calls, tokio runtimes).
    runtimes: Mutex<Vec<(RuntimeKey, Arc<Semaphore>)>>,
    /// Identity in the per-thread caches; 0 until first needed.
    id: AtomicU64,
}

/// Source of [`Bulkhead`] identities for the per-thread caches (0 means "none yet").
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// The last few (bulkhead, runtime) semaphores this thread used.
    static CACHE: RefCell<Cache> = const { RefCell::new(Cache::new()) };
}

const CACHE_SIZE: usize = 4;

struct Cache {
    entries: [Option<CacheEntry>; CACHE_SIZE],
    next: usize,
}

struct CacheEntry {
    bulkhead: u64,
    runtime: RuntimeKey,
    semaphore: Weak<Semaphore>,
}

impl Cache {
    const fn new() -> Self {
        Self {
            entries: [const { None }; CACHE_SIZE],
            next: 0,
        }
    }

    fn get(&self, bulkhead: u64, runtime: RuntimeKey) -> Option<Arc<Semaphore>> {
        self.entries
            .iter()
            .flatten()
            .find(|entry| entry.bulkhead == bulkhead && entry.runtime == runtime)
            .and_then(|entry| entry.semaphore.upgrade())
    }

    fn put(&mut self, bulkhead: u64, runtime: RuntimeKey, semaphore: &Arc<Semaphore>) {
        let entry = CacheEntry {
            bulkhead,
            runtime,
            semaphore: Arc::downgrade(semaphore),
        };
        let slot = self.entries.iter().position(|entry| {
            entry
                .as_ref()
                .is_some_and(|entry| entry.bulkhead == bulkhead && entry.runtime == runtime)
        });
        let slot = slot.unwrap_or_else(|| {
            let slot = self.next;
            self.next = (self.next + 1) % CACHE_SIZE;
            slot
        });
        self.entries[slot] = Some(entry);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section here is a lookup, a push or a `retain` that cannot panic
    // half-way, so a poisoned lock still guards consistent data.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Bulkhead {
    crate::sync::const_unless_loom! {
        /// Creates a bulkhead that lets at most `limit` callers in at once (per runtime).
        ///
        /// Callers beyond the limit wait in a FIFO queue, with no timeout and no bound unless
        /// [`timeout`](Self::timeout) and [`max_waiting`](Self::max_waiting) say otherwise.
        ///
        /// # Examples
        ///
        /// ```
        /// static DATABASE: tollgate::Bulkhead = tollgate::Bulkhead::new(10);
        /// assert_eq!(DATABASE.limit(), 10);
        /// ```
        ///
        /// # Panics
        ///
        /// Panics when `limit` is 0 (nothing could ever run) or above
        /// [`Semaphore::MAX_PERMITS`]. In a `static` that is a compile-time error.
        #[track_caller]
        pub const fn new(limit: usize) -> Self {
            assert!(
                limit > 0,
                "tollgate::Bulkhead::new: a limit of 0 would refuse all work; use at least 1"
            );
            assert!(
                limit <= Semaphore::MAX_PERMITS,
                "tollgate::Bulkhead::new: more than Semaphore::MAX_PERMITS (2^31 - 1)"
            );
            Self {
                options: Options::new(limit),
                process: Semaphore::new(limit),
                runtimes: Mutex::new(Vec::new()),
                id: AtomicU64::new(0),
            }
        }
    }

    /// Gives up waiting for a slot after `timeout`, with [`BulkheadError`].
    ///
    /// The timeout bounds the wait in the queue, not the work done with the permit.
    /// `Duration::ZERO` means "take a free slot or fail at once".
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Bulkhead;
    ///
    /// let bulkhead = Bulkhead::new(1).timeout(Duration::from_millis(5));
    /// # futures_lite::future::block_on(async {
    /// let _held = bulkhead.acquire().await.unwrap();
    /// let error = bulkhead.acquire().await.unwrap_err();
    /// assert_eq!(error.timed_out(), Some(Duration::from_millis(5)));
    /// # });
    /// ```
    pub const fn timeout(mut self, timeout: Duration) -> Self {
        self.options.timeout = Some(timeout);
        self
    }

    /// Refuses at once, with [`BulkheadError`], when no slot is free and `max_waiting`
    /// callers already wait.
    ///
    /// `max_waiting(0)` means no queue at all: refuse whenever every slot is taken.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::Bulkhead;
    ///
    /// let bulkhead = Bulkhead::new(1).max_waiting(0);
    /// # futures_lite::future::block_on(async {
    /// let _held = bulkhead.acquire().await.unwrap();
    /// let error = bulkhead.acquire().await.unwrap_err();
    /// assert_eq!(error.queue_full(), Some(0));
    /// # });
    /// ```
    pub const fn max_waiting(mut self, max_waiting: usize) -> Self {
        self.options.max_waiting = Some(max_waiting);
        self
    }

    /// Names the bulkhead in [`BulkheadError`] errors and `Debug` output.
    ///
    /// For a name built at run time (say, per host) use [`with_name`](Self::with_name).
    ///
    /// # Examples
    ///
    /// ```
    /// static MAIL: tollgate::Bulkhead = tollgate::Bulkhead::new(1).name("mail").max_waiting(0);
    ///
    /// let _held = MAIL.try_acquire().unwrap();
    /// let refused = futures_lite::future::block_on(MAIL.acquire()).unwrap_err();
    /// assert_eq!(refused.name(), Some("mail"));
    /// ```
    pub const fn name(mut self, name: &'static str) -> Self {
        self.options.set_static_name(name);
        self
    }

    /// Like [`name`](Self::name), with a name built at run time.
    ///
    /// # Examples
    ///
    /// ```
    /// let host = "example.com";
    /// let bulkhead = tollgate::Bulkhead::new(1).with_name(format!("host {host}")).max_waiting(0);
    ///
    /// let _held = bulkhead.try_acquire().unwrap();
    /// let refused = futures_lite::future::block_on(bulkhead.acquire()).unwrap_err();
    /// assert_eq!(refused.name(), Some("host example.com"));
    /// ```
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.options.name = Name::Shared(name.into().into());
        self
    }

    /// Makes the limit one cap across all runtimes instead of one per runtime.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Bulkhead, run_sync};
    ///
    /// static LICENSE_SERVER: Bulkhead = Bulkhead::new(1).global();
    ///
    /// let held = LICENSE_SERVER.try_acquire().unwrap();
    /// // Another runtime sees the same cap.
    /// assert!(run_sync(async { LICENSE_SERVER.try_acquire().is_none() }));
    /// drop(held);
    /// ```
    pub const fn global(mut self) -> Self {
        self.options.global = true;
        self
    }

    /// The most callers let in at once (per runtime unless [`global`](Self::global)).
    pub fn limit(&self) -> usize {
        self.options.limit
    }

    /// The semaphore the calling code uses: `None` for the inline one.
    #[inline]
    fn current(&self) -> Option<Arc<Semaphore>> {
        let runtime = self.options.runtime();
        if runtime == RuntimeKey::process() {
            None
        } else {
            Some(self.for_runtime(runtime))
        }
    }

    /// The semaphore of a runtime other than the process-wide one.
    fn for_runtime(&self, runtime: RuntimeKey) -> Arc<Semaphore> {
        let id = self.id();
        if let Ok(Some(semaphore)) = CACHE.try_with(|cache| cache.borrow().get(id, runtime)) {
            return semaphore;
        }
        let semaphore = self.insert_runtime(runtime);
        // `try_with` fails only while the thread is being torn down: skip the cache then.
        let _ = CACHE.try_with(|cache| cache.borrow_mut().put(id, runtime, &semaphore));
        semaphore
    }

    fn id(&self) -> u64 {
        let id = self.id.load(Ordering::Relaxed);
        if id != 0 {
            return id;
        }
        let fresh = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        match self
            .id
            .compare_exchange(0, fresh, Ordering::Relaxed, Ordering::Relaxed)
        {
            Ok(_) => fresh,
            Err(taken) => taken,
        }
    }

    /// Finds `runtime`'s semaphore, creating it (and forgetting dead runtimes) if needed.
    fn insert_runtime(&self, runtime: RuntimeKey) -> Arc<Semaphore> {
        let mut runtimes = lock(&self.runtimes);
        if let Some((_, semaphore)) = runtimes.iter().find(|(key, _)| *key == runtime) {
            return semaphore.clone();
        }
        // Forget dead runtimes' semaphores that nobody uses. Only permits and acquire
        // futures hold strong references (the caches hold `Weak`s); `try_unwrap` succeeds
        // only for the last one, atomically, so no cache can upgrade the entry after it
        // is judged unused (a separate count-then-drop would let one slip in between).
        for (key, semaphore) in std::mem::take(&mut *runtimes) {
            if key.is_alive() {
                runtimes.push((key, semaphore));
            } else if let Err(in_use) = Arc::try_unwrap(semaphore) {
                runtimes.push((key, in_use));
            }
        }
        let semaphore = Arc::new(Semaphore::new(self.options.limit));
        runtimes.push((runtime, semaphore.clone()));
        semaphore
    }

    /// How many runtimes the bulkhead keeps a semaphore for, besides the built-in
    /// process-wide one.
    ///
    /// Every [`run_sync`](crate::run_sync) call and (with the `tokio` feature) every tokio
    /// runtime that used the bulkhead gets an entry. Entries of runtimes that have ended
    /// and hold no permit are dropped the next time a new runtime's entry is added, so this
    /// stays at the number of live runtimes plus at most a few ended ones. Always 0 for a
    /// [`global`](Self::global) bulkhead.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Bulkhead, run_sync};
    ///
    /// static JOBS: Bulkhead = Bulkhead::new(2);
    /// for _ in 0..100 {
    ///     run_sync(async { drop(JOBS.acquire().await) });
    /// }
    /// assert!(JOBS.tracked_runtimes() <= 1);
    /// ```
    pub fn tracked_runtimes(&self) -> usize {
        lock(&self.runtimes).len()
    }

    /// Takes a slot if one is free and nobody is waiting, without waiting.
    ///
    /// # Examples
    ///
    /// ```
    /// let bulkhead = tollgate::Bulkhead::new(1);
    /// let permit = bulkhead.try_acquire().unwrap();
    /// assert!(bulkhead.try_acquire().is_none());
    /// drop(permit);
    /// assert!(bulkhead.try_acquire().is_some());
    /// ```
    #[inline]
    pub fn try_acquire(&self) -> Option<BulkheadPermit<'_>> {
        let slot = Slot {
            bulkhead: self,
            shared: self.current(),
        };
        // Not `then_some`: building a permit for a failed attempt would release a slot
        // that was never taken.
        if slot.semaphore().try_take() {
            Some(BulkheadPermit { slot })
        } else {
            None
        }
    }

    /// Like [`try_acquire`](Self::try_acquire), with a permit that owns an `Arc` of the
    /// bulkhead, so it is `'static`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    ///
    /// let bulkhead = Arc::new(tollgate::Bulkhead::new(1));
    /// let permit = bulkhead.try_acquire_arc().unwrap();
    /// std::thread::spawn(move || drop(permit)).join().unwrap();
    /// assert!(bulkhead.try_acquire().is_some());
    /// ```
    pub fn try_acquire_arc(self: &Arc<Self>) -> Option<BulkheadPermitArc> {
        let slot = Slot {
            bulkhead: self.clone(),
            shared: self.current(),
        };
        if slot.semaphore().try_take() {
            Some(BulkheadPermitArc { slot })
        } else {
            None
        }
    }

    /// Waits for a slot in the current runtime's semaphore, behind everyone already waiting.
    ///
    /// The runtime is the one calling `acquire`.
    ///
    /// # Examples
    ///
    /// ```
    /// static UPLOADS: tollgate::Bulkhead = tollgate::Bulkhead::new(3);
    ///
    /// # futures_lite::future::block_on(async {
    /// let permit = UPLOADS.acquire().await?;
    /// assert_eq!(UPLOADS.stats().in_flight, 1);
    /// drop(permit);
    /// # Ok::<(), tollgate::BulkheadError>(())
    /// # }).unwrap();
    /// ```
    ///
    /// # Errors
    ///
    /// [`BulkheadError`] when the wait timeout passes first, or when the queue already holds
    /// `max_waiting` callers.
    ///
    /// # Cancel safety
    ///
    /// Cancelling the future loses its place in the queue. If a permit had already been
    /// handed to it, that permit goes on to the next waiter: nothing leaks.
    #[inline]
    pub fn acquire(&self) -> BulkheadAcquire<'_> {
        BulkheadAcquire(AcquireInner::new(Slot {
            bulkhead: self,
            shared: self.current(),
        }))
    }

    /// Like [`acquire`](Self::acquire), with a future and a permit that own an `Arc` of the
    /// bulkhead, so they are `'static` and can move into a spawned task.
    ///
    /// (A `static` bulkhead's plain [`BulkheadPermit`] is already `'static`.)
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    ///
    /// # futures_lite::future::block_on(async {
    /// let bulkhead = Arc::new(tollgate::Bulkhead::new(2));
    /// let permit = bulkhead.acquire_arc().await?;
    /// std::thread::spawn(move || drop(permit)).join().unwrap();
    /// assert_eq!(bulkhead.stats().in_flight, 0);
    /// # Ok::<(), tollgate::BulkheadError>(())
    /// # }).unwrap();
    /// ```
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    ///
    /// As [`acquire`](Self::acquire).
    #[inline]
    pub fn acquire_arc(self: &Arc<Self>) -> BulkheadAcquireArc {
        BulkheadAcquireArc(AcquireInner::new(Slot {
            bulkhead: self.clone(),
            shared: self.current(),
        }))
    }

    /// Blocks the calling thread until a slot is free, in the same queue as async callers.
    ///
    /// For plain threads (and tokio's `spawn_blocking`); calling it from async code blocks
    /// the executor's thread. The wait timeout applies.
    ///
    /// # Examples
    ///
    /// ```
    /// static DISK: tollgate::Bulkhead = tollgate::Bulkhead::new(2);
    ///
    /// std::thread::scope(|scope| {
    ///     for _ in 0..4 {
    ///         scope.spawn(|| {
    ///             let _permit = DISK.acquire_blocking().unwrap();
    ///             // at most two threads are here at once
    ///         });
    ///     }
    /// });
    /// assert!(DISK.stats().peak_in_flight <= 2);
    /// ```
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire).
    pub fn acquire_blocking(&self) -> Result<BulkheadPermit<'_>, BulkheadError> {
        match self.try_acquire() {
            Some(permit) => Ok(permit),
            None => crate::runtime::block_on_real_time(self.acquire()),
        }
    }

    /// Runs `future` holding a slot: waits for the slot, then awaits `future`, then
    /// releases the slot (the `async with bulkhead:` of Python).
    ///
    /// # Examples
    ///
    /// ```
    /// static CRAWL: tollgate::Bulkhead = tollgate::Bulkhead::new(8);
    ///
    /// # futures_lite::future::block_on(async {
    /// let length = CRAWL.run(async { "<html></html>".len() }).await?;
    /// assert_eq!(length, 13);
    /// # Ok::<(), tollgate::BulkheadError>(())
    /// # }).unwrap();
    /// ```
    ///
    /// # Errors
    ///
    /// [`BulkheadError`] as [`acquire`](Self::acquire); `future` is dropped without being
    /// polled then.
    ///
    /// # Cancel safety
    ///
    /// Cancelling while waiting is [`acquire`](Self::acquire)'s cancellation; cancelling
    /// while `future` runs drops it mid-flight and releases the slot.
    pub fn run<F: IntoFuture>(&self, future: F) -> BulkheadRun<'_, F::IntoFuture> {
        BulkheadRun {
            inner: Gated::new(self.acquire(), future.into_future()),
        }
    }

    /// Runs `work` on the calling thread holding a slot, waiting for the slot as
    /// [`acquire_blocking`](Self::acquire_blocking) does.
    ///
    /// # Examples
    ///
    /// ```
    /// static COMPRESS: tollgate::Bulkhead = tollgate::Bulkhead::new(2);
    ///
    /// let size = COMPRESS.run_blocking(|| vec![0u8; 1024].len()).unwrap();
    /// assert_eq!(size, 1024);
    /// ```
    ///
    /// # Errors
    ///
    /// [`BulkheadError`] as [`acquire`](Self::acquire); `work` is not called then.
    pub fn run_blocking<T>(&self, work: impl FnOnce() -> T) -> Result<T, BulkheadError> {
        let _permit = self.acquire_blocking()?;
        Ok(work())
    }

    /// The counters of the current runtime's semaphore (of the only one if
    /// [`global`](Self::global)).
    ///
    /// A runtime that has not used the bulkhead yet reports all zeros.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::Bulkhead;
    ///
    /// let bulkhead = Bulkhead::new(2);
    /// # futures_lite::future::block_on(async {
    /// let a = bulkhead.acquire().await?;
    /// let b = bulkhead.acquire().await?;
    /// drop((a, b));
    /// let stats = bulkhead.stats();
    /// assert_eq!((stats.in_flight, stats.peak_in_flight, stats.admitted), (0, 2, 2));
    /// # Ok::<(), tollgate::BulkheadError>(())
    /// # }).unwrap();
    /// ```
    pub fn stats(&self) -> BulkheadStats {
        let runtime = self.options.runtime();
        let counters = if runtime == RuntimeKey::process() {
            Some(self.process.counters())
        } else {
            lock(&self.runtimes)
                .iter()
                .find(|(key, _)| *key == runtime)
                .map(|(_, semaphore)| semaphore.counters())
        };
        BulkheadStats::new(self.options.limit, counters)
    }
}

impl fmt::Debug for Bulkhead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut debug = f.debug_struct("Bulkhead");
        self.options.fmt_fields(&mut debug);
        debug.finish_non_exhaustive()
    }
}

/// Which semaphore of which bulkhead: `B` is `&Bulkhead` or `Arc<Bulkhead>`.
struct Slot<B: Deref<Target = Bulkhead>> {
    bulkhead: B,
    /// `None`: the bulkhead's inline semaphore.
    shared: Option<Arc<Semaphore>>,
}

impl<B: Deref<Target = Bulkhead>> Slot<B> {
    #[inline]
    fn semaphore(&self) -> &Semaphore {
        match &self.shared {
            Some(semaphore) => semaphore,
            None => &self.bulkhead.process,
        }
    }
}

/// The body of the acquire futures.
struct AcquireInner<B: Deref<Target = Bulkhead>> {
    /// `None` once the future has completed.
    slot: Option<Slot<B>>,
    wait: Wait,
}

impl<B: Deref<Target = Bulkhead>> AcquireInner<B> {
    #[inline]
    fn new(slot: Slot<B>) -> Self {
        Self {
            slot: Some(slot),
            wait: Wait::new(),
        }
    }

    #[inline]
    fn poll(&mut self, cx: &mut Context<'_>, what: &str) -> Poll<Result<Slot<B>, BulkheadError>> {
        let Some(slot) = &self.slot else {
            panic!("{what} polled after completion");
        };
        let result = match self.wait.poll(slot.semaphore(), &slot.bulkhead.options, cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(result) => result,
        };
        let slot = self.slot.take().expect("checked above");
        Poll::Ready(result.map(|()| slot))
    }
}

impl<B: Deref<Target = Bulkhead>> Drop for AcquireInner<B> {
    fn drop(&mut self) {
        if let Some(slot) = &self.slot {
            self.wait.abandon(slot.semaphore());
        }
    }
}

/// Future returned by [`Bulkhead::acquire`].
#[must_use = "futures do nothing unless you `.await` or poll them"]
pub struct BulkheadAcquire<'a>(AcquireInner<&'a Bulkhead>);

impl fmt::Debug for BulkheadAcquire<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BulkheadAcquire").finish_non_exhaustive()
    }
}

impl<'a> Future for BulkheadAcquire<'a> {
    type Output = Result<BulkheadPermit<'a>, BulkheadError>;

    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.0
            .poll(cx, "BulkheadAcquire")
            .map_ok(|slot| BulkheadPermit { slot })
    }
}

/// Future returned by [`Bulkhead::acquire_arc`].
#[must_use = "futures do nothing unless you `.await` or poll them"]
pub struct BulkheadAcquireArc(AcquireInner<Arc<Bulkhead>>);

impl fmt::Debug for BulkheadAcquireArc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BulkheadAcquireArc").finish_non_exhaustive()
    }
}

impl Future for BulkheadAcquireArc {
    type Output = Result<BulkheadPermitArc, BulkheadError>;

    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.0
            .poll(cx, "BulkheadAcquireArc")
            .map_ok(|slot| BulkheadPermitArc { slot })
    }
}

/// A slot of a [`Bulkhead`], released when dropped.
#[clippy::has_significant_drop]
#[must_use = "the slot is released as soon as the permit is dropped"]
pub struct BulkheadPermit<'a> {
    slot: Slot<&'a Bulkhead>,
}

impl fmt::Debug for BulkheadPermit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BulkheadPermit")
            .field("bulkhead", &self.slot.bulkhead.options.name.as_str())
            .finish_non_exhaustive()
    }
}

impl Drop for BulkheadPermit<'_> {
    #[inline]
    fn drop(&mut self) {
        self.slot.semaphore().release();
    }
}

/// A slot of a [`Bulkhead`] that owns an `Arc` of it, so it can move into a spawned task;
/// released when dropped.
#[clippy::has_significant_drop]
#[must_use = "the slot is released as soon as the permit is dropped"]
pub struct BulkheadPermitArc {
    slot: Slot<Arc<Bulkhead>>,
}

impl fmt::Debug for BulkheadPermitArc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BulkheadPermitArc")
            .field("bulkhead", &self.slot.bulkhead.options.name.as_str())
            .finish_non_exhaustive()
    }
}

impl Drop for BulkheadPermitArc {
    #[inline]
    fn drop(&mut self) {
        self.slot.semaphore().release();
    }
}

pin_project_lite::pin_project! {
    /// Awaits `future` once `acquire` has produced a permit; holds the permit until
    /// `future` completes.
    pub(crate) struct Gated<A, P, F> {
        state: Gate<A, P>,
        #[pin]
        future: F,
    }
}

enum Gate<A, P> {
    Acquiring(A),
    Running(P),
    Done,
}

impl<A, P, F> Gated<A, P, F> {
    pub(crate) fn new(acquire: A, future: F) -> Self {
        Self {
            state: Gate::Acquiring(acquire),
            future,
        }
    }
}

impl<A, P, F> Future for Gated<A, P, F>
where
    A: Future<Output = Result<P, BulkheadError>> + Unpin,
    F: Future,
{
    type Output = Result<F::Output, BulkheadError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Gate::Acquiring(acquire) = this.state {
            match Pin::new(acquire).poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(permit)) => *this.state = Gate::Running(permit),
                Poll::Ready(Err(full)) => {
                    *this.state = Gate::Done;
                    return Poll::Ready(Err(full));
                }
            }
        }
        assert!(
            matches!(this.state, Gate::Running(_)),
            "bulkhead run future polled after completion"
        );
        let output = std::task::ready!(this.future.poll(cx));
        // Release the slot before handing the output back.
        *this.state = Gate::Done;
        Poll::Ready(Ok(output))
    }
}

pin_project_lite::pin_project! {
    /// Future returned by [`Bulkhead::run`].
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    pub struct BulkheadRun<'a, F> {
        #[pin]
        inner: Gated<BulkheadAcquire<'a>, BulkheadPermit<'a>, F>,
    }
}

impl<F> fmt::Debug for BulkheadRun<'_, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BulkheadRun").finish_non_exhaustive()
    }
}

impl<F: Future> Future for BulkheadRun<'_, F> {
    type Output = Result<F::Output, BulkheadError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.project().inner.poll(cx)
    }
}
