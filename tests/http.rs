//! Real sockets: the loopback test server, the hyper client, and the crawler over them,
//! under every runtime.
//!
//! The groundwork first (sequential awaits, `join_all` chunks, refusals, 503s, hang-ups),
//! then a real crawl: 1,000 URLs over several hosts, a refusing address and a
//! flaky host, through `map_async(..).per_key(..)` (and `map_async` + `KeyedBulkhead`) with `retry` on
//! 503s, checked against what the server itself observed; and a mirror race whose loser
//! the server sees hang up.
//!
//! Then the server as the judge of politeness: its rate meter answers `429` with
//! `Retry-After` to a client that is too fast (and only to that one), its arrival log and the
//! sliding-window helpers, scripted `429`s, and the client's reading of `Retry-After`.

mod common;
use tollgate_testkit::{http_client, http_server};

use std::fmt;
use std::io::{Read, Write};
use std::time::{Duration, Instant, UNIX_EPOCH};

use common::matrix;
use futures::future::join_all;
use futures_lite::future;
use http_client::{ClientError, Page, get, get_ok, parse_retry_after, parse_retry_after_at};
use http_server::{
    DEFAULT_RATE_ALLOWANCE, RateMeter, Stats, TOO_MANY_BODY, TestServer, UNAVAILABLE_BODY,
    achieved_rate, count_between, delay_spread, max_in_window, page_body, window_limit,
};
use tollgate::futures::Retry;
use tollgate::testing::eventually;
use tollgate::{BulkheadError, KeyedBulkhead, RetryError, map_async, race, retry};

/// Long enough for a busy CI machine, short enough to fail fast.
const PATIENCE: Duration = Duration::from_secs(10);

fn ok(host: &str, path: &str) -> Page {
    Page {
        status: 200,
        retry_after: None,
        body: page_body(host, path),
    }
}

fn three_hosts() -> TestServer {
    TestServer::builder()
        .host("a", Duration::from_millis(1))
        .host("b", Duration::from_millis(3))
        .host("c", Duration::from_millis(5))
        .start()
}

/// The server's counters after `n` clean `200`s, one at a time.
fn served_one_by_one(n: usize) -> Stats {
    Stats {
        active: 0,
        peak: 1,
        connections: n,
        requests: n,
        responses: n,
        ok: n,
        too_many: 0,
        over_rate: 0,
        unavailable: 0,
        disconnects: 0,
    }
}

// --- the crawl ------------------------------------------------------------------------

/// The crawl's global limit.
const GLOBAL: usize = 12;
/// The crawl's cap per host.
const PER_HOST: usize = 3;
/// URLs in the crawl.
const CRAWL_URLS: usize = 1000;
/// The crawl's healthy hosts and their latencies in milliseconds.
const HOSTS: [(&str, u64); 4] = [("alpha", 1), ("bravo", 2), ("charlie", 3), ("delta", 5)];
/// The host that answers `503` to the first request for each path.
const FLAKY: &str = "flaky";
/// The label of the URLs on the refusing address.
const REFUSED: &str = "refused";

/// Why a fetch failed.
#[derive(Debug)]
enum FetchError {
    /// No connection or no valid response.
    Client(ClientError),
    /// A `503`: worth retrying.
    Unavailable,
    /// Any other status but `200`.
    Status(u16),
    /// The per-host bulkhead refused (only with a bulkhead timeout or queue bound).
    NoSlot(BulkheadError),
}

impl fmt::Display for FetchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Client(error) => error.fmt(f),
            Self::Unavailable => f.write_str("503 service unavailable"),
            Self::Status(status) => write!(f, "status {status}"),
            Self::NoSlot(error) => error.fmt(f),
        }
    }
}

/// One request: the body of a `200`, anything else an error.
async fn fetch(url: &str) -> Result<String, FetchError> {
    let page = get(url).await.map_err(FetchError::Client)?;
    match page.status {
        200 => Ok(page.body),
        503 => Err(FetchError::Unavailable),
        status => Err(FetchError::Status(status)),
    }
}

/// The crawl's retry policy: up to 3 attempts, 503s only (a refused connection is final).
fn retry_503s<F, Fut>(attempt: F) -> Retry<F, Fut, impl FnMut(&FetchError) -> bool>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<String, FetchError>>,
{
    retry(attempt)
        .attempts(3)
        .interval(Duration::from_millis(1))
        .attempt_timeout(PATIENCE)
        .when(|error: &FetchError| matches!(error, FetchError::Unavailable))
}

/// The key of a URL: its authority (`127.0.0.1:PORT`), i.e. its host.
fn host_key(url: &str) -> String {
    url.split('/').nth(2).unwrap_or_default().to_owned()
}

/// One URL of the crawl: the host label (or [`REFUSED`]) and path it was made from.
#[derive(Debug)]
struct Target {
    host: &'static str,
    path: String,
    url: String,
}

fn crawl_server() -> TestServer {
    HOSTS
        .iter()
        .fold(TestServer::builder(), |builder, (host, ms)| {
            builder.host(host, Duration::from_millis(*ms))
        })
        .flaky_host(FLAKY, Duration::from_millis(2))
        .start()
}

/// [`CRAWL_URLS`] URLs: every 100th on the refusing address, every 10th on the flaky host,
/// the rest round-robin over [`HOSTS`].
fn crawl_plan(server: &TestServer) -> Vec<Target> {
    (0..CRAWL_URLS)
        .map(|i| {
            let path = format!("/page/{i}");
            let (host, url) = if i % 100 == 99 {
                (REFUSED, server.refused_url(&path))
            } else if i % 10 == 5 {
                (FLAKY, server.url(FLAKY, &path))
            } else {
                let host = HOSTS[i % HOSTS.len()].0;
                (host, server.url(host, &path))
            };
            Target { host, path, url }
        })
        .collect()
}

/// Checks a crawl's results (in plan order) and what the server saw.
fn check_crawl(
    server: &TestServer,
    plan: &[Target],
    results: &[Result<String, RetryError<FetchError>>],
) {
    assert_eq!(results.len(), plan.len());
    for (target, result) in plan.iter().zip(results) {
        match (target.host, result) {
            (REFUSED, Err(error)) => {
                assert!(
                    matches!(error.last_error(), Some(FetchError::Client(e)) if e.is_refused()),
                    "{}: expected a refused connection, got {error}",
                    target.url
                );
                assert!(
                    error.is_permanent(),
                    "{}: refusals are not retried",
                    target.url
                );
                assert_eq!(error.attempts().len(), 1, "{}: {error}", target.url);
            }
            (REFUSED, Ok(body)) => panic!("{}: the refusing address answered {body:?}", target.url),
            (host, Ok(body)) => assert_eq!(*body, page_body(host, &target.path), "{}", target.url),
            (_, Err(error)) => panic!("{}: {error}", target.url),
        }
    }

    let count = |host: &str| plan.iter().filter(|target| target.host == host).count();
    assert!(count(REFUSED) > 0 && count(FLAKY) > 0);
    for (host, _) in HOSTS {
        let stats = server.stats(host);
        assert_eq!(
            (stats.responses, stats.unavailable),
            (count(host), 0),
            "host {host}: {stats:?}"
        );
        assert!(
            stats.peak <= PER_HOST,
            "host {host} peak {} > cap {PER_HOST}",
            stats.peak
        );
    }
    // Exactly one 503 per flaky path, each recovered by one retry.
    let flaky = server.stats(FLAKY);
    assert_eq!(
        (flaky.unavailable, flaky.responses),
        (count(FLAKY), 2 * count(FLAKY)),
        "{flaky:?}"
    );
    assert!(
        flaky.peak <= PER_HOST,
        "host {FLAKY} peak {} > cap {PER_HOST}",
        flaky.peak
    );

    let global = server.global();
    assert!(
        global.peak <= GLOBAL,
        "global peak {} > limit {GLOBAL}",
        global.peak
    );
    // Not a timing claim: the first round alone starts GLOBAL requests on several hosts.
    assert!(
        global.peak > PER_HOST,
        "the global limit never let several hosts work at once: peak {}",
        global.peak
    );
    // Every connection answered, nobody hung up, nothing left active.
    assert_eq!(global.connections, global.responses, "{global:?}");
    assert_eq!((global.active, global.disconnects), (0, 0), "{global:?}");
}

matrix! {
    async fn sequential_fetches_from_each_host() {
        let server = three_hosts();
        for host in ["a", "b", "c"] {
            for i in 0..4 {
                let path = format!("/page/{i}");
                let page = get(&server.url(host, &path)).await.unwrap();
                assert_eq!(page, ok(host, &path));
            }
        }
        for host in ["a", "b", "c"] {
            assert_eq!(server.stats(host), served_one_by_one(4), "host {host}");
        }
        assert_eq!(server.global(), served_one_by_one(12));
    }

    async fn join_all_over_chunks_overlaps_up_to_the_chunk_size() {
        const CHUNK: usize = 8;
        let server = TestServer::builder()
            .host("a", Duration::from_millis(50))
            .host("b", Duration::from_millis(50))
            .start();
        let urls: Vec<(&str, String)> = (0..3 * CHUNK)
            .map(|i| {
                let host = if i % 2 == 0 { "a" } else { "b" };
                (host, format!("/item/{i}"))
            })
            .collect();
        let server = &server;
        for chunk in urls.chunks(CHUNK) {
            let pages = join_all(chunk.iter().map(|(host, path)| async move {
                get(&server.url(host, path)).await
            }))
            .await;
            for ((host, path), page) in chunk.iter().zip(pages) {
                assert_eq!(page.unwrap(), ok(host, path));
            }
        }
        let global = server.global();
        assert_eq!(global.responses, 3 * CHUNK);
        assert_eq!(global.disconnects, 0);
        assert_eq!(global.active, 0);
        // A chunk is the only cap: never more than one chunk at once, and with 50 ms per
        // response the requests of a chunk do overlap.
        assert!(global.peak <= CHUNK, "global peak {} > chunk {CHUNK}", global.peak);
        assert!(global.peak >= 2, "no overlap seen: global peak {}", global.peak);
        for host in ["a", "b"] {
            let peak = server.stats(host).peak;
            assert!(peak <= CHUNK / 2, "host {host} peak {peak} > its share of a chunk");
        }
    }

    async fn the_refused_address_errors_at_once() {
        let server = three_hosts();
        let start = Instant::now();
        for i in 0..3 {
            let error = get(&server.refused_url(&format!("/page/{i}"))).await.unwrap_err();
            assert!(error.is_refused(), "expected a refused connection, got {error}");
        }
        assert!(start.elapsed() < PATIENCE, "refusals should not wait for a timeout");
        // The hosts are untouched and still serve.
        assert_eq!(server.global().connections, 0);
        assert_eq!(get(&server.url("a", "/")).await.unwrap(), ok("a", "/"));
    }

    async fn the_flaky_host_answers_503_once_per_path() {
        let server = TestServer::builder()
            .flaky_host("flaky", Duration::from_millis(1))
            .start();
        for path in ["/x", "/y"] {
            let url = server.url("flaky", path);
            let first = get(&url).await.unwrap();
            assert_eq!((first.status, first.body.as_str()), (503, UNAVAILABLE_BODY));
            assert_eq!(first.retry_after, Some(Duration::ZERO));
            assert_eq!(get(&url).await.unwrap(), ok("flaky", path));
            assert_eq!(get(&url).await.unwrap(), ok("flaky", path));
        }
        let stats = server.stats("flaky");
        assert_eq!((stats.responses, stats.unavailable, stats.ok), (6, 2, 4));
    }

    async fn the_flaky_host_can_ask_for_a_pause() {
        let server = TestServer::builder()
            .flaky_host("flaky", Duration::from_millis(1))
            .flaky_retry_after("flaky", 3)
            .start();
        let error = get_ok(server.url("flaky", "/x")).await.unwrap_err();
        assert_eq!((error.status(), error.retry_after()), (Some(503), Some(Duration::from_secs(3))));
        assert_eq!(get_ok(server.url("flaky", "/x")).await.unwrap(), page_body("flaky", "/x"));
    }

    async fn dropping_a_request_mid_response_hangs_up() {
        let server = TestServer::builder()
            .host("slow", Duration::from_secs(60))
            .start();
        let url = server.url("slow", "/never");
        // Drive the request until the server has read it and is waiting out its latency,
        // then drop it: `or` drops the losing future.
        let outcome = future::or(async { Some(get(&url).await) }, async {
            eventually(PATIENCE, || match server.stats("slow").requests {
                1 => Ok(()),
                n => Err(format!("{n} requests received")),
            })
            .await
            .unwrap();
            None
        })
        .await;
        assert!(outcome.is_none(), "the 60 s response came first: {outcome:?}");
        eventually(PATIENCE, || {
            let stats = server.stats("slow");
            if stats.disconnects == 1 && stats.active == 0 {
                Ok(())
            } else {
                Err(format!("server sees {stats:?}"))
            }
        })
        .await
        .unwrap();
        assert_eq!(server.stats("slow").responses, 0);
    }

    async fn a_timed_out_request_hangs_up_too() {
        let server = TestServer::builder()
            .host("slow", Duration::from_secs(60))
            .host("fast", Duration::from_millis(1))
            .start();
        let url = server.url("slow", "/");
        let slow = tollgate::timeout(Duration::from_millis(200), get(&url)).await;
        assert!(slow.is_err(), "{slow:?}");
        eventually(PATIENCE, || server.stats("slow").disconnects == 1).await.unwrap();
        assert_eq!(server.stats("slow").active, 0);
        // The fast host never saw a disconnect.
        assert_eq!(get(&server.url("fast", "/")).await.unwrap(), ok("fast", "/"));
        assert_eq!(server.stats("fast").disconnects, 0);
    }

    async fn bounded_concurrency_beats_sequential_fetches() {
        // The headline of bounded concurrency: the same URLs one by one, then with a cap.
        const URLS: usize = 48;
        const LIMIT: usize = 16;
        const LATENCY: Duration = Duration::from_millis(5);
        let server = TestServer::builder().host("h", LATENCY).start();
        let urls: Vec<String> = (0..URLS).map(|i| server.url("h", &format!("/{i}"))).collect();

        let start = Instant::now();
        for url in &urls {
            assert_eq!(get(url).await.unwrap().status, 200);
        }
        let sequential = start.elapsed();
        assert_eq!(server.stats("h").peak, 1);

        server.reset_peaks();
        let start = Instant::now();
        for page in map_async(&urls, LIMIT, get).await {
            assert_eq!(page.unwrap().status, 200);
        }
        let concurrent = start.elapsed();
        let stats = server.stats("h");
        assert!(stats.peak <= LIMIT, "peak {} > limit {LIMIT}", stats.peak);
        assert_eq!(stats.responses, 2 * URLS);

        println!(
            "{URLS} urls at {LATENCY:?}: sequential {sequential:?}, map_async limit {LIMIT} \
             {concurrent:?} ({:.1}x)",
            sequential.as_secs_f64() / concurrent.as_secs_f64()
        );
        // The server holds every response for LATENCY, so this bound cannot flake.
        assert!(sequential >= LATENCY * URLS as u32);
        assert!(concurrent < sequential, "bounded {concurrent:?} vs one by one {sequential:?}");
    }

    async fn crawl_with_per_key_limits_and_retry() {
        let server = crawl_server();
        let plan = crawl_plan(&server);
        let results = map_async(plan.iter().map(|target| target.url.as_str()), GLOBAL, |url| retry_503s(move || fetch(url)).into_future()).per_key(|url| host_key(url), PER_HOST)
        .await;
        check_crawl(&server, &plan, &results);
    }

    async fn crawl_with_map_async_and_a_keyed_bulkhead() {
        // The hand-built form: `map_async` for the global limit, a bulkhead per host inside
        // it, `retry` outside the bulkhead (no host slot held during the pause).
        let server = crawl_server();
        let plan = crawl_plan(&server);
        let per_host = KeyedBulkhead::<String>::new(PER_HOST);
        let per_host = &per_host;
        let results = map_async(
            plan.iter().map(|target| target.url.as_str()),
            GLOBAL,
            |url| {
                retry_503s(move || async move {
                    per_host
                        .run(&host_key(url), fetch(url))
                        .await
                        .unwrap_or_else(|full| Err(FetchError::NoSlot(full)))
                })
                .into_future()
            },
        )
        .await;
        check_crawl(&server, &plan, &results);
        assert!(per_host.is_empty(), "idle hosts are forgotten");
    }

    async fn mirror_race_the_fast_mirror_wins_and_the_loser_hangs_up() {
        let server = TestServer::builder()
            .host("slow-mirror", Duration::from_secs(60))
            .host("fast-mirror", Duration::from_millis(20))
            .start();
        let path = "/release.tar.gz";
        // A broken mirror too: its failure does not end the race.
        let mirrors = [
            server.refused_url(path),
            server.url("slow-mirror", path),
            server.url("fast-mirror", path),
        ];
        let body = race(mirrors.iter().map(|url| fetch(url)))
            .timeout(PATIENCE)
            .await
            .unwrap();
        assert_eq!(body, page_body("fast-mirror", path));
        // The race dropped the slow request: its connection closes, and the server notices.
        eventually(PATIENCE, || {
            let slow = server.stats("slow-mirror");
            match (slow.connections, slow.disconnects, slow.active, slow.responses) {
                (1, 1, 0, 0) => Ok(()),
                _ => Err(format!("the slow mirror sees {slow:?}")),
            }
        })
        .await
        .unwrap();
        let fast = server.stats("fast-mirror");
        assert_eq!((fast.responses, fast.disconnects), (1, 0), "{fast:?}");
    }

    async fn shutdown_stops_promptly_and_closes_connections_in_flight() {
        let server = TestServer::builder()
            .host("slow", Duration::from_secs(60))
            .start();
        let url = server.url("slow", "/");
        let (request, shutdown_took) = future::zip(get(&url), async move {
            eventually(PATIENCE, || server.stats("slow").requests == 1)
                .await
                .unwrap();
            let start = Instant::now();
            server.shutdown();
            start.elapsed()
        })
        .await;
        assert!(shutdown_took < PATIENCE, "shutdown took {shutdown_took:?}");
        // The request in flight sees its connection end instead of a response.
        let error = request.unwrap_err();
        assert!(matches!(error, ClientError::Http(_)), "{error}");
    }
}

#[test]
fn the_server_speaks_plain_http_and_closes_after_one_response() {
    let server = three_hosts();
    let mut stream = std::net::TcpStream::connect(server.addr("a")).unwrap();
    stream
        .write_all(b"GET /raw HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut response = String::new();
    // `read_to_string` ends only at end-of-file: the server closed the connection.
    stream.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
    assert!(response.contains("\r\nConnection: close\r\n"), "{response}");
    assert!(response.ends_with("\r\n\r\na /raw"), "{response}");

    let mut stream = std::net::TcpStream::connect(server.addr("a")).unwrap();
    stream.write_all(b"nonsense\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 400 "), "{response}");
}

#[test]
fn the_refused_port_stays_refused_while_the_server_lives() {
    let server = three_hosts();
    for _ in 0..20 {
        let error = std::net::TcpStream::connect(server.refused_addr()).unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::ConnectionRefused);
    }
    // Nobody else can listen there meanwhile.
    assert!(std::net::TcpListener::bind(server.refused_addr()).is_err());
}

/// Inside tokio both flavours work: the tokio client on tokio's reactor (what `get` picks
/// there), the smol client on async-io's, which runs beside any executor.
#[cfg(feature = "tokio")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_clients_work_inside_tokio() {
    let server = three_hosts();
    let url = server.url("b", "/both");
    let from_tokio = tokio::spawn(http_client::get_tokio(url.clone()));
    let from_smol = tokio::spawn(http_client::get_smol(url.clone()));
    assert_eq!(from_tokio.await.unwrap().unwrap(), ok("b", "/both"));
    assert_eq!(from_smol.await.unwrap().unwrap(), ok("b", "/both"));
    assert_eq!(server.stats("b").responses, 2);
}

#[allow(dead_code)]
fn request_futures_are_send() {
    fn assert_send<T: Send>(_: T) {}
    assert_send(http_client::get("http://127.0.0.1:1/"));
    assert_send(http_client::get_smol("http://127.0.0.1:1/"));
    #[cfg(feature = "tokio")]
    assert_send(http_client::get_tokio("http://127.0.0.1:1/"));
}

// --- the judge of politeness -----------------------------------------------------------

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

matrix! {
    async fn a_client_faster_than_the_rate_gets_429s_with_retry_after_and_is_counted() {
        // 2 per second in bursts of up to 2: of 8 requests sent at once, 2 fit.
        let server = TestServer::builder()
            .host("metered", ms(1))
            .host("free", ms(1))
            .host_rate_limit("metered", 2.0, 2)
            .start();
        let pages = join_all((0..8).map(|i| get(server.url("metered", &format!("/{i}"))))).await;
        let (mut ok, mut refused) = (0, 0);
        for page in pages {
            let page = page.unwrap();
            match page.status {
                200 => ok += 1,
                429 => {
                    refused += 1;
                    assert_eq!(page.body, TOO_MANY_BODY);
                    // The next slot is 0.5 s away: whole seconds, rounded up.
                    assert_eq!(page.retry_after, Some(Duration::from_secs(1)));
                    let error = page.error_for_status().unwrap_err();
                    assert_eq!(
                        (error.status(), error.retry_after()),
                        (Some(429), Some(Duration::from_secs(1)))
                    );
                }
                status => panic!("unexpected status {status}"),
            }
        }
        // Exactly (2, 6) unless the server thread stalls ~0.5 s between two accepts.
        assert!(ok >= 2 && refused >= 1, "{ok} ok, {refused} refused");
        let stats = server.stats("metered");
        assert_eq!(
            (stats.responses, stats.ok, stats.too_many, stats.over_rate),
            (8, ok, refused, refused),
            "{stats:?}"
        );
        let arrivals = server.arrivals("metered");
        assert_eq!(arrivals.len(), 8);
        assert!(
            arrivals.iter().all(|arrival| arrival.over_rate == (arrival.status == Some(429))),
            "{arrivals:?}"
        );
        // The log is the meter's evidence: a fresh meter replaying it refuses the same ones.
        let times = server.arrival_times("metered");
        assert_eq!(RateMeter::new(2.0, 2, DEFAULT_RATE_ALLOWANCE).replay(&times), refused);

        // Waiting as told is enough, and the log shows that nothing came meanwhile.
        let last_429 = arrivals.iter().filter_map(|arrival| arrival.answered_at).max().unwrap();
        tollgate::sleep(Duration::from_secs(1)).await;
        assert_eq!(get_ok(server.url("metered", "/later")).await.unwrap(), page_body("metered", "/later"));
        let times = server.arrival_times("metered");
        assert_eq!(count_between(&times, last_429, last_429 + Duration::from_secs(1)), 0);
        assert_eq!(server.stats("metered").over_rate, refused);

        // The other host is not metered.
        for page in join_all((0..8).map(|i| get(server.url("free", &format!("/{i}"))))).await {
            assert_eq!(page.unwrap().status, 200);
        }
        assert_eq!(server.stats("free").too_many, 0);
        assert_eq!(server.global().over_rate, refused);
    }

    async fn a_client_slower_than_the_rate_gets_no_429s() {
        // 20 per second, no burst: a request every 50 ms. The client pauses 75 ms after each
        // response, well above the interval.
        const RATE: f64 = 20.0;
        let server = TestServer::builder().host("metered", ms(1)).rate_limit(RATE, 1).start();
        for i in 0..8 {
            if i > 0 {
                tollgate::sleep(ms(75)).await;
            }
            let path = format!("/{i}");
            assert_eq!(get(server.url("metered", &path)).await.unwrap(), ok("metered", &path));
        }
        let stats = server.stats("metered");
        assert_eq!((stats.ok, stats.too_many, stats.over_rate), (8, 0, 0), "{stats:?}");
        let times = server.arrival_times("metered");
        for window in [ms(50), ms(200), Duration::from_secs(1)] {
            let most = max_in_window(&times, window);
            let limit = window_limit(RATE, 1, window + DEFAULT_RATE_ALLOWANCE);
            assert!(most <= limit, "{most} requests in {window:?}, limit {limit}");
        }
        let rate = achieved_rate(&times).unwrap();
        assert!(rate < RATE, "achieved {rate:.1}/s");
    }

    async fn a_client_starting_requests_exactly_at_the_rate_stays_within_it_at_the_server() {
        // What a rate limiter on the client does: start request `i` no earlier than one
        // interval after request `i - 1` started (a late start moves the schedule on). The
        // server sees those starts through loopback transit and its own thread's
        // scheduling, which can bunch two arrivals past any fixed allowance on a busy
        // machine (a server thread accepting 110 ms late put two arrivals 13 ms apart):
        // how many the strict meter refused is a figure. Asserted, at any speed: every
        // request answered, and in any window of a second no more arrivals than the rate
        // allows, widened by how much the delays from start to arrival varied.
        const RATE: f64 = 25.0;
        const REQUESTS: usize = 50;
        let interval = Duration::from_secs_f64(1.0 / RATE);
        let server = TestServer::builder().host("metered", ms(1)).rate_limit(RATE, 1).start();
        let mut next = Instant::now();
        let mut starts = Vec::new();
        for i in 0..REQUESTS {
            if let Some(wait) = next.checked_duration_since(Instant::now()) {
                tollgate::sleep(wait).await;
            }
            next = next.max(Instant::now()) + interval;
            starts.push(Instant::now());
            let page = get(server.url("metered", &format!("/{i}"))).await.unwrap();
            assert!(matches!(page.status, 200 | 429), "request {i}: {}", page.status);
        }
        let stats = server.stats("metered");
        assert_eq!(stats.ok + stats.over_rate, REQUESTS, "{stats:?}");
        let spread = delay_spread(&server.arrivals("metered"), |path| {
            starts[path.trim_start_matches('/').parse::<usize>().unwrap()]
        });
        let times = server.arrival_times("metered");
        let window = Duration::from_secs(1);
        let (most, bound) = (max_in_window(&times, window), window_limit(RATE, 1, window + spread));
        let closest = times.windows(2).map(|pair| pair[1] - pair[0]).min().unwrap();
        println!(
            "figure: exactly at {RATE}/s: {} of {REQUESTS} refused by the server's strict meter, \
             {:.2}/s measured there, closest arrivals {closest:?} apart (interval {interval:?}), \
             delays spread {spread:?}",
            stats.over_rate,
            achieved_rate(&times).unwrap(),
        );
        assert!(most <= bound, "{most} arrivals in {window:?} (bound {bound}, delays spread {spread:?})");
    }

    async fn the_scripted_host_answers_429_to_its_kth_request() {
        let server = TestServer::builder()
            .host("scripted", ms(1))
            .host("other", ms(1))
            .too_many_requests("scripted", 2, 1)
            .too_many_requests("scripted", 4, 7)
            .start();
        let mut answers = Vec::new();
        for i in 1..=5 {
            let page = get(server.url("scripted", &format!("/{i}"))).await.unwrap();
            answers.push((page.status, page.retry_after.map(|delay| delay.as_secs())));
        }
        assert_eq!(answers, [(200, None), (429, Some(1)), (200, None), (429, Some(7)), (200, None)]);
        let stats = server.stats("scripted");
        assert_eq!((stats.ok, stats.too_many, stats.over_rate), (3, 2, 0), "{stats:?}");
        let statuses: Vec<_> = server.arrivals("scripted").iter().map(|arrival| arrival.status).collect();
        assert_eq!(statuses, [Some(200), Some(429), Some(200), Some(429), Some(200)]);
        // Requests are counted per host: the other one got nothing.
        assert_eq!(server.stats("other").connections, 0);
        assert!(server.arrivals("other").is_empty());
    }

    async fn a_429_goes_out_without_the_latency() {
        let server = TestServer::builder()
            .host("slow", Duration::from_secs(60))
            .too_many_requests("slow", 1, 1)
            .start();
        let start = Instant::now();
        let page = get(server.url("slow", "/")).await.unwrap();
        assert_eq!((page.status, page.retry_after), (429, Some(Duration::from_secs(1))));
        assert!(start.elapsed() < PATIENCE, "the 429 waited {:?}", start.elapsed());
        let arrival = &server.arrivals("slow")[0];
        assert_eq!(arrival.path.as_deref(), Some("/"));
        assert!(arrival.answered_at.unwrap() >= arrival.at);
    }

    async fn a_spell_of_429s_lasts_until_it_is_ended() {
        let server = TestServer::builder().host("h", ms(1)).host("other", ms(1)).start();
        assert_eq!(get(server.url("h", "/before")).await.unwrap().status, 200);
        server.too_many_requests_for("h", Duration::from_secs(60), 2);
        for _ in 0..3 {
            let error = get_ok(server.url("h", "/during")).await.unwrap_err();
            assert!(matches!(
                error,
                ClientError::Status { status: 429, retry_after: Some(delay) } if delay == Duration::from_secs(2)
            ), "{error}");
            assert_eq!(error.to_string(), "status 429, retry after 2s");
        }
        // Other hosts keep answering.
        assert_eq!(get(server.url("other", "/")).await.unwrap(), ok("other", "/"));
        server.too_many_requests_for("h", Duration::ZERO, 0);
        assert_eq!(get(server.url("h", "/after")).await.unwrap(), ok("h", "/after"));
        let stats = server.stats("h");
        assert_eq!((stats.ok, stats.too_many, stats.over_rate), (2, 3, 0), "{stats:?}");
    }
}

#[test]
fn a_raw_client_too_fast_reads_429_and_retry_after_on_the_wire() {
    let server = TestServer::builder()
        .host("metered", ms(1))
        .rate_limit(1.0, 1)
        .start();
    let mut answers = Vec::new();
    for _ in 0..3 {
        let mut stream = std::net::TcpStream::connect(server.addr("metered")).unwrap();
        stream
            .write_all(b"GET /raw HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        answers.push(response);
    }
    assert!(
        answers[0].starts_with("HTTP/1.1 200 OK\r\n"),
        "{}",
        answers[0]
    );
    assert!(!answers[0].contains("Retry-After"), "{}", answers[0]);
    for response in &answers[1..] {
        assert!(
            response.starts_with("HTTP/1.1 429 Too Many Requests\r\n"),
            "{response}"
        );
        assert!(response.contains("\r\nRetry-After: 1\r\n"), "{response}");
        assert!(response.ends_with(TOO_MANY_BODY), "{response}");
    }
    assert_eq!(server.stats("metered").over_rate, 2);
}

#[test]
fn the_meter_passes_a_jittery_client_at_the_rate_and_catches_one_20_percent_too_fast() {
    // 10 per second: an interval of 100 ms. Every arrival is 0..=19 ms late (transit).
    let meter = RateMeter::new(10.0, 1, DEFAULT_RATE_ALLOWANCE);
    assert_eq!(meter.interval(), ms(100));
    let t0 = Instant::now();
    let transit = |i: u32| ms(u64::from(i * 7919 % 20));
    let at_rate: Vec<Instant> = (0..200).map(|i| t0 + ms(100) * i + transit(i)).collect();
    assert_eq!(meter.replay(&at_rate), 0);
    // A strict meter would refuse some of those.
    assert!(RateMeter::new(10.0, 1, Duration::ZERO).replay(&at_rate) > 0);

    // 20% too fast: 12 per second, same transit.
    let fast: Vec<Instant> = (0..200)
        .map(|i| t0 + Duration::from_secs_f64(f64::from(i) / 12.0) + transit(i))
        .collect();
    // 200 starts over 16.6 s, where at most 167 fit: at least 33 refused (more, in fact:
    // after a refusal the next request comes later than the free slot, which is lost).
    let refused = meter.replay(&fast);
    assert!((33..=100).contains(&refused), "{refused} refused");
    let caught_after = (1..=fast.len())
        .find(|&n| meter.replay(&fast[..n]) > 0)
        .unwrap();
    println!("20% too fast: {refused} of 200 refused, the first at request {caught_after}");
    assert!(caught_after <= 8, "first refusal at request {caught_after}");

    // A burst of 10 at once against bursts of 3: 3 pass.
    assert_eq!(
        RateMeter::new(10.0, 3, DEFAULT_RATE_ALLOWANCE).replay(&[t0; 10]),
        7
    );

    // `admit` says how early; a refusal leaves the schedule where it was.
    let mut meter = RateMeter::new(10.0, 1, ms(20));
    assert_eq!(meter.admit(t0), Ok(()));
    assert_eq!(meter.admit(t0 + ms(50)), Err(ms(50)));
    assert_eq!(meter.admit(t0 + ms(80)), Ok(())); // 20 ms early: allowed
    assert_eq!(meter.admit(t0 + ms(150)), Err(ms(50))); // the schedule is at 200 ms
    assert_eq!(meter.admit(t0 + ms(180)), Ok(()));
}

#[test]
fn max_in_window_counts_the_busiest_window_of_a_hand_made_log() {
    let t0 = Instant::now();
    let at = |n: u64| t0 + ms(n);
    // Out of order on purpose.
    let times = [
        at(0),
        at(100),
        at(10),
        at(20),
        at(500),
        at(590),
        at(600),
        at(1000),
    ];
    // Windows are [t, t + W): an instant exactly W after another is not in its window.
    for (window, most) in [
        (0, 0),
        (1, 1),
        (10, 1),
        (11, 2),
        (21, 3),
        (100, 3),
        (101, 4),
        (500, 4),
        (1000, 7),
        (1001, 8),
    ] {
        assert_eq!(
            max_in_window(&times, ms(window)),
            most,
            "window {window} ms"
        );
    }
    assert_eq!(max_in_window(&[], ms(5)), 0);
    assert_eq!(max_in_window(&[at(5); 3], ms(1)), 3);

    assert_eq!(count_between(&times, at(10), at(100)), 2);
    assert_eq!(count_between(&times, at(590), at(1001)), 3);
    assert_eq!(count_between(&times, at(0), at(0)), 0);
    assert_eq!(count_between(&times, at(101), at(500)), 0);

    assert_eq!(achieved_rate(&[at(1000), at(0), at(500)]), Some(2.0));
    assert_eq!(achieved_rate(&[at(0)]), None);
    assert_eq!(achieved_rate(&[at(7), at(7)]), None);
    assert_eq!(achieved_rate(&[]), None);

    assert_eq!(window_limit(10.0, 1, Duration::from_secs(1)), 11);
    assert_eq!(window_limit(2.0, 3, ms(250)), 3);
    assert_eq!(window_limit(20.0, 1, ms(1020)), 21);
}

#[test]
fn retry_after_parses_seconds_and_http_dates() {
    let secs = |n: u64| Some(Duration::from_secs(n));
    assert_eq!(parse_retry_after("0"), secs(0));
    assert_eq!(parse_retry_after("120"), secs(120));
    assert_eq!(parse_retry_after(" 5 "), secs(5));
    for bad in ["", "-1", "1.5", "+3", "soon", "99999999999999999999999"] {
        assert_eq!(parse_retry_after(bad), None, "{bad:?}");
    }

    // RFC 9110's own example date is 784111777 s after the epoch.
    let now = UNIX_EPOCH + Duration::from_secs(784_111_777);
    assert_eq!(
        parse_retry_after_at("Sun, 06 Nov 1994 08:49:37 GMT", now),
        secs(0)
    );
    assert_eq!(
        parse_retry_after_at("Sun, 06 Nov 1994 08:51:37 GMT", now),
        secs(120)
    );
    assert_eq!(
        parse_retry_after_at("Sat, 05 Nov 1994 08:49:37 GMT", now),
        secs(0),
        "past"
    );
    let leap_day = UNIX_EPOCH + Duration::from_secs(1_582_934_400 - 10);
    assert_eq!(
        parse_retry_after_at("Sat, 29 Feb 2020 00:00:00 GMT", leap_day),
        secs(10)
    );
    assert_eq!(
        parse_retry_after_at("Thu, 01 Jan 1970 00:00:00 GMT", UNIX_EPOCH),
        secs(0)
    );
    for bad in [
        "Sunday, 06-Nov-94 08:49:37 GMT", // obsolete RFC 850 form
        "Sun Nov  6 08:49:37 1994",       // obsolete asctime form
        "Sun, 06 Nov 1994 08:49:37 UTC",
        "Sun, 31 Feb 2021 00:00:00 GMT",
        "Sun, 6 Nov 1994 08:49:37 GMT",
        "Sun, 06 Nov 1994 24:00:00 GMT",
    ] {
        assert_eq!(parse_retry_after_at(bad, now), None, "{bad:?}");
    }
}
