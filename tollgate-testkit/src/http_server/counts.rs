//! What the server counts: per host and across hosts, connections active now and their
//! peak, and totals by outcome; [`Stats`] is a snapshot of them.

use std::sync::atomic::{AtomicUsize, Ordering};

/// A snapshot of one host's counters (or, from
/// [`TestServer::global`](super::TestServer::global), all hosts' together).
///
/// Responses by status: `ok` (`200`), `too_many` (`429`), `unavailable` (`503`); the rest of
/// `responses` are `400`/`431` answers to malformed requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Connections accepted and not yet answered (see the `http_server` module docs).
    pub active: usize,
    /// The highest `active` seen since start (or the last
    /// [`TestServer::reset_peaks`](super::TestServer::reset_peaks)).
    pub peak: usize,
    /// Connections accepted: one per request, since there is no keep-alive.
    pub connections: usize,
    /// Request heads read completely.
    pub requests: usize,
    /// Responses the server started to write, whatever their status. Counted before the
    /// first byte goes out, so a client holding a response always finds it counted here.
    pub responses: usize,
    /// Of those, `200` answers.
    pub ok: usize,
    /// Of those, `429` answers: the rate meter's and the scripted ones.
    pub too_many: usize,
    /// Of the `429`s, those the rate meter gave: requests that came faster than the host's
    /// rate allows. Zero for a polite client.
    pub over_rate: usize,
    /// Of those, `503` answers.
    pub unavailable: usize,
    /// Connections the client closed before its response was completely written (including
    /// the rare response whose write then failed, which `responses` also counts).
    pub disconnects: usize,
}

#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) connections: AtomicUsize,
    pub(super) requests: AtomicUsize,
    pub(super) responses: AtomicUsize,
    pub(super) ok: AtomicUsize,
    pub(super) too_many: AtomicUsize,
    pub(super) over_rate: AtomicUsize,
    pub(super) unavailable: AtomicUsize,
    pub(super) disconnects: AtomicUsize,
}

impl Counters {
    /// The counters as they stand, with `gauge`'s active count and peak.
    pub(super) fn snapshot(&self, gauge: &Gauge) -> Stats {
        let load = |counter: &AtomicUsize| counter.load(Ordering::SeqCst);
        Stats {
            active: gauge.now(),
            peak: gauge.peak(),
            connections: load(&self.connections),
            requests: load(&self.requests),
            responses: load(&self.responses),
            ok: load(&self.ok),
            too_many: load(&self.too_many),
            over_rate: load(&self.over_rate),
            unavailable: load(&self.unavailable),
            disconnects: load(&self.disconnects),
        }
    }
}

pub(super) fn bump(counter: &AtomicUsize) {
    counter.fetch_add(1, Ordering::SeqCst);
}

/// A count of active connections with its peak.
#[derive(Debug, Default)]
pub(super) struct Gauge {
    now: AtomicUsize,
    peak: AtomicUsize,
}

impl Gauge {
    pub(super) fn enter(&self) -> GaugeGuard<'_> {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        GaugeGuard(self)
    }

    pub(super) fn now(&self) -> usize {
        self.now.load(Ordering::SeqCst)
    }

    pub(super) fn peak(&self) -> usize {
        self.peak.load(Ordering::SeqCst)
    }

    pub(super) fn reset_peak(&self) {
        self.peak.store(self.now(), Ordering::SeqCst);
    }
}

pub(super) struct GaugeGuard<'a>(&'a Gauge);

impl Drop for GaugeGuard<'_> {
    fn drop(&mut self) {
        self.0.now.fetch_sub(1, Ordering::SeqCst);
    }
}
