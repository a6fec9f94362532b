//! A circuit breaker per key of a keyed map: what the map's type says about it (whether
//! items of an open key fail at once or wait), and the breaker settings the scheduler keeps.
//!
//! Each key's breaker is a `BreakerCore` in its entry, made at its first start; each
//! attempt carries the ticket its start was granted, and its outcome (the map's
//! classification: a failure and an overload both count bad) reports on it.

use std::fmt;
use std::marker::PhantomData;

use super::adapt::{Adapting, Classified, Classify};
use crate::limit::breaker::config::Breaker;
use crate::limit::breaker::core::{Refusal, Transition};
use crate::limit::breaker::error::CircuitBreakerError;
use crate::limit::outcome::Outcome;

/// While a key's breaker is open, its items end at once with a [`CircuitBreakerError`]
/// (converted into the map's error type): made by
/// [`breaker`](crate::futures::MapAsync::breaker).
#[derive(Debug, Clone, Copy, Default)]
pub struct FailWhenOpen;

/// While a key's breaker is open, its items wait, holding no slot, until a probe has closed
/// it: made by [`breaker_waiting`](crate::futures::MapAsync::breaker_waiting).
#[derive(Debug, Clone, Copy, Default)]
pub struct WaitWhenOpen;

/// The classification of a keyed map that a breaker per key can count: [`Classified`]
/// (made by [`classify`](crate::futures::MapAsync::classify)) or [`Adapting`] (made by
/// [`adaptive`](crate::futures::MapAsync::adaptive)). Sealed.
pub trait Classifying: sealed::Sealed {}

impl<F> Classifying for Classified<F> {}
impl<F> Classifying for Adapting<F> {}

mod sealed {
    pub trait Sealed {}
    impl<F> Sealed for super::Classified<F> {}
    impl<F> Sealed for super::Adapting<F> {}
}

/// What a map does with the items of a key whose breaker is open, for outputs `O`.
pub(crate) trait OpenMode<O> {
    /// The output of an item that fails at once.
    fn output(open: CircuitBreakerError) -> Option<O>;
}

impl<V, E: From<CircuitBreakerError>> OpenMode<Result<V, E>> for FailWhenOpen {
    fn output(open: CircuitBreakerError) -> Option<Result<V, E>> {
        Some(Err(E::from(open)))
    }
}

impl<O> OpenMode<O> for WaitWhenOpen {
    fn output(_open: CircuitBreakerError) -> Option<O> {
        None
    }
}

/// The classification `C` of a keyed map, with a circuit breaker per key counting its
/// outcomes; `M` says what the items of an open key do ([`FailWhenOpen`] or
/// [`WaitWhenOpen`]).
pub struct WithBreaker<C, M> {
    classify: C,
    mode: PhantomData<fn() -> M>,
}

impl<C, M> WithBreaker<C, M> {
    pub(crate) fn new(classify: C) -> Self {
        Self {
            classify,
            mode: PhantomData,
        }
    }
}

impl<C, M> fmt::Debug for WithBreaker<C, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WithBreaker").finish_non_exhaustive()
    }
}

impl<O, C: Classify<O>, M: OpenMode<O>> Classify<O> for WithBreaker<C, M> {
    const CLASSIFIES: bool = true;
    const ADAPTIVE: bool = C::ADAPTIVE;
    const BREAKS: bool = true;

    #[inline]
    fn classify(&mut self, output: &O) -> Option<Outcome> {
        self.classify.classify(output)
    }

    fn open(&mut self, open: CircuitBreakerError) -> Option<O> {
        M::output(open)
    }
}

/// A keyed map's breaker settings, and what it needs of its keys (rendered with `Debug`,
/// for the error and the event, without a `Debug` bound on every keyed map).
pub(crate) struct MapBreaker<K> {
    pub(super) config: Breaker,
    /// Whether items of an open key fail at once (else they wait).
    pub(super) fails: bool,
    /// The error for `key` refused at `now`.
    refused: fn(&K, Refusal, u64) -> CircuitBreakerError,
    /// Tells a transition of `key`'s breaker.
    emit: fn(&K, &Transition),
}

impl<K> MapBreaker<K> {
    pub(crate) fn new(config: Breaker, fails: bool) -> Self
    where
        K: fmt::Debug,
    {
        Self {
            config,
            fails,
            refused: |key, refusal, now| CircuitBreakerError::new(refusal, now, Some(key)),
            emit: |key, transition| transition.emit(Some(key)),
        }
    }

    pub(super) fn refused(&self, key: &K, refusal: Refusal, now: u64) -> CircuitBreakerError {
        (self.refused)(key, refusal, now)
    }

    pub(super) fn tell(&self, key: &K, transition: Option<Transition>) {
        if let Some(transition) = transition {
            (self.emit)(key, &transition);
        }
    }
}

impl<K> fmt::Debug for MapBreaker<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MapBreaker")
            .field("config", &self.config)
            .field("fails", &self.fails)
            .finish_non_exhaustive()
    }
}
