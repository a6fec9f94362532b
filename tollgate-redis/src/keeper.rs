//! The keeper: one thread per store that renews every lease of the process in one call per
//! third of the TTL, sends releases, and fences leases it could not renew in time.
//!
//! Why a thread with its own blocking connection rather than a future driven by whoever
//! polls: renewal must not depend on the application's tasks being polled. A runtime
//! blocked by CPU-heavy work, or a program whose permits are held while nothing awaits the
//! store, would otherwise miss renewals and be fenced for no reason; and a spawned task
//! would tie the crate to one runtime. The thread sleeps between renewals, so it costs one
//! idle thread and one extra connection per store.
//!
//! Releases come from `Drop` (no `.await` possible), so they go through the keeper's queue:
//! it wakes on each, drains the queue and sends every queued release in one pipelined
//! round trip, then wakes the local waiters of those keys. A release that cannot be sent
//! (Redis down) is kept until its lease would have lapsed anyway.
//!
//! A new connection of the keeper waits for its turn like the store's (see `health.rs`):
//! while Redis is out of reach the keeper knocks no more often than the store's probes,
//! and its attempts are probes too.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::Connection;

use crate::health::{Gate, Health};
use crate::helpers::micros;
use crate::lease::Lease;
use crate::scripts::RENEW;
use crate::stats::StoreStats;
use crate::target::Target;

enum Msg {
    /// A granted lease to renew from now on.
    Hold(Arc<Lease>),
    /// A lease to delete (a dropped permit).
    Release(Arc<Lease>),
    /// A grant that may still be on its way to Redis (its caller gave up, or its reply was
    /// lost): delete the lease and leave a tombstone, so a grant that runs later refuses it.
    Cancel(Arc<Lease>),
}

#[derive(Default)]
pub(crate) struct KeeperStats {
    /// False once the keeper thread has ended (a panic): nothing is renewed or released
    /// any more, so grants must stop too.
    running: AtomicBool,
    held: AtomicUsize,
    renewals: AtomicU64,
    releases: AtomicU64,
    fenced: AtomicU64,
}

impl KeeperStats {
    pub(crate) fn snapshot(&self) -> StoreStats {
        StoreStats {
            leases_held: self.held.load(Ordering::Relaxed),
            renewal_calls: self.renewals.load(Ordering::Relaxed),
            release_calls: self.releases.load(Ordering::Relaxed),
            fenced: self.fenced.load(Ordering::Relaxed),
            keeper_running: self.is_running(),
            unreachable: false,
        }
    }

    pub(crate) fn is_running(&self) -> bool {
        self.running.load(Ordering::Acquire)
    }
}

/// The store's side of the keeper: the queue into its thread.
pub(crate) struct Keeper {
    tx: Sender<Msg>,
    /// Disconnected when the keeper thread has ended: its sender is dropped as it returns.
    /// (In a mutex only because a `Receiver` is not `Sync`; only `drop` uses it.)
    ended: Mutex<Receiver<()>>,
    /// How long dropping the store waits for the last releases: a connect and one call.
    flush_wait: Duration,
    pub(crate) stats: Arc<KeeperStats>,
    /// The TTL less the fencing margin: how long after a confirmed send a lease is trusted.
    pub(crate) life: Duration,
}

/// The fencing margin: a lease counts as lost this long before it would lapse in Redis, so
/// clock-rate drift between this machine and Redis, and the time fenced work needs to
/// notice, cannot make two holders overlap.
pub(crate) fn margin(ttl: Duration) -> Duration {
    ttl / 5
}

impl Keeper {
    /// Starts the keeper on a thread `thread` makes (named here).
    ///
    /// # Errors
    ///
    /// The operating system's, when it cannot start the thread.
    pub(crate) fn start(
        thread: std::thread::Builder,
        target: Target,
        health: Arc<Health>,
        ttl: Duration,
        wait: Duration,
    ) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel();
        let stats = Arc::new(KeeperStats::default());
        let keeper = Thread {
            rx,
            target,
            ttl,
            // A renewal that takes longer than a third of the TTL is as good as failed.
            wait: wait.min(ttl / 3),
            // A grant already written to a connection runs within the call's wait (or when a
            // frozen Redis thaws, which fences everything anyway); the TTL on top is room.
            tombstone: ttl + wait,
            conn: None,
            health,
            not_before: None,
            held: HashMap::new(),
            releases: Vec::new(),
            next_renewal: None,
            stats: Arc::clone(&stats),
        };
        stats.running.store(true, Ordering::Release);
        let watch = Arc::clone(&stats);
        let (ending, ended) = mpsc::channel::<()>();
        thread
            .name("tollgate-redis-keeper".to_owned())
            .spawn(move || {
                let _ending = ending;
                // A panic here (a bug) must not go unnoticed: grants check this flag and
                // fail closed, since nothing would renew or release their leases.
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| keeper.run()));
                watch.running.store(false, Ordering::Release);
            })?;
        Ok(Self {
            tx,
            ended: Mutex::new(ended),
            flush_wait: 2 * wait,
            stats,
            life: ttl - margin(ttl),
        })
    }

    pub(crate) fn hold(&self, lease: Arc<Lease>) {
        self.stats.held.fetch_add(1, Ordering::Relaxed);
        self.send(Msg::Hold(lease));
    }

    pub(crate) fn release(&self, lease: Arc<Lease>) {
        self.send(Msg::Release(lease));
    }

    pub(crate) fn cancel(&self, lease: Arc<Lease>) {
        self.send(Msg::Cancel(lease));
    }

    fn send(&self, msg: Msg) {
        // The thread ends only when every sender is gone, so this cannot fail while the
        // store lives; if the thread died anyway, the lease lapses after its TTL.
        let _ = self.tx.send(msg);
    }
}

impl Drop for Keeper {
    /// The last handle of the store is gone, so every permit is too and their releases are
    /// queued: the thread sends them and ends once it sees the queue closed. Waiting for
    /// it (bounded by a connect and one call) is what lets a process that exits right after
    /// its work leave no lease behind for the rest of the fleet to wait out.
    fn drop(&mut self) {
        let (closed, _) = mpsc::channel();
        drop(std::mem::replace(&mut self.tx, closed));
        let ended = self
            .ended
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let _ = ended.recv_timeout(self.flush_wait);
    }
}

struct Thread {
    rx: Receiver<Msg>,
    /// Where to connect: a new connection asks Sentinel anew, if the store uses it.
    target: Target,
    ttl: Duration,
    wait: Duration,
    /// How long a cancelled grant's tombstone stays.
    tombstone: Duration,
    conn: Option<Connection>,
    /// Whether Redis answers, shared with the store: a new connection waits for its turn.
    health: Arc<Health>,
    /// When the last look at the health said the next connection attempt may come.
    not_before: Option<Instant>,
    held: HashMap<String, Arc<Lease>>,
    /// Releases to send, each with the instant after which its lease has lapsed anyway, and
    /// whether it is a cancelled grant (a tombstone goes with it).
    releases: Vec<(Arc<Lease>, Instant, bool)>,
    next_renewal: Option<Instant>,
    stats: Arc<KeeperStats>,
}

impl Thread {
    fn run(mut self) {
        loop {
            let timeout = self
                .next_wake()
                .map(|at| at.saturating_duration_since(Instant::now()));
            let received = match timeout {
                Some(timeout) => self.rx.recv_timeout(timeout),
                None => self.rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
            };
            let closed = match received {
                Ok(msg) => {
                    self.handle(msg);
                    while let Ok(msg) = self.rx.try_recv() {
                        self.handle(msg);
                    }
                    false
                }
                Err(RecvTimeoutError::Timeout) => false,
                Err(RecvTimeoutError::Disconnected) => true,
            };
            self.flush_releases();
            if closed {
                return;
            }
            if self.next_renewal.is_some_and(|at| Instant::now() >= at) {
                self.renew();
            }
            self.fence_due();
        }
    }

    /// The next instant something is due: a renewal, a fence point, a release to retry.
    fn next_wake(&self) -> Option<Instant> {
        let fence = self.held.values().map(|lease| lease.fence_point()).min();
        let retry = (!self.releases.is_empty()).then(|| self.retry_at());
        [self.next_renewal, fence, retry]
            .into_iter()
            .flatten()
            .min()
    }

    fn retry_pause(&self) -> Duration {
        (self.ttl / 15).clamp(Duration::from_millis(5), Duration::from_secs(1))
    }

    /// When to try a failed call again: after the retry pause, and not before a new
    /// connection may be attempted (Redis out of reach: the store's probes pace this
    /// thread too).
    fn retry_at(&self) -> Instant {
        let soon = Instant::now() + self.retry_pause();
        self.not_before.map_or(soon, |at| at.max(soon))
    }

    fn handle(&mut self, msg: Msg) {
        match msg {
            Msg::Hold(lease) => {
                if self.held.is_empty() {
                    self.next_renewal = Some(Instant::now() + self.ttl / 3);
                }
                self.held.insert(lease.id.clone(), lease);
            }
            Msg::Release(lease) => {
                if self.held.remove(&lease.id).is_some() {
                    // Released past its fence point before this thread fenced it (the
                    // holder saw the point pass first): it was fenced all the same.
                    if lease.is_fenced() {
                        self.fence(&lease);
                    } else {
                        self.stats.held.fetch_sub(1, Ordering::Relaxed);
                    }
                }
                if self.held.is_empty() {
                    self.next_renewal = None;
                }
                let lapsed = Instant::now() + self.ttl;
                self.releases.push((lease, lapsed, false));
            }
            Msg::Cancel(lease) => {
                // Never held: the grant's answer never reached a caller. The tombstone
                // matters until a grant still in flight has run, so keep trying that long.
                let until = Instant::now() + self.tombstone;
                self.releases.push((lease, until, true));
            }
        }
    }

    /// The keeper's connection: the current one, or a new one if the store's health gives
    /// this thread the turn to attempt it now (else `None`, and `not_before` says when).
    fn connection(&mut self) -> Option<&mut Connection> {
        if self.conn.is_none() {
            let health = Arc::clone(&self.health);
            let now = Instant::now();
            let attempt = match health.begin_attempt(now, now + self.wait) {
                Gate::Attempt(attempt) => attempt,
                // Another attempt is under way: look again after the retry pause.
                Gate::Busy => {
                    self.not_before = None;
                    return None;
                }
                Gate::NotBefore(at) => {
                    self.not_before = Some(at);
                    return None;
                }
            };
            self.not_before = None;
            // Dropping the turn on a failure counts the attempt as failed.
            let conn = self.open().ok()?;
            attempt.reached();
            self.conn = Some(conn);
        }
        self.conn.as_mut()
    }

    /// A new connection that answered a `PING`, with the thread's timeouts.
    fn open(&self) -> redis::RedisResult<Connection> {
        let mut conn = self.target.connect_blocking(self.wait)?;
        redis::cmd("PING").query::<()>(&mut conn)?;
        Ok(conn)
    }

    fn flush_releases(&mut self) {
        let now = Instant::now();
        self.releases.retain(|(_, lapsed, _)| *lapsed > now);
        if self.releases.is_empty() {
            return;
        }
        let tombstone = u64::try_from(self.tombstone.as_millis()).unwrap_or(u64::MAX);
        let mut pipe = redis::pipe();
        for (lease, _, cancelled) in &self.releases {
            if *cancelled {
                // This connection is not the grant's, so the grant may run at any point of
                // this pipeline: the tombstone first (a grant after it is refused), then the
                // delete (a grant before it is undone).
                pipe.cmd("SET")
                    .arg(&lease.tombstone)
                    .arg(1)
                    .arg("PX")
                    .arg(tombstone)
                    .ignore();
            }
            pipe.cmd("ZREM").arg(&lease.set).arg(&lease.id).ignore();
        }
        let Some(conn) = self.connection() else {
            return;
        };
        if pipe.query::<()>(conn).is_err() {
            self.conn = None;
            return;
        }
        self.health.reached();
        self.stats.releases.fetch_add(1, Ordering::Relaxed);
        for (lease, _, _) in self.releases.drain(..) {
            lease.local.released.notify(usize::MAX);
        }
    }

    /// One call renews every held lease; leases Redis no longer has are fenced at once.
    fn renew(&mut self) {
        // A lease past its fence point is lost for good, even if Redis still has it.
        self.fence_due();
        if self.held.is_empty() {
            return;
        }
        let mut by_set: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for lease in self.held.values() {
            by_set.entry(&lease.set).or_default().push(&lease.id);
        }
        let mut invocation = RENEW.prepare_invoke();
        invocation.arg(micros(self.ttl));
        for (set, ids) in &by_set {
            invocation.key(*set).arg(ids.len()).arg(ids.as_slice());
        }
        let sent = Instant::now();
        let reply = match self.connection() {
            Some(conn) => invocation.invoke::<Vec<String>>(conn).map_err(|_| ()),
            None => Err(()),
        };
        self.stats.renewals.fetch_add(1, Ordering::Relaxed);
        let Ok(lost) = reply else {
            self.conn = None;
            self.next_renewal = Some(self.retry_at());
            return;
        };
        self.health.reached();
        let life = self.ttl - margin(self.ttl);
        for lease in self.held.values() {
            lease.extend(sent, life);
        }
        for id in lost {
            if let Some(lease) = self.held.remove(&id) {
                self.fence(&lease);
            }
        }
        self.next_renewal = (!self.held.is_empty()).then(|| sent + self.ttl / 3);
    }

    /// Fences every lease whose fence point has passed without a renewal (or that its
    /// holder already saw fenced).
    fn fence_due(&mut self) {
        let due: Vec<String> = self
            .held
            .values()
            .filter(|lease| lease.is_fenced())
            .map(|lease| lease.id.clone())
            .collect();
        for id in due {
            if let Some(lease) = self.held.remove(&id) {
                // No delete here: the holder is only now being told, and work under
                // `run_with` may still be running. The lease stays until it lapses or the
                // holder drops the permit (whose release then deletes it).
                self.fence(&lease);
            }
        }
        if self.held.is_empty() {
            self.next_renewal = None;
        }
    }

    /// Counts a lease just taken out of `held` as fenced (once per lease: it leaves `held`
    /// once), and makes sure its holder is told.
    fn fence(&self, lease: &Arc<Lease>) {
        lease.fence();
        self.stats.held.fetch_sub(1, Ordering::Relaxed);
        self.stats.fenced.fetch_add(1, Ordering::Relaxed);
    }
}
