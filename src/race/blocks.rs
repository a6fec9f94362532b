//! Where a race keeps the contestants of an iterable: pinned in place, in blocks.
//!
//! A contestant must stay put once polled. Safe Rust cannot pin the items of a `Vec` or a
//! boxed slice one by one (that takes `unsafe`), but it can pin the fields of a struct: so
//! the contestants live in boxed blocks, a first one of [`FIRST`] places (most races are
//! small), then blocks of [`MORE`], and never move: one allocation per block instead of
//! one per contestant.

use std::future::Future;
use std::ops::ControlFlow;
use std::pin::Pin;

use super::store::{Slot, VisitEach};

/// Places in the first block.
const FIRST: usize = 4;
/// Places in each block after the first.
const MORE: usize = 32;

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

            /// Place `index`, before the block is pinned.
            #[inline]
            fn place_mut(&mut self, index: usize) -> &mut Slot<F, E> {
                match index {
                    $($index => &mut self.$place,)+
                    _ => unreachable!("no place {index} in a block"),
                }
            }

            #[inline]
            fn place(self: Pin<&mut Self>, index: usize) -> Pin<&mut Slot<F, E>> {
                let this = self.project();
                match index {
                    $($index => this.$place,)+
                    _ => unreachable!("no place {index} in a block"),
                }
            }

            /// Visits the first `len` places in order, numbered from `base`.
            #[inline]
            fn for_each<T, V>(
                self: Pin<&mut Self>,
                base: usize,
                len: usize,
                visit: &mut V,
            ) -> ControlFlow<V::Break>
            where
                F: Future<Output = Result<T, E>>,
                V: VisitEach<T, E>,
            {
                let this = self.project();
                $(
                    if $index == len {
                        return ControlFlow::Continue(());
                    }
                    visit.visit(base + $index, this.$place)?;
                )+
                ControlFlow::Continue(())
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

pin_project_lite::pin_project! {
    /// Every contestant of a race, in blocks: the first block on its own (a race of up to
    /// [`FIRST`] contestants allocates that block and no list), the others in a list.
    pub struct Blocks<F, E> {
        first: Option<Pin<Box<Block<F, E>>>>,
        more: Vec<Pin<Box<BigBlock<F, E>>>>,
        len: usize,
    }
}

impl<F, E> Blocks<F, E> {
    /// The contestants `futures` yields, numbered in that order.
    pub(super) fn new(futures: impl Iterator<Item = F>) -> Self {
        let mut first: Option<Box<Block<F, E>>> = None;
        // The list in one allocation when the iterator knows its length.
        let (at_least, _) = futures.size_hint();
        let mut more: Vec<Box<BigBlock<F, E>>> =
            Vec::with_capacity(at_least.saturating_sub(FIRST).div_ceil(MORE));
        let mut len = 0;
        for future in futures {
            let slot = Slot::new(future);
            if len < FIRST {
                *first
                    .get_or_insert_with(|| Box::new(Block::empty()))
                    .place_mut(len) = slot;
            } else {
                let index = len - FIRST;
                if index % MORE == 0 {
                    more.push(Box::new(BigBlock::empty()));
                }
                let block = more.last_mut().expect("a block was just pushed");
                *block.place_mut(index % MORE) = slot;
            }
            len += 1;
        }
        Self {
            first: first.map(Box::into_pin),
            more: if more.is_empty() {
                Vec::new()
            } else {
                // Pinned in place: the same allocation (a `Pin<Box<_>>` is a `Box<_>`).
                more.into_iter().map(Box::into_pin).collect()
            },
            len,
        }
    }

    /// Contestants held.
    #[inline]
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Contestant `index`'s place.
    #[inline]
    pub(super) fn place(self: Pin<&mut Self>, index: usize) -> Pin<&mut Slot<F, E>> {
        let this = self.project();
        if index < FIRST {
            let first = this.first.as_mut();
            first
                .expect("a contestant's index is below the count")
                .as_mut()
                .place(index)
        } else {
            let index = index - FIRST;
            let block = this
                .more
                .get_mut(index / MORE)
                .expect("a contestant's index is below the count");
            block.as_mut().place(index % MORE)
        }
    }

    /// Visits every contestant in order, until `visit` breaks.
    #[inline]
    pub(super) fn for_each<T, V>(self: Pin<&mut Self>, visit: &mut V) -> ControlFlow<V::Break>
    where
        F: Future<Output = Result<T, E>>,
        V: VisitEach<T, E>,
    {
        let this = self.project();
        let len = *this.len;
        if let Some(first) = this.first.as_mut() {
            first.as_mut().for_each(0, len.min(FIRST), visit)?;
        }
        let mut base = FIRST;
        for block in this.more.iter_mut() {
            block.as_mut().for_each(base, (len - base).min(MORE), visit)?;
            base += MORE;
        }
        ControlFlow::Continue(())
    }

    /// Drops every contestant and error.
    pub(super) fn clear(self: Pin<&mut Self>) {
        let this = self.project();
        *this.first = None;
        *this.more = Vec::new();
        *this.len = 0;
    }
}
