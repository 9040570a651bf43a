//! `GET /metrics`: the figures a scrape reads, encoded by prometheus-client (OpenMetrics text,
//! which Prometheus scrapes). Each scrape builds a registry from the current values: the build,
//! workers, reloads, every target's state, the traffic counters summed over workers (see
//! [`super::traffic`]), and the process's CPU, memory and descriptors.

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::info::Info;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use rampart_model::cache::CACHE_OUTCOMES;
use rampart_model::metrics::{
    HistogramTotal, RefusedReason, UpstreamErrorKind, CODE_CLASSES, LATENCY_BOUNDS, SESSION_BOUNDS,
};

use super::state::AdminShared;
use super::traffic::TrafficTotals;

/// The content type of [`render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

type Labels = Vec<(&'static str, String)>;

/// The exposition text.
pub fn render(shared: &AdminShared) -> String {
    let mut registry = Registry::default();
    let status = shared.status.load();

    let build = Info::new(vec![("version", env!("CARGO_PKG_VERSION").to_string())]);
    registry.register("rampart_build", "Rampart's version", build);
    registry.register("rampart_workers", "Worker threads", gauge(status.workers as i64));
    let panics = Counter::<u64>::default();
    panics.inc_by(rampart_runtime::worker_panics());
    registry.register(
        "rampart_worker_panics",
        "Panics on worker threads (a bug in Rampart): each closed the connection it served; the worker went on",
        panics,
    );

    let reloads = Family::<Labels, Counter>::default();
    reloads
        .get_or_create(&vec![("result", "success".into())])
        .inc_by(status.reloads.succeeded);
    reloads
        .get_or_create(&vec![("result", "failure".into())])
        .inc_by(status.reloads.failed);
    registry.register(
        "rampart_config_reloads",
        "Config reloads (SIGHUP or the admin API), by result",
        reloads,
    );
    registry.register(
        "rampart_config_last_reload_success_timestamp_seconds",
        "When the config in force was loaded (the start counts), in Unix seconds",
        gauge(status.loaded_at as i64),
    );

    if let Some(revision) = status.config.as_ref().and_then(|c| c.revision) {
        registry.register(
            "rampart_config_etcd_revision",
            "The etcd revision of the config in force (a config from etcd)",
            gauge(revision),
        );
    }
    if let Some(reachable) = &shared.source_reachable {
        registry.register(
            "rampart_config_source_up",
            "1 while the config's source (etcd) answered its last read",
            gauge(i64::from(reachable.load(std::sync::atomic::Ordering::Relaxed))),
        );
    }

    let dns = shared.dns.load();
    if !dns.entries.is_empty() {
        let degraded = Family::<Labels, Gauge>::default();
        let addresses = Family::<Labels, Gauge>::default();
        for (query, entry) in &dns.entries {
            for upstream in &entry.upstreams {
                let labels = vec![("upstream", upstream.clone()), ("target", query.to_string())];
                degraded.get_or_create(&labels).set(i64::from(entry.degraded));
                addresses
                    .get_or_create(&labels)
                    .set(entry.found.as_ref().map_or(0, |f| f.len() as i64));
            }
        }
        registry.register(
            "rampart_upstream_dns_degraded",
            "1 while a target written by name has failed to resolve for longer than dns_grace (its last answer is still used)",
            degraded,
        );
        registry.register(
            "rampart_upstream_dns_addresses",
            "The addresses the last answer for a target written by name gave",
            addresses,
        );
    }

    let snapshot = shared.snapshot.load();
    let up = Family::<Labels, Gauge>::default();
    let drained = Family::<Labels, Gauge>::default();
    for upstream in snapshot.upstreams.iter().filter(|u| !u.is_internal()) {
        for target in &upstream.targets {
            let labels = vec![("upstream", upstream.name.clone()), ("target", target.name.clone())];
            up.get_or_create(&labels).set(i64::from(target.health.is_available()));
            drained
                .get_or_create(&labels)
                .set(i64::from(target.health.is_drained()));
        }
    }
    registry.register(
        "rampart_target_up",
        "1 while workers send the target new connections or requests (health checks pass, not in passive backoff, not drained)",
        up,
    );
    registry.register(
        "rampart_target_drained",
        "1 while an operator drained the target",
        drained,
    );

    let expiry = Family::<Labels, Gauge>::default();
    for listener in snapshot.listeners.iter() {
        for cert in listener.tls.iter().flat_map(|t| t.certificate_info.iter()) {
            let labels = vec![("listener", listener.name.clone()), ("certificate", cert.file.clone())];
            expiry.get_or_create(&labels).set(cert.not_after_unix() as i64);
        }
    }
    let acme = shared.acme.load();
    let acme_failures = Family::<Labels, Gauge>::default();
    for (name, state) in &acme.names {
        acme_failures
            .get_or_create(&vec![("name", name.clone())])
            .set(i64::from(state.failures));
        let Some(not_after) = state.not_after else { continue };
        for listener in snapshot.listeners.iter() {
            if listener.tls.as_ref().is_some_and(|t| t.acme_names.contains(name)) {
                let labels = vec![
                    ("listener", listener.name.clone()),
                    ("certificate", format!("acme:{name}")),
                ];
                expiry.get_or_create(&labels).set(not_after as i64);
            }
        }
    }
    if !acme.names.is_empty() {
        registry.register(
            "rampart_acme_failures",
            "Failed attempts in a row to obtain or renew the certificate of an `acme` name (0 after a success)",
            acme_failures,
        );
    }
    registry.register(
        "rampart_tls_certificate_expiry_timestamp_seconds",
        "When each listener certificate expires, in Unix seconds (an expired one is still served: alert on it)",
        expiry,
    );

    registry.register_collector(Box::new(Traffic(TrafficTotals::read(&snapshot))));
    super::telemetry_metrics::register(&mut registry);

    let process = ProcessStats::read();
    let cpu = Counter::<f64>::default();
    cpu.inc_by(process.cpu_seconds);
    registry.register(
        "process_cpu_seconds",
        "User and system CPU time of the whole process",
        cpu,
    );
    registry.register(
        "process_resident_memory_bytes",
        "Resident memory of the process",
        gauge(process.resident_bytes as i64),
    );
    registry.register(
        "process_open_fds",
        "Open file descriptors",
        gauge(process.open_fds as i64),
    );

    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = encode(&mut out, &registry);
    out
}

fn gauge(value: i64) -> Gauge {
    let g = Gauge::default();
    g.set(value);
    g
}

/// The process's own figures, from /proc.
#[derive(Debug, Default)]
struct ProcessStats {
    cpu_seconds: f64,
    resident_bytes: u64,
    open_fds: u64,
}

impl ProcessStats {
    fn read() -> ProcessStats {
        let mut stats = ProcessStats::default();
        // SAFETY: sysconf only reads system configuration.
        let (tick, page) = unsafe { (libc::sysconf(libc::_SC_CLK_TCK), libc::sysconf(libc::_SC_PAGESIZE)) };
        if let Ok(stat) = std::fs::read_to_string("/proc/self/stat") {
            // Fields after the command name (which may hold spaces) start at the last ')'.
            if let Some((_, rest)) = stat.rsplit_once(')') {
                let fields: Vec<&str> = rest.split_whitespace().collect();
                // utime and stime are fields 14 and 15 of the whole line: 12 and 13 here.
                let ticks: u64 = fields
                    .get(11..13)
                    .map_or(0, |f| f.iter().filter_map(|v| v.parse::<u64>().ok()).sum());
                if tick > 0 {
                    stats.cpu_seconds = ticks as f64 / tick as f64;
                }
            }
        }
        if let Ok(statm) = std::fs::read_to_string("/proc/self/statm") {
            let pages = statm
                .split_whitespace()
                .nth(1)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
            stats.resident_bytes = pages * page.max(0) as u64;
        }
        stats.open_fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64);
        stats
    }
}

/// The traffic families, from one reading of the counters.
#[derive(Debug)]
struct Traffic(TrafficTotals);

/// One sample's value.
enum Value<'a> {
    Counter(u64),
    Gauge(i64),
    Histogram(&'a HistogramTotal, &'static [f64]),
}

/// Encodes one family: its descriptor, then each labelled sample.
fn family<'a>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    kind: MetricType,
    samples: impl IntoIterator<Item = (Labels, Value<'a>)>,
) -> fmt::Result {
    let mut metric = encoder.encode_descriptor(name, help, None, kind)?;
    for (labels, value) in samples {
        let mut sample = metric.encode_family(&labels)?;
        match value {
            Value::Counter(n) => sample.encode_counter::<NoLabelSet, _, u64>(&n, None)?,
            Value::Gauge(n) => sample.encode_gauge(&n)?,
            Value::Histogram(h, bounds) => {
                let buckets: Vec<(f64, u64)> = h
                    .buckets
                    .iter()
                    .enumerate()
                    .map(|(i, &n)| (bounds.get(i).copied().unwrap_or(f64::MAX), n))
                    .collect();
                let sum = h.sum_nanos as f64 / 1e9;
                sample.encode_histogram::<NoLabelSet>(sum, h.count(), &buckets, None)?
            }
        }
    }
    Ok(())
}

fn labels<const N: usize>(pairs: [(&'static str, &str); N]) -> Labels {
    pairs.iter().map(|(k, v)| (*k, v.to_string())).collect()
}

impl Collector for Traffic {
    fn encode(&self, mut e: DescriptorEncoder) -> fmt::Result {
        use MetricType::{Counter, Gauge, Histogram};
        let t = &self.0;
        let listeners = &t.listeners;
        let by_listener = |f: fn(&super::traffic::ListenerTotals) -> Value<'_>| {
            listeners.iter().map(move |l| (labels([("listener", &l.name)]), f(l)))
        };
        family(
            &mut e,
            "rampart_connections_accepted",
            "Connections accepted (before the connection limit, PROXY header and TLS handshake)",
            Counter,
            by_listener(|l| Value::Counter(l.accepted)),
        )?;
        family(
            &mut e,
            "rampart_connections_active",
            "Connections open now",
            Gauge,
            by_listener(|l| Value::Gauge(l.active as i64)),
        )?;
        family(
            &mut e,
            "rampart_connections_refused",
            "Connections closed by the connection stage, by reason (limit, proxy_header, tls)",
            Counter,
            listeners.iter().flat_map(|l| {
                RefusedReason::ALL.iter().map(move |r| {
                    let labels = labels([("listener", &l.name), ("reason", r.as_str())]);
                    (labels, Value::Counter(l.refused[*r as usize]))
                })
            }),
        )?;
        family(
            &mut e,
            "rampart_bytes",
            "Bytes from clients (in) and to clients (out)",
            Counter,
            listeners.iter().flat_map(|l| {
                [("in", l.bytes_in), ("out", l.bytes_out)].map(|(direction, n)| {
                    let labels = labels([("listener", &l.name), ("direction", direction)]);
                    (labels, Value::Counter(n))
                })
            }),
        )?;
        for (protocol, name, help) in [
            (
                "tcp",
                "rampart_tcp_session_duration_seconds",
                "How long TCP sessions lasted, from accept to close",
            ),
            (
                "udp",
                "rampart_udp_session_duration_seconds",
                "How long UDP sessions lasted, from a client's first datagram to the session's end",
            ),
        ] {
            family(
                &mut e,
                name,
                help,
                Histogram,
                listeners.iter().filter(|l| l.protocol == protocol).map(|l| {
                    (
                        labels([("listener", &l.name)]),
                        Value::Histogram(&l.session_duration, &SESSION_BOUNDS),
                    )
                }),
            )?;
        }
        family(
            &mut e,
            "rampart_tcp_route_connections",
            "Connections of TCP listeners with routes, by the route that took them ((default): none did)",
            Counter,
            t.tcp_routes.iter().map(|r| {
                let labels = labels([("listener", &r.listener), ("route", &r.route)]);
                (labels, Value::Counter(r.connections))
            }),
        )?;
        family(
            &mut e,
            "rampart_tcp_route_undecided",
            "Connections sent to a TCP listener's default because nothing decided within peek_timeout or peek_max",
            Counter,
            t.tcp_routes
                .iter()
                .filter(|r| r.route == super::traffic::TCP_DEFAULT)
                .map(|r| (labels([("listener", &r.listener)]), Value::Counter(r.undecided))),
        )?;
        family(
            &mut e,
            "rampart_tcp_route_filter_closes",
            "Connections closed by a TCP route's payload filter (max_bytes, deny_regex)",
            Counter,
            t.tcp_routes
                .iter()
                .filter(|r| r.route != super::traffic::TCP_DEFAULT)
                .map(|r| {
                    let labels = labels([("listener", &r.listener), ("route", &r.route)]);
                    (labels, Value::Counter(r.filter_closes))
                }),
        )?;
        family(
            &mut e,
            "rampart_http_requests",
            "HTTP requests answered, by route and status class",
            Counter,
            t.routes.iter().flat_map(|r| {
                CODE_CLASSES.iter().enumerate().map(move |(i, code)| {
                    let labels = labels([("listener", &r.listener), ("route", &r.route), ("code", code)]);
                    (labels, Value::Counter(r.requests[i]))
                })
            }),
        )?;
        family(
            &mut e,
            "rampart_http_cache_requests",
            "Requests on routes with a cache, by what the cache did: hit, stale (answered stale), revalidated (a 304 refreshed it), miss, collapsed (waited for another miss and answered from what it stored)",
            Counter,
            t.routes.iter().filter(|r| r.caches).flat_map(|r| {
                CACHE_OUTCOMES.iter().enumerate().map(move |(i, result)| {
                    let labels = labels([("listener", &r.listener), ("route", &r.route), ("result", result)]);
                    (labels, Value::Counter(r.cache[i]))
                })
            }),
        )?;
        let caches = &t.caches;
        family(
            &mut e,
            "rampart_cache_bytes",
            "Bytes an HTTP cache store holds, by tier (memory, disk: its files)",
            Gauge,
            caches.iter().map(|c| {
                (
                    labels([("cache", &c.name), ("tier", c.tier)]),
                    Value::Gauge(c.stats.bytes as i64),
                )
            }),
        )?;
        family(
            &mut e,
            "rampart_cache_objects",
            "Responses an HTTP cache store holds, by tier (memory, disk)",
            Gauge,
            caches.iter().map(|c| {
                (
                    labels([("cache", &c.name), ("tier", c.tier)]),
                    Value::Gauge(c.stats.objects as i64),
                )
            }),
        )?;
        family(
            &mut e,
            "rampart_cache_evictions",
            "Responses an HTTP cache store evicted to make room, by tier (memory, disk)",
            Counter,
            caches.iter().map(|c| {
                (
                    labels([("cache", &c.name), ("tier", c.tier)]),
                    Value::Counter(c.stats.evictions),
                )
            }),
        )?;
        family(
            &mut e,
            "rampart_cache_disk_errors",
            "Disk store failures: writes that failed or were skipped (op=write), files refused when read, torn or changed or gone, and deleted (op=read)",
            Counter,
            caches.iter().filter_map(|c| c.errors.map(|e| (c, e))).flat_map(|(c, (read, write))| {
                [("read", read), ("write", write)]
                    .map(|(op, n)| (labels([("cache", &c.name), ("op", op)]), Value::Counter(n)))
            }),
        )?;
        family(
            &mut e,
            "rampart_http_request_duration_seconds",
            "HTTP request time, from the first byte of the request to the end of the response",
            Histogram,
            t.routes.iter().map(|r| {
                let labels = labels([("listener", &r.listener), ("route", &r.route)]);
                (labels, Value::Histogram(&r.duration, &LATENCY_BOUNDS))
            }),
        )?;
        family(
            &mut e,
            "rampart_upstream_response_duration_seconds",
            "From the request sent to the upstream to its response head",
            Histogram,
            t.upstreams.iter().map(|u| {
                let labels = labels([("upstream", &u.name)]);
                (labels, Value::Histogram(&u.response_duration, &LATENCY_BOUNDS))
            }),
        )?;
        family(
            &mut e,
            "rampart_upstream_retries",
            "Requests sent again after a failure before any response byte",
            Counter,
            t.upstreams
                .iter()
                .map(|u| (labels([("upstream", &u.name)]), Value::Counter(u.retries))),
        )?;
        family(
            &mut e,
            "rampart_upstream_retries_over_budget",
            "Retries not made because the upstream's retry budget was spent (the failure or response went to the client)",
            Counter,
            t.upstreams
                .iter()
                .map(|u| (labels([("upstream", &u.name)]), Value::Counter(u.retries_over_budget))),
        )?;
        family(
            &mut e,
            "rampart_upstream_queued",
            "Requests that waited in the upstream's queue (every target at max_requests_per_target)",
            Counter,
            t.upstreams
                .iter()
                .map(|u| (labels([("upstream", &u.name)]), Value::Counter(u.queued))),
        )?;
        family(
            &mut e,
            "rampart_upstream_queue_refused",
            "Requests answered 503 by the upstream's queue: full, or their wait ran out",
            Counter,
            t.upstreams.iter().flat_map(|u| {
                [("full", u.queue_full), ("timeout", u.queue_timeout)]
                    .map(|(reason, n)| (labels([("upstream", &u.name), ("reason", reason)]), Value::Counter(n)))
            }),
        )?;
        family(
            &mut e,
            "rampart_upstream_mirrored",
            "Copies of requests sent to the upstream as a route's mirror, by result: answered (a response head came), failed (none did)",
            Counter,
            t.upstreams.iter().flat_map(|u| {
                [("answered", u.mirrored.saturating_sub(u.mirror_failed)), ("failed", u.mirror_failed)]
                    .map(|(result, n)| (labels([("upstream", &u.name), ("result", result)]), Value::Counter(n)))
            }),
        )?;
        family(
            &mut e,
            "rampart_upstream_no_target",
            "Requests (answered 503) and TCP connections (closed) that found no available target",
            Counter,
            t.upstreams
                .iter()
                .map(|u| (labels([("upstream", &u.name)]), Value::Counter(u.no_target))),
        )?;
        let targets = || {
            t.upstreams
                .iter()
                .flat_map(|u| u.targets.iter().map(move |target| (u.name.as_str(), target)))
        };
        family(
            &mut e,
            "rampart_upstream_requests",
            "Responses from each target, by status class",
            Counter,
            targets().flat_map(|(u, target)| {
                CODE_CLASSES.iter().enumerate().map(move |(i, code)| {
                    let labels = labels([("upstream", u), ("target", &target.name), ("code", code)]);
                    (labels, Value::Counter(target.responses[i]))
                })
            }),
        )?;
        family(
            &mut e,
            "rampart_upstream_errors",
            "Failed attempts on each target, by kind (connect, reset, timeout, bad_response, tls)",
            Counter,
            targets().flat_map(|(u, target)| {
                UpstreamErrorKind::ALL.iter().map(move |kind| {
                    let labels = labels([("upstream", u), ("target", &target.name), ("reason", kind.as_str())]);
                    (labels, Value::Counter(target.errors[*kind as usize]))
                })
            }),
        )?;
        family(
            &mut e,
            "rampart_upstream_connections",
            "Upstream connections: opened, or reused from the pool for a request",
            Counter,
            targets().flat_map(|(u, target)| {
                [("opened", target.opened), ("reused", target.reused)].map(|(kind, n)| {
                    let labels = labels([("upstream", u), ("target", &target.name), ("kind", kind)]);
                    (labels, Value::Counter(n))
                })
            }),
        )?;
        family(
            &mut e,
            "rampart_target_ejections",
            "Times outlier detection ejected the target",
            Counter,
            targets().map(|(u, target)| {
                let labels = labels([("upstream", u), ("target", &target.name)]);
                (labels, Value::Counter(target.ejections))
            }),
        )?;
        family(
            &mut e,
            "rampart_target_active",
            "HTTP requests in flight to the target, or TCP sessions relayed to it, now",
            Gauge,
            targets().map(|(u, target)| {
                let labels = labels([("upstream", u), ("target", &target.name)]);
                (labels, Value::Gauge(target.active as i64))
            }),
        )
    }
}
