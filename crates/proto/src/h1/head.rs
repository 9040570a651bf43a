//! Request and response heads.

use std::mem::MaybeUninit;

use super::{H1Error, Limits};
use crate::message::{BodyLength, Protocol, RequestHead, ResponseHead};

/// The most fields a head may be parsed with, whatever [`Limits::max_fields`] says.
const FIELD_CAPACITY: usize = 256;

/// HTTP version of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    Http10,
    Http11,
}

/// How a message's body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body.
    None,
    /// Exactly this many bytes.
    Length(u64),
    /// Chunked transfer coding (walk it with [`ChunkedDecoder`](super::ChunkedDecoder)).
    Chunked,
    /// Responses only: the body runs until the connection closes.
    UntilClose,
}

/// One header field, as byte ranges into the parsed buffer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Field {
    pub name: (u32, u32),
    pub value: (u32, u32),
}

/// Appends `bytes` to `buf`; returns their range there (the ranges a head keeps).
pub fn append_range(buf: &mut Vec<u8>, bytes: &[u8]) -> (u32, u32) {
    let start = buf.len() as u32;
    buf.extend_from_slice(bytes);
    (start, buf.len() as u32)
}

impl Field {
    /// A field laid out at the end of `buf`: its name, then its value.
    pub fn append(buf: &mut Vec<u8>, name: &[u8], value: &[u8]) -> Field {
        Field {
            name: append_range(buf, name),
            value: append_range(buf, value),
        }
    }

    pub fn name<'a>(&self, buf: &'a [u8]) -> &'a [u8] {
        &buf[self.name.0 as usize..self.name.1 as usize]
    }

    pub fn value<'a>(&self, buf: &'a [u8]) -> &'a [u8] {
        &buf[self.value.0 as usize..self.value.1 as usize]
    }
}

/// What the HTTP/1 codec learnt of a message beyond its owned head ([`RequestHead`],
/// [`ResponseHead`]): how many bytes the head took (its final CRLF included; the body, if any,
/// starts there), its version, its body's framing, whether the connection may carry another
/// message, and a response's reason phrase (a range of the head's bytes; empty when it has none):
/// HTTP/1 details the request path does not see.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parsed {
    pub len: usize,
    pub version: Version,
    pub framing: Framing,
    pub keep_alive: bool,
    pub reason: (u32, u32),
}

/// Where `part` (a slice of `buf`, as httparse hands them out) lies in `buf`; an empty range for
/// a slice that is not in it (httparse gives a reason phrase of obs-text as a `""` of its own).
fn range(buf: &[u8], part: &[u8]) -> (u32, u32) {
    match (part.as_ptr() as usize).checked_sub(buf.as_ptr() as usize) {
        Some(start) if start + part.len() <= buf.len() => (start as u32, (start + part.len()) as u32),
        _ => (0, 0),
    }
}

/// Rejects bare LF and obs-fold anywhere in a complete head.
fn check_line_endings(head: &[u8]) -> Result<(), H1Error> {
    for i in memchr::memchr_iter(b'\n', head) {
        if i == 0 || head[i - 1] != b'\r' {
            return Err(H1Error::BareLf);
        }
        if matches!(head.get(i + 1), Some(b' ' | b'\t')) {
            return Err(H1Error::ObsFold);
        }
    }
    Ok(())
}

/// Looks ahead in an incomplete head for errors that must not wait for more bytes.
fn check_partial(buf: &[u8], limits: &Limits, is_request: bool) -> Result<(), H1Error> {
    if is_request {
        let line_end = buf.iter().position(|&b| b == b'\n');
        if line_end.map_or(buf.len(), |e| e) > limits.max_request_line {
            return Err(H1Error::RequestLineTooLong);
        }
    }
    if buf.len() > limits.max_head {
        return Err(H1Error::HeadTooLarge);
    }
    Ok(())
}

fn map_httparse(e: httparse::Error) -> H1Error {
    match e {
        httparse::Error::HeaderName => H1Error::BadFieldName,
        httparse::Error::HeaderValue => H1Error::BadFieldValue,
        httparse::Error::NewLine => H1Error::BadFieldValue,
        httparse::Error::Status => H1Error::BadStatus,
        httparse::Error::Token => H1Error::BadMethod,
        httparse::Error::TooManyHeaders => H1Error::TooManyFields,
        httparse::Error::Version => H1Error::BadVersion,
    }
}

/// What the framing-related fields of a head said.
#[derive(Default)]
struct FieldFacts {
    content_length: Option<u64>,
    chunked: bool,
    transfer_encoding: bool,
    close: bool,
    keep_alive: bool,
    upgrade_token: bool,
    upgrade_field: bool,
    expect_continue: bool,
    host: Option<(u32, u32)>,
    hosts: usize,
}

/// `v` without leading and trailing spaces and tabs (optional whitespace around a field value).
pub(crate) fn trim(v: &[u8]) -> &[u8] {
    let start = v.iter().position(|b| !matches!(b, b' ' | b'\t')).unwrap_or(v.len());
    let end = v
        .iter()
        .rposition(|b| !matches!(b, b' ' | b'\t'))
        .map_or(start, |e| e + 1);
    &v[start..end]
}

fn parse_length(v: &[u8]) -> Result<u64, H1Error> {
    if v.is_empty() || v.len() > 18 || !v.iter().all(u8::is_ascii_digit) {
        return Err(H1Error::BadContentLength);
    }
    Ok(v.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0')))
}

/// The length a `Content-Length` value says (a list of equal lengths counts as one), given the
/// length an earlier such field said, if any: a different one is an error.
#[inline]
pub(crate) fn content_length(value: &[u8], seen: Option<u64>) -> Result<u64, H1Error> {
    let mut length = seen;
    for part in value.split(|&b| b == b',') {
        let n = parse_length(trim(part))?;
        if length.is_some_and(|m| m != n) {
            return Err(H1Error::BadContentLength);
        }
        length = Some(n);
    }
    length.ok_or(H1Error::BadContentLength)
}

/// Whether the field name `name` (a token: httparse refused anything else) is `lower`, a name of
/// lowercase letters and `-`, in any case. Compared a word at a time (the last word overlapping
/// the one before), each byte of `name` ORed with 0x20: that maps an uppercase letter onto its
/// lowercase one and leaves lowercase letters and `-` as they are; the only other byte it maps
/// onto one of those is CR (onto `-`), which is no token character.
pub(crate) fn is_name(name: &[u8], lower: &[u8]) -> bool {
    debug_assert!(lower.iter().all(|&b| b.is_ascii_lowercase() || b == b'-'));
    let n = lower.len();
    if name.len() != n {
        return false;
    }
    let word8 = |b: &[u8], at: usize| {
        let mut w = [0; 8];
        w.copy_from_slice(&b[at..at + 8]);
        u64::from_le_bytes(w)
    };
    let word4 = |b: &[u8], at: usize| {
        let mut w = [0; 4];
        w.copy_from_slice(&b[at..at + 4]);
        u32::from_le_bytes(w)
    };
    match n {
        0..4 => name.eq_ignore_ascii_case(lower),
        4..8 => [0, n - 4]
            .iter()
            .all(|&at| word4(name, at) | 0x2020_2020 == word4(lower, at)),
        _ => (0..n.div_ceil(8))
            .map(|i| (i * 8).min(n - 8))
            .all(|at| word8(name, at) | 0x2020_2020_2020_2020 == word8(lower, at)),
    }
}

fn collect_facts(buf: &[u8], headers: &[httparse::Header<'_>], fields: &mut Vec<Field>) -> Result<FieldFacts, H1Error> {
    let mut f = FieldFacts::default();
    fields.clear();
    for h in headers {
        // httparse (default configuration) already refuses NUL, CR and LF in a value.
        let value = h.value;
        let name = h.name.as_bytes();
        fields.push(Field {
            name: range(buf, name),
            value: range(buf, value),
        });
        // The names that matter here all differ in length: one comparison for a field at most.
        match name.len() {
            14 if is_name(name, b"content-length") => {
                f.content_length = Some(content_length(value, f.content_length)?);
            }
            17 if is_name(name, b"transfer-encoding") => {
                f.transfer_encoding = true;
                for coding in value.split(|&b| b == b',').map(trim) {
                    if coding.is_empty() {
                        continue;
                    }
                    // `chunked` must be the final coding, and only once.
                    if f.chunked {
                        return Err(H1Error::BadTransferEncoding);
                    }
                    if coding.eq_ignore_ascii_case(b"chunked") {
                        f.chunked = true;
                    }
                }
            }
            10 if is_name(name, b"connection") => {
                for token in value.split(|&b| b == b',').map(trim) {
                    if token.eq_ignore_ascii_case(b"close") {
                        f.close = true;
                    } else if token.eq_ignore_ascii_case(b"keep-alive") {
                        f.keep_alive = true;
                    } else if token.eq_ignore_ascii_case(b"upgrade") {
                        f.upgrade_token = true;
                    }
                }
            }
            7 if is_name(name, b"upgrade") => f.upgrade_field = true,
            6 if is_name(name, b"expect") => {
                f.expect_continue |= trim(value).eq_ignore_ascii_case(b"100-continue");
            }
            4 if is_name(name, b"host") => {
                f.hosts += 1;
                f.host = Some(range(buf, value));
            }
            _ => {}
        }
    }
    if f.transfer_encoding && !f.chunked {
        return Err(H1Error::BadTransferEncoding);
    }
    if f.transfer_encoding && f.content_length.is_some() {
        return Err(H1Error::LengthAndChunked);
    }
    Ok(f)
}

fn version(v: Option<u8>) -> Result<Version, H1Error> {
    match v {
        Some(0) => Ok(Version::Http10),
        Some(1) => Ok(Version::Http11),
        _ => Err(H1Error::BadVersion),
    }
}

fn keep_alive(version: Version, f: &FieldFacts) -> bool {
    match version {
        Version::Http11 => !f.close,
        Version::Http10 => f.keep_alive && !f.close,
    }
}

/// Whether `target` is valid for `method`: origin-form for everything, absolute-form
/// (`http://` or `https://`), `*` for OPTIONS, authority-form (`host:port`) for CONNECT only.
#[inline]
pub(crate) fn valid_target(method: &[u8], target: &[u8]) -> bool {
    if target.is_empty() || target.iter().any(|&b| b <= b' ' || b == 0x7f || b == b'#') {
        return false;
    }
    if method == b"CONNECT" {
        return !target.contains(&b'/')
            && target
                .iter()
                .rposition(|&b| b == b':')
                .is_some_and(|c| c > 0 && c + 1 < target.len());
    }
    if target == b"*" {
        return method == b"OPTIONS";
    }
    if target[0] == b'/' {
        return true;
    }
    let lower = |prefix: &[u8]| target.len() > prefix.len() && target[..prefix.len()].eq_ignore_ascii_case(prefix);
    let scheme = if lower(b"http://") {
        7
    } else if lower(b"https://") {
        8
    } else {
        return false;
    };
    // The authority is the request's host: it must be one (no user info, not empty).
    let rest = &target[scheme..];
    let authority = &rest[..rest.iter().position(|&b| b == b'/' || b == b'?').unwrap_or(rest.len())];
    !authority.is_empty() && valid_host(authority)
}

/// The bytes a host (a `Host` value or an absolute target's authority) must not hold: no
/// whitespace, path, user info, query or fragment.
const NOT_IN_HOST: [bool; 256] = {
    let mut table = [false; 256];
    let refused = b" \t/\\@?#";
    let mut i = 0;
    while i < refused.len() {
        table[refused[i] as usize] = true;
        i += 1;
    }
    table
};

#[inline]
pub(crate) fn valid_host(v: &[u8]) -> bool {
    !v.iter().any(|&b| NOT_IN_HOST[b as usize])
}

/// Parses a request head at the start of `buf` into `head`, in place: its ranges point into
/// `buf`, which the caller then gives the head ([`RequestHead::attach`]). `Ok(None)`: the head is
/// not complete yet (and no limit is exceeded so far). The head's fields are cleared and filled.
pub fn parse_request(buf: &[u8], limits: &Limits, head: &mut RequestHead) -> Result<Option<Parsed>, H1Error> {
    // Uninitialised storage: httparse writes only the fields it finds, so a parse costs nothing
    // per unused slot.
    let mut storage = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; FIELD_CAPACITY];
    let max_fields = limits.max_fields.min(FIELD_CAPACITY);
    let mut req = httparse::Request::new(&mut []);
    let len = match req.parse_with_uninit_headers(buf, &mut storage[..max_fields]) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            check_partial(buf, limits, true)?;
            return Ok(None);
        }
        Err(e) => {
            // A too-long request line is reported as such even when it is also malformed.
            check_partial(buf, limits, true)?;
            let head = &buf[..buf.windows(2).position(|w| w == b"\r\n").map_or(buf.len(), |p| p + 2)];
            check_line_endings(head)?;
            return Err(match e {
                httparse::Error::HeaderName if obs_fold_follows(buf) => H1Error::ObsFold,
                other => map_httparse(other),
            });
        }
    };
    let method = req.method.ok_or(H1Error::BadStartLine)?.as_bytes();
    let target = req.path.ok_or(H1Error::BadStartLine)?.as_bytes();
    if request_line_len(buf, method, target) > limits.max_request_line {
        return Err(H1Error::RequestLineTooLong);
    }
    if len > limits.max_head {
        return Err(H1Error::HeadTooLarge);
    }
    check_line_endings(&buf[..len])?;
    if !valid_target(method, target) {
        return Err(H1Error::BadTarget);
    }
    let version = version(req.version)?;
    let facts = collect_facts(buf, req.headers, &mut head.fields)?;
    match (version, facts.hosts) {
        (_, n) if n > 1 => return Err(H1Error::DuplicateHost),
        (Version::Http11, 0) => return Err(H1Error::MissingHost),
        _ => {}
    }
    if let Some((s, e)) = facts.host {
        if !valid_host(&buf[s as usize..e as usize]) {
            return Err(H1Error::BadFieldValue);
        }
    }
    if facts.chunked && version == Version::Http10 {
        return Err(H1Error::BadTransferEncoding);
    }
    let framing = match (facts.chunked, facts.content_length) {
        (true, _) => Framing::Chunked,
        (false, Some(0) | None) => Framing::None,
        (false, Some(n)) => Framing::Length(n),
    };
    head.method = range(buf, method);
    head.target = range(buf, target);
    head.host = facts.host;
    head.body = BodyLength::of_framing(framing);
    head.protocol = Protocol::from(version);
    head.keep_alive = keep_alive(version, &facts);
    head.expect_continue = facts.expect_continue && version == Version::Http11;
    head.upgrade = facts.upgrade_token && facts.upgrade_field;
    head.lines = true;
    Ok(Some(Parsed {
        len,
        version,
        framing,
        keep_alive: head.keep_alive,
        reason: (0, 0),
    }))
}

/// Parses a request head at the start of `buf` into an owned head holding a copy of the head's
/// bytes (for tools and tests; the proxy parses in place, without the copy).
pub fn parse_request_owned(buf: &[u8], limits: &Limits) -> Result<Option<(Parsed, RequestHead)>, H1Error> {
    let mut head = RequestHead::default();
    let Some(parsed) = parse_request(buf, limits, &mut head)? else {
        return Ok(None);
    };
    head.attach(buf[..parsed.len].to_vec(), 0, parsed.len);
    Ok(Some((parsed, head)))
}

/// The length of the request line of a complete head in `buf` (up to its LF): from the start of
/// `buf` (the empty lines httparse skips before it, if any, are counted too) to its end, which
/// lies behind the target, one space and `HTTP/1.x`, usually at its CR and LF.
pub(crate) fn request_line_len(buf: &[u8], method: &[u8], target: &[u8]) -> usize {
    let behind_version = range(buf, target).1 as usize + " HTTP/1.1".len();
    match buf.get(behind_version..behind_version + 2) {
        Some(b"\r\n") => behind_version + 1,
        _ => {
            let from = range(buf, method).0 as usize;
            memchr::memchr(b'\n', &buf[from..]).map_or(buf.len(), |at| from + at)
        }
    }
}

/// Whether the first field line that httparse rejected starts with whitespace (obs-fold).
fn obs_fold_follows(buf: &[u8]) -> bool {
    buf.windows(3)
        .any(|w| w[0] == b'\n' && matches!(w[1], b' ' | b'\t') && w[2] != b'\r')
}

/// Parses a response head at the start of `buf` into `head`, in place (its ranges point into
/// `buf`, which the caller gives the head, or a copy of the head's bytes: see
/// [`ResponseHead::attach`]), for a request whose method was HEAD (`head_request`) or not. 1xx,
/// 204 and 304 responses and responses to HEAD have no body.
pub fn parse_response(
    buf: &[u8],
    limits: &Limits,
    head_request: bool,
    head: &mut ResponseHead,
) -> Result<Option<Parsed>, H1Error> {
    let mut storage = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; FIELD_CAPACITY];
    let max_fields = limits.max_fields.min(FIELD_CAPACITY);
    let mut res = httparse::Response::new(&mut []);
    let len = match httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut res,
        buf,
        &mut storage[..max_fields],
    ) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            check_partial(buf, limits, false)?;
            return Ok(None);
        }
        Err(e) => return Err(map_httparse(e)),
    };
    if len > limits.max_head {
        return Err(H1Error::HeadTooLarge);
    }
    check_line_endings(&buf[..len])?;
    let version = version(res.version)?;
    let status = res.code.ok_or(H1Error::BadStatus)?;
    if !(100..=599).contains(&status) {
        return Err(H1Error::BadStatus);
    }
    let facts = collect_facts(buf, res.headers, &mut head.fields)?;
    let bodiless = head_request || (100..200).contains(&status) || status == 204 || status == 304;
    let framing = match (bodiless, facts.chunked, facts.content_length) {
        (true, _, _) => Framing::None,
        (false, true, _) => Framing::Chunked,
        (false, false, Some(0)) => Framing::None,
        (false, false, Some(n)) => Framing::Length(n),
        (false, false, None) => Framing::UntilClose,
    };
    let keep_alive = keep_alive(version, &facts) && framing != Framing::UntilClose;
    let reason = res.reason.map_or((0, 0), |r| range(buf, r.as_bytes()));
    head.status = status;
    head.length = BodyLength::of_framing(framing);
    head.upgrade = false;
    Ok(Some(Parsed {
        len,
        version,
        framing,
        keep_alive,
        reason,
    }))
}

/// Parses a response head at the start of `buf` into an owned head holding a copy of the head's
/// bytes (for tools and tests).
pub fn parse_response_owned(
    buf: &[u8],
    limits: &Limits,
    head_request: bool,
) -> Result<Option<(Parsed, ResponseHead)>, H1Error> {
    let mut head = ResponseHead::default();
    let Some(parsed) = parse_response(buf, limits, head_request, &mut head)? else {
        return Ok(None);
    };
    head.attach(buf[..parsed.len].to_vec(), 0, parsed.len);
    Ok(Some((parsed, head)))
}
