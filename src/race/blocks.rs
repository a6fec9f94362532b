//! Where a race keeps its contestants: pinned in place, a block of them per allocation.
//!
//! A contestant must stay put once polled. Safe Rust cannot pin the items of a `Vec` or a
//! boxed slice one by one (that takes `unsafe`), but it can pin the fields of a struct: so
//! the contestants live in boxed blocks, a first one of [`FIRST`] places (most races are
//! small) and then blocks of [`MORE`], and never move: one allocation per block instead of
//! one per contestant.

use std::pin::Pin;

use crate::wake::Lent;

/// Places in the first block.
const FIRST: usize = 4;
/// Places in each block after the first.
const MORE: usize = 32;

pin_project_lite::pin_project! {
    /// One place of a block.
    #[project = SlotProj]
    #[project_replace = SlotOwn]
    pub(super) enum Slot<F, E> {
        /// A contestant not done yet (maybe not started), and its waker if it kept a clone
        /// of the lent one.
        Running { #[pin] future: F, lent: Option<Lent> },
        /// A contestant that failed: its error, and how many had failed before it.
        Failed { error: E, order: usize },
        /// Nothing: a place past the last contestant, or one whose contestant has gone.
        Empty,
    }
}

/// Makes a block type of one pinned field per place (`pin_project_lite` pins fields, not
/// the items of an array).
macro_rules! block {
    ($name:ident: $($place:ident $index:literal)+) => {
        pin_project_lite::pin_project! {
            /// A block of places.
            pub(super) struct $name<F, E> {
                $(#[pin] $place: Slot<F, E>,)+
            }
        }

        impl<F, E> $name<F, E> {
            fn empty() -> Self {
                Self { $($place: Slot::Empty,)+ }
            }

            #[inline]
            fn place(self: Pin<&mut Self>, index: usize) -> Pin<&mut Slot<F, E>> {
                let this = self.project();
                match index {
                    $($index => this.$place,)+
                    _ => unreachable!("no place {index} in a block"),
                }
            }
        }
    };
}

block!(Block: p0 0 p1 1 p2 2 p3 3);
block!(BigBlock:
    p0 0 p1 1 p2 2 p3 3 p4 4 p5 5 p6 6 p7 7 p8 8 p9 9 p10 10 p11 11 p12 12 p13 13 p14 14
    p15 15 p16 16 p17 17 p18 18 p19 19 p20 20 p21 21 p22 22 p23 23 p24 24 p25 25 p26 26
    p27 27 p28 28 p29 29 p30 30 p31 31
);

/// Every contestant of a race, in blocks: the first block on its own (a race of up to
/// [`FIRST`] contestants allocates that block and no list), the others in a list.
pub(super) struct Blocks<F, E> {
    first: Option<Pin<Box<Block<F, E>>>>,
    more: Vec<Pin<Box<BigBlock<F, E>>>>,
    len: usize,
}

impl<F, E> Blocks<F, E> {
    pub(super) fn new() -> Self {
        Self {
            first: None,
            more: Vec::new(),
            len: 0,
        }
    }

    /// Contestants held.
    #[inline]
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Adds a contestant, numbered `len()`.
    pub(super) fn push(&mut self, future: F) {
        let index = self.len;
        if index == 0 {
            self.first = Some(Box::pin(Block::empty()));
        } else if index >= FIRST && (index - FIRST) % MORE == 0 {
            self.more.push(Box::pin(BigBlock::empty()));
        }
        self.len += 1;
        self.place(index).set(Slot::Running { future, lent: None });
    }

    /// Contestant `index`'s place.
    #[inline]
    pub(super) fn place(&mut self, index: usize) -> Pin<&mut Slot<F, E>> {
        let missing = "a contestant's index is below the count";
        if index < FIRST {
            self.first.as_mut().expect(missing).as_mut().place(index)
        } else {
            let index = index - FIRST;
            let block = self.more.get_mut(index / MORE).expect(missing);
            block.as_mut().place(index % MORE)
        }
    }

    /// Drops every contestant and error.
    pub(super) fn clear(&mut self) {
        self.first = None;
        self.more = Vec::new();
        self.len = 0;
    }
}
