//! What [`race`](super::race) accepts: [`IntoContestants`], for iterables of one future
//! type and for tuples of different ones (kept inline, a field each).

use super::blocks::Blocks;
use super::store::{self, Contestants};

mod sealed {
    /// Keeps [`IntoContestants`](super::IntoContestants) implemented only here, so its
    /// hidden method can change.
    pub trait Sealed<Marker> {}
}

/// Marks the [`IntoContestants`] impl for iterables of one future type.
#[derive(Debug)]
pub enum Iterable {}

/// Marks the [`IntoContestants`] impls for tuples of futures of different types.
#[derive(Debug)]
pub enum Tuple {}

/// What [`race`](crate::race) accepts: any `IntoIterator` of futures of one type (a `Vec`,
/// an array, `urls.iter().map(fetch)`), or a tuple of up to 12 futures of different types.
/// A contestant may be anything `IntoFuture` (a [`Race`](crate::futures::Race), a
/// [`Retry`](crate::futures::Retry) builder).
///
/// Every contestant resolves to `Result<Self::Ok, Self::Error>`, with the same `Ok` and
/// error types. Contestants are numbered in the order the iterator yields them, or by their
/// position in the tuple; [`RaceError`](crate::RaceError) reports errors with those numbers.
///
/// `Marker` only tells the two families of impls apart (`Iterable` and `Tuple`); it is
/// inferred, so you never write it. The trait is sealed.
///
/// # Examples
///
/// ```
/// use std::future::ready;
/// use tollgate::race;
///
/// # futures_lite::future::block_on(async {
/// // One type: a Vec, an array or any iterator.
/// let mirrors = vec![ready(Err("down")), ready(Ok(1))];
/// assert_eq!(race(mirrors).await.unwrap(), 1);
///
/// // Different types: a tuple.
/// let mixed = (ready(Err::<u32, _>("down")), async { Ok(2) });
/// assert_eq!(race(mixed).await.unwrap(), 2);
/// # });
/// ```
pub trait IntoContestants<Marker>: sealed::Sealed<Marker> + Sized {
    /// What the winner returns.
    type Ok;
    /// What a losing contestant returns.
    type Error;
    /// The contestants as the race's type names them: `[F]` for an iterable of futures of
    /// type `F`, `(F0, F1, ..)` for a tuple (each the `IntoFuture::IntoFuture` of what was
    /// passed).
    type Contestants: ?Sized + Contestants<Ok = Self::Ok, Error = Self::Error>;

    /// The contestants in their place in the race.
    #[doc(hidden)]
    fn into_store(self) -> <Self::Contestants as Contestants>::Store;
}

impl<I, T, E> sealed::Sealed<Iterable> for I
where
    I: IntoIterator,
    I::Item: IntoFuture<Output = Result<T, E>>,
{
}

impl<I, T, E> IntoContestants<Iterable> for I
where
    I: IntoIterator,
    I::Item: IntoFuture<Output = Result<T, E>>,
{
    type Ok = T;
    type Error = E;
    type Contestants = [<I::Item as IntoFuture>::IntoFuture];

    fn into_store(self) -> Blocks<<I::Item as IntoFuture>::IntoFuture, E> {
        Blocks::new(self.into_iter().map(IntoFuture::into_future))
    }
}

/// Implements `IntoContestants<Tuple>` for a tuple: its contestants go inline, in `$store`.
macro_rules! tuple_contestants {
    ($store:ident: $($ty:ident $var:ident),+) => {
        impl<$($ty,)+ T, E> sealed::Sealed<Tuple> for ($($ty,)+)
        where
            $($ty: IntoFuture<Output = Result<T, E>>,)+
        {
        }

        impl<$($ty,)+ T, E> IntoContestants<Tuple> for ($($ty,)+)
        where
            $($ty: IntoFuture<Output = Result<T, E>>,)+
        {
            type Ok = T;
            type Error = E;
            type Contestants = ($($ty::IntoFuture,)+);

            #[inline]
            fn into_store(self) -> store::$store<$($ty::IntoFuture,)+ E> {
                let ($($var,)+) = self;
                store::$store::new(($($var.into_future(),)+))
            }
        }
    };
}

tuple_contestants!(Tuple1: F0 f0);
tuple_contestants!(Tuple2: F0 f0, F1 f1);
tuple_contestants!(Tuple3: F0 f0, F1 f1, F2 f2);
tuple_contestants!(Tuple4: F0 f0, F1 f1, F2 f2, F3 f3);
tuple_contestants!(Tuple5: F0 f0, F1 f1, F2 f2, F3 f3, F4 f4);
tuple_contestants!(Tuple6: F0 f0, F1 f1, F2 f2, F3 f3, F4 f4, F5 f5);
tuple_contestants!(Tuple7: F0 f0, F1 f1, F2 f2, F3 f3, F4 f4, F5 f5, F6 f6);
tuple_contestants!(Tuple8: F0 f0, F1 f1, F2 f2, F3 f3, F4 f4, F5 f5, F6 f6, F7 f7);
tuple_contestants!(Tuple9: F0 f0, F1 f1, F2 f2, F3 f3, F4 f4, F5 f5, F6 f6, F7 f7, F8 f8);
tuple_contestants!(Tuple10: F0 f0, F1 f1, F2 f2, F3 f3, F4 f4, F5 f5, F6 f6, F7 f7, F8 f8, F9 f9);
tuple_contestants!(Tuple11:
    F0 f0, F1 f1, F2 f2, F3 f3, F4 f4, F5 f5, F6 f6, F7 f7, F8 f8, F9 f9, F10 f10);
tuple_contestants!(Tuple12:
    F0 f0, F1 f1, F2 f2, F3 f3, F4 f4, F5 f5, F6 f6, F7 f7, F8 f8, F9 f9, F10 f10, F11 f11);
