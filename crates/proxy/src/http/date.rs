//! The `Date` field of Rampart's own answers (RFC 9110 §6.6.1: an origin server with a clock
//! sends one), as an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`). Formatted at most once a
//! second per worker thread: each answer copies the cached 29 bytes.

use std::cell::Cell;
use std::time::{SystemTime, UNIX_EPOCH};

/// The length of an IMF-fixdate.
pub const LEN: usize = 29;

thread_local! {
    /// The second last formatted, and its text.
    static CACHED: Cell<(u64, [u8; LEN])> = const { Cell::new((u64::MAX, [0; LEN])) };
}

/// Now, as an IMF-fixdate.
pub fn now() -> [u8; LEN] {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    CACHED.with(|cached| {
        let (at, text) = cached.get();
        if at == secs {
            return text;
        }
        let text = format(secs);
        cached.set((secs, text));
        text
    })
}

/// `secs` after the Unix epoch as an IMF-fixdate.
pub fn format(secs: u64) -> [u8; LEN] {
    const DAYS: [&[u8; 3]; 7] = [b"Thu", b"Fri", b"Sat", b"Sun", b"Mon", b"Tue", b"Wed"];
    const MONTHS: [&[u8; 3]; 12] = [
        b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
    ];
    let days = secs / 86_400;
    let of_day = secs % 86_400;
    let (year, month, day) = civil_from_days(days as i64);
    let mut out = *b"Thu, 01 Jan 1970 00:00:00 GMT";
    out[..3].copy_from_slice(DAYS[(days % 7) as usize]);
    two(&mut out[5..7], day as u64);
    out[8..11].copy_from_slice(MONTHS[(month - 1) as usize]);
    let year = year.clamp(0, 9999) as u64;
    two(&mut out[12..14], year / 100);
    two(&mut out[14..16], year % 100);
    two(&mut out[17..19], of_day / 3600);
    two(&mut out[20..22], of_day / 60 % 60);
    two(&mut out[23..25], of_day % 60);
    out
}

fn two(at: &mut [u8], n: u64) {
    at[0] = b'0' + (n / 10 % 10) as u8;
    at[1] = b'0' + (n % 10) as u8;
}

/// Year, month (1-12) and day (1-31) of a day count from 1970-01-01 (Howard Hinnant's
/// `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_as_imf_fixdate() {
        assert_eq!(&format(0), b"Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(&format(784_111_777), b"Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(&format(951_782_400), b"Tue, 29 Feb 2000 00:00:00 GMT");
        assert_eq!(&format(1_795_651_199), b"Wed, 25 Nov 2026 23:59:59 GMT");
        assert_eq!(now().len(), LEN);
    }
}
