//! `race`, hedged races and `RaceError`.
//!
//! When contestants start and when a race ends is time, so it is proven on virtual time
//! (`virtual_time!` in `on_virtual_time`: smol's world on `run_virtual`, and tokio's paused
//! clock), where timers fire exactly at their deadlines: the fast mirror's answer comes at
//! its latency, timeouts end races exactly at their deadline, hedged starts come exactly a
//! delay apart, a failure starts the next contestant at the same instant, and an empty race
//! ends at once. The same scenarios run on every executor (`matrix!`: smol, `run_sync`,
//! tokio current and multi-thread) for what holds at any speed: who wins, who started and
//! was polled, what was dropped, the errors in order and their words. Polls, wakes and
//! allocations are counted on plain threads, with no time at all.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::future::{Future, pending, ready};
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use common::{DropFlag, matrix, virtual_time};
use futures_lite::future::{poll_fn, yield_now};
use tollgate::testing::now;
use tollgate::{RaceError, race, sleep};

/// The system allocator, counting the allocations made by each thread (so tests running
/// in parallel do not count each other's).
struct PerThread;

thread_local! {
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: every call goes straight to `System`, which upholds the contract; the counter is
// a const-initialized thread-local without a destructor, which allocates nothing.
unsafe impl GlobalAlloc for PerThread {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|count| count.set(count.get() + 1));
        // SAFETY: the caller's guarantees for `alloc` are passed on unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|count| count.set(count.get() + 1));
        // SAFETY: the caller's guarantees for `realloc` are passed on unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: PerThread = PerThread;

/// How many allocations `f` makes on this thread.
fn allocations(f: impl FnOnce()) -> usize {
    let before = ALLOCATIONS.with(Cell::get);
    f();
    ALLOCATIONS.with(Cell::get) - before
}

/// Contestants that finish in a fixed order, whatever order they are polled in: the one
/// whose turn it is finishes when polled and wakes the next in line.
struct Baton {
    order: Vec<usize>,
    state: Mutex<(usize, Vec<Option<Waker>>)>,
    polls: AtomicUsize,
}

impl Baton {
    fn new(contestants: usize, order: Vec<usize>) -> Arc<Self> {
        Arc::new(Self {
            order,
            state: Mutex::new((0, vec![None; contestants])),
            polls: AtomicUsize::new(0),
        })
    }

    /// Contestant `me`: when its turn comes, `Ok(me)` if `me == winner`, else `Err(me)`.
    fn contestant(
        self: &Arc<Self>,
        me: usize,
        winner: Option<usize>,
    ) -> impl Future<Output = Result<usize, usize>> + Send + 'static {
        let baton = self.clone();
        poll_fn(move |cx| {
            baton.polls.fetch_add(1, Ordering::Relaxed);
            let mut state = baton.state.lock().unwrap();
            let (turn, wakers) = &mut *state;
            if baton.order.get(*turn) != Some(&me) {
                wakers[me] = Some(cx.waker().clone());
                return Poll::Pending;
            }
            *turn += 1;
            if let Some(next) = baton.order.get(*turn) {
                if let Some(waker) = wakers[*next].take() {
                    waker.wake();
                }
            }
            Poll::Ready(if winner == Some(me) { Ok(me) } else { Err(me) })
        })
    }
}

async fn mirror(name: &'static str, latency: Duration, works: bool) -> Result<String, String> {
    sleep(latency).await;
    if works {
        Ok(format!("<html>{name}</html>"))
    } else {
        Err(format!("cannot reach {name}"))
    }
}

/// A mirror answering in 5 ms against one taking a minute: the answer, and when it came.
async fn fast_and_slow_mirrors() -> Duration {
    let start = now();
    let body = race([
        mirror("slow.example", Duration::from_secs(60), true),
        mirror("fast.example", Duration::from_millis(5), true),
    ])
    .await
    .unwrap();
    assert_eq!(body, "<html>fast.example</html>");
    now() - start
}

/// A race whose contestants hang but one that fails, under a 20 ms timeout, checked for
/// what holds at any speed; how long it took.
async fn hung_race_timed_out() -> Duration {
    let flags: Vec<DropFlag> = (0..2).map(|_| DropFlag::default()).collect();
    let hung = |flag: &DropFlag| {
        let guard = flag.guard();
        async move {
            let _guard = guard;
            sleep(Duration::from_secs(3600)).await;
            Ok::<u8, &str>(1)
        }
    };
    let start = now();
    let failed = race((
        async { Err::<u8, _>("mirror down") },
        hung(&flags[0]),
        hung(&flags[1]),
    ))
    .timeout(Duration::from_millis(20))
    .await
    .unwrap_err();
    let dropped: Vec<bool> = flags.iter().map(DropFlag::is_set).collect();
    assert_eq!(dropped, [true, true]);
    assert!(failed.is_timed_out());
    assert_eq!(failed.timeout(), Some(Duration::from_millis(20)));
    assert_eq!(failed.errors(), [(0, "mirror down")]);
    assert_eq!(
        failed.to_string(),
        "race timed out after 20ms with 1 failure"
    );
    now() - start
}

/// Empty races, checked for what holds at any speed; how long the one under an hour's
/// timeout took.
async fn empty_races() -> Duration {
    let failed = race(Vec::<std::future::Ready<Result<u8, String>>>::new())
        .await
        .unwrap_err();
    assert!(failed.errors().is_empty());
    assert!(!failed.is_timed_out());
    assert_eq!(failed.to_string(), "race had no contestants");
    // A timeout does not make an empty race wait.
    let start = now();
    let failed = race(std::iter::empty::<std::future::Ready<Result<u8, String>>>())
        .timeout(Duration::from_secs(3600))
        .await
        .unwrap_err();
    assert!(!failed.is_timed_out());
    now() - start
}

matrix! {
    async fn fast_mirror_wins_over_slow() {
        fast_and_slow_mirrors().await;
    }

    async fn a_broken_mirror_does_not_end_the_race() {
        let body = race([
            mirror("broken.example", Duration::ZERO, false),
            mirror("slow.example", Duration::from_millis(10), true),
        ])
        .timeout(Duration::from_secs(30))
        .await
        .unwrap();
        assert_eq!(body, "<html>slow.example</html>");
    }

    async fn all_broken_gives_every_error_in_failure_order() {
        // They fail in the order 2, 0, 1 whatever order they are polled in.
        let baton = Baton::new(3, vec![2, 0, 1]);
        let failed = race((0..3).map(|me| baton.contestant(me, None)))
            .await
            .unwrap_err();
        assert_eq!(failed.errors(), [(2, 2), (0, 0), (1, 1)]);
        assert!(!failed.is_timed_out());
        assert_eq!(failed.timeout(), None);
        assert_eq!(failed.to_string(), "all 3 contestants failed");

        let failed = race([
            mirror("a.example", Duration::from_millis(1), false),
            mirror("b.example", Duration::ZERO, false),
        ])
        .await
        .unwrap_err();
        assert_eq!(failed.errors().len(), 2);
        let mut indices: Vec<usize> = failed.errors().iter().map(|(index, _)| *index).collect();
        indices.sort_unstable();
        assert_eq!(indices, [0, 1]);
    }

    async fn losers_are_dropped_before_race_returns() {
        let flags: Vec<DropFlag> = (0..4).map(|_| DropFlag::default()).collect();
        let contestants = flags.iter().enumerate().map(|(index, flag)| {
            let guard = flag.guard();
            async move {
                let _guard = guard;
                match index {
                    // The winner needs a second poll, so the others are mid-flight.
                    2 => {
                        yield_now().await;
                        Ok(index)
                    }
                    3 => {
                        sleep(Duration::from_secs(60)).await;
                        Ok(index)
                    }
                    _ => pending::<Result<usize, ()>>().await,
                }
            }
        });
        let winner = race(contestants).await.unwrap();
        // Checked right after `race` returned, before anything else can run.
        let dropped: Vec<bool> = flags.iter().map(DropFlag::is_set).collect();
        assert_eq!(winner, 2);
        assert_eq!(dropped, [true; 4]);
    }

    async fn timeout_cancels_everything_and_reports() {
        hung_race_timed_out().await;
    }

    async fn zero_timeout_gives_each_contestant_one_poll() {
        let polls = AtomicUsize::new(0);
        let counted = || poll_fn(|_| {
            polls.fetch_add(1, Ordering::SeqCst);
            Poll::<Result<(), ()>>::Pending
        });
        let failed = race([counted(), counted(), counted()])
            .timeout(Duration::ZERO)
            .await
            .unwrap_err();
        assert!(failed.is_timed_out());
        assert!(failed.errors().is_empty());
        assert_eq!(polls.load(Ordering::SeqCst), 3);
        assert_eq!(failed.to_string(), "race timed out after 0ns with 0 failures");

        // A contestant that is ready wins over the expired timeout.
        assert_eq!(race([ready(Ok::<_, ()>(4))]).timeout(Duration::ZERO).await, Ok(4));
    }

    async fn empty_input_fails_at_once() {
        empty_races().await;
    }

    async fn tuples_of_mixed_types() {
        // Three different future types with one Ok and one error type.
        let body = race((
            async { Err::<&str, String>("down".to_owned()) },
            ready(Err("also down".to_owned())),
            async {
                sleep(Duration::from_millis(2)).await;
                Ok("<html>")
            },
        ))
        .await
        .unwrap();
        assert_eq!(body, "<html>");

        // The last of eight different types wins.
        let down = |i: usize| async move { Err::<usize, usize>(i) };
        let winner = race((
            down(0),
            ready(Err(1)),
            async { Err(2) },
            down(3),
            async { yield_now().await; Err(4) },
            ready(Err(5)),
            async { sleep(Duration::ZERO).await; Err(6) },
            async { yield_now().await; yield_now().await; Ok(7) },
        ))
        .await;
        assert_eq!(winner, Ok(7));

        // Twelve, all failing: indices follow tuple positions.
        let failed = race((
            ready(Err::<usize, _>(0)), down(1), ready(Err(2)), down(3),
            ready(Err(4)), down(5), ready(Err(6)), down(7),
            ready(Err(8)), down(9), ready(Err(10)), down(11),
        ))
        .await
        .unwrap_err();
        let indices: Vec<usize> = failed.errors().iter().map(|(index, _)| *index).collect();
        assert_eq!(indices, (0..12).collect::<Vec<_>>());
        assert!(failed.errors().iter().all(|(index, error)| index == error));

        // A 1-tuple works too.
        assert_eq!(race((ready(Ok::<u8, ()>(1)),)).await, Ok(1));
    }

    async fn ten_thousand_contestants_take_linear_polls() {
        const N: usize = 10_000;
        // Contestants fail one at a time, last index first, each woken by the one before;
        // contestant 0 wins at the end. Polling everything on each of the N wake-ups would
        // take about N * N / 2 = 50,000,000 polls.
        let order: Vec<usize> = (0..N).rev().collect();
        let baton = Baton::new(N, order);
        let winner = race((0..N).map(|me| baton.contestant(me, Some(0)))).await;
        assert_eq!(winner, Ok(0));
        let polls = baton.polls.load(Ordering::SeqCst);
        assert!(polls <= 3 * N, "{polls} polls for {N} contestants");
    }

    async fn ten_thousand_contestants_all_failing() {
        const N: usize = 10_000;
        let polls = AtomicUsize::new(0);
        let contestants = (0..N).map(|i| {
            let polls = &polls;
            async move {
                polls.fetch_add(1, Ordering::Relaxed);
                yield_now().await;
                polls.fetch_add(1, Ordering::Relaxed);
                Err::<(), usize>(i)
            }
        });
        let failed = race(contestants).await.unwrap_err();
        assert_eq!(failed.errors().len(), N);
        // Each contestant ran its body twice: polled exactly twice.
        assert_eq!(polls.load(Ordering::SeqCst), 2 * N);
    }

    async fn contestants_may_be_into_future_and_races_are_futures() {
        // A contestant that is only `IntoFuture` (a builder), and a race that is a
        // contestant of another race and the work of a map.
        struct Mirror(&'static str, bool);
        impl std::future::IntoFuture for Mirror {
            type Output = Result<String, String>;
            type IntoFuture = std::pin::Pin<Box<dyn Future<Output = Self::Output> + Send>>;
            fn into_future(self) -> Self::IntoFuture {
                Box::pin(mirror(self.0, Duration::ZERO, self.1))
            }
        }
        let body = race([Mirror("down.example", false), Mirror("up.example", true)]).await;
        assert_eq!(body.unwrap(), "<html>up.example</html>");

        let inner = race((Mirror("a.example", false), ready(Err("b".to_owned()))));
        let outer = race((
            async move { inner.await.map_err(|failed| failed.to_string()) },
            async { Ok("<html>fallback</html>".to_owned()) },
        ));
        assert_eq!(outer.await.unwrap(), "<html>fallback</html>");

        let bodies = tollgate::map_async(["x.example", "y.example"], 2, |name| {
            race([mirror(name, Duration::ZERO, false), mirror(name, Duration::from_millis(1), true)])
                .timeout(Duration::from_secs(60))
        })
        .await;
        let bodies: Vec<String> = bodies.into_iter().map(Result::unwrap).collect();
        assert_eq!(bodies, ["<html>x.example</html>", "<html>y.example</html>"]);
    }

    async fn wake_ups_from_another_thread_reach_every_contestant_of_a_large_race() {
        // 1,000 contestants (wake words with a summary) each leave a clone of their waker
        // and pend; once all of them have, a plain thread wakes them in reverse order.
        // Every contestant fails on its second poll.
        const N: usize = 1_000;
        let parked: Arc<Mutex<Vec<(usize, Waker)>>> = Arc::default();
        let polls: Arc<Vec<AtomicUsize>> = Arc::new((0..N).map(|_| AtomicUsize::new(0)).collect());
        let contestants = (0..N).map(|me| {
            let (parked, polls) = (parked.clone(), polls.clone());
            poll_fn(move |cx| {
                if polls[me].fetch_add(1, Ordering::SeqCst) == 0 {
                    parked.lock().unwrap().push((me, cx.waker().clone()));
                    return Poll::Pending;
                }
                Poll::Ready(Err::<(), usize>(me))
            })
        });
        let waker_thread = {
            let parked = parked.clone();
            std::thread::spawn(move || {
                // Gate on every contestant having parked, not on a timer.
                let mut all = loop {
                    let mut parked = parked.lock().unwrap();
                    if parked.len() == N {
                        break std::mem::take(&mut *parked);
                    }
                    drop(parked);
                    std::thread::yield_now();
                };
                all.sort_by_key(|(me, _)| std::cmp::Reverse(*me));
                for (_, waker) in all {
                    waker.wake();
                }
            })
        };
        let failed = race(contestants).await.unwrap_err();
        waker_thread.join().unwrap();
        let mut indices: Vec<usize> = failed.errors().iter().map(|(index, _)| *index).collect();
        indices.sort_unstable();
        assert_eq!(indices, (0..N).collect::<Vec<_>>());
        let polled: Vec<usize> = polls.iter().map(|p| p.load(Ordering::SeqCst)).collect();
        assert!(polled.iter().all(|&p| p == 2), "each contestant polled exactly twice");
    }

    async fn races_work_when_spawned() {
        // The race is Send when its contestants are, so it can go to another task.
        let body = common::spawn(async {
            race([
                mirror("slow.example", Duration::from_secs(60), true),
                mirror("fast.example", Duration::from_millis(1), true),
            ])
            .await
        })
        .await
        .unwrap();
        assert_eq!(body, "<html>fast.example</html>");
    }
}

/// Counts how many times the parent task was woken.
#[derive(Default)]
struct CountWakes(AtomicUsize);

impl Wake for CountWakes {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn only_the_woken_contestant_is_polled_again() {
    // Six contestants: a race of up to 4 is a select loop for good, which polls them all
    // each time; a larger one only until polling them all is wasted.
    let wakers: Arc<Mutex<Vec<Option<Waker>>>> = Arc::new(Mutex::new(vec![None; 6]));
    let polls: Arc<Vec<AtomicUsize>> = Arc::new((0..6).map(|_| AtomicUsize::new(0)).collect());
    let finish = Arc::new(AtomicBool::new(false));
    let contestant = |me: usize| {
        let (wakers, polls, finish) = (wakers.clone(), polls.clone(), finish.clone());
        poll_fn(move |cx| {
            polls[me].fetch_add(1, Ordering::SeqCst);
            if me == 1 && finish.load(Ordering::SeqCst) {
                return Poll::Ready(Ok::<usize, ()>(me));
            }
            wakers.lock().unwrap()[me] = Some(cx.waker().clone());
            Poll::Pending
        })
    };
    let mut race = pin!(race((0..6).map(contestant)));
    let parent = Arc::new(CountWakes::default());
    let waker = Waker::from(parent.clone());
    let mut cx = Context::from_waker(&waker);
    let counts = || -> Vec<usize> { polls.iter().map(|p| p.load(Ordering::SeqCst)).collect() };

    assert!(race.as_mut().poll(&mut cx).is_pending());
    assert_eq!(counts(), [1, 1, 1, 1, 1, 1]);

    // The first poll was a select loop: every contestant pended with the parent's own
    // waker, which does not tell which contestant it woke. The next poll is a select loop's
    // round too, and when contestants pend again (the wake-up was for another one, or
    // spurious) the race turns to its wake set: each is polled once more, with a waker of
    // its own. After that, a spurious poll of the parent polls nobody.
    assert!(race.as_mut().poll(&mut cx).is_pending());
    assert_eq!(counts(), [3, 3, 3, 3, 3, 3]);
    assert!(race.as_mut().poll(&mut cx).is_pending());
    assert_eq!(counts(), [3, 3, 3, 3, 3, 3]);

    // Waking contestant 2 wakes the parent once, and only 2 is polled.
    let taken = wakers.lock().unwrap()[2].take().unwrap();
    taken.wake_by_ref();
    taken.wake();
    assert_eq!(parent.0.load(Ordering::SeqCst), 1);
    assert!(race.as_mut().poll(&mut cx).is_pending());
    assert_eq!(counts(), [3, 3, 4, 3, 3, 3]);

    finish.store(true, Ordering::SeqCst);
    let taken = wakers.lock().unwrap()[1].take().unwrap();
    taken.wake();
    assert_eq!(race.as_mut().poll(&mut cx), Poll::Ready(Ok(1)));
    assert_eq!(counts(), [3, 4, 4, 3, 3, 3]);
    // The losers are gone: their stored wakers now point at a finished race and waking
    // them is harmless.
    for waker in wakers.lock().unwrap().iter_mut().filter_map(Option::take) {
        waker.wake();
    }
}

/// A race of more than 32 turns to its wake set at its first pending contestant, in its
/// first poll: that one is polled again with a waker of its own, every later one is started
/// with one, and from then on a wake-up polls the woken contestant only.
#[test]
fn a_race_of_more_than_32_turns_to_its_wake_set_at_its_first_pending_contestant() {
    const N: usize = 40;
    let wakers: Arc<Mutex<Vec<Option<Waker>>>> = Arc::new(Mutex::new(vec![None; N]));
    let polls: Arc<Vec<AtomicUsize>> = Arc::new((0..N).map(|_| AtomicUsize::new(0)).collect());
    let parent = Arc::new(CountWakes::default());
    let waker = Waker::from(parent.clone());
    let own_waker = Arc::new(AtomicUsize::new(0));
    let contestant = |me: usize| {
        let (wakers, polls, waker, own_waker) = (
            wakers.clone(),
            polls.clone(),
            waker.clone(),
            own_waker.clone(),
        );
        poll_fn(move |cx| {
            let n = polls[me].fetch_add(1, Ordering::SeqCst) + 1;
            if !cx.waker().will_wake(&waker) {
                own_waker.fetch_add(1, Ordering::SeqCst);
            }
            // Contestants 0..3 fail at once; 21 wins on its third poll.
            match (me, n) {
                (0..3, _) => return Poll::Ready(Err::<usize, usize>(me)),
                (21, 3) => return Poll::Ready(Ok(me)),
                _ => {}
            }
            wakers.lock().unwrap()[me] = Some(cx.waker().clone());
            Poll::Pending
        })
    };
    let mut race = pin!(race((0..N).map(contestant)));
    let mut cx = Context::from_waker(&waker);
    let counts = || -> Vec<usize> { polls.iter().map(|p| p.load(Ordering::SeqCst)).collect() };

    assert!(race.as_mut().poll(&mut cx).is_pending());
    // Contestant 3, the first to pend, was polled with the race's waker and then with its
    // own; every later one once, with its own.
    let mut expected = vec![1; N];
    expected[3] = 2;
    assert_eq!(counts(), expected);
    assert_eq!(own_waker.load(Ordering::SeqCst), N - 3);

    // A spurious poll polls nobody; a wake-up polls its contestant only.
    assert!(race.as_mut().poll(&mut cx).is_pending());
    assert_eq!(counts(), expected);
    for me in [21, 3] {
        let taken = wakers.lock().unwrap()[me].take().unwrap();
        taken.wake();
        assert!(race.as_mut().poll(&mut cx).is_pending());
        expected[me] += 1;
        assert_eq!(counts(), expected);
    }
    wakers.lock().unwrap()[21].take().unwrap().wake();
    assert_eq!(race.as_mut().poll(&mut cx), Poll::Ready(Ok(21)));
    expected[21] += 1;
    assert_eq!(counts(), expected);
    // Each wake-up woke the race once.
    assert_eq!(parent.0.load(Ordering::SeqCst), 3);
}

/// A race of up to 4 contestants, and a tuple race, is a select loop: no wake set, every
/// running contestant polled with the race's own waker on every poll of the race.
#[test]
fn small_races_poll_every_running_contestant_with_the_races_own_waker() {
    let polls: Arc<Vec<AtomicUsize>> = Arc::new((0..4).map(|_| AtomicUsize::new(0)).collect());
    let parent = Arc::new(CountWakes::default());
    let waker = Waker::from(parent.clone());
    let contestant = |me: usize| {
        let (polls, waker) = (polls.clone(), waker.clone());
        poll_fn(move |cx| {
            assert!(
                cx.waker().will_wake(&waker),
                "polled with the race's own waker"
            );
            let n = polls[me].fetch_add(1, Ordering::SeqCst) + 1;
            match (me, n) {
                (0, _) => Poll::Ready(Err::<usize, usize>(0)),
                (3, 3) => Poll::Ready(Ok(3)),
                _ => Poll::Pending,
            }
        })
    };
    let counts = || -> Vec<usize> { polls.iter().map(|p| p.load(Ordering::SeqCst)).collect() };
    let mut cx = Context::from_waker(&waker);
    let mut iterable = pin!(race((0..4).map(contestant)));
    assert!(iterable.as_mut().poll(&mut cx).is_pending());
    assert_eq!(counts(), [1, 1, 1, 1]);
    assert!(iterable.as_mut().poll(&mut cx).is_pending());
    assert_eq!(counts(), [1, 2, 2, 2], "the failed one is not polled again");
    assert_eq!(iterable.as_mut().poll(&mut cx), Poll::Ready(Ok(3)));
    assert_eq!(counts(), [1, 3, 3, 3]);

    for count in polls.iter() {
        count.store(0, Ordering::SeqCst);
    }
    let mut tuple = pin!(race((
        contestant(0),
        contestant(1),
        contestant(2),
        contestant(3)
    )));
    assert!(tuple.as_mut().poll(&mut cx).is_pending());
    assert!(tuple.as_mut().poll(&mut cx).is_pending());
    assert_eq!(tuple.as_mut().poll(&mut cx), Poll::Ready(Ok(3)));
    assert_eq!(counts(), [1, 3, 3, 3]);
}

#[test]
fn wakers_stay_with_their_contestant_whatever_the_others_do() {
    // 0 keeps its waker and fails at once; 1 wakes itself once, then keeps its waker;
    // 2 pends without keeping a waker; 3 keeps its waker and wins when told to; 4 and 5
    // pend without a waker too (six contestants: a race of up to 4 is a select loop).
    let kept: Arc<Mutex<Vec<Option<Waker>>>> = Arc::new(Mutex::new(vec![None; 6]));
    let polls: Arc<Vec<AtomicUsize>> = Arc::new((0..6).map(|_| AtomicUsize::new(0)).collect());
    let finish = Arc::new(AtomicBool::new(false));
    let contestant = |me: usize| {
        let (kept, polls, finish) = (kept.clone(), polls.clone(), finish.clone());
        poll_fn(move |cx| {
            let n = polls[me].fetch_add(1, Ordering::SeqCst) + 1;
            match (me, n) {
                (0, _) => {
                    kept.lock().unwrap()[0] = Some(cx.waker().clone());
                    Poll::Ready(Err(0))
                }
                (1, 1) => {
                    cx.waker().wake_by_ref();
                    Poll::Pending
                }
                (2 | 4 | 5, _) => Poll::Pending,
                (3, _) if finish.load(Ordering::SeqCst) => Poll::Ready(Ok(3)),
                _ => {
                    kept.lock().unwrap()[me] = Some(cx.waker().clone());
                    Poll::Pending
                }
            }
        })
    };
    let mut race = pin!(race((0..6).map(contestant)));
    let parent = Arc::new(CountWakes::default());
    let waker = Waker::from(parent.clone());
    let mut cx = Context::from_waker(&waker);
    let counts = || -> Vec<usize> { polls.iter().map(|p| p.load(Ordering::SeqCst)).collect() };
    let wake = |me: usize| kept.lock().unwrap()[me].clone().unwrap().wake();

    assert!(race.as_mut().poll(&mut cx).is_pending());
    assert_eq!(counts(), [1, 1, 1, 1, 1, 1]);
    assert_eq!(parent.0.load(Ordering::SeqCst), 1, "1 woke itself");
    // A select loop's round, where the others pend again: the race turns to its wake set
    // and polls each running contestant once more, with a waker of its own.
    assert!(race.as_mut().poll(&mut cx).is_pending());
    assert_eq!(counts(), [1, 3, 3, 3, 3, 3]);

    // 0 has failed: its waker wakes the race but polls nobody.
    wake(0);
    assert!(race.as_mut().poll(&mut cx).is_pending());
    assert_eq!(counts(), [1, 3, 3, 3, 3, 3]);

    wake(1);
    assert!(race.as_mut().poll(&mut cx).is_pending());
    assert_eq!(counts(), [1, 4, 3, 3, 3, 3]);

    finish.store(true, Ordering::SeqCst);
    wake(3);
    assert_eq!(race.as_mut().poll(&mut cx), Poll::Ready(Ok(3)));
    assert_eq!(counts(), [1, 4, 3, 4, 3, 3]);
}

/// Before, a race allocated a box per contestant, the wake set and the list of errors: 6
/// allocations for 3 contestants that finish on their first poll, 258 for 256. Then a block
/// for the first 4 contestants, one per 32 after them (and their list): 3 allocations for
/// 5 contestants, 10 for 256. Now the first block is as large as the iterator says it needs
/// (up to 32), so a race of up to 32 allocates one block, whatever its contestants do.
#[test]
fn an_iterable_race_allocates_one_block_up_to_32_then_one_per_32() {
    let mut cx = Context::from_waker(Waker::noop());
    let mut ready_race = |n: usize| {
        allocations(|| {
            let contestants = (0..n).map(|me| ready(if me + 1 == n { Ok(me) } else { Err(me) }));
            let mut race = race(contestants);
            assert_eq!(Pin::new(&mut race).poll(&mut cx), Poll::Ready(Ok(n - 1)));
        })
    };
    for n in [1, 2, 3, 4, 5, 16, 17, 32] {
        assert_eq!(ready_race(n), 1, "{n} contestants: one block");
    }
    assert_eq!(
        ready_race(33),
        3,
        "the first block, a block of 32 and their list"
    );
    // 7 blocks of 32 after the first 32, and their list, sized once from the iterator.
    assert_eq!(ready_race(256), 1 + 7 + 1);

    // An iterator that does not know its length: a first block of 4, then blocks of 32.
    let mut unknown_race = |n: usize| {
        allocations(|| {
            let contestants = (0..n)
                .filter(|_| true)
                .map(|me| ready(if me + 1 == n { Ok(me) } else { Err(me) }));
            let mut race = race(contestants);
            assert_eq!(Pin::new(&mut race).poll(&mut cx), Poll::Ready(Ok(n - 1)));
        })
    };
    assert_eq!(unknown_race(4), 1);
    assert!(
        unknown_race(5) >= 3,
        "the first block, a block of 32 and their list"
    );

    // Failing, the race allocates the list of errors too, and nothing else.
    let made = allocations(|| {
        let mut race = race((0..4).map(|me| ready(Err::<(), _>(me))));
        let Poll::Ready(Err(failed)) = Pin::new(&mut race).poll(&mut cx) else {
            panic!("every contestant failed");
        };
        let expected: Vec<_> = (0..4).map(|me| (me, me)).collect();
        assert_eq!(failed.errors(), expected);
    });
    assert_eq!(made, 1 + 1 + 1, "the block, the errors, the expected list");

    // Pending contestants that keep no waker: a select loop of 3 allocates its block only;
    // a race of 5 its block, the wake set and the box holding it with the lent wakers: no
    // table of kept wakers (nobody kept one) and no waker.
    let made = allocations(|| {
        let mut race = race([pending::<Result<(), ()>>(), pending(), pending()]);
        assert!(Pin::new(&mut race).poll(&mut cx).is_pending());
        assert!(Pin::new(&mut race).poll(&mut cx).is_pending());
    });
    assert_eq!(made, 1);
    let made = allocations(|| {
        let mut race = race([(); 5].map(|()| pending::<Result<(), ()>>()));
        assert!(Pin::new(&mut race).poll(&mut cx).is_pending());
        assert!(Pin::new(&mut race).poll(&mut cx).is_pending());
    });
    assert_eq!(made, 3);
}

/// A race is moved at least once before it is pinned (into the future that awaits it),
/// and a large one is moved with a call to `memcpy`: what only a race with a wake set
/// needs is boxed, so a race over an iterable stays 13 words whatever its contestants.
/// Before, it was 21 words, and a race of 2 cost more than `select_ok`'s.
#[test]
fn a_race_over_an_iterable_is_13_words() {
    type Mirror = std::future::Ready<Result<[u8; 1000], String>>;
    assert_eq!(
        std::mem::size_of::<tollgate::futures::Race<[Mirror]>>(),
        13 * std::mem::size_of::<usize>()
    );
}

/// Before, a tuple's contestants were stored as nested `Either`s in the iterable's blocks:
/// one allocation for up to 4, two for 12 (and each contestant as large as the largest).
/// Now they live inside the race, a field each: no allocation at all, however many of the
/// 12 there are and whatever they do (fail, pend, keep the waker, win).
#[test]
fn a_tuple_race_allocates_nothing() {
    let waker = Waker::from(Arc::new(CountWakes::default()));
    let mut cx = Context::from_waker(&waker);
    let kept: Mutex<[Option<Waker>; 12]> = Mutex::new(Default::default());
    let go = AtomicBool::new(false);
    // Pends keeping a clone of its waker until `go` is set, then fails (11 wins).
    let keeps = |me: usize| {
        let (kept, go) = (&kept, &go);
        poll_fn(move |cx| {
            if !go.load(Ordering::SeqCst) {
                kept.lock().unwrap()[me] = Some(cx.waker().clone());
                Poll::Pending
            } else if me == 11 {
                Poll::Ready(Ok(me))
            } else {
                Poll::Ready(Err(me))
            }
        })
    };
    let made = allocations(|| {
        let mut race = pin!(race((
            ready(Err::<usize, usize>(0)),
            async { Err(1) },
            keeps(2),
            async {
                yield_now().await;
                Err(3)
            },
            keeps(4),
            ready(Err(5)),
            keeps(6),
            pending(),
            keeps(8),
            async { Err(9) },
            keeps(10),
            keeps(11),
        )));
        assert!(race.as_mut().poll(&mut cx).is_pending());
        assert!(race.as_mut().poll(&mut cx).is_pending());
        go.store(true, Ordering::SeqCst);
        for waker in kept.lock().unwrap().iter_mut().filter_map(Option::take) {
            waker.wake();
        }
        assert_eq!(race.as_mut().poll(&mut cx), Poll::Ready(Ok(11)));
    });
    assert_eq!(made, 0, "a tuple race allocated");

    // Two contestants of a tuple, ready at once.
    let made = allocations(|| {
        let mut race = pin!(race((ready(Err::<u8, u8>(0)), ready(Ok(1)))));
        assert_eq!(race.as_mut().poll(&mut cx), Poll::Ready(Ok(1)));
    });
    assert_eq!(made, 0);
}

/// Before, each contestant woken by another one's finishing waited for the next poll of
/// the race: a chain of 4 mirrors answering one after the other took 4 polls, each a round
/// trip through the executor. Now the race polls them again within the same poll.
#[test]
fn contestants_woken_by_others_are_polled_in_the_same_poll() {
    let baton = Baton::new(4, vec![3, 2, 1, 0]);
    let parent = Arc::new(CountWakes::default());
    let waker = Waker::from(parent.clone());
    let mut cx = Context::from_waker(&waker);
    let mut race = pin!(race((0..4).map(|me| baton.contestant(me, Some(0)))));
    assert_eq!(race.as_mut().poll(&mut cx), Poll::Ready(Ok(0)));
}

/// A larger race starts as a select loop too; when one contestant's end wakes another
/// (a failure after pends in the same round) it turns to its wake set and still finishes
/// the whole chain in one poll, polling each contestant a bounded number of times rather
/// than every pending one per link of the chain.
#[test]
fn a_large_race_turns_to_its_wake_set_when_contestants_wake_each_other() {
    let n = 40;
    let baton = Baton::new(n, (0..n).rev().collect());
    let parent = Arc::new(CountWakes::default());
    let waker = Waker::from(parent.clone());
    let mut cx = Context::from_waker(&waker);
    let polls: Arc<Vec<AtomicUsize>> = Arc::new((0..n).map(|_| AtomicUsize::new(0)).collect());
    let mut race = pin!(race((0..n).map(|me| {
        let (polls, inner) = (polls.clone(), baton.contestant(me, Some(0)));
        let mut inner = Box::pin(inner);
        poll_fn(move |cx| {
            polls[me].fetch_add(1, Ordering::SeqCst);
            inner.as_mut().poll(cx)
        })
    })));
    assert_eq!(race.as_mut().poll(&mut cx), Poll::Ready(Ok(0)));
    // A select loop would poll contestant 0 once per link: 40 times.
    let most = polls
        .iter()
        .map(|p| p.load(Ordering::SeqCst))
        .max()
        .unwrap();
    assert!(most <= 3, "a contestant polled {most} times");
}

/// A race of more than 4 whose contestants pend only to yield, then finish, never needs
/// to tell them apart: it stays a select loop and allocates its block only.
#[test]
fn a_large_race_of_contestants_that_yield_once_allocates_its_block_only() {
    let mut cx = Context::from_waker(Waker::noop());
    let made = allocations(|| {
        let mut race = pin!(race((0..16).map(|me| async move {
            yield_now().await;
            if me == 15 { Ok(me) } else { Err(me) }
        })));
        assert!(race.as_mut().poll(&mut cx).is_pending());
        assert_eq!(race.as_mut().poll(&mut cx), Poll::Ready(Ok(15)));
    });
    assert_eq!(made, 1);
}

/// A contestant that yields is polled again on the next poll of the race only, so the
/// executor gets its turn in between, even while others keep waking each other.
#[test]
fn a_contestant_that_yields_waits_for_the_next_poll() {
    let polls = Arc::new(AtomicUsize::new(0));
    let yielder = {
        let polls = polls.clone();
        async move {
            polls.fetch_add(1, Ordering::SeqCst);
            yield_now().await;
            polls.fetch_add(1, Ordering::SeqCst);
            yield_now().await;
            polls.fetch_add(1, Ordering::SeqCst);
            Err::<usize, usize>(0)
        }
    };
    let mut race = pin!(race((yielder, pending::<Result<usize, usize>>())));
    let mut cx = Context::from_waker(Waker::noop());
    for expected in 1..=3 {
        assert!(race.as_mut().poll(&mut cx).is_pending());
        assert_eq!(polls.load(Ordering::SeqCst), expected);
    }
}

#[test]
#[should_panic(expected = "`Race` polled after it completed")]
fn polling_after_completion_panics() {
    let mut race = pin!(race([ready(Ok::<u8, ()>(1))]));
    let mut cx = Context::from_waker(Waker::noop());
    assert!(race.as_mut().poll(&mut cx).is_ready());
    let _ = race.as_mut().poll(&mut cx);
}

/// Before, a race polled again after a contestant's panic had propagated out of it
/// returned `Pending` for good: the unwinding poll had taken the other contestants'
/// wake-ups and never passed them on, so a woken contestant was never polled again.
#[test]
#[should_panic(expected = "`Race` polled after a contestant panicked")]
fn polling_after_a_contestant_panicked_panics_instead_of_hanging() {
    let woken: Arc<Mutex<Vec<Waker>>> = Arc::default();
    let contestant = |me: usize| {
        let woken = woken.clone();
        let mut polls = 0;
        poll_fn(move |cx| {
            polls += 1;
            match (me, polls) {
                (_, 1) => {
                    woken.lock().unwrap().push(cx.waker().clone());
                    Poll::Pending
                }
                (0, _) => panic!("contestant 0 broke"),
                _ => Poll::Ready(Ok::<usize, ()>(me)),
            }
        })
    };
    let mut race = Box::pin(race([contestant(0), contestant(1)]));
    let mut cx = Context::from_waker(Waker::noop());
    assert!(race.as_mut().poll(&mut cx).is_pending());
    for waker in woken.lock().unwrap().drain(..) {
        waker.wake();
    }
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = race.as_mut().poll(&mut cx);
    }));
    assert!(unwound.is_err(), "contestant 0's panic propagates");
    // Contestant 1 was woken and would win; the old race never polled it again.
    let _ = race.as_mut().poll(&mut cx);
}

#[test]
fn race_failed_is_an_error_and_converts_to_the_umbrella() {
    fn is_error<E: std::error::Error + Send + Sync + 'static>(_: &E) {}

    let failed = tollgate::run_sync(race([
        ready(Err::<(), _>(std::io::Error::other("refused"))),
        ready(Err(std::io::Error::other("reset"))),
    ]))
    .unwrap_err();
    is_error(&failed);
    assert_eq!(failed.errors().len(), 2);
    assert_eq!(failed.errors()[1].1.to_string(), "reset");

    let umbrella: tollgate::Error = failed.into();
    is_error(&umbrella);
    assert_eq!(umbrella.to_string(), "all 2 contestants failed");
    match &umbrella {
        tollgate::Error::Race(inner) => {
            assert_eq!(inner.errors()[0].1.to_string(), "refused");
        }
        other => panic!("wrong variant: {other:?}"),
    }

    // Plain strings convert too (boxed as errors), and `?` works.
    async fn mirrors() -> Result<(), tollgate::Error> {
        race([ready(Err::<(), _>("down"))]).await?;
        Ok(())
    }
    let error = tollgate::run_sync(mirrors()).unwrap_err();
    assert_eq!(error.to_string(), "the only contestant failed");

    // Any Debug error type makes `RaceError` an error.
    let failed: RaceError<u8> = tollgate::run_sync(race([ready(Err::<(), u8>(7))])).unwrap_err();
    is_error(&failed);
    assert_eq!(failed.clone().into_errors(), [(0, 7)]);
    assert_eq!(failed.map_errors(u32::from).errors(), [(0, 7u32)]);
}

#[test]
fn the_futures_are_send_and_unpin_when_their_contestants_are() {
    fn assert_send<T: Send>(_: &T) {}
    fn assert_unpin<T: Unpin>(_: &T) {}
    // An iterable's contestants live in boxed blocks: the race is always `Unpin`.
    let vec_race = race(vec![mirror("a", Duration::ZERO, true)]);
    assert_send(&vec_race);
    assert_unpin(&vec_race);
    let tuple_race = race((
        mirror("a", Duration::ZERO, true),
        async { Ok(String::new()) },
        ready(Err(String::new())),
    ))
    .timeout(Duration::from_secs(1));
    assert_send(&tuple_race);
    assert!(format!("{tuple_race:?}").starts_with("Race {"));
    // A tuple's contestants live inside the race: it is `Unpin` when they are.
    assert_unpin(&race((ready(Ok::<u8, ()>(1)), ready(Ok(2)))).hedge(Duration::from_secs(1)));
}

#[test]
fn races_run_under_a_plain_futures_executor() {
    let body = futures::executor::block_on(race([
        mirror("slow.example", Duration::from_secs(60), true),
        mirror("fast.example", Duration::from_millis(1), true),
    ]));
    assert_eq!(body.unwrap(), "<html>fast.example</html>");
}

/// Counts each contestant's polls and remembers when it was first polled (started).
struct Tally {
    polls: Vec<AtomicUsize>,
    started_at: Mutex<Vec<Option<Instant>>>,
}

impl Tally {
    fn new(contestants: usize) -> Arc<Self> {
        Arc::new(Self {
            polls: (0..contestants).map(|_| AtomicUsize::new(0)).collect(),
            started_at: Mutex::new(vec![None; contestants]),
        })
    }

    /// `future` as contestant `me`, counted.
    fn track<F>(
        self: &Arc<Self>,
        me: usize,
        future: F,
    ) -> impl Future<Output = F::Output> + Send + use<F>
    where
        F: Future + Send,
    {
        let tally = self.clone();
        let mut future = Box::pin(future);
        poll_fn(move |cx| {
            if tally.polls[me].fetch_add(1, Ordering::SeqCst) == 0 {
                tally.started_at.lock().unwrap()[me] = Some(now());
            }
            future.as_mut().poll(cx)
        })
    }

    fn polls(&self) -> Vec<usize> {
        self.polls
            .iter()
            .map(|p| p.load(Ordering::SeqCst))
            .collect()
    }

    fn started_at(&self, me: usize) -> Instant {
        self.started_at.lock().unwrap()[me].expect("contestant was started")
    }
}

/// A hedge delay no test waits for: a next start that comes before it was not timed (on
/// virtual time: it came at once, exactly).
const NEVER: Duration = Duration::from_secs(10);

/// Two contestants that never finish and a third that wins, hedged 50 ms apart, checked
/// for what holds at any speed: when each started and when the race ended, from its start.
async fn stuck_first_contestants() -> ([Duration; 3], Duration) {
    const DELAY: Duration = Duration::from_millis(50);
    // 0 and 1 never finish, so 1 and then 2 must start, each a delay after the one before.
    let tally = Tally::new(3);
    let start = now();
    let winner = race((0..3).map(|me| {
        tally.track(me, async move {
            if me < 2 {
                pending::<()>().await;
            }
            Ok::<usize, ()>(me)
        })
    }))
    .hedge(DELAY)
    .timeout(Duration::from_secs(60))
    .await;
    assert_eq!(winner, Ok(2));
    // A race of 3 is a select loop: each start's timer polls the started ones again.
    let polls = tally.polls();
    assert_eq!(polls[2], 1);
    assert!(polls[0] >= polls[1] && polls[1] >= 1, "{polls:?}");
    let started = [0, 1, 2].map(|me| tally.started_at(me) - start);
    (started, now() - start)
}

/// A first contestant failing on its first poll, after a yield, or after 5 ms of its own,
/// under a hedge delay never reached, checked for what holds at any speed: how long each
/// race took.
async fn failing_first_contestants() -> [Duration; 3] {
    let mut took = [Duration::ZERO; 3];
    // Failing on its first poll, after a yield, or after a timer of its own: the next
    // one starts at once, never a hedge delay later.
    for fails_after in [0, 1, 2] {
        let tally = Tally::new(2);
        let start = now();
        let winner = race((
            tally.track(0, async move {
                match fails_after {
                    0 => {}
                    1 => yield_now().await,
                    _ => sleep(Duration::from_millis(5)).await,
                }
                Err::<usize, usize>(0)
            }),
            tally.track(1, async { Ok(1) }),
        ))
        .hedge(NEVER)
        .await;
        assert_eq!(winner, Ok(1));
        assert_eq!(tally.polls()[1], 1);
        took[fails_after] = now() - start;
    }
    took
}

/// Contestants that all fail one after another, checked for what holds at any speed: how
/// long the race took.
async fn all_failing_contestants() -> Duration {
    // One after another, each starting as soon as the one before failed.
    let tally = Tally::new(3);
    let start = now();
    let failed = race((0..3).map(|me| {
        tally.track(me, async move {
            match me {
                0 => {}
                1 => yield_now().await,
                _ => sleep(Duration::from_millis(1)).await,
            }
            Err::<(), usize>(me)
        })
    }))
    .hedge(NEVER)
    .await
    .unwrap_err();
    assert_eq!(failed.errors(), [(0, 0), (1, 1), (2, 2)]);
    assert_eq!(failed.started(), 3);
    assert!(!failed.is_timed_out());
    assert_eq!(failed.to_string(), "all 3 contestants failed");
    assert_eq!(tally.polls(), [1, 2, 2]);
    now() - start
}

/// A hedged race under a 50 ms timeout, shorter than its hedge delay, checked for what
/// holds at any speed: how long it took.
async fn hedged_race_timed_out() -> Duration {
    let flags: Vec<DropFlag> = (0..3).map(|_| DropFlag::default()).collect();
    let tally = Tally::new(3);
    let start = now();
    let failed = race((0..3).map(|me| {
        let guard = flags[me].guard();
        tally.track(me, async move {
            let _guard = guard;
            if me == 0 {
                return Err::<(), usize>(0);
            }
            pending().await
        })
    }))
    .hedge(NEVER)
    .timeout(Duration::from_millis(50))
    .await
    .unwrap_err();
    let dropped: Vec<bool> = flags.iter().map(DropFlag::is_set).collect();
    assert!(failed.is_timed_out());
    assert_eq!(failed.errors(), [(0, 0)]);
    // 0 failed, so 1 started at once; 2 was never started, and has no entry.
    assert_eq!(failed.started(), 2);
    let polls = tally.polls();
    assert!(polls[0] == 1 && polls[1] >= 1 && polls[2] == 0, "{polls:?}");
    assert_eq!(dropped, [true; 3]);
    assert_eq!(
        failed.to_string(),
        "race timed out after 50ms with 1 failure"
    );
    now() - start
}

matrix! {
    async fn hedged_a_fast_first_contestant_means_the_next_is_never_started() {
        // The first wins on its first poll: even a 1 ms delay cannot start the second.
        let tally = Tally::new(2);
        let winner = race((
            tally.track(0, async { Ok::<usize, ()>(0) }),
            tally.track(1, async { Ok(1) }),
        ))
        .hedge(Duration::from_millis(1))
        .await;
        assert_eq!(winner, Ok(0));
        assert_eq!(tally.polls(), [1, 0]);

        // The first needs a second poll (it yields): still nobody else starts.
        let tally = Tally::new(3);
        let winner = race((0..3).map(|me| {
            tally.track(me, async move {
                yield_now().await;
                Ok::<usize, ()>(me)
            })
        }))
        .hedge(NEVER)
        .await;
        assert_eq!(winner, Ok(0));
        assert_eq!(tally.polls(), [2, 0, 0]);
    }

    async fn hedged_a_stuck_first_contestant_lets_the_next_start_after_the_delay() {
        stuck_first_contestants().await;
    }

    async fn hedged_a_slow_first_contestant_may_still_win_and_the_started_others_are_dropped() {
        let flags: Vec<DropFlag> = (0..3).map(|_| DropFlag::default()).collect();
        let tally = Tally::new(3);
        let contestants = (0..3).map(|me| {
            let guard = flags[me].guard();
            let counts = tally.clone();
            tally.track(me, async move {
                let _guard = guard;
                if me > 0 {
                    return pending().await;
                }
                // A slow answer: polled again and again until the second has started (a
                // count, not a timer), then it wins.
                poll_fn(|cx| {
                    if counts.polls()[1] > 0 {
                        return Poll::Ready(Ok::<usize, ()>(0));
                    }
                    cx.waker().wake_by_ref();
                    Poll::Pending
                })
                .await
            })
        });
        let winner = race(contestants).hedge(Duration::from_millis(20)).await;
        let dropped: Vec<bool> = flags.iter().map(DropFlag::is_set).collect();
        assert_eq!(winner, Ok(0));
        assert_eq!(dropped, [true; 3], "the started loser and the unstarted one alike");
        // The race polls the woken (0) before it looks at the timer: 0 wins in the first
        // poll after 1 started, however late that poll comes, and 2 never starts.
        assert_eq!(tally.polls()[1..], [1, 0]);
    }

    async fn hedged_a_failing_first_contestant_starts_the_next_at_once() {
        failing_first_contestants().await;
    }

    async fn hedged_all_failing_gives_every_started_contestants_error() {
        all_failing_contestants().await;

        // Overlapping: 0 keeps running while 1 and 2 start on the timer and fail at once;
        // 0 fails only once 2 has started (a count, not a timer), so the order is fixed.
        // (Its busy wait never lets a virtual clock move: this part runs here only.)
        let tally = Tally::new(3);
        let failed = race((0..3).map(|me| {
            let counts = tally.clone();
            tally.track(me, async move {
                if me == 0 {
                    poll_fn(|cx| {
                        if counts.polls()[2] > 0 {
                            return Poll::Ready(());
                        }
                        cx.waker().wake_by_ref();
                        Poll::Pending
                    })
                    .await;
                }
                Err::<(), usize>(me)
            })
        }))
        .hedge(Duration::from_millis(1))
        .timeout(Duration::from_secs(60))
        .await
        .unwrap_err();
        assert_eq!(failed.errors(), [(1, 1), (2, 2), (0, 0)]);
        assert_eq!(failed.started(), 3);
        assert!(!failed.is_timed_out());
    }

    async fn hedged_timeout_bounds_the_whole_race() {
        hedged_race_timed_out().await;
    }

    async fn hedge_max_tries_one_at_a_time() {
        // The next starts only once every started one has failed: the stuck 1 holds 2 back.
        let tally = Tally::new(3);
        let failed = race((0..3).map(|me| {
            tally.track(me, async move {
                if me == 1 {
                    pending::<()>().await;
                }
                Err::<(), usize>(me)
            })
        }))
        .hedge(Duration::MAX)
        .timeout(Duration::from_millis(20))
        .await
        .unwrap_err();
        assert!(failed.is_timed_out());
        assert_eq!(failed.errors(), [(0, 0)]);
        assert_eq!(failed.started(), 2);
        // 1 may be polled again when the timeout wakes the race (a select loop): 2 never.
        let polls = tally.polls();
        assert!(polls[0] == 1 && polls[1] >= 1 && polls[2] == 0, "{polls:?}");
    }

    async fn hedged_empty_race_fails_at_once() {
        let failed = race(Vec::<std::future::Ready<Result<u8, String>>>::new())
            .hedge(NEVER)
            .timeout(Duration::from_secs(3600))
            .await
            .unwrap_err();
        assert!(!failed.is_timed_out());
        assert_eq!(failed.started(), 0);
        assert_eq!(failed.to_string(), "race had no contestants");
    }

    async fn hedged_races_work_when_spawned() {
        let body = common::spawn(async {
            race([
                mirror("slow.example", Duration::from_secs(60), true),
                mirror("fast.example", Duration::from_millis(1), true),
            ])
            .hedge(Duration::from_millis(1))
            .await
        })
        .await
        .unwrap();
        assert_eq!(body, "<html>fast.example</html>");
    }
}

/// A hedged race starts each contestant on its turn only. A race of up to 4 is a select
/// loop like any small race (each poll polls every started contestant still running); a
/// larger one polls only the woken ones.
#[test]
fn hedged_races_start_each_contestant_on_its_turn_only() {
    for n in [3, 6] {
        // Every contestant keeps its waker; `fail[me]` makes it fail when next polled.
        let wakers: Arc<Mutex<Vec<Option<Waker>>>> = Arc::new(Mutex::new(vec![None; n]));
        let fail: Arc<Vec<AtomicBool>> = Arc::new((0..n).map(|_| AtomicBool::new(false)).collect());
        let tally = Tally::new(n);
        let contestant = |me: usize| {
            let (wakers, fail) = (wakers.clone(), fail.clone());
            tally.track(
                me,
                poll_fn(move |cx| {
                    if fail[me].load(Ordering::SeqCst) {
                        return Poll::Ready(Err::<(), usize>(me));
                    }
                    wakers.lock().unwrap()[me] = Some(cx.waker().clone());
                    Poll::Pending
                }),
            )
        };
        let mut race = pin!(race((0..n).map(contestant)).hedge(Duration::from_secs(3600)));
        let parent = Arc::new(CountWakes::default());
        let waker = Waker::from(parent.clone());
        let mut cx = Context::from_waker(&waker);
        let wake = |me: usize| wakers.lock().unwrap()[me].take().unwrap().wake();
        let select = n <= 4;
        let mut expected = vec![0; n];

        assert!(race.as_mut().poll(&mut cx).is_pending());
        expected[0] = 1;
        assert_eq!(tally.polls(), expected, "{n}");
        // A spurious poll starts nobody: the delay has not passed.
        assert!(race.as_mut().poll(&mut cx).is_pending());
        expected[0] += usize::from(select);
        assert_eq!(tally.polls(), expected, "{n}");

        // Woken without failing: polled again, nobody new starts.
        wake(0);
        assert!(race.as_mut().poll(&mut cx).is_pending());
        expected[0] += 1;
        assert_eq!(tally.polls(), expected, "{n}");

        // 0 fails: 1 starts in the same poll.
        fail[0].store(true, Ordering::SeqCst);
        wake(0);
        assert!(race.as_mut().poll(&mut cx).is_pending());
        expected[0] += 1;
        expected[1] = 1;
        assert_eq!(tally.polls(), expected, "{n}");

        // 1 fails: 2 starts, fails, and so on, and the race is over.
        for flag in &fail[1..] {
            flag.store(true, Ordering::SeqCst);
        }
        wake(1);
        let Poll::Ready(Err(failed)) = race.as_mut().poll(&mut cx) else {
            panic!("every contestant failed");
        };
        expected[1] += 1;
        for polls in &mut expected[2..] {
            *polls = 1;
        }
        assert_eq!(tally.polls(), expected, "{n}");
        let errors: Vec<_> = (0..n).map(|me| (me, me)).collect();
        assert_eq!(failed.errors(), errors);
        assert_eq!(failed.started(), n);
    }
}

#[test]
fn hedge_zero_is_the_plain_race() {
    for hedged in [
        |r: tollgate::futures::Race<_>| r.hedge(Duration::ZERO),
        |r: tollgate::futures::Race<_>| r.hedge(Duration::from_secs(1)).hedge(Duration::ZERO),
    ] {
        let tally = Tally::new(3);
        let contestants = (0..3).map(|me| tally.track(me, pending::<Result<(), ()>>()));
        let mut race = pin!(hedged(race(contestants)));
        let mut cx = Context::from_waker(Waker::noop());
        assert!(race.as_mut().poll(&mut cx).is_pending());
        assert_eq!(
            tally.polls(),
            [1, 1, 1],
            "every contestant starts on the first poll"
        );
    }
}

#[test]
fn plain_races_report_every_contestant_started() {
    let failed = tollgate::run_sync(race([ready(Err::<(), u8>(1)), ready(Err(2))])).unwrap_err();
    assert_eq!(failed.started(), 2);
    let failed =
        tollgate::run_sync(race([pending::<Result<(), u8>>(), pending()]).timeout(Duration::ZERO))
            .unwrap_err();
    assert_eq!(failed.started(), 2);
    assert_eq!(failed.map_errors(u32::from).started(), 2);
}

/// Starts, answers and timeouts on virtual time: every timer fires exactly at its
/// deadline, so each instant is exact.
mod on_virtual_time {
    use super::*;

    const fn ms(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    virtual_time! {
        async fn the_fast_mirror_answers_exactly_at_its_latency() {
            assert_eq!(fast_and_slow_mirrors().await, ms(5));
        }

        async fn a_timeout_ends_the_race_exactly_at_its_deadline() {
            assert_eq!(hung_race_timed_out().await, ms(20));
        }

        async fn an_empty_race_under_a_timeout_ends_at_once() {
            assert_eq!(empty_races().await, Duration::ZERO);
        }

        async fn hedged_stuck_contestants_start_exactly_a_delay_apart() {
            let (started, took) = stuck_first_contestants().await;
            assert_eq!(started, [Duration::ZERO, ms(50), ms(100)]);
            assert_eq!(took, ms(100), "the third wins on its first poll");
        }

        async fn hedged_a_failure_starts_the_next_at_the_same_instant() {
            // Only the contestant's own 5 ms timer takes time, never the hedge delay.
            assert_eq!(failing_first_contestants().await, [Duration::ZERO, Duration::ZERO, ms(5)]);
            // The third's own 1 ms timer, then nothing.
            assert_eq!(all_failing_contestants().await, ms(1));
        }

        async fn hedged_the_timeout_ends_the_race_before_the_hedge_delay() {
            assert_eq!(hedged_race_timed_out().await, ms(50));
        }

        async fn an_hour_long_race_timeout_takes_no_wall_time() {
            let (wall, start) = (Instant::now(), now());
            let failed = race([
                mirror("hung.example", Duration::from_secs(7200), true),
                mirror("broken.example", Duration::from_secs(10), false),
            ])
            .timeout(Duration::from_secs(3600))
            .await
            .unwrap_err();
            assert!(failed.is_timed_out());
            assert_eq!(failed.errors().len(), 1);
            assert_eq!(failed.to_string(), "race timed out after 3600s with 1 failure");
            assert_eq!(now() - start, Duration::from_secs(3600));
            // Wall time: the worst run measured with both cores busy took 0.03 s (the whole
            // test binary, both legs); 10 s is 300 times that.
            assert!(wall.elapsed() < Duration::from_secs(10), "{:?}", wall.elapsed());
        }

        async fn hedged_starts_are_exactly_the_delay_apart() {
            const DELAY: Duration = Duration::from_secs(30);
            let wall = Instant::now();
            let starts: Arc<Mutex<Vec<(usize, Instant)>>> = Arc::default();
            let contestant = |me: usize, works: bool, stuck: bool| {
                let starts = starts.clone();
                async move {
                    starts.lock().unwrap().push((me, now()));
                    if stuck {
                        pending::<()>().await;
                    }
                    if works { Ok(me) } else { Err(me) }
                }
            };

            // 0 and 1 hang: 1 starts a delay after 0, 2 a delay after 1, and 2 wins.
            let begin = now();
            let winner = race([
                contestant(0, true, true),
                contestant(1, true, true),
                contestant(2, true, false),
            ])
            .hedge(DELAY)
            .await;
            assert_eq!(winner, Ok(2));
            assert_eq!(
                std::mem::take(&mut *starts.lock().unwrap()),
                [(0, begin), (1, begin + DELAY), (2, begin + 2 * DELAY)]
            );

            // A failure starts the next at once: no virtual time passes.
            let begin = now();
            let winner = race([contestant(0, false, false), contestant(1, true, false)])
                .hedge(DELAY)
                .await;
            assert_eq!(winner, Ok(1));
            assert_eq!(std::mem::take(&mut *starts.lock().unwrap()), [(0, begin), (1, begin)]);

            // The timeout ends it between two starts.
            let begin = now();
            let failed = race([
                contestant(0, true, true),
                contestant(1, true, true),
                contestant(2, true, true),
            ])
            .hedge(DELAY)
            .timeout(DELAY + DELAY / 2)
            .await
            .unwrap_err();
            assert!(failed.is_timed_out());
            assert_eq!(failed.started(), 2);
            assert_eq!(now() - begin, DELAY + DELAY / 2);
            assert_eq!(
                std::mem::take(&mut *starts.lock().unwrap()),
                [(0, begin), (1, begin + DELAY)]
            );
            // Wall time: the worst run measured with both cores busy took 0.03 s (the whole
            // test binary, both legs); 10 s is 300 times that.
            assert!(wall.elapsed() < Duration::from_secs(10), "{:?}", wall.elapsed());
        }
    }
}

/// An iterator whose length hint is wrong: it says 2 and yields many more.
struct Understated(std::ops::Range<usize>);

impl Iterator for Understated {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        self.0.next()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (1, Some(1))
    }
}

/// The first block is sized from the iterator's length hint; a race must still hold (and
/// number) every contestant when the hint is missing or wrong, across block boundaries.
#[test]
fn contestants_are_numbered_in_order_whatever_the_iterators_length_hint() {
    let mut cx = Context::from_waker(Waker::noop());
    let expected = |n: usize| (0..n).map(|me| (me, me)).collect::<Vec<_>>();
    for n in [1, 2, 3, 5, 33, 70] {
        // No exact hint: a filter.
        let mut filtered = race((0..n).filter(|_| true).map(|me| ready(Err::<(), _>(me))));
        let Poll::Ready(Err(failed)) = Pin::new(&mut filtered).poll(&mut cx) else {
            panic!("every contestant failed");
        };
        assert_eq!(failed.errors(), expected(n));
        // A wrong hint, and contestants that pend once (polled again through the wake set).
        let mut understated = race(Understated(0..n).map(|me| async move {
            yield_now().await;
            Err::<(), _>(me)
        }));
        let failed = loop {
            if let Poll::Ready(result) = Pin::new(&mut understated).poll(&mut cx) {
                break result.unwrap_err();
            }
        };
        let mut errors = failed.errors().to_vec();
        errors.sort_unstable();
        assert_eq!(errors, expected(n));
    }
}
