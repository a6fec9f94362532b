//! `Bulkhead`: limits, FIFO, acquire timeouts, bounded queue, conservation under
//! cancellation, blocking threads, one cap per runtime, and stats totalled over runtimes.
//!
//! How long an acquire waits is time, so it is proven on virtual time (`virtual_time!`:
//! smol's world on `run_virtual`, and tokio's paused clock), where timers fire exactly at
//! their deadlines: a timed-out acquire waited exactly its timeout, work under a shorter
//! acquire timeout takes exactly its own time, a waiter is admitted at the instant a permit
//! comes back, a grant made before the timeout is kept when the waiter looks late, and an
//! hour-long timeout costs no wall time.
//!
//! Everything else holds at any speed and is checked on every executor (`matrix!`: smol,
//! `run_sync`, tokio current and multi-thread) or on plain threads: never above the limit,
//! arrival order, permits conserved, the errors and their words, stats that add up, one cap
//! per runtime. A blocking wait's timeout runs on the real clock (it has no executor to
//! move a virtual one); only its error is checked.

mod common;

use std::panic::AssertUnwindSafe;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Once};
use std::time::{Duration, Instant};

use common::{InFlight, Rng, matrix, panic_message, spawn, virtual_time};
use futures_lite::FutureExt;
use futures_lite::future::{poll_once, yield_now, zip};
use tollgate::testing::now;
use tollgate::{Bulkhead, BulkheadError, BulkheadStats, run_sync};

/// The stats of the runtime that spawned tasks run on (under `run_sync`, `spawn` uses
/// smol's executor, whose tasks see the process-wide key, not the `run_sync` call's).
async fn task_stats(bulkhead: &Arc<Bulkhead>) -> BulkheadStats {
    let bulkhead = bulkhead.clone();
    spawn(async move { bulkhead.stats() }).await
}

/// Panics with this message are expected by the stress test; keep them off stderr.
const EXPECTED_PANIC: &str = "expected panic while holding a permit";

fn silence_expected_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if panic_message(info.payload()) != EXPECTED_PANIC {
                default(info);
            }
        }));
    });
}

/// A second acquire on a bulkhead of 1 whose permit stays out: it times out after 20 ms.
/// The error, how long it waited (on tollgate's clock) and the stats after it.
async fn an_acquire_that_times_out() -> (BulkheadError, Duration, BulkheadStats) {
    let bulkhead = Bulkhead::new(1)
        .name("slow-api")
        .acquire_timeout(Duration::from_millis(20));
    let _held = bulkhead.acquire().await.unwrap();
    let start = now();
    let error = bulkhead.acquire().await.unwrap_err();
    (error, now() - start, bulkhead.stats())
}

/// 30 ms of work admitted at once under a 5 ms acquire timeout: its answer, and how long
/// it took (on tollgate's clock).
async fn slow_work_under_a_short_acquire_timeout() -> (Result<&'static str, BulkheadError>, Duration)
{
    let bulkhead = Bulkhead::new(1).acquire_timeout(Duration::from_millis(5));
    let start = now();
    let done = bulkhead
        .run(async {
            tollgate::sleep(Duration::from_millis(30)).await;
            "slow work, quick admission"
        })
        .await;
    (done, now() - start)
}

matrix! {
    async fn a_thousand_tasks_never_exceed_a_limit_of_eight() {
        let bulkhead = Arc::new(Bulkhead::new(8));
        let in_flight = Arc::new(InFlight::default());
        let tasks: Vec<_> = (0..1000)
            .map(|_| {
                let (bulkhead, in_flight) = (bulkhead.clone(), in_flight.clone());
                spawn(async move {
                    let _permit = bulkhead.acquire_arc().await.unwrap();
                    let _inside = in_flight.enter();
                    yield_now().await;
                })
            })
            .collect();
        for task in tasks {
            task.await;
        }
        let stats = task_stats(&bulkhead).await;
        assert!(in_flight.peak() <= 8, "{}", in_flight.peak());
        assert!(stats.peak_in_flight <= 8, "{stats:?}");
        assert!(stats.peak_in_flight >= in_flight.peak(), "{stats:?}");
        assert_eq!((stats.in_flight, stats.waiting, stats.admitted), (0, 0, 1000));
    }

    async fn waiters_are_admitted_in_arrival_order_and_try_acquire_waits_its_turn() {
        const WAITERS: usize = 8;
        let bulkhead = Bulkhead::new(1);
        let held = bulkhead.acquire().await.unwrap();
        let mut waiters: Vec<_> = (0..WAITERS).map(|_| Box::pin(bulkhead.acquire())).collect();
        for waiter in &mut waiters {
            assert!(poll_once(waiter.as_mut()).await.is_none());
        }
        assert_eq!(bulkhead.stats().waiting, WAITERS);
        let mut order = Vec::new();
        let mut current = Some(held);
        while order.len() < WAITERS {
            drop(current.take());
            assert!(bulkhead.try_acquire().unwrap_err().is_busy(), "try_acquire jumped the queue");
            // Newest first: only the oldest may be ready.
            for index in (0..WAITERS).rev() {
                if order.contains(&index) {
                    continue;
                }
                if let Some(permit) = poll_once(waiters[index].as_mut()).await {
                    assert!(current.is_none(), "two waiters admitted for one slot");
                    current = Some(permit.unwrap());
                    order.push(index);
                }
            }
        }
        assert_eq!(order, (0..WAITERS).collect::<Vec<_>>());
        drop(current);
        assert!(bulkhead.try_acquire().is_ok());
    }

    async fn permits_are_conserved_over_100_000_acquires_with_random_cancellation() {
        silence_expected_panics();
        const TASKS: u64 = 32;
        const ACQUIRES: u64 = 100_000;
        const LIMIT: usize = 8;
        let bulkhead = Arc::new(Bulkhead::new(LIMIT).acquire_timeout(Duration::from_millis(1)));
        let tasks: Vec<_> = (0..TASKS)
            .map(|seed| {
                let bulkhead = bulkhead.clone();
                spawn(async move {
                    let mut rng = Rng::new(seed);
                    for _ in 0..ACQUIRES / TASKS {
                        let mut acquire = pin!(bulkhead.acquire());
                        match rng.below(5) {
                            // Hold across a yield, now and then across a sleep that makes
                            // others' 1 ms acquire timeout fire.
                            0 => {
                                if let Ok(_permit) = acquire.await {
                                    if rng.below(32) == 0 {
                                        tollgate::sleep(Duration::from_millis(4)).await;
                                    } else {
                                        yield_now().await;
                                    }
                                }
                            }
                            // Dropped while queued.
                            1 => drop(poll_once(acquire.as_mut()).await),
                            // Dropped after yielding: often granted by then, never looked at.
                            2 => {
                                let early = poll_once(acquire.as_mut()).await;
                                yield_now().await;
                                yield_now().await;
                                drop(early);
                            }
                            // Cancelled by an outer timeout while queued.
                            3 => {
                                let outer = tollgate::timeout(Duration::from_micros(50), acquire);
                                drop(outer.await);
                            }
                            // A panic while holding the permit.
                            _ => {
                                let caught = AssertUnwindSafe(async {
                                    let _permit = acquire.await;
                                    yield_now().await;
                                    panic!("{EXPECTED_PANIC}");
                                })
                                .catch_unwind()
                                .await;
                                assert!(caught.is_err());
                            }
                        }
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await;
        }
        let stats = task_stats(&bulkhead).await;
        assert_eq!((stats.in_flight, stats.waiting, stats.available()), (0, 0, LIMIT), "{stats:?}");
        assert!(stats.peak_in_flight <= LIMIT);
        // Every slot can be taken again, and no more.
        let all = spawn(async move {
            let permits: Vec<_> = (0..LIMIT).map_while(|_| bulkhead.try_acquire().ok()).collect();
            (permits.len(), bulkhead.try_acquire().unwrap_err().is_busy())
        })
        .await;
        assert_eq!(all, (LIMIT, true));
    }

    async fn an_acquire_timeout_gives_a_timed_out_error_and_leaves_the_queue() {
        // How long it waited is time: see its virtual_time twin.
        let (error, _, stats) = an_acquire_that_times_out().await;
        assert!(error.is_timed_out());
        assert_eq!(error.acquire_timeout(), Some(Duration::from_millis(20)));
        assert!(!error.is_queue_full());
        assert_eq!(error.name(), Some("slow-api"));
        assert_eq!(error.limit(), 1);
        assert_eq!(
            error.to_string(),
            "bulkhead `slow-api` (limit 1) had no free permit within 20ms"
        );
        assert_eq!((stats.waiting, stats.rejected, stats.in_flight), (0, 1, 1));
    }

    async fn the_timeout_counts_the_wait_not_the_work() {
        let (done, _) = slow_work_under_a_short_acquire_timeout().await;
        assert_eq!(done.unwrap(), "slow work, quick admission");
    }

    async fn max_waiting_refuses_at_once_when_the_queue_is_full() {
        let bulkhead = Bulkhead::new(1).max_waiting(2).name("mail");
        let held = bulkhead.acquire().await.unwrap();
        let mut first = pin!(bulkhead.acquire());
        let mut second = pin!(bulkhead.acquire());
        assert!(poll_once(first.as_mut()).await.is_none());
        assert!(poll_once(second.as_mut()).await.is_none());
        let refused = poll_once(bulkhead.acquire()).await.expect("refused at once");
        let error = refused.unwrap_err();
        assert!(error.is_queue_full());
        assert_eq!(error.max_waiting(), Some(2));
        assert!(!error.is_timed_out());
        assert_eq!(
            error.to_string(),
            "bulkhead `mail` (limit 1) has no free permit and 2 callers already waiting"
        );
        let stats = bulkhead.stats();
        assert_eq!((stats.waiting, stats.rejected), (2, 1));
        // The queue drains in order and takes newcomers again.
        drop(held);
        let permit = first.await.unwrap();
        assert_eq!(bulkhead.stats().waiting, 1);
        drop(permit);
        drop(second.await.unwrap());
        assert_eq!(bulkhead.stats().admitted, 3);
    }

    async fn max_waiting_zero_refuses_whenever_every_slot_is_taken() {
        let bulkhead = Bulkhead::new(2).max_waiting(0);
        let a = bulkhead.acquire().await.unwrap();
        let b = bulkhead.acquire().await.unwrap();
        let error = poll_once(bulkhead.acquire()).await.unwrap().unwrap_err();
        assert!(error.is_queue_full());
        assert_eq!(error.max_waiting(), Some(0));
        assert_eq!(
            error.to_string(),
            "bulkhead (limit 2) has no free permit and takes no waiters"
        );
        drop(a);
        let c = poll_once(bulkhead.acquire()).await.unwrap().unwrap();
        drop((b, c));
        assert_eq!(bulkhead.stats().rejected, 1);
    }

    async fn a_zero_timeout_takes_a_free_slot_or_fails_at_once() {
        let bulkhead = Bulkhead::new(1).acquire_timeout(Duration::ZERO);
        let held = poll_once(bulkhead.acquire()).await.unwrap().unwrap();
        let error = poll_once(bulkhead.acquire()).await.unwrap().unwrap_err();
        assert!(error.is_timed_out());
        assert_eq!(error.acquire_timeout(), Some(Duration::ZERO));
        assert_eq!(bulkhead.stats().waiting, 0);
        drop(held);
        assert!(poll_once(bulkhead.acquire()).await.unwrap().is_ok());
    }

    async fn run_holds_a_slot_only_while_the_future_runs() {
        let bulkhead = Bulkhead::new(1).max_waiting(0);
        let inside = bulkhead.run(async { bulkhead.stats().in_flight }).await;
        assert_eq!(inside.unwrap(), 1);
        assert_eq!(bulkhead.stats().in_flight, 0);

        // Refused: the future is dropped unpolled.
        let held = bulkhead.acquire().await.unwrap();
        let polled = AtomicBool::new(false);
        let refused = bulkhead.run(async { polled.store(true, Ordering::SeqCst) }).await;
        assert!(refused.is_err());
        assert!(!polled.load(Ordering::SeqCst));
        drop(held);

        // Cancelled mid-flight: the slot comes back.
        let mut running = Box::pin(bulkhead.run(futures_lite::future::pending::<()>()));
        assert!(poll_once(running.as_mut()).await.is_none());
        assert_eq!(bulkhead.stats().in_flight, 1);
        drop(running);
        assert_eq!(bulkhead.stats().in_flight, 0);
    }

    async fn an_owned_permit_moves_into_a_spawned_task() {
        let bulkhead = Arc::new(Bulkhead::new(1));
        let permit = bulkhead.acquire_arc().await.unwrap();
        spawn(async move {
            yield_now().await;
            drop(permit);
        })
        .await;
        assert!(bulkhead.try_acquire_arc().is_ok());
    }
}

#[test]
fn eight_blocking_threads_never_exceed_a_limit_of_two() {
    let bulkhead = Bulkhead::new(2);
    let in_flight = InFlight::default();
    std::thread::scope(|scope| {
        for _ in 0..8 {
            scope.spawn(|| {
                for _ in 0..200 {
                    let _permit = bulkhead.acquire_blocking().unwrap();
                    let _inside = in_flight.enter();
                    std::thread::yield_now();
                }
            });
        }
    });
    let stats = bulkhead.stats();
    assert!(
        in_flight.peak() <= 2 && stats.peak_in_flight <= 2,
        "{stats:?}"
    );
    assert_eq!(
        (stats.in_flight, stats.waiting, stats.admitted),
        (0, 0, 1600)
    );
}

#[test]
fn blocking_callers_get_the_acquire_timeout_too() {
    let bulkhead = Bulkhead::new(1).acquire_timeout(Duration::from_millis(10));
    let _held = bulkhead.try_acquire().unwrap();
    let error = bulkhead.acquire_blocking().unwrap_err();
    assert!(error.is_timed_out());
    assert_eq!(error.acquire_timeout(), Some(Duration::from_millis(10)));
    let mut called = false;
    assert!(bulkhead.run_blocking(|| called = true).is_err());
    assert!(!called);
    drop(_held);
    assert_eq!(bulkhead.run_blocking(|| 7).unwrap(), 7);
}

#[test]
fn two_concurrent_run_sync_calls_get_a_cap_each() {
    static PER_RUNTIME: Bulkhead = Bulkhead::new(2);
    let barrier = Arc::new(Barrier::new(2));
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                run_sync(async {
                    let a = PER_RUNTIME.acquire().await.unwrap();
                    let b = PER_RUNTIME.acquire().await.unwrap();
                    barrier.wait(); // both calls hold their full cap at once
                    let full = PER_RUNTIME.try_acquire().unwrap_err().is_busy();
                    let in_flight = PER_RUNTIME.runtime_stats().in_flight;
                    barrier.wait();
                    drop((a, b));
                    (full, in_flight)
                })
            })
        })
        .collect();
    for thread in threads {
        assert_eq!(thread.join().unwrap(), (true, 2));
    }
}

/// Regression: a `static` bulkhead used by 4 threads, each in its own `run_sync`, let 4 x
/// the limit in (one cap per runtime, by design), but `stats()` read from a plain metrics
/// thread returned all zeros while the permits were held, and no call gave the totals.
#[test]
fn stats_from_a_plain_thread_are_the_totals_over_every_runtime() {
    static API: Bulkhead = Bulkhead::new(8);
    const THREADS: usize = 4;
    const HELD: usize = 3;
    let barrier = Arc::new(Barrier::new(THREADS + 1));
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                run_sync(async {
                    let mut permits = Vec::new();
                    for _ in 0..HELD {
                        permits.push(API.acquire().await.unwrap());
                    }
                    barrier.wait(); // every runtime holds its permits
                    let own = API.runtime_stats();
                    barrier.wait();
                    drop(permits);
                    own
                })
            })
        })
        .collect();
    barrier.wait();
    let totals = API.stats();
    let here = API.runtime_stats();
    barrier.wait();
    for thread in threads {
        let own = thread.join().unwrap();
        assert_eq!(
            (own.in_flight, own.runtimes, own.available()),
            (HELD, 1, 8 - HELD)
        );
    }
    assert_eq!(totals.in_flight, THREADS * HELD, "{totals:?}");
    assert_eq!(totals.admitted, (THREADS * HELD) as u64);
    assert_eq!(
        (totals.runtimes, totals.limit, totals.peak_in_flight),
        (THREADS, 8, HELD)
    );
    assert_eq!(totals.available(), THREADS * (8 - HELD));
    assert_eq!(
        (here.in_flight, here.admitted),
        (0, 0),
        "the plain thread's own cap"
    );
    // Once the runtimes are gone nothing is in flight, and the admissions are not lost.
    let after = API.stats();
    assert_eq!((after.in_flight, after.runtimes), (0, 0));
    assert_eq!(after.admitted, (THREADS * HELD) as u64);
}

/// Regression: the counters of a runtime that had ended vanished from every view (each
/// `run_sync` call's stats could only be read from inside that call).
#[test]
fn admissions_of_ended_runtimes_stay_in_the_totals() {
    static SCRIPT: Bulkhead = Bulkhead::new(2).max_waiting(0);
    for _ in 0..50 {
        run_sync(async {
            let held = (
                SCRIPT.acquire().await.unwrap(),
                SCRIPT.acquire().await.unwrap(),
            );
            assert!(SCRIPT.acquire().await.unwrap_err().is_queue_full());
            drop(held);
        });
    }
    assert!(
        SCRIPT.tracked_runtimes() <= 1,
        "ended runtimes are still forgotten"
    );
    let stats = SCRIPT.stats();
    assert_eq!(
        (stats.admitted, stats.rejected, stats.peak_in_flight),
        (100, 50, 2)
    );
    assert_eq!((stats.in_flight, stats.runtimes), (0, 0));
}

/// A cap freed by an ended runtime is reused: its new owner's numbers start from zero,
/// while the totals keep the old owner's.
#[test]
fn a_runtime_starts_from_zero_on_a_cap_an_ended_runtime_left() {
    static REUSED: Bulkhead = Bulkhead::new(3);
    run_sync(async {
        let held = [
            REUSED.acquire().await.unwrap(),
            REUSED.acquire().await.unwrap(),
            REUSED.acquire().await.unwrap(),
        ];
        assert_eq!(REUSED.runtime_stats().peak_in_flight, 3);
        drop(held);
    });
    let mine = run_sync(async {
        let permit = REUSED.acquire().await.unwrap();
        let stats = REUSED.runtime_stats();
        drop(permit);
        stats
    });
    assert_eq!(
        (mine.admitted, mine.peak_in_flight, mine.in_flight),
        (1, 1, 1)
    );
    assert_eq!(REUSED.tracked_runtimes(), 1);
    let totals = REUSED.stats();
    assert_eq!((totals.admitted, totals.peak_in_flight), (4, 3));
}

/// Caps are made four or more at a time, before any runtime owns them: a limit set or a
/// close must reach them too.
#[test]
fn set_limit_and_close_reach_caps_nobody_owned_yet() {
    static API: Bulkhead = Bulkhead::new(1);
    // The first runtime's permit keeps its cap, so each later runtime takes a fresh one.
    let first = run_sync(async { API.acquire().await.unwrap() });
    API.set_limit(2);
    let (second, both) = run_sync(async {
        let one = API.try_acquire().unwrap();
        (one, API.try_acquire())
    });
    assert!(both.is_ok(), "a fresh cap has the new limit");
    API.close();
    let refused = run_sync(async { API.acquire().await.unwrap_err() });
    assert!(refused.is_closed(), "{refused}");
    drop((first, second, both));
}

/// More runtimes alive at once than the first chunk of caps holds (4), each with its own
/// cap, and each runtime's numbers its own.
#[test]
fn six_runtimes_at_once_have_six_caps() {
    static WIDE: Bulkhead = Bulkhead::new(2).max_waiting(0);
    const RUNTIMES: usize = 6;
    let barrier = Arc::new(Barrier::new(RUNTIMES + 1));
    let threads: Vec<_> = (0..RUNTIMES)
        .map(|_| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                run_sync(async {
                    let held = (WIDE.acquire().await.unwrap(), WIDE.acquire().await.unwrap());
                    let refused = WIDE.try_acquire().unwrap_err().is_busy();
                    let full = WIDE.acquire().await.unwrap_err().is_queue_full();
                    barrier.wait();
                    let stats = WIDE.runtime_stats();
                    barrier.wait();
                    drop(held);
                    (refused, full, stats)
                })
            })
        })
        .collect();
    barrier.wait();
    let stats = WIDE.stats();
    assert_eq!(WIDE.tracked_runtimes(), RUNTIMES);
    barrier.wait();
    for thread in threads {
        let (refused, full, mine) = thread.join().unwrap();
        assert!(refused && full);
        assert_eq!((mine.in_flight, mine.admitted, mine.rejected), (2, 2, 1));
    }
    assert_eq!(
        (stats.in_flight, stats.runtimes, stats.rejected),
        (2 * RUNTIMES, RUNTIMES, RUNTIMES as u64)
    );
}

/// An ended runtime's waiter, still queued on its cap, keeps the cap from a new owner.
#[test]
fn a_queued_waiter_of_an_ended_runtime_keeps_its_cap() {
    static QUEUE: Bulkhead = Bulkhead::new(1);
    let (held, mut waiter) = run_sync(async {
        let held = QUEUE.acquire().await.unwrap();
        let mut waiter = Box::pin(QUEUE.acquire());
        assert!(
            futures_lite::future::poll_once(waiter.as_mut())
                .await
                .is_none()
        );
        (held, waiter)
    });
    let fresh = run_sync(async { QUEUE.try_acquire().map(drop) });
    assert!(fresh.is_ok(), "a cap of its own, not the full one");
    assert_eq!(QUEUE.tracked_runtimes(), 2);
    drop(held);
    let permit = futures_lite::future::block_on(waiter.as_mut()).unwrap();
    drop(permit);
}

/// A runtime that takes over a cap counts its own refusals only.
#[test]
fn refusals_are_counted_per_owner_of_a_reused_cap() {
    static STRICT: Bulkhead = Bulkhead::new(1).max_waiting(0);
    run_sync(async {
        let _held = STRICT.acquire().await.unwrap();
        assert!(STRICT.acquire().await.is_err());
        assert!(STRICT.acquire().await.is_err());
    });
    let mine = run_sync(async {
        let _held = STRICT.acquire().await.unwrap();
        assert!(STRICT.acquire().await.is_err());
        STRICT.runtime_stats()
    });
    assert_eq!((mine.admitted, mine.rejected), (1, 1));
    assert_eq!(STRICT.tracked_runtimes(), 1, "the cap was reused");
    let totals = STRICT.stats();
    assert_eq!((totals.admitted, totals.rejected), (2, 3));
}

#[test]
fn a_global_bulkhead_is_one_cap_across_runtimes() {
    static SHARED: Bulkhead = Bulkhead::new(2).global();
    let barrier = Arc::new(Barrier::new(2));
    let holder = {
        let barrier = barrier.clone();
        std::thread::spawn(move || {
            run_sync(async {
                let permits = (SHARED.acquire().await, SHARED.acquire().await);
                barrier.wait();
                barrier.wait();
                drop(permits);
            })
        })
    };
    barrier.wait();
    let refused = run_sync(async { SHARED.try_acquire().unwrap_err().is_busy() });
    let stats = SHARED.stats();
    barrier.wait();
    holder.join().unwrap();
    assert!(refused);
    assert_eq!(stats.in_flight, 2);
    assert_eq!(SHARED.tracked_runtimes(), 0);
}

#[test]
fn ten_thousand_sequential_run_sync_calls_leave_at_most_one_entry() {
    static SCRIPT: Bulkhead = Bulkhead::new(4);
    for _ in 0..10_000 {
        run_sync(async {
            drop(SCRIPT.acquire().await.unwrap());
        });
    }
    assert!(
        SCRIPT.tracked_runtimes() <= 1,
        "{}",
        SCRIPT.tracked_runtimes()
    );
}

#[test]
fn an_ended_runtime_is_kept_while_a_permit_of_it_is_out() {
    static ESCAPE: Bulkhead = Bulkhead::new(1);
    let escaped = run_sync(async { ESCAPE.acquire().await.unwrap() });
    for _ in 0..3 {
        run_sync(async { drop(ESCAPE.acquire().await.unwrap()) });
    }
    assert_eq!(
        ESCAPE.tracked_runtimes(),
        2,
        "the escaped permit's runtime and the last"
    );
    drop(escaped);
    run_sync(async { drop(ESCAPE.acquire().await.unwrap()) });
    assert_eq!(ESCAPE.tracked_runtimes(), 1);
}

#[test]
fn limit_zero_is_refused_with_a_clear_message() {
    let payload = std::panic::catch_unwind(|| Bulkhead::new(0)).unwrap_err();
    let message = panic_message(&*payload);
    assert!(message.contains("limit of 0"), "{message}");
}

#[test]
fn errors_convert_and_describe_themselves() {
    let bulkhead = Bulkhead::new(3)
        .with_name(format!("host {}", "example.com"))
        .acquire_timeout(Duration::ZERO);
    let permits: Vec<_> = (0..3).map(|_| bulkhead.try_acquire().unwrap()).collect();
    let error = run_sync(bulkhead.acquire()).unwrap_err();
    assert_eq!(error.name(), Some("host example.com"));
    assert_eq!(
        error.to_string(),
        "bulkhead `host example.com` (limit 3) has no free permit and an acquire timeout of zero"
    );
    let umbrella: tollgate::Error = error.clone().into();
    assert!(matches!(umbrella, tollgate::Error::Bulkhead(_)));
    assert_eq!(umbrella.to_string(), error.to_string());
    fn is_error<E: std::error::Error + Send + Sync + 'static>(_: &E) {}
    is_error(&error);
    drop(permits);
    let debug = format!("{bulkhead:?}");
    assert!(
        debug.contains("host example.com") && debug.contains("limit: 3"),
        "{debug}"
    );
}

#[test]
fn the_futures_and_permits_are_send() {
    fn assert_send<T: Send>(_: &T) {}
    fn assert_send_sync_static<T: Send + Sync + 'static>(_: &T) {}
    static STATIC: Bulkhead = Bulkhead::new(1);
    let bulkhead = Arc::new(Bulkhead::new(1));
    assert_send(&bulkhead.acquire());
    assert_send(&bulkhead.acquire_arc());
    assert_send(&bulkhead.run(async {}));
    assert_send_sync_static(&STATIC.acquire());
    let permit = STATIC.try_acquire().unwrap();
    assert_send_sync_static(&permit);
    drop(permit);
    assert_send_sync_static(&bulkhead.try_acquire_arc().unwrap());
    let _: fn(&BulkheadError) = |_| {};
}

#[cfg(feature = "tokio")]
mod with_tokio {
    use super::*;

    #[test]
    fn two_tokio_runtimes_get_a_cap_each_and_a_plain_thread_sees_both() {
        static PER_RUNTIME: Bulkhead = Bulkhead::new(2);
        let barrier = Arc::new(Barrier::new(3));
        let threads: Vec<_> = [common::tokio_current(), common::tokio_multi()]
            .into_iter()
            .map(|runtime| {
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    runtime.block_on(async {
                        // Hold from a spawned task on the runtime's own workers.
                        let permits = tokio::spawn(async {
                            (
                                PER_RUNTIME.acquire().await.unwrap(),
                                PER_RUNTIME.acquire().await.unwrap(),
                            )
                        })
                        .await
                        .unwrap();
                        barrier.wait();
                        let full = PER_RUNTIME.try_acquire().unwrap_err().is_busy();
                        barrier.wait();
                        drop(permits);
                        full
                    })
                })
            })
            .collect();
        barrier.wait();
        let totals = PER_RUNTIME.stats();
        barrier.wait();
        for thread in threads {
            assert!(thread.join().unwrap());
        }
        assert_eq!((totals.in_flight, totals.runtimes), (4, 2), "{totals:?}");
        assert_eq!(PER_RUNTIME.runtime_stats().in_flight, 0);
    }

    #[test]
    fn ended_tokio_runtimes_are_forgotten() {
        static TESTS: Bulkhead = Bulkhead::new(1);
        for _ in 0..20 {
            common::tokio_current().block_on(async {
                drop(TESTS.acquire().await.unwrap());
            });
        }
        assert!(
            TESTS.tracked_runtimes() <= 1,
            "{}",
            TESTS.tracked_runtimes()
        );
    }

    #[test]
    fn a_tokio_runtime_seen_only_by_acquires_counts_as_live_until_it_shuts_down() {
        // Nothing here asks for the runtime's key but the bulkhead's acquires (whose
        // per-thread cache skips the runtime's registration once it has a cap), so this
        // shows the first acquire registered it: the totals count it while it runs, not
        // after.
        static SEEN: Bulkhead = Bulkhead::new(2);
        let runtime = common::tokio_current();
        runtime.block_on(async {
            for _ in 0..3 {
                drop(SEEN.acquire().await.unwrap());
            }
        });
        let running = SEEN.stats();
        drop(runtime);
        let ended = SEEN.stats();
        assert_eq!((running.runtimes, running.admitted), (1, 3), "{running:?}");
        assert_eq!((ended.runtimes, ended.admitted), (0, 3), "{ended:?}");
    }

    /// Regression: a blocking wait inside `spawn_blocking` under tokio's paused clock used
    /// a tokio timer, which never fires there (tokio does not auto-advance while a
    /// blocking task runs), so the timeout never came and the wait hung.
    #[tokio::test(start_paused = true)]
    async fn a_blocking_wait_times_out_on_the_real_clock_under_paused_time() {
        static BLOCKING: Bulkhead = Bulkhead::new(1).acquire_timeout(Duration::from_millis(20));
        let _held = BLOCKING.acquire().await.unwrap();
        let waited = tokio::task::spawn_blocking(|| BLOCKING.acquire_blocking().map(drop));
        let error = waited.await.unwrap().unwrap_err();
        assert!(error.is_timed_out());
        assert_eq!(error.acquire_timeout(), Some(Duration::from_millis(20)));
    }
}

virtual_time! {
    async fn an_acquire_timeout_ends_the_wait_exactly_at_the_timeout() {
        let (error, waited, stats) = an_acquire_that_times_out().await;
        assert!(error.is_timed_out());
        assert_eq!(waited, Duration::from_millis(20), "the timer fires at its deadline");
        assert_eq!((stats.waiting, stats.rejected, stats.in_flight), (0, 1, 1));
    }

    async fn the_timeout_counts_the_wait_not_the_work_exactly() {
        let (done, took) = slow_work_under_a_short_acquire_timeout().await;
        assert_eq!(done.unwrap(), "slow work, quick admission");
        assert_eq!(took, Duration::from_millis(30), "admitted at once, then 30 ms of work");
    }

    async fn an_hour_long_acquire_timeout_takes_no_wall_time() {
        let bulkhead = Bulkhead::new(1).acquire_timeout(Duration::from_secs(3600));
        let _held = bulkhead.acquire().await.unwrap();
        let (wall, start) = (Instant::now(), now());
        let error = bulkhead.acquire().await.unwrap_err();
        assert!(error.is_timed_out());
        assert_eq!(error.acquire_timeout(), Some(Duration::from_secs(3600)));
        assert_eq!(now() - start, Duration::from_secs(3600), "an hour of virtual time");
        // Wall time: the worst run measured with both cores busy took under 5 ms (the
        // whole test); 10 s is far above it and far below the hour a real timer takes.
        assert!(wall.elapsed() < Duration::from_secs(10));
    }

    async fn a_permit_granted_before_the_acquire_timeout_is_taken() {
        let bulkhead = Bulkhead::new(1).acquire_timeout(Duration::from_secs(10));
        let held = bulkhead.acquire().await.unwrap();
        let mut waiter = pin!(bulkhead.acquire());
        assert!(poll_once(waiter.as_mut()).await.is_none());
        // The waiter is not polled while the clock moves: granted at 9 s, looked at only
        // at 14 s, past its timeout.
        tollgate::sleep(Duration::from_secs(9)).await;
        drop(held);
        tollgate::sleep(Duration::from_secs(5)).await;
        assert!(waiter.await.is_ok(), "granted in time, so admitted");
    }

    async fn a_waiter_is_admitted_at_the_instant_a_permit_comes_back() {
        let bulkhead = Bulkhead::new(1).acquire_timeout(Duration::from_secs(10));
        let held = bulkhead.acquire().await.unwrap();
        let start = now();
        let (admitted, ()) = zip(
            async { bulkhead.acquire().await.map(|_| now() - start) },
            async move {
                tollgate::sleep(Duration::from_secs(9)).await;
                drop(held);
            },
        )
        .await;
        assert_eq!(admitted.unwrap(), Duration::from_secs(9));
    }
}

/// The permits a resize stress test's tasks hold and the limit in force, under one lock
/// with the resizes. An admission may see as many held as the highest limit set since the
/// oldest acquire still waiting or holding began (permits granted before a shrink stay out
/// until released); once every acquire begun before a shrink has finished, the bound is
/// the new limit. (The same bookkeeping as tests/semaphore.rs's, for single permits.)
struct Ledger {
    held: usize,
    limits: Vec<usize>,
    active: std::collections::BTreeMap<usize, usize>,
}

impl Ledger {
    fn begin(&mut self) -> usize {
        let generation = self.limits.len() - 1;
        *self.active.entry(generation).or_default() += 1;
        generation
    }

    fn admit(&mut self) {
        self.held += 1;
        let oldest = *self.active.keys().next().unwrap();
        let bound = *self.limits[oldest..].iter().max().unwrap();
        assert!(
            self.held <= bound,
            "{} held, limit in force {bound}",
            self.held
        );
    }

    fn end(&mut self, generation: usize) {
        self.held -= 1;
        let count = self.active.get_mut(&generation).unwrap();
        *count -= 1;
        if *count == 0 {
            self.active.remove(&generation);
        }
    }
}

matrix! {
    async fn close_wakes_every_bulkhead_waiter_with_the_error() {
        const WAITERS: usize = 10;
        // Global: the spawned tasks and the test body share one cap on every runtime.
        let bulkhead = Arc::new(Bulkhead::new(1).name("db").global());
        let held = bulkhead.acquire().await.unwrap();
        let tasks: Vec<_> = (0..WAITERS)
            .map(|_| {
                let bulkhead = bulkhead.clone();
                spawn(async move { bulkhead.acquire_arc().await.map(drop).unwrap_err() })
            })
            .collect();
        tollgate::testing::eventually(Duration::from_secs(60), || {
            bulkhead.stats().waiting == WAITERS
        })
        .await
        .unwrap();
        bulkhead.close();
        for task in tasks {
            let error = task.await;
            assert!(error.is_closed() && !error.is_timed_out() && !error.is_queue_full());
            assert_eq!(error.to_string(), "bulkhead `db` (limit 1) is closed");
        }
        assert!(bulkhead.acquire().await.unwrap_err().is_closed());
        assert!(bulkhead.try_acquire().unwrap_err().is_closed());
        assert!(bulkhead.run(async {}).await.unwrap_err().is_closed());
        let stats = bulkhead.stats();
        assert_eq!((stats.waiting, stats.in_flight), (0, 1));
        assert_eq!(stats.rejected, WAITERS as u64 + 2);
        drop(held);
        assert_eq!(bulkhead.stats().available(), 1);
    }

    async fn set_limit_during_random_acquires_keeps_the_limit_in_force() {
        const TASKS: usize = 16;
        const ACQUIRES: usize = 20_000;
        let bulkhead = Arc::new(Bulkhead::new(4).global());
        let ledger = Arc::new(std::sync::Mutex::new(Ledger {
            held: 0,
            limits: vec![4],
            active: Default::default(),
        }));
        let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let tasks: Vec<_> = (0..TASKS)
            .map(|_| {
                let (bulkhead, ledger, done) = (bulkhead.clone(), ledger.clone(), done.clone());
                spawn(async move {
                    for round in 0..ACQUIRES / TASKS {
                        let generation = ledger.lock().unwrap().begin();
                        let permit = bulkhead.acquire_arc().await.unwrap();
                        ledger.lock().unwrap().admit();
                        if round % 2 == 0 {
                            yield_now().await;
                        }
                        ledger.lock().unwrap().end(generation);
                        drop(permit);
                    }
                    done.fetch_add(1, Ordering::SeqCst);
                })
            })
            .collect();
        let mut rng = Rng::new(1);
        let mut resizes = 0;
        while done.load(Ordering::SeqCst) < TASKS {
            let limit = rng.range(1..=8);
            {
                let mut ledger = ledger.lock().unwrap();
                bulkhead.set_limit(limit);
                ledger.limits.push(limit);
            }
            resizes += 1;
            for _ in 0..rng.range(1..=16) {
                yield_now().await;
            }
        }
        for task in tasks {
            task.await;
        }
        assert!(resizes > 10, "{resizes} resizes");
        let stats = bulkhead.stats();
        assert_eq!((stats.in_flight, stats.waiting), (0, 0));
        assert_eq!(stats.limit, bulkhead.limit());
        assert_eq!(stats.available(), bulkhead.limit());
        assert!(stats.peak_in_flight <= 8, "peak {}", stats.peak_in_flight);
    }
}

#[test]
fn set_limit_and_close_reach_every_runtimes_cap_and_later_ones() {
    static API: Bulkhead = Bulkhead::new(2);
    let barrier = Barrier::new(2);
    std::thread::scope(|scope| {
        let thread = scope.spawn(|| {
            run_sync(async {
                let held = API.try_acquire().unwrap();
                barrier.wait(); // this runtime's cap exists
                barrier.wait(); // the limit was raised
                let more: Vec<_> = (0..3).map(|_| API.try_acquire().unwrap()).collect();
                assert!(
                    API.try_acquire().unwrap_err().is_busy(),
                    "limit 4 in this runtime too"
                );
                drop((held, more));
            })
        });
        barrier.wait();
        API.set_limit(4);
        barrier.wait();
        thread.join().unwrap();
    });
    // A runtime that uses the bulkhead for the first time gets the limit in force.
    run_sync(async {
        assert_eq!(API.runtime_stats().limit, 4);
        let held: Vec<_> = (0..4).map(|_| API.try_acquire().unwrap()).collect();
        assert!(API.try_acquire().unwrap_err().is_busy());
        drop(held);
    });
    API.close();
    assert!(API.is_closed());
    assert!(run_sync(async {
        API.acquire().await.unwrap_err().is_closed()
    }));
    assert!(API.acquire_blocking().unwrap_err().is_closed());
}

#[test]
fn a_shrunk_bulkhead_admits_nobody_until_its_permits_out_are_below_the_new_limit() {
    let bulkhead = Bulkhead::new(3);
    let held: Vec<_> = (0..3).map(|_| bulkhead.try_acquire().unwrap()).collect();
    bulkhead.set_limit(1);
    let mut held = held.into_iter();
    drop(held.next());
    assert!(
        bulkhead.try_acquire().unwrap_err().is_busy(),
        "2 out, limit 1"
    );
    drop(held.next());
    assert!(
        bulkhead.try_acquire().unwrap_err().is_busy(),
        "1 out, limit 1"
    );
    drop(held.next());
    let permit = bulkhead.try_acquire().unwrap();
    assert!(bulkhead.try_acquire().unwrap_err().is_busy());
    drop(permit);
    let stats = bulkhead.runtime_stats();
    assert_eq!(
        (stats.limit, stats.available(), stats.peak_in_flight),
        (1, 1, 3)
    );
    let message = std::panic::catch_unwind(AssertUnwindSafe(|| bulkhead.set_limit(0)))
        .map(drop)
        .unwrap_err();
    assert!(panic_message(&*message).contains("limit of 0"));
}
