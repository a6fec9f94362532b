//! Real sockets: the loopback test server and the hyper client, under every runtime.
//!
//! This is the groundwork for the real-HTTP crawl: plain sequential awaits and
//! `futures::future::join_all` over chunks, checked against what the server itself observed.

mod common;
#[path = "support/http_client.rs"]
mod http_client;
#[path = "support/http_server.rs"]
mod http_server;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use common::matrix;
use futures::future::join_all;
use futures_lite::future;
use http_client::{ClientError, Page, get};
use http_server::{Stats, TestServer, UNAVAILABLE_BODY, page_body};
use tollgate::testing::eventually;

/// Long enough for a busy CI machine, short enough to fail fast.
const PATIENCE: Duration = Duration::from_secs(10);

fn ok(host: &str, path: &str) -> Page {
    Page {
        status: 200,
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
        unavailable: 0,
        disconnects: 0,
    }
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
            assert_eq!(get(&url).await.unwrap(), ok("flaky", path));
            assert_eq!(get(&url).await.unwrap(), ok("flaky", path));
        }
        let stats = server.stats("flaky");
        assert_eq!((stats.responses, stats.unavailable), (6, 2));
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

    async fn concurrent_chunks_beat_sequential_fetches() {
        const URLS: usize = 48;
        const CHUNK: usize = 16;
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
        for chunk in urls.chunks(CHUNK) {
            for page in join_all(chunk.iter().map(get)).await {
                assert_eq!(page.unwrap().status, 200);
            }
        }
        let concurrent = start.elapsed();
        let stats = server.stats("h");
        assert!(stats.peak <= CHUNK, "peak {} > chunk {CHUNK}", stats.peak);
        assert_eq!(stats.responses, 2 * URLS);

        println!(
            "{URLS} urls at {LATENCY:?}: sequential {sequential:?}, join_all chunks of \
             {CHUNK} {concurrent:?} ({:.1}x)",
            sequential.as_secs_f64() / concurrent.as_secs_f64()
        );
        // The server holds every response for LATENCY, so this bound cannot flake.
        assert!(sequential >= LATENCY * URLS as u32);
        assert!(concurrent < sequential, "chunks {concurrent:?} vs one by one {sequential:?}");
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
