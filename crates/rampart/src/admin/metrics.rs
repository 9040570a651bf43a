//! `GET /metrics`: the figures a scrape reads, encoded by prometheus-client (OpenMetrics text,
//! which Prometheus scrapes). Each scrape builds a registry from the current values: the build,
//! workers, reloads, every target's state, and the process's CPU, memory and descriptors.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;

use super::state::AdminShared;

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

    let snapshot = shared.snapshot.load();
    let up = Family::<Labels, Gauge>::default();
    let drained = Family::<Labels, Gauge>::default();
    for upstream in &snapshot.upstreams {
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
