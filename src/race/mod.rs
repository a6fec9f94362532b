//! [`race`]: the first success among many futures wins, the losers are dropped, and when
//! nobody wins [`RaceError`] carries every contestant's error.
//!
//! The race polls its contestants itself (no spawning). Each contestant is polled with its
//! own waker (see [`Wakeups`]), so a wake-up polls that contestant only: racing 10,000
//! futures costs O(10,000) polls in total, not O(10,000) per wake-up.

use std::fmt;
use std::future::Future;
use std::mem;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering, fence};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use atomic_waker::AtomicWaker;

use crate::time::{Sleep, sleep};
use crate::wake::for_each_bit;

/// One contestant: the future, boxed so it stays pinned while the others come and go
/// (`None` once it failed), and its waker if it kept a clone of it.
struct Slot<F> {
    future: Option<Pin<Box<F>>>,
    lent: Option<Lent>,
}

mod sealed {
    /// Keeps [`IntoContestants`](super::IntoContestants) implemented only here, so its
    /// hidden method can change.
    pub trait Sealed<Marker> {}
}

/// Marks the [`IntoContestants`] impl for iterables of one future type.
#[derive(Debug)]
pub enum Iterable {}

/// Marks the [`IntoContestants`] impls for tuples of futures of different types.
#[derive(Debug)]
pub enum Tuple {}

/// What [`race`] accepts: any `IntoIterator` of futures of one type (a `Vec`, an array,
/// `urls.iter().map(fetch)`), or a tuple of up to 12 futures of different types.
///
/// Every contestant resolves to `Result<Self::Ok, Self::Error>`, with the same `Ok` and
/// error types. Contestants are numbered in the order the iterator yields them, or by their
/// position in the tuple; [`RaceError`] reports errors with those numbers.
///
/// `Marker` only tells the two families of impls apart (`Iterable` and `Tuple`); it is
/// inferred, so you never write it. The trait is sealed.
///
/// # Examples
///
/// ```
/// use std::future::ready;
/// use tollgate::race;
///
/// # futures_lite::future::block_on(async {
/// // One type: a Vec, an array or any iterator.
/// let mirrors = vec![ready(Err("down")), ready(Ok(1))];
/// assert_eq!(race(mirrors).await.unwrap(), 1);
///
/// // Different types: a tuple.
/// let mixed = (ready(Err::<u32, _>("down")), async { Ok(2) });
/// assert_eq!(race(mixed).await.unwrap(), 2);
/// # });
/// ```
pub trait IntoContestants<Marker>: sealed::Sealed<Marker> + Sized {
    /// What the winner returns.
    type Ok;
    /// What a losing contestant returns.
    type Error;
    /// One contestant as the race stores it.
    type Future: Future<Output = Result<Self::Ok, Self::Error>>;

    /// Appends every contestant, in index order, wrapped by `wrap`.
    #[doc(hidden)]
    fn push_into<W, Wrap>(self, out: &mut Vec<W>, wrap: Wrap)
    where
        Wrap: Fn(Self::Future) -> W;
}

impl<I, T, E> sealed::Sealed<Iterable> for I
where
    I: IntoIterator,
    I::Item: IntoFuture<Output = Result<T, E>>,
{
}

impl<I, T, E> IntoContestants<Iterable> for I
where
    I: IntoIterator,
    I::Item: IntoFuture<Output = Result<T, E>>,
{
    type Ok = T;
    type Error = E;
    type Future = <I::Item as IntoFuture>::IntoFuture;

    fn push_into<W, Wrap>(self, out: &mut Vec<W>, wrap: Wrap)
    where
        Wrap: Fn(Self::Future) -> W,
    {
        let contestants = self.into_iter();
        out.reserve(contestants.size_hint().0);
        for contestant in contestants {
            out.push(wrap(contestant.into_future()));
        }
    }
}

pin_project_lite::pin_project! {
    /// One of two futures with the same output: how [`race`](crate::race) stores the
    /// contestants of a tuple, which have different types, in one list.
    ///
    /// A tuple `(a, b, c)` becomes `left(a)`, `right(left(b))` and `right(right(c))`.
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    pub struct Either<L, R> {
        #[pin]
        side: Side<L, R>,
    }
}

pin_project_lite::pin_project! {
    #[project = SideProj]
    enum Side<L, R> {
        Left { #[pin] future: L },
        Right { #[pin] future: R },
    }
}

impl<L, R> Either<L, R> {
    fn left(future: L) -> Self {
        Self {
            side: Side::Left { future },
        }
    }

    fn right(future: R) -> Self {
        Self {
            side: Side::Right { future },
        }
    }
}

impl<L, R> fmt::Debug for Either<L, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let side = match self.side {
            Side::Left { .. } => "Left",
            Side::Right { .. } => "Right",
        };
        f.debug_struct("Either")
            .field("side", &side)
            .finish_non_exhaustive()
    }
}

impl<L, R> Future for Either<L, R>
where
    L: Future,
    R: Future<Output = L::Output>,
{
    type Output = L::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<L::Output> {
        match self.project().side.project() {
            SideProj::Left { future } => future.poll(cx),
            SideProj::Right { future } => future.poll(cx),
        }
    }
}

impl<A, T, E> sealed::Sealed<Tuple> for (A,) where A: IntoFuture<Output = Result<T, E>> {}

impl<A, T, E> IntoContestants<Tuple> for (A,)
where
    A: IntoFuture<Output = Result<T, E>>,
{
    type Ok = T;
    type Error = E;
    type Future = A::IntoFuture;

    fn push_into<W, Wrap>(self, out: &mut Vec<W>, wrap: Wrap)
    where
        Wrap: Fn(Self::Future) -> W,
    {
        out.push(wrap(self.0.into_future()));
    }
}

/// Implements `IntoContestants<Tuple>` for `(A, B, ...)` in terms of the tuple one shorter:
/// the head becomes `Either::Left`, every contestant of the tail is wrapped in `Either::Right`.
macro_rules! tuple_contestants {
    ($head:ident $head_var:ident, $($tail:ident $tail_var:ident),+) => {
        impl<$head, $($tail,)+ T, E> sealed::Sealed<Tuple> for ($head, $($tail,)+)
        where
            $head: IntoFuture<Output = Result<T, E>>,
            $($tail: IntoFuture<Output = Result<T, E>>,)+
        {
        }

        impl<$head, $($tail,)+ T, E> IntoContestants<Tuple> for ($head, $($tail,)+)
        where
            $head: IntoFuture<Output = Result<T, E>>,
            $($tail: IntoFuture<Output = Result<T, E>>,)+
        {
            type Ok = T;
            type Error = E;
            type Future = Either<
                $head::IntoFuture,
                <($($tail,)+) as IntoContestants<Tuple>>::Future,
            >;

            fn push_into<W, Wrap>(self, out: &mut Vec<W>, wrap: Wrap)
            where
                Wrap: Fn(Self::Future) -> W,
            {
                let ($head_var, $($tail_var,)+) = self;
                out.push(wrap(Either::left($head_var.into_future())));
                ($($tail_var,)+).push_into(out, |future| wrap(Either::right(future)));
            }
        }
    };
}

tuple_contestants!(F0 f0, F1 f1);
tuple_contestants!(F0 f0, F1 f1, F2 f2);
tuple_contestants!(F0 f0, F1 f1, F2 f2, F3 f3);
tuple_contestants!(F0 f0, F1 f1, F2 f2, F3 f3, F4 f4);
tuple_contestants!(F0 f0, F1 f1, F2 f2, F3 f3, F4 f4, F5 f5);
tuple_contestants!(F0 f0, F1 f1, F2 f2, F3 f3, F4 f4, F5 f5, F6 f6);
tuple_contestants!(F0 f0, F1 f1, F2 f2, F3 f3, F4 f4, F5 f5, F6 f6, F7 f7);
tuple_contestants!(F0 f0, F1 f1, F2 f2, F3 f3, F4 f4, F5 f5, F6 f6, F7 f7, F8 f8);
tuple_contestants!(F0 f0, F1 f1, F2 f2, F3 f3, F4 f4, F5 f5, F6 f6, F7 f7, F8 f8, F9 f9);
tuple_contestants!(F0 f0, F1 f1, F2 f2, F3 f3, F4 f4, F5 f5, F6 f6, F7 f7, F8 f8, F9 f9, F10 f10);
tuple_contestants!(F0 f0, F1 f1, F2 f2, F3 f3, F4 f4, F5 f5, F6 f6, F7 f7, F8 f8, F9 f9, F10 f10, F11 f11);

const BITS: usize = u64::BITS as usize;

/// The ready bits and the race's own waker, shared with the contestants' wakers.
///
/// It is also the first contestant waker: a waker made from it marks the bit of contestant
/// `index`. So a race whose contestants keep no waker allocates no waker of its own.
#[derive(Debug)]
struct Shared {
    parent: AtomicWaker,
    /// Bits of contestants 0..64, inline: most races are small.
    first: AtomicU64,
    /// Bits of contestants 64.., one word per 64.
    rest: Box<[AtomicU64]>,
    /// Which contestant a waker made from `Shared` itself stands for; changed only while
    /// nobody but the race holds such a waker (see [`Lent::unshared`]).
    index: AtomicUsize,
}

impl Shared {
    fn word(&self, word: usize) -> &AtomicU64 {
        match word {
            0 => &self.first,
            _ => &self.rest[word - 1],
        }
    }

    /// Sets the bit of contestant `index`, and wakes the race if its word was empty.
    ///
    /// A word that was not empty has woken the race already, and the race has not taken
    /// it yet: it takes every word on every poll after [`Wakeups::register`] (the first
    /// poll checks them after registering instead). So one wake-up per word and per poll
    /// of the race is enough.
    fn mark(&self, index: usize) {
        if self
            .word(index / BITS)
            .fetch_or(1 << (index % BITS), Ordering::AcqRel)
            == 0
        {
            self.parent.wake();
        }
    }
}

impl Wake for Shared {
    fn wake(self: Arc<Self>) {
        self.mark(self.index.load(Ordering::Relaxed));
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.mark(self.index.load(Ordering::Relaxed));
    }
}

/// The waker of one contestant, made when the one in [`Shared`] is taken: marks its bit
/// and wakes the race.
///
/// It holds `Shared` weakly, so that the strong count of `Shared` counts exactly the
/// race and the clones of the waker made from `Shared`.
#[derive(Debug)]
struct SlotWaker {
    shared: Weak<Shared>,
    /// Changed only while nobody but the race holds the waker (see [`Lent::unshared`]).
    index: AtomicUsize,
}

impl Wake for SlotWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // Once the race is gone there is nobody to wake.
        if let Some(shared) = self.shared.upgrade() {
            shared.mark(self.index.load(Ordering::Relaxed));
        }
    }
}

/// A contestant's waker, with the `Arc` it was made from (`None`: the race's [`Shared`])
/// so the race can tell whether anyone else holds a clone.
#[derive(Debug)]
struct Lent {
    waker: Waker,
    own: Option<Arc<SlotWaker>>,
}

impl Lent {
    /// The waker made from `Shared` itself.
    fn shared(shared: &Arc<Shared>) -> Self {
        Self {
            waker: Waker::from(shared.clone()),
            own: None,
        }
    }

    /// A waker of its own.
    fn own(shared: &Arc<Shared>, index: usize) -> Self {
        let slot = Arc::new(SlotWaker {
            shared: Arc::downgrade(shared),
            index: AtomicUsize::new(index),
        });
        Self {
            waker: Waker::from(slot.clone()),
            own: Some(slot),
        }
    }

    /// Whether only the race holds this waker: the `Arc` it was made from has two owners,
    /// the race (`shared` or `own`) and `waker`. Then nobody else can wake it (a wake
    /// during the last poll has already set its bit) and nobody can clone it, so it may be
    /// renumbered. A `SlotWaker` waking at this moment holds `shared` a little longer:
    /// that only makes the answer a cautious no.
    fn unshared(&self, shared: &Arc<Shared>) -> bool {
        let owners = match &self.own {
            Some(slot) => Arc::strong_count(slot),
            None => Arc::strong_count(shared),
        };
        if owners == 2 {
            // Pairs with the release decrement of a clone dropped on another thread: its
            // last use of `index` happens before we renumber it.
            fence(Ordering::Acquire);
            true
        } else {
            false
        }
    }

    /// Makes the waker stand for contestant `index`. Only while [`Self::unshared`].
    fn renumber(&self, shared: &Shared, index: usize) {
        let number = match &self.own {
            Some(slot) => &slot.index,
            None => &shared.index,
        };
        number.store(index, Ordering::Relaxed);
    }
}

/// Which contestants were woken since the race last looked: the idea of `ReadySet`, with
/// wakers made lazily and reused.
///
/// `ReadySet` makes every slot's waker up front, an allocation each. But many contestants
/// never keep their waker: one that finishes on its first poll (a cached answer, a refused
/// connection), or one that only wakes itself during the poll (`yield_now`). So a poll
/// uses the spare waker, renumbered for that contestant, and only a contestant that keeps
/// a clone of it (a socket or timer registration) takes it away for as long as it runs.
/// The first spare is [`Shared`] itself: a race whose contestants keep no waker allocates
/// no waker at all.
#[derive(Debug)]
struct Wakeups {
    shared: Arc<Shared>,
    spare: Option<Lent>,
}

impl Wakeups {
    fn new(slots: usize) -> Self {
        let words = slots.div_ceil(BITS).max(1);
        let shared = Arc::new(Shared {
            parent: AtomicWaker::new(),
            first: AtomicU64::new(0),
            rest: (1..words).map(|_| AtomicU64::new(0)).collect(),
            index: AtomicUsize::new(0),
        });
        Self {
            spare: Some(Lent::shared(&shared)),
            shared,
        }
    }

    /// The spare waker, numbered for contestant `index` (made if there is none). After the
    /// poll, [`Self::take_spare`] it if the contestant kept a clone.
    fn spare(&mut self, index: usize) -> &Waker {
        let lent = match &mut self.spare {
            Some(spare) => {
                spare.renumber(&self.shared, index);
                spare
            }
            none => none.insert(Lent::own(&self.shared, index)),
        };
        &lent.waker
    }

    /// Whether the spare waker was cloned and the clone is still around (so it may still
    /// be woken and must keep its number).
    fn spare_kept(&self) -> bool {
        self.spare
            .as_ref()
            .is_some_and(|spare| !spare.unshared(&self.shared))
    }

    /// Takes the spare waker away (a contestant kept it); the next poll makes a new one.
    fn take_spare(&mut self) -> Option<Lent> {
        self.spare.take()
    }

    /// Keeps a waker for the next contestant if nobody else holds a clone of it (else it
    /// may still be woken, and must keep its number: it is dropped).
    fn give_back(&mut self, lent: Lent) {
        if self.spare.is_none() && lent.unshared(&self.shared) {
            self.spare = Some(lent);
        }
    }

    /// Whether any contestant was woken since the bits were last taken.
    fn any_woken(&self) -> bool {
        (0..self.words()).any(|word| self.shared.word(word).load(Ordering::Acquire) != 0)
    }

    /// Remembers the race's task. Call it before [`Self::take_word`] on every poll, so no
    /// wake-up between the two is lost.
    fn register(&self, cx: &Context<'_>) {
        self.shared.parent.register(cx.waker());
    }

    fn words(&self) -> usize {
        1 + self.shared.rest.len()
    }

    /// Takes (and clears) the woken bits of contestants `64 * word ..`.
    fn take_word(&self, word: usize) -> u64 {
        let bits = self.shared.word(word);
        // Most words are empty: a load does not take the cache line the way a swap does.
        if bits.load(Ordering::Acquire) == 0 {
            0
        } else {
            bits.swap(0, Ordering::AcqRel)
        }
    }
}

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
/// Only the contestants whose wakers fired are polled again, so a race of 10,000 futures
/// costs O(10,000) polls in total.
///
/// **`race` is for idempotent work.** The losers are dropped mid-flight and may already
/// have done part of their job: racing mirrors for a download is fine, racing two payments
/// is not.
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
/// # Cancel safety
///
/// Dropping the race drops every contestant still running. When the race returns (won,
/// failed or timed out), every other contestant has already been dropped.
#[doc(alias = "select_ok")]
#[doc(alias = "race_ok")]
#[doc(alias = "first_ok")]
pub fn race<M, C>(contestants: C) -> Race<C::Future, C::Error>
where
    C: IntoContestants<M>,
{
    let mut slots = Vec::new();
    contestants.push_into(&mut slots, |future| Slot {
        future: Some(Box::pin(future)),
        lent: None,
    });
    Race {
        wakeups: Wakeups::new(slots.len()),
        running: slots.len(),
        slots,
        errors: Vec::new(),
        timeout: None,
        timer: None,
        state: State::Fresh,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Not polled yet: the first poll polls every contestant.
    Fresh,
    /// Polled once: later polls poll the woken contestants only.
    Running,
    /// The output was returned.
    Done,
}

/// Future returned by [`race`].
///
/// `F` is the type of one contestant and `E` its error type.
#[must_use = "futures do nothing unless you `.await` or poll them"]
pub struct Race<F, E> {
    slots: Vec<Slot<F>>,
    wakeups: Wakeups,
    /// Contestants neither failed nor dropped.
    running: usize,
    /// Errors in the order they came.
    errors: Vec<(usize, E)>,
    timeout: Option<Duration>,
    /// Started on the first poll when there is a timeout.
    timer: Option<Pin<Box<Sleep>>>,
    state: State,
}

impl<F, E> Race<F, E> {
    /// Gives up once `duration` has passed without a winner, counted from the race's first
    /// poll.
    ///
    /// The timeout is checked after the contestants on every poll, so a contestant that
    /// is ready wins over a deadline that has passed. `Duration::ZERO` gives each contestant
    /// exactly one poll; `Duration::MAX` never expires. The timer runs on
    /// the clock of [`sleep`](crate::sleep), so tokio's paused clock applies with the
    /// `tokio` feature.
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
    /// assert!(failed.timed_out());
    /// assert_eq!(failed.to_string(), "race timed out after 5ms with 0 failures");
    /// # });
    /// ```
    ///
    /// # Errors
    ///
    /// When the time is up, the race drops every contestant still running and fails with a
    /// [`RaceError`] whose [`timed_out`](RaceError::timed_out) is true and that carries
    /// the errors collected until then.
    pub fn timeout(mut self, duration: Duration) -> Self {
        self.timeout = Some(duration);
        self
    }

    /// Drops every contestant still running.
    fn drop_contestants(&mut self) {
        drop(mem::take(&mut self.slots));
        self.running = 0;
    }

    /// Ends the race with a failure.
    fn fail(&mut self, timed_out: Option<Duration>) -> RaceError<E> {
        self.drop_contestants();
        self.timer = None;
        self.state = State::Done;
        RaceError {
            errors: mem::take(&mut self.errors),
            timed_out,
        }
    }
}

// Contestants are boxed and errors are never pinned: moving a `Race` moves no pinned data.
impl<F, E> Unpin for Race<F, E> {}

impl<F, E> fmt::Debug for Race<F, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Race")
            .field("contestants", &self.slots.len())
            .field("running", &self.running)
            .field("failed", &self.errors.len())
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// What polling one contestant gave.
enum Polled<T> {
    Pending,
    /// The contestant failed; its error is recorded.
    Failed,
    Won(T),
}

impl<F, E> Race<F, E> {
    /// Polls contestant `index` with its own waker; records and drops a failed contestant.
    fn poll_contestant<T>(&mut self, index: usize) -> Polled<T>
    where
        F: Future<Output = Result<T, E>>,
    {
        let slot = &mut self.slots[index];
        // A contestant that already failed may still be woken by a stale waker: skip it.
        let Some(future) = slot.future.as_mut() else {
            return Polled::Pending;
        };
        let waker = match &slot.lent {
            Some(kept) => &kept.waker,
            None => self.wakeups.spare(index),
        };
        let result = match future.as_mut().poll(&mut Context::from_waker(waker)) {
            Poll::Pending => {
                // A contestant that kept a clone of the spare waker keeps the waker.
                if slot.lent.is_none() && self.wakeups.spare_kept() {
                    slot.lent = self.wakeups.take_spare();
                }
                return Polled::Pending;
            }
            Poll::Ready(result) => result,
        };
        match result {
            Ok(value) => Polled::Won(value),
            Err(error) => {
                slot.future = None;
                // Its waker can be lent out again, unless a clone is still around.
                match slot.lent.take() {
                    Some(kept) => self.wakeups.give_back(kept),
                    None if self.wakeups.spare_kept() => drop(self.wakeups.take_spare()),
                    None => {}
                }
                if self.errors.is_empty() {
                    // One allocation for every error to come.
                    self.errors.reserve_exact(self.running);
                }
                self.running -= 1;
                self.errors.push((index, error));
                Polled::Failed
            }
        }
    }
}

impl<F, T, E> Future for Race<F, E>
where
    F: Future<Output = Result<T, E>>,
{
    type Output = Result<T, RaceError<E>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let mut winner = None;
        match this.state {
            State::Done => panic!("`Race` polled after it completed"),
            State::Fresh => {
                this.state = State::Running;
                if let Some(duration) = this.timeout {
                    this.timer = Some(Box::pin(sleep(duration)));
                }
                for index in 0..this.slots.len() {
                    if let Polled::Won(value) = this.poll_contestant(index) {
                        winner = Some(value);
                        break;
                    }
                }
                // Registered only now, as most races of ready contestants end here: a
                // contestant woken during the first poll wakes us again below instead.
                if winner.is_none() && this.running > 0 {
                    this.wakeups.register(cx);
                    if this.wakeups.any_woken() {
                        cx.waker().wake_by_ref();
                    }
                }
            }
            State::Running => {
                // Register before taking the bits: a wake-up after the take reaches us.
                this.wakeups.register(cx);
                for word in 0..this.wakeups.words() {
                    let bits = this.wakeups.take_word(word);
                    for_each_bit(word, bits, |index| {
                        if winner.is_none() {
                            if let Polled::Won(value) = this.poll_contestant(index) {
                                winner = Some(value);
                            }
                        }
                    });
                    if winner.is_some() {
                        break;
                    }
                }
            }
        }
        if let Some(value) = winner {
            // The losers go before the winner's value leaves this poll.
            this.drop_contestants();
            this.timer = None;
            this.state = State::Done;
            return Poll::Ready(Ok(value));
        }
        if this.running == 0 {
            return Poll::Ready(Err(this.fail(None)));
        }
        if let Some(timer) = &mut this.timer {
            if timer.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Err(this.fail(this.timeout)));
            }
        }
        Poll::Pending
    }
}

/// The error of [`race`]: no contestant succeeded.
///
/// Carries every contestant's error with its index, in the order they failed (a contestant
/// that was still running when the race timed out has no entry). It derefs to that list.
/// The error types of the contestants need only be `Debug` for this to be an error:
/// `RaceError<E>` is `Error + Send + Sync + 'static` whenever `E` is `Debug + Send + Sync
/// + 'static`.
///
/// Converts into the umbrella [`tollgate::Error`](crate::Error) when `E` converts into
/// `Box<dyn Error + Send + Sync>` (each error is boxed).
///
/// # Examples
///
/// ```
/// use std::future::ready;
///
/// # futures_lite::future::block_on(async {
/// let failed = tollgate::race([ready(Err::<(), _>("a")), ready(Err("b"))])
///     .await
///     .unwrap_err();
/// assert_eq!(failed.to_string(), "all 2 contestants failed");
/// assert!(!failed.timed_out());
/// assert_eq!(failed.len(), 2); // through Deref to the list
/// assert_eq!(failed.into_errors(), [(0, "a"), (1, "b")]);
/// # });
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RaceError<E> {
    errors: Vec<(usize, E)>,
    timed_out: Option<Duration>,
}

impl<E> RaceError<E> {
    /// Every `(contestant index, error)`, in the order the contestants failed.
    pub fn errors(&self) -> &[(usize, E)] {
        &self.errors
    }

    /// Takes the list of `(contestant index, error)`.
    pub fn into_errors(self) -> Vec<(usize, E)> {
        self.errors
    }

    /// Whether the race ended because its [timeout](Race::timeout) passed (rather than
    /// because every contestant failed).
    pub fn timed_out(&self) -> bool {
        self.timed_out.is_some()
    }

    /// The timeout that passed, when [`timed_out`](Self::timed_out).
    pub fn timeout(&self) -> Option<Duration> {
        self.timed_out
    }

    /// Applies `f` to every error, keeping indices and the timeout.
    pub fn map_errors<E2>(self, mut f: impl FnMut(E) -> E2) -> RaceError<E2> {
        RaceError {
            errors: self
                .errors
                .into_iter()
                .map(|(index, error)| (index, f(error)))
                .collect(),
            timed_out: self.timed_out,
        }
    }
}

impl<E> Deref for RaceError<E> {
    type Target = [(usize, E)];

    fn deref(&self) -> &Self::Target {
        &self.errors
    }
}

impl<E> fmt::Display for RaceError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let failed = self.errors.len();
        match self.timed_out {
            Some(after) => {
                let noun = if failed == 1 { "failure" } else { "failures" };
                write!(f, "race timed out after {after:?} with {failed} {noun}")
            }
            None if failed == 0 => f.write_str("race had no contestants"),
            None if failed == 1 => f.write_str("the only contestant failed"),
            None => write!(f, "all {failed} contestants failed"),
        }
    }
}

impl<E: fmt::Debug> std::error::Error for RaceError<E> {}

impl<E> From<RaceError<E>> for crate::Error
where
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    fn from(error: RaceError<E>) -> Self {
        crate::Error::Race(error.map_errors(Into::into))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unshared_waker_is_renumbered_and_reused() {
        let mut wakeups = Wakeups::new(130);
        assert_eq!(wakeups.words(), 3);
        let kept = wakeups.spare(0).clone();
        assert!(wakeups.spare_kept());
        let first = wakeups.take_spare().unwrap();
        // Someone still holds it: not reused.
        wakeups.give_back(first);
        let second = wakeups.spare(1).clone();
        assert!(!kept.will_wake(&second));
        drop(second);
        assert!(!wakeups.spare_kept());
        let third = wakeups.spare(129).clone();
        assert!(third.will_wake(wakeups.spare(129)));
        assert!(!wakeups.any_woken());

        third.wake_by_ref();
        kept.wake();
        assert!(wakeups.any_woken());
        let mut woken = Vec::new();
        for word in 0..wakeups.words() {
            for_each_bit(word, wakeups.take_word(word), |index| woken.push(index));
        }
        assert_eq!(woken, [0, 129]);
        assert!(!wakeups.any_woken());
        // A waker that outlives its race wakes nobody.
        drop(wakeups);
        third.wake();
    }
}
