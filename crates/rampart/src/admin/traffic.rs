//! The workers' traffic counters summed over workers, for a scrape, the JSON API and the status
//! page's history. Reading never writes: each worker's cells are loaded, never reset, so totals
//! only grow (a reload that keeps a name keeps its cells).

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use rampart_model::metrics::{Count, HistogramTotal, PeakEwma, PerWorker};
use rampart_model::Snapshot;
use serde::Serialize;

/// The route label of an HTTP listener's requests that matched no route (and of requests whose
/// head could not be read).
pub const UNROUTED: &str = "(unrouted)";

/// The route label of a TCP listener's connections that went to its default (no route took
/// them).
pub const TCP_DEFAULT: &str = "(default)";

/// Every traffic figure of the running config, summed over workers.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TrafficTotals {
    pub listeners: Vec<ListenerTotals>,
    /// Routes of HTTP listeners, each listener's [`UNROUTED`] requests last.
    pub routes: Vec<RouteTotals>,
    /// Routes of TCP listeners, each listener's [`TCP_DEFAULT`] last.
    pub tcp_routes: Vec<TcpRouteTotals>,
    pub upstreams: Vec<UpstreamTotals>,
    /// The HTTP cache stores routes use, by name, with their counts.
    #[serde(skip)]
    pub caches: Vec<super::caches::TierStats>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct TcpRouteTotals {
    pub listener: String,
    pub route: String,
    /// Connections the route took.
    pub connections: u64,
    /// Of those, the ones no route decided before `peek_timeout` or `peek_max` ([`TCP_DEFAULT`]).
    pub undecided: u64,
    /// Connections a payload filter closed.
    pub filter_closes: u64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct ListenerTotals {
    pub name: String,
    /// `tcp` or `http`.
    pub protocol: &'static str,
    pub accepted: u64,
    /// Open connections now (all workers).
    pub active: u64,
    /// By reason: `limit`, `proxy_header`, `tls` (see [`rampart_model::metrics::RefusedReason`]).
    pub refused: [u64; 3],
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// TCP listeners only.
    #[serde(skip)]
    pub session_duration: HistogramTotal,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct RouteTotals {
    pub listener: String,
    pub route: String,
    /// By status class `1xx` to `5xx`.
    pub requests: [u64; 5],
    #[serde(skip)]
    pub duration: HistogramTotal,
    /// On a route with a `cache`: requests by what it did (`CACHE_OUTCOMES`).
    #[serde(skip)]
    pub cache: [u64; 5],
    /// The route has a `cache`.
    #[serde(skip)]
    pub caches: bool,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct UpstreamTotals {
    pub name: String,
    pub retries: u64,
    /// Retries not made: the retry budget was spent.
    pub retries_over_budget: u64,
    /// Requests that waited in the queue; answered 503 because it was full, or their wait ran out.
    pub queued: u64,
    pub queue_full: u64,
    pub queue_timeout: u64,
    /// Copies sent to it as a route's mirror, and those that got no response head.
    pub mirrored: u64,
    pub mirror_failed: u64,
    /// Requests (503) and TCP connections that found no available target.
    pub no_target: u64,
    #[serde(skip)]
    pub response_duration: HistogramTotal,
    pub targets: Vec<TargetTotals>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct TargetTotals {
    pub name: String,
    /// Responses by status class `1xx` to `5xx`.
    pub responses: [u64; 5],
    /// By kind: `connect`, `reset`, `timeout`, `bad_response`, `tls`.
    pub errors: [u64; 5],
    pub opened: u64,
    pub reused: u64,
    /// Times outlier detection ejected it.
    pub ejections: u64,
    /// HTTP requests in flight, or TCP sessions relayed, now.
    pub active: u64,
    /// The peak-EWMA response time of the worker that saw a response last.
    pub latency_ewma: Option<std::time::Duration>,
}

impl TargetTotals {
    /// Its failures: errors of every kind and 5xx responses (which retries and outlier
    /// detection treat as failures too).
    pub fn failures(&self) -> u64 {
        self.errors.iter().sum::<u64>() + self.responses[4]
    }
}

impl TrafficTotals {
    /// Sums every worker's cells of `snapshot`'s listeners, routes, upstreams and targets.
    pub fn read(snapshot: &Snapshot) -> TrafficTotals {
        let mut totals = TrafficTotals::default();
        for listener in snapshot.listeners.iter() {
            let cells = &listener.metrics;
            let mut session_duration = HistogramTotal::default();
            cells
                .iter()
                .for_each(|c| c.session_duration.add_to(&mut session_duration));
            totals.listeners.push(ListenerTotals {
                name: listener.name.clone(),
                protocol: super::state::listener_protocol(listener),
                accepted: sum(cells, |c| &c.accepted),
                active: listener.open_connections.load(Relaxed) as u64,
                refused: std::array::from_fn(|i| sum(cells, |c| &c.refused[i])),
                bytes_in: sum(cells, |c| &c.bytes_in),
                bytes_out: sum(cells, |c| &c.bytes_out),
                session_duration,
            });
            if let Some(routing) = listener.tcp_routing() {
                let named = routing.routes.iter().map(|r| (r.name.as_str(), &r.metrics));
                let all = named.chain(std::iter::once((TCP_DEFAULT, &routing.default_metrics)));
                let mut seen: Vec<*const PerWorker<_>> = Vec::new();
                for (route, cells) in all {
                    if seen.contains(&Arc::as_ptr(cells)) {
                        continue;
                    }
                    seen.push(Arc::as_ptr(cells));
                    totals.tcp_routes.push(TcpRouteTotals {
                        listener: listener.name.clone(),
                        route: route.to_string(),
                        connections: sum(cells, |c| &c.connections),
                        undecided: sum(cells, |c| &c.undecided),
                        filter_closes: sum(cells, |c| &c.filter_closes),
                    });
                }
            }
            let Some(http) = listener.http() else { continue };
            let named = http.routes.iter().map(|r| (r.name.as_str(), &r.metrics));
            let mut seen: Vec<*const PerWorker<_>> = Vec::new();
            for (route, cells) in named.chain(std::iter::once((UNROUTED, &http.unrouted))) {
                // Two routes with one name share their cells: report them once.
                if seen.contains(&Arc::as_ptr(cells)) {
                    continue;
                }
                seen.push(Arc::as_ptr(cells));
                let mut duration = HistogramTotal::default();
                cells.iter().for_each(|c| c.duration.add_to(&mut duration));
                totals.routes.push(RouteTotals {
                    listener: listener.name.clone(),
                    route: route.to_string(),
                    requests: std::array::from_fn(|i| sum(cells, |c| &c.requests[i])),
                    duration,
                    cache: std::array::from_fn(|i| sum(cells, |c| &c.cache[i])),
                    caches: http.routes.iter().any(|r| r.name == route && r.cache.is_some()),
                });
            }
        }
        // (Rampart's own upstreams are not traffic the admin side shows.)
        for upstream in snapshot.upstreams.iter().filter(|u| !u.is_internal()) {
            let cells = &upstream.metrics;
            let mut response_duration = HistogramTotal::default();
            cells
                .iter()
                .for_each(|c| c.response_duration.add_to(&mut response_duration));
            let targets = upstream
                .targets
                .iter()
                .map(|t| {
                    let cells = &t.metrics;
                    TargetTotals {
                        name: t.name.clone(),
                        responses: std::array::from_fn(|i| sum(cells, |c| &c.responses[i])),
                        errors: std::array::from_fn(|i| sum(cells, |c| &c.errors[i])),
                        opened: sum(cells, |c| &c.opened),
                        reused: sum(cells, |c| &c.reused),
                        ejections: sum(cells, |c| &c.ejections),
                        active: cells.iter().fold(0i64, |s, c| s.wrapping_add(c.active.get())).max(0) as u64,
                        latency_ewma: PeakEwma::freshest(cells.iter().map(|c| &c.latency)),
                    }
                })
                .collect();
            totals.upstreams.push(UpstreamTotals {
                name: upstream.name.clone(),
                retries: sum(cells, |c| &c.retries),
                retries_over_budget: sum(cells, |c| &c.retries_over_budget),
                queued: sum(cells, |c| &c.queued),
                queue_full: sum(cells, |c| &c.queue_full),
                queue_timeout: sum(cells, |c| &c.queue_timeout),
                mirrored: sum(cells, |c| &c.mirrored),
                mirror_failed: sum(cells, |c| &c.mirror_failed),
                no_target: sum(cells, |c| &c.no_target),
                response_duration,
                targets,
            });
        }
        totals.caches = super::caches::store_stats(snapshot);
        totals
    }
}

/// The sum over workers of one counter of a cell.
fn sum<C>(set: &PerWorker<C>, counter: impl Fn(&C) -> &Count) -> u64 {
    set.iter().fold(0u64, |s, c| s.wrapping_add(counter(c).get()))
}

/// The `q` quantile (0 to 1) of a histogram's observations, interpolated linearly inside the
/// bucket it falls in (as PromQL's `histogram_quantile` does); `None` without observations. An
/// answer in the `+Inf` bucket is the largest finite bound.
pub fn quantile(histogram: &HistogramTotal, bounds: &[f64], q: f64) -> Option<f64> {
    let count = histogram.count();
    if count == 0 {
        return None;
    }
    let rank = q.clamp(0.0, 1.0) * count as f64;
    let mut below = 0u64;
    for (i, &n) in histogram.buckets.iter().enumerate() {
        if n > 0 && (below + n) as f64 >= rank {
            let Some(&upper) = bounds.get(i) else {
                return bounds.last().copied();
            };
            let lower = if i == 0 { 0.0 } else { bounds[i - 1] };
            let within = (rank - below as f64) / n as f64;
            return Some(lower + (upper - lower) * within);
        }
        below += n;
    }
    bounds.last().copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate_inside_buckets() {
        let bounds = [0.1, 0.2, 0.4];
        let h = HistogramTotal {
            buckets: vec![0, 10, 0, 0],
            sum_nanos: 0,
        };
        let p50 = quantile(&h, &bounds, 0.5).unwrap();
        assert!((p50 - 0.15).abs() < 1e-9, "{p50}");
        let inf = HistogramTotal {
            buckets: vec![0, 0, 0, 3],
            sum_nanos: 0,
        };
        assert_eq!(quantile(&inf, &bounds, 0.99), Some(0.4));
        assert_eq!(quantile(&HistogramTotal::default(), &bounds, 0.5), None);
    }
}
