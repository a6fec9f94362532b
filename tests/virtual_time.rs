//! The virtual clock tests of time-dependent behaviour run on: `testing::run_virtual`
//! (feature `test-util`) and tokio's paused clock, through the `virtual_time!` legs. On
//! both, timers fire exactly at their deadlines, the clock stands still while the future
//! runs, and waiting costs no wall time.

mod common;

use std::pin::pin;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{panic_message, virtual_time};
use futures_lite::future::{self, poll_once};
use tollgate::testing::{now, run_virtual};
use tollgate::{Rate, RateLimiter, sleep, timeout};

const MS: Duration = Duration::from_millis(1);

virtual_time! {
    async fn an_hour_of_pauses_is_exact() {
        let start = now();
        for second in 1..=3_600u32 {
            sleep(Duration::from_secs(1)).await;
            assert_eq!(now() - start, Duration::from_secs(second.into()));
        }
    }

    async fn timers_fire_in_deadline_order_and_the_clock_never_goes_back() {
        let start = now();
        let fired = std::cell::RefCell::new(Vec::new());
        let timer = |ms: u64| {
            let fired = &fired;
            async move {
                sleep(MS * ms as u32).await;
                fired.borrow_mut().push((ms, now() - start));
            }
        };
        future::zip(future::zip(timer(30), timer(10)), future::zip(timer(20), timer(10))).await;
        assert_eq!(
            fired.into_inner(),
            [(10, 10 * MS), (10, 10 * MS), (20, 20 * MS), (30, 30 * MS)]
        );
    }

    async fn a_wait_on_nothing_ends_at_its_timeout_exactly() {
        let start = now();
        let error = timeout(Duration::from_secs(90), future::pending::<()>()).await.unwrap_err();
        assert_eq!(error.timeout(), Duration::from_secs(90));
        assert_eq!(now() - start, Duration::from_secs(90));
    }

    async fn a_dropped_timer_holds_no_jump() {
        // The hour-long timeout is dropped when the sleep wins: the clock then goes to the
        // next sleep's deadline, not to the hour.
        let start = now();
        timeout(Duration::from_secs(3_600), sleep(Duration::from_secs(1))).await.unwrap();
        sleep(Duration::from_secs(2)).await;
        assert_eq!(now() - start, Duration::from_secs(3));
    }

    async fn a_rate_admits_at_its_exact_instants() {
        let limiter = RateLimiter::new(Rate::per_second(10));
        let start = now();
        for n in 0..20u32 {
            limiter.until_ready().await;
            assert_eq!(now() - start, n * 100 * MS, "start {n}");
        }
    }
}

#[test]
fn waiting_costs_no_wall_time() {
    let wall = Instant::now();
    let waited = run_virtual(async {
        let start = now();
        sleep(Duration::from_secs(86_400)).await;
        now() - start
    });
    assert_eq!(waited, Duration::from_secs(86_400));
    // A day of virtual time; any real wait would be the day itself.
    assert!(wall.elapsed() < Duration::from_secs(3_600));
}

#[test]
fn nested_run_virtual_panics_with_advice_and_leaves_the_thread_clean() {
    let payload =
        std::panic::catch_unwind(|| run_virtual(async { run_virtual(async { 1 }) })).unwrap_err();
    let message = panic_message(&*payload);
    assert!(message.contains("inside another run_virtual"), "{message}");
    assert!(message.contains(".await"), "{message}");
    assert_eq!(run_virtual(async { 2 }), 2);
}

#[test]
fn a_panic_inside_takes_the_clock_down() {
    let payload = std::panic::catch_unwind(|| {
        run_virtual(async {
            sleep(Duration::from_secs(5)).await;
            panic!("boom");
        })
    })
    .unwrap_err();
    assert_eq!(panic_message(&*payload), "boom");
    // The thread's clock is the system's again: a real 1 ms sleep takes at least 1 ms.
    let wall = Instant::now();
    smol::block_on(sleep(MS));
    assert!(wall.elapsed() >= MS);
}

#[test]
fn a_wake_from_another_thread_is_awaited_when_no_timer_is_set() {
    let (send, receive) = mpsc::channel::<()>();
    let event = event_listener::Event::new();
    let worker = std::thread::scope(|scope| {
        let listener = event.listen();
        let event = &event;
        scope.spawn(move || {
            receive.recv().unwrap();
            event.notify(1);
        });
        run_virtual(async {
            let start = now();
            let mut listener = pin!(listener);
            assert!(poll_once(listener.as_mut()).await.is_none());
            send.send(()).unwrap();
            listener.await;
            now() - start
        })
    });
    assert_eq!(
        worker,
        Duration::ZERO,
        "no timer was set: the clock had nowhere to go"
    );
}

#[test]
fn parallel_runs_keep_their_own_clocks() {
    std::thread::scope(|scope| {
        let runs: Vec<_> = (1..=4u32)
            .map(|n| {
                scope.spawn(move || {
                    run_virtual(async move {
                        let start = now();
                        for _ in 0..100 {
                            sleep(n * MS).await;
                        }
                        now() - start
                    })
                })
            })
            .collect();
        for (n, run) in (1..=4u32).zip(runs) {
            assert_eq!(run.join().unwrap(), n * 100 * MS);
        }
    });
}

#[test]
fn a_virtual_timer_taken_out_of_its_run_fires_on_the_real_clock() {
    let mut sleeping = Box::pin(sleep(20 * MS));
    run_virtual(async {
        assert!(poll_once(&mut sleeping).await.is_none());
    });
    smol::block_on(timeout(Duration::from_secs(20), sleeping)).expect("the timer was lost");
}

#[test]
fn a_busy_wait_fails_with_advice_instead_of_spinning() {
    let payload = std::panic::catch_unwind(|| {
        run_virtual(async {
            let until = now() + MS;
            while now() < until {
                future::yield_now().await;
            }
        })
    })
    .unwrap_err();
    let message = panic_message(&*payload);
    assert!(message.contains("busy wait"), "{message}");
    assert!(message.contains("tollgate::sleep"), "{message}");
}
