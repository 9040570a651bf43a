//! Writing message heads on their way through the proxy.
//!
//! Hop-by-hop fields never cross: `Connection` and every field it names, `Keep-Alive`,
//! `Proxy-Connection`, `TE`, `Transfer-Encoding` (written again by us when the body is chunked),
//! `Upgrade` outside a tunnel, and `Expect` (Rampart answers `100 Continue` itself).

use std::borrow::Cow;

use rampart_proto::h1::{Field, Framing, ResponseHead};

use rampart_model::route::HeaderOps;
use rampart_model::ForwardedHeaders;

/// The fields a `Connection` header names (at most 16 are honoured), as byte ranges.
struct Named {
    ranges: [(u32, u32); 16],
    len: usize,
}

impl Named {
    fn collect(buf: &[u8], fields: &[Field]) -> Named {
        let mut named = Named {
            ranges: [(0, 0); 16],
            len: 0,
        };
        for f in fields
            .iter()
            .filter(|f| f.name(buf).eq_ignore_ascii_case(b"connection"))
        {
            let (start, _) = f.value;
            let value = f.value(buf);
            let mut pos = 0;
            for token in value.split(|&b| b == b',') {
                let lead = token.iter().take_while(|b| matches!(b, b' ' | b'\t')).count();
                let trimmed = token[lead..]
                    .iter()
                    .rposition(|b| !matches!(b, b' ' | b'\t'))
                    .map_or(0, |e| e + 1);
                if trimmed > 0 && named.len < 16 {
                    let s = start + (pos + lead) as u32;
                    named.ranges[named.len] = (s, s + trimmed as u32);
                    named.len += 1;
                }
                pos += token.len() + 1;
            }
        }
        named
    }

    fn contains(&self, buf: &[u8], name: &[u8]) -> bool {
        self.ranges[..self.len]
            .iter()
            .any(|&(s, e)| buf[s as usize..e as usize].eq_ignore_ascii_case(name))
    }
}

fn is_hop_by_hop(name: &[u8], keep_upgrade: bool) -> bool {
    const ALWAYS: [&[u8]; 6] = [
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"te",
        b"transfer-encoding",
        b"expect",
    ];
    ALWAYS.iter().any(|h| name.eq_ignore_ascii_case(h)) || (!keep_upgrade && name.eq_ignore_ascii_case(b"upgrade"))
}

/// Whether a field crosses the proxy: not hop-by-hop (by name or named by `Connection`; `Upgrade`
/// crosses into a tunnel) and not removed or replaced by the route's header edits.
fn passes(buf: &[u8], named: &Named, name: &[u8], upgrade: bool, ops: &HeaderOps) -> bool {
    let hop = is_hop_by_hop(name, upgrade)
        || (named.contains(buf, name) && !(upgrade && name.eq_ignore_ascii_case(b"upgrade")));
    !hop && !ops.drops(name)
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

/// Writes the request head to send upstream (HTTP/1.1).
pub fn write_request_head(out: &mut Vec<u8>, r: &RequestHeader<'_>) {
    let buf = r.buf;
    out.extend_from_slice(r.method);
    out.push(b' ');
    out.extend_from_slice(&r.target);
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let named = Named::collect(buf, r.fields);
    let mut xff_seen = false;
    let (mut proto_seen, mut host_seen) = (false, false);
    for f in r.fields {
        let name = f.name(buf);
        if !passes(buf, &named, name, r.upgrade, &r.edits)
            || (r.replace_host && name.eq_ignore_ascii_case(b"host"))
            || r.client_cert
                .is_some_and(|(cert, _)| name.eq_ignore_ascii_case(cert.as_bytes()))
        {
            continue;
        }
        let xff = name.eq_ignore_ascii_case(b"x-forwarded-for");
        let xfp = name.eq_ignore_ascii_case(b"x-forwarded-proto");
        let xfh = name.eq_ignore_ascii_case(b"x-forwarded-host");
        if xff || xfp || xfh {
            match r.forwarded {
                ForwardedHeaders::Off => {}
                ForwardedHeaders::Replace => continue,
                ForwardedHeaders::Append if xff => {
                    // Written below as one combined field.
                    xff_seen = true;
                    continue;
                }
                ForwardedHeaders::Append => {
                    proto_seen |= xfp;
                    host_seen |= xfh;
                }
            }
        }
        write_field(out, name, f.value(buf));
    }
    if r.forwarded != ForwardedHeaders::Off {
        // One field: the chain the client sent (all its fields, in order), then this client.
        out.extend_from_slice(b"x-forwarded-for: ");
        if xff_seen {
            for f in r
                .fields
                .iter()
                .filter(|f| f.name(buf).eq_ignore_ascii_case(b"x-forwarded-for"))
            {
                out.extend_from_slice(f.value(buf));
                out.extend_from_slice(b", ");
            }
        }
        out.extend_from_slice(r.client_ip.as_bytes());
        out.extend_from_slice(b"\r\n");
        if !proto_seen {
            out.extend_from_slice(match r.scheme {
                "https" => b"x-forwarded-proto: https\r\n",
                _ => b"x-forwarded-proto: http\r\n",
            });
        }
        if let (false, Some(host)) = (host_seen, r.host) {
            write_field(out, b"x-forwarded-host", host);
        }
    }
    match (r.host, r.replace_host) {
        (Some(host), true) => write_field(out, b"host", host),
        (None, _) => write_field(out, b"host", r.default_host.as_bytes()),
        (Some(_), false) => {}
    }
    if let Some((name, Some(cert))) = r.client_cert {
        write_field(out, name.as_bytes(), cert.as_bytes());
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

/// What a response head toward the client is written from.
pub struct ResponseOut<'a> {
    pub buf: &'a [u8],
    pub fields: &'a [Field],
    pub head: &'a ResponseHead,
    pub ops: &'a HeaderOps,
    /// The client connection closes after this response.
    pub close: bool,
    /// A 101 that turns the connection into a tunnel.
    pub upgrade: bool,
    /// The client spoke HTTP/1.0 and asked for keep-alive.
    pub keep_alive_10: bool,
    /// A chunked upstream body is un-chunked for an HTTP/1.0 client, which cannot read chunks:
    /// no `Transfer-Encoding`, and the body ends with the connection.
    pub unchunked: bool,
}

/// Calls `each` with every field of a response head that crosses the proxy (hop-by-hop fields,
/// those `Connection` names and those the edits remove are dropped; `Upgrade` crosses with a
/// tunnel), then with the edits' own fields. For heads written in another protocol (HTTP/2).
pub fn response_fields(
    buf: &[u8],
    fields: &[Field],
    upgrade: bool,
    ops: &HeaderOps,
    mut each: impl FnMut(&[u8], &[u8]),
) {
    let named = Named::collect(buf, fields);
    for f in fields {
        let name = f.name(buf);
        if passes(buf, &named, name, upgrade, ops) {
            each(name, f.value(buf));
        }
    }
    for (name, value) in ops.set.iter().chain(&ops.add) {
        each(name.as_bytes(), value.as_bytes());
    }
}

/// Writes the response head to send to the client.
pub fn write_response_head(out: &mut Vec<u8>, r: &ResponseOut<'_>) {
    let buf = r.buf;
    // Status line: our version, the upstream's status and reason.
    let line_end = buf.windows(2).position(|w| w == b"\r\n").unwrap_or(0);
    let after_version = buf[..line_end]
        .iter()
        .position(|&b| b == b' ')
        .map_or(line_end, |i| i + 1);
    out.extend_from_slice(b"HTTP/1.1 ");
    let status_and_reason = &buf[after_version..line_end];
    out.extend_from_slice(status_and_reason);
    if status_and_reason.len() <= 4 {
        // No reason phrase (a head made from HTTP/2, which has none): the standard one.
        if status_and_reason.len() == 3 {
            out.push(b' ');
        }
        out.extend_from_slice(super::local::reason(r.head.status).as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    let named = Named::collect(buf, r.fields);
    for f in r.fields {
        let name = f.name(buf);
        if !passes(buf, &named, name, r.upgrade, r.ops) {
            continue;
        }
        write_field(out, name, f.value(buf));
    }
    if r.head.framing == Framing::Chunked && !r.unchunked {
        out.extend_from_slice(b"transfer-encoding: chunked\r\n");
    }
    if r.upgrade {
        out.extend_from_slice(b"connection: upgrade\r\n");
    } else if r.close {
        out.extend_from_slice(b"connection: close\r\n");
    } else if r.keep_alive_10 {
        out.extend_from_slice(b"connection: keep-alive\r\n");
    }
    write_ops(out, r.ops);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests;
