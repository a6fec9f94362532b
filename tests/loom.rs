//! Loom models of the semaphore core: every interleaving of 2-3 threads, within loom's
//! preemption bound. Run with
//!
//! ```text
//! LOOM_MAX_PREEMPTIONS=3 RUSTFLAGS="--cfg tollgate_loom" cargo test --test loom --release --target-dir target/loom
//! ```
//!
//! `--cfg tollgate_loom` swaps the semaphore's atomics and mutex (and `acquire_blocking`'s
//! `block_on`) for loom's. It is not plain `--cfg loom`: RUSTFLAGS reach every crate, and
//! async-io, event-listener and concurrent-queue do not build together under that.
//! `--target-dir` only spares the normal build's cache. Without the preemption bound the
//! two `never_over_grant` models run for many minutes; with 3 the run takes about 4 s,
//! with 4 about 35 s (2-core machine).
#![cfg(tollgate_loom)]

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::thread;
use tollgate::futures::SemaphoreAcquireArc;
use tollgate::{Semaphore, SemaphoreError, SemaphorePermitArc};

/// A waker that counts its wake-ups, for futures polled by hand.
struct CountingWaker(AtomicUsize);

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn counting_waker() -> (Arc<CountingWaker>, Waker) {
    let count = Arc::new(CountingWaker(AtomicUsize::new(0)));
    let waker = Waker::from(count.clone());
    (count, waker)
}

fn poll(
    future: &mut SemaphoreAcquireArc,
    waker: &Waker,
) -> Poll<Result<SemaphorePermitArc, SemaphoreError>> {
    Pin::new(future).poll(&mut Context::from_waker(waker))
}

/// A future polled once that must have queued.
fn queued(semaphore: &Arc<Semaphore>, waker: &Waker) -> SemaphoreAcquireArc {
    let mut future = semaphore.acquire_arc();
    assert!(poll(&mut future, waker).is_pending());
    future
}

/// Checks that `waiter` was woken and now holds the permit, and returns it.
#[track_caller]
fn woken_and_granted(
    waiter: &mut SemaphoreAcquireArc,
    wakes: &CountingWaker,
    waker: &Waker,
    who: &str,
) -> SemaphorePermitArc {
    assert!(wakes.0.load(Ordering::SeqCst) > 0, "{who} was never woken");
    match poll(waiter, waker) {
        Poll::Ready(Ok(guard)) => guard,
        Poll::Ready(Err(error)) => panic!("{who} was refused: {error}"),
        Poll::Pending => panic!("{who} was woken but did not get the permit"),
    }
}

/// Permits in use, checked against the limit on every admission.
struct InUse {
    now: AtomicUsize,
    limit: usize,
}

impl InUse {
    fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self {
            now: AtomicUsize::new(0),
            limit,
        })
    }

    fn work(&self) {
        self.work_many(1);
    }

    /// Work holding `n` permits.
    fn work_many(&self, n: usize) {
        let before = self.now.fetch_add(n, Ordering::SeqCst);
        assert!(
            before + n <= self.limit,
            "{} permits in use, limit {}",
            before + n,
            self.limit
        );
        self.now.fetch_sub(n, Ordering::SeqCst);
    }
}

fn assert_all_returned(semaphore: &Semaphore) {
    assert_eq!(semaphore.available_permits(), semaphore.limit());
    assert_eq!(semaphore.waiting(), 0);
}

/// Racing `try_acquire`s and releases never grant more permits than the limit, and every
/// permit comes back.
#[test]
fn try_acquire_never_over_grants() {
    loom::model(|| {
        let semaphore = Arc::new(Semaphore::new(2));
        let in_use = InUse::new(2);
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let (semaphore, in_use) = (semaphore.clone(), in_use.clone());
                thread::spawn(move || {
                    if let Ok(_guard) = semaphore.try_acquire() {
                        in_use.work();
                    }
                })
            })
            .collect();
        if let Ok(_guard) = semaphore.try_acquire() {
            in_use.work();
        }
        for thread in threads {
            thread.join().unwrap();
        }
        assert_all_returned(&semaphore);
    });
}

/// Async waiters (queueing, hand-off, wake-up) and a `try_acquire` on one permit: never two
/// holders, no lost wake-up (loom reports a deadlock if a waiter is never woken), and every
/// permit comes back.
#[test]
fn waiters_and_try_acquire_never_over_grant() {
    loom::model(|| {
        let semaphore = Arc::new(Semaphore::new(1));
        let in_use = InUse::new(1);
        let waiter = {
            let (semaphore, in_use) = (semaphore.clone(), in_use.clone());
            thread::spawn(move || {
                let _guard = loom::future::block_on(semaphore.acquire()).unwrap();
                in_use.work();
            })
        };
        let grabber = {
            let (semaphore, in_use) = (semaphore.clone(), in_use.clone());
            thread::spawn(move || {
                if let Ok(_guard) = semaphore.try_acquire() {
                    in_use.work();
                }
            })
        };
        {
            let _guard = loom::future::block_on(semaphore.acquire()).unwrap();
            in_use.work();
        }
        waiter.join().unwrap();
        grabber.join().unwrap();
        assert_all_returned(&semaphore);
    });
}

/// A waiter that queues while the only permit is being released is never forgotten: it
/// gets the permit on its first poll, or is woken and gets it on the next.
#[test]
fn a_release_racing_a_new_waiter_is_not_lost() {
    loom::model(|| {
        let semaphore = Arc::new(Semaphore::new(1));
        let guard = semaphore.try_acquire_arc().unwrap();
        let mut releaser = Some(thread::spawn(move || drop(guard)));
        let (wakes, waker) = counting_waker();
        let mut future = semaphore.acquire_arc();
        let guard = match poll(&mut future, &waker) {
            Poll::Ready(guard) => guard.unwrap(),
            Poll::Pending => {
                releaser.take().unwrap().join().unwrap();
                woken_and_granted(&mut future, &wakes, &waker, "the queued waiter")
            }
        };
        drop(guard);
        drop(future);
        if let Some(releaser) = releaser {
            releaser.join().unwrap();
        }
        assert_all_returned(&semaphore);
    });
}

/// FIFO hand-off: a permit released while a waiter is queued goes to that waiter, never
/// to a `try_acquire` racing with the release.
#[test]
fn a_release_goes_to_the_queued_waiter_not_to_a_newcomer() {
    loom::model(|| {
        let semaphore = Arc::new(Semaphore::new(1));
        let guard = semaphore.try_acquire_arc().unwrap();
        let (wakes, waker) = counting_waker();
        let mut waiter = queued(&semaphore, &waker);
        let newcomer = {
            let semaphore = semaphore.clone();
            thread::spawn(move || semaphore.try_acquire().is_ok())
        };
        let releaser = thread::spawn(move || drop(guard));
        assert!(!newcomer.join().unwrap(), "a newcomer jumped the queue");
        releaser.join().unwrap();
        let guard = woken_and_granted(&mut waiter, &wakes, &waker, "the queued waiter");
        assert!(semaphore.try_acquire().is_err());
        drop(guard);
        drop(waiter);
        assert_all_returned(&semaphore);
    });
}

/// A waiter dropped right as the permit is handed to it passes the permit on to the next
/// waiter: nothing leaks, and the next waiter is woken.
#[test]
fn a_waiter_cancelled_as_it_is_granted_passes_the_permit_on() {
    loom::model(|| {
        let semaphore = Arc::new(Semaphore::new(1));
        let guard = semaphore.try_acquire_arc().unwrap();
        let (_, first_waker) = counting_waker();
        let (second_wakes, second_waker) = counting_waker();
        let first = queued(&semaphore, &first_waker);
        let mut second = queued(&semaphore, &second_waker);
        assert_eq!(semaphore.waiting(), 2);
        let releaser = thread::spawn(move || drop(guard));
        drop(first);
        releaser.join().unwrap();
        let guard = woken_and_granted(&mut second, &second_wakes, &second_waker, "the next waiter");
        assert_eq!(semaphore.available_permits(), 0);
        drop(guard);
        drop(second);
        assert_all_returned(&semaphore);
    });
}

/// The same, with the cancelled waiter dropped on another thread while a newcomer tries
/// to take the permit: the newcomer never gets it while the second waiter waits.
#[test]
fn a_passed_on_permit_is_not_taken_by_a_newcomer() {
    loom::model(|| {
        let semaphore = Arc::new(Semaphore::new(1));
        let guard = semaphore.try_acquire_arc().unwrap();
        let (_, first_waker) = counting_waker();
        let (second_wakes, second_waker) = counting_waker();
        let first = queued(&semaphore, &first_waker);
        let mut second = queued(&semaphore, &second_waker);
        let canceller = thread::spawn(move || drop(first));
        let newcomer = {
            let semaphore = semaphore.clone();
            thread::spawn(move || semaphore.try_acquire().is_ok())
        };
        drop(guard);
        canceller.join().unwrap();
        assert!(!newcomer.join().unwrap(), "a newcomer jumped the queue");
        let guard = woken_and_granted(
            &mut second,
            &second_wakes,
            &second_waker,
            "the second waiter",
        );
        drop(guard);
        drop(second);
        assert_all_returned(&semaphore);
    });
}

/// The waiter queue frees a chunk of nodes (two per chunk under loom) as soon as all its
/// waiters have left. Here two waiters of the first chunk leave on one thread while a
/// release hands the permit on from another: whichever comes first, the permit reaches
/// the waiter in the second chunk, and a newcomer queued after the chunk was freed is
/// served next.
#[test]
fn a_chunk_freed_while_the_permit_is_handed_on_loses_nothing() {
    loom::model(|| {
        let semaphore = Arc::new(Semaphore::new(1));
        let guard = semaphore.try_acquire_arc().unwrap();
        let (_, waker) = counting_waker();
        let first = queued(&semaphore, &waker);
        let second = queued(&semaphore, &waker);
        let (third_wakes, third_waker) = counting_waker();
        let mut third = queued(&semaphore, &third_waker);
        let canceller = thread::spawn(move || {
            drop(first);
            drop(second);
        });
        let releaser = thread::spawn(move || drop(guard));
        canceller.join().unwrap();
        releaser.join().unwrap();
        let guard = woken_and_granted(&mut third, &third_wakes, &third_waker, "the third waiter");
        let (fourth_wakes, fourth_waker) = counting_waker();
        let mut fourth = queued(&semaphore, &fourth_waker);
        let releaser = thread::spawn(move || drop(guard));
        assert!(
            semaphore.try_acquire().is_err(),
            "a newcomer jumped the queue"
        );
        releaser.join().unwrap();
        let guard = woken_and_granted(
            &mut fourth,
            &fourth_wakes,
            &fourth_waker,
            "the fourth waiter",
        );
        drop(guard);
        drop((third, fourth));
        assert_all_returned(&semaphore);
    });
}

/// The only waiter leaves while the permit is released: the release saw the `WAITERS` flag
/// but finds the queue empty once it holds the lock, and gives the permit back the plain
/// way. Either order ends with the permit free and nobody waiting.
#[test]
fn the_only_waiter_leaving_as_the_permit_is_released_loses_nothing() {
    loom::model(|| {
        let semaphore = Arc::new(Semaphore::new(1));
        let guard = semaphore.try_acquire_arc().unwrap();
        let (_, waker) = counting_waker();
        let waiter = queued(&semaphore, &waker);
        let releaser = thread::spawn(move || drop(guard));
        drop(waiter);
        releaser.join().unwrap();
        assert_all_returned(&semaphore);
        assert!(semaphore.try_acquire().is_ok());
    });
}

/// A granted waiter's node is freed by the granter, so a waiter queued right after may
/// reuse its index: the first still finds its grant (by its ticket), and the second still
/// waits its turn, then gets the permit the first gives back.
#[test]
fn a_granted_waiters_node_reused_at_once_confuses_nobody() {
    loom::model(|| {
        let semaphore = Arc::new(Semaphore::new(1));
        let guard = semaphore.try_acquire_arc().unwrap();
        let (first_wakes, first_waker) = counting_waker();
        let mut first = queued(&semaphore, &first_waker);
        let releaser = thread::spawn(move || drop(guard));
        let (second_wakes, second_waker) = counting_waker();
        let mut second = queued(&semaphore, &second_waker);
        // Polled while the release may be under way: granted or still waiting, never wrong.
        let early = poll(&mut first, &first_waker);
        releaser.join().unwrap();
        let guard = match early {
            Poll::Ready(guard) => guard.unwrap(),
            Poll::Pending => woken_and_granted(&mut first, &first_wakes, &first_waker, "the first"),
        };
        assert!(
            poll(&mut second, &second_waker).is_pending(),
            "the second jumped ahead"
        );
        let releaser = thread::spawn(move || drop(guard));
        releaser.join().unwrap();
        let guard = woken_and_granted(&mut second, &second_wakes, &second_waker, "the second");
        drop(guard);
        drop((first, second));
        assert_all_returned(&semaphore);
    });
}

/// Resizing against a waiter and a holder: a shrink (absorbing the release of a held
/// permit), then a grow, race with a queued waiter and a release. The waiter is granted
/// once the grow lands, never more permits are out than the limit in force allows, and
/// once all is given back the permits free equal the limit.
#[test]
fn set_limit_against_a_waiter_conserves_permits() {
    loom::model(|| {
        let semaphore = Arc::new(Semaphore::new(2));
        let first = semaphore.try_acquire_arc().unwrap();
        let second = semaphore.try_acquire_arc().unwrap();
        let (wakes, waker) = counting_waker();
        let mut waiter = queued(&semaphore, &waker);
        let resizer = {
            let semaphore = semaphore.clone();
            thread::spawn(move || {
                semaphore.set_limit(1);
                semaphore.set_limit(3);
            })
        };
        let releaser = thread::spawn(move || drop(first));
        resizer.join().unwrap();
        releaser.join().unwrap();
        // Limit 3, one permit held by `second`: the waiter has one.
        let guard = woken_and_granted(&mut waiter, &wakes, &waker, "the waiter");
        assert_eq!(semaphore.limit(), 3);
        assert_eq!(semaphore.available_permits(), 1);
        drop((guard, second, waiter));
        assert_all_returned(&semaphore);
    });
}

/// A shrink below what is held, racing two releases and a `try_acquire`: the newcomer is
/// never admitted while the permits held are above the new limit, and the debt is paid
/// by exactly the releases that were owed.
#[test]
fn a_shrink_is_paid_by_releases_before_anyone_is_admitted() {
    loom::model(|| {
        let semaphore = Arc::new(Semaphore::new(2));
        let first = semaphore.try_acquire_arc().unwrap();
        let second = semaphore.try_acquire_arc().unwrap();
        let held = Arc::new(AtomicUsize::new(2));
        let shrinker = {
            let semaphore = semaphore.clone();
            thread::spawn(move || semaphore.set_limit(1))
        };
        let releaser = {
            let held = held.clone();
            thread::spawn(move || {
                held.fetch_sub(1, Ordering::SeqCst);
                drop(first);
            })
        };
        shrinker.join().unwrap();
        // After the shrink: a newcomer may get in only while at most 0 others are held.
        if let Ok(permit) = semaphore.try_acquire_arc() {
            let others = held.load(Ordering::SeqCst);
            assert!(others < 1, "admitted with {others} permits held, limit 1");
            drop(permit);
        }
        releaser.join().unwrap();
        held.fetch_sub(1, Ordering::SeqCst);
        drop(second);
        assert_eq!(semaphore.limit(), 1);
        assert_all_returned(&semaphore);
    });
}

/// `add_permits` and `forget_permits` racing a waiter and a release: whatever the order,
/// the waiter is granted exactly when a permit is there for it, and the limit and the
/// free permits agree at the end.
#[test]
fn add_and_forget_against_a_waiter_conserve_permits() {
    loom::model(|| {
        let semaphore = Arc::new(Semaphore::new(1));
        let held = semaphore.try_acquire_arc().unwrap();
        let (wakes, waker) = counting_waker();
        let mut waiter = queued(&semaphore, &waker);
        let resizer = {
            let semaphore = semaphore.clone();
            thread::spawn(move || {
                semaphore.add_permits(1);
                semaphore.forget_permits(1)
            })
        };
        let releaser = thread::spawn(move || drop(held));
        let forgot = resizer.join().unwrap();
        releaser.join().unwrap();
        assert!(forgot <= 1);
        assert_eq!(semaphore.limit(), 2 - forgot);
        let guard = woken_and_granted(&mut waiter, &wakes, &waker, "the waiter");
        drop((guard, waiter));
        assert_all_returned(&semaphore);
    });
}

/// `close` racing a queued waiter's re-poll and a release: the waiter ends either granted
/// (the release won) or refused as closed, never both or neither; every permit comes back.
#[test]
fn close_against_waiters_wakes_each_with_an_answer() {
    loom::model(|| {
        let semaphore = Arc::new(Semaphore::new(1));
        let held = semaphore.try_acquire_arc().unwrap();
        let (first_wakes, first_waker) = counting_waker();
        let mut first = queued(&semaphore, &first_waker);
        let (second_wakes, second_waker) = counting_waker();
        let mut second = queued(&semaphore, &second_waker);
        let closer = {
            let semaphore = semaphore.clone();
            thread::spawn(move || semaphore.close())
        };
        let releaser = thread::spawn(move || drop(held));
        // Polled while the close may be under way: pending, granted or refused, all fine.
        let early = poll(&mut first, &first_waker);
        closer.join().unwrap();
        releaser.join().unwrap();
        let first = match early {
            Poll::Ready(answer) => answer,
            Poll::Pending => {
                assert!(
                    first_wakes.0.load(Ordering::SeqCst) > 0,
                    "first never woken"
                );
                match poll(&mut first, &first_waker) {
                    Poll::Ready(answer) => answer,
                    Poll::Pending => panic!("first woken without an answer"),
                }
            }
        };
        assert!(
            second_wakes.0.load(Ordering::SeqCst) > 0,
            "second never woken"
        );
        let Poll::Ready(Err(error)) = poll(&mut second, &second_waker) else {
            panic!("the second waiter must be refused: only one permit was ever released")
        };
        assert!(error.is_closed());
        if let Err(error) = &first {
            assert!(error.is_closed());
        }
        assert!(semaphore.try_acquire().unwrap_err().is_closed());
        drop(first);
        assert_eq!(semaphore.available_permits(), 1);
        assert_eq!(semaphore.waiting(), 0);
    });
}

/// A blocking waiter on another thread and `close`: the thread wakes with the error (or
/// got the permit before the close), never hangs.
#[test]
fn close_wakes_a_blocked_thread() {
    loom::model(|| {
        let semaphore = Arc::new(Semaphore::new(1));
        let held = semaphore.try_acquire_arc().unwrap();
        let blocked = {
            let semaphore = semaphore.clone();
            thread::spawn(move || semaphore.acquire_blocking().map(drop))
        };
        semaphore.close();
        let answer = blocked.join().unwrap();
        assert!(answer.unwrap_err().is_closed());
        drop(held);
        assert_eq!(semaphore.available_permits(), 1);
    });
}

/// Weighted FIFO: a waiter for 2 permits at the head and a waiter for 1 behind it, two
/// permits released from two threads. The small waiter never gets a permit before the
/// large one has both, and both end up granted.
#[test]
fn a_weighted_waiter_at_the_head_is_not_overtaken() {
    loom::model(|| {
        let semaphore = Arc::new(Semaphore::new(2));
        let in_use = InUse::new(2);
        let first = semaphore.try_acquire_arc().unwrap();
        let second = semaphore.try_acquire_arc().unwrap();
        let (big_wakes, big_waker) = counting_waker();
        let mut big = semaphore.acquire_many_arc(2);
        assert!(poll(&mut big, &big_waker).is_pending());
        let (small_wakes, small_waker) = counting_waker();
        let mut small = queued(&semaphore, &small_waker);
        let releasers: Vec<_> = [first, second]
            .into_iter()
            .map(|permit| thread::spawn(move || drop(permit)))
            .collect();
        // While the releases race, the small waiter may not get in ahead of the big one.
        if let Poll::Ready(answer) = poll(&mut small, &small_waker) {
            panic!("the small waiter overtook the big one: {answer:?}");
        }
        for releaser in releasers {
            releaser.join().unwrap();
        }
        let big_guard = woken_and_granted(&mut big, &big_wakes, &big_waker, "the big waiter");
        assert_eq!(big_guard.permits(), 2);
        in_use.work_many(2);
        assert!(poll(&mut small, &small_waker).is_pending());
        let releaser = thread::spawn(move || drop(big_guard));
        releaser.join().unwrap();
        let small_guard =
            woken_and_granted(&mut small, &small_wakes, &small_waker, "the small waiter");
        in_use.work();
        drop((small_guard, big, small));
        assert_all_returned(&semaphore);
    });
}

/// A shrink below a queued weighted waiter's request moves it aside (it waits for the
/// limit to grow back, holding up nobody) while a release races: if the release came
/// first, the big waiter was granted both permits before the shrink, and its release pays
/// the shrink's debt. Either way the small waiter behind it is served next and never
/// beyond the new limit, and a waiter aside is served once the limit grows back.
#[test]
fn a_shrink_below_a_weighted_waiter_moves_it_aside_or_it_was_served_first() {
    loom::model(|| {
        let semaphore = Arc::new(Semaphore::new(2));
        let held = semaphore.try_acquire_arc().unwrap();
        let (big_wakes, big_waker) = counting_waker();
        let mut big = semaphore.acquire_many_arc(2);
        assert!(poll(&mut big, &big_waker).is_pending());
        let (small_wakes, small_waker) = counting_waker();
        let mut small = queued(&semaphore, &small_waker);
        let shrinker = {
            let semaphore = semaphore.clone();
            thread::spawn(move || semaphore.set_limit(1))
        };
        let releaser = thread::spawn(move || drop(held));
        shrinker.join().unwrap();
        releaser.join().unwrap();
        let aside = match poll(&mut big, &big_waker) {
            Poll::Ready(Err(error)) => panic!("the big waiter was refused: {error}"),
            Poll::Ready(Ok(guard)) => {
                // Granted before the shrink: the small one waits until it is back.
                assert_eq!(guard.permits(), 2);
                assert!(poll(&mut small, &small_waker).is_pending());
                drop(guard);
                false
            }
            Poll::Pending => true,
        };
        let guard = woken_and_granted(&mut small, &small_wakes, &small_waker, "the small waiter");
        assert_eq!(semaphore.available_permits(), 0);
        if aside {
            assert_eq!(semaphore.waiting(), 1);
            semaphore.set_limit(2);
            assert!(
                poll(&mut big, &big_waker).is_pending(),
                "one permit is held"
            );
            drop(guard);
            let guard = woken_and_granted(&mut big, &big_wakes, &big_waker, "the big waiter");
            drop(guard);
            semaphore.set_limit(1);
        } else {
            drop(guard);
        }
        drop((big, small));
        assert_all_returned(&semaphore);
    });
}

/// Grants are no longer in ticket order once a waiter stands aside: a later waiter served
/// while an older one is aside must not make the older one, polled meanwhile, believe it
/// was served too. The one aside is served once the limit grows back, as a release races.
#[test]
fn a_waiter_aside_is_not_taken_for_served_when_a_later_one_is() {
    loom::model(|| {
        let semaphore = Arc::new(Semaphore::new(2));
        let held = semaphore.try_acquire_many_arc(2).unwrap();
        let (big_wakes, big_waker) = counting_waker();
        let mut big = semaphore.acquire_many_arc(2);
        assert!(poll(&mut big, &big_waker).is_pending());
        semaphore.set_limit(1); // aside; one permit owed
        let (small_wakes, small_waker) = counting_waker();
        let mut small = queued(&semaphore, &small_waker);
        let releaser = thread::spawn(move || drop(held)); // pays the debt, serves `small`
        assert!(
            poll(&mut big, &big_waker).is_pending(),
            "the waiter aside took itself for served"
        );
        releaser.join().unwrap();
        assert!(poll(&mut big, &big_waker).is_pending());
        let guard = woken_and_granted(&mut small, &small_wakes, &small_waker, "the small waiter");
        let grower = {
            let semaphore = semaphore.clone();
            thread::spawn(move || semaphore.set_limit(2))
        };
        let releaser = thread::spawn(move || drop(guard));
        grower.join().unwrap();
        releaser.join().unwrap();
        let guard = woken_and_granted(&mut big, &big_wakes, &big_waker, "the big waiter");
        assert_eq!(guard.permits(), 2);
        drop((guard, big, small));
        assert_all_returned(&semaphore);
    });
}

/// A waiter aside cancelled while a grow brings it back in line and a release races: it
/// either leaves holding nothing or, if it was served first, its drop passes the permits
/// on. The waiter behind it is served either way, and every permit comes back.
#[test]
fn cancelling_a_waiter_aside_as_the_limit_grows_back_loses_nothing() {
    loom::model(|| {
        let semaphore = Arc::new(Semaphore::new(2));
        let held = semaphore.try_acquire_arc().unwrap();
        let (_, big_waker) = counting_waker();
        let mut big = semaphore.acquire_many_arc(2);
        assert!(poll(&mut big, &big_waker).is_pending());
        semaphore.set_limit(1); // the free permit forgotten, `big` aside
        let (small_wakes, small_waker) = counting_waker();
        let mut small = queued(&semaphore, &small_waker);
        let grower = {
            let semaphore = semaphore.clone();
            thread::spawn(move || semaphore.set_limit(2))
        };
        let canceller = thread::spawn(move || drop(big));
        drop(held);
        grower.join().unwrap();
        canceller.join().unwrap();
        let guard = woken_and_granted(&mut small, &small_wakes, &small_waker, "the small waiter");
        drop((guard, small));
        assert_eq!(semaphore.limit(), 2);
        assert_all_returned(&semaphore);
    });
}

/// Lowering the max weight below a waiter aside while a grow would bring it back: it is
/// either served (the grow came first) or refused as over the limit, woken either way.
#[test]
fn lowering_the_max_weight_against_a_grow_serves_or_refuses_the_waiter_aside() {
    loom::model(|| {
        let semaphore = Arc::new(Semaphore::new(2));
        semaphore.set_limit(1);
        let (wakes, waker) = counting_waker();
        let mut big = semaphore.acquire_many_arc(2);
        assert!(poll(&mut big, &waker).is_pending(), "aside, not refused");
        let grower = {
            let semaphore = semaphore.clone();
            thread::spawn(move || semaphore.set_limit(2))
        };
        let lowerer = {
            let semaphore = semaphore.clone();
            thread::spawn(move || semaphore.set_max_weight(1))
        };
        grower.join().unwrap();
        lowerer.join().unwrap();
        assert!(wakes.0.load(Ordering::SeqCst) > 0, "never woken");
        match poll(&mut big, &waker) {
            Poll::Ready(Ok(guard)) => assert_eq!(guard.permits(), 2),
            Poll::Ready(Err(error)) => assert!(error.is_over_limit(), "{error}"),
            Poll::Pending => panic!("woken without an answer"),
        }
        drop(big);
        assert_eq!(semaphore.max_weight(), 1);
        assert_all_returned(&semaphore);
    });
}
