//! HTTP/1.0 and HTTP/1.1 requests: the request line (RFC 9112 section 3), and optionally the
//! whole head for the Host.
//!
//! The request line is checked here, byte by byte as it arrives: a method of 1 to 16 uppercase
//! letters, `-` or `_`, one space, a target of visible bytes (or bytes of 0x80 and above), one
//! space, `HTTP/1.0` or `HTTP/1.1`, CRLF (a bare LF is not accepted). At most 8 KiB before the
//! CRLF. `PRI * HTTP/2.0` fails on its version: it starts the HTTP/2 preface.
//!
//! With the head wanted ([`peek_head`]), the head is what ends at the first empty line (CRLF
//! CRLF: a head with bare-LF line ends is only decided at the 16 KiB limit), read by `httparse`. The choice made for heads that cannot be read: the request line alone already says
//! HTTP, so a head over 16 KiB, or one `httparse` rejects, is still a match, without a host (the
//! data plane sees an HTTP connection without a host and answers it as HTTP, e.g. with a 400 or
//! a 431, instead of treating it as an unknown protocol).

use std::mem::MaybeUninit;

use super::Verdict;

/// The longest method token.
pub const MAX_METHOD: usize = 16;
/// The longest request line, CRLF not counted.
pub const MAX_REQUEST_LINE: usize = 8 * 1024;
/// The longest head read for its Host, final empty line included.
pub const MAX_HEAD: usize = 16 * 1024;
/// The most header fields read; a head with more has no host.
const MAX_FIELDS: usize = 128;
/// The versions accepted, with the line end.
const VERSIONS: [&[u8]; 2] = [b"HTTP/1.1\r\n", b"HTTP/1.0\r\n"];

/// A recognised request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Request {
    /// With the head: the absolute-form target's authority, else the single Host field's value,
    /// lowercased (a port kept); `None` without the head, without a usable one, or with several
    /// Host fields.
    pub host: Option<String>,
    /// Bytes of the request line (CRLF included), or of the whole head when it was read.
    pub message_len: usize,
}

/// Says whether `buf` starts with an HTTP/1.x request line: a match once the line is complete.
pub fn peek(buf: &[u8]) -> Verdict<Request> {
    match request_line(buf) {
        Verdict::Match(len) => Verdict::Match(Request {
            host: None,
            message_len: len,
        }),
        Verdict::NeedMore => Verdict::NeedMore,
        Verdict::NotThis => Verdict::NotThis,
    }
}

/// Like [`peek`], but a match only once the whole head is there (or is over [`MAX_HEAD`]), with
/// the host read from it.
pub fn peek_head(buf: &[u8]) -> Verdict<Request> {
    let line_len = match request_line(buf) {
        Verdict::Match(len) => len,
        Verdict::NeedMore => return Verdict::NeedMore,
        Verdict::NotThis => return Verdict::NotThis,
    };
    // The head ends at the first CRLF CRLF; the request line's CRLF can be its first half. Only
    // the first MAX_HEAD bytes are searched, so the answer does not depend on what follows.
    let search_from = line_len.saturating_sub(2);
    let window = buf.get(..MAX_HEAD).unwrap_or(buf);
    let end = window
        .get(search_from..)
        .and_then(|w| w.windows(4).position(|w| w == b"\r\n\r\n"))
        .map(|p| search_from + p + 4);
    match end {
        Some(head_len) => Verdict::Match(Request {
            host: buf.get(..head_len).and_then(host),
            message_len: head_len,
        }),
        None if buf.len() >= MAX_HEAD => Verdict::Match(Request {
            host: None,
            message_len: line_len,
        }),
        None => Verdict::NeedMore,
    }
}

/// The request line's length (CRLF included) once complete and valid.
fn request_line(buf: &[u8]) -> Verdict<usize> {
    let method_len = match buf.iter().take(MAX_METHOD + 1).position(|&b| !is_method(b)) {
        None if buf.len() > MAX_METHOD => return Verdict::NotThis,
        None => return Verdict::NeedMore,
        Some(n) if n > 0 && buf.get(n) == Some(&b' ') => n,
        Some(_) => return Verdict::NotThis,
    };
    let target_start = method_len + 1;
    let rest = buf.get(target_start..).unwrap_or_default();
    // What the line needs besides the target: the method, two spaces and `HTTP/1.x`.
    let fixed = method_len + 2 + 8;
    let target_len = match rest.iter().position(|&b| !is_target(b)) {
        None if fixed + rest.len() > MAX_REQUEST_LINE => return Verdict::NotThis,
        None => return Verdict::NeedMore,
        Some(n) if n > 0 && rest.get(n) == Some(&b' ') => n,
        Some(_) => return Verdict::NotThis,
    };
    if fixed + target_len > MAX_REQUEST_LINE {
        return Verdict::NotThis;
    }
    let version_start = target_start + target_len + 1;
    let version = buf.get(version_start..).unwrap_or_default();
    let version = version.get(..10).unwrap_or(version);
    if !VERSIONS.iter().any(|v| v.starts_with(version)) {
        Verdict::NotThis
    } else if version.len() == 10 {
        Verdict::Match(version_start + 10)
    } else {
        Verdict::NeedMore
    }
}

fn is_method(b: u8) -> bool {
    b.is_ascii_uppercase() || b == b'-' || b == b'_'
}

fn is_target(b: u8) -> bool {
    matches!(b, 0x21..=0x7e | 0x80..=0xff)
}

/// The host of a complete head, as `httparse` reads it.
fn host(head: &[u8]) -> Option<String> {
    let mut storage = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_FIELDS];
    let mut request = httparse::Request::new(&mut []);
    match request.parse_with_uninit_headers(head, &mut storage) {
        Ok(httparse::Status::Complete(_)) => {}
        _ => return None,
    }
    // An absolute-form target's authority overrides the Host field (RFC 9112 section 3.2.2).
    if let Some(authority) = request.path.and_then(absolute_authority) {
        return host_value(authority.as_bytes());
    }
    let mut hosts = request.headers.iter().filter(|h| h.name.eq_ignore_ascii_case("host"));
    let first = hosts.next()?;
    if hosts.next().is_some() {
        return None; // Ambiguous (RFC 9112 section 3.2 requires a 400).
    }
    host_value(first.value)
}

/// The authority of an absolute-form target (`scheme://authority/...`), userinfo dropped.
fn absolute_authority(target: &str) -> Option<&str> {
    let (scheme, rest) = target.split_once("://")?;
    let mut scheme_chars = scheme.bytes();
    let scheme_ok = scheme_chars.next().is_some_and(|b| b.is_ascii_alphabetic())
        && scheme_chars.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'));
    if !scheme_ok {
        return None;
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    Some(authority.rsplit_once('@').map_or(authority, |(_, host)| host))
}

/// A host (and port) fit for routing, lowercased: non-empty visible ASCII without the characters
/// that would make it something else (a path, userinfo, a list).
fn host_value(value: &[u8]) -> Option<String> {
    let value = value.trim_ascii();
    let valid = !value.is_empty()
        && value
            .iter()
            .all(|&b| b.is_ascii_graphic() && !matches!(b, b'/' | b'\\' | b'@' | b'?' | b'#' | b','));
    valid.then(|| value.iter().map(|&b| char::from(b.to_ascii_lowercase())).collect())
}

#[cfg(test)]
mod tests;
