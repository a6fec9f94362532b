//! Where a bounded map's finished outputs go: a reorder buffer (input order), a queue
//! (completion order), or straight into the collected vector (in input order, stopping at
//! the first error for `try_map_async`).
//!
//! Each consumer also says how many items have left the map (yielded or collected): the
//! engine counts the window from there.

use std::collections::VecDeque;
use std::ops::ControlFlow;

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
    fn pop(&mut self) -> Option<T>;
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

/// The reorder buffer: `waiting[k]` is the place of item `head + k`.
pub(crate) struct InOrder<T> {
    waiting: VecDeque<Place<T>>,
    head: usize,
}

impl<T> InOrder<T> {
    pub(crate) fn new() -> Self {
        Self {
            waiting: VecDeque::new(),
            head: 0,
        }
    }
}

impl<T> InOrder<T> {
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

impl<T> Results<T> for InOrder<T> {
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

impl<T> Buffer<T> for InOrder<T> {
    #[inline]
    fn pop(&mut self) -> Option<T> {
        let Place::Done(_) = self.waiting.front()? else {
            return None;
        };
        let Some(Place::Done(value)) = self.waiting.pop_front() else {
            unreachable!("the front was just seen done")
        };
        self.head += 1;
        if let Some(Place::Skipped) = self.waiting.front() {
            self.pass_skipped();
        }
        Some(value)
    }

    #[inline]
    fn backlog(&self) -> usize {
        self.waiting.len()
    }
}

/// Outputs in the order they finished.
///
/// Two vectors instead of a ring buffer (half the instructions per output): finished
/// outputs are pushed on `incoming`; `outgoing` holds older ones, the next one last, and
/// when it runs dry `incoming` is reversed into its place.
pub(crate) struct InCompletionOrder<T> {
    incoming: Vec<T>,
    outgoing: Vec<T>,
    yielded: usize,
}

impl<T> InCompletionOrder<T> {
    pub(crate) fn new() -> Self {
        Self {
            incoming: Vec::new(),
            outgoing: Vec::new(),
            yielded: 0,
        }
    }

    /// `outgoing` is empty: the outputs that came in since become the outgoing ones.
    #[inline(never)]
    fn turn(&mut self) -> Option<T> {
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

impl<T> Results<T> for InCompletionOrder<T> {
    const RELEASES_ON_ACCEPT: bool = false;

    #[inline]
    fn accept(&mut self, _seq: usize, value: T) -> ControlFlow<()> {
        self.incoming.push(value);
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

impl<T> Buffer<T> for InCompletionOrder<T> {
    #[inline]
    fn pop(&mut self) -> Option<T> {
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

/// Collects into a vector in input order: an output that is next in line goes straight
/// in; the others wait in the reorder buffer.
pub(crate) struct Collect<'a, T> {
    pub(crate) order: &'a mut InOrder<T>,
    pub(crate) out: &'a mut Vec<T>,
}

impl<T> Results<T> for Collect<'_, T> {
    const RELEASES_ON_ACCEPT: bool = true;

    #[inline(always)]
    fn accept(&mut self, seq: usize, value: T) -> ControlFlow<()> {
        if seq == self.order.head && self.order.waiting.is_empty() {
            self.out.push(value);
            self.order.head += 1;
        } else {
            let _ = self.order.accept(seq, value);
            while let Some(value) = self.order.pop() {
                self.out.push(value);
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
        while let Some(value) = self.order.pop() {
            self.out.push(value);
        }
    }
}

/// Collects the `Ok` values in input order; the first `Err` stops everything. Only `Ok`
/// values ever wait in the reorder buffer.
pub(crate) struct TryCollect<'a, T, E> {
    pub(crate) order: &'a mut InOrder<Result<T, E>>,
    pub(crate) out: &'a mut Vec<T>,
    pub(crate) error: &'a mut Option<E>,
}

impl<T, E> Results<Result<T, E>> for TryCollect<'_, T, E> {
    const RELEASES_ON_ACCEPT: bool = true;

    #[inline]
    fn accept(&mut self, seq: usize, value: Result<T, E>) -> ControlFlow<()> {
        match value {
            Ok(value) if seq == self.order.head && self.order.waiting.is_empty() => {
                self.out.push(value);
                self.order.head += 1;
            }
            Ok(value) => {
                let _ = self.order.accept(seq, Ok(value));
                while let Some(Ok(value)) = self.order.pop() {
                    self.out.push(value);
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
        while let Some(Ok(value)) = self.order.pop() {
            self.out.push(value);
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
