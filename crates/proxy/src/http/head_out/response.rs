//! The response head on its way to the client: its edit view ([`ResponseParts`]) and what an
//! HTTP/1 client side writes from it ([`write_response_head`], with the connection's fate,
//! [`ClientFate`]).

use std::borrow::Cow;

use rampart_model::route::HeaderOps;
use rampart_proto::message::{BodyLength, FieldsRef, ResponseHead, Span};

use super::{copy_field_lines, response_fields, write_field, Crossing};

/// Where a response head's fields are.
#[derive(Clone, Copy)]
enum Fields<'a> {
    /// An upstream's head, as the neutral message holds it (HTTP/1 byte ranges, HTTP/2 fields).
    Upstream(FieldsRef<'a>),
    /// An answer of Rampart's own.
    Local(&'a [(&'a str, &'a str)]),
}

/// The response head's edit view, on its way to the client: the owned head
/// ([`ResponseHead`]) of an upstream's response, or the fields of an answer of Rampart's own,
/// read through it, with the header edits to apply when it is written. Filters see it in the
/// response-head phase; the client sides write the head to send from it.
#[derive(Clone)]
pub struct ResponseParts<'a> {
    pub status: u16,
    /// What is known of its body's length as it arrives ([`BodyLength::None`]: no body at all).
    pub length: BodyLength,
    /// An answer of Rampart's own (an error, a `respond` route, a filter's answer).
    pub local: bool,
    fields: Fields<'a>,
    /// Header edits of the response sent to the client.
    pub edits: Cow<'a, HeaderOps>,
    /// The reason phrase an HTTP/1 upstream sent (empty otherwise): an HTTP/1 detail, written
    /// back to an HTTP/1 client and nowhere else.
    pub(crate) reason: &'a [u8],
    /// A 101 that turns the connection into a tunnel.
    pub(crate) upgrade: bool,
    pub(crate) transform: bool,
    /// Whether the body can be transformed (see [`ResponseParts::transform_body`]).
    can_transform: bool,
}

impl<'a> ResponseParts<'a> {
    /// The view of an upstream's head, with `edits`; `reason`: the reason phrase of an HTTP/1
    /// head (a range of its bytes, from the HTTP/1 codec).
    pub(crate) fn of(head: &'a ResponseHead, reason: Span, edits: Cow<'a, HeaderOps>) -> Self {
        ResponseParts {
            status: head.status,
            length: head.length,
            local: false,
            fields: Fields::Upstream(head.fields_ref()),
            edits,
            reason: head.get(reason),
            upgrade: head.upgrade,
            transform: false,
            can_transform: false,
        }
    }

    /// The view of a head Rampart wrote itself whose fields are `fields` (a static file's).
    pub(crate) fn written(status: u16, length: BodyLength, fields: FieldsRef<'a>, edits: Cow<'a, HeaderOps>) -> Self {
        ResponseParts {
            status,
            length,
            local: false,
            fields: Fields::Upstream(fields),
            edits,
            reason: b"",
            upgrade: false,
            transform: false,
            can_transform: false,
        }
    }

    /// The same view with its own edits (borrowing these) and whether its body may be
    /// transformed: what the filters' response-head phase edits, the head as it came staying
    /// as it was.
    pub(crate) fn for_filters(&self, can_transform: bool) -> ResponseParts<'_> {
        ResponseParts {
            edits: Cow::Borrowed(&self.edits),
            can_transform,
            ..*self
        }
    }

    /// Whether the view is a 101 that opens a tunnel.
    pub fn upgrade(&self) -> bool {
        self.upgrade
    }

    /// The fields as they came (before edits), for the writers.
    pub(crate) fn fields(&self) -> FieldsRef<'a> {
        match self.fields {
            Fields::Upstream(fields) => fields,
            Fields::Local(_) => FieldsRef::EMPTY,
        }
    }

    pub(crate) fn local(
        status: u16,
        body_len: usize,
        headers: &'a [(&'a str, &'a str)],
        edits: Cow<'a, HeaderOps>,
    ) -> Self {
        ResponseParts {
            status,
            length: BodyLength::Exact(body_len as u64),
            local: true,
            fields: Fields::Local(headers),
            edits,
            reason: b"",
            upgrade: false,
            transform: false,
            can_transform: false,
        }
    }

    /// The first value of header `name` as the response has it (before edits).
    pub fn header(&self, name: &str) -> Option<&'a [u8]> {
        match self.fields {
            Fields::Upstream(fields) => fields.get(name.as_bytes()),
            Fields::Local(headers) => headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_bytes()),
        }
    }

    /// Every header field as the response has it (before edits): `(name, value)`, in order.
    pub fn headers(&self) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + 'a {
        let (parsed, local) = match self.fields {
            Fields::Upstream(fields) => (Some(fields), None),
            Fields::Local(headers) => (None, Some(headers)),
        };
        let parsed = parsed.into_iter().flat_map(|fields| fields.iter());
        let local = local
            .into_iter()
            .flat_map(|headers| headers.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())));
        parsed.chain(local)
    }

    /// Replaces every field `name` of the response with one `value`.
    pub fn set_header(&mut self, name: &str, value: &str) {
        self.edits.to_mut().set(name, value);
    }

    /// Adds a field to the response.
    pub fn add_header(&mut self, name: &str, value: &str) {
        self.edits.to_mut().add(name, value);
    }

    /// Removes every field `name` from the response.
    pub fn remove_header(&mut self, name: &str) {
        self.edits.to_mut().remove(name);
    }

    /// Asks for the response body phase, in which filters may replace the body's bytes. Returns
    /// false (and changes nothing) when this response's body cannot be transformed: it has none
    /// (HEAD, 1xx, 204, 304), its length is set by the upstream's close, the client speaks
    /// HTTP/1.0 (which cannot take the chunked framing a transformed body needs), or it is an
    /// answer of Rampart's own. When it returns true, the response goes out chunked (or as
    /// HTTP/2 DATA) and its `Content-Length` is dropped.
    pub fn transform_body(&mut self) -> bool {
        if self.can_transform {
            self.transform = true;
        }
        self.can_transform
    }

    /// Whether [`ResponseParts::transform_body`] would succeed.
    pub fn body_transformable(&self) -> bool {
        self.can_transform
    }
}

/// What becomes of an HTTP/1 client's connection with a response, as its head says it.
pub struct ClientFate {
    /// The client connection closes after this response.
    pub close: bool,
    /// The client spoke HTTP/1.0 and asked for keep-alive.
    pub keep_alive_10: bool,
    /// The body goes out chunked (its length is unknown and the client speaks HTTP/1.1).
    pub chunked: bool,
}

/// Writes an HTTP/1.1 response head: the status line (the upstream's reason phrase, or the
/// standard one), the fields that cross, the framing the body goes out with, and the connection's
/// fate.
pub fn write_response_head(out: &mut Vec<u8>, head: &ResponseParts<'_>, r: &ClientFate) {
    out.extend_from_slice(b"HTTP/1.1 ");
    let status = head.status.min(999);
    out.extend_from_slice(&[
        b'0' + (status / 100) as u8,
        b'0' + (status / 10 % 10) as u8,
        b'0' + (status % 10) as u8,
        b' ',
    ]);
    if head.reason.is_empty() {
        out.extend_from_slice(crate::http::local::reason(head.status).as_bytes());
    } else {
        out.extend_from_slice(head.reason);
    }
    out.extend_from_slice(b"\r\n");
    let mut has_length = false;
    let mut field = |out: &mut Vec<u8>, name: &[u8], value: &[u8]| {
        has_length |= name.eq_ignore_ascii_case(b"content-length");
        write_field(out, name, value);
    };
    match head.fields() {
        // An HTTP/1 head's own lines: those that cross go out as they came, a run at a time.
        FieldsRef::Ranges { buf, list } => {
            let crossing = Crossing::new(head.fields(), head.upgrade, &head.edits);
            let mut copied_length = false;
            copy_field_lines(out, buf, list, |name| {
                let crosses = crossing.passes(name);
                copied_length |= crosses && name.eq_ignore_ascii_case(b"content-length");
                crosses
            });
            for (name, value) in head.edits.set.iter().chain(&head.edits.add) {
                field(out, name.as_bytes(), value.as_bytes());
            }
            has_length |= copied_length;
        }
        fields => response_fields(fields, head.upgrade, &head.edits, |name, value| field(out, name, value)),
    }
    match head.length {
        _ if r.chunked => out.extend_from_slice(b"transfer-encoding: chunked\r\n"),
        // A length the fields do not state (an HTTP/2 head ended with END_STREAM): say it.
        BodyLength::Exact(n) if !has_length => {
            out.extend_from_slice(b"content-length: ");
            out.extend_from_slice(n.to_string().as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        _ => {}
    }
    if head.upgrade {
        out.extend_from_slice(b"connection: upgrade\r\n");
    } else if r.close {
        out.extend_from_slice(b"connection: close\r\n");
    } else if r.keep_alive_10 {
        out.extend_from_slice(b"connection: keep-alive\r\n");
    }
    out.extend_from_slice(b"\r\n");
}
