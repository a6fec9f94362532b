//! Shared limits: per-key caps and rates a keyed map asks for outside itself (a fleet's
//! store), with the same guarantee as its own: an item waiting for them holds no slot.
//!
//! The map asks once per key at a time, and only while it has a free slot for the answer:
//! an ask is one question ("room for one item of this key, now?"), never a wait. A key
//! told to come back later sleeps in the scheduler like a key waiting for its own rate,
//! holding nothing, while items of other keys start; it asks again when the time given
//! has passed or when the limits say its room may be back (a permit of the key released
//! in this process). A granted permit goes with the item's attempt and is dropped when the
//! attempt ends; a permit the limits revoke (a lease that could not be renewed) cancels
//! its attempt.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

use atomic_waker::AtomicWaker;

use crate::sync::lock;
use std::time::Duration;

/// Per-key caps or rates kept outside a map, which a keyed map asks before an item of a
/// key may start: shared by every process of a fleet through a store, or by several maps
/// of one process. Add them to a map with
/// [`shared_limits`](crate::futures::MapAsync::shared_limits), after `per_key`.
///
/// The map keeps its own limits too (its global limit, `per_key`, rates, retries); an item
/// starts when those allow it **and** the shared limits granted it a permit. The map asks
/// for one item of a key at a time, and only while it has a free slot to start it in, so
/// a permit is held by a running item, not by an item waiting for a slot. Each ask must
/// answer without waiting for room (one round trip to a store): a key told
/// [`Later`](Answer::Later) sleeps in the map's scheduler, holding no slot, while other
/// keys go ahead.
///
/// `tollgate-redis` implements it for a fleet; an implementation only needs the three
/// futures below.
///
/// # Examples
///
/// A cap per key shared by two maps of one process (a minimal implementation: it never
/// wakes a key early, so a key told "later" asks again after a millisecond).
///
/// ```
/// use std::collections::HashMap;
/// use std::future::{Pending, Ready, ready};
/// use std::sync::{Arc, Mutex};
/// use std::time::Duration;
/// use tollgate::{Answer, LaterReason, SharedLimits, map_async};
///
/// #[derive(Clone, Default)]
/// struct Caps(Arc<Mutex<HashMap<u32, usize>>>);
///
/// struct Permit(Caps, u32);
/// impl Drop for Permit {
///     fn drop(&mut self) {
///         *self.0.0.lock().unwrap().get_mut(&self.1).unwrap() -= 1;
///     }
/// }
///
/// impl SharedLimits<u32> for Caps {
///     type Permit = Permit;
///     type Error = std::convert::Infallible;
///     type Ask = Ready<Answer<Permit, Self::Error>>;
///     type Wake = Pending<()>;
///     type Revoked = Pending<Self::Error>;
///
///     fn ask(&self, key: &u32) -> Self::Ask {
///         let mut held = self.0.lock().unwrap();
///         let in_use = held.entry(*key).or_default();
///         if *in_use < 2 {
///             *in_use += 1;
///             ready(Answer::Granted(Permit(self.clone(), *key)))
///         } else {
///             ready(Answer::Later(Duration::from_millis(1), LaterReason::Busy))
///         }
///     }
///     fn wake(&self, _key: &u32) -> Option<Self::Wake> {
///         None
///     }
///     fn revoked(&self, _permit: &Permit) -> Option<Self::Revoked> {
///         None
///     }
/// }
///
/// # futures_lite::future::block_on(async {
/// let caps = Caps::default();
/// let fetch = |n: u32| async move { Ok::<u32, std::convert::Infallible>(n) };
/// let out = map_async(0..100u32, 16, fetch)
///     .per_key(|n| n % 4, 16)
///     .shared_limits(caps.clone())
///     .await;
/// assert_eq!(out.len(), 100);
/// # });
/// ```
pub trait SharedLimits<K> {
    /// What a granted item holds while its attempt runs; dropping it gives the room back.
    type Permit;
    /// Why the limits could not answer (a store out of reach), or why a permit was
    /// revoked. The item's output becomes this error (its type converts from it).
    type Error;
    /// The answer to one ask.
    type Ask: Future<Output = Answer<Self::Permit, Self::Error>>;
    /// Completes when a key's room may have come back (see [`wake`](Self::wake)).
    type Wake: Future<Output = ()>;
    /// Completes when a permit no longer covers its work (see [`revoked`](Self::revoked)).
    type Revoked: Future<Output = Self::Error>;

    /// Asks for room to start one item of `key` now. It must not wait for room: answer
    /// [`Later`](Answer::Later) with when to ask again instead.
    fn ask(&self, key: &K) -> Self::Ask;

    /// A future that completes when `key`'s room may be back sooner than a
    /// [`Later`](Answer::Later) said (a permit of the key released in this process), or
    /// `None` if the limits cannot tell. The map calls it just before each ask and keeps
    /// it while the key sleeps, so a release between the ask and its answer is not missed.
    /// A wake-up never makes the map ask sooner than a millisecond after the key's last
    /// [`Later`](Answer::Later): a wake-up that is always ready costs one ask a
    /// millisecond, not a loop.
    fn wake(&self, key: &K) -> Option<Self::Wake>;

    /// A future that completes when `permit` stops covering its work (a lease its
    /// process could not renew in time: the fleet may have given the room to someone
    /// else), or `None` if it never does. The map cancels the item's attempt then: its
    /// output is the error, and its retry policy decides what comes next.
    fn revoked(&self, permit: &Self::Permit) -> Option<Self::Revoked>;
}

/// The answer of [`SharedLimits::ask`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer<P, E> {
    /// Room for one item: start it, holding the permit until its attempt ends.
    Granted(P),
    /// No room now, for this reason: ask again after this long, or when the key's
    /// [`wake`](SharedLimits::wake) completes, but never sooner than a millisecond after
    /// this answer (the map never asks in a loop, whatever the duration or the wake-up
    /// say). The key holds nothing meanwhile. The map's progress counts the keys told
    /// "later" ([`Progress::keys_told_later`](crate::Progress::keys_told_later)), and
    /// those told the limits are warming up
    /// ([`Progress::keys_warming_up`](crate::Progress::keys_warming_up)).
    Later(Duration, LaterReason),
    /// The limits could not answer (a store out of reach, after its own bounded wait):
    /// nothing was granted, and the key's next item ends with this error, as if its
    /// attempt had failed (a retry policy may try it again).
    Failed(E),
}

/// Why shared limits told a key to ask again [`Later`](Answer::Later).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LaterReason {
    /// The key is busy: its cap has no room now, every permit of it is held (here or
    /// elsewhere in a fleet).
    Busy,
    /// Too early for the key's rate.
    RateLimited,
    /// The key is paused (a server asked the whole key to back off).
    Paused,
    /// The limits grant nothing to any key yet: a store that may have lost the permits it
    /// granted (a restart, a failover, a flush) waits until every permit it may have
    /// forgotten has lapsed. With the `tracing` feature the map reports each warm-up once
    /// (an `INFO` event, "shared limits warming up", with the time left as the limits
    /// said), when it first hears of it.
    WarmingUp,
    /// The limits answered too late for a permit to be of use (a slow store): ask again.
    Slow,
}

/// What a keyed map heard from its shared limits while it polled them. Failed asks and
/// revoked permits wait in the gate until the map's next fill (they end attempts).
pub(crate) enum Heard<K> {
    /// An ask of this key was granted (the gate keeps the permit until a start takes it).
    Granted(K),
    /// An ask of this key was told to come back after this long, and why.
    Later(K, Duration, LaterReason),
    /// This key's room may be back before its "later".
    Woken(K),
}

/// How a keyed map asks shared limits; [`NoSharedLimits`] for a map without them, where all of
/// it compiles away.
pub(crate) trait Gate<K> {
    /// Whether the map has shared limits.
    const ACTIVE: bool;
    type Permit;
    type Error;
    /// Starts an ask for room for one item of `key`.
    fn ask(&mut self, key: K);
    /// Asks in flight.
    fn asking(&self) -> usize;
    /// Keeps `permit` for the attempt started in pool slot `slot`, watching it for
    /// revocation.
    fn hold(&mut self, slot: usize, permit: Self::Permit);
    /// The attempt in pool slot `slot` ended: drop its permit (the room goes back).
    fn release(&mut self, slot: usize);
    /// Polls the asks, the wake-ups of keys told "later" and the watched permits, handing
    /// what it hears to `heard`. `true` if it heard anything.
    fn poll(&mut self, cx: &mut Context<'_>, heard: impl FnMut(Heard<K>)) -> bool;
    /// Polls only the watched permits (before the pool polls their attempts); `true` if
    /// one was revoked.
    fn poll_revoked(&mut self, cx: &mut Context<'_>) -> bool;
    /// Takes one of `key`'s granted permits, for a start (`None` without shared limits).
    fn take(&mut self, key: &K) -> Option<Self::Permit>;
    /// Takes an ask that could not be answered: its key and the error.
    fn take_failed(&mut self) -> Option<(K, Self::Error)>;
    /// Takes a revoked permit's pool slot and the error (the permit stays held until
    /// [`release`](Self::release)).
    fn take_revoked(&mut self) -> Option<(usize, Self::Error)>;
    /// Forgets every ask, wake-up, permit and watch (the map was stopped).
    fn clear(&mut self);
}

/// Turns a shared limit's error into the output of an item's attempt.
pub(crate) trait GateOutput<K, O>: Gate<K> {
    fn output(error: Self::Error) -> O;
}

/// The shared limits of a keyed map without any: every start is granted at once.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoSharedLimits {
    _private: (),
}

/// The uninhabited error of [`NoSharedLimits`].
#[derive(Debug, Clone, Copy)]
pub(crate) enum Never {}

impl<K> Gate<K> for NoSharedLimits {
    const ACTIVE: bool = false;
    type Permit = ();
    type Error = Never;
    #[inline(always)]
    fn ask(&mut self, _key: K) {}
    #[inline(always)]
    fn asking(&self) -> usize {
        0
    }
    #[inline(always)]
    fn hold(&mut self, _slot: usize, _permit: ()) {}
    #[inline(always)]
    fn release(&mut self, _slot: usize) {}
    #[inline(always)]
    fn poll(&mut self, _cx: &mut Context<'_>, _heard: impl FnMut(Heard<K>)) -> bool {
        false
    }
    #[inline(always)]
    fn poll_revoked(&mut self, _cx: &mut Context<'_>) -> bool {
        false
    }
    #[inline(always)]
    fn take(&mut self, _key: &K) -> Option<()> {
        None
    }
    #[inline(always)]
    fn take_failed(&mut self) -> Option<(K, Never)> {
        None
    }
    #[inline(always)]
    fn take_revoked(&mut self) -> Option<(usize, Never)> {
        None
    }
    #[inline(always)]
    fn clear(&mut self) {}
}

impl<K, O> GateOutput<K, O> for NoSharedLimits {
    fn output(error: Never) -> O {
        match error {}
    }
}

/// The shared limits `L` of a keyed map, with the asks in flight, the keys told "later"
/// that may be woken earlier, and the watched permits of running attempts.
///
/// Only what woke is polled: asks share one flag (they are few: at most one per free
/// slot), while each sleeping key's wake-up and each running attempt's revocation has a
/// waker that names it, so a map with thousands of keys told "later" does not poll them
/// all whenever one of them, or an ask, wakes.
pub struct WithSharedLimits<K, L: SharedLimits<K>> {
    limits: L,
    signal: Arc<Signal>,
    /// The waker every ask gets.
    ask_waker: Waker,
    asks: Vec<Asking<K, L>>,
    /// Whether an ask was added since the asks were last polled.
    new_asks: bool,
    /// Keys told "later" with a wake-up, in a slab; `sleeper_of` finds a key's entry.
    sleepers: Vec<Option<Sleeper<K, L>>>,
    sleeper_wakers: Vec<Waker>,
    free_sleepers: Vec<usize>,
    sleeper_of: HashMap<K, usize>,
    /// Permits granted and not yet taken by a start, by key.
    granted: HashMap<K, Vec<L::Permit>>,
    /// By pool slot: the running attempt's permit and its revocation, if it can be revoked.
    held: Vec<Option<Held<K, L>>>,
    held_wakers: Vec<Waker>,
    failed: Vec<(K, L::Error)>,
    revoked: Vec<(usize, L::Error)>,
}

/// A key told "later", and the wake-up that may call it back sooner.
type Sleeper<K, L> = (K, Pin<Box<<L as SharedLimits<K>>::Wake>>);

/// The permit of a running attempt.
struct Held<K, L: SharedLimits<K>> {
    /// Dropped when the attempt ends.
    _permit: L::Permit,
    revoked: Option<Pin<Box<L::Revoked>>>,
}

/// One ask in flight, and the wake-up made just before it.
struct Asking<K, L: SharedLimits<K>> {
    key: K,
    ask: Pin<Box<L::Ask>>,
    wake: Option<Pin<Box<L::Wake>>>,
}

/// What of the gate woke, and the map's task to wake for it. New futures are listed here
/// too, to be polled once (a future is woken only after its first poll).
#[derive(Default)]
struct Signal {
    asks: AtomicBool,
    sleepers: Mutex<Vec<usize>>,
    held: Mutex<Vec<usize>>,
    task: AtomicWaker,
}

/// The waker of one of the gate's futures: it says which, then wakes the map.
struct Woke {
    signal: Arc<Signal>,
    what: What,
}

#[derive(Clone, Copy)]
enum What {
    Ask,
    Sleeper(usize),
    Held(usize),
}

impl Signal {
    fn note(&self, what: What) {
        match what {
            What::Ask => self.asks.store(true, Ordering::Release),
            What::Sleeper(index) => lock(&self.sleepers).push(index),
            What::Held(slot) => lock(&self.held).push(slot),
        }
    }

    fn take(list: &Mutex<Vec<usize>>) -> Vec<usize> {
        std::mem::take(&mut *lock(list))
    }
}

impl Wake for Woke {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.signal.note(self.what);
        self.signal.task.wake();
    }
}

impl<K, L: SharedLimits<K>> WithSharedLimits<K, L> {
    pub(crate) fn new(limits: L) -> Self {
        let signal = Arc::new(Signal::default());
        Self {
            limits,
            ask_waker: waker(&signal, What::Ask),
            signal,
            asks: Vec::new(),
            new_asks: false,
            sleepers: Vec::new(),
            sleeper_wakers: Vec::new(),
            free_sleepers: Vec::new(),
            sleeper_of: HashMap::new(),
            granted: HashMap::new(),
            held: Vec::new(),
            held_wakers: Vec::new(),
            failed: Vec::new(),
            revoked: Vec::new(),
        }
    }
}

fn waker(signal: &Arc<Signal>, what: What) -> Waker {
    Waker::from(Arc::new(Woke {
        signal: Arc::clone(signal),
        what,
    }))
}

impl<K, L: SharedLimits<K>> fmt::Debug for WithSharedLimits<K, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WithSharedLimits")
            .field("asking", &self.asks.len())
            .field("told_later", &self.sleeper_of.len())
            .finish_non_exhaustive()
    }
}

impl<K: Hash + Eq + Clone, L: SharedLimits<K>> Gate<K> for WithSharedLimits<K, L> {
    const ACTIVE: bool = true;
    type Permit = L::Permit;
    type Error = L::Error;

    fn ask(&mut self, key: K) {
        // A new ask makes its own wake-up, which replaces the key's earlier one. The wake-up
        // first: a release between the ask and its answer still wakes the key.
        self.forget_sleeper(&key);
        let wake = self.limits.wake(&key).map(Box::pin);
        let ask = Box::pin(self.limits.ask(&key));
        self.asks.push(Asking { key, ask, wake });
        self.new_asks = true;
    }

    fn asking(&self) -> usize {
        self.asks.len()
    }

    fn hold(&mut self, slot: usize, permit: L::Permit) {
        let revoked = self.limits.revoked(&permit).map(Box::pin);
        if slot >= self.held.len() {
            self.held.resize_with(slot + 1, || None);
        }
        if revoked.is_some() {
            while self.held_wakers.len() <= slot {
                let next = self.held_wakers.len();
                self.held_wakers.push(waker(&self.signal, What::Held(next)));
            }
            self.signal.note(What::Held(slot));
        }
        self.held[slot] = Some(Held {
            _permit: permit,
            revoked,
        });
    }

    fn release(&mut self, slot: usize) {
        if let Some(held) = self.held.get_mut(slot) {
            *held = None;
        }
        // A revocation heard for the attempt that just ended must not reach the slot's
        // next attempt.
        self.revoked.retain(|(revoked, _)| *revoked != slot);
    }

    fn poll(&mut self, cx: &mut Context<'_>, mut heard: impl FnMut(Heard<K>)) -> bool {
        self.signal.task.register(cx.waker());
        let mut any = false;
        if std::mem::take(&mut self.new_asks) | self.signal.asks.swap(false, Ordering::AcqRel) {
            let mut index = 0;
            while index < self.asks.len() {
                let mut cx = Context::from_waker(&self.ask_waker);
                let Poll::Ready(answer) = self.asks[index].ask.as_mut().poll(&mut cx) else {
                    index += 1;
                    continue;
                };
                any = true;
                let Asking { key, wake, .. } = self.asks.swap_remove(index);
                match answer {
                    Answer::Granted(permit) => {
                        self.granted.entry(key.clone()).or_default().push(permit);
                        heard(Heard::Granted(key));
                    }
                    Answer::Failed(error) => self.failed.push((key, error)),
                    Answer::Later(after, reason) => {
                        if let Some(wake) = wake {
                            self.add_sleeper(key.clone(), wake);
                        }
                        heard(Heard::Later(key, after, reason));
                    }
                }
            }
        }
        for index in Signal::take(&self.signal.sleepers) {
            let Some(Some((_, wake))) = self.sleepers.get_mut(index) else {
                continue; // gone since it woke
            };
            let mut cx = Context::from_waker(&self.sleeper_wakers[index]);
            if wake.as_mut().poll(&mut cx).is_ready() {
                any = true;
                let (key, _) = self.sleepers[index].take().expect("polled above");
                self.sleeper_of.remove(&key);
                self.free_sleepers.push(index);
                heard(Heard::Woken(key));
            }
        }
        self.poll_held() | any
    }

    fn poll_revoked(&mut self, cx: &mut Context<'_>) -> bool {
        self.signal.task.register(cx.waker());
        self.poll_held()
    }

    fn take(&mut self, key: &K) -> Option<L::Permit> {
        let permits = self.granted.get_mut(key)?;
        let permit = permits.pop();
        if permits.is_empty() {
            self.granted.remove(key);
        }
        permit
    }

    fn take_failed(&mut self) -> Option<(K, L::Error)> {
        self.failed.pop()
    }

    fn take_revoked(&mut self) -> Option<(usize, L::Error)> {
        self.revoked.pop()
    }

    fn clear(&mut self) {
        self.failed.clear();
        self.revoked.clear();
        self.asks.clear();
        self.sleepers.clear();
        self.free_sleepers.clear();
        self.sleeper_of.clear();
        self.granted.clear();
        self.held.clear();
    }
}

impl<K: Hash + Eq + Clone, L: SharedLimits<K>> WithSharedLimits<K, L> {
    /// Keeps `key`'s wake-up while it sleeps, to be polled once now (its first poll) and
    /// then whenever it wakes.
    fn add_sleeper(&mut self, key: K, wake: Pin<Box<L::Wake>>) {
        let index = match self.free_sleepers.pop() {
            Some(index) => index,
            None => {
                let index = self.sleepers.len();
                self.sleepers.push(None);
                self.sleeper_wakers
                    .push(waker(&self.signal, What::Sleeper(index)));
                index
            }
        };
        self.sleepers[index] = Some((key.clone(), wake));
        self.sleeper_of.insert(key, index);
        self.signal.note(What::Sleeper(index));
    }

    /// Drops `key`'s wake-up, if it sleeps with one.
    fn forget_sleeper(&mut self, key: &K) {
        if let Some(index) = self.sleeper_of.remove(key) {
            self.sleepers[index] = None;
            self.free_sleepers.push(index);
        }
    }

    /// Polls the revocations of the running attempts that woke (or are new); queues the
    /// revoked ones.
    fn poll_held(&mut self) -> bool {
        let mut any = false;
        for slot in Signal::take(&self.signal.held) {
            let Some(Some(Held {
                revoked: Some(revoked),
                ..
            })) = self.held.get_mut(slot)
            else {
                continue; // ended since it woke
            };
            let mut cx = Context::from_waker(&self.held_wakers[slot]);
            if let Poll::Ready(error) = revoked.as_mut().poll(&mut cx) {
                any = true;
                // The permit stays until the map cancels the attempt and releases it.
                if let Some(held) = self.held[slot].as_mut() {
                    held.revoked = None;
                }
                self.revoked.push((slot, error));
            }
        }
        any
    }
}

impl<K: Hash + Eq + Clone, V, E, L> GateOutput<K, Result<V, E>> for WithSharedLimits<K, L>
where
    L: SharedLimits<K>,
    E: From<L::Error>,
{
    fn output(error: L::Error) -> Result<V, E> {
        Err(E::from(error))
    }
}
