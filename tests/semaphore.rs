//! `Semaphore`: strict FIFO hand-off, no queue jumping, cancellation, blocking threads.

mod common;

use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use common::{InFlight, Rng, matrix, panic_message, spawn};
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
                    let mut rng = Rng::new(seed);
                    for _ in 0..500 {
                        let mut acquire = pin!(semaphore.acquire());
                        match rng.below(3) {
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

/// What a resize stress test knows: the permits its tasks hold (counted after a grant,
/// uncounted before the release, so never more than the semaphore sees held), and the
/// limit in force.
///
/// "In force" for a shrink: permits granted before the shrink stay out until released,
/// so an admission may see as many held as the highest limit set since the oldest
/// acquire still waiting or holding began. Each acquire records the generation (the
/// number of resizes so far) it began in; the bound at an admission is the highest limit
/// of the generations from the oldest such one to now. Once every acquire that began
/// before a shrink has finished, the bound is the new limit.
struct Ledger {
    held: usize,
    peak: usize,
    /// The limit set at the start of each generation.
    limits: Vec<usize>,
    /// Acquires (waiting or holding) per generation they began in.
    active: std::collections::BTreeMap<usize, usize>,
    admissions: usize,
    tight_admissions: usize,
}

impl Ledger {
    fn new(limit: usize) -> Mutex<Self> {
        Mutex::new(Self {
            held: 0,
            peak: 0,
            limits: vec![limit],
            active: Default::default(),
            admissions: 0,
            tight_admissions: 0,
        })
    }

    fn generation(&self) -> usize {
        self.limits.len() - 1
    }

    /// An acquire begins: returns its generation.
    fn begin(&mut self) -> usize {
        let generation = self.generation();
        *self.active.entry(generation).or_default() += 1;
        generation
    }

    /// `n` permits were granted to an acquire of `generation`: checks the bound.
    fn admit(&mut self, n: usize) {
        self.held += n;
        self.peak = self.peak.max(self.held);
        let oldest = *self
            .active
            .keys()
            .next()
            .expect("the admitted acquire is active");
        let bound = *self.limits[oldest..].iter().max().unwrap();
        assert!(
            self.held <= bound,
            "{} permits held, limit in force {bound} (limits since: {:?})",
            self.held,
            &self.limits[oldest..]
        );
        self.admissions += 1;
        if oldest == self.generation() {
            self.tight_admissions += 1;
        }
    }

    /// The acquire of `generation` gives back `n` permits (0: it was never granted).
    fn end(&mut self, generation: usize, n: usize) {
        self.held -= n;
        let count = self.active.get_mut(&generation).unwrap();
        *count -= 1;
        if *count == 0 {
            self.active.remove(&generation);
        }
    }

    fn resized(&mut self, limit: usize) {
        self.limits.push(limit);
    }
}

/// The tasks of the weighted stress tests: `TASKS` tasks, `ACQUIRES` acquires in all, of
/// 1 to `MOST` permits each.
const TASKS: usize = 16;
const ACQUIRES: usize = 100_000;
const MOST: usize = 4;
/// The resizer keeps the limit within these bounds (so `MOST` is never above it).
const LOWEST: usize = MOST;
const HIGHEST: usize = 16;

/// One random resize within `LOWEST..=HIGHEST`, recorded in the ledger under its lock so
/// that the ledger's limit is the semaphore's.
fn resize(semaphore: &Semaphore, ledger: &Mutex<Ledger>, rng: &mut Rng) {
    let mut ledger = ledger.lock().unwrap();
    match rng.range(0..=2) {
        0 => semaphore.set_limit(rng.range(LOWEST..=HIGHEST)),
        1 if semaphore.limit() < HIGHEST => {
            semaphore.add_permits(rng.range(1..=2).min(HIGHEST - semaphore.limit()));
        }
        _ => {
            let most = rng.range(1..=3).min(semaphore.limit() - LOWEST);
            assert!(semaphore.forget_permits(most) <= most);
        }
    }
    ledger.resized(semaphore.limit());
}

/// A task that resizes `semaphore` at random (seeded) until all `TASKS` workers are `done`,
/// yielding a few times between resizes; it returns how many resizes it made.
fn spawn_resizer(
    semaphore: &Arc<Semaphore>,
    ledger: &Arc<Mutex<Ledger>>,
    done: &Arc<AtomicUsize>,
    seed: u64,
) -> impl Future<Output = usize> + Send + use<> {
    let (semaphore, ledger, done) = (semaphore.clone(), ledger.clone(), done.clone());
    spawn(async move {
        let mut rng = Rng::new(seed);
        let mut resizes = 0;
        while done.load(Ordering::SeqCst) < TASKS {
            resize(&semaphore, &ledger, &mut rng);
            resizes += 1;
            for _ in 0..rng.range(1..=20) {
                yield_now().await;
            }
        }
        resizes
    })
}

/// The largest request of the stress test with waiters aside: above `LOWEST`, so that
/// requests step aside and back as the limit moves (the max weight is `HIGHEST`).
const MOST_ASIDE: usize = 12;

matrix! {
    async fn resizing_during_random_weighted_acquires_keeps_the_limit_and_conserves_permits() {
        let semaphore = Arc::new(Semaphore::new(8));
        let ledger = Arc::new(Ledger::new(8));
        let done = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = (0..TASKS as u64)
            .map(|seed| {
                let (semaphore, ledger, done) = (semaphore.clone(), ledger.clone(), done.clone());
                spawn(async move {
                    let mut rng = Rng::new(seed + 1);
                    for _ in 0..ACQUIRES / TASKS {
                        let n = rng.range(1..=MOST);
                        let generation = ledger.lock().unwrap().begin();
                        // Every form of the weighted acquire, held the same way.
                        let permit: Box<dyn Send + '_> = match rng.range(0..=2) {
                            0 => Box::new(semaphore.acquire_many_arc(n).await.unwrap()),
                            1 if n == 1 => Box::new(semaphore.acquire_arc().await.unwrap()),
                            _ => {
                                let permit = semaphore.acquire_many(n).await.unwrap();
                                assert_eq!(permit.permits(), n);
                                Box::new(permit)
                            }
                        };
                        ledger.lock().unwrap().admit(n);
                        if rng.range(0..=1) == 0 {
                            yield_now().await;
                        }
                        ledger.lock().unwrap().end(generation, n);
                        drop(permit);
                    }
                    done.fetch_add(1, Ordering::SeqCst);
                })
            })
            .collect();
        let resizer = spawn_resizer(&semaphore, &ledger, &done, 99);
        for task in tasks {
            task.await;
        }
        let resizes = resizer.await;
        let ledger = ledger.lock().unwrap();
        assert_eq!(ledger.admissions, ACQUIRES / TASKS * TASKS);
        assert!(resizes > 10, "only {resizes} resizes");
        assert!(ledger.peak <= HIGHEST, "peak {}", ledger.peak);
        assert!(ledger.tight_admissions > 0);
        println!(
            "{resizes} resizes, peak {}, {} of {} admissions under the latest limit alone",
            ledger.peak, ledger.tight_admissions, ledger.admissions
        );
        assert_eq!(ledger.held, 0);
        assert_eq!(semaphore.waiting(), 0);
        assert_eq!(semaphore.available_permits(), semaphore.limit());
    }
}

matrix! {
    /// The same with requests up to `MOST_ASIDE`, above the lowest limit: requests step
    /// aside and back as the limit moves, and some acquires are cancelled (while in line,
    /// aside, or just granted). None fails, the limit in force holds at every admission,
    /// and every permit comes back.
    async fn resizing_with_requests_stepping_aside_and_cancelled_keeps_the_limit_and_conserves_permits() {
        const ACQUIRES: usize = 40_000;
        let semaphore = Arc::new(Semaphore::new(8));
        semaphore.set_max_weight(HIGHEST);
        let ledger = Arc::new(Ledger::new(8));
        let done = Arc::new(AtomicUsize::new(0));
        let above = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = (0..TASKS as u64)
            .map(|seed| {
                let (semaphore, ledger, done, above) =
                    (semaphore.clone(), ledger.clone(), done.clone(), above.clone());
                spawn(async move {
                    let mut rng = Rng::new(seed + 100);
                    for _ in 0..ACQUIRES / TASKS {
                        let n = rng.range(1..=MOST_ASIDE);
                        let generation = {
                            let mut ledger = ledger.lock().unwrap();
                            if n > semaphore.limit() {
                                above.fetch_add(1, Ordering::Relaxed);
                            }
                            ledger.begin()
                        };
                        let mut acquire = pin!(semaphore.acquire_many_arc(n));
                        if rng.range(0..=3) == 0 {
                            // Cancelled after a poll or two: queued (in line or aside), or
                            // granted and never taken, which passes its permits on.
                            let early = poll_once(acquire.as_mut()).await;
                            if rng.range(0..=1) == 0 {
                                yield_now().await;
                            }
                            match early {
                                Some(permit) => {
                                    ledger.lock().unwrap().admit(n);
                                    ledger.lock().unwrap().end(generation, n);
                                    drop(permit.unwrap());
                                }
                                None => ledger.lock().unwrap().end(generation, 0),
                            }
                            continue;
                        }
                        let permit = acquire.await.unwrap();
                        ledger.lock().unwrap().admit(n);
                        if rng.range(0..=1) == 0 {
                            yield_now().await;
                        }
                        ledger.lock().unwrap().end(generation, n);
                        drop(permit);
                    }
                    done.fetch_add(1, Ordering::SeqCst);
                })
            })
            .collect();
        let resizer = spawn_resizer(&semaphore, &ledger, &done, 199);
        for task in tasks {
            task.await;
        }
        let resizes = resizer.await;
        let ledger = ledger.lock().unwrap();
        let above = above.load(Ordering::Relaxed);
        println!(
            "{resizes} resizes, {above} requests above the limit when made, peak {}, {} admissions",
            ledger.peak, ledger.admissions
        );
        assert!(resizes > 10, "only {resizes} resizes");
        assert!(above > 100, "only {above} requests above the limit");
        assert!(ledger.peak <= HIGHEST, "peak {}", ledger.peak);
        assert_eq!(ledger.held, 0);
        assert_eq!(semaphore.waiting(), 0);
        assert_eq!(semaphore.available_permits(), semaphore.limit());
    }

    async fn close_wakes_every_waiter_with_the_error() {
        const WAITERS: usize = 12;
        let semaphore = Arc::new(Semaphore::new(2));
        let held = semaphore.try_acquire_many_arc(2).unwrap();
        let tasks: Vec<_> = (0..WAITERS)
            .map(|index| {
                let semaphore = semaphore.clone();
                spawn(async move {
                    let answer = if index % 2 == 0 {
                        semaphore.acquire_arc().await
                    } else {
                        semaphore.acquire_many_arc(2).await
                    };
                    answer.map(drop).unwrap_err()
                })
            })
            .collect();
        // Every waiter queued before the close, whatever the runtime's scheduling.
        eventually(Duration::from_secs(60), || semaphore.waiting() == WAITERS)
            .await
            .unwrap();
        semaphore.close();
        assert_eq!(semaphore.waiting(), 0);
        for task in tasks {
            let error = task.await;
            assert!(error.is_closed(), "{error}");
            assert_eq!(error.to_string(), "the semaphore is closed");
        }
        assert!(semaphore.acquire().await.unwrap_err().is_closed());
        assert!(semaphore.try_acquire_many(1).unwrap_err().is_closed());
        // The permits held before the close stay valid and come back.
        assert_eq!(held.permits(), 2);
        drop(held);
        assert_eq!(semaphore.available_permits(), semaphore.limit());
    }

    async fn weighted_waiters_are_admitted_in_arrival_order() {
        // Any two neighbours ask for more than the limit together, so each waiter is
        // admitted only once the one before it has given its permits back: the recorded
        // order is the admission order on every runtime.
        const SIZES: [usize; 11] = [4, 1, 4, 2, 3, 3, 4, 1, 4, 2, 4];
        let semaphore = Arc::new(Semaphore::new(4));
        let held = semaphore.try_acquire_many_arc(3).unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for (index, size) in SIZES.into_iter().enumerate() {
            let (semaphore_in, order) = (semaphore.clone(), order.clone());
            tasks.push(spawn(async move {
                let permit = semaphore_in.acquire_many_arc(size).await.unwrap();
                assert_eq!(permit.permits(), size);
                order.lock().unwrap().push(index);
                yield_now().await;
            }));
            eventually(Duration::from_secs(60), || semaphore.waiting() == index + 1)
                .await
                .unwrap();
        }
        // The head wants 4 and one permit is free: the waiter for 1 behind it waits too.
        assert_eq!(semaphore.available_permits(), 1);
        assert!(semaphore.try_acquire().unwrap_err().is_busy());
        assert!(order.lock().unwrap().is_empty());
        drop(held);
        for task in tasks {
            task.await;
        }
        assert_eq!(*order.lock().unwrap(), (0..SIZES.len()).collect::<Vec<_>>());
        assert_eq!(semaphore.available_permits(), 4);
    }

    async fn a_growing_limit_admits_waiters_in_order_at_once() {
        let semaphore = Arc::new(Semaphore::new(2));
        let held = semaphore.try_acquire_many_arc(2).unwrap();
        let first = spawn({
            let semaphore = semaphore.clone();
            async move { semaphore.acquire_many_arc(2).await.unwrap().permits() }
        });
        eventually(Duration::from_secs(60), || semaphore.waiting() == 1).await.unwrap();
        let second = spawn({
            let semaphore = semaphore.clone();
            async move { semaphore.acquire_arc().await.unwrap().permits() }
        });
        eventually(Duration::from_secs(60), || semaphore.waiting() == 2).await.unwrap();
        semaphore.set_limit(5); // 3 new permits: 2 for the first, 1 for the second
        assert_eq!(semaphore.waiting(), 0);
        assert_eq!((first.await, second.await), (2, 1));
        drop(held);
        assert_eq!(semaphore.available_permits(), 5);
    }
}

#[test]
fn a_small_waiter_behind_a_large_one_waits_though_permits_are_free() {
    let semaphore = Semaphore::new(4);
    let held = semaphore.try_acquire_many(3).unwrap();
    let (large_wakes, waker) = counting_waker();
    let mut large = semaphore.acquire_many(4);
    assert!(poll(&mut large, &waker).is_pending());
    let (small_wakes, small_waker) = counting_waker();
    let mut small = semaphore.acquire();
    assert!(
        poll(&mut small, &small_waker).is_pending(),
        "one permit is free, but FIFO"
    );
    assert_eq!(semaphore.available_permits(), 1);
    drop(held);
    assert_eq!(large_wakes.0.load(Ordering::SeqCst), 1);
    assert_eq!(small_wakes.0.load(Ordering::SeqCst), 0);
    let Poll::Ready(Ok(large)) = poll(&mut large, &waker) else {
        panic!("the large waiter has all four permits");
    };
    assert!(poll(&mut small, &small_waker).is_pending());
    drop(large);
    assert!(matches!(poll(&mut small, &small_waker), Poll::Ready(Ok(_))));
}

#[test]
fn a_large_waiter_that_leaves_the_head_lets_the_next_in() {
    let semaphore = Semaphore::new(4);
    let held = semaphore.try_acquire_many(3).unwrap();
    let (_, waker) = counting_waker();
    let mut large = semaphore.acquire_many(4);
    assert!(poll(&mut large, &waker).is_pending());
    let (small_wakes, small_waker) = counting_waker();
    let mut small = semaphore.acquire();
    assert!(poll(&mut small, &small_waker).is_pending());
    drop(large);
    assert_eq!(
        small_wakes.0.load(Ordering::SeqCst),
        1,
        "woken by the head leaving"
    );
    assert!(matches!(poll(&mut small, &small_waker), Poll::Ready(Ok(_))));
    drop(held);
}

#[test]
fn a_request_above_the_max_weight_fails_at_once_and_one_above_the_limit_waits() {
    let semaphore = Semaphore::new(4);
    assert_eq!(
        semaphore.max_weight(),
        4,
        "by default the limit it was created with"
    );
    let error = futures_lite::future::block_on(semaphore.acquire_many(5)).unwrap_err();
    assert!(error.is_over_limit());
    assert_eq!(
        (error.requested(), error.limit(), error.max_weight()),
        (5, 4, 4)
    );
    assert!(
        semaphore
            .acquire_many_blocking(usize::MAX)
            .unwrap_err()
            .is_over_limit()
    );
    assert!(semaphore.try_acquire_many(5).unwrap_err().is_over_limit());
    assert_eq!(semaphore.waiting(), 0, "nothing queued");

    // A grow raises the default max weight, a shrink keeps it.
    semaphore.set_limit(6);
    semaphore.set_limit(3);
    assert_eq!(semaphore.max_weight(), 6);
    assert!(
        semaphore.try_acquire_many(6).unwrap_err().is_busy(),
        "may fit once the limit grows back"
    );
    assert!(semaphore.try_acquire_many(7).unwrap_err().is_over_limit());

    // Set by hand, above every limit so far: requests up to it wait.
    semaphore.set_max_weight(10);
    let (big_wakes, waker) = counting_waker();
    let mut big = semaphore.acquire_many(10);
    assert!(poll(&mut big, &waker).is_pending());
    let mut medium = semaphore.acquire_many(5);
    assert!(poll(&mut medium, &waker).is_pending());
    assert!(semaphore.try_acquire_many(11).unwrap_err().is_over_limit());
    assert_eq!(semaphore.waiting(), 2);
    // Lowered below a waiter's request: that waiter fails, the other waits on.
    semaphore.set_max_weight(8);
    assert_eq!(big_wakes.0.load(Ordering::SeqCst), 1);
    let Poll::Ready(Err(error)) = poll(&mut big, &waker) else {
        panic!("a waiter above the lowered max weight must be refused");
    };
    assert!(error.is_over_limit());
    assert_eq!((error.requested(), error.max_weight()), (10, 8));
    assert!(poll(&mut medium, &waker).is_pending());
    assert_eq!(semaphore.waiting(), 1);
    // Set for good: a grow no longer raises it, and it may be below the limit in force.
    semaphore.set_limit(12);
    assert_eq!((semaphore.limit(), semaphore.max_weight()), (12, 8));
    let Poll::Ready(Ok(medium)) = poll(&mut medium, &waker) else {
        panic!("the waiter within the max weight is served once the limit fits it");
    };
    assert!(
        semaphore.try_acquire_many(9).unwrap_err().is_over_limit(),
        "above the max weight, though 7 permits are free"
    );
    drop(medium);
    assert_eq!(semaphore.available_permits(), 12);
    // Though all 12 are free: the max weight caps each request.
    assert!(semaphore.try_acquire_many(9).unwrap_err().is_over_limit());
    let error = futures_lite::future::block_on(semaphore.acquire_many(9)).unwrap_err();
    assert!(error.is_over_limit());
    assert_eq!((error.limit(), error.max_weight()), (12, 8));
    // Nothing of the refused waiter is left behind.
    assert_eq!(semaphore.try_acquire_many(8).unwrap().permits(), 8);
}

#[test]
fn a_shrink_below_what_is_held_is_paid_by_the_next_releases() {
    let semaphore = Semaphore::new(4);
    let held: Vec<_> = (0..4).map(|_| semaphore.try_acquire().unwrap()).collect();
    let (_, waker) = counting_waker();
    let mut waiter = semaphore.acquire();
    assert!(poll(&mut waiter, &waker).is_pending());
    semaphore.set_limit(2);
    let mut held = held.into_iter();
    drop(held.next());
    drop(held.next());
    assert!(
        poll(&mut waiter, &waker).is_pending(),
        "still 2 held, limit 2"
    );
    drop(held.next());
    let Poll::Ready(Ok(permit)) = poll(&mut waiter, &waker) else {
        panic!("one held, limit 2: the waiter is in");
    };
    drop((permit, held));
    assert_eq!(semaphore.available_permits(), 2);
    semaphore.set_limit(6);
    semaphore.add_permits(1);
    assert_eq!(semaphore.forget_permits(3), 3);
    assert_eq!((semaphore.limit(), semaphore.available_permits()), (4, 4));
}

#[test]
fn bad_resizes_are_refused_with_a_clear_message() {
    let semaphore = Semaphore::new(2);
    let message = |f: &dyn Fn()| {
        let payload = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_err();
        panic_message(&*payload)
    };
    assert!(message(&|| semaphore.set_limit(0)).contains("limit of 0"));
    assert!(message(&|| semaphore.set_limit(Semaphore::MAX_PERMITS + 1)).contains("MAX_PERMITS"));
    assert!(message(&|| semaphore.add_permits(Semaphore::MAX_PERMITS)).contains("MAX_PERMITS"));
    assert!(message(&|| semaphore.set_max_weight(0)).contains("max weight of 0"));
    assert!(
        message(&|| semaphore.set_max_weight(Semaphore::MAX_PERMITS + 1)).contains("MAX_PERMITS")
    );
    assert_eq!(semaphore.max_weight(), 2);
    assert_eq!((semaphore.limit(), semaphore.available_permits()), (2, 2));
    assert_eq!(
        semaphore.forget_permits(5),
        1,
        "the limit stays at 1 at least"
    );
}

#[test]
fn blocking_weighted_threads_never_exceed_the_limit_while_it_changes() {
    const LIMIT: usize = 6;
    let semaphore = Semaphore::new(LIMIT);
    let held = AtomicUsize::new(0);
    let peak = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for seed in 0..6 {
            let (semaphore, held, peak) = (&semaphore, &held, &peak);
            scope.spawn(move || {
                let mut rng = Rng::new(seed);
                for _ in 0..300 {
                    let n = rng.range(1..=3);
                    let permit = if n == 1 {
                        semaphore.acquire_blocking().unwrap()
                    } else {
                        semaphore.acquire_many_blocking(n).unwrap()
                    };
                    let now = held.fetch_add(n, Ordering::SeqCst) + n;
                    peak.fetch_max(now, Ordering::SeqCst);
                    std::thread::yield_now();
                    held.fetch_sub(n, Ordering::SeqCst);
                    drop(permit);
                }
            });
        }
    });
    assert!(
        peak.load(Ordering::SeqCst) <= LIMIT,
        "peak {}",
        peak.load(Ordering::SeqCst)
    );
    assert_eq!(semaphore.available_permits(), LIMIT);
}

#[test]
fn close_wakes_every_blocked_thread_with_the_error() {
    const THREADS: usize = 6;
    let semaphore = Semaphore::new(3);
    let held = semaphore.try_acquire_many(3).unwrap();
    std::thread::scope(|scope| {
        let threads: Vec<_> = (0..THREADS)
            .map(|index| {
                let semaphore = &semaphore;
                scope.spawn(move || {
                    let answer = if index % 2 == 0 {
                        semaphore.acquire_blocking()
                    } else {
                        semaphore.acquire_many_blocking(3)
                    };
                    answer.map(drop).unwrap_err()
                })
            })
            .collect();
        futures_lite::future::block_on(eventually(Duration::from_secs(60), || {
            semaphore.waiting() == THREADS
        }))
        .unwrap();
        semaphore.close();
        for thread in threads {
            assert!(thread.join().unwrap().is_closed());
        }
    });
    assert!(semaphore.acquire_blocking().unwrap_err().is_closed());
    drop(held);
    assert_eq!(semaphore.available_permits(), 3);
}

#[test]
fn the_errors_say_what_happened() {
    let semaphore = Semaphore::new(2);
    let held = semaphore.try_acquire_many(2).unwrap();
    let busy = semaphore.try_acquire().unwrap_err();
    assert!(busy.is_busy() && !busy.is_closed() && !busy.is_over_limit());
    assert_eq!(busy.to_string(), "no semaphore permit is free right now");
    assert_eq!(
        semaphore.try_acquire_many(2).unwrap_err().to_string(),
        "2 semaphore permits are not free right now"
    );
    let error: tollgate::Error = semaphore.try_acquire_many(3).unwrap_err().into();
    assert_eq!(
        error.to_string(),
        "asked a semaphore for 3 permits, more than its max weight of 2"
    );
    drop(held);
}

/// In-flight weight of the downloader test, with the peak under each cap: admissions
/// recorded while `cap` reads the lowered cap were all granted under it (the cap is
/// lowered before the recording starts, and `cap` is raised before the semaphore's).
#[derive(Default)]
struct Meter {
    now: AtomicUsize,
    cap: AtomicUsize,
    peak_low: AtomicUsize,
    peak_high: AtomicUsize,
    finished: AtomicUsize,
    failed: AtomicUsize,
}

impl Meter {
    fn start(&self, size: usize, low: usize) {
        let now = self.now.fetch_add(size, Ordering::SeqCst) + size;
        let peak = if self.cap.load(Ordering::SeqCst) == low {
            &self.peak_low
        } else {
            &self.peak_high
        };
        peak.fetch_max(now, Ordering::SeqCst);
    }

    fn end(&self, size: usize) {
        self.now.fetch_sub(size, Ordering::SeqCst);
        self.finished.fetch_add(1, Ordering::SeqCst);
    }
}

matrix! {
    /// Regression (item 10 of the defects found by attacking the crate): a downloader
    /// capping the KiB in flight lowered its cap from 1024 to 256 and raised it again;
    /// every request above 256 queued meanwhile failed with `is_over_limit` (11 of 600). They
    /// now step aside and wait for the cap to grow back, while the requests that fit the
    /// lowered cap go on.
    async fn downloads_queued_while_the_cap_is_lowered_wait_for_it_to_grow_back() {
        const DOWNLOADS: usize = 600;
        const HIGH: usize = 1024;
        const LOW: usize = 256;
        let bytes = Arc::new(Semaphore::new(HIGH));
        // Sizes in KiB: mostly small, about one in 25 above the lowered cap.
        let mut rng = Rng::new(10);
        let sizes: Vec<usize> = (0..DOWNLOADS)
            .map(|_| {
                if rng.range(0..=24) == 0 {
                    rng.range(LOW + 1..=HIGH)
                } else {
                    rng.range(1..=64)
                }
            })
            .collect();
        let large = sizes.iter().filter(|&&size| size > LOW).count();
        assert!((10..=50).contains(&large), "{large} large downloads");
        // The whole cap is taken, so that every download queues before the cap changes.
        let gate = bytes.try_acquire_many_arc(HIGH).unwrap();
        let meter = Arc::new(Meter::default());
        meter.cap.store(HIGH, Ordering::SeqCst);
        let tasks: Vec<_> = sizes
            .iter()
            .map(|&size| {
                let (bytes, meter) = (bytes.clone(), meter.clone());
                spawn(async move {
                    let permit = match bytes.acquire_many_arc(size).await {
                        Ok(permit) => permit,
                        Err(error) => {
                            meter.failed.fetch_add(1, Ordering::SeqCst);
                            return Err(error);
                        }
                    };
                    meter.start(size, LOW);
                    yield_now().await;
                    yield_now().await;
                    meter.end(size);
                    drop(permit);
                    Ok(size)
                })
            })
            .collect();
        eventually(Duration::from_secs(60), || bytes.waiting() == DOWNLOADS)
            .await
            .unwrap();
        bytes.set_limit(LOW);
        meter.cap.store(LOW, Ordering::SeqCst);
        drop(gate); // pays for the shrink; the downloads that fit start
        // Every download that fits the lowered cap finishes while the large ones wait:
        // they hold up nobody.
        eventually(Duration::from_secs(60), || {
            meter.finished.load(Ordering::SeqCst) + meter.failed.load(Ordering::SeqCst)
                >= DOWNLOADS - large
        })
        .await
        .unwrap();
        assert_eq!(meter.failed.load(Ordering::SeqCst), 0, "downloads failed");
        assert_eq!(bytes.waiting(), large, "the large downloads still wait");
        meter.cap.store(HIGH, Ordering::SeqCst);
        bytes.set_limit(HIGH);
        let mut failures = Vec::new();
        for task in tasks {
            if let Err(error) = task.await {
                failures.push(error.to_string());
            }
        }
        assert_eq!(failures, Vec::<String>::new(), "{} failed", failures.len());
        let (peak_low, peak_high) = (
            meter.peak_low.load(Ordering::SeqCst),
            meter.peak_high.load(Ordering::SeqCst),
        );
        println!("{large} large downloads; peak {peak_low} KiB under {LOW}, {peak_high} under {HIGH}");
        assert!(peak_low <= LOW, "{peak_low} KiB in flight under a cap of {LOW}");
        assert!(peak_high <= HIGH, "{peak_high} KiB in flight under a cap of {HIGH}");
        assert!(peak_high > LOW, "the large downloads ran after the cap grew back");
        assert_eq!(meter.finished.load(Ordering::SeqCst), DOWNLOADS);
        assert_eq!((bytes.available_permits(), bytes.waiting()), (HIGH, 0));
    }

    async fn a_small_request_behind_a_large_one_that_stepped_aside_is_served_while_it_waits() {
        let semaphore = Arc::new(Semaphore::new(8));
        let held = semaphore.try_acquire_many_arc(2).unwrap();
        let large = spawn({
            let semaphore = semaphore.clone();
            async move { semaphore.acquire_many_arc(8).await.map(|permit| permit.permits()) }
        });
        eventually(Duration::from_secs(60), || semaphore.waiting() == 1).await.unwrap();
        let small = spawn({
            let semaphore = semaphore.clone();
            async move { semaphore.acquire_many_arc(2).await.unwrap() }
        });
        eventually(Duration::from_secs(60), || semaphore.waiting() == 2).await.unwrap();
        // First come, first served: 6 permits are free, but the head asks for 8.
        assert_eq!(semaphore.available_permits(), 6);
        semaphore.set_limit(6); // the large request steps aside: the small one is served
        let small = small.await;
        assert_eq!(small.permits(), 2);
        assert_eq!(semaphore.waiting(), 1, "the large request still waits");
        // A newcomer that fits is not held up either.
        let newcomer = semaphore.acquire().await.unwrap();
        assert_eq!(semaphore.available_permits(), 1);
        // Back: the large request is at the head again, and newcomers queue behind it.
        semaphore.set_limit(8);
        assert!(semaphore.try_acquire().unwrap_err().is_busy());
        drop((held, small, newcomer));
        assert_eq!(large.await.unwrap(), 8);
        assert_eq!((semaphore.available_permits(), semaphore.waiting()), (8, 0));
    }
}

/// A request that stepped aside keeps its place: once the limit grows back, it is served
/// before every waiter that arrived after it and still waits, and after those before it.
#[test]
fn a_request_back_from_aside_is_served_at_its_place() {
    let semaphore = Semaphore::new(8);
    let gate = semaphore.try_acquire_many(8).unwrap();
    let waker = Waker::noop();
    let mut a = semaphore.acquire_many(6);
    let mut b = semaphore.acquire_many(1);
    let mut c = semaphore.acquire_many(6);
    let mut d = semaphore.acquire_many(2);
    for waiter in [&mut a, &mut b, &mut c, &mut d] {
        assert!(poll(waiter, waker).is_pending());
    }
    semaphore.set_limit(4); // `a` and `c` step aside
    drop(gate); // pays for the shrink and frees 4: `b` and `d` are served
    let Poll::Ready(Ok(b)) = poll(&mut b, waker) else {
        panic!("b was not served past a, which stepped aside");
    };
    let Poll::Ready(Ok(d)) = poll(&mut d, waker) else {
        panic!("d was not served past c, which stepped aside");
    };
    assert!(poll(&mut a, waker).is_pending() && poll(&mut c, waker).is_pending());
    let mut e = semaphore.acquire_many(6); // above the limit: aside at once
    assert!(poll(&mut e, waker).is_pending());
    let f = semaphore.try_acquire().unwrap(); // nobody in line: not held up
    assert_eq!((semaphore.waiting(), semaphore.available_permits()), (3, 0));
    semaphore.set_limit(8); // a, c, e back in line in arrival order
    let mut g = semaphore.acquire();
    assert!(poll(&mut g, waker).is_pending(), "queues behind e");
    assert!(semaphore.try_acquire().unwrap_err().is_busy());
    drop((b, d, f));
    let Poll::Ready(Ok(a)) = poll(&mut a, waker) else {
        panic!("a, the oldest, was not served first");
    };
    for waiter in [&mut c, &mut e, &mut g] {
        assert!(poll(waiter, waker).is_pending());
    }
    drop(a);
    let Poll::Ready(Ok(c)) = poll(&mut c, waker) else {
        panic!("c was not served after a");
    };
    assert!(poll(&mut e, waker).is_pending() && poll(&mut g, waker).is_pending());
    drop(c);
    let Poll::Ready(Ok(e)) = poll(&mut e, waker) else {
        panic!("e was not served after c");
    };
    let Poll::Ready(Ok(g)) = poll(&mut g, waker) else {
        panic!("g was not served after e");
    };
    drop((e, g));
    assert_eq!((semaphore.available_permits(), semaphore.waiting()), (8, 0));
}

/// A waiter aside holds nothing: cancelling it gives nothing back, wakes nobody, and the
/// waiters behind it go on.
#[test]
fn cancelling_a_request_that_stepped_aside_returns_nothing_and_stalls_nobody() {
    let semaphore = Semaphore::new(4);
    let held = semaphore.try_acquire_many(4).unwrap();
    let (big_wakes, big_waker) = counting_waker();
    let mut big = semaphore.acquire_many(4);
    assert!(poll(&mut big, &big_waker).is_pending());
    let (small_wakes, small_waker) = counting_waker();
    let mut small = semaphore.acquire_many(2);
    assert!(poll(&mut small, &small_waker).is_pending());
    let mut next = semaphore.acquire_many(3);
    assert!(poll(&mut next, &small_waker).is_pending());
    semaphore.set_limit(3); // `big` steps aside; debt 1
    assert_eq!(
        big_wakes.0.load(Ordering::SeqCst),
        0,
        "stepping aside is silent"
    );
    drop(held); // pays the debt, frees 3: `small` is served
    assert_eq!(small_wakes.0.load(Ordering::SeqCst), 1);
    let Poll::Ready(Ok(small)) = poll(&mut small, &small_waker) else {
        panic!("the small waiter was held up");
    };
    assert_eq!(semaphore.available_permits(), 1);
    drop(big);
    assert_eq!(
        (semaphore.available_permits(), semaphore.waiting()),
        (1, 1),
        "nothing given back, one waiter left"
    );
    drop(small);
    let Poll::Ready(Ok(next)) = poll(&mut next, &small_waker) else {
        panic!("the waiter behind was held up");
    };
    semaphore.set_limit(4);
    drop(next);
    assert_eq!((semaphore.available_permits(), semaphore.waiting()), (4, 0));
}

#[test]
fn a_blocked_thread_above_a_lowered_limit_waits_for_it_to_grow_back_and_holds_up_nobody() {
    let semaphore = Semaphore::new(4);
    let held = semaphore.try_acquire_many(4).unwrap();
    let waiting = |count| {
        futures_lite::future::block_on(eventually(Duration::from_secs(60), || {
            semaphore.waiting() == count
        }))
        .unwrap()
    };
    std::thread::scope(|scope| {
        let big = scope.spawn(|| semaphore.acquire_many_blocking(4).map(|p| p.permits()));
        waiting(1);
        semaphore.set_limit(2); // the blocked thread steps aside
        let small = scope.spawn(|| semaphore.acquire_many_blocking(2).map(|p| p.permits()));
        waiting(2);
        // Made while the limit is low: aside at once, and still no error.
        let late = scope.spawn(|| semaphore.acquire_many_blocking(3).map(|p| p.permits()));
        waiting(3);
        drop(held); // pays for the shrink and frees 2: the small thread runs
        assert_eq!(small.join().unwrap().unwrap(), 2);
        assert_eq!(semaphore.waiting(), 2, "the large ones still wait");
        semaphore.set_limit(4);
        assert_eq!(big.join().unwrap().unwrap(), 4);
        assert_eq!(late.join().unwrap().unwrap(), 3);
    });
    assert_eq!((semaphore.available_permits(), semaphore.waiting()), (4, 0));
}

/// Regression: a release handing its permits straight to the head of the queue stopped
/// there, though the next waiter fitted in the permits already free: it waited for some
/// later release (forever, if none came).
#[test]
fn a_release_that_serves_the_head_also_serves_the_next_from_free_permits() {
    let semaphore = Semaphore::new(8);
    let held = semaphore.try_acquire_many(6).unwrap();
    let waker = Waker::noop();
    let mut large = semaphore.acquire_many(6);
    let mut small = semaphore.acquire();
    assert!(poll(&mut large, waker).is_pending());
    assert!(
        poll(&mut small, waker).is_pending(),
        "first come, first served"
    );
    drop(held); // exactly what the head asks for
    let Poll::Ready(Ok(large)) = poll(&mut large, waker) else {
        panic!("the head was not served");
    };
    let Poll::Ready(Ok(small)) = poll(&mut small, waker) else {
        panic!("one of the two free permits was not handed to the next waiter");
    };
    drop((large, small));
    assert_eq!(semaphore.available_permits(), 8);
}
