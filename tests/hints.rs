//! `.classify(..)` on a keyed map: the hint an attempt's outcome carries sets its key's
//! rate or limit, or pauses it, at once, beside a key without hints.
//!
//! The servers are in the test: each attempt records when it started (and how many of its
//! key ran at once), and answers with or without a hint. What is asserted is measured at the
//! server. On every executor (smol, `run_sync`, tokio current and multi-thread), what holds at
//! any speed: peaks in flight, never sooner than a hinted rate or pause allows. On virtual
//! time (`virtual_time!`), what depends on time: starts exactly a hinted interval apart, the
//! key without hints unhindered, the other key using the slot while the first is paused.

mod common;

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::time::{Duration, Instant};

use common::{InFlight, matrix, virtual_time};
use tollgate::testing::now;
use tollgate::{Hint, Outcome, Rate, map_async, sleep};

/// Which key an item belongs to: even items to the hinted host (0), odd ones to the other.
fn host(n: &u32) -> u32 {
    n % 2
}

/// A map whose hinted host (key 0) answers every attempt with `hint`, beside a key without
/// hints: (outputs, the hinted key's most in flight at a start made after its first answer,
/// the other key's peak).
async fn hinted_limit(hint: Hint) -> (usize, usize, usize) {
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
                // Set before the map reads the answer: a start after it is one the map
                // made after the hint.
                answered.store(true, SeqCst);
            }
            n
        }
    })
    .per_key(host, 4)
    .classify(move |n: &u32| {
        let outcome = Outcome::success();
        if host(n) == 0 {
            outcome.with_hint(hint)
        } else {
            outcome
        }
    })
    .await;
    (pages.len(), after_hint.load(SeqCst), other.peak())
}

matrix! {
    async fn a_hinted_limit_holds_its_key_at_once_and_not_the_other() {
        let (pages, after_hint, other) = hinted_limit(Hint::new().limit(1)).await;
        assert_eq!(pages, 40);
        assert_eq!(after_hint, 1, "one at a time once the server said so");
        assert_eq!(other, 4, "the other key kept the map's limit");
    }

}

/// A hint's limit is checked where it is made: a limit of 0, which would never start the
/// key's items again (the map would never end), cannot reach a map (a hint has no public
/// field to set it through, and the setters refuse it).
#[test]
#[should_panic(expected = "a key limit must be at least 1")]
fn a_hinted_limit_of_zero_is_refused_where_it_is_made() {
    let _ = Hint::new().settings(tollgate::KeySettings::new().limit(0));
}

/// Starts of a map whose hinted host (key 0) says "20 a second" on every answer, beside a
/// key without hints: the start instants of each key, on tollgate's clock.
async fn hinted_rate_starts() -> (Vec<Instant>, Vec<Instant>) {
    let starts: Mutex<Vec<(u32, Instant)>> = Mutex::new(Vec::new());
    let pages = map_async(0..40u32, 8, |n| {
        starts.lock().unwrap().push((host(&n), now()));
        async move {
            sleep(Duration::from_millis(2)).await;
            n
        }
    })
    .per_key(host, 4)
    .classify(|n: &u32| {
        let outcome = Outcome::success();
        // As `RateLimit-Policy` does, on every answer.
        if host(n) == 0 {
            outcome.with_hint(Hint::new().rate(Rate::per_second(20)))
        } else {
            outcome
        }
    })
    .await;
    assert_eq!(pages.len(), 40);
    let starts = starts.into_inner().unwrap();
    let of = |key| {
        starts
            .iter()
            .filter(|(k, _)| *k == key)
            .map(|(_, at)| *at)
            .collect::<Vec<_>>()
    };
    (of(0), of(1))
}

/// A map of one slot whose hinted host's first answer says "come back in 300 ms": every
/// start (key, instant) and the instant that answer came.
async fn hinted_pause_starts() -> (Vec<(u32, Instant)>, Instant) {
    let starts: Mutex<Vec<(u32, Instant)>> = Mutex::new(Vec::new());
    let paused_at: Mutex<Option<Instant>> = Mutex::new(None);
    let pages = map_async(0..20u32, 1, |n| {
        starts.lock().unwrap().push((host(&n), now()));
        let paused_at = &paused_at;
        async move {
            sleep(Duration::from_millis(2)).await;
            if n == 0 {
                *paused_at.lock().unwrap() = Some(now());
            }
            n
        }
    })
    .per_key(host, 1)
    .classify(|n: &u32| {
        let outcome = Outcome::success();
        if *n == 0 {
            outcome.with_hint(Hint::new().pause(Duration::from_millis(300)))
        } else {
            outcome
        }
    })
    .await;
    assert_eq!(pages.len(), 20);
    (
        starts.into_inner().unwrap(),
        paused_at.into_inner().unwrap().unwrap(),
    )
}

/// The hinted key's second start.
fn next_hinted(starts: &[(u32, Instant)]) -> Instant {
    starts.iter().filter(|(k, _)| *k == 0).nth(1).unwrap().1
}

matrix! {
    async fn a_hinted_rate_is_never_outrun() {
        let (hinted, _) = hinted_rate_starts().await;
        // At most the first 4 started before any answer; from the 5th on, never sooner
        // than 50 ms apart (a timer only fires late; 1 ms for the rate's cheaper clock).
        for pair in hinted[4..].windows(2) {
            let gap = pair[1] - pair[0];
            assert!(gap >= Duration::from_millis(49), "hinted starts {gap:?} apart");
        }
    }

    async fn a_hinted_pause_is_never_cut_short() {
        let (starts, paused_at) = hinted_pause_starts().await;
        let gap = next_hinted(&starts) - paused_at;
        assert!(gap >= Duration::from_millis(299), "the paused key started again {gap:?} after its answer");
    }
}

virtual_time! {
    async fn a_hinted_rate_spaces_its_key_and_not_the_other() {
        let (hinted, other) = hinted_rate_starts().await;
        for pair in hinted[4..].windows(2) {
            assert_eq!(pair[1] - pair[0], Duration::from_millis(50), "hinted starts");
        }
        let hinted_span = hinted[19] - hinted[0];
        let other_span = other[19] - other[0];
        // 4 at a time, 2 ms each: the key without hints took 5 rounds of its own.
        assert_eq!(other_span, Duration::from_millis(8), "the key without hints ran at the map's settings");
        assert!(hinted_span >= Duration::from_millis(50 * 15), "{hinted_span:?}");
    }

    async fn a_hinted_pause_holds_its_key_holding_no_slot() {
        let (starts, paused_at) = hinted_pause_starts().await;
        let next_hinted = next_hinted(&starts);
        assert_eq!(next_hinted - paused_at, Duration::from_millis(300), "paused exactly as long as told");
        // The one slot of the map went to the other key meanwhile: all its items ran
        // before the paused key's second.
        let others_during = starts.iter().filter(|(k, at)| *k == 1 && *at < next_hinted).count();
        assert_eq!(others_during, 10, "the other key used the slot while the first was paused");
    }
}
