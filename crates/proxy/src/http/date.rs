//! HTTP dates (RFC 9110 §5.6.7), for the `Date` of Rampart's own answers and of the files it
//! serves, and for `Last-Modified` and the conditional fields: written as IMF-fixdate (`Sun, 06
//! Nov 1994 08:49:37 GMT`), read in all three forms a recipient must accept (IMF-fixdate, RFC
//! 850, asctime). The current date is formatted once a second per worker thread.

use std::cell::Cell;
use std::time::{SystemTime, UNIX_EPOCH};

/// Length of an IMF-fixdate.
pub const DATE_LEN: usize = 29;

const DAYS: [&[u8; 3]; 7] = [b"Thu", b"Fri", b"Sat", b"Sun", b"Mon", b"Tue", b"Wed"];
const MONTHS: [&[u8; 3]; 12] = [
    b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
];

/// Seconds since the epoch of a system time (0 before it).
pub fn unix_seconds(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// `secs` as an IMF-fixdate.
pub fn format(secs: u64) -> [u8; DATE_LEN] {
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (year, month, day) = civil_from_days(days as i64);
    let mut out = *b"Thu, 01 Jan 1970 00:00:00 GMT";
    out[..3].copy_from_slice(DAYS[(days % 7) as usize]);
    two(&mut out[5..7], day);
    out[8..11].copy_from_slice(MONTHS[month as usize - 1]);
    let year = year.clamp(0, 9999) as u32;
    two(&mut out[12..14], year / 100);
    two(&mut out[14..16], year % 100);
    two(&mut out[17..19], (rem / 3600) as u32);
    two(&mut out[20..22], (rem / 60 % 60) as u32);
    two(&mut out[23..25], (rem % 60) as u32);
    out
}

fn two(out: &mut [u8], n: u32) {
    out[0] = b'0' + (n / 10 % 10) as u8;
    out[1] = b'0' + (n % 10) as u8;
}

thread_local! {
    static NOW: Cell<(u64, [u8; DATE_LEN])> = const { Cell::new((u64::MAX, [0; DATE_LEN])) };
}

/// The current date as an IMF-fixdate, formatted at most once a second on this thread.
pub fn now() -> [u8; DATE_LEN] {
    let secs = unix_seconds(SystemTime::now());
    NOW.with(|cached| {
        let (at, text) = cached.get();
        if at == secs {
            return text;
        }
        let text = format(secs);
        cached.set((secs, text));
        text
    })
}

/// Seconds since the epoch of an HTTP date in any of its three forms; `None` for anything else
/// (an invalid date in a condition is ignored, as RFC 9110 says).
pub fn parse(value: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(value).ok()?.trim();
    let (day, month, year, time) = if let Some((_, rest)) = s.split_once(", ") {
        match five(rest.split([' ', '-']))? {
            // IMF-fixdate: `06 Nov 1994 08:49:37 GMT`.
            [d, m, y, t, "GMT"] if y.len() == 4 => (d, m, y.parse::<i64>().ok()?, t),
            // RFC 850: `Sunday, 06-Nov-94 08:49:37 GMT` (two-digit years in 1970-2069).
            [d, m, y, t, "GMT"] if y.len() == 2 => {
                let y = y.parse::<i64>().ok()?;
                (d, m, if y < 70 { 2000 + y } else { 1900 + y }, t)
            }
            _ => return None,
        }
    } else {
        // asctime: `Sun Nov  6 08:49:37 1994`.
        let [_, m, d, t, y] = five(s.split_ascii_whitespace())?;
        (d, m, y.parse::<i64>().ok()?, t)
    };
    let day: i64 = day.parse().ok()?;
    let month = MONTHS.iter().position(|m| m.as_slice() == month.as_bytes())? as i64 + 1;
    let mut hms = time.split(':').map(|p| p.parse::<i64>().ok());
    let (h, m, sec) = (hms.next()??, hms.next()??, hms.next()??);
    if hms.next().is_some() || !(1..=31).contains(&day) || h > 23 || m > 59 || sec > 60 {
        return None;
    }
    let days = days_from_civil(year, month, day);
    u64::try_from(days * 86_400 + h * 3600 + m * 60 + sec).ok()
}

/// Exactly five items, or `None`.
fn five<'a>(mut items: impl Iterator<Item = &'a str>) -> Option<[&'a str; 5]> {
    let mut out = [""; 5];
    for slot in &mut out {
        *slot = items.next()?;
    }
    items.next().is_none().then_some(out)
}

/// Year, month (1-12), day (1-31) of a day count since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// Days since 1970-01-01 of a civil date.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_written_as_imf_fixdate() {
        assert_eq!(&format(0), b"Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(&format(784_111_777), b"Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(&format(951_782_400), b"Tue, 29 Feb 2000 00:00:00 GMT");
        assert_eq!(&format(1_767_225_599), b"Wed, 31 Dec 2025 23:59:59 GMT");
        assert_eq!(now().len(), DATE_LEN);
    }

    #[test]
    fn all_three_forms_are_read() {
        assert_eq!(parse(b"Sun, 06 Nov 1994 08:49:37 GMT"), Some(784_111_777));
        assert_eq!(parse(b"Sunday, 06-Nov-94 08:49:37 GMT"), Some(784_111_777));
        assert_eq!(parse(b"Sun Nov  6 08:49:37 1994"), Some(784_111_777));
        for secs in [0, 951_782_400, 1_767_225_599, 4_102_444_800] {
            assert_eq!(parse(&format(secs)), Some(secs));
        }
    }

    #[test]
    fn anything_else_is_no_date() {
        for bad in [
            &b""[..],
            b"yesterday",
            b"Sun, 06 Nov 1994 08:49:37 UTC",
            b"Sun, 32 Nov 1994 08:49:37 GMT",
            b"Sun, 06 Foo 1994 08:49:37 GMT",
            b"Sun, 06 Nov 1994 25:49:37 GMT",
            b"Sun, 06 Nov 1994 08:49 GMT",
            b"\xff\xfe",
        ] {
            assert_eq!(parse(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }
}
