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
//!
//! The files, one concept each: `shared.rs` is what the two sides share (the seqlock,
//! the atomics, the settings waiting for the map), `progress.rs` the figures and the
//! snapshots users read, `error.rs` the refused setting; this file is the handle users
//! hold.

mod error;
mod progress;
mod shared;

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::limit::check::at_least_one;
use crate::limit::key_settings::KeySettings;
use crate::limit::rate::Rate;

use self::shared::lock;

pub use self::error::ControlError;
pub(crate) use self::progress::Figures;
pub use self::progress::{HeldBy, KeyProgress, PausedBy, Progress};
pub(crate) use self::shared::{
    CAN_ADAPT, CAN_KEY_SETTINGS, CAN_PER_KEY, CAN_RATE, KeyChange, KeyChanges, Settings, Shared,
};

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
            .field("progress", &self.shared.progress())
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
        let mut needs = CAN_RATE | CAN_PER_KEY | CAN_KEY_SETTINGS;
        if matches!(change, KeyChange::InForce(..)) {
            needs |= CAN_ADAPT;
        }
        self.shared.change(needs, setting, |_| {})?;
        changes.push(change);
        Ok(())
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
        self.shared.request_key_counts();
        self.shared.progress()
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
        self.shared.drain();
    }

    /// Stops the map at once: nothing more is pulled or started, the attempts in flight
    /// are cancelled (their futures dropped, which gives back every permit and shared
    /// lease they held), the items waiting for a retry are cancelled without another
    /// attempt, and the pulled items that never started are [not
    /// started](Self::not_started). What finished before the stop is still handed out: a
    /// stream yields its finished outputs and then ends, `map_async` and `try_map_async`
    /// resolve to them (in input order, without the positions that never finished: those
    /// are in [`cancelled`](Self::cancelled) and [`not_started`](Self::not_started);
    /// `.indexed()` pairs each output with its position). The figures add up:
    /// [`Progress::cancelled`] counts what the stop cut short.
    ///
    /// Where a [drain](Self::drain) lets every started item finish, with its retries
    /// (which may take long: a server's `Retry-After`, a backoff), a stop ends now and
    /// keeps what is done; dropping the map ends now too, but throws away what
    /// `map_async` had collected. A stop is also a drain ([`Progress::is_draining`]).
    ///
    /// The map stops at its next poll: it is woken for it. Like a drain, a stop is per
    /// run (asked while no map is attached, it stops the next map attached), and stopping
    /// twice is stopping once.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{MapControl, map_async, sleep};
    /// # futures_lite::future::block_on(async {
    /// let control = MapControl::new();
    /// let stop = control.clone();
    /// let done = map_async(0..100u32, 4, |n| {
    ///     let stop = stop.clone();
    ///     async move {
    ///         if n == 10 {
    ///             stop.stop(); // a second Ctrl-C handler would call this
    ///         }
    ///         if n >= 10 {
    ///             sleep(Duration::from_secs(3600)).await; // cut short by the stop
    ///         }
    ///         n
    ///     }
    /// })
    /// .control(&control)
    /// .await;
    /// assert_eq!(done, (0..10).collect::<Vec<_>>()); // what finished is kept
    /// let cancelled = control.cancelled(); // 10 and the others in flight then
    /// assert_eq!(cancelled[0], 10);
    /// let p = control.progress();
    /// assert_eq!(p.finished() + p.cancelled(), p.pulled());
    /// # });
    /// ```
    pub fn stop(&self) {
        self.shared.stop();
    }

    /// The input positions (0 for the first item) of the items a [stop](Self::stop)
    /// cancelled: their attempt was in flight, or they were waiting for a retry. Unlike the
    /// [not started](Self::not_started) ones, their work may have had effects (a request
    /// sent): check before submitting them again. Ascending; empty until a stop took
    /// effect, and for a map that was dropped instead (its cancelled items are counted in
    /// [`Progress::cancelled`] but not listed: the map is gone before it could say which).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::MapControl;
    ///
    /// let control: MapControl = MapControl::new();
    /// assert!(control.cancelled().is_empty()); // nothing stopped yet
    /// ```
    pub fn cancelled(&self) -> Vec<usize> {
        self.shared.cancelled_positions()
    }

    /// The input positions (0 for the first item) of the items the map pulled and never
    /// started because of a [drain](Self::drain) or a [stop](Self::stop), or because
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
        self.shared.never_started()
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

    /// Gives one key settings of its own while the map runs ([`KeySettings`]: a limit, a
    /// rate, or both): each value `settings` sets becomes the key's own, whatever the
    /// [default key limit](Self::set_default_key_limit) and
    /// [default key rate](Self::set_default_key_rate), whose changes no longer reach it;
    /// what `settings` leaves unset stays as it is. A lowered limit: a key running more
    /// starts nothing until it runs fewer. A new rate: the key's state carries over as
    /// for [`set_rate`](Self::set_rate) (a map without a default key rate spaces this key
    /// only). The map applies it at its next round of work, like the other settings, and
    /// before what the map's [function of the key](crate::futures::BoundedMap::key_settings)
    /// gives it.
    ///
    /// The settings are kept until [cleared](Self::clear_key_settings), also while the key
    /// is idle and the map has forgotten it: a key that comes back takes them again. The
    /// map keeps one small entry per key set this way, so its memory grows with the keys
    /// you set, never with the keys it sees. The settings belong to the map they were
    /// given to: the next map the control is attached to starts with none. Attach the
    /// control after `.per_key` (its key type is the map's then): one attached before it
    /// names no key.
    ///
    /// On an [adaptive](crate::futures::BoundedMap::adaptive) map they are ceilings: the
    /// key's adapted values stay at or below them.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{KeySettings, MapControl, Rate, map_async};
    /// # futures_lite::future::block_on(async {
    /// let control = MapControl::new();
    /// let map = map_async(0..20u32, 8, |n| async move { n })
    ///     .per_key(|n| n % 2, 4)
    ///     .control(&control);
    /// // Odd numbers one at a time; even ones at most 10,000 starts a second, 3 at once.
    /// control.set_key_settings(1, KeySettings::new().limit(1)).unwrap();
    /// control.set_key_settings(0, KeySettings::new().rate(Rate::per_second(10_000).burst(3))).unwrap();
    /// assert_eq!(map.await.len(), 20);
    /// # });
    /// ```
    ///
    /// # Errors
    ///
    /// A [`ControlError`] if the map has no key function (it was built without
    /// `.per_key`), if the control was attached before `.per_key` (it names no key of
    /// the map), or if the control is attached to no map.
    pub fn set_key_settings(&self, key: K, settings: KeySettings) -> Result<(), ControlError> {
        self.change_key("key settings", KeyChange::Set(key, settings))
    }

    /// Moves one key's limit and rate in force on an
    /// [adaptive](crate::futures::BoundedMap::adaptive) map: the values the key adapted to,
    /// not its ceilings (which [`set_key_settings`](Self::set_key_settings) sets). Each
    /// value `settings` sets is held between the key's floor and its ceilings (the rate's
    /// burst stays the ceiling's); what it leaves unset stays as it is. The key adapts on
    /// from there, not back to where it was: the value set is where its recovery levels
    /// off (clean rounds keep it, then let it creep up), the next overload cuts from it,
    /// and signals of attempts started before the change lower nothing. The map applies it
    /// at its next round of work, like the other settings; [`busiest_keys`](Self::busiest_keys)
    /// shows the key's values.
    ///
    /// It moves a key the map holds now (one with items waiting or running, or kept after
    /// its last attempt): a key the map never saw or has forgotten starts low when it
    /// comes, as every new key does, and this is not kept for it.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Adaptive, KeySettings, MapControl, Outcome, Rate, map_async};
    /// # futures_lite::future::block_on(async {
    /// let control = MapControl::new();
    /// let steer = control.clone();
    /// let pages = map_async(0..20u32, 8, |n| {
    ///     if n == 4 {
    ///         // Known to take 8 at once and 40 a second: no slow start for host 0.
    ///         let fast = KeySettings::new().limit(8).rate(Rate::per_second(40));
    ///         steer.set_key_in_force(0, fast).unwrap();
    ///     }
    ///     async move { Ok::<u32, u16>(n) }
    /// })
    /// .per_key(|n| n % 2, 16)
    /// .adaptive(Adaptive::new(1, 16).rate_ceiling(Rate::per_second(10_000)), |_| {
    ///     Outcome::success()
    /// })
    /// .control(&control)
    /// .await;
    /// assert_eq!(pages.len(), 20);
    /// # });
    /// ```
    ///
    /// # Errors
    ///
    /// A [`ControlError`] if the map's keys do not adapt (it was built without
    /// [`adaptive`](crate::futures::BoundedMap::adaptive): a key's values in force are its
    /// settings, which [`set_key_settings`](Self::set_key_settings) sets), if the map has
    /// no key function, if the control was attached before `.per_key`, or if the control
    /// is attached to no map.
    pub fn set_key_in_force(&self, key: K, settings: KeySettings) -> Result<(), ControlError> {
        self.change_key("values in force", KeyChange::InForce(key, settings))
    }

    /// Clears what [`set_key_settings`](Self::set_key_settings) gave one key: it follows
    /// the map's function of the key and the default key limit and default key rate again (its rate state carries over), and the map
    /// forgets the setting. Clearing a key without a setting of its own does nothing.
    /// The map applies it at its next round of work.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{KeySettings, MapControl, map_async};
    /// # futures_lite::future::block_on(async {
    /// let control = MapControl::new();
    /// let map = map_async(0..20u32, 8, |n| async move { n })
    ///     .per_key(|n| n % 2, 4)
    ///     .control(&control);
    /// control.set_key_settings(1, KeySettings::new().limit(1)).unwrap();
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
    /// Idle keys stay in view: the map keeps a key, its [counts](KeyProgress::attempts)
    /// and all, 60 s after its last attempt ended (on the map's clock), and lists such keys
    /// last, after the busy ones and those with an open breaker, the one whose last attempt
    /// ended latest first (to about 17 ms), nothing waiting or in flight. A key seen again
    /// within the 60 s goes on with its counts; after them it is out of view, and the map
    /// may forget it (at its next sweep of idle keys): seen again then, it counts from 0.
    /// The map keeps them for its control only: a map without one forgets a key once
    /// nothing of it waits or runs (an [adaptive](crate::futures::BoundedMap::adaptive)
    /// map keeps its keys 60 s anyway).
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
        if self.shared.take_board_stale() {
            keys.clear(); // the previous run's
        }
        if self.shared.has_ended() {
            return Vec::new(); // nothing waits or runs in an ended map
        }
        keys.iter().take(n).cloned().collect()
    }
}
