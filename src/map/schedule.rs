//! The scheduling methods every bounded map has: rates (`rate`, `per_key_rate`), retries
//! that give their slots back (`retry`), the window's cap (`max_window`), `per_key`
//! after those, and `control` (a [`MapControl`](super::MapControl)). One macro writes them
//! for [`MapAsync`](super::MapAsync), [`TryMapAsync`](super::TryMapAsync),
//! [`MapBounded`](super::MapBounded) and [`MapUnordered`](super::MapUnordered), so the four
//! cannot drift apart; each type only says how to reach its engine (`engine_mut`) and
//! swap its admission (`replace_admission`).

/// Writes the scheduling methods of a map type.
///
/// - `$Map<$($param),*>`: the type without its last two parameters, the admission and
///   the output form (which every method keeps as it is);
/// - `where`: the bounds of its impls; `item`: its item type;
/// - `retry`: the generics, error type and bounds of its `retry` methods;
/// - `start` / `finish`: code that builds such a map over `0..8u32` with futures of
///   `Result<u32, ()>`, and that runs it, for the doc examples.
macro_rules! scheduling_methods {
    (
        $Map:ident < $($param:ident),* >
        where [$($bounds:tt)*]
        item = $item:ty,
        retry = <$($rg:ident),*> $err:ident where [$($rbounds:tt)*],
        start = $start:literal,
        finish = $finish:literal $(,)?
    ) => {
        impl<$($param,)* M> $Map<$($param,)* $crate::map::window::Window, M>
        where
            $($bounds)*
            M: $crate::map::results::OutputForm,
        {
            /// Attaches a [`MapControl`](crate::MapControl): read the map's progress,
            /// drain it, or change its limit while it runs, from any task or thread.
            ///
            /// Put it last, after `per_key`, `rate` and `retry`: those change what the
            /// control can steer (a map with `per_key` takes a `MapControl<K>` naming
            /// its keys). Without a control the map publishes nothing and pays nothing.
            ///
            /// # Examples
            ///
            /// ```
            /// use tollgate::MapControl;
            /// # #[allow(unused_imports)] use futures_lite::StreamExt as _;
            /// # futures_lite::future::block_on(async {
            /// let control = MapControl::new();
            #[doc = concat!("let map = ", $start, ".control(&control);")]
            #[doc = concat!("let out = map", $finish, ";")]
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
            pub fn control(mut self, control: &$crate::map::control::MapControl) -> Self {
                self.engine_mut().attach(control.shared());
                self
            }

            /// Limits how many items start per unit of time over the whole map: no two
            /// starts closer than the rate allows (beyond its burst), whatever the
            /// limit. Items wait for the rate without holding a slot.
            ///
            /// Combine with [`per_key`](Self::per_key) (first) for a rate per host.
            ///
            /// # Examples
            ///
            /// ```
            /// use tollgate::Rate;
            /// # #[allow(unused_imports)] use futures_lite::StreamExt as _;
            /// # futures_lite::future::block_on(async {
            #[doc = concat!("let map = ", $start, ".rate(Rate::per_second(1_000).burst(8));")]
            #[doc = concat!("let out = map", $finish, ";")]
            /// # let _ = out;
            /// # });
            /// ```
            pub fn rate(
                self,
                rate: $crate::limit::rate::Rate,
            ) -> $Map<$($param,)* $crate::map::keyed::PerKey<$item, (), $crate::map::keyed::Unkeyed<$item>>, M> {
                self.replace_admission(|_| {
                    let mut admission = $crate::map::keyed::PerKey::unkeyed();
                    admission.set_rate(rate);
                    admission
                })
            }

            /// Retries failed items inside the map: a failed attempt gives back its slot,
            /// the item waits for its pause without holding one, and the freed slot
            /// serves other items meanwhile. See [`RetryPolicy`](crate::RetryPolicy)
            /// for the settings (attempts, backoff, the server's `Retry-After`, a retry
            /// budget, a hook) and for what the output of a retried item is.
            ///
            /// The map's function is called again with a clone of the item, hence
            /// `Clone`. Combine with [`per_key`](Self::per_key) (first) to pause a whole
            /// host on a 429 and to keep a retry budget per host.
            ///
            /// # Examples
            ///
            /// ```
            /// use std::time::Duration;
            /// use tollgate::RetryPolicy;
            /// # #[allow(unused_imports)] use futures_lite::StreamExt as _;
            /// # futures_lite::future::block_on(async {
            /// let policy = RetryPolicy::new().attempts(3).interval(Duration::from_millis(1));
            #[doc = concat!("let map = ", $start, ".retry(policy);")]
            #[doc = concat!("let out = map", $finish, ";")]
            /// # let _ = out;
            /// # });
            /// ```
            pub fn retry<$($rg),*>(
                self,
                policy: $crate::retry::RetryPolicy<$item, $err>,
            ) -> $Map<
                $($param,)*
                $crate::map::keyed::PerKey<$item, (), $crate::map::keyed::Unkeyed<$item>, $crate::retry::RetryPolicy<$item, $err>>,
                M,
            >
            where
                $item: $crate::map::keyed::RetryItem,
                $($rbounds)*
            {
                self.replace_admission(|_| $crate::map::keyed::PerKey::unkeyed().with_policy(policy))
            }
        }

        impl<$($param,)* P, M> $Map<$($param,)* $crate::map::keyed::PerKey<$item, (), $crate::map::keyed::Unkeyed<$item>, P>, M>
        where
            $($bounds)*
            M: $crate::map::results::OutputForm,
        {
            /// Adds a per-key limit to a map that has a rate or a retry policy already,
            /// keeping them: see [`per_key`](Self::per_key) on the plain map.
            ///
            /// # Examples
            ///
            /// ```
            /// use tollgate::Rate;
            /// # #[allow(unused_imports)] use futures_lite::StreamExt as _;
            /// # futures_lite::future::block_on(async {
            #[doc = concat!("let map = ", $start, ".rate(Rate::per_second(1_000)).per_key(|n| n % 2, 1);")]
            #[doc = concat!("let out = map", $finish, ";")]
            /// # let _ = out;
            /// # });
            /// ```
            ///
            /// # Panics
            ///
            /// If `limit` is 0.
            #[track_caller]
            pub fn per_key<K, KF>(
                self,
                key_fn: KF,
                limit: usize,
            ) -> $Map<$($param,)* $crate::map::keyed::PerKey<$item, K, KF, P>, M>
            where
                K: std::hash::Hash + Eq + Clone,
                KF: FnMut(&$item) -> K,
            {
                $crate::limit::check::at_least_one(limit, "tollgate: the per-key limit must be at least 1 (a limit of 0 would never run anything)");
                self.replace_admission(|admission| admission.with_key(key_fn, limit))
            }
        }

        impl<$($param,)* K, KF, P, M> $Map<$($param,)* $crate::map::keyed::PerKey<$item, K, KF, P>, M>
        where
            K: std::hash::Hash + Eq + Clone,
            KF: FnMut(&$item) -> K,
            $($bounds)*
            M: $crate::map::results::OutputForm,
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
            #[doc = concat!("let map = ", $start, ".per_key(|n| n % 4, 2).shared_limits(limits);")]
            #[doc = concat!("let out = map", $finish, ";")]
            /// # let _ = out;
            /// # });
            /// ```
            pub fn shared_limits<L>(
                self,
                limits: L,
            ) -> $Map<$($param,)* $crate::map::keyed::PerKey<$item, K, KF, P, $crate::map::keyed::WithSharedLimits<K, L>>, M>
            where
                L: $crate::map::keyed::SharedLimits<K>,
            {
                self.replace_admission(|admission| admission.with_shared(limits))
            }
        }

        impl<$($param,)* K, KF, P, G, M> $Map<$($param,)* $crate::map::keyed::PerKey<$item, K, KF, P, G>, M>
        where
            K: std::hash::Hash + Eq + Clone,
            KF: FnMut(&$item) -> K,
            $($bounds)*
            M: $crate::map::results::OutputForm,
        {
            /// Limits how many items start per unit of time over the whole map (all keys
            /// together). Items wait for the rate without holding a slot.
            ///
            /// # Examples
            ///
            /// ```
            /// use tollgate::Rate;
            /// # #[allow(unused_imports)] use futures_lite::StreamExt as _;
            /// # futures_lite::future::block_on(async {
            #[doc = concat!("let map = ", $start, ".per_key(|n| n % 4, 2).rate(Rate::per_second(1_000));")]
            #[doc = concat!("let out = map", $finish, ";")]
            /// # let _ = out;
            /// # });
            /// ```
            pub fn rate(mut self, rate: $crate::limit::rate::Rate) -> Self {
                self.admission_mut().set_rate(rate);
                self
            }

            /// Attaches a [`MapControl`](crate::MapControl): read the map's progress
            /// (its busiest keys too), drain it, or change its limits and rates while it
            /// runs, from any task or thread.
            ///
            /// Put it last, after `per_key`, `rate` and `retry`.
            ///
            /// # Examples
            ///
            /// ```
            /// use tollgate::MapControl;
            /// # #[allow(unused_imports)] use futures_lite::StreamExt as _;
            /// # futures_lite::future::block_on(async {
            /// let control = MapControl::new();
            #[doc = concat!("let map = ", $start, ".per_key(|n| n % 4, 2).control(&control);")]
            /// control.set_default_key_limit(3).unwrap();
            #[doc = concat!("let out = map", $finish, ";")]
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
            pub fn control(mut self, control: &$crate::map::control::MapControl<K>) -> Self {
                self.engine_mut().attach(control.shared());
                self.admission_mut()
                    .set_board(std::sync::Arc::clone(control.key_board()));
                self
            }

            /// Limits how many items of one key start per unit of time: a crawl delay or
            /// a request quota per host.
            ///
            /// An item whose key must wait for its rate holds no global slot: items of
            /// other keys start meanwhile, and keys take turns. One timer serves the
            /// whole map, set for the earliest time an item may start. The rate is this
            /// map's alone; to share one with other code, use a
            /// [`KeyedRateLimiter`](crate::KeyedRateLimiter) inside the function.
            ///
            /// # Examples
            ///
            /// ```
            /// use tollgate::Rate;
            /// # #[allow(unused_imports)] use futures_lite::StreamExt as _;
            /// # futures_lite::future::block_on(async {
            #[doc = concat!("let map = ", $start, ".per_key(|n| n % 4, 2).per_key_rate(Rate::per_second(1_000).burst(2));")]
            #[doc = concat!("let out = map", $finish, ";")]
            /// # let _ = out;
            /// # });
            /// ```
            pub fn per_key_rate(mut self, rate: $crate::limit::rate::Rate) -> Self {
                self.admission_mut().set_per_key_rate(rate);
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
            #[doc = concat!("let map = ", $start, ".per_key(|n| n % 4, 2).max_window(10_000);")]
            #[doc = concat!("let out = map", $finish, ";")]
            /// # let _ = out;
            /// # });
            /// ```
            pub fn max_window(mut self, max_window: usize) -> Self {
                self.admission_mut().set_max_window(max_window);
                self
            }

            /// Retries failed items inside the map, each key on its own: a failed
            /// attempt gives back its global and per-key slots, the item re-enters its
            /// key's queue with a time before which it may not start, and the freed
            /// slots serve other items meanwhile. The policy may pause the whole key
            /// ([`RetryPolicy::pause_key`](crate::RetryPolicy::pause_key)) and keeps
            /// its retry budget per key. See [`RetryPolicy`](crate::RetryPolicy).
            ///
            /// # Examples
            ///
            /// ```
            /// use std::time::Duration;
            /// use tollgate::RetryPolicy;
            /// # #[allow(unused_imports)] use futures_lite::StreamExt as _;
            /// # futures_lite::future::block_on(async {
            /// let policy = RetryPolicy::new().interval(Duration::from_millis(1)).budget(0.2, 10);
            #[doc = concat!("let map = ", $start, ".per_key(|n| n % 4, 2).retry(policy);")]
            #[doc = concat!("let out = map", $finish, ";")]
            /// # let _ = out;
            /// # });
            /// ```
            pub fn retry<$($rg),*>(
                self,
                policy: $crate::retry::RetryPolicy<$item, $err>,
            ) -> $Map<$($param,)* $crate::map::keyed::PerKey<$item, K, KF, $crate::retry::RetryPolicy<$item, $err>, G>, M>
            where
                $item: $crate::map::keyed::RetryItem,
                $($rbounds)*
            {
                self.replace_admission(|admission| admission.with_policy(policy))
            }
        }
    };
}

pub(crate) use scheduling_methods;
