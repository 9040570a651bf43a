//! Validators and conditional requests (RFC 9110 §8.8, §13): a file's `ETag` is nginx's,
//! `"MTIME-SIZE"` in hex, strong; its `Last-Modified` is its modification time. The
//! preconditions are evaluated in the RFC's order: `If-Match`, else `If-Unmodified-Since` (412
//! when they fail), then `If-None-Match`, else `If-Modified-Since` (304 for GET and HEAD).
//! `If-Range` decides whether a `Range` is honoured.

use crate::http::date;

/// Where request header values come from: every value of a field, in order.
pub trait HeaderSource {
    fn values<'s>(&'s self, name: &'static str) -> impl Iterator<Item = &'s [u8]>;
}

/// A file's validators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Validators {
    /// Modification time, whole seconds since the epoch.
    pub mtime: u64,
    pub size: u64,
}

/// An entity tag, quoted, in a fixed buffer.
pub struct ETag {
    buf: [u8; 36],
    len: usize,
}

impl ETag {
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl Validators {
    /// `"MTIME-SIZE"`, both in lower-case hex.
    pub fn etag(&self) -> ETag {
        let mut tag = ETag { buf: [0; 36], len: 0 };
        let mut push = |b: u8| {
            tag.buf[tag.len] = b;
            tag.len += 1;
        };
        push(b'"');
        for n in [self.mtime, self.size] {
            let digits = (64 - n.leading_zeros()).div_ceil(4).max(1);
            for i in (0..digits).rev() {
                push(b"0123456789abcdef"[(n >> (i * 4)) as usize & 0xf]);
            }
            push(b'-');
        }
        tag.len -= 1;
        tag.buf[tag.len] = b'"';
        tag.len += 1;
        tag
    }
}

/// What the preconditions say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precondition {
    /// Answer as usual.
    Proceed,
    /// 304: the client's copy is current.
    NotModified,
    /// 412: a precondition failed.
    Failed,
}

/// Evaluates the preconditions of a GET or HEAD for a file with `validators`.
pub fn evaluate(headers: &impl HeaderSource, validators: &Validators) -> Precondition {
    let etag = validators.etag();
    let etag = etag.as_bytes();
    let mut if_match = headers.values("if-match").peekable();
    if if_match.peek().is_some() {
        if !if_match.any(|v| tag_list_matches(v, etag, true)) {
            return Precondition::Failed;
        }
    } else if let Some(since) = headers.values("if-unmodified-since").next().and_then(date::parse) {
        if validators.mtime > since {
            return Precondition::Failed;
        }
    }
    let mut if_none_match = headers.values("if-none-match").peekable();
    if if_none_match.peek().is_some() {
        if if_none_match.any(|v| tag_list_matches(v, etag, false)) {
            return Precondition::NotModified;
        }
    } else if let Some(since) = headers.values("if-modified-since").next().and_then(date::parse) {
        if validators.mtime <= since {
            return Precondition::NotModified;
        }
    }
    Precondition::Proceed
}

/// Whether an `If-Range` value lets a range through: the same strong entity tag, or exactly the
/// file's modification date.
pub fn if_range_holds(value: &[u8], validators: &Validators) -> bool {
    let value = value.trim_ascii();
    if value.starts_with(b"\"") || value.starts_with(b"W/") {
        return value == validators.etag().as_bytes();
    }
    date::parse(value) == Some(validators.mtime)
}

/// Whether `list` (`*`, or entity tags separated by commas) names `etag`: with `strong`, weak
/// tags never match (If-Match); without, `W/` is ignored (If-None-Match). A malformed list
/// matches nothing from where it goes wrong.
fn tag_list_matches(list: &[u8], etag: &[u8], strong: bool) -> bool {
    let mut rest = list.trim_ascii();
    if rest == b"*" {
        return true;
    }
    loop {
        rest = rest.trim_ascii_start();
        while let Some(r) = rest.strip_prefix(b",") {
            rest = r.trim_ascii_start();
        }
        if rest.is_empty() {
            return false;
        }
        let weak = rest.starts_with(b"W/");
        if weak {
            rest = &rest[2..];
        }
        if !rest.starts_with(b"\"") {
            return false;
        }
        let Some(end) = rest[1..].iter().position(|&b| b == b'"') else {
            return false;
        };
        let tag = &rest[..end + 2];
        if tag == etag && !(strong && weak) {
            return true;
        }
        rest = &rest[end + 2..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fields(Vec<(&'static str, &'static str)>);

    impl HeaderSource for Fields {
        fn values<'s>(&'s self, name: &'static str) -> impl Iterator<Item = &'s [u8]> {
            self.0
                .iter()
                .filter(move |(n, _)| *n == name)
                .map(|(_, v)| v.as_bytes())
        }
    }

    const FILE: Validators = Validators {
        mtime: 784_111_777,
        size: 1024,
    };
    const TAG: &str = "\"2ebc98a1-400\"";
    const DATE: &str = "Sun, 06 Nov 1994 08:49:37 GMT";
    const EARLIER: &str = "Sun, 06 Nov 1994 08:49:36 GMT";

    fn eval(fields: &[(&'static str, &'static str)]) -> Precondition {
        evaluate(&Fields(fields.to_vec()), &FILE)
    }

    #[test]
    fn etags_are_mtime_and_size_in_hex() {
        assert_eq!(FILE.etag().as_bytes(), TAG.as_bytes());
        let zero = Validators { mtime: 0, size: 0 };
        assert_eq!(zero.etag().as_bytes(), b"\"0-0\"");
        let max = Validators {
            mtime: u64::MAX,
            size: u64::MAX,
        };
        assert_eq!(max.etag().as_bytes(), b"\"ffffffffffffffff-ffffffffffffffff\"");
    }

    #[test]
    fn if_none_match_and_if_modified_since_give_304() {
        use Precondition::*;
        assert_eq!(eval(&[]), Proceed);
        assert_eq!(eval(&[("if-none-match", TAG)]), NotModified);
        assert_eq!(eval(&[("if-none-match", "W/\"2ebc98a1-400\"")]), NotModified);
        assert_eq!(eval(&[("if-none-match", "\"x\", \"2ebc98a1-400\"")]), NotModified);
        assert_eq!(eval(&[("if-none-match", "\"x\""), ("if-none-match", TAG)]), NotModified);
        assert_eq!(eval(&[("if-none-match", "*")]), NotModified);
        assert_eq!(eval(&[("if-none-match", "\"other\"")]), Proceed);
        assert_eq!(eval(&[("if-modified-since", DATE)]), NotModified);
        assert_eq!(eval(&[("if-modified-since", EARLIER)]), Proceed);
        assert_eq!(eval(&[("if-modified-since", "garbage")]), Proceed);
        // If-None-Match wins over If-Modified-Since.
        assert_eq!(
            eval(&[("if-none-match", "\"other\""), ("if-modified-since", DATE)]),
            Proceed
        );
    }

    #[test]
    fn if_match_and_if_unmodified_since_give_412() {
        use Precondition::*;
        assert_eq!(eval(&[("if-match", TAG)]), Proceed);
        assert_eq!(eval(&[("if-match", "*")]), Proceed);
        assert_eq!(eval(&[("if-match", "\"other\"")]), Failed);
        // If-Match compares strongly.
        assert_eq!(eval(&[("if-match", "W/\"2ebc98a1-400\"")]), Failed);
        assert_eq!(eval(&[("if-unmodified-since", DATE)]), Proceed);
        assert_eq!(eval(&[("if-unmodified-since", EARLIER)]), Failed);
        // If-Match wins over If-Unmodified-Since.
        assert_eq!(eval(&[("if-match", TAG), ("if-unmodified-since", EARLIER)]), Proceed);
        assert_eq!(eval(&[("if-unmodified-since", "garbage")]), Proceed);
        assert_eq!(eval(&[("if-match", "\"broken")]), Failed);
    }

    #[test]
    fn if_range_needs_the_strong_tag_or_the_exact_date() {
        assert!(if_range_holds(TAG.as_bytes(), &FILE));
        assert!(!if_range_holds(b"W/\"2ebc98a1-400\"", &FILE));
        assert!(!if_range_holds(b"\"other\"", &FILE));
        assert!(if_range_holds(DATE.as_bytes(), &FILE));
        assert!(!if_range_holds(EARLIER.as_bytes(), &FILE));
        assert!(!if_range_holds(b"nonsense", &FILE));
    }
}
