//! The request head on its way upstream: its edit view ([`RequestParts`], the owned
//! [`RequestHead`] read through it, with the target after rewrites, header edits, what Rampart
//! adds, and per attempt the upstream-request phase's edits), and the writers that make the head
//! to send from it, once per attempt, in the form the attempt's connection speaks: HTTP/1.1 text
//! ([`write_request_head`]) or fields ([`sent_fields`], which the HTTP/2 side maps to its own);
//! nothing is written twice and nothing written is read back. [`lay_out_sent`] makes an owned head
//! of what would be sent (a mirror's copy).

use std::borrow::Cow;

use rampart_model::route::HeaderOps;
use rampart_model::ForwardedHeaders;
use rampart_proto::message::{BodyLength, Protocol, RequestHead};

pub use super::attempt::AttemptTo;
use super::attempt::{editable, valid_value};
use super::{copy_field_lines, write_field, write_ops, Crossing};
use crate::http::target::{request_target, RequestTarget};

/// The request head's edit view: the owned head ([`RequestHead`]) as the client sent it, read
/// through it, with what the proxy changes on the way upstream: the target after rewrites, the
/// header edits, the upstream chosen, and (once routed to an upstream) what Rampart adds
/// ([`Forwarding`]). Filters see it in the request-head phase and, per attempt, in the
/// upstream-request phase ([`AttemptTo`]); the upstream writers write the head to send from it.
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
    pub(in crate::http::head_out) head: &'a RequestHead,
    /// The target sent upstream (origin-form: path and query); a filter may rewrite it.
    pub target: Cow<'a, [u8]>,
    /// Header edits of the request sent upstream.
    pub edits: Cow<'a, HeaderOps>,
    /// The upstream (an index into the snapshot's) the request goes to; `None` on routes that
    /// answer themselves. A filter may pick another.
    pub upstream: Option<usize>,
    pub(crate) inspect_body: bool,
    /// What Rampart adds to the head on its way upstream (set once the request is routed to one).
    pub(crate) forwarding: Option<&'a Forwarding<'a>>,
    /// In the upstream-request phase: the attempt's upstream and target.
    pub attempt: Option<AttemptTo<'a>>,
    /// The upstream-request phase's edits, applied to the head as written for the attempt.
    pub(crate) attempt_edits: Option<Box<HeaderOps>>,
}

/// What Rampart adds to and changes in a request head on its way upstream, beside the client's
/// fields and the filters' edits (see `head_out`).
#[derive(Clone, Copy)]
pub(crate) struct Forwarding<'a> {
    /// The request's host: the `Host` field, or the authority of an absolute-form target.
    pub(crate) host: Option<&'a [u8]>,
    /// `host` came from the target: the client's `Host` field is replaced by it.
    pub(crate) replace_host: bool,
    /// Sent as `Host` when the client sent none (HTTP/1.0): the upstream's name, as nginx does.
    pub(crate) default_host: &'a str,
    /// The client's address as text (formatted once per connection).
    pub(crate) client_ip: &'a str,
    /// The scheme the client used (`X-Forwarded-Proto`).
    pub(crate) scheme: &'a str,
    pub(crate) forwarded: ForwardedHeaders,
    /// The listener's client-certificate header (lowercase) and the verified certificate to send
    /// in it, if the client presented one. A client-sent field of that name is always dropped.
    pub(crate) client_cert: Option<(&'a str, Option<&'a str>)>,
    /// Fields of the head that the writer leaves out, for a request of Rampart's own whose
    /// client writes them itself (`Host`, the framing and the connection's fields).
    pub(crate) internal: bool,
    /// The request's trace context, with `[tracing]` on: its `traceparent` and `tracestate`
    /// replace the client's.
    pub(crate) trace: Option<&'a crate::http::trace::RequestTrace>,
}

impl<'a> RequestParts<'a> {
    /// The view of `head` whose target reads as `target` (routing's reading of it), with the
    /// route's `edits` and `upstream`.
    pub(crate) fn new(
        head: &'a RequestHead,
        target: &RequestTarget<'a>,
        edits: Cow<'a, HeaderOps>,
        upstream: Option<usize>,
    ) -> Self {
        RequestParts {
            method: head.method(),
            host: target.host,
            path: target.path,
            query: target.query,
            protocol: head.protocol,
            body: head.body,
            head,
            target: target.origin_form.clone(),
            edits,
            upstream,
            inspect_body: false,
            forwarding: None,
            attempt: None,
            attempt_edits: None,
        }
    }

    /// The same request with `edits` in place of its own (the conditional request a cache
    /// makes of it to validate what it stored).
    pub(crate) fn with_edits(&self, edits: HeaderOps) -> RequestParts<'a> {
        RequestParts {
            method: self.method,
            host: self.host,
            path: self.path,
            query: self.query,
            protocol: self.protocol,
            body: self.body,
            head: self.head,
            target: self.target.clone(),
            edits: Cow::Owned(edits),
            upstream: self.upstream,
            inspect_body: self.inspect_body,
            forwarding: self.forwarding,
            attempt: None,
            attempt_edits: None,
        }
    }

    /// The view of `head` with no edits (its target read as routing reads it).
    pub(crate) fn of(head: &'a RequestHead, edits: Cow<'a, HeaderOps>, upstream: Option<usize>) -> Self {
        RequestParts::new(head, &request_target(head.target(), head.host()), edits, upstream)
    }

    /// The head as the client sent it.
    pub fn head(&self) -> &'a RequestHead {
        self.head
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
        self.head
            .pairs()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
            .map(|(_, v)| v)
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
        self.head.pairs()
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

    /// Replaces every field `name` of the request sent upstream with one `value`. In the
    /// upstream-request phase, see [`RequestParts::attempt`]: returns `false` (and changes
    /// nothing) there for a field that frames the message or belongs to the connection, a name
    /// that is no token, or a value with a control character other than tab.
    pub fn set_header(&mut self, name: &str, value: &str) -> bool {
        match self.attempt {
            None => self.edits.to_mut().set(name, value),
            Some(_) if editable(name) && valid_value(value) => {
                self.attempt_edits.get_or_insert_default().set(name, value)
            }
            Some(_) => return false,
        }
        true
    }

    /// Adds a field to the request sent upstream (in the upstream-request phase, with the rules
    /// of [`RequestParts::set_header`]).
    pub fn add_header(&mut self, name: &str, value: &str) -> bool {
        match self.attempt {
            None => self.edits.to_mut().add(name, value),
            Some(_) if editable(name) && valid_value(value) => {
                self.attempt_edits.get_or_insert_default().add(name, value)
            }
            Some(_) => return false,
        }
        true
    }

    /// Removes every field `name` from the request sent upstream (in the upstream-request
    /// phase, not the protected ones: see [`RequestParts::set_header`]).
    pub fn remove_header(&mut self, name: &str) -> bool {
        match self.attempt {
            None => self.edits.to_mut().remove(name),
            Some(_) if editable(name) => self.attempt_edits.get_or_insert_default().remove(name),
            Some(_) => return false,
        }
        true
    }

    /// The upstream-request phase's edits, when it made some.
    pub(crate) fn attempt_ops(&self) -> Option<&HeaderOps> {
        self.attempt_edits.as_deref().filter(|ops| !ops.is_empty())
    }

    /// Asks for the request body phase: the filters that ran will see the body's payload bytes
    /// before they go upstream. Without it, bodies stream untouched.
    pub fn inspect_body(&mut self) {
        self.inspect_body = true;
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

/// Names a request of Rampart's own never takes from its head: its client writes `Host` and the
/// framing itself, and the connection's fields are its own.
fn written_by_the_client(name: &[u8]) -> bool {
    const OURS: &[&[u8]] = &[
        b"host",
        b"content-length",
        b"transfer-encoding",
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"te",
        b"upgrade",
        b"expect",
        b"trailer",
    ];
    OURS.iter().any(|o| o.eq_ignore_ascii_case(name))
}

/// Whether the client's field `name` crosses upstream as it came: not hop-by-hop or dropped by
/// the edits (see [`Crossing::passes`]), not a `Host` that the target replaces, not the client-certificate
/// field, not an `X-Forwarded-*` field that Rampart replaces. Notes in `seen` the forwarded
/// fields that decide what Rampart adds.
fn client_field_crosses(f: &Forwarding<'_>, crossing: &Crossing, name: &[u8], seen: &mut ClientForwarded) -> bool {
    if !crossing.passes(name) {
        return false;
    }
    if f.internal {
        return !written_by_the_client(name);
    }
    if f.client_cert
        .is_some_and(|(cert, _)| name.eq_ignore_ascii_case(cert.as_bytes()))
    {
        return false;
    }
    // By length first: most names are neither `host` nor `x-forwarded-{for,host,proto}`.
    match name.len() {
        4 => !(f.replace_host && name.eq_ignore_ascii_case(b"host")),
        10 | 11 if f.trace.is_some() => {
            !(name.eq_ignore_ascii_case(b"traceparent") || name.eq_ignore_ascii_case(b"tracestate"))
        }
        15..=17 if f.forwarded != ForwardedHeaders::Off && name[..12].eq_ignore_ascii_case(b"x-forwarded-") => {
            let which = &name[12..];
            let (xff, xfp, xfh) = (
                which.eq_ignore_ascii_case(b"for"),
                which.eq_ignore_ascii_case(b"proto"),
                which.eq_ignore_ascii_case(b"host"),
            );
            match f.forwarded {
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
/// is ours, the client certificate field (a request of Rampart's own: `Host` and its length);
/// not the edits' own fields nor the framing.
fn added_fields(p: &RequestParts<'_>, f: &Forwarding<'_>, seen: &ClientForwarded, mut each: impl FnMut(&[u8], &[u8])) {
    added_fields_but_trace(p, f, seen, &mut each);
    trace_fields(f, each);
}

fn added_fields_but_trace(
    p: &RequestParts<'_>,
    f: &Forwarding<'_>,
    seen: &ClientForwarded,
    mut each: impl FnMut(&[u8], &[u8]),
) {
    if f.internal {
        // (Its `Host` went first: see [`leading_fields`].)
        if let BodyLength::Exact(n) = p.body {
            each(b"content-length", n.to_string().as_bytes());
        }
        return;
    }
    if f.forwarded != ForwardedHeaders::Off {
        // One field: the chain the client sent (all its fields, in order), then this client.
        if seen.chain {
            let mut chain = Vec::new();
            for value in p.header_values("x-forwarded-for") {
                chain.extend_from_slice(value);
                chain.extend_from_slice(b", ");
            }
            chain.extend_from_slice(f.client_ip.as_bytes());
            each(b"x-forwarded-for", &chain);
        } else {
            each(b"x-forwarded-for", f.client_ip.as_bytes());
        }
        if !seen.proto {
            each(
                b"x-forwarded-proto",
                match f.scheme {
                    "https" => b"https",
                    _ => b"http",
                },
            );
        }
        if let (false, Some(host)) = (seen.host, f.host) {
            each(b"x-forwarded-host", host);
        }
    }
    match (f.host, f.replace_host) {
        (Some(host), true) => each(b"host", host),
        (None, _) => each(b"host", f.default_host.as_bytes()),
        (Some(_), false) => {}
    }
    if let Some((name, Some(cert))) = f.client_cert {
        each(name.as_bytes(), cert.as_bytes());
    }
}

/// Rampart's `traceparent` and `tracestate`, in place of the client's (not on a request of its
/// own).
fn trace_fields(f: &Forwarding<'_>, mut each: impl FnMut(&[u8], &[u8])) {
    if let Some(trace) = f.trace.filter(|_| !f.internal) {
        each(b"traceparent", &trace.traceparent());
        if let Some(state) = &trace.tracestate {
            each(b"tracestate", state);
        }
    }
}

/// The fields written before the client's: a request of Rampart's own begins with its `Host`.
fn leading_fields(f: &Forwarding<'_>, mut each: impl FnMut(&[u8], &[u8])) {
    if f.internal {
        each(b"host", f.host.unwrap_or(f.default_host.as_bytes()));
    }
}

/// How the client's fields cross for a view with no [`Forwarding`] set, which adds nothing (none
/// of the request paths writes such a view: a safe reading, for tests and tools).
const NO_FORWARDING: Forwarding<'static> = Forwarding {
    host: None,
    replace_host: false,
    default_host: "",
    client_ip: "",
    scheme: "http",
    forwarded: ForwardedHeaders::Off,
    client_cert: None,
    internal: false,
    trace: None,
};

/// Whether the attempt's edits (when there are some) leave field `name` of the head as written.
fn kept_by_attempt(p: &RequestParts<'_>, name: &[u8]) -> bool {
    p.attempt_ops().is_none_or(|ops| !ops.drops(name))
}

/// The client's fields that cross, then those Rampart adds (see [`client_field_crosses`],
/// [`added_fields`]): not the edits' own fields nor the framing.
fn base_fields(p: &RequestParts<'_>, trace: bool, mut each: impl FnMut(&[u8], &[u8])) {
    let f = p.forwarding.unwrap_or(&NO_FORWARDING);
    let head = p.head;
    let crossing = Crossing::new(head.fields_ref(), head.upgrade, &p.edits);
    let mut seen = ClientForwarded::default();
    leading_fields(f, &mut each);
    for (name, value) in head.pairs() {
        if client_field_crosses(f, &crossing, name, &mut seen) {
            each(name, value);
        }
    }
    if p.forwarding.is_some() {
        added_fields_but_trace(p, f, &seen, &mut each);
        if trace {
            trace_fields(f, each);
        }
    }
}

/// Calls `each` with every field of the head to send upstream, in order: the client's fields
/// that cross, those Rampart adds, the edits' own; then, in an attempt whose filters edited it,
/// those edits applied (the fields they drop left out, theirs last). No framing or `Connection`:
/// the field form an HTTP/2 upstream takes.
pub(crate) fn sent_fields(p: &RequestParts<'_>, each: impl FnMut(&[u8], &[u8])) {
    fields_sent(p, true, each);
}

/// [`sent_fields`] but Rampart's own trace fields, which [`sent_trace_fields`] gives (an HTTP/2
/// writer takes them as they are, known valid; they come last).
pub(crate) fn sent_fields_but_trace(p: &RequestParts<'_>, each: impl FnMut(&[u8], &[u8])) {
    fields_sent(p, false, each);
}

/// Rampart's own trace fields among those sent (see [`sent_fields_but_trace`]).
pub(crate) fn sent_trace_fields(p: &RequestParts<'_>, mut each: impl FnMut(&[u8], &[u8])) {
    if let Some(f) = p.forwarding {
        trace_fields(f, |name, value| {
            if kept_by_attempt(p, name) {
                each(name, value);
            }
        });
    }
}

fn fields_sent(p: &RequestParts<'_>, trace: bool, mut each: impl FnMut(&[u8], &[u8])) {
    let mut kept = |name: &[u8], value: &[u8]| {
        if kept_by_attempt(p, name) {
            each(name, value);
        }
    };
    base_fields(p, trace, &mut kept);
    for (name, value) in p.edits.set.iter().chain(&p.edits.add) {
        kept(name.as_bytes(), value.as_bytes());
    }
    for (name, value) in p
        .attempt_ops()
        .into_iter()
        .flat_map(|ops| ops.set.iter().chain(&ops.add))
    {
        each(name.as_bytes(), value.as_bytes());
    }
}

/// Writes the head to send upstream as HTTP/1.1 text: the client's field lines that cross go out
/// as they came, a run at a time (field by field for a head that came as no HTTP/1 text), then
/// Rampart's fields, the framing, `Connection: upgrade` for a tunnel, the edits.
pub(crate) fn write_request_head(out: &mut Vec<u8>, p: &RequestParts<'_>) {
    let head = p.head;
    out.extend_from_slice(p.method);
    out.push(b' ');
    out.extend_from_slice(&p.target);
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let f = p.forwarding.unwrap_or(&NO_FORWARDING);
    if head.lines {
        let crossing = Crossing::new(head.fields_ref(), head.upgrade, &p.edits);
        let mut seen = ClientForwarded::default();
        leading_fields(f, |name, value| write_field(out, name, value));
        copy_field_lines(out, head.bytes(), &head.fields, |name| {
            client_field_crosses(f, &crossing, name, &mut seen) && kept_by_attempt(p, name)
        });
        if p.forwarding.is_some() {
            added_fields(p, f, &seen, |name, value| {
                if kept_by_attempt(p, name) {
                    write_field(out, name, value);
                }
            });
        }
    } else {
        base_fields(p, true, |name, value| {
            if kept_by_attempt(p, name) {
                write_field(out, name, value);
            }
        });
    }
    if p.body == BodyLength::Unknown {
        out.extend_from_slice(b"transfer-encoding: chunked\r\n");
    }
    if head.upgrade {
        out.extend_from_slice(b"connection: upgrade\r\n");
    }
    if let Some(attempt_ops) = p.attempt_ops() {
        for (name, value) in p.edits.set.iter().chain(&p.edits.add) {
            if kept_by_attempt(p, name.as_bytes()) {
                write_field(out, name.as_bytes(), value.as_bytes());
            }
        }
        write_ops(out, attempt_ops);
    } else {
        write_ops(out, &p.edits);
    }
    out.extend_from_slice(b"\r\n");
}

/// The head that would be sent, as an owned head of its own (method, target, and the fields of
/// [`sent_fields`], `host` among them), laid out in `storage`: what a mirror copies.
pub(crate) fn lay_out_sent(p: &RequestParts<'_>, storage: (Vec<u8>, Vec<rampart_proto::h1::Field>)) -> RequestHead {
    let mut head = RequestHead::with_storage(storage.0, storage.1);
    head.method = head.append(p.method);
    head.target = head.append(&p.target);
    let mut host = None;
    sent_fields(p, |name, value| {
        let field = head.push_field(name, value);
        if host.is_none() && name.eq_ignore_ascii_case(b"host") {
            host = Some(field.value);
        }
    });
    head.host = host;
    head.body = p.body;
    head.protocol = Protocol::Http11;
    head.keep_alive = true;
    head
}
