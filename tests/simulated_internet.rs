//! The simulated internet (`tollgate_testkit::simulated_internet`) at a reduced scale (50
//! hosts, 5,000 URLs, global limit 64), measured through a static crawler built on tollgate's
//! public API: the same seed gives the same figures, another seed other figures, a host's
//! meter never admits more than its rate, a dead host's attempts all time out at 5 s, and
//! 503s come only past a host's knee.
//!
//! Only under the `tokio` feature, and only on tokio: the model runs in virtual time on
//! tokio's clock (a current-thread runtime started paused), whose millisecond timer wheel its
//! figures are tuned to, and tollgate's timers follow tokio's clock only with the feature.
//! The crawler these tests drive is tollgate's ordinary keyed map, which the rest of the suite
//! runs on both virtual clocks and under every executor.

#![cfg(feature = "tokio")]

use std::cell::RefCell;
use std::time::Duration;

use futures_lite::StreamExt;
use tollgate::{KeySettings, MapControl, Rate, RetryPolicy, amap_iter};
use tollgate_testkit::simulated_internet::{
    ATTEMPT_TIMEOUT, Config, Profile, Report, Response, Restore, SimulatedInternet, Url,
    restore_quantile,
};

/// The reduced scale. The tests use seeds 1-3; the example's table has seeds of its own.
fn config(seed: u64) -> Config {
    Config {
        seed,
        hosts: 50,
        urls: 5_000,
        global_limit: 64,
        halved: 5,
        dead_share: 0.05,
        record_arrivals: true,
        profile: Profile::Default,
    }
}

/// One attempt as the crawler saw it.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Attempt {
    url: Url,
    latency: Duration,
    response: Response,
}

/// A failed attempt, the crawler's error.
#[derive(Clone, Copy, Debug)]
struct Failed {
    url: Url,
    response: Response,
}

/// What a run leaves for the checks.
struct Crawled {
    net: SimulatedInternet,
    report: Report,
    attempts: Vec<Attempt>,
}

/// A static crawler's settings.
#[derive(Clone, Copy)]
struct Client {
    /// Per host.
    limit: usize,
    /// Per host, the same for all.
    rate: Option<u32>,
    /// Each host its own rate: this share of the host's true rate (a test may look).
    share_of_host_rate: Option<f64>,
    /// A 429 pauses its host for the `Retry-After`.
    pause: bool,
}

impl Client {
    fn new(limit: usize, rate: Option<u32>) -> Self {
        Self {
            limit,
            rate,
            share_of_host_rate: None,
            pause: true,
        }
    }
}

/// A static crawler: 5 attempts, 429s and 503s retried (a 429 after its `Retry-After`),
/// timeouts given up.
fn crawl(config: Config, client: Client) -> Crawled {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    runtime.block_on(async {
        let net = SimulatedInternet::new(config);
        let attempts = RefCell::new(Vec::new());
        let (net_ref, attempts_ref) = (&net, &attempts);
        let fetch = |url| async move {
            let sent = tokio::time::Instant::now();
            let response = net_ref.fetch(url).await;
            let latency = sent.elapsed();
            attempts_ref.borrow_mut().push(Attempt {
                url,
                latency,
                response,
            });
            match response {
                Response::Ok => Ok(url),
                response => Err(Failed { url, response }),
            }
        };
        let policy = RetryPolicy::new()
            .attempts(5)
            .jitter(0.0)
            .when(|failed: &Failed| failed.response != Response::TimedOut)
            .retry_after(|failed| failed.response.retry_after())
            .pause_key(move |failed| failed.response.retry_after().filter(|_| client.pause));
        {
            let control = MapControl::new();
            let mut map = amap_iter(net.urls().to_vec(), net.config().global_limit, fetch)
                .per_key(|url: &Url| url.host, client.limit);
            if let Some(rate) = client.rate {
                map = map.per_key_rate(Rate::per_second(rate));
            }
            let map = map.control(&control);
            if let Some(share) = client.share_of_host_rate {
                for host in hosts(&net) {
                    let rate = net.capacity(host).rate * share;
                    let every = Duration::from_secs_f64(1.0 / rate);
                    control
                        .set_key_settings(host, KeySettings::new().rate(Rate::every(every)))
                        .unwrap();
                }
            }
            let mut outputs = std::pin::pin!(map.retry(policy));
            while let Some(output) = outputs.next().await {
                net.finished(output.unwrap_or_else(|failed| failed.url));
            }
        }
        let report = net.report();
        Crawled {
            net,
            report,
            attempts: attempts.into_inner(),
        }
    })
}

fn hosts(net: &SimulatedInternet) -> impl Iterator<Item = u32> {
    0..net.config().hosts as u32
}

#[test]
fn the_same_seed_gives_the_same_figures_and_another_seed_others() {
    let first = crawl(config(1), Client::new(4, Some(20)));
    let again = crawl(config(1), Client::new(4, Some(20)));
    assert_eq!(first.report, again.report);
    assert_eq!(first.attempts, again.attempts, "attempt by attempt");
    for host in hosts(&first.net) {
        assert_eq!(
            first.net.seconds(host),
            again.net.seconds(host),
            "host {host}"
        );
    }
    // The run went past the halving and the restore, and both runs halved the same hosts.
    assert!(first.report.virtual_time > 180.0, "{:?}", first.report);
    assert_eq!(first.net.halved_hosts().len(), 5);
    assert_eq!(first.net.halved_hosts(), again.net.halved_hosts());
    assert_eq!(first.report.urls, 5_000);
    assert!(first.report.successes > 0, "{:?}", first.report);

    let other = crawl(config(2), Client::new(4, Some(20)));
    assert_ne!(first.report, other.report);
    assert_ne!(first.net.urls(), other.net.urls());
    let capacities = |c: &Crawled| hosts(&c.net).map(|h| c.net.capacity(h)).collect::<Vec<_>>();
    assert_ne!(capacities(&first), capacities(&other));
}

#[test]
fn a_host_never_admits_more_than_its_rate() {
    // No client rate and 16 per host: the meters do all the refusing.
    let crawled = crawl(config(3), Client::new(16, None));
    let net = &crawled.net;
    assert!(
        crawled
            .attempts
            .iter()
            .any(|a| a.response.retry_after().is_some()),
        "the meters were tested: some 429s"
    );
    let mut checked = 0;
    for host in hosts(net) {
        let capacity = net.capacity(host);
        let mut admitted = net.admitted(host);
        admitted.sort();
        // Halving only lowers a rate: the full rate bounds every window.
        for window in [0.005, 0.05, 0.5, 5.0] {
            let bound = capacity.rate * window + 1.0;
            let mut first = 0;
            for (last, &at) in admitted.iter().enumerate() {
                while (at - admitted[first]).as_secs_f64() >= window {
                    first += 1;
                }
                let count = (last - first + 1) as f64;
                assert!(
                    count <= bound,
                    "host {host} at {:.0}/s admitted {count} within {window} s (at most {bound:.2})",
                    capacity.rate
                );
            }
        }
        checked += admitted.len();
    }
    assert!(checked > 1_000, "{checked} admissions checked");
    assert!(crawled.report.overload > 0.01, "{:?}", crawled.report);
    for attempt in &crawled.attempts {
        if let Some(after) = attempt.response.retry_after() {
            assert!(
                after >= Duration::from_secs(1) && after.subsec_nanos() == 0,
                "{after:?}"
            );
        }
    }
}

#[test]
fn a_dead_host_times_out_at_five_seconds_every_time() {
    let crawled = crawl(config(1), Client::new(2, None));
    let net = &crawled.net;
    let dead: Vec<u32> = hosts(net).filter(|&h| net.capacity(h).dead).collect();
    assert_eq!(dead.len(), 3, "5% of 50 hosts, rounded");
    let mut timeouts = 0;
    for attempt in &crawled.attempts {
        if net.capacity(attempt.url.host).dead {
            assert_eq!(attempt.response, Response::TimedOut, "{attempt:?}");
            // tokio's timer wakes at whole milliseconds.
            assert!(
                attempt.latency >= ATTEMPT_TIMEOUT
                    && attempt.latency <= ATTEMPT_TIMEOUT + Duration::from_millis(1),
                "{attempt:?}"
            );
            timeouts += 1;
        }
    }
    assert!(timeouts > 0);
    // Given up at the first timeout: one attempt per URL, at most 2 at once.
    let dead_urls = net.urls().iter().filter(|u| dead.contains(&u.host)).count();
    assert_eq!(timeouts, dead_urls);
    assert_eq!(crawled.report.dead_peak, 2);
}

#[test]
fn unavailable_comes_only_past_the_knee() {
    // 32 per host, each host at 90% of its own rate, and a global limit that leaves every
    // host its 32: the hosts whose rate admits more than their knee serves (rate × 1.2 ×
    // base > knee) are pushed past it.
    let client = Client {
        share_of_host_rate: Some(0.9),
        ..Client::new(32, None)
    };
    let crawled = crawl(
        Config {
            global_limit: 50 * 32,
            ..config(2)
        },
        client,
    );
    let net = &crawled.net;
    let halved = net.halved_hosts();
    let mut past = 0;
    for host in hosts(net) {
        let capacity = net.capacity(host);
        let unavailable: u32 = net.seconds(host).iter().map(|s| s.unavailable).sum();
        if capacity.dead {
            assert_eq!(unavailable, 0);
        } else if net.peak_in_flight(host) <= capacity.knee && !halved.contains(&host) {
            // Never more in service than the knee: no 503.
            assert_eq!(unavailable, 0, "host {host}: {capacity:?}");
        } else {
            past += unavailable;
        }
    }
    assert!(past > 0, "hosts past their knee answered 503");
}

#[test]
fn the_restore_figure_counts_a_host_whose_work_ended_as_not_back_by_then() {
    let reached = |seconds| Restore {
        seconds,
        reached: true,
    };
    let ended = |seconds| Restore {
        seconds,
        reached: false,
    };
    // Four hosts: back at 10, 20 and 30 s; one ran out of work at 15 s, not back.
    let hosts = [reached(10.0), ended(15.0), reached(20.0), reached(30.0)];
    // 3 of 4 still out after 10 s; the one that ended leaves 2 waiting; one of them back at
    // 20 s: 3/4 x 1/2 = 37.5% still out.
    assert_eq!(restore_quantile(&hosts, 0.25), Some(10.0));
    assert_eq!(restore_quantile(&hosts, 0.5), Some(20.0));
    assert_eq!(restore_quantile(&hosts, 0.9), Some(30.0));
    // A host that never got back while it had work keeps the median out of reach.
    let hosts = [reached(10.0), ended(400.0), ended(400.0)];
    assert_eq!(restore_quantile(&hosts, 0.5), None);
    assert_eq!(restore_quantile(&[], 0.5), None);
}

#[test]
fn no_crawl_passes_the_fluid_bound_and_the_ordered_schedule_stays_under_it() {
    for seed in 1..=3 {
        for client in [Client::new(4, Some(20)), Client::new(32, None)] {
            let report = crawl(config(seed), client).report;
            assert!(
                report.goodput <= report.fluid_bound,
                "seed {seed}: goodput {} over the bound {}",
                report.goodput,
                report.fluid_bound
            );
            assert!(
                report.ordered_goodput <= report.fluid_bound,
                "seed {seed}: the ordered schedule {} over the bound {}",
                report.ordered_goodput,
                report.fluid_bound
            );
            assert!(
                report.fluid_bound <= 1.0 && report.ordered_goodput > 0.0,
                "seed {seed}: {report:?}"
            );
        }
    }
}
