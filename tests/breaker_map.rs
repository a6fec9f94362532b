//! A circuit breaker per key inside a keyed map (`.breaker`, `.breaker_waiting`).
//!
//! The server is in the test: host 0 answers 503 to everything until it heals, host 1 is
//! always fine; items come from a lazy input, one every few milliseconds.
//!
//! Open periods, probes and "ended at once" are time, so they are proven on virtual time
//! (`virtual_time!`: smol's world on `run_virtual`, and tokio's paused clock), where timers
//! fire exactly at their deadlines: no attempt reaches the failing host from its opening
//! until the probe, which comes exactly `OPEN_FOR` after it; the items waiting for it end
//! at the instant it opens or comes (fail mode) or run after the probe (wait mode); the
//! probe closes the breaker and later items flow again.
//!
//! What holds at any speed is checked on every executor (`matrix!`: smol, `run_sync`,
//! tokio current and multi-thread) with the same scenarios: at most one key open, no key
//! open once the map ended, every figure adds up, nothing lost, a refusal names its key,
//! and the other host never fails. With shared limits (in-process, granting at once), in
//! either order and either mode, on virtual time: the failing host asks them for nothing
//! while its breaker is open, and no permit is held once the map ended.

mod common;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::{matrix, virtual_time};
use futures_lite::{Stream, StreamExt, stream};
use tollgate::testing::now;
use tollgate::{
    BoundedStreamExt, Breaker, BreakerState, CircuitBreakerError, MapControl, Outcome, Progress,
    RetryPolicy, sleep,
};

const ITEMS: u32 = 240;
/// The breaker opens on the failing host's 4th 503 (4 of 4 bad), for 300 ms.
const OPEN_FOR: Duration = Duration::from_millis(300);
/// A retry pause: without the breaker, an item of the failing host would wait this long
/// between attempts.
const PAUSE: Duration = Duration::from_secs(1);

#[derive(Debug)]
enum Error {
    Unavailable,
    Open(CircuitBreakerError),
}

impl From<CircuitBreakerError> for Error {
    fn from(open: CircuitBreakerError) -> Self {
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
/// then heals (unless `never_heals`); every start is recorded, on tollgate's clock.
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
        self.starts.lock().unwrap().push((host(&n), now()));
        sleep(Duration::from_millis(2)).await;
        if host(&n) == 1 {
            return Ok(n);
        }
        let healed = !self.never_heals
            && self
                .opened
                .lock()
                .unwrap()
                .is_some_and(|opened| now() - opened >= Duration::from_millis(100));
        if healed {
            return Ok(n);
        }
        let mut failures = self.failures.lock().unwrap();
        *failures += 1;
        if *failures == 4 {
            *self.opened.lock().unwrap() = Some(now());
        }
        Err(Error::Unavailable)
    }

    fn opened(&self) -> Instant {
        self.opened.lock().unwrap().expect("the breaker opened")
    }

    /// The failing host's starts after its (first) opening, in order.
    fn starts_after_opening(&self) -> Vec<Instant> {
        let opened = self.opened();
        let starts = self.starts.lock().unwrap();
        starts
            .iter()
            .filter(|(host, at)| *host == 0 && *at > opened)
            .map(|(_, at)| *at)
            .collect()
    }
}

/// Items 0..ITEMS, one every 3 ms (720 ms in all), recording when each was pulled.
fn lazy_input(pulled: &Mutex<Vec<Instant>>) -> impl Stream<Item = u32> + '_ {
    stream::unfold(0, move |n| async move {
        if n == ITEMS {
            return None;
        }
        sleep(Duration::from_millis(3)).await;
        pulled.lock().unwrap().push(now());
        Some((n, n + 1))
    })
}

/// A retry policy whose pauses are long: without the breaker, an item of the failing host
/// would wait `PAUSE` per attempt.
fn retries() -> RetryPolicy<u32, Error> {
    RetryPolicy::new()
        .attempts(3)
        .jitter(0.0)
        .backoff(PAUSE, 1.0, PAUSE)
        .when(|error: &Error| matches!(error, Error::Unavailable))
}

/// One run of a map through the server: each output with when it reached the consumer.
struct Run {
    server: Server,
    pulled: Vec<Instant>,
    outputs: Vec<(u32, Result<u32, Error>, Instant)>,
    /// The most keys open a watcher saw while it ran, and whether the busiest keys ever
    /// showed host 0's breaker open.
    most_open: u64,
    seen_open: bool,
    progress: Progress,
}

impl Run {
    /// The items of the failing host that came strictly inside its first open period.
    fn came_while_open(&self) -> Vec<u32> {
        let opened = self.server.opened();
        (0..ITEMS)
            .filter(|n| host(n) == 0)
            .filter(|n| {
                let at = self.pulled[*n as usize];
                at > opened && at < opened + OPEN_FOR
            })
            .collect()
    }

    /// What holds at any speed, for both modes; `longest_open` bounds the open periods
    /// (each failed probe doubles the next one).
    fn check_speed_independent(&self, longest_open: Duration) {
        assert_eq!(self.outputs.len(), ITEMS as usize, "nothing lost");
        assert!(
            self.most_open <= 1,
            "one key open at most ({})",
            self.most_open
        );
        let progress = self.progress;
        assert_eq!(progress.open_keys(), 0, "0 once the map ended");
        // Refused items count as attempts that ended at once: every figure adds up.
        assert_eq!(
            (
                progress.pulled(),
                progress.finished(),
                progress.not_started(),
                progress.cancelled()
            ),
            (u64::from(ITEMS), u64::from(ITEMS), 0, 0),
            "{progress:?}"
        );
        for (n, output, _) in &self.outputs {
            if let Err(Error::Open(open)) = output {
                assert_eq!(host(n), 0, "item {n}: only the failing host opens");
                assert_eq!(open.key(), Some("0"));
                assert!(open.retry_after() <= longest_open, "item {n}: {open:?}");
            }
        }
        assert!(
            self.outputs
                .iter()
                .filter(|(n, ..)| host(n) == 1)
                .all(|(_, output, _)| output.is_ok()),
            "the other host never fails"
        );
    }
}

/// Fail mode: items of an open key end at once with `CircuitBreakerError`.
async fn fail_mode(never_heals: bool) -> Run {
    let server = Server {
        never_heals,
        ..Server::default()
    };
    let pulled = Mutex::new(Vec::new());
    let control = MapControl::new();
    let (mut most_open, mut seen_open) = (0, false);
    let outputs = lazy_input(&pulled)
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
            seen_open |= control
                .busiest_keys(2)
                .iter()
                .any(|key| *key.key() == 0 && key.breaker() == Some(BreakerState::Open));
            (position as u32, output, now())
        })
        .collect()
        .await;
    let progress = control.progress();
    Run {
        server,
        pulled: pulled.into_inner().unwrap(),
        outputs,
        most_open,
        seen_open,
        progress,
    }
}

/// Wait mode: items of an open key wait, holding no slot, until a probe closes it.
async fn wait_mode() -> Run {
    let server = Server::default();
    let pulled = Mutex::new(Vec::new());
    let control = MapControl::new();
    let mut most_open = 0;
    let outputs = lazy_input(&pulled)
        .map_unordered(8, |n| server.fetch(n))
        .per_key(host, 1)
        .retry(retries())
        .classify(classify)
        .breaker_waiting(breaker())
        .control(&control)
        .indexed()
        .map(|(position, output)| {
            most_open = most_open.max(control.progress().open_keys());
            (position as u32, output, now())
        })
        .collect()
        .await;
    let progress = control.progress();
    let seen_open = most_open > 0;
    Run {
        server,
        pulled: pulled.into_inner().unwrap(),
        outputs,
        most_open,
        seen_open,
        progress,
    }
}

/// Host 0's items come one every 6 ms (items every 3 ms, every other one its own).
const HOST_0_EVERY: Duration = Duration::from_millis(6);

/// The probe: the failing host's first start after its opening. It is the first of its
/// items to come once the open period is over; none started before.
fn probe(run: &Run) -> Instant {
    let opened = run.server.opened();
    let probe = run.server.starts_after_opening()[0];
    assert!(
        probe >= opened + OPEN_FOR && probe < opened + OPEN_FOR + HOST_0_EVERY,
        "no attempt reached the host while open; the probe came {:?} after the opening",
        probe - opened
    );
    probe
}

matrix! {
    async fn an_open_key_fails_its_items_and_every_figure_adds_up_at_any_speed() {
        let run = fail_mode(false).await;
        run.check_speed_independent(OPEN_FOR);
    }

    async fn an_open_key_in_wait_mode_loses_nothing_at_any_speed() {
        let run = wait_mode().await;
        run.check_speed_independent(OPEN_FOR);
    }

    async fn a_key_that_stays_down_never_answers_and_every_figure_adds_up_at_any_speed() {
        let run = fail_mode(true).await;
        // However slow the machine, the open period doubles 4 times at most.
        run.check_speed_independent(OPEN_FOR * 16);
        for (n, output, _) in run.outputs.iter().filter(|(n, ..)| host(n) == 0) {
            assert!(output.is_err(), "item {n}: {output:?}");
        }
    }
}

virtual_time! {
    async fn an_open_key_fails_its_items_at_once_and_a_probe_lets_it_flow_again() {
        let run = fail_mode(false).await;
        run.check_speed_independent(OPEN_FOR);
        assert_eq!(run.most_open, 1, "one key open at most");
        assert!(run.seen_open, "the busiest keys showed the open breaker");
        let (opened, probe) = (run.server.opened(), probe(&run));
        let mut by_item: Vec<_> = run.outputs.iter().collect();
        by_item.sort_by_key(|(n, ..)| *n);
        let mut refused = 0;
        for (n, output, at) in &run.outputs {
            match output {
                Err(Error::Open(open)) => {
                    refused += 1;
                    assert_eq!(open.retry_after(), opened + OPEN_FOR - *at, "item {n}: the probe's time");
                    // Ended at once: when it came (while open), or at the opening (it was
                    // waiting for a retry pause of a second then).
                    let came = run.pulled[*n as usize];
                    assert_eq!(*at, came.max(opened), "item {n} ended {:?} after it came", *at - came);
                }
                Err(Error::Unavailable) => panic!("item {n} failed without the breaker"),
                Ok(_) => {}
            }
        }
        // Every item of the host that came while open was refused: one every 6 ms for
        // 300 ms.
        let came_while_open = run.came_while_open();
        assert_eq!(came_while_open.len(), 50);
        for n in &came_while_open {
            assert!(matches!(by_item[*n as usize].1, Err(Error::Open(_))), "item {n} came while open");
        }
        assert!(refused >= came_while_open.len(), "{refused} refused");
        // The probe closed it: every later item of the failing host flows.
        for (n, output, _) in by_item.iter().filter(|(n, ..)| host(n) == 0) {
            if run.pulled[*n as usize] >= probe {
                assert!(output.is_ok(), "item {n} came after the probe: {output:?}");
            }
        }
        println!("{refused} refused while open");
    }

    async fn an_open_key_in_wait_mode_holds_its_items_until_the_probe_closes_it() {
        let run = wait_mode().await;
        run.check_speed_independent(OPEN_FOR);
        assert_eq!(run.most_open, 1, "one key open at most");
        let probe = probe(&run);
        // Every item ran in the end: the ones that failed before the opening on a retry
        // after the recovery, the ones that came meanwhile after the probe.
        for (n, output, _) in &run.outputs {
            assert!(output.is_ok(), "item {n}: {output:?}");
        }
        // An item that came while open waited for the probe's answer (2 ms of work).
        let came_while_open = run.came_while_open();
        assert_eq!(came_while_open.len(), 50);
        for (n, _, at) in run.outputs.iter().filter(|(n, ..)| came_while_open.contains(n)) {
            assert!(*at >= probe + Duration::from_millis(2), "item {n} ended before the probe closed it");
        }
    }

    async fn items_waiting_for_a_key_that_stays_down_end_at_once_not_after_their_pauses() {
        // The host never heals: the probe fails, the breaker opens again, for twice as long
        // (600 ms: past the input's end). Items whose attempt failed before an opening wait
        // a second for their retry; they end at once instead, as do the items that come
        // while it is open.
        let run = fail_mode(true).await;
        // One failed probe: the second open period is twice the first.
        run.check_speed_independent(OPEN_FOR * 2);
        let (opened, probe) = (run.server.opened(), probe(&run));
        assert_eq!(run.server.starts_after_opening(), [probe], "one probe, then open again");
        for (n, output, at) in run.outputs.iter().filter(|(n, ..)| host(n) == 0) {
            assert!(matches!(output, Err(Error::Open(_))), "item {n}: {output:?}");
            let came = run.pulled[*n as usize];
            // At its coming or at the opening; the probe when its attempt failed (2 ms).
            let ended_at = if came == probe { probe + Duration::from_millis(2) } else { came.max(opened) };
            assert_eq!(*at, ended_at, "item {n} ended {:?} after it came", *at - came);
        }
    }
}
/// Shared limits that grant every ask at once, noting when each of host 0's asks came and
/// how many permits are held.
#[derive(Default)]
struct GrantCounting {
    asks_of_host_0: Mutex<Vec<Instant>>,
    held: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

/// A permit of [`GrantCounting`]: held until dropped.
struct Counted(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl tollgate::SharedLimits<u32> for &GrantCounting {
    type Permit = Counted;
    type Error = CircuitBreakerError;
    type Ask = std::future::Ready<tollgate::Answer<Counted, CircuitBreakerError>>;
    type Wake = std::future::Pending<()>;
    type Revoked = std::future::Pending<CircuitBreakerError>;
    fn ask(&self, key: &u32) -> Self::Ask {
        if *key == 0 {
            self.asks_of_host_0.lock().unwrap().push(now());
        }
        self.held.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        std::future::ready(tollgate::Answer::Granted(Counted(std::sync::Arc::clone(
            &self.held,
        ))))
    }
    fn wake(&self, _key: &u32) -> Option<Self::Wake> {
        None
    }
    fn revoked(&self, _permit: &Counted) -> Option<Self::Revoked> {
        None
    }
}

/// Checks a run of a map with shared limits and a breaker: nothing lost, the failing host
/// asked the limits for nothing while its breaker was open, no permit held at the end.
fn check_breaker_on_shared_limits(
    server: &Server,
    limits: &GrantCounting,
    outputs: &[Result<u32, Error>],
) {
    assert_eq!(outputs.len(), 40, "every item ended");
    assert!(
        outputs.iter().filter(|output| output.is_ok()).count() >= 20,
        "the other host's items all succeeded: {outputs:?}"
    );
    let opened = server.opened();
    let asked_while_open: Vec<Duration> = limits
        .asks_of_host_0
        .lock()
        .unwrap()
        .iter()
        .filter(|&&at| at >= opened && at < opened + OPEN_FOR)
        .map(|&at| at - opened)
        .collect();
    assert!(
        asked_while_open.is_empty(),
        "host 0 asked while its breaker was open: {asked_while_open:?} after the opening"
    );
    assert_eq!(
        limits.held.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "no permit left"
    );
}

virtual_time! {
    async fn a_breaker_after_shared_limits_asks_for_nothing_while_open_and_keeps_no_permit() {
        let (server, limits) = (Server::default(), GrantCounting::default());
        let outputs: Vec<Result<u32, Error>> = stream::iter(0..40u32)
            .map_unordered(4, |n| server.fetch(n))
            .per_key(host, 1)
            .shared_limits(&limits)
            .classify(classify)
            .breaker(breaker())
            .collect()
            .await;
        check_breaker_on_shared_limits(&server, &limits, &outputs);
        assert!(outputs.iter().any(|output| matches!(output, Err(Error::Open(_)))), "some items were refused");
    }

    async fn shared_limits_after_a_waiting_breaker_ask_for_nothing_while_open_and_keep_no_permit() {
        let (server, limits) = (Server::default(), GrantCounting::default());
        let outputs: Vec<Result<u32, Error>> = stream::iter(0..40u32)
            .map_unordered(4, |n| server.fetch(n))
            .per_key(host, 1)
            .classify(classify)
            .breaker_waiting(breaker())
            .shared_limits(&limits)
            .collect()
            .await;
        check_breaker_on_shared_limits(&server, &limits, &outputs);
        assert_eq!(outputs.iter().filter(|output| output.is_err()).count(), 4, "only the four failures before the opening: {outputs:?}");
    }
}
