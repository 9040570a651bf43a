//! HTTP/2 messages and the neutral message (RFC 9113 section 8): an HTTP/2 request laid out as
//! the neutral request head ([`lay_out_request`]: no HTTP/1 text), the neutral message's fields as
//! HTTP/2 fields ([`crosses_into_h2`], for heads and trailers), the cleartext preface. The HTTP/1.1
//! head an HTTP/2 request stands for (`request_head`) is kept as the reference the layout is
//! fuzzed against, built only with feature `fuzzing` (the fuzz crate, the tests).
//!
//! Sans-IO: HTTP/2 field lists come in as byte slices (the framing, HPACK and flow control are
//! the `h2` crate's). Nothing here allocates beyond the output buffers.

/// The HTTP/2 client connection preface (RFC 9113 section 3.4).
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// What the first bytes of a cleartext connection are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preface {
    /// The HTTP/2 preface: prior-knowledge HTTP/2.
    Http2,
    /// Anything else (HTTP/1.x).
    Other,
    /// A beginning of the preface; more bytes decide.
    NeedMore,
    /// The preface's request line (`PRI * HTTP/2.0`) with something else behind it: neither
    /// protocol, to be closed (RFC 9113 section 3.4).
    Invalid,
}

/// Says whether `bytes` (the start of a connection) begin with the HTTP/2 preface.
pub fn preface(bytes: &[u8]) -> Preface {
    let n = bytes.len().min(PREFACE.len());
    if bytes[..n] != PREFACE[..n] {
        if n > 16 && bytes[..16] == PREFACE[..16] {
            Preface::Invalid
        } else {
            Preface::Other
        }
    } else if n == PREFACE.len() {
        Preface::Http2
    } else {
        Preface::NeedMore
    }
}

/// Why an HTTP/2 message cannot be an HTTP/1.1 one: each is a malformed message (RFC 9113
/// section 8.1.1), answered as a stream error or a 400.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum H2MapError {
    #[error("missing or empty :path")]
    MissingPath,
    #[error(":path is not an origin-form or asterisk target")]
    BadPath,
    #[error("CONNECT is not proxied (only extended CONNECT for WebSockets)")]
    Connect,
    #[error("extended CONNECT for a protocol other than websocket")]
    UnsupportedProtocol,
    #[error("connection-specific header field")]
    ConnectionSpecific,
    #[error("header field name is not a lowercase token")]
    BadName,
    #[error("header field value holds CR, LF or NUL")]
    BadValue,
    #[error("host differs from :authority")]
    HostMismatch,
    #[error("malformed method or authority")]
    BadPseudo,
}

/// What the HTTP/1.1 request stands for beyond its head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    /// A plain request; its body (if any) follows in the framing the head declares.
    Plain,
    /// An extended CONNECT for a WebSocket, written as an HTTP/1.1 `Upgrade: websocket`.
    WebSocket,
}

/// Fields that mean something only for one HTTP/1 connection, never sent on HTTP/2.
const CONNECTION_SPECIFIC: [&[u8]; 5] = [
    b"connection",
    b"keep-alive",
    b"proxy-connection",
    b"transfer-encoding",
    b"upgrade",
];

/// Whether `name` is a connection-specific field (`te` counts unless its value is `trailers`).
pub fn is_connection_specific(name: &[u8], value: &[u8]) -> bool {
    CONNECTION_SPECIFIC.iter().any(|c| name.eq_ignore_ascii_case(c))
        || (name.eq_ignore_ascii_case(b"te") && !value.eq_ignore_ascii_case(b"trailers"))
}

pub(crate) fn is_token_lower(name: &[u8]) -> bool {
    !name.is_empty() && name.iter().all(|&b| b.is_ascii_lowercase() || is_token_symbol(b))
}

/// A token's octets other than letters (RFC 9110 5.6.2).
fn is_token_symbol(b: u8) -> bool {
    b.is_ascii_digit()
        || matches!(
            b,
            b'!' | b'#' | b'$' | b'%' | b'&' | b'\'' | b'*' | b'+' | b'-' | b'.' | b'^' | b'_' | b'`' | b'|' | b'~'
        )
}

pub(crate) fn is_clean_value(value: &[u8]) -> bool {
    memchr::memchr3(b'\r', b'\n', 0, value).is_none()
}

/// What [`check_request`] found out about a well-formed HTTP/2 request.
struct Checked<'p> {
    kind: RequestKind,
    method: &'p [u8],
    path: &'p [u8],
    /// `:authority`, or the `host` field when there is none.
    authority: Option<&'p [u8]>,
    /// A `content-length` field is present.
    has_length: bool,
}

/// The pseudo-header fields of a request's field block, as [`check_request`] collects them.
#[derive(Default)]
struct Pseudo<'a> {
    method: Option<&'a [u8]>,
    scheme: Option<&'a [u8]>,
    authority: Option<&'a [u8]>,
    path: Option<&'a [u8]>,
    /// `:protocol` of an extended CONNECT (RFC 8441).
    protocol: Option<&'a [u8]>,
}

impl<'a> Pseudo<'a> {
    /// Notes pseudo-header field `name`: one that is unknown or comes twice is malformed.
    fn note(&mut self, name: &[u8], value: &'a [u8]) -> Result<(), H2MapError> {
        let slot = match name {
            b":method" => &mut self.method,
            b":scheme" => &mut self.scheme,
            b":authority" => &mut self.authority,
            b":path" => &mut self.path,
            b":protocol" => &mut self.protocol,
            _ => return Err(H2MapError::BadPseudo),
        };
        match slot.replace(value) {
            Some(_) => Err(H2MapError::BadPseudo),
            None => Ok(()),
        }
    }
}

/// Whether `name` is a pseudo-header field's (`:method`, `:path`, ...).
pub fn is_pseudo(name: &[u8]) -> bool {
    name.first() == Some(&b':')
}

/// Refuses a malformed HTTP/2 request (RFC 9113 section 8.1.1): its field block (the
/// pseudo-header fields first, as an HPACK decoder gives them, then the fields) with a pseudo-header
/// field that is unknown, repeated, or after a field; names that are not lowercase tokens, values
/// with CR, LF or NUL, connection-specific fields, a `host` that differs from `:authority`,
/// CONNECT other than an extended CONNECT for WebSockets.
fn check_request<'f>(fields: impl Iterator<Item = (&'f [u8], &'f [u8])>) -> Result<Checked<'f>, H2MapError> {
    let mut pseudo = Pseudo::default();
    let mut has_length = false;
    let mut host = None;
    let mut in_fields = false;
    for (name, value) in fields {
        if is_pseudo(name) {
            if in_fields {
                return Err(H2MapError::BadPseudo);
            }
            pseudo.note(name, value)?;
            continue;
        }
        in_fields = true;
        if !is_token_lower(name) {
            return Err(H2MapError::BadName);
        }
        if !is_clean_value(value) {
            return Err(H2MapError::BadValue);
        }
        if is_connection_specific(name, value) {
            return Err(H2MapError::ConnectionSpecific);
        }
        match name {
            b"content-length" => has_length = true,
            b"host" => host = Some(value),
            _ => {}
        }
    }
    if pseudo
        .scheme
        .is_some_and(|s| s.is_empty() || !s.iter().all(|b| b.is_ascii_graphic()))
    {
        return Err(H2MapError::BadPseudo);
    }
    let method = pseudo.method.unwrap_or_default();
    if method.is_empty() || !method.iter().all(|b| b.is_ascii_graphic()) {
        return Err(H2MapError::BadPseudo);
    }
    if let Some(a) = pseudo.authority {
        if a.is_empty() || !a.iter().all(|b| b.is_ascii_graphic()) || a.contains(&b'@') {
            return Err(H2MapError::BadPseudo);
        }
    }
    let kind = match (method, pseudo.protocol) {
        (b"CONNECT", Some(p)) if p.eq_ignore_ascii_case(b"websocket") => RequestKind::WebSocket,
        (b"CONNECT", Some(_)) => return Err(H2MapError::UnsupportedProtocol),
        (b"CONNECT", None) => return Err(H2MapError::Connect),
        (_, Some(_)) => return Err(H2MapError::BadPseudo),
        _ => RequestKind::Plain,
    };
    // Every request but a plain CONNECT (refused above) names its scheme (RFC 9113 8.3.1).
    if pseudo.scheme.is_none() {
        return Err(H2MapError::BadPseudo);
    }
    let path = pseudo.path.filter(|p| !p.is_empty()).ok_or(H2MapError::MissingPath)?;
    let asterisk = path == b"*" && method == b"OPTIONS";
    if !(path[0] == b'/' || asterisk) || !path.iter().all(|b| b.is_ascii_graphic()) {
        return Err(H2MapError::BadPath);
    }
    let authority = match (pseudo.authority, host) {
        (Some(a), Some(h)) if !a.eq_ignore_ascii_case(h) => return Err(H2MapError::HostMismatch),
        (Some(a), _) => Some(a),
        (None, h) => h,
    };
    Ok(Checked {
        kind,
        method,
        path,
        authority,
        has_length,
    })
}

/// Writes the HTTP/1.1 request head an HTTP/2 request (its field block, pseudo-header fields
/// first) stands for into `out` (the reference
/// [`lay_out_request`] is checked against; Rampart itself writes no such text, and only the fuzz
/// crate and the tests build it: feature `fuzzing`):
/// - `:authority` becomes `Host` (a `host` field that differs is an error);
/// - `cookie` crumbs are joined into one field (RFC 9113 section 8.2.3);
/// - without `content-length`, a request whose stream goes on (`end_stream` false) gets
///   `transfer-encoding: chunked`, and its DATA must be framed as chunks;
/// - an extended CONNECT for `websocket` becomes `GET` with `Upgrade: websocket` and the key
///   given (HTTP/2 WebSockets carry none; the upstream's `Sec-WebSocket-Accept` is dropped on
///   the way back).
///
/// `te: trailers` is kept (as `te: trailers`, which HTTP/1 hop-by-hop rules then drop toward an
/// HTTP/1 upstream and the HTTP/2 upstream side adds back for gRPC).
#[cfg(any(test, feature = "fuzzing"))]
pub fn request_head<'a>(
    fields: impl Iterator<Item = (&'a [u8], &'a [u8])> + Clone,
    end_stream: bool,
    websocket_key: &[u8],
    out: &mut Vec<u8>,
) -> Result<RequestKind, H2MapError> {
    let Checked {
        kind,
        method,
        path,
        authority,
        has_length,
    } = check_request(fields.clone())?;
    let fields = fields.filter(|(name, _)| !is_pseudo(name));
    match kind {
        RequestKind::Plain => out.extend_from_slice(method),
        RequestKind::WebSocket => out.extend_from_slice(b"GET"),
    }
    out.push(b' ');
    out.extend_from_slice(path);
    out.extend_from_slice(b" HTTP/1.1\r\n");
    if let Some(a) = authority {
        field(out, b"host", a);
    }
    let mut cookie_written = false;
    for (name, value) in fields.clone() {
        match name {
            b"host" => {}
            b"cookie" if cookie_written => {}
            b"cookie" => {
                cookie_written = true;
                out.extend_from_slice(b"cookie: ");
                let mut first = true;
                for (_, crumb) in fields.clone().filter(|(n, _)| *n == b"cookie") {
                    if !first {
                        out.extend_from_slice(b"; ");
                    }
                    first = false;
                    out.extend_from_slice(crumb);
                }
                out.extend_from_slice(b"\r\n");
            }
            b"content-length" if kind == RequestKind::WebSocket => {}
            _ => field(out, name, value),
        }
    }
    match kind {
        RequestKind::WebSocket => {
            out.extend_from_slice(b"connection: upgrade\r\nupgrade: websocket\r\n");
            field(out, b"sec-websocket-key", websocket_key);
        }
        RequestKind::Plain if !has_length && !end_stream => {
            out.extend_from_slice(b"transfer-encoding: chunked\r\n");
        }
        RequestKind::Plain => {}
    }
    out.extend_from_slice(b"\r\n");
    Ok(kind)
}

/// The fields of a chunked trailer section as the chunked decoder collected it (`name: value`
/// lines, each ending in CRLF), with lowercase names; lines that are not fields are skipped.
pub fn trailer_fields(section: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    section.split(|&b| b == b'\n').filter_map(|line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let colon = line.iter().position(|&b| b == b':')?;
        let (name, value) = (&line[..colon], &line[colon + 1..]);
        let value = crate::h1::trim(value);
        (!name.is_empty() && name.iter().all(|b| b.is_ascii_graphic())).then_some((name, value))
    })
}

/// [`trailer_fields`] as ranges into `section`, in `list` (cleared first): trailers as the
/// neutral message's fields.
pub fn trailer_field_ranges(section: &[u8], list: &mut Vec<crate::h1::Field>) {
    list.clear();
    let at = |part: &[u8]| {
        let start = (part.as_ptr() as usize - section.as_ptr() as usize) as u32;
        (start, start + part.len() as u32)
    };
    list.extend(trailer_fields(section).map(|(name, value)| crate::h1::Field {
        name: at(name),
        value: at(value),
    }));
}

/// Whether a field of the neutral message may go out on HTTP/2 (a head or trailers): not a
/// pseudo-header field, not connection-specific (RFC 9113 section 8.2.2), its name a token (the
/// HPACK encoder lowercases it) and its value without CR, LF or NUL (section 8.2.1). What fails
/// is left out, never sent for the peer to refuse.
pub fn crosses_into_h2(name: &[u8], value: &[u8]) -> bool {
    !is_pseudo(name)
        && !is_connection_specific(name, value)
        && is_clean_value(value)
        && !name.is_empty()
        && name.iter().all(|&b| b.is_ascii_alphabetic() || is_token_symbol(b))
}

#[cfg(any(test, feature = "fuzzing"))]
fn field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

mod layout;
pub use layout::{lay_out_request, lay_out_section, HeadStorage, LayoutError};

#[cfg(feature = "fuzzing")]
pub mod fuzzing;

#[cfg(test)]
mod tests;
