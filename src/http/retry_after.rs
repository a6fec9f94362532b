//! `Retry-After` (RFC 9110, section 10.2.3): delay-seconds, or an HTTP-date measured against
//! the response's own `Date`.

use std::time::Duration;

use ::http::HeaderMap;
use ::http::header::RETRY_AFTER;

use crate::http::date::{delay_seconds, http_date, response_time, until, year_of};

/// How long a response's `Retry-After` asks to wait, if it has a valid one.
///
/// Both forms of RFC 9110 are read: a number of seconds (`Retry-After: 120`), and an
/// HTTP-date (`Retry-After: Fri, 31 Dec 1999 23:59:59 GMT`, or the obsolete RFC 850 and
/// asctime forms every recipient must accept). A date is measured against the response's own
/// `Date` header when it has a valid one, so the client's clock skew does not count; without
/// one, against the system clock. A date in the past gives zero.
///
/// A malformed value (garbage, a negative or fractional number, an impossible date) is
/// ignored; of several valid values the longest wins. A number too large to represent, or
/// above 2^31 seconds (about 68 years), reads as 2^31 seconds, as RFC 9111 reads
/// delta-seconds: a very long wait, never zero.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use http::HeaderMap;
///
/// let mut headers = HeaderMap::new();
/// headers.insert("retry-after", "120".parse().unwrap());
/// assert_eq!(tollgate::http::retry_after(&headers), Some(Duration::from_secs(120)));
///
/// // A date, measured on the server's clock.
/// headers.insert("date", "Fri, 31 Dec 1999 23:59:00 GMT".parse().unwrap());
/// headers.insert("retry-after", "Fri, 31 Dec 1999 23:59:59 GMT".parse().unwrap());
/// assert_eq!(tollgate::http::retry_after(&headers), Some(Duration::from_secs(59)));
///
/// headers.insert("retry-after", "soon".parse().unwrap());
/// assert_eq!(tollgate::http::retry_after(&headers), None);
/// ```
pub fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let mut now = None;
    headers
        .get_all(RETRY_AFTER)
        .iter()
        .filter_map(|value| {
            let value = value.as_bytes();
            delay_seconds(value).or_else(|| {
                let now = *now.get_or_insert_with(|| response_time(headers));
                http_date(value, year_of(now)).map(|at| until(at, now))
            })
        })
        .max()
}
