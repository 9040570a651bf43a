//! What is known about one request as it goes through the phases (route, pick, send, respond,
//! stream, log): the per-request context that the access log reads and that survives a
//! cancellation by the whole-request timeout.

use std::time::{Duration, Instant, SystemTime};

use super::attempts::AttemptLog;
use super::error::{ErrorSource, HttpError};

/// One request's facts.
#[derive(Debug, Clone)]
pub struct RequestContext {
    /// When the request began: its first bytes were there to read.
    pub began: Instant,
    /// The wall-clock time it began; read only when the request is logged.
    pub logged_at: Option<SystemTime>,
    /// The route taken: an index into the listener's routes.
    pub route: Option<usize>,
    /// The upstream and target chosen (indices into the snapshot the request was routed with).
    pub upstream: Option<usize>,
    pub target: Option<usize>,
    /// The status the client got; 0 until a response head has left.
    pub status: u16,
    /// Response bytes written to the client (see [`super::downstream::Downstream::bytes_sent`]).
    pub bytes_out: u64,
    /// Of those, the response body's (nginx's `$body_bytes_sent`).
    pub body_bytes_out: u64,
    /// From sending the request to having the response head.
    pub upstream_time: Option<Duration>,
    /// What each attempt at the upstream did (1 plus the retries).
    pub attempts: AttemptLog,
    /// What went wrong, if anything.
    pub error: Option<HttpError>,
    /// Why a filter answered in place of the route (the access log's `error` when nothing
    /// failed), e.g. `rate_limited`.
    pub filter_reason: Option<&'static str>,
    /// Whether the client connection can take another request.
    pub keep_client: bool,
    /// The request has no body, so it was read in full with its head: an error of the upstream
    /// side can be answered without closing the client connection (as nginx does).
    pub bodyless: bool,
    /// When the client stops waiting (gRPC's `grpc-timeout`), if it said.
    pub deadline: Option<Instant>,
    /// What a route's cache did for the request.
    pub cache: Option<rampart_model::cache::CacheOutcome>,
    /// Its trace context, with `[tracing]` on (shared with the heads written for its attempts).
    pub trace: Option<std::rc::Rc<super::trace::RequestTrace>>,
}

impl RequestContext {
    /// A context for a request beginning now, logged when `logged`.
    pub fn new(logged: bool) -> Self {
        RequestContext {
            began: Instant::now(),
            logged_at: logged.then(SystemTime::now),
            route: None,
            upstream: None,
            target: None,
            status: 0,
            bytes_out: 0,
            body_bytes_out: 0,
            upstream_time: None,
            attempts: AttemptLog::default(),
            error: None,
            filter_reason: None,
            keep_client: true,
            bodyless: false,
            deadline: None,
            cache: None,
            trace: None,
        }
    }

    /// Whether a response head has gone to the client (after which no other answer can).
    pub fn responded(&self) -> bool {
        self.status != 0
    }

    /// Records a failure that ends the client connection (as [`RequestContext::blame`] names it).
    pub fn fail(&mut self, error: HttpError) {
        self.error = Some(self.blame(error));
        self.keep_client = false;
    }

    /// The failure as the client is told it: an upstream failure once the client's own deadline
    /// has passed is the deadline (a gRPC server resets the stream with CANCEL when its copy of
    /// the deadline runs out, which can be a moment before Rampart's timer fires), not the
    /// upstream's fault.
    pub fn blame(&self, error: HttpError) -> HttpError {
        match self.deadline {
            Some(at) if error.source() == ErrorSource::Upstream && Instant::now() >= at => HttpError::RequestTimeout,
            _ => error,
        }
    }
}
