//! What a race counts of its contestants ([`Core`]), what polling one gave ([`Polled`]),
//! and its failures: recorded in the failed contestant's slot as they come, taken out in
//! the order they came when the race fails. Every part of the poll ([`select`](super::select),
//! [`woken`](super::woken), [`hedge`](super::hedge)) stands on this.

use std::future::Future;
use std::pin::Pin;

use super::slot::{Slot, SlotOwn, Visit};
use super::store::Contestants;

/// What the race counts of its contestants, apart from where they are kept (the store
/// knows how many there are) and the [`Woken`](super::woken::Woken) parts (so each can be
/// borrowed on its own while a contestant is polled).
pub(super) struct Core {
    /// Contestants started and neither failed nor dropped; before the first poll, every
    /// contestant (a hedged race sets it to 0 then).
    pub(super) running: usize,
    /// Contestants `0..started` have been polled at least once; the rest never were.
    pub(super) started: usize,
    /// Contestants failed so far.
    pub(super) failed: usize,
}

/// What polling one contestant gave.
pub(super) enum Polled<T> {
    Pending,
    /// The contestant failed; its error is recorded.
    Failed,
    Won(T),
}

/// Records that the contestant in `slot` failed with `error`.
#[inline]
pub(super) fn record_failure<F, E>(core: &mut Core, mut slot: Pin<&mut Slot<F, E>>, error: E) {
    slot.set(Slot::Failed {
        error,
        order: core.failed,
    });
    core.failed += 1;
    core.running -= 1;
}

/// Takes a failed contestant's error and how many failed before it; drops the contestant.
struct TakeError;

impl<T, E> Visit<T, E> for TakeError {
    type Output = Option<(usize, E)>;

    fn visit<F>(self, slot: Pin<&mut Slot<F, E>>) -> Self::Output
    where
        F: Future<Output = Result<T, E>>,
    {
        match slot.project_replace(Slot::Empty) {
            SlotOwn::Failed { error, order } => Some((order, error)),
            _ => None,
        }
    }
}

/// The errors, in the order the contestants failed; drops every contestant.
pub(super) fn take_errors<C>(
    mut store: Pin<&mut C::Store>,
    core: &mut Core,
) -> Vec<(usize, C::Error)>
where
    C: ?Sized + Contestants,
{
    let mut errors = Vec::with_capacity(core.failed);
    for index in 0..C::len(&store) {
        if let Some((order, error)) = C::visit(store.as_mut(), index, TakeError) {
            errors.push((order, index, error));
        }
    }
    C::clear(store);
    core.running = 0;
    errors.sort_unstable_by_key(|&(order, _, _)| order);
    // Collected in place: the same allocation, each entry one word shorter.
    errors
        .into_iter()
        .map(|(_, index, error)| (index, error))
        .collect()
}
