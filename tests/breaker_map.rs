//! A circuit breaker per key inside a keyed map (`.breaker`, `.breaker_waiting`), under
//! smol, `run_sync` and tokio (current and multi-thread).
//!
//! The server is in the test: host 0 answers 503 to everything until it heals, host 1 is
//! always fine; items come from a lazy input, one every few milliseconds. What is asserted
//! is measured at the server and at the consumer: no attempt reaches the failing host
//! while its breaker is open, the items waiting for it end at once (fail mode) or run after
//! the recovery (wait mode), the probe closes the breaker and later items flow again, and
//! the other host never fails.

mod common;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::matrix;
use futures_lite::{Stream, StreamExt, stream};
use tollgate::{
    BoundedStreamExt, Breaker, BreakerState, CircuitOpen, MapControl, Outcome, RetryPolicy, sleep,
};

const ITEMS: u32 = 240;
/// The breaker opens on the failing host's 4th 503 (4 of 4 bad), for 300 ms.
const OPEN_FOR: Duration = Duration::from_millis(300);

#[derive(Debug)]
enum Error {
    Unavailable,
    Open(CircuitOpen),
}

impl From<CircuitOpen> for Error {
    fn from(open: CircuitOpen) -> Self {
        Error::Open(open)
    }
}

fn host(n: &u32) -> u32 {
    n % 2
}

fn classify(output: &Result<u32, Error>) -> Outcome {
    match output {
        Ok(_) => Outcome::success(),
        Err(Error::Unavailable) => Outcome::overload(),
        Err(Error::Open(_)) => Outcome::failure(),
    }
}

fn breaker() -> Breaker {
    Breaker::new()
        .min_attempts(4)
        .over_last(4)
        .open_for(OPEN_FOR)
}

/// The server: host 0 fails until 100 ms after its 4th 503 (while its breaker is open),
/// then heals (unless `never_heals`); every start is recorded.
#[derive(Default)]
struct Server {
    never_heals: bool,
    starts: Mutex<Vec<(u32, Instant)>>,
    /// When host 0 answered its 4th 503: its breaker opened then.
    opened: Mutex<Option<Instant>>,
    failures: Mutex<u32>,
}

impl Server {
    async fn fetch(&self, n: u32) -> Result<u32, Error> {
        self.starts.lock().unwrap().push((host(&n), Instant::now()));
        sleep(Duration::from_millis(2)).await;
        if host(&n) == 1 {
            return Ok(n);
        }
        let healed = !self.never_heals
            && self
                .opened
                .lock()
                .unwrap()
                .is_some_and(|opened| opened.elapsed() >= Duration::from_millis(100));
        if healed {
            return Ok(n);
        }
        let mut failures = self.failures.lock().unwrap();
        *failures += 1;
        if *failures == 4 {
            *self.opened.lock().unwrap() = Some(Instant::now());
        }
        Err(Error::Unavailable)
    }

    /// Starts at the failing host from its opening until shortly before its first probe.
    fn starts_while_open(&self) -> usize {
        let opened = self.opened.lock().unwrap().expect("the breaker opened");
        let quiet =
            opened + Duration::from_millis(1)..opened + OPEN_FOR - Duration::from_millis(50);
        self.starts
            .lock()
            .unwrap()
            .iter()
            .filter(|(host, at)| *host == 0 && quiet.contains(at))
            .count()
    }
}

/// Items 0..ITEMS, one every 3 ms (720 ms in all), recording when each was pulled.
fn lazy_input(pulled: &Mutex<Vec<Instant>>) -> impl Stream<Item = u32> + '_ {
    stream::unfold(0, move |n| async move {
        if n == ITEMS {
            return None;
        }
        sleep(Duration::from_millis(3)).await;
        pulled.lock().unwrap().push(Instant::now());
        Some((n, n + 1))
    })
}

/// A retry policy whose pauses are long: without the breaker, an item of the failing host
/// would wait a second per attempt.
fn retries() -> RetryPolicy<u32, Error> {
    RetryPolicy::new()
        .attempts(3)
        .jitter(0.0)
        .backoff(Duration::from_secs(1), 1.0, Duration::from_secs(1))
        .when(|error: &Error| matches!(error, Error::Unavailable))
}

matrix! {
    async fn an_open_key_fails_its_items_at_once_and_a_probe_lets_it_flow_again() {
        let server = Server::default();
        let pulled = Mutex::new(Vec::new());
        let control = MapControl::new();
        let (mut most_open, mut seen_open) = (0, false);
        let outputs: Vec<(u32, Result<u32, Error>, Instant)> = lazy_input(&pulled)
            .map_unordered(8, |n| server.fetch(n))
            .per_key(host, 1)
            .retry(retries())
            .classify(classify)
            .breaker(breaker())
            .control(&control)
            .indexed()
            .map(|(position, output)| {
                // What a watcher sees while it runs: the open key, and its breaker's state.
                most_open = most_open.max(control.progress().open_keys());
                seen_open |= control.busiest_keys(2).iter().any(|key| {
                    *key.key() == 0 && key.breaker() == Some(BreakerState::Open)
                });
                (position as u32, output, Instant::now())
            })
            .collect()
            .await;
        assert_eq!(most_open, 1, "one key open at most");
        assert!(seen_open, "the busiest keys showed the open breaker");
        let progress = control.progress();
        assert_eq!(progress.open_keys(), 0, "0 once the map ended");
        // Refused items count as attempts that ended at once: every figure adds up.
        assert_eq!(
            (progress.pulled(), progress.finished(), progress.not_started(), progress.cancelled()),
            (u64::from(ITEMS), u64::from(ITEMS), 0, 0),
            "{progress:?}"
        );
        assert_eq!(outputs.len(), ITEMS as usize);
        assert_eq!(server.starts_while_open(), 0, "no attempt reached the host while open");
        let pulled = pulled.into_inner().unwrap();
        let mut refused = 0;
        for (n, output, at) in &outputs {
            match output {
                Err(Error::Open(open)) => {
                    refused += 1;
                    assert_eq!(host(n), 0);
                    assert_eq!(open.key(), Some("0"));
                    assert!(open.probe_in() <= OPEN_FOR);
                    // Ended at once: not after its retry pauses (a second each).
                    let waited = *at - pulled[*n as usize];
                    assert!(waited < Duration::from_millis(900), "item {n} ended {waited:?} after it came");
                }
                Err(Error::Unavailable) => panic!("item {n} failed without the breaker"),
                Ok(_) => {}
            }
        }
        assert!(refused >= 10, "{refused} items refused while open");
        // The probe closed it: the failing host's later items flow.
        let last_of_host_0: Vec<_> = outputs.iter().filter(|(n, ..)| host(n) == 0).rev().take(10).collect();
        assert!(last_of_host_0.iter().all(|(_, output, _)| output.is_ok()), "flowing again after the probe");
        assert!(outputs.iter().filter(|(n, ..)| host(n) == 1).all(|(_, output, _)| output.is_ok()));
        println!("{refused} refused while open");
    }

    async fn an_open_key_in_wait_mode_holds_its_items_until_the_probe_closes_it() {
        let server = Server::default();
        let pulled = Mutex::new(Vec::new());
        let outputs: Vec<(u32, Result<u32, Error>)> = lazy_input(&pulled)
            .map_unordered(8, |n| server.fetch(n))
            .per_key(host, 1)
            .retry(retries())
            .classify(classify)
            .breaker_waiting(breaker())
            .indexed()
            .map(|(position, output)| (position as u32, output))
            .collect()
            .await;
        assert_eq!(outputs.len(), ITEMS as usize);
        assert_eq!(server.starts_while_open(), 0, "no attempt reached the host while open");
        // Every item ran in the end: the ones that failed before the opening on a retry
        // after the recovery, the ones that came meanwhile after the probe.
        for (n, output) in &outputs {
            assert!(output.is_ok(), "item {n}: {output:?}");
        }
    }

    async fn items_waiting_for_a_key_that_stays_down_end_at_once_not_after_their_pauses() {
        // The host never heals: probes fail, the breaker opens again and again. Items whose
        // attempt failed before an opening wait a second for their retry; they end at
        // once instead, as do the items that come while it is open.
        let server = Server { never_heals: true, ..Server::default() };
        let pulled = Mutex::new(Vec::new());
        let outputs: Vec<(u32, Result<u32, Error>, Instant)> = lazy_input(&pulled)
            .map_unordered(8, |n| server.fetch(n))
            .per_key(host, 1)
            .retry(retries())
            .classify(classify)
            .breaker(breaker())
            .indexed()
            .map(|(position, output)| (position as u32, output, Instant::now()))
            .collect()
            .await;
        assert_eq!(server.starts_while_open(), 0);
        let pulled = pulled.into_inner().unwrap();
        for (n, output, at) in outputs.iter().filter(|(n, ..)| host(n) == 0) {
            assert!(matches!(output, Err(Error::Open(_))), "item {n}: {output:?}");
            let waited = *at - pulled[*n as usize];
            assert!(waited < Duration::from_millis(900), "item {n} ended {waited:?} after it came");
        }
    }
}

/// Shared limits that grant every ask at once.
struct GrantAll;

impl tollgate::SharedLimits<u32> for GrantAll {
    type Permit = ();
    type Error = CircuitOpen;
    type Ask = std::future::Ready<tollgate::Answer<(), CircuitOpen>>;
    type Wake = std::future::Pending<()>;
    type Revoked = std::future::Pending<CircuitOpen>;
    fn ask(&self, _key: &u32) -> Self::Ask {
        std::future::ready(tollgate::Answer::Granted(()))
    }
    fn wake(&self, _key: &u32) -> Option<Self::Wake> {
        None
    }
    fn revoked(&self, _permit: &()) -> Option<Self::Revoked> {
        None
    }
}

#[test]
#[should_panic(expected = ".breaker and .shared_limits on one map are not supported yet")]
fn a_breaker_after_shared_limits_is_refused_with_a_clear_message() {
    let _map = tollgate::map_async(0..4u32, 2, |n| async move { Ok::<u32, Error>(n) })
        .per_key(host, 1)
        .shared_limits(GrantAll)
        .classify(classify)
        .breaker(breaker());
}

#[test]
#[should_panic(expected = ".breaker and .shared_limits on one map are not supported yet")]
fn shared_limits_after_a_breaker_are_refused_with_a_clear_message() {
    let _map = tollgate::map_async(0..4u32, 2, |n| async move { Ok::<u32, Error>(n) })
        .per_key(host, 1)
        .classify(classify)
        .breaker(breaker())
        .shared_limits(GrantAll);
}
