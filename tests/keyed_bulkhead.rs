//! `KeyedBulkhead`: per-key caps, eviction of idle keys without the eviction/acquire race
//! (dotnet/runtime#99865), bounded memory over a million keys, runtime scoping, the
//! blocking and `_arc` variants, and a key's stats totalled over runtimes.
//!
//! A key's acquire timeout is time, so when its waiter ends is proven on virtual time
//! (`virtual_time!`: smol's world on `run_virtual`, and tokio's paused clock): exactly at
//! the timeout, or at the instant a permit of its key comes back, whatever other keys do.
//! Everything else holds at any speed and is checked on every executor (`matrix!`) or on
//! plain threads; there, a timeout is only checked to give its error (a permit that never
//! returns), and a blocking wait's timeout runs on the real clock.

mod common;

use std::pin::pin;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use common::{InFlight, Rng, matrix, panic_message, spawn, virtual_time};
use futures_lite::future::{poll_once, yield_now, zip};
use tollgate::testing::now;
use tollgate::{KeyedBulkhead, run_sync, sleep};

fn host(index: usize) -> String {
    format!("host-{index}.example")
}

matrix! {
    async fn fifty_hosts_each_stay_within_their_limit() {
        const HOSTS: usize = 50;
        let per_host = Arc::new(KeyedBulkhead::<String>::new(2));
        let in_flight: Arc<Vec<InFlight>> = Arc::new((0..HOSTS).map(|_| InFlight::default()).collect());
        let tasks: Vec<_> = (0..1000)
            .map(|index| {
                let (per_host, in_flight) = (per_host.clone(), in_flight.clone());
                spawn(async move {
                    let name = host(index % HOSTS);
                    per_host
                        .run(&name, async {
                            let _inside = in_flight[index % HOSTS].enter();
                            yield_now().await;
                            yield_now().await;
                        })
                        .await
                        .unwrap();
                })
            })
            .collect();
        for task in tasks {
            task.await;
        }
        for (index, host) in in_flight.iter().enumerate() {
            assert!(host.peak() <= 2, "host {index} peaked at {}", host.peak());
        }
        assert!(in_flight.iter().any(|host| host.peak() == 2), "the limit was reached");
        assert_eq!(per_host.len(), 0, "every host is idle, so forgotten");
    }

    async fn eviction_racing_with_acquire_never_doubles_a_cap() {
        // Keys go idle and come back constantly, with cancellations in between. If a key
        // could get a second semaphore while its first one is in use, two holders would
        // overlap and the per-key peak would reach 2.
        const KEYS: usize = 24;
        let per_key = Arc::new(KeyedBulkhead::<usize>::new(1));
        let in_flight: Arc<Vec<InFlight>> = Arc::new((0..KEYS).map(|_| InFlight::default()).collect());
        let tasks: Vec<_> = (0..32u64)
            .map(|seed| {
                let (per_key, in_flight) = (per_key.clone(), in_flight.clone());
                spawn(async move {
                    let mut rng = Rng::new(seed);
                    for _ in 0..2000 {
                        let key = rng.below(KEYS as u64) as usize;
                        match rng.below(4) {
                            0 => {
                                let mut acquire = pin!(per_key.acquire(&key));
                                drop(poll_once(acquire.as_mut()).await);
                            }
                            1 => {
                                if let Ok(_permit) = per_key.try_acquire(&key) {
                                    let _inside = in_flight[key].enter();
                                    yield_now().await;
                                }
                            }
                            _ => {
                                let _permit = per_key.acquire(&key).await.unwrap();
                                let _inside = in_flight[key].enter();
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
        for (key, count) in in_flight.iter().enumerate() {
            assert_eq!(count.peak(), 1, "key {key}");
        }
        assert_eq!(per_key.len(), 0);
    }

    async fn a_key_lives_while_a_permit_a_waiter_or_a_pending_acquire_holds_it() {
        let per_host = KeyedBulkhead::<String>::new(1);
        assert!(per_host.is_empty());
        let unpolled = per_host.acquire("a");
        assert_eq!(per_host.len(), 1, "a pending acquire keeps the key");
        drop(unpolled);
        assert_eq!(per_host.len(), 0);

        let held = per_host.acquire("a").await.unwrap();
        let mut waiter = pin!(per_host.acquire("a"));
        assert!(poll_once(waiter.as_mut()).await.is_none());
        assert_eq!(per_host.stats("a").waiting, 1);
        drop(held); // handed to the waiter: the key stays
        assert_eq!(per_host.len(), 1);
        let permit = waiter.await.unwrap();
        assert_eq!(per_host.stats("a").in_flight, 1);
        assert_eq!(per_host.stats("a").admitted, 2);
        drop(permit);
        assert_eq!(per_host.len(), 0);
        assert_eq!(per_host.stats("a").admitted, 0, "forgotten: counters start over");
    }

    async fn a_waiter_dropped_after_its_grant_passes_the_permit_on() {
        let per_host = KeyedBulkhead::<String>::new(1);
        let held = per_host.acquire("a").await.unwrap();
        let mut granted = Box::pin(per_host.acquire("a"));
        let mut next = pin!(per_host.acquire("a"));
        assert!(poll_once(granted.as_mut()).await.is_none());
        assert!(poll_once(next.as_mut()).await.is_none());
        drop(held);
        drop(granted);
        drop(next.await.unwrap());
        assert!(per_host.is_empty());
    }

    async fn options_apply_per_key() {
        let per_host = KeyedBulkhead::<String>::new(1).name("per-host").max_waiting(0);
        let a = per_host.acquire("a.example").await.unwrap();
        let refused = per_host.acquire("a.example").await.unwrap_err();
        assert!(refused.is_queue_full());
        assert_eq!(refused.max_waiting(), Some(0));
        assert_eq!(refused.name(), Some("per-host"));
        assert_eq!(per_host.stats("a.example").rejected, 1);
        let b = per_host.acquire("b.example").await.unwrap();
        drop((a, b));

        let timed = KeyedBulkhead::<String>::new(1).acquire_timeout(Duration::from_millis(10));
        let _held = timed.acquire("a").await.unwrap();
        let error = timed.acquire("a").await.unwrap_err();
        assert!(error.is_timed_out());
        assert_eq!(error.acquire_timeout(), Some(Duration::from_millis(10)));
        assert_eq!(timed.stats("a").waiting, 0);
    }

    /// Regression: `KeyedBulkhead` had no `try_acquire_arc` (Bulkhead had).
    async fn try_acquire_arc_gives_a_static_permit_that_frees_the_key_when_dropped() {
        let per_host = Arc::new(KeyedBulkhead::<String>::new(1));
        let permit = per_host.try_acquire_arc("example.com").unwrap();
        assert!(per_host.try_acquire_arc("example.com").unwrap_err().is_busy());
        assert!(per_host.try_acquire_arc("other.example").is_ok());
        assert_eq!(per_host.runtime_stats("example.com").in_flight, 1);
        spawn(async move {
            yield_now().await;
            drop(permit);
        })
        .await;
        assert!(per_host.is_empty());
        // It does not jump a queued waiter.
        let held = per_host.acquire("example.com").await.unwrap();
        let mut waiter = pin!(per_host.acquire("example.com"));
        assert!(poll_once(waiter.as_mut()).await.is_none());
        drop(held);
        assert!(per_host.try_acquire_arc("example.com").unwrap_err().is_busy(), "jumped the queue");
        drop(waiter.await.unwrap());
        assert!(per_host.is_empty());
    }

    async fn run_and_owned_permits() {
        let per_host = Arc::new(KeyedBulkhead::<String>::new(2).with_name("hosts".to_owned()));
        let length = per_host.run("example.com", async { "<html>".len() }).await;
        assert_eq!(length.unwrap(), 6);
        let permit = per_host.acquire_arc("example.com").await.unwrap();
        assert_eq!(per_host.len(), 1);
        spawn(async move { drop(permit) }).await;
        assert!(per_host.is_empty());
    }
}

virtual_time! {
    async fn a_keys_acquire_timeout_ends_its_waiter_exactly_then_or_at_its_grant() {
        let timed = KeyedBulkhead::<String>::new(1).acquire_timeout(Duration::from_millis(10));
        let held = timed.acquire("a").await.unwrap();
        let start = now();
        let error = timed.acquire("a").await.unwrap_err();
        assert!(error.is_timed_out());
        assert_eq!(now() - start, Duration::from_millis(10), "the timer fires at its deadline");
        assert_eq!(timed.stats("a").waiting, 0);
        // Another key is free meanwhile: taken at once.
        drop(timed.acquire("b").await.unwrap());
        assert_eq!(now() - start, Duration::from_millis(10));
        // A permit of "a" back after 4 ms admits its waiter then; "b" busy meanwhile
        // changes nothing.
        let start = now();
        let (admitted, ()) = zip(
            async { timed.acquire("a").await.map(|_| now() - start) },
            async {
                let other = timed.acquire("b").await.unwrap();
                sleep(Duration::from_millis(4)).await;
                drop(held);
                sleep(Duration::from_millis(20)).await;
                drop(other);
            },
        )
        .await;
        assert_eq!(admitted.unwrap(), Duration::from_millis(4));
        assert_eq!(now() - start, Duration::from_millis(24));
        assert!(timed.is_empty());
    }
}

#[test]
fn eviction_racing_with_acquire_on_threads_never_doubles_a_cap() {
    // The same race with real threads, whatever executor the matrix tests spawn on.
    const KEYS: usize = 8;
    let per_key = KeyedBulkhead::<usize>::new(1);
    let in_flight: Vec<InFlight> = (0..KEYS).map(|_| InFlight::default()).collect();
    std::thread::scope(|scope| {
        for seed in 0..8u64 {
            let (per_key, in_flight) = (&per_key, &in_flight);
            scope.spawn(move || {
                let mut rng = Rng::new(seed);
                for _ in 0..20_000 {
                    let key = rng.below(KEYS as u64) as usize;
                    if let Ok(_permit) = per_key.try_acquire(&key) {
                        let _inside = in_flight[key].enter();
                        std::thread::yield_now();
                    }
                }
            });
        }
    });
    for (key, count) in in_flight.iter().enumerate() {
        assert_eq!(count.peak(), 1, "key {key}");
    }
    assert_eq!(per_key.len(), 0);
}

/// Regression: `KeyedBulkhead` had no `acquire_blocking` or `run_blocking` (Bulkhead had).
#[test]
fn blocking_threads_share_each_keys_cap_and_get_the_acquire_timeout() {
    const KEYS: usize = 3;
    let per_key = KeyedBulkhead::<usize>::new(2);
    let in_flight: Vec<InFlight> = (0..KEYS).map(|_| InFlight::default()).collect();
    std::thread::scope(|scope| {
        for thread in 0..12 {
            let (per_key, in_flight) = (&per_key, &in_flight);
            scope.spawn(move || {
                for round in 0..100 {
                    let key = (thread + round) % KEYS;
                    if round % 2 == 0 {
                        let _permit = per_key.acquire_blocking(&key).unwrap();
                        let _inside = in_flight[key].enter();
                        std::thread::yield_now();
                    } else {
                        per_key
                            .run_blocking(&key, || {
                                let _inside = in_flight[key].enter();
                                std::thread::yield_now();
                            })
                            .unwrap();
                    }
                }
            });
        }
    });
    for (key, count) in in_flight.iter().enumerate() {
        assert!(count.peak() <= 2, "key {key} peaked at {}", count.peak());
    }
    assert!(per_key.is_empty());

    let timed = KeyedBulkhead::<String>::new(1).acquire_timeout(Duration::from_millis(10));
    let held = timed.try_acquire("a").unwrap();
    let error = timed.acquire_blocking("a").unwrap_err();
    assert!(error.is_timed_out());
    let mut called = false;
    assert!(timed.run_blocking("a", || called = true).is_err());
    assert!(!called);
    assert_eq!(timed.run_blocking("b", || 7).unwrap(), 7);
    drop(held);
    assert_eq!(timed.run_blocking("a", || 8).unwrap(), 8);
    assert!(timed.is_empty());
}

/// Regression: `stats(key)` read from a plain thread returned zeros while 4 `run_sync`
/// runtimes held that key's permits (it showed only the calling runtime's cap).
#[test]
fn a_keys_stats_from_a_plain_thread_are_the_totals_over_every_runtime() {
    static PER_HOST: KeyedBulkhead<String> = KeyedBulkhead::new(2);
    const THREADS: usize = 4;
    let barrier = Arc::new(Barrier::new(THREADS + 1));
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                run_sync(async {
                    let held = (
                        PER_HOST.acquire("example.com").await.unwrap(),
                        PER_HOST.acquire("example.com").await.unwrap(),
                    );
                    barrier.wait();
                    let own = PER_HOST.runtime_stats("example.com").in_flight;
                    barrier.wait();
                    drop(held);
                    own
                })
            })
        })
        .collect();
    barrier.wait();
    let totals = PER_HOST.stats("example.com");
    let here = PER_HOST.runtime_stats("example.com");
    barrier.wait();
    for thread in threads {
        assert_eq!(thread.join().unwrap(), 2);
    }
    assert_eq!(
        (totals.in_flight, totals.runtimes, totals.admitted),
        (8, THREADS, 8)
    );
    assert_eq!((here.in_flight, here.runtimes), (0, 1));
    assert!(PER_HOST.is_empty());
}

#[test]
fn a_million_distinct_hosts_leave_nothing_behind() {
    let per_host = KeyedBulkhead::<String>::new(2);
    let mut held = std::collections::VecDeque::new();
    let mut name = String::new();
    for index in 0..1_000_000 {
        use std::fmt::Write;
        name.clear();
        write!(name, "h{index}").unwrap();
        // Keep a sliding window of 1,000 busy hosts.
        held.push_back(per_host.try_acquire(name.as_str()).unwrap());
        if held.len() > 1_000 {
            held.pop_front();
        }
    }
    assert_eq!(per_host.len(), 1_000);
    held.clear();
    assert_eq!(per_host.len(), 0);
}

#[test]
fn two_concurrent_run_sync_calls_get_a_cap_per_key_each_unless_global() {
    static PER_RUNTIME: KeyedBulkhead<String> = KeyedBulkhead::new(1);
    static GLOBAL: KeyedBulkhead<String> = KeyedBulkhead::new(1).global();
    let barrier = Arc::new(Barrier::new(2));
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                run_sync(async {
                    let own = PER_RUNTIME.acquire("example.com").await.unwrap();
                    let shared = GLOBAL.try_acquire("example.com");
                    barrier.wait(); // both calls hold their key's slot
                    let got_shared = shared.is_ok();
                    barrier.wait();
                    drop((own, shared));
                    got_shared
                })
            })
        })
        .collect();
    let shared: Vec<bool> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(
        shared.iter().filter(|got| **got).count(),
        1,
        "one global slot"
    );
    assert!(PER_RUNTIME.is_empty() && GLOBAL.is_empty());
}

#[test]
fn limit_zero_is_refused_with_a_clear_message() {
    let payload = std::panic::catch_unwind(|| KeyedBulkhead::<String>::new(0)).unwrap_err();
    assert!(panic_message(&*payload).contains("limit of 0"));
}

#[test]
fn the_futures_and_permits_are_send() {
    fn assert_send<T: Send>(_: &T) {}
    fn assert_send_sync_static<T: Send + Sync + 'static>(_: &T) {}
    static HOSTS: KeyedBulkhead<String> = KeyedBulkhead::new(1);
    let per_host = Arc::new(KeyedBulkhead::<String>::new(1));
    assert_send(&per_host.acquire("a"));
    assert_send(&per_host.acquire_arc("a"));
    assert_send(&per_host.run("a", async {}));
    assert_send_sync_static(&per_host.try_acquire_arc("a").unwrap());
    assert_send_sync_static(&HOSTS.acquire("a"));
    let permit = HOSTS.try_acquire("a").unwrap();
    assert_send_sync_static(&permit);
    drop(permit);
    assert_send_sync_static(&HOSTS.try_acquire("b"));
    let debug = format!("{HOSTS:?}");
    assert!(
        debug.contains("KeyedBulkhead") && debug.contains("keys: 0"),
        "{debug}"
    );
}

#[cfg(feature = "tokio")]
#[test]
fn two_tokio_runtimes_get_a_cap_per_key_each() {
    static PER_RUNTIME: KeyedBulkhead<String> = KeyedBulkhead::new(1);
    let barrier = Arc::new(Barrier::new(2));
    let threads: Vec<_> = [common::tokio_current(), common::tokio_multi()]
        .into_iter()
        .map(|runtime| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                runtime.block_on(async {
                    let permit = tokio::spawn(PER_RUNTIME.acquire("example.com"))
                        .await
                        .unwrap()
                        .unwrap();
                    barrier.wait();
                    let full = PER_RUNTIME
                        .try_acquire("example.com")
                        .unwrap_err()
                        .is_busy();
                    barrier.wait();
                    drop(permit);
                    full
                })
            })
        })
        .collect();
    for thread in threads {
        assert!(thread.join().unwrap());
    }
    assert!(PER_RUNTIME.is_empty());
}

#[test]
fn set_limit_reaches_every_key_and_keys_used_later() {
    let per_host = KeyedBulkhead::<String>::new(1);
    let a = per_host.try_acquire("a.example").unwrap();
    assert!(per_host.try_acquire("a.example").unwrap_err().is_busy());
    per_host.set_limit(2);
    let a2 = per_host.try_acquire("a.example").unwrap();
    assert!(per_host.try_acquire("a.example").unwrap_err().is_busy());
    let b: Vec<_> = (0..2)
        .map(|_| per_host.try_acquire("b.example").unwrap())
        .collect();
    assert!(per_host.try_acquire("b.example").unwrap_err().is_busy());
    assert_eq!(per_host.stats("b.example").limit, 2);
    per_host.set_limit(1);
    drop(a);
    assert!(
        per_host.try_acquire("a.example").unwrap_err().is_busy(),
        "1 out, limit 1"
    );
    drop((a2, b));
    assert!(per_host.is_empty());
    assert_eq!(per_host.limit(), 1);
}

#[test]
fn close_refuses_the_waiters_of_every_key_and_keys_used_later() {
    let per_host = KeyedBulkhead::<String>::new(1);
    let held = per_host.try_acquire("a.example").unwrap();
    let mut waiter = pin!(per_host.acquire("a.example"));
    futures_lite::future::block_on(async {
        assert!(poll_once(waiter.as_mut()).await.is_none());
        per_host.close();
        assert!(waiter.await.unwrap_err().is_closed());
        assert!(per_host.acquire("b.example").await.unwrap_err().is_closed());
    });
    assert!(per_host.try_acquire("c.example").unwrap_err().is_closed());
    assert!(per_host.is_closed());
    drop(held);
    assert!(per_host.is_empty(), "refused keys are forgotten too");
}
