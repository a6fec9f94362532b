//! One cap per runtime: the semaphores of a [`Bulkhead`](crate::Bulkhead), found for the
//! calling runtime on every acquire, and summed over every runtime for the stats.
//!
//! - The process-wide key (smol, async-std, plain threads, tokio without the `tokio`
//!   feature) and `.global()` bulkheads use cap 0, stored inline.
//! - Other runtimes get a cap in a table that only grows, in chunks that never move and
//!   are never freed while the bulkhead lives. A permit or an acquire borrows its cap from
//!   the bulkhead (or, holding an `Arc` of it, names the cap by index), so an acquire
//!   touches no reference count (an `Arc` per cap cost two atomic read-modify-writes per
//!   acquire, on a cache line that every worker thread of a runtime writes).
//! - Which runtime owns which cap is kept under a mutex, and each thread caches the last
//!   few caps it used, with the owner's turn on the cap (a number that changes whenever
//!   the cap changes owners), so the common acquire takes no lock and no read-modify-write:
//!   a hit reads the cap's turn once. A runtime is registered (see
//!   [`RuntimeKey::is_alive`]) before its cap is first cached, so a hit skips that check.
//! - When a new runtime needs a cap, the caps of runtimes that are gone and hold no permit
//!   and no waiter are freed for reuse first, so the table grows only to the most
//!   runtimes alive (or gone but still holding permits) at once, rounded up to a chunk.
//!   Counters are never reset: a cap's admissions and refusals count towards the totals
//!   whoever owned it, and an owner's own numbers are read against what the cap had
//!   counted when it took it.
//! - A cap is chosen when an acquire is created. An acquire created under a runtime that
//!   has ended since, and polled for the first time after its cap changed owners, takes
//!   its permit from the new owner's cap: the cap is shared for as long as it holds it,
//!   never over its limit.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use super::stats::{Limiter, Tally, limiter};
use crate::runtime::RuntimeKey;
use crate::sync::lock;

/// The process-wide cap's index; the table's caps are 1 and up.
const PROCESS: usize = 0;

/// Caps in the first chunk of the table; each later chunk doubles.
const FIRST_CHUNK: usize = 4;

/// Chunks in the table: room for 4 * (2^20 - 1), about four million, runtimes alive at
/// once (or gone but still holding permits).
const CHUNKS: usize = 20;

/// One cap of the table. Aligned to 128 bytes (two cache lines, which the hardware
/// fetches in pairs) so that neighbouring caps, written by different runtimes' threads, do
/// not share a line.
#[repr(align(128))]
struct Cap {
    limiter: Limiter,
    /// The owner's turn: changed, under the owners' lock, whenever the cap changes owners
    /// (0: never owned), so a thread's cache can tell that its entry is out of date.
    turn: AtomicU64,
}

pub(crate) struct PerRuntime {
    /// The process-wide key's cap, and the only one of a `global` bulkhead.
    process: Limiter,
    /// The other runtimes' caps (`run_sync` calls, tokio runtimes). Chunk `k` holds
    /// `FIRST_CHUNK << k` caps; it is made, under `owners`' lock, when the table grows
    /// into it.
    chunks: [OnceLock<Box<[Cap]>>; CHUNKS],
    owners: Mutex<Owners>,
    /// Identity in the per-thread caches; 0 until first needed.
    id: AtomicU64,
}

/// Who owns each cap of the table: entry `i` is cap `i + 1`.
struct Owners {
    caps: Vec<Option<Owner>>,
    /// The last turn given to an owner.
    turns: u64,
    /// The highest peak of a cap before it changed owners (a new owner's peak starts
    /// again; the bulkhead's must not go down).
    retired_peak: usize,
}

struct Owner {
    runtime: RuntimeKey,
    /// What the cap had counted when this runtime took it.
    since: Tally,
}

/// Source of identities for the per-thread caches (0 means "none yet").
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// The caps this thread used last.
    static CACHE: RefCell<Cache> = const { RefCell::new(Cache::new()) };
}

const CACHE_SIZE: usize = 4;

struct Cache {
    entries: [CacheEntry; CACHE_SIZE],
    next: usize,
}

/// A slot of the cache; empty while `bulkhead` is 0 (no bulkhead's identity), so a
/// lookup needs no separate "is it used?" check.
#[derive(Clone, Copy)]
struct CacheEntry {
    bulkhead: u64,
    runtime: RuntimeKey,
    cap: usize,
    /// The owner's turn on `cap` when it was cached.
    turn: u64,
}

impl Cache {
    const fn new() -> Self {
        const EMPTY: CacheEntry = CacheEntry {
            bulkhead: 0,
            runtime: RuntimeKey::process(),
            cap: PROCESS,
            turn: 0,
        };
        Self {
            entries: [EMPTY; CACHE_SIZE],
            next: 0,
        }
    }

    #[inline]
    fn get(&self, bulkhead: u64, runtime: RuntimeKey) -> Option<CacheEntry> {
        self.entries
            .iter()
            .find(|entry| entry.bulkhead == bulkhead && entry.runtime == runtime)
            .copied()
    }

    fn put(&mut self, entry: CacheEntry) {
        let slot = self
            .entries
            .iter()
            .position(|old| old.bulkhead == entry.bulkhead && old.runtime == entry.runtime);
        let slot = slot.unwrap_or_else(|| {
            let slot = self.next;
            self.next = (self.next + 1) % CACHE_SIZE;
            slot
        });
        self.entries[slot] = entry;
    }
}

/// The chunk and the position in it of table cap `cap` (1 and up).
#[inline]
fn locate(cap: usize) -> (usize, usize) {
    let position = cap - 1;
    // Chunk k starts at FIRST_CHUNK * (2^k - 1).
    let chunk = (position / FIRST_CHUNK + 1).ilog2() as usize;
    (chunk, position - FIRST_CHUNK * ((1 << chunk) - 1))
}

impl PerRuntime {
    crate::sync::const_unless_loom! {
        pub(crate) const fn new(limit: usize) -> Self {
            Self {
                process: limiter(limit),
                chunks: [const { OnceLock::new() }; CHUNKS],
                owners: Mutex::new(Owners {
                    caps: Vec::new(),
                    turns: 0,
                    retired_peak: 0,
                }),
                id: AtomicU64::new(0),
            }
        }
    }

    pub(crate) fn process(&self) -> &Limiter {
        &self.process
    }

    /// The cap numbered `cap` ([`PROCESS`] or one [`find`](Self::find) gave).
    #[inline]
    pub(crate) fn cap(&self, cap: usize) -> &Limiter {
        if cap == PROCESS {
            return &self.process;
        }
        &self.table_cap(cap).limiter
    }

    #[inline]
    fn table_cap(&self, cap: usize) -> &Cap {
        let (chunk, position) = locate(cap);
        &self.chunks[chunk]
            .get()
            .expect("a cap's chunk is made before its index is handed out")[position]
    }

    /// `runtime`'s cap and its index. `runtime` may be
    /// [unregistered](RuntimeKey::current_unregistered): a key is registered before it is
    /// cached, so a key found in a thread's cache has been.
    #[inline]
    pub(crate) fn find(&self, runtime: RuntimeKey) -> (usize, &Limiter) {
        if runtime == RuntimeKey::process() {
            return (PROCESS, &self.process);
        }
        // Inline: every acquire outside the process-wide runtime comes here, and a cache
        // hit is a few instructions.
        let id = self.id();
        if let Ok(Some(entry)) = CACHE.try_with(|cache| cache.borrow().get(id, runtime)) {
            let cap = self.table_cap(entry.cap);
            // A runtime reads as dead while tokio waits for its blocking threads at
            // shutdown, so its cap may have changed owners while they still run: they
            // then get a cap of their own below.
            if cap.turn.load(Ordering::Relaxed) == entry.turn {
                return (entry.cap, &cap.limiter);
            }
        }
        let index = self.find_and_cache(id, runtime);
        (index, self.cap(index))
    }

    /// A miss in the thread's cache: the owners, then the cache.
    #[cold]
    #[inline(never)]
    fn find_and_cache(&self, id: u64, runtime: RuntimeKey) -> usize {
        // Before the key is seen by `assign` (which frees the caps of dead runtimes) or
        // put in the cache (whose hits skip this).
        runtime.register();
        let (cap, turn) = self.assign(runtime);
        // `try_with` fails only while the thread is being torn down: skip the cache then.
        let _ = CACHE.try_with(|cache| {
            cache.borrow_mut().put(CacheEntry {
                bulkhead: id,
                runtime,
                cap,
                turn,
            });
        });
        cap
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

    /// Finds `runtime`'s cap and its turn on it, or gives it one: a cap freed by a
    /// runtime that is gone, or a new one.
    fn assign(&self, runtime: RuntimeKey) -> (usize, u64) {
        let mut owners = lock(&self.owners);
        let caps = &mut owners.caps;
        if let Some(at) = caps
            .iter()
            .position(|owner| owner.as_ref().is_some_and(|o| o.runtime == runtime))
        {
            let cap = at + 1;
            return (cap, self.table_cap(cap).turn.load(Ordering::Relaxed));
        }
        // Free the caps of dead runtimes that hold no permit and no waiter. Code still
        // running under such a runtime (tokio's blocking threads during its shutdown)
        // finds, by the turn, that its cached cap has changed owners; only an acquire
        // created before and first polled after the change shares the new owner's cap.
        for (at, owner) in caps.iter_mut().enumerate() {
            if owner.as_ref().is_some_and(|o| !o.runtime.is_alive()) {
                let cap = self.cap(at + 1);
                if cap.in_flight() == 0 && cap.waiting() == 0 {
                    *owner = None;
                }
            }
        }
        let at = match caps.iter().position(Option::is_none) {
            Some(free) => free,
            None => {
                let at = caps.len();
                let (chunk, position) = locate(at + 1);
                assert!(
                    chunk < CHUNKS,
                    "a bulkhead's caps for about four million runtimes alive at once (or \
                     ended with permits still out) are all taken"
                );
                if position == 0 {
                    self.make_chunk(chunk);
                }
                caps.push(None);
                at
            }
        };
        let Cap { limiter, turn } = self.table_cap(at + 1);
        // Idle, so nobody is counting: the peak starts again for the new owner.
        owners.retired_peak = owners.retired_peak.max(Tally::of(limiter).peak);
        limiter.counts().restart_peak(limiter.available() as u64);
        owners.turns += 1;
        turn.store(owners.turns, Ordering::Relaxed);
        owners.caps[at] = Some(Owner {
            runtime,
            since: Tally::of(limiter),
        });
        (at + 1, owners.turns)
    }

    /// Under the owners' lock: makes chunk `chunk` with the limit in force and the closed
    /// state (both change only under that lock, so the new caps start in step).
    #[cold]
    fn make_chunk(&self, chunk: usize) {
        let limit = self.process.limit();
        let closed = self.process.is_closed();
        let made = self.chunks[chunk].set(
            (0..FIRST_CHUNK << chunk)
                .map(|_| {
                    let cap = limiter(limit);
                    if closed {
                        cap.close();
                    }
                    Cap {
                        limiter: cap,
                        turn: AtomicU64::new(0),
                    }
                })
                .collect(),
        );
        assert!(made.is_ok(), "a chunk is made once, under the owners' lock");
    }

    /// The table's caps handed out so far, with their owners (`None`: free), under the
    /// owners' lock.
    fn table<'a>(
        &'a self,
        owners: &'a Owners,
    ) -> impl Iterator<Item = (&'a Limiter, Option<&'a Owner>)> {
        owners
            .caps
            .iter()
            .enumerate()
            .map(|(at, owner)| (self.cap(at + 1), owner.as_ref()))
    }

    /// Every cap made so far, owned or not (call under the owners' lock, so that no
    /// chunk is made meanwhile): the process-wide one, then the table's.
    fn all_caps(&self) -> impl Iterator<Item = &Limiter> {
        let table = self.chunks.iter().map_while(OnceLock::get).flatten();
        std::iter::once(&self.process).chain(table.map(|cap| &cap.limiter))
    }

    /// Sets the limit of every cap, including those nobody owns yet, and of caps made
    /// later.
    pub(crate) fn set_limit(&self, limit: usize) {
        let _owners = lock(&self.owners);
        for cap in self.all_caps() {
            cap.set_limit(|_| Some(limit as u64));
        }
    }

    /// Closes every cap, and caps made later.
    pub(crate) fn close(&self) {
        let _owners = lock(&self.owners);
        for cap in self.all_caps() {
            cap.close();
        }
    }

    /// How many runtimes own a cap besides the process-wide one.
    pub(crate) fn tracked(&self) -> usize {
        lock(&self.owners).caps.iter().flatten().count()
    }

    /// The numbers of `runtime`'s cap since it took it (zeros if it has none).
    pub(crate) fn tally(&self, runtime: RuntimeKey) -> Tally {
        if runtime == RuntimeKey::process() {
            return Tally::of(&self.process);
        }
        let owners = lock(&self.owners);
        self.table(&owners)
            .find_map(|(cap, owner)| {
                let owner = owner.filter(|owner| owner.runtime == runtime)?;
                Some(Tally::of(cap).since(owner.since))
            })
            .unwrap_or_default()
    }

    /// The sum over every cap, and how many live runtimes have used one.
    pub(crate) fn totals(&self) -> (usize, Tally) {
        let process = Tally::of(&self.process);
        let mut runtimes = usize::from(process.is_used());
        let mut total = process;
        let owners = lock(&self.owners);
        total.peak = total.peak.max(owners.retired_peak);
        for (cap, owner) in self.table(&owners) {
            let tally = Tally::of(cap);
            // An ended runtime's escaped permits still count as in flight, but it is no
            // longer a runtime that can take more.
            if let Some(owner) = owner {
                if tally.since(owner.since).is_used() && owner.runtime.is_alive() {
                    runtimes += 1;
                }
            }
            total.add(tally);
        }
        (runtimes, total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_are_located_chunk_by_chunk() {
        assert_eq!(locate(1), (0, 0));
        assert_eq!(locate(4), (0, 3));
        assert_eq!(locate(5), (1, 0));
        assert_eq!(locate(12), (1, 7));
        assert_eq!(locate(13), (2, 0));
        let mut expected = Vec::new();
        for chunk in 0..6 {
            for position in 0..FIRST_CHUNK << chunk {
                expected.push((chunk, position));
            }
        }
        let found: Vec<_> = (1..=expected.len()).map(locate).collect();
        assert_eq!(found, expected);
    }

    #[test]
    fn the_caps_of_ended_runtimes_are_reused() {
        let caps = PerRuntime::new(2);
        let escaped = crate::runtime::run_sync(async {
            let cap = caps.find(RuntimeKey::current()).0;
            assert!(caps.cap(cap).try_take(1));
            cap
        });
        for _ in 0..100 {
            crate::runtime::run_sync(async {
                let cap = caps.find(RuntimeKey::current()).0;
                assert_ne!(cap, escaped, "that cap still has a permit out");
                assert!(caps.cap(cap).try_take(1));
                caps.cap(cap).release(1);
            });
        }
        assert_eq!(lock(&caps.owners).caps.len(), 2);
        caps.cap(escaped).release(1);
        for _ in 0..100 {
            crate::runtime::run_sync(async {
                caps.find(RuntimeKey::current());
            });
        }
        assert_eq!(lock(&caps.owners).caps.len(), 2);
        assert_eq!(caps.tracked(), 1);
    }

    /// Code still running under a runtime that reads as dead (tokio's blocking threads
    /// while it shuts down) must not keep using a cap that has changed owners.
    #[test]
    fn a_cached_cap_that_changed_owners_is_looked_up_again() {
        let caps = PerRuntime::new(2);
        let (ended, first) = crate::runtime::run_sync(async {
            let key = RuntimeKey::current();
            (key, caps.find(key).0)
        });
        // The next runtime takes the ended one's idle cap, and keeps a permit of it out.
        let (taken, escaped) = crate::runtime::run_sync(async {
            let (index, cap) = caps.find(RuntimeKey::current());
            assert!(cap.try_take(1));
            (index, cap)
        });
        assert_eq!(taken, first);
        // This thread's cache still maps the ended key to that cap.
        let again = caps.find(ended).0;
        assert_ne!(again, first, "the cache entry is out of date");
        assert_eq!(caps.find(ended).0, again, "and the new one is cached");
        escaped.release(1);
    }
}
