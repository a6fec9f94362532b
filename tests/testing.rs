//! `testing::eventually` under every runtime of the matrix.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use common::matrix;
use tollgate::testing::eventually;

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

#[cfg(feature = "tokio")]
#[tokio::test(start_paused = true)]
async fn waiting_follows_the_paused_clock() {
    let wall = std::time::Instant::now();
    let error = eventually(Duration::from_secs(600), || false)
        .await
        .unwrap_err();
    assert!(error.attempts_made() > 10);
    assert!(wall.elapsed() < Duration::from_secs(10));
}
