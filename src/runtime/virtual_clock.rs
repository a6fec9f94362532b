//! Virtual time for tests (feature `test-util`): a clock per thread that stands still while
//! the future runs and jumps to the earliest timer when nothing else can happen.
//!
//! [`run_virtual`] drives a future on the calling thread as `run_sync` does, with its own
//! clock installed in a thread-local for as long as it runs: [`now`] reads that clock, and
//! every tollgate timer made on the thread ([`VirtualTimer`]) registers its deadline with it.
//! Whenever a poll of the future returns `Pending` and nothing woke it meanwhile, the driver
//! moves the clock to the earliest registered deadline and wakes every timer due by then.
//! So a test's verdict is the same on a busy machine as on a quiet one: between two jumps no
//! time passes, however long the machine takes to poll.
//!
//! The clock is per thread, so parallel tests never share it; the driver refuses to nest.
//! Only timers made on the driver's thread follow it; work on other threads runs on the
//! system's clock, and a wake from another thread that comes after the driver has jumped is
//! seen after the jump (tests on virtual time keep their work in the one future).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};
use std::time::Instant;

/// How many polls in a row may wake the future again before the driver calls it a busy
/// wait: far more than any real work yields (a map yields once per budget of items), few
/// enough to fail in seconds when each poll is cheap.
const BUSY_WAIT: u64 = 10_000_000;

/// How long, in wall time, polls that keep waking the future may go on before the driver
/// calls it a busy wait however few they are: a heavy poll (a map over a large window)
/// would otherwise take many minutes to reach [`BUSY_WAIT`]. No test on virtual time does
/// this much work without a single wait on a timer.
const BUSY_WAIT_WALL: std::time::Duration = std::time::Duration::from_secs(30);

/// Self-wakes between two reads of the wall clock while a busy streak lasts: the read is
/// not free, and a streak this short says nothing yet.
const BUSY_WALL_CHECK_EVERY: u64 = 1024;

/// Tells one clock from another, so a timer polled under a clock it was not made for (moved
/// to another thread, or kept past its driver's end) is never taken for one of its timers.
static NEXT_CLOCK: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// The virtual clock of the [`run_virtual`] call driving this thread, if any.
    static CLOCK: RefCell<Option<Clock>> = const { RefCell::new(None) };
}

struct Clock {
    id: u64,
    now: Instant,
    next_timer: u64,
    /// The registered timers by deadline, then by registration (ties wake in order).
    timers: BTreeMap<(Instant, u64), Waker>,
}

/// Now on this thread's virtual clock, if a [`run_virtual`] call drives it.
#[inline]
pub(crate) fn now() -> Option<Instant> {
    CLOCK.with(|clock| clock.borrow().as_ref().map(|clock| clock.now))
}

/// The id of this thread's virtual clock, if a [`run_virtual`] call drives it.
#[inline]
pub(crate) fn current_clock() -> Option<u64> {
    CLOCK.with(|clock| clock.borrow().as_ref().map(|clock| clock.id))
}

/// A timer on the virtual clock of the thread that made it: fires once the clock reaches
/// its deadline.
#[derive(Debug)]
pub(crate) struct VirtualTimer {
    clock: u64,
    deadline: Instant,
    /// Its place in the clock's timers while registered.
    slot: Option<(Instant, u64)>,
}

impl VirtualTimer {
    /// A timer at `deadline` on the clock `clock` (this thread's, from [`current_clock`]).
    pub(crate) fn at(clock: u64, deadline: Instant) -> Self {
        Self {
            clock,
            deadline,
            slot: None,
        }
    }

    /// The clock the timer belongs to.
    pub(crate) fn clock(&self) -> u64 {
        self.clock
    }

    /// When it fires.
    pub(crate) fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Ready once this thread's clock (the timer's own, which the caller checked) has reached
    /// the deadline; otherwise registers `cx`'s waker for it.
    pub(crate) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        CLOCK.with(|clock| {
            let mut clock = clock.borrow_mut();
            let clock = clock
                .as_mut()
                .filter(|clock| clock.id == self.clock)
                .expect("a virtual timer is polled only under its own clock");
            if clock.now >= self.deadline {
                if let Some(slot) = self.slot.take() {
                    clock.timers.remove(&slot);
                }
                return Poll::Ready(());
            }
            let slot = *self.slot.get_or_insert_with(|| {
                clock.next_timer += 1;
                (self.deadline, clock.next_timer)
            });
            match clock.timers.get_mut(&slot) {
                Some(waker) => waker.clone_from(cx.waker()),
                None => {
                    clock.timers.insert(slot, cx.waker().clone());
                }
            }
            Poll::Pending
        })
    }
}

impl Drop for VirtualTimer {
    fn drop(&mut self) {
        let Some(slot) = self.slot else { return };
        // `try_with`: a timer dropped while the thread's locals are torn down has no clock
        // left to leave.
        let _ = CLOCK.try_with(|clock| {
            let Ok(mut clock) = clock.try_borrow_mut() else {
                return;
            };
            if let Some(clock) = clock.as_mut().filter(|clock| clock.id == self.clock) {
                clock.timers.remove(&slot);
            }
        });
    }
}

/// The driver's waker: records that a wake came and unparks the driver's thread.
struct Signal {
    woken: AtomicBool,
    thread: Thread,
}

impl Wake for Signal {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if !self.woken.swap(true, Ordering::AcqRel) {
            self.thread.unpark();
        }
    }
}

/// Installs a fresh clock on this thread for as long as it lives; takes it away on drop,
/// also when the future panics.
struct Installed;

impl Installed {
    #[track_caller]
    fn new() -> Self {
        CLOCK.with(|clock| {
            let mut clock = clock.borrow_mut();
            assert!(
                clock.is_none(),
                "run_virtual called inside another run_virtual call; `.await` the future instead"
            );
            *clock = Some(Clock {
                id: NEXT_CLOCK.fetch_add(1, Ordering::Relaxed),
                now: Instant::now(),
                next_timer: 0,
                timers: BTreeMap::new(),
            });
        });
        Self
    }
}

impl Drop for Installed {
    fn drop(&mut self) {
        // Dropped after the future, so the future's timers found their clock to leave.
        let clock = CLOCK.with(|clock| clock.borrow_mut().take());
        drop(clock);
    }
}

/// Moves the clock to the earliest deadline and takes the wakers of every timer due by
/// then; `None` when no timer is registered.
fn jump() -> Option<Vec<Waker>> {
    CLOCK.with(|clock| {
        let mut clock = clock.borrow_mut();
        let clock = clock.as_mut()?;
        let (&(earliest, _), _) = clock.timers.first_key_value()?;
        clock.now = clock.now.max(earliest);
        let mut due = Vec::new();
        while let Some(entry) = clock.timers.first_entry() {
            if entry.key().0 > clock.now {
                break;
            }
            due.push(entry.remove());
        }
        Some(due)
    })
}

/// Runs `future` to completion on the calling thread, on a virtual clock: see
/// [`crate::testing::run_virtual`].
#[track_caller]
pub(crate) fn run_virtual<F: Future>(future: F) -> F::Output {
    let signal = Arc::new(Signal {
        woken: AtomicBool::new(false),
        thread: thread::current(),
    });
    let waker = Waker::from(signal.clone());
    let mut cx = Context::from_waker(&waker);
    let _installed = Installed::new();
    let mut future = pin!(future);
    let mut busy = BusyWait::new(BUSY_WAIT, BUSY_WAIT_WALL, BUSY_WALL_CHECK_EVERY);
    loop {
        signal.woken.store(false, Ordering::Release);
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        if signal.woken.load(Ordering::Acquire) {
            if let Some(wakes) = busy.woke_again() {
                panic!(
                    "run_virtual: the future woke itself {wakes} times in a row while the \
                     clock stood still: a busy wait (polling until a time passes) never lets \
                     virtual time pass; wait on a timer (`tollgate::sleep`) instead"
                );
            }
            continue;
        }
        busy.waited();
        match jump() {
            // The wakers run outside the clock's borrow: a wake may poll nothing here, but
            // it may drop the last handle of a timer, which leaves the clock.
            Some(due) => due.into_iter().for_each(Waker::wake),
            // Nothing can happen on this thread: only another thread can wake the future.
            None => {
                while !signal.woken.load(Ordering::Acquire) {
                    thread::park();
                }
            }
        }
    }
}

/// Polls in a row that woke the future again before they returned: a future that keeps
/// waking itself while it waits for a time never lets the clock move (a busy wait), and
/// would spin forever instead of failing. A streak is a busy wait once it reaches a number
/// of wakes or, read every few wakes, a wall time.
struct BusyWait {
    wakes: u64,
    since: Option<Instant>,
    max_wakes: u64,
    max_wall: std::time::Duration,
    check_every: u64,
}

impl BusyWait {
    fn new(max_wakes: u64, max_wall: std::time::Duration, check_every: u64) -> Self {
        Self {
            wakes: 0,
            since: None,
            max_wakes,
            max_wall,
            check_every,
        }
    }

    /// One more poll that woke the future again: `Some(wakes in the streak)` once the streak
    /// is a busy wait.
    fn woke_again(&mut self) -> Option<u64> {
        self.wakes += 1;
        let too_long = self.wakes % self.check_every == 0
            && self.since.get_or_insert_with(Instant::now).elapsed() >= self.max_wall;
        (self.wakes >= self.max_wakes || too_long).then_some(self.wakes)
    }

    /// A poll that waited (for a timer or another thread): the streak ends.
    fn waited(&mut self) {
        self.wakes = 0;
        self.since = None;
    }
}

#[cfg(test)]
mod tests {
    use super::BusyWait;
    use std::time::{Duration, Instant};

    #[test]
    fn a_streak_of_cheap_wakes_is_a_busy_wait_at_its_count() {
        let mut busy = BusyWait::new(1000, Duration::from_secs(3600), 10);
        assert_eq!((1..1000).find_map(|_| busy.woke_again()), None);
        assert_eq!(busy.woke_again(), Some(1000));
        busy.waited();
        assert_eq!(
            (1..1000).find_map(|_| busy.woke_again()),
            None,
            "a wait ends the streak"
        );
    }

    #[test]
    fn a_streak_of_heavy_wakes_is_a_busy_wait_at_its_wall_time() {
        let wall = Duration::from_millis(50);
        let mut busy = BusyWait::new(u64::MAX, wall, 4);
        let started = Instant::now();
        let wakes = std::iter::repeat_with(|| {
            std::thread::sleep(Duration::from_millis(5));
            busy.woke_again()
        })
        .find_map(|caught| caught)
        .expect("an endless streak is caught");
        assert_eq!(wakes % 4, 0, "the wall clock is read every 4 wakes only");
        // The streak's clock starts at its first read (wake 4): caught at least `wall` after.
        assert!(
            started.elapsed() >= wall,
            "caught after {:?}",
            started.elapsed()
        );
        busy.waited();
        assert_eq!(
            busy.woke_again(),
            None,
            "a wait ends the streak and its wall time"
        );
    }
}
