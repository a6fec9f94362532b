//! The runtime layer: `run_sync`, `try_run_sync` and `RuntimeKey`.

mod common;

use std::panic::catch_unwind;
use std::rc::Rc;

use common::panic_message;
use tollgate::{RuntimeKey, run_sync, try_run_sync};

#[test]
fn nested_run_sync_panics_with_advice() {
    let payload = catch_unwind(|| run_sync(async { run_sync(async { 1 }) })).unwrap_err();
    let message = panic_message(&*payload);
    assert!(message.contains("inside another run_sync"), "{message}");
    assert!(message.contains(".await"), "{message}");
    // The refused call left no trace: the thread can run_sync again.
    assert_eq!(run_sync(async { 2 }), 2);
}

#[test]
fn nested_try_run_sync_returns_the_error_without_polling() {
    let polled = std::cell::Cell::new(false);
    let error = run_sync(async {
        try_run_sync(async {
            polled.set(true);
        })
        .unwrap_err()
    });
    assert!(!polled.get());
    assert!(error.to_string().starts_with("run_sync called inside"));
    let umbrella: tollgate::Error = error.into();
    assert!(matches!(umbrella, tollgate::Error::RunSync(_)));
}

#[test]
fn a_panic_inside_run_sync_propagates_and_resets_the_thread() {
    let payload = catch_unwind(|| run_sync(async { panic!("boom") })).unwrap_err();
    assert_eq!(panic_message(&*payload), "boom");
    assert_eq!(RuntimeKey::current(), RuntimeKey::process());
    assert_eq!(try_run_sync(async { 3 }), Ok(3));
}

#[test]
fn run_sync_accepts_a_future_that_is_not_send() {
    let shared = Rc::new(5);
    let inner = shared.clone();
    let doubled = run_sync(async move {
        tollgate::sleep(std::time::Duration::from_millis(1)).await;
        *inner * 2
    });
    assert_eq!(doubled, 10);
}

#[test]
fn each_run_sync_call_is_its_own_runtime() {
    let outside = RuntimeKey::current();
    let (first_a, first_b) = run_sync(async {
        let before = RuntimeKey::current();
        tollgate::sleep(std::time::Duration::from_millis(1)).await;
        (before, RuntimeKey::current())
    });
    let second = run_sync(async { RuntimeKey::current() });
    assert_eq!(first_a, first_b, "stable within one call");
    assert_ne!(first_a, second);
    assert_ne!(first_a, outside);
    assert_eq!(outside, RuntimeKey::process());
    assert!(!first_a.is_alive() && !second.is_alive());
    assert!(outside.is_alive());
}

#[test]
fn concurrent_run_sync_calls_on_two_threads_differ_and_live_while_running() {
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(2));
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                run_sync(async {
                    let key = RuntimeKey::current();
                    barrier.wait(); // both calls are running now
                    assert!(key.is_alive());
                    barrier.wait();
                    key
                })
            })
        })
        .collect();
    let keys: Vec<RuntimeKey> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert_ne!(keys[0], keys[1]);
}

#[cfg(not(feature = "tokio"))]
#[test]
fn without_the_feature_tokio_is_the_process_wide_world() {
    let key = common::tokio_current().block_on(async { RuntimeKey::current() });
    assert_eq!(key, RuntimeKey::process());
    // And run_sync cannot see tokio, so it is not refused there.
    let nested = common::tokio_current().block_on(async { try_run_sync(async { 4 }) });
    assert_eq!(nested, Ok(4));
}

#[cfg(feature = "tokio")]
mod with_tokio {
    use super::*;
    use std::panic::AssertUnwindSafe;

    #[test]
    fn run_sync_inside_tokio_is_refused() {
        for runtime in [common::tokio_current(), common::tokio_multi()] {
            let error = runtime
                .block_on(async { try_run_sync(async {}) })
                .unwrap_err();
            assert!(
                error.to_string().contains("inside a tokio runtime"),
                "{error}"
            );

            let payload = runtime
                .block_on(async { catch_unwind(AssertUnwindSafe(|| run_sync(async {}))) })
                .unwrap_err();
            let message = panic_message(&*payload);
            assert!(message.contains("`.await` the future instead"), "{message}");
        }
    }

    #[test]
    fn run_sync_on_a_spawn_blocking_thread_names_handle_block_on() {
        let runtime = common::tokio_multi();
        let error = runtime
            .block_on(async { tokio::task::spawn_blocking(|| try_run_sync(async {})).await })
            .unwrap()
            .unwrap_err();
        assert!(
            error.to_string().contains("Handle::current().block_on"),
            "{error}"
        );
        // The advice works.
        let value = runtime
            .block_on(async {
                tokio::task::spawn_blocking(|| {
                    tokio::runtime::Handle::current().block_on(async { 6 })
                })
                .await
            })
            .unwrap();
        assert_eq!(value, 6);
    }

    #[test]
    fn keys_differ_between_live_tokio_runtimes_and_agree_within_one() {
        let first = common::tokio_multi();
        let second = common::tokio_current();
        let key_first = first.block_on(async { RuntimeKey::current() });
        let key_second = second.block_on(async { RuntimeKey::current() });
        assert_ne!(key_first, key_second);
        assert_ne!(key_first, RuntimeKey::process());

        // Every worker thread and blocking thread of one runtime sees the same key.
        let seen = first.block_on(async {
            let tasks: Vec<_> = (0..16)
                .map(|_| tokio::spawn(async { RuntimeKey::current() }))
                .collect();
            let mut keys = Vec::new();
            for task in tasks {
                keys.push(task.await.unwrap());
            }
            keys.push(
                tokio::task::spawn_blocking(RuntimeKey::current)
                    .await
                    .unwrap(),
            );
            keys
        });
        assert!(seen.iter().all(|key| *key == key_first), "{seen:?}");

        // Outside block_on but after `enter`, the runtime is still current.
        let guard = second.enter();
        assert_eq!(RuntimeKey::current(), key_second);
        drop(guard);
        assert_eq!(RuntimeKey::current(), RuntimeKey::process());

        assert!(key_first.is_alive() && key_second.is_alive());
        drop(first);
        assert!(!key_first.is_alive(), "a dropped runtime is dead");
        assert!(key_second.is_alive());
        drop(second);
        assert!(!key_second.is_alive());
    }

    /// Regression: the key must follow `Handle::enter` both ways, also inside a task that
    /// already asked (an earlier per-task cache kept the other runtime's key afterwards).
    #[test]
    fn a_task_that_enters_another_runtime_gets_its_own_key_back() {
        let own = common::tokio_multi();
        let other = common::tokio_current();
        let other_key = other.block_on(async { RuntimeKey::current() });
        let handle = other.handle().clone();
        let (before, during, after) = own.block_on(async move {
            tokio::spawn(async move {
                let before = RuntimeKey::current();
                let during = {
                    let _entered = handle.enter();
                    RuntimeKey::current()
                };
                (before, during, RuntimeKey::current())
            })
            .await
            .unwrap()
        });
        assert_eq!(during, other_key);
        assert_eq!(before, after);
        assert_ne!(before, other_key);
    }
}
