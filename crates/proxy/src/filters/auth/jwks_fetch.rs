//! Fetching a `jwt` filter's JWKS document, on the control plane's context (the thread of the
//! health checks, [`crate::background`]; never in a worker).
//!
//! [`run_jwks_fetch`] is one task per key source: it installs a waker on the source, fetches the
//! document at once, publishes each new key set, and loops:
//!
//! - **on schedule**: `refresh` after a success, or the answer's `Cache-Control: max-age` held
//!   within `min_refresh` and `refresh`;
//! - **early**, when a worker calls [`JwtKeySource::request_refresh`] (a token with an unknown
//!   `kid`: the issuer may have rotated its keys), but never sooner than `min_refresh` after the
//!   previous fetch, so forged `kid`s cannot turn into a flood of fetches;
//! - **after a failure** (connect, TLS, status other than 200, body too large, a document with no
//!   usable key), again after `retry`, doubling per failure up to `refresh` (at most a minute),
//!   keeping the last good set meanwhile. An outage is logged once when it starts and once when
//!   it ends, with the number of failed attempts, not once per attempt.
//!
//! A document identical to the last one publishes nothing, so workers' verified-token caches
//! survive a refresh that changed nothing. The task ends when it is dropped (a reload aborts the
//! old filters' tasks), and takes its waker off the source as it goes.
//!
//! The request is one `GET` through the internal client ([`crate::http::client::send`]) to the
//! upstream of Rampart's own that the config compiler made for the URL ([`JwksFetch::upstream`]):
//! pooled connections, TLS for `https://` (HTTP/2 when the server offers it), the URL's host
//! asked of DNS by the control plane, a body of at most `max_body` bytes, one resend on a stale
//! pooled connection.

use std::future::poll_fn;
use std::rc::Rc;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use futures_util::task::AtomicWaker;
use rampart_model::filter::jwt::{JwksError, JwksFetch, JwtKeySet, JwtKeySource};
use rampart_model::filter::Filter;
use rampart_model::Snapshot;
use sha2::{Digest, Sha256};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::http::client::{self, InternalError, InternalOptions};
use crate::worker::WorkerContext;

/// The longest wait after a failure.
const MAX_RETRY: Duration = Duration::from_secs(60);

/// Why a fetch gave no key set. Messages hold no document content.
#[derive(Debug, thiserror::Error)]
pub enum JwksFetchError {
    /// The fetch has no upstream to go to (a fetch the config compiler did not make).
    #[error("no upstream for the URL")]
    NoUpstream,
    /// No usable answer (connect, TLS, a bad or cut response, a document over `max_body`).
    #[error(transparent)]
    Request(#[from] InternalError),
    #[error("status {0}")]
    Status(u16),
    #[error("no answer within {0:?}")]
    TimedOut(Duration),
    #[error("{0}")]
    Document(#[from] JwksError),
}

/// A fetched document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JwksDocument {
    pub body: Vec<u8>,
    /// `Cache-Control: max-age`, when the answer has one.
    pub max_age: Option<Duration>,
}

/// One GET of the document, through the internal client on `ctx` with `snapshot` (no time limit
/// of its own: [`run_jwks_fetch`] bounds it by `timeout`).
pub async fn fetch_jwks(
    ctx: &WorkerContext,
    snapshot: &Snapshot,
    fetch: &JwksFetch,
) -> Result<JwksDocument, JwksFetchError> {
    let upstream = fetch.upstream.ok_or(JwksFetchError::NoUpstream)?;
    let endpoint = &fetch.endpoint;
    let fields: [(&[u8], &[u8]); 2] = [
        (b"accept", b"application/jwk-set+json, application/json"),
        (b"user-agent", b"rampart-jwks"),
    ];
    let request = client::request_head(
        b"GET",
        endpoint.host_header.as_bytes(),
        endpoint.path.as_bytes(),
        fields,
    );
    let request = request?;
    let options = InternalOptions {
        retries: 1,
        ..InternalOptions::new("jwks", fetch.max_body)
    };
    let response = match client::send(ctx, snapshot, upstream, &request, None, &options).await {
        Ok(response) => response,
        Err(e) => match e.status() {
            Some(status) if status != 200 => return Err(JwksFetchError::Status(status)),
            _ => return Err(e.into()),
        },
    };
    if response.status() != 200 {
        return Err(JwksFetchError::Status(response.status()));
    }
    let max_age = response
        .head
        .fields_ref()
        .iter()
        .filter(|(name, _)| name.eq_ignore_ascii_case(b"cache-control"))
        .find_map(|(_, value)| max_age(value));
    Ok(JwksDocument {
        body: response.body,
        max_age,
    })
}

/// `max-age=N` of a `Cache-Control` value.
fn max_age(value: &[u8]) -> Option<Duration> {
    let value = std::str::from_utf8(value).ok()?;
    value.split(',').find_map(|directive| {
        let (name, secs) = directive.trim().split_once('=')?;
        if !name.trim().eq_ignore_ascii_case("max-age") {
            return None;
        }
        secs.trim().trim_matches('"').parse().ok().map(Duration::from_secs)
    })
}

/// When the next fetch is due, given how the last ones went.
#[derive(Debug, Clone)]
pub struct FetchSchedule {
    refresh: Duration,
    min_refresh: Duration,
    retry: Duration,
    /// Failures in a row.
    failures: u32,
    /// When the last fetch started.
    last_attempt: Option<Instant>,
    /// When the next fetch is due without an early request.
    due: Instant,
}

impl FetchSchedule {
    /// A schedule whose first fetch is due at `now`.
    pub fn new(fetch: &JwksFetch, now: Instant) -> Self {
        FetchSchedule {
            refresh: fetch.refresh.max(fetch.min_refresh),
            min_refresh: fetch.min_refresh,
            retry: fetch.retry,
            failures: 0,
            last_attempt: None,
            due: now,
        }
    }

    /// When the next fetch is due without an early request.
    pub fn due(&self) -> Instant {
        self.due
    }

    /// The soonest an early request may be served: `min_refresh` after the last fetch began.
    pub fn earliest(&self) -> Instant {
        match self.last_attempt {
            Some(at) => at + self.min_refresh,
            None => self.due,
        }
    }

    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// A fetch begins.
    pub fn started(&mut self, now: Instant) {
        self.last_attempt = Some(now);
    }

    /// The fetch that began last succeeded at `now`; `max_age` from its answer.
    pub fn succeeded(&mut self, now: Instant, max_age: Option<Duration>) {
        self.failures = 0;
        let wait = max_age.map_or(self.refresh, |age| age.max(self.min_refresh).min(self.refresh));
        self.due = now + wait;
    }

    /// The fetch that began last failed at `now`.
    pub fn failed(&mut self, now: Instant) {
        self.failures = self.failures.saturating_add(1);
        let doubling = 1u32 << (self.failures - 1).min(16);
        let wait = self.retry.saturating_mul(doubling).min(self.refresh.min(MAX_RETRY));
        self.due = now + wait;
    }
}

/// Takes the waker off the source when the task ends.
struct WakerGuard<'a>(&'a JwtKeySource);

impl Drop for WakerGuard<'_> {
    fn drop(&mut self) {
        self.0.set_refresh_waker(None);
    }
}

/// Starts one fetching task per JWKS URL that the `jwt` filters of `snapshot` name (filters that
/// share a URL share its key source, and so one task), on `ctx` (local tasks: call it inside the
/// `LocalSet` of `ctx`'s thread). Dropping (or aborting) the set stops them, as a reload does
/// before starting the new set; the key sources outlive it (the config keeps them across
/// reloads), so the keys fetched so far stay in use until the new tasks replace them.
pub fn spawn_jwks_fetches(ctx: &Rc<WorkerContext>, snapshot: &Snapshot) -> JoinSet<()> {
    let mut set = JoinSet::new();
    let mut started: Vec<*const JwtKeySource> = Vec::new();
    let jwts = snapshot.http_filters().filter_map(|f| match f {
        Filter::Jwt(jwt) => Some(jwt),
        _ => None,
    });
    for jwt in jwts {
        let Some(fetch) = &jwt.jwks else { continue };
        if started.contains(&Arc::as_ptr(&jwt.keys)) {
            continue;
        }
        started.push(Arc::as_ptr(&jwt.keys));
        set.spawn_local(run_jwks_fetch(ctx.clone(), fetch.clone(), jwt.keys.clone()));
    }
    set
}

/// Keeps `source` filled from `fetch`'s URL, forever (until dropped), each fetch sent on `ctx`
/// with its snapshot current then (new DNS answers change the upstream's targets in place).
pub async fn run_jwks_fetch(ctx: Rc<WorkerContext>, fetch: JwksFetch, source: Arc<JwtKeySource>) {
    let wake = Arc::new(AtomicWaker::new());
    let waker = wake.clone();
    source.set_refresh_waker(Some(Box::new(move || waker.wake())));
    let _guard = WakerGuard(&source);
    let url = fetch.endpoint.log_url();
    let mut schedule = FetchSchedule::new(&fetch, Instant::now());
    let mut last_document: Option<[u8; 32]> = None;
    loop {
        next_turn(&source, &wake, &schedule).await;
        source.take_refresh_request();
        let started = Instant::now();
        schedule.started(started);
        let snapshot = ctx.snapshot();
        let result = match tokio::time::timeout(fetch.timeout, fetch_jwks(&ctx, &snapshot, &fetch)).await {
            Ok(Ok(doc)) => accept(&doc, &mut last_document, &source, &url).map(|()| doc.max_age),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(JwksFetchError::TimedOut(fetch.timeout)),
        };
        let now = Instant::now();
        match result {
            Ok(max_age) => {
                if schedule.failures() > 0 {
                    tracing::info!(
                        url = url.as_str(),
                        failures = schedule.failures(),
                        "JWKS fetch works again after {} failed attempt(s)",
                        schedule.failures()
                    );
                }
                schedule.succeeded(now, max_age);
            }
            Err(e) => {
                schedule.failed(now);
                let keys = source.current().keys.len();
                if schedule.failures() == 1 {
                    tracing::warn!(
                        url = url.as_str(),
                        "JWKS fetch failed: {e}; keeping the current key set ({keys} key(s)), retrying"
                    );
                } else {
                    tracing::debug!(
                        url = url.as_str(),
                        failures = schedule.failures(),
                        "JWKS fetch failed again: {e}"
                    );
                }
            }
        }
    }
}

/// Publishes the document's key set unless it is the one already published.
fn accept(
    doc: &JwksDocument,
    last_document: &mut Option<[u8; 32]>,
    source: &JwtKeySource,
    url: &str,
) -> Result<(), JwksFetchError> {
    let digest: [u8; 32] = Sha256::digest(&doc.body).into();
    if *last_document == Some(digest) {
        return Ok(());
    }
    let keys = JwtKeySet::from_jwks(&doc.body)?;
    for note in keys.skipped() {
        tracing::warn!(url, "JWKS: {note}");
    }
    let count = keys.len();
    let generation = source.publish(keys);
    *last_document = Some(digest);
    tracing::info!(url, keys = count, generation, "JWKS key set loaded");
    Ok(())
}

/// Waits until the schedule's due time, or an early request once `min_refresh` has passed.
async fn next_turn(source: &JwtKeySource, wake: &AtomicWaker, schedule: &FetchSchedule) {
    let requested = poll_fn(|cx| {
        wake.register(cx.waker());
        if source.refresh_requested() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    });
    tokio::select! {
        _ = tokio::time::sleep_until(schedule.due()) => return,
        _ = requested => {}
    }
    tokio::time::sleep_until(schedule.earliest().min(schedule.due())).await;
}

#[cfg(test)]
mod tests;
