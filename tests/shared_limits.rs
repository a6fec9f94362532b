//! Keyed maps asking shared limits (`shared_limits`): caps kept outside the map hold
//! across maps, an item waiting for them holds no slot, failed asks and revoked permits
//! end attempts with the limits' error, and a key told "later" is woken by a release.
//!
//! The limits here are an in-process implementation of `SharedLimits` that counts what
//! it grants: the trait is the seam, and what a store does behind it (tollgate-redis) is
//! tested against a real Redis in that crate.
//!
//! On every executor (smol, `run_sync`, tokio current and multi-thread), what holds at any
//! speed: caps, slots, errors, asks counted, wake-ups that end the waits. What depends on
//! time runs on virtual time (`virtual_time!`), where it is exact: a key told "later" by a
//! minute is woken by the releases in the map's floor of a millisecond per wait, the map's
//! rate wakes keys waiting to ask at its exact instants, and a wake-up always ready still
//! gets one ask a millisecond.

mod common;

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::future::{Future, Ready, ready};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{InFlight, matrix, virtual_time};
use event_listener::Event;
use futures_lite::future;
use tollgate::testing::now;
use tollgate::{Answer, LaterReason, RetryPolicy, SharedLimits, map_async};

/// The limits' error: the store was down, or a permit was revoked.
#[derive(Debug, Clone, PartialEq, Eq)]
enum CapsError {
    Down,
    Revoked(u32),
}

/// What the map's futures fail with.
#[derive(Debug, Clone, PartialEq, Eq)]
enum FetchError {
    Caps(CapsError),
}

impl From<CapsError> for FetchError {
    fn from(error: CapsError) -> Self {
        FetchError::Caps(error)
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// A cap per key shared by whoever holds a clone, granting at once or saying "later".
#[derive(Clone)]
struct Caps(Arc<Inner>);

struct Inner {
    cap: usize,
    /// What a busy key is told.
    later: Duration,
    state: Mutex<State>,
    /// Notified when a permit of the key is released.
    released: Mutex<HashMap<u32, Arc<Event>>>,
    revoke: Event,
    /// Polls of the wake-ups the limits handed out.
    wake_polls: Arc<AtomicUsize>,
}

#[derive(Default)]
struct State {
    in_use: HashMap<u32, usize>,
    peak: HashMap<u32, usize>,
    /// Asks left to fail, as a store out of reach would.
    failures: usize,
    asks: usize,
    revoked: HashSet<u32>,
}

struct CapPermit {
    caps: Caps,
    key: u32,
}

impl Drop for CapPermit {
    fn drop(&mut self) {
        let mut state = self.caps.0.state.lock().unwrap();
        *state.in_use.get_mut(&self.key).unwrap() -= 1;
        drop(state);
        self.caps.released(self.key).notify(usize::MAX);
    }
}

impl fmt::Debug for CapPermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CapPermit({})", self.key)
    }
}

impl Caps {
    fn new(cap: usize, later: Duration) -> Self {
        Caps(Arc::new(Inner {
            cap,
            later,
            state: Mutex::default(),
            released: Mutex::default(),
            revoke: Event::new(),
            wake_polls: Arc::default(),
        }))
    }

    fn released(&self, key: u32) -> Arc<Event> {
        Arc::clone(self.0.released.lock().unwrap().entry(key).or_default())
    }

    fn in_use(&self, key: u32) -> usize {
        self.0
            .state
            .lock()
            .unwrap()
            .in_use
            .get(&key)
            .copied()
            .unwrap_or(0)
    }

    fn total_in_use(&self) -> usize {
        self.0.state.lock().unwrap().in_use.values().sum()
    }

    fn max_peak(&self) -> usize {
        let state = self.0.state.lock().unwrap();
        state.peak.values().copied().max().unwrap_or(0)
    }

    fn asks(&self) -> usize {
        self.0.state.lock().unwrap().asks
    }

    fn fail_next(&self, n: usize) {
        self.0.state.lock().unwrap().failures = n;
    }

    fn revoke(&self, key: u32) {
        self.0.state.lock().unwrap().revoked.insert(key);
        self.0.revoke.notify(usize::MAX);
    }

    /// Takes a permit outside any map (another process, say).
    fn hold(&self, key: u32) -> CapPermit {
        match self.ask(&key).into_inner() {
            Answer::Granted(permit) => permit,
            other => panic!("expected a permit, got {other:?}"),
        }
    }
}

impl SharedLimits<u32> for Caps {
    type Permit = CapPermit;
    type Error = CapsError;
    type Ask = Ready<Answer<CapPermit, CapsError>>;
    type Wake = BoxFuture<()>;
    type Revoked = BoxFuture<CapsError>;

    fn ask(&self, key: &u32) -> Self::Ask {
        let mut state = self.0.state.lock().unwrap();
        state.asks += 1;
        if state.failures > 0 {
            state.failures -= 1;
            return ready(Answer::Failed(CapsError::Down));
        }
        let in_use = state.in_use.entry(*key).or_default();
        if *in_use >= self.0.cap {
            return ready(Answer::Later(self.0.later, LaterReason::Busy));
        }
        *in_use += 1;
        let now = *in_use;
        let peak = state.peak.entry(*key).or_default();
        *peak = (*peak).max(now);
        ready(Answer::Granted(CapPermit {
            caps: self.clone(),
            key: *key,
        }))
    }

    fn wake(&self, key: &u32) -> Option<Self::Wake> {
        let mut listener = self.released(*key).listen();
        let polls = Arc::clone(&self.0.wake_polls);
        Some(Box::pin(future::poll_fn(move |cx| {
            polls.fetch_add(1, Ordering::Relaxed);
            Pin::new(&mut listener).poll(cx)
        })))
    }

    fn revoked(&self, permit: &CapPermit) -> Option<Self::Revoked> {
        let caps = self.clone();
        let key = permit.key;
        Some(Box::pin(async move {
            loop {
                let listener = caps.0.revoke.listen();
                if caps.0.state.lock().unwrap().revoked.contains(&key) {
                    return CapsError::Revoked(key);
                }
                listener.await;
            }
        }))
    }
}

/// The same caps, but an ask for key 8 takes one more poll (its answer comes in a later
/// round than the others').
struct SlowFor8(Caps);

impl SharedLimits<u32> for SlowFor8 {
    type Permit = CapPermit;
    type Error = CapsError;
    type Ask = BoxFuture<Answer<CapPermit, CapsError>>;
    type Wake = BoxFuture<()>;
    type Revoked = BoxFuture<CapsError>;

    fn ask(&self, key: &u32) -> Self::Ask {
        let (caps, key) = (self.0.clone(), *key);
        Box::pin(async move {
            if key == 8 {
                future::yield_now().await;
            }
            caps.ask(&key).into_inner()
        })
    }

    fn wake(&self, key: &u32) -> Option<Self::Wake> {
        self.0.wake(key)
    }

    fn revoked(&self, permit: &CapPermit) -> Option<Self::Revoked> {
        self.0.revoked(permit)
    }
}

/// Limits that always answer "later, in 0 ns" and whose wake-up is always ready: the
/// worst a careless implementation can do. Counts its asks.
#[derive(Clone, Default)]
struct AlwaysLater(Arc<AtomicUsize>);

impl SharedLimits<u32> for AlwaysLater {
    type Permit = ();
    type Error = CapsError;
    type Ask = Ready<Answer<(), CapsError>>;
    type Wake = Ready<()>;
    type Revoked = std::future::Pending<CapsError>;

    fn ask(&self, _key: &u32) -> Self::Ask {
        self.0.fetch_add(1, Ordering::SeqCst);
        ready(Answer::Later(Duration::ZERO, LaterReason::Busy))
    }
    fn wake(&self, _key: &u32) -> Option<Self::Wake> {
        Some(ready(()))
    }
    fn revoked(&self, _permit: &()) -> Option<Self::Revoked> {
        None
    }
}

/// Limits that grant nothing while `warming` is set (a store warming up), then grant
/// everything.
#[derive(Clone, Default)]
struct WarmingUp(Arc<std::sync::atomic::AtomicBool>);

impl SharedLimits<u32> for WarmingUp {
    type Permit = ();
    type Error = CapsError;
    type Ask = Ready<Answer<(), CapsError>>;
    type Wake = std::future::Pending<()>;
    type Revoked = std::future::Pending<CapsError>;

    fn ask(&self, _key: &u32) -> Self::Ask {
        if self.0.load(Ordering::SeqCst) {
            ready(Answer::Later(
                Duration::from_millis(5),
                LaterReason::WarmingUp,
            ))
        } else {
            ready(Answer::Granted(()))
        }
    }
    fn wake(&self, _key: &u32) -> Option<Self::Wake> {
        None
    }
    fn revoked(&self, _permit: &()) -> Option<Self::Revoked> {
        None
    }
}

/// Items `(key, index)`: `keys` keys, `per_key` items each, keys interleaved.
fn items(keys: u32, per_key: u32) -> Vec<(u32, u32)> {
    (0..per_key)
        .flat_map(|index| (0..keys).map(move |key| (key, index)))
        .collect()
}

/// Waits (yielding) until `done` says so.
async fn until(mut done: impl FnMut() -> bool) {
    while !done() {
        future::yield_now().await;
    }
}

/// A single key of cap 1 whose busy answer is "later, in a minute", 20 items of it four at a
/// time: how many outputs, how many asks, and how long the map took on tollgate's clock.
async fn told_later_for_a_minute() -> (usize, usize, Duration) {
    let caps = Caps::new(1, Duration::from_secs(60));
    let begun = now();
    let out = map_async(items(1, 20), 4, |(_, index)| async move {
        future::yield_now().await;
        Ok::<_, FetchError>(index)
    })
    .per_key(|&(key, _)| key, 4)
    .shared_limits(caps.clone())
    .await;
    assert!(out.iter().all(Result::is_ok));
    (out.len(), caps.asks(), now() - begun)
}

/// Four keys of one item at a time under the map's rate of 100/s and one slot, 8 items:
/// how many outputs, and how long from the first start to the last on tollgate's clock.
/// (A key waiting to ask for the rate that was never woken would end in the timeout: on
/// the wall clock, its 20 s are 90 times the slowest span of starts in 12 runs with both
/// cores busy, 220 ms.)
async fn rate_and_waiting_keys() -> (usize, Duration) {
    let caps = Caps::new(4, Duration::from_millis(1));
    let starts = Mutex::new(Vec::new());
    let map = map_async(items(4, 2), 1, |(_, index)| {
        starts.lock().unwrap().push(now());
        async move { Ok::<_, FetchError>(index) }
    })
    .per_key(|&(key, _)| key, 1)
    .rate(tollgate::Rate::per_second(100))
    .shared_limits(caps.clone());
    let out = tollgate::timeout(Duration::from_secs(20), map)
        .await
        .expect("a key waiting to ask for the map's rate was woken");
    assert!(out.iter().all(Result::is_ok));
    let starts = starts.into_inner().unwrap();
    (out.len(), starts[starts.len() - 1] - starts[0])
}

/// Limits that always say "later, in 0 ns" with a wake-up always ready, for one key of 4
/// items, under a timeout of 300 ms: the asks, and the time the map ran on tollgate's
/// clock.
async fn asks_when_always_later() -> (usize, Duration) {
    // A wake-up that is always ready would have the key ask again at once after every
    // "later": the floor of a millisecond between asks holds after a wake-up too.
    let limits = AlwaysLater::default();
    let map = map_async(items(1, 4), 4, |(_, index)| async move {
        Ok::<_, FetchError>(index)
    })
    .per_key(|&(key, _)| key, 4)
    .shared_limits(limits.clone());
    let started = now();
    let ended = tollgate::timeout(Duration::from_millis(300), map).await;
    let elapsed = now() - started;
    assert!(
        ended.is_err(),
        "nothing was ever granted: the map cannot end"
    );
    (limits.0.load(Ordering::SeqCst), elapsed)
}

matrix! {
    async fn two_maps_keep_one_cap_per_key() {
        let caps = Caps::new(2, Duration::from_millis(1));
        let per_key: Arc<Vec<InFlight>> = Arc::new((0..8).map(|_| InFlight::default()).collect());
        let run = |caps: Caps| {
            let per_key = Arc::clone(&per_key);
            map_async(items(8, 16), 8, move |(key, index)| {
                let per_key = Arc::clone(&per_key);
                async move {
                    let _in = per_key[key as usize].enter();
                    for _ in 0..3 {
                        future::yield_now().await;
                    }
                    Ok::<_, FetchError>(index)
                }
            })
            // The map's own per-key limit is larger: the shared cap is what holds.
            .per_key(|&(key, _)| key, 4)
            .shared_limits(caps)
        };
        let (a, b) = future::zip(run(caps.clone()), run(caps.clone())).await;
        assert_eq!(a.len() + b.len(), 256);
        assert!(a.iter().chain(&b).all(Result::is_ok));
        let peak = per_key.iter().map(InFlight::peak).max().unwrap();
        assert!(peak <= 2, "a key ran {peak} at once over both maps, cap 2");
        assert_eq!(caps.max_peak(), 2, "the cap was reached");
        assert_eq!(caps.total_in_use(), 0, "every permit went back");
    }

    async fn a_key_full_elsewhere_holds_no_slot() {
        let caps = Caps::new(1, Duration::from_millis(1));
        // Another holder has key 0's only permit.
        let held = caps.hold(0);
        let started = Arc::new(Mutex::new(Vec::new()));
        let finished = Arc::new(AtomicUsize::new(0));
        // Key 0 first in the input, then key 1; two global slots.
        let input: Vec<(u32, u32)> = (0..10).map(|i| (0, i)).chain((0..10).map(|i| (1, i))).collect();
        let map = {
            let (started, finished) = (Arc::clone(&started), Arc::clone(&finished));
            map_async(input, 2, move |(key, index)| {
                started.lock().unwrap().push(key);
                let finished = Arc::clone(&finished);
                async move {
                    future::yield_now().await;
                    finished.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, FetchError>((key, index))
                }
            })
            .per_key(|&(key, _)| key, 2)
            .shared_limits(caps.clone())
        };
        let watch = async {
            // Every item of key 1 runs while key 0's items wait for the permit held
            // elsewhere: they hold neither slot.
            until(|| finished.load(Ordering::SeqCst) == 10).await;
            assert!(
                !started.lock().unwrap().contains(&0),
                "no item of the busy key started"
            );
            drop(held);
        };
        let (out, ()) = future::zip(map, watch).await;
        assert_eq!(out.len(), 20);
        assert!(out.iter().all(Result::is_ok));
        assert_eq!(caps.in_use(0), 0);
    }

    async fn a_failed_ask_ends_the_attempt_and_a_retry_policy_sees_it() {
        let caps = Caps::new(4, Duration::from_millis(1));
        caps.fail_next(3);
        let out = map_async(items(2, 5), 4, |(_, index)| async move { Ok::<_, FetchError>(index) })
            .per_key(|&(key, _)| key, 4)
            .shared_limits(caps.clone())
            .await;
        let failed = out.iter().filter(|r| **r == Err(FetchError::Caps(CapsError::Down))).count();
        assert_eq!(failed, 3, "one failed item per failed ask");
        assert_eq!(out.len(), 10);

        caps.fail_next(3);
        let policy = RetryPolicy::new().attempts(3).interval(Duration::from_millis(1));
        let out = map_async(items(2, 5), 4, |(_, index)| async move { Ok::<_, FetchError>(index) })
            .per_key(|&(key, _)| key, 4)
            .shared_limits(caps.clone())
            .retry(policy)
            .await;
        assert!(out.iter().all(Result::is_ok), "retried after the store came back: {out:?}");
        assert_eq!(caps.total_in_use(), 0);
    }

    async fn a_revoked_permit_cancels_its_attempt_before_its_next_step() {
        let caps = Caps::new(2, Duration::from_millis(1));
        let started = Arc::new(AtomicUsize::new(0));
        let dropped = Arc::new(AtomicUsize::new(0));
        let stepped_after = Arc::new(AtomicUsize::new(0));
        let go_on = Arc::new(Event::new());
        struct CountDrop(Arc<AtomicUsize>);
        impl Drop for CountDrop {
            fn drop(&mut self) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let map = {
            let (started, dropped) = (Arc::clone(&started), Arc::clone(&dropped));
            let (stepped_after, go_on) = (Arc::clone(&stepped_after), Arc::clone(&go_on));
            map_async([(7, 0), (7, 1), (8, 2)], 4, move |(key, index)| {
                started.fetch_add(1, Ordering::SeqCst);
                let guard = CountDrop(Arc::clone(&dropped));
                let (stepped_after, go_on) = (Arc::clone(&stepped_after), Arc::clone(&go_on));
                async move {
                    let _guard = guard;
                    if key == 7 {
                        // Its next step is woken in the same instant as the revocation:
                        // the revocation must win.
                        go_on.listen().await;
                        stepped_after.fetch_add(1, Ordering::SeqCst);
                        future::pending::<()>().await;
                    }
                    Ok::<_, FetchError>(index)
                }
            })
            .per_key(|&(key, _)| key, 2)
            .shared_limits(caps.clone())
        };
        let revoke = async {
            until(|| started.load(Ordering::SeqCst) == 3).await;
            caps.revoke(7);
            go_on.notify(usize::MAX);
        };
        let (out, ()) = future::zip(map, revoke).await;
        assert_eq!(
            out,
            [
                Err(FetchError::Caps(CapsError::Revoked(7))),
                Err(FetchError::Caps(CapsError::Revoked(7))),
                Ok(2)
            ]
        );
        assert_eq!(stepped_after.load(Ordering::SeqCst), 0, "no step after the revocation");
        assert_eq!(dropped.load(Ordering::SeqCst), 3, "the cancelled attempts were dropped");
        assert_eq!(caps.total_in_use(), 0, "their permits went back");
    }

    async fn a_key_told_later_is_woken_by_a_release() {
        let (outputs, asks, _) = told_later_for_a_minute().await;
        assert_eq!(outputs, 20);
        // One ask per key at a time: at most a grant and a "later" per item, and a
        // retry per wake-up. (How soon: on virtual time; was under 30 s of wall time.)
        assert!(asks <= 3 * 20, "{asks} asks for 20 items");
    }

    async fn the_maps_rate_wakes_keys_waiting_to_ask() {
        let (outputs, took) = rate_and_waiting_keys().await;
        assert_eq!(outputs, 8);
        eprintln!("figure: eight starts at 100/s took {took:?}");
        // No start ahead of the rate: the eighth no sooner than 7 intervals after the
        // first (1 ms for the rate's cheaper clock).
        assert!(took >= Duration::from_millis(69), "{took:?}");
    }

    async fn a_revocation_never_reaches_the_slots_next_attempt() {
        for slow in [false, true] {
            let caps = Caps::new(4, Duration::from_millis(1));
            let stepped_after = Arc::new(AtomicUsize::new(0));
            let map = {
                let (caps, stepped_after) = (caps.clone(), Arc::clone(&stepped_after));
                map_async([(7u32, 0u32), (8, 1)], if slow { 2 } else { 1 }, move |(key, index)| {
                    let (caps, stepped_after) = (caps.clone(), Arc::clone(&stepped_after));
                    async move {
                        if key == 7 {
                            // Revoked while it runs, then it would take another step.
                            caps.revoke(7);
                            future::yield_now().await;
                            stepped_after.fetch_add(1, Ordering::SeqCst);
                        } else {
                            future::yield_now().await;
                        }
                        Ok::<_, FetchError>(index)
                    }
                })
                .per_key(|&(key, _)| key, 1)
            };
            let out = if slow {
                map.shared_limits(SlowFor8(caps.clone())).await
            } else {
                map.shared_limits(caps.clone()).await
            };
            assert_eq!(
                out,
                [Err(FetchError::Caps(CapsError::Revoked(7))), Ok(1)],
                "key 8's attempt ran on its own (slow ask: {slow})"
            );
            assert_eq!(stepped_after.load(Ordering::SeqCst), 0, "no step after the revocation");
        }
    }

    async fn keys_told_later_are_not_polled_every_round() {
        // 100 keys full elsewhere, told to come back in a minute, each with an item
        // waiting; meanwhile 400 items of a free key run through many rounds of the map.
        let caps = Caps::new(1, Duration::from_secs(60));
        let held: Vec<CapPermit> = (0..100).map(|key| caps.hold(key)).collect();
        let input: Vec<(u32, u32)> = (0..100).map(|key| (key, 0)).chain((0..400).map(|i| (1_000, i))).collect();
        let done = Arc::new(AtomicUsize::new(0));
        let map = {
            let done = Arc::clone(&done);
            map_async(input, 4, move |(_, index)| {
                let done = Arc::clone(&done);
                async move {
                    future::yield_now().await;
                    done.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, FetchError>(index)
                }
            })
            .per_key(|&(key, _)| key, 4)
            .shared_limits(caps.clone())
        };
        let release = async {
            until(|| done.load(Ordering::SeqCst) == 400).await;
            let polls = caps.0.wake_polls.load(Ordering::SeqCst);
            // A poll each when told "later" and a few spurious ones, not 100 per round.
            assert!(polls < 2_000, "{polls} polls of 100 sleeping keys' wake-ups");
            drop(held);
        };
        let (out, ()) = future::zip(map, release).await;
        assert_eq!(out.len(), 500);
    }

    async fn a_wake_always_ready_still_waits_the_floor() {
        let (asks, elapsed) = asks_when_always_later().await;
        // At most one ask a millisecond (with room for a late timer), not hundreds of
        // thousands: at any speed, a slow machine asks less. (That it asks again after its
        // wake-up, at least twice, on virtual time: was here too, which needs the thread to
        // run within the 300 ms.)
        let bound = 2 * elapsed.as_millis() as usize + 10;
        assert!(asks <= bound, "{asks} asks in {elapsed:?}: a loop");
        assert!(asks >= 1, "the key asked");
    }

    async fn a_warm_up_shows_in_progress() {
        let limits = WarmingUp::default();
        limits.0.store(true, Ordering::SeqCst);
        let control = tollgate::MapControl::new();
        let map = map_async(items(4, 2), 8, |(_, index)| async move { Ok::<_, FetchError>(index) })
            .per_key(|&(key, _)| key, 2)
            .shared_limits(limits.clone())
            .control(&control);
        let watch = async {
            // Every key was told the limits are warming up: the progress says why nothing
            // starts. The warm-up ends only once that was seen.
            let seen = loop {
                let progress = control.progress();
                if progress.keys_warming_up() == 4 {
                    break progress;
                }
                tollgate::sleep(Duration::from_millis(1)).await;
            };
            assert_eq!(seen.keys_told_later(), 4);
            assert_eq!((seen.started(), seen.waiting()), (0, 8));
            limits.0.store(false, Ordering::SeqCst);
        };
        let (out, ()) = future::zip(map, watch).await;
        assert_eq!(out.len(), 8);
        assert!(out.iter().all(Result::is_ok));
        let progress = control.progress();
        assert_eq!((progress.keys_told_later(), progress.keys_warming_up()), (0, 0));
    }
}

virtual_time! {
    async fn a_key_told_later_is_woken_by_each_release_after_the_floor() {
        let (outputs, asks, took) = told_later_for_a_minute().await;
        assert_eq!(outputs, 20);
        // One at a time: a grant per item and a "later" per item after the first (was: at
        // most 3 asks an item).
        assert_eq!(asks, 20 + 19);
        // Woken by the releases, not by the minute: each wait is the map's floor of a
        // millisecond after its "later" (was: under 30 s of wall time).
        assert_eq!(took, Duration::from_millis(19));
    }

    async fn the_maps_rate_wakes_keys_waiting_to_ask_at_its_instants() {
        let (outputs, took) = rate_and_waiting_keys().await;
        assert_eq!(outputs, 8);
        // Eight starts at 100/s: the last exactly 70 ms after the first.
        assert_eq!(took, Duration::from_millis(70));
    }

    async fn a_wake_always_ready_gets_one_ask_a_millisecond() {
        let (asks, elapsed) = asks_when_always_later().await;
        assert_eq!(elapsed, Duration::from_millis(300));
        // At 0, 1, .., 300 ms (was: at least 2, and at most 2 a millisecond).
        assert_eq!(asks, 301, "one ask a millisecond");
    }
}
