//! A route's `mirror`: a copy of a share of its requests sent to a shadow upstream, on a task of
//! its own, so that it never delays or fails the request itself. The copy is the request as it
//! went to the route's upstream (its method, target and fields, read from the head written for
//! that upstream: HTTP/1.1 text, or the fields laid out for HTTP/2), with its body: a request
//! without one is copied at once; one with a body once the exchange has sent it (kept, as for a
//! retry, up to the upstream's `retry_max_body_size`; a body not kept whole makes the copy fail).
//!
//! The copy goes through the internal client ([`crate::http::client`]): to the shadow as its
//! upstream settings say (TLS, HTTP/2, pooled connections, DNS targets, its timeouts), never
//! retried. That the shadow answered with a response head is all that is counted; its body is
//! read (and dropped) up to [`MAX_READ`], past which its connection is closed.

use bytes::Bytes;
use rampart_model::split::Mirror;
use rampart_model::Snapshot;

use super::client::{self, InternalError, InternalOptions, InternalRequest, InternalResponse};
use super::head_out::{FieldsHead, UpstreamHead};
use crate::worker::WorkerContext;

/// The most of a shadow's response body read (and dropped) so that its connection can carry the
/// next copy; a longer one closes it.
const MAX_READ: usize = 64 * 1024;

/// Whether this request is one the mirror copies (a draw against its share).
pub fn drawn(ctx: &WorkerContext, mirror: &Mirror) -> bool {
    ctx.http.filters.random() % 100 < u64::from(mirror.percent)
}

/// The body of a copy: none, or the request's as it was kept (`None` when it was not kept whole:
/// the copy fails).
pub enum CopyBody<'a> {
    None,
    Kept(Option<&'a [u8]>),
}

/// Sends a copy of the request whose head to the route's upstream is `head` and whose body is
/// `body` to the mirror's upstream, on a task of its own. Counted in the shadow's `mirrored`, and
/// in its `mirror_failed` when no response head comes back.
pub fn copy(ctx: &WorkerContext, snapshot: &Snapshot, mirror: &Mirror, head: UpstreamHead<'_>, body: CopyBody<'_>) {
    let Some(up) = snapshot.upstreams.get(mirror.upstream) else {
        return;
    };
    let cells = up.metrics.clone();
    let worker = ctx.id;
    cells.worker(worker).mirrored.add(1);
    let failed = move || cells.worker(worker).mirror_failed.add(1);
    let body = match body {
        CopyBody::None => None,
        CopyBody::Kept(Some(data)) => Some(Bytes::copy_from_slice(data)),
        CopyBody::Kept(None) => return failed(),
    };
    let Some(request) = owned_request(head, body) else {
        return failed();
    };
    // The copy runs on the worker's current snapshot (the request's, unless a reload came in
    // between: then the shadow of the same name there).
    let current = ctx.snapshot();
    let upstream = if std::ptr::eq::<Snapshot>(&**current, snapshot) {
        Some(mirror.upstream)
    } else {
        current.upstreams.iter().position(|u| u.name == up.name)
    };
    let Some(upstream) = upstream else {
        return failed();
    };
    let options = InternalOptions {
        keep_body: false,
        ..InternalOptions::new("mirror", MAX_READ)
    };
    let failed_copy = failed.clone();
    let sent = client::spawn(ctx, current, upstream, request, options, move |result| {
        if !answered(&result) {
            failed_copy();
        }
    });
    if sent.is_err() {
        failed();
    }
}

/// Whether the shadow answered with a response head (a body cut off or too long still counts).
fn answered(result: &Result<InternalResponse, InternalError>) -> bool {
    match result {
        Ok(_) => true,
        Err(e) => e.status().is_some(),
    }
}

/// The copy as an owned request: from the fields laid out for HTTP/2 when the head has them,
/// else from the HTTP/1.1 text (`None` when it has neither).
fn owned_request(head: UpstreamHead<'_>, body: Option<Bytes>) -> Option<InternalRequest> {
    let mut request = match (head.fields, head.text) {
        (Some(fields), _) => from_fields(fields),
        (None, Some(text)) => from_text(text)?,
        (None, None) => return None,
    };
    request.body = body;
    Some(request)
}

/// The request whose head was laid out as `head`: `host` is its authority.
fn from_fields(head: FieldsHead<'_>) -> InternalRequest {
    let mut request = InternalRequest {
        method: head.method().to_vec(),
        path: head.target().to_vec(),
        ..InternalRequest::default()
    };
    for f in head.fields {
        take_field(&mut request, f.name(head.buf), f.value(head.buf));
    }
    request
}

/// The request whose head Rampart wrote as `text` (`METHOD TARGET HTTP/1.1`, then one field a
/// line, then an empty line).
fn from_text(text: &[u8]) -> Option<InternalRequest> {
    let mut lines = text
        .split(|&b| b == b'\n')
        .map(|line| line.strip_suffix(b"\r").unwrap_or(line));
    let mut first = lines.next()?.split(|&b| b == b' ');
    let mut request = InternalRequest {
        method: first.next()?.to_vec(),
        path: first.next()?.to_vec(),
        ..InternalRequest::default()
    };
    for line in lines.take_while(|line| !line.is_empty()) {
        let colon = line.iter().position(|&b| b == b':')?;
        take_field(&mut request, &line[..colon], line[colon + 1..].trim_ascii());
    }
    Some(request)
}

/// A field of the head: `host` as the authority, the others as they are (the client drops those
/// it writes itself).
fn take_field(request: &mut InternalRequest, name: &[u8], value: &[u8]) {
    if name.eq_ignore_ascii_case(b"host") {
        request.authority = value.to_vec();
    } else {
        request.fields.push((name.to_vec(), value.to_vec()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rampart_proto::h1::Field;

    #[test]
    fn a_text_head_becomes_an_owned_request() {
        let text = b"POST /a?b=1 HTTP/1.1\r\nhost: app.test\r\nx-one:  1 \r\ncontent-length: 2\r\n\r\n";
        let head = UpstreamHead {
            text: Some(text),
            fields: None,
        };
        let request = owned_request(head, Some(Bytes::from_static(b"hi"))).unwrap();
        assert_eq!(request.method, b"POST");
        assert_eq!(request.path, b"/a?b=1");
        assert_eq!(request.authority, b"app.test");
        let fields: Vec<_> = request.fields.iter().map(|(n, v)| (&n[..], &v[..])).collect();
        assert_eq!(fields, [(&b"x-one"[..], &b"1"[..]), (b"content-length", b"2")]);
        assert_eq!(request.body.as_deref(), Some(&b"hi"[..]));
    }

    #[test]
    fn a_laid_out_head_becomes_an_owned_request() {
        let mut buf = Vec::new();
        let method = rampart_proto::h1::append_range(&mut buf, b"GET");
        let target = rampart_proto::h1::append_range(&mut buf, b"/x");
        let fields = [
            Field::append(&mut buf, b"host", b"h2.test"),
            Field::append(&mut buf, b"x-two", b"2"),
        ];
        let head = UpstreamHead {
            text: Some(b"ignored"),
            fields: Some(FieldsHead {
                buf: &buf,
                method,
                target,
                fields: &fields,
            }),
        };
        let request = owned_request(head, None).unwrap();
        assert_eq!((&request.method[..], &request.path[..]), (&b"GET"[..], &b"/x"[..]));
        assert_eq!(request.authority, b"h2.test");
        assert_eq!(request.fields, [(b"x-two".to_vec(), b"2".to_vec())]);
        assert!(owned_request(UpstreamHead::default(), None).is_none());
    }
}
