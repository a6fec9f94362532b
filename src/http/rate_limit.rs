//! The rate-limit fields: the IETF's `RateLimit-Policy` and `RateLimit` (the HTTPAPI working
//! group's draft, revision 10 and the revisions before it that used the same names), the
//! older three fields `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset` of its
//! earlier revisions, and the common `X-RateLimit-Limit`, `X-RateLimit-Remaining`,
//! `X-RateLimit-Reset`. Each family reads to a [`Hint`]; `tollgate::http::hint` merges them.

use std::time::Duration;

use ::http::HeaderMap;

use crate::http::date::{MAX_DELAY, http_date, until, year_of};
use crate::http::structured::{Bare, Member, list};
use crate::limit::hint::Hint;
use crate::limit::rate::gcra::Rate;

/// `RateLimit-Policy` and `RateLimit`.
///
/// - A policy counted in requests (`qu` absent or `"requests"`) with a window gives the rate
///   `q` per `w` seconds, evenly spaced; of several, the slowest. A policy without `w` gives
///   no rate (a quota says nothing about time without its window), nor does `q=0`.
/// - A policy counted in concurrent requests (`qu="concurrent-requests"`) gives the limit
///   `q`; of several, the lowest.
/// - A policy in other units (`"content-bytes"`) gives nothing: its quota is not requests.
/// - A service limit with nothing remaining (`r=0`) and a reset time (`t`) gives a pause of
///   `t` seconds; of several, the longest.
///
/// The old revisions' policies (an Integer quota instead of a name, `10;w=1`) read the same.
pub(crate) fn ietf(headers: &HeaderMap) -> Hint {
    let mut hint = Hint::new();
    for policy in list(headers, "ratelimit-policy").unwrap_or_default() {
        let quota = match (policy.param("q"), policy.value) {
            (Some(q), _) => q.count(),
            // An old revision's policy: the quota is the item itself.
            (None, Bare::Integer(q)) => u64::try_from(q).ok(),
            (None, _) => None,
        };
        let Some(quota) = quota.filter(|&q| q > 0) else {
            continue;
        };
        match policy.param("qu") {
            None | Some(Bare::Text(b"requests" | b"request")) => {
                if let Some(rate) = window_rate(quota, &policy) {
                    hint = hint.merge(Hint::new().rate(rate));
                }
            }
            Some(Bare::Text(b"concurrent-requests")) => {
                let limit = usize::try_from(quota).unwrap_or(usize::MAX);
                hint = hint.merge(Hint::new().limit(limit));
            }
            Some(_) => {}
        }
    }
    for service_limit in list(headers, "ratelimit").unwrap_or_default() {
        let exhausted = service_limit.param("r").and_then(Bare::count) == Some(0);
        let reset = service_limit.param("t").and_then(Bare::count);
        if let (true, Some(reset)) = (exhausted, reset) {
            let pause = Duration::from_secs(reset).min(MAX_DELAY);
            hint = hint.merge(Hint::new().pause(pause));
        }
    }
    hint
}

/// `quota` per the member's `w` seconds, if it has a valid one.
fn window_rate(quota: u64, policy: &Member<'_>) -> Option<Rate> {
    let window = policy.param("w")?.count().filter(|&w| w > 0)?;
    let window = Duration::from_secs(window).min(MAX_DELAY);
    Some(Rate::per(u32::try_from(quota).unwrap_or(u32::MAX), window))
}

/// The names of one family of three counter fields.
pub(crate) struct Counters {
    pub(crate) limit: &'static str,
    pub(crate) remaining: &'static str,
    pub(crate) reset: &'static str,
}

/// The three fields of the IETF draft's earlier revisions.
pub(crate) const IETF_OLD: Counters = Counters {
    limit: "ratelimit-limit",
    remaining: "ratelimit-remaining",
    reset: "ratelimit-reset",
};

/// The common `X-` fields (GitHub, GitLab, Twitter's API and many more).
pub(crate) const X_RATE_LIMIT: Counters = Counters {
    limit: "x-ratelimit-limit",
    remaining: "x-ratelimit-remaining",
    reset: "x-ratelimit-reset",
};

/// One family of counter fields, `now` being the response's time.
///
/// - The limit is a quota: with a window (`10, 10;w=1`, as the draft's earlier revisions
///   allowed) it gives the rate `10` per `1` second (of several windows, the slowest); alone
///   (`5000`) it gives nothing, since a quota says nothing about time without its window.
/// - Nothing remaining (`0`) and a reset gives a pause until the reset; a remaining count
///   above 0, or no reset, gives none.
/// - The reset is read as [`reset`] says.
pub(crate) fn counters(headers: &HeaderMap, names: &Counters, now: Duration) -> Hint {
    let mut hint = Hint::new();
    // The first member is the limit in force; the ones with a window are policies.
    for policy in list(headers, names.limit).unwrap_or_default() {
        let Some(quota) = policy.value.count().filter(|&q| q > 0) else {
            continue;
        };
        if let Some(rate) = window_rate(quota, &policy) {
            hint = hint.merge(Hint::new().rate(rate));
        }
    }
    let exhausted = headers
        .get_all(names.remaining)
        .iter()
        .any(|remaining| is_zero(remaining.as_bytes()));
    if exhausted {
        let pauses = headers.get_all(names.reset).iter();
        if let Some(pause) = pauses.filter_map(|at| reset(at.as_bytes(), now)).max() {
            hint = hint.merge(Hint::new().pause(pause));
        }
    }
    hint
}

/// Below this, a reset counts seconds from now; from it (2001-09-09 as a time), it is a Unix
/// time in seconds. No server resets a quota more than 31 years ahead, and no Unix time of a
/// response sent this century is smaller.
pub(crate) const UNIX_SECONDS_FROM: u64 = 1_000_000_000;
/// From this on, a reset is a Unix time in milliseconds (1e12 seconds would be 31,000 years).
pub(crate) const UNIX_MILLIS_FROM: u64 = 1_000_000_000_000;

/// How long until a reset field's time, `now` being the response's time: a number of seconds
/// (a fraction allowed, as some servers send) counts from now below [`UNIX_SECONDS_FROM`], is
/// a Unix time in seconds from there, in milliseconds from [`UNIX_MILLIS_FROM`]; an HTTP-date
/// is read as such. A time in the past gives zero; a pause is at most [`MAX_DELAY`].
pub(crate) fn reset(value: &[u8], now: Duration) -> Option<Duration> {
    let value = value.trim_ascii();
    let (whole, fraction) = match value.iter().position(|&b| b == b'.') {
        Some(dot) => (&value[..dot], Some(&value[dot + 1..])),
        None => (value, None),
    };
    if whole.is_empty() || !whole.iter().all(u8::is_ascii_digit) {
        return http_date(value, year_of(now)).map(|at| until(at, now));
    }
    let number = whole.iter().fold(0u64, |n, &digit| {
        n.saturating_mul(10).saturating_add(u64::from(digit - b'0'))
    });
    let nanos = match fraction {
        None => 0,
        Some(digits) if !digits.is_empty() && digits.iter().all(u8::is_ascii_digit) => {
            // The first nine digits are nanoseconds; the rest is below the clock's grain.
            (0..9).fold(0u32, |n, i| {
                n * 10 + digits.get(i).map_or(0, |&d| u32::from(d - b'0'))
            })
        }
        Some(_) => return None,
    };
    Some(if number >= UNIX_MILLIS_FROM {
        until(Duration::from_millis(number), now)
    } else if number >= UNIX_SECONDS_FROM {
        until(Duration::new(number, nanos), now)
    } else {
        Duration::new(number, nanos).min(MAX_DELAY)
    })
}

/// Whether a field's value is the number 0.
fn is_zero(value: &[u8]) -> bool {
    let digits = value.trim_ascii();
    !digits.is_empty() && digits.iter().all(|&b| b == b'0')
}
