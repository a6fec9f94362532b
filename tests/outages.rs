//! A host that is out for a while (a 503 with `Retry-After`: `Outcome::outage` with the
//! hint's pause) is waited for, and not mistaken for an overloaded one: its key pauses as
//! told and keeps the limit it had learned. A server that asks for a longer pause than a
//! map waits (`Hint::MAX_PAUSE`) is waited for that long at most, or, on a map with a
//! breaker per key, has its key's breaker opened.
//!
//! The servers are in the test and what is asserted is measured there. Everything here
//! depends on time (pauses, adaptation), so it runs on virtual time (`virtual_time!`: smol's
//! world on `run_virtual`, and tokio's paused clock), where a busy machine cannot change a
//! verdict.

mod common;

use std::future::Future;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::{InFlight, virtual_time};
use tollgate::testing::now;
use tollgate::{Adaptive, Breaker, CircuitBreakerError, Hint, Outcome, map_async, sleep};

/// How long the host of the first proof answers each attempt when it is up.
const WORK: Duration = Duration::from_millis(10);

/// What the server said.
#[derive(Debug)]
enum Error {
    /// 503 with `Retry-After` (its value is the hint's pause).
    Down,
    /// The key's breaker refused the attempt.
    Open,
}

impl From<CircuitBreakerError> for Error {
    fn from(_: CircuitBreakerError) -> Self {
        Error::Open
    }
}

/// A host that is down over `[down_from, down_until)` of the run (virtual time since `start`),
/// answering then at once with a 503 and `Retry-After: 1`; up, it answers after [`WORK`].
struct Host {
    start: Instant,
    down: (Duration, Duration),
    flight: InFlight,
    /// Every start: when, how many were in flight with it.
    starts: Mutex<Vec<(Duration, usize)>>,
    /// When each outage answer was sent.
    outages: Mutex<Vec<Duration>>,
}

impl Host {
    fn is_down(&self, at: Duration) -> bool {
        at >= self.down.0 && at < self.down.1
    }

    async fn fetch(&self) -> Result<(), Error> {
        let at = now() - self.start;
        let guard = self.flight.enter();
        self.starts.lock().unwrap().push((at, self.flight.now()));
        if self.is_down(at) {
            drop(guard);
            self.outages.lock().unwrap().push(at);
            return Err(Error::Down);
        }
        sleep(WORK).await;
        drop(guard);
        Ok(())
    }

    /// The most in flight at a start within `[from, to)`.
    fn peak(&self, from: Duration, to: Duration) -> usize {
        let starts = self.starts.lock().unwrap();
        starts
            .iter()
            .filter(|(at, _)| *at >= from && *at < to)
            .map(|(_, in_flight)| *in_flight)
            .max()
            .unwrap_or(0)
    }
}

/// An outage says when to come back: one second here.
fn classify(output: &Result<(), Error>) -> Outcome {
    match output {
        Ok(()) => Outcome::success(),
        Err(Error::Down) => Outcome::outage().with_hint(Hint::new().pause(Duration::from_secs(1))),
        Err(Error::Open) => Outcome::failure(),
    }
}

/// The second proofs' host: item 0 is refused with `Retry-After` of a day, the others are
/// served; each start is recorded (time since `start`).
fn refused_for_a_day(
    n: u32,
    start: Instant,
    starts: &Mutex<Vec<Duration>>,
) -> impl Future<Output = Result<(), Error>> {
    starts.lock().unwrap().push(now() - start);
    async move { if n == 0 { Err(Error::Down) } else { Ok(()) } }
}

/// The outcome of an answer of that host: its refusal asks for a day.
fn a_day(output: &Result<(), Error>) -> Outcome {
    match output {
        Err(Error::Down) => {
            Outcome::outage().with_hint(Hint::new().pause(Duration::from_secs(86_400)))
        }
        Err(Error::Open) => Outcome::failure(),
        Ok(()) => Outcome::success(),
    }
}

virtual_time! {
    async fn an_outage_pauses_its_key_and_cuts_nothing() {
        // One key, plenty of items: it climbs to its ceiling of 8 at once (every attempt
        // succeeds and keeps its whole limit busy), the host goes down for 3 s, comes back.
        let host = Host {
            start: now(),
            down: (Duration::from_secs(2), Duration::from_secs(5)),
            flight: InFlight::default(),
            starts: Mutex::new(Vec::new()),
            outages: Mutex::new(Vec::new()),
        };
        let outputs = map_async(0..2_000u32, 64, |_| host.fetch())
            .per_key(|_| 0u8, 8)
            .adaptive(Adaptive::new(1, 8), classify)
            .await;
        let ended = now() - host.start;
        let outages = host.outages.lock().unwrap().clone();
        let before = host.peak(Duration::from_millis(1_500), Duration::from_secs(2));
        let first_back = host
            .starts
            .lock()
            .unwrap()
            .iter()
            .map(|(at, _)| *at)
            .find(|at| *at >= Duration::from_secs(5))
            .expect("the key came back");
        // The first 100 ms back: a cut limit (0.7 of 8) would hold it at 5.
        let after = host.peak(first_back, first_back + Duration::from_millis(100));
        println!(
            "{} outage answers, peak {before} before the outage and {after} in the first \
             100 ms back (from {first_back:?}); ended at {ended:?}",
            outages.len()
        );
        assert_eq!(outputs.len(), 2_000, "every item answered");
        assert_eq!(before, 8, "the key had reached its ceiling");
        assert_eq!(after, before, "the outage cut the key's limit");
        // Each outage answer paused the key for its second: no start came within a second
        // of one (but the attempts it had under way, which answered at once too).
        let starts: Vec<Duration> = host.starts.lock().unwrap().iter().map(|(at, _)| *at).collect();
        for outage in &outages {
            let within = starts
                .iter()
                .filter(|at| **at > *outage && **at < *outage + Duration::from_secs(1))
                .count();
            assert_eq!(within, 0, "a start within the pause of the outage answer at {outage:?}");
        }
        // Three pauses of a second cover the outage: the key asked 4 times at most, each
        // time with its limit's worth of attempts.
        assert!(outages.len() <= 4 * 8, "{} outage answers", outages.len());
    }

    async fn a_pause_longer_than_a_map_waits_is_cut_to_the_most_it_waits() {
        // The host asks for a day; the map waits `Hint::MAX_PAUSE` and asks again.
        let start = now();
        let starts = Mutex::new(Vec::new());
        let outputs = map_async(0..3u32, 4, |n| refused_for_a_day(n, start, &starts))
            .per_key(|_| 0u8, 1)
            .classify(a_day)
            .await;
        let starts = starts.into_inner().unwrap();
        println!("starts at {starts:?}");
        assert_eq!(outputs.len(), 3);
        assert_eq!(
            starts,
            [Duration::ZERO, Hint::MAX_PAUSE, Hint::MAX_PAUSE],
            "the second item waited the longest pause a map waits, not a day"
        );
    }

    async fn a_pause_longer_than_a_map_waits_opens_the_keys_breaker() {
        // The same host, on a map with a breaker per key whose open keys' items fail: the
        // key's breaker opens, and its other items fail at once rather than wait.
        let start = now();
        let starts = Mutex::new(Vec::new());
        let outputs = map_async(0..3u32, 4, |n| refused_for_a_day(n, start, &starts))
            .per_key(|_| 0u8, 1)
            .classify(a_day)
            .breaker(Breaker::new())
            .await;
        let took = now() - start;
        let starts = starts.into_inner().unwrap();
        println!("outputs {outputs:?}, starts at {starts:?}, ended after {took:?}");
        assert!(matches!(outputs[0], Err(Error::Down)));
        assert!(
            outputs[1..].iter().all(|output| matches!(output, Err(Error::Open))),
            "the key's other items fail: {outputs:?}"
        );
        assert_eq!(starts, [Duration::ZERO], "nothing more was sent to the host");
        assert_eq!(took, Duration::ZERO, "no item waited");
    }
}
