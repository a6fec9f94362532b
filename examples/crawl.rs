//! The crawler on a simulated network, offline.
//!
//! This first version fetches pages one by one with a deadline per request, using what
//! the foundation provides: `run_sync`, `timeout`, `sleep`. The bounded, per-host-capped
//! crawler arrives with `map_async` and `Bulkhead`.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use tollgate::{Elapsed, run_sync, sleep, timeout};

/// Simulated latency per host; `hung.example` never answers.
fn latency(host: &str) -> Duration {
    match host {
        "fast.example" => Duration::from_millis(2),
        "slow.example" => Duration::from_millis(10),
        "hung.example" => Duration::MAX,
        _ => Duration::from_millis(5),
    }
}

async fn http_get(url: &str) -> String {
    let host = url.split('/').nth(2).unwrap_or_default();
    sleep(latency(host)).await;
    format!("<html>{url}</html>")
}

async fn fetch(url: &str) -> Result<String, Elapsed> {
    timeout(Duration::from_millis(50), http_get(url)).await
}

fn main() -> ExitCode {
    let mut urls: Vec<String> = (0..5)
        .flat_map(|i| {
            ["fast.example", "slow.example"].map(|host| format!("https://{host}/page/{i}"))
        })
        .collect();
    urls.push("https://hung.example/page/0".to_owned());

    let start = Instant::now();
    let (pages, failures) = run_sync(async {
        let mut pages = 0;
        let mut failures = Vec::new();
        for url in &urls {
            match fetch(url).await {
                Ok(_) => pages += 1,
                Err(error) => failures.push(format!("{url}: {error}")),
            }
        }
        (pages, failures)
    });
    println!(
        "fetched {pages} pages, {} failed, in {:?}",
        failures.len(),
        start.elapsed()
    );
    for failure in &failures {
        println!("  failed: {failure}");
    }
    if pages == 10 && failures.len() == 1 {
        ExitCode::SUCCESS
    } else {
        eprintln!("expected 10 pages and 1 failure");
        ExitCode::FAILURE
    }
}
