//! The HTTP filter model: what a filter is ([`HttpFilter`]), what it sees ([`RequestParts`],
//! [`ResponseParts`], [`TrailerParts`], [`FilterCx`]), what it can say
//! ([`Verdict`], [`Answer`], [`Rejection`]), and how a route's chain runs ([`FilterRun`],
//! [`FilteredDownstream`]).
//!
//! Phases, in the order a request meets them:
//!
//! 1. **request head** (async): answer at once ([`Verdict::Respond`]), edit the head (path,
//!    header edits), pick another upstream, or ask to see the body. Filters run in chain order;
//!    the first answer stops the chain.
//! 2. **upstream request** (sync): the target is chosen (upstream, backend address); the head
//!    about to go to it may be read and its header fields edited (the same [`RequestParts`],
//!    with [`RequestParts::attempt`] set).
//!    Once per attempt: a retry runs it again, on the head as it was before any edit.
//! 3. **request body** (sync, only when a filter asked with [`RequestParts::inspect_body`]): each
//!    run of payload bytes before it goes upstream; a [`Rejection`] ends the request.
//! 4. **request trailers** (sync, with the body phase): as the request body ends, its trailer
//!    fields (none for most requests), which a filter may read and edit before they go upstream.
//! 5. **response head** (sync): every response, the upstream's and Rampart's own answers alike,
//!    runs through the filters that let the request through, in reverse order (the onion:
//!    the first filter sees the response last). Edit headers, or ask to transform the body.
//! 6. **response body** (sync, only when a filter asked with [`ResponseParts::transform_body`]):
//!    each run of payload bytes, which a filter may replace (compression).
//! 7. **response trailers** (sync): as a proxied or static response's body ends.
//! 8. **log**: once the request is done, with its outcome.
//!
//! What a filter keeps beyond one request lives in its slot on each worker
//! ([`HttpFilter::WorkerState`], reached through [`FilterWorker`]: an index the config compiler
//! allocated, kept across reloads that leave the filter as it was). What one filter learns for
//! later ones goes into the request's [`Extensions`], keyed by type.
//!
//! A route without filters runs none of this: no allocation, no dispatch. Built-in filters are
//! dispatched with a `match` over [`rampart_model::filter::Filter`]; filters registered from
//! outside go through [`external`] (a trait object). The proxy-wasm ABI maps onto these phases
//! one to one (see docs/design.md).

use std::borrow::Cow;
use std::net::{IpAddr, SocketAddr};

use rampart_model::net::IpNet;
use rampart_model::Snapshot;

mod attempt;
mod downstream;
mod extensions;
pub mod external;
mod parts;
mod run;
mod slots;

pub use attempt::UpstreamAttempt;
pub use downstream::FilteredDownstream;
pub use extensions::Extensions;
pub use parts::{AttemptTo, RequestParts, ResponseParts, TrailerParts};
pub use run::FilterRun;
pub(crate) use run::FilterState;
pub(crate) use run::Where;
pub use slots::{FilterWorker, WorkerSlots};

/// A filter: per-request state, per-worker state, and up to seven phases, each with a default
/// that does nothing.
///
/// Filters are shared by every worker (they live in the snapshot); anything they keep per
/// request is [`HttpFilter::State`], anything per worker [`HttpFilter::WorkerState`] (reached
/// with [`FilterWorker::with_state`] through [`FilterCx::worker`]).
// Workers are single-threaded: the futures need not be `Send`.
#[allow(async_fn_in_trait)]
pub trait HttpFilter {
    /// What the filter keeps about one request, from its request head to its log line.
    type State: Default;

    /// What the filter keeps on each worker across requests (a cache, connections, counters):
    /// made with `Default` on first use, kept across reloads that leave the filter's definition
    /// as it was (type, settings, files read), started over when they change it. `()` for a
    /// filter that keeps nothing.
    type WorkerState: Default + 'static;

    /// The request head: go on, or answer. May edit `req`. Waiting here (an auth call, a Redis
    /// round trip) holds only this request.
    async fn request_head(
        &self,
        cx: &mut FilterCx<'_>,
        state: &mut Self::State,
        req: &mut RequestParts<'_>,
    ) -> Verdict {
        let _ = (cx, state, req);
        Verdict::Continue
    }

    /// A run of request body payload bytes about to go upstream (`end`: the body ends with it).
    /// Called only when a filter asked for it with [`RequestParts::inspect_body`].
    fn request_body(
        &self,
        cx: &mut FilterCx<'_>,
        state: &mut Self::State,
        chunk: &[u8],
        end: bool,
    ) -> Result<(), Rejection> {
        let _ = (cx, state, chunk, end);
        Ok(())
    }

    /// The request head about to go to the target chosen for it: read the upstream's and the
    /// target's names and address and the head, edit its header fields (sign it for the
    /// backend). Runs once per attempt, in chain order, after the target is chosen and before
    /// the head leaves: a retry runs it again, on the head as it was before this phase's edits.
    /// Not for requests a filter or the route answered. The view is the request head's
    /// ([`RequestParts`]) with [`RequestParts::attempt`] set: its header edits apply to the head
    /// as written for this attempt ([`RequestParts::sent_headers`]), and refuse the fields that
    /// frame the message or belong to the connection.
    fn upstream_request(&self, cx: &mut FilterCx<'_>, state: &mut Self::State, req: &mut RequestParts<'_>) {
        let _ = (cx, state, req);
    }

    /// The response head of one attempt came from the upstream, before anything is decided about
    /// it (relayed, dropped for a retry, a tunnel): read what the attempt did. Runs once per
    /// attempt that got a head, in chain order. Not for requests a filter or the route answered.
    fn upstream_response(&self, cx: &mut FilterCx<'_>, state: &mut Self::State, attempt: &UpstreamAttempt<'_>) {
        let _ = (cx, state, attempt);
    }

    /// One attempt failed before any of its response reached the client (a connect, a reset, a
    /// timeout; whether a retry follows is in [`Attempt::retried_for`] once it is decided, so
    /// read it at the log phase). Runs once per failed attempt, in chain order.
    ///
    /// [`Attempt::retried_for`]: crate::http::attempts::Attempt::retried_for
    fn upstream_error(&self, cx: &mut FilterCx<'_>, state: &mut Self::State, attempt: &UpstreamAttempt<'_>) {
        let _ = (cx, state, attempt);
    }

    /// A response head on its way to the client (the upstream's, or an answer of Rampart's own).
    fn response_head(&self, cx: &mut FilterCx<'_>, state: &mut Self::State, resp: &mut ResponseParts<'_>) {
        let _ = (cx, state, resp);
    }

    /// A run of response body payload bytes in `body`, which the filter may replace; `end`: the
    /// last call (`body` may be empty then). Called only when a filter asked with
    /// [`ResponseParts::transform_body`].
    fn response_body(
        &self,
        cx: &mut FilterCx<'_>,
        state: &mut Self::State,
        body: &mut Vec<u8>,
        end: bool,
    ) -> Result<(), Rejection> {
        let _ = (cx, state, body, end);
        Ok(())
    }

    /// The request's trailers, as its body ends on its way upstream (`trailers` is empty when
    /// none came: a filter may add some, which reach upstreams that can take them: HTTP/2, or
    /// HTTP/1.1 with a body of unknown length). Runs with the request body phase (when a filter
    /// asked with [`RequestParts::inspect_body`]), in chain order.
    fn request_trailers(&self, cx: &mut FilterCx<'_>, state: &mut Self::State, trailers: &mut TrailerParts<'_>) {
        let _ = (cx, state, trailers);
    }

    /// The response's trailers, as its body ends (`trailers` is empty when none came: a filter
    /// may add some, which reach clients that can take them). Runs as each proxied or static
    /// response ends (not for answers of Rampart's own), last filter first.
    fn response_trailers(&self, cx: &mut FilterCx<'_>, state: &mut Self::State, trailers: &mut TrailerParts<'_>) {
        let _ = (cx, state, trailers);
    }

    /// The request is over.
    fn log(&self, cx: &mut FilterCx<'_>, state: &mut Self::State, outcome: &Outcome) {
        let _ = (cx, state, outcome);
    }
}

/// What a filter decides about a request head.
#[derive(Debug)]
pub enum Verdict {
    /// Go on: the next filter, then the route's action.
    Continue,
    /// Answer the client now; later filters and the route's action are skipped.
    Respond(Answer),
}

/// An answer a filter gives in place of the route's.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    /// Header fields (names lower-case).
    pub headers: Vec<(Cow<'static, str>, String)>,
    pub body: Cow<'static, [u8]>,
    /// Why the request was refused, for the access log's `error` field (`rate_limited`,
    /// `jwt_expired`, ...); `None` for an answer that is no refusal (a CORS preflight).
    pub reason: Option<&'static str>,
}

impl Answer {
    /// An answer with the plain body `STATUS Reason: detail`.
    pub fn plain(status: u16, reason: &'static str, detail: &str) -> Answer {
        let phrase = crate::http::local::reason(status);
        let body = match detail {
            "" => format!("{status} {phrase}\n"),
            detail => format!("{status} {phrase}: {detail}\n"),
        };
        Answer {
            status,
            headers: Vec::new(),
            body: Cow::Owned(body.into_bytes()),
            reason: Some(reason),
        }
    }

    /// Adds a header field.
    pub fn with_header(mut self, name: impl Into<Cow<'static, str>>, value: impl Into<String>) -> Answer {
        self.headers.push((name.into(), value.into()));
        self
    }
}

/// A body phase's refusal: the request fails with `status` (when no response byte has left yet;
/// otherwise the connection closes), `reason` in the access log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rejection {
    pub status: u16,
    pub reason: &'static str,
}

/// What a filter knows besides the message: where the request runs and what earlier filters
/// found out about it.
pub struct FilterCx<'a> {
    /// The worker, as far as filters see it: its id, random numbers, the filter's own
    /// per-worker state.
    pub worker: FilterWorker<'a>,
    /// The whole worker, for the built-ins that send requests of their own through the internal
    /// client ([`crate::http::client`]: `forward_auth`).
    pub(crate) context: &'a crate::worker::WorkerContext,
    pub snapshot: &'a Snapshot,
    pub listener: &'a str,
    pub route: &'a str,
    /// The route's position in its listener (a key for per-route state).
    pub route_index: usize,
    /// The address the connection came from (after a PROXY header).
    pub peer: SocketAddr,
    /// The scheme the client used: `http`, or `https` over TLS.
    pub scheme: &'static str,
    pub facts: &'a mut RequestFacts,
}

/// What filters learn about a request and share with later filters and the access log.
#[derive(Debug, Clone)]
pub struct RequestFacts {
    /// The client's address as filters see it: the peer, or from `X-Forwarded-For` when the
    /// peer is one of the listener's `trusted_proxies`.
    pub client_ip: IpAddr,
    /// The request id (`request_id`), logged.
    pub request_id: Option<String>,
    /// Who the request was authenticated as (user, key name, token subject), logged.
    pub user: Option<String>,
    /// What filters leave for later filters, by type: the verified JSON Web Token (`jwt`, as an
    /// `Rc<VerifiedToken>` shared with the worker's cache) that a `rate_limit` keyed on a claim
    /// reads.
    pub extensions: Extensions,
}

impl Default for RequestFacts {
    fn default() -> Self {
        RequestFacts {
            client_ip: IpAddr::from([0, 0, 0, 0]),
            request_id: None,
            user: None,
            extensions: Extensions::default(),
        }
    }
}

/// How a request ended, for the log phase.
#[derive(Debug, Clone, Copy)]
pub struct Outcome {
    /// The status the client got (0: none).
    pub status: u16,
    /// Response bytes written to the client.
    pub bytes_out: u64,
    pub duration: std::time::Duration,
    /// Why it failed, if it did (the access log's `error`).
    pub error: Option<&'static str>,
}

/// The client address filters see: the peer's, unless the peer is one of `trusted` (the
/// listener's `trusted_proxies`); then the right-most `X-Forwarded-For` entry outside `trusted`
/// (the left-most entry when all of them are trusted; the last trusted one before an entry that
/// is not an address).
pub(crate) fn client_ip(peer: IpAddr, trusted: &[IpNet], req: &RequestParts<'_>) -> IpAddr {
    let is_trusted = |ip: IpAddr| trusted.iter().any(|n| n.contains(ip));
    if trusted.is_empty() || !is_trusted(peer) {
        return peer;
    }
    let mut client = peer;
    let fields: Vec<&[u8]> = req.header_values("x-forwarded-for").collect();
    for value in fields.iter().rev() {
        for entry in value.rsplit(|&b| b == b',') {
            let Some(ip) = std::str::from_utf8(entry)
                .ok()
                .and_then(|e| e.trim().parse::<IpAddr>().ok())
            else {
                return client;
            };
            client = ip;
            if !is_trusted(ip) {
                return ip;
            }
        }
    }
    client
}

#[cfg(test)]
mod tests;
