//! One cap per runtime: the semaphores of a [`Bulkhead`](crate::Bulkhead), found for the
//! calling runtime on every acquire, and summed over every runtime for the stats.
//!
//! - The process-wide key (smol, async-std, plain threads, tokio without the `tokio`
//!   feature) and `.global()` bulkheads use a semaphore stored inline, found for free.
//! - Other runtimes have an `Arc` semaphore in a small mutex-protected list, and each
//!   thread caches the last few (bulkhead, runtime) pairs it used as `Weak`s, so the
//!   common acquire takes no lock. A runtime is registered (see
//!   [`RuntimeKey::is_alive`]) before its pair is first cached, so a hit skips that check.
//! - Entries of runtimes that are gone and hold no permit are dropped whenever a new
//!   runtime's entry is inserted, so the list stays as long as the set of live runtimes.
//!   Their admissions and refusals are kept in a running total first, so the totals never
//!   go down.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use super::stats::{Limiter, Tally, limiter};
use crate::runtime::RuntimeKey;
use crate::sync::lock;

pub(crate) struct PerRuntime {
    /// The process-wide key's semaphore, and the only one of a `global` bulkhead.
    process: Limiter,
    runtimes: Mutex<Runtimes>,
    /// Identity in the per-thread caches; 0 until first needed.
    id: AtomicU64,
}

struct Runtimes {
    /// Semaphores of the other runtimes (`run_sync` calls, tokio runtimes).
    entries: Vec<(RuntimeKey, Arc<Limiter>)>,
    /// What the forgotten entries counted.
    retired: Tally,
}

/// Source of identities for the per-thread caches (0 means "none yet").
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// The last few (bulkhead, runtime) semaphores this thread used.
    static CACHE: RefCell<Cache> = const { RefCell::new(Cache::new()) };
}

const CACHE_SIZE: usize = 4;

struct Cache {
    entries: [CacheEntry; CACHE_SIZE],
    next: usize,
}

/// A slot of the cache; empty while `bulkhead` is 0 (no bulkhead's identity), so a
/// lookup needs no separate "is it used?" check.
struct CacheEntry {
    bulkhead: u64,
    runtime: RuntimeKey,
    limiter: Weak<Limiter>,
}

impl Cache {
    const fn new() -> Self {
        const EMPTY: CacheEntry = CacheEntry {
            bulkhead: 0,
            runtime: RuntimeKey::process(),
            limiter: Weak::new(),
        };
        Self {
            entries: [EMPTY; CACHE_SIZE],
            next: 0,
        }
    }

    #[inline]
    fn get(&self, bulkhead: u64, runtime: RuntimeKey) -> Option<Arc<Limiter>> {
        self.entries
            .iter()
            .find(|entry| entry.bulkhead == bulkhead && entry.runtime == runtime)
            .and_then(|entry| entry.limiter.upgrade())
    }

    fn put(&mut self, bulkhead: u64, runtime: RuntimeKey, limiter: &Arc<Limiter>) {
        let entry = CacheEntry {
            bulkhead,
            runtime,
            limiter: Arc::downgrade(limiter),
        };
        let slot = self
            .entries
            .iter()
            .position(|entry| entry.bulkhead == bulkhead && entry.runtime == runtime);
        let slot = slot.unwrap_or_else(|| {
            let slot = self.next;
            self.next = (self.next + 1) % CACHE_SIZE;
            slot
        });
        self.entries[slot] = entry;
    }
}

impl PerRuntime {
    crate::sync::const_unless_loom! {
        pub(crate) const fn new(limit: usize) -> Self {
            Self {
                process: limiter(limit),
                runtimes: Mutex::new(Runtimes {
                    entries: Vec::new(),
                    retired: Tally {
                        in_flight: 0,
                        waiting: 0,
                        peak: 0,
                        admitted: 0,
                        rejected: 0,
                    },
                }),
                id: AtomicU64::new(0),
            }
        }
    }

    pub(crate) fn process(&self) -> &Limiter {
        &self.process
    }

    /// The semaphore of `runtime`: `None` for the inline process-wide one. `runtime` may
    /// be [unregistered](RuntimeKey::current_unregistered): a key is registered before it
    /// is cached, so a key found in a thread's cache has been.
    #[inline]
    pub(crate) fn get(&self, runtime: RuntimeKey) -> Option<Arc<Limiter>> {
        if runtime == RuntimeKey::process() {
            None
        } else {
            Some(self.for_runtime(runtime))
        }
    }

    /// The semaphore of a runtime other than the process-wide one. Inline: every acquire
    /// outside the process-wide runtime comes here, and a cache hit is a few instructions.
    #[inline]
    fn for_runtime(&self, runtime: RuntimeKey) -> Arc<Limiter> {
        let id = self.id();
        if let Ok(Some(limiter)) = CACHE.try_with(|cache| cache.borrow().get(id, runtime)) {
            return limiter;
        }
        self.find_and_cache(id, runtime)
    }

    /// A miss in the thread's cache: the shared list, then the cache.
    #[cold]
    #[inline(never)]
    fn find_and_cache(&self, id: u64, runtime: RuntimeKey) -> Arc<Limiter> {
        // Before the key is seen by `insert` (which forgets the caps of dead runtimes) or
        // put in the cache (whose hits skip this).
        runtime.register();
        let limiter = self.insert(runtime);
        // `try_with` fails only while the thread is being torn down: skip the cache then.
        let _ = CACHE.try_with(|cache| cache.borrow_mut().put(id, runtime, &limiter));
        limiter
    }

    #[inline]
    fn id(&self) -> u64 {
        let id = self.id.load(Ordering::Relaxed);
        if id != 0 {
            return id;
        }
        self.new_id()
    }

    #[cold]
    fn new_id(&self) -> u64 {
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
    fn insert(&self, runtime: RuntimeKey) -> Arc<Limiter> {
        let mut runtimes = lock(&self.runtimes);
        if let Some((_, limiter)) = runtimes.entries.iter().find(|(key, _)| *key == runtime) {
            return limiter.clone();
        }
        // Forget dead runtimes' semaphores that nobody uses. Only permits and acquire
        // futures hold strong references (the caches hold `Weak`s); `try_unwrap` succeeds
        // only for the last one, atomically, so no cache can upgrade the entry after it
        // is judged unused (a separate count-then-drop would let one slip in between).
        let Runtimes { entries, retired } = &mut *runtimes;
        for (key, limiter) in std::mem::take(entries) {
            if key.is_alive() {
                entries.push((key, limiter));
            } else {
                match Arc::try_unwrap(limiter) {
                    Ok(unused) => retired.add(Tally::of(&unused)),
                    Err(in_use) => entries.push((key, in_use)),
                }
            }
        }
        // The process-wide cap always exists and carries the limit in force and the
        // closed state; both change only under this lock, so a new cap starts in step.
        let limiter = Arc::new(limiter(self.process.limit()));
        if self.process.is_closed() {
            limiter.close();
        }
        entries.push((runtime, limiter.clone()));
        limiter
    }

    /// Sets the limit of every cap, and of caps created later.
    pub(crate) fn set_limit(&self, limit: usize) {
        let runtimes = lock(&self.runtimes);
        for cap in
            std::iter::once(&self.process).chain(runtimes.entries.iter().map(|(_, cap)| &**cap))
        {
            cap.set_limit(|_| Some(limit as u64));
        }
    }

    /// Closes every cap, and caps created later.
    pub(crate) fn close(&self) {
        let runtimes = lock(&self.runtimes);
        self.process.close();
        for (_, cap) in &runtimes.entries {
            cap.close();
        }
    }

    /// How many runtimes have an entry besides the process-wide one.
    pub(crate) fn tracked(&self) -> usize {
        lock(&self.runtimes).entries.len()
    }

    /// The numbers of `runtime`'s cap (zeros if it has none yet).
    pub(crate) fn tally(&self, runtime: RuntimeKey) -> Tally {
        if runtime == RuntimeKey::process() {
            return Tally::of(&self.process);
        }
        lock(&self.runtimes)
            .entries
            .iter()
            .find(|(key, _)| *key == runtime)
            .map_or_else(Tally::default, |(_, limiter)| Tally::of(limiter))
    }

    /// The sum over every cap, and how many live runtimes have used one.
    pub(crate) fn totals(&self) -> (usize, Tally) {
        let process = Tally::of(&self.process);
        let mut runtimes = usize::from(process.used());
        let mut total = process;
        let list = lock(&self.runtimes);
        total.add(list.retired);
        for (key, limiter) in &list.entries {
            let tally = Tally::of(limiter);
            // An ended runtime's escaped permits still count as in flight, but it is no
            // longer a runtime that can take more.
            if tally.used() && key.is_alive() {
                runtimes += 1;
            }
            total.add(tally);
        }
        (runtimes, total)
    }
}
