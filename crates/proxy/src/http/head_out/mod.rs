//! Writing message heads on their way through the proxy.
//!
//! Hop-by-hop fields never cross: `Connection` and every field it names, `Keep-Alive`,
//! `Proxy-Connection`, `TE`, `Transfer-Encoding` (written again by us when the body is chunked),
//! `Upgrade` outside a tunnel, and `Expect` (Rampart answers `100 Continue` itself).
//!
//! The request side (`request`, `attempt`) writes from the request head's edit view
//! ([`RequestParts`]); the response side, here, from the neutral response head.

use rampart_proto::h1::Field;
use rampart_proto::message::FieldsRef;

use rampart_model::route::HeaderOps;

mod attempt;
mod request;
mod response;
pub(crate) use attempt::{is_field_value, is_token};
pub(crate) use request::{lay_out_sent, sent_fields_but_trace, sent_trace_fields, write_request_head, Forwarding};
pub use request::{AttemptTo, RequestParts};
pub use response::{write_response_head, ClientFate, ResponseParts};

/// The fields a head's `Connection` fields name (at most 16 are honoured), less `keep-alive` and
/// `upgrade`, which [`is_hop_by_hop`] decides about on its own. Only the head's fields are kept
/// (a small value, built and moved at no cost); they are read again for each name asked about,
/// which only heads that name some pay for (few do).
#[derive(Clone, Copy)]
struct Named<'a> {
    fields: FieldsRef<'a>,
}

impl<'a> Named<'a> {
    /// `None` when the `Connection` fields name no field (most heads).
    fn collect(fields: FieldsRef<'a>) -> Option<Named<'a>> {
        let mut any = false;
        each_named(fields, |_| {
            any = true;
            true
        });
        any.then_some(Named { fields })
    }

    fn contains(&self, name: &[u8]) -> bool {
        let mut found = false;
        each_named(self.fields, |token| {
            found = token.eq_ignore_ascii_case(name);
            found
        });
        found
    }
}

/// Calls `each` with the names the `Connection` fields of `fields` list, the first 16, in order,
/// less `keep-alive` and `upgrade`, until it returns true.
fn each_named<'a>(fields: FieldsRef<'a>, mut each: impl FnMut(&'a [u8]) -> bool) {
    let mut seen = 0;
    let mut note = |value: &'a [u8]| -> bool {
        for token in value.split(|&b| b == b',') {
            let token = trim_ows(token);
            let decided = token.eq_ignore_ascii_case(b"keep-alive") || token.eq_ignore_ascii_case(b"upgrade");
            if token.is_empty() || decided {
                continue;
            }
            if seen == 16 {
                return true;
            }
            seen += 1;
            if each(token) {
                return true;
            }
        }
        false
    };
    match fields {
        // By the length of the name's range first: no field slicing for the others.
        FieldsRef::Ranges { buf, list } | FieldsRef::Packed { buf, list } => {
            for f in list {
                let connection =
                    f.name.1.wrapping_sub(f.name.0) == 10 && f.name(buf).eq_ignore_ascii_case(b"connection");
                if connection && note(f.value(buf)) {
                    return;
                }
            }
        }
        fields => {
            for (_, value) in fields.iter().filter(|(n, _)| n.eq_ignore_ascii_case(b"connection")) {
                if note(value) {
                    return;
                }
            }
        }
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
