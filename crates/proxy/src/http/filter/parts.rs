//! The messages as filters see them, protocol-neutral: a request head ([`RequestParts`]), a
//! response head ([`ResponseParts`]) and a response's trailers ([`TrailerParts`]). Reads see the
//! message as it arrived; edits are recorded and applied when the head is written, so a filter's reads never
//! depend on which filter edited before it. Header names are matched case-insensitively.

use std::borrow::Cow;

use rampart_model::route::HeaderOps;
use rampart_proto::h1::Field;
use rampart_proto::message::{BodyLength, FieldsRef, Protocol};

/// A request head on its way through the filters.
pub struct RequestParts<'a> {
    pub method: &'a [u8],
    /// The request's host, without its port (empty when it named none).
    pub host: &'a [u8],
    /// The path as received (no query).
    pub path: &'a [u8],
    /// The query as received (without `?`).
    pub query: &'a [u8],
    /// The protocol the request came in.
    pub protocol: Protocol,
    /// What is known of the request body's length.
    pub body: BodyLength,
    buf: &'a [u8],
    fields: &'a [Field],
    /// The target sent upstream (origin-form: path and query); a filter may rewrite it.
    pub target: Cow<'a, [u8]>,
    /// Header edits of the request sent upstream.
    pub edits: Cow<'a, HeaderOps>,
    /// The upstream (an index into the snapshot's) the request goes to; `None` on routes that
    /// answer themselves. A filter may pick another.
    pub upstream: Option<usize>,
    pub(super) inspect_body: bool,
}

impl<'a> RequestParts<'a> {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        method: &'a [u8],
        host: &'a [u8],
        path: &'a [u8],
        query: &'a [u8],
        protocol: Protocol,
        body: BodyLength,
        buf: &'a [u8],
        fields: &'a [Field],
        target: Cow<'a, [u8]>,
        edits: Cow<'a, HeaderOps>,
        upstream: Option<usize>,
    ) -> Self {
        RequestParts {
            method,
            host,
            path,
            query,
            protocol,
            body,
            buf,
            fields,
            target,
            edits,
            upstream,
            inspect_body: false,
        }
    }

    /// The first value of header `name`, as the client sent it.
    pub fn header(&self, name: &str) -> Option<&'a [u8]> {
        self.header_values(name).next()
    }

    /// Every value of header `name`, in order.
    pub fn header_values<'n>(&self, name: &'n str) -> impl Iterator<Item = &'a [u8]> + 'n
    where
        'a: 'n,
    {
        let buf = self.buf;
        self.fields
            .iter()
            .filter(move |f| f.name(buf).eq_ignore_ascii_case(name.as_bytes()))
            .map(move |f| f.value(buf))
    }

    /// The value of cookie `name` (the first one of that name, in any `Cookie` field); `None`
    /// when it is missing or empty.
    pub fn cookie(&self, name: &str) -> Option<&'a [u8]> {
        self.header_values("cookie")
            .flat_map(|v| v.split(|&b| b == b';'))
            .find_map(|pair| {
                let pair = pair.trim_ascii();
                let eq = pair.iter().position(|&b| b == b'=')?;
                (&pair[..eq] == name.as_bytes()).then(|| pair[eq + 1..].trim_ascii())
            })
            .filter(|v| !v.is_empty())
    }

    /// Every header field as the client sent it: `(name, value)`.
    pub fn headers(&self) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + 'a {
        let buf = self.buf;
        self.fields.iter().map(move |f| (f.name(buf), f.value(buf)))
    }

    /// The value of query parameter `name` (its first occurrence, not percent-decoded).
    pub fn query_param(&self, name: &str) -> Option<&'a [u8]> {
        self.query.split(|&b| b == b'&').find_map(|pair| {
            let (k, v) = match pair.iter().position(|&b| b == b'=') {
                Some(i) => (&pair[..i], &pair[i + 1..]),
                None => (pair, &b""[..]),
            };
            (k == name.as_bytes()).then_some(v)
        })
    }

    /// Replaces every field `name` of the request sent upstream with one `value`.
    pub fn set_header(&mut self, name: &str, value: &str) {
        self.edits.to_mut().set(name, value);
    }

    /// Adds a field to the request sent upstream.
    pub fn add_header(&mut self, name: &str, value: &str) {
        self.edits.to_mut().add(name, value);
    }

    /// Removes every field `name` from the request sent upstream.
    pub fn remove_header(&mut self, name: &str) {
        self.edits.to_mut().remove(name);
    }

    /// Asks for the request body phase: the filters that ran will see the body's payload bytes
    /// before they go upstream. Without it, bodies stream untouched.
    pub fn inspect_body(&mut self) {
        self.inspect_body = true;
    }
}

/// Where a response head's fields are.
enum Fields<'a> {
    /// An upstream's head, as the neutral message holds it (HTTP/1 byte ranges, HTTP/2 fields).
    Upstream(FieldsRef<'a>),
    /// An answer of Rampart's own.
    Local(&'a [(&'a str, &'a str)]),
}

/// A response head on its way to the client.
pub struct ResponseParts<'a> {
    pub status: u16,
    /// What is known of its body's length as it arrives.
    pub length: BodyLength,
    /// An answer of Rampart's own (an error, a `respond` route, a filter's answer).
    pub local: bool,
    fields: Fields<'a>,
    /// Header edits of the response sent to the client.
    pub edits: Cow<'a, HeaderOps>,
    pub(super) transform: bool,
    /// Whether the body can be transformed (see [`ResponseParts::transform_body`]).
    can_transform: bool,
}

impl<'a> ResponseParts<'a> {
    pub(crate) fn upstream(
        status: u16,
        length: BodyLength,
        fields: FieldsRef<'a>,
        edits: Cow<'a, HeaderOps>,
        can_transform: bool,
    ) -> Self {
        ResponseParts {
            status,
            length,
            local: false,
            fields: Fields::Upstream(fields),
            edits,
            transform: false,
            can_transform,
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

/// A message's trailer fields on their way on (an HTTP/2 or gRPC message's, a chunked HTTP/1
/// body's; none at all for most messages), as the request and response trailers phases see
/// them. Reads see them as they arrived; edits apply when they are sent. A peer that cannot take
/// trailers (a body of known length on HTTP/1, an HTTP/1.0 client) gets the body's end without
/// them.
pub struct TrailerParts<'a> {
    fields: FieldsRef<'a>,
    /// Edits of the trailers sent to the client.
    pub edits: HeaderOps,
}

impl<'a> TrailerParts<'a> {
    pub(crate) fn new(fields: FieldsRef<'a>) -> Self {
        TrailerParts {
            fields,
            edits: HeaderOps::default(),
        }
    }

    /// The first value of trailer `name` as it arrived (`grpc-status`, say).
    pub fn header(&self, name: &str) -> Option<&'a [u8]> {
        self.fields.get(name.as_bytes())
    }

    /// Every trailer field as it arrived: `(name, value)`, in order.
    pub fn headers(&self) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + 'a {
        self.fields.iter()
    }

    /// Replaces every trailer `name` with one `value` (adds it when there was none).
    pub fn set_header(&mut self, name: &str, value: &str) {
        self.edits.set(name, value);
    }

    /// Adds a trailer field.
    pub fn add_header(&mut self, name: &str, value: &str) {
        self.edits.add(name, value);
    }

    /// Removes every trailer `name`.
    pub fn remove_header(&mut self, name: &str) {
        self.edits.remove(name);
    }

    /// The trailers after the edits: those that arrived and were not removed or replaced, then
    /// the edits' own.
    pub(crate) fn edited(&self) -> Vec<(&[u8], &[u8])> {
        let kept = self.fields.iter().filter(|(name, _)| !self.edits.drops(name));
        let added = self.edits.set.iter().chain(&self.edits.add);
        kept.chain(added.map(|(n, v)| (n.as_bytes(), v.as_bytes()))).collect()
    }
}
