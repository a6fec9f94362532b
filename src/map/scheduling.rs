//! What the scheduling methods written once on every map (`control`, `rate`, `retry`,
//! `per_key`, in `schedule.rs`) need of its admission: the key its control names, and
//! the admission each method leaves. The plain [`Window`] installs the scheduler
//! ([`PerKey`]); a map that has one changes its settings. One method each in rustdoc,
//! whatever the admission.

use std::future::IntoFuture;
use std::hash::Hash;
use std::sync::Arc;

use futures_lite::Stream;

use super::bounded::BoundedMap;
use super::control::MapControl;
use super::delivery::Delivery;
use super::keyed::{NoSharedLimits, PerKey, RetryItem, Unkeyed, check_default_key_limit};
use super::window::Window;
use crate::limit::rate::Rate;
use crate::retry::RetryPolicy;

/// The admission of a bounded map over items `T`, as its `control`, `rate` and `retry`
/// see it: [`Window`] or [`PerKey`], nothing else (the methods that need it are on
/// [`BoundedMap`]).
pub trait Scheduling<T>: Sized {
    /// The key a [`MapControl`] of the map names: `()` without `per_key`.
    type Key;
    /// The admission after `rate`.
    type Rated;
    /// The admission after `retry` with a policy for errors `E`.
    type Retried<E>;

    /// `map` with the whole map's rate `rate`.
    fn rated<S: Stream<Item = T>, F, Fut: IntoFuture, D: Delivery>(
        map: BoundedMap<S, F, Fut, Self, D>,
        rate: Rate,
    ) -> BoundedMap<S, F, Fut, Self::Rated, D>;

    /// `map` retrying its failed items as `policy` says.
    fn retried<S: Stream<Item = T>, F, Fut: IntoFuture, D: Delivery, E>(
        map: BoundedMap<S, F, Fut, Self, D>,
        policy: RetryPolicy<T, E>,
    ) -> BoundedMap<S, F, Fut, Self::Retried<E>, D>
    where
        T: RetryItem;

    /// Attaches `control` to `map`: its engine (progress, drain, limits) and what the
    /// admission itself reads (the busiest keys' board, the settings of single keys).
    #[track_caller]
    fn attach<S, F, Fut: IntoFuture, D: Delivery>(
        map: &mut BoundedMap<S, F, Fut, Self, D>,
        control: &MapControl<Self::Key>,
    );
}

/// The admission of a bounded map over items `T` that `per_key` may give a key: the plain
/// [`Window`], and the scheduler of `rate` or `retry` without a key.
pub trait Keying<T>: Sized {
    /// The admission after `per_key` with keys `K` named by `KF`.
    type Keyed<K, KF>;

    /// `map` whose items of one key, as `key_fn` names it, run at most `limit` at once.
    fn keyed<S: Stream<Item = T>, F, Fut: IntoFuture, D: Delivery, K, KF>(
        map: BoundedMap<S, F, Fut, Self, D>,
        key_fn: KF,
        limit: usize,
    ) -> BoundedMap<S, F, Fut, Self::Keyed<K, KF>, D>
    where
        K: Hash + Eq + Clone,
        KF: FnMut(&T) -> K;
}

impl<T> Scheduling<T> for Window {
    type Key = ();
    type Rated = PerKey<T, (), Unkeyed<T>>;
    type Retried<E> = PerKey<T, (), Unkeyed<T>, RetryPolicy<T, E>>;

    fn rated<S: Stream<Item = T>, F, Fut: IntoFuture, D: Delivery>(
        map: BoundedMap<S, F, Fut, Self, D>,
        rate: Rate,
    ) -> BoundedMap<S, F, Fut, Self::Rated, D> {
        map.replace_admission(|_| {
            let mut admission = PerKey::unkeyed();
            admission.set_rate(rate);
            admission
        })
    }

    fn retried<S: Stream<Item = T>, F, Fut: IntoFuture, D: Delivery, E>(
        map: BoundedMap<S, F, Fut, Self, D>,
        policy: RetryPolicy<T, E>,
    ) -> BoundedMap<S, F, Fut, Self::Retried<E>, D>
    where
        T: RetryItem,
    {
        map.replace_admission(|_| PerKey::unkeyed().with_policy(policy))
    }

    #[track_caller]
    fn attach<S, F, Fut: IntoFuture, D: Delivery>(
        map: &mut BoundedMap<S, F, Fut, Self, D>,
        control: &MapControl,
    ) {
        map.engine_mut().attach(control.shared());
    }
}

impl<T, K: Hash + Eq + Clone, KF, P, G, C> Scheduling<T> for PerKey<T, K, KF, P, G, C> {
    type Key = K;
    type Rated = Self;
    type Retried<E> = PerKey<T, K, KF, RetryPolicy<T, E>, G, C>;

    fn rated<S: Stream<Item = T>, F, Fut: IntoFuture, D: Delivery>(
        mut map: BoundedMap<S, F, Fut, Self, D>,
        rate: Rate,
    ) -> BoundedMap<S, F, Fut, Self, D> {
        map.admission_mut().set_rate(rate);
        map
    }

    fn retried<S: Stream<Item = T>, F, Fut: IntoFuture, D: Delivery, E>(
        map: BoundedMap<S, F, Fut, Self, D>,
        policy: RetryPolicy<T, E>,
    ) -> BoundedMap<S, F, Fut, Self::Retried<E>, D>
    where
        T: RetryItem,
    {
        map.replace_admission(|admission| admission.with_policy(policy))
    }

    #[track_caller]
    fn attach<S, F, Fut: IntoFuture, D: Delivery>(
        map: &mut BoundedMap<S, F, Fut, Self, D>,
        control: &MapControl<K>,
    ) {
        let admission = map.admission_mut();
        admission.set_board(Arc::clone(control.key_board()));
        admission.set_key_changes(Arc::clone(control.key_changes()));
        map.engine_mut().attach(control.shared());
    }
}

impl<T> Keying<T> for Window {
    type Keyed<K, KF> = PerKey<T, K, KF>;

    #[track_caller]
    fn keyed<S: Stream<Item = T>, F, Fut: IntoFuture, D: Delivery, K, KF>(
        map: BoundedMap<S, F, Fut, Self, D>,
        key_fn: KF,
        limit: usize,
    ) -> BoundedMap<S, F, Fut, Self::Keyed<K, KF>, D>
    where
        K: Hash + Eq + Clone,
        KF: FnMut(&T) -> K,
    {
        map.replace_admission(|_| PerKey::new(key_fn, limit))
    }
}

impl<T, P> Keying<T> for PerKey<T, (), Unkeyed<T>, P, NoSharedLimits> {
    type Keyed<K, KF> = PerKey<T, K, KF, P>;

    #[track_caller]
    fn keyed<S: Stream<Item = T>, F, Fut: IntoFuture, D: Delivery, K, KF>(
        map: BoundedMap<S, F, Fut, Self, D>,
        key_fn: KF,
        limit: usize,
    ) -> BoundedMap<S, F, Fut, Self::Keyed<K, KF>, D>
    where
        K: Hash + Eq + Clone,
        KF: FnMut(&T) -> K,
    {
        check_default_key_limit(limit);
        map.replace_admission(|admission| admission.with_key(key_fn, limit))
    }
}
