//! `Range: bytes=...` (RFC 9110 §14): one range is answered with 206 and `Content-Range`; a
//! range that starts past the end (or a suffix of 0 bytes, or any range of an empty file) with
//! 416. Several ranges are answered with the whole file (200), which the RFC allows and which
//! spares a multipart body; so is a `Range` that does not parse or names another unit.

/// What a `Range` field asks of a file of a given size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeRequest {
    /// Send the whole file.
    Full,
    /// Send bytes `start..=end`.
    Part { start: u64, end: u64 },
    /// 416.
    Unsatisfiable,
}

/// Reads a `Range` value for a file of `size` bytes.
pub fn parse(value: &[u8], size: u64) -> RangeRequest {
    let value = value.trim_ascii();
    let Some(unit) = value.get(..5) else {
        return RangeRequest::Full;
    };
    if !unit.eq_ignore_ascii_case(b"bytes") {
        return RangeRequest::Full;
    }
    let Some(set) = value[5..].trim_ascii_start().strip_prefix(b"=") else {
        return RangeRequest::Full;
    };
    let mut specs = set
        .split(|&b| b == b',')
        .map(<[u8]>::trim_ascii)
        .filter(|s| !s.is_empty());
    let (Some(spec), None) = (specs.next(), specs.next()) else {
        return RangeRequest::Full;
    };
    let Some(dash) = spec.iter().position(|&b| b == b'-') else {
        return RangeRequest::Full;
    };
    let (first, last) = (spec[..dash].trim_ascii(), spec[dash + 1..].trim_ascii());
    match (number(first), number(last)) {
        // `-N`: the last N bytes.
        (None, Some(suffix)) if first.is_empty() => {
            if suffix == 0 || size == 0 {
                RangeRequest::Unsatisfiable
            } else {
                RangeRequest::Part {
                    start: size.saturating_sub(suffix),
                    end: size - 1,
                }
            }
        }
        // `N-`: from N to the end.
        (Some(start), None) if last.is_empty() => within(start, u64::MAX, size),
        (Some(start), Some(end)) if end >= start => within(start, end, size),
        _ => RangeRequest::Full,
    }
}

fn within(start: u64, end: u64, size: u64) -> RangeRequest {
    if start >= size {
        RangeRequest::Unsatisfiable
    } else {
        RangeRequest::Part {
            start,
            end: end.min(size - 1),
        }
    }
}

/// Decimal digits as a number (saturating: a position past any file is still past it).
fn number(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(
        digits
            .iter()
            .fold(0u64, |n, d| n.saturating_mul(10).saturating_add(u64::from(d - b'0'))),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use RangeRequest::*;

    #[test]
    fn single_ranges() {
        assert_eq!(parse(b"bytes=0-99", 1000), Part { start: 0, end: 99 });
        assert_eq!(parse(b"bytes=500-", 1000), Part { start: 500, end: 999 });
        assert_eq!(parse(b"bytes=-100", 1000), Part { start: 900, end: 999 });
        assert_eq!(parse(b"bytes=-5000", 1000), Part { start: 0, end: 999 });
        assert_eq!(parse(b"bytes=990-2000", 1000), Part { start: 990, end: 999 });
        assert_eq!(parse(b"bytes=0-0", 1), Part { start: 0, end: 0 });
        assert_eq!(parse(b" Bytes = 1-2 ", 10), Part { start: 1, end: 2 });
        assert_eq!(parse(b"bytes=1-2,", 10), Part { start: 1, end: 2 });
        assert_eq!(parse(b"bytes=0-99999999999999999999999", 10), Part { start: 0, end: 9 });
    }

    #[test]
    fn ranges_past_the_end_are_unsatisfiable() {
        assert_eq!(parse(b"bytes=1000-", 1000), Unsatisfiable);
        assert_eq!(parse(b"bytes=1000-1001", 1000), Unsatisfiable);
        assert_eq!(parse(b"bytes=-0", 1000), Unsatisfiable);
        assert_eq!(parse(b"bytes=0-", 0), Unsatisfiable);
        assert_eq!(parse(b"bytes=-1", 0), Unsatisfiable);
        assert_eq!(parse(b"bytes=99999999999999999999999-", 10), Unsatisfiable);
    }

    #[test]
    fn other_forms_get_the_whole_file() {
        for value in [
            &b"bytes=0-1,5-6"[..],
            b"bytes=5-1",
            b"bytes=",
            b"bytes=a-b",
            b"bytes=1",
            b"bytes=--1",
            b"bytes 0-1",
            b"items=0-1",
            b"byte",
            b"",
        ] {
            assert_eq!(parse(value, 1000), Full, "{}", String::from_utf8_lossy(value));
        }
    }
}
