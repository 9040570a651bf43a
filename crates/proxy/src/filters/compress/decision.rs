//! Whether a response is compressed, and the header edits that go with it. Pure functions of what
//! the request and the response head say, in two steps:
//!
//! 1. At the request head, [`offer`]: the coding this request would get (from its method, HTTP
//!    version and `Accept-Encoding`), or why none. Only this result needs keeping until the
//!    response arrives.
//! 2. At the response head, [`decide`] with the [`ResponseFacts`] gathered from its fields.
//!
//! A response is left alone when compressing it could break it: a range (206, `Content-Range`),
//! a body already encoded, `Cache-Control: no-transform`, a digest of its bytes; and when it has
//! no body (1xx, 204, 304, HEAD, CONNECT). A compressed response loses `Content-Length` (the new
//! length is known only at the end) and `Accept-Ranges` (ranges of the compressed bytes are not
//! served), and a strong `ETag` becomes weak (`W/"…"`): the bytes differ, the meaning does not, as
//! nginx's gzip filter does. `Vary: Accept-Encoding` goes on every response that some request would
//! get compressed, compressed or not, so that caches keep the variants apart.

use http::Version;
use rampart_model::filter::compress::{Algorithm, CompressSettings};

use super::list;
use super::negotiate::AcceptEncoding;

/// Why a response goes out as it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Skip {
    /// HEAD or CONNECT: no body follows the response head.
    Method,
    /// HTTP/1.0 (or 0.9): like nginx's `gzip_http_version 1.1`, only HTTP/1.1 and later clients.
    HttpVersion,
    /// `Accept-Encoding` accepts none of the configured codings (or is absent).
    NotAccepted,
    /// 1xx, 204 or 304: no body.
    NoBody,
    /// 206 or `Content-Range`: a range of the uncompressed bytes.
    Range,
    /// A `Content-Encoding` other than `identity`.
    AlreadyEncoded,
    /// `Cache-Control: no-transform`.
    NoTransform,
    /// A digest of the body (`Content-Digest`, `Repr-Digest`, `Digest`, `Content-MD5`) that
    /// compressing would falsify.
    Digest,
    /// No `Content-Type`, more than one, or one not listed.
    ContentType,
    /// `Content-Length` below the minimum.
    TooSmall,
}

/// The coding a request would get, decided at its head: [`Skip::Method`], [`Skip::HttpVersion`] or
/// [`Skip::NotAccepted`] when none.
pub fn offer(
    settings: &CompressSettings,
    method: &[u8],
    version: Version,
    accept_encoding: &AcceptEncoding,
) -> Result<Algorithm, Skip> {
    if method == b"HEAD" || method == b"CONNECT" {
        return Err(Skip::Method);
    }
    if version == Version::HTTP_09 || version == Version::HTTP_10 {
        return Err(Skip::HttpVersion);
    }
    accept_encoding.choose(&settings.algorithms).ok_or(Skip::NotAccepted)
}

/// What to do with a response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Compress(Plan),
    /// Send it as it is, with `vary` applied.
    Skip {
        reason: Skip,
        vary: VaryEdit,
    },
}

/// How to compress a response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    pub algorithm: Algorithm,
    /// The body's length when the response said it (for the encoder's window size).
    pub size_hint: Option<u64>,
    pub edits: HeaderEdits,
}

/// The header edits of a compressed response. Besides these, [`HeaderEdits::REMOVE`] always.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeaderEdits {
    /// Set `Content-Encoding` to this (replacing an `identity` one).
    pub content_encoding: &'static str,
    pub vary: VaryEdit,
    pub etag: EtagEdit,
}

impl HeaderEdits {
    /// Fields every compressed response loses.
    pub const REMOVE: [&'static str; 2] = ["content-length", "accept-ranges"];
}

/// What to do with `Vary`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VaryEdit {
    /// It already names `accept-encoding`, or is `*`, or the response never varies.
    Keep,
    /// Add `accept-encoding`: a field of its own, or appended to the last Vary
    /// ([`vary_with_accept_encoding`]), which RFC 9110 5.3 makes the same.
    AddAcceptEncoding,
}

/// What to do with `ETag` on a compressed response.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EtagEdit {
    /// None, or a weak one already.
    #[default]
    Keep,
    /// Prefix the strong `"…"` with `W/` ([`weakened_etag`]).
    Weaken,
    /// Drop a malformed one, or several (nginx drops what it cannot weaken).
    Remove,
}

/// What the decision needs from a response head, gathered field by field with [`observe`].
///
/// [`observe`]: ResponseFacts::observe
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ResponseFacts<'a> {
    status: u16,
    content_type: Option<&'a [u8]>,
    content_types: u8,
    content_length: Option<u64>,
    /// A `Content-Length` that did not parse or disagreed with another: treated as unknown.
    content_length_unclear: bool,
    encoded: bool,
    content_range: bool,
    no_transform: bool,
    digest: bool,
    etag: EtagEdit,
    etags: u8,
    vary: VaryState,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum VaryState {
    /// No Vary, or none naming accept-encoding yet.
    #[default]
    Missing,
    Named,
    Star,
}

impl<'a> ResponseFacts<'a> {
    pub fn new(status: u16) -> Self {
        ResponseFacts {
            status,
            ..ResponseFacts::default()
        }
    }

    /// Takes in one header field of the response (any other field is ignored).
    pub fn observe(&mut self, name: &[u8], value: &'a [u8]) {
        let is = |expected: &str| name.eq_ignore_ascii_case(expected.as_bytes());
        if is("content-type") {
            self.content_type = Some(value);
            self.content_types = self.content_types.saturating_add(1);
        } else if is("content-length") {
            self.observe_content_length(value);
        } else if is("content-encoding") {
            self.encoded |= list::elements(value).any(|coding| !coding.eq_ignore_ascii_case(b"identity"));
        } else if is("content-range") {
            self.content_range = true;
        } else if is("cache-control") {
            self.no_transform |= list::elements(value).any(|directive| {
                let (name, _) = list::name_and_value(directive).unwrap_or((directive, b""));
                name.eq_ignore_ascii_case(b"no-transform")
            });
        } else if is("content-digest") || is("repr-digest") || is("digest") || is("content-md5") {
            self.digest = true;
        } else if is("etag") {
            self.etags = self.etags.saturating_add(1);
            let etag = value.trim_ascii();
            self.etag = if self.etags > 1 {
                EtagEdit::Remove
            } else if etag.starts_with(b"W/") {
                EtagEdit::Keep
            } else if etag.len() >= 2 && etag.starts_with(b"\"") && etag.ends_with(b"\"") {
                EtagEdit::Weaken
            } else {
                EtagEdit::Remove
            };
        } else if is("vary") {
            for field in list::elements(value) {
                if field == b"*" {
                    self.vary = VaryState::Star;
                } else if field.eq_ignore_ascii_case(b"accept-encoding") && self.vary != VaryState::Star {
                    self.vary = VaryState::Named;
                }
            }
        }
    }

    fn observe_content_length(&mut self, value: &[u8]) {
        // A list of equal values is one length (RFC 9110 8.6); anything else is unclear.
        for element in list::pieces(value, b',') {
            match (parse_length(element), self.content_length) {
                (Some(length), None) if !self.content_length_unclear => self.content_length = Some(length),
                (Some(length), Some(earlier)) if length == earlier => {}
                _ => {
                    self.content_length = None;
                    self.content_length_unclear = true;
                }
            }
        }
    }

    /// The body's length, when the response says it clearly.
    pub fn content_length(&self) -> Option<u64> {
        self.content_length
    }

    /// Why this response can't be compressed whatever the request, if so.
    fn unfit(&self, settings: &CompressSettings) -> Option<Skip> {
        let status = self.status;
        if status < 200 || status == 204 || status == 304 {
            Some(Skip::NoBody)
        } else if status == 206 || self.content_range {
            Some(Skip::Range)
        } else if self.encoded {
            Some(Skip::AlreadyEncoded)
        } else if self.no_transform {
            Some(Skip::NoTransform)
        } else if self.digest {
            Some(Skip::Digest)
        } else if self.content_types != 1 || !self.content_type.is_some_and(|t| settings.compresses_type(t)) {
            Some(Skip::ContentType)
        } else if self.content_length.is_some_and(|length| length < settings.min_length) {
            Some(Skip::TooSmall)
        } else {
            None
        }
    }
}

/// Whether and how to compress a response, given the request's [`offer`].
pub fn decide(settings: &CompressSettings, offer: Result<Algorithm, Skip>, response: &ResponseFacts) -> Decision {
    if let Some(reason) = response.unfit(settings) {
        return Decision::Skip {
            reason,
            vary: VaryEdit::Keep,
        };
    }
    let vary = match response.vary {
        VaryState::Missing => VaryEdit::AddAcceptEncoding,
        VaryState::Named | VaryState::Star => VaryEdit::Keep,
    };
    match offer {
        Err(reason) => Decision::Skip { reason, vary },
        Ok(algorithm) => Decision::Compress(Plan {
            algorithm,
            size_hint: response.content_length,
            edits: HeaderEdits {
                content_encoding: algorithm.token(),
                vary,
                etag: response.etag,
            },
        }),
    }
}

/// `W/` and the strong ETag `etag`.
pub fn weakened_etag(etag: &[u8]) -> Vec<u8> {
    let etag = etag.trim_ascii();
    let mut weak = Vec::with_capacity(etag.len() + 2);
    weak.extend_from_slice(b"W/");
    weak.extend_from_slice(etag);
    weak
}

/// A Vary value naming `accept-encoding` too: `accept-encoding` alone without an `existing` one,
/// else `existing, accept-encoding` (when [`VaryEdit::AddAcceptEncoding`] said it lacks it).
pub fn vary_with_accept_encoding(existing: Option<&[u8]>) -> Vec<u8> {
    let existing = existing.map(<[u8]>::trim_ascii).unwrap_or_default();
    let mut vary = Vec::with_capacity(existing.len() + 17);
    if !existing.is_empty() {
        vary.extend_from_slice(existing);
        vary.extend_from_slice(b", ");
    }
    vary.extend_from_slice(b"accept-encoding");
    vary
}

/// A Content-Length value: decimal digits that fit a u64.
fn parse_length(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |length, &digit| {
        if !digit.is_ascii_digit() {
            return None;
        }
        length.checked_mul(10)?.checked_add(u64::from(digit - b'0'))
    })
}

#[cfg(test)]
mod tests;
