//! Polite crawling on real sockets, judged by the loopback server: its hosts meter their
//! rate and answer `429` with `Retry-After` to a client that is too fast, and log when every
//! request arrived. Under every runtime (smol, `run_sync`, tokio current and multi-thread).
//!
//! Real sockets run on real time, so these tests assert only what holds at any speed,
//! measured at the server; how fast the crawl went is a printed figure (`--nocapture`):
//!
//! - a crawl configured at the hosts' rate loses no page, and gets no more arrivals in any
//!   window of a second or more than the rate and burst allow, widened by how much the
//!   requests' delays from start to arrival varied (the rate it reached, and the `429`s its
//!   arrivals earned where a busy machine bunched them past the meter's allowance, are
//!   figures);
//! - a host that answers `429 Retry-After: 1` gets no request for that second (how many
//!   requests the other host got meanwhile is a figure);
//! - with a flaky host, retries wait without holding slots: a steady host's requests
//!   arrive before the flaky host's retries, and the retries not before the pause is over
//!   (how many steady requests arrived during the pause is a figure);
//! - a hedged mirror race sends the second request only when the first mirror is slow, and
//!   after it (the gap is a figure).
//!
//! The timing itself (key pauses exactly their length while other keys go on: see
//! tests/schedule.rs) is proven on virtual time, and here the hedge: the second contestant
//! starts exactly at the hedge delay.

mod common;
use tollgate_testkit::{http_client, http_server};

use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::{matrix, virtual_time};
use http_client::{ClientError, get_ok};
use http_server::{TestServer, achieved_rate, count_between, max_in_window, window_limit};
use tollgate::testing::now;
use tollgate::{Rate, RetryPolicy, map_async, race, sleep};

fn host_of(url: &str) -> String {
    url.split('/').nth(2).unwrap_or_default().to_owned()
}

/// The policy a polite crawler uses: retry 429s and 503s, as long as the server says, and
/// let a 429 pause the whole host.
fn polite_policy() -> RetryPolicy<String, ClientError> {
    let too_many = |error: &ClientError| {
        (error.status() == Some(429)).then(|| error.retry_after().unwrap_or(Duration::from_secs(1)))
    };
    RetryPolicy::new()
        .attempts(4)
        .interval(Duration::from_millis(1))
        .when(|error: &ClientError| matches!(error.status(), Some(429 | 503)))
        .retry_after(ClientError::retry_after)
        .pause_key(too_many)
}

matrix! {
    async fn a_crawl_at_the_hosts_rate_never_outruns_it_at_the_server() {
        const RATE: u32 = 20;
        let hosts = ["a", "b", "c", "d"];
        let server = hosts
            .iter()
            .fold(TestServer::builder(), |builder, host| builder.host(host, Duration::from_millis(2)))
            // Bursts of 2 on both sides; arrivals may come up to 60 ms early.
            .rate_limit(f64::from(RATE), 2)
            .rate_allowance(Duration::from_millis(60))
            .start();
        let urls: Vec<String> = (0..120).map(|i| server.url(hosts[i % 4], &format!("/{i}"))).collect();
        // Every attempt's start, as the map made it.
        let started: Mutex<Vec<(String, Instant)>> = Mutex::new(Vec::new());
        let pages = map_async(urls, 8, |url: String| {
            started.lock().unwrap().push((url.clone(), now()));
            get_ok(url)
        })
        .per_key(|url| host_of(url), 2)
        .per_key_rate(Rate::per_second(RATE).burst(2))
        // A late connection can bunch two arrivals past the meter's allowance on a busy
        // machine: its 429 is retried as a polite crawler would, and counted as a figure.
        .retry(polite_policy())
        .await;
        assert!(pages.iter().all(Result::is_ok), "{:?}", pages.iter().find(|page| page.is_err()));
        let started = started.into_inner().unwrap();
        for host in hosts {
            let arrivals = server.arrivals(host);
            assert!(arrivals.len() >= 30, "{host}: {} arrivals", arrivals.len());
            assert_eq!(arrivals.iter().filter(|arrival| arrival.status == Some(200)).count(), 30, "{host}");
            // Each arrival's delay since its attempt's start (the n-th arrival of a path
            // is its n-th attempt). The starts keep the rate; arrivals shift by their delays,
            // so in any window W they are at most what the rate allows in W plus the spread
            // of those delays, however slow the machine was.
            let addr = server.addr(host).to_string();
            let mut starts: Vec<(String, Instant)> = started
                .iter()
                .filter(|(url, _)| host_of(url) == addr)
                .map(|(url, at)| (url.trim_start_matches(&format!("http://{addr}")).to_owned(), *at))
                .collect();
            // (Seen once in many busy runs: one start more than arrivals, every page fine. The
            // message names them, to tell a start the server never accepted from one the map
            // dropped.)
            assert_eq!(
                starts.len(),
                arrivals.len(),
                "{host}: every attempt arrived, once; starts {:?}; arrivals {:?}; server {:?}",
                starts.iter().map(|(path, _)| path.as_str()).collect::<Vec<_>>(),
                arrivals
                    .iter()
                    .map(|arrival| (arrival.path.as_deref(), arrival.status))
                    .collect::<Vec<_>>(),
                server.stats(host),
            );
            let delays: Vec<Duration> = arrivals
                .iter()
                .map(|arrival| {
                    let path = arrival.path.as_deref().expect("every request's head was read");
                    let first = starts.iter().position(|(url, _)| url == path).expect("an attempt of this path");
                    arrival.at.saturating_duration_since(starts.remove(first).1)
                })
                .collect();
            let spread = *delays.iter().max().unwrap() - *delays.iter().min().unwrap();
            let times: Vec<Instant> = arrivals.iter().map(|arrival| arrival.at).collect();
            for window in [Duration::from_secs(1), Duration::from_millis(1_400)] {
                let most = max_in_window(&times, window);
                let allowed = window_limit(f64::from(RATE), 2, window + spread);
                assert!(most <= allowed, "{host}: {most} arrivals in {window:?}, {allowed} allowed (delays spread {spread:?})");
            }
            // How much of the rate a crawl reaches, and whether its arrivals kept within the
            // meter's allowance, depend on the machine's speed: figures.
            let refused = arrivals.iter().filter(|arrival| arrival.over_rate).count();
            let achieved = achieved_rate(&times).unwrap();
            eprintln!(
                "figure: host {host} reached {achieved:.1}/s of {RATE}/s at the server, \
                 {refused} arrivals past the meter's 60 ms allowance, delays spread {spread:?}"
            );
        }
        server.shutdown();
    }

    async fn a_429_pauses_its_host_for_the_retry_after_while_others_go_on() {
        let server = TestServer::builder()
            .host("paused", Duration::from_millis(1))
            .host("busy", Duration::from_millis(1))
            // The 3rd request to "paused" gets 429 with Retry-After: 1.
            .too_many_requests("paused", 3, 1)
            .start();
        let urls: Vec<String> = (0..10)
            .map(|i| server.url("paused", &format!("/{i}")))
            .chain((0..40).map(|i| server.url("busy", &format!("/{i}"))))
            .collect();
        let pages = map_async(urls, 4, get_ok)
            .per_key(|url| host_of(url), 1)
            .per_key_rate(Rate::per_second(25))
            .retry(polite_policy())
            .await;
        assert!(pages.iter().all(Result::is_ok));
        let arrivals = server.arrivals("paused");
        let refused = arrivals
            .iter()
            .find(|arrival| arrival.status == Some(429))
            .and_then(|arrival| arrival.answered_at)
            .expect("the 3rd request got a 429");
        let paused_times: Vec<_> = arrivals.iter().map(|arrival| arrival.at).collect();
        let pause_end = refused + Duration::from_secs(1);
        assert_eq!(count_between(&paused_times, refused, pause_end), 0, "a request came during the pause");
        assert_eq!(paused_times.len(), 11, "10 pages and the one retry");
        let busy = server.arrival_times("busy");
        assert_eq!(busy.len(), 40);
        // How many the other host got during the pause depends on the machine's speed (about
        // 25 at 25/s): a figure. That it goes on is proven on virtual time (schedule.rs).
        let during = count_between(&busy, refused, pause_end);
        eprintln!("figure: the busy host got {during} requests during the other's 1 s pause");
        server.shutdown();
    }

    async fn retries_of_a_flaky_host_wait_without_holding_slots() {
        let server = TestServer::builder()
            .flaky_host("flaky", Duration::from_millis(1))
            .host("steady", Duration::from_millis(20))
            // The flaky host's 503s ask for a one-second pause.
            .flaky_retry_after("flaky", 1)
            .start();
        // The flaky items come first: if their retries held their slots for the pause,
        // the steady host would get none of the 4 for a second.
        let urls: Vec<String> = (0..4)
            .map(|i| server.url("flaky", &format!("/{i}")))
            .chain((0..40).map(|i| server.url("steady", &format!("/{i}"))))
            .collect();
        let pages = map_async(urls, 4, get_ok)
            .per_key(|url| host_of(url), 4)
            .retry(polite_policy())
            .await;
        assert!(pages.iter().all(Result::is_ok));
        let mut flaky = server.arrivals("flaky");
        assert_eq!(flaky.len(), 8, "each flaky page twice");
        flaky.sort_by_key(|arrival| arrival.at);
        let (first_tries, retries) = flaky.split_at(4);
        assert!(first_tries.iter().all(|arrival| arrival.status == Some(503)));
        // No retry before its pause was over: a second after its page's 503 went out.
        for retry in retries {
            let tried = first_tries.iter().find(|first| first.path == retry.path).unwrap();
            let pause_end = tried.answered_at.unwrap() + Duration::from_secs(1);
            assert!(retry.at >= pause_end, "{:?} retried before its pause was over", retry.path);
        }
        let mut steady = server.arrival_times("steady");
        steady.sort();
        assert_eq!(steady.len(), 40);
        // The slots were free during the pause: the steady host's requests came before the
        // retries (had the retries held the slots, none could have).
        assert!(steady[0] < retries[0].at, "no steady request before the flaky host's retries");
        assert_eq!(server.stats("steady").peak, 4, "and it got every slot");
        let during = count_between(&steady, first_tries[3].at, retries[0].at);
        eprintln!("figure: {during} of 40 steady requests arrived during the flaky host's pause");
        server.shutdown();
    }

    async fn a_hedged_mirror_race_asks_the_second_mirror_only_when_the_first_is_slow() {
        let server = TestServer::builder()
            .host("fast", Duration::from_millis(1))
            .host("slow", Duration::from_secs(60))
            .host("backup", Duration::from_millis(1))
            .start();
        // The first mirror answers at once: the second is never asked.
        let first = [server.url("fast", "/file"), server.url("backup", "/file")];
        let body = race(first.iter().map(get_ok))
            .hedge(Duration::from_secs(5))
            .await
            .expect("the fast mirror answers");
        assert!(body.contains("fast"));
        assert_eq!(server.stats("backup").connections, 0, "the second mirror was asked");
        // The first mirror is slow: after the delay the second is asked, and wins.
        let second = [server.url("slow", "/file"), server.url("backup", "/file")];
        let body = race(second.iter().map(get_ok))
            .hedge(Duration::from_millis(50))
            .await
            .expect("the backup mirror answers");
        assert!(body.contains("backup"));
        assert_eq!(server.stats("slow").connections, 1);
        assert_eq!(server.stats("backup").connections, 1);
        let slow = server.arrival_times("slow")[0];
        let backup = server.arrival_times("backup")[0];
        // In that order at the server; the gap (the hedge, 50 ms, less the difference of
        // the two connections' delays) is a figure: the exact delay is proven on virtual time.
        assert!(backup > slow, "the backup was asked first");
        let gap = backup - slow;
        eprintln!("figure: the backup mirror was asked {gap:?} after the slow one (hedge 50 ms)");
        server.shutdown();
    }
}

virtual_time! {
    async fn a_hedged_race_starts_the_second_contestant_exactly_at_the_hedge_delay() {
        // In-process mirrors: the first takes a minute, the second a millisecond.
        let begin = now();
        let started = std::sync::Mutex::new(Vec::new());
        let mirror = |name: &'static str, latency: Duration| {
            let started = &started;
            async move {
                started.lock().unwrap().push((name, now() - begin));
                sleep(latency).await;
                Ok::<_, ()>(name)
            }
        };
        let ms = Duration::from_millis;
        let mirrors = [mirror("slow", ms(60_000)), mirror("backup", ms(1))];
        let won = race(mirrors).hedge(ms(50)).await;
        assert_eq!(won, Ok("backup"));
        assert_eq!(now() - begin, ms(51));
        assert_eq!(*started.lock().unwrap(), [("slow", ms(0)), ("backup", ms(50))]);
    }
}
