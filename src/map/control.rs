//! [`MapControl`]: watch and steer a running bounded map from any task or thread.
//!
//! A control is made before its map and attached to it with the map's `.control(&control)`
//! method. The map is the only writer of the figures: it keeps its running totals in its
//! own fields and publishes them into the control when a poll of the map returns (a
//! stream: when it waits, ends, or after a long run of outputs), as a seqlock of plain
//! stores: no read-modify-write, nothing per item. A map without a control pays a test
//! per poll (a stream, per output it hands out after a round of work); one with a
//! control pays a few stores per poll (a stream keeps its figures in its own fields
//! before such an output, for the end should it be dropped there) and, in a plain map's
//! fill loop, a look at the drain flag before each pull.
//!
//! When the map ends, it publishes its last figures with the end: whatever it still ran
//! or held then was cancelled (dropped, stopped by the first error, a panic), and is
//! counted so, so that an ended map has nothing in flight, waiting or awaiting a retry.
//! A map dropped between two polls ends with the figures of its last poll, which are
//! exact: nothing in a map moves between its polls. Per-key
//! figures (the busiest keys, the paused keys) cost a walk over the map's keys, so they
//! are published only when someone asked for them since the last time: reading them
//! wakes the map, which publishes them when that poll returns.
//!
//! Commands go the other way: a setting (a limit, a rate) is stored under a lock, a
//! generation counter is bumped and the map's task is woken; the map compares the
//! counter once per round of work and applies what changed. Draining is a flag the map
//! also checks before each start, so a drain asked from inside the map's own function
//! (or a future of the map) stops the very next start.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering, fence};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::limit::breaker::core::BreakerState;
use crate::limit::check::at_least_one;
use crate::limit::rate::Rate;
// atomic-waker's own (not the loom shim): the control is std-only, like its other atomics.
use atomic_waker::AtomicWaker;

/// The map has a scheduler: rates may be set while it runs.
pub(crate) const CAN_RATE: u8 = 1;
/// The map has a key function: per-key limits and rates may be set while it runs.
pub(crate) const CAN_PER_KEY: u8 = 2;
/// The map takes settings of single keys from this control: it was attached after
/// `.per_key`, so the control names the map's keys (one attached before is typed by `()`).
pub(crate) const CAN_KEY_SETTINGS: u8 = 4;
/// A map is attached and has not ended.
const ATTACHED: u8 = 8;

/// The totals a map publishes, all counted from the start of the map.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Figures {
    pub(crate) pulled: u64,
    /// Items whose first attempt started.
    pub(crate) started: u64,
    /// Attempts started (first attempts and retries).
    pub(crate) attempts: u64,
    /// Items with a final output.
    pub(crate) finished: u64,
    /// Finished items whose final output is an error.
    pub(crate) failed: u64,
    /// Failed attempts sent back for another.
    pub(crate) retries: u64,
    /// Pulled items that will never start: dropped unstarted by a drain, or left
    /// unstarted when the map was cancelled.
    pub(crate) not_started: u64,
    /// Attempts that were running when the map was cancelled.
    pub(crate) cancelled_attempts: u64,
    /// Items that were waiting for a retry when the map was cancelled.
    pub(crate) cancelled_retries: u64,
}

impl Figures {
    /// Attempts running now.
    fn in_flight(&self) -> u64 {
        self.attempts
            .saturating_sub(self.finished + self.retries + self.cancelled_attempts)
    }

    /// Items pulled and not started, and not given up on.
    fn waiting(&self) -> u64 {
        self.pulled.saturating_sub(self.started + self.not_started)
    }

    /// Items whose last attempt failed, waiting for their next one.
    fn awaiting_retry(&self) -> u64 {
        let retry_attempts = self.attempts.saturating_sub(self.started);
        self.retries
            .saturating_sub(retry_attempts + self.cancelled_retries)
    }

    /// The figures of a map that ends now: what it was running is cancelled, what was
    /// waiting for a retry is cancelled too, and what never started never will (a map
    /// that ended by itself has none of these: the figures stay as they are).
    pub(crate) fn at_end(mut self) -> Self {
        let (in_flight, awaiting_retry, waiting) =
            (self.in_flight(), self.awaiting_retry(), self.waiting());
        self.cancelled_attempts += in_flight;
        self.cancelled_retries += awaiting_retry;
        self.not_started += waiting;
        self
    }
}

/// Settings asked for and not yet applied by the map.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Settings {
    pub(crate) limit: Option<usize>,
    pub(crate) default_key_limit: Option<usize>,
    pub(crate) rate: Option<Rate>,
    pub(crate) default_key_rate: Option<Rate>,
}

/// A setting of one key asked for and not yet applied by the map.
#[derive(Debug, Clone)]
pub(crate) enum KeyChange<K> {
    /// The key's own limit.
    Limit(K, usize),
    /// The key's own rate.
    Rate(K, Rate),
    /// The key follows the defaults again.
    Clear(K),
}

/// The settings of single keys asked for, in the order asked, not yet applied.
pub(crate) type KeyChanges<K> = Arc<Mutex<Vec<KeyChange<K>>>>;

/// What the control and its map share (the per-key figures and settings live beside it,
/// typed by key).
#[derive(Debug, Default)]
pub(crate) struct Shared {
    /// Seqlock over the figures: odd while the map writes them.
    seq: AtomicU64,
    pulled: AtomicU64,
    started: AtomicU64,
    attempts: AtomicU64,
    finished: AtomicU64,
    failed: AtomicU64,
    retries: AtomicU64,
    not_started: AtomicU64,
    cancelled_attempts: AtomicU64,
    cancelled_retries: AtomicU64,
    paused_keys: AtomicU64,
    /// Keys whose circuit breaker is open or half-open.
    open_keys: AtomicU64,
    /// Keys the shared limits told "later", and of those the ones told of a warm-up.
    keys_told_later: AtomicU64,
    keys_warming_up: AtomicU64,
    /// Whether the attached map ended (written under the seqlock with its last figures).
    ended: AtomicBool,
    /// Someone read a per-key figure: publish them at the end of the next poll.
    want_keys: AtomicBool,
    /// How many of the busiest keys to publish (the most asked for so far).
    keys_wanted: AtomicU64,
    draining: AtomicBool,
    /// The drain flag was set when the map ended: it belongs to that run, and the next map
    /// attached starts without it (a drain asked after the end clears this: it is for the
    /// next run).
    drain_spent: AtomicBool,
    /// A map was attached again since the busiest keys were last read: the board still
    /// shows the previous run's.
    board_stale: AtomicBool,
    /// Bumped by every change of a setting (and by the drain).
    generation: AtomicU64,
    settings: Mutex<Settings>,
    /// `ATTACHED` and what the map can change while it runs; nothing once it ended.
    caps: AtomicU8,
    waker: AtomicWaker,
    /// Input positions of the items a drain dropped unstarted, ascending.
    never_started: Mutex<Vec<usize>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // The data under these locks is plain values written whole: a panic elsewhere cannot
    // leave it half-written.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    /// Publishes the map's totals. Only the map calls it, never two at once.
    pub(crate) fn publish(&self, figures: &Figures) {
        self.write(figures, false);
    }

    /// Publishes the figures and whether the map ended, in one seqlock write.
    fn write(&self, figures: &Figures, ended: bool) {
        let seq = self.seq.load(Ordering::Relaxed);
        self.seq.store(seq.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        self.pulled.store(figures.pulled, Ordering::Relaxed);
        self.started.store(figures.started, Ordering::Relaxed);
        self.attempts.store(figures.attempts, Ordering::Relaxed);
        self.finished.store(figures.finished, Ordering::Relaxed);
        self.failed.store(figures.failed, Ordering::Relaxed);
        self.retries.store(figures.retries, Ordering::Relaxed);
        self.not_started
            .store(figures.not_started, Ordering::Relaxed);
        self.cancelled_attempts
            .store(figures.cancelled_attempts, Ordering::Relaxed);
        self.cancelled_retries
            .store(figures.cancelled_retries, Ordering::Relaxed);
        self.ended.store(ended, Ordering::Relaxed);
        self.seq.store(seq.wrapping_add(2), Ordering::Release);
    }

    /// One consistent reading of the totals and of whether the map ended (retried while
    /// the map is writing them).
    fn read(&self) -> (Figures, bool) {
        let mut spins = 0u32;
        loop {
            let before = self.seq.load(Ordering::Acquire);
            if before % 2 == 0 {
                let figures = Figures {
                    pulled: self.pulled.load(Ordering::Relaxed),
                    started: self.started.load(Ordering::Relaxed),
                    attempts: self.attempts.load(Ordering::Relaxed),
                    finished: self.finished.load(Ordering::Relaxed),
                    failed: self.failed.load(Ordering::Relaxed),
                    retries: self.retries.load(Ordering::Relaxed),
                    not_started: self.not_started.load(Ordering::Relaxed),
                    cancelled_attempts: self.cancelled_attempts.load(Ordering::Relaxed),
                    cancelled_retries: self.cancelled_retries.load(Ordering::Relaxed),
                };
                let ended = self.ended.load(Ordering::Relaxed);
                fence(Ordering::Acquire);
                if self.seq.load(Ordering::Relaxed) == before {
                    return (figures, ended);
                }
            }
            // The map was preempted in the middle of its few stores: let it finish.
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    pub(crate) fn publish_paused_keys(&self, paused: usize) {
        self.paused_keys.store(paused as u64, Ordering::Relaxed);
    }

    pub(crate) fn publish_open_keys(&self, open: usize) {
        self.open_keys.store(open as u64, Ordering::Relaxed);
    }

    pub(crate) fn publish_told_later(&self, later: usize, warming_up: usize) {
        self.keys_told_later.store(later as u64, Ordering::Relaxed);
        self.keys_warming_up
            .store(warming_up as u64, Ordering::Relaxed);
    }

    /// Whether someone asked for per-key figures since they were last published; how many
    /// keys then.
    pub(crate) fn keys_requested(&self) -> Option<usize> {
        if self.want_keys.load(Ordering::Relaxed) && self.want_keys.swap(false, Ordering::AcqRel) {
            Some(self.keys_wanted.load(Ordering::Relaxed) as usize)
        } else {
            None
        }
    }

    fn request_keys(&self, n: usize) {
        self.keys_wanted.fetch_max(n as u64, Ordering::Relaxed);
        if !self.want_keys.swap(true, Ordering::AcqRel) {
            self.waker.wake();
        }
    }

    /// Publishes the last figures of the map, which ended, and detaches it: the control
    /// may be attached to another map from now on. Nobody polls an ended map: nothing
    /// more to wake.
    pub(crate) fn end(&self, figures: &Figures) {
        self.write(figures, true);
        // A drain asked during this run ends with it.
        self.drain_spent
            .store(self.draining.load(Ordering::Acquire), Ordering::Release);
        self.caps.store(0, Ordering::Release);
    }

    /// Whether a drain was asked.
    #[inline]
    pub(crate) fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// The drain flag itself, for a loop that looks at it before each start.
    #[inline]
    pub(crate) fn draining_flag(&self) -> &AtomicBool {
        &self.draining
    }

    /// The generation of the settings, to compare with the one last applied.
    #[inline]
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Takes the settings asked for since the last call.
    pub(crate) fn take_settings(&self) -> Settings {
        std::mem::take(&mut *lock(&self.settings))
    }

    pub(crate) fn register(&self, waker: &std::task::Waker) {
        self.waker.register(waker);
    }

    /// Records the input positions a drain dropped unstarted (ascending).
    pub(crate) fn record_not_started(&self, mut positions: Vec<usize>) {
        positions.sort_unstable();
        let mut never = lock(&self.never_started);
        never.extend(positions);
    }

    /// Attaches a map that can change the settings in `caps`: a new run, whose figures
    /// start from zero.
    #[track_caller]
    pub(crate) fn attach(&self, caps: u8) {
        // Under the settings' lock: a setting asked once the new map is attached waits
        // for the reset below and is kept; one asked before sees no map.
        let mut settings = lock(&self.settings);
        let before = self.caps.fetch_or(ATTACHED, Ordering::AcqRel);
        if before & ATTACHED != 0 {
            drop(settings);
            panic!(
                "tollgate: this MapControl is attached to another map already, which has not ended (one control steers one map at a time)"
            );
        }
        // What an earlier run left: its figures, its settings never applied, its drain,
        // its positions, its keys.
        *settings = Settings::default();
        self.write(&Figures::default(), false);
        self.publish_paused_keys(0);
        self.publish_open_keys(0);
        self.publish_told_later(0, 0);
        self.want_keys.store(false, Ordering::Relaxed);
        self.keys_wanted.store(0, Ordering::Relaxed);
        if self.drain_spent.swap(false, Ordering::AcqRel) {
            self.draining.store(false, Ordering::Release);
        }
        lock(&self.never_started).clear();
        self.board_stale.store(true, Ordering::Release);
        self.caps.store(caps | ATTACHED, Ordering::Release);
    }

    /// The map changed its admission (a scheduling method after `.control`): it can now
    /// change the settings in `caps`.
    pub(crate) fn recap(&self, caps: u8) {
        self.caps.store(caps | ATTACHED, Ordering::Release);
    }

    fn change(
        &self,
        needs: u8,
        setting: &'static str,
        apply: impl FnOnce(&mut Settings),
    ) -> Result<(), ControlError> {
        let caps = self.caps.load(Ordering::Acquire);
        let kind = if caps & ATTACHED == 0 {
            Kind::NotAttached
        } else if needs & CAN_PER_KEY != 0 && caps & CAN_PER_KEY == 0 {
            Kind::NoKeys
        } else if needs & CAN_KEY_SETTINGS != 0 && caps & CAN_KEY_SETTINGS == 0 {
            Kind::AttachedBeforeKeys
        } else if caps & needs != needs {
            Kind::NoScheduler
        } else {
            apply(&mut lock(&self.settings));
            self.generation.fetch_add(1, Ordering::AcqRel);
            self.waker.wake();
            return Ok(());
        };
        Err(ControlError { kind, setting })
    }
}

/// A handle to watch and steer a running bounded map: its [progress](Self::progress), a
/// [drain](Self::drain) that stops it cleanly, and its limits and rates while it runs.
///
/// Make one, attach it to a map with the map's `control` method (every bounded map has
/// one: [`MapAsync::control`](crate::futures::MapAsync::control) and its siblings), and
/// keep a clone wherever you want to read or steer the run: another task, another thread,
/// a Ctrl-C handler. Clones are cheap (two reference counts) and all of them see the
/// same map.
///
/// `K` is the map's key type when the map has a [per-key
/// limit](crate::futures::MapAsync::per_key); [`busiest_keys`](Self::busiest_keys)
/// names keys of that type. For a map without one it is `()`, the default, and
/// inference fills it in from the map it is attached to.
///
/// # One run at a time
///
/// A control is attached to one map at a time, from the map's `control` call until the
/// map ends (it completes, a stream returns its last output, it is dropped, or a panic
/// goes through it). Attaching it to a second map meanwhile panics. Once the map ended,
/// the control is attached to no map, and may be attached to the next one: a job that
/// runs every night keeps one control.
///
/// Everything a control reads and steers is per run:
/// - between two runs, [`progress`](Self::progress) and
///   [`not_started`](Self::not_started) show the run that ended, and a setting
///   (`set_limit` and the others) is an error: no map is there to take it;
/// - attaching the next map starts its figures from zero (a reading then is the new
///   run's), clears the positions the old run left unstarted and its busiest keys, and
///   forgets settings the old run never applied;
/// - a [drain](Self::drain) asked while a map runs stops that run only: the next map
///   attached starts undrained. A drain asked while no map is attached (before the
///   first, or between two) stops the next map attached before it starts anything.
///
/// # Examples
///
/// ```
/// use tollgate::{MapControl, map_async};
/// # futures_lite::future::block_on(async {
/// let control = MapControl::new();
/// let watcher = control.clone(); // to another task or thread
/// let pages = map_async(0..100u32, 8, |n| async move { n * 2 }).control(&control).await;
/// assert_eq!(pages.len(), 100);
/// let progress = watcher.progress();
/// assert_eq!((progress.pulled(), progress.finished(), progress.in_flight()), (100, 100, 0));
/// assert!(progress.is_ended());
///
/// // The next run, with the same control: its figures start from zero.
/// let more = map_async(0..10u32, 8, |n| async move { n }).control(&control).await;
/// assert_eq!(more.len(), 10);
/// assert_eq!((watcher.progress().pulled(), watcher.progress().finished()), (10, 10));
/// # });
/// ```
pub struct MapControl<K = ()> {
    shared: Arc<Shared>,
    keys: Arc<Mutex<Vec<KeyProgress<K>>>>,
    key_changes: KeyChanges<K>,
}

impl<K> Clone for MapControl<K> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
            keys: Arc::clone(&self.keys),
            key_changes: Arc::clone(&self.key_changes),
        }
    }
}

impl<K> Default for MapControl<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K> fmt::Debug for MapControl<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MapControl")
            .field("progress", &self.progress_quiet())
            .finish_non_exhaustive()
    }
}

impl<K> MapControl<K> {
    /// A control attached to no map yet.
    ///
    /// # Examples
    ///
    /// ```
    /// let control: tollgate::MapControl = tollgate::MapControl::new();
    /// assert_eq!(control.progress().pulled(), 0);
    /// ```
    #[must_use]
    pub fn new() -> Self {
        Self {
            shared: Arc::default(),
            keys: Arc::default(),
            key_changes: Arc::default(),
        }
    }

    /// The map's side of the control.
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// The board the map publishes its busiest keys on.
    pub(crate) fn key_board(&self) -> &Arc<Mutex<Vec<KeyProgress<K>>>> {
        &self.keys
    }

    /// Where the settings of single keys wait for the map.
    pub(crate) fn key_changes(&self) -> &KeyChanges<K> {
        &self.key_changes
    }

    /// The queue of the settings of single keys, locked: a map attached while it is held
    /// clears it (what an earlier run left) before any setter can queue for the new run.
    pub(crate) fn lock_key_changes(&self) -> MutexGuard<'_, Vec<KeyChange<K>>> {
        lock(&self.key_changes)
    }

    /// Queues a setting of one key for the map (under the queue's lock, so the map, once
    /// it sees the new generation, finds the change queued).
    fn change_key(&self, setting: &'static str, change: KeyChange<K>) -> Result<(), ControlError> {
        let mut changes = lock(&self.key_changes);
        let needs = CAN_RATE | CAN_PER_KEY | CAN_KEY_SETTINGS;
        self.shared.change(needs, setting, |_| {})?;
        changes.push(change);
        Ok(())
    }

    fn progress_quiet(&self) -> Progress {
        let (figures, ended) = self.shared.read();
        // The key figures are published on request, while the map runs: an ended map has
        // no key waiting for anything, whatever it published last.
        let key_figure = |figure: &AtomicU64| {
            if ended {
                0
            } else {
                figure.load(Ordering::Relaxed)
            }
        };
        Progress {
            figures,
            paused_keys: key_figure(&self.shared.paused_keys),
            open_keys: key_figure(&self.shared.open_keys),
            keys_told_later: key_figure(&self.shared.keys_told_later),
            keys_warming_up: key_figure(&self.shared.keys_warming_up),
            draining: self.shared.is_draining(),
            ended,
        }
    }

    /// A snapshot of the map's progress.
    ///
    /// The counts come from one consistent reading of what the map last published. A
    /// collecting future (`map_async`, `try_map_async`, `gather_limit`) publishes
    /// whenever its poll returns; a stream whenever it waits (returns `Pending`), ends,
    /// or has handed out a run of 256 outputs without waiting, but not after each output
    /// (publishing costs about as much as a ready item). A poll does at most a few
    /// hundred units of work, so while the map runs the counts are at most that old;
    /// read while the map waits, as a task beside it does, they are exact. The
    /// paused-keys count is published when the map is next polled after a reading: this
    /// call wakes the map for it, so it is at most one reading old.
    ///
    /// Reading allocates nothing and never blocks the map.
    ///
    /// # Examples
    ///
    /// ```
    /// use futures_lite::StreamExt;
    /// use tollgate::{MapControl, amap_iter};
    /// # futures_lite::future::block_on(async {
    /// let control = MapControl::new();
    /// let watcher = control.clone(); // for another task or thread
    /// let outputs: Vec<u32> = amap_iter(0..10u32, 2, |n| async move { n })
    ///     .control(&control)
    ///     .collect()
    ///     .await;
    /// let progress = watcher.progress();
    /// assert_eq!((progress.pulled(), progress.finished(), progress.in_flight()), (10, 10, 0));
    /// assert!(progress.is_ended());
    /// # assert_eq!(outputs.len(), 10);
    /// # });
    /// ```
    pub fn progress(&self) -> Progress {
        if self.shared.caps.load(Ordering::Relaxed) & CAN_RATE != 0 {
            self.shared.request_keys(0);
        }
        self.progress_quiet()
    }

    /// Stops the map cleanly: it pulls no more items and starts none of the items it
    /// pulled and has not started, lets every started item finish, then ends. A stream
    /// ends (`None`) once the started items' outputs are handed out; a collecting future
    /// completes with the outputs of the finished items.
    ///
    /// An item that has started finishes as it would have: with a retry policy, a
    /// failed attempt may still be retried after the drain (starting a retry is not
    /// starting an item), and its output is its last attempt's. To stop those as well,
    /// drop the map (which cancels everything in flight: [`Progress::cancelled`]).
    ///
    /// Which items never started: the pulled ones listed by
    /// [`not_started`](Self::not_started), and every item at an input position from
    /// [`Progress::pulled`] on (never pulled). The outputs of an ordered map
    /// ([`map_async`](crate::map_async), `map_bounded`) stay in input order with those
    /// left out; [`.indexed()`](crate::futures::MapAsync::indexed) pairs each output with
    /// its input position, to tell outputs apart without counting.
    ///
    /// The drain takes effect before the map's next start: asked from inside the map's
    /// function or one of its futures, nothing starts after the call; asked from another
    /// thread, an item being started at that very moment may still start. Draining twice
    /// is draining once.
    ///
    /// A drain is per run: asked while a map runs, it stops that map, and a map attached
    /// to this control after it ended starts undrained. Asked while no map is attached,
    /// it stops the next map attached (see [One run at a time](Self#one-run-at-a-time)).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{MapControl, map_async};
    /// # futures_lite::future::block_on(async {
    /// let control = MapControl::new();
    /// let stop = control.clone();
    /// let done = map_async((0..1_000u32).enumerate(), 4, |(i, n)| {
    ///     if i == 10 {
    ///         stop.drain(); // a Ctrl-C handler would call this
    ///     }
    ///     async move { (i, n * 2) }
    /// })
    /// .control(&control)
    /// .await;
    /// assert_eq!(done.len(), 11); // items 0 to 10 started and finished
    /// assert!(control.not_started().is_empty()); // nothing was left waiting for its key
    /// assert_eq!(control.progress().pulled(), 11);
    /// # });
    /// ```
    pub fn drain(&self) {
        // Asked now: for the map attached now, or (none attached) for the next one.
        self.shared.drain_spent.store(false, Ordering::Release);
        if !self.shared.draining.swap(true, Ordering::AcqRel) {
            self.shared.generation.fetch_add(1, Ordering::AcqRel);
            self.shared.waker.wake();
        }
    }

    /// The input positions (0 for the first item) of the items the map pulled and never
    /// started because of a [drain](Self::drain), or because
    /// [`try_map_async`](crate::try_map_async) stopped at its first error, ascending.
    /// Items at positions from [`Progress::pulled`] on were never pulled.
    ///
    /// A map that is dropped (or that a panic goes through) counts the items it held
    /// unstarted in [`Progress::not_started`] without listing them here: the map is gone
    /// before it could say which they were. The outputs it handed out tell which
    /// positions finished.
    ///
    /// Only a map with per-key limits, rates or retries holds pulled items that have not
    /// started (waiting for their key or their time), at most its window of them; a
    /// plain map starts every item it pulls at once, so this list is empty for it.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{MapControl, map_async};
    /// # futures_lite::future::block_on(async {
    /// let control = MapControl::new();
    /// let stop = control.clone();
    /// // One key, one at a time: while item 0 runs, items 1 to 4 wait for the key.
    /// let done = map_async(0..5u32, 4, |n| {
    ///     let stop = stop.clone();
    ///     async move {
    ///         if n == 0 {
    ///             futures_lite::future::yield_now().await; // let the map pull ahead
    ///             stop.drain();
    ///         }
    ///         n
    ///     }
    /// })
    /// .per_key(|_| "host", 1)
    /// .control(&control)
    /// .await;
    /// assert_eq!(done, [0]);
    /// assert_eq!(control.not_started(), [1, 2, 3, 4]);
    /// # });
    /// ```
    pub fn not_started(&self) -> Vec<usize> {
        lock(&self.shared.never_started).clone()
    }

    /// Changes the map's global limit while it runs: raised, more items start at once
    /// (the map is woken for it); lowered, the items in flight above the new limit
    /// finish and nothing starts until fewer than the limit run. A window left at its
    /// default follows the new limit; a window set with `.window(n)` is raised to the
    /// limit if it is smaller.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{MapControl, map_async};
    /// # futures_lite::future::block_on(async {
    /// let control = MapControl::new();
    /// let steer = control.clone();
    /// let out = map_async(0..100u32, 2, |n| {
    ///     if n == 10 {
    ///         steer.set_limit(16).unwrap();
    ///     }
    ///     async move { n }
    /// })
    /// .control(&control)
    /// .await;
    /// assert_eq!(out.len(), 100);
    /// # });
    /// ```
    ///
    /// # Errors
    ///
    /// A [`ControlError`] if the control is attached to no map.
    ///
    /// # Panics
    ///
    /// If `limit` is 0.
    #[track_caller]
    pub fn set_limit(&self, limit: usize) -> Result<(), ControlError> {
        at_least_one(
            limit,
            "tollgate: MapControl::set_limit: the global limit must be at least 1 (a limit of 0 would never run anything)",
        );
        self.shared
            .change(0, "limit", |settings| settings.limit = Some(limit))
    }

    /// Changes the default key limit of a map with
    /// [`per_key`](crate::futures::MapAsync::per_key) while it runs: the map-wide default
    /// for every key without a setting of its own (the limit `.per_key(key_fn, limit)`
    /// set). Raised, keys with waiting items start more at once; lowered, a key running
    /// more than the new limit starts nothing until it runs fewer.
    ///
    /// On an [adaptive](crate::futures::MapAsync::adaptive) map this sets a ceiling: the
    /// key's adapted value stays at or below it.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{MapControl, map_async};
    /// # futures_lite::future::block_on(async {
    /// let control = MapControl::new();
    /// let map = map_async(0..20u32, 8, |n| async move { n }).per_key(|n| n % 2, 1).control(&control);
    /// control.set_default_key_limit(4).unwrap();
    /// assert_eq!(map.await.len(), 20);
    /// # });
    /// ```
    ///
    /// # Errors
    ///
    /// A [`ControlError`] if the map has no key function (it was built without
    /// `.per_key`: there is no key to limit), or if the control is attached to no map.
    ///
    /// # Panics
    ///
    /// If `limit` is 0.
    #[track_caller]
    pub fn set_default_key_limit(&self, limit: usize) -> Result<(), ControlError> {
        at_least_one(
            limit,
            "tollgate: MapControl::set_default_key_limit: the default key limit must be at least 1 (a limit of 0 would never run anything)",
        );
        self.shared
            .change(CAN_PER_KEY, "default key limit", |settings| {
                settings.default_key_limit = Some(limit);
            })
    }

    /// Changes (or sets) the whole map's rate while it runs. The old rate's state
    /// carries over: if recent starts had used up its burst, the same number of
    /// intervals is owed under the new rate (a faster rate lets the next start come
    /// sooner, a slower one later).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{MapControl, Rate, map_async};
    /// # futures_lite::future::block_on(async {
    /// let control = MapControl::new();
    /// let map = map_async(0..4u32, 2, |n| async move { n })
    ///     .rate(Rate::per_second(1))
    ///     .control(&control);
    /// control.set_rate(Rate::per_second(10_000)).unwrap(); // faster, at once
    /// assert_eq!(map.await, [0, 1, 2, 3]);
    /// # });
    /// ```
    ///
    /// # Errors
    ///
    /// A [`ControlError`] if the map was built without a scheduler (none of `.per_key`,
    /// `.rate`, `.retry`: a plain map keeps no clock, which is what makes it cheap), or
    /// if the control is attached to no map. Build it with a rate (a high one, if it
    /// should not limit at first) to change the rate later.
    pub fn set_rate(&self, rate: Rate) -> Result<(), ControlError> {
        self.shared
            .change(CAN_RATE, "rate", |settings| settings.rate = Some(rate))
    }

    /// Changes (or sets) the default key rate of a map with
    /// [`per_key`](crate::futures::MapAsync::per_key) while it runs: the map-wide default
    /// for every key without a setting of its own (the rate
    /// [`per_key_rate`](crate::futures::MapAsync::per_key_rate) set). Each key's state
    /// carries over as for [`set_rate`](Self::set_rate); keys waiting for their time
    /// under the old rate are woken when the new one lets them start earlier.
    ///
    /// On an [adaptive](crate::futures::MapAsync::adaptive) map this sets a ceiling: the
    /// key's adapted value stays at or below it.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{MapControl, Rate, map_async};
    /// # futures_lite::future::block_on(async {
    /// let control = MapControl::new();
    /// let map = map_async(0..6u32, 4, |n| async move { n })
    ///     .per_key(|n| n % 2, 2)
    ///     .control(&control);
    /// control.set_default_key_rate(Rate::per_second(10_000).burst(4)).unwrap();
    /// assert_eq!(map.await.len(), 6);
    /// # });
    /// ```
    ///
    /// # Errors
    ///
    /// A [`ControlError`] if the map has no key function, or if the control is
    /// attached to no map.
    pub fn set_default_key_rate(&self, rate: Rate) -> Result<(), ControlError> {
        self.shared
            .change(CAN_RATE | CAN_PER_KEY, "default key rate", |settings| {
                settings.default_key_rate = Some(rate);
            })
    }

    /// Gives one key a limit of its own while the map runs: at most `limit` items of
    /// `key` run at once, whatever the [default key limit](Self::set_default_key_limit),
    /// whose changes no longer reach the key. Lowered, a key running more than its new
    /// limit starts nothing until it runs fewer. The map applies it at its next round of
    /// work, like the other settings.
    ///
    /// The setting is kept until [cleared](Self::clear_key_settings), also while the key
    /// is idle and the map has forgotten it: a key that comes back takes it again. The
    /// map keeps one small entry per key set this way, so its memory grows with the keys
    /// you set, never with the keys it sees. The setting belongs to the map it was given
    /// to: the next map the control is attached to starts with none. Attach the control
    /// after `.per_key` (its key type is the map's then): one attached before it names
    /// no key.
    ///
    /// On an [adaptive](crate::futures::MapAsync::adaptive) map this sets a ceiling: the
    /// key's adapted value stays at or below it.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{MapControl, map_async};
    /// # futures_lite::future::block_on(async {
    /// let control = MapControl::new();
    /// let map = map_async(0..20u32, 8, |n| async move { n })
    ///     .per_key(|n| n % 2, 4)
    ///     .control(&control);
    /// control.set_key_limit(1, 1).unwrap(); // odd numbers one at a time
    /// assert_eq!(map.await.len(), 20);
    /// # });
    /// ```
    ///
    /// # Errors
    ///
    /// A [`ControlError`] if the map has no key function (it was built without
    /// `.per_key`), if the control was attached before `.per_key` (it names no key of
    /// the map), or if the control is attached to no map.
    ///
    /// # Panics
    ///
    /// If `limit` is 0.
    #[track_caller]
    pub fn set_key_limit(&self, key: K, limit: usize) -> Result<(), ControlError> {
        at_least_one(
            limit,
            "tollgate: MapControl::set_key_limit: a key limit must be at least 1 (a limit of 0 would never run the key)",
        );
        self.change_key("key limit", KeyChange::Limit(key, limit))
    }

    /// Gives one key a rate of its own while the map runs: the starts of `key` are
    /// spaced by `rate`, whatever the [default key rate](Self::set_default_key_rate),
    /// whose changes no longer reach the key (a map without a default key rate spaces
    /// this key only). The key's state carries over as for
    /// [`set_rate`](Self::set_rate). The map applies it at its next round of work.
    ///
    /// Kept until [cleared](Self::clear_key_settings), also while the key is idle and
    /// forgotten, as for [`set_key_limit`](Self::set_key_limit).
    ///
    /// On an [adaptive](crate::futures::MapAsync::adaptive) map this sets a ceiling: the
    /// key's adapted value stays at or below it.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{MapControl, Rate, map_async};
    /// # futures_lite::future::block_on(async {
    /// let control = MapControl::new();
    /// let map = map_async(0..6u32, 4, |n| async move { n })
    ///     .per_key(|n| n % 2, 2)
    ///     .control(&control);
    /// control.set_key_rate(0, Rate::per_second(10_000).burst(3)).unwrap();
    /// assert_eq!(map.await.len(), 6);
    /// # });
    /// ```
    ///
    /// # Errors
    ///
    /// A [`ControlError`] if the map has no key function, if the control was attached
    /// before `.per_key`, or if the control is attached to no map.
    pub fn set_key_rate(&self, key: K, rate: Rate) -> Result<(), ControlError> {
        self.change_key("key rate", KeyChange::Rate(key, rate))
    }

    /// Clears what [`set_key_limit`](Self::set_key_limit) and
    /// [`set_key_rate`](Self::set_key_rate) gave one key: it follows the default key
    /// limit and default key rate again (its rate state carries over), and the map
    /// forgets the setting. Clearing a key without a setting of its own does nothing.
    /// The map applies it at its next round of work.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{MapControl, map_async};
    /// # futures_lite::future::block_on(async {
    /// let control = MapControl::new();
    /// let map = map_async(0..20u32, 8, |n| async move { n })
    ///     .per_key(|n| n % 2, 4)
    ///     .control(&control);
    /// control.set_key_limit(1, 1).unwrap();
    /// control.clear_key_settings(1).unwrap(); // back to the default of 4
    /// assert_eq!(map.await.len(), 20);
    /// # });
    /// ```
    ///
    /// # Errors
    ///
    /// A [`ControlError`] if the map has no key function, if the control was attached
    /// before `.per_key`, or if the control is attached to no map.
    pub fn clear_key_settings(&self, key: K) -> Result<(), ControlError> {
        self.change_key("key settings", KeyChange::Clear(key))
    }
}

impl<K: Clone> MapControl<K> {
    /// The `n` keys with the most items waiting or in flight, busiest first, as the map
    /// last published them. On a map with [breakers](crate::futures::MapAsync::breaker),
    /// keys whose breaker is open or half-open count too (after the busy ones), even with
    /// nothing waiting: their items fail at once.
    ///
    /// Walking the keys costs the map time in proportion to its active keys, so it
    /// publishes them only when asked: each call asks (and wakes the map), and the map
    /// publishes when that poll returns. A call returns what the previous request got:
    /// empty on the first call, then at most one call old. A progress display calling
    /// it every second sees figures at most a second old.
    ///
    /// Empty for a map without [`per_key`](crate::futures::MapAsync::per_key).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{MapControl, map_async};
    /// # futures_lite::future::block_on(async {
    /// let control = MapControl::new();
    /// let watcher = control.clone();
    /// let _ = map_async(0..8u32, 2, |n| {
    ///     let _ = watcher.busiest_keys(3); // ask
    ///     async move { futures_lite::future::yield_now().await; n }
    /// })
    /// .per_key(|n| n % 2, 1)
    /// .control(&control)
    /// .await;
    /// for key in control.busiest_keys(3) {
    ///     println!("{}: {} waiting, {} in flight", key.key(), key.waiting(), key.in_flight());
    /// }
    /// # });
    /// ```
    pub fn busiest_keys(&self, n: usize) -> Vec<KeyProgress<K>> {
        self.shared.request_keys(n);
        let mut keys = lock(&self.keys);
        if self.shared.board_stale.swap(false, Ordering::AcqRel) {
            keys.clear(); // the previous run's
        }
        if self.shared.ended.load(Ordering::Acquire) {
            return Vec::new(); // nothing waits or runs in an ended map
        }
        keys.iter().take(n).cloned().collect()
    }
}

/// A snapshot of a map's progress, from [`MapControl::progress`].
///
/// Every item the map pulled is in exactly one of these states: waiting (never
/// started), in flight, waiting for a retry, finished, not started (and never to start:
/// a drain or the map's cancellation left it), or cancelled (the map's cancellation cut
/// its work short):
/// `pulled == waiting + in_flight + awaiting_retry + finished + not_started + cancelled`.
///
/// Once the map [ended](Self::is_ended), nothing is waiting, in flight or waiting for a
/// retry.
///
/// # Examples
///
/// ```
/// # futures_lite::future::block_on(async {
/// let control = tollgate::MapControl::new();
/// let _ = tollgate::map_async(0..5u32, 2, |n| async move { n }).control(&control).await;
/// let p = control.progress();
/// assert_eq!(
///     p.pulled(),
///     p.waiting()
///         + p.in_flight()
///         + p.awaiting_retry()
///         + p.finished()
///         + p.not_started()
///         + p.cancelled()
/// );
/// # });
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    figures: Figures,
    paused_keys: u64,
    open_keys: u64,
    keys_told_later: u64,
    keys_warming_up: u64,
    draining: bool,
    ended: bool,
}

impl Progress {
    /// Items pulled from the input so far.
    #[must_use]
    pub fn pulled(&self) -> u64 {
        self.figures.pulled
    }

    /// Items whose first attempt started (their function was called).
    #[must_use]
    pub fn started(&self) -> u64 {
        self.figures.started
    }

    /// Items with a final output (success or failure), whether or not it was handed out
    /// yet.
    #[must_use]
    pub fn finished(&self) -> u64 {
        self.figures.finished
    }

    /// Finished items whose final output is an error, counted by the maps that know
    /// their outputs are `Result`s: maps with a retry policy
    /// ([`MapAsync::retry`](crate::futures::MapAsync::retry) and its siblings), and
    /// [`try_map_async`](crate::try_map_async) (whose first error ends it). Any other map
    /// reports 0: count failures where you take the outputs.
    #[must_use]
    pub fn failed(&self) -> u64 {
        self.figures.failed
    }

    /// Failed attempts sent back for another (each retry counts once).
    #[must_use]
    pub fn retries(&self) -> u64 {
        self.figures.retries
    }

    /// Attempts running now. 0 once the map [ended](Self::is_ended): what ran then was
    /// [cancelled](Self::cancelled).
    #[must_use]
    pub fn in_flight(&self) -> u64 {
        self.figures.in_flight()
    }

    /// Items pulled and never started yet, waiting for their key, their time or a slot.
    /// 0 once the map [ended](Self::is_ended).
    #[must_use]
    pub fn waiting(&self) -> u64 {
        self.figures.waiting()
    }

    /// Items whose last attempt failed, waiting for their next one. 0 once the map
    /// [ended](Self::is_ended).
    #[must_use]
    pub fn awaiting_retry(&self) -> u64 {
        self.figures.awaiting_retry()
    }

    /// Pulled items that never started and never will: a [drain](MapControl::drain) left
    /// them, or the map was cancelled before their turn (dropped, stopped by
    /// [`try_map_async`](crate::try_map_async)'s first error, or a panic). Nothing of
    /// them ran: submit them again as they are. Their positions:
    /// [`MapControl::not_started`].
    #[must_use]
    pub fn not_started(&self) -> u64 {
        self.figures.not_started
    }

    /// Items the map's cancellation cut short: an attempt of theirs was running when the
    /// map was dropped, stopped by [`try_map_async`](crate::try_map_async)'s first error,
    /// or went through by a panic (its future was dropped mid-way), or they were waiting
    /// for a retry after a failed attempt. Unlike the [not started](Self::not_started)
    /// ones, their work may already have had effects (a request sent, a row written):
    /// check before submitting them again.
    ///
    /// 0 for a map that ended by itself (a drain lets every started item finish).
    ///
    /// # Examples
    ///
    /// ```
    /// use futures_lite::future::{pending, poll_once};
    /// # futures_lite::future::block_on(async {
    /// let control = tollgate::MapControl::new();
    /// let mut map = Box::pin(tollgate::map_async(0..100u32, 4, |_| pending::<()>()).control(&control));
    /// assert!(poll_once(map.as_mut()).await.is_none()); // 4 attempts run
    /// drop(map);
    /// let p = control.progress();
    /// assert!(p.is_ended());
    /// assert_eq!((p.in_flight(), p.cancelled()), (0, 4));
    /// # });
    /// ```
    #[must_use]
    pub fn cancelled(&self) -> u64 {
        self.figures.cancelled_attempts + self.figures.cancelled_retries
    }

    /// Keys paused now by their server's word
    /// ([`RetryPolicy::pause_key`](crate::RetryPolicy::pause_key)), as of the map's
    /// poll after the previous reading; 0 once the map ended.
    #[must_use]
    pub fn paused_keys(&self) -> u64 {
        self.paused_keys
    }

    /// Keys whose circuit breaker ([`breaker`](crate::futures::MapAsync::breaker)) is
    /// open or half-open: their items fail at once or wait, as of the map's poll after the
    /// previous reading; 0 once the map ended, and for a map without breakers.
    #[must_use]
    pub fn open_keys(&self) -> u64 {
        self.open_keys
    }

    /// Keys whose [shared limits](crate::SharedLimits) told them to come back
    /// [later](crate::Answer::Later) and that wait for it now (a busy key, a rate, a pause
    /// kept by the store, a warm-up), as of the map's poll after the previous reading; 0
    /// once the map ended, and for a map without shared limits.
    #[must_use]
    pub fn keys_told_later(&self) -> u64 {
        self.keys_told_later
    }

    /// Of [`keys_told_later`](Self::keys_told_later), the keys told that the shared limits
    /// grant nothing yet because they are warming up
    /// ([`LaterReason::WarmingUp`](crate::LaterReason::WarmingUp)): a store that may have
    /// lost its permits waits until they have all lapsed. Items waiting while this is
    /// above 0 wait for the store, not for their host.
    #[must_use]
    pub fn keys_warming_up(&self) -> u64 {
        self.keys_warming_up
    }

    /// Whether a drain was asked.
    #[must_use]
    pub fn is_draining(&self) -> bool {
        self.draining
    }

    /// Whether the map ended: it completed, a stream returned its last output, it was
    /// dropped, or a panic went through it. The figures of an ended map are final.
    #[must_use]
    pub fn is_ended(&self) -> bool {
        self.ended
    }
}

/// One key's figures, from [`MapControl::busiest_keys`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyProgress<K> {
    pub(crate) key: K,
    pub(crate) waiting: usize,
    pub(crate) in_flight: usize,
    pub(crate) paused: bool,
    pub(crate) limit: usize,
    /// The rate's interval in nanoseconds (0: no rate).
    pub(crate) rate_interval: u64,
    pub(crate) breaker: Option<BreakerState>,
}

impl<K> KeyProgress<K> {
    /// The key.
    pub fn key(&self) -> &K {
        &self.key
    }

    /// Its items waiting to start (fresh ones and ones waiting for a retry).
    #[must_use]
    pub fn waiting(&self) -> usize {
        self.waiting
    }

    /// Its items in flight.
    #[must_use]
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Whether it is paused by its server's word.
    #[must_use]
    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// The most of its items that may run at once now: its setting (the default key
    /// limit, or its own), or on an [adaptive](crate::futures::MapAsync::adaptive) map
    /// the limit it adapted to.
    #[must_use]
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// The rate its starts are spaced by now (`None`: no rate): its setting, or on an
    /// adaptive map the rate it adapted to (its burst is not shown: 1).
    #[must_use]
    pub fn rate(&self) -> Option<Rate> {
        (self.rate_interval > 0).then(|| Rate::every(Duration::from_nanos(self.rate_interval)))
    }

    /// Where its circuit breaker stands (`None`: the map has no breakers, see
    /// [`breaker`](crate::futures::MapAsync::breaker)).
    #[must_use]
    pub fn breaker(&self) -> Option<BreakerState> {
        self.breaker
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    NotAttached,
    /// A per-key setting on a map without a key function.
    NoKeys,
    /// A rate on a map without a scheduler.
    NoScheduler,
    /// A setting of one key through a control attached before `.per_key`.
    AttachedBeforeKeys,
}

/// A [`MapControl`] setting the map cannot take: the control is attached to no map (none
/// yet, or its map ended), or the map was built without what the setting changes (a
/// default key limit on a map without `.per_key`, a rate on a plain map).
///
/// # Examples
///
/// ```
/// use tollgate::{MapControl, Rate};
/// let control: MapControl = MapControl::new();
/// let plain = tollgate::map_async(0..3u32, 2, |n| async move { n }).control(&control);
/// let error = control.set_rate(Rate::per_second(5)).unwrap_err();
/// assert_eq!(
///     error.to_string(),
///     "the map cannot change its rate: it was built without `.per_key`, `.rate` or `.retry`"
/// );
/// # drop(plain);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlError {
    kind: Kind,
    setting: &'static str,
}

impl ControlError {
    /// Whether the control was attached to no map: none yet, or its map ended.
    #[must_use]
    pub fn is_not_attached(&self) -> bool {
        self.kind == Kind::NotAttached
    }
}

impl fmt::Display for ControlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            Kind::NotAttached => write!(
                f,
                "cannot change the {}: the control is attached to no map",
                self.setting
            ),
            Kind::NoKeys => write!(
                f,
                "the map cannot change its {}: it was built without `.per_key`",
                self.setting
            ),
            Kind::NoScheduler => write!(
                f,
                "the map cannot change its {}: it was built without `.per_key`, `.rate` or `.retry`",
                self.setting
            ),
            Kind::AttachedBeforeKeys => write!(
                f,
                "cannot change the {}: the control was attached before `.per_key`, so it names no key of the map (attach it after `.per_key`)",
                self.setting
            ),
        }
    }
}

impl std::error::Error for ControlError {}
