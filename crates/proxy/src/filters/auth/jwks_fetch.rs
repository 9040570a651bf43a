//! Fetching a `jwt` filter's JWKS document, on the control plane's runtime (never in a worker).
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
//! The request is one `GET` over HTTP/1.1 with `Connection: close` (TLS through rustls for
//! `https://`), through [`super::subrequest`]: a `Content-Length` or chunked body of at most
//! `max_body` bytes, or one that runs to the close.

use std::future::poll_fn;
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

use super::subrequest::{self, SubrequestError};

/// The longest wait after a failure.
const MAX_RETRY: Duration = Duration::from_secs(60);

/// Why a fetch gave no key set. Messages hold no document content.
#[derive(Debug, thiserror::Error)]
pub enum JwksFetchError {
    /// No usable answer (connect, TLS, a bad or cut response, a document over `max_body`).
    #[error(transparent)]
    Request(#[from] SubrequestError),
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

/// One GET of the document (no time limit of its own: [`run_jwks_fetch`] bounds it by
/// `timeout`).
pub async fn fetch_jwks(fetch: &JwksFetch) -> Result<JwksDocument, JwksFetchError> {
    let endpoint = &fetch.endpoint;
    let mut stream = subrequest::connect(endpoint, fetch.tls.as_ref()).await?;
    let request = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nAccept: application/jwk-set+json, application/json\r\nUser-Agent: rampart-jwks\r\nConnection: close\r\n\r\n",
        endpoint.path, endpoint.host_header
    );
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(SubrequestError::Io)?;

    let mut buf = Vec::with_capacity(4096);
    let mut fields = Vec::new();
    let head = subrequest::read_response_head(&mut stream, &mut buf, &mut fields).await?;
    if head.status != 200 {
        return Err(JwksFetchError::Status(head.status));
    }
    let max_age = fields
        .iter()
        .filter(|f| f.name(&buf).eq_ignore_ascii_case(b"cache-control"))
        .find_map(|f| max_age(f.value(&buf)));
    let rest = buf.split_off(head.len);
    let body = subrequest::read_body(&mut stream, head.framing, rest, fetch.max_body).await?;
    Ok(JwksDocument {
        body: body.bytes,
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
/// share a URL share its key source, and so one task). Dropping (or aborting) the set stops them,
/// as a reload does before starting the new set; the key sources outlive it (the config keeps
/// them across reloads), so the keys fetched so far stay in use until the new tasks replace them.
pub fn spawn_jwks_fetches(snapshot: &Snapshot) -> JoinSet<()> {
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
        set.spawn(run_jwks_fetch(fetch.clone(), jwt.keys.clone()));
    }
    set
}

/// Keeps `source` filled from `fetch`'s URL, forever (until dropped). Spawn it on the control
/// plane's runtime.
pub async fn run_jwks_fetch(fetch: JwksFetch, source: Arc<JwtKeySource>) {
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
        let result = match tokio::time::timeout(fetch.timeout, fetch_jwks(&fetch)).await {
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
