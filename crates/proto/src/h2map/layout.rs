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
/// first; given back with the error when the request is refused). A request without
/// `content-length` whose stream goes on has a body of unknown length (the stream's DATA, whose
/// end the stream says). An extended CONNECT for `websocket` becomes a `GET` with
/// `Connection: upgrade`, `Upgrade: websocket` and the key given (HTTP/2 WebSockets carry none).
/// `cookie` crumbs are joined into one field.
pub fn lay_out_request<'a>(
    fields: impl Iterator<Item = (&'a [u8], &'a [u8])> + Clone,
    end_stream: bool,
    websocket_key: &[u8],
    limits: &Limits,
    storage: HeadStorage,
) -> Result<(RequestHead, RequestKind), (LayoutError, HeadStorage)> {
    let (mut buf, mut list) = storage;
    match lay_out(fields, end_stream, websocket_key, limits, &mut buf, &mut list) {
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

/// What [`lay_out`] found, beside the bytes and fields it laid out.
struct Facts {
    method: (u32, u32),
    target: (u32, u32),
    host: Option<(u32, u32)>,
    body: BodyLength,
    expect_continue: bool,
}

fn lay_out<'a>(
    fields: impl Iterator<Item = (&'a [u8], &'a [u8])> + Clone,
    end_stream: bool,
    websocket_key: &[u8],
    limits: &Limits,
    buf: &mut Vec<u8>,
    list: &mut Vec<Field>,
) -> Result<(Facts, RequestKind), LayoutError> {
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
    // The limits, measured on the HTTP/1.1 head the request stands for (`METHOD PATH HTTP/1.1`,
    // `name: value` lines, the framing field, the blank line).
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

    buf.clear();
    list.clear();
    let max_fields = limits.max_fields.min(FIELD_CAPACITY);
    let method_range = append_range(buf, method);
    let target = append_range(buf, path);
    let add = |buf: &mut Vec<u8>, list: &mut Vec<Field>, name: &[u8], value: &mut dyn FnMut(&mut Vec<u8>)| {
        let name = append_range(buf, name);
        let start = buf.len();
        value(buf);
        // The HTTP/1 codec leaves out the whitespace around a value, and refuses control bytes.
        let raw = &buf[start..];
        if !raw.iter().all(|&b| b == b'\t' || b >= b' ' && b != 0x7f) {
            return Err(LayoutError::Refused(H1Error::BadFieldValue));
        }
        let trimmed = trim(raw);
        let from = start + (trimmed.as_ptr() as usize - raw.as_ptr() as usize);
        let value = (from as u32, (from + trimmed.len()) as u32);
        if list.len() == max_fields {
            return Err(LayoutError::Refused(H1Error::TooManyFields));
        }
        list.push(Field { name, value });
        Ok(())
    };
    if let Some(a) = authority {
        add(buf, list, b"host", &mut |buf| buf.extend_from_slice(a))?;
    }
    let host = list.first().map(|f| f.value);
    for (name, value) in fields {
        add(buf, list, name, &mut |buf| match &value {
            Value::One(v) => buf.extend_from_slice(v),
            Value::Cookie(crumbs) => crumbs.write(buf),
        })?;
    }
    if websocket {
        for (name, value) in WEBSOCKET_FIELDS {
            add(buf, list, name, &mut |buf| buf.extend_from_slice(value))?;
        }
        add(buf, list, b"sec-websocket-key", &mut |buf| {
            buf.extend_from_slice(websocket_key)
        })?;
    }
    // The framing field the HTTP/1.1 head would carry counts toward the limit, but is not a
    // field of the request: its framing says it.
    if unknown_length && list.len() == max_fields {
        return Err(LayoutError::Refused(H1Error::TooManyFields));
    }
    if !valid_target(method, path) {
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
    let Some(host) = host else {
        return Err(LayoutError::Refused(H1Error::MissingHost));
    };
    if !valid_host(&buf[host.0 as usize..host.1 as usize]) {
        return Err(LayoutError::Refused(H1Error::BadFieldValue));
    }
    let body = match length {
        _ if unknown_length => BodyLength::Unknown,
        Some(0) | None => BodyLength::None,
        Some(n) => BodyLength::Exact(n),
    };
    let facts = Facts {
        method: method_range,
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

    fn write(&self, buf: &mut Vec<u8>) {
        for (i, crumb) in self.each().enumerate() {
            if i > 0 {
                buf.extend_from_slice(b"; ");
            }
            buf.extend_from_slice(crumb);
        }
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
