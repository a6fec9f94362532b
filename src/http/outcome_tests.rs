//! What `outcome` makes of each status, with and without `Retry-After` (the table of the
//! module's docs), and that the hint rides on every kind.

use ::http::{HeaderMap, StatusCode};

use super::outcome;
use super::tests::headers;
use crate::limit::outcome::Outcome;
use crate::limit::rate::gcra::Rate;

/// The kind of `outcome`, as a word.
fn kind_of(outcome: &Outcome) -> &'static str {
    match (
        outcome.is_success(),
        outcome.is_overload(),
        outcome.is_outage(),
    ) {
        (true, ..) => "success",
        (_, true, _) => "overload",
        (.., true) => "outage",
        _ => "failure",
    }
}

#[test]
fn outcome_classifies_the_status() {
    let none = HeaderMap::new();
    for (status, kind) in [
        (200, "success"),
        (204, "success"),
        (301, "success"),
        (304, "success"),
        (399, "success"),
        (429, "overload"),
        (503, "overload"),
        (100, "failure"),
        (400, "failure"),
        (404, "failure"),
        (500, "failure"),
        (502, "failure"),
        (504, "failure"),
        (599, "failure"),
    ] {
        let outcome = outcome(StatusCode::from_u16(status).unwrap(), &none);
        assert_eq!(kind_of(&outcome), kind, "{status}");
        assert!(outcome.hint().is_empty());
    }
    // A valid `Retry-After` makes a 503 an outage, and only a 503 (one already past too: out,
    // and back already); an invalid one leaves it an overload.
    let minute = headers(&[("retry-after", b"60")]);
    let garbled = headers(&[("retry-after", b"soon")]);
    let past = headers(&[
        ("date", b"Fri, 31 Dec 1999 23:59:59 GMT"),
        ("retry-after", b"Fri, 31 Dec 1999 23:59:00 GMT"),
    ]);
    for (map, status, kind) in [
        (&minute, 503, "outage"),
        (&minute, 429, "overload"),
        (&minute, 500, "failure"),
        (&past, 503, "outage"),
        (&garbled, 503, "overload"),
    ] {
        let outcome = outcome(StatusCode::from_u16(status).unwrap(), map);
        assert_eq!(kind_of(&outcome), kind, "{status} {map:?}");
    }
    // A minute's wait pauses the host, an outage's and a 429's (a quota's reset) alike.
    for status in [
        StatusCode::SERVICE_UNAVAILABLE,
        StatusCode::TOO_MANY_REQUESTS,
    ] {
        assert_eq!(
            outcome(status, &minute).hint().get_pause(),
            Some(super::QUOTA_WAIT)
        );
    }
    // The hint rides on every kind.
    let map = headers(&[("ratelimit-policy", br#""p";q=5;w=1"#)]);
    for status in [
        StatusCode::OK,
        StatusCode::SERVICE_UNAVAILABLE,
        StatusCode::NOT_FOUND,
    ] {
        assert_eq!(
            outcome(status, &map).hint().get_rate(),
            Some(Rate::per_second(5))
        );
    }
}
