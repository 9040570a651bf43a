//! Spans and log records on their way to an OTLP collector (`[tracing] endpoint`). Each worker
//! keeps its own queue per signal ([`Telemetry`]): a record is written into it as protobuf when
//! it ends ([`otlp::write_span`], [`otlp::write_log`]), with no lock and no allocation past the
//! buffer's growth; past the configured `queue` it is dropped and counted, never waited for. A
//! task of the worker's own ([`export`]) sends a batch when `batch` records wait, and every
//! `interval` otherwise, through the internal client to the collector's internal upstream: one
//! export in flight per worker and signal, so a slow or dead collector costs dropped records
//! (counted in [`TelemetryCounts`]), never a request's time.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use rampart_model::trace::OtlpExport;

use crate::worker::WorkerContext;

mod export;
pub mod otlp;

/// The two signals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Spans = 0,
    Logs = 1,
}

impl Signal {
    pub const ALL: [Signal; 2] = [Signal::Spans, Signal::Logs];

    /// The label value in the metrics (`spans`, `logs`).
    pub fn name(self) -> &'static str {
        match self {
            Signal::Spans => "spans",
            Signal::Logs => "logs",
        }
    }
}

/// Why a record was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dropped {
    /// The worker's queue was full (the collector is slower than the traffic, or away).
    QueueFull = 0,
    /// The export carrying it failed (no connection, an error status, a timeout).
    ExportFailed = 1,
}

impl Dropped {
    pub const ALL: [Dropped; 2] = [Dropped::QueueFull, Dropped::ExportFailed];

    pub fn name(self) -> &'static str {
        match self {
            Dropped::QueueFull => "queue_full",
            Dropped::ExportFailed => "export_failed",
        }
    }
}

/// Process-wide counts of records exported and dropped, by signal (summed over workers; read by
/// the metrics).
#[derive(Debug, Default)]
pub struct TelemetryCounts {
    exported: [AtomicU64; 2],
    dropped: [[AtomicU64; 2]; 2],
}

static COUNTS: TelemetryCounts = TelemetryCounts {
    exported: [AtomicU64::new(0), AtomicU64::new(0)],
    dropped: [
        [AtomicU64::new(0), AtomicU64::new(0)],
        [AtomicU64::new(0), AtomicU64::new(0)],
    ],
};

impl TelemetryCounts {
    /// Records of `signal` the collector took.
    pub fn exported(signal: Signal) -> u64 {
        COUNTS.exported[signal as usize].load(Relaxed)
    }

    /// Records of `signal` lost for `why`.
    pub fn dropped(signal: Signal, why: Dropped) -> u64 {
        COUNTS.dropped[signal as usize][why as usize].load(Relaxed)
    }

    fn add_exported(signal: Signal, n: usize) {
        COUNTS.exported[signal as usize].fetch_add(n as u64, Relaxed);
    }

    fn add_dropped(signal: Signal, why: Dropped, n: usize) {
        COUNTS.dropped[signal as usize][why as usize].fetch_add(n as u64, Relaxed);
    }
}

/// Records of one signal waiting on a worker, as protobuf entries.
#[derive(Debug, Default)]
struct Queue {
    buf: Vec<u8>,
    count: usize,
}

/// A worker's telemetry queues and its exporter's state.
#[derive(Debug, Default)]
pub struct Telemetry {
    queues: [RefCell<Queue>; 2],
    /// Where a log line is written before it becomes a log record.
    line: RefCell<Vec<u8>>,
    /// The exporter task runs (started by the first record).
    running: Cell<bool>,
    /// Wakes the exporter: a batch is full, or the worker drains.
    wake: tokio::sync::Notify,
}

impl Telemetry {
    /// Writes one record of `signal` with `write` into the worker's queue (under `export`'s
    /// limits), or counts it dropped when the queue is full. Starts the exporter on first use.
    pub fn record(&self, ctx: &WorkerContext, export: &OtlpExport, signal: Signal, write: impl FnOnce(&mut Vec<u8>)) {
        let full = {
            let mut q = self.queues[signal as usize].borrow_mut();
            if q.count >= export.queue {
                TelemetryCounts::add_dropped(signal, Dropped::QueueFull, 1);
                return;
            }
            write(&mut q.buf);
            q.count += 1;
            q.count >= export.batch
        };
        if !self.running.get() {
            if let Some(worker) = ctx.handle() {
                self.running.set(true);
                tokio::task::spawn_local(export::run(worker));
            }
        }
        if full {
            self.wake.notify_one();
        }
    }

    /// One span, with its `attributes` and those `more` writes, into the worker's queue (see
    /// [`Telemetry::record`]).
    pub fn record_span(
        &self,
        ctx: &WorkerContext,
        export: &OtlpExport,
        span: &otlp::SpanData<'_>,
        more: impl FnOnce(&mut otlp::AttributeWriter<'_>),
    ) {
        self.record(ctx, export, Signal::Spans, |out| otlp::write_span(out, span, more));
    }

    /// A log line (`write` appends it, with or without its newline) as an OTLP log record of
    /// log `kind`, tied to a span when it names one.
    pub fn record_log_line(
        &self,
        ctx: &WorkerContext,
        export: &OtlpExport,
        (kind, trace): (&'static str, Option<crate::telemetry::otlp::SpanRef>),
        write: impl FnOnce(&mut Vec<u8>),
    ) {
        let mut line = self.line.borrow_mut();
        line.clear();
        write(&mut line);
        let body = line.strip_suffix(b"\n").unwrap_or(&line);
        let log = otlp::LogData {
            time: unix_nanos(std::time::SystemTime::now()),
            body,
            trace,
            attributes: &[("rampart.log", otlp::Value::Str(kind.as_bytes()))],
        };
        self.record(ctx, export, Signal::Logs, |out| otlp::write_log(out, &log));
    }

    /// At the worker's end (its connections are closed): exports what waits, for `limit` at
    /// most; what has not gone by then is lost.
    pub async fn last_export(ctx: &WorkerContext, limit: std::time::Duration) {
        if ctx.telemetry.running.get() {
            let mut spare = [Vec::new(), Vec::new()];
            let _ = tokio::time::timeout(limit, export::send_waiting(ctx, &mut spare)).await;
        }
    }

    /// Sends what waits now (the worker drains).
    pub fn flush(&self) {
        if self.running.get() {
            self.wake.notify_one();
        }
    }

    /// Takes the waiting records of `signal`: their entries and how many (giving back `spare`'s
    /// allocation for the next ones).
    fn take(&self, signal: Signal, spare: Vec<u8>) -> (Vec<u8>, usize) {
        let mut q = self.queues[signal as usize].borrow_mut();
        let count = std::mem::take(&mut q.count);
        (std::mem::replace(&mut q.buf, spare), count)
    }
}

/// Unix nanoseconds of `t`.
pub fn unix_nanos(t: std::time::SystemTime) -> u64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

#[cfg(test)]
mod tests;
