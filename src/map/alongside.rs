//! [`Alongside`]: the consumer's work on an output, awaited while the map's attempts in
//! flight keep being polled.
//!
//! A stream only works while it is polled: a loop that awaits slow work between two
//! `next()` calls leaves every attempt in flight unpolled until the work ends (servers time
//! those requests out; futures holding a permit the work waits for deadlock it). The
//! future here polls the consumer's work and, while that waits, drives the map: woken
//! attempts are polled, their outputs go to the map's buffer (which counts against the
//! window, so nothing new starts once the buffer holds the window's worth) and freed slots
//! are refilled as the window allows. No task is spawned: both run on the task that awaits
//! the work.
//!
//! Invariants: the map never hands out an output here (the next `next()` does); a map
//! whose consumer works alongside counts none of that time against its attempts' latency.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_lite::Stream;
use pin_project_lite::pin_project;

/// A bounded map read as a stream, whose attempts in flight can be driven without handing
/// out an output: what [`alongside`](super::BoundedStreamExt::alongside) works on.
///
/// Implemented by the stream forms of every bounded map
/// ([`MapBounded`](super::MapBounded), [`MapUnordered`](super::MapUnordered), keyed or
/// not, indexed or not), by [`BoxedMap`](super::BoxedMap), and by a pinned reference or
/// box of any of them. Sealed: the crate implements it, nothing else can.
pub trait MapStream: Stream + sealed::Sealed {
    /// Polls the attempts in flight and refills freed slots as the window allows, keeping
    /// every finished output in the map's buffer; registers `cx` for the next wake-up.
    #[doc(hidden)]
    fn poll_work(self: Pin<&mut Self>, cx: &mut Context<'_>);

    /// Registers `cx` for the map's next wake-up without polling anything: `true` when
    /// nothing of the map waits to be polled now, `false` when something does.
    #[doc(hidden)]
    fn poll_park(self: Pin<&mut Self>, cx: &mut Context<'_>) -> bool;

    /// The consumer's work ended after the map was driven beside it: until the map is
    /// polled again, its outputs wait unseen (the time counts as handed out, not as the
    /// server's).
    #[doc(hidden)]
    fn work_done(self: Pin<&mut Self>);
}

pub(crate) mod sealed {
    /// Only the crate's maps are [`MapStream`](super::MapStream)s.
    pub trait Sealed {}
}

impl<P> sealed::Sealed for Pin<P>
where
    P: std::ops::DerefMut + Unpin,
    P::Target: MapStream,
{
}

impl<P> MapStream for Pin<P>
where
    P: std::ops::DerefMut + Unpin,
    P::Target: MapStream,
{
    #[inline]
    fn poll_work(self: Pin<&mut Self>, cx: &mut Context<'_>) {
        self.get_mut().as_mut().poll_work(cx);
    }

    #[inline]
    fn poll_park(self: Pin<&mut Self>, cx: &mut Context<'_>) -> bool {
        self.get_mut().as_mut().poll_park(cx)
    }

    #[inline]
    fn work_done(self: Pin<&mut Self>) {
        self.get_mut().as_mut().work_done();
    }
}

impl<M: MapStream + Unpin + ?Sized> sealed::Sealed for &mut M {}

impl<M: MapStream + Unpin + ?Sized> MapStream for &mut M {
    #[inline]
    fn poll_work(self: Pin<&mut Self>, cx: &mut Context<'_>) {
        Pin::new(&mut **self.get_mut()).poll_work(cx);
    }

    #[inline]
    fn poll_park(self: Pin<&mut Self>, cx: &mut Context<'_>) -> bool {
        Pin::new(&mut **self.get_mut()).poll_park(cx)
    }

    #[inline]
    fn work_done(self: Pin<&mut Self>) {
        Pin::new(&mut **self.get_mut()).work_done();
    }
}

pin_project! {
    /// Future for [`alongside`](super::BoundedStreamExt::alongside): the consumer's work,
    /// awaited while the map's attempts in flight keep being polled. Its output is the
    /// work's.
    ///
    /// # Cancel safety
    ///
    /// Dropping it drops the work and leaves the map as it was: what finished meanwhile
    /// waits in its buffer for the next `next()`.
    #[must_use = "futures do nothing unless polled"]
    pub struct Alongside<'a, M: ?Sized, W> {
        map: &'a mut M,
        #[pin]
        work: W,
        stage: Stage,
    }
}

/// How far an [`Alongside`] went with its map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// The work has not waited yet.
    Fresh,
    /// The work waited once: the map was registered for its wake-ups, not polled.
    Parked,
    /// The map was driven: from now on every poll drives it.
    Driven,
}

impl<'a, M: ?Sized, W> Alongside<'a, M, W> {
    pub(crate) fn new(map: &'a mut M, work: W) -> Self {
        Self {
            map,
            work,
            stage: Stage::Fresh,
        }
    }
}

impl<M, W> Future for Alongside<'_, M, W>
where
    M: MapStream + Unpin + ?Sized,
    W: Future,
{
    type Output = W::Output;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<W::Output> {
        let this = self.project();
        // The work first: a consumer that is ready at once costs one poll of it.
        if let Poll::Ready(output) = this.work.poll(cx) {
            if *this.stage == Stage::Driven {
                // (A map not driven since `next()` handed out its output is still handed
                // out from then: nothing to tell it.)
                Pin::new(&mut **this.map).work_done();
            }
            return Poll::Ready(output);
        }
        // The map's wake-ups and the work's reach the same task: whichever comes polls
        // both again.
        let map = Pin::new(&mut **this.map);
        if *this.stage == Stage::Fresh {
            // The work's first wait: work that pends once (a channel with room after a
            // wake-up, a lock handed over) is done by the next poll, and the map's woken
            // attempts are then polled by `next()` with the others, in one pass. The task
            // comes back at once for them either way: to drive the map if the work still
            // waits.
            *this.stage = Stage::Parked;
            if !map.poll_park(cx) {
                cx.waker().wake_by_ref();
            }
            return Poll::Pending;
        }
        *this.stage = Stage::Driven;
        map.poll_work(cx);
        Poll::Pending
    }
}

impl<M: ?Sized + std::fmt::Debug, W> std::fmt::Debug for Alongside<'_, M, W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Alongside")
            .field("map", &self.map)
            .finish_non_exhaustive()
    }
}
