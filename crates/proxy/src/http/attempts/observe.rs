//! The one place that hears of a request's attempts and of its end, and feeds what reads them:
//! the in-flight gauges and the balancer's load ([`attempt_started`]), the response metrics,
//! latency, outlier detection and the balancer's pass-over ([`attempt_responded`]), the error
//! metrics and outlier detection again for an attempt that failed ([`attempt_ended`]), the retry
//! budget's account of requests in flight ([`exchange_started`]), and a failure after the
//! response head was on its way, which is the target's too ([`request_ended`]). The access log
//! reads the same record ([`super::AttemptLog`]) when the request is logged; the filters' per-attempt
//! phases are called beside these by the exchange. A pinned request (an internal one, a health
//! check: [`ProxyRequest::pinned`]) is recorded in its context and counted nowhere else.

use std::time::Duration;

use rampart_model::health::ms_at;
use rampart_model::metrics::{code_class, TargetCells, UpstreamCells};
use rampart_model::outlier::BadOutcome;
use rampart_model::{Snapshot, Target, Upstream};

use super::{Attempt, AttemptEnd};
use crate::http::context::RequestContext;
use crate::http::error::HttpError;
use crate::http::exchange::ProxyRequest;
use crate::worker::WorkerContext;

/// A request counted in flight by its upstream's retry budget, until the exchange ends, however
/// it ends.
pub(crate) struct InBudget<'a>(&'a UpstreamCells);

impl Drop for InBudget<'_> {
    fn drop(&mut self) {
        self.0.retry_tokens.end();
    }
}

/// The exchange of a request with `up` begins: it counts in the retry budget's base.
pub(crate) fn exchange_started<'a>(up: &Upstream, cells: &'a UpstreamCells) -> InBudget<'a> {
    cells.retry_tokens.begin(&up.http.retry_budget);
    InBudget(cells)
}

/// An attempt in flight to a target: in its `active` gauge, and for the balancers that look at
/// load, until it is dropped.
pub(crate) struct InFlight<'a> {
    ctx: &'a WorkerContext,
    snapshot: &'a Snapshot,
    upstream: usize,
    target: usize,
    cells: Option<&'a TargetCells>,
    load: bool,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if let Some(cells) = self.cells {
            cells.active.down();
        }
        if self.load {
            self.ctx.track_open(self.snapshot, self.upstream, self.target, false);
        }
    }
}

/// An attempt of `req` begins at `attempt.target` (recorded in `rctx`'s attempts).
pub(crate) fn attempt_started<'a>(
    ctx: &'a WorkerContext,
    req: &ProxyRequest<'a>,
    rctx: &mut RequestContext,
    mut attempt: Attempt,
) -> InFlight<'a> {
    if let Some(trace) = &rctx.trace {
        // The heads written from now on name this attempt's span.
        trace.attempt_begins(usize::from(rctx.attempts.made()));
        if trace.recording {
            let connect = attempt.connect.unwrap_or_default();
            attempt.began_us = Some(micros_since(rctx.began, connect));
        }
    }
    rctx.attempts.begin(attempt);
    rctx.target = Some(attempt.target);
    let up = req.up;
    let counted = req.counted();
    let cells = up
        .targets
        .get(attempt.target)
        .filter(|_| counted)
        .map(|t| t.metrics.worker(ctx.id));
    if let Some(cells) = cells {
        cells.active.up();
        if attempt.reused {
            cells.reused.add(1);
        }
    }
    let load = counted && up.policy.uses_load();
    if load {
        ctx.track_open(req.snapshot, req.upstream, attempt.target, true);
    }
    InFlight {
        ctx,
        snapshot: req.snapshot,
        upstream: req.upstream,
        target: attempt.target,
        cells,
        load,
    }
}

/// The response head of the attempt going on came with `status` at `now`, `took` after the
/// request was sent: the upstream's response time, the target's responses by class and latency,
/// the balancer's latency, the outcome for outlier detection; a status `retry_on` names has this
/// worker's next requests pass the target over for a while.
pub(crate) fn attempt_responded(
    ctx: &WorkerContext,
    req: &ProxyRequest<'_>,
    rctx: &mut RequestContext,
    status: u16,
    (took, now): (Duration, std::time::Instant),
) {
    rctx.attempts.responded(status, took);
    rctx.upstream_time = Some(took);
    if !req.counted() {
        return;
    }
    let up = req.up;
    up.metrics.worker(ctx.id).response_duration.observe(took);
    let Some(index) = rctx.target else { return };
    if let Some(target) = up.targets.get(index) {
        let cells = target.metrics.worker(ctx.id);
        cells.responses[code_class(status)].add(1);
        cells.latency.observe(took, ms_at(now));
    }
    if up.policy.uses_latency() {
        ctx.observe_latency(req.snapshot, req.upstream, index, took);
    }
    let slow = || {
        up.outlier
            .and_then(|p| p.slow_response)
            .is_some_and(|limit| took > limit)
    };
    let bad = if status >= 500 {
        Some(BadOutcome::Status5xx)
    } else if slow() {
        Some(BadOutcome::SlowResponse)
    } else {
        None
    };
    observe_outcome(ctx, up, index, bad);
    if req.retry_on.status(status) {
        ctx.pass_over(req.snapshot, req.upstream, index);
    }
}

/// The attempt going on failed with `error` (as the client would be told it) before a response
/// head reached the client, `took` after it began (measured only for a latency-aware balancer,
/// its one reader): recorded, counted in the target's error metrics (when it is the target's
/// failure) and by outlier detection, and, for that balancer, the time it took. An attempt whose
/// response head came already (a status dropped for a retry) has its end recorded.
pub(crate) fn attempt_ended(
    ctx: &WorkerContext,
    req: &ProxyRequest<'_>,
    rctx: &mut RequestContext,
    error: HttpError,
    took: Duration,
) {
    let Some(attempt) = rctx.attempts.last().copied() else {
        return;
    };
    if attempt.end != AttemptEnd::Open {
        return;
    }
    rctx.attempts.failed(error);
    if rctx.trace.as_ref().is_some_and(|t| t.recording) {
        rctx.attempts.ended_at(micros_since(rctx.began, Duration::ZERO));
    }
    if !req.counted() {
        return;
    }
    count_target_error(ctx, req.up, attempt.target, error);
    if req.up.policy.uses_latency() {
        ctx.observe_latency(req.snapshot, req.upstream, attempt.target, took);
    }
}

/// A connect to `target` failed inside one attempt (the connect moved on to another target):
/// recorded as an attempt of its own (marked retried when the next attempt begins). Its metrics were counted where the
/// connect failed ([`crate::connect::connect_upstream`]).
pub(crate) fn connect_failed(rctx: &mut RequestContext, target: usize, error: HttpError, took: Duration) {
    let mut attempt = Attempt::new(target, false, Some(took));
    attempt.end = AttemptEnd::Failed(error);
    if rctx.trace.as_ref().is_some_and(|t| t.recording) {
        attempt.began_us = Some(micros_since(rctx.began, took));
        attempt.ended_us = Some(micros_since(rctx.began, Duration::ZERO));
    }
    rctx.attempts.begin(attempt);
}

/// Microseconds from `began` to `before` ago (a span's offset in its request).
fn micros_since(began: std::time::Instant, before: Duration) -> u32 {
    let now = std::time::Instant::now();
    now.checked_sub(before)
        .unwrap_or(now)
        .saturating_duration_since(began)
        .as_micros()
        .min(u128::from(u32::MAX)) as u32
}

/// The request ends. A failure after its response head had left (a body cut short, a timeout
/// while it streamed) is the answering target's: counted in its error metrics and by outlier
/// detection, as a failure before the head is.
pub(crate) fn request_ended(ctx: &WorkerContext, snapshot: &Snapshot, rctx: &RequestContext) {
    let (Some(error), Some(upstream)) = (rctx.error, rctx.upstream) else {
        return;
    };
    let Some(answered) = rctx.attempts.last().filter(|a| a.status().is_some()) else {
        return;
    };
    if let Some(up) = snapshot.upstreams.get(upstream) {
        count_target_error(ctx, up, answered.target, error);
    }
}

/// Counts a failure of `target` in its error metrics (when it is the target's), and as a gateway
/// failure for outlier detection.
fn count_target_error(ctx: &WorkerContext, up: &Upstream, target: usize, error: HttpError) {
    if let (Some(kind), Some(t)) = (error.target_error(), up.targets.get(target)) {
        t.metrics.worker(ctx.id).error(kind).add(1);
        observe_outcome(ctx, up, target, Some(BadOutcome::GatewayFailure));
    }
}

/// Outlier detection's view of one attempt at `target`: bad (`Some`: a 5xx, a gateway failure,
/// a slow response) or good. A bad one that completes a streak ejects the target (logged,
/// counted); without outlier detection the streak is only counted, for the admin API.
#[inline]
fn observe_outcome(ctx: &WorkerContext, up: &Upstream, target: usize, bad: Option<BadOutcome>) {
    let Some(t) = up.targets.get(target) else { return };
    let Some(why) = bad else {
        t.health.outlier_success();
        return;
    };
    observe_bad_outcome(ctx, up, t, why);
}

/// [`observe_outcome`] of a bad outcome, out of the line of the good ones.
#[inline(never)]
fn observe_bad_outcome(ctx: &WorkerContext, up: &Upstream, t: &Target, why: BadOutcome) {
    let Some(policy) = &up.outlier else {
        t.health.bad_outcome();
        return;
    };
    let ejected = || up.targets.iter().filter(|t| t.health.is_ejected()).count();
    if let Some(time) = t.health.outlier_failure(policy, up.targets.len(), ejected, why) {
        t.metrics.worker(ctx.id).ejections.add(1);
        tracing::warn!(
            upstream = up.name.as_str(),
            target = t.name.as_str(),
            reason = why.as_str(),
            "upstream {}: target {} ejected for {time:?} after {} bad outcomes in a row (5xx, gateway failures{}; the last: {})",
            up.name,
            t.name,
            policy.consecutive,
            if policy.slow_response.is_some() {
                ", slow responses"
            } else {
                ""
            },
            why.as_str()
        );
    }
}
