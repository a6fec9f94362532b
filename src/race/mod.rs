//! [`race`]: the first success among many futures wins, the losers are dropped, and when
//! nobody wins [`RaceError`] carries every contestant's error. [`Race::hedge`] makes it a
//! hedged race: the contestants start one after another instead of all at once.
//!
//! The race polls its contestants itself (no spawning). A race of up to 4 contestants,
//! and a tuple race, is a select loop for good: every poll polls every running contestant
//! with the race's own waker (for so few, telling the woken ones apart costs more than it
//! saves, and a tuple race allocates nothing). A race of 5 to 32 starts as a select loop
//! too, and turns to its wake set as soon as a round of it would be wasted on contestants
//! that pend again: when one fails after others pended in the same round (its end may
//! have woken one of them), or when a contestant pends on a poll after the first (the race
//! was woken for another one). Then each running contestant is polled once more, with a
//! waker lent from the wake layer ([`crate::wake`]), and from then on a wake-up polls that
//! contestant only: racing 10,000 futures costs O(10,000) polls in total, not O(10,000)
//! per wake-up. Such races whose contestants finish at once, or pend once to yield and
//! then finish, never make the wake set. A race of more than 32 turns to its wake set at
//! its first pending contestant: a select round over hundreds of contestants that keep
//! their wakers (sockets, timers) is one wasted poll each, and measured, it costs more
//! than lending each a waker from the start. Contestants woken during a poll of the race
//! (one finishing wakes the next) are polled again within it (a poll of the race yields
//! after `MIN_YIELD_EVERY` such polls, or as many as it has contestants), unless one
//! woke itself (it yielded): then the executor gets its turn first.
//!
//! Where the contestants live ([`store`], each in a [`slot`]): a tuple's inline in the
//! race, a field each; an iterable's in boxed blocks ([`blocks`]).
//!
//! What a race allocates: a tuple race, nothing (its timeout or hedge: one box for both,
//! and the timer). An iterable race: one block for its first contestants, as many as the
//! iterator says it has (2, 4, 8, 16 or 32 places), and one per 32 after them (with their
//! list), where a crate free to use `unsafe` pins them all in one slice; from 5
//! contestants on, once the race turns to it, the wake set, the box that holds it with
//! the lent wakers, and a table of the wakers kept, and a waker of its own for each
//! contestant that keeps a clone of its waker while another one holds the lent one (a
//! `Waker` made safely is an `Arc`). Any race: the list of errors, only when it fails.
//! Safe Rust could also keep an iterable's first block inside the race; measured, that
//! costs more than the allocation (the race grows by that block, and every move of it
//! copies it). For the same reason what only a race with a wake set needs is boxed: a
//! race over an iterable is 104 bytes on a 64-bit target whatever its contestants,
//! small enough to move without a call to `memcpy`.
//!
//! A hedged race keeps one timer, for the next start, moved forward at each start; the
//! plain race pays one branch per poll for it. A hedged race of up to 4 contestants, or
//! of a tuple, is a select loop like the plain one: each poll polls every contestant
//! started and still running, and then starts those that are due; a larger one makes its
//! wake set on its first poll.

mod blocks;
mod contestants;
pub(crate) mod error;
mod slot;
mod store;

pub use contestants::IntoContestants;
pub use error::RaceError;

use std::fmt;
use std::future::Future;
use std::mem;
use std::ops::ControlFlow;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::runtime::RtSleep;
use crate::time::{Sleep, sleep};
use crate::wake::{Lender, Lent, WakeSet};
use slot::{Slot, SlotOwn, SlotProj, Visit, VisitEach};
use store::Contestants;

/// A poll of a race yields after this many polls of woken contestants (a larger race after
/// as many as it has contestants), so that the executor runs others.
const MIN_YIELD_EVERY: usize = 32;

/// A race of more contestants than this (and than a select loop for good holds) turns to
/// its wake set at its first pending contestant, in its first poll, rather than after a
/// wasted round: see the module docs.
const SELECT_FIRST_MAX: usize = 32;

/// Runs every contestant at once; the first to return `Ok` wins and the others are dropped.
///
/// A contestant that returns `Err` does not end the race: the others keep running. When
/// all of them have failed, the race fails with a [`RaceError`] that carries every error
/// with its contestant's index, in the order they failed. With [`.timeout(d)`](Race::timeout)
/// the race also gives up once `d` has passed.
///
/// Contestants are anything [`IntoContestants`] accepts: an iterator, `Vec` or array of
/// one future type, or a tuple of up to 12 futures of different types (no boxing needed),
/// all resolving to `Result<T, E>` with the same `T` and `E`.
///
/// The race polls the contestants itself, on the task that awaits it: it spawns nothing.
/// A small race polls every contestant on each of its polls; a larger one, once that
/// would be wasted, polls again only the contestants whose wakers fired, so a race of
/// 10,000 futures costs O(10,000) polls in total.
///
/// **`race` is for idempotent work.** The losers are dropped mid-flight and may already
/// have done part of their job: racing mirrors for a download is fine, racing two payments
/// is not.
///
/// Asking every mirror at once multiplies the load on them. To ask the next one only when
/// the ones before are slow or have failed, make it a hedged race with
/// [`.hedge(delay)`](Race::hedge).
///
/// # Examples
///
/// Ask every mirror; a broken one does not end the race, the fastest good one wins:
///
/// ```
/// use std::time::Duration;
/// use tollgate::{race, sleep};
///
/// async fn fetch(mirror: &str) -> Result<String, String> {
///     match mirror {
///         "broken.example" => Err(format!("cannot reach {mirror}")),
///         "fast.example" => Ok(format!("<html>{mirror}</html>")),
///         _ => {
///             sleep(Duration::from_secs(60)).await;
///             Ok(format!("<html>{mirror}</html>"))
///         }
///     }
/// }
///
/// # futures_lite::future::block_on(async {
/// let mirrors = ["broken.example", "slow.example", "fast.example"];
/// let body = race(mirrors.map(fetch))
///     .timeout(Duration::from_secs(2))
///     .await
///     .unwrap();
/// assert_eq!(body, "<html>fast.example</html>");
///
/// let failed = race(["broken.example"].map(fetch)).await.unwrap_err();
/// assert_eq!(failed.to_string(), "the only contestant failed");
/// assert_eq!(failed.errors()[0], (0, "cannot reach broken.example".to_owned()));
/// # });
/// ```
///
/// # Errors
///
/// [`RaceError`] when every contestant failed, when the timeout passed first, or at once
/// when there are no contestants (never a panic, unlike `futures::future::select_ok`).
///
/// # Panics
///
/// A contestant's panic propagates out of the race's poll. Polling the race again after
/// that, or after it returned `Ready`, panics.
///
/// # Cancel safety
///
/// Dropping the race drops every contestant still running. When the race returns (won,
/// failed or timed out), every other contestant has already been dropped.
#[doc(alias = "select_ok")]
#[doc(alias = "race_ok")]
#[doc(alias = "first_ok")]
pub fn race<M, C>(contestants: C) -> Race<C::Contestants>
where
    C: IntoContestants<M>,
{
    let store = contestants.into_store();
    let len = C::Contestants::len(&store);
    Race {
        store,
        core: Core {
            running: len,
            started: 0,
            failed: 0,
        },
        wake: None,
        extra: None,
        state: State::Fresh,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Not polled yet: the first poll starts every contestant (a hedged race: the first).
    Fresh,
    /// Polled once, a select loop: every poll polls every running contestant.
    Select,
    /// Polled once, with a wake set: later polls poll the woken contestants only.
    Running,
    /// Polling contestants. Still set on the next poll only if a contestant panicked
    /// and the panic left the previous one: that poll panics too, rather than hang on
    /// the wake-ups the unwinding poll had taken and not yet passed on.
    Polling,
    /// The output was returned.
    Done,
}

/// What the race counts of its contestants, apart from where they are kept (the store
/// knows how many there are) and the [`Woken`] parts (so each can be borrowed on its own
/// while a contestant is polled).
struct Core {
    /// Contestants started and neither failed nor dropped; before the first poll, every
    /// contestant (a hedged race sets it to 0 then).
    running: usize,
    /// Contestants `0..started` have been polled at least once; the rest never were.
    started: usize,
    /// Contestants failed so far.
    failed: usize,
}

/// What a race that polls only its woken contestants keeps: made when it turns to its
/// wake set (a hedged race of more than 4: on its first poll). Boxed, so that a select
/// loop, the common race, carries one empty pointer for it and moves as a small future.
struct Woken {
    /// Which contestants were woken.
    set: WakeSet,
    /// The wakers lent to them.
    lending: Lending,
}

/// The wakers a race with a wake set lends to its contestants.
struct Lending {
    lender: Lender,
    /// The waker each contestant kept, if it kept a clone of the one lent to it: empty
    /// until the first one does (contestants that only yield, or finish at once, never
    /// do), then one entry per contestant.
    lent: Vec<Option<Lent>>,
    /// Contestants in the race: the length of `lent` once it is made.
    len: usize,
}

impl Lending {
    /// The waker contestant `index` kept, if any.
    #[inline]
    fn kept_by(&mut self, index: usize) -> Option<&mut Lent> {
        self.lent.get_mut(index).and_then(Option::as_mut)
    }

    /// Takes the waker contestant `index` kept, if any (it has finished).
    #[inline]
    fn take_kept(&mut self, index: usize) -> Option<Lent> {
        self.lent.get_mut(index).and_then(Option::take)
    }

    /// Records that contestant `index` kept `waker`.
    #[inline]
    fn keep(&mut self, index: usize, waker: Lent) {
        if self.lent.is_empty() {
            self.make_table();
        }
        self.lent[index] = Some(waker);
    }

    /// The table of kept wakers, when the first contestant keeps one.
    #[cold]
    #[inline(never)]
    fn make_table(&mut self) {
        self.lent.resize_with(self.len, || None);
    }
}

impl Woken {
    /// The wake set and wakers of a race of `len` contestants, none woken or lent yet.
    fn new(len: usize) -> Box<Self> {
        let set = WakeSet::new(len);
        let lender = Lender::new(&set);
        Box::new(Self {
            set,
            lending: Lending {
                lender,
                lent: Vec::new(),
                len,
            },
        })
    }
}

/// What polling one contestant gave.
enum Polled<T> {
    Pending,
    /// The contestant failed; its error is recorded.
    Failed,
    Won(T),
}

/// Records that the contestant in `slot` failed with `error`.
#[inline]
fn record_failure<F, E>(core: &mut Core, mut slot: Pin<&mut Slot<F, E>>, error: E) {
    slot.set(Slot::Failed {
        error,
        order: core.failed,
    });
    core.failed += 1;
    core.running -= 1;
}

/// Polls contestant `index` with a waker lent from the set (starting it if it never was)
/// and records a failure.
struct PollLent<'a, 'b> {
    core: &'a mut Core,
    index: usize,
    set: &'b WakeSet,
    lending: &'a mut Lending,
}

impl<T, E> Visit<T, E> for PollLent<'_, '_> {
    type Output = Polled<T>;

    #[inline]
    fn visit<F>(self, mut slot: Pin<&mut Slot<F, E>>) -> Polled<T>
    where
        F: Future<Output = Result<T, E>>,
    {
        let Self {
            core,
            index,
            set,
            lending,
        } = self;
        // A contestant that already failed may still be woken by a stale waker: skip it.
        let SlotProj::Running { future } = slot.as_mut().project() else {
            return Polled::Pending;
        };
        let (waker, had_kept) = match lending.kept_by(index) {
            Some(kept) => (kept.waker(), true),
            None => (lending.lender.lend(set, index), false),
        };
        match future.poll(&mut Context::from_waker(waker)) {
            Poll::Pending => {
                // A contestant that kept a clone of the lent waker keeps the waker.
                if !had_kept {
                    if let Some(kept) = lending.lender.kept(set) {
                        lending.keep(index, kept);
                    }
                }
                Polled::Pending
            }
            Poll::Ready(Ok(value)) => Polled::Won(value),
            Poll::Ready(Err(error)) => {
                let kept = lending.take_kept(index);
                // Dropped first: a contestant that kept a clone drops it with itself, and
                // then the waker can be reused.
                record_failure(core, slot, error);
                lending.lender.finished(set, kept);
                Polled::Failed
            }
        }
    }
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

/// Polls contestant `index` of `store` with a waker lent for `set`.
#[inline]
fn poll_one<C>(
    store: Pin<&mut C::Store>,
    core: &mut Core,
    index: usize,
    set: &WakeSet,
    lending: &mut Lending,
) -> Polled<C::Ok>
where
    C: ?Sized + Contestants,
{
    let poll = PollLent {
        core,
        index,
        set,
        lending,
    };
    C::visit(store, index, poll)
}

/// What one poll of a select loop gave.
enum Selected<T> {
    Won(T),
    /// No winner; wait for the next poll.
    Pending,
    /// No winner, and the contestants would be better polled through a wake set: the
    /// poll ended on a round that may have woken contestants polled earlier in it.
    ToWakeSet,
}

/// One poll of a select loop: polls every running contestant with the race's own waker,
/// and once more while one failed after others had pended in the same round (its end may
/// have woken them, as one mirror's answer can unblock another's), rather than after a
/// round trip through the executor. Each extra round needs a new failure: at most as
/// many rounds as contestants.
///
/// Unless `lasting`, a round that would be wasted on contestants that pend again ends the
/// select loop instead: a failure after a pend in the same round (the next round would
/// poll every pending contestant to find the one it woke), or, on a poll after the first
/// (`first` false), a contestant that pends again (the race was woken for another one).
/// With `stop_at_pend` (a race of more than [`SELECT_FIRST_MAX`]), the first pending
/// contestant ends it.
#[inline]
fn poll_select<C>(
    mut store: Pin<&mut C::Store>,
    core: &mut Core,
    cx: &mut Context<'_>,
    lasting: bool,
    first: bool,
    stop_at_pend: bool,
) -> Selected<C::Ok>
where
    C: ?Sized + Contestants,
{
    loop {
        let mut round = SelectRound {
            started: core.started,
            core: &mut *core,
            cx: &mut *cx,
            pended: false,
            again: false,
            stop_at_pend,
        };
        match C::for_each(store.as_mut(), &mut round) {
            ControlFlow::Break(Some(value)) => return Selected::Won(value),
            ControlFlow::Break(None) => return Selected::ToWakeSet,
            ControlFlow::Continue(()) => {}
        }
        let (pended, again) = (round.pended, round.again);
        if !lasting && (again || (pended && !first)) {
            return Selected::ToWakeSet;
        }
        if !again {
            return Selected::Pending;
        }
    }
}

/// Polls the contestant in `slot` (running) with the race's own waker, and records a
/// failure.
#[inline]
fn poll_own<F, T, E>(
    core: &mut Core,
    mut slot: Pin<&mut Slot<F, E>>,
    cx: &mut Context<'_>,
) -> Polled<T>
where
    F: Future<Output = Result<T, E>>,
{
    let SlotProj::Running { future } = slot.as_mut().project() else {
        unreachable!("only a running contestant is polled");
    };
    match future.poll(cx) {
        Poll::Pending => Polled::Pending,
        Poll::Ready(Ok(value)) => Polled::Won(value),
        Poll::Ready(Err(error)) => {
            record_failure(core, slot, error);
            Polled::Failed
        }
    }
}

/// Polls one contestant with the race's own waker (a hedged select loop's start).
struct PollOwn<'a, 'b, 'c> {
    core: &'a mut Core,
    cx: &'b mut Context<'c>,
}

impl<T, E> Visit<T, E> for PollOwn<'_, '_, '_> {
    type Output = Polled<T>;

    #[inline]
    fn visit<F>(self, slot: Pin<&mut Slot<F, E>>) -> Polled<T>
    where
        F: Future<Output = Result<T, E>>,
    {
        poll_own(self.core, slot, self.cx)
    }
}

/// The waker a hedged race starts its next contestant with.
enum Start<'a> {
    /// The race's own: a select loop.
    Own,
    /// One lent from the race's wake set.
    Lent(&'a WakeSet, &'a mut Lending),
}

/// One round of a select loop: polls every running contestant with the race's own waker.
struct SelectRound<'a, 'b, 'c> {
    core: &'a mut Core,
    cx: &'b mut Context<'c>,
    /// A contestant pended in this round.
    pended: bool,
    /// A contestant failed after one pended in this round.
    again: bool,
    /// End the round, and the select loop, at the first contestant that pends.
    stop_at_pend: bool,
    /// Contestants started: a hedged race's later ones wait for their start.
    started: usize,
}

impl<T, E> VisitEach<T, E> for SelectRound<'_, '_, '_> {
    /// The winner's value, or `None` for a round ended at a pending contestant.
    type Break = Option<T>;

    #[inline]
    fn visit<F>(&mut self, index: usize, mut slot: Pin<&mut Slot<F, E>>) -> ControlFlow<Option<T>>
    where
        F: Future<Output = Result<T, E>>,
    {
        if index >= self.started {
            return ControlFlow::Continue(());
        }
        // A contestant that failed in an earlier round is skipped, and does not count as
        // pending.
        let SlotProj::Running { future } = slot.as_mut().project() else {
            return ControlFlow::Continue(());
        };
        match future.poll(self.cx) {
            Poll::Pending if self.stop_at_pend => return ControlFlow::Break(None),
            Poll::Pending => self.pended = true,
            Poll::Ready(Ok(value)) => return ControlFlow::Break(Some(value)),
            Poll::Ready(Err(error)) => {
                record_failure(self.core, slot, error);
                self.again |= self.pended;
            }
        }
        ControlFlow::Continue(())
    }
}

/// The round that turns a select loop to its wake set: polls every running contestant
/// with a waker lent from the set.
struct LentRound<'a, 'b> {
    core: &'a mut Core,
    set: &'b WakeSet,
    lending: &'a mut Lending,
    /// A contestant woke itself.
    yielded: bool,
}

impl<T, E> VisitEach<T, E> for LentRound<'_, '_> {
    type Break = T;

    #[inline]
    fn visit<F>(&mut self, index: usize, slot: Pin<&mut Slot<F, E>>) -> ControlFlow<T>
    where
        F: Future<Output = Result<T, E>>,
    {
        if !matches!(slot.as_ref().get_ref(), Slot::Running { .. }) {
            return ControlFlow::Continue(());
        }
        let poll = PollLent {
            core: &mut *self.core,
            index,
            set: self.set,
            lending: &mut *self.lending,
        };
        match poll.visit(slot) {
            Polled::Won(value) => return ControlFlow::Break(value),
            Polled::Pending => self.yielded |= self.set.is_marked(index),
            Polled::Failed => {}
        }
        ControlFlow::Continue(())
    }
}

impl Core {
    /// Starts the next contestant: its first poll.
    fn start_next<C>(
        &mut self,
        store: Pin<&mut C::Store>,
        start: &mut Start<'_>,
        cx: &mut Context<'_>,
    ) -> Polled<C::Ok>
    where
        C: ?Sized + Contestants,
    {
        let index = self.started;
        self.started += 1;
        self.running += 1;
        match start {
            Start::Own => C::visit(store, index, PollOwn { core: self, cx }),
            Start::Lent(set, lending) => poll_one::<C>(store, self, index, set, lending),
        }
    }
}

/// The errors, in the order the contestants failed; drops every contestant.
fn take_errors<C>(mut store: Pin<&mut C::Store>, core: &mut Core) -> Vec<(usize, C::Error)>
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

pin_project_lite::pin_project! {
    /// The future of a [`race`], and its builder: set a [`timeout`](Self::timeout) or a
    /// [`hedge`](Self::hedge) delay, then `.await` it (or spawn it, or return it from a map's
    /// function).
    ///
    /// `C` names the contestants: `[F]` for any number of one future type `F` (a `Vec`, an
    /// array, an iterator), `(F0, F1, ..)` for a tuple of up to 12 types. The race keeps them
    /// inside itself, so it is `Unpin` when they are. The output is `Result<T,
    /// RaceError<E>>` for contestants that return `Result<T, E>`.
    ///
    /// # Examples
    ///
    /// The type can be named, so a race can be stored or returned:
    ///
    /// ```
    /// use std::future::{Ready, ready};
    /// use std::time::Duration;
    /// use tollgate::futures::Race;
    ///
    /// type Answer = Ready<Result<u32, String>>;
    ///
    /// fn ask(mirrors: Vec<Answer>) -> Race<[Answer]> {
    ///     tollgate::race(mirrors).timeout(Duration::from_secs(5))
    /// }
    ///
    /// fn ask_both(main: Answer, backup: Answer) -> Race<(Answer, Answer)> {
    ///     tollgate::race((main, backup)).hedge(Duration::from_millis(50))
    /// }
    ///
    /// # futures_lite::future::block_on(async {
    /// assert_eq!(ask(vec![ready(Err("down".into())), ready(Ok(3))]).await, Ok(3));
    /// assert_eq!(ask_both(ready(Ok(1)), ready(Ok(2))).await, Ok(1));
    /// # });
    /// ```
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    pub struct Race<C>
    where
        C: ?Sized,
        C: Contestants,
    {
        #[pin]
        store: C::Store,
        core: Core,
        // Which contestants were woken, and the wakers lent to them: made when a select
        // loop turns to its wake set (a hedged race of more than 4: on the first poll).
        wake: Option<Box<Woken>>,
        // A timeout or a hedge: one pointer for a plain race to check.
        extra: Option<Pin<Box<Extra>>>,
        state: State,
    }
}

pin_project_lite::pin_project! {
    /// What a timeout and a hedge add to a race, apart so a plain race carries one empty
    /// pointer for both.
    struct Extra {
        timeout: Option<Duration>,
        // Started on the first poll when there is a timeout.
        #[pin]
        timer: Option<Sleep>,
        // Set for a hedged race.
        hedge: Option<Duration>,
        // Fires `hedge` after the latest start; set again at each start after which the
        // race has to wait (one timer for the race, not one per contestant). `None` until
        // then.
        #[pin]
        next_start: Option<RtSleep>,
    }
}

impl Extra {
    fn new() -> Self {
        Self {
            timeout: None,
            timer: None,
            hedge: None,
            next_start: None,
        }
    }
}

impl<C> Race<C>
where
    C: ?Sized + Contestants,
{
    /// The extras, made on first use.
    fn extra(&mut self) -> Pin<&mut Extra> {
        self.extra
            .get_or_insert_with(|| Box::pin(Extra::new()))
            .as_mut()
    }

    /// Gives up once `duration` has passed without a winner, counted from the race's first
    /// poll.
    ///
    /// The timeout is checked after the contestants on every poll, so a contestant that
    /// is ready wins over a timeout that has passed. `Duration::ZERO` gives the race one
    /// poll: each contestant is polled once (a contestant woken by another one finishing
    /// in that poll is polled once more); `Duration::MAX` never expires. The timer is a
    /// [`sleep`](crate::sleep), so tokio's paused clock applies with the `tokio` feature.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::future::pending;
    /// use std::time::Duration;
    ///
    /// # futures_lite::future::block_on(async {
    /// let stuck = [pending::<Result<u8, ()>>(), pending()];
    /// let failed = tollgate::race(stuck)
    ///     .timeout(Duration::from_millis(5))
    ///     .await
    ///     .unwrap_err();
    /// assert!(failed.is_timed_out());
    /// assert_eq!(failed.to_string(), "race timed out after 5ms with 0 failures");
    /// # });
    /// ```
    ///
    /// # Errors
    ///
    /// When the time is up, the race drops every contestant still running and fails with a
    /// [`RaceError`] whose [`is_timed_out`](RaceError::is_timed_out) is true and that carries
    /// the errors collected until then.
    pub fn timeout(mut self, duration: Duration) -> Self {
        *self.extra().project().timeout = Some(duration);
        self
    }

    /// Makes this a hedged race: the contestants start one after another, in order, instead
    /// of all at once.
    ///
    /// To *start* a contestant is to poll it for the first time; a future does nothing
    /// before that, so a mirror not started has not been asked. The first starts on the
    /// race's first poll; each next one once `delay` has passed since the previous start
    /// without a winner, or at once when every contestant started so far has failed (there
    /// is no point waiting on a failure). As in every race, the first success wins and
    /// every other contestant, started or not, is dropped.
    ///
    /// `Duration::ZERO` gives the plain race back: every contestant starts on the first
    /// poll. `Duration::MAX` tries them one at a time, the next only when the previous one
    /// failed.
    /// The race keeps one timer for the next start, on the same clock as
    /// [`sleep`](crate::sleep), so tokio's paused clock applies with the `tokio` feature.
    /// [`.timeout(d)`](Self::timeout) still bounds the whole race, from its first poll.
    ///
    /// # Examples
    ///
    /// Ask the backup mirror only if the main one is slow or broken:
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::time::Duration;
    /// use tollgate::{race, sleep};
    ///
    /// static ASKED: AtomicUsize = AtomicUsize::new(0);
    ///
    /// async fn fetch(mirror: &str) -> Result<String, String> {
    ///     ASKED.fetch_add(1, Ordering::SeqCst);
    ///     match mirror {
    ///         "slow.example" => sleep(Duration::from_secs(60)).await,
    ///         "broken.example" => return Err(format!("cannot reach {mirror}")),
    ///         _ => {}
    ///     }
    ///     Ok(format!("<html>{mirror}</html>"))
    /// }
    ///
    /// # futures_lite::future::block_on(async {
    /// let ask = |main: &'static str| {
    ///     race([fetch(main), fetch("backup.example")])
    ///         .hedge(Duration::from_millis(50))
    ///         .timeout(Duration::from_secs(10))
    /// };
    ///
    /// // The main mirror answers at once: the backup is never asked.
    /// assert_eq!(ask("fast.example").await.unwrap(), "<html>fast.example</html>");
    /// assert_eq!(ASKED.swap(0, Ordering::SeqCst), 1);
    ///
    /// // The main mirror is slow: after 50 ms the backup is asked too, and wins.
    /// assert_eq!(ask("slow.example").await.unwrap(), "<html>backup.example</html>");
    /// assert_eq!(ASKED.swap(0, Ordering::SeqCst), 2);
    ///
    /// // The main mirror fails: the backup is asked at once, without waiting 50 ms.
    /// assert_eq!(ask("broken.example").await.unwrap(), "<html>backup.example</html>");
    /// # });
    /// ```
    ///
    /// # Errors
    ///
    /// As for [`race`]: a [`RaceError`] when every contestant failed (then every one was
    /// started) or when the timeout passed first. It carries the error of every started
    /// contestant that failed; contestants never started are dropped without an entry, and
    /// [`RaceError::started`] says how many were started.
    ///
    /// # Panics
    ///
    /// As [`sleep`](crate::sleep) does: with the `tokio` feature, when a next start has to
    /// be timed inside a tokio runtime built without its time driver.
    ///
    /// # Cancel safety
    ///
    /// Dropping the race drops every contestant, started or not. A contestant that was
    /// never started was never polled, so it has done nothing, unless its work began when
    /// the future was made rather than when it is first polled (the handle of a task
    /// already spawned, say): hedging cannot hold such work back.
    #[doc(alias = "hedged")]
    #[doc(alias = "backup_request")]
    pub fn hedge(mut self, delay: Duration) -> Self {
        if delay.is_zero() {
            if let Some(extra) = &mut self.extra {
                *extra.as_mut().project().hedge = None;
            }
        } else {
            *self.extra().project().hedge = Some(delay);
        }
        self
    }
}

impl<C> Race<C>
where
    C: ?Sized + Contestants,
{
    /// Ends the race with a failure.
    fn fail(self: Pin<&mut Self>, timed_out: Option<Duration>) -> RaceError<C::Error> {
        let this = self.project();
        *this.extra = None;
        *this.state = State::Done;
        let errors = take_errors::<C>(this.store, this.core);
        *this.wake = None;
        RaceError::new(errors, timed_out, this.core.started)
    }

    /// Ends the race with a winner: the losers go before its value leaves this poll.
    fn win(self: Pin<&mut Self>, value: C::Ok) -> Poll<Result<C::Ok, RaceError<C::Error>>> {
        let this = self.project();
        C::clear(this.store);
        this.core.running = 0;
        *this.wake = None;
        *this.extra = None;
        *this.state = State::Done;
        Poll::Ready(Ok(value))
    }

    /// After polling the contestants without a winner: fails if nobody runs, else
    /// registers the parent's waker (with a wake set) and checks the timeout.
    fn pend(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<C::Ok, RaceError<C::Error>>> {
        let this = self.as_mut().project();
        if this.core.running == 0 {
            return Poll::Ready(Err(self.fail(None)));
        }
        // Register, then look: a contestant woken during this poll and not polled yet (it
        // yielded, or the yield allowance ran out) gets its next poll in the next poll of the race,
        // after the executor has had its turn.
        if let Some(woken) = this.wake {
            woken.set.register(cx);
            if woken.set.has_woken() {
                cx.waker().wake_by_ref();
            }
        }
        if let Some(extra) = this.extra {
            let extra = extra.as_mut().project();
            if let Some(timer) = extra.timer.as_pin_mut() {
                if timer.poll(cx).is_ready() {
                    let timeout = *extra.timeout;
                    if let Some(after) = timeout {
                        crate::events::timed_out("race", after);
                    }
                    return Poll::Ready(Err(self.fail(timeout)));
                }
            }
        }
        Poll::Pending
    }
}
impl Extra {
    /// Starts every contestant that is due: while some are left, the next one once every
    /// started one has failed or the timer has fired. Returns the winner's value if one
    /// of them wins on its first poll.
    ///
    /// Never inlined: kept out of the race's poll, so the plain race's poll stays small.
    #[inline(never)]
    fn start_due<C>(
        self: Pin<&mut Self>,
        mut store: Pin<&mut C::Store>,
        core: &mut Core,
        mut start: Start<'_>,
        cx: &mut Context<'_>,
    ) -> Option<C::Ok>
    where
        C: ?Sized + Contestants,
    {
        let this = self.project();
        let delay = (*this.hedge)?;
        let mut next_start = this.next_start;
        let len = C::len(&store);
        while core.started < len {
            if core.running > 0 {
                // The timer was set at the latest start: that start left `running > 0`.
                let timer = next_start.as_mut().as_pin_mut()?;
                if timer.poll(cx).is_pending() {
                    return None;
                }
            }
            if core.started > 0 {
                crate::events::hedge(core.started, core.running == 0);
            }
            if let Polled::Won(value) = core.start_next::<C>(store.as_mut(), &mut start, cx) {
                return Some(value);
            }
            // Set the timer only when the race will wait on it: a contestant that failed
            // at once, with nobody else running, lets the next one start right away.
            if core.running > 0 && core.started < len {
                next_start.set(Some(RtSleep::after(delay)));
            }
        }
        None
    }
}

impl<C> fmt::Debug for Race<C>
where
    C: ?Sized + Contestants,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let extra = self.extra.as_deref();
        f.debug_struct("Race")
            .field("contestants", &C::len(&self.store))
            .field("running", &self.core.running)
            .field("started", &self.core.started)
            .field("failed", &self.core.failed)
            .field("timeout", &extra.and_then(|extra| extra.timeout))
            .field("hedge", &extra.and_then(|extra| extra.hedge))
            .finish_non_exhaustive()
    }
}

impl<C> Future for Race<C>
where
    C: ?Sized + Contestants,
{
    type Output = Result<C::Ok, RaceError<C::Error>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.as_mut().project();
        let state = mem::replace(this.state, State::Polling);
        let len = C::len(&this.store);
        let first = match state {
            State::Select => false,
            State::Fresh => {
                let mut hedged = false;
                if let Some(extra) = this.extra.as_mut() {
                    let mut extra = extra.as_mut().project();
                    if let Some(duration) = *extra.timeout {
                        extra.timer.set(Some(sleep(duration)));
                    }
                    hedged = extra.hedge.is_some();
                }
                if !hedged {
                    this.core.started = len;
                } else {
                    // Nobody runs yet: the first contestant starts below, as each next
                    // one; a race that is not a select loop for good starts them with a
                    // waker of its own each (a hedged race waits anyway).
                    this.core.running = 0;
                    if !C::is_select_loop(&this.store) {
                        *this.wake = Some(Woken::new(len));
                    }
                }
                !hedged
            }
            State::Running => false,
            State::Done => panic!("`Race` polled after it completed"),
            State::Polling => panic!("`Race` polled after a contestant panicked"),
        };
        let mut winner = None;
        // A contestant woke itself (it yielded): the executor gets its turn before the
        // contestants woken now are polled.
        let mut yielded = false;
        if state == State::Select || (state == State::Fresh && this.wake.is_none()) {
            let lasting = C::is_select_loop(&this.store);
            let stop_at_pend = !lasting && len > SELECT_FIRST_MAX;
            let store = this.store.as_mut();
            match poll_select::<C>(store, this.core, cx, lasting, first, stop_at_pend) {
                Selected::Won(value) => return self.win(value),
                Selected::Pending => {
                    // The one branch a select loop without extras pays for hedging.
                    if let Some(extra) = this.extra.as_mut() {
                        let store = this.store.as_mut();
                        let due = extra
                            .as_mut()
                            .start_due::<C>(store, this.core, Start::Own, cx);
                        if let Some(value) = due {
                            return self.win(value);
                        }
                    }
                    *this.state = State::Select;
                    return self.pend(cx);
                }
                Selected::ToWakeSet => {
                    // Every contestant still running may hold the race's own waker, which
                    // does not tell which one to poll: each is polled once more now, with a
                    // waker of its own from then on.
                    let Woken { set, lending } = &mut **this.wake.insert(Woken::new(len));
                    set.enter();
                    let mut round = LentRound {
                        core: &mut *this.core,
                        set,
                        lending,
                        yielded: false,
                    };
                    if let ControlFlow::Break(value) = C::for_each(this.store.as_mut(), &mut round)
                    {
                        winner = Some(value);
                    }
                    yielded = round.yielded;
                }
            }
        }
        // Wake-ups during this poll only mark their contestants: we look before we return.
        let Some(woken) = this.wake.as_deref_mut() else {
            unreachable!("a race past its select loop has a wake set");
        };
        woken.set.enter();
        // The yield allowance: polls left in this poll of the race for contestants woken
        // during it.
        let mut allowance = len.max(MIN_YIELD_EVERY);
        // Poll the woken contestants, again while polling them wakes others (one finishing
        // wakes the next, say): within the allowance, until one yields.
        {
            let Woken { set, lending } = woken;
            while winner.is_none() && !yielded && allowance > 0 && set.has_woken() {
                let _ = set.drain(|index| {
                    if allowance == 0 {
                        return ControlFlow::Break(());
                    }
                    allowance -= 1;
                    match poll_one::<C>(this.store.as_mut(), this.core, index, set, lending) {
                        Polled::Won(value) => {
                            winner = Some(value);
                            ControlFlow::Break(())
                        }
                        Polled::Pending => {
                            yielded |= set.is_marked(index);
                            ControlFlow::Continue(())
                        }
                        Polled::Failed => ControlFlow::Continue(()),
                    }
                });
            }
            // The one branch a race without extras pays for hedging.
            if let (None, Some(extra)) = (&winner, this.extra.as_mut()) {
                let start = Start::Lent(set, lending);
                winner = extra
                    .as_mut()
                    .start_due::<C>(this.store.as_mut(), this.core, start, cx);
            }
        }
        *this.state = State::Running;
        match winner {
            Some(value) => self.win(value),
            None => self.pend(cx),
        }
    }
}
