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
use tollgate::Semaphore;
use tollgate::futures::SemaphoreAcquireArc;

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

fn poll(future: &mut SemaphoreAcquireArc, waker: &Waker) -> Poll<tollgate::SemaphorePermitArc> {
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
) -> tollgate::SemaphorePermitArc {
    assert!(wakes.0.load(Ordering::SeqCst) > 0, "{who} was never woken");
    match poll(waiter, waker) {
        Poll::Ready(guard) => guard,
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
        let before = self.now.fetch_add(1, Ordering::SeqCst);
        assert!(
            before < self.limit,
            "{} permits in use, limit {}",
            before + 1,
            self.limit
        );
        self.now.fetch_sub(1, Ordering::SeqCst);
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
                    if let Some(_guard) = semaphore.try_acquire() {
                        in_use.work();
                    }
                })
            })
            .collect();
        if let Some(_guard) = semaphore.try_acquire() {
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
                let _guard = loom::future::block_on(semaphore.acquire());
                in_use.work();
            })
        };
        let grabber = {
            let (semaphore, in_use) = (semaphore.clone(), in_use.clone());
            thread::spawn(move || {
                if let Some(_guard) = semaphore.try_acquire() {
                    in_use.work();
                }
            })
        };
        {
            let _guard = loom::future::block_on(semaphore.acquire());
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
            Poll::Ready(guard) => guard,
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
            thread::spawn(move || semaphore.try_acquire().is_some())
        };
        let releaser = thread::spawn(move || drop(guard));
        assert!(!newcomer.join().unwrap(), "a newcomer jumped the queue");
        releaser.join().unwrap();
        let guard = woken_and_granted(&mut waiter, &wakes, &waker, "the queued waiter");
        assert!(semaphore.try_acquire().is_none());
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
            thread::spawn(move || semaphore.try_acquire().is_some())
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
            semaphore.try_acquire().is_none(),
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
        assert!(semaphore.try_acquire().is_some());
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
            Poll::Ready(guard) => guard,
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
