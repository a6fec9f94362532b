//! Where a bounded map's outputs go, as a type parameter of the one map type
//! ([`BoundedMap`](super::BoundedMap)): yielded as a stream in input order
//! ([`InputOrder`]) or completion order ([`CompletionOrder`]), or collected into a vector
//! ([`Collected`], [`TryCollected`] that stops at the first error, [`Gathered`]).
//!
//! A delivery names the buffer the engine hands outputs to (from `results.rs`), what the
//! map holds beside it (the result vector of a collecting map) and whether the outputs
//! keep input order, which sets the default window. Everything else (the builder methods,
//! the engine) is written once for every delivery.

use std::marker::PhantomData;

use super::results::{InCompletionOrder, InOrder, Indexed, OutputForm, Plain, output_vec};

/// Where a [`BoundedMap`](super::BoundedMap) delivers its outputs: the type parameter that
/// makes it a [`MapAsync`](super::MapAsync), a [`TryMapAsync`](super::TryMapAsync), a
/// [`GatherLimit`](super::GatherLimit), a [`MapBounded`](super::MapBounded) or a
/// [`MapUnordered`](super::MapUnordered).
///
/// Sealed: implemented by [`InputOrder`], [`CompletionOrder`], [`Collected`],
/// [`TryCollected`] and [`Gathered`] only. A user names it only to write a map type out in
/// full.
///
/// # Examples
///
/// ```
/// use tollgate::futures::{BoundedMap, MapAsync};
/// use tollgate::map_type::{Collected, Window};
///
/// fn same<I, F, Fut>(map: MapAsync<I, F, Fut>) -> BoundedMap<futures_lite::stream::Iter<I>, F, Fut, Window, Collected>
/// where
///     Fut: std::future::IntoFuture,
/// {
///     map // the same type
/// }
/// # let _ = same(tollgate::map_async(0..3, 2, |n| async move { n }));
/// ```
pub trait Delivery: sealed::Sealed {
    /// The form of each output ([`Plain`] or [`Indexed`]).
    type Form: OutputForm;
    /// The same delivery with each output paired with its input position.
    #[doc(hidden)]
    type Indexed: Delivery;
    /// Where the engine hands the outputs of type `O`.
    #[doc(hidden)]
    type Buffer<O>;
    /// What the map holds beside the buffer: the result vector of a collecting map.
    #[doc(hidden)]
    type Held<O>;
    /// Whether outputs keep input order (the default window depends on it).
    #[doc(hidden)]
    const ORDERED: bool;
    /// The public type's name, for `Debug` and panic messages.
    #[doc(hidden)]
    const NAME: &'static str;
    /// An empty buffer and what is held beside it, for an input of at least `expected`
    /// items.
    #[doc(hidden)]
    fn start<O>(expected: usize) -> (Self::Buffer<O>, Self::Held<O>);
    /// The same empty buffer, for [`Self::Indexed`].
    #[doc(hidden)]
    fn index_buffer<O>(buffer: Self::Buffer<O>) -> <Self::Indexed as Delivery>::Buffer<O>;
    /// What is held, emptied, for [`Self::Indexed`].
    #[doc(hidden)]
    fn index_held<O>(held: Self::Held<O>) -> <Self::Indexed as Delivery>::Held<O>;
}

mod sealed {
    pub trait Sealed {}
    impl<M> Sealed for super::InputOrder<M> {}
    impl<M> Sealed for super::CompletionOrder<M> {}
    impl<M> Sealed for super::Collected<M> {}
    impl<T, E, M> Sealed for super::TryCollected<T, E, M> {}
    impl Sealed for super::Gathered {}
}

/// A stream of outputs in input order, each in the form `M`: [`MapBounded`](super::MapBounded).
#[derive(Debug)]
pub struct InputOrder<M = Plain> {
    _form: PhantomData<fn() -> M>,
}

/// A stream of outputs in completion order, each in the form `M`:
/// [`MapUnordered`](super::MapUnordered).
#[derive(Debug)]
pub struct CompletionOrder<M = Plain> {
    _form: PhantomData<fn() -> M>,
}

/// Every output collected into a vector in input order, each in the form `M`:
/// [`MapAsync`](super::MapAsync).
#[derive(Debug)]
pub struct Collected<M = Plain> {
    _form: PhantomData<fn() -> M>,
}

/// The `Ok` values of `Result<T, E>` outputs collected into a vector in input order, each
/// in the form `M`; the first `Err` stops the map: [`TryMapAsync`](super::TryMapAsync).
#[derive(Debug)]
pub struct TryCollected<T, E, M = Plain> {
    _values: PhantomData<fn() -> (T, E)>,
    _form: PhantomData<fn() -> M>,
}

/// The outputs of futures given as the items collected into a vector in input order:
/// [`GatherLimit`](super::GatherLimit).
#[derive(Debug)]
pub struct Gathered {
    _private: (),
}

impl<M: OutputForm> Delivery for InputOrder<M> {
    type Form = M;
    type Indexed = InputOrder<Indexed>;
    type Buffer<O> = InOrder<O, M>;
    type Held<O> = ();
    const ORDERED: bool = true;
    const NAME: &'static str = "MapBounded";

    fn start<O>(_expected: usize) -> (InOrder<O, M>, ()) {
        (InOrder::new(), ())
    }
    fn index_buffer<O>(buffer: InOrder<O, M>) -> InOrder<O, Indexed> {
        buffer.reform()
    }
    fn index_held<O>(held: ()) {
        held
    }
}

impl<M: OutputForm> Delivery for CompletionOrder<M> {
    type Form = M;
    type Indexed = CompletionOrder<Indexed>;
    type Buffer<O> = InCompletionOrder<O, M>;
    type Held<O> = ();
    const ORDERED: bool = false;
    const NAME: &'static str = "MapUnordered";

    fn start<O>(_expected: usize) -> (InCompletionOrder<O, M>, ()) {
        (InCompletionOrder::new(), ())
    }
    fn index_buffer<O>(buffer: InCompletionOrder<O, M>) -> InCompletionOrder<O, Indexed> {
        buffer.reform()
    }
    fn index_held<O>(held: ()) {
        held
    }
}

impl<M: OutputForm> Delivery for Collected<M> {
    type Form = M;
    type Indexed = Collected<Indexed>;
    type Buffer<O> = InOrder<O>;
    type Held<O> = Vec<M::Output<O>>;
    const ORDERED: bool = true;
    const NAME: &'static str = "MapAsync";

    fn start<O>(expected: usize) -> (InOrder<O>, Vec<M::Output<O>>) {
        (InOrder::new(), output_vec(expected))
    }
    fn index_buffer<O>(buffer: InOrder<O>) -> InOrder<O> {
        buffer
    }
    fn index_held<O>(held: Vec<M::Output<O>>) -> Vec<(usize, O)> {
        Vec::with_capacity(held.capacity())
    }
}

impl<T, E, M: OutputForm> Delivery for TryCollected<T, E, M> {
    type Form = M;
    type Indexed = TryCollected<T, E, Indexed>;
    type Buffer<O> = InOrder<O>;
    type Held<O> = (Vec<M::Output<T>>, Option<E>);
    const ORDERED: bool = true;
    const NAME: &'static str = "TryMapAsync";

    fn start<O>(expected: usize) -> (InOrder<O>, (Vec<M::Output<T>>, Option<E>)) {
        (InOrder::new(), (output_vec(expected), None))
    }
    fn index_buffer<O>(buffer: InOrder<O>) -> InOrder<O> {
        buffer
    }
    fn index_held<O>((out, error): (Vec<M::Output<T>>, Option<E>)) -> (Vec<(usize, T)>, Option<E>) {
        (Vec::with_capacity(out.capacity()), error)
    }
}

impl Delivery for Gathered {
    type Form = Plain;
    // A gathering map has no `indexed` (it is a map without a function); were it asked,
    // this is what it would be.
    type Indexed = Collected<Indexed>;
    type Buffer<O> = InOrder<O>;
    type Held<O> = Vec<O>;
    const ORDERED: bool = true;
    const NAME: &'static str = "GatherLimit";

    fn start<O>(expected: usize) -> (InOrder<O>, Vec<O>) {
        (InOrder::new(), output_vec(expected))
    }
    fn index_buffer<O>(buffer: InOrder<O>) -> InOrder<O> {
        buffer
    }
    fn index_held<O>(held: Vec<O>) -> Vec<(usize, O)> {
        Vec::with_capacity(held.capacity())
    }
}
