//! The scheduling methods of every bounded map, written once on
//! [`BoundedMap`](super::BoundedMap): `per_key`, rates (`rate`, `per_key_rate`), retries
//! that give their slots back (`retry`), the window's cap (`max_window`), `shared_limits`
//! and `control` (a [`MapControl`]). `control`, `rate`, `retry` and `per_key` serve every
//! admission through what `scheduling.rs` asks of it (on the plain window they install the
//! scheduler, [`PerKey`]; on a map that has one they change its settings); the others are
//! the scheduler's own.

use std::fmt;
use std::future::{Future, IntoFuture};
use std::hash::Hash;

use futures_lite::Stream;

use super::bounded::BoundedMap;
use super::control::MapControl;
use super::delivery::Delivery;
use super::keyed::{
    Classified, FailWhenOpen, Fixed, MapBreaker, NoSharedLimits, PerKey, RetryItem, SharedLimits,
    SlotPolicy, WaitWhenOpen, WithSharedLimits,
};
use super::scheduling::{Keying, Scheduling};
use crate::limit::adaptive::config::Adaptive;
use crate::limit::breaker::config::Breaker;
use crate::limit::breaker::error::CircuitBreakerError;
use crate::limit::key_settings::KeySettings;
use crate::limit::outcome::Outcome;
use crate::limit::rate::Rate;
use crate::retry::RetryPolicy;

/// The map with the scheduler of a key function (a private shorthand: the type is the
/// public one).
type KeyedMap<S, F, Fut, K, KF, P, G, D, C = Fixed> =
    BoundedMap<S, F, Fut, PerKey<<S as Stream>::Item, K, KF, P, G, C>, D>;

impl<S, F, Fut, A, D> BoundedMap<S, F, Fut, A, D>
where
    S: Stream,
    Fut: IntoFuture,
    A: Scheduling<S::Item>,
    D: Delivery,
{
    /// Attaches a [`MapControl`]: read the map's progress (with `per_key`, its busiest
    /// keys too), drain it, or change its limits and rates while it runs, from any task
    /// or thread.
    ///
    /// Put it last, after `per_key`, `rate` and `retry`: those change what the control
    /// can steer, and a map with `per_key` takes a `MapControl<K>` naming its keys.
    /// Without a control the map publishes nothing and pays nothing.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::MapControl;
    /// # futures_lite::future::block_on(async {
    /// let control = MapControl::new();
    /// let map = tollgate::map_async(0..8u32, 4, |n| async move { Ok::<u32, ()>(n) }).control(&control);
    /// let out = map.await;
    /// assert_eq!(control.progress().finished(), 8);
    /// # let _ = out;
    ///
    /// // With `per_key`, the control names the keys (here `u32`) and steers them.
    /// let control = MapControl::new();
    /// let map = tollgate::map_async(0..8u32, 4, |n| async move { Ok::<u32, ()>(n) }).per_key(|n| n % 4, 2).control(&control);
    /// control.set_default_key_limit(3).unwrap();
    /// let out = map.await;
    /// assert_eq!(control.progress().finished(), 8);
    /// # let _ = out;
    /// # });
    /// ```
    ///
    /// # Panics
    ///
    /// If `control` is attached to another map that has not ended (one control
    /// steers one map at a time; once that map ended, the control may be attached
    /// again).
    #[track_caller]
    pub fn control(mut self, control: &MapControl<A::Key>) -> Self {
        // Attached with the key queue held: a key setting queued before is the
        // earlier run's (cleared), one queued after waits for this map.
        // The queue is the admission's before it attaches, so the settings it can change
        // say it takes settings of single keys.
        let mut queued = control.lock_key_changes();
        A::attach(&mut self, control);
        queued.clear();
        drop(queued);
        self
    }
}

impl<S, F, Fut, A, D> BoundedMap<S, F, Fut, A, D>
where
    S: Stream,
    F: FnMut(S::Item) -> Fut,
    Fut: IntoFuture,
    A: Scheduling<S::Item>,
    D: Delivery,
{
    /// Limits how many items start per unit of time over the whole map (all keys
    /// together): no two starts closer than the rate allows (beyond its burst), whatever
    /// the limit. Items wait for the rate without holding a slot.
    ///
    /// This is the whole map's rate, with or without [`per_key`](Self::per_key); for a
    /// rate per key (per host), add `per_key` and then
    /// [`per_key_rate`](Self::per_key_rate).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::Rate;
    /// # futures_lite::future::block_on(async {
    /// let map = tollgate::map_async(0..8u32, 4, |n| async move { Ok::<u32, ()>(n) }).rate(Rate::per_second(1_000).burst(8));
    /// let out = map.await;
    /// # let _ = out;
    /// let map = tollgate::map_async(0..8u32, 4, |n| async move { Ok::<u32, ()>(n) }).per_key(|n| n % 4, 2).rate(Rate::per_second(1_000));
    /// let out = map.await;
    /// # let _ = out;
    /// # });
    /// ```
    pub fn rate(self, rate: Rate) -> BoundedMap<S, F, Fut, A::Rated, D> {
        A::rated(self, rate)
    }

    /// Retries failed items inside the map: a failed attempt gives back its slot (and its
    /// key's, with [`per_key`](Self::per_key)), the item waits for its pause without
    /// holding one (in its key's queue, behind a time before which it may not start), and
    /// the freed slots serve other items meanwhile. See
    /// [`RetryPolicy`](crate::RetryPolicy) for the settings (attempts, backoff, the
    /// server's `Retry-After`, a retry budget, a hook) and for what the output of a
    /// retried item is.
    ///
    /// The map's function is called again with a clone of the item, hence `Clone`.
    /// Combined with `per_key` (before or after), each key retries on its own: the policy
    /// may pause the whole key
    /// ([`RetryPolicy::pause_key`](crate::RetryPolicy::pause_key), on a 429 say) and
    /// keeps its retry budget per key.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::RetryPolicy;
    /// # futures_lite::future::block_on(async {
    /// let policy = RetryPolicy::new().attempts(3).interval(Duration::from_millis(1));
    /// let map = tollgate::map_async(0..8u32, 4, |n| async move { Ok::<u32, ()>(n) }).retry(policy);
    /// let out = map.await;
    /// # let _ = out;
    /// let policy = RetryPolicy::new().interval(Duration::from_millis(1)).budget(0.2, 10);
    /// let map = tollgate::map_async(0..8u32, 4, |n| async move { Ok::<u32, ()>(n) }).per_key(|n| n % 4, 2).retry(policy);
    /// let out = map.await;
    /// # let _ = out;
    /// # });
    /// ```
    pub fn retry<Value, Error>(
        self,
        policy: RetryPolicy<S::Item, Error>,
    ) -> BoundedMap<S, F, Fut, A::Retried<Error>, D>
    where
        S::Item: RetryItem,
        Fut: IntoFuture<Output = Result<Value, Error>>,
    {
        A::retried(self, policy)
    }
}

impl<S, F, Fut, A, D> BoundedMap<S, F, Fut, A, D>
where
    S: Stream,
    F: FnMut(S::Item) -> Fut,
    Fut: IntoFuture,
    A: Keying<S::Item>,
    D: Delivery,
{
    /// Adds a per-key limit: at most `limit` items of one key (a URL's host, a tenant, a
    /// shard, as named by `key_fn`) run at once, within the map's global limit, without
    /// either limit blocking the other.
    ///
    /// An item starts only when its key and the global limit both have room. Items whose
    /// key is full wait in a per-key queue **without holding a global slot**, and items
    /// of other keys go ahead, so host-sorted input still fills every global slot. Keys
    /// with waiting items take turns, so none starves; a key that runs fewer than `limit`
    /// items gets a turn for its next one at once. Within a key, items start in input
    /// order. Outputs keep the map's order (input order, or completion order for
    /// `amap_iter` and `map_unordered`), and `try_map_async`'s first error still stops
    /// everything. `limit` is the map's default key limit: every key has it (a control
    /// changes it with [`set_default_key_limit`](MapControl::set_default_key_limit)).
    ///
    /// Input is pulled ahead of the running work, up to the [window](Self::window),
    /// to find items of other keys. With a per-key limit the default window is
    /// 64 × the global limit: with input sorted by key in runs of `r` items, filling
    /// every global slot needs a window of about `(global / per_key) × r`; interleaved
    /// input needs very little. Memory stays bounded by the window whatever the order.
    ///
    /// The global limit is `map_async`'s argument and the per-key limit sits beside its
    /// key function, so the two cannot be swapped by accident.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// async fn fetch(url: String) -> Result<String, std::io::Error> {
    ///     tollgate::sleep(Duration::from_millis(1)).await; // the network, simulated
    ///     Ok(format!("<html>{url}</html>"))
    /// }
    ///
    /// # futures_lite::future::block_on(async {
    /// // Sorted by host: the naive crawler would leave most global slots idle here.
    /// let urls: Vec<String> = ["a.example", "b.example", "c.example"]
    ///     .iter()
    ///     .flat_map(|host| (0..10).map(move |i| format!("https://{host}/{i}")))
    ///     .collect();
    /// let host = |url: &String| url.split('/').nth(2).unwrap_or_default().to_owned();
    /// // 6 requests at once, at most 2 per host.
    /// let pages = tollgate::map_async(urls, 6, fetch).per_key(host, 2).await;
    /// assert_eq!(pages.len(), 30);
    /// assert!(pages.iter().all(Result::is_ok));
    /// # });
    /// ```
    ///
    /// # With a `KeyedBulkhead`
    ///
    /// The per-key limit caps this map alone. When several maps (or other code) hit the
    /// same hosts and the cap must hold across all of them, also run each request
    /// through a shared [`KeyedBulkhead`](crate::KeyedBulkhead) inside `f`. Its options
    /// then mean what they say: an `acquire_timeout` or `max_waiting` turns "the host is
    /// busy with the others' work" into a [`BulkheadError`](crate::BulkheadError) item
    /// instead of a long wait. Within one map the bulkhead never makes an item wait while
    /// it holds a global slot as long as the per-key limit is no larger than the
    /// bulkhead's limit.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{BulkheadError, KeyedBulkhead, map_async, sleep};
    ///
    /// async fn crawl(per_host: &KeyedBulkhead<String>, urls: Vec<String>) -> Vec<Result<(), BulkheadError>> {
    ///     let host = |url: &String| url.split('/').nth(2).unwrap_or_default().to_owned();
    ///     map_async(urls, 8, |url| async move {
    ///         let host = url.split('/').nth(2).unwrap_or_default().to_owned();
    ///         per_host.run(&host, sleep(Duration::from_millis(1))).await
    ///     })
    ///     .per_key(host, 2)
    ///     .await
    /// }
    ///
    /// # futures_lite::future::block_on(async {
    /// let per_host = KeyedBulkhead::new(2);
    /// let urls = |n| (0..n).map(|i| format!("https://example.com/{i}")).collect();
    /// // Two crawls at once: together they still send at most 2 requests to the host.
    /// let (a, b) = futures_lite::future::zip(crawl(&per_host, urls(10)), crawl(&per_host, urls(10))).await;
    /// assert!(a.iter().chain(&b).all(Result::is_ok));
    /// # });
    /// ```
    ///
    /// Called after `rate` or `retry`, it keeps them.
    ///
    /// # Panics
    ///
    /// If `limit` is 0, or [`key_settings`](Self::key_settings) was called before
    /// `.per_key` (it names the key `.per_key` gives). Polling panics if `key_fn` does
    /// (after dropping the work in flight and the items waiting for their key).
    #[track_caller]
    pub fn per_key<K, KF>(
        self,
        key_fn: KF,
        limit: usize,
    ) -> BoundedMap<S, F, Fut, A::Keyed<K, KF>, D>
    where
        K: Hash + Eq + Clone,
        KF: FnMut(&S::Item) -> K,
    {
        A::keyed(self, key_fn, limit)
    }
}

impl<S, F, Fut, K, KF, P, D, C>
    BoundedMap<S, F, Fut, PerKey<S::Item, K, KF, P, NoSharedLimits, C>, D>
where
    K: Hash + Eq + Clone,
    KF: FnMut(&S::Item) -> K,
    S: Stream,
    F: FnMut(S::Item) -> Fut,
    Fut: IntoFuture,
    D: Delivery,
{
    /// Asks `limits` before every start: per-key caps or rates kept outside the
    /// map, such as a fleet's through a store (`tollgate-redis`), or another
    /// map's. An item starts when the map's own limits allow it **and** its key
    /// was granted a permit, which it holds until its attempt ends.
    ///
    /// The guarantee is the one the map gives for its own per-key limits: an item
    /// whose key waits for its shared limits holds no slot, and items of other
    /// keys start meanwhile. The map asks for one item of a key at a time, and
    /// only while a slot is free for the answer, so a permit is held by a running
    /// item, not by an item waiting for a slot. A key told to come back later
    /// sleeps like a key waiting for its rate.
    ///
    /// The map's futures must return `Result<_, E>` with `E: From<L::Error>`: when
    /// the limits cannot answer (a store out of reach) or revoke a permit (a lease
    /// that could not be renewed: the attempt is cancelled), the item's attempt
    /// ends with that error, and a [`retry`](Self::retry) policy sees it like any
    /// other failure.
    ///
    /// # Examples
    ///
    /// See [`SharedLimits`](crate::SharedLimits) for an implementation.
    ///
    /// ```
    /// # use std::future::{Pending, Ready, ready};
    /// # use tollgate::{Answer, SharedLimits};
    /// # #[allow(unused_imports)] use futures_lite::StreamExt as _;
    /// # struct Open;
    /// # impl SharedLimits<u32> for Open {
    /// #     type Permit = ();
    /// #     type Error = ();
    /// #     type Ask = Ready<Answer<(), ()>>;
    /// #     type Wake = Pending<()>;
    /// #     type Revoked = Pending<()>;
    /// #     fn ask(&self, _key: &u32) -> Self::Ask { ready(Answer::Granted(())) }
    /// #     fn wake(&self, _key: &u32) -> Option<Self::Wake> { None }
    /// #     fn revoked(&self, _permit: &()) -> Option<Self::Revoked> { None }
    /// # }
    /// # futures_lite::future::block_on(async {
    /// let limits = Open; // a fleet's store, say
    /// let map = tollgate::map_async(0..8u32, 4, |n| async move { Ok::<u32, ()>(n) }).per_key(|n| n % 4, 2).shared_limits(limits);
    /// let out = map.await;
    /// # let _ = out;
    /// # });
    /// ```
    pub fn shared_limits<L>(
        self,
        limits: L,
    ) -> KeyedMap<S, F, Fut, K, KF, P, WithSharedLimits<K, L>, D, C>
    where
        L: SharedLimits<K>,
    {
        self.replace_admission(|admission| admission.with_shared(limits))
    }
}

impl<S, F, Fut, K, KF, P, G, D, C> BoundedMap<S, F, Fut, PerKey<S::Item, K, KF, P, G, C>, D>
where
    K: Hash + Eq + Clone,
    KF: FnMut(&S::Item) -> K,
    S: Stream,
    F: FnMut(S::Item) -> Fut,
    Fut: IntoFuture,
    D: Delivery,
{
    /// Limits how many items of one key start per unit of time: a crawl delay or
    /// a request quota per host.
    ///
    /// An item whose key must wait for its rate holds no global slot: items of
    /// other keys start meanwhile, and keys take turns. One timer serves the
    /// whole map, set for the earliest time an item may start. The rate is this
    /// map's alone; to share one with other code, use a
    /// [`KeyedRateLimiter`](crate::KeyedRateLimiter) inside the function.
    ///
    /// Keys due at the same moment do not start in the same instant (the
    /// **spread**): after a key wakes for its rate, the next waits a gap of at most
    /// 1 ms, and at most half the interval its rate leaves each key of the map
    /// (`interval / (2 × keys)`), so hosts that started together once do not stay
    /// in lockstep, and a server never sees them all arrive at once. A key never
    /// starts sooner than its rate allows, and its rate keeps its average: the gap
    /// delays only keys that come due together, once, and they stay apart after.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::Rate;
    /// # #[allow(unused_imports)] use futures_lite::StreamExt as _;
    /// # futures_lite::future::block_on(async {
    /// let map = tollgate::map_async(0..8u32, 4, |n| async move { Ok::<u32, ()>(n) }).per_key(|n| n % 4, 2).per_key_rate(Rate::per_second(1_000).burst(2));
    /// let out = map.await;
    /// # let _ = out;
    /// # });
    /// ```
    pub fn per_key_rate(mut self, rate: Rate) -> Self {
        self.admission_mut().set_default_key_rate(rate);
        self
    }

    /// Gives keys settings of their own, from a function of the key: its limit and
    /// rate ([`KeySettings`]), each in place of the default key limit and default key
    /// rate, which then no longer reach it. What the function leaves unset follows the
    /// defaults. Call it after `.per_key` (it names the map's key).
    ///
    /// The function is asked when a key is first seen, and again when the key comes
    /// back after the map forgot it (idle keys are forgotten, so memory stays bounded
    /// by the keys in hand: nothing is kept for a key the function gave settings) and
    /// when a control [clears](crate::MapControl::clear_key_settings) what it gave the
    /// key. Settings a control gives one key
    /// ([`set_key_settings`](crate::MapControl::set_key_settings)) go before the
    /// function's.
    /// Keep the function cheap: it runs inside the map's poll. It is kept by the map,
    /// which may be sent to another thread, so it is `Send + 'static`: share a table
    /// with it through an `Arc`.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{KeySettings, Rate};
    /// # futures_lite::future::block_on(async {
    /// let urls = ["a.example/1", "b.example/1", "a.example/2", "slow.example/1"];
    /// let host = |url: &&str| url.split('/').next().unwrap_or_default().to_owned();
    /// let pages = tollgate::map_async(urls, 16, |url| async move { url.len() })
    ///     .per_key(host, 4)
    ///     .key_settings(|host: &String| match host.as_str() {
    ///         "slow.example" => KeySettings::new().limit(1).rate(Rate::per_second(2)),
    ///         _ => KeySettings::new(), // the defaults: 4 at a time
    ///     })
    ///     .await;
    /// assert_eq!(pages.len(), 4);
    /// # });
    /// ```
    pub fn key_settings(
        mut self,
        settings: impl FnMut(&K) -> KeySettings + Send + 'static,
    ) -> Self {
        self.admission_mut().set_key_settings(settings);
        self
    }

    /// Caps how far the window may grow: 1024 × the global limit by default, or
    /// the window if larger; a window set with `.window(n)` does not grow unless
    /// a max window is set too.
    ///
    /// While global slots sit idle because every waiting item's key is full or
    /// waiting for its time, the map pulls further ahead to find other keys: the
    /// window doubles, as long as doubling keeps finding new keys, up to this
    /// cap, and returns to its set size once the backlog is gone. Input that
    /// keeps the slots busy never grows it. Every item pulled is held until it
    /// is handed out, so this caps the map's memory.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[allow(unused_imports)] use futures_lite::StreamExt as _;
    /// # futures_lite::future::block_on(async {
    /// let map = tollgate::map_async(0..8u32, 4, |n| async move { Ok::<u32, ()>(n) }).per_key(|n| n % 4, 2).max_window(10_000);
    /// let out = map.await;
    /// # let _ = out;
    /// # });
    /// ```
    pub fn max_window(mut self, max_window: usize) -> Self {
        self.admission_mut().set_max_window(max_window);
        self
    }

    /// Sets how the keys that may start share the map's global slots: taking
    /// [turns](SlotPolicy::Turns), one start each in turn, or sharing the slots'
    /// [time](SlotPolicy::SlotTime), each start charged the time the key's attempts
    /// hold a slot. An adaptive map shares slot time, every other keyed map takes
    /// turns, unless this says otherwise (before or after `.adaptive(..)`). A map
    /// that does not adapt does not time its attempts: slot time charges each of its
    /// starts alike there, which is turns.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::SlotPolicy;
    /// # futures_lite::future::block_on(async {
    /// let out = tollgate::map_async(0..8u32, 4, |n| async move { n })
    ///     .per_key(|n| n % 4, 2)
    ///     .slot_policy(SlotPolicy::SlotTime)
    ///     .await;
    /// assert_eq!(out, [0, 1, 2, 3, 4, 5, 6, 7]);
    /// # });
    /// ```
    pub fn slot_policy(mut self, policy: SlotPolicy) -> Self {
        self.admission_mut().set_slot_policy(policy);
        self
    }
}

impl<S, F, Fut, K, KF, P, G, D> KeyedMap<S, F, Fut, K, KF, P, G, D>
where
    K: Hash + Eq + Clone,
    KF: FnMut(&S::Item) -> K,
    S: Stream,
    F: FnMut(S::Item) -> Fut,
    Fut: IntoFuture,
    D: Delivery,
{
    /// Makes every key find its own limit and rate: each key's limit moves between
    /// `adaptive`'s floor and ceiling, and its rate below the rate ceiling, from what
    /// its own attempts say: their outcome (read by `classify` from each attempt's
    /// output, success and failure alike) and the latency of its successes. The map's
    /// default key limit becomes `adaptive`'s ceiling and its default key rate the rate
    /// ceiling; a key's own settings ([`key_settings`](Self::key_settings),
    /// [`MapControl::set_key_settings`](crate::MapControl::set_key_settings), a server's
    /// [`Hint`](crate::Hint)) set that key's ceilings. How values move: [`Adaptive`].
    ///
    /// A key starts low (never at its ceiling), and so does a key the map forgot
    /// and sees again (an adaptive key is kept 60 s after its last attempt, so a host
    /// whose items come sparsely keeps what it learned). Only overloads
    /// ([`Outcome::overload`]: a 429, a bare 503, an attempt timeout) lower a key's values;
    /// other failures never do. Latency is each attempt's own (a retry is a new
    /// attempt); an attempt that a stream saw end only after its consumer sat on an
    /// output for more than a quarter of the attempt gives no latency sample, and a
    /// shorter wait is left out of it. Each map adapts on its own: a fleet's processes
    /// do not share what their keys learned.
    ///
    /// A 429 cuts the key's rate; its `Retry-After` is that request's wait (the retry
    /// policy's [`retry_after`](crate::RetryPolicy::retry_after)), and pauses the key only
    /// from a minute on, a quota's reset (`tollgate::http::outcome` reads it so): a server
    /// that answers `Retry-After: 5` to each early request of a strict meter would otherwise
    /// hold the host 5 s per 429, while the cut already slows it down (on a loopback nginx,
    /// 85.0 s against 38.8 s for the same crawl). A 503 with `Retry-After` is an outage
    /// ([`Outcome::outage`]): it pauses the key and cuts nothing.
    ///
    /// Call it after `.per_key`, and after `.per_key_rate` if any: it sets the default
    /// key limit to the ceiling and the default key rate to the rate ceiling.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Adaptive, Outcome, Rate};
    /// # futures_lite::future::block_on(async {
    /// // Each host between 1 and 16 at a time, at most 50 starts a second.
    /// let pages = tollgate::map_async(0..100u32, 64, |n| async move {
    ///     if n % 10 == 9 { Err(503) } else { Ok(n) }
    /// })
    /// .per_key(|n| n % 4, 16)
    /// .adaptive(Adaptive::new(1, 16).rate_ceiling(Rate::per_second(50)), |out| match out {
    ///     Ok(_) => Outcome::success(),
    ///     Err(429 | 503) => Outcome::overload(),
    ///     Err(_) => Outcome::failure(),
    /// })
    /// .await;
    /// assert_eq!(pages.len(), 100);
    /// # });
    /// ```
    pub fn adaptive<Classifier>(
        self,
        adaptive: Adaptive,
        classify: Classifier,
    ) -> KeyedMap<S, F, Fut, K, KF, P, G, D, Classified<Classifier>>
    where
        Classifier: FnMut(&<Fut::IntoFuture as Future>::Output) -> Outcome,
    {
        self.replace_admission(|admission| admission.with_adaptive(adaptive, classify))
    }

    /// Makes the map listen to the server: `classify` reads each attempt's output
    /// (success and failure alike) into an [`Outcome`], and the [`Hint`](crate::Hint)
    /// it carries ([`Outcome::with_hint`]) applies to the attempt's key at once: a
    /// pause holds the key (its items wait holding no slot), a limit or a rate becomes
    /// the key's own, as if a control had set it
    /// ([`MapControl::set_key_settings`](crate::MapControl::set_key_settings)); a later
    /// hint replaces it.
    /// What a hint set is kept while the key is known, and the key at least 60 s after
    /// the hint: a host whose items come one by one keeps what its server said between
    /// them, and a crawl of a million hosts does not keep a million hints.
    ///
    /// An [`adaptive`](Self::adaptive) map follows the hints of its own `classify` (a
    /// hinted limit or rate is then the key's ceiling): do not call both.
    /// [`RetryPolicy::retry_after`](crate::RetryPolicy::retry_after) and
    /// [`pause_key`](crate::RetryPolicy::pause_key) keep working beside hints (a key
    /// paused by both waits for the later end).
    ///
    /// With the `http` feature, `tollgate::http::outcome(status, headers)` reads an HTTP
    /// response: `Retry-After` and the rate-limit header fields.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Hint, Outcome, Rate};
    /// # futures_lite::future::block_on(async {
    /// // Each answer says how fast its host may be asked (as `RateLimit-Policy` does).
    /// let pages = tollgate::map_async(0..20u32, 8, |n| async move { Ok::<u32, u16>(n) })
    ///     .per_key(|n| n % 2, 4)
    ///     .classify(|out| match out {
    ///         Ok(_) => Outcome::success().with_hint(Hint::new().rate(Rate::per_second(1_000))),
    ///         Err(429) => Outcome::overload().with_hint(Hint::new().pause(Duration::from_secs(1))),
    ///         Err(_) => Outcome::failure(),
    ///     })
    ///     .await;
    /// assert_eq!(pages.len(), 20);
    /// # });
    /// ```
    pub fn classify<Classifier>(
        self,
        classify: Classifier,
    ) -> KeyedMap<S, F, Fut, K, KF, P, G, D, Classified<Classifier>>
    where
        Classifier: FnMut(&<Fut::IntoFuture as Future>::Output) -> Outcome,
    {
        self.replace_admission(|admission| admission.with_classified(classify))
    }
}

impl<S, F, Fut, K, KF, P, G, D, Cl, M> KeyedMap<S, F, Fut, K, KF, P, G, D, Classified<Cl, M>>
where
    K: Hash + Eq + Clone + fmt::Debug,
    KF: FnMut(&S::Item) -> K,
    S: Stream,
    F: FnMut(S::Item) -> Fut,
    Fut: IntoFuture,
    D: Delivery,
{
    /// Gives every key a circuit breaker (see [`Breaker`] for the rules and defaults),
    /// counting the outcomes the map's classification reads
    /// ([`classify`](Self::classify) or [`adaptive`](Self::adaptive); call it after
    /// either): a failure and an overload both count bad, so a host that answers only
    /// 503s opens its breaker. While a key's breaker is open, its items end at once with
    /// a [`CircuitBreakerError`] naming the key and when its next probe may go, converted
    /// into the map's error type: they are never started, and no retry policy sees them.
    /// Once the open period is over, one probe goes (the key's other items wait for its
    /// outcome, holding no slot); its success closes the breaker and the key's items
    /// flow again, its failure opens it again for twice as long (up to 16 times). Other
    /// keys are not held up meanwhile.
    ///
    /// Memory: an idle key is forgotten once its breaker holds nothing that would open it
    /// sooner than a fresh one: at once if it saw only successes, when its open period is
    /// over if it opened (seen again, it starts closed), else once its record forgets its
    /// failures (at most 10 minutes without outcomes). Each map's breakers are its own: a
    /// fleet's processes do not share them. With [`shared_limits`](Self::shared_limits) a
    /// key whose breaker is open asks them for nothing (its items end at once without a
    /// permit), and a permit granted just before its breaker opened goes back at once.
    /// [`breaker_waiting`](Self::breaker_waiting) makes the items of an open key wait
    /// instead.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Breaker, CircuitBreakerError, Outcome};
    ///
    /// #[derive(Debug)]
    /// enum Error {
    ///     Status(u16),
    ///     Open(CircuitBreakerError),
    /// }
    /// impl From<CircuitBreakerError> for Error {
    ///     fn from(open: CircuitBreakerError) -> Self {
    ///         Error::Open(open)
    ///     }
    /// }
    ///
    /// # futures_lite::future::block_on(async {
    /// // Host 0 answers 503 to everything; host 1 is fine.
    /// let pages = tollgate::map_async(0..40u32, 1, |n| async move {
    ///     if n % 2 == 0 { Err(Error::Status(503)) } else { Ok(n) }
    /// })
    /// .per_key(|n| n % 2, 1)
    /// .classify(|out| match out {
    ///     Ok(_) => Outcome::success(),
    ///     Err(Error::Status(503)) => Outcome::overload(),
    ///     Err(_) => Outcome::failure(),
    /// })
    /// .breaker(Breaker::new().min_attempts(3).over_last(3).open_for(Duration::from_secs(60)))
    /// .await;
    /// let refused = pages.iter().filter(|page| matches!(page, Err(Error::Open(_)))).count();
    /// assert_eq!(refused, 17); // host 0: 3 attempts opened its breaker, the rest ended at once
    /// # });
    /// ```
    pub fn breaker<Value, Error>(
        self,
        breaker: Breaker,
    ) -> KeyedMap<S, F, Fut, K, KF, P, G, D, Classified<Cl, FailWhenOpen>>
    where
        Fut: IntoFuture<Output = Result<Value, Error>>,
        Error: From<CircuitBreakerError>,
    {
        self.replace_admission(|admission| admission.with_breaker(MapBreaker::new(breaker, true)))
    }

    /// As [`breaker`](Self::breaker), but the items of a key whose breaker is open wait,
    /// holding no slot, until a probe has closed it (then they run), instead of ending at
    /// once; the map's output type is then free.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Breaker, Outcome};
    ///
    /// # futures_lite::future::block_on(async {
    /// let pages = tollgate::map_async(0..8u32, 2, |n| async move { n })
    ///     .per_key(|n| n % 2, 1)
    ///     .classify(|_| Outcome::success())
    ///     .breaker_waiting(Breaker::new().open_for(Duration::from_secs(5)))
    ///     .await;
    /// assert_eq!(pages, (0..8).collect::<Vec<_>>());
    /// # });
    /// ```
    pub fn breaker_waiting(
        self,
        breaker: Breaker,
    ) -> KeyedMap<S, F, Fut, K, KF, P, G, D, Classified<Cl, WaitWhenOpen>> {
        self.replace_admission(|admission| admission.with_breaker(MapBreaker::new(breaker, false)))
    }
}
