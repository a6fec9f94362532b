//! The figures: what a map counts ([`Figures`], published into its control) and the
//! snapshots a [`MapControl`](crate::MapControl) hands out of them ([`Progress`] for the
//! whole map, [`KeyProgress`] for one key). Plain values: reading them touches nothing
//! shared.

use std::time::Duration;

use crate::limit::breaker::core::BreakerState;
use crate::limit::rate::Rate;

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
    /// Finished outputs the map holds and has not handed out yet.
    pub(crate) buffered: u64,
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
        // An ended map holds no output: it handed them all out, or they went with it.
        self.buffered = 0;
        self
    }
}

/// A snapshot of a map's progress, from [`MapControl::progress`](crate::MapControl::progress).
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
    // Filled in by the control's one reading of what the map published.
    pub(super) figures: Figures,
    pub(super) paused_keys: u64,
    pub(super) open_keys: u64,
    pub(super) keys_told_later: u64,
    pub(super) keys_warming_up: u64,
    pub(super) draining: bool,
    pub(super) ended: bool,
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

    /// Of the [finished](Self::finished) items, those whose output the map still holds:
    /// a stream's outputs waiting for its consumer to take them with `next()`, or an
    /// output waiting for an earlier item's in input order. A consumer that works on each
    /// output [alongside](crate::BoundedStreamExt::alongside) the map sees it grow while
    /// it works (up to the window). As of the map's last publication (when it waits); 0
    /// once the map [ended](Self::is_ended).
    ///
    /// # Examples
    ///
    /// ```
    /// use futures_lite::StreamExt;
    /// use tollgate::{BoundedStreamExt, MapControl, amap_iter};
    /// # futures_lite::future::block_on(async {
    /// let control = MapControl::new();
    /// let mut outputs = amap_iter(0..8u32, 4, |n| async move { n }).control(&control);
    /// while let Some(_n) = outputs.next().await {
    ///     assert!(control.progress().buffered() <= 4);
    /// }
    /// assert_eq!(control.progress().buffered(), 0); // all handed out
    /// # });
    /// ```
    #[must_use]
    pub fn buffered(&self) -> u64 {
        self.figures.buffered
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

    /// Pulled items that never started and never will: a
    /// [drain](crate::MapControl::drain) left them, or the map was cancelled before their
    /// turn (dropped, stopped by [`try_map_async`](crate::try_map_async)'s first error, or
    /// a panic). Nothing of them ran: submit them again as they are. Their positions:
    /// [`MapControl::not_started`](crate::MapControl::not_started).
    #[must_use]
    pub fn not_started(&self) -> u64 {
        self.figures.not_started
    }

    /// Items the map's cancellation cut short: an attempt of theirs was running when the
    /// map was dropped, [stopped](crate::MapControl::stop), stopped by
    /// [`try_map_async`](crate::try_map_async)'s first error, or went through by a panic
    /// (its future was dropped mid-way), or they were waiting for a retry after a failed
    /// attempt. A stop lists their positions: [`MapControl::cancelled`](crate::MapControl::cancelled). Unlike the [not started](Self::not_started)
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

    /// Whether a drain (or a [stop](crate::MapControl::stop), which is also one) was asked.
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

/// One key's figures, from [`MapControl::busiest_keys`](crate::MapControl::busiest_keys).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyProgress<K> {
    pub(crate) key: K,
    pub(crate) waiting: usize,
    pub(crate) in_flight: usize,
    pub(crate) paused: bool,
    /// Who asked for its pause, while it is paused.
    pub(crate) paused_by: Option<PausedBy>,
    /// How long before the reading its adapted limit or rate was last cut, in nanoseconds
    /// (`None`: never, or the map does not adapt).
    pub(crate) last_cut: Option<u64>,
    pub(crate) limit: usize,
    /// The rate's interval in nanoseconds (0: no rate).
    pub(crate) rate_interval: u64,
    pub(crate) breaker: Option<BreakerState>,
    pub(crate) held_by: HeldBy,
    /// Its attempts that ended, and of those the ones read as each kind of outcome.
    pub(crate) attempts: u32,
    pub(crate) successes: u32,
    pub(crate) overloads: u32,
    pub(crate) outages: u32,
    pub(crate) failures: u32,
}

/// Who asked for a key's pause ([`KeyProgress::paused_by`]).
///
/// # Examples
///
/// ```
/// use tollgate::{KeyProgress, PausedBy};
///
/// fn why_paused(key: &KeyProgress<String>) -> &'static str {
///     match key.paused_by() {
///         Some(PausedBy::Server) => "the server said so",
///         Some(PausedBy::RetryPolicy) => "the retry policy paused the host",
///         _ => "not paused",
///     }
/// }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PausedBy {
    /// A server's hint, read from an attempt's outcome (`Hint::pause`, a `Retry-After`
    /// the `http` feature read).
    Server,
    /// The retry policy's [`pause_key`](crate::RetryPolicy::pause_key), after a failed
    /// attempt.
    RetryPolicy,
}

/// What keeps a key's waiting items from starting at the moment a control read it
/// ([`KeyProgress::held_by`]): why a key is slow. The first that applies, in the order of
/// a start: the key's own room, its pause, its breaker, the shared limits, its rate, the
/// pause of a retry, the map's rate, a global slot.
///
/// # Examples
///
/// ```
/// use tollgate::{HeldBy, KeyProgress};
///
/// fn why(key: &KeyProgress<String>) -> &'static str {
///     match key.held_by() {
///         HeldBy::Nothing => "nothing waits",
///         HeldBy::GlobalLimit => "waits for a global slot",
///         HeldBy::Limit => "its limit is full",
///         HeldBy::Rate => "waits for its rate",
///         HeldBy::Pause => "paused",
///         _ => "other",
///     }
/// }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HeldBy {
    /// Nothing of the key waits: every item pulled has started.
    Nothing,
    /// As many of its items run as its limit allows (on an adaptive map, the limit it
    /// adapted to).
    Limit,
    /// Its pause: a server's word (a hint, a `Retry-After` the retry policy's
    /// `pause_key` turned into a pause of the key); [`KeyProgress::paused_by`] says which.
    Pause,
    /// Its circuit breaker is open, or its probes are out.
    Breaker,
    /// The map's shared limits (a fleet's store): asking, or told to ask later.
    SharedLimits,
    /// Its rate: its next start is not due yet (on an adaptive map, the rate it adapted
    /// to).
    Rate,
    /// Its waiting items are back from failed attempts and wait out their pause.
    Retry,
    /// The map's rate (`.rate(..)`).
    MapRate,
    /// Nothing of its own: it may start, and waits for a free global slot (the map's
    /// global limit, shared among keys by its [slot policy](crate::SlotPolicy)).
    GlobalLimit,
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

    /// Who asked for its pause, while it [is paused](Self::is_paused): the server, in a
    /// hint, or the retry policy (when two pauses overlap, the one that ends later).
    #[must_use]
    pub fn paused_by(&self) -> Option<PausedBy> {
        self.paused_by
    }

    /// How long before the map published it an overload or a high latency last cut its
    /// adapted limit or rate (or a control set them:
    /// [`set_key_in_force`](crate::MapControl::set_key_in_force)): a recent cut is why an
    /// adaptive key is held by its [limit](HeldBy::Limit) or its [rate](HeldBy::Rate) below
    /// what it ran at. `None` if it was never cut, or on a map that does not adapt.
    #[must_use]
    pub fn last_cut(&self) -> Option<Duration> {
        self.last_cut.map(Duration::from_nanos)
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

    /// What keeps its waiting items from starting when the map published it.
    #[must_use]
    pub fn held_by(&self) -> HeldBy {
        self.held_by
    }

    /// Its attempts that ended (first attempts and retries), counted since the map last
    /// made the key's entry: a key the map forgot (60 s or more after its last attempt)
    /// counts from 0 when seen again.
    /// Counted on every keyed map with a control, whether or not it reads outcomes. An
    /// attempt whose ask to the [shared limits](crate::SharedLimits) failed counts (it
    /// ended at once with the error); an item an open
    /// [breaker](crate::futures::BoundedMap::breaker) failed at once does not (nothing of
    /// it started). Saturates at `u32::MAX >> 1`.
    ///
    /// On a map that reads outcomes ([`classify`](crate::futures::BoundedMap::classify),
    /// [`adaptive`](crate::futures::BoundedMap::adaptive),
    /// [`breaker`](crate::futures::BoundedMap::breaker)), it is the sum of
    /// [`successes`](Self::successes), [`overloads`](Self::overloads),
    /// [`outages`](Self::outages) and [`failures`](Self::failures) (until one saturates);
    /// on any other map those are 0 and this alone counts: a map that reads no outcome
    /// does not know how its attempts went.
    ///
    /// # Examples
    ///
    /// ```
    /// use futures_lite::future::{pending, poll_once};
    /// use futures_lite::{StreamExt, stream};
    /// use tollgate::{BoundedStreamExt, MapControl};
    /// # futures_lite::future::block_on(async {
    /// let control = MapControl::new();
    /// // Three items of host 0, then one of host 1 that never ends (so the map runs on).
    /// let mut pages = Box::pin(
    ///     stream::iter([0u32, 0, 0, 1])
    ///         .map_unordered(4, |host| async move {
    ///             if host == 1 {
    ///                 pending::<()>().await;
    ///             }
    ///             host
    ///         })
    ///         .per_key(|host| *host, 1)
    ///         .control(&control),
    /// );
    /// for _ in 0..3 {
    ///     assert_eq!(pages.next().await, Some(0));
    /// }
    /// let _ = control.busiest_keys(2); // ask: the map publishes when its next poll returns
    /// assert!(poll_once(pages.next()).await.is_none());
    /// let keys = control.busiest_keys(2);
    /// // Host 1 is busy; host 0 is idle, kept in view after its last attempt.
    /// assert_eq!((*keys[0].key(), keys[0].in_flight(), keys[0].attempts()), (1, 1, 0));
    /// assert_eq!((*keys[1].key(), keys[1].in_flight(), keys[1].attempts()), (0, 0, 3));
    /// assert_eq!(keys[1].successes(), 0, "this map reads no outcome");
    /// # });
    /// ```
    #[must_use]
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Of its [attempts](Self::attempts) that ended, those its map read as a success
    /// ([`Outcome::success`](crate::Outcome::success)); 0 on a map that reads no outcome.
    /// Saturates at `u32::MAX`.
    ///
    /// # Examples
    ///
    /// ```
    /// use futures_lite::future::{pending, poll_once};
    /// use futures_lite::{StreamExt, stream};
    /// use tollgate::{BoundedStreamExt, MapControl, Outcome};
    /// # futures_lite::future::block_on(async {
    /// let control = MapControl::new();
    /// let mut pages = Box::pin(
    ///     stream::iter([200u16, 429, 503, 404, 200, 0])
    ///         .map_unordered(8, |status| async move {
    ///             if status == 0 {
    ///                 pending::<()>().await; // keeps the map running
    ///             }
    ///             status
    ///         })
    ///         .per_key(|status| *status == 0, 8)
    ///         .classify(|status: &u16| match *status {
    ///             200 => Outcome::success(),
    ///             429 => Outcome::overload(),
    ///             503 => Outcome::outage(),
    ///             _ => Outcome::failure(),
    ///         })
    ///         .control(&control),
    /// );
    /// for _ in 0..5 {
    ///     assert!(pages.next().await.is_some());
    /// }
    /// let _ = control.busiest_keys(2);
    /// assert!(poll_once(pages.next()).await.is_none());
    /// let keys = control.busiest_keys(2);
    /// let answered = keys.iter().find(|key| !*key.key()).unwrap();
    /// assert_eq!(answered.attempts(), 5);
    /// assert_eq!(answered.successes(), 2);
    /// assert_eq!(
    ///     (answered.overloads(), answered.outages(), answered.failures()),
    ///     (1, 1, 1)
    /// );
    /// # });
    /// ```
    #[must_use]
    pub fn successes(&self) -> u32 {
        self.successes
    }

    /// Of its [attempts](Self::attempts) that ended, those its map read as an overload
    /// ([`Outcome::overload`](crate::Outcome::overload): a 429, a 503 without
    /// `Retry-After`, a timeout); 0 on a map that reads no outcome. Saturates at
    /// `u32::MAX`.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::KeyProgress;
    ///
    /// /// The share of a host's answers that said it has too much.
    /// fn overloaded(key: &KeyProgress<String>) -> f64 {
    ///     f64::from(key.overloads()) / f64::from(key.attempts().max(1))
    /// }
    /// ```
    #[must_use]
    pub fn overloads(&self) -> u32 {
        self.overloads
    }

    /// Of its [attempts](Self::attempts) that ended, those its map read as an outage
    /// ([`Outcome::outage`](crate::Outcome::outage): a 503 with `Retry-After`); 0 on a map
    /// that reads no outcome. Saturates at `u32::MAX`.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::KeyProgress;
    ///
    /// /// Whether a host said it is out more often than it answered.
    /// fn mostly_out(key: &KeyProgress<String>) -> bool {
    ///     key.outages() > key.successes()
    /// }
    /// ```
    #[must_use]
    pub fn outages(&self) -> u32 {
        self.outages
    }

    /// Of its [attempts](Self::attempts) that ended, those its map read as a plain failure
    /// ([`Outcome::failure`](crate::Outcome::failure): a 404, a stray 500); 0 on a map that
    /// reads no outcome. Saturates at `u32::MAX`.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::KeyProgress;
    ///
    /// /// A progress line's words for one host.
    /// fn line(key: &KeyProgress<String>) -> String {
    ///     format!(
    ///         "{}: {} ok, {} overloaded, {} out, {} failed",
    ///         key.key(),
    ///         key.successes(),
    ///         key.overloads(),
    ///         key.outages(),
    ///         key.failures()
    ///     )
    /// }
    /// ```
    #[must_use]
    pub fn failures(&self) -> u32 {
        self.failures
    }
}
