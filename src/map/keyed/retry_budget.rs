//! The retry budget as a part: see [`Part`] for the contract, `budget.rs` for the bucket.

use super::budget::RetryBudget;
use super::key::KeyState;
use super::part::Part;

/// The retry budget as a part: each first attempt a key starts puts its share back in the
/// key's bucket (a retry takes one out: [`KeyScheduler::take_retry`], asked by the map's
/// retry policy), and a key whose bucket is not full is kept until it lapses.
///
/// [`KeyScheduler::take_retry`]: super::scheduler::KeyScheduler::take_retry
impl<K, T> Part<K, T> for RetryBudget {
    #[inline(always)]
    fn started(&mut self, _key: &K, state: &mut KeyState<T>, _now: u64, first: bool) {
        if !first {
            return;
        }
        match &mut state.retries {
            Some(retries) => self.refill(&mut retries.spent),
            // A key that never retried spent nothing: its bucket is as full as a fresh
            // key's, which a first attempt fills further only under a floor of 0.
            None if self.fills_fresh_keys() => self.refill(&mut state.retries_mut().spent),
            None => {}
        }
    }

    #[inline]
    fn is_idle(&mut self, state: &mut KeyState<T>, _now: u64, pulled: u64) -> bool {
        state.spent().is_none_or(|spent| spent.is_settled(pulled))
    }
}
