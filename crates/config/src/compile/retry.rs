//! An upstream's `retry_on`, `retry_budget` and `outlier_detection`: what it does with failures
//! of its real traffic.

use rampart_model::outlier::OutlierDetection;
use rampart_model::retry::{RequestLimits, RetryBudget, RetryOn, RouteRetry};
use toml::Spanned;

use super::Checker;
use crate::raw::{RawOutlierDetection, RawRetryBudget, RawRoute, RawUpstream};

/// What `retry_on` takes, for the error that lists it.
const KINDS: &str = "\"reset\", \"timeout\", \"5xx\", \"gateway-error\" (502, 503, 504), a status from 400 to 599, or \"non-idempotent\"";

impl Checker<'_> {
    /// `retry_on = [...]`: the outcomes tried again besides connect failures (the list replaces
    /// the default, `["reset"]`).
    pub(super) fn retry_on(&mut self, raw: &Spanned<Vec<Spanned<String>>>) -> RetryOn {
        let mut on = RetryOn::none();
        for item in raw.get_ref() {
            match item.get_ref().trim().to_ascii_lowercase().as_str() {
                "reset" => on.reset = true,
                "timeout" => on.timeout = true,
                "non-idempotent" => on.non_idempotent = true,
                "5xx" => (500..=599).for_each(|s| on.add_status(s)),
                "gateway-error" => [502, 503, 504].into_iter().for_each(|s| on.add_status(s)),
                other => match other.parse::<u16>() {
                    Ok(status) if (400..=599).contains(&status) => on.add_status(status),
                    _ => self.error(
                        item.span(),
                        format!("retry_on: `{}` is not one of {KINDS}", item.get_ref()),
                    ),
                },
            }
        }
        on
    }

    /// A route's own `retries` and `retry_on` (for routes that proxy); `None` after an error.
    pub(super) fn route_retry(&mut self, route: &str, r: &RawRoute, proxies: bool) -> Option<RouteRetry> {
        let spans = [
            r.retries.as_ref().map(Spanned::span),
            r.retry_on.as_ref().map(Spanned::span),
        ];
        if let (false, Some(span)) = (proxies, spans.into_iter().flatten().next()) {
            self.error(
                span,
                format!("route `{route}`: `retries` and `retry_on` are for routes that proxy"),
            );
            return None;
        }
        Some(RouteRetry {
            retries: r.retries.as_ref().and_then(|n| self.count(n, "retries", 0, 8)),
            retry_on: r.retry_on.as_ref().map(|on| self.retry_on(on)),
        })
    }

    /// `retry_budget = { percent = 20, min_retries_per_second = 10 }`.
    pub(super) fn retry_budget(&mut self, raw: &RawRetryBudget) -> RetryBudget {
        let d = RetryBudget::default();
        if let Some(old) = &raw.min_retrying {
            self.error(
                old.span(),
                "retry_budget: `min_retrying` is gone (the budget is a rate now): use \
                 `min_retries_per_second`, the retries a second each worker may make besides the \
                 `percent` of its requests",
            );
        }
        let percent = raw
            .percent
            .as_ref()
            .and_then(|p| self.count(p, "retry_budget percent", 0, 100));
        let floor = raw
            .min_retries_per_second
            .as_ref()
            .and_then(|m| self.count(m, "retry_budget min_retries_per_second", 0, 1_000_000));
        RetryBudget {
            percent: percent.map_or(d.percent, |p| p as u32),
            min_retries_per_second: floor.map_or(d.min_retries_per_second, |m| m as u32),
        }
    }

    /// `outlier_detection = { consecutive_5xx = 5, ... }`.
    pub(super) fn outlier_detection(&mut self, raw: &RawOutlierDetection) -> OutlierDetection {
        let d = OutlierDetection::default();
        let consecutive = raw
            .consecutive_5xx
            .as_ref()
            .and_then(|c| self.count(c, "consecutive_5xx", 1, 1000));
        let percent = raw
            .max_ejection_percent
            .as_ref()
            .and_then(|p| self.count(p, "max_ejection_percent", 1, 100));
        let base_ejection = self.duration(&raw.base_ejection_time, d.base_ejection);
        let max_ejection = self.duration(&raw.max_ejection_time, d.max_ejection);
        if let (Some(span), true) = (
            raw.max_ejection_time.as_ref().map(Spanned::span),
            max_ejection < base_ejection,
        ) {
            self.error(span, "max_ejection_time is shorter than base_ejection_time");
        }
        OutlierDetection {
            consecutive: consecutive.map_or(d.consecutive, |c| c as u32),
            slow_response: raw
                .slow_response
                .is_some()
                .then(|| self.duration(&raw.slow_response, std::time::Duration::ZERO)),
            base_ejection,
            max_ejection: max_ejection.max(base_ejection),
            max_ejection_percent: percent.map_or(d.max_ejection_percent, |p| p as u32),
        }
    }

    /// `max_requests_per_target` and `queue = { size = 1000, timeout = "5s" }` (the queue's
    /// defaults; a queue without a limit is an error at it).
    pub(super) fn request_limits(&mut self, up: &RawUpstream) -> Option<RequestLimits> {
        let Some(max) = &up.max_requests_per_target else {
            if let Some(queue) = &up.queue {
                self.error(
                    queue.span(),
                    "`queue` needs `max_requests_per_target`: the queue holds requests over it",
                );
            }
            return None;
        };
        let per_target = self.count(max, "max_requests_per_target", 1, 1_000_000)? as u32;
        let queue = up.queue.as_ref().map(Spanned::get_ref);
        let size = queue
            .and_then(|q| q.size.as_ref())
            .map_or(Some(1000), |s| self.count(s, "queue size", 0, 1_000_000))?;
        let timeout = queue.map_or(std::time::Duration::from_secs(5), |q| {
            self.duration(&q.timeout, std::time::Duration::from_secs(5))
        });
        Some(RequestLimits {
            per_target,
            queue_size: size as u32,
            queue_timeout: timeout,
            queue: Default::default(),
        })
    }
}
