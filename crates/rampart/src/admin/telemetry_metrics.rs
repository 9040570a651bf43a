//! The telemetry families: spans and log records exported to the OTLP collector or lost (by
//! signal and reason), and log lines the log writer could not deliver.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use rampart_proxy::session_log::LogLineCounts;
use rampart_proxy::telemetry::{Dropped, Signal, TelemetryCounts};

type Labels = Vec<(&'static str, String)>;

pub(super) fn register(registry: &mut Registry) {
    let exported = Family::<Labels, Counter>::default();
    let dropped = Family::<Labels, Counter>::default();
    for signal in Signal::ALL {
        exported
            .get_or_create(&vec![("signal", signal.name().into())])
            .inc_by(TelemetryCounts::exported(signal));
        for why in Dropped::ALL {
            dropped
                .get_or_create(&vec![("signal", signal.name().into()), ("reason", why.name().into())])
                .inc_by(TelemetryCounts::dropped(signal, why));
        }
    }
    registry.register(
        "rampart_telemetry_exported",
        "Spans and log records the OTLP collector took, by signal",
        exported,
    );
    registry.register(
        "rampart_telemetry_dropped",
        "Spans and log records lost, by signal and reason: queue_full (a worker's queue was full), export_failed (the collector did not take the export)",
        dropped,
    );
    let lost = Family::<Labels, Counter>::default();
    for (reason, n) in LogLineCounts::dropped() {
        lost.get_or_create(&vec![("reason", reason.into())]).inc_by(n);
    }
    registry.register(
        "rampart_log_lines_dropped",
        "Access log lines and session records not delivered, by reason: syslog_unreachable (the syslog server could not be written to), queue_full (the log writer was behind)",
        lost,
    );
}
