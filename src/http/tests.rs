//! The header values of RFC 9110's examples and of the rate-limit draft's (revision 10, and
//! the earlier revisions' three fields), malformed values of every kind, and seeded random
//! bytes that must never panic.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use tollgate_testkit::Rng;

use super::date::{MAX_DELAY, http_date, year_of};
use super::rate_limit::reset;
use super::structured::Parser;
use super::{hint, outcome, retry_after};
use crate::limit::hint::Hint;
use crate::limit::rate::gcra::Rate;

/// A response's fields, in order: name and value.
pub(super) type Fields<'a> = [(&'a str, &'a [u8])];

pub(super) fn headers(fields: &Fields<'_>) -> HeaderMap {
    let mut map = HeaderMap::new();
    for &(name, value) in fields {
        map.append(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_bytes(value).unwrap(),
        );
    }
    map
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn per(quota: u32, window: u64) -> Option<Rate> {
    Some(Rate::per(quota, secs(window)))
}

fn system_now() -> Duration {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap()
}

// RFC 9110 -----------------------------------------------------------------------------

#[test]
fn rfc_9110_dates_in_all_three_forms() {
    let this_year = 2025;
    for date in [
        "Sun, 06 Nov 1994 08:49:37 GMT",
        "Sunday, 06-Nov-94 08:49:37 GMT",
        "Sun Nov  6 08:49:37 1994",
    ] {
        assert_eq!(
            http_date(date.as_bytes(), this_year),
            Some(secs(784_111_777)),
            "{date}"
        );
    }
    assert_eq!(
        http_date(b"Fri, 31 Dec 1999 23:59:59 GMT", this_year),
        Some(secs(946_684_799))
    );
    // A leap day, a leap second, lower-case names, and the UTC some servers write.
    assert!(http_date(b"Thu, 29 Feb 2024 00:00:00 GMT", this_year).is_some());
    assert!(http_date(b"Wed, 31 Dec 2008 23:59:60 GMT", this_year).is_some());
    assert!(http_date(b"sun, 06 nov 1994 08:49:37 UTC", this_year).is_some());
    // A date before 1970 is in the past: the epoch.
    assert_eq!(
        http_date(b"Thu, 01 Jan 1959 00:00:00 GMT", this_year),
        Some(Duration::ZERO)
    );
}

#[test]
fn malformed_dates_are_ignored() {
    for date in [
        "",
        "GMT",
        "Sun, 06 Nov 1994 08:49:37",
        "Sun 06 Nov 1994 08:49:37 GMT",
        "Sun, 06 Nov 1994 08:49:37 PST",
        "Sun, 06 Nov 94 08:49:37 GMT",
        "Sun, 06 Foo 1994 08:49:37 GMT",
        "Xyz, 06 Nov 1994 08:49:37 GMT",
        "Sun, 31 Feb 1994 08:49:37 GMT",
        "Sun, 29 Feb 2100 08:49:37 GMT",
        "Sun, 00 Nov 1994 08:49:37 GMT",
        "Sun, 06 Nov 1994 24:00:00 GMT",
        "Sun, 06 Nov 1994 08:60:00 GMT",
        "Sun, 06 Nov 1994 08:49:61 GMT",
        "Sun, 06 Nov 1994 8:49:37 GMT",
        "Sun, 06 Nov 1994 08:49:37:00 GMT",
        "Sun, 06 Nov +994 08:49:37 GMT",
        "Sun, -6 Nov 1994 08:49:37 GMT",
        "Sunday, 06-Nov-1994 08:49:37 GMT",
        "Sunday, 06-Nov-94-1 08:49:37 GMT",
        "Sun Nov 6 08:49:37 94",
        "Sun, 06 Nov 1994 08:49:37 GMT extra",
        "S\u{fc}n, 06 Nov 1994 08:49:37 GMT",
    ] {
        assert_eq!(http_date(date.as_bytes(), 2025), None, "{date:?}");
    }
    assert_eq!(http_date(b"\xff\xfe", 2025), None);
}

#[test]
fn retry_after_in_seconds() {
    let after = |value: &[u8]| retry_after(&headers(&[("retry-after", value)]));
    assert_eq!(after(b"120"), Some(secs(120)));
    assert_eq!(after(b"0"), Some(Duration::ZERO));
    assert_eq!(after(b" 7 "), Some(secs(7)));
    // Beyond what a pause can hold: 2^31 seconds, never zero.
    assert_eq!(after(b"99999999999999999999999999999999"), Some(MAX_DELAY));
    assert_eq!(after(b"2147483647"), Some(secs(2_147_483_647)));
    for bad in [
        &b""[..],
        b" ",
        b"-1",
        b"+1",
        b"1.5",
        b"1e3",
        b"12 0",
        b"120s",
        b"soon",
        b"\xe2\x82\xac",
        b"\xff",
        b"\t",
    ] {
        assert_eq!(after(bad), None, "{bad:?}");
    }
    assert_eq!(retry_after(&HeaderMap::new()), None);
}

#[test]
fn retry_after_as_a_date_is_measured_against_the_responses_date() {
    // RFC 9110's example date, sent by a server whose clock says one minute earlier.
    let map = headers(&[
        ("date", b"Fri, 31 Dec 1999 23:58:59 GMT"),
        ("retry-after", b"Fri, 31 Dec 1999 23:59:59 GMT"),
    ]);
    assert_eq!(retry_after(&map), Some(secs(60)));
    // The obsolete forms, in both headers.
    let map = headers(&[
        ("date", b"Sunday, 06-Nov-94 08:49:37 GMT"),
        ("retry-after", b"Sun Nov  6 08:51:37 1994"),
    ]);
    assert_eq!(retry_after(&map), Some(secs(120)));
    // A date before the response's: zero.
    let map = headers(&[
        ("date", b"Sun, 06 Nov 1994 08:49:37 GMT"),
        ("retry-after", b"Sun, 06 Nov 1994 08:49:00 GMT"),
    ]);
    assert_eq!(retry_after(&map), Some(Duration::ZERO));
}

#[test]
fn retry_after_as_a_date_without_a_valid_date_uses_the_system_clock() {
    // RFC 9110's example is long past: zero, whether Date is absent or garbage.
    for date in [None, Some(&b"yesterday"[..])] {
        let mut map = headers(&[("retry-after", b"Fri, 31 Dec 1999 23:59:59 GMT")]);
        if let Some(date) = date {
            map.insert("date", HeaderValue::from_bytes(date).unwrap());
        }
        assert_eq!(retry_after(&map), Some(Duration::ZERO));
    }
    // Far ahead: at most 2^31 seconds.
    let map = headers(&[("retry-after", b"Fri, 31 Dec 9999 23:59:59 GMT")]);
    assert_eq!(retry_after(&map), Some(MAX_DELAY));
    // 2070-01-01: its distance from the system clock, within a generous second.
    let map = headers(&[("retry-after", b"Wed, 01 Jan 2070 00:00:00 GMT")]);
    let expected = secs(3_155_760_000) - system_now();
    let got = retry_after(&map).unwrap();
    assert!(got.abs_diff(expected) < secs(2), "{got:?} vs {expected:?}");
    assert!(year_of(system_now()) >= 2025);
}

#[test]
fn several_retry_afters_the_longest_valid_one_wins() {
    let map = headers(&[
        ("retry-after", b"5"),
        ("retry-after", b"garbage"),
        ("retry-after", b"30"),
    ]);
    assert_eq!(retry_after(&map), Some(secs(30)));
}

// The rate-limit draft, revision 10 ----------------------------------------------------

#[test]
fn draft_policy_examples_give_the_slowest_rate() {
    let cases: [(&str, Option<Rate>); 6] = [
        (
            r#""burst";q=100;w=60,"daily";q=1000;w=86400"#,
            per(1000, 86_400),
        ),
        (r#""default";q=100;w=10"#, per(100, 10)),
        (
            r#""permin";q=50;w=60,"perhr";q=1000;w=3600"#,
            per(1000, 3600),
        ),
        (r#""peruser";q=100;w=60;pk=:cHsdsRa894==:"#, per(100, 60)),
        // Bytes are not requests.
        (
            r#""peruser";q=65535;qu="content-bytes";w=10;pk=:sdfjLJUOUH==:"#,
            None,
        ),
        (
            r#""hour";q=1000;w=3600, "day";q=5000;w=86400"#,
            per(5000, 86_400),
        ),
    ];
    for (policy, rate) in cases {
        let hint = hint(&headers(&[("ratelimit-policy", policy.as_bytes())]));
        assert_eq!(hint.get_rate(), rate, "{policy}");
        assert_eq!(
            (hint.get_pause(), hint.get_limit()),
            (None, None),
            "{policy}"
        );
    }
}

#[test]
fn draft_service_limit_examples_pause_only_when_nothing_remains() {
    let cases: [(&str, Option<Duration>); 7] = [
        (r#""default";r=50;t=30"#, None),
        (r#""default";r=999;pk=:dHJpYWwxMjEzMjM=:"#, None),
        (r#""default";r=300000000;t=60;pk=:QXBwLTk5OQ==:"#, None),
        (r#""default";r=0;t=50"#, Some(secs(50))),
        (r#""default";r=0;t=48"#, Some(secs(48))),
        (r#""dayLimit";r=100;t=36000"#, None),
        (r#""default";r=1;t=7"#, None),
    ];
    for (limit, pause) in cases {
        let hint = hint(&headers(&[("ratelimit", limit.as_bytes())]));
        assert_eq!(hint.get_pause(), pause, "{limit}");
        assert_eq!((hint.get_rate(), hint.get_limit()), (None, None), "{limit}");
    }
}

#[test]
fn draft_response_examples() {
    // A redirect with nothing left: wait 10 s before following it.
    let map = headers(&[
        ("location", b"/foo/123"),
        ("ratelimit", br#""problemPolicy";r=0;t=10"#),
    ]);
    let redirect = outcome(StatusCode::MOVED_PERMANENTLY, &map);
    assert!(redirect.is_success());
    assert_eq!(redirect.hint(), Hint::new().pause(secs(10)));

    // Throttled with Retry-After as a date and RateLimit pointing at the same moment.
    let map = headers(&[
        ("date", b"Mon, 05 Aug 2019 09:27:00 GMT"),
        ("retry-after", b"Mon, 05 Aug 2019 09:27:05 GMT"),
        ("ratelimit", br#""default";r=0;t=5"#),
    ]);
    let throttled = outcome(StatusCode::TOO_MANY_REQUESTS, &map);
    assert!(throttled.is_overload());
    assert_eq!(throttled.hint(), Hint::new().pause(secs(5)));

    // Concurrency example, then "just slow down", then "wait 20 s, then slow down".
    for (policy, limit, expected) in [
        (r#""basic";q=100;w=60"#, r#""basic";r=60;t=58"#, Hint::new()),
        (r#""basic";q=100;w=60"#, r#""basic";r=20;t=56"#, Hint::new()),
        (
            r#""dynamic";q=100;w=60"#,
            r#""dynamic";r=9;t=50"#,
            Hint::new(),
        ),
        (
            r#""dynamic";q=15;w=20"#,
            r#""dynamic";r=0;t=20"#,
            Hint::new().pause(secs(20)),
        ),
    ] {
        let map = headers(&[
            ("ratelimit-policy", policy.as_bytes()),
            ("ratelimit", limit.as_bytes()),
        ]);
        let quota: u32 = if policy.contains("q=15") { 15 } else { 100 };
        let window = if policy.contains("w=20") { 20 } else { 60 };
        let expected = expected.rate(Rate::per(quota, secs(window)));
        assert_eq!(hint(&map), expected, "{policy} {limit}");
    }

    // Retry-After says when this request may come again; the policy says how fast afterwards.
    // A 429's wait under `QUOTA_WAIT` is the request's, not the host's (15 requests remain):
    // the outcome leaves it to the request's retry, and pauses the host only from a minute on.
    let map = headers(&[
        ("retry-after", b"20"),
        ("ratelimit-policy", br#""dynamic";q=100;w=60"#),
        ("ratelimit", br#""dynamic";r=15;t=40"#),
    ]);
    let rate = Rate::per(100, secs(60));
    assert_eq!(hint(&map), Hint::new().pause(secs(20)).rate(rate));
    assert_eq!(
        outcome(StatusCode::TOO_MANY_REQUESTS, &map).hint(),
        Hint::new().rate(rate)
    );

    // Tokens for names; a quota without a window gives no rate.
    let map = headers(&[
        ("ratelimit-policy", b"quota;q=100;w=1"),
        ("ratelimit", b"quota;t=1"),
    ]);
    assert_eq!(hint(&map), Hint::new().rate(Rate::per_second(100)));
    let map = headers(&[
        ("ratelimit-policy", b"quota;q=10"),
        ("ratelimit", b"quota;t=1"),
    ]);
    assert!(hint(&map).is_empty());

    // The FAQ's policies on two lines are one list; vendor parameters are comments.
    let map = headers(&[
        ("ratelimit-policy", br#""sliding";q=100;w=60;burst=1000"#),
        ("ratelimit-policy", br#""fixed";q=5000;w=3600;burst=0"#),
        ("ratelimit", br#""sliding";r=50;t=44"#),
    ]);
    assert_eq!(hint(&map), Hint::new().rate(Rate::per(5000, secs(3600))));

    // The resource-exhaustion example: the quota's 10 a second, not remaining / reset.
    let map = headers(&[
        ("ratelimit-policy", br#""somepolicy";q=10000;w=1000"#),
        ("ratelimit", br#""somepolicy";r=10000;t=10"#),
    ]);
    assert_eq!(hint(&map), Hint::new().rate(Rate::per_second(10)));
}

#[test]
fn concurrent_request_policies_give_the_lowest_limit() {
    let map = headers(&[(
        "ratelimit-policy",
        br#""c";q=8;qu="concurrent-requests", "d";q=3;qu="concurrent-requests";w=1, "r";q=10;w=1"#,
    )]);
    assert_eq!(hint(&map), Hint::new().limit(3).rate(Rate::per_second(10)));
    // Zero is no limit to set.
    let map = headers(&[("ratelimit-policy", br#""c";q=0;qu="concurrent-requests""#)]);
    assert!(hint(&map).is_empty());
}

// The earlier revisions' three fields, and the X- fields -------------------------------

#[test]
fn earlier_revision_examples() {
    let cases: [(&Fields<'_>, Hint); 8] = [
        (
            &[
                ("ratelimit-policy", b"100;w=10"),
                ("ratelimit-limit", b"100"),
            ],
            Hint::new().rate(Rate::per(100, secs(10))),
        ),
        (
            &[(
                "ratelimit-policy",
                b"10;w=1, 50;w=60, 1000;w=3600, 5000;w=86400",
            )],
            Hint::new().rate(Rate::per(5000, secs(86_400))),
        ),
        (
            &[("ratelimit-policy", b"10;w=1;burst=1000, 1000;w=3600")],
            Hint::new().rate(Rate::per(1000, secs(3600))),
        ),
        (
            &[("ratelimit-limit", b"10, 10;w=1")],
            Hint::new().rate(Rate::per_second(10)),
        ),
        (
            &[(
                "ratelimit-limit",
                b"10, 10;w=1, 50;w=60, 1000;w=3600, 5000;w=86400",
            )],
            Hint::new().rate(Rate::per(5000, secs(86_400))),
        ),
        (
            &[(
                "ratelimit-limit",
                br#"100, 100;w=60;comment="fixed window""#,
            )],
            Hint::new().rate(Rate::per(100, secs(60))),
        ),
        (
            &[
                ("ratelimit-remaining", b"0"),
                ("ratelimit-limit", b"10"),
                ("ratelimit-reset", b"10"),
            ],
            Hint::new().pause(secs(10)),
        ),
        (
            &[
                ("ratelimit-limit", b"10"),
                ("ratelimit-remaining", b"1"),
                ("ratelimit-reset", b"7"),
            ],
            Hint::new(),
        ),
    ];
    for (fields, expected) in cases {
        assert_eq!(hint(&headers(fields)), expected, "{fields:?}");
    }
}

#[test]
fn x_rate_limit_reset_as_seconds_or_unix_time() {
    let date: (&str, &[u8]) = ("date", b"Mon, 01 Jul 2013 17:27:06 GMT"); // 1372699626
    let exhausted = |reset: &[u8]| {
        hint(&headers(&[
            date,
            ("x-ratelimit-limit", b"60"),
            ("x-ratelimit-remaining", b"0"),
            ("x-ratelimit-reset", reset),
        ]))
        .get_pause()
    };
    assert_eq!(exhausted(b"1372700873"), Some(secs(1247)));
    assert_eq!(exhausted(b"1372699626000"), Some(Duration::ZERO));
    assert_eq!(
        exhausted(b"1372699636500"),
        Some(Duration::from_millis(10_500))
    );
    assert_eq!(exhausted(b"1372699000"), Some(Duration::ZERO));
    assert_eq!(exhausted(b"30"), Some(secs(30)));
    assert_eq!(exhausted(b"999999999"), Some(secs(999_999_999)));
    assert_eq!(exhausted(b"1.25"), Some(Duration::from_millis(1250)));
    assert_eq!(
        exhausted(b"1372699627.123456789123"),
        Some(Duration::from_nanos(1_123_456_789))
    );
    assert_eq!(exhausted(b"Mon, 01 Jul 2013 17:28:06 GMT"), Some(secs(60)));
    assert_eq!(exhausted(b"99999999999999999999999999"), Some(MAX_DELAY));
    for bad in [
        &b""[..],
        b"-5",
        b"soon",
        b"1.",
        b".5",
        b"1.2.3",
        b"\xc3\xa9",
        b"0x10",
    ] {
        assert_eq!(exhausted(bad), None, "{bad:?}");
    }

    // Something remains, or the remaining count is not 0: no pause.
    for remaining in [&b"56"[..], b"", b"-0", b"0.0", b"none", b"\xff"] {
        let map = headers(&[
            date,
            ("x-ratelimit-remaining", remaining),
            ("x-ratelimit-reset", b"1372700873"),
        ]);
        assert!(hint(&map).is_empty(), "{remaining:?}");
    }
    // A limit alone gives no rate; "00" is still nothing remaining.
    let map = headers(&[
        ("x-ratelimit-limit", b"5000"),
        ("x-ratelimit-remaining", b"00"),
    ]);
    assert!(hint(&map).is_empty());

    // A Unix time without a valid Date: the system clock.
    let in_100_s = (system_now() + secs(100)).as_secs().to_string();
    let map = headers(&[
        ("date", b"garbage"),
        ("x-ratelimit-remaining", b"0"),
        ("x-ratelimit-reset", in_100_s.as_bytes()),
    ]);
    let pause = hint(&map).get_pause().unwrap();
    assert!(pause > secs(90) && pause <= secs(100), "{pause:?}");
}

#[test]
fn when_fields_disagree_the_stricter_wins_and_retry_after_sets_the_pause() {
    let map = headers(&[
        ("date", b"Mon, 01 Jul 2013 17:27:06 GMT"),
        ("ratelimit-policy", br#""a";q=10;w=1"#),
        ("ratelimit", br#""a";r=0;t=30"#),
        ("ratelimit-limit", b"10, 2;w=1"),
        ("ratelimit-remaining", b"0"),
        ("ratelimit-reset", b"45"),
        ("x-ratelimit-remaining", b"0"),
        ("x-ratelimit-reset", b"1372699726"),
    ]);
    assert_eq!(
        hint(&map),
        Hint::new().pause(secs(100)).rate(Rate::per_second(2))
    );
    // With Retry-After, it alone says how long, shorter or longer.
    for retry in [&b"5"[..], b"500"] {
        let mut map = map.clone();
        map.insert("retry-after", HeaderValue::from_bytes(retry).unwrap());
        let expected: u64 = std::str::from_utf8(retry).unwrap().parse().unwrap();
        assert_eq!(hint(&map).get_pause(), Some(secs(expected)));
        assert_eq!(hint(&map).get_rate(), Some(Rate::per_second(2)));
    }
    // A malformed Retry-After does not hide the others' pause.
    let mut map = map.clone();
    map.insert("retry-after", HeaderValue::from_static("later"));
    assert_eq!(hint(&map).get_pause(), Some(secs(100)));
}

// Malformed structured fields ----------------------------------------------------------

#[test]
fn malformed_rate_limit_fields_are_ignored() {
    for policy in [
        &b""[..],
        b"garbage!",
        br#""p";q=-10;w=1"#,
        br#""p";q=10;w=0"#,
        br#""p";q=10;w=-1"#,
        br#""p";q=10;w=1.5"#,
        br#""p";q=10.5;w=1"#,
        br#""p";q=1000000000000000;w=1"#,
        br#""p";q="10";w=1"#,
        br#""p";w=1"#,
        br#""p";q=0;w=1"#,
        br#""p";q=10;w=1, oops,"#,
        br#""p";Q=10;W=1"#,
        br#""p" ;q=10;w=1"#,
        br#""p";q=10;w=1;qu="bananas""#,
        "\"p\u{e9}\";q=10;w=1".as_bytes(),
        b"\xff\xfe;q=10;w=1",
    ] {
        let map = headers(&[("ratelimit-policy", policy), ("ratelimit-limit", policy)]);
        assert!(
            hint(&map).is_empty(),
            "{:?}",
            String::from_utf8_lossy(policy)
        );
    }
    for limit in [
        &b""[..],
        br#""d";r=0"#,
        br#""d";r=0;t=-5"#,
        br#""d";r=0;t=1.5"#,
        br#""d";r=-1;t=5"#,
        br#""d";r="0";t=5"#,
        br#""d";r=0;t=5,"#,
        br#""d";r=0;t=5, ("#,
        br#""d";r=0;t=1234567890123456"#,
        b"\xc3\xa9;r=0;t=5",
    ] {
        let map = headers(&[("ratelimit", limit)]);
        assert!(
            hint(&map).is_empty(),
            "{:?}",
            String::from_utf8_lossy(limit)
        );
    }
    // One bad line spoils the field, not the other fields.
    let map = headers(&[
        ("ratelimit-policy", br#""a";q=10;w=1"#),
        ("ratelimit-policy", b"((("),
        ("ratelimit", br#""a";r=0;t=3"#),
    ]);
    assert_eq!(hint(&map), Hint::new().pause(secs(3)));
}

#[test]
fn huge_values_saturate() {
    let map = headers(&[
        (
            "ratelimit-policy",
            br#""big";q=999999999999999;w=1, "long";q=1;w=999999999999999"#,
        ),
        ("ratelimit", br#""big";r=0;t=999999999999999"#),
    ]);
    let hint = hint(&map);
    assert_eq!(hint.get_pause(), Some(MAX_DELAY));
    assert_eq!(hint.get_rate(), Some(Rate::every(MAX_DELAY)));
    let map = headers(&[("ratelimit-policy", br#""big";q=999999999999999;w=1"#)]);
    assert_eq!(
        super::hint(&map).get_rate(),
        Some(Rate::per_second(u32::MAX))
    );
    let map = headers(&[(
        "ratelimit-policy",
        br#""c";q=999999999999999;qu="concurrent-requests""#,
    )]);
    assert!(super::hint(&map).get_limit().is_some());
}

// Random bytes --------------------------------------------------------------------------

/// Bytes of any value, or pieces of the grammars glued at random.
fn random_value(random: &mut Rng) -> Vec<u8> {
    const PIECES: &[&str] = &[
        "\"",
        ";",
        "=",
        ",",
        " ",
        "  ",
        "(",
        ")",
        ":",
        "-",
        ".",
        "?1",
        "@",
        "%\"",
        "*",
        "q",
        "w",
        "r",
        "t",
        "qu",
        "pk",
        "\"requests\"",
        "\"concurrent-requests\"",
        "0",
        "1",
        "60",
        "999999999999999",
        "1000000000000000",
        "1700000000",
        "1.5",
        "-1",
        "GMT",
        "Sun",
        "Sunday",
        "Nov",
        "06",
        "1994",
        "94",
        "08:49:37",
        "23:59:60",
        "06-Nov-94",
        "\\",
        "\\\"",
        "%c3",
        "\u{e9}",
        "\t",
    ];
    let len = random.below(40);
    if random.below(2) == 0 {
        (0..len).map(|_| random.next_u64() as u8).collect()
    } else {
        let mut out = Vec::new();
        for _ in 0..len / 4 {
            out.extend_from_slice(PIECES[random.below(PIECES.len() as u64) as usize].as_bytes());
        }
        out
    }
}

#[test]
fn random_bytes_never_panic() {
    const NAMES: &[&str] = &[
        "retry-after",
        "date",
        "ratelimit-policy",
        "ratelimit",
        "ratelimit-limit",
        "ratelimit-remaining",
        "ratelimit-reset",
        "x-ratelimit-limit",
        "x-ratelimit-remaining",
        "x-ratelimit-reset",
    ];
    let mut random = Rng::new(1);
    let now = system_now();
    for _ in 0..20_000 {
        // The parsers themselves take any bytes, control characters included.
        let raw = random_value(&mut random);
        let _ = http_date(&raw, 2025);
        if let Some(pause) = reset(&raw, now) {
            assert!(pause <= MAX_DELAY);
        }
        let mut members = Vec::new();
        let _ = Parser::new(&raw).list(&mut members);

        // Whole responses: a few fields of random values (those a header may hold).
        let mut map = HeaderMap::new();
        for _ in 0..1 + random.below(4) {
            let name = NAMES[random.below(NAMES.len() as u64) as usize];
            let value: Vec<u8> = random_value(&mut random)
                .into_iter()
                .map(|b| {
                    if (b < 0x20 && b != b'\t') || b == 0x7f {
                        b'!'
                    } else {
                        b
                    }
                })
                .collect();
            map.append(name, HeaderValue::from_bytes(&value).unwrap());
        }
        let hint = hint(&map);
        assert!(
            hint.get_pause().is_none_or(|pause| pause <= MAX_DELAY),
            "{map:?}"
        );
        assert!(hint.get_limit().is_none_or(|limit| limit >= 1), "{map:?}");
        if let Some(pause) = retry_after(&map) {
            assert!(pause <= MAX_DELAY, "{map:?}");
        }
        // The same hint on every status (a pause against the system clock may have moved).
        let status = StatusCode::from_u16(100 + random.below(500) as u16).unwrap();
        let again = outcome(status, &map).hint();
        assert_eq!(
            (again.get_limit(), again.get_rate()),
            (hint.get_limit(), hint.get_rate()),
            "{map:?}"
        );
        assert_eq!(
            again.get_pause().is_some(),
            hint.get_pause().is_some(),
            "{map:?}"
        );
    }
}
