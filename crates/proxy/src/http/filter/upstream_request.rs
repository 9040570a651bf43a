//! The upstream-request phase: the request head about to go to the target chosen for it
//! ([`UpstreamRequestParts`]), which filters may read and whose header fields they may edit (sign
//! a request for its backend, name the backend to it). The head was written before the target
//! was chosen; edits, when a filter made some, are applied to a copy ([`UpstreamHeadBuf`]), so a
//! retry starts again from the head as it was.

use std::net::SocketAddr;

use rampart_model::route::HeaderOps;
use rampart_proto::h1::{append_range, Field};

use crate::http::head_out::{FieldsHead, UpstreamHead};

/// Fields a filter cannot edit here: they frame the message or belong to the connection.
const PROTECTED: &[&str] = &[
    "connection",
    "content-length",
    "expect",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// The request head on its way to the chosen target.
pub struct UpstreamRequestParts<'a> {
    /// The upstream's name.
    pub upstream: &'a str,
    /// The chosen target's name (as configured) and address.
    pub target: &'a str,
    pub address: SocketAddr,
    head: UpstreamHead<'a>,
    edits: HeaderOps,
}

impl<'a> UpstreamRequestParts<'a> {
    pub(crate) fn new(upstream: &'a str, target: &'a str, address: SocketAddr, head: UpstreamHead<'a>) -> Self {
        UpstreamRequestParts {
            upstream,
            target,
            address,
            head,
            edits: HeaderOps::default(),
        }
    }

    /// The method.
    pub fn method(&self) -> &'a [u8] {
        match (self.head.fields, self.head.text) {
            (Some(head), _) => head.method(),
            (None, text) => request_line(text.unwrap_or_default()).0,
        }
    }

    /// The request target sent (origin-form: path and query, after rewrites).
    pub fn path_and_query(&self) -> &'a [u8] {
        match (self.head.fields, self.head.text) {
            (Some(head), _) => head.target(),
            (None, text) => request_line(text.unwrap_or_default()).1,
        }
    }

    /// Every header field of the head as written for the upstream (the client's fields that
    /// cross, forwarded headers, earlier filters' request-head edits), before this phase's edits.
    /// (A head laid out in both forms, for `auto`, is read from its fields.)
    pub fn headers(&self) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + 'a {
        let fields = self.head.fields;
        let text = self.head.text.filter(|_| fields.is_none());
        let text_fields = text.into_iter().flat_map(text_fields);
        let laid_out = fields
            .into_iter()
            .flat_map(|h| h.fields.iter().map(move |f| (f.name(h.buf), f.value(h.buf))));
        text_fields.chain(laid_out)
    }

    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&'a [u8]> {
        self.headers()
            .find(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
            .map(|(_, v)| v)
    }

    /// Replaces every field `name` with one `value`. Returns `false`, and changes nothing, for a
    /// field that frames the message or belongs to the connection (`content-length`,
    /// `transfer-encoding`, `connection`, ...), a name that is no token, or a value with a
    /// control character other than tab.
    pub fn set_header(&mut self, name: &str, value: &str) -> bool {
        let ok = editable(name) && valid_value(value);
        if ok {
            self.edits.set(name, value);
        }
        ok
    }

    /// Adds a field (the same rules as [`UpstreamRequestParts::set_header`]).
    pub fn add_header(&mut self, name: &str, value: &str) -> bool {
        let ok = editable(name) && valid_value(value);
        if ok {
            self.edits.add(name, value);
        }
        ok
    }

    /// Removes every field `name` (not the protected ones).
    pub fn remove_header(&mut self, name: &str) -> bool {
        let ok = editable(name);
        if ok {
            self.edits.remove(name);
        }
        ok
    }

    /// The head to send: as it was without edits, else rewritten into `out`.
    pub(crate) fn finish<'o>(self, out: &'o mut UpstreamHeadBuf) -> UpstreamHead<'o>
    where
        'a: 'o,
    {
        if self.edits.is_empty() {
            return self.head;
        }
        // Each form the head was written in is rewritten (both, for `auto`).
        let UpstreamHeadBuf { text, laid, fields } = out;
        if let Some(written) = self.head.text {
            rewrite_text(written, &self.edits, text);
        }
        let laid_out = self.head.fields.map(|head| {
            let (method, target) = rewrite_fields(head, &self.edits, laid, fields);
            (method, target)
        });
        UpstreamHead {
            text: self.head.text.map(|_| &text[..]),
            fields: laid_out.map(|(method, target)| FieldsHead {
                buf: laid,
                method,
                target,
                fields,
            }),
        }
    }
}

/// Where an edited upstream head is written (empty, and allocating nothing, until a filter
/// edits). One per attempt.
#[derive(Default)]
pub struct UpstreamHeadBuf {
    /// The head as HTTP/1.1 text.
    text: Vec<u8>,
    /// The head laid out as fields: their bytes and ranges.
    laid: Vec<u8>,
    fields: Vec<Field>,
}

fn editable(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
        && !PROTECTED.iter().any(|p| p.eq_ignore_ascii_case(name))
}

fn valid_value(value: &str) -> bool {
    value.bytes().all(|b| b == b'\t' || (b >= 0x20 && b != 0x7f))
}

/// The method and target of a head Rampart wrote (`METHOD TARGET HTTP/1.1`).
fn request_line(text: &[u8]) -> (&[u8], &[u8]) {
    let line = text.split(|&b| b == b'\n').next().unwrap_or_default();
    let mut parts = line.split(|&b| b == b' ');
    (parts.next().unwrap_or_default(), parts.next().unwrap_or_default())
}

/// The fields of a head Rampart wrote: one `name: value` a line, after the request line.
fn text_fields(text: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    text.split(|&b| b == b'\n')
        .skip(1)
        .map(|line| line.strip_suffix(b"\r").unwrap_or(line))
        .take_while(|line| !line.is_empty())
        .filter_map(|line| {
            let colon = line.iter().position(|&b| b == b':')?;
            Some((&line[..colon], line[colon + 1..].trim_ascii_start()))
        })
}

/// `text` with `edits` applied: the fields they drop left out, theirs added before the end.
fn rewrite_text(text: &[u8], edits: &HeaderOps, out: &mut Vec<u8>) {
    out.clear();
    let mut lines = text.split_inclusive(|&b| b == b'\n');
    if let Some(first) = lines.next() {
        out.extend_from_slice(first);
    }
    for line in lines {
        let bare = line.strip_suffix(b"\n").unwrap_or(line);
        let bare = bare.strip_suffix(b"\r").unwrap_or(bare);
        if bare.is_empty() {
            break;
        }
        let name = bare.split(|&b| b == b':').next().unwrap_or_default();
        if !edits.drops(name) {
            out.extend_from_slice(line);
        }
    }
    for (name, value) in edits.set.iter().chain(&edits.add) {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// A laid-out head with `edits` applied, into `out` and `fields`; the ranges of method and target.
fn rewrite_fields(
    head: FieldsHead<'_>,
    edits: &HeaderOps,
    out: &mut Vec<u8>,
    fields: &mut Vec<Field>,
) -> ((u32, u32), (u32, u32)) {
    out.clear();
    fields.clear();
    let method = append_range(out, head.method());
    let target = append_range(out, head.target());
    let kept = head
        .fields
        .iter()
        .map(|f| (f.name(head.buf), f.value(head.buf)))
        .filter(|(name, _)| !edits.drops(name));
    let theirs = edits
        .set
        .iter()
        .chain(&edits.add)
        .map(|(n, v)| (n.as_bytes(), v.as_bytes()));
    for (name, value) in kept.chain(theirs) {
        fields.push(Field::append(out, name, value));
    }
    (method, target)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &[u8] = b"GET /a?b HTTP/1.1\r\nhost: app\r\nx-sig: old\r\ntransfer-encoding: chunked\r\n\r\n";

    fn parts(head: UpstreamHead<'_>) -> UpstreamRequestParts<'_> {
        UpstreamRequestParts::new("app", "one", "127.0.0.1:9".parse().unwrap(), head)
    }

    fn text(text: &[u8]) -> UpstreamHead<'_> {
        UpstreamHead {
            text: Some(text),
            fields: None,
        }
    }

    #[test]
    fn a_text_head_is_read_and_rewritten_with_the_edits() {
        let mut p = parts(text(HEAD));
        assert_eq!((p.method(), p.path_and_query()), (&b"GET"[..], &b"/a?b"[..]));
        assert_eq!(p.header("X-Sig"), Some(&b"old"[..]));
        assert_eq!(p.headers().count(), 3);
        assert!(p.set_header("x-sig", "new"));
        assert!(p.add_header("x-backend", "one"));
        assert!(!p.remove_header("transfer-encoding"), "framing is not the filters'");
        assert!(!p.set_header("x-bad", "a\r\nb: c"));
        assert!(!p.set_header("bad name", "v"));
        let mut out = UpstreamHeadBuf::default();
        let written = p.finish(&mut out).text.expect("text");
        assert_eq!(
            written,
            b"GET /a?b HTTP/1.1\r\nhost: app\r\ntransfer-encoding: chunked\r\nx-sig: new\r\nx-backend: one\r\n\r\n"
        );
    }

    #[test]
    fn a_head_without_edits_is_sent_as_it_was() {
        let p = parts(text(HEAD));
        let mut out = UpstreamHeadBuf::default();
        let written = p.finish(&mut out).text.expect("text");
        assert_eq!(written.as_ptr(), HEAD.as_ptr());
    }

    #[test]
    fn a_laid_out_head_is_rewritten_field_by_field() {
        let mut buf = Vec::new();
        let mut list = Vec::new();
        let laid = {
            let text_head = parts(text(HEAD));
            let mut edits = HeaderOps::default();
            edits.add("x-extra", "1");
            let (m, t) = rewrite_fields(
                FieldsHead {
                    buf: b"GET/a?bhostapp",
                    method: (0, 3),
                    target: (3, 7),
                    fields: &[Field {
                        name: (7, 11),
                        value: (11, 14),
                    }],
                },
                &edits,
                &mut buf,
                &mut list,
            );
            drop(text_head);
            FieldsHead {
                buf: &buf,
                method: m,
                target: t,
                fields: &list,
            }
        };
        let mut p = parts(UpstreamHead {
            text: None,
            fields: Some(laid),
        });
        assert_eq!(p.header("x-extra"), Some(&b"1"[..]));
        assert!(p.set_header("host", "backend.internal"));
        assert!(p.remove_header("x-extra"));
        let mut out = UpstreamHeadBuf::default();
        let head = p.finish(&mut out).fields.expect("fields");
        let fields: Vec<_> = head
            .fields
            .iter()
            .map(|f| (f.name(head.buf), f.value(head.buf)))
            .collect();
        assert_eq!((head.method(), head.target()), (&b"GET"[..], &b"/a?b"[..]));
        assert_eq!(fields, vec![(&b"host"[..], &b"backend.internal"[..])]);
    }
}
