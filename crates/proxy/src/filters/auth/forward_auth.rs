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
//! The sub-request goes through the internal client ([`crate::http::client`]) to the service's
//! internal upstream, which the config compiler made from the URL (the host and port as its
//! target, by DNS for a name; TLS for `https://`; `protocol = "auto"`): pooled keep-alive
//! connections on each worker, HTTP/2 when an `https://` service offers it by ALPN, the
//! upstream's timeouts. A check that fails on a pooled connection the service had closed is
//! sent again on a new one (the check is a `GET` without a body, so sending it twice is
//! harmless). Nothing here blocks the worker: the wait is the request's own.

use std::borrow::Cow;
use std::net::IpAddr;

use rampart_model::filter::forward_auth::is_hop_by_hop;
use rampart_model::filter::ForwardAuth;

use crate::http::client::{self, Collected, InternalError, InternalOptions};
use crate::http::error::HttpError;
use crate::http::filter::FilterWorker;
use crate::http::filter::{Answer, FilterCx, HttpFilter, RequestParts, Verdict};
use rampart_proto::message::RequestHead;

/// The longest `user_header` value taken for the access log.
const MAX_USER_LEN: usize = 256;

/// What a worker keeps for one `forward_auth` filter (its connections are the internal
/// upstream's, in the worker's pools).
#[derive(Default)]
pub struct ServiceState {
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
    type WorkerState = ServiceState;

    async fn request_head(&self, cx: &mut FilterCx<'_>, _: &mut (), req: &mut RequestParts<'_>) -> Verdict {
        let request = check_request(self, req, cx.scheme, cx.facts.client_ip);
        let options = InternalOptions {
            // Once more on a new connection when a pooled one turns out closed.
            retries: 1,
            ..InternalOptions::new("forward_auth", self.max_body)
        };
        let (context, snapshot, upstream) = (cx.context, cx.snapshot, self.upstream);
        let sent = async move { client::send(context, snapshot, upstream, &request?, None, &options).await };
        // Boxed: the exchange's buffers stay out of the chain's future.
        let asked = Box::pin(tokio::time::timeout(self.timeout, sent)).await;
        let answer = match asked.map(answer_of) {
            Ok(Ok(answer)) => answer,
            Ok(Err(e)) => {
                let (status, reason) = match e {
                    InternalError::NoResponse(
                        HttpError::ConnectFailed | HttpError::NoHealthyTarget | HttpError::UpstreamUnavailable,
                    )
                    | InternalError::NoUpstream(_) => (503, "forward_auth_unavailable"),
                    InternalError::NoResponse(
                        HttpError::ConnectTimeout | HttpError::UpstreamTimeout | HttpError::RequestTimeout,
                    ) => (504, "forward_auth_timeout"),
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
pub(crate) fn check_request(
    f: &ForwardAuth,
    req: &RequestParts<'_>,
    scheme: &str,
    client_ip: IpAddr,
) -> Result<RequestHead, InternalError> {
    let mut fields = Vec::with_capacity(16);
    let named_by_connection: Vec<&[u8]> = req
        .header_values("connection")
        .flat_map(|v| v.split(|&b| b == b','))
        .map(<[u8]>::trim_ascii)
        .filter(|t| !t.is_empty())
        .collect();
    for (name, value) in req.headers() {
        let hop = named_by_connection.iter().any(|n| n.eq_ignore_ascii_case(name));
        if f.sends_header(name) && !(hop && f.request_headers.is_none()) {
            fields.push((name.to_vec(), value.to_vec()));
        }
    }
    let mut uri = req.path.to_vec();
    if !req.query.is_empty() {
        uri.push(b'?');
        uri.extend_from_slice(req.query);
    }
    let forwarded: [(&[u8], Vec<u8>); 5] = [
        (b"x-forwarded-method", req.method.to_vec()),
        (b"x-forwarded-proto", scheme.as_bytes().to_vec()),
        (b"x-forwarded-host", req.header("host").unwrap_or(req.host).to_vec()),
        (b"x-forwarded-uri", uri),
        (b"x-forwarded-for", client_ip.to_string().into_bytes()),
    ];
    fields.extend(forwarded.into_iter().map(|(name, value)| (name.to_vec(), value)));
    let endpoint = &f.endpoint;
    client::request_head(
        b"GET",
        endpoint.host_header.as_bytes(),
        endpoint.path.as_bytes(),
        fields,
    )
}

/// The service's answer out of the client's outcome. A 2xx says yes with its head: a body that
/// was too large or cut short does not matter then.
fn answer_of(result: Result<Collected, InternalError>) -> Result<ServiceAnswer, InternalError> {
    let response = match result {
        Ok(response) => response,
        Err(e) if e.status().is_some_and(|s| (200..300).contains(&s)) => {
            let mut answer = Collected::default();
            answer.head.status = e.status().unwrap_or(200);
            answer
        }
        Err(e) => return Err(e),
    };
    let status = response.status();
    if status == 101 || status < 200 {
        return Err(InternalError::NoResponse(HttpError::UpstreamBadResponse));
    }
    let allowed = (200..300).contains(&status);
    let fields: Vec<(&[u8], &[u8])> = response.head.fields_ref().iter().collect();
    Ok(ServiceAnswer {
        status,
        headers: end_to_end_fields(&fields),
        body: if allowed { Vec::new() } else { response.body },
    })
}

/// The end-to-end fields of a response head (hop-by-hop ones, those its `Connection` names, and
/// `Content-Length` left out), names lower-case.
fn end_to_end_fields(fields: &[(&[u8], &[u8])]) -> Vec<(String, String)> {
    let named: Vec<&[u8]> = fields
        .iter()
        .filter(|(name, _)| name.eq_ignore_ascii_case(b"connection"))
        .flat_map(|(_, value)| value.split(|&b| b == b','))
        .map(<[u8]>::trim_ascii)
        .collect();
    fields
        .iter()
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
