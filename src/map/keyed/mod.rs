//! Per-key limits for any bounded map, and the scheduler that knows time: a global cap
//! and a per-key cap that never block each other, rates, retries that give their slots
//! back, and pauses a server asks for.
//!
//! The naive crawler takes a global slot, then waits for its host's bulkhead while
//! holding it; with host-sorted input most global slots sit idle behind one host. Here an
//! item is started only when both its key and the global limit have room and its time has
//! come (its key's rate, the map's rate, a pause of its key, the pause after a failed
//! attempt). Items that may not start yet wait in their key's queue (inside the
//! [`KeyScheduler`]) holding no global slot, while items of other keys go ahead. Input is
//! pulled ahead of the running work, up to the window, to find those other keys; while
//! global slots sit idle because every waiting item's key is full or waiting for time,
//! the window grows (up to the max window) and shrinks back once the backlog is gone.
//!
//! One timer serves the whole map: it is set for the earliest time an item may start.
//!
//! [`PerKey`] is the engine's admission for this; the maps' `per_key`, `rate` and `retry`
//! methods install it (a map without a key function gets the unit key).

mod adaptation;
mod asking;
mod attempts;
mod breaking;
mod budget;
mod classify;
mod gated;
mod hints;
mod hooks;
mod key;
mod key_rate;
mod key_table;
mod latency;
mod pacing;
mod part;
mod parts;
mod pause;
mod queues;
mod retry_budget;
mod scheduler;
mod settings;
mod shared;
mod tally;
mod timer;
mod turns;
mod window;

use std::fmt;
use std::future::{Future, IntoFuture};
use std::hash::Hash;
use std::ops::ControlFlow;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::Context;
use std::time::Duration;

use futures_lite::Stream;

pub use self::attempts::NoRetry;
pub(crate) use self::attempts::{Attempts, Budget, RetryItem};
pub(crate) use self::breaking::MapBreaker;
use self::classify::Classify;
pub use self::classify::{Classified, FailWhenOpen, Fixed, WaitWhenOpen};
use self::latency::{AttemptClock, Unpolled};
use self::part::Ended;
use self::scheduler::{KeyScheduler, Next};
use self::settings::GivenSettings;
pub use self::shared::{Answer, LaterReason, NoSharedLimits, SharedLimits, WithSharedLimits};
use self::shared::{Gate, GateOutput};
use self::timer::MapTimer;
pub use self::turns::SlotPolicy;
use self::window::Growth;
use super::control::{CAN_ADAPT, CAN_KEY_SETTINGS, CAN_PER_KEY, CAN_RATE, KeyChanges, KeyProgress};
use super::engine::{Admission, AfterYield, DebugFields, DefaultWindow, Engine};
use super::pool::Started;
use super::queued::{Admit, Queued, fill_queued};
use super::results::Results;
use crate::events;
use crate::limit::adaptive::config::Adaptive;
use crate::limit::breaker::core::Ticket;
use crate::limit::breaker::error::CircuitBreakerError;
use crate::limit::key_settings::KeySettings;
use crate::limit::rate::Rate;
use crate::limit::rate::gcra::{Gcra, nanos_since_origin};
use crate::runtime::now;

/// The default window of a map with per-key limits, in multiples of the global limit.
const PER_KEY_WINDOW: usize = 64;

/// The key function of a map that has rates or retries but no per-key limit: every item
/// has the same key.
pub type Unkeyed<T> = fn(&T);

/// What a map with a scheduler counts for its control (a plain map needs no counters:
/// every item it pulls starts at once).
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    started: u64,
    attempts: u64,
    finished: u64,
    failed: u64,
    retries: u64,
}

/// Where a control reads the busiest keys.
type KeyBoard<K> = Arc<Mutex<Vec<KeyProgress<K>>>>;

/// An item waiting for its key: its input position, the item, the attempts it made.
struct Waiting<T> {
    seq: usize,
    item: T,
    attempts: u32,
}

/// What the admission remembers of the future in a pool slot.
pub(crate) struct Running<K, T> {
    key: K,
    /// The item again, when a failed attempt may be retried.
    kept: Option<T>,
    /// Which attempt this is (1 for the first).
    attempt: u32,
    /// When it started, for its latency (an adaptive map's only).
    clock: AttemptClock,
    /// Its key's breaker permit (a map with breakers only).
    ticket: Option<Ticket>,
}

/// The admission of a map with per-key limits, rates or retries: made by the maps'
/// `per_key`, `rate` and `retry` methods
/// ([`MapAsync::per_key`](crate::futures::MapAsync::per_key) and its siblings).
///
/// `T` is the map's item type, `K` the key, `KF` the key function, `P` the retry
/// policy ([`NoRetry`] or a [`RetryPolicy`](crate::RetryPolicy)), `G` the shared limits
/// ([`NoSharedLimits`], or [`WithSharedLimits`] after
/// [`shared_limits`](crate::futures::MapAsync::shared_limits)) and `C` how the map reads
/// its attempts' outputs ([`Fixed`]: not at all, or [`Classified`] after
/// [`classify`](crate::futures::BoundedMap::classify),
/// [`adaptive`](crate::futures::BoundedMap::adaptive) or
/// [`breaker`](crate::futures::BoundedMap::breaker)). Which per-key features the map
/// has (adaptation, a breaker...) is its scheduler's, not its type's.
pub struct PerKey<T, K, KF, P = NoRetry, G = NoSharedLimits, C = Fixed> {
    key_fn: KF,
    scheduler: KeyScheduler<K, Waiting<T>>,
    /// The future running in each pool slot (`None` for an idle slot).
    running: Vec<Option<Running<K, T>>>,
    policy: P,
    /// Whether any start depends on the time (a rate, or retries that wait).
    timed: bool,
    /// The one timer, for the earliest time an item may start.
    timer: MapTimer,
    /// How far the window has grown, and may.
    growth: Growth,
    /// Whether the map has a key function (not the unit key of `.rate`/`.retry`).
    keyed: bool,
    counts: Counts,
    /// Where a control reads the busiest keys, when one is attached.
    board: Option<KeyBoard<K>>,
    /// Where a control queues the settings of single keys, when one is attached.
    key_changes: Option<KeyChanges<K>>,
    /// The shared limits every start asks first, and the permits they granted.
    gate: G,
    /// How the map reads each attempt's outcome to adapt its keys ([`Fixed`]: it does not).
    classify: C,
    /// Time the map spent handed out and not polled, in total (an adaptive stream's, for
    /// latencies that leave it out), and since when it is handed out now.
    unpolled: Unpolled,
}

impl<T, K: Hash + Eq + Clone, KF> PerKey<T, K, KF> {
    #[track_caller]
    pub(crate) fn new(key_fn: KF, limit: usize) -> Self {
        check_default_key_limit(limit);
        Self {
            key_fn,
            scheduler: KeyScheduler::new(limit),
            running: Vec::new(),
            policy: NoRetry::default(),
            timed: false,
            timer: MapTimer::default(),
            growth: Growth::default(),
            keyed: true,
            counts: Counts::default(),
            board: None,
            key_changes: None,
            gate: NoSharedLimits::default(),
            classify: Fixed,
            unpolled: Unpolled::default(),
        }
    }
}

impl<T, K: Hash + Eq + Clone, KF, P, G, Cl, M> PerKey<T, K, KF, P, G, Classified<Cl, M>> {
    /// The same admission, with a circuit breaker per key counting the outcomes its
    /// classification reads, its open keys' items doing as `N` says (before the map
    /// starts).
    pub(crate) fn with_breaker<N>(
        mut self,
        breaker: MapBreaker<K>,
    ) -> PerKey<T, K, KF, P, G, Classified<Cl, N>> {
        self.scheduler.set_breaker(breaker);
        // Open periods and time windows are on the map's clock.
        self.timed = true;
        self.with_parts(|policy| policy, |gate| gate, Classified::with_mode)
    }
}

impl<T> PerKey<T, (), Unkeyed<T>> {
    /// The admission of a map with rates or retries and no per-key limit.
    pub(crate) fn unkeyed() -> Self {
        Self {
            keyed: false,
            ..Self::new(|_| (), usize::MAX)
        }
    }
}

impl<T, K: Hash + Eq + Clone, KF, P, G, C> PerKey<T, K, KF, P, G, C> {
    pub(crate) fn set_rate(&mut self, rate: Rate) {
        self.scheduler.set_rate(Gcra::new(rate));
        self.timed = true;
    }

    pub(crate) fn set_default_key_rate(&mut self, rate: Rate) {
        self.scheduler.set_default_rate(Gcra::new(rate));
        self.timed = true;
    }

    /// The same admission, its keys adapting as `adaptive` says from the outcomes
    /// `classify` reads (before the map starts): the default key limit and rate become
    /// the ceilings.
    pub(crate) fn with_adaptive<D>(
        mut self,
        adaptive: Adaptive,
        classify: D,
    ) -> PerKey<T, K, KF, P, G, Classified<D>> {
        let now = self.now();
        self.scheduler.set_default_limit(adaptive.ceiling(), now);
        if let Some(rate) = adaptive.get_rate_ceiling() {
            self.scheduler.set_default_rate(Gcra::new(rate));
        }
        self.scheduler.set_adaptive(adaptive);
        // Latencies and windows are measured on the map's clock.
        self.timed = true;
        self.with_parts(|policy| policy, |gate| gate, |_| Classified::new(classify))
    }

    /// The same admission, following the hints of the outcomes `classify` reads (before
    /// the map starts).
    pub(crate) fn with_classified<D>(self, classify: D) -> PerKey<T, K, KF, P, G, Classified<D>> {
        self.with_parts(|policy| policy, |gate| gate, |_| Classified::new(classify))
    }

    /// Every key asks `given` for its settings when it is made (a key's rate may come
    /// from it, so the map reads the clock).
    pub(crate) fn set_key_settings(
        &mut self,
        given: impl FnMut(&K) -> KeySettings + Send + 'static,
    ) {
        self.scheduler.set_given(GivenSettings::new(given));
        self.timed = true;
    }

    pub(crate) fn set_max_window(&mut self, max_window: usize) {
        self.growth.set_max_window(max_window);
    }

    pub(crate) fn set_slot_policy(&mut self, policy: SlotPolicy) {
        self.scheduler.set_slot_policy(policy);
    }

    /// Publishes the busiest keys on `board` for a control. A keyed map counts each key's
    /// attempts for it from now on, and keeps a key in view 60 s after its last attempt
    /// ended, on the map's clock (before the map starts).
    pub(crate) fn set_board(&mut self, board: KeyBoard<K>) {
        self.board = Some(board);
        if self.keyed {
            self.scheduler.set_tally();
            self.timed = true;
        }
    }

    /// Takes the settings of single keys a control queues in `changes`.
    pub(crate) fn set_key_changes(&mut self, changes: KeyChanges<K>) {
        self.key_changes = Some(changes);
    }

    /// The same admission with another retry policy (before the map starts).
    pub(crate) fn with_policy<Q: Budget>(mut self, policy: Q) -> PerKey<T, K, KF, Q, G, C> {
        if let Some((ratio, floor)) = policy.budget() {
            self.scheduler.set_budget(ratio, floor);
        }
        self.timed = true;
        self.with_parts(|_| policy, |gate| gate, |classify| classify)
    }

    /// The same admission asking `limits` before every start (made from a map without
    /// shared limits: `G` is [`NoSharedLimits`]).
    pub(crate) fn with_shared<L: SharedLimits<K>>(
        mut self,
        limits: L,
    ) -> PerKey<T, K, KF, P, WithSharedLimits<K, L>, C> {
        self.scheduler.set_gated();
        // A key told "later" sleeps on the map's clock.
        self.timed = true;
        self.with_parts(
            |policy| policy,
            |_| WithSharedLimits::new(limits),
            |classify| classify,
        )
    }

    /// The same admission with its retry policy and shared limits replaced (before the map
    /// starts); everything else carries over.
    fn with_parts<Q, H, D>(
        self,
        policy: impl FnOnce(P) -> Q,
        gate: impl FnOnce(G) -> H,
        classify: impl FnOnce(C) -> D,
    ) -> PerKey<T, K, KF, Q, H, D> {
        PerKey {
            key_fn: self.key_fn,
            scheduler: self.scheduler,
            running: self.running,
            policy: policy(self.policy),
            timed: self.timed,
            timer: self.timer,
            growth: self.growth,
            keyed: self.keyed,
            counts: self.counts,
            board: self.board,
            key_changes: self.key_changes,
            gate: gate(self.gate),
            classify: classify(self.classify),
            unpolled: self.unpolled,
        }
    }

    /// The same admission with a key function and a per-key limit (checked by the
    /// caller), before the map starts: rates, retry policy and max window carry over (made
    /// from a map without a key, so without shared limits).
    #[track_caller]
    pub(crate) fn with_key<K2: Hash + Eq + Clone, KF2>(
        self,
        key_fn: KF2,
        limit: usize,
    ) -> PerKey<T, K2, KF2, P> {
        PerKey {
            key_fn,
            scheduler: self.scheduler.rekeyed(limit),
            running: Vec::new(),
            policy: self.policy,
            timed: self.timed,
            timer: MapTimer::default(),
            growth: self.growth.reset(),
            keyed: true,
            counts: self.counts,
            // The board was typed by the old key: a control attached before `.per_key`
            // keeps the counts but shows no keys.
            board: None,
            key_changes: None,
            gate: NoSharedLimits::default(),
            classify: Fixed,
            unpolled: Unpolled::default(),
        }
    }

    fn now(&self) -> u64 {
        if self.timed {
            nanos_since_origin(now())
        } else {
            0
        }
    }

    /// An item of a key whose breaker is open ends at once with `open` (on a map where such
    /// items fail): it never started, and no retry policy sees it.
    fn refused<O, R>(
        &mut self,
        waiting: Waiting<T>,
        open: CircuitBreakerError,
        results: &mut R,
    ) -> ControlFlow<()>
    where
        P: Attempts<T, O>,
        C: Classify<O>,
        R: Results<O>,
    {
        let output = self
            .classify
            .open(open)
            .expect("only a map whose open keys' items fail refuses items");
        // Counted as an attempt that ended at once with the error (as an item whose ask
        // to shared limits failed is), so the progress figures add up.
        self.counts.attempts += 1;
        self.counts.started += u64::from(waiting.attempts == 0);
        self.counts.finished += 1;
        self.counts.failed += u64::from(P::is_failure(&output));
        results.accept(waiting.seq, output)
    }

    /// Records that the attempt in slot `index` (of input position `seq`) ended with
    /// `output`: the output when it is final, `None` when the item goes back to its key's
    /// queue for another attempt (its slots are given back either way).
    #[inline]
    fn attempt_done<O>(&mut self, running: Running<K, T>, seq: usize, output: O) -> Option<O>
    where
        P: Attempts<T, O>,
        C: Classify<O>,
        G: Gate<K>,
    {
        let Running {
            key,
            kept,
            attempt,
            clock,
            ticket,
        } = running;
        // The attempt's end, read once: its outcome, its finish or its retry all happen at
        // this instant (nothing between them waits).
        let mut ended_at = None;
        if C::CLASSIFIES {
            if let Some(outcome) = self.classify.classify(&output) {
                // A hint is kept on the map's clock (a pause, a rate, how long the key is
                // kept), from now on.
                let hinted = !outcome.hint_ref().is_empty();
                self.timed |= hinted;
                let now = self.now();
                ended_at = Some(now);
                let ended = Ended {
                    outcome: &outcome,
                    hinted,
                    ticket,
                    clock,
                    unpolled: &self.unpolled,
                    attempt,
                };
                self.scheduler.ended(&key, &ended, now);
                self.return_permits();
            }
        }
        let Some(item) = kept else {
            let now = ended_at.unwrap_or_else(|| self.now());
            self.scheduler.finish(&key, now);
            self.counts.finished += 1;
            return Some(output);
        };
        let plan = self
            .policy
            .plan(attempt, &output)
            .filter(|_| self.scheduler.take_retry(&key));
        let now = ended_at.unwrap_or_else(|| self.now());
        let Some(plan) = plan else {
            self.scheduler.finish(&key, now);
            self.counts.finished += 1;
            self.counts.failed += u64::from(P::is_failure(&output));
            return Some(output);
        };
        self.counts.retries += 1;
        self.policy.announce(&item, attempt, &output, &plan);
        if let Some(pause) = plan.pause_key {
            events::key_paused(attempt, pause, "pause_key");
            self.scheduler
                .pause(&key, now.saturating_add(nanos(pause)), now);
        }
        let not_before = now.saturating_add(nanos(plan.pause));
        let waiting = Waiting {
            seq,
            item,
            attempts: attempt,
        };
        self.scheduler
            .retry(&key, waiting, seq as u64, not_before, now);
        None
    }
}

impl<T, K: Hash + Eq + Clone, KF, P, G, C> PerKey<T, K, KF, P, G, C> {
    /// Counts the start of an attempt of `waiting` (of `key`): what to remember of it while
    /// it runs, its input position and the item to call the function with.
    #[inline]
    fn begin_attempt<O>(&mut self, key: K, waiting: Waiting<T>) -> (Running<K, T>, usize, T)
    where
        P: Attempts<T, O>,
        C: Classify<O>,
    {
        let Waiting {
            seq,
            item,
            attempts,
        } = waiting;
        let kept = P::keep(&item);
        self.counts.attempts += 1;
        self.counts.started += u64::from(attempts == 0);
        let clock = if C::CLASSIFIES && self.scheduler.is_adaptive() {
            AttemptClock::start(self.now(), &self.unpolled)
        } else {
            AttemptClock::default()
        };
        let ticket = if C::CLASSIFIES {
            self.scheduler.take_granted()
        } else {
            None
        };
        let running = Running {
            key,
            kept,
            attempt: attempts + 1,
            clock,
            ticket,
        };
        (running, seq, item)
    }
}

/// The check `.per_key(key_fn, limit)` makes, on the plain map and on one with a scheduler
/// already (called before the scheduler is rebuilt, so the panic points at the user's call).
#[track_caller]
pub(crate) const fn check_default_key_limit(limit: usize) {
    crate::limit::check::at_least_one(
        limit,
        "tollgate: the default key limit must be at least 1 (a limit of 0 would never run anything)",
    );
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

impl<T, K, KF, P, G, C> DebugFields for PerKey<T, K, KF, P, G, C> {
    fn fields(&self, s: &mut fmt::DebugStruct<'_, '_>) {
        s.field("default_key_limit", &self.scheduler.default_limit())
            .field("waiting_for_key", &self.scheduler.waiting())
            .field("active_keys", &self.scheduler.active_keys())
            .field("window_grown_by", &self.growth.grown());
    }
}

impl<T, K, KF, P, G, C> fmt::Debug for PerKey<T, K, KF, P, G, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct("PerKey");
        self.fields(&mut s);
        s.finish_non_exhaustive()
    }
}

impl<T, K, KF, P, G, C> DefaultWindow for PerKey<T, K, KF, P, G, C> {
    fn default_window(limit: usize, _ordered: bool) -> usize {
        limit.saturating_mul(PER_KEY_WINDOW)
    }

    fn changeable(&self) -> u8 {
        let keys = if self.key_changes.is_some() {
            CAN_KEY_SETTINGS
        } else {
            0
        };
        let adapts = if self.scheduler.is_adaptive() {
            CAN_ADAPT
        } else {
            0
        };
        if self.keyed {
            CAN_RATE | CAN_PER_KEY | keys | adapts
        } else {
            CAN_RATE
        }
    }
}

impl<T, O, K, KF, P, G, C> Admission<T, O> for PerKey<T, K, KF, P, G, C>
where
    K: Hash + Eq + Clone,
    KF: FnMut(&T) -> K,
    P: Attempts<T, O>,
    C: Classify<O>,
    G: GateOutput<K, O>,
{
    fn waiting(&self) -> usize {
        self.scheduler.waiting()
    }

    #[inline(always)]
    fn handed_out(&mut self) {
        if C::CLASSIFIES && self.scheduler.is_adaptive() {
            let now = self.now();
            self.unpolled.handed_out(now);
        }
    }

    #[inline(always)]
    fn polled(&mut self) {
        if C::CLASSIFIES && self.scheduler.is_adaptive() {
            let now = self.now();
            self.unpolled.polled(now);
        }
    }

    /// Only once fewer than `limit` outputs are left to hand out. The window is large
    /// (64 x the limit by default), so a consumer slower than the work lets it fill up
    /// with finished outputs; refilling after every yield would then start one item per
    /// output, one at a time (and its key would come and go from the scheduler each
    /// time). Handing out the backlog first restarts the work in batches of `limit`.
    fn after_yield(backlog: usize, limit: usize, _full: bool) -> AfterYield {
        if backlog < limit {
            AfterYield::Pass
        } else {
            AfterYield::Hold
        }
    }

    fn finished(&mut self, index: usize, seq: usize, output: O) -> Option<O> {
        let running = self.running[index]
            .take()
            .expect("a running slot has a key");
        // The permit goes back before the item may be queued for another attempt.
        self.gate.release(index);
        self.attempt_done(running, seq, output)
    }

    fn clear(&mut self) {
        self.scheduler.clear();
        self.gate.clear();
        self.running.clear();
        self.timer.wake_at(None);
    }

    fn poll_timer(&mut self, cx: &mut Context<'_>) -> bool {
        let heard = G::ACTIVE && self.poll_gate(cx);
        heard | self.timer.poll(cx)
    }

    fn revoke<Fut, R>(
        engine: &mut Engine<Fut, Self>,
        results: &mut R,
        cx: &mut Context<'_>,
    ) -> ControlFlow<()>
    where
        Fut: Future<Output = O>,
        R: Results<O>,
    {
        if G::ACTIVE {
            // Revocations heard here, and those heard while the map parked: every one ends
            // before the pool polls its attempt again.
            engine.admission.gate.poll_revoked(cx);
            Self::end_revoked(engine, results)?;
        }
        ControlFlow::Continue(())
    }

    fn fill<S, F, W, R>(
        engine: &mut Engine<W::IntoFuture, Self>,
        source: Pin<&mut S>,
        f: &mut F,
        results: &mut R,
        cx: &mut Context<'_>,
        allowance: &mut usize,
    ) -> ControlFlow<()>
    where
        S: Stream<Item = T>,
        F: FnMut(T) -> W,
        W: IntoFuture,
        W::IntoFuture: Future<Output = O>,
        R: Results<O>,
    {
        fill_queued(engine, source, f, results, cx, allowance)
    }
}

impl<T, O, K, KF, P, G, C> Queued<T, O> for PerKey<T, K, KF, P, G, C>
where
    K: Hash + Eq + Clone,
    KF: FnMut(&T) -> K,
    P: Attempts<T, O>,
    C: Classify<O>,
    G: GateOutput<K, O>,
{
    /// The attempt's record while it runs, and its permit of the shared limits.
    type Memo = (Running<K, T>, Option<G::Permit>);

    #[inline(always)]
    fn now(&self) -> u64 {
        PerKey::now(self)
    }

    #[inline]
    fn admit<R: Results<O>>(
        &mut self,
        now: u64,
        results: &mut R,
    ) -> ControlFlow<(), Admit<T, Self::Memo>> {
        let next = self.scheduler.next(now);
        self.return_permits();
        let (key, waiting) = match next {
            Next::Start(key, waiting) => (key, waiting),
            Next::Refused(_key, waiting, open) => {
                self.refused(waiting, open, results)?;
                return ControlFlow::Continue(Admit::Ended);
            }
            Next::NotBefore(at) => {
                let stuck = !self.scheduler.rate_blocks(now);
                return ControlFlow::Continue(Admit::Later { at, stuck });
            }
            Next::Nothing => return ControlFlow::Continue(Admit::Nothing),
        };
        let permit = if G::ACTIVE {
            self.gate.take(&key)
        } else {
            None
        };
        let (running, seq, item) = self.begin_attempt(key, waiting);
        ControlFlow::Continue(Admit::Start {
            seq,
            item,
            memo: (running, permit),
        })
    }

    #[inline]
    fn started(&mut self, memo: Self::Memo, seq: usize, started: Started<O>) -> Option<O> {
        let (running, permit) = memo;
        match started {
            Started::Ready(output) => {
                drop(permit);
                self.attempt_done(running, seq, output)
            }
            Started::Pending(index) => {
                if let Some(permit) = permit {
                    self.gate.hold(index, permit);
                }
                if index >= self.running.len() {
                    self.running.resize_with(index + 1, || None);
                }
                self.running[index] = Some(running);
                None
            }
        }
    }

    #[inline(always)]
    fn between<Fut, R>(
        engine: &mut Engine<Fut, Self>,
        results: &mut R,
        now: u64,
        allowance: &mut usize,
    ) -> ControlFlow<(), bool>
    where
        Fut: Future<Output = O>,
        R: Results<O>,
    {
        if G::ACTIVE {
            Self::fill_gate(engine, results, now, allowance)
        } else {
            ControlFlow::Continue(false)
        }
    }

    #[inline]
    fn window(&mut self, set: (usize, bool), held: usize, limit: usize, stuck: bool) -> usize {
        let keys = self.scheduler.active_keys();
        self.growth.adjust(set, held, limit, stuck, keys)
    }

    #[inline]
    fn queue(&mut self, seq: usize, item: T, now: u64) {
        let key = (self.key_fn)(&item);
        let waiting = Waiting {
            seq,
            item,
            attempts: 0,
        };
        self.scheduler.push(key, waiting, now);
    }

    #[inline(always)]
    fn wake_at(&mut self, at: Option<u64>) {
        self.timer.wake_at(at);
    }
}
