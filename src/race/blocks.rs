//! Where a race keeps the contestants of an iterable: pinned in place, in blocks.
//!
//! A contestant must stay put once polled. Safe Rust cannot pin the items of a `Vec` or a
//! boxed slice one by one (that takes `unsafe`), but it can pin the fields of a struct: so
//! the contestants live in boxed blocks, and never move: one allocation per block instead
//! of one per contestant. The first block is as large as the iterator says it needs (2,
//! 4, 8, 16 or 32 places: most races are small, and an iterator over a `Vec`, an array or
//! a range knows its length), the next ones hold [`MORE`] places each.

use std::future::Future;
use std::ops::ControlFlow;
use std::pin::Pin;

use super::slot::{Slot, VisitEach};

/// Places in each block after the first.
const MORE: usize = 32;

/// Makes a block type of one pinned field per place (`pin_project_lite` pins fields, not
/// the items of an array).
macro_rules! block {
    ($name:ident $len:literal: $($place:ident $index:literal)+) => {
        pin_project_lite::pin_project! {
            /// A block of places.
            pub(super) struct $name<F, E> {
                $(#[pin] $place: Slot<F, E>,)+
            }
        }

        impl<F, E> $name<F, E> {
            /// Places in the block.
            const LEN: usize = $len;

            /// A block of `first` and the next contestants `futures` yields, in order, and
            /// how many it holds: each place is written once, as the block is made.
            #[inline]
            fn fill(first: F, futures: &mut impl Iterator<Item = F>) -> (Self, usize) {
                let mut first = Some(first);
                let mut taken = 0;
                let mut done = false;
                let mut next = || {
                    // Never asked again after its end: an iterator need not be fused.
                    if !done {
                        if let Some(future) = first.take().or_else(|| futures.next()) {
                            taken += 1;
                            return Slot::new(future);
                        }
                        done = true;
                    }
                    Slot::Empty
                };
                let block = Self { $($place: next(),)+ };
                (block, taken)
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

block!(Block2 2: p0 0 p1 1);
block!(Block4 4: p0 0 p1 1 p2 2 p3 3);
block!(Block8 8: p0 0 p1 1 p2 2 p3 3 p4 4 p5 5 p6 6 p7 7);
block!(Block16 16:
    p0 0 p1 1 p2 2 p3 3 p4 4 p5 5 p6 6 p7 7 p8 8 p9 9 p10 10 p11 11 p12 12 p13 13 p14 14
    p15 15
);
block!(Block32 32:
    p0 0 p1 1 p2 2 p3 3 p4 4 p5 5 p6 6 p7 7 p8 8 p9 9 p10 10 p11 11 p12 12 p13 13 p14 14
    p15 15 p16 16 p17 17 p18 18 p19 19 p20 20 p21 21 p22 22 p23 23 p24 24 p25 25 p26 26
    p27 27 p28 28 p29 29 p30 30 p31 31
);

/// The first block, of the size the iterator asked for.
enum First<F, E> {
    /// No contestant at all.
    None,
    Two(Pin<Box<Block2<F, E>>>),
    Four(Pin<Box<Block4<F, E>>>),
    Eight(Pin<Box<Block8<F, E>>>),
    Sixteen(Pin<Box<Block16<F, E>>>),
    ThirtyTwo(Pin<Box<Block32<F, E>>>),
}

/// Calls `$then` with the first block, whatever its size (`$none` if there is none).
macro_rules! with_first {
    ($first:expr, $block:ident => $then:expr, None => $none:expr) => {
        match $first {
            First::None => $none,
            First::Two($block) => $then,
            First::Four($block) => $then,
            First::Eight($block) => $then,
            First::Sixteen($block) => $then,
            First::ThirtyTwo($block) => $then,
        }
    };
}

pin_project_lite::pin_project! {
    /// Every contestant of a race, in blocks: the first block on its own (a race that
    /// fits in it allocates that block and no list), the others in a list.
    pub struct Blocks<F, E> {
        first: First<F, E>,
        // Places in the first block.
        first_len: usize,
        more: Vec<Pin<Box<Block32<F, E>>>>,
        len: usize,
    }
}

impl<F, E> Blocks<F, E> {
    /// The contestants `futures` yields, numbered in that order.
    #[inline]
    pub(super) fn new(mut futures: impl Iterator<Item = F>) -> Self {
        // A first block just large enough when the iterator knows its length; at least 4
        // places when it does not.
        let Some(head) = futures.next() else {
            return Self {
                first: First::None,
                first_len: 0,
                more: Vec::new(),
                len: 0,
            };
        };
        let wanted = match futures.size_hint() {
            (after_head, Some(most)) if most == after_head => after_head.saturating_add(1),
            (after_head, _) => after_head.saturating_add(1).max(4),
        };
        let (first, first_len, mut len) = match wanted {
            1..=2 => {
                let (block, taken) = Block2::fill(head, &mut futures);
                (First::Two(Box::pin(block)), Block2::<F, E>::LEN, taken)
            }
            3..=4 => {
                let (block, taken) = Block4::fill(head, &mut futures);
                (First::Four(Box::pin(block)), Block4::<F, E>::LEN, taken)
            }
            5..=8 => {
                let (block, taken) = Block8::fill(head, &mut futures);
                (First::Eight(Box::pin(block)), Block8::<F, E>::LEN, taken)
            }
            9..=16 => {
                let (block, taken) = Block16::fill(head, &mut futures);
                (First::Sixteen(Box::pin(block)), Block16::<F, E>::LEN, taken)
            }
            _ => {
                let (block, taken) = Block32::fill(head, &mut futures);
                (
                    First::ThirtyTwo(Box::pin(block)),
                    Block32::<F, E>::LEN,
                    taken,
                )
            }
        };
        let mut more = Vec::new();
        if len == first_len {
            if let Some(head) = futures.next() {
                // The list in one allocation when the iterator knows its length.
                let (after_head, _) = futures.size_hint();
                more.reserve_exact(after_head.saturating_add(1).div_ceil(MORE));
                let mut head = Some(head);
                while let Some(next) = head.take() {
                    let (block, taken) = Block32::fill(next, &mut futures);
                    more.push(Box::pin(block));
                    len += taken;
                    if taken == MORE {
                        head = futures.next();
                    }
                }
            }
        }
        Self {
            first,
            first_len,
            more,
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
        if index < *this.first_len {
            with_first!(this.first, block => block.as_mut().place(index),
                None => unreachable!("a contestant's index is below the count"))
        } else {
            let index = index - *this.first_len;
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
        let first_len = (*this.first_len).min(len);
        with_first!(this.first, block => block.as_mut().for_each(0, first_len, visit)?,
            None => {});
        let mut base = *this.first_len;
        for block in this.more.iter_mut() {
            block
                .as_mut()
                .for_each(base, (len - base).min(MORE), visit)?;
            base += MORE;
        }
        ControlFlow::Continue(())
    }

    /// Drops every contestant and error.
    #[inline]
    pub(super) fn clear(self: Pin<&mut Self>) {
        let this = self.project();
        *this.first = First::None;
        *this.first_len = 0;
        *this.more = Vec::new();
        *this.len = 0;
    }
}
