//! `Cache-Control` (RFC 9111 section 5.2) and the targeted fields of RFC 9213 (`CDN-Cache-Control`
//! and the like): the directives of a request or a response, read once into [`Directives`].
//!
//! Choices where the RFC leaves one (written down in docs/cache.md):
//! - a directive given twice: the first occurrence counts (section 4.2.1 allows the first, or
//!   treating the response as stale);
//! - an invalid delta-seconds (`max-age=abc`, `max-age=-1`): the response is stale (section 4.2.1
//!   encourages it), so the directive reads as 0; a quoted number (`max-age="5"`) is read as the
//!   number, as most caches do, although no sender may write it;
//! - a delta-seconds past 2^31 reads as 2^31 (section 1.2.2).
//!
//! Unknown directives are ignored (section 5.2.3).

use std::borrow::Cow;

use super::{trim, FieldSource};

/// The largest delta-seconds a cache must represent (RFC 9111 section 1.2.2).
pub const DELTA_MAX: u64 = 1 << 31;

/// `no-cache` or `private`: absent, on the whole response, or on the named fields only.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum FieldScope {
    #[default]
    Absent,
    All,
    /// Lowercase field names.
    Fields(Vec<Vec<u8>>),
}

impl FieldScope {
    pub fn is_absent(&self) -> bool {
        *self == FieldScope::Absent
    }

    /// Whether it names `field` (in any case) alone, not the whole message.
    pub fn names(&self, field: &[u8]) -> bool {
        match self {
            FieldScope::Fields(names) => names.iter().any(|n| n.eq_ignore_ascii_case(field)),
            _ => false,
        }
    }
}

/// `max-stale` of a request: any staleness, or at most so many seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaxStale {
    Any,
    Seconds(u64),
}

/// The cache directives of one message (request or response; each reads the ones that apply).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Directives {
    pub max_age: Option<u64>,
    pub s_maxage: Option<u64>,
    pub no_store: bool,
    pub no_cache: FieldScope,
    pub private: FieldScope,
    pub public: bool,
    pub must_revalidate: bool,
    pub proxy_revalidate: bool,
    pub must_understand: bool,
    pub no_transform: bool,
    pub immutable: bool,
    /// RFC 5861.
    pub stale_while_revalidate: Option<u64>,
    /// RFC 5861 (in a response, and in a request).
    pub stale_if_error: Option<u64>,
    pub max_stale: Option<MaxStale>,
    pub min_fresh: Option<u64>,
    pub only_if_cached: bool,
}

impl Directives {
    /// The directives of every `Cache-Control` field line of a message.
    pub fn of(fields: &(impl FieldSource + ?Sized)) -> Directives {
        Self::of_field(fields, b"cache-control")
    }

    /// The directives of every line of field `name` (lowercase): `cache-control`, or a targeted
    /// field such as `cdn-cache-control` (RFC 9213, whose syntax is a structured dictionary; the
    /// directives it carries are the same, and the same reading takes them).
    pub fn of_field(fields: &(impl FieldSource + ?Sized), name: &[u8]) -> Directives {
        let mut d = Directives::default();
        let mut seen = Seen::default();
        for line in fields.each(name) {
            for (directive, argument) in Items::new(line) {
                d.take(&directive, argument.as_deref(), &mut seen);
            }
        }
        d
    }

    /// The directives a shared cache that honours RFC 9213's `CDN-Cache-Control` follows for a
    /// response: that field's when it carries any (then `Cache-Control` is ignored for caching,
    /// RFC 9213 section 2.1), else `Cache-Control`'s.
    pub fn for_shared_cache(fields: &(impl FieldSource + ?Sized)) -> Directives {
        Self::for_targets(fields, &Targets::default())
    }

    /// The directives a shared cache follows for a response given its list of targeted fields
    /// (RFC 9213 section 2.2): the first of `targets` the response carries with any directive,
    /// else `Cache-Control`'s.
    pub fn for_targets(fields: &(impl FieldSource + ?Sized), targets: &Targets) -> Directives {
        for name in &targets.0 {
            let targeted = Self::of_field(fields, name);
            if targeted.any() {
                return targeted;
            }
        }
        Self::of(fields)
    }

    /// Whether any directive was given (a targeted field present but empty or all unknown
    /// counts as absent, RFC 9213 section 2.1).
    pub fn any(&self) -> bool {
        *self != Directives::default()
    }

    fn take(&mut self, directive: &[u8], argument: Option<&[u8]>, seen: &mut Seen) {
        let seconds = || argument.map_or(0, delta_seconds);
        match directive {
            b"max-age" if seen.first(0) => self.max_age = Some(seconds()),
            b"s-maxage" if seen.first(1) => self.s_maxage = Some(seconds()),
            b"stale-while-revalidate" if seen.first(2) => self.stale_while_revalidate = Some(seconds()),
            b"stale-if-error" if seen.first(3) => self.stale_if_error = Some(seconds()),
            b"min-fresh" if seen.first(4) => self.min_fresh = Some(seconds()),
            b"max-stale" if seen.first(5) => {
                self.max_stale = Some(match argument {
                    None => MaxStale::Any,
                    Some(a) => MaxStale::Seconds(delta_seconds(a)),
                })
            }
            b"no-store" => self.no_store = true,
            b"no-cache" => widen(&mut self.no_cache, argument),
            b"private" => widen(&mut self.private, argument),
            b"public" => self.public = true,
            b"must-revalidate" => self.must_revalidate = true,
            b"proxy-revalidate" => self.proxy_revalidate = true,
            b"must-understand" => self.must_understand = true,
            b"no-transform" => self.no_transform = true,
            b"immutable" => self.immutable = true,
            b"only-if-cached" => self.only_if_cached = true,
            _ => {}
        }
    }
}

/// Which delta-seconds directives have been seen (the first occurrence counts).
#[derive(Default)]
struct Seen(u8);

impl Seen {
    fn first(&mut self, bit: u8) -> bool {
        let first = self.0 & (1 << bit) == 0;
        self.0 |= 1 << bit;
        first
    }
}

/// `no-cache` or `private` seen again: without names it covers the whole message; with names
/// (`no-cache="set-cookie, x-a"`) they add up.
fn widen(scope: &mut FieldScope, argument: Option<&[u8]>) {
    let Some(list) = argument else {
        *scope = FieldScope::All;
        return;
    };
    let names = list
        .split(|&b| b == b',')
        .map(|n| trim(n).to_ascii_lowercase())
        .filter(|n| !n.is_empty());
    match scope {
        FieldScope::All => {}
        FieldScope::Absent => *scope = FieldScope::Fields(names.collect()),
        FieldScope::Fields(had) => had.extend(names),
    }
}

/// The targeted cache-control fields a cache follows (RFC 9213 section 2.2), most specific
/// first, lowercase: `CDN-Cache-Control` by default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Targets(Vec<Vec<u8>>);

impl Default for Targets {
    fn default() -> Self {
        Targets(vec![b"cdn-cache-control".to_vec()])
    }
}

impl Targets {
    /// The fields `names`, in order (none: `Cache-Control` alone).
    pub fn new<'a>(names: impl IntoIterator<Item = &'a str>) -> Self {
        Targets(names.into_iter().map(|n| n.to_ascii_lowercase().into_bytes()).collect())
    }

    pub fn names(&self) -> impl Iterator<Item = &[u8]> {
        self.0.iter().map(Vec::as_slice)
    }
}

/// A delta-seconds argument: 1*DIGIT, at most [`DELTA_MAX`]; anything else is 0 (stale).
pub fn delta_seconds(argument: &[u8]) -> u64 {
    if argument.is_empty() || !argument.iter().all(u8::is_ascii_digit) {
        return 0;
    }
    argument
        .iter()
        .try_fold(0u64, |n, &d| n.checked_mul(10)?.checked_add(u64::from(d - b'0')))
        .map_or(DELTA_MAX, |n| n.min(DELTA_MAX))
}

/// The items of one `Cache-Control` line: `directive[=argument]`, the directive lowercased, the
/// argument unquoted (a quoted string may hold commas and backslash escapes).
struct Items<'a> {
    rest: &'a [u8],
}

impl<'a> Items<'a> {
    fn new(line: &'a [u8]) -> Self {
        Items { rest: line }
    }
}

impl<'a> Iterator for Items<'a> {
    /// Borrowed from the line unless it had to change (uppercase in the directive, escapes in a
    /// quoted argument): most lines cost no allocation.
    type Item = (Cow<'a, [u8]>, Option<Cow<'a, [u8]>>);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let rest = trim(self.rest);
            if rest.is_empty() {
                return None;
            }
            let end = rest.iter().position(|&b| b == b',' || b == b'=').unwrap_or(rest.len());
            let raw = trim(&rest[..end]);
            let name: Cow<'a, [u8]> = match raw.iter().any(u8::is_ascii_uppercase) {
                true => Cow::Owned(raw.to_ascii_lowercase()),
                false => Cow::Borrowed(raw),
            };
            let mut after = &rest[end..];
            let mut argument = None;
            if after.first() == Some(&b'=') {
                let value = trim_start(&after[1..]);
                if value.first() == Some(&b'"') {
                    let (unquoted, used) = quoted(&value[1..]);
                    argument = Some(Cow::Owned(unquoted));
                    after = &value[1 + used..];
                } else {
                    let end = value.iter().position(|&b| b == b',').unwrap_or(value.len());
                    argument = Some(Cow::Borrowed(trim(&value[..end])));
                    after = &value[end..];
                }
                // Whatever follows up to the next comma is not part of this item.
                let comma = after.iter().position(|&b| b == b',').unwrap_or(after.len());
                after = &after[comma..];
            }
            self.rest = after.strip_prefix(b",").unwrap_or(after);
            if !name.is_empty() {
                return Some((name, argument));
            }
        }
    }
}

fn trim_start(b: &[u8]) -> &[u8] {
    let start = b.iter().position(|c| !matches!(c, b' ' | b'\t')).unwrap_or(b.len());
    &b[start..]
}

/// A quoted string's content (after the opening quote): the unescaped octets and how many octets
/// it took, the closing quote included (all that is left when it never closes).
fn quoted(b: &[u8]) -> (Vec<u8>, usize) {
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'"' => return (out, i + 1),
            b'\\' if i + 1 < b.len() => {
                out.push(b[i + 1]);
                i += 2;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    (out, b.len())
}
