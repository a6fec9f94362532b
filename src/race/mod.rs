//! [`race`]: the first success among many futures wins, the losers are dropped, and when
//! nobody wins [`RaceError`] carries every contestant's error. [`Race::hedge`] makes it a
//! hedged race: the contestants start one after another instead of all at once.
//!
//! The race polls its contestants itself (no spawning). Until one of them pends it polls
//! them with its own waker, as a select loop does: a race whose contestants all finish at
//! once makes no waker. From the first that pends on, each gets a waker lent from the wake
//! layer ([`crate::wake`]), so a wake-up polls that contestant only: racing 10,000 futures
//! costs O(10,000) polls in total, not O(10,000) per wake-up. Contestants woken during a
//! poll of the race (one finishing wakes the next) are polled again within it, up to a
//! budget, unless one woke itself (it yielded): then the executor gets its turn first.
//!
//! The contestants stay pinned in blocks ([`blocks`]), one allocation per block.
//!
//! What a race allocates, at least, in safe Rust: a block for its first 4 contestants and
//! one per 32 after them (and their list), where a crate free to use `unsafe` pins them all
//! in one slice; the wake set once a contestant pends; a waker of its own for each
//! contestant that keeps a clone of its waker while another one holds the lent one (a
//! `Waker` made safely is an `Arc`, one per contestant number); the list of errors only
//! when the race fails.
//!
//! A hedged race keeps one timer, for the next start, moved forward at each start; the
//! plain race pays one branch per poll for it.

mod blocks;
mod contestants;
mod error;

pub use contestants::{Either, IntoContestants};
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
use crate::wake::{Lender, WakeSet};
use blocks::{Blocks, Slot, SlotOwn, SlotProj};

/// At least this many polls of woken contestants in one poll of a race (more in a larger
/// race: as many as it has contestants), then it lets the executor run others.
const MIN_BUDGET: usize = 32;

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
pub fn race<M, C>(contestants: C) -> Race<C::Future, C::Error>
where
    C: IntoContestants<M>,
{
    let mut slots = Blocks::new();
    contestants.push_into(&mut |future| slots.push(future));
    Race {
        contestants: Contestants {
            running: slots.len(),
            started: 0,
            failed: 0,
            slots,
            lender: None,
        },
        wake: None,
        holder: None,
        timeout: None,
        timer: None,
        hedge: None,
        state: State::Fresh,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Not polled yet: the first poll starts every contestant (a hedged race: the first).
    Fresh,
    /// Polled once: later polls poll the woken contestants only.
    Running,
    /// Polling contestants. Still set on the next poll only if a contestant panicked
    /// and the panic left the previous one: that poll panics too, rather than hang on
    /// the wake-ups the unwinding poll had taken and not yet passed on.
    Polling,
    /// The output was returned.
    Done,
}

/// The contestants and what the race knows about them, apart from the [`WakeSet`] that
/// says which ones to poll (so it can be borrowed while they are polled).
struct Contestants<F, E> {
    slots: Blocks<F, E>,
    /// Made with the [`WakeSet`], when the first contestant pends.
    lender: Option<Lender>,
    /// Contestants started and neither failed nor dropped.
    running: usize,
    /// Contestants `0..started` have been polled at least once; the rest never were.
    started: usize,
    /// Contestants failed so far.
    failed: usize,
}

/// Which waker polls a contestant.
enum Waking<'a, 'b> {
    /// The race's own: until a contestant pends, nothing needs telling apart, and no
    /// [`WakeSet`] is made (a race whose contestants all finish at once needs none).
    Parent(&'a mut Context<'b>),
    /// A waker lent from the set, for this contestant only.
    Lent(&'a WakeSet),
}

/// What polling one contestant gave.
enum Polled<T> {
    Pending,
    /// The contestant failed; its error is recorded.
    Failed,
    Won(T),
}

impl<F, E> Contestants<F, E> {
    /// Polls contestant `index` (starting it if it never was); records a failure.
    #[inline]
    fn poll<T>(&mut self, index: usize, waking: Waking<'_, '_>) -> Polled<T>
    where
        F: Future<Output = Result<T, E>>,
    {
        let mut slot = self.slots.place(index);
        // A contestant that already failed may still be woken by a stale waker: skip it.
        let SlotProj::Running { future, lent } = slot.as_mut().project() else {
            return Polled::Pending;
        };
        let poll = match &waking {
            Waking::Parent(cx) => future.poll(&mut Context::from_waker(cx.waker())),
            Waking::Lent(wake) => {
                let lender = self.lender.get_or_insert_with(|| Lender::new(wake));
                let waker = match lent {
                    Some(kept) => kept.waker(),
                    None => lender.lend(wake, index),
                };
                future.poll(&mut Context::from_waker(waker))
            }
        };
        let result = match poll {
            Poll::Pending => {
                // A contestant that kept a clone of the lent waker keeps the waker.
                if let (Waking::Lent(wake), Some(lender)) = (waking, &mut self.lender) {
                    if lent.is_none() {
                        *lent = lender.kept(wake);
                    }
                }
                return Polled::Pending;
            }
            Poll::Ready(result) => result,
        };
        match result {
            Ok(value) => Polled::Won(value),
            Err(error) => {
                let lent = lent.take();
                slot.set(Slot::Failed {
                    error,
                    order: self.failed,
                });
                self.failed += 1;
                self.running -= 1;
                if let (Waking::Lent(wake), Some(lender)) = (waking, &mut self.lender) {
                    lender.finished(wake, lent);
                }
                Polled::Failed
            }
        }
    }

    /// Polls contestant `index` with the parent's waker while there is no wake set yet,
    /// and makes the set when a contestant pends: that one becomes the `holder`, which the
    /// next poll of the race polls with a waker of its own. Returns what the poll gave, and
    /// whether the contestant woke itself (then it waits for the next poll of the race).
    #[inline]
    fn poll_first<T>(
        &mut self,
        wake: &mut Option<WakeSet>,
        holder: &mut Option<usize>,
        index: usize,
        cx: &mut Context<'_>,
    ) -> (Polled<T>, bool)
    where
        F: Future<Output = Result<T, E>>,
    {
        if let Some(set) = wake {
            let polled = self.poll(index, Waking::Lent(set));
            let woke_itself = matches!(polled, Polled::Pending) && set.is_marked(index);
            return (polled, woke_itself);
        }
        let polled = self.poll(index, Waking::Parent(cx));
        if let Polled::Pending = polled {
            // It may keep the parent's waker, which does not tell which contestant to
            // poll: every other contestant gets a waker of its own from now on.
            let set = wake.insert(WakeSet::new(self.slots.len()));
            set.enter();
            *holder = Some(index);
        }
        // A wake-up of its own went to the executor: it is polled on the next poll anyway.
        (polled, false)
    }

    /// Starts the next contestant: its first poll.
    fn start_next<T>(&mut self, wake: &WakeSet) -> Polled<T>
    where
        F: Future<Output = Result<T, E>>,
    {
        let index = self.started;
        self.started += 1;
        self.running += 1;
        self.poll(index, Waking::Lent(wake))
    }

    /// Drops every contestant, started or not, and every error.
    fn drop_all(&mut self) {
        self.slots.clear();
        self.running = 0;
    }

    /// The errors, in the order the contestants failed; drops every contestant.
    fn take_errors(&mut self) -> Vec<(usize, E)> {
        let mut errors = Vec::with_capacity(self.failed);
        for index in 0..self.slots.len() {
            if let SlotOwn::Failed { error, order } =
                self.slots.place(index).project_replace(Slot::Empty)
            {
                errors.push((order, index, error));
            }
        }
        self.drop_all();
        errors.sort_unstable_by_key(|&(order, _, _)| order);
        // Collected in place: the same allocation, each entry one word shorter.
        errors
            .into_iter()
            .map(|(_, index, error)| (index, error))
            .collect()
    }
}

/// The future of a [`race`], and its builder: set a [`timeout`](Self::timeout) or a
/// [`hedge`](Self::hedge) delay, then `.await` it (or spawn it, or return it from a map's
/// function).
///
/// `F` is the type of one contestant and `E` its error type.
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
/// fn ask(mirrors: Vec<Answer>) -> Race<Answer, String> {
///     tollgate::race(mirrors).timeout(Duration::from_secs(5))
/// }
///
/// # futures_lite::future::block_on(async {
/// assert_eq!(ask(vec![ready(Err("down".into())), ready(Ok(3))]).await, Ok(3));
/// # });
/// ```
#[must_use = "futures do nothing unless you `.await` or poll them"]
pub struct Race<F, E> {
    contestants: Contestants<F, E>,
    /// Which contestants were woken; made when the first contestant pends (a hedged race:
    /// on the first poll).
    wake: Option<WakeSet>,
    /// The contestant that pended while polled with the race's own waker: the next poll
    /// polls it, with a waker of its own.
    holder: Option<usize>,
    timeout: Option<Duration>,
    /// Started on the first poll when there is a timeout.
    timer: Option<Pin<Box<Sleep>>>,
    /// `Some` for a hedged race.
    hedge: Option<Hedge>,
    state: State,
}

/// What a hedged race adds: the delay, and the one timer for the next start.
struct Hedge {
    delay: Duration,
    /// Fires `delay` after the latest start; set again at each start after which the race
    /// has to wait (one timer for the race, not one per contestant). `None` until then.
    next_start: Option<Pin<Box<RtSleep>>>,
}

impl<F, E> Race<F, E> {
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
        self.hedge = if delay.is_zero() {
            None
        } else {
            Some(Hedge {
                delay,
                next_start: None,
            })
        };
        self
    }

    /// Ends the race with a failure.
    fn fail(&mut self, timed_out: Option<Duration>) -> RaceError<E> {
        self.timer = None;
        self.hedge = None;
        self.state = State::Done;
        RaceError::new(
            self.contestants.take_errors(),
            timed_out,
            self.contestants.started,
        )
    }
}

impl<F, T, E> Race<F, E>
where
    F: Future<Output = Result<T, E>>,
{
    /// Polls the holder, if any, with a waker of its own from now on.
    #[inline]
    fn poll_holder(&mut self, yielded: &mut bool) -> Option<T> {
        if let (Some(index), Some(wake)) = (self.holder.take(), &self.wake) {
            match self.contestants.poll(index, Waking::Lent(wake)) {
                Polled::Won(value) => return Some(value),
                Polled::Pending => *yielded |= wake.is_marked(index),
                Polled::Failed => {}
            }
        }
        None
    }
}

impl Hedge {
    /// Starts every contestant that is due: while some are left, the next one once every
    /// started one has failed or the timer has fired. Returns the winner's value if one
    /// of them wins on its first poll.
    ///
    /// Never inlined: kept out of the race's poll, so the plain race's poll stays small.
    #[inline(never)]
    fn start_due<F, T, E>(
        &mut self,
        contestants: &mut Contestants<F, E>,
        wake: &WakeSet,
        cx: &mut Context<'_>,
    ) -> Option<T>
    where
        F: Future<Output = Result<T, E>>,
    {
        while contestants.started < contestants.slots.len() {
            if contestants.running > 0 {
                // The timer was set at the latest start: that start left `running > 0`.
                let timer = self.next_start.as_mut()?;
                if timer.as_mut().poll(cx).is_pending() {
                    return None;
                }
            }
            if contestants.started > 0 {
                crate::events::hedge(contestants.started, contestants.running == 0);
            }
            if let Polled::Won(value) = contestants.start_next(wake) {
                return Some(value);
            }
            // Set the timer only when the race will wait on it: a contestant that failed
            // at once, with nobody else running, lets the next one start right away.
            if contestants.running > 0 && contestants.started < contestants.slots.len() {
                let timer = RtSleep::after(self.delay);
                match &mut self.next_start {
                    Some(next_start) => next_start.set(timer),
                    None => self.next_start = Some(Box::pin(timer)),
                }
            }
        }
        None
    }
}

// Contestants are pinned in boxed blocks and errors are never pinned: moving a `Race`
// moves no pinned data.
impl<F, E> Unpin for Race<F, E> {}

impl<F, E> fmt::Debug for Race<F, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Race")
            .field("contestants", &self.contestants.slots.len())
            .field("running", &self.contestants.running)
            .field("started", &self.contestants.started)
            .field("failed", &self.contestants.failed)
            .field("timeout", &self.timeout)
            .field("hedge", &self.hedge.as_ref().map(|hedge| hedge.delay))
            .finish_non_exhaustive()
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
        // Wake-ups during this poll only mark their contestants: we look before we return.
        if let Some(wake) = &this.wake {
            wake.enter();
        }
        // Polls left in this poll of the race for contestants woken during it.
        let mut budget = this.contestants.slots.len().max(MIN_BUDGET);
        // A contestant woke itself (it yielded): the executor gets its turn before the
        // contestants woken now are polled.
        let mut yielded = false;
        match mem::replace(&mut this.state, State::Polling) {
            State::Done => panic!("`Race` polled after it completed"),
            State::Polling => panic!("`Race` polled after a contestant panicked"),
            State::Fresh => {
                if let Some(duration) = this.timeout {
                    this.timer = Some(Box::pin(sleep(duration)));
                }
                if this.hedge.is_none() {
                    this.contestants.started = this.contestants.slots.len();
                    // A contestant finished after the holder pended: it may have woken the
                    // holder (one mirror's answer unblocking another's), through the
                    // parent's waker, so nothing says whether it did.
                    let mut finished_after_holder = false;
                    for index in 0..this.contestants.slots.len() {
                        let (polled, woke_itself) = this.contestants.poll_first(
                            &mut this.wake,
                            &mut this.holder,
                            index,
                            cx,
                        );
                        yielded |= woke_itself;
                        match polled {
                            Polled::Won(value) => {
                                winner = Some(value);
                                break;
                            }
                            Polled::Failed => finished_after_holder |= this.holder.is_some(),
                            Polled::Pending => {}
                        }
                    }
                    // Then poll the holder again now, as a select loop would, rather than
                    // after a round trip through the executor.
                    if finished_after_holder && winner.is_none() {
                        winner = this.poll_holder(&mut yielded);
                    }
                } else {
                    // Nobody runs yet: the first contestant starts below, as each next one,
                    // each with a waker of its own (a hedged race waits anyway).
                    this.contestants.running = 0;
                    let wake = this.wake.insert(WakeSet::new(this.contestants.slots.len()));
                    wake.enter();
                }
            }
            State::Running => winner = this.poll_holder(&mut yielded),
        }
        // Poll the woken contestants, again while polling them wakes others (one finishing
        // wakes the next, say): within the budget, until one yields.
        if let Some(wake) = &this.wake {
            while winner.is_none() && !yielded && budget > 0 && wake.any() {
                let _ = wake.drain(|index| {
                    if budget == 0 {
                        return ControlFlow::Break(());
                    }
                    budget -= 1;
                    match this.contestants.poll(index, Waking::Lent(wake)) {
                        Polled::Won(value) => {
                            winner = Some(value);
                            ControlFlow::Break(())
                        }
                        Polled::Pending => {
                            yielded |= wake.is_marked(index);
                            ControlFlow::Continue(())
                        }
                        Polled::Failed => ControlFlow::Continue(()),
                    }
                });
            }
        }
        // The one branch a plain race pays for hedging.
        if let (Some(hedge), Some(wake)) = (&mut this.hedge, &this.wake) {
            if winner.is_none() {
                winner = hedge.start_due(&mut this.contestants, wake, cx);
            }
        }
        this.state = State::Running;
        if let Some(value) = winner {
            // The losers go before the winner's value leaves this poll.
            this.contestants.drop_all();
            this.timer = None;
            this.state = State::Done;
            return Poll::Ready(Ok(value));
        }
        if this.contestants.running == 0 {
            return Poll::Ready(Err(this.fail(None)));
        }
        // Register, then look: a contestant woken during this poll and not polled yet (it
        // yielded, or the budget ran out) gets its next poll in the next poll of the race,
        // after the executor has had its turn.
        if let Some(wake) = &this.wake {
            wake.register(cx);
            if wake.any() {
                cx.waker().wake_by_ref();
            }
        }
        if let Some(timer) = &mut this.timer {
            if timer.as_mut().poll(cx).is_ready() {
                if let Some(after) = this.timeout {
                    crate::events::timed_out("race", after);
                }
                return Poll::Ready(Err(this.fail(this.timeout)));
            }
        }
        Poll::Pending
    }
}
