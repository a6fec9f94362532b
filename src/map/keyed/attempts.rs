//! What happens after an attempt of a keyed map: the retry policy (or none) decides
//! whether the item is kept for another attempt and whether the output is final, and
//! gives the scheduler its retry budget.

use crate::retry::{Plan, RetryPolicy};

/// The retry policy of a map without one: every output is final.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoRetry {
    _private: (),
}

/// An item a retry policy can try again: the map keeps a copy of it while its attempt runs.
/// Every `Clone` type is one; the trait exists so that a map's user who forgets `Clone` on
/// the item type reads what to do.
///
/// A map over items that are not `Clone` cannot take `.retry(..)`:
///
/// ```compile_fail,E0277
/// # futures_lite::future::block_on(async {
/// struct Row(u32); // not Clone
/// let rows = (0..8).map(Row);
/// let out = tollgate::map_async(rows, 4, |row| async move { Ok::<u32, ()>(row.0) })
///     .retry(tollgate::RetryPolicy::new())
///     .await;
/// # });
/// ```
///
/// The same map over `Clone` items compiles:
///
/// ```
/// # futures_lite::future::block_on(async {
/// #[derive(Clone)]
/// struct Row(u32);
/// let rows = (0..8).map(Row);
/// let out = tollgate::map_async(rows, 4, |row| async move { Ok::<u32, ()>(row.0) })
///     .retry(tollgate::RetryPolicy::new())
///     .await;
/// assert_eq!(out.len(), 8);
/// # });
/// ```
#[diagnostic::on_unimplemented(
    message = "`.retry(policy)` needs items that are `Clone` (`{Self}` is not)",
    label = "the map keeps a copy of each item while its attempt runs, to try it again",
    note = "derive or implement `Clone` for `{Self}`, or map over something cheap to clone (an index, an `Arc<{Self}>`)"
)]
pub trait RetryItem: Clone {}

impl<T: Clone> RetryItem for T {}

/// What happens after an attempt: whether its item is kept for another, and whether the
/// output is final. Implemented by [`NoRetry`] and [`RetryPolicy`].
///
/// A map's user meets this trait only in a compiler error, when `.retry(..)` was given to a
/// map it does not fit: the message says what to change. A map whose function does not
/// return a `Result` cannot take `.retry(..)`:
///
/// ```compile_fail,E0277
/// # futures_lite::future::block_on(async {
/// let out = tollgate::map_async(0..8u32, 4, |n| async move { n * 2 })
///     .retry(tollgate::RetryPolicy::<u32, ()>::new())
///     .await;
/// # });
/// ```
///
/// The same map returning a `Result` compiles:
///
/// ```
/// # futures_lite::future::block_on(async {
/// let out = tollgate::map_async(0..8u32, 4, |n| async move { Ok::<u32, ()>(n * 2) })
///     .retry(tollgate::RetryPolicy::<u32, ()>::new())
///     .await;
/// assert_eq!(out.len(), 8);
/// # });
/// ```
#[diagnostic::on_unimplemented(
    message = "`.retry(policy)` needs a map whose function returns a `Result` (this one returns `{O}`)",
    label = "the map's function must return `Result<_, E>` for its `RetryPolicy<_, E>`",
    note = "a retry policy decides from the `Err` of each attempt: make the function return `Result<_, E>`, or drop `.retry(..)`"
)]
pub(crate) trait Attempts<T, O> {
    /// A copy of the item to keep while it runs, when it may be tried again.
    fn keep(item: &T) -> Option<T>;
    /// After attempt `attempt` (1-based) of an item ended with `output`: the plan of a
    /// retry, or `None` when the output is final.
    fn plan(&mut self, attempt: u32, output: &O) -> Option<Plan>;
    /// A retry planned by [`plan`](Self::plan) will happen.
    fn announce(&mut self, item: &T, attempt: u32, output: &O, plan: &Plan);
    /// Whether a final output is a failure (for the control's count).
    fn is_failure(output: &O) -> bool;
}

/// The retry budget of a policy, for the scheduler (apart from [`Attempts`], so that it
/// can be read before the output type is known).
pub(crate) trait Budget {
    fn budget(&self) -> Option<(f64, u32)>;
}

impl Budget for NoRetry {
    fn budget(&self) -> Option<(f64, u32)> {
        None
    }
}

impl<T, E> Budget for RetryPolicy<T, E> {
    fn budget(&self) -> Option<(f64, u32)> {
        self.retry_budget()
    }
}

impl<T, O> Attempts<T, O> for NoRetry {
    #[inline(always)]
    fn keep(_item: &T) -> Option<T> {
        None
    }
    #[inline(always)]
    fn plan(&mut self, _attempt: u32, _output: &O) -> Option<Plan> {
        None
    }
    #[inline(always)]
    fn announce(&mut self, _item: &T, _attempt: u32, _output: &O, _plan: &Plan) {}
    #[inline(always)]
    fn is_failure(_output: &O) -> bool {
        false
    }
}

impl<T: RetryItem, V, E> Attempts<T, Result<V, E>> for RetryPolicy<T, E> {
    fn keep(item: &T) -> Option<T> {
        Some(item.clone())
    }
    fn plan(&mut self, attempt: u32, output: &Result<V, E>) -> Option<Plan> {
        RetryPolicy::plan(self, attempt, output.as_ref().err()?)
    }
    fn announce(&mut self, item: &T, attempt: u32, output: &Result<V, E>, plan: &Plan) {
        if let Err(error) = output {
            RetryPolicy::announce(self, item, attempt, error, plan);
        }
    }
    fn is_failure(output: &Result<V, E>) -> bool {
        output.is_err()
    }
}
