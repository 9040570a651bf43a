//! Writing message heads on their way through the proxy.
//!
//! Hop-by-hop fields never cross: `Connection` and every field it names, `Keep-Alive`,
//! `Proxy-Connection`, `TE`, `Transfer-Encoding` (written again by us when the body is chunked),
//! `Upgrade` outside a tunnel, and `Expect` (Rampart answers `100 Continue` itself).

use std::borrow::Cow;

use rampart_proto::h1::{append_range, Field, Framing};
use rampart_proto::message::{BodyLength, FieldsRef};

use super::message::ResponseHeader;

use rampart_model::route::HeaderOps;
use rampart_model::ForwardedHeaders;

/// The fields a `Connection` header names (at most 16 are honoured), less `keep-alive` and
/// `upgrade`, which [`is_hop_by_hop`] decides about on its own.
struct Named<'a> {
    names: [&'a [u8]; 16],
    len: usize,
}

impl<'a> Named<'a> {
    /// The names the `Connection` fields list; `None` when they list none (most heads).
    fn collect(fields: FieldsRef<'a>) -> Option<Named<'a>> {
        let mut named: Option<Named<'a>> = None;
        let mut note = |value: &'a [u8]| {
            for token in value.split(|&b| b == b',') {
                let token = trim_ows(token);
                let decided = token.eq_ignore_ascii_case(b"keep-alive") || token.eq_ignore_ascii_case(b"upgrade");
                if token.is_empty() || decided {
                    continue;
                }
                let named = named.get_or_insert(Named {
                    names: [&[]; 16],
                    len: 0,
                });
                if named.len < 16 {
                    named.names[named.len] = token;
                    named.len += 1;
                }
            }
        };
        match fields {
            // By the length of the name's range first: no field slicing for the others.
            FieldsRef::Ranges { buf, list } => {
                for f in list {
                    if f.name.1.wrapping_sub(f.name.0) == 10 && f.name(buf).eq_ignore_ascii_case(b"connection") {
                        note(f.value(buf));
                    }
                }
            }
            fields => {
                for (_, value) in fields.iter().filter(|(n, _)| n.eq_ignore_ascii_case(b"connection")) {
                    note(value);
                }
            }
        }
        named
    }

    fn contains(&self, name: &[u8]) -> bool {
        self.names[..self.len].iter().any(|n| n.eq_ignore_ascii_case(name))
    }
}

/// `bytes` without leading and trailing spaces and tabs.
fn trim_ows(bytes: &[u8]) -> &[u8] {
    let start = bytes.iter().take_while(|b| matches!(b, b' ' | b'\t')).count();
    let end = bytes
        .iter()
        .rposition(|b| !matches!(b, b' ' | b'\t'))
        .map_or(start, |e| e + 1);
    &bytes[start..end.max(start)]
}

fn is_hop_by_hop(name: &[u8], keep_upgrade: bool) -> bool {
    // By length first: most fields are none of these, and their names' lengths say so.
    match name.len() {
        2 => name.eq_ignore_ascii_case(b"te"),
        6 => name.eq_ignore_ascii_case(b"expect"),
        7 => !keep_upgrade && name.eq_ignore_ascii_case(b"upgrade"),
        10 => name.eq_ignore_ascii_case(b"connection") || name.eq_ignore_ascii_case(b"keep-alive"),
        16 => name.eq_ignore_ascii_case(b"proxy-connection"),
        17 => name.eq_ignore_ascii_case(b"transfer-encoding"),
        _ => false,
    }
}

/// What decides whether a field of a head crosses the proxy: the names its `Connection` fields
/// list, whether `Upgrade` crosses (into a tunnel), and the edits when they drop any field.
struct Crossing<'a> {
    named: Option<Named<'a>>,
    upgrade: bool,
    drops: Option<&'a HeaderOps>,
}

impl<'a> Crossing<'a> {
    fn new(fields: FieldsRef<'a>, upgrade: bool, ops: &'a HeaderOps) -> Self {
        Crossing {
            named: Named::collect(fields),
            upgrade,
            drops: (!ops.remove.is_empty() || !ops.set.is_empty()).then_some(ops),
        }
    }

    /// Whether field `name` crosses: not hop-by-hop (by name or named by `Connection`;
    /// `Upgrade` crosses into a tunnel) and not removed or replaced by the edits.
    fn passes(&self, name: &[u8]) -> bool {
        // (`Named` holds no `upgrade`: whether that crosses is `is_hop_by_hop`'s to say.)
        let hop = is_hop_by_hop(name, self.upgrade) || self.named.as_ref().is_some_and(|n| n.contains(name));
        !hop && !self.drops.is_some_and(|ops| ops.drops(name))
    }
}

fn write_field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

fn write_ops(out: &mut Vec<u8>, ops: &HeaderOps) {
    for (name, value) in ops.set.iter().chain(&ops.add) {
        write_field(out, name.as_bytes(), value.as_bytes());
    }
}

/// A request head on its way upstream: the client's head (HTTP/1 keeps its fields as byte ranges
/// into the bytes it was read into), the target after rewrites, and header edits (the route's,
/// borrowed until a filter changes them: see [`RequestHeader::edits_mut`]).
pub struct RequestHeader<'a> {
    pub buf: &'a [u8],
    pub fields: &'a [Field],
    /// The fields are whole lines of HTTP/1 text in `buf` (see `RequestHead::lines`): they may be
    /// copied as they came.
    pub lines: bool,
    pub method: &'a [u8],
    /// The target to send, in origin-form (rewritten or as received).
    pub target: Cow<'a, [u8]>,
    pub framing: Framing,
    pub upgrade: bool,
    /// The request's host: the `Host` field, or the authority of an absolute-form target.
    pub host: Option<&'a [u8]>,
    /// `host` came from the target: the client's `Host` field is replaced by it.
    pub replace_host: bool,
    /// Sent as `Host` when the client sent none (HTTP/1.0): the upstream's name, as nginx does.
    pub default_host: &'a str,
    /// The client's address as text (formatted once per connection).
    pub client_ip: &'a str,
    /// The scheme the client used (`X-Forwarded-Proto`).
    pub scheme: &'a str,
    pub forwarded: ForwardedHeaders,
    /// The listener's client-certificate header (lowercase) and the verified certificate to send
    /// in it, if the client presented one. A client-sent field of that name is always dropped.
    pub client_cert: Option<(&'a str, Option<&'a str>)>,
    pub edits: Cow<'a, HeaderOps>,
}

impl RequestHeader<'_> {
    /// The header edits, to change: the route's are copied on the first change, so requests that
    /// no filter touches allocate nothing.
    pub fn edits_mut(&mut self) -> &mut HeaderOps {
        self.edits.to_mut()
    }
}

/// What the client's own `X-Forwarded-*` fields were, as far as [`ForwardedHeaders::Append`]
/// needs to know: an `X-Forwarded-For` (its values begin the combined field Rampart sends), and
/// whether a `Proto` or `Host` one crossed (then Rampart adds none).
#[derive(Default)]
struct ClientForwarded {
    chain: bool,
    proto: bool,
    host: bool,
}

/// Whether the client's field `name` crosses upstream as it came: not hop-by-hop or dropped by
/// the edits (see [`Crossing::passes`]), not a `Host` that the target replaces, not the client-certificate
/// field, not an `X-Forwarded-*` field that Rampart replaces. Notes in `seen` the forwarded
/// fields that decide what Rampart adds.
fn client_field_crosses(r: &RequestHeader<'_>, crossing: &Crossing, name: &[u8], seen: &mut ClientForwarded) -> bool {
    if !crossing.passes(name) {
        return false;
    }
    if r.client_cert
        .is_some_and(|(cert, _)| name.eq_ignore_ascii_case(cert.as_bytes()))
    {
        return false;
    }
    // By length first: most names are neither `host` nor `x-forwarded-{for,host,proto}`.
    match name.len() {
        4 => !(r.replace_host && name.eq_ignore_ascii_case(b"host")),
        15..=17 if r.forwarded != ForwardedHeaders::Off && name[..12].eq_ignore_ascii_case(b"x-forwarded-") => {
            let which = &name[12..];
            let (xff, xfp, xfh) = (
                which.eq_ignore_ascii_case(b"for"),
                which.eq_ignore_ascii_case(b"proto"),
                which.eq_ignore_ascii_case(b"host"),
            );
            match r.forwarded {
                _ if !(xff || xfp || xfh) => true,
                ForwardedHeaders::Append if xff => {
                    // Sent with the others as one combined field.
                    seen.chain = true;
                    false
                }
                ForwardedHeaders::Append => {
                    seen.proto |= xfp;
                    seen.host |= xfh;
                    true
                }
                ForwardedHeaders::Replace | ForwardedHeaders::Off => false,
            }
        }
        _ => true,
    }
}

/// Calls `each` with the fields Rampart adds to a request going upstream, after the client's
/// own that cross ([`client_field_crosses`] told `seen`): the forwarded headers, `Host` where it
/// is ours, the client certificate field; not the edits' own fields nor the framing.
fn added_request_fields(r: &RequestHeader<'_>, seen: &ClientForwarded, mut each: impl FnMut(&[u8], &[u8])) {
    let buf = r.buf;
    if r.forwarded != ForwardedHeaders::Off {
        // One field: the chain the client sent (all its fields, in order), then this client.
        if seen.chain {
            let mut chain = Vec::new();
            for f in r
                .fields
                .iter()
                .filter(|f| f.name(buf).eq_ignore_ascii_case(b"x-forwarded-for"))
            {
                chain.extend_from_slice(f.value(buf));
                chain.extend_from_slice(b", ");
            }
            chain.extend_from_slice(r.client_ip.as_bytes());
            each(b"x-forwarded-for", &chain);
        } else {
            each(b"x-forwarded-for", r.client_ip.as_bytes());
        }
        if !seen.proto {
            each(
                b"x-forwarded-proto",
                match r.scheme {
                    "https" => b"https",
                    _ => b"http",
                },
            );
        }
        if let (false, Some(host)) = (seen.host, r.host) {
            each(b"x-forwarded-host", host);
        }
    }
    match (r.host, r.replace_host) {
        (Some(host), true) => each(b"host", host),
        (None, _) => each(b"host", r.default_host.as_bytes()),
        (Some(_), false) => {}
    }
    if let Some((name, Some(cert))) = r.client_cert {
        each(name.as_bytes(), cert.as_bytes());
    }
}

/// Calls `each` with every field of the request head to send upstream, in order: the client's
/// fields that cross (see [`client_field_crosses`]), then those Rampart adds (see
/// [`added_request_fields`]); not the edits' own fields (see [`HeaderOps`]) nor the framing.
fn request_fields(r: &RequestHeader<'_>, mut each: impl FnMut(&[u8], &[u8])) {
    let buf = r.buf;
    let crossing = Crossing::new(FieldsRef::Ranges { buf, list: r.fields }, r.upgrade, &r.edits);
    let mut seen = ClientForwarded::default();
    for f in r.fields {
        let name = f.name(buf);
        if client_field_crosses(r, &crossing, name, &mut seen) {
            each(name, f.value(buf));
        }
    }
    added_request_fields(r, &seen, each);
}

/// Writes the request head to send upstream (HTTP/1.1): the client's field lines that cross go
/// out as they came, a run at a time (field by field for a head that came as no HTTP/1 text).
pub fn write_request_head(out: &mut Vec<u8>, r: &RequestHeader<'_>) {
    out.extend_from_slice(r.method);
    out.push(b' ');
    out.extend_from_slice(&r.target);
    out.extend_from_slice(b" HTTP/1.1\r\n");
    if r.lines {
        let fields = FieldsRef::Ranges {
            buf: r.buf,
            list: r.fields,
        };
        let crossing = Crossing::new(fields, r.upgrade, &r.edits);
        let mut seen = ClientForwarded::default();
        copy_field_lines(out, r.buf, r.fields, |name| {
            client_field_crosses(r, &crossing, name, &mut seen)
        });
        added_request_fields(r, &seen, |name, value| write_field(out, name, value));
    } else {
        // A head laid out from another protocol: field by field.
        request_fields(r, |name, value| write_field(out, name, value));
    }
    if r.framing == Framing::Chunked {
        out.extend_from_slice(b"transfer-encoding: chunked\r\n");
    }
    if r.upgrade {
        out.extend_from_slice(b"connection: upgrade\r\n");
    }
    write_ops(out, &r.edits);
    out.extend_from_slice(b"\r\n");
}

/// The request head to send upstream, in the forms the upstream's protocol may need: HTTP/1.1
/// text for an HTTP/1 connection, laid out as fields for an HTTP/2 one (both for `auto`, which
/// learns the protocol at the connect). Neither is ever read back from the other.
#[derive(Debug, Clone, Copy, Default)]
pub struct UpstreamHead<'a> {
    pub text: Option<&'a [u8]>,
    pub fields: Option<FieldsHead<'a>>,
}

/// A request head to send to an HTTP/2 upstream, laid out as fields: the method, target and
/// every field's name and value in one buffer, with their ranges. No HTTP/1 text: the upstream
/// side maps it field by field.
#[derive(Debug, Clone, Copy)]
pub struct FieldsHead<'a> {
    pub buf: &'a [u8],
    pub method: (u32, u32),
    pub target: (u32, u32),
    pub fields: &'a [Field],
}

impl<'a> FieldsHead<'a> {
    pub fn method(&self) -> &'a [u8] {
        &self.buf[self.method.0 as usize..self.method.1 as usize]
    }

    pub fn target(&self) -> &'a [u8] {
        &self.buf[self.target.0 as usize..self.target.1 as usize]
    }
}

/// Lays the request head to send to an HTTP/2 upstream out in `out` and `fields` (the same fields
/// [`write_request_head`] writes, the edits' included, no framing or `Connection`); returns the
/// ranges of its method and target.
pub fn write_request_fields(
    out: &mut Vec<u8>,
    fields: &mut Vec<Field>,
    r: &RequestHeader<'_>,
) -> ((u32, u32), (u32, u32)) {
    out.clear();
    fields.clear();
    let method = append_range(out, r.method);
    let target = append_range(out, &r.target);
    let mut field = |name: &[u8], value: &[u8]| {
        fields.push(Field::append(out, name, value));
    };
    request_fields(r, &mut field);
    for (name, value) in r.edits.set.iter().chain(&r.edits.add) {
        field(name.as_bytes(), value.as_bytes());
    }
    (method, target)
}

/// What a response head toward an HTTP/1 client is written from.
pub struct ResponseOut<'a> {
    pub head: &'a ResponseHeader<'a>,
    /// The client connection closes after this response.
    pub close: bool,
    /// The client spoke HTTP/1.0 and asked for keep-alive.
    pub keep_alive_10: bool,
    /// The body goes out chunked (its length is unknown and the client speaks HTTP/1.1).
    pub chunked: bool,
}

/// Calls `each` with every field of a response head that crosses the proxy (hop-by-hop fields,
/// those `Connection` names and those the edits remove are dropped; `Upgrade` crosses with a
/// tunnel), then with the edits' own fields.
pub fn response_fields(fields: FieldsRef<'_>, upgrade: bool, ops: &HeaderOps, mut each: impl FnMut(&[u8], &[u8])) {
    let crossing = Crossing::new(fields, upgrade, ops);
    for (name, value) in fields.iter() {
        if crossing.passes(name) {
            each(name, value);
        }
    }
    for (name, value) in ops.set.iter().chain(&ops.add) {
        each(name.as_bytes(), value.as_bytes());
    }
}

/// Writes an HTTP/1.1 response head: the status line (the upstream's reason phrase, or the
/// standard one), the fields that cross, the framing the body goes out with, and the connection's
/// fate.
pub fn write_response_head(out: &mut Vec<u8>, r: &ResponseOut<'_>) {
    let head = r.head;
    out.extend_from_slice(b"HTTP/1.1 ");
    let status = head.status.min(999);
    out.extend_from_slice(&[
        b'0' + (status / 100) as u8,
        b'0' + (status / 10 % 10) as u8,
        b'0' + (status % 10) as u8,
        b' ',
    ]);
    if head.reason.is_empty() {
        out.extend_from_slice(super::local::reason(head.status).as_bytes());
    } else {
        out.extend_from_slice(head.reason);
    }
    out.extend_from_slice(b"\r\n");
    let mut has_length = false;
    let mut field = |out: &mut Vec<u8>, name: &[u8], value: &[u8]| {
        has_length |= name.eq_ignore_ascii_case(b"content-length");
        write_field(out, name, value);
    };
    match head.fields {
        // An HTTP/1 head's own lines: those that cross go out as they came, a run at a time.
        FieldsRef::Ranges { buf, list } => {
            let crossing = Crossing::new(head.fields, head.upgrade, &head.edits);
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

/// Copies the field lines of the HTTP/1 head in `buf` whose names `crosses` approves (called once
/// per field, in order) to `out` as they are, each run of crossing lines in one copy: the lines
/// of a parsed head are contiguous, each beginning at its field's name, and the parser refused
/// bare LF and obs-fold, so a line is exactly its name, colon, value and CRLF.
fn copy_field_lines(out: &mut Vec<u8>, buf: &[u8], list: &[Field], mut crosses: impl FnMut(&[u8]) -> bool) {
    let mut run = None;
    for f in list {
        let (name, line_start) = (f.name(buf), f.name.0 as usize);
        if crosses(name) {
            run.get_or_insert(line_start);
        } else if let Some(start) = run.take() {
            out.extend_from_slice(&buf[start..line_start]);
        }
    }
    if let (Some(start), Some(last)) = (run, list.last()) {
        let value_end = last.value.1 as usize;
        let line_end = memchr::memchr(b'\n', &buf[value_end..]).map_or(buf.len(), |at| value_end + at + 1);
        out.extend_from_slice(&buf[start..line_end]);
    }
}

/// Writes the end of a chunked body: the last chunk, the trailer fields that may cross (valid
/// names and values; no hop-by-hop or framing field), the final CRLF.
pub fn write_chunked_end(out: &mut Vec<u8>, trailers: FieldsRef<'_>) {
    out.extend_from_slice(b"0\r\n");
    for (name, value) in trailers.iter() {
        let valid = !name.is_empty()
            && name.iter().all(|&b| b.is_ascii_graphic() && b != b':')
            && !value.iter().any(|&b| matches!(b, b'\r' | b'\n' | 0))
            && !is_hop_by_hop(name, false)
            && !name.eq_ignore_ascii_case(b"content-length");
        if valid {
            write_field(out, name, value);
        }
    }
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests;
