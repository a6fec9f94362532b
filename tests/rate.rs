//! `RateLimiter` and `KeyedRateLimiter`: the rate holds in every window (counted from the
//! recorded start times) for sequential and concurrent waiters, from tasks and threads;
//! `retry_after` is right; waiters queue in order and give back cancelled starts; keys are
//! independent and idle keys are forgotten; and, under `--features tokio`, tokio's paused
//! clock is honoured.

mod common;

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Wake, Waker};
use std::time::{Duration, Instant};

use common::{matrix, spawn};
use futures_lite::future::poll_once;
use tollgate::futures::{UntilKeyReady, UntilReady};
use tollgate::{KeyedRateLimiter, Rate, RateLimitError, RateLimiter};

/// The time on the clock the limiter reads in this context: tokio's inside a tokio runtime
/// (the same as the system's unless paused), the system's elsewhere.
fn clock_now() -> Instant {
    match tokio::runtime::Handle::try_current() {
        Ok(_) => tokio::time::Instant::now().into_std(),
        Err(_) => Instant::now(),
    }
}

/// How late a start recorded after `until_ready` returns may be on a busy machine, past the
/// moment the limiter allowed it (an executor or timer waking late). Starts recorded late
/// can bunch up by that much, so the window check allows for it.
const LATE: Duration = Duration::from_millis(400);

/// Checks, over the recorded start times, that every window `[a, b]` holds at most
/// `burst + (b - a + late) / interval` starts, and that the starts recorded by any time
/// `t` are at most `burst + (t - begin) / interval` (exact: a start is recorded no earlier
/// than the limiter allowed it, and nothing was allowed before `begin`).
fn assert_within_rate(starts: &[Instant], rate: Rate, begin: Instant, late: Duration) {
    let mut starts = starts.to_vec();
    starts.sort();
    let burst = rate.burst_size() as usize;
    let interval = rate.interval().as_nanos();
    let allowed = |span: Duration| burst + (span.as_nanos() / interval) as usize;
    for (i, &first) in starts.iter().enumerate() {
        for (j, &last) in starts.iter().enumerate().skip(i) {
            let count = j - i + 1;
            assert!(
                count <= allowed(last - first + late),
                "{count} starts within {:?} (late allowance {late:?}), at most {} allowed at {rate:?}",
                last - first,
                allowed(last - first + late),
            );
        }
        let by_then = i + 1;
        assert!(
            by_then <= allowed(first.saturating_duration_since(begin)),
            "{by_then} starts by {:?} after the beginning, at {rate:?}",
            first.saturating_duration_since(begin),
        );
    }
}

/// Awaits `future` and returns how many wake-ups it asked for (calls to its waker, passed on
/// to the caller's): a wait that sleeps on one timer round asks for one.
async fn wake_ups_asked<F: Future>(future: F) -> usize {
    struct Counting {
        wakes: AtomicUsize,
        waker: Mutex<Option<Waker>>,
    }
    impl Wake for Counting {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.wakes.fetch_add(1, Ordering::SeqCst);
            if let Some(waker) = &*self.waker.lock().unwrap() {
                waker.wake_by_ref();
            }
        }
    }
    let counting = Arc::new(Counting {
        wakes: AtomicUsize::new(0),
        waker: Mutex::new(None),
    });
    let waker = Waker::from(counting.clone());
    let mut future = pin!(future);
    std::future::poll_fn(|cx| {
        *counting.waker.lock().unwrap() = Some(cx.waker().clone());
        future.as_mut().poll(&mut Context::from_waker(&waker))
    })
    .await;
    counting.wakes.load(Ordering::SeqCst)
}

#[test]
fn limiters_futures_and_errors_are_send_sync_and_static() {
    fn send_sync<T: Send + Sync>() {}
    fn error<T: std::error::Error + Send + Sync + 'static>() {}
    send_sync::<RateLimiter>();
    send_sync::<KeyedRateLimiter<String>>();
    send_sync::<UntilReady<'static>>();
    send_sync::<UntilKeyReady<'static, String>>();
    error::<RateLimitError>();
    let limiter = RateLimiter::new(Rate::per_minute(1));
    limiter.check().unwrap();
    let umbrella: tollgate::Error = limiter.check().unwrap_err().into();
    assert!(matches!(umbrella, tollgate::Error::RateLimit(_)));
    assert!(
        umbrella
            .to_string()
            .starts_with("rate limited: next start allowed in ")
    );
}

#[test]
fn a_refusal_says_when_and_displays_whole_milliseconds() {
    let limiter = RateLimiter::new(Rate::every(Duration::from_secs(60)));
    let before = Instant::now();
    limiter.check().unwrap();
    let refused = limiter.check().unwrap_err();
    assert!(refused.retry_after() <= Duration::from_secs(60));
    assert!(refused.retry_after() > Duration::from_secs(59));
    let ready_at = refused.ready_at();
    assert!(ready_at > before + Duration::from_secs(59));
    assert!(ready_at <= Instant::now() + Duration::from_secs(60));
    let shown = refused.to_string();
    assert!(
        shown == "rate limited: next start allowed in 60s"
            || shown.starts_with("rate limited: next start allowed in 59."),
        "{shown}"
    );
    assert!(!shown.contains("µs") && !shown.contains("ns"), "{shown}");
}

#[test]
fn debug_shows_the_rate() {
    let limiter = RateLimiter::new(Rate::per_second(4));
    assert!(format!("{limiter:?}").starts_with("RateLimiter { rate: Rate"));
    let keyed = KeyedRateLimiter::<u32>::new(Rate::per_second(4));
    assert!(format!("{keyed:?}").contains("len: 0"));
    assert!(format!("{:?}", limiter.until_ready()).starts_with("UntilReady"));
    assert!(format!("{:?}", keyed.until_key_ready(&1)).starts_with("UntilKeyReady"));
}

matrix! {
    async fn sequential_starts_stay_within_the_rate_in_every_window() {
        let rate = Rate::per_second(50).burst(3);
        let limiter = RateLimiter::new(rate);
        let begin = clock_now();
        let mut starts = Vec::new();
        for _ in 0..30 {
            limiter.until_ready().await;
            starts.push(clock_now());
        }
        assert_within_rate(&starts, rate, begin, LATE);
        // And the rate is used, not just respected: 27 intervals of 20 ms after the burst.
        let took = clock_now() - begin;
        assert!(took >= Duration::from_millis(27 * 20 - 1), "{took:?}");
        assert!(took < Duration::from_secs(10), "{took:?}");
    }

    async fn concurrent_waiters_from_tasks_and_threads_never_exceed_the_rate() {
        let rate = Rate::per_second(100).burst(2);
        let limiter = Arc::new(RateLimiter::new(rate));
        let starts = Arc::new(Mutex::new(Vec::new()));
        let begin = Instant::now().min(clock_now());
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let (limiter, starts) = (limiter.clone(), starts.clone());
                std::thread::spawn(move || {
                    for _ in 0..5 {
                        limiter.until_ready_blocking();
                        starts.lock().unwrap().push(Instant::now());
                    }
                })
            })
            .collect();
        let tasks: Vec<_> = (0..4)
            .map(|_| {
                let (limiter, starts) = (limiter.clone(), starts.clone());
                spawn(async move {
                    for _ in 0..5 {
                        limiter.until_ready().await;
                        starts.lock().unwrap().push(clock_now());
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await;
        }
        for thread in threads {
            thread.join().unwrap();
        }
        let starts = starts.lock().unwrap().clone();
        assert_eq!(starts.len(), 30);
        assert_within_rate(&starts, rate, begin, LATE);
    }

    async fn a_check_after_a_refusal_succeeds_once_retry_after_has_passed() {
        let limiter = RateLimiter::new(Rate::per_second(20));
        limiter.check().unwrap();
        let refused = limiter.check().unwrap_err();
        assert!(refused.retry_after() > Duration::ZERO);
        assert!(refused.retry_after() <= Duration::from_millis(50));
        tollgate::sleep(refused.retry_after()).await;
        limiter.check().expect("allowed once retry_after has passed");
        // The same through the keyed limiter.
        let keyed = KeyedRateLimiter::<String>::new(Rate::per_second(20));
        keyed.check_key("a").unwrap();
        let refused = keyed.check_key("a").unwrap_err();
        tollgate::sleep(refused.retry_after()).await;
        keyed.check_key("a").expect("allowed once retry_after has passed");
    }

    async fn a_waiter_wakes_once_and_never_before_the_start_a_refusal_announced() {
        // Checks decide on the counter clock; a waiter sleeps on its runtime's timer until
        // its reserved start and checks it on the timer's clock: one wake-up, never early by
        // that clock (`ready_at` is the exact instant of the next free start).
        let interval = Duration::from_millis(40);
        let limiter = RateLimiter::new(Rate::every(interval));
        let keyed = KeyedRateLimiter::<u8>::new(Rate::every(interval));
        let mut rounds = 0;
        while rounds < 3 {
            // A stalled machine may let the next start come before the check: take it and
            // ask again.
            let (Err(refused), Err(refused_key)) = (limiter.check(), keyed.check_key(&1)) else {
                continue;
            };
            let wakes = wake_ups_asked(limiter.until_ready()).await;
            assert!(clock_now() >= refused.ready_at(), "woken early");
            assert_eq!(wakes, 1, "one timer round");
            let wakes = wake_ups_asked(keyed.until_key_ready(&1)).await;
            assert!(clock_now() >= refused_key.ready_at(), "woken early");
            assert!(wakes <= 1, "{wakes} wake-ups");
            rounds += 1;
        }
    }

    async fn a_hundred_thousand_per_second_hold_to_the_nanosecond() {
        // 10 µs apart: every start a tight loop of checks is allowed lies between two system
        // clock reads, at most one per interval (the counter clock stays within tens of
        // nanoseconds of the system's: one start of slack); and the intervals the loop ran
        // in are used (a clock coarser than the interval would allow a fraction of them:
        // one per tick of its own).
        let interval = 10_000;
        let rate = Rate::per_second(100_000);
        let limiter = RateLimiter::new(rate);
        let keyed = KeyedRateLimiter::<u8>::new(rate);
        let begin = clock_now();
        let (mut allowed, mut allowed_key, mut visited, mut last) = (0, 0, 0, u128::MAX);
        loop {
            let now = (clock_now() - begin).as_nanos();
            if now >= 20_000_000 {
                break;
            }
            if now / interval != last {
                (visited, last) = (visited + 1, now / interval);
            }
            allowed += u128::from(limiter.check().is_ok());
            allowed_key += u128::from(keyed.check_key(&7).is_ok());
        }
        let intervals = (clock_now() - begin).as_nanos() / interval;
        for allowed in [allowed, allowed_key] {
            assert!(
                allowed <= intervals + 2,
                "{allowed} starts in {intervals} intervals"
            );
            assert!(
                allowed >= visited / 4,
                "{allowed} starts in the {visited} intervals the loop ran in"
            );
        }
    }

    async fn waiters_are_served_in_the_order_they_asked_and_a_check_never_jumps_them() {
        let limiter = RateLimiter::new(Rate::every(Duration::from_millis(30)));
        limiter.check().unwrap();
        let mut first = pin!(limiter.until_ready());
        let mut second = pin!(limiter.until_ready());
        assert!(poll_once(first.as_mut()).await.is_none());
        assert!(poll_once(second.as_mut()).await.is_none());
        // Both reserved: the next free start is the third interval.
        let refused = limiter.check().unwrap_err();
        assert!(refused.retry_after() > Duration::from_millis(60), "{refused}");
        let order = Mutex::new(Vec::new());
        let second = async {
            second.await;
            order.lock().unwrap().push(2);
        };
        let first = async {
            first.await;
            order.lock().unwrap().push(1);
        };
        futures_lite::future::zip(second, first).await;
        assert_eq!(*order.lock().unwrap(), [1, 2]);
    }

    async fn a_cancelled_waiter_gives_its_start_back_only_when_it_is_the_last() {
        let limiter = RateLimiter::new(Rate::every(Duration::from_secs(10)));
        limiter.check().unwrap();
        // Alone: dropping the waiter frees its start for the next caller.
        {
            let mut waiter = pin!(limiter.until_ready());
            assert!(poll_once(waiter.as_mut()).await.is_none());
            assert!(limiter.check().unwrap_err().retry_after() > Duration::from_secs(19));
        }
        let retry = limiter.check().unwrap_err().retry_after();
        assert!(retry <= Duration::from_secs(10), "{retry:?}");
        // Two waiters: the first one's start cannot be given back once the second reserved
        // after it (it stays unused); the second's can.
        let mut first = Box::pin(limiter.until_ready());
        let mut second = Box::pin(limiter.until_ready());
        assert!(poll_once(first.as_mut()).await.is_none());
        assert!(poll_once(second.as_mut()).await.is_none());
        drop(first);
        let retry = limiter.check().unwrap_err().retry_after();
        assert!(retry > Duration::from_secs(29), "{retry:?}");
        drop(second);
        let retry = limiter.check().unwrap_err().retry_after();
        assert!(retry > Duration::from_secs(19) && retry <= Duration::from_secs(20), "{retry:?}");
    }

    async fn an_unpolled_waiter_takes_nothing() {
        let limiter = RateLimiter::new(Rate::every(Duration::from_secs(10)));
        let waiter = limiter.until_ready();
        drop(waiter);
        limiter.check().expect("an unpolled waiter reserved nothing");
    }

    async fn polling_a_finished_waiter_panics() {
        let limiter = RateLimiter::new(Rate::per_second(10));
        let mut waiter = pin!(limiter.until_ready());
        waiter.as_mut().await;
        common::assert_polled_again_panics(waiter, "`UntilReady` polled after completion").await;
        let keyed = KeyedRateLimiter::<u8>::new(Rate::per_second(10));
        let mut waiter = pin!(keyed.until_key_ready(&1));
        waiter.as_mut().await;
        common::assert_polled_again_panics(waiter, "`UntilKeyReady` polled after completion")
            .await;
    }

    async fn keys_are_independent() {
        let rate = Rate::every(Duration::from_secs(60));
        let per_host = KeyedRateLimiter::<String>::new(rate);
        per_host.check_key("a").unwrap();
        assert!(per_host.check_key("a").is_err());
        per_host.check_key("b").expect("another key has its own rate");
        // A waiter on a busy key does not hold up another key.
        let mut waiting = pin!(per_host.until_key_ready("a"));
        assert!(poll_once(waiting.as_mut()).await.is_none());
        per_host.until_key_ready("c").await;
        assert_eq!(per_host.len(), 3);
    }

    async fn keyed_waiters_stay_within_each_keys_rate() {
        let rate = Rate::per_second(50).burst(2);
        let per_host = Arc::new(KeyedRateLimiter::<u32>::new(rate));
        let begin = clock_now();
        let starts: Arc<Mutex<Vec<(u32, Instant)>>> = Arc::default();
        let tasks: Vec<_> = (0..6)
            .map(|task| {
                let (per_host, starts) = (per_host.clone(), starts.clone());
                spawn(async move {
                    let host = task % 2;
                    for _ in 0..5 {
                        per_host.until_key_ready(&host).await;
                        starts.lock().unwrap().push((host, clock_now()));
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await;
        }
        let starts = starts.lock().unwrap().clone();
        for host in 0..2 {
            let times: Vec<_> =
                starts.iter().filter(|(h, _)| *h == host).map(|(_, t)| *t).collect();
            assert_eq!(times.len(), 15);
            assert_within_rate(&times, rate, begin, LATE);
        }
        // Two keys at 50/s each: 30 starts in about 15 intervals, not 30.
        let took = clock_now() - begin;
        assert!(took < Duration::from_secs(10), "{took:?}");
    }
}

#[test]
fn blocking_waits_from_plain_threads_stay_within_the_rate() {
    let rate = Rate::per_second(50);
    let limiter = RateLimiter::new(rate);
    let per_host = KeyedRateLimiter::<&'static str>::new(rate);
    let begin = Instant::now();
    let starts = Mutex::new(Vec::new());
    let host_starts = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..3 {
            scope.spawn(|| {
                for _ in 0..4 {
                    limiter.until_ready_blocking();
                    starts.lock().unwrap().push(Instant::now());
                    per_host.until_key_ready_blocking(&"a.example");
                    host_starts.lock().unwrap().push(Instant::now());
                }
            });
        }
    });
    assert_within_rate(&starts.into_inner().unwrap(), rate, begin, LATE);
    assert_within_rate(&host_starts.into_inner().unwrap(), rate, begin, LATE);
}

#[test]
fn a_million_keys_used_once_leave_almost_nothing_behind() {
    let per_key = KeyedRateLimiter::<u64>::new(Rate::every(Duration::from_millis(1)));
    let mut most = 0;
    for key in 0..1_000_000u64 {
        per_key.check_key(&key).unwrap();
        if key % 10_000 == 0 {
            most = most.max(per_key.len());
        }
    }
    // Only keys used within about the last interval (1 ms) are kept, and at most as many
    // idle ones again plus a few per shard: far below a million however fast this runs.
    assert!(most < 100_000, "{most} keys tracked at once");
    std::thread::sleep(Duration::from_millis(5));
    for key in 0..1_000u64 {
        per_key.check_key(&(u64::MAX - key)).unwrap();
    }
    assert!(per_key.len() < 4_000, "{} keys left", per_key.len());
}

#[test]
fn busy_keys_are_never_forgotten() {
    let per_key = KeyedRateLimiter::<u64>::new(Rate::every(Duration::from_secs(3600)));
    for key in 0..20_000u64 {
        per_key.check_key(&key).unwrap();
    }
    assert_eq!(per_key.len(), 20_000);
    for key in 0..20_000u64 {
        assert!(
            per_key.check_key(&key).is_err(),
            "key {key} forgotten while busy"
        );
    }
}

#[test]
fn keys_busy_at_once_are_kept_and_dropped_by_the_next_calls_once_idle() {
    let interval = Duration::from_millis(300);
    let per_key = KeyedRateLimiter::<u64>::new(Rate::every(interval));
    for key in 0..100_000u64 {
        per_key.check_key(&key).unwrap();
    }
    // Keys still within their interval are busy: the ones used in the last 300 ms stay,
    // and each still refuses a second start.
    assert!(per_key.len() > 1_000, "{} keys tracked", per_key.len());
    assert!(per_key.check_key(&99_999).is_err());
    std::thread::sleep(interval + Duration::from_millis(50));
    // One interval after the last use, the next calls empty every shard they touch.
    for key in 0..1_000u64 {
        per_key.check_key(&(u64::MAX - key)).unwrap();
    }
    let left = per_key.len();
    assert!(left <= 1_000 + 32 * 64, "{left} keys left");
}

/// Under tokio's paused clock the limiter's waits take virtual time, not wall time.
#[cfg(feature = "tokio")]
mod paused {
    use super::*;

    /// Paused tokio timers fire at their deadline rounded up to the next millisecond.
    const TICK: Duration = Duration::from_millis(2);

    #[tokio::test(start_paused = true)]
    async fn a_hundred_starts_at_ten_per_second_take_ten_virtual_seconds() {
        let rate = Rate::per_second(10);
        let limiter = RateLimiter::new(rate);
        let (wall, begin) = (Instant::now(), clock_now());
        let mut starts = Vec::new();
        for _ in 0..100 {
            limiter.until_ready().await;
            starts.push(clock_now());
        }
        let virtual_time = clock_now() - begin;
        assert!(
            virtual_time >= Duration::from_millis(9_900),
            "{virtual_time:?}"
        );
        assert!(
            virtual_time < Duration::from_millis(10_100),
            "{virtual_time:?}"
        );
        assert!(
            wall.elapsed() < Duration::from_secs(5),
            "{:?} of wall time",
            wall.elapsed()
        );
        assert_within_rate(&starts, rate, begin, TICK);
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_tasks_share_the_rate_on_the_paused_clock() {
        let rate = Rate::per_second(10).burst(5);
        let limiter = Arc::new(RateLimiter::new(rate));
        let per_host = Arc::new(KeyedRateLimiter::<u8>::new(rate));
        let (wall, begin) = (Instant::now(), clock_now());
        let starts = Arc::new(Mutex::new(Vec::new()));
        let tasks: Vec<_> = (0..10)
            .map(|_| {
                let (limiter, per_host, starts) =
                    (limiter.clone(), per_host.clone(), starts.clone());
                tokio::spawn(async move {
                    for _ in 0..5 {
                        limiter.until_ready().await;
                        per_host.until_key_ready(&7).await;
                        starts.lock().unwrap().push(clock_now());
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        let starts = starts.lock().unwrap().clone();
        assert_within_rate(&starts, rate, begin, TICK);
        // 50 starts at 10/s with a burst of 5: 45 intervals of 100 ms.
        let virtual_time = clock_now() - begin;
        assert!(
            virtual_time >= Duration::from_millis(4_500),
            "{virtual_time:?}"
        );
        assert!(
            virtual_time < Duration::from_millis(4_700),
            "{virtual_time:?}"
        );
        assert!(wall.elapsed() < Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn a_blocked_thread_waits_on_the_real_clock_beside_a_paused_runtime() {
        // `until_ready_blocking` on a `spawn_blocking` thread: tokio's paused clock does not
        // move while it blocks, so it reads and sleeps on the system's clock instead.
        let rate = Rate::every(Duration::from_millis(20));
        let limiter = Arc::new(RateLimiter::new(rate));
        let per_host = Arc::new(KeyedRateLimiter::<u8>::new(rate));
        let (wall, begin) = (Instant::now(), clock_now());
        let starts = tokio::task::spawn_blocking(move || {
            (0..4)
                .map(|_| {
                    limiter.until_ready_blocking();
                    per_host.until_key_ready_blocking(&1);
                    Instant::now()
                })
                .collect::<Vec<_>>()
        })
        .await
        .unwrap();
        assert_within_rate(&starts, rate, wall, LATE);
        assert!(
            wall.elapsed() >= Duration::from_millis(60),
            "{:?}",
            wall.elapsed()
        );
        assert_eq!(clock_now(), begin, "the paused clock did not move");
    }

    #[tokio::test(start_paused = true)]
    async fn retry_after_counts_on_the_paused_clock() {
        let limiter = RateLimiter::new(Rate::per_second(10));
        let per_host = KeyedRateLimiter::<u8>::new(Rate::per_second(10));
        limiter.check().unwrap();
        per_host.check_key(&1).unwrap();
        let refused = limiter.check().unwrap_err();
        assert_eq!(refused.retry_after(), Duration::from_millis(100));
        assert_eq!(refused.ready_at(), clock_now() + Duration::from_millis(100));
        tokio::time::advance(Duration::from_millis(99)).await;
        assert!(limiter.check().is_err());
        assert!(per_host.check_key(&1).is_err());
        tokio::time::advance(Duration::from_millis(1)).await;
        limiter.check().expect("allowed at exactly retry_after");
        per_host
            .check_key(&1)
            .expect("allowed at exactly retry_after");
    }
}
