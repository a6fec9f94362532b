//! The crawler over real sockets: a loopback HTTP/1.1 server and hyper as the client.
//!
//! This first version shows the article's headline, sequential versus concurrent fetching
//! of the same URLs, with plain `await`s and `futures::future::join_all` over chunks. The
//! bounded, per-host-capped crawl with retries and a mirror race arrives with `map_async`,
//! `KeyedBulkhead`, `retry` and `race`.
//!
//! `cargo run --example crawl_http [URLS] [LATENCY_MS] [CHUNK]` (defaults: 200 5 16) runs
//! under `run_sync` with the smol-world client; with `--features tokio` it runs again inside
//! a tokio runtime with the tokio-world client. The server counts connections itself; the
//! example checks what it saw and exits non-zero if an invariant breaks.

#[path = "../tests/support/http_client.rs"]
mod http_client;
#[path = "../tests/support/http_server.rs"]
mod http_server;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use futures::future::join_all;
use http_server::TestServer;

const HOSTS: [&str; 4] = ["alpha", "bravo", "charlie", "delta"];

struct Settings {
    urls: usize,
    latency: Duration,
    chunk: usize,
}

fn settings() -> Result<Settings, String> {
    let mut args = std::env::args().skip(1);
    let mut next = |name: &str, default: u64| -> Result<u64, String> {
        match args.next() {
            None => Ok(default),
            Some(arg) => arg
                .parse()
                .map_err(|_| format!("{name}: not a number: {arg}")),
        }
    };
    let settings = Settings {
        urls: next("URLS", 200)? as usize,
        latency: Duration::from_millis(next("LATENCY_MS", 5)?),
        chunk: next("CHUNK", 16)? as usize,
    };
    if settings.chunk == 0 {
        return Err("CHUNK must be at least 1".to_owned());
    }
    Ok(settings)
}

/// Fetches every URL one by one, then in `join_all` chunks; returns both times and checks
/// the pages and the server's own counts.
async fn crawl(server: &TestServer, urls: &[String], chunk: usize) -> Result<Timings, String> {
    let start = Instant::now();
    for url in urls {
        check(url, http_client::get(url).await)?;
    }
    let sequential = start.elapsed();
    let peak = server.global().peak;
    if peak != 1 {
        return Err(format!(
            "sequential fetching, but the server saw {peak} at once"
        ));
    }

    server.reset_peaks();
    let start = Instant::now();
    for batch in urls.chunks(chunk) {
        let pages = join_all(batch.iter().map(http_client::get)).await;
        for (url, page) in batch.iter().zip(pages) {
            check(url, page)?;
        }
    }
    let concurrent = start.elapsed();
    let peak = server.global().peak;
    if peak > chunk {
        return Err(format!(
            "chunks of {chunk}, but the server saw {peak} at once"
        ));
    }
    Ok(Timings {
        sequential,
        concurrent,
        concurrent_peak: peak,
    })
}

fn check(
    url: &str,
    page: Result<http_client::Page, http_client::ClientError>,
) -> Result<(), String> {
    match page {
        Ok(page) if page.status == 200 => Ok(()),
        Ok(page) => Err(format!("{url}: status {}", page.status)),
        Err(error) => Err(format!("{url}: {error}")),
    }
}

struct Timings {
    sequential: Duration,
    concurrent: Duration,
    concurrent_peak: usize,
}

fn report(world: &str, settings: &Settings, timings: &Timings) {
    println!(
        "[{world}] {} urls over {} hosts at {:?}: sequential {:.0} ms, join_all chunks of {} \
         {:.0} ms (peak {} at once): {:.1}x faster",
        settings.urls,
        HOSTS.len(),
        settings.latency,
        timings.sequential.as_secs_f64() * 1e3,
        settings.chunk,
        timings.concurrent.as_secs_f64() * 1e3,
        timings.concurrent_peak,
        timings.sequential.as_secs_f64() / timings.concurrent.as_secs_f64(),
    );
}

fn main() -> ExitCode {
    let settings = match settings() {
        Ok(settings) => settings,
        Err(message) => {
            eprintln!("{message}\nusage: crawl_http [URLS] [LATENCY_MS] [CHUNK]");
            return ExitCode::FAILURE;
        }
    };
    let server = HOSTS
        .iter()
        .fold(TestServer::builder(), |builder, host| {
            builder.host(host, settings.latency)
        })
        .start();
    let urls: Vec<String> = (0..settings.urls)
        .map(|i| server.url(HOSTS[i % HOSTS.len()], &format!("/page/{i}")))
        .collect();

    let outcome = tollgate::run_sync(crawl(&server, &urls, settings.chunk));
    let outcome = outcome.map(|timings| report("run_sync, smol client", &settings, &timings));

    #[cfg(feature = "tokio")]
    let outcome = outcome.and_then(|()| {
        server.reset_peaks();
        let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
        let timings = runtime.block_on(crawl(&server, &urls, settings.chunk))?;
        report("tokio, tokio client", &settings, &timings);
        Ok(())
    });

    let stats = server.global();
    match outcome {
        Ok(()) if stats.disconnects == 0 && stats.active == 0 => ExitCode::SUCCESS,
        Ok(()) => {
            eprintln!("the server saw unexpected disconnects: {stats:?}");
            ExitCode::FAILURE
        }
        Err(message) => {
            eprintln!("crawl failed: {message}");
            ExitCode::FAILURE
        }
    }
}
