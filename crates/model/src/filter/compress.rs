//! The `compress` response filter's compiled settings: which content codings Rampart produces and in
//! what order it prefers them, how hard each one works and how much memory it may hold per response,
//! and which responses qualify (content types, minimum size).
//!
//! Plain data: the data plane (`rampart_proxy::filters::compress`) negotiates, decides and encodes;
//! the config compiler validates user input against the ranges given here ([`Algorithm::levels`],
//! [`Algorithm::window_logs`], [`ContentTypePattern::parse`]).

use std::ops::RangeInclusive;

/// A content coding Rampart can produce.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// `zstd` (RFC 8878, HTTP use in RFC 9659).
    Zstd,
    /// `br` (RFC 7932).
    Brotli,
    /// `gzip` (RFC 1952); `x-gzip` in a request means the same.
    Gzip,
}

impl Algorithm {
    /// Every algorithm.
    pub const ALL: [Algorithm; 3] = [Algorithm::Zstd, Algorithm::Brotli, Algorithm::Gzip];

    /// The content-coding token, as sent in `Content-Encoding`.
    pub fn token(self) -> &'static str {
        match self {
            Algorithm::Zstd => "zstd",
            Algorithm::Brotli => "br",
            Algorithm::Gzip => "gzip",
        }
    }

    /// The algorithm a content-coding token names (ASCII case-insensitive; `x-gzip` is gzip).
    pub fn from_token(token: &[u8]) -> Option<Algorithm> {
        if token.eq_ignore_ascii_case(b"gzip") || token.eq_ignore_ascii_case(b"x-gzip") {
            Some(Algorithm::Gzip)
        } else if token.eq_ignore_ascii_case(b"br") {
            Some(Algorithm::Brotli)
        } else if token.eq_ignore_ascii_case(b"zstd") {
            Some(Algorithm::Zstd)
        } else {
            None
        }
    }

    /// Levels the encoder accepts: gzip 1-9 (0 would only store), brotli quality 0-6, zstd -7
    /// (fastest) to 8. Higher brotli and zstd levels switch to match finders whose tables, not the
    /// window, set the memory. Measured per response: brotli 4, 5, 6 hold 1.3, 1.9, 2.9 MiB with
    /// a 256 KiB window, but 7, 8, 9 hold 9, 17, 33 MiB; zstd 3 holds 2 MiB with a 1 MiB window,
    /// 5-6 hold 3.7 MiB, 7-8 hold 6.2 MiB, then 9 holds 11 MiB and 10-19 hold 21-82 MiB. Those
    /// belong to precompressed files, not to a filter that holds one encoder per response.
    pub fn levels(self) -> RangeInclusive<i32> {
        match self {
            Algorithm::Gzip => 1..=9,
            Algorithm::Brotli => 0..=6,
            Algorithm::Zstd => -7..=8,
        }
    }

    /// Base-2 logarithms of the window sizes the encoder accepts: deflate 9-15 (512 B to 32 KiB),
    /// brotli 10-24 (1 KiB to 16 MiB), zstd 10-23 (RFC 9659: an encoder must not use a window over
    /// 8 MiB, as decoders need not accept one).
    pub fn window_logs(self) -> RangeInclusive<u8> {
        match self {
            Algorithm::Gzip => 9..=15,
            Algorithm::Brotli => 10..=24,
            Algorithm::Zstd => 10..=23,
        }
    }

    /// The defaults: see [`GZIP`], [`BROTLI`] and [`ZSTD`].
    pub fn default_tuning(self) -> Tuning {
        match self {
            Algorithm::Gzip => GZIP,
            Algorithm::Brotli => BROTLI,
            Algorithm::Zstd => ZSTD,
        }
    }
}

impl std::fmt::Display for Algorithm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.token())
    }
}

/// How hard one algorithm works, and the most memory it may use for its window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tuning {
    /// Compression level (brotli: quality), within [`Algorithm::levels`].
    pub level: i32,
    /// Base-2 logarithm of the largest window, within [`Algorithm::window_logs`]. A response whose
    /// length is known gets a window no larger than it needs (brotli qualities 5 and 6 never below
    /// 128 KiB: with 64 KiB or less they switch to a 33 MiB match finder).
    pub window_log: u8,
}

// The defaults below were measured with `cargo run --release -p rampart-proxy --example
// compress_levels` on JSON (`cargo metadata` output, a JSON schema), HTML (rustdoc pages) and
// JavaScript, streamed in 16 KiB pieces with a flush after each; numbers in docs/benchmarks.md.

/// gzip level 5: within 0.3-3% of level 6's size and 2-6% smaller than level 4, in 65-90% of level
/// 6's time; level 1 (nginx's default) is 3-4x faster but its output is 40-70% larger. Window
/// 32 KiB, deflate's largest. The encoder holds about 370 KiB whatever the level (zlib-rs: a
/// 128 KiB hash table, 112 KiB of output and symbol buffers, then four bytes per window byte),
/// 260 KiB for a short body.
pub const GZIP: Tuning = Tuning {
    level: 5,
    window_log: 15,
};

/// brotli quality 4 (qualities 0-4 are brotli's fast ones): on these samples its output ranges from
/// 6% smaller to 11% larger than gzip 5's, for 1.6-2x the time, which is why brotli comes after
/// gzip in [`ALGORITHMS`]. Quality 5 is 3-15% smaller than gzip 5 on four samples (32% larger on
/// one JSON) for 1.6-3x gzip's time. Window 256 KiB: the encoder then holds about 1.3 MiB (2.9 MiB
/// with a 1 MiB window).
pub const BROTLI: Tuning = Tuning {
    level: 4,
    window_log: 18,
};

/// zstd level 3, zstd's own default: 2-3x faster than gzip 5, output 2-13% larger. (Level 6 comes
/// within 7% of brotli 5's size in about gzip 5's time, but holds 3.7 MiB.) Window 1 MiB instead
/// of level 3's 2 MiB: the encoder holds about 2 MiB (1.2 MiB with 256 KiB, whose output was up to
/// 4% larger on these samples; the match tables, 768 KiB, do not shrink with the window).
pub const ZSTD: Tuning = Tuning {
    level: 3,
    window_log: 20,
};

/// The default order of preference: zstd, gzip, brotli. zstd saves the most bytes per CPU second;
/// gzip and brotli at their on-the-fly levels compress alike, and gzip does it faster with a
/// quarter of the memory. Every browser that accepts brotli accepts gzip, so by default brotli goes
/// only to clients that take nothing else; list it before gzip (at quality 5) to trade CPU for a
/// smaller Safari download.
pub const ALGORITHMS: [Algorithm; 3] = [Algorithm::Zstd, Algorithm::Gzip, Algorithm::Brotli];

/// The default smallest response compressed, by its Content-Length: 1 KiB. A shorter body fits in
/// one TCP segment compressed or not, so compressing it saves no round trip but still costs the
/// encoder's setup (hundreds of KiB allocated and initialised) and 20-odd bytes of framing. nginx's
/// `gzip_min_length` defaults to 20 bytes, which mostly measures the framing; CDNs use 860 B-1 KiB.
pub const MIN_LENGTH: u64 = 1024;

/// The default content types. Text formats compress 3-10x; images, audio, video, archives and
/// woff/woff2 fonts are compressed already and are left out. Included with an argument:
/// - `application/wasm`: WebAssembly modules are large and compress 2-4x (Caddy and Cloudflare
///   compress them).
/// - `font/ttf`, `font/otf`: bare sfnt fonts are uncompressed tables (about 2x); woff2 is not.
/// - `application/*+json`, `application/*+xml`: every structured-syntax suffix type (RFC 6838
///   4.2.8) is text: `ld+json`, `manifest+json`, `vnd.api+json`, `problem+json`, `rss+xml`,
///   `atom+xml`, `xhtml+xml` and vendor types.
///
/// Left out: `text/event-stream`. A server-sent event stream lives for minutes or hours, and a
/// compressing encoder holds its state (hundreds of KiB) for all that time; list it to opt in.
pub const CONTENT_TYPES: &[&str] = &[
    "text/html",
    "text/css",
    "text/plain",
    "text/xml",
    "text/javascript",
    "text/csv",
    "text/markdown",
    "application/javascript",
    "application/x-javascript",
    "application/json",
    "application/xml",
    "application/*+json",
    "application/*+xml",
    "application/wasm",
    "image/svg+xml",
    "font/ttf",
    "font/otf",
];

/// The `compress` filter's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompressSettings {
    /// The codings offered, most preferred first, each at most once and at least one. Among the
    /// codings a request accepts with the same (highest) weight, the first listed here wins.
    /// Default [`ALGORITHMS`]: Chrome 123+ and Firefox 126+ get zstd, Safari gzip.
    pub algorithms: Vec<Algorithm>,
    pub gzip: Tuning,
    pub brotli: Tuning,
    pub zstd: Tuning,
    /// A response whose Content-Length is below this goes out as it is; one of unknown length
    /// (chunked, or HTTP/2 without content-length) is compressed.
    pub min_length: u64,
    /// The content types compressed; a response without a Content-Type is not.
    pub content_types: Vec<ContentTypePattern>,
}

impl Default for CompressSettings {
    fn default() -> Self {
        CompressSettings {
            algorithms: ALGORITHMS.to_vec(),
            gzip: GZIP,
            brotli: BROTLI,
            zstd: ZSTD,
            min_length: MIN_LENGTH,
            content_types: CONTENT_TYPES
                .iter()
                .filter_map(|pattern| ContentTypePattern::parse(pattern).ok())
                .collect(),
        }
    }
}

impl CompressSettings {
    /// The tuning of one algorithm.
    pub fn tuning(&self, algorithm: Algorithm) -> Tuning {
        match algorithm {
            Algorithm::Gzip => self.gzip,
            Algorithm::Brotli => self.brotli,
            Algorithm::Zstd => self.zstd,
        }
    }

    /// Whether a response with this Content-Type field value qualifies (parameters and case are
    /// ignored: `Text/HTML; charset=utf-8` is `text/html`).
    pub fn compresses_type(&self, content_type: &[u8]) -> bool {
        let essence = media_type_essence(content_type);
        !essence.is_empty() && self.content_types.iter().any(|pattern| pattern.matches(essence))
    }
}

/// A content type to compress: `type/subtype`, `type/*`, `type/*+suffix` or `*/*`. Stored
/// lower-case; matched ASCII case-insensitively against a media type without its parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ContentTypePattern {
    /// `text/html`.
    Exact(String),
    /// `text/*`, stored as `text/`.
    AnySubtype(String),
    /// `application/*+json`, stored as (`application/`, `+json`).
    Suffix(String, String),
    /// `*/*`.
    Any,
}

/// A content type pattern that is not `type/subtype`, `type/*`, `type/*+suffix` or `*/*`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{0}` is not a content type pattern (expected type/subtype such as text/html, or a wildcard: \
     text/*, application/*+json, */*)"
)]
pub struct ContentTypePatternError(pub String);

impl ContentTypePattern {
    /// Parses a pattern; parameters (`; charset=...`) are not allowed in one.
    pub fn parse(pattern: &str) -> Result<ContentTypePattern, ContentTypePatternError> {
        let error = || ContentTypePatternError(pattern.to_string());
        let lower = pattern.trim().to_ascii_lowercase();
        let (kind, subtype) = lower.split_once('/').ok_or_else(error)?;
        if kind == "*" {
            return if subtype == "*" {
                Ok(ContentTypePattern::Any)
            } else {
                Err(error())
            };
        }
        if !is_token(kind) {
            return Err(error());
        }
        if subtype == "*" {
            return Ok(ContentTypePattern::AnySubtype(format!("{kind}/")));
        }
        if let Some(suffix) = subtype.strip_prefix("*+") {
            return if is_token(suffix) {
                Ok(ContentTypePattern::Suffix(format!("{kind}/"), format!("+{suffix}")))
            } else {
                Err(error())
            };
        }
        if is_token(subtype) {
            Ok(ContentTypePattern::Exact(lower))
        } else {
            Err(error())
        }
    }

    /// Whether a media type essence (`type/subtype`, without parameters or surrounding whitespace)
    /// matches.
    pub fn matches(&self, essence: &[u8]) -> bool {
        match self {
            ContentTypePattern::Exact(exact) => essence.eq_ignore_ascii_case(exact.as_bytes()),
            ContentTypePattern::AnySubtype(kind) => {
                starts_with_ignore_case(essence, kind.as_bytes()) && essence.len() > kind.len()
            }
            ContentTypePattern::Suffix(kind, suffix) => {
                essence.len() > kind.len() + suffix.len()
                    && starts_with_ignore_case(essence, kind.as_bytes())
                    && essence[essence.len() - suffix.len()..].eq_ignore_ascii_case(suffix.as_bytes())
            }
            ContentTypePattern::Any => essence.contains(&b'/'),
        }
    }
}

impl std::fmt::Display for ContentTypePattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ContentTypePattern::Exact(exact) => f.write_str(exact),
            ContentTypePattern::AnySubtype(kind) => write!(f, "{kind}*"),
            ContentTypePattern::Suffix(kind, suffix) => write!(f, "{kind}*{suffix}"),
            ContentTypePattern::Any => f.write_str("*/*"),
        }
    }
}

/// The media type of a Content-Type field value without its parameters and surrounding whitespace:
/// `text/html` from ` text/html ; charset=utf-8`.
pub fn media_type_essence(content_type: &[u8]) -> &[u8] {
    let end = content_type
        .iter()
        .position(|&b| b == b';')
        .unwrap_or(content_type.len());
    content_type[..end].trim_ascii()
}

fn starts_with_ignore_case(haystack: &[u8], prefix: &[u8]) -> bool {
    haystack.len() >= prefix.len() && haystack[..prefix.len()].eq_ignore_ascii_case(prefix)
}

/// A non-empty RFC 9110 token without `*`, which patterns keep for wildcards.
fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'+-.^_`|~".contains(&b))
}

#[cfg(test)]
mod tests;
