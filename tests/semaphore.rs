//! `Semaphore`: strict FIFO hand-off, no queue jumping, cancellation, blocking threads.

mod common;

use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use common::{InFlight, matrix, panic_message, spawn};
use futures_lite::future::{poll_once, yield_now};
use tollgate::Semaphore;
use tollgate::testing::eventually;

/// A waker that counts its wake-ups.
#[derive(Default)]
struct CountingWaker(AtomicUsize);

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn counting_waker() -> (Arc<CountingWaker>, Waker) {
    let counter = Arc::new(CountingWaker::default());
    (counter.clone(), Waker::from(counter))
}

fn poll<F: Future + Unpin>(future: &mut F, waker: &Waker) -> Poll<F::Output> {
    Pin::new(future).poll(&mut Context::from_waker(waker))
}

#[test]
fn a_release_wakes_the_waiter_with_the_permit_already_handed_over() {
    let semaphore = Semaphore::new(1);
    let held = semaphore.try_acquire().unwrap();
    let (wakes, waker) = counting_waker();
    let mut waiter = semaphore.acquire();
    assert!(poll(&mut waiter, &waker).is_pending());
    assert_eq!(semaphore.waiting(), 1);
    assert_eq!(wakes.0.load(Ordering::SeqCst), 0);

    drop(held);
    assert_eq!(wakes.0.load(Ordering::SeqCst), 1, "woken exactly once");
    assert_eq!(semaphore.waiting(), 0);
    assert_eq!(
        semaphore.available_permits(),
        0,
        "handed over, not put back"
    );
    assert!(semaphore.try_acquire().is_err());
    let guard = match poll(&mut waiter, &waker) {
        Poll::Ready(guard) => guard.unwrap(),
        Poll::Pending => panic!("the granted waiter must be ready"),
    };
    drop(guard);
    assert_eq!(semaphore.available_permits(), 1);
}

#[test]
fn permits_go_to_the_oldest_waiter_whoever_polls_first() {
    const WAITERS: usize = 6;
    let semaphore = Semaphore::new(1);
    let held = semaphore.try_acquire().unwrap();
    let (_, waker) = counting_waker();
    let mut waiters: Vec<_> = (0..WAITERS).map(|_| semaphore.acquire()).collect();
    for waiter in &mut waiters {
        assert!(poll(waiter, &waker).is_pending());
    }
    assert_eq!(semaphore.waiting(), WAITERS);

    let mut order = Vec::new();
    let mut current = Some(held);
    let mut done = [false; WAITERS];
    while order.len() < WAITERS {
        drop(current.take());
        // Poll newest first: an unfair semaphore would admit the newest.
        for index in (0..WAITERS).rev() {
            if done[index] {
                continue;
            }
            if let Poll::Ready(guard) = poll(&mut waiters[index], &waker) {
                let guard = guard.unwrap();
                assert!(current.is_none(), "two waiters admitted for one permit");
                done[index] = true;
                order.push(index);
                current = Some(guard);
            }
        }
    }
    assert_eq!(order, (0..WAITERS).collect::<Vec<_>>());
}

#[test]
fn try_acquire_never_jumps_the_queue() {
    let semaphore = Semaphore::new(2);
    let first = semaphore.try_acquire().unwrap();
    let second = semaphore.try_acquire().unwrap();
    let (_, waker) = counting_waker();
    let mut waiter = semaphore.acquire();
    assert!(poll(&mut waiter, &waker).is_pending());

    drop(first); // goes to the waiter
    assert!(semaphore.try_acquire().is_err());
    let mut newcomer = semaphore.acquire();
    assert!(poll(&mut newcomer, &waker).is_pending(), "queues behind");
    assert_eq!(semaphore.waiting(), 1);
    let Poll::Ready(_first_again) = poll(&mut waiter, &waker) else {
        panic!("the waiter was handed the first permit");
    };

    drop(second); // goes to the newcomer
    assert!(semaphore.try_acquire().is_err());
    assert!(poll(&mut newcomer, &waker).is_ready());
}

#[test]
fn a_waiter_dropped_after_its_grant_passes_the_permit_on() {
    let semaphore = Semaphore::new(1);
    let held = semaphore.try_acquire().unwrap();
    let (_, waker) = counting_waker();
    let mut granted = semaphore.acquire();
    let mut next = semaphore.acquire();
    assert!(poll(&mut granted, &waker).is_pending());
    assert!(poll(&mut next, &waker).is_pending());

    drop(held); // to `granted`, which never looks
    drop(granted); // so it passes the permit to `next`
    assert_eq!(semaphore.waiting(), 0);
    let guard = match poll(&mut next, &waker) {
        Poll::Ready(guard) => guard.unwrap(),
        Poll::Pending => panic!("the permit must have been passed on"),
    };
    drop(guard);
    assert_eq!(semaphore.available_permits(), 1);
}

#[test]
fn a_waiter_dropped_while_queued_leaves_the_queue() {
    let semaphore = Semaphore::new(1);
    let held = semaphore.try_acquire().unwrap();
    let (_, waker) = counting_waker();
    let mut waiters: Vec<_> = (0..3).map(|_| semaphore.acquire()).collect();
    for waiter in &mut waiters {
        assert!(poll(waiter, &waker).is_pending());
    }
    let mut last = waiters.pop().unwrap();
    drop(waiters.remove(1)); // from the middle
    assert_eq!(semaphore.waiting(), 2);
    drop(waiters); // the oldest
    assert_eq!(semaphore.waiting(), 1);
    drop(held);
    assert!(poll(&mut last, &waker).is_ready());
    drop(last);
    drop(semaphore.acquire()); // never polled: nothing to undo
    assert_eq!(semaphore.available_permits(), 1);
}

#[test]
fn a_waker_change_is_honoured() {
    let semaphore = Semaphore::new(1);
    let held = semaphore.try_acquire().unwrap();
    let (old_wakes, old) = counting_waker();
    let (new_wakes, new) = counting_waker();
    let mut waiter = semaphore.acquire();
    assert!(poll(&mut waiter, &old).is_pending());
    assert!(poll(&mut waiter, &new).is_pending());
    drop(held);
    assert_eq!(old_wakes.0.load(Ordering::SeqCst), 0);
    assert_eq!(new_wakes.0.load(Ordering::SeqCst), 1);
    assert!(poll(&mut waiter, &new).is_ready());
}

/// Regression: a granted waiter learns of its grant by comparing its ticket with the last
/// one granted. The wait queue used to start over (tickets from 1 again) when a burst of
/// more than 64 waiters drained and it gave its memory back, so the next waiter's ticket
/// was already "granted": it took a permit nobody had given it, two holders at limit 1.
#[test]
fn a_waiter_after_a_drained_burst_still_waits_its_turn() {
    let semaphore = Semaphore::new(1);
    let waker = Waker::noop();
    let mut held = semaphore.try_acquire().unwrap();
    let mut burst: Vec<_> = (0..300).map(|_| semaphore.acquire()).collect();
    for waiter in &mut burst {
        assert!(poll(waiter, waker).is_pending());
    }
    for waiter in &mut burst {
        drop(held);
        held = match poll(waiter, waker) {
            Poll::Ready(permit) => permit.unwrap(),
            Poll::Pending => panic!("the oldest waiter was not granted the released permit"),
        };
    }
    assert_eq!(semaphore.waiting(), 0);
    let mut late = semaphore.acquire();
    assert!(
        poll(&mut late, waker).is_pending(),
        "a permit out of nowhere"
    );
    assert!(
        poll(&mut late, waker).is_pending(),
        "a permit out of nowhere"
    );
    drop(held);
    let Poll::Ready(permit) = poll(&mut late, waker) else {
        panic!("the late waiter was not granted the released permit");
    };
    drop(burst);
    assert_eq!(semaphore.available_permits(), 0);
    drop(permit);
    assert_eq!(semaphore.available_permits(), 1);
}

#[test]
fn a_zero_permit_semaphore_is_refused_with_a_clear_message() {
    let payload = std::panic::catch_unwind(|| Semaphore::new(0)).unwrap_err();
    let message = panic_message(&*payload);
    assert!(message.contains("0 permits"), "{message}");
    let payload =
        std::panic::catch_unwind(|| Semaphore::new(Semaphore::MAX_PERMITS + 1)).unwrap_err();
    assert!(panic_message(&*payload).contains("MAX_PERMITS"));
    assert_eq!(
        Semaphore::new(Semaphore::MAX_PERMITS).limit(),
        Semaphore::MAX_PERMITS
    );
}

#[test]
fn blocking_threads_never_exceed_the_limit() {
    let semaphore = Semaphore::new(2);
    let in_flight = InFlight::default();
    std::thread::scope(|scope| {
        for _ in 0..8 {
            scope.spawn(|| {
                for _ in 0..200 {
                    let _guard = semaphore.acquire_blocking().unwrap();
                    let _inside = in_flight.enter();
                    std::thread::yield_now();
                }
            });
        }
    });
    assert!(in_flight.peak() <= 2, "peak {}", in_flight.peak());
    assert_eq!(semaphore.available_permits(), 2);
    assert_eq!(semaphore.waiting(), 0);
}

#[test]
fn blocking_and_async_waiters_share_one_fifo_queue() {
    let semaphore = Arc::new(Semaphore::new(1));
    let held = semaphore.try_acquire_arc().unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let blocked = {
        let (semaphore, order) = (semaphore.clone(), order.clone());
        std::thread::spawn(move || {
            let _guard = semaphore.acquire_blocking().unwrap();
            order.lock().unwrap().push("thread");
        })
    };
    futures_lite::future::block_on(async {
        eventually(Duration::from_secs(30), || semaphore.waiting() == 1)
            .await
            .unwrap();
        let mut task = pin!(async {
            let _guard = semaphore.acquire().await.unwrap();
            order.lock().unwrap().push("task");
        });
        assert!(poll_once(task.as_mut()).await.is_none());
        drop(held);
        task.await;
    });
    blocked.join().unwrap();
    assert_eq!(*order.lock().unwrap(), ["thread", "task"]);
}

#[test]
fn the_futures_and_guards_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>(_: &T) {}
    fn assert_send<T: Send>(_: &T) {}
    let semaphore = Arc::new(Semaphore::new(1));
    assert_send_sync(&*semaphore);
    assert_send(&semaphore.acquire());
    assert_send(&semaphore.acquire_arc());
    let guard = semaphore.try_acquire().unwrap();
    assert_send_sync(&guard);
    drop(guard);
    assert_send_sync(&semaphore.try_acquire_arc().unwrap());
    fn assert_static<T: 'static>(_: &T) {}
    assert_static(&semaphore.acquire_arc());
    assert!(format!("{semaphore:?}").contains("limit: 1"));
}

matrix! {
    async fn tasks_are_admitted_in_arrival_order() {
        const TASKS: usize = 20;
        let semaphore = Arc::new(Semaphore::new(1));
        let held = semaphore.try_acquire_arc().unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for index in 0..TASKS {
            let (semaphore_in, order) = (semaphore.clone(), order.clone());
            tasks.push(spawn(async move {
                let _guard = semaphore_in.acquire_arc().await.unwrap();
                order.lock().unwrap().push(index);
                yield_now().await;
            }));
            // The next task is spawned only once this one is queued.
            eventually(Duration::from_secs(30), || semaphore.waiting() == index + 1)
                .await
                .unwrap();
        }
        drop(held);
        for task in tasks {
            task.await;
        }
        assert_eq!(*order.lock().unwrap(), (0..TASKS).collect::<Vec<_>>());
        assert_eq!(semaphore.available_permits(), 1);
    }

    async fn many_tasks_never_exceed_the_limit() {
        let semaphore = Arc::new(Semaphore::new(4));
        let in_flight = Arc::new(InFlight::default());
        let tasks: Vec<_> = (0..200)
            .map(|_| {
                let (semaphore, in_flight) = (semaphore.clone(), in_flight.clone());
                spawn(async move {
                    let _guard = semaphore.acquire_arc().await.unwrap();
                    let _inside = in_flight.enter();
                    yield_now().await;
                })
            })
            .collect();
        for task in tasks {
            task.await;
        }
        assert!(in_flight.peak() <= 4, "peak {}", in_flight.peak());
        assert_eq!(semaphore.available_permits(), 4);
        assert_eq!(semaphore.waiting(), 0);
    }

    async fn permits_survive_random_cancellation() {
        // Tasks poll an acquire once and drop it, drop it after yielding (maybe granted by
        // then), or hold the permit across a yield; every permit must come back.
        let semaphore = Arc::new(Semaphore::new(3));
        let tasks: Vec<_> = (0..16u64)
            .map(|seed| {
                let semaphore = semaphore.clone();
                spawn(async move {
                    let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                    for _ in 0..500 {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        let mut acquire = pin!(semaphore.acquire());
                        match rng % 3 {
                            0 => drop(poll_once(acquire.as_mut()).await),
                            1 => {
                                let early = poll_once(acquire.as_mut()).await;
                                yield_now().await;
                                drop(early);
                            }
                            _ => {
                                let _guard = acquire.await.unwrap();
                                yield_now().await;
                            }
                        }
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await;
        }
        assert_eq!(semaphore.available_permits(), 3);
        assert_eq!(semaphore.waiting(), 0);
    }
}
