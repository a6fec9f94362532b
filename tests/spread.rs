//! Keys due at the same moment do not start in lockstep (the spread), and what that is worth
//! against strict servers on real sockets:
//!
//! - without sockets, on virtual time (`virtual_time!`: `run_virtual` and tokio's paused
//!   clock): 20 hosts at the same rate start exactly 1 ms apart, each exactly at its rate;
//!   under every runtime (smol, `run_sync`, tokio current and multi-thread), what holds at
//!   any speed: every start made, none ahead of its key's rate (how many keys start
//!   together there is a printed figure);
//! - the loopback server's meter with no allowance at all (a request a nanosecond early is
//!   refused with `429` and `Retry-After: 1`, which pauses the host): 20 hosts x 20 pages,
//!   crawled at exactly its rate and with 5% headroom;
//! - nginx's `limit_req` without burst (an nginx of the test's own on loopback): 6 hosts x
//!   40 pages at exactly its rate; and nginx changing a host's rate while it runs.
//!
//! Against the strict servers the figures are the measurement (printed: `--nocapture`): at
//! exactly a server's rate, whether a request arrives a little early is decided by the
//! path's jitter against the client's slack, which on a busy machine no scheduler controls.
//! What is asserted there holds at any speed: every page once, and nginx refusing a request
//! exactly when its log shows it came sooner than the host's new rate allows.
//! The crawls take seconds of real time, so they run one at a time (a lock), not beside
//! each other.

mod common;
use tollgate_testkit::{http_client, http_server, nginx};

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{matrix, virtual_time};
use http_client::{ClientError, get_ok};
use http_server::TestServer;
use nginx::Nginx;
use tollgate::testing::{eventually, now};
use tollgate::{Rate, RetryPolicy, map_async};

/// One crawl at a time: each is a timing measurement.
static ONE_AT_A_TIME: smol::lock::Mutex<()> = smol::lock::Mutex::new(());

fn host_of(url: &str) -> String {
    url.split('/').nth(2).unwrap_or_default().to_owned()
}

/// The mean number of keys (itself included) with a start within `window` of each start.
/// 1 when no two keys start together; the number of keys when all start in lockstep.
fn keys_together<K: Eq + std::hash::Hash>(starts: &[(Instant, K)], window: Duration) -> f64 {
    let mut sorted: Vec<&(Instant, K)> = starts.iter().collect();
    sorted.sort_by_key(|(at, _)| *at);
    let mut sum = 0;
    for (i, (at, _)) in sorted.iter().enumerate() {
        let near =
            |(other, _): &&&(Instant, K)| at.max(other).duration_since(*at.min(other)) <= window;
        let before = sorted[..i].iter().rev().take_while(near);
        let after = sorted[i..].iter().take_while(near);
        let keys: HashSet<&K> = before.chain(after).map(|(_, key)| key).collect();
        sum += keys.len();
    }
    sum as f64 / sorted.len().max(1) as f64
}

/// Each key's starts, in order.
fn by_key<K: Eq + std::hash::Hash + Clone>(starts: &[(Instant, K)]) -> HashMap<K, Vec<Instant>> {
    let mut keys: HashMap<K, Vec<Instant>> = HashMap::new();
    for (at, key) in starts {
        keys.entry(key.clone()).or_default().push(*at);
    }
    for times in keys.values_mut() {
        times.sort();
    }
    keys
}

/// Runs `pages` items for each of `keys` keys at `rate`, each item taking `work`, and
/// returns when each started (its key, the instant the map called the function).
async fn starts(keys: usize, pages: usize, rate: Rate, work: Duration) -> Vec<(Instant, usize)> {
    let log = Arc::new(Mutex::new(Vec::new()));
    let logged = Arc::clone(&log);
    let work = move |item: usize| {
        logged.lock().unwrap().push((now(), item % keys));
        tollgate::sleep(work)
    };
    map_async(0..keys * pages, 64, work)
        .per_key(move |item| item % keys, 2)
        .per_key_rate(rate)
        .await;
    log.lock().unwrap().clone()
}

/// Retries 429s as long as the server says (`Retry-After`), pausing the whole host.
fn honour_retry_after() -> RetryPolicy<String, ClientError> {
    let too_many = |error: &ClientError| {
        (error.status() == Some(429)).then(|| error.retry_after().unwrap_or(Duration::from_secs(1)))
    };
    RetryPolicy::new()
        .attempts(50)
        .interval(Duration::from_millis(1))
        .when(|error: &ClientError| error.status() == Some(429))
        .retry_after(ClientError::retry_after)
        .pause_key(too_many)
}

/// What a crawl measured.
#[derive(Debug)]
struct Crawl {
    time: Duration,
    /// Requests the server refused (`429`).
    refused: usize,
    requests: usize,
    /// The mean number of hosts with a request within 0.5 ms of each request, on the server.
    together: f64,
}

/// The strict meter's hosts, and the pages of each.
const STRICT_HOSTS: usize = 20;
/// A second of crawling at the meter's rate: the 429s (each pausing its host for a second)
/// show in the printed figures, and the assertion (every page once) needs no more.
const STRICT_PAGES: usize = 20;

/// [`STRICT_HOSTS`] hosts metered at exactly 20/s with no allowance, [`STRICT_PAGES`] pages
/// each, crawled at `rate`.
async fn strict_crawl(rate: Rate) -> Crawl {
    const HOSTS: usize = STRICT_HOSTS;
    const PAGES: usize = STRICT_PAGES;
    let server = (0..HOSTS)
        .fold(TestServer::builder(), |builder, host| {
            builder.host(&format!("h{host}"), Duration::from_millis(2))
        })
        .rate_limit(20.0, 1)
        .rate_allowance(Duration::ZERO)
        .start();
    let urls: Vec<String> = (0..HOSTS * PAGES)
        .map(|i| server.url(&format!("h{}", i % HOSTS), &format!("/{i}")))
        .collect();
    let started = Instant::now();
    let pages = map_async(urls, 64, get_ok)
        .per_key(|url| host_of(url), 2)
        .per_key_rate(rate)
        .retry(honour_retry_after())
        .await;
    let time = started.elapsed();
    assert!(
        pages.iter().all(Result::is_ok),
        "{:?}",
        pages.iter().find(|page| page.is_err())
    );
    let arrivals: Vec<(Instant, String)> = server
        .hosts()
        .flat_map(|host| {
            server
                .arrival_times(host)
                .into_iter()
                .map(move |at| (at, host.to_owned()))
        })
        .collect();
    let global = server.global();
    server.shutdown();
    Crawl {
        time,
        refused: global.too_many,
        requests: global.requests,
        together: keys_together(&arrivals, Duration::from_micros(500)),
    }
}

matrix! {
    // The lock makes a test wait for the others' crawls: minutes, on a busy machine.
    deadline = Duration::from_secs(900);

    async fn keys_due_together_are_never_ahead_of_their_rate() {
        let begin = now();
        let starts = starts(20, 12, Rate::per_second(20), Duration::from_millis(2)).await;
        let keys = by_key(&starts);
        assert_eq!(keys.len(), 20);
        for (key, times) in &keys {
            assert_eq!(times.len(), 12);
            // The nth start of a key comes n intervals (50 ms) after the beginning at the
            // earliest, at any speed.
            for (n, at) in times.iter().enumerate() {
                let since = *at - begin;
                let earliest = Duration::from_millis(50) * n as u32;
                assert!(since >= earliest, "key {key}: start {n} at {since:?}");
            }
        }
        // The spread itself is proven exactly on virtual time; here, a figure. The first
        // starts of fresh keys come together; every later one was woken for its rate: in
        // lockstep each start would have all 20 keys with it, spread 1 ms apart 1.2 to 2.
        let first = keys.values().map(|times| times[0]).max().unwrap();
        let woken: Vec<_> = starts.iter().filter(|(at, _)| *at > first).cloned().collect();
        let together = keys_together(&woken, Duration::from_micros(500));
        eprintln!("figure: {together:.2} keys start within 0.5 ms of each start (1 to 20)");
    }

    async fn exactly_a_strict_meters_rate_and_with_headroom() {
        let _one = ONE_AT_A_TIME.lock().await;
        let exact = strict_crawl(Rate::per_second(20)).await;
        let headroom = strict_crawl(Rate::per_second(19)).await;
        for (crawl, what) in [(&exact, "exactly its rate"), (&headroom, "5% headroom")] {
            println!(
                "strict meter, client at {what}: {} of {} refused ({:.1}%), {:.2} s, {:.2} hosts within 0.5 ms",
                crawl.refused,
                crawl.requests,
                100.0 * crawl.refused as f64 / crawl.requests as f64,
                crawl.time.as_secs_f64(),
                crawl.together,
            );
        }
        println!("time at exactly the rate: {:.2}x the time with headroom", exact.time.as_secs_f64() / headroom.time.as_secs_f64());
        // The figures are the measurement: on loopback the path's jitter (0.1-0.4 ms, with
        // tails of several ms on a busy machine) is more than the slack a client at exactly
        // the rate has (its timer's lateness), so whether a request is a nanosecond early
        // is the machine's draw, and each 429 pauses its host for a second.
        for crawl in [&exact, &headroom] {
            assert_eq!(
                crawl.requests - crawl.refused,
                STRICT_HOSTS * STRICT_PAGES,
                "every page once: {crawl:?}"
            );
        }
    }

    async fn exactly_nginxs_rate() {
        let _one = ONE_AT_A_TIME.lock().await;
        const HOSTS: [&str; 6] = ["a", "b", "c", "d", "e", "f"];
        const PAGES: usize = 40;
        let nginx = Nginx::start(&HOSTS.map(|host| (host, 20)));
        let urls: Vec<String> =
            (0..HOSTS.len() * PAGES).map(|i| nginx.url(HOSTS[i % HOSTS.len()], &format!("/{i}"))).collect();
        // nginx sends no Retry-After: a refused request is tried again 50 ms later.
        let policy = RetryPolicy::new()
            .attempts(50)
            .interval(Duration::from_millis(50))
            .jitter(0.0)
            .when(|error: &ClientError| error.status() == Some(429));
        let started = Instant::now();
        let pages = map_async(urls, 64, get_ok)
            .per_key(|url| host_of(url), 2)
            .per_key_rate(Rate::per_second(20))
            .retry(policy)
            .await;
        let time = started.elapsed();
        assert!(pages.iter().all(Result::is_ok), "{:?}", pages.iter().find(|page| page.is_err()));
        // nginx logs a request after its answer went out: wait for the last lines.
        let all_logged = || {
            let logged: Vec<_> = HOSTS.iter().flat_map(|host| nginx.statuses(host)).collect();
            logged.iter().filter(|line| line.status == 200).count() == HOSTS.len() * PAGES
        };
        eventually(Duration::from_secs(30), all_logged).await.unwrap();
        let logged: Vec<_> = HOSTS.iter().flat_map(|host| nginx.statuses(host)).collect();
        let refused = logged.iter().filter(|line| line.status == 429).count();
        let ideal = PAGES as f64 / 20.0;
        println!(
            "nginx, client at exactly its rate: {refused} of {} refused, {:.3} s for an ideal of {ideal} s",
            logged.len(),
            time.as_secs_f64()
        );
        assert_eq!(logged.len() - refused, HOSTS.len() * PAGES);
    }

    async fn nginx_changes_a_hosts_rate_while_it_runs() {
        let _one = ONE_AT_A_TIME.lock().await;
        let nginx = Nginx::start(&[("a", 20), ("b", 20)]);
        let pair = |host: &'static str, apart: Duration| {
            let (first, second) = (nginx.url(host, "/1"), nginx.url(host, "/2"));
            async move {
                let first = http_client::get(&first).await.expect("nginx answers").status;
                tollgate::sleep(apart).await;
                let second = http_client::get(&second).await.expect("nginx answers").status;
                (first, second)
            }
        };
        // The second request leaves 75 ms after the first one's answer came back: never
        // sooner than 20/s allows, and (even on a busy machine) sooner than 2/s allows.
        assert_eq!(pair("a", Duration::from_millis(75)).await, (200, 200));
        nginx.set_rate("a", 2);
        assert_eq!(nginx.rate("a"), 2);
        tollgate::sleep(Duration::from_millis(600)).await;
        let (first, second) = pair("a", Duration::from_millis(75)).await;
        assert_eq!(first, 200, "600 ms after the last request, within 2/s");
        assert_eq!(pair("b", Duration::from_millis(75)).await, (200, 200), "only host a changed");
        // nginx logs a request after its answer went out: wait for the fourth line.
        eventually(Duration::from_secs(30), || nginx.statuses("a").len() >= 4).await.unwrap();
        let logged = nginx.statuses("a");
        assert_eq!(logged.len(), 4);
        assert_eq!(logged[3].status, second);
        // At 2/s nginx refuses a request within 500 ms of the last one it let through. The
        // second left 75 ms after the first's answer: sooner, unless the machine stalled
        // (then nginx let it through, rightly). Judged by nginx's log (millisecond
        // resolution: within 2 ms of the limit, either answer is right).
        let gap = logged[3].at - logged[2].at;
        eprintln!("figure: the second request to host a came {:.0} ms after the first", gap * 1e3);
        if gap < 0.498 {
            assert_eq!(second, 429, "a request {gap:.3} s after the last was let through at 2/s");
        } else if gap > 0.502 {
            assert_eq!(second, 200, "a request {gap:.3} s after the last was refused at 2/s");
        }
        let refused = logged.iter().filter(|line| line.status == 429).count();
        assert_eq!(refused, usize::from(second == 429), "{logged:?}");
    }
}

virtual_time! {
    async fn keys_due_together_start_exactly_one_ms_apart_and_each_exactly_at_its_rate() {
        let begin = now();
        let starts = starts(20, 10, Rate::per_second(20), Duration::from_millis(2)).await;
        let ms = Duration::from_millis;
        for (key, times) in by_key(&starts) {
            // Fresh keys start at once; woken for their rate, key k comes k ms after the
            // first, and every key keeps exactly its rate from then on.
            let times: Vec<Duration> = times.iter().map(|at| *at - begin).collect();
            let at = |n: u64| if n == 0 { ms(0) } else { ms(50 * n) + ms(key as u64) };
            assert_eq!(times, (0..10).map(at).collect::<Vec<_>>(), "key {key}");
        }
    }
}
