//! Bounded mapping (`map_async`, `try_map_async`, `amap_iter`, `gather_limit`,
//! `map_bounded`, `map_unordered`) under every runtime of the matrix, plus hand-polled
//! checks of the polling discipline (who is polled, who is woken, when slots refill).

mod common;

use std::future::{Future, poll_fn};
use std::panic::AssertUnwindSafe;
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use common::{
    InFlight, Rng, assert_polled_again_panics, counting_waker, drain, matrix, panic_message,
    poll_until_panic,
};
use futures::FutureExt as _;
use futures_lite::future::{pending, poll_once, yield_now};
use futures_lite::{StreamExt, stream};
use tollgate::{
    BoundedStreamExt, amap_iter, gather_limit, map_async, retry, sleep, timeout, try_map_async,
};

const GENEROUS: Duration = Duration::from_secs(60);

/// Parked wakers, released by `open`.
#[derive(Default)]
struct Gate {
    open: AtomicBool,
    wakers: Mutex<Vec<Waker>>,
}

impl Gate {
    fn open(&self) {
        self.open.store(true, SeqCst);
        for waker in self.wakers.lock().unwrap().drain(..) {
            waker.wake();
        }
    }

    fn wait(&self) -> impl Future<Output = ()> + '_ {
        poll_fn(move |cx| {
            if self.open.load(SeqCst) {
                return Poll::Ready(());
            }
            self.wakers.lock().unwrap().push(cx.waker().clone());
            if self.open.load(SeqCst) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
    }
}

/// A counter that futures can wait on.
#[derive(Default)]
struct Latch {
    count: AtomicUsize,
    wakers: Mutex<Vec<Waker>>,
}

impl Latch {
    fn add(&self) {
        self.count.fetch_add(1, SeqCst);
        for waker in self.wakers.lock().unwrap().drain(..) {
            waker.wake();
        }
    }

    fn wait_for(&self, n: usize) -> impl Future<Output = ()> + '_ {
        poll_fn(move |cx| {
            if self.count.load(SeqCst) >= n {
                return Poll::Ready(());
            }
            self.wakers.lock().unwrap().push(cx.waker().clone());
            if self.count.load(SeqCst) >= n {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
    }
}

/// Counts drops: move one into a future to learn when the future is dropped.
struct DropCount(Arc<AtomicUsize>);

impl Drop for DropCount {
    fn drop(&mut self) {
        self.0.fetch_add(1, SeqCst);
    }
}

/// An iterator that counts the items pulled from it.
fn counted<I: Iterator>(items: I, pulled: &Arc<AtomicUsize>) -> impl Iterator<Item = I::Item> {
    let pulled = pulled.clone();
    items.inspect(move |_| {
        pulled.fetch_add(1, SeqCst);
    })
}

/// Resolves after a std thread wakes it: the wake-up comes from outside the runtime.
fn woken_by_thread(
    tx: &Mutex<std::sync::mpsc::Sender<(Waker, Arc<AtomicBool>)>>,
) -> impl Future<Output = ()> + '_ {
    let flag = Arc::new(AtomicBool::new(false));
    let mut sent = false;
    poll_fn(move |cx| {
        if flag.load(SeqCst) {
            return Poll::Ready(());
        }
        if !sent {
            sent = true;
            tx.lock()
                .unwrap()
                .send((cx.waker().clone(), flag.clone()))
                .unwrap();
        }
        Poll::Pending
    })
}

/// Claims a huge length in `size_hint`, yields `left` items.
struct Claims {
    left: u64,
}

impl Iterator for Claims {
    type Item = u64;
    fn next(&mut self) -> Option<u64> {
        let item = self.left;
        self.left = self.left.checked_sub(1)?;
        Some(item)
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (usize::MAX / 2, None)
    }
}

matrix! {
    async fn outputs_keep_input_order_with_random_latencies() {
        // Seeded pseudo-random latencies, the same on every run.
        let mut rng = Rng::new(7);
        let delays: Vec<u64> = (0..150).map(|_| rng.below(4)).collect();
        let expected: Vec<usize> = (0..delays.len()).collect();
        let job = |(i, ms): (usize, u64)| async move {
            sleep(Duration::from_millis(ms)).await;
            i
        };
        let items = || delays.iter().copied().enumerate();
        assert_eq!(map_async(items(), 16, job).await, expected);
        let streamed: Vec<usize> = stream::iter(items()).map_bounded(16, job).collect().await;
        assert_eq!(streamed, expected);
        assert_eq!(gather_limit(items().map(job), 16).await, expected);
        let all_ok = try_map_async(items(), 16, |item| async move { Ok::<_, ()>(job(item).await) });
        assert_eq!(all_ok.await, Ok(expected.clone()));
        let mut unordered: Vec<usize> = amap_iter(items(), 16, job).collect().await;
        unordered.sort_unstable();
        assert_eq!(unordered, expected);
    }

    async fn peak_in_flight_equals_the_limit_and_never_exceeds_it() {
        let limit = 7;
        let in_flight = Arc::new(InFlight::default());
        let job = |i: usize| {
            let in_flight = in_flight.clone();
            async move {
                let _running = in_flight.enter();
                yield_now().await;
                sleep(Duration::from_millis((i % 3) as u64)).await;
                i
            }
        };
        let check = |in_flight: &InFlight| {
            assert_eq!(in_flight.peak(), limit);
            assert_eq!(in_flight.now(), 0);
        };
        map_async(0..60, limit, job).await;
        check(&in_flight);
        let in_flight_2 = Arc::new(InFlight::default());
        let job2 = |i: usize| {
            let in_flight = in_flight_2.clone();
            async move {
                let _running = in_flight.enter();
                yield_now().await;
                sleep(Duration::from_millis((i % 3) as u64)).await;
                Ok::<_, ()>(i)
            }
        };
        try_map_async(0..60, limit, job2).await.unwrap();
        check(&in_flight_2);
        for variant in 0..4 {
            let in_flight = Arc::new(InFlight::default());
            let job = |i: usize| {
                let in_flight = in_flight.clone();
                async move {
                    let _running = in_flight.enter();
                    yield_now().await;
                    sleep(Duration::from_millis((i % 3) as u64)).await;
                    i
                }
            };
            let n = match variant {
                0 => amap_iter(0..60, limit, job).count().await,
                1 => stream::iter(0..60).map_bounded(limit, job).count().await,
                2 => stream::iter(0..60).map_unordered(limit, job).count().await,
                _ => gather_limit((0..60).map(job), limit).await.len(),
            };
            assert_eq!(n, 60);
            check(&in_flight);
        }
    }

    async fn items_are_pulled_lazily() {
        // At every pull: pulled - completed <= limit.
        let limit = 5;
        for variant in 0..4 {
            let pulled = Arc::new(AtomicUsize::new(0));
            let completed = Arc::new(AtomicUsize::new(0));
            let items = {
                let (pulled, completed) = (pulled.clone(), completed.clone());
                (0..200usize).inspect(move |_| {
                    let now = pulled.fetch_add(1, SeqCst) + 1;
                    let done = completed.load(SeqCst);
                    assert!(now - done <= limit, "pulled {now} with {done} completed");
                })
            };
            let job = |i: usize| {
                let completed = completed.clone();
                async move {
                    if i % 2 == 0 {
                        yield_now().await;
                    }
                    if i % 7 == 0 {
                        sleep(Duration::from_millis(1)).await;
                    }
                    completed.fetch_add(1, SeqCst);
                    i
                }
            };
            let n = match variant {
                0 => map_async(items, limit, job).await.len(),
                1 => amap_iter(items, limit, job).count().await,
                2 => stream::iter(items).map_bounded(limit, job).count().await,
                _ => gather_limit(items.map(job), limit).await.len(),
            };
            assert_eq!(n, 200);
            assert_eq!(pulled.load(SeqCst), 200);
        }
    }

    async fn the_first_error_cancels_the_rest_and_stops_pulling() {
        let pulled = Arc::new(AtomicUsize::new(0));
        let created = Arc::new(AtomicUsize::new(0));
        let dropped = Arc::new(AtomicUsize::new(0));
        let result = try_map_async(counted(0..1000usize, &pulled), 8, |i| {
            created.fetch_add(1, SeqCst);
            let guard = DropCount(dropped.clone());
            async move {
                let _guard = guard;
                match i {
                    0..20 => {
                        yield_now().await;
                        Ok(i)
                    }
                    20 => {
                        sleep(Duration::from_millis(5)).await;
                        Err(format!("item {i} failed"))
                    }
                    _ => pending().await,
                }
            }
        })
        .await;
        assert_eq!(result, Err("item 20 failed".to_owned()));
        // Item 20 and the 7 behind it were in flight; nothing after them was pulled.
        assert_eq!(pulled.load(SeqCst), 28);
        assert_eq!(created.load(SeqCst), 28);
        assert_eq!(dropped.load(SeqCst), 28, "every future was dropped before returning");
    }

    async fn the_first_error_to_complete_wins() {
        let result = try_map_async([30u64, 1, 60], 3, |ms| async move {
            sleep(Duration::from_millis(ms)).await;
            Err::<(), _>(ms)
        })
        .await;
        assert_eq!(result, Err(1));
        let empty = try_map_async(Vec::<u8>::new(), 3, |n| async move { Ok::<_, ()>(n) });
        assert_eq!(empty.await, Ok(vec![]));
    }

    async fn dropping_amap_iter_cancels_in_flight_work_and_stops_pulling() {
        let limit = 16;
        let pulled = Arc::new(AtomicUsize::new(0));
        let created = Arc::new(AtomicUsize::new(0));
        let dropped = Arc::new(AtomicUsize::new(0));
        let mut outputs = amap_iter(counted(0..1_000_000u64, &pulled), limit, |i| {
            created.fetch_add(1, SeqCst);
            let guard = DropCount(dropped.clone());
            async move {
                let _guard = guard;
                match i % 3 {
                    0 => yield_now().await,
                    1 => sleep(Duration::from_micros(200)).await,
                    _ => {}
                }
                i
            }
        });
        for _ in 0..100 {
            outputs.next().await.unwrap();
        }
        drop(outputs);
        let pulled = pulled.load(SeqCst);
        assert!(pulled >= 100 && pulled <= 100 + limit, "pulled {pulled}");
        assert_eq!(created.load(SeqCst), pulled);
        assert_eq!(dropped.load(SeqCst), pulled, "every future dropped");
    }

    async fn a_slow_head_does_not_stall_the_other_slots() {
        // Limit 4, default window 16: while item 0 waits, items 1..=15 must all run to
        // completion (a stalling implementation, like `buffered`, only runs 1..=3 and
        // deadlocks here).
        let done = Arc::new(Latch::default());
        let in_flight = Arc::new(InFlight::default());
        let job = |i: usize| {
            let (done, in_flight) = (done.clone(), in_flight.clone());
            async move {
                let _running = in_flight.enter();
                if i == 0 {
                    done.wait_for(15).await;
                } else {
                    yield_now().await;
                    done.add();
                }
                i
            }
        };
        let out = timeout(GENEROUS, map_async(0..40, 4, job)).await.unwrap();
        assert_eq!(out, (0..40).collect::<Vec<_>>());
        assert_eq!(in_flight.peak(), 4);
        let done = Arc::new(Latch::default());
        let job = |i: usize| {
            let done = done.clone();
            async move {
                if i == 0 {
                    done.wait_for(15).await;
                } else {
                    sleep(Duration::from_millis(1)).await;
                    done.add();
                }
                i
            }
        };
        let streamed: Vec<usize> =
            timeout(GENEROUS, stream::iter(0..40).map_bounded(4, job).collect()).await.unwrap();
        assert_eq!(streamed, (0..40).collect::<Vec<_>>());
    }

    async fn the_reorder_buffer_is_bounded_by_the_window() {
        let gate = Arc::new(Gate::default());
        let pulled = Arc::new(AtomicUsize::new(0));
        let job = |i: usize| {
            let gate = gate.clone();
            async move {
                if i == 0 {
                    gate.wait().await;
                }
                i
            }
        };
        let mut outputs = pin!(stream::iter(counted(0..1000, &pulled)).map_bounded(4, job).window(10));
        assert_eq!(poll_once(outputs.next()).await, None);
        // The head and the 9 finished items waiting for it, no more.
        assert_eq!(pulled.load(SeqCst), 10);
        assert_eq!(poll_once(outputs.next()).await, None);
        assert_eq!(pulled.load(SeqCst), 10);
        gate.open();
        let mut yielded = 0;
        while let Some(i) = outputs.next().await {
            assert_eq!(i, yielded);
            yielded += 1;
            assert!(pulled.load(SeqCst) - yielded <= 10);
        }
        assert_eq!(yielded, 1000);
        // The default is four times the limit.
        let gate = Arc::new(Gate::default());
        let pulled = Arc::new(AtomicUsize::new(0));
        let job = |i: usize| {
            let gate = gate.clone();
            async move {
                if i == 0 {
                    gate.wait().await;
                }
                i
            }
        };
        let mut collected = pin!(map_async(counted(0..1000, &pulled), 3, job));
        assert_eq!(poll_once(collected.as_mut()).await, None);
        assert_eq!(pulled.load(SeqCst), 12);
        gate.open();
        assert_eq!(collected.await.len(), 1000);
    }

    async fn the_unordered_window_bounds_pulled_but_not_yielded() {
        for (window, limit) in [(None, 4), (Some(9), 4)] {
            let pulled = Arc::new(AtomicUsize::new(0));
            let mut outputs = amap_iter(counted(0..300, &pulled), limit, |i: usize| async move {
                if i % 2 == 0 {
                    yield_now().await;
                }
                i
            });
            if let Some(window) = window {
                outputs = outputs.window(window);
            }
            let bound = window.unwrap_or(limit);
            let mut yielded = 0;
            while outputs.next().await.is_some() {
                yielded += 1;
                assert!(pulled.load(SeqCst) - yielded <= bound);
            }
            assert_eq!(yielded, 300);
        }
    }

    async fn unordered_outputs_come_in_completion_order() {
        let gate = Arc::new(Gate::default());
        let job = |i: usize| {
            let gate = gate.clone();
            async move {
                if i == 0 {
                    gate.wait().await;
                }
                i
            }
        };
        let mut outputs = amap_iter(0..3, 3, job);
        assert_eq!(outputs.next().await, Some(1));
        assert_eq!(outputs.next().await, Some(2));
        gate.open();
        assert_eq!(outputs.next().await, Some(0));
        assert_eq!(outputs.next().await, None);
        assert_eq!(outputs.next().await, None, "stays finished");
        let mut sleepy = stream::iter([40u64, 20, 1]).map_unordered(3, |ms| async move {
            sleep(Duration::from_millis(ms)).await;
            ms
        });
        assert_eq!(sleepy.next().await, Some(1));
    }

    async fn a_panic_propagates_after_the_others_are_dropped() {
        let created = Arc::new(AtomicUsize::new(0));
        let dropped = Arc::new(AtomicUsize::new(0));
        let job = |i: usize| {
            created.fetch_add(1, SeqCst);
            let guard = DropCount(dropped.clone());
            async move {
                let _guard = guard;
                if i == 5 {
                    yield_now().await;
                    panic!("item 5 failed");
                }
                pending::<usize>().await
            }
        };
        let mut caught = pin!(AssertUnwindSafe(map_async(0..100, 8, job)).catch_unwind());
        let payload = caught.as_mut().await.unwrap_err();
        assert_eq!(panic_message(&*payload), "item 5 failed");
        // The map itself is still alive inside `caught`: its guard dropped the futures.
        assert_eq!(created.load(SeqCst), 8);
        assert_eq!(dropped.load(SeqCst), 8);

        // A panic in the function itself, in a stream.
        let dropped = Arc::new(AtomicUsize::new(0));
        let stream = stream::iter(0..100usize).map_unordered(8, |i| {
            assert!(i != 6, "no item 6");
            let guard = DropCount(dropped.clone());
            async move {
                let _guard = guard;
                if i >= 2 {
                    pending::<()>().await;
                }
                i
            }
        });
        let mut caught = pin!(AssertUnwindSafe(stream.count()).catch_unwind());
        let payload = caught.as_mut().await.unwrap_err();
        assert_eq!(panic_message(&*payload), "no item 6");
        // Items 0 and 1 finished; 2..6 were in flight, then dropped.
        assert_eq!(dropped.load(SeqCst), 6);
    }

    async fn empty_input_returns_at_once() {
        let job = |n: u8| async move { n };
        assert_eq!(poll_once(map_async(Vec::new(), 4, job)).await, Some(vec![]));
        assert_eq!(poll_once(try_map_async(Vec::<u8>::new(), 4, |n| async move { Ok::<_, ()>(n) })).await, Some(Ok(vec![])));
        assert_eq!(poll_once(gather_limit(Vec::<std::future::Ready<u8>>::new(), 4)).await, Some(vec![]));
        assert_eq!(poll_once(amap_iter(Vec::new(), 4, job).next()).await, Some(None));
        assert_eq!(poll_once(stream::empty().map_bounded(4, job).next()).await, Some(None));
    }

    async fn wake_ups_from_other_threads_are_never_lost() {
        let (tx, rx) = std::sync::mpsc::channel::<(Waker, Arc<AtomicBool>)>();
        let waker_thread = std::thread::spawn(move || {
            let mut n = 0u64;
            for (waker, flag) in rx {
                n += 1;
                if n % 5 == 0 {
                    std::thread::yield_now();
                }
                flag.store(true, SeqCst);
                waker.wake();
            }
        });
        let tx = Mutex::new(tx);
        let job = |i: usize| {
            let tx = &tx;
            async move {
                woken_by_thread(tx).await;
                if i % 3 == 0 {
                    woken_by_thread(tx).await;
                }
                i
            }
        };
        let out = timeout(GENEROUS, map_async(0..3000, 50, job)).await.unwrap();
        assert_eq!(out.len(), 3000);
        let count = timeout(GENEROUS, amap_iter(0..3000, 50, job).count()).await.unwrap();
        assert_eq!(count, 3000);
        drop(tx);
        waker_thread.join().unwrap();
    }

    /// Regression: the peak was reached only if no 20 ms sleep ended before all 3,000
    /// futures had started; on a busy machine only 2,560 had. Now every future waits at a
    /// barrier that opens once all 3,000 are in.
    async fn thousands_in_flight_grow_the_pool_without_losing_wake_ups() {
        // Past the first ready set (1,024 slots): the pool grows and re-polls the
        // running futures with their new wakers, which must still get the barrier's
        // wake-up.
        let in_flight = Arc::new(InFlight::default());
        let all_in = Arc::new(async_lock::Barrier::new(3000));
        let job = |i: usize| {
            let (in_flight, all_in) = (in_flight.clone(), all_in.clone());
            async move {
                let _running = in_flight.enter();
                all_in.wait().await;
                i
            }
        };
        let out = timeout(GENEROUS, map_async(0..3000, 3000, job)).await.unwrap();
        assert_eq!(out, (0..3000).collect::<Vec<_>>());
        assert_eq!(in_flight.peak(), 3000);
        // A limit far above the input is fine too: it sizes nothing.
        assert_eq!(map_async(0..3, usize::MAX, |i| async move { i }).await, [0, 1, 2]);
        let huge: Vec<u8> = stream::iter(0..3u8).map_unordered(usize::MAX, |i| async move { i }).collect().await;
        assert_eq!(huge.len(), 3);
    }

    /// Regression: after a caught panic, `try_map_async` polled again returned `Ok` with
    /// the values collected so far (silent truncation) and `map_async` returned the
    /// partial vector; every map must panic clearly instead.
    async fn a_map_polled_again_after_a_caught_panic_panics_clearly() {
        let job = |i: usize| async move {
            if i == 5 {
                yield_now().await;
                panic!("item 5 failed");
            }
            i
        };
        let try_job = |i: usize| async move { Ok::<_, ()>(job(i).await) };
        let mut map = pin!(map_async(0..100, 8, job));
        assert_eq!(poll_until_panic(map.as_mut()).await, "item 5 failed");
        assert_polled_again_panics(map.as_mut(), "`MapAsync` polled after a panic").await;
        let mut try_map = pin!(try_map_async(0..100, 8, try_job));
        assert_eq!(poll_until_panic(try_map.as_mut()).await, "item 5 failed");
        assert_polled_again_panics(try_map.as_mut(), "`TryMapAsync` polled after a panic").await;
        let mut gathered = pin!(gather_limit((0..100).map(job), 8));
        assert_eq!(poll_until_panic(gathered.as_mut()).await, "item 5 failed");
        assert_polled_again_panics(gathered.as_mut(), "`GatherLimit` polled after a panic").await;
        let mut ordered = pin!(stream::iter(0..100).map_bounded(8, job));
        assert_eq!(poll_until_panic(drain(ordered.as_mut())).await, "item 5 failed");
        assert_polled_again_panics(drain(ordered.as_mut()), "`MapBounded` polled after a panic").await;
        let mut unordered = pin!(amap_iter(0..100, 8, job));
        assert_eq!(poll_until_panic(drain(unordered.as_mut())).await, "item 5 failed");
        assert_polled_again_panics(drain(unordered.as_mut()), "`MapUnordered` polled after a panic").await;
    }

    /// Regression: `try_map_async(1u32.., 4, f)` panicked with "capacity overflow" before
    /// pulling anything (the output vector was sized from `size_hint`).
    async fn an_unbounded_input_fails_fast_on_an_error() {
        let result = try_map_async(1u32.., 4, |n| async move {
            if n % 3 == 0 {
                yield_now().await;
            }
            if n == 1_000 { Err(n) } else { Ok(n) }
        })
        .await;
        assert_eq!(result, Err(1_000));
        let first: Vec<u32> = amap_iter(1u32.., 4, |n| async move { n }).take(10).collect().await;
        assert_eq!(first.len(), 10);
    }

    /// The output vector trusts `size_hint` only up to a small cap.
    async fn a_huge_size_hint_preallocates_little() {
        let out = map_async(Claims { left: 3 }, 4, |n| async move { n }).await;
        assert_eq!(out, [3, 2, 1]);
        assert!(out.capacity() <= 1024, "capacity {}", out.capacity());
        let out = try_map_async(Claims { left: 3 }, 4, |n| async move { Ok::<_, ()>(n) }).await.unwrap();
        assert!(out.capacity() <= 1024, "capacity {}", out.capacity());
        let out = gather_limit(Claims { left: 3 }.map(|n| async move { n }), 4).await;
        assert!(out.capacity() <= 1024, "capacity {}", out.capacity());
    }

    /// Every map takes work as `IntoFuture`: here `retry` builders, which are not
    /// futures themselves.
    async fn the_function_may_return_into_future_work() {
        let attempt = |n: u32| retry(move || async move { Ok::<_, ()>(n) }).attempts(2);
        let ok = |results: &[Result<u32, tollgate::RetryError<()>>]| {
            results.iter().map(|r| *r.as_ref().unwrap()).collect::<Vec<_>>()
        };
        assert_eq!(ok(&map_async(0..4, 2, attempt).await), [0, 1, 2, 3]);
        assert_eq!(ok(&gather_limit((0..4).map(attempt), 2).await), [0, 1, 2, 3]);
        let tried = try_map_async(0..4, 2, attempt).await.unwrap();
        assert_eq!(tried, [0, 1, 2, 3]);
        let streamed: Vec<_> = stream::iter(0..4).map_bounded(2, attempt).collect().await;
        assert_eq!(ok(&streamed), [0, 1, 2, 3]);
        let mut unordered: Vec<_> = ok(&amap_iter(0..4, 2, attempt).collect::<Vec<_>>().await);
        unordered.sort_unstable();
        assert_eq!(unordered, [0, 1, 2, 3]);
        let mut unordered: Vec<_> = ok(&stream::iter(0..4).map_unordered(2, attempt).collect::<Vec<_>>().await);
        unordered.sort_unstable();
        assert_eq!(unordered, [0, 1, 2, 3]);
        let keyed = map_async(0..4, 2, attempt).per_key(|n| n % 2, 1).await;
        assert_eq!(ok(&keyed), [0, 1, 2, 3]);
    }
}

// ---------------------------------------------------------------------------------------
// Hand-polled: the polling discipline.

/// Pending until its own gate opens; counts its polls.
struct Manual {
    gate: Arc<Gate>,
    polls: Arc<AtomicUsize>,
}

impl Future for Manual {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.polls.fetch_add(1, SeqCst);
        let waiting = pin!(self.gate.wait());
        waiting.poll(cx)
    }
}

#[test]
fn ready_futures_never_wake_the_parent() {
    let (count, waker) = counting_waker();
    let mut cx = Context::from_waker(&waker);
    let mut map = pin!(map_async(0..100, 8, |i| async move { i }));
    assert!(map.as_mut().poll(&mut cx).is_ready());
    assert_eq!(count.0.load(SeqCst), 0);
}

#[test]
fn a_long_run_of_ready_items_yields_now_and_then() {
    let (count, waker) = counting_waker();
    let mut cx = Context::from_waker(&waker);
    let mut map = pin!(map_async(0..100_000, 64, |i| async move { i }));
    let mut polls = 0;
    while map.as_mut().poll(&mut cx).is_pending() {
        polls += 1;
        assert_eq!(count.0.load(SeqCst), polls, "each yield wakes the task");
    }
    assert!(polls >= 10, "yielded only {polls} times in 100,000 items");
    assert!(polls <= 100_000 / 64, "yielded {polls} times");

    // A stream of ready items also returns `Pending` now and then, waking itself.
    let (count, waker) = counting_waker();
    let mut cx = Context::from_waker(&waker);
    let mut outputs = pin!(amap_iter(0..100_000, 64, |i| async move { i }));
    let (mut items, mut yields) = (0, 0);
    loop {
        match outputs.as_mut().poll_next(&mut cx) {
            Poll::Ready(Some(_)) => items += 1,
            Poll::Ready(None) => break,
            Poll::Pending => {
                yields += 1;
                assert_eq!(count.0.load(SeqCst), yields);
            }
        }
    }
    assert_eq!(items, 100_000);
    assert!((10..=100_000 / 64).contains(&yields), "yields: {yields}");
}

#[test]
fn only_woken_futures_are_polled() {
    let gates: Vec<Arc<Gate>> = (0..8).map(|_| Arc::default()).collect();
    let polls: Vec<Arc<AtomicUsize>> = (0..8).map(|_| Arc::default()).collect();
    let (count, waker) = counting_waker();
    let mut cx = Context::from_waker(&waker);
    let jobs = (0..8).map(|i| Manual {
        gate: gates[i].clone(),
        polls: polls[i].clone(),
    });
    let mut all = pin!(gather_limit(jobs, 8));
    assert!(all.as_mut().poll(&mut cx).is_pending());
    let snapshot =
        |polls: &[Arc<AtomicUsize>]| polls.iter().map(|p| p.load(SeqCst)).collect::<Vec<_>>();
    assert_eq!(snapshot(&polls), [1; 8]);
    assert_eq!(count.0.load(SeqCst), 0);
    gates[3].open();
    assert_eq!(count.0.load(SeqCst), 1, "the parent is woken");
    assert!(all.as_mut().poll(&mut cx).is_pending());
    assert_eq!(snapshot(&polls), [1, 1, 1, 2, 1, 1, 1, 1]);
    // A spurious poll of the parent polls nobody.
    assert!(all.as_mut().poll(&mut cx).is_pending());
    assert_eq!(snapshot(&polls), [1, 1, 1, 2, 1, 1, 1, 1]);
    for gate in &gates {
        gate.open();
    }
    assert!(all.as_mut().poll(&mut cx).is_ready());
}

#[test]
fn a_freed_slot_is_refilled_in_the_same_poll() {
    let gates: Vec<Arc<Gate>> = (0..10).map(|_| Arc::default()).collect();
    let pulled = Arc::new(AtomicUsize::new(0));
    let (_count, waker) = counting_waker();
    let mut cx = Context::from_waker(&waker);
    let job = |i: usize| {
        let gate = gates[i].clone();
        async move {
            gate.wait().await;
            i
        }
    };
    let mut ordered = pin!(stream::iter(counted(0..10, &pulled)).map_bounded(2, job));
    assert!(ordered.as_mut().poll_next(&mut cx).is_pending());
    assert_eq!(pulled.load(SeqCst), 2);
    gates[0].open();
    // The poll that yields item 0 has already started item 2 in its place.
    assert_eq!(ordered.as_mut().poll_next(&mut cx), Poll::Ready(Some(0)));
    assert_eq!(pulled.load(SeqCst), 3);
    // Items finishing while nobody consumes: the next poll refills every freed slot.
    gates[1].open();
    gates[2].open();
    assert_eq!(ordered.as_mut().poll_next(&mut cx), Poll::Ready(Some(1)));
    assert_eq!(pulled.load(SeqCst), 5);
}

#[test]
fn a_map_driven_from_a_destructor_during_a_panic_still_completes() {
    // The unwind guard must only react to panics that start inside its own poll.
    struct MapOnDrop(Arc<Mutex<Option<usize>>>);
    impl Drop for MapOnDrop {
        fn drop(&mut self) {
            let out = futures_lite::future::block_on(map_async(0..1000, 4, |i| async move {
                yield_now().await;
                i
            }));
            *self.0.lock().unwrap() = Some(out.len());
        }
    }
    let len = Arc::new(Mutex::new(None));
    let guard = MapOnDrop(len.clone());
    let payload = std::panic::catch_unwind(AssertUnwindSafe(move || {
        let _guard = guard;
        panic!("outer panic");
    }))
    .unwrap_err();
    assert_eq!(panic_message(&*payload), "outer panic");
    assert_eq!(*len.lock().unwrap(), Some(1000));
}

#[test]
#[should_panic(expected = "tollgate: the global limit must be at least 1")]
fn limit_zero_panics_in_map_async() {
    drop(map_async(0..3, 0, |i| async move { i }));
}

#[test]
#[should_panic(expected = "tollgate: the global limit must be at least 1")]
fn limit_zero_panics_in_try_map_async() {
    drop(try_map_async(0..3, 0, |i| async move { Ok::<_, ()>(i) }));
}

#[test]
#[should_panic(expected = "tollgate: the global limit must be at least 1")]
fn limit_zero_panics_in_amap_iter() {
    let _ = amap_iter(0..3, 0, |i| async move { i });
}

#[test]
#[should_panic(expected = "tollgate: the global limit must be at least 1")]
fn limit_zero_panics_in_gather_limit() {
    drop(gather_limit([async { 1 }], 0));
}

#[test]
#[should_panic(expected = "tollgate: the global limit must be at least 1")]
fn limit_zero_panics_in_map_bounded() {
    let _ = stream::iter(0..3).map_bounded(0, |i| async move { i });
}

#[test]
#[should_panic(expected = "tollgate: the global limit must be at least 1")]
fn limit_zero_panics_in_map_unordered() {
    let _ = stream::iter(0..3).map_unordered(0, |i| async move { i });
}

#[test]
#[should_panic(expected = "tollgate: the window (3) must be at least the global limit (4)")]
fn a_window_below_the_limit_panics() {
    drop(map_async(0..3, 4, |i| async move { i }).window(3));
}

#[test]
fn the_limit_panic_points_at_the_caller() {
    // #[track_caller]: the panic's location is the call in this file, not inside src/map/.
    // The hook is process-wide: record this thread's panic, pass others on.
    let seen: Arc<Mutex<Option<(String, u32)>>> = Arc::default();
    let previous: Arc<dyn Fn(&std::panic::PanicHookInfo<'_>) + Send + Sync> =
        Arc::from(std::panic::take_hook());
    let me = std::thread::current().id();
    {
        let (seen, previous) = (seen.clone(), previous.clone());
        std::panic::set_hook(Box::new(move |info| {
            if std::thread::current().id() == me {
                let location = info.location().unwrap();
                *seen.lock().unwrap() = Some((location.file().to_owned(), location.line()));
            } else {
                previous(info);
            }
        }));
    }
    let line = line!() + 2;
    let payload = std::panic::catch_unwind(|| {
        drop(map_async(0..3, 0, |i| async move { i }));
    });
    let _ = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| previous(info)));
    assert!(panic_message(&*payload.unwrap_err()).contains("at least 1"));
    let (file, at) = seen.lock().unwrap().clone().unwrap();
    assert!(
        file.ends_with("map.rs") && file.starts_with("tests"),
        "{file}"
    );
    assert_eq!(at, line);
}

#[test]
fn the_futures_and_streams_are_send_and_debug() {
    fn assert_send<T: Send>(_: &T) {}
    let job = |url: String| async move { Ok::<_, std::io::Error>(url.len()) };
    let urls = || vec!["a".to_owned(), "bb".to_owned()];
    let map = map_async(urls(), 8, job);
    assert_send(&map);
    assert!(format!("{map:?}").starts_with("MapAsync"));
    let try_map = try_map_async(urls(), 8, job);
    assert_send(&try_map);
    assert!(format!("{try_map:?}").starts_with("TryMapAsync"));
    let unordered = amap_iter(urls(), 8, job);
    assert_send(&unordered);
    assert!(format!("{unordered:?}").starts_with("MapUnordered"));
    let gathered = gather_limit(urls().into_iter().map(job), 8);
    assert_send(&gathered);
    assert!(format!("{gathered:?}").starts_with("GatherLimit"));
    let bounded = stream::iter(urls()).map_bounded(8, job);
    assert_send(&bounded);
    assert!(format!("{bounded:?}").contains("limit: 8"));
    let unordered = stream::iter(urls()).map_unordered(8, job);
    assert_send(&unordered);
}

#[cfg(feature = "tokio")]
mod tokio_spawn {
    use super::*;

    #[derive(Debug)]
    struct MyError;

    async fn fetch(url: String) -> Result<String, MyError> {
        sleep(Duration::from_millis(1)).await;
        if url.ends_with('7') {
            Err(MyError)
        } else {
            Ok(format!("<html>{url}</html>"))
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn map_async_can_be_spawned_on_a_multi_thread_runtime() {
        let urls: Vec<String> = (0..20)
            .map(|i| format!("https://example.com/{i}"))
            .collect();
        let pages = tokio::spawn(map_async(urls, 8, fetch)).await.unwrap();
        assert_eq!(pages.len(), 20);
        assert!(pages[7].is_err());
        assert_eq!(pages.iter().filter(|page| page.is_ok()).count(), 18);
        let streamed = tokio::spawn(amap_iter(0..100, 8, |i| async move { i }).count());
        assert_eq!(streamed.await.unwrap(), 100);
    }
}
