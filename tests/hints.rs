//! `.classify(..)` on a keyed map: the hint an attempt's outcome carries sets its key's
//! rate or limit, or pauses it, at once, beside a key without hints, under smol, `run_sync`
//! and tokio (current and multi-thread).
//!
//! The servers are in the test: each attempt records when it started (and how many of its
//! key ran at once), and answers with or without a hint. What is asserted is measured at the
//! server: the spacing of starts, the peak in flight, the gap a pause leaves.

mod common;

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::time::{Duration, Instant};

use common::{InFlight, matrix};
use tollgate::{Hint, Outcome, Rate, map_async, sleep};

/// Which key an item belongs to: even items to the hinted host (0), odd ones to the other.
fn host(n: &u32) -> u32 {
    n % 2
}

matrix! {
    async fn a_hinted_rate_spaces_its_key_and_not_the_other() {
        let starts: Mutex<Vec<(u32, Instant)>> = Mutex::new(Vec::new());
        let pages = map_async(0..40u32, 8, |n| {
            starts.lock().unwrap().push((host(&n), Instant::now()));
            async move {
                sleep(Duration::from_millis(2)).await;
                n
            }
        })
        .per_key(host, 4)
        .classify(|n: &u32| {
            let outcome = Outcome::success();
            // The hinted host says "20 a second" on every answer, as `RateLimit-Policy` does.
            if host(n) == 0 { outcome.with_hint(Hint::new().rate(Rate::per_second(20))) } else { outcome }
        })
        .await;
        assert_eq!(pages.len(), 40);
        let starts = starts.into_inner().unwrap();
        let of = |key| starts.iter().filter(|(k, _)| *k == key).map(|(_, at)| *at).collect::<Vec<_>>();
        let (hinted, other) = (of(0), of(1));
        // At most the first 4 started before any answer; from the 5th on, 50 ms apart
        // (the timer may only make them later).
        let spaced = &hinted[4..];
        for pair in spaced.windows(2) {
            let gap = pair[1] - pair[0];
            assert!(gap >= Duration::from_millis(49), "hinted starts {gap:?} apart");
        }
        let hinted_span = hinted[19] - hinted[0];
        let other_span = other[19] - other[0];
        println!("hinted key: 20 starts in {hinted_span:?}; the other: {other_span:?}");
        assert!(
            other_span * 3 < hinted_span,
            "the key without hints ran at the map's settings: {other_span:?} vs {hinted_span:?}"
        );
    }

    async fn a_hinted_limit_holds_its_key_at_once_and_not_the_other() {
        let (hinted, other) = (InFlight::default(), InFlight::default());
        let answered = AtomicBool::new(false);
        let after_hint = AtomicUsize::new(0);
        let pages = map_async(0..40u32, 8, |n| {
            let flight = if host(&n) == 0 { &hinted } else { &other };
            let guard = flight.enter();
            if host(&n) == 0 && answered.load(SeqCst) {
                after_hint.fetch_max(hinted.now(), SeqCst);
            }
            let answered = &answered;
            async move {
                sleep(Duration::from_millis(10)).await;
                drop(guard);
                if host(&n) == 0 {
                    // Set before the map reads the answer: a start after it is one the
                    // map made after the hint.
                    answered.store(true, SeqCst);
                }
                n
            }
        })
        .per_key(host, 4)
        .classify(|n: &u32| {
            let outcome = Outcome::success();
            if host(n) == 0 { outcome.with_hint(Hint::new().limit(1)) } else { outcome }
        })
        .await;
        assert_eq!(pages.len(), 40);
        assert_eq!(after_hint.load(SeqCst), 1, "one at a time once the server said so");
        assert_eq!(other.peak(), 4, "the other key kept the map's limit");
    }

    async fn a_hinted_limit_of_zero_is_read_as_one_and_the_map_finishes() {
        // `Hint`'s fields are public: a classifier can say "a limit of 0", which the
        // `limit(0)` setter refuses. The map must read it as 1, not stop starting the key.
        let mut zero = Hint::new();
        zero.limit = Some(0);
        let (hinted, other) = (InFlight::default(), InFlight::default());
        let answered = AtomicBool::new(false);
        let after_hint = AtomicUsize::new(0);
        let pages = map_async(0..40u32, 8, |n| {
            let flight = if host(&n) == 0 { &hinted } else { &other };
            let guard = flight.enter();
            if host(&n) == 0 && answered.load(SeqCst) {
                after_hint.fetch_max(hinted.now(), SeqCst);
            }
            let answered = &answered;
            async move {
                sleep(Duration::from_millis(10)).await;
                drop(guard);
                if host(&n) == 0 {
                    answered.store(true, SeqCst);
                }
                n
            }
        })
        .per_key(host, 4)
        .classify(move |n: &u32| {
            let outcome = Outcome::success();
            if host(n) == 0 { outcome.with_hint(zero) } else { outcome }
        })
        .await;
        assert_eq!(pages.len(), 40, "every item of the key hinted a limit of 0 ran");
        assert_eq!(after_hint.load(SeqCst), 1, "a limit of 0 is read as 1");
        assert_eq!(other.peak(), 4, "the other key kept the map's limit");
    }

    async fn a_hinted_pause_holds_its_key_holding_no_slot() {
        let starts: Mutex<Vec<(u32, Instant)>> = Mutex::new(Vec::new());
        let paused_at: Mutex<Option<Instant>> = Mutex::new(None);
        let pages = map_async(0..20u32, 1, |n| {
            starts.lock().unwrap().push((host(&n), Instant::now()));
            let paused_at = &paused_at;
            async move {
                sleep(Duration::from_millis(2)).await;
                if n == 0 {
                    *paused_at.lock().unwrap() = Some(Instant::now());
                }
                n
            }
        })
        .per_key(host, 1)
        .classify(|n: &u32| {
            // The first answer of the hinted host: "come back in 300 ms".
            let outcome = Outcome::success();
            if *n == 0 { outcome.with_hint(Hint::new().pause_for(Duration::from_millis(300))) } else { outcome }
        })
        .await;
        assert_eq!(pages.len(), 20);
        let paused_at = paused_at.into_inner().unwrap().unwrap();
        let starts = starts.into_inner().unwrap();
        let next_hinted = starts.iter().filter(|(k, _)| *k == 0).nth(1).unwrap().1;
        assert!(
            next_hinted - paused_at >= Duration::from_millis(299),
            "the paused key started again {:?} after its answer",
            next_hinted - paused_at
        );
        // The one slot of the map went to the other key meanwhile: all its items ran
        // before the paused key's second.
        let others_during = starts.iter().filter(|(k, at)| *k == 1 && *at < next_hinted).count();
        assert_eq!(others_during, 10, "the other key used the slot while the first was paused");
    }
}
