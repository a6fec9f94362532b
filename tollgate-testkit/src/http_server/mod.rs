//! A loopback HTTP/1.1 server for tests and examples: several "hosts", real sockets, and a
//! server-side judge of how politely a client behaves.
//!
//! Each host is its own listening port on 127.0.0.1 (an ephemeral port) with its own latency
//! per response. One extra address refuses every connection, and a host built with
//! [`ServerBuilder::flaky_host`] answers `503` to the first request for each path and `200`
//! afterwards (something for retries to recover from).
//!
//! The server runs on its own thread, on async-io (smol's reactor), so it works whatever
//! runtime the client uses: smol, `run_sync`, tokio, or a plain blocking thread.
//! [`TestServer::shutdown`] (or dropping the server) stops it and closes every socket.
//!
//! # What it measures
//!
//! - **Concurrency**: active connections per host and globally, with their peaks
//!   ([`Stats::active`], [`Stats::peak`]; see "What is counted" below).
//! - **Totals**: connections, requests, responses by status ([`Stats`]), and disconnects.
//! - **Arrivals**: the instant of every request to a host, with its path, status and the
//!   instant its answer went out ([`TestServer::arrivals`], [`Arrival`]). The free functions
//!   [`max_in_window`], [`count_between`] and [`achieved_rate`] turn that log into claims
//!   such as "never more than `burst + rate × W` requests in any window `W`" (bound:
//!   [`window_limit`]) or "no request to this host during the second after its `429`".
//! - **Rate violations**: with [`ServerBuilder::rate_limit`] (every host) or
//!   [`ServerBuilder::host_rate_limit`] (one host) the server meters each host itself, with
//!   its own [`RateMeter`], and answers a request that comes too soon with
//!   `429 Too Many Requests` and `Retry-After: <seconds>`, counting it in
//!   [`Stats::over_rate`]. A client that keeps to the rate sees no `429`; one that is 20%
//!   too fast is caught within a few requests.
//!
//! # Scripted answers
//!
//! - [`ServerBuilder::too_many_requests`]: a host answers `429` with `Retry-After: N` to its
//!   `k`-th request, and [`TestServer::too_many_requests_for`] makes it answer `429` to every
//!   request for a while from now: a client should then pause the whole host.
//! - [`ServerBuilder::flaky_retry_after`]: the `Retry-After` of a flaky host's `503`s
//!   (`0` unless set).
//! - [`TestServer::set_unavailable`]: a host answers `503` (no `Retry-After`) to everything
//!   that arrives from now on, until switched back: a host that goes down and recovers.
//!
//! # What a host says about its rate
//!
//! - [`ServerBuilder::rate_limit_fields`]: a metered host tells its rate on each `200`, in the
//!   IETF rate-limit fields: `RateLimit-Policy: "default";q=<per second>;w=1` (the meter's
//!   rate, rounded down, at least 1) and `RateLimit: "default";r=<remaining>;t=<reset>`,
//!   read from its meter (a GCRA, see below) as the answer goes out: `r` is how many requests
//!   in a row the meter would take at that instant (without the allowance), `t` the seconds
//!   until it would take its whole burst again (rounded up).
//! - [`TestServer::set_fields`]: header lines a host adds to each `200` from now on (a
//!   policy that changes in the middle of a run).
//!
//! Every `429` goes out as soon as the request head is read, without the host's latency: a
//! real rate limiter refuses before it does the work. `200`s and `503`s come after the latency.
//!
//! # The rate meter, and why it allows a little jitter
//!
//! A host's meter sees a request when the server *accepts* its connection (the earliest the
//! server can know of it) and decides then, in accept order. It keeps a theoretical schedule
//! (the "virtual scheduling" form of the generic cell rate algorithm): a request is on time
//! if it comes no earlier than `interval = 1 / per_second` after the previous accepted one,
//! with up to `burst` requests at once after a quiet spell. A request the meter refuses does
//! not move the schedule, so `429`s count exactly the requests beyond the rate.
//!
//! Loopback transit is not instantaneous, and a busy machine may run the server thread late:
//! a client that starts requests exactly at the rate can have two of them accepted slightly
//! closer together than the interval. So a request may arrive up to an **allowance** early
//! (20 ms unless [`ServerBuilder::rate_allowance`] says otherwise) and still be on time.
//! Earliness is never carried over (the schedule stays where it was), so a client that is
//! too fast on average is still caught: 20% too fast gains `interval / 6` per request and
//! crosses any allowance after a few requests. At rates above `1 / allowance` the allowance
//! also lets `floor(allowance × per_second)` extra requests into a burst.
//!
//! The server counts on one clock, [`std::time::Instant`], with real sockets: tokio's paused
//! clock does not reach it.
//!
//! # One request per connection
//!
//! Every response carries `Connection: close` and the server closes the connection after it:
//! there is no keep-alive. That is deliberate. A connection is then exactly one request, so
//! "concurrent connections" (what a real server's rate limiter sees) and "requests in flight"
//! (what a client-side cap limits) are the same number, and an idle pooled connection can
//! never inflate the count. Clients that do pool (hyper's pool, reqwest) see the header and
//! open a new connection for the next request.
//!
//! # What is counted
//!
//! Per host and across all hosts, the server counts **active connections**: a connection
//! counts from the moment it is accepted until its response *starts* to go out (or the
//! client goes away). It stops counting *before* the first byte of the response is written,
//! so a client can never see a response while the server still counts that connection:
//! a client that starts its next request only after the previous response arrived never
//! overlaps with itself in the server's eyes (sequential => peak 1, cap `n` => peak <= `n`).
//! The count starts at `accept`, which follows the client's `connect`: the server can only
//! under-count, never over-count, what the client has outstanding.
//!
//! One caveat is unavoidable on the server side: a request the client *cancels* (a dropped
//! future, a lost race, a timeout) still counts until its close reaches the server, a few
//! microseconds later. A test that asserts "peak <= cap" on a host should not cancel
//! requests to that host mid-flight, or should allow for it.
//!
//! A **disconnect** is a connection the client closed before its response was completely
//! written: it left while the server was reading the request, waiting out the latency
//! (the server watches the socket for end-of-file meanwhile), or writing the response.
//! That is how a test proves that a race's loser really closed its connection.
//!
//! # Example
//!
//! ```ignore
//! use tollgate_testkit::http_server;
//!
//! let server = http_server::TestServer::builder()
//!     .host("fast", Duration::from_millis(2))
//!     .host("slow", Duration::from_millis(20))
//!     .flaky_host("flaky", Duration::from_millis(2))
//!     .rate_limit(10.0, 1) // every host: 10 requests per second, no burst
//!     .too_many_requests("slow", 3, 1) // its 3rd request: `429`, `Retry-After: 1`
//!     .start();
//! let url = server.url("fast", "/page/1"); // "http://127.0.0.1:PORT/page/1"
//! // ... fetch it ...
//! assert_eq!(server.stats("fast").peak, 1);
//! assert_eq!(server.stats("fast").over_rate, 0);
//! let times = server.arrival_times("fast");
//! let second = Duration::from_secs(1);
//! // What the meter accepts keeps within the rate over any window, give or take the allowance.
//! let limit = http_server::window_limit(10.0, 1, second + http_server::DEFAULT_RATE_ALLOWANCE);
//! assert!(http_server::max_in_window(&times, second) <= limit);
//! ```

mod builder;
mod counts;
mod host;
mod serve;
mod server;
mod wire;

pub use self::builder::{DEFAULT_RATE_ALLOWANCE, ServerBuilder};
pub use self::counts::Stats;
pub use self::host::{Arrival, TOO_MANY_BODY, UNAVAILABLE_BODY, delay_spread, page_body};
pub use self::server::TestServer;
pub use crate::meter::{RateMeter, achieved_rate, count_between, max_in_window, window_limit};
