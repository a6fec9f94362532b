//! Time as HTTP says it: the HTTP-date of RFC 9110 (IMF-fixdate and the two obsolete forms
//! recipients must accept), delay-seconds, and the response's own time (its `Date` header,
//! else the system clock). Times are `Duration`s since the Unix epoch; a date before 1970
//! reads as the epoch (it is in the past either way).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ::http::HeaderMap;
use ::http::header::DATE;

/// The longest delay read from a header: 2^31 seconds (about 68 years). A larger number, or
/// one too large to represent, reads as this, as RFC 9111 asks of delta-seconds: a very long
/// pause, never zero, and never one that overflows the caller's clock arithmetic.
pub(crate) const MAX_DELAY: Duration = Duration::from_secs(1 << 31);

/// `1*DIGIT` seconds, surrounding whitespace allowed; saturates at [`MAX_DELAY`].
pub(crate) fn delay_seconds(value: &[u8]) -> Option<Duration> {
    let digits = value.trim_ascii();
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut secs: u64 = 0;
    for &digit in digits {
        secs = secs
            .saturating_mul(10)
            .saturating_add(u64::from(digit - b'0'));
    }
    Some(Duration::from_secs(secs).min(MAX_DELAY))
}

/// When the response was made: its `Date` header when it has a valid one (so a reset given as
/// a time is measured on the server's clock, and the client's skew does not count), else the
/// system clock.
pub(crate) fn response_time(headers: &HeaderMap) -> Duration {
    let system = system_now();
    headers
        .get(DATE)
        .and_then(|date| http_date(date.as_bytes(), year_of(system)))
        .unwrap_or(system)
}

/// How long from `now` until `at`: zero when `at` is past, at most [`MAX_DELAY`].
pub(crate) fn until(at: Duration, now: Duration) -> Duration {
    at.saturating_sub(now).min(MAX_DELAY)
}

fn system_now() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
}

/// The (Gregorian, UTC) year of a time since the epoch; for the two-digit years of RFC 850
/// dates, where a day's error does not matter.
pub(crate) fn year_of(time: Duration) -> i64 {
    1970 + (time.as_secs() / 31_556_952) as i64
}

/// An HTTP-date (RFC 9110, section 5.6.7): `Sun, 06 Nov 1994 08:49:37 GMT` (IMF-fixdate),
/// `Sunday, 06-Nov-94 08:49:37 GMT` (RFC 850) or `Sun Nov  6 08:49:37 1994` (asctime), as
/// a time since the epoch. `this_year` places an RFC 850 two-digit year: never more than 50
/// years ahead of it. Day and month names are read without regard to case, the weekday is
/// not checked against the date, and "UTC" is taken for "GMT".
pub(crate) fn http_date(value: &[u8], this_year: i64) -> Option<Duration> {
    let text = std::str::from_utf8(value).ok()?;
    if !text.is_ascii() {
        return None;
    }
    let words: Vec<&str> = text.split_ascii_whitespace().collect();
    let (year, month, day, time) = match words.as_slice() {
        // IMF-fixdate: day-name "," SP 2DIGIT SP month SP 4DIGIT SP time SP "GMT"
        [weekday, day, month, year, time, zone] => {
            short_weekday(weekday.strip_suffix(',')?)?;
            gmt(zone)?;
            (
                number(year, 4, 4)?,
                month_number(month)?,
                number(day, 1, 2)?,
                *time,
            )
        }
        // rfc850-date: day-name-l "," SP 2DIGIT "-" month "-" 2DIGIT SP time SP "GMT"
        [weekday, date, time, zone] => {
            long_weekday(weekday.strip_suffix(',')?)?;
            gmt(zone)?;
            let mut parts = date.split('-');
            let (day, month, short_year) = (parts.next()?, parts.next()?, parts.next()?);
            if parts.next().is_some() {
                return None;
            }
            let year = full_year(number(short_year, 2, 2)?, this_year);
            (year, month_number(month)?, number(day, 1, 2)?, *time)
        }
        // asctime-date: day-name SP month SP ( 2DIGIT / ( SP DIGIT ) ) SP time SP 4DIGIT
        [weekday, month, day, time, year] => {
            short_weekday(weekday)?;
            (
                number(year, 4, 4)?,
                month_number(month)?,
                number(day, 1, 2)?,
                *time,
            )
        }
        _ => return None,
    };
    let secs_of_day = time_of_day(time)?;
    if day == 0 || day > days_in_month(year, month) {
        return None;
    }
    let days = days_since_epoch(year, month, day);
    let secs = days * 86_400 + secs_of_day;
    Some(Duration::from_secs(u64::try_from(secs).unwrap_or(0)))
}

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const WEEKDAYS: [&str; 7] = [
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
    "sunday",
];

fn short_weekday(word: &str) -> Option<()> {
    WEEKDAYS
        .iter()
        .any(|day| day[..3].eq_ignore_ascii_case(word))
        .then_some(())
}

fn long_weekday(word: &str) -> Option<()> {
    WEEKDAYS
        .iter()
        .any(|day| day.eq_ignore_ascii_case(word))
        .then_some(())
}

fn gmt(word: &str) -> Option<()> {
    (word == "GMT" || word == "UTC").then_some(())
}

fn month_number(word: &str) -> Option<i64> {
    let index = MONTHS.iter().position(|m| m.eq_ignore_ascii_case(word))?;
    Some(index as i64 + 1)
}

/// A number of `min..=max` ASCII digits.
fn number(word: &str, min: usize, max: usize) -> Option<i64> {
    if !(min..=max).contains(&word.len()) || !word.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    word.parse().ok()
}

/// `HH:MM:SS` as seconds of the day (a leap second, `:60`, is accepted, as RFC 9110 does).
fn time_of_day(word: &str) -> Option<i64> {
    let mut parts = word.split(':');
    let hour = number(parts.next()?, 2, 2)?;
    let minute = number(parts.next()?, 2, 2)?;
    let second = number(parts.next()?, 2, 2)?;
    if parts.next().is_some() || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    Some(hour * 3600 + minute * 60 + second)
}

/// RFC 9110: a two-digit year that would be more than 50 years in the future is the most
/// recent past year with the same last two digits.
fn full_year(short: i64, this_year: i64) -> i64 {
    let mut year = this_year - this_year.rem_euclid(100) + short;
    if year > this_year + 50 {
        year -= 100;
    } else if year + 100 <= this_year + 50 {
        year += 100;
    }
    year
}

fn is_leap(year: i64) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days from 1970-01-01 to the given date of the proleptic Gregorian calendar (negative
/// before it). Counted in whole 400-year eras of 146,097 days from a year that starts in
/// March, so February's leap day is the last day of its year.
fn days_since_epoch(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400);
    // Months counted from March: Mar = 0 .. Feb = 11; their lengths repeat every 5 months
    // as 31, 30, 31, 30, 31, which (153 * m + 2) / 5 counts.
    let month_from_march = (month + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    // 719,468 days from 0000-03-01 to 1970-01-01.
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_since_epoch_matches_known_dates() {
        assert_eq!(days_since_epoch(1970, 1, 1), 0);
        assert_eq!(days_since_epoch(1969, 12, 31), -1);
        assert_eq!(days_since_epoch(2000, 3, 1), 11_017);
        assert_eq!(days_since_epoch(1994, 11, 6), 9_075);
        // Walk day by day across several leap years: each date is the day after the last.
        let mut expected = days_since_epoch(1895, 1, 1);
        for year in 1895..2105 {
            for month in 1..=12 {
                for day in 1..=days_in_month(year, month) {
                    assert_eq!(days_since_epoch(year, month, day), expected);
                    expected += 1;
                }
            }
        }
    }

    #[test]
    fn two_digit_years_stay_within_fifty_years_ahead() {
        assert_eq!(full_year(94, 2025), 1994);
        assert_eq!(full_year(75, 2025), 2075);
        assert_eq!(full_year(76, 2025), 1976);
        assert_eq!(full_year(0, 2025), 2000);
        assert_eq!(full_year(1, 2099), 2101);
        assert_eq!(full_year(49, 2099), 2149);
        assert_eq!(full_year(50, 2099), 2050);
    }

    #[test]
    fn year_of_a_time() {
        assert_eq!(year_of(Duration::ZERO), 1970);
        assert_eq!(year_of(Duration::from_secs(784_111_777)), 1994);
    }

    #[test]
    fn delay_seconds_saturates() {
        assert_eq!(delay_seconds(b"120"), Some(Duration::from_secs(120)));
        assert_eq!(delay_seconds(b" 0 "), Some(Duration::ZERO));
        assert_eq!(
            delay_seconds(b"99999999999999999999999999"),
            Some(MAX_DELAY)
        );
        assert_eq!(delay_seconds(b"2147483649"), Some(MAX_DELAY));
        for bad in [
            &b""[..],
            b" ",
            b"-1",
            b"+1",
            b"1.5",
            b"1e3",
            b"12 3",
            b"\xff",
        ] {
            assert_eq!(delay_seconds(bad), None, "{bad:?}");
        }
    }
}
