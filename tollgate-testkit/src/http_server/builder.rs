//! [`ServerBuilder`]: the hosts of a server before it starts, each with its plan (latency,
//! flakiness, rate, scripted `429`s, whether it tells its rate), and the rate every host
//! without its own gets. Starting it is the running server's part (`server.rs`).

use std::time::Duration;

use crate::meter::RateMeter;

/// How early a request may arrive and still be on time for a rate-limited host, unless
/// [`ServerBuilder::rate_allowance`] says otherwise (see the `http_server` module docs).
pub const DEFAULT_RATE_ALLOWANCE: Duration = Duration::from_millis(20);

/// How a host answers, set on the builder.
#[derive(Debug, Clone)]
pub(super) struct HostPlan {
    pub(super) name: String,
    pub(super) latency: Duration,
    pub(super) flaky: bool,
    pub(super) flaky_retry_after: u64,
    /// `(per_second, burst)`; `None` takes the builder's rate for every host, if any.
    pub(super) rate: Option<(f64, u32)>,
    /// `(k, retry_after)`: answer the `k`-th request (from 1) with `429`.
    pub(super) scripted_429: Vec<(usize, u64)>,
    /// Whether its `200`s tell its meter's rate in the rate-limit fields.
    pub(super) rate_limit_fields: bool,
}

/// Describes the hosts of a [`TestServer`](super::TestServer) before it starts.
#[derive(Debug, Default)]
pub struct ServerBuilder {
    pub(super) hosts: Vec<HostPlan>,
    /// The rate of every host without its own; applied at `start`.
    pub(super) rate_for_all: Option<(f64, u32)>,
    pub(super) allowance: Option<Duration>,
}

impl ServerBuilder {
    /// Adds a host that answers every request with `200` after `latency`.
    ///
    /// # Panics
    ///
    /// If a host of that name was added already.
    #[track_caller]
    pub fn host(self, name: &str, latency: Duration) -> Self {
        self.add(name, latency, false)
    }

    /// Adds a host that answers `503` to the first request for each path and `200` to every
    /// later one, each after `latency`. The `503`s say `Retry-After: 0` unless
    /// [`ServerBuilder::flaky_retry_after`] sets another value.
    ///
    /// # Panics
    ///
    /// If a host of that name was added already.
    #[track_caller]
    pub fn flaky_host(self, name: &str, latency: Duration) -> Self {
        self.add(name, latency, true)
    }

    /// Meters every host (unless [`ServerBuilder::host_rate_limit`] sets its own rate):
    /// `per_second` requests per second, bursts of up to `burst`; a request that comes too
    /// soon is answered `429` with `Retry-After` (see the `http_server` module docs).
    ///
    /// # Panics
    ///
    /// If `per_second` is not finite and positive, or `burst` is 0.
    #[track_caller]
    pub fn rate_limit(mut self, per_second: f64, burst: u32) -> Self {
        RateMeter::new(per_second, burst, Duration::ZERO);
        self.rate_for_all = Some((per_second, burst));
        self
    }

    /// Meters `host` alone at `per_second` with bursts of up to `burst` (overrides
    /// [`ServerBuilder::rate_limit`] for that host).
    ///
    /// # Panics
    ///
    /// If there is no such host (yet), if `per_second` is not finite and positive, or
    /// `burst` is 0.
    #[track_caller]
    pub fn host_rate_limit(mut self, host: &str, per_second: f64, burst: u32) -> Self {
        RateMeter::new(per_second, burst, Duration::ZERO);
        self.plan(host).rate = Some((per_second, burst));
        self
    }

    /// How early a request may arrive at a rate-limited host and still be on time
    /// ([`DEFAULT_RATE_ALLOWANCE`], 20 ms, unless set). Raise it on a machine so busy that
    /// the server thread runs late; the meter still catches a client that is too fast on
    /// average, a few requests later.
    pub fn rate_allowance(mut self, allowance: Duration) -> Self {
        self.allowance = Some(allowance);
        self
    }

    /// Makes `host` answer its `k`-th request (counting every request from 1, whatever its
    /// answer) with `429 Too Many Requests` and `Retry-After: retry_after_secs`, at once.
    /// Call it again for more such requests.
    ///
    /// # Panics
    ///
    /// If there is no such host (yet) or `k` is 0.
    #[track_caller]
    pub fn too_many_requests(mut self, host: &str, k: usize, retry_after_secs: u64) -> Self {
        assert!(k >= 1, "requests count from 1");
        self.plan(host).scripted_429.push((k, retry_after_secs));
        self
    }

    /// Sets the `Retry-After` of a flaky host's `503`s, in seconds.
    ///
    /// # Panics
    ///
    /// If there is no such host (yet) or it is not flaky.
    #[track_caller]
    pub fn flaky_retry_after(mut self, host: &str, retry_after_secs: u64) -> Self {
        let plan = self.plan(host);
        assert!(plan.flaky, "host {host:?} is not flaky");
        plan.flaky_retry_after = retry_after_secs;
        self
    }

    /// Makes `host` tell its rate on each `200` in the IETF rate-limit fields,
    /// `RateLimit-Policy` and `RateLimit`, read from its meter (see the `http_server` module
    /// docs). The host needs a meter: its own ([`ServerBuilder::host_rate_limit`]) or every
    /// host's ([`ServerBuilder::rate_limit`]).
    ///
    /// # Panics
    ///
    /// If there is no such host (yet); at [`start`](Self::start), if it has no meter.
    #[track_caller]
    pub fn rate_limit_fields(mut self, host: &str) -> Self {
        self.plan(host).rate_limit_fields = true;
        self
    }

    #[track_caller]
    fn add(mut self, name: &str, latency: Duration, flaky: bool) -> Self {
        assert!(
            self.hosts.iter().all(|known| known.name != name),
            "host {name:?} added twice"
        );
        self.hosts.push(HostPlan {
            name: name.to_owned(),
            latency,
            flaky,
            flaky_retry_after: 0,
            rate: None,
            scripted_429: Vec::new(),
            rate_limit_fields: false,
        });
        self
    }

    #[track_caller]
    fn plan(&mut self, host: &str) -> &mut HostPlan {
        self.hosts
            .iter_mut()
            .find(|plan| plan.name == host)
            .unwrap_or_else(|| panic!("no host named {host:?} (add it first)"))
    }
}
