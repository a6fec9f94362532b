//! Where a bounded map's finished outputs go: a reorder buffer (input order), a queue
//! (completion order), or straight into the collected vector (in input order, stopping at
//! the first error for `try_map_async`).
//!
//! Each consumer also says how many items have left the map (yielded or collected): the
//! engine counts the window from there.
//!
//! The engine hands each output over with its input position; the map's [`OutputForm`]
//! makes what leaves the map from the two (the output alone, or the pair), where the
//! output enters the result vector or the completion-order queue, or where it leaves the
//! reorder buffer (whose head is its position).

use std::collections::VecDeque;
use std::fmt;
use std::marker::PhantomData;
use std::ops::ControlFlow;

/// The form in which a bounded map hands out each output: as it is ([`Plain`], the
/// default) or paired with its item's input position ([`Indexed`], after
/// [`.indexed()`](crate::futures::MapAsync::indexed)).
///
/// A type parameter of every bounded map, so that a map that does not ask for positions
/// pays nothing for them. Sealed: implemented by [`Plain`] and [`Indexed`] only.
pub trait OutputForm: sealed::Sealed {
    /// What the map hands out for an output of type `O`.
    type Output<O>;

    /// The output of the item at input position `seq`, in this form.
    #[doc(hidden)]
    fn make<O>(seq: usize, output: O) -> Self::Output<O>;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::Plain {}
    impl Sealed for super::Indexed {}
}

/// The default [`OutputForm`] of a bounded map: each output as it is.
#[derive(Debug, Default, Clone, Copy)]
pub struct Plain {
    _private: (),
}

impl OutputForm for Plain {
    type Output<O> = O;

    #[inline(always)]
    fn make<O>(_seq: usize, output: O) -> O {
        output
    }
}

/// The [`OutputForm`] of a map after [`.indexed()`](crate::futures::MapAsync::indexed):
/// each output paired with its item's input position, `(position, output)`, 0 for the
/// first item.
#[derive(Debug, Default, Clone, Copy)]
pub struct Indexed {
    _private: (),
}

impl OutputForm for Indexed {
    type Output<O> = (usize, O);

    #[inline(always)]
    fn make<O>(seq: usize, output: O) -> (usize, O) {
        (seq, output)
    }
}

/// A consumer of finished outputs, told each output's input position.
pub(crate) trait Results<T> {
    /// Whether [`accept`](Self::accept) may release items (collecting in order does; a
    /// buffer releases only when an output is taken from it).
    const RELEASES_ON_ACCEPT: bool;
    /// Takes the output of item `seq`. Breaking stops the whole map (fail-fast).
    fn accept(&mut self, seq: usize, value: T) -> ControlFlow<()>;
    /// How many items have left the map (yielded or collected): the window is counted
    /// from here.
    fn released(&self) -> usize;
    /// Item `seq` will never have an output (a drain dropped it unstarted): outputs
    /// after it need not wait for it.
    fn skip(&mut self, seq: usize);
}

/// A buffer a stream yields from.
pub(crate) trait Buffer<T>: Results<T> {
    /// What the stream yields: the output, or the output with its position.
    type Out;
    fn pop(&mut self) -> Option<Self::Out>;
    /// Outputs held (for input order, also the gaps before them): at least what `pop`
    /// can still hand out without more work.
    fn backlog(&self) -> usize;
}

/// A place in the reorder buffer.
enum Place<T> {
    /// The item has not finished.
    Empty,
    Done(T),
    /// The item will never finish: a drain dropped it unstarted.
    Skipped,
}

/// The reorder buffer: `waiting[k]` is the place of item `head + k`. A stream yields
/// its outputs in the form `M`.
pub struct InOrder<T, M = Plain> {
    waiting: VecDeque<Place<T>>,
    head: usize,
    form: PhantomData<M>,
}

impl<T, M> InOrder<T, M> {
    pub(crate) fn new() -> Self {
        Self {
            waiting: VecDeque::new(),
            head: 0,
            form: PhantomData,
        }
    }

    /// The same empty buffer, yielding in another form.
    pub(crate) fn reform<N>(self) -> InOrder<T, N> {
        debug_assert!(self.head == 0 && self.waiting.is_empty());
        InOrder::new()
    }

    /// The next output in input order with its position, if it finished.
    #[inline]
    fn pop_at(&mut self) -> Option<(usize, T)> {
        let Place::Done(_) = self.waiting.front()? else {
            return None;
        };
        let Some(Place::Done(value)) = self.waiting.pop_front() else {
            unreachable!("the front was just seen done")
        };
        let seq = self.head;
        self.head += 1;
        if let Some(Place::Skipped) = self.waiting.front() {
            self.pass_skipped();
        }
        Some((seq, value))
    }
    /// Stores an output that is not the next one after the last stored: leaves gaps
    /// (`None`) for the items before it.
    #[cold]
    fn accept_out_of_line(&mut self, k: usize, place: Place<T>) {
        if k < self.waiting.len() {
            self.waiting[k] = place;
        } else {
            self.waiting.resize_with(k, || Place::Empty);
            self.waiting.push_back(place);
        }
    }

    /// Drops the skipped places at the front.
    #[cold]
    fn pass_skipped(&mut self) {
        while let Some(Place::Skipped) = self.waiting.front() {
            self.waiting.pop_front();
            self.head += 1;
        }
    }
}

impl<T, M> fmt::Debug for InOrder<T, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InOrder")
            .field("head", &self.head)
            .field("waiting", &self.waiting.len())
            .finish()
    }
}

impl<T, M> Results<T> for InOrder<T, M> {
    const RELEASES_ON_ACCEPT: bool = false;

    #[inline(always)]
    fn accept(&mut self, seq: usize, value: T) -> ControlFlow<()> {
        let k = seq - self.head;
        if k == self.waiting.len() {
            self.waiting.push_back(Place::Done(value));
        } else {
            self.accept_out_of_line(k, Place::Done(value));
        }
        ControlFlow::Continue(())
    }

    #[inline]
    fn released(&self) -> usize {
        self.head
    }

    fn skip(&mut self, seq: usize) {
        self.accept_out_of_line(seq - self.head, Place::Skipped);
        self.pass_skipped();
    }
}

impl<T, M: OutputForm> Buffer<T> for InOrder<T, M> {
    type Out = M::Output<T>;

    #[inline]
    fn pop(&mut self) -> Option<M::Output<T>> {
        let (seq, value) = self.pop_at()?;
        Some(M::make(seq, value))
    }

    #[inline]
    fn backlog(&self) -> usize {
        self.waiting.len()
    }
}

/// Outputs in the order they finished, each in the form `M` from the moment it came in.
///
/// Two vectors instead of a ring buffer (half the instructions per output): finished
/// outputs are pushed on `incoming`; `outgoing` holds older ones, the next one last, and
/// when it runs dry `incoming` is reversed into its place.
pub struct InCompletionOrder<T, M: OutputForm = Plain> {
    incoming: Vec<M::Output<T>>,
    outgoing: Vec<M::Output<T>>,
    yielded: usize,
}

impl<T, M: OutputForm> InCompletionOrder<T, M> {
    pub(crate) fn new() -> Self {
        Self {
            incoming: Vec::new(),
            outgoing: Vec::new(),
            yielded: 0,
        }
    }

    /// The same empty queue, holding outputs in another form.
    pub(crate) fn reform<N: OutputForm>(self) -> InCompletionOrder<T, N> {
        debug_assert!(self.yielded == 0 && self.backlog() == 0);
        InCompletionOrder::new()
    }

    /// `outgoing` is empty: the outputs that came in since become the outgoing ones.
    #[inline(never)]
    fn turn(&mut self) -> Option<M::Output<T>> {
        if self.incoming.is_empty() {
            return None;
        }
        std::mem::swap(&mut self.incoming, &mut self.outgoing);
        self.outgoing.reverse();
        let value = self.outgoing.pop();
        self.yielded += 1;
        value
    }
}

impl<T, M: OutputForm> fmt::Debug for InCompletionOrder<T, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InCompletionOrder")
            .field("backlog", &self.backlog())
            .field("yielded", &self.yielded)
            .finish()
    }
}

impl<T, M: OutputForm> Results<T> for InCompletionOrder<T, M> {
    const RELEASES_ON_ACCEPT: bool = false;

    #[inline]
    fn accept(&mut self, seq: usize, value: T) -> ControlFlow<()> {
        self.incoming.push(M::make(seq, value));
        ControlFlow::Continue(())
    }

    #[inline]
    fn released(&self) -> usize {
        self.yielded
    }

    fn skip(&mut self, _seq: usize) {
        // Counted as handed out: it holds no place in the window.
        self.yielded += 1;
    }
}

impl<T, M: OutputForm> Buffer<T> for InCompletionOrder<T, M> {
    type Out = M::Output<T>;

    #[inline]
    fn pop(&mut self) -> Option<M::Output<T>> {
        match self.outgoing.pop() {
            Some(value) => {
                self.yielded += 1;
                Some(value)
            }
            None => self.turn(),
        }
    }

    #[inline]
    fn backlog(&self) -> usize {
        self.incoming.len() + self.outgoing.len()
    }
}

/// Collects into a vector in input order, each output in the form `M`: an output that
/// is next in line goes straight in; the others wait in the reorder buffer.
pub(crate) struct Collect<'a, T, M: OutputForm = Plain> {
    pub(crate) order: &'a mut InOrder<T>,
    pub(crate) out: &'a mut Vec<M::Output<T>>,
}

impl<T, M: OutputForm> Results<T> for Collect<'_, T, M> {
    const RELEASES_ON_ACCEPT: bool = true;

    #[inline(always)]
    fn accept(&mut self, seq: usize, value: T) -> ControlFlow<()> {
        if seq == self.order.head && self.order.waiting.is_empty() {
            self.out.push(M::make(seq, value));
            self.order.head += 1;
        } else {
            let _ = self.order.accept(seq, value);
            while let Some((seq, value)) = self.order.pop_at() {
                self.out.push(M::make(seq, value));
            }
        }
        ControlFlow::Continue(())
    }

    #[inline]
    fn released(&self) -> usize {
        self.order.head
    }

    fn skip(&mut self, seq: usize) {
        self.order.skip(seq);
        while let Some((seq, value)) = self.order.pop_at() {
            self.out.push(M::make(seq, value));
        }
    }
}

/// Collects the `Ok` values in input order, each in the form `M`; the first `Err` stops
/// everything. Only `Ok` values ever wait in the reorder buffer.
pub(crate) struct TryCollect<'a, T, E, M: OutputForm = Plain> {
    pub(crate) order: &'a mut InOrder<Result<T, E>>,
    pub(crate) out: &'a mut Vec<M::Output<T>>,
    pub(crate) error: &'a mut Option<E>,
}

impl<T, E, M: OutputForm> Results<Result<T, E>> for TryCollect<'_, T, E, M> {
    const RELEASES_ON_ACCEPT: bool = true;

    #[inline]
    fn accept(&mut self, seq: usize, value: Result<T, E>) -> ControlFlow<()> {
        match value {
            Ok(value) if seq == self.order.head && self.order.waiting.is_empty() => {
                self.out.push(M::make(seq, value));
                self.order.head += 1;
            }
            Ok(value) => {
                let _ = self.order.accept(seq, Ok(value));
                while let Some((seq, Ok(value))) = self.order.pop_at() {
                    self.out.push(M::make(seq, value));
                }
            }
            Err(error) => {
                *self.error = Some(error);
                return ControlFlow::Break(());
            }
        }
        ControlFlow::Continue(())
    }

    #[inline]
    fn released(&self) -> usize {
        self.order.head
    }

    fn skip(&mut self, seq: usize) {
        self.order.skip(seq);
        while let Some((seq, Ok(value))) = self.order.pop_at() {
            self.out.push(M::make(seq, value));
        }
    }
}

/// The most a collecting map preallocates for its output from the input's `size_hint`:
/// a hint may be huge (`0..1 << 33`) or unbounded (`1u32..`), and the vector grows
/// anyway.
const MAX_PREALLOC: usize = 1024;

/// An empty output vector for an input whose `size_hint` lower bound is `expected`.
pub(crate) fn output_vec<T>(expected: usize) -> Vec<T> {
    Vec::with_capacity(expected.min(MAX_PREALLOC))
}
