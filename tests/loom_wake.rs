//! Loom models of the wake layer (`src/wake/`): the bit-set protocol under the maps' pool,
//! and `race`'s lent, reused wakers. Every interleaving of a child waking from another
//! thread while the parent enters, drains, registers and lends wakers, within loom's
//! preemption bound. Run with
//!
//! ```text
//! LOOM_MAX_PREEMPTIONS=3 RUSTFLAGS="--cfg tollgate_loom" cargo test --test loom_wake --release --target-dir target/loom
//! ```
//!
//! The parent is driven by `loom::future::block_on`, whose waker is loom's: a wake-up the
//! parent never gets leaves it blocked with every other thread finished, which loom reports
//! as a deadlock. So "no lost wake-up" is checked on every explored interleaving.
//!
//! What is modelled: the bit words, the summary, the `active` flag and the parent's waker
//! slot (loom's model of an `AtomicWaker`), and the lent waker's number and fence. What is
//! not: the strong counts of the `Arc`s behind the wakers are `std`'s (a `Waker` can only
//! be made safely from a `std` `Arc`), so loom places their increments, decrements and
//! reads only between the neighbouring loom operations and does not explore their weak
//! orderings; the wakers' threads yield around their clones' drops so that the reuse check
//! meets both "still held" and "just dropped".
//!
//! See `tests/loom.rs` for why the cfg is `tollgate_loom` and not `loom`.
#![cfg(tollgate_loom)]

use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use futures_lite::future::poll_fn;
use loom::sync::{Arc, Mutex};
use loom::thread;
use tollgate::__wake_model::ReadySet;

/// Drives `set` as the maps' pool does until every slot of `expected` was taken: enter,
/// drain (`stop_after` at a time, putting the rest back), and before `Pending` register,
/// look, and wake itself if something is there.
fn parent_takes(set: &ReadySet, expected: &[usize], stop_after: Option<usize>) {
    let expected: BTreeSet<usize> = expected.iter().copied().collect();
    let mut seen = BTreeSet::new();
    loom::future::block_on(poll_fn(|cx| {
        set.enter();
        seen.extend(set.drain(stop_after));
        if seen == expected {
            return Poll::Ready(());
        }
        set.register(cx);
        if set.has_woken() {
            cx.waker().wake_by_ref();
        }
        Poll::Pending
    }));
}

/// Two children of one word wake from two threads (one by value, one by reference) while
/// the parent polls: the parent is woken or sees the bits itself.
#[test]
fn wakes_in_one_word_from_two_threads_are_never_lost() {
    loom::model(|| {
        let set = ReadySet::new(64);
        let (a, b) = (set.waker(3), set.waker(5));
        let first = thread::spawn(move || a.wake());
        let second = thread::spawn(move || b.wake_by_ref());
        parent_takes(&set, &[3, 5], None);
        first.join().unwrap();
        second.join().unwrap();
    });
}

/// With a summary (600 slots, 10 words): wakes in two words, one slot per word, while the
/// parent takes one slot per drain and puts the rest back. A word's bit without its
/// summary bit (a wake-up between its two ORs) must not be lost either.
#[test]
fn wakes_across_summary_words_are_never_lost() {
    loom::model(|| {
        let set = ReadySet::new(600);
        let (a, b) = (set.waker(1), set.waker(599));
        let first = thread::spawn(move || a.wake());
        let second = thread::spawn(move || b.wake());
        set.waker(70).wake_by_ref(); // one the parent's own poll woke
        parent_takes(&set, &[1, 70, 599], Some(1));
        first.join().unwrap();
        second.join().unwrap();
    });
}

/// The parent registers a new waker while a child wakes: the wake-up reaches one of them.
#[test]
fn a_wake_during_the_first_register_is_not_lost() {
    loom::model(|| {
        let set = ReadySet::new(2);
        let waker = set.waker(1);
        let child = thread::spawn(move || waker.wake());
        parent_takes(&set, &[1], None);
        child.join().unwrap();
    });
}

/// A contestant that finishes once its gate opens; the gate's opener runs on another
/// thread and wakes whatever waker the contestant left there.
struct Gate {
    state: Arc<Mutex<GateState>>,
    /// Wake itself (without keeping the waker) and pend on the first poll, like a yield.
    yield_first: bool,
    /// Keep a clone of the waker but fail at once, like a contestant whose request was
    /// refused after it registered for a reply.
    fail_holding_waker: bool,
    polls: usize,
    outcome: Result<usize, usize>,
}

#[derive(Default)]
struct GateState {
    open: bool,
    waker: Option<Waker>,
}

impl Gate {
    fn new(outcome: Result<usize, usize>) -> (Self, Arc<Mutex<GateState>>) {
        let state = Arc::new(Mutex::new(GateState::default()));
        let gate = Self {
            state: state.clone(),
            yield_first: false,
            fail_holding_waker: false,
            polls: 0,
            outcome,
        };
        (gate, state)
    }
}

impl Future for Gate {
    type Output = Result<usize, usize>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.polls += 1;
        if self.yield_first && self.polls == 1 {
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let mut state = self.state.lock().unwrap();
        if state.open {
            return Poll::Ready(self.outcome);
        }
        state.waker = Some(cx.waker().clone());
        if self.fail_holding_waker {
            return Poll::Ready(self.outcome);
        }
        Poll::Pending
    }
}

/// Opens the gate and wakes its waker, if any, holding the clone a little longer (a yield
/// between the wake-up and the drop) so the parent's reuse check can run in between.
fn open(gate: &Mutex<GateState>) {
    let waker = {
        let mut state = gate.lock().unwrap();
        state.open = true;
        state.waker.take()
    };
    if let Some(waker) = waker {
        waker.wake_by_ref();
        thread::yield_now();
        drop(waker);
    }
}

fn error_indices(result: Result<usize, tollgate::RaceError<usize>>) -> BTreeSet<usize> {
    let failed = result.expect_err("every contestant fails");
    assert!(!failed.is_timed_out());
    for (index, error) in failed.errors() {
        assert_eq!(index, error, "an error is reported under its contestant");
    }
    failed.errors().iter().map(|(index, _)| *index).collect()
}

/// Contestant 0 keeps the race's first (shared) waker; 1 keeps a waker of its own. Both
/// are opened from another thread while the race polls: both are polled again and the
/// winner wins.
#[test]
fn race_kept_wakers_woken_from_another_thread_reach_their_contestants() {
    loom::model(|| {
        let (first, first_gate) = Gate::new(Err(0));
        let (second, second_gate) = Gate::new(Ok(1));
        let opener = thread::spawn(move || {
            open(&first_gate);
            open(&second_gate);
        });
        let won = loom::future::block_on(tollgate::race([first, second]));
        assert_eq!(won, Ok(1));
        opener.join().unwrap();
    });
}

/// Waker reuse: contestant 0 is polled with the race's spare waker and keeps a clone (it
/// must keep that waker: renumbering it for 1 while the opener still holds the clone
/// would send 0's wake-up to 1 and 0 would never be polled). Contestant 1 yields first, so
/// its second poll borrows whatever spare is left, reused or new, while the opener may
/// be waking or dropping 0's clone. The race must end with both errors.
#[test]
fn race_a_lent_waker_is_reused_only_when_nobody_else_holds_it() {
    loom::model(|| {
        let (first, first_gate) = Gate::new(Err(0));
        let (mut second, second_gate) = Gate::new(Err(1));
        second.yield_first = true;
        let opener = thread::spawn(move || {
            open(&first_gate);
            open(&second_gate);
        });
        let failed = loom::future::block_on(tollgate::race([first, second]));
        assert_eq!(error_indices(failed), BTreeSet::from([0, 1]));
        opener.join().unwrap();
    });
}

/// Contestant 0 fails while a clone of its lent waker is still held (and woken) by another
/// thread; contestant 1 pends on its next poll with whatever spare is left. A late wake-up
/// through 0's clone can at worst poll 1 once more (were that waker reused early); 1 must
/// still get its own wake-up and the race must end with both errors.
#[test]
fn race_a_failed_contestants_waker_held_elsewhere_is_not_reused_early() {
    loom::model(|| {
        let (mut first, first_gate) = Gate::new(Err(0));
        first.fail_holding_waker = true;
        let (mut second, second_gate) = Gate::new(Err(1));
        second.yield_first = true;
        let holder = thread::spawn(move || open(&first_gate));
        let opener = thread::spawn(move || open(&second_gate));
        let failed = loom::future::block_on(tollgate::race([first, second]));
        assert_eq!(error_indices(failed), BTreeSet::from([0, 1]));
        holder.join().unwrap();
        opener.join().unwrap();
    });
}
