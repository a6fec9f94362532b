//! How a keyed map reads its attempts' outputs ([`Fixed`]: not at all; [`Classified`]: into
//! an [`Outcome`] for the parts that hear outcomes: a server's hints, adaptation, a
//! breaker), and what an item of a key whose breaker is open outputs ([`WaitWhenOpen`],
//! [`FailWhenOpen`]).
//!
//! The map's type says only how outputs are read and written; which parts the map has is
//! its scheduler's (`parts.rs`). A map that reads no outcome ([`Fixed`]) compiles every
//! hook that hears one to nothing: no clock read and no call.

use std::marker::PhantomData;

use crate::limit::breaker::error::CircuitBreakerError;
use crate::limit::outcome::Outcome;

/// How a keyed map reads an attempt's output `O`, and what an item of a key whose breaker
/// is open outputs on a map where such items fail.
pub(crate) trait Classify<O> {
    /// Whether the map reads outcomes at all (every hook that hears one is skipped when
    /// not).
    const CLASSIFIES: bool;
    /// What the attempt's output says; `None` on a map that reads no outcome.
    fn classify(&mut self, output: &O) -> Option<Outcome>;
    /// The output of an item whose key's breaker is open, on a map where such items fail
    /// at once; `None` where they wait.
    fn open(&mut self, _open: CircuitBreakerError) -> Option<O> {
        None
    }
}

/// A keyed map that reads no outcome (the default): its keys keep the limits and rates
/// they are given.
#[derive(Debug, Default, Clone, Copy)]
pub struct Fixed;

impl<O> Classify<O> for Fixed {
    const CLASSIFIES: bool = false;

    #[inline(always)]
    fn classify(&mut self, _output: &O) -> Option<Outcome> {
        None
    }
}

/// A keyed map that reads each attempt's output into an [`Outcome`] with the function
/// `C`, made by [`classify`](crate::futures::BoundedMap::classify) or
/// [`adaptive`](crate::futures::BoundedMap::adaptive): the outcome's hint applies to its
/// key, and adaptive keys and breakers count it. `M` says what the items of a key whose
/// breaker is open do: wait ([`WaitWhenOpen`], also on a map without breakers), or end at
/// once ([`FailWhenOpen`](super::FailWhenOpen), after
/// [`breaker`](crate::futures::BoundedMap::breaker)).
pub struct Classified<C, M = WaitWhenOpen> {
    classify: C,
    mode: PhantomData<fn() -> M>,
}

impl<C, M> Classified<C, M> {
    pub(crate) fn new(classify: C) -> Self {
        Self {
            classify,
            mode: PhantomData,
        }
    }

    /// The same classification, its open keys' items doing as `N` says.
    pub(crate) fn with_mode<N>(self) -> Classified<C, N> {
        Classified::new(self.classify)
    }
}

impl<C, M> std::fmt::Debug for Classified<C, M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Classified").finish_non_exhaustive()
    }
}

impl<O, C: FnMut(&O) -> Outcome, M: OpenMode<O>> Classify<O> for Classified<C, M> {
    const CLASSIFIES: bool = true;

    #[inline]
    fn classify(&mut self, output: &O) -> Option<Outcome> {
        Some((self.classify)(output))
    }

    fn open(&mut self, open: CircuitBreakerError) -> Option<O> {
        M::output(open)
    }
}

/// While a key's breaker is open, its items end at once with a [`CircuitBreakerError`]
/// (converted into the map's error type): the open mode of
/// [`breaker`](crate::futures::BoundedMap::breaker).
#[derive(Debug, Clone, Copy, Default)]
pub struct FailWhenOpen;

/// While a key's breaker is open, its items wait, holding no slot, until a probe has closed
/// it: the open mode of [`breaker_waiting`](crate::futures::BoundedMap::breaker_waiting),
/// and of a map without breakers.
#[derive(Debug, Clone, Copy, Default)]
pub struct WaitWhenOpen;

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
