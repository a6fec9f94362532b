//! What a map and its control share ([`Shared`]): the seqlock of figures the map
//! publishes and the control reads, the per-key counts, the drain flag, the settings
//! asked for and not yet applied, and what the attached map can change. Every protocol
//! between the two sides is a method here, so the atomics are private to this file (only
//! the drain flag is lent out, to a fill loop that looks at it before each pull).

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering, fence};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::limit::key_settings::KeySettings;
use crate::limit::rate::Rate;
// atomic-waker's own (not the loom shim): the control is std-only, like its other atomics.
use atomic_waker::AtomicWaker;

use super::error::{ControlError, Kind};
use super::progress::{Figures, Progress};

/// The map has a scheduler: rates may be set while it runs.
pub(crate) const CAN_RATE: u8 = 1;
/// The map has a key function: per-key limits and rates may be set while it runs.
pub(crate) const CAN_PER_KEY: u8 = 2;
/// The map takes settings of single keys from this control: it was attached after
/// `.per_key`, so the control names the map's keys (one attached before is typed by `()`).
pub(crate) const CAN_KEY_SETTINGS: u8 = 4;
/// A map is attached and has not ended.
const ATTACHED: u8 = 8;
/// The map's keys adapt: a key's values in force may be moved while it runs.
pub(crate) const CAN_ADAPT: u8 = 16;

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
    /// The values these settings set become the key's own.
    Set(K, KeySettings),
    /// The key follows the defaults again.
    Clear(K),
    /// An adaptive key's values in force move to the values these settings set.
    InForce(K, KeySettings),
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
    buffered: AtomicU64,
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
    changeable: AtomicU8,
    waker: AtomicWaker,
    /// Input positions of the items a drain dropped unstarted, ascending.
    never_started: Mutex<Vec<usize>>,
    /// A stop was asked (a drain too: it sets `draining`, and is spent with it).
    stopping: AtomicBool,
    /// Input positions of the items a stop cancelled, ascending.
    cancelled: Mutex<Vec<usize>>,
}

/// Locks one of the control's mutexes (here and in the handle).
pub(super) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // The data under these locks is plain values written whole: a panic elsewhere cannot
    // leave it half-written.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The map's side: what the engine and the admissions publish and take.
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
        self.buffered.store(figures.buffered, Ordering::Relaxed);
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
                    buffered: self.buffered.load(Ordering::Relaxed),
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

    /// Publishes the last figures of the map, which ended, and detaches it: the control
    /// may be attached to another map from now on. Nobody polls an ended map: nothing
    /// more to wake.
    pub(crate) fn end(&self, figures: &Figures) {
        self.write(figures, true);
        // A drain asked during this run ends with it.
        self.drain_spent
            .store(self.draining.load(Ordering::Acquire), Ordering::Release);
        self.changeable.store(0, Ordering::Release);
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

    /// Whether a stop was asked.
    #[inline]
    pub(crate) fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// Records the input positions of the items a stop cancelled.
    pub(crate) fn record_cancelled(&self, mut positions: Vec<usize>) {
        positions.sort_unstable();
        *lock(&self.cancelled) = positions;
    }

    /// Records the input positions a drain dropped unstarted (ascending).
    pub(crate) fn record_not_started(&self, mut positions: Vec<usize>) {
        positions.sort_unstable();
        let mut never = lock(&self.never_started);
        never.extend(positions);
    }

    /// Attaches a map that can change the settings in `changeable`: a new run, whose figures
    /// start from zero.
    #[track_caller]
    pub(crate) fn attach(&self, changeable: u8) {
        // Under the settings' lock: a setting asked once the new map is attached waits
        // for the reset below and is kept; one asked before sees no map.
        let mut settings = lock(&self.settings);
        let before = self.changeable.fetch_or(ATTACHED, Ordering::AcqRel);
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
            self.stopping.store(false, Ordering::Release);
        }
        lock(&self.never_started).clear();
        lock(&self.cancelled).clear();
        self.board_stale.store(true, Ordering::Release);
        self.changeable
            .store(changeable | ATTACHED, Ordering::Release);
    }

    /// The map changed its admission (a scheduling method after `.control`): it can now
    /// change the settings in `changeable`.
    pub(crate) fn set_changeable(&self, changeable: u8) {
        self.changeable
            .store(changeable | ATTACHED, Ordering::Release);
    }
}

/// The control's side: what a [`MapControl`](crate::MapControl) reads and asks.
impl Shared {
    /// A snapshot of what the map last published, without asking for per-key counts.
    pub(super) fn progress(&self) -> Progress {
        let (figures, ended) = self.read();
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
            paused_keys: key_figure(&self.paused_keys),
            open_keys: key_figure(&self.open_keys),
            keys_told_later: key_figure(&self.keys_told_later),
            keys_warming_up: key_figure(&self.keys_warming_up),
            draining: self.is_draining(),
            ended,
        }
    }

    /// Asks the map for its per-key counts (paused, open, told later) if it has a
    /// scheduler, the only map that has keys to count.
    pub(super) fn request_key_counts(&self) {
        if self.changeable.load(Ordering::Relaxed) & CAN_RATE != 0 {
            self.request_keys(0);
        }
    }

    /// Asks the map to publish its per-key figures when its next poll returns, with the
    /// `n` busiest keys (the most asked for so far), and wakes it unless a request is
    /// already pending.
    pub(super) fn request_keys(&self, n: usize) {
        self.keys_wanted.fetch_max(n as u64, Ordering::Relaxed);
        if !self.want_keys.swap(true, Ordering::AcqRel) {
            self.waker.wake();
        }
    }

    /// Whether a map was attached since the busiest keys were last read (the board
    /// shows the previous run's), and from now on not.
    pub(super) fn take_board_stale(&self) -> bool {
        self.board_stale.swap(false, Ordering::AcqRel)
    }

    /// Whether the map attached last ended.
    pub(super) fn has_ended(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }

    /// Sets the drain flag, and wakes the map the first time.
    pub(super) fn drain(&self) {
        // Asked now: for the map attached now, or (none attached) for the next one.
        self.drain_spent.store(false, Ordering::Release);
        if !self.draining.swap(true, Ordering::AcqRel) {
            self.generation.fetch_add(1, Ordering::AcqRel);
            self.waker.wake();
        }
    }

    /// Sets the stop flag (and the drain flag: nothing more is pulled), and wakes the map
    /// the first time.
    pub(super) fn stop(&self) {
        self.drain_spent.store(false, Ordering::Release);
        let was_stopping = self.stopping.swap(true, Ordering::AcqRel);
        let was_draining = self.draining.swap(true, Ordering::AcqRel);
        if !(was_stopping && was_draining) {
            self.generation.fetch_add(1, Ordering::AcqRel);
            self.waker.wake();
        }
    }

    /// The input positions of the items a stop cancelled, ascending.
    pub(super) fn cancelled_positions(&self) -> Vec<usize> {
        lock(&self.cancelled).clone()
    }

    /// The input positions a drain dropped unstarted, ascending.
    pub(super) fn never_started(&self) -> Vec<usize> {
        lock(&self.never_started).clone()
    }

    /// Asks the map for a setting it can take if it has every cap in `needs`: `apply`
    /// stores it, the generation is bumped and the map woken; otherwise the error names
    /// `setting` and what the map lacks.
    pub(super) fn change(
        &self,
        needs: u8,
        setting: &'static str,
        apply: impl FnOnce(&mut Settings),
    ) -> Result<(), ControlError> {
        let changeable = self.changeable.load(Ordering::Acquire);
        let kind = if changeable & ATTACHED == 0 {
            Kind::NotAttached
        } else if needs & CAN_PER_KEY != 0 && changeable & CAN_PER_KEY == 0 {
            Kind::NoKeys
        } else if needs & CAN_KEY_SETTINGS != 0 && changeable & CAN_KEY_SETTINGS == 0 {
            Kind::AttachedBeforeKeys
        } else if needs & CAN_ADAPT != 0 && changeable & CAN_ADAPT == 0 {
            Kind::NotAdaptive
        } else if changeable & needs != needs {
            Kind::NoScheduler
        } else {
            apply(&mut lock(&self.settings));
            self.generation.fetch_add(1, Ordering::AcqRel);
            self.waker.wake();
            return Ok(());
        };
        Err(ControlError::new(kind, setting))
    }
}
