//! The exporter: one task per worker that sends the worker's waiting spans and log records to
//! the OTLP collector, a batch at a time, and counts what the collector took and what was lost.

use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use rampart_model::trace::{OtlpExport, OtlpProtocol};

use super::{otlp, Dropped, Signal, TelemetryCounts};
use crate::http::client::{self, Collected, InternalOptions};
use crate::log_summary::EventKey;
use crate::worker::WorkerContext;

/// How long the exporter waits between looks when no export is configured any more (a reload
/// turned it off): what is queued then is dropped.
const IDLE_LOOK: Duration = Duration::from_secs(1);

/// The most bytes of a collector's answer read (its body says nothing Rampart uses).
const ANSWER_MAX: usize = 64 * 1024;

/// Runs for the worker's life: waits for a full batch or the interval, then exports each
/// signal's waiting records.
pub(super) async fn run(worker: Rc<WorkerContext>) {
    let mut spare = [Vec::new(), Vec::new()];
    loop {
        let interval = worker
            .snapshot()
            .tracing
            .as_ref()
            .and_then(|t| t.export.as_ref())
            .map_or(IDLE_LOOK, |e| e.interval);
        let _ = tokio::time::timeout(interval, worker.telemetry.wake.notified()).await;
        send_waiting(&worker, &mut spare).await;
    }
}

/// Exports every signal's waiting records, at most `batch` an export; `spare` holds an
/// emptied buffer per signal for the next records.
pub(super) async fn send_waiting(worker: &WorkerContext, spare: &mut [Vec<u8>; 2]) {
    for signal in Signal::ALL {
        let (batch, count) = worker
            .telemetry
            .take(signal, std::mem::take(&mut spare[signal as usize]));
        // At most `batch` records an export (a collector limits what one request carries).
        let most = export_batch(worker);
        let (mut rest, mut left) = (&batch[..], count);
        while left > 0 {
            let n = left.min(most);
            let end = otlp::entries_end(rest, n);
            send(worker, signal, &rest[..end], n).await;
            rest = &rest[end..];
            left -= n;
        }
        let mut batch = batch;
        batch.clear();
        spare[signal as usize] = batch;
    }
}

/// The most records one export carries, as the config in force says.
fn export_batch(worker: &WorkerContext) -> usize {
    worker
        .snapshot()
        .tracing
        .as_ref()
        .and_then(|t| t.export.as_ref())
        .map_or(usize::MAX, |e| e.batch.max(1))
}

/// Sends one batch of `count` records and counts the outcome.
async fn send(worker: &WorkerContext, signal: Signal, batch: &[u8], count: usize) {
    let snapshot = worker.snapshot();
    let Some(export) = snapshot.tracing.as_ref().and_then(|t| t.export.as_ref()) else {
        TelemetryCounts::add_dropped(signal, Dropped::ExportFailed, count);
        return;
    };
    let grpc = export.protocol == OtlpProtocol::Grpc;
    let body = Bytes::from(otlp::envelope(&export.resource, batch, grpc));
    let path = match signal {
        Signal::Spans => &export.traces_path,
        Signal::Logs => &export.logs_path,
    };
    let fields: &[(&str, &str)] = if grpc {
        &[("content-type", "application/grpc"), ("te", "trailers")]
    } else {
        &[("content-type", "application/x-protobuf")]
    };
    let head = match client::request_head(
        b"POST",
        export.authority.as_bytes(),
        path.as_bytes(),
        fields.iter().copied(),
    ) {
        Ok(head) => head,
        Err(_) => {
            TelemetryCounts::add_dropped(signal, Dropped::ExportFailed, count);
            return;
        }
    };
    let mut options = InternalOptions::new("otlp", ANSWER_MAX);
    options.keep_body = false;
    let answer = client::send(worker, &snapshot, export.upstream, &head, Some(body), &options).await;
    match answer.map_err(|e| e.to_string()).and_then(|a| accepted(export, &a)) {
        Ok(()) => {
            TelemetryCounts::add_exported(signal, count);
            worker
                .log_summary
                .recovered(|| EventKey::export_failed(&export.endpoint));
        }
        Err(why) => {
            TelemetryCounts::add_dropped(signal, Dropped::ExportFailed, count);
            tracing::debug!(endpoint = %export.endpoint, "OTLP export failed: {why}");
            worker.log_summary.warn(EventKey::export_failed(&export.endpoint), || {
                crate::log_summary::Detail {
                    listener: None,
                    message: format!("OTLP collector {}: export failed: {why}", export.endpoint),
                }
            });
        }
    }
}

/// Whether the collector took the batch: a 2xx, and for gRPC a `grpc-status` of 0 (in the
/// trailers, or in the head of a trailers-only answer).
fn accepted(export: &OtlpExport, answer: &Collected) -> Result<(), String> {
    let status = answer.status();
    if !(200..300).contains(&status) {
        return Err(format!("status {status}"));
    }
    if export.protocol == OtlpProtocol::Grpc {
        let grpc = answer.trailer("grpc-status").or_else(|| answer.field("grpc-status"));
        match grpc {
            Some(b"0") => {}
            Some(code) => {
                let message = answer
                    .trailer("grpc-message")
                    .or_else(|| answer.field("grpc-message"))
                    .unwrap_or_default();
                return Err(format!(
                    "grpc-status {} {}",
                    String::from_utf8_lossy(code),
                    String::from_utf8_lossy(message)
                ));
            }
            None => return Err("no grpc-status".into()),
        }
    }
    Ok(())
}
