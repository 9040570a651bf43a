//! An HTTP/2 request laid out as the owned request head ([`RequestHead`]): method, target, host
//! and fields as byte ranges into the head's own buffer ([`Field`], the same shape the HTTP/1
//! codec gives a request it reads), with its body's length. No HTTP/1 text is written and nothing is parsed twice.
//!
//! The request path reads an HTTP/2 request exactly as it reads the HTTP/1.1 head the request
//! stands for ([`super::request_head`]) once the HTTP/1 codec has read it: the same owned head
//! (method, target, host and fields, body length, flags; only the protocol differs), and the same refusals with the same status in the same order
//! (the limits on the request line, the head and the number of fields, tokens, values, targets,
//! `content-length`, `host`). The `h2_request` fuzz target checks that equivalence.

use super::{check_request, is_pseudo, Checked, H2MapError, RequestKind};
use crate::h1::{append_range, content_length, trim, valid_host, valid_target, Field, H1Error, Limits};
use crate::message::{BodyLength, Protocol, RequestHead};

/// Why an HTTP/2 request was not laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayoutError {
    /// A malformed HTTP/2 request (RFC 9113 section 8.1.1): a stream error.
    Malformed(H2MapError),
    /// A request HTTP/2 allows that the request path refuses as it would the same HTTP/1.1 head
    /// (answered with [`H1Error::status`]).
    Refused(H1Error),
}

impl From<H2MapError> for LayoutError {
    fn from(e: H2MapError) -> Self {
        LayoutError::Malformed(e)
    }
}

/// A head's storage: its bytes and its field list (from a pool, given back with a refusal).
pub type HeadStorage = (Vec<u8>, Vec<Field>);

/// The most fields a head may have, whatever [`Limits::max_fields`] says (the HTTP/1 codec's).
const FIELD_CAPACITY: usize = 256;

/// The fields an extended CONNECT for a WebSocket adds (the HTTP/1.1 upgrade it becomes).
const WEBSOCKET_FIELDS: [(&[u8], &[u8]); 2] = [(b"connection", b"upgrade"), (b"upgrade", b"websocket")];

/// Lays out an HTTP/2 request (its field block, pseudo-header fields first; `end_stream`: its
/// HEADERS ended the stream) as the owned head, in `storage` (a buffer and a field list, cleared
/// first; given back with the error when the request is refused): the block is copied into the
/// buffer as a decoder would have decoded it, then laid out there ([`lay_out_section`]).
pub fn lay_out_request<'a>(
    fields: impl Iterator<Item = (&'a [u8], &'a [u8])>,
    end_stream: bool,
    websocket_key: &[u8],
    limits: &Limits,
    storage: HeadStorage,
) -> Result<(RequestHead, RequestKind), (LayoutError, HeadStorage)> {
    let (mut bytes, list) = storage;
    bytes.clear();
    let section: Vec<Field> = fields
        .map(|(name, value)| Field::append(&mut bytes, name, value))
        .collect();
    lay_out_section((bytes, list), &section, end_stream, websocket_key, limits)
}

/// Lays out an HTTP/2 request whose field section was decoded into `storage`'s buffer
/// (`section`: its fields as ranges there, pseudo-header fields first; `end_stream`: its HEADERS
/// ended the stream) as the owned head, in place: the head keeps the buffer, so the decoder's is
/// the one copy from the wire, and `storage`'s list (cleared first) gets ranges into it. The few
/// octets a request gains are appended: the `host` name, `cookie` crumbs joined, a WebSocket's
/// fields. Given back with the error when the request is refused.
///
/// A request without `content-length` whose stream goes on has a body of unknown length (the
/// stream's DATA, whose end the stream says). An extended CONNECT for `websocket` becomes a
/// `GET` with `Connection: upgrade`, `Upgrade: websocket` and the key given (HTTP/2 WebSockets
/// carry none). `cookie` crumbs are joined into one field.
pub fn lay_out_section(
    storage: HeadStorage,
    section: &[Field],
    end_stream: bool,
    websocket_key: &[u8],
    limits: &Limits,
) -> Result<(RequestHead, RequestKind), (LayoutError, HeadStorage)> {
    let (mut buf, mut list) = storage;
    list.clear();
    match lay_out(&mut buf, section, end_stream, websocket_key, limits, &mut list) {
        Ok((facts, kind)) => {
            let mut head = RequestHead::laid_out(buf, list);
            head.method = facts.method;
            head.target = facts.target;
            head.host = facts.host;
            head.body = facts.body;
            head.protocol = Protocol::Http2;
            head.keep_alive = true;
            head.expect_continue = facts.expect_continue;
            head.upgrade = kind == RequestKind::WebSocket;
            Ok((head, kind))
        }
        Err(e) => Err((e, (buf, list))),
    }
}

/// What [`lay_out`] found, beside the fields it laid out.
struct Facts {
    method: (u32, u32),
    target: (u32, u32),
    host: Option<(u32, u32)>,
    body: BodyLength,
    expect_continue: bool,
}

/// The range of `part` (a slice of `buf`) in `buf`.
fn range_in(buf: &[u8], part: &[u8]) -> (u32, u32) {
    let from = part.as_ptr() as usize - buf.as_ptr() as usize;
    debug_assert!(from + part.len() <= buf.len());
    (from as u32, (from + part.len()) as u32)
}

/// `range` without the whitespace around it: the HTTP/1 codec leaves it out of a value.
fn trimmed(buf: &[u8], range: (u32, u32)) -> (u32, u32) {
    let raw = &buf[range.0 as usize..range.1 as usize];
    let inner = trim(raw);
    let from = range.0 as usize + (inner.as_ptr() as usize - raw.as_ptr() as usize);
    (from as u32, (from + inner.len()) as u32)
}

/// The HTTP/1 codec refuses control bytes in a value (but tab).
fn clean(value: &[u8]) -> Result<(), LayoutError> {
    match value.iter().all(|&b| b == b'\t' || b >= b' ' && b != 0x7f) {
        true => Ok(()),
        false => Err(LayoutError::Refused(H1Error::BadFieldValue)),
    }
}

/// The most fields a head may have, and a field taking a place.
fn push_field(list: &mut Vec<Field>, max_fields: usize, field: Field) -> Result<(), LayoutError> {
    if list.len() == max_fields {
        return Err(LayoutError::Refused(H1Error::TooManyFields));
    }
    list.push(field);
    Ok(())
}

fn lay_out(
    buf: &mut Vec<u8>,
    section: &[Field],
    end_stream: bool,
    websocket_key: &[u8],
    limits: &Limits,
    list: &mut Vec<Field>,
) -> Result<(Facts, RequestKind), LayoutError> {
    let max_fields = limits.max_fields.min(FIELD_CAPACITY);
    // First what reads the section as it is: the checks, and the fields as ranges of it, the
    // `host` field's name and several `cookie` crumbs' joined value still to come.
    let (kind, method, target, unknown_length, has_host, joined_cookie) = {
        let b: &[u8] = buf;
        let fields = section.iter().map(|f| (f.name(b), f.value(b)));
        let Checked {
            kind,
            method,
            path,
            authority,
            has_length,
        } = check_request(fields.clone())?;
        let fields = fields.filter(|(name, _)| !is_pseudo(name));
        let websocket = kind == RequestKind::WebSocket;
        let method: &[u8] = if websocket { b"GET" } else { method };
        let unknown_length = !websocket && !has_length && !end_stream;
        let fields = Crossing {
            fields,
            websocket,
            cookie_seen: false,
        };
        // The limits, measured on the HTTP/1.1 head the request stands for (`METHOD PATH
        // HTTP/1.1`, `name: value` lines, the framing field, the blank line).
        if method.len() + path.len() + 11 > limits.max_request_line {
            return Err(LayoutError::Refused(H1Error::RequestLineTooLong));
        }
        let mut head_len = method.len() + path.len() + 12 + 2;
        let mut extra = |name: &[u8], value_len: usize| head_len += name.len() + value_len + 4;
        if let Some(a) = authority {
            extra(b"host", a.len());
        }
        fields.clone().for_each(|(name, value)| match value {
            Value::One(v) => extra(name, v.len()),
            Value::Cookie(crumbs) => extra(name, crumbs.joined_len()),
        });
        if websocket {
            WEBSOCKET_FIELDS.iter().for_each(|(n, v)| extra(n, v.len()));
            extra(b"sec-websocket-key", websocket_key.len());
        }
        if unknown_length {
            extra(b"transfer-encoding", b"chunked".len());
        }
        if head_len > limits.max_head {
            return Err(LayoutError::Refused(H1Error::HeadTooLarge));
        }
        if !method.iter().all(|&b| is_tchar(b)) {
            return Err(LayoutError::Refused(H1Error::BadMethod));
        }
        if let Some(a) = authority {
            clean(a)?;
            // Its name is appended below.
            let value = trimmed(b, range_in(b, a));
            push_field(list, max_fields, Field { name: (0, 0), value })?;
        }
        let mut joined_cookie = None;
        for (name, value) in fields {
            let name = range_in(b, name);
            let value = match value {
                Value::One(v) => {
                    clean(v)?;
                    trimmed(b, range_in(b, v))
                }
                Value::Cookie(crumbs) => {
                    crumbs.each().try_for_each(clean)?;
                    match crumbs.each().nth(1) {
                        // One crumb is its own value; several are joined below.
                        None => trimmed(b, range_in(b, crumbs.each().next().unwrap_or_default())),
                        Some(_) => {
                            joined_cookie = Some(list.len());
                            (0, 0)
                        }
                    }
                }
            };
            push_field(list, max_fields, Field { name, value })?;
        }
        let method = (!websocket).then(|| range_in(b, method));
        (
            kind,
            method,
            range_in(b, path),
            unknown_length,
            authority.is_some(),
            joined_cookie,
        )
    };
    // Then what the head gains.
    if has_host {
        list[0].name = append_range(buf, b"host");
    }
    if let Some(i) = joined_cookie {
        let start = buf.len();
        for field in section {
            if field.name(buf) == b"cookie" {
                if buf.len() > start {
                    buf.extend_from_slice(b"; ");
                }
                buf.extend_from_within(field.value.0 as usize..field.value.1 as usize);
            }
        }
        list[i].value = trimmed(buf, (start as u32, buf.len() as u32));
    }
    let websocket = kind == RequestKind::WebSocket;
    if websocket {
        for (name, value) in WEBSOCKET_FIELDS {
            push_field(list, max_fields, Field::append(buf, name, value))?;
        }
        push_field(
            list,
            max_fields,
            Field::append(buf, b"sec-websocket-key", websocket_key),
        )?;
    }
    let method = method.unwrap_or_else(|| append_range(buf, b"GET"));
    // The framing field the HTTP/1.1 head would carry counts toward the limit, but is not a
    // field of the request: its framing says it.
    if unknown_length && list.len() == max_fields {
        return Err(LayoutError::Refused(H1Error::TooManyFields));
    }
    let slice = |r: (u32, u32)| &buf[r.0 as usize..r.1 as usize];
    if !valid_target(slice(method), slice(target)) {
        return Err(LayoutError::Refused(H1Error::BadTarget));
    }
    // What the fields say, checked in the order the HTTP/1 codec checks it.
    let mut length = None;
    let mut expect_continue = false;
    for field in list.iter() {
        match field.name(buf) {
            b"content-length" => length = Some(content_length(field.value(buf), length).map_err(LayoutError::Refused)?),
            b"expect" => expect_continue |= field.value(buf).eq_ignore_ascii_case(b"100-continue"),
            _ => {}
        }
    }
    let host = match list.first() {
        Some(f) if has_host => f.value,
        _ => return Err(LayoutError::Refused(H1Error::MissingHost)),
    };
    if !valid_host(slice(host)) {
        return Err(LayoutError::Refused(H1Error::BadFieldValue));
    }
    let body = match length {
        _ if unknown_length => BodyLength::Unknown,
        Some(0) | None => BodyLength::None,
        Some(n) => BodyLength::Exact(n),
    };
    let facts = Facts {
        method,
        target,
        host: Some(host),
        body,
        expect_continue,
    };
    Ok((facts, kind))
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// A field's value as it crosses: one value, or all the `cookie` crumbs joined.
enum Value<'a, I> {
    One(&'a [u8]),
    Cookie(Crumbs<I>),
}

/// The `cookie` crumbs of a request, to be joined with `; ` (RFC 9113 section 8.2.3).
struct Crumbs<I>(I);

impl<'a, I: Iterator<Item = (&'a [u8], &'a [u8])> + Clone> Crumbs<I> {
    fn each(&self) -> impl Iterator<Item = &'a [u8]> {
        self.0.clone().filter(|(n, _)| *n == b"cookie").map(|(_, v)| v)
    }

    /// The joined value's length.
    fn joined_len(&self) -> usize {
        self.each()
            .enumerate()
            .map(|(i, c)| c.len() + if i > 0 { 2 } else { 0 })
            .sum()
    }
}

/// The request's fields as they cross, in order: `host` left out (the authority is the host),
/// the first `cookie` standing for all of them, `content-length` left out of a WebSocket.
#[derive(Clone)]
struct Crossing<I> {
    fields: I,
    websocket: bool,
    /// The first `cookie` has gone by.
    cookie_seen: bool,
}

impl<'a, I: Iterator<Item = (&'a [u8], &'a [u8])> + Clone> Iterator for Crossing<I> {
    type Item = (&'a [u8], Value<'a, I>);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let all = self.fields.clone();
            let (name, value) = self.fields.next()?;
            match name {
                b"host" => {}
                b"cookie" if self.cookie_seen => {}
                b"cookie" => {
                    self.cookie_seen = true;
                    return Some((name, Value::Cookie(Crumbs(all))));
                }
                b"content-length" if self.websocket => {}
                _ => return Some((name, Value::One(value))),
            }
        }
    }
}
