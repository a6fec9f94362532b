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
//! The poll's parts, apart from the [`Race`] that runs them: [`select`] (the select loop's
//! rounds, and when a race leaves it), [`woken`] (the wake set, the lent wakers, and the
//! polls of the woken contestants), [`hedge`] (the timeout's timer and the hedged starts),
//! [`core`] (the counts, and the failures recorded as they come).
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
mod core;
pub(crate) mod error;
mod hedge;
mod select;
mod slot;
mod store;
mod woken;

pub use contestants::IntoContestants;
pub use error::RaceError;

use std::fmt;
use std::future::Future;
use std::mem;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use self::core::{Core, take_errors};
use self::hedge::{Extra, Start};
use self::select::{Selected, poll_select};
use self::store::Contestants;
use self::woken::{Turned, Woken};

/// A race of more contestants than this (and than a select loop for good holds) turns to
/// its wake set at its first pending contestant, in its first poll, rather than after a
/// wasted round: see the module docs.
const SELECT_FIRST_MAX: usize = 32;

/// What a poll of a race of `C` gives.
type RacePoll<C> = Poll<Result<<C as Contestants>::Ok, RaceError<<C as Contestants>::Error>>>;

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
        self.extra().set_timeout(duration);
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
                extra.as_mut().set_hedge(None);
            }
        } else {
            self.extra().set_hedge(Some(delay));
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
    fn win(self: Pin<&mut Self>, value: C::Ok) -> RacePoll<C> {
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
    fn pend(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> RacePoll<C> {
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
            if let Poll::Ready(timeout) = extra.as_mut().poll_timeout(cx) {
                if let Some(after) = timeout {
                    crate::events::timed_out("race", after);
                }
                return Poll::Ready(Err(self.fail(timeout)));
            }
        }
        Poll::Pending
    }

    /// The first poll's set-up, before any contestant is polled: starts the timeout's
    /// timer. A plain race starts its `len` contestants now; a hedged one starts nobody
    /// yet, and makes its wake set now unless it is a select loop for good. Returns
    /// whether every contestant starts now.
    #[inline]
    fn begin(self: Pin<&mut Self>, len: usize) -> bool {
        let this = self.project();
        let hedged = this
            .extra
            .as_mut()
            .is_some_and(|extra| extra.as_mut().arm());
        if !hedged {
            this.core.started = len;
        } else {
            // Nobody runs yet: the first contestant starts as each next one will (in
            // `start_due`); a race that is not a select loop for good starts them with a
            // waker of its own each (a hedged race waits anyway).
            this.core.running = 0;
            if !C::is_select_loop(&this.store) {
                *this.wake = Some(Woken::new(len));
            }
        }
        !hedged
    }

    /// A poll of the race of `len` with its wake set, after the round that turned it to
    /// the set in this poll (`turned`; `None` without one): polls the woken contestants,
    /// unless that round had a winner or a contestant yielded in it, then starts a hedged
    /// race's contestants that are due.
    #[inline]
    fn poll_wake_set(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        len: usize,
        turned: Option<Turned<C::Ok>>,
    ) -> RacePoll<C> {
        let (mut winner, yielded) = match turned {
            Some(Turned { winner, yielded }) => (winner, yielded),
            None => (None, false),
        };
        let mut this = self.as_mut().project();
        // Wake-ups during this poll only mark their contestants: we look before we return.
        let Some(woken) = this.wake.as_deref_mut() else {
            unreachable!("a race past its select loop has a wake set");
        };
        woken.set.enter();
        if winner.is_none() && !yielded {
            winner = woken.poll_woken::<C>(this.store.as_mut(), this.core, len);
        }
        // The one branch a race without extras pays for hedging.
        if let (None, Some(extra)) = (&winner, this.extra.as_mut()) {
            let start = Start::Lent(&woken.set, &mut woken.lending);
            winner = extra
                .as_mut()
                .start_due::<C>(this.store.as_mut(), this.core, start, cx);
        }
        *this.state = State::Running;
        match winner {
            Some(value) => self.win(value),
            None => self.pend(cx),
        }
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
            .field("timeout", &extra.and_then(Extra::timeout))
            .field("hedge", &extra.and_then(Extra::hedge))
            .finish_non_exhaustive()
    }
}

impl<C> Future for Race<C>
where
    C: ?Sized + Contestants,
{
    type Output = Result<C::Ok, RaceError<C::Error>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let state = mem::replace(self.as_mut().project().state, State::Polling);
        let len = C::len(&self.store);
        // Whether this is a select loop's first poll, its contestants all started now: one
        // that pends is then no sign that the race was woken for another one.
        let first = match state {
            State::Select | State::Running => false,
            State::Fresh => self.as_mut().begin(len),
            State::Done => panic!("`Race` polled after it completed"),
            State::Polling => panic!("`Race` polled after a contestant panicked"),
        };
        let mut turned = None;
        if state == State::Select || (state == State::Fresh && self.wake.is_none()) {
            let mut this = self.as_mut().project();
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
                    let woken = this.wake.insert(Woken::new(len));
                    turned = Some(woken.lend_round::<C>(this.store.as_mut(), this.core));
                }
            }
        }
        self.poll_wake_set(cx, len, turned)
    }
}
