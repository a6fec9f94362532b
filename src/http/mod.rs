//! What an HTTP response says about its key, on the `http` crate's types (the ones hyper,
//! reqwest and axum share). Available with the `http` feature.
//!
//! - [`outcome`]: the response's [`Outcome`]: 2xx and 3xx a success, 429 an overload, 503 an
//!   outage when it says when to come back (`Retry-After`) and an overload when it does not,
//!   anything else a failure; each with the headers' [`hint`] (see [What the status
//!   says](#what-the-status-says)).
//! - [`hint`]: the [`Hint`] the headers give: a pause, a rate, a limit.
//! - [`retry_after`]: the `Retry-After` header alone.
//!
//! # What the status says
//!
//! | status | outcome | why |
//! | --- | --- | --- |
//! | 2xx, 3xx | success | served (a redirect too: the server answered at its pace) |
//! | 429 | overload | RFC 6585: too many requests in a given time, the client's pace. Its `Retry-After` is this request's wait, not the host's: it pauses the host only from [`QUOTA_WAIT`] on (a quota's reset, which every request of the host would meet); a shorter one is left to the request's retry (`RetryPolicy::retry_after` with [`retry_after`]), while the overload slows an adaptive host. Measured on a real nginx whose strict meters answer `429` with `Retry-After: 5` (`examples/nginx.rs`): pausing the host on each took 85.0 s and 30 `429`s where leaving the wait to the request took 38.8 s and 43 |
//! | 503 with a valid `Retry-After` | outage | RFC 9110 (15.6.4): a 503 is a temporary overload *or scheduled maintenance*, and a server that knows when it will be back says so. An outage waits out the pause and cuts nothing; should attempts under way as it came succeed, the server was serving some while refusing others, and an adaptive key reads that as an overload (see [`Outcome::outage`]) |
//! | 503 without `Retry-After` | overload | a server or proxy that sheds load (nginx's `limit_req` and `limit_conn` answer 503 by default) |
//! | 500, 502, 504, any other | failure | an error, or a gateway's word that its upstream failed or timed out, which a dead backend gives as often as a busy one: it lowers nothing, and a breaker counts it |
//!
//! # What the headers say
//!
//! | header | gives |
//! | --- | --- |
//! | `Retry-After: 120` or `Retry-After: <HTTP-date>` | a pause of that long (a date measured against the response's `Date`; see [`retry_after`]) |
//! | `RateLimit-Policy: "p";q=10;w=1` | the rate 10 per second, evenly spaced; of several policies, the slowest |
//! | `RateLimit-Policy: "p";q=4;qu="concurrent-requests"` | the limit 4; of several, the lowest |
//! | `RateLimit: "p";r=0;t=30` | a pause of 30 s (nothing remains until the reset); `r` above 0 gives nothing |
//! | `RateLimit-Limit: 10, 10;w=1` (the draft's earlier revisions) | the rate 10 per second; `RateLimit-Limit: 10` alone gives nothing |
//! | `RateLimit-Remaining: 0` and `RateLimit-Reset: 30` | a pause of 30 s |
//! | `X-RateLimit-Remaining: 0` and `X-RateLimit-Reset: 1700000000` | a pause until then (see below); `X-RateLimit-Limit` alone gives nothing |
//!
//! `RateLimit-Policy` and `RateLimit` are read as the IETF HTTPAPI working group's draft
//! "RateLimit header fields for HTTP" (`draft-ietf-httpapi-ratelimit-headers`, revision 10)
//! defines them: Structured Field lists, a policy's name a string or a token (or, as in
//! revisions 5 and 6, the quota itself: `RateLimit-Policy: 10;w=1`). A quota without a
//! window says nothing about time, so it gives no rate; a policy counted in other units
//! (`qu="content-bytes"`) gives nothing; partition keys (`pk`) are not read: the key is
//! yours, given to the map.
//!
//! A reset (`RateLimit-Reset`, `X-RateLimit-Reset`) counts seconds from the response when it
//! is below 1,000,000,000 (a fraction allowed), and is a Unix time otherwise (GitHub's
//! form): in seconds up to 1,000,000,000,000, in milliseconds from there. A Unix time is
//! measured against the response's `Date` header when it has a valid one (so the client's
//! clock skew does not count), else against the system clock; an HTTP-date is read as one.
//! A reset in the past gives a zero pause.
//!
//! # When headers disagree
//!
//! The stricter word wins: of all the rate-limit fields present, the longest pause, the
//! lowest limit, the slowest rate ([`Hint::merge`]). One exception: when
//! `Retry-After` is present and valid, it alone sets the pause, even if a rate-limit field's
//! reset is later, as the draft asks of clients (its reset may be ignored then). Headers
//! are read whatever the status: servers send rate-limit fields on their 200s too.
//!
//! # Malformed values
//!
//! Every function here reads any bytes without panicking. A malformed value (garbage, a
//! negative number, an impossible date, bytes that are not ASCII, an empty value) is
//! ignored: a Structured Field that does not parse is ignored whole, as RFC 9651 asks, and
//! the other headers still count. Any pause is at most 2^31 seconds (about 68 years), the
//! value RFC 9111 gives delta-seconds too large to represent.
//!
//! # Examples
//!
//! ```
//! use std::time::Duration;
//! use http::{HeaderMap, StatusCode};
//! use tollgate::Rate;
//!
//! let mut headers = HeaderMap::new();
//! headers.insert("ratelimit-policy", r#""default";q=100;w=60"#.parse().unwrap());
//! headers.insert("ratelimit", r#""default";r=0;t=30"#.parse().unwrap());
//!
//! let outcome = tollgate::http::outcome(StatusCode::OK, &headers);
//! assert!(outcome.is_success());
//! let hint = outcome.hint();
//! assert_eq!(hint.get_rate(), Some(Rate::per(100, Duration::from_secs(60))));
//! assert_eq!(hint.get_pause(), Some(Duration::from_secs(30)));
//! ```

mod date;
#[cfg(test)]
mod outcome_tests;
mod rate_limit;
mod retry_after;
mod structured;
#[cfg(test)]
mod tests;

use std::time::Duration;

use ::http::{HeaderMap, StatusCode};

use crate::http::date::response_time;
use crate::http::rate_limit::{IETF_OLD, X_RATE_LIMIT, counters, ietf};
use crate::limit::hint::Hint;
use crate::limit::outcome::Outcome;

pub use self::retry_after::retry_after;

/// The [`Hint`] a response's headers give about its key: a pause from
/// `Retry-After` or an exhausted rate-limit counter, a rate from a rate-limit policy with a
/// window, a limit from a policy counted in concurrent requests. An empty hint when they say
/// nothing. The [module docs](self) list what each header gives and which wins when they
/// disagree; malformed values are ignored, never a panic.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use http::HeaderMap;
/// use tollgate::Rate;
///
/// let mut headers = HeaderMap::new();
/// // GitHub's form: a Unix time, measured against the response's Date.
/// headers.insert("date", "Tue, 14 Nov 2023 22:13:00 GMT".parse().unwrap());
/// headers.insert("x-ratelimit-remaining", "0".parse().unwrap());
/// headers.insert("x-ratelimit-reset", "1700000000".parse().unwrap());
/// headers.insert("ratelimit-policy", r#""hour";q=1000;w=3600, "min";q=50;w=60"#.parse().unwrap());
///
/// let hint = tollgate::http::hint(&headers);
/// assert_eq!(hint.get_pause(), Some(Duration::from_secs(20)));
/// assert_eq!(hint.get_rate(), Some(Rate::per(1000, Duration::from_secs(3600))));
/// assert_eq!(hint.get_limit(), None);
/// assert!(tollgate::http::hint(&HeaderMap::new()).is_empty());
/// ```
pub fn hint(headers: &HeaderMap) -> Hint {
    let fields = fields(headers);
    match retry_after(headers) {
        Some(pause) => Hint::new().pause(pause).settings(fields.get_settings()),
        None => fields,
    }
}

/// The shortest `Retry-After` of a 429 that pauses its host in [`outcome`]: a minute. A
/// shorter wait is the pace of one request (a meter that refused it early), which its retry
/// waits; a longer one is a quota's reset, which every request of the host would meet.
pub const QUOTA_WAIT: Duration = Duration::from_secs(60);

/// What the rate-limit fields alone say (no `Retry-After`).
fn fields(headers: &HeaderMap) -> Hint {
    let now = response_time(headers);
    ietf(headers)
        .merge(counters(headers, &IETF_OLD, now))
        .merge(counters(headers, &X_RATE_LIMIT, now))
}

/// The [`Outcome`] of a response: a success for 2xx and 3xx, an overload for 429 (Too Many
/// Requests) and for a 503 (Service Unavailable) without a valid `Retry-After`, an outage for
/// a 503 with one, a failure for anything else (see [What the status
/// says](self#what-the-status-says)); with the [`hint`] its headers give, whatever the
/// status, but for a 429's `Retry-After` shorter than [`QUOTA_WAIT`], which is the request's
/// own wait and pauses no host.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use http::{HeaderMap, StatusCode};
///
/// let mut headers = HeaderMap::new();
/// headers.insert("retry-after", "5".parse().unwrap());
/// let outcome = tollgate::http::outcome(StatusCode::TOO_MANY_REQUESTS, &headers);
/// assert!(outcome.is_overload());
/// // This request's wait (its retry waits it: `tollgate::http::retry_after`), not the host's.
/// assert_eq!(outcome.hint().get_pause(), None);
/// // A quota's reset, a minute or more: the host pauses.
/// headers.insert("retry-after", "3600".parse().unwrap());
/// let outcome = tollgate::http::outcome(StatusCode::TOO_MANY_REQUESTS, &headers);
/// assert_eq!(outcome.hint().get_pause(), Some(Duration::from_secs(3600)));
///
/// // Down for maintenance, back in a minute: an outage, with its pause.
/// headers.insert("retry-after", "60".parse().unwrap());
/// let outcome = tollgate::http::outcome(StatusCode::SERVICE_UNAVAILABLE, &headers);
/// assert!(outcome.is_outage());
/// assert_eq!(outcome.hint().get_pause(), Some(Duration::from_secs(60)));
/// // Shedding load, with no word on when: an overload.
/// let shed = tollgate::http::outcome(StatusCode::SERVICE_UNAVAILABLE, &HeaderMap::new());
/// assert!(shed.is_overload());
///
/// assert!(tollgate::http::outcome(StatusCode::NOT_FOUND, &HeaderMap::new()).is_failure());
/// assert!(tollgate::http::outcome(StatusCode::MOVED_PERMANENTLY, &HeaderMap::new()).is_success());
/// ```
pub fn outcome(status: StatusCode, headers: &HeaderMap) -> Outcome {
    let mut hint = hint(headers);
    if status == StatusCode::TOO_MANY_REQUESTS
        && retry_after(headers).is_some_and(|wait| wait < QUOTA_WAIT)
    {
        // This request's wait: the host's pause is only what the rate-limit fields say.
        hint = fields(headers);
    }
    let outcome = if status.is_success() || status.is_redirection() {
        Outcome::success()
    } else if status == StatusCode::TOO_MANY_REQUESTS {
        Outcome::overload()
    } else if status == StatusCode::SERVICE_UNAVAILABLE {
        if retry_after(headers).is_some() {
            Outcome::outage()
        } else {
            Outcome::overload()
        }
    } else {
        Outcome::failure()
    };
    outcome.with_hint(hint)
}
