//! The crawler's five promises: limits hold, failures are collected, a race survives a
//! broken mirror, all mirrors down is reported, and no request is left running.

mod common;
use tollgate_testkit::simulated_network;

use std::time::Duration;

use common::matrix;
use simulated_network::{FetchError, Network, Outcome, host_of};
use tollgate::testing::eventually;
use tollgate::{KeyedBulkhead, RaceError, map_async, race};

const PER_HOST: usize = 2;
const HOSTS: [&str; 3] = ["fast.example", "slow.example", "mirror-a.example"];

/// The hand-built crawler: a per-host bulkhead (a map from host to cap, created on
/// demand) in front of the simulated network, and `map_async` for the global limit.
struct Crawler {
    network: Network,
    per_host: KeyedBulkhead<String>,
}

impl Crawler {
    fn new() -> Self {
        let latency = [2, 10, 20].map(Duration::from_millis);
        Self {
            network: Network::new(HOSTS.iter().map(|h| h.to_string()).zip(latency)),
            per_host: KeyedBulkhead::new(PER_HOST).acquire_timeout(Duration::from_secs(5)),
        }
    }

    async fn fetch(&self, url: String) -> Result<String, FetchError> {
        let outcome = if url.contains("broken") {
            Outcome::Unreachable
        } else {
            Outcome::Ok
        };
        self.per_host
            .run(host_of(&url), self.network.get(&url, outcome))
            .await
            .map_err(FetchError::NoSlot)?
    }

    async fn fetch_from_mirrors(
        &self,
        path: &str,
        mirrors: &[&str],
    ) -> Result<String, RaceError<FetchError>> {
        race(
            mirrors
                .iter()
                .map(|m| self.fetch(format!("https://{m}{path}"))),
        )
        .timeout(Duration::from_secs(2))
        .await
    }

    /// Pages and errors by URL, in input order.
    async fn crawl(
        &self,
        urls: Vec<String>,
        limit: usize,
    ) -> (Vec<(String, String)>, Vec<(String, FetchError)>) {
        let results = map_async(urls.clone(), limit, |url| self.fetch(url)).await;
        let mut pages = Vec::new();
        let mut errors = Vec::new();
        for (url, result) in urls.into_iter().zip(results) {
            match result {
                Ok(page) => pages.push((url, page)),
                Err(error) => errors.push((url, error)),
            }
        }
        (pages, errors)
    }
}

matrix! {
    async fn global_and_per_host_limits() {
        let crawler = Crawler::new();
        let urls: Vec<String> = (0..12)
            .flat_map(|i| HOSTS.map(|h| format!("https://{h}/p{i}")))
            .collect();
        let (pages, errors) = crawler.crawl(urls.clone(), 4).await;
        assert_eq!(pages.len(), urls.len());
        assert!(errors.is_empty(), "{errors:?}");
        let peaks = crawler.network.host_peaks();
        assert_eq!(peaks.len(), HOSTS.len());
        assert!(peaks.values().all(|&peak| peak <= PER_HOST), "{peaks:?}");
        assert!(crawler.network.peak() <= 4);
    }

    async fn failures_are_collected_not_raised() {
        let crawler = Crawler::new();
        let urls = vec!["https://fast.example/ok".to_owned(), "https://fast.example/broken".to_owned()];
        let (pages, errors) = crawler.crawl(urls, 8).await;
        assert_eq!(pages, [("https://fast.example/ok".to_owned(), "<html>https://fast.example/ok</html>".to_owned())]);
        assert_eq!(
            errors,
            [(
                "https://fast.example/broken".to_owned(),
                FetchError::Unreachable("https://fast.example/broken".to_owned())
            )]
        );
    }

    async fn mirror_race_survives_a_broken_mirror() {
        // The first contestant fails at once; the race carries on and the slow site wins.
        let crawler = Crawler::new();
        let broken = async { Err(FetchError::Unreachable("mirror down".to_owned())) };
        let page = race((broken, crawler.fetch("https://slow.example/file".to_owned())))
            .timeout(Duration::from_secs(2))
            .await
            .unwrap();
        assert_eq!(page, "<html>https://slow.example/file</html>");
    }

    async fn all_mirrors_down() {
        let crawler = Crawler::new();
        let failed = crawler
            .fetch_from_mirrors("/broken", &["fast.example", "slow.example"])
            .await
            .unwrap_err();
        assert_eq!(failed.errors().len(), 2);
        assert!(!failed.is_timed_out());
        assert!(failed.errors().iter().all(|(_, e)| matches!(e, FetchError::Unreachable(_))));
    }

    async fn no_request_is_left_running() {
        let crawler = Crawler::new();
        let urls = (0..6).map(|i| format!("https://slow.example/{i}")).collect();
        let (pages, _) = crawler.crawl(urls, 8).await;
        assert_eq!(pages.len(), 6);
        eventually(Duration::from_secs(1), || match crawler.network.in_flight() {
            0 => Ok(()),
            n => Err(format!("{n} requests still in flight")),
        })
        .await
        .unwrap();
        assert_eq!(crawler.per_host.len(), 0, "idle hosts forgotten");
    }
}
