//! `testing::eventually` under every runtime of the matrix; its schedule of checks, exactly,
//! on virtual time.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use common::{matrix, virtual_time};
use tollgate::testing::{eventually, now};

matrix! {
    async fn passes_once_background_work_lands() {
        let flag = Arc::new(AtomicBool::new(false));
        let setter = flag.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            setter.store(true, Ordering::SeqCst);
        });
        eventually(Duration::from_secs(30), || flag.load(Ordering::SeqCst))
            .await
            .unwrap();
    }

    async fn passes_at_once_without_sleeping() {
        let mut calls = 0;
        eventually(Duration::ZERO, || {
            calls += 1;
            true
        })
        .await
        .unwrap();
        assert_eq!(calls, 1);
    }

    async fn fails_with_the_last_failure_message() {
        let calls = AtomicU32::new(0);
        let error = eventually(Duration::from_millis(30), || {
            let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
            Err::<(), _>(format!("attempt {n} saw 0 pages"))
        })
        .await
        .unwrap_err();
        let made = calls.load(Ordering::SeqCst);
        assert!(made >= 2, "retried: {made}");
        assert_eq!(error.attempts_made(), made);
        assert_eq!(error.last_failure(), format!("attempt {made} saw 0 pages"));
        assert!(error.to_string().contains("attempt"), "{error}");
    }

    async fn a_false_bool_says_so() {
        let error = eventually(Duration::from_millis(5), || false).await.unwrap_err();
        assert_eq!(error.last_failure(), "check returned false");
    }
}

virtual_time! {
    async fn waiting_follows_the_virtual_clock() {
        // Checks at 0, 1, 3, 7, 15 and 30 ms (pauses doubling from 1 ms, the last one cut
        // to the timeout), then every 20 ms: exactly so on a virtual clock.
        let start = now();
        let calls = AtomicU32::new(0);
        let error = eventually(Duration::from_millis(30), || {
            calls.fetch_add(1, Ordering::SeqCst);
            false
        })
        .await
        .unwrap_err();
        assert_eq!(error.attempts_made(), 6);
        assert_eq!(now() - start, Duration::from_millis(30));
        let error = eventually(Duration::from_secs(600), || false).await.unwrap_err();
        assert_eq!(error.attempts_made(), 5 + (600_000 - 15) / 20 + 1);
        assert!(error.to_string().contains("600s"), "{error}");
    }
}
