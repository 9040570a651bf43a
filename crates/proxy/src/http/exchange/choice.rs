//! Where an attempt goes and whether another follows: the next target (a request slot under
//! `max_requests_per_target`, the upstream's queue, the sticky cookie's target), whether a
//! response status may be dropped for a retry, the retry budget, and what outlier detection
//! makes of an attempt's outcome.

use std::borrow::Cow;

use rampart_model::health::TargetHealth;
use rampart_model::metrics::UpstreamCells;
use rampart_model::queue::RequestQueue;
use rampart_model::retry::RetryOn;
use rampart_model::route::HeaderOps;
use rampart_model::sticky::StickyCookie;
use rampart_model::Upstream;

use super::{Exchange, ProxyRequest};
use crate::balance::Tried;
use crate::http::downstream::Downstream;
use crate::http::error::HttpError;
use crate::log_summary::EventKey;

/// How often the request at the front of an upstream's queue looks for room without being woken
/// (a target's room can come back without a slot given back: its ejection ends, a reload).
const QUEUE_LOOK: std::time::Duration = std::time::Duration::from_millis(10);

/// A request slot at a target whose upstream limits requests per target, given back when the
/// attempt ends (waking the request first in the upstream's queue).
pub(super) struct Slot<'a> {
    health: &'a TargetHealth,
    queue: &'a RequestQueue,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.health.release();
        self.queue.wake_front();
    }
}

/// What one look for a target under `max_requests_per_target` found.
enum Look<'a> {
    Slot(usize, Slot<'a>),
    /// Every target there is is full.
    Full,
    /// No target to pick at all: not a matter of limits.
    NoTarget,
}

impl<'e, D: Downstream> Exchange<'e, '_, D> {
    /// The target of the next attempt (`again`, else the sticky cookie's, else the balancer's),
    /// with its request slot when the upstream limits requests per target: a full target is
    /// passed over, and when every target is full (or others wait already) the request waits in
    /// the upstream's queue, first come first served (a retry at the front), until a slot given
    /// back wakes it, or fails with 503 when the queue is full or the wait runs out. `Ok(None)`:
    /// no target to pick at all.
    pub(super) async fn next_target(
        &self,
        again: Option<usize>,
    ) -> Result<Option<(usize, Option<Slot<'e>>)>, HttpError> {
        let req: &'e ProxyRequest<'_> = self.req;
        if let Some(pinned) = req.pinned {
            // Its one target, down or not, outside the limits; again only when asked.
            return Ok(again.or(self.tried.is_empty().then_some(pinned)).map(|t| (t, None)));
        }
        let up: &'e Upstream = req.up;
        let first = again.or_else(|| self.sticky_pick());
        // A request's first attempt takes the balancer's turn; a retry's does not.
        let fresh = self.tried.is_empty();
        let pick = |excluded: &Tried| self.ctx.pick(req.snapshot, req.upstream, req.hash_key, excluded, fresh);
        let Some(limits) = &up.limits else {
            return Ok(first.or_else(|| pick(&self.tried)).map(|t| (t, None)));
        };
        let queue: &'e RequestQueue = &limits.queue;
        let look = || {
            let mut full = self.tried;
            let mut next = first;
            while let Some(t) = next.take().or_else(|| pick(&full)) {
                // (A pick is always one of the upstream's targets.)
                let Some(health) = up.targets.get(t).map(|t| &t.health) else {
                    break;
                };
                if health.try_acquire(limits.per_target) {
                    return Look::Slot(t, Slot { health, queue });
                }
                if full.contains(t) || full.len() == Tried::CAPACITY {
                    break;
                }
                full.push(t);
            }
            if full.len() == self.tried.len() && first.is_none() {
                Look::NoTarget
            } else {
                Look::Full
            }
        };
        // A retry waited its turn once already: it looks at once and, when every target is full,
        // lines up at the front.
        let retry = !self.tried.is_empty();
        if retry || queue.is_empty() {
            match look() {
                Look::Slot(t, slot) => return Ok(Some((t, Some(slot)))),
                Look::NoTarget => return Ok(None),
                Look::Full => {}
            }
        }
        let cells = self.cells;
        let Some(place) = queue.join(limits.queue_size, retry) else {
            cells.queue_full.add(1);
            self.ctx
                .log_summary
                .warn_until_quiet(EventKey::queue_refused(&up.name, false));
            return Err(HttpError::QueueFull);
        };
        cells.queued.add(1);
        let deadline = tokio::time::Instant::now() + limits.queue_timeout;
        // The wait, for the request's span (however it ends).
        let _waited = self.rctx.trace.as_deref().filter(|t| t.recording).map(QueueWait::begin);
        loop {
            let mut no_target = false;
            let taken = place.take_or_line_up(|| match look() {
                Look::Slot(t, slot) => Some((t, slot)),
                Look::Full => None,
                Look::NoTarget => {
                    no_target = true;
                    None
                }
            });
            if let Some((t, slot)) = taken {
                return Ok(Some((t, Some(slot))));
            }
            if no_target {
                return Ok(None);
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                cells.queue_timeout.add(1);
                self.ctx
                    .log_summary
                    .warn_until_quiet(EventKey::queue_refused(&up.name, true));
                return Err(HttpError::QueueTimeout);
            }
            // Only the first in line looks again now and then; the others wait for their wake.
            let wait = if place.is_first() {
                (deadline - now).min(QUEUE_LOOK)
            } else {
                deadline - now
            };
            // Woken, or the wait for a wake is over: look again (unless others are before it).
            let _ = tokio::time::timeout(wait, place.woken()).await;
        }
    }

    /// The target the sticky cookie names, for the first attempt, while it is available (else the
    /// balancer picks, and the response names the new target).
    fn sticky_pick(&self) -> Option<usize> {
        let target = self.req.sticky_target.filter(|_| self.tried.is_empty())?;
        let up = self.req.upstream();
        up.targets.get(target)?.health.is_available().then_some(target)
    }

    /// What this attempt may drop a response for, to retry (`retry_on`'s statuses): only while
    /// retries are left for a request safe to repeat (and only if its body is still kept once
    /// it is sent: the attempt checks). Whether another target and the budget allow a retry is
    /// decided when the response head is in ([`StatusRetry::drops`]), so that the last try's
    /// response goes to the client as it is.
    pub(super) fn status_retry(&self) -> Option<StatusRetry<'e>> {
        let on = self.req.retry_on;
        // (A pinned request has no other target to drop a response for.)
        if !on.any_status() || self.retries_left == 0 || self.req.pinned.is_some() {
            return None;
        }
        // The body may still be lost past the limit as it is sent: the attempt asks again then.
        if !(self.method_repeatable() && self.kept.replayable(self.req)) {
            return None;
        }
        // Targets this request has been to, this attempt's included.
        let mut tried = self.tried;
        if let Some(current) = self.rctx.target {
            tried.push(current);
        }
        let up: &'e Upstream = self.req.up;
        Some(StatusRetry {
            on,
            up,
            cells: self.cells,
            tried,
        })
    }

    /// Whether the request's method lets it go again after a failure `retry_on` names:
    /// idempotent, or any with `non-idempotent`.
    fn method_repeatable(&self) -> bool {
        self.req.idempotent || self.req.retry_on.non_idempotent
    }

    /// Whether a request that failed with `error` may go again: an outcome `retry_on` names (a
    /// reset or a failed write before any response byte, a timeout waiting for the head, a
    /// status) for a request safe to repeat (its method, and its body: none, or kept whole so
    /// far); or a stream the upstream refused unprocessed, for any request whose body is kept.
    pub(super) fn retry_allowed(&self, error: HttpError) -> bool {
        let on = self.req.retry_on;
        let replayable = self.kept.replayable(self.req);
        let repeatable = self.method_repeatable() && replayable;
        match error {
            HttpError::UpstreamRefused => replayable,
            HttpError::UpstreamReset | HttpError::UpstreamWriteFailed { .. } => on.reset && repeatable,
            HttpError::UpstreamTimeout => on.timeout && repeatable,
            // Raised only when a retry may follow ([`Exchange::status_retry`]).
            HttpError::UpstreamStatus { .. } => repeatable,
            _ => false,
        }
    }

    /// Takes a retry from the budget; `false` (counted) when it has none.
    pub(super) fn take_budget(&mut self) -> bool {
        take_retry(self.req.upstream(), self.cells)
    }
}

/// A retry from `up`'s budget in this worker's account `cells`; `false` (counted) when it has none.
fn take_retry(up: &Upstream, cells: &UpstreamCells) -> bool {
    if cells.retry_tokens.withdraw(&up.http.retry_budget) {
        return true;
    }
    cells.retries_over_budget.add(1);
    false
}

/// Whether `up` has an available target outside `tried` (a retry could go there now).
fn another_target(up: &Upstream, tried: &Tried) -> bool {
    up.targets
        .iter()
        .enumerate()
        .any(|(i, t)| !tried.contains(i) && t.health.is_available())
}

/// The statuses an attempt may drop its response for, and what decides whether it does.
#[derive(Clone, Copy)]
pub(super) struct StatusRetry<'a> {
    on: RetryOn,
    up: &'a Upstream,
    cells: &'a UpstreamCells,
    /// The targets the request has been to, this attempt's included.
    tried: Tried,
}

impl StatusRetry<'_> {
    /// Whether a response with `status` is dropped for a retry: `retry_on` names it, a target
    /// the request has not been to is available now, and the budget gives the retry (taken now).
    /// Otherwise the response goes to the client: when no further target can be tried, the last
    /// received response is passed on.
    pub(super) fn drops(&self, status: u16) -> bool {
        self.on.status(status) && another_target(self.up, &self.tried) && take_retry(self.up, self.cells)
    }
}

/// The target of `up` that the request's sticky cookie names (`cookie` reads a cookie of the
/// request by name), when the upstream has `sticky_cookie`.
pub fn sticky_target<'a>(up: &Upstream, cookie: impl FnOnce(&str) -> Option<&'a [u8]>) -> Option<usize> {
    let sticky = up.sticky.as_ref()?;
    let id = StickyCookie::parse(cookie(&sticky.name)?)?;
    up.targets.iter().position(|t| StickyCookie::id(&up.name, t.addr) == id)
}

/// The header edits of a response of `status`: the route's, and a sticky cookie naming the
/// target that answered when the request's cookie did not already name it.
pub(super) fn response_edits<'a>(req: &ProxyRequest<'a>, target: Option<usize>, status: u16) -> Cow<'a, HeaderOps> {
    let up = req.upstream();
    let route = req.response_ops.for_status(status);
    match (&up.sticky, target.and_then(|t| Some((t, up.targets.get(t)?)))) {
        (Some(sticky), Some((t, target))) if req.sticky_target != Some(t) => {
            let mut ops = route.clone();
            let id = StickyCookie::id(&up.name, target.addr);
            ops.add.push(("set-cookie".to_string(), sticky.set_cookie(id)));
            Cow::Owned(ops)
        }
        _ => Cow::Borrowed(route),
    }
}

/// A request's wait in its upstream's queue, recorded in its trace when it ends.
struct QueueWait<'a>(&'a crate::http::trace::RequestTrace, std::time::Instant);

impl<'a> QueueWait<'a> {
    fn begin(trace: &'a crate::http::trace::RequestTrace) -> Self {
        QueueWait(trace, std::time::Instant::now())
    }
}

impl Drop for QueueWait<'_> {
    fn drop(&mut self) {
        self.0.queued.set(Some((self.1, std::time::Instant::now())));
    }
}
