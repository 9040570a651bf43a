//! How long a stored response stays fresh (RFC 9111 sections 4.2.1 and 4.2.2) and how old it is
//! (section 4.2.3), in whole seconds as the RFC counts them.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::control::{delta_seconds, Directives, DELTA_MAX};
use super::FieldSource;

/// An HTTP-date in any of the three forms a recipient must accept (RFC 9110 section 5.6.7).
pub fn http_date(value: &[u8]) -> Option<SystemTime> {
    let value = super::trim(value);
    if let Some(at) = imf_fixdate(value) {
        return Some(at);
    }
    let text = std::str::from_utf8(value).ok()?;
    httpdate::parse_http_date(text).ok()
}

/// The form every sender must use (`Sun, 06 Nov 1994 08:49:37 GMT`), read without the general
/// parser: it is in every response's `Date`, read on every store.
fn imf_fixdate(v: &[u8]) -> Option<SystemTime> {
    const MONTHS: [&[u8; 3]; 12] = [
        b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
    ];
    let shape = v.len() == 29
        && &v[3..5] == b", "
        && v[7] == b' '
        && v[11] == b' '
        && v[16] == b' '
        && v[19] == b':'
        && v[22] == b':'
        && &v[25..] == b" GMT";
    if !shape {
        return None;
    }
    let number = |from: usize, to: usize| {
        v[from..to]
            .iter()
            .try_fold(0u64, |n, &d| d.is_ascii_digit().then(|| n * 10 + u64::from(d - b'0')))
    };
    let (day, year) = (number(5, 7)?, number(12, 16)?);
    let (hour, minute, second) = (number(17, 19)?, number(20, 22)?, number(23, 25)?);
    let month = MONTHS.iter().position(|m| m[..] == v[8..11])? as u64 + 1;
    if !(1..=31).contains(&day) || year < 1970 || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    // Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm).
    let (y, m) = if month <= 2 {
        (year - 1, month + 9)
    } else {
        (year, month - 3)
    };
    let era = y / 400;
    let year_of_era = y - era * 400;
    let day_of_year = (153 * m + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    let days = (era * 146_097 + day_of_era).checked_sub(719_468)?;
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second;
    UNIX_EPOCH.checked_add(Duration::from_secs(seconds))
}

/// The status codes RFC 9110 section 15.1 makes heuristically cacheable.
pub fn heuristically_cacheable(status: u16) -> bool {
    matches!(
        status,
        200 | 203 | 204 | 206 | 300 | 301 | 308 | 404 | 405 | 410 | 414 | 501
    )
}

/// A freshness lifetime, and where it came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lifetime {
    pub seconds: u64,
    /// From `s-maxage`, `max-age` or `Expires`; false for a heuristic lifetime or none.
    pub explicit: bool,
}

/// The freshness lifetime of a response in a shared cache (section 4.2.1): `s-maxage`, else
/// `max-age`, else `Expires` less `Date` (an invalid or repeated `Expires`, such as `0`, is in
/// the past); else, for a heuristically cacheable status or a `public` response, a tenth of the
/// time since `Last-Modified` (section 4.2.2), at most `heuristic_max`; else none (0).
/// `response_time`: when the response was received (its `Date` when it has none).
pub fn lifetime(
    status: u16,
    response: &(impl FieldSource + ?Sized),
    cc: &Directives,
    response_time: SystemTime,
    heuristic_max: Duration,
) -> Lifetime {
    if let Some(s) = cc.s_maxage.or(cc.max_age) {
        return Lifetime {
            seconds: s,
            explicit: true,
        };
    }
    let date = response.value_of(b"date").and_then(http_date).unwrap_or(response_time);
    let mut expires = response.each(b"expires");
    if let Some(first) = expires.next() {
        let seconds = match (http_date(first), expires.next()) {
            (Some(at), None) => seconds_between(date, at),
            _ => 0,
        };
        return Lifetime {
            seconds,
            explicit: true,
        };
    }
    let heuristic = heuristically_cacheable(status) || cc.public;
    let last_modified = response.value_of(b"last-modified").and_then(http_date);
    let seconds = match last_modified {
        Some(modified) if heuristic => (seconds_between(modified, date) / 10).min(heuristic_max.as_secs()),
        _ => 0,
    };
    Lifetime {
        seconds,
        explicit: false,
    }
}

/// When a stored response was asked for and received, and what it said of its age.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// When the request that brought it was sent.
    pub request_time: SystemTime,
    /// When it was received.
    pub response_time: SystemTime,
    /// Its `Date` (the response time when it had none or an invalid one).
    pub date: SystemTime,
    /// Its `Age`: 0 when it had none; [`AGE_INVALID`] when it had one that is not a single
    /// non-negative integer.
    pub age: u64,
}

impl Timing {
    /// The timing of `response`, asked for at `request_time` and received at `response_time`.
    pub fn of(response: &(impl FieldSource + ?Sized), request_time: SystemTime, response_time: SystemTime) -> Timing {
        Timing {
            request_time,
            response_time,
            date: response.value_of(b"date").and_then(http_date).unwrap_or(response_time),
            age: age(response),
        }
    }

    /// Its current age at `now` (section 4.2.3): the larger of the age its `Date` implies and
    /// its `Age` plus the time the request took, plus the time it has been stored.
    pub fn current_age(&self, now: SystemTime) -> u64 {
        let apparent_age = seconds_between(self.date, self.response_time);
        let response_delay = seconds_between(self.request_time, self.response_time);
        let corrected_age_value = self.age.saturating_add(response_delay);
        let corrected_initial_age = apparent_age.max(corrected_age_value);
        let resident_time = seconds_between(self.response_time, now);
        corrected_initial_age.saturating_add(resident_time)
    }
}

/// The age taken for a response whose `Age` is not one non-negative integer: the largest age
/// the RFC lets a cache send (2^31 seconds, section 1.2.2), so that the response is stale.
pub const AGE_INVALID: u64 = DELTA_MAX;

/// The `Age` of `response` (section 5.1). One line holding digits only is its age. Anything else
/// (a list, two lines, a sign, a fraction, a parameter, letters) makes the response stale from
/// the start ([`AGE_INVALID`]): the RFC lets a cache take the first member of a list and ignore
/// an invalid value (both SHOULDs), which would reuse as fresh a response whose age nobody can
/// tell; Rampart validates it first instead, as the public cache test suite expects (docs/cache.md).
fn age(response: &(impl FieldSource + ?Sized)) -> u64 {
    let mut lines = response.each(b"age");
    match (lines.next().map(super::trim), lines.next()) {
        (None, _) => 0,
        (Some(value), None) if !value.is_empty() && value.iter().all(u8::is_ascii_digit) => delta_seconds(value),
        _ => AGE_INVALID,
    }
}

/// Whole seconds from `from` to `to`, 0 when `to` is earlier.
pub fn seconds_between(from: SystemTime, to: SystemTime) -> u64 {
    to.duration_since(from).map_or(0, |d| d.as_secs())
}
