//! What [`race`](super::race) accepts: [`IntoContestants`], for iterables of one future
//! type and for tuples of different ones (stored as nested [`Either`]s).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

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
    /// One contestant as the race stores it.
    type Future: Future<Output = Result<Self::Ok, Self::Error>>;

    /// Hands every contestant to `push`, in index order.
    #[doc(hidden)]
    fn push_into(self, push: &mut impl FnMut(Self::Future));
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
    type Future = <I::Item as IntoFuture>::IntoFuture;

    fn push_into(self, push: &mut impl FnMut(Self::Future)) {
        for contestant in self {
            push(contestant.into_future());
        }
    }
}

pin_project_lite::pin_project! {
    /// One of two futures with the same output: how [`race`](crate::race) stores the
    /// contestants of a tuple, which have different types, in one list.
    ///
    /// A tuple `(a, b, c)` becomes `left(a)`, `right(left(b))` and `right(right(c))`.
    /// It shows up only in the type of such a race.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::future::{Ready, ready};
    /// use tollgate::futures::{Either, Race};
    ///
    /// type R = Result<u8, ()>;
    /// let race: Race<Either<Ready<R>, Ready<R>>, ()> = tollgate::race((ready(Err(())), ready(Ok(1))));
    /// # assert_eq!(futures_lite::future::block_on(race), Ok(1));
    /// ```
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    pub struct Either<L, R> {
        #[pin]
        side: Side<L, R>,
    }
}

pin_project_lite::pin_project! {
    #[project = SideProj]
    enum Side<L, R> {
        Left { #[pin] future: L },
        Right { #[pin] future: R },
    }
}

impl<L, R> Either<L, R> {
    fn left(future: L) -> Self {
        Self {
            side: Side::Left { future },
        }
    }

    fn right(future: R) -> Self {
        Self {
            side: Side::Right { future },
        }
    }
}

impl<L, R> fmt::Debug for Either<L, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let side = match self.side {
            Side::Left { .. } => "Left",
            Side::Right { .. } => "Right",
        };
        f.debug_struct("Either")
            .field("side", &side)
            .finish_non_exhaustive()
    }
}

impl<L, R> Future for Either<L, R>
where
    L: Future,
    R: Future<Output = L::Output>,
{
    type Output = L::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<L::Output> {
        match self.project().side.project() {
            SideProj::Left { future } => future.poll(cx),
            SideProj::Right { future } => future.poll(cx),
        }
    }
}

impl<A, T, E> sealed::Sealed<Tuple> for (A,) where A: IntoFuture<Output = Result<T, E>> {}

impl<A, T, E> IntoContestants<Tuple> for (A,)
where
    A: IntoFuture<Output = Result<T, E>>,
{
    type Ok = T;
    type Error = E;
    type Future = A::IntoFuture;

    fn push_into(self, push: &mut impl FnMut(Self::Future)) {
        push(self.0.into_future());
    }
}

/// Implements `IntoContestants<Tuple>` for `(A, B, ...)` in terms of the tuple one shorter:
/// the head becomes `Either::Left`, every contestant of the tail is wrapped in `Either::Right`.
macro_rules! tuple_contestants {
    ($head:ident $head_var:ident, $($tail:ident $tail_var:ident),+) => {
        impl<$head, $($tail,)+ T, E> sealed::Sealed<Tuple> for ($head, $($tail,)+)
        where
            $head: IntoFuture<Output = Result<T, E>>,
            $($tail: IntoFuture<Output = Result<T, E>>,)+
        {
        }

        impl<$head, $($tail,)+ T, E> IntoContestants<Tuple> for ($head, $($tail,)+)
        where
            $head: IntoFuture<Output = Result<T, E>>,
            $($tail: IntoFuture<Output = Result<T, E>>,)+
        {
            type Ok = T;
            type Error = E;
            type Future = Either<
                $head::IntoFuture,
                <($($tail,)+) as IntoContestants<Tuple>>::Future,
            >;

            fn push_into(self, push: &mut impl FnMut(Self::Future)) {
                let ($head_var, $($tail_var,)+) = self;
                push(Either::left($head_var.into_future()));
                ($($tail_var,)+).push_into(&mut |future| push(Either::right(future)));
            }
        }
    };
}

tuple_contestants!(F0 f0, F1 f1);
tuple_contestants!(F0 f0, F1 f1, F2 f2);
tuple_contestants!(F0 f0, F1 f1, F2 f2, F3 f3);
tuple_contestants!(F0 f0, F1 f1, F2 f2, F3 f3, F4 f4);
tuple_contestants!(F0 f0, F1 f1, F2 f2, F3 f3, F4 f4, F5 f5);
tuple_contestants!(F0 f0, F1 f1, F2 f2, F3 f3, F4 f4, F5 f5, F6 f6);
tuple_contestants!(F0 f0, F1 f1, F2 f2, F3 f3, F4 f4, F5 f5, F6 f6, F7 f7);
tuple_contestants!(F0 f0, F1 f1, F2 f2, F3 f3, F4 f4, F5 f5, F6 f6, F7 f7, F8 f8);
tuple_contestants!(F0 f0, F1 f1, F2 f2, F3 f3, F4 f4, F5 f5, F6 f6, F7 f7, F8 f8, F9 f9);
tuple_contestants!(F0 f0, F1 f1, F2 f2, F3 f3, F4 f4, F5 f5, F6 f6, F7 f7, F8 f8, F9 f9, F10 f10);
tuple_contestants!(F0 f0, F1 f1, F2 f2, F3 f3, F4 f4, F5 f5, F6 f6, F7 f7, F8 f8, F9 f9, F10 f10, F11 f11);
