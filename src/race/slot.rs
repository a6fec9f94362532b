//! The place of one contestant ([`Slot`]) and what a race does with places ([`Visit`],
//! [`VisitEach`]): the leaf that the contestants' storage ([`store`](super::store), and
//! [`blocks`](super::blocks) for an iterable) and the race's poll all stand on.

use std::future::Future;
use std::ops::ControlFlow;
use std::pin::Pin;

pin_project_lite::pin_project! {
    /// The place of one contestant.
    #[project = SlotProj]
    #[project_replace = SlotOwn]
    pub enum Slot<F, E> {
        /// A contestant not done yet (maybe not started). Its waker, if it kept a clone of
        /// a lent one, is kept beside the wake set, so that a race that makes no wake set
        /// carries no room for it.
        Running { #[pin] future: F },
        /// A contestant that failed: its error, and how many had failed before it.
        Failed { error: E, order: usize },
        /// Nothing: a place past the last contestant, or one whose contestant has gone.
        Empty,
    }
}

impl<F, E> Slot<F, E> {
    /// A contestant not started yet.
    #[inline]
    pub(super) fn new(future: F) -> Self {
        Slot::Running { future }
    }
}

/// Something to do with one contestant's place, whatever the contestant's type.
pub trait Visit<T, E> {
    /// What it gives back.
    type Output;

    /// Does it to `slot`.
    fn visit<F>(self, slot: Pin<&mut Slot<F, E>>) -> Self::Output
    where
        F: Future<Output = Result<T, E>>;
}

/// Something to do with every contestant's place in turn, in order, until it breaks.
pub trait VisitEach<T, E> {
    /// What a break carries.
    type Break;

    /// Does it to `slot`, the place of contestant `index`.
    fn visit<F>(&mut self, index: usize, slot: Pin<&mut Slot<F, E>>) -> ControlFlow<Self::Break>
    where
        F: Future<Output = Result<T, E>>;
}
