//! Human-friendly durations and sizes.

use std::time::Duration;

/// Parses durations such as `250ms`, `5s`, `2m`, `1h`, `1d` or `1m30s`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let bad = || {
        format!(
            "`{s}` is not a duration (expected a number with a unit: ms, s, m, h or d, such as \"5s\" or \"1m30s\")"
        )
    };
    let mut rest = s.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total = Duration::ZERO;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        if digits == 0 {
            return Err(bad());
        }
        let n: u64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit()).unwrap_or(rest.len());
        let part = match &rest[..unit_len] {
            "ms" => Duration::from_millis(n),
            "s" => Duration::from_secs(n),
            "m" => Duration::from_secs(n.saturating_mul(60)),
            "h" => Duration::from_secs(n.saturating_mul(3600)),
            "d" => Duration::from_secs(n.saturating_mul(86_400)),
            _ => return Err(bad()),
        };
        total = total.saturating_add(part);
        rest = &rest[unit_len..];
    }
    Ok(total)
}

/// Parses sizes such as `512`, `16KiB`, `64KB`, `1MiB`, `2GiB`, or nginx's `64k`/`1m` (binary).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let bad = || format!("`{s}` is not a size (expected a number with an optional unit: B, KB, KiB, MB, MiB, GB, GiB)");
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    if digits == 0 {
        return Err(bad());
    }
    let n: u64 = t[..digits].parse().map_err(|_| bad())?;
    let unit: u64 = match t[digits..].trim_start() {
        "" | "B" => 1,
        "KB" => 1000,
        "MB" => 1000 * 1000,
        "GB" => 1000 * 1000 * 1000,
        "KiB" | "k" | "K" => 1 << 10,
        "MiB" | "m" | "M" => 1 << 20,
        "GiB" | "g" | "G" => 1 << 30,
        _ => return Err(bad()),
    };
    n.checked_mul(unit).ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        for bad in ["", "5", "s", "5x", "-1s", "1.5s", "5 s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64KiB"), Ok(65_536));
        assert_eq!(parse_size("64KB"), Ok(64_000));
        assert_eq!(parse_size("1MiB"), Ok(1 << 20));
        assert_eq!(parse_size("16k"), Ok(16_384));
        assert_eq!(parse_size("512"), Ok(512));
        for bad in ["", "KiB", "1.5KiB", "12XB", "99999999999999GiB"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }
}
