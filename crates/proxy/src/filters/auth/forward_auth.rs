//! `forward_auth`: an auth service decides each request (nginx's `auth_request`, Traefik's
//! ForwardAuth), through an awaited sub-request in the request head phase.
//!
//! The sub-request is `GET` of the configured URL over HTTP/1.1, with the client's end-to-end
//! header fields (or the ones `request_headers` names) and `X-Forwarded-Method`, `-Proto`,
//! `-Host`, `-Uri` (path and query as the client sent them) and `-For` (the client address
//! filters see: the peer, or from `X-Forwarded-For` behind `trusted_proxies`), which Rampart
//! writes itself in place of any the client sent. Then:
//!
//! - **2xx**: the request goes on; the answer's fields named by `response_headers` replace the
//!   client's fields of those names on the request sent upstream (a client cannot forge them: a
//!   name the answer lacks is removed), and `user_header` names the user for the access log.
//! - **any other status**: the answer goes to the client as the service gave it (status, its
//!   end-to-end fields such as `WWW-Authenticate`, `Location`, `Set-Cookie`, `Content-Type`, and
//!   its body up to `max_body`); the access log says `forward_auth_denied`.
//! - **no usable answer**, the request fails closed: 503 `forward_auth_unavailable` (no
//!   connection), 504 `forward_auth_timeout` (no whole answer within `timeout`), 502
//!   `forward_auth_bad_response` (TLS failure, garbage, a denial body over `max_body`). An
//!   outage is logged once per worker when it starts and once when it ends, not per request.
//!
//! Each worker keeps idle keep-alive connections to the service per filter (at most
//! [`FORWARD_AUTH_MAX_IDLE`](defaults::FORWARD_AUTH_MAX_IDLE), each for at most
//! [`FORWARD_AUTH_IDLE_TIMEOUT`](defaults::FORWARD_AUTH_IDLE_TIMEOUT)), so a check costs one
//! round trip. A check whose idle connection turns out closed or reset by the service is sent
//! again on the next idle connection or a new one (the check is a `GET` without a body, so
//! sending it twice is harmless). Nothing here blocks the worker: the wait is the request's own.

use std::borrow::Cow;
use std::net::IpAddr;
use std::time::Instant;

use rampart_model::defaults;
use rampart_model::filter::forward_auth::is_hop_by_hop;
use rampart_model::filter::ForwardAuth;
use rampart_proto::h1::Field;

use super::subrequest::{self, SubrequestError};
use crate::http::filter::FilterWorker;
use crate::http::filter::{Answer, FilterCx, HttpFilter, RequestParts, Verdict};
use crate::stream::Stream;

/// The longest `user_header` value taken for the access log.
const MAX_USER_LEN: usize = 256;

/// What a worker keeps for one `forward_auth` filter.
#[derive(Default)]
pub struct ServiceConnections {
    /// Idle keep-alive connections, the most recently used last, with when they went idle.
    idle: Vec<(Stream, Instant)>,
    /// The last check failed (no usable answer): the outage has been logged.
    failing: bool,
}

/// The service's answer.
#[derive(Debug)]
pub(crate) struct ServiceAnswer {
    pub status: u16,
    /// End-to-end fields (names lower-case), in order.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl ServiceAnswer {
    fn values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.headers
            .iter()
            .filter(move |(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

impl HttpFilter for ForwardAuth {
    type State = ();
    type WorkerState = ServiceConnections;

    async fn request_head(&self, cx: &mut FilterCx<'_>, _: &mut (), req: &mut RequestParts<'_>) -> Verdict {
        let request = check_request(self, req, cx.scheme, cx.facts.client_ip);
        // Boxed: the exchange's buffers stay out of the chain's future.
        let asked = Box::pin(tokio::time::timeout(self.timeout, ask(self, cx.worker, &request))).await;
        let answer = match asked {
            Ok(Ok(answer)) => answer,
            Ok(Err(e)) => {
                let (status, reason) = match e {
                    SubrequestError::Connect(_) => (503, "forward_auth_unavailable"),
                    _ => (502, "forward_auth_bad_response"),
                };
                note_outcome(self, cx.worker, Some(&e.to_string()));
                return Verdict::Respond(Answer::plain(status, reason, ""));
            }
            Err(_) => {
                note_outcome(self, cx.worker, Some(&format!("no answer within {:?}", self.timeout)));
                return Verdict::Respond(Answer::plain(504, "forward_auth_timeout", ""));
            }
        };
        note_outcome(self, cx.worker, None);
        if !(200..300).contains(&answer.status) {
            return Verdict::Respond(Answer {
                status: answer.status,
                headers: answer
                    .headers
                    .into_iter()
                    .map(|(name, value)| (Cow::Owned(name), value))
                    .collect(),
                body: Cow::Owned(answer.body),
                reason: Some("forward_auth_denied"),
            });
        }
        for name in &self.response_headers {
            req.remove_header(name);
            for value in answer.values(name) {
                req.add_header(name, value);
            }
        }
        if let Some(user) = self.user_header.as_deref().and_then(|h| answer.values(h).next()) {
            if !user.is_empty() {
                cx.facts.user = Some(user.chars().take(MAX_USER_LEN).collect());
            }
        }
        Verdict::Continue
    }
}

/// Notes how `f`'s last check went on this worker (`Some(why)`: it failed), and logs the start
/// and the end of an outage.
fn note_outcome(f: &ForwardAuth, worker: FilterWorker<'_>, failed: Option<&str>) {
    let was_failing = worker.builtin_state(f, |c| std::mem::replace(&mut c.failing, failed.is_some()));
    let url = || f.endpoint.log_url();
    match (was_failing, failed) {
        (false, Some(why)) => tracing::warn!(
            url = url().as_str(),
            worker = worker.id(),
            "forward_auth: {why}; requests fail closed until the service answers again"
        ),
        (true, None) => tracing::info!(
            url = url().as_str(),
            worker = worker.id(),
            "forward_auth: the service answers again"
        ),
        _ => {}
    }
}

/// The sub-request for `req`: `GET` of the service's URL with the client's fields that the
/// filter sends and the `X-Forwarded-*` fields.
pub(crate) fn check_request(f: &ForwardAuth, req: &RequestParts<'_>, scheme: &str, client_ip: IpAddr) -> Vec<u8> {
    let mut out = Vec::with_capacity(512);
    out.extend_from_slice(b"GET ");
    out.extend_from_slice(f.endpoint.path.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let mut line = |name: &[u8], value: &[u8]| {
        out.extend_from_slice(name);
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    };
    line(b"host", f.endpoint.host_header.as_bytes());
    let named_by_connection: Vec<&[u8]> = req
        .header_values("connection")
        .flat_map(|v| v.split(|&b| b == b','))
        .map(<[u8]>::trim_ascii)
        .filter(|t| !t.is_empty())
        .collect();
    for (name, value) in req.headers() {
        let hop = named_by_connection.iter().any(|n| n.eq_ignore_ascii_case(name));
        if f.sends_header(name) && !(hop && f.request_headers.is_none()) {
            line(name, value);
        }
    }
    line(b"x-forwarded-method", req.method);
    line(b"x-forwarded-proto", scheme.as_bytes());
    line(b"x-forwarded-host", req.header("host").unwrap_or(req.host));
    let mut uri = req.path.to_vec();
    if !req.query.is_empty() {
        uri.push(b'?');
        uri.extend_from_slice(req.query);
    }
    line(b"x-forwarded-uri", &uri);
    line(b"x-forwarded-for", client_ip.to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
    out
}

/// Sends `request` to the service and reads its answer, on an idle connection of this worker
/// (the next one, or a new one, when the service had closed it) or a new one.
async fn ask(f: &ForwardAuth, worker: FilterWorker<'_>, request: &[u8]) -> Result<ServiceAnswer, SubrequestError> {
    loop {
        let idle = worker.builtin_state(f, take_idle);
        let reused = idle.is_some();
        let mut stream = match idle {
            Some(stream) => stream,
            None => subrequest::connect(&f.endpoint, f.tls.as_ref()).await?,
        };
        match exchange(f, &mut stream, request).await {
            Ok((answer, reusable)) => {
                if reusable {
                    worker.builtin_state(f, |c| {
                        if c.idle.len() < defaults::FORWARD_AUTH_MAX_IDLE {
                            c.idle.push((stream, Instant::now()));
                        }
                    });
                }
                return Ok(answer);
            }
            // The service closed the idle connection as the request went out: a new one.
            Err(SubrequestError::Io(_) | SubrequestError::NoResponse) if reused => continue,
            Err(e) => return Err(e),
        }
    }
}

/// The most recently used idle connection still fit to carry a request; stale ones are dropped.
fn take_idle(c: &mut ServiceConnections) -> Option<Stream> {
    let now = Instant::now();
    while let Some((mut stream, since)) = c.idle.pop() {
        if now.duration_since(since) < defaults::FORWARD_AUTH_IDLE_TIMEOUT && stream.is_reusable_when_idle() {
            return Some(stream);
        }
    }
    None
}

/// One request and its answer on `stream`; also whether the connection can carry another.
async fn exchange(
    f: &ForwardAuth,
    stream: &mut Stream,
    request: &[u8],
) -> Result<(ServiceAnswer, bool), SubrequestError> {
    stream.write_all(request).await?;
    let mut buf = Vec::with_capacity(2048);
    let mut fields = Vec::new();
    let head = subrequest::read_response_head(stream, &mut buf, &mut fields).await?;
    if head.status == 101 {
        return Err(SubrequestError::BadResponse(rampart_proto::h1::H1Error::BadStatus));
    }
    let headers = end_to_end_fields(&buf, &fields);
    let rest = buf.split_off(head.len);
    let allowed = (200..300).contains(&head.status);
    let (body, reusable) = match subrequest::read_body(stream, head.framing, rest, f.max_body).await {
        Ok(body) => {
            let reusable = body.clean_end && head.keep_alive;
            (body.bytes, reusable)
        }
        // A 2xx says yes with its head; its body only matters to keep the connection.
        Err(_) if allowed => (Vec::new(), false),
        Err(e) => return Err(e),
    };
    let answer = ServiceAnswer {
        status: head.status,
        headers,
        body: if allowed { Vec::new() } else { body },
    };
    Ok((answer, reusable))
}

/// The end-to-end fields of a response head (hop-by-hop ones, those its `Connection` names, and
/// `Content-Length` left out), names lower-case.
fn end_to_end_fields(buf: &[u8], fields: &[Field]) -> Vec<(String, String)> {
    let named: Vec<&[u8]> = fields
        .iter()
        .filter(|f| f.name(buf).eq_ignore_ascii_case(b"connection"))
        .flat_map(|f| f.value(buf).split(|&b| b == b','))
        .map(<[u8]>::trim_ascii)
        .collect();
    fields
        .iter()
        .map(|f| (f.name(buf), f.value(buf)))
        .filter(|(name, _)| {
            !is_hop_by_hop(name)
                && !name.eq_ignore_ascii_case(b"content-length")
                && !named.iter().any(|n| n.eq_ignore_ascii_case(name))
        })
        .map(|(name, value)| {
            (
                String::from_utf8_lossy(name).to_ascii_lowercase(),
                String::from_utf8_lossy(value).into_owned(),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests;
