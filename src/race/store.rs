//! Where a race keeps its contestants, pinned in place: [`Contestants`], the one trait a
//! [`Race`](super::Race) is generic over.
//!
//! A tuple's contestants live inline, one field each (no allocation); an iterable's in
//! [`Blocks`](super::blocks::Blocks). The race reaches one
//! contestant at a time through [`Visit`], a visitor generic over the contestant's type,
//! since a tuple's contestants have a type each ([`slot`](super::slot) defines both).

use std::future::Future;
use std::ops::ControlFlow;
use std::pin::Pin;

use super::blocks::Blocks;
use super::slot::{Slot, Visit, VisitEach};

/// The contestants of a race, as its type parameter names them: `[F]` for any number of
/// one future type `F`, `(F0, F1, ..)` for a tuple of up to 12 types. Implemented here
/// only (the module is private), so it can change.
pub trait Contestants {
    /// What the winner returns.
    type Ok;
    /// What a losing contestant returns.
    type Error;
    /// Where they are kept: pinned with the race.
    type Store;

    /// Whether a race of these is a select loop (see [`Race`](super::Race)'s poll): polls
    /// every running contestant with the race's own waker on every poll, and never makes
    /// a wake set.
    fn is_select_loop(store: &Self::Store) -> bool;

    /// How many contestants there are.
    fn len(store: &Self::Store) -> usize;

    /// Does `visit` to contestant `index` (below [`len`](Self::len)).
    fn visit<V>(store: Pin<&mut Self::Store>, index: usize, visit: V) -> V::Output
    where
        V: Visit<Self::Ok, Self::Error>;

    /// Does `visit` to every contestant in order, until it breaks: a select loop's
    /// round, without finding each place from its index.
    fn for_each<V>(store: Pin<&mut Self::Store>, visit: &mut V) -> ControlFlow<V::Break>
    where
        V: VisitEach<Self::Ok, Self::Error>;

    /// Drops every contestant and every error.
    fn clear(store: Pin<&mut Self::Store>);
}

/// An iterable race of up to this many contestants is a select loop: for so few, telling
/// the woken ones apart costs more than polling them all.
pub(super) const SELECT_LOOP_MAX: usize = 4;

impl<F, T, E> Contestants for [F]
where
    F: Future<Output = Result<T, E>>,
{
    type Ok = T;
    type Error = E;
    type Store = Blocks<F, E>;

    #[inline]
    fn is_select_loop(store: &Self::Store) -> bool {
        store.len() <= SELECT_LOOP_MAX
    }

    #[inline]
    fn len(store: &Self::Store) -> usize {
        store.len()
    }

    #[inline]
    fn visit<V>(store: Pin<&mut Self::Store>, index: usize, visit: V) -> V::Output
    where
        V: Visit<T, E>,
    {
        visit.visit(store.place(index))
    }

    #[inline]
    fn for_each<V>(store: Pin<&mut Self::Store>, visit: &mut V) -> ControlFlow<V::Break>
    where
        V: VisitEach<T, E>,
    {
        store.for_each(visit)
    }

    fn clear(store: Pin<&mut Self::Store>) {
        store.clear();
    }
}

/// Makes the inline store of a tuple of `$len` contestants (a pinned field each) and the
/// tuple's [`Contestants`] impl.
macro_rules! tuple_store {
    ($name:ident $len:literal: $($future:ident $place:ident $index:literal),+) => {
        pin_project_lite::pin_project! {
            /// The contestants of a tuple, inline.
            pub struct $name<$($future,)+ E> {
                $(#[pin] $place: Slot<$future, E>,)+
            }
        }

        impl<$($future,)+ E> $name<$($future,)+ E> {
            #[inline]
            pub(super) fn new(($($place,)+): ($($future,)+)) -> Self {
                Self { $($place: Slot::new($place),)+ }
            }
        }

        impl<$($future,)+ T, E> Contestants for ($($future,)+)
        where
            $($future: Future<Output = Result<T, E>>,)+
        {
            type Ok = T;
            type Error = E;
            type Store = $name<$($future,)+ E>;

            #[inline]
            fn is_select_loop(_: &Self::Store) -> bool {
                // At most 12: a select loop, as every tuple race (futures-concurrency's,
                // futures-lite's) is.
                true
            }

            #[inline]
            fn len(_: &Self::Store) -> usize {
                $len
            }

            #[inline]
            fn visit<V>(store: Pin<&mut Self::Store>, index: usize, visit: V) -> V::Output
            where
                V: Visit<T, E>,
            {
                let store = store.project();
                match index {
                    $($index => visit.visit(store.$place),)+
                    _ => unreachable!("no contestant {index} in a tuple of {}", $len),
                }
            }

            #[inline]
            fn for_each<V>(store: Pin<&mut Self::Store>, visit: &mut V) -> ControlFlow<V::Break>
            where
                V: VisitEach<T, E>,
            {
                let store = store.project();
                $(visit.visit($index, store.$place)?;)+
                ControlFlow::Continue(())
            }

            fn clear(store: Pin<&mut Self::Store>) {
                let store = store.project();
                $({ let mut place = store.$place; place.set(Slot::Empty); })+
            }
        }
    };
}

tuple_store!(Tuple1 1: F0 p0 0);
tuple_store!(Tuple2 2: F0 p0 0, F1 p1 1);
tuple_store!(Tuple3 3: F0 p0 0, F1 p1 1, F2 p2 2);
tuple_store!(Tuple4 4: F0 p0 0, F1 p1 1, F2 p2 2, F3 p3 3);
tuple_store!(Tuple5 5: F0 p0 0, F1 p1 1, F2 p2 2, F3 p3 3, F4 p4 4);
tuple_store!(Tuple6 6: F0 p0 0, F1 p1 1, F2 p2 2, F3 p3 3, F4 p4 4, F5 p5 5);
tuple_store!(Tuple7 7: F0 p0 0, F1 p1 1, F2 p2 2, F3 p3 3, F4 p4 4, F5 p5 5, F6 p6 6);
tuple_store!(Tuple8 8: F0 p0 0, F1 p1 1, F2 p2 2, F3 p3 3, F4 p4 4, F5 p5 5, F6 p6 6, F7 p7 7);
tuple_store!(Tuple9 9:
    F0 p0 0, F1 p1 1, F2 p2 2, F3 p3 3, F4 p4 4, F5 p5 5, F6 p6 6, F7 p7 7, F8 p8 8);
tuple_store!(Tuple10 10:
    F0 p0 0, F1 p1 1, F2 p2 2, F3 p3 3, F4 p4 4, F5 p5 5, F6 p6 6, F7 p7 7, F8 p8 8, F9 p9 9);
tuple_store!(Tuple11 11:
    F0 p0 0, F1 p1 1, F2 p2 2, F3 p3 3, F4 p4 4, F5 p5 5, F6 p6 6, F7 p7 7, F8 p8 8, F9 p9 9,
    F10 p10 10);
tuple_store!(Tuple12 12:
    F0 p0 0, F1 p1 1, F2 p2 2, F3 p3 3, F4 p4 4, F5 p5 5, F6 p6 6, F7 p7 7, F8 p8 8, F9 p9 9,
    F10 p10 10, F11 p11 11);
