//! The last 15 minutes of traffic, for the status page: the admin thread reads the counters
//! every [`INTERVAL`] and keeps the readings in a ring; `GET /api/history` turns consecutive
//! readings into rates and latency percentiles per listener, route and upstream. Workers are
//! never involved: a reading only loads their counters.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use arc_swap::ArcSwap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rampart_model::metrics::{HistogramTotal, LATENCY_BOUNDS, SESSION_BOUNDS};
use serde::Serialize;

use super::state::AdminShared;
use super::traffic::{quantile, TrafficTotals};

/// Time between readings.
pub const INTERVAL: Duration = Duration::from_secs(5);
/// Readings kept: 15 minutes of intervals, and the reading they start from.
const KEPT: usize = 15 * 60 / 5 + 1;

/// One reading of the counters.
#[derive(Debug, Clone)]
pub struct Reading {
    pub at: Instant,
    /// Unix seconds.
    pub wall: f64,
    pub totals: TrafficTotals,
}

/// The ring of readings. Written every few seconds by one task, read by admin requests: a new
/// ring (of pointers) is published for each reading.
#[derive(Debug, Default)]
pub struct History {
    readings: ArcSwap<VecDeque<Arc<Reading>>>,
}

impl Reading {
    /// A reading of the counters of the snapshot in force now.
    pub fn now(shared: &AdminShared) -> Reading {
        Reading {
            at: Instant::now(),
            wall: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs_f64(),
            totals: TrafficTotals::read(&shared.snapshot.load()),
        }
    }
}

impl History {
    /// Takes a reading and keeps it.
    pub fn record(&self, shared: &AdminShared) {
        self.push(Reading::now(shared));
    }

    fn push(&self, reading: Reading) {
        let reading = Arc::new(reading);
        self.readings.rcu(|old| {
            let mut ring = VecDeque::clone(old);
            if ring.len() == KEPT {
                ring.pop_front();
            }
            ring.push_back(reading.clone());
            ring
        });
    }

    /// The readings, oldest first.
    pub fn readings(&self) -> Vec<Arc<Reading>> {
        self.readings.load().iter().cloned().collect()
    }

    /// The oldest reading no older than `age` (the closest to `age` ago), if any.
    pub fn since(&self, age: Duration) -> Option<Arc<Reading>> {
        self.readings.load().iter().find(|r| r.at.elapsed() <= age).cloned()
    }
}

/// Takes a reading every [`INTERVAL`] (after the one of the start), on the admin thread, for as
/// long as the process runs.
pub async fn sample(shared: Arc<AdminShared>) {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + INTERVAL, INTERVAL);
    loop {
        tick.tick().await;
        shared.history.record(&shared);
    }
}

/// `GET /api/history`: column-oriented series, one value per interval.
#[derive(Debug, Serialize, PartialEq)]
pub struct HistoryView {
    pub interval_seconds: u64,
    /// The end of each interval, Unix seconds, oldest first.
    pub times: Vec<f64>,
    pub series: Vec<Series>,
}

#[derive(Debug, Serialize, PartialEq)]
pub struct Series {
    /// `listener`, `route` or `upstream`.
    pub kind: &'static str,
    /// The listener's or upstream's name; `LISTENER/ROUTE` for a route.
    pub name: String,
    /// Requests per second (connections per second on a TCP listener).
    pub rps: Vec<Option<f64>>,
    /// 5xx answers per second (HTTP); refused connections per second (TCP listener); failed
    /// attempts, 5xx responses and requests or connections that found no available target (the
    /// 503s of an upstream whose targets are all down) per second (upstream).
    pub errors_per_s: Vec<Option<f64>>,
    /// 4xx answers per second (HTTP listener and route), 4xx responses per second (upstream);
    /// always 0 on a TCP listener.
    pub client_errors_per_s: Vec<Option<f64>>,
    /// Request time (HTTP), session time (TCP listener), or response time (upstream).
    pub p50_ms: Vec<Option<f64>>,
    pub p99_ms: Vec<Option<f64>>,
}

/// The figures of one series in one reading.
#[derive(Debug, Clone, Default)]
struct Point {
    requests: u64,
    errors: u64,
    client_errors: u64,
    latency: HistogramTotal,
}

impl Point {
    fn add(&mut self, requests: u64, errors: u64, client_errors: u64, latency: &HistogramTotal) {
        self.requests += requests;
        self.errors += errors;
        self.client_errors += client_errors;
        if self.latency.buckets.len() < latency.buckets.len() {
            self.latency.buckets.resize(latency.buckets.len(), 0);
        }
        for (total, n) in self.latency.buckets.iter_mut().zip(&latency.buckets) {
            *total += n;
        }
        self.latency.sum_nanos += latency.sum_nanos;
    }
}

type Key = (&'static str, String);

/// Every series' point in one reading, and which bucket bounds its latency uses.
fn points(totals: &TrafficTotals) -> Vec<(Key, &'static [f64], Point)> {
    let mut out: Vec<(Key, &'static [f64], Point)> = Vec::new();
    for l in &totals.listeners {
        let mut point = Point::default();
        let bounds: &'static [f64] = if l.protocol != "http" {
            point.add(l.accepted, l.refused.iter().sum(), 0, &l.session_duration);
            &SESSION_BOUNDS
        } else {
            for r in totals.routes.iter().filter(|r| r.listener == l.name) {
                point.add(r.requests.iter().sum(), r.requests[4], r.requests[3], &r.duration);
            }
            &LATENCY_BOUNDS
        };
        out.push((("listener", l.name.clone()), bounds, point));
    }
    for r in &totals.routes {
        let mut point = Point::default();
        point.add(r.requests.iter().sum(), r.requests[4], r.requests[3], &r.duration);
        out.push((("route", format!("{}/{}", r.listener, r.route)), &LATENCY_BOUNDS, point));
    }
    for u in &totals.upstreams {
        let mut point = Point::default();
        let responses: u64 = u.targets.iter().map(|t| t.responses.iter().sum::<u64>()).sum();
        let errors: u64 = u
            .targets
            .iter()
            .map(|t| t.errors.iter().sum::<u64>() + t.responses[4])
            .sum::<u64>()
            + u.no_target;
        let client_errors: u64 = u.targets.iter().map(|t| t.responses[3]).sum();
        point.add(responses, errors, client_errors, &u.response_duration);
        out.push((("upstream", u.name.clone()), &LATENCY_BOUNDS, point));
    }
    out
}

/// Rates and percentiles between consecutive readings; the series are those of the newest
/// reading (a series missing from a reading has `null` there).
pub fn view(readings: &[Arc<Reading>]) -> HistoryView {
    let mut view = HistoryView {
        interval_seconds: INTERVAL.as_secs(),
        times: Vec::new(),
        series: Vec::new(),
    };
    let Some(newest) = readings.last() else {
        return view;
    };
    let all: Vec<HashMap<Key, Point>> = readings
        .iter()
        .map(|r| points(&r.totals).into_iter().map(|(k, _, p)| (k, p)).collect())
        .collect();
    for ((kind, name), bounds, _) in points(&newest.totals) {
        view.series.push(Series {
            kind,
            name,
            rps: Vec::new(),
            errors_per_s: Vec::new(),
            client_errors_per_s: Vec::new(),
            p50_ms: Vec::new(),
            p99_ms: Vec::new(),
        });
        let series = view.series.last_mut().expect("just pushed");
        let key = (kind, series.name.clone());
        for (i, pair) in readings.windows(2).enumerate() {
            let seconds = pair[1].at.saturating_duration_since(pair[0].at).as_secs_f64();
            let (before, after) = (all[i].get(&key), all[i + 1].get(&key));
            let Some((after, seconds)) = after.zip((seconds > 0.0).then_some(seconds)) else {
                series.rps.push(None);
                series.errors_per_s.push(None);
                series.client_errors_per_s.push(None);
                series.p50_ms.push(None);
                series.p99_ms.push(None);
                continue;
            };
            // A series new in this interval started from zero.
            let zero = Point::default();
            let before = before.unwrap_or(&zero);
            let latency = HistogramTotal {
                buckets: after
                    .latency
                    .buckets
                    .iter()
                    .enumerate()
                    .map(|(b, n)| n.saturating_sub(before.latency.buckets.get(b).copied().unwrap_or(0)))
                    .collect(),
                sum_nanos: after.latency.sum_nanos.saturating_sub(before.latency.sum_nanos),
            };
            let ms = |q| quantile(&latency, bounds, q).map(|s| round(s * 1000.0));
            series.rps.push(Some(round(
                after.requests.saturating_sub(before.requests) as f64 / seconds,
            )));
            let per_s = |a: u64, b: u64| Some(round(a.saturating_sub(b) as f64 / seconds));
            series.errors_per_s.push(per_s(after.errors, before.errors));
            series
                .client_errors_per_s
                .push(per_s(after.client_errors, before.client_errors));
            series.p50_ms.push(ms(0.5));
            series.p99_ms.push(ms(0.99));
        }
    }
    view.times = readings.iter().skip(1).map(|r| round(r.wall)).collect();
    view
}

/// Three decimals are plenty for a chart and keep the JSON short.
fn round(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::super::traffic::{ListenerTotals, RouteTotals};
    use super::*;

    fn reading(at: Instant, wall: f64, requests_2xx: u64, requests_5xx: u64, fast: u64) -> Arc<Reading> {
        let mut duration = HistogramTotal {
            buckets: vec![0; LATENCY_BOUNDS.len() + 1],
            sum_nanos: 0,
        };
        duration.buckets[5] = fast; // (0.5 ms, 1 ms]
        Arc::new(Reading {
            at,
            wall,
            totals: TrafficTotals {
                listeners: vec![ListenerTotals {
                    name: "web".into(),
                    protocol: "http",
                    ..Default::default()
                }],
                routes: vec![RouteTotals {
                    listener: "web".into(),
                    route: "api".into(),
                    requests: [0, requests_2xx, 0, requests_5xx * 2, requests_5xx],
                    duration,
                    ..Default::default()
                }],
                tcp_routes: Vec::new(),
                upstreams: Vec::new(),
                caches: Vec::new(),
            },
        })
    }

    #[test]
    fn rates_and_percentiles_come_from_differences() {
        let t0 = Instant::now();
        let readings = [
            reading(t0, 100.0, 10, 0, 10),
            reading(t0 + Duration::from_secs(5), 105.0, 60, 5, 65),
        ];
        let view = view(&readings);
        assert_eq!(view.times, vec![105.0]);
        let route = view.series.iter().find(|s| s.kind == "route").unwrap();
        assert_eq!(route.name, "web/api");
        // 50 2xx, 10 4xx and 5 5xx answers in 5 s.
        assert_eq!(route.rps, vec![Some(13.0)]);
        assert_eq!(route.errors_per_s, vec![Some(1.0)]);
        assert_eq!(route.client_errors_per_s, vec![Some(2.0)], "4xx answers have a rate");
        // 55 requests all in the (0.5 ms, 1 ms] bucket.
        let p50 = route.p50_ms[0].unwrap();
        assert!(p50 > 0.5 && p50 <= 1.0, "{p50}");
        let listener = view.series.iter().find(|s| s.kind == "listener").unwrap();
        assert_eq!(listener.rps, vec![Some(13.0)]);
        assert_eq!(listener.client_errors_per_s, vec![Some(2.0)]);
    }

    #[test]
    fn loopback_latencies_are_not_smeared_over_the_first_half_millisecond() {
        // 100 responses of 70 µs: the median is charted between 50 and 100 µs (with buckets
        // that started at 0.5 ms it was 0.25 ms, the p99 0.495 ms, whatever the latency).
        let t0 = Instant::now();
        let mut before = (*reading(t0, 100.0, 0, 0, 0)).clone();
        let mut after = (*reading(t0 + Duration::from_secs(5), 105.0, 100, 0, 0)).clone();
        after.totals.routes[0].duration.buckets[2] = 100; // (50 µs, 100 µs]
        before.totals.routes[0].duration.buckets[2] = 0;
        let view = view(&[Arc::new(before), Arc::new(after)]);
        let route = view.series.iter().find(|s| s.kind == "route").unwrap();
        let (p50, p99) = (route.p50_ms[0].unwrap(), route.p99_ms[0].unwrap());
        assert!((0.05..=0.1).contains(&p50), "p50 {p50} ms");
        assert!((0.05..=0.1).contains(&p99), "p99 {p99} ms");
    }

    #[test]
    fn an_upstreams_errors_count_the_requests_that_found_no_target() {
        use super::super::traffic::{TargetTotals, UpstreamTotals};
        let t0 = Instant::now();
        let at = |at: Instant, wall: f64, no_target: u64, not_found: u64| {
            let mut r = (*reading(at, wall, 0, 0, 0)).clone();
            r.totals.upstreams.push(UpstreamTotals {
                name: "gone".into(),
                no_target,
                targets: vec![TargetTotals {
                    name: "127.0.0.1:9".into(),
                    responses: [0, 0, 0, not_found, 0],
                    ..Default::default()
                }],
                ..Default::default()
            });
            Arc::new(r)
        };
        let view = view(&[at(t0, 100.0, 0, 0), at(t0 + Duration::from_secs(5), 105.0, 50, 10)]);
        let up = view.series.iter().find(|s| s.kind == "upstream").unwrap();
        assert_eq!(up.errors_per_s, vec![Some(10.0)], "503s without a target are errors");
        assert_eq!(up.client_errors_per_s, vec![Some(2.0)]);
    }

    #[test]
    fn an_empty_interval_has_no_percentile() {
        let t0 = Instant::now();
        let readings = [
            reading(t0, 100.0, 10, 0, 10),
            reading(t0 + Duration::from_secs(5), 105.0, 10, 0, 10),
        ];
        let view = view(&readings);
        let route = view.series.iter().find(|s| s.kind == "route").unwrap();
        assert_eq!(route.rps, vec![Some(0.0)]);
        assert_eq!(route.p99_ms, vec![None]);
    }

    #[test]
    fn the_ring_keeps_fifteen_minutes() {
        let history = History::default();
        let t0 = Instant::now();
        for i in 0..KEPT + 10 {
            history.push((*reading(t0 + Duration::from_secs(5 * i as u64), i as f64, 0, 0, 0)).clone());
        }
        let kept = history.readings();
        assert_eq!(kept.len(), KEPT);
        assert_eq!(kept[0].wall, 10.0);
    }
}
