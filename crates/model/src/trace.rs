//! `[tracing]`: W3C Trace Context on proxied requests, spans of requests, attempts and TCP
//! sessions, and their export over OTLP (with the access logs and session records that go to
//! `otlp`), all decided by the control plane and read by the workers.

use std::time::Duration;

/// How requests are traced.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceSettings {
    /// The share of new traces (requests without a valid `traceparent`) marked sampled; a request
    /// with a valid `traceparent` keeps its caller's decision.
    pub sampling: f64,
    /// Tail decisions, made when the request ends: a request that was not sampled still has its
    /// spans exported when it failed (a 5xx, or an error), with `errors`...
    pub errors: bool,
    /// ... or when it took longer than this.
    pub slower_than: Option<Duration>,
    /// Where spans (and the logs sent to `otlp`) go; `None`: trace context only, nothing exported.
    pub export: Option<OtlpExport>,
}

impl Default for TraceSettings {
    fn default() -> Self {
        TraceSettings {
            sampling: 1.0,
            errors: false,
            slower_than: None,
            export: None,
        }
    }
}

impl TraceSettings {
    /// Whether a request not sampled at its start must still be recorded, in case a tail
    /// decision keeps it.
    pub fn has_tail_rules(&self) -> bool {
        self.export.is_some() && (self.errors || self.slower_than.is_some())
    }
}

/// The OTLP transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtlpProtocol {
    /// OTLP/HTTP with protobuf bodies: `POST /v1/traces` and `/v1/logs`.
    HttpProtobuf,
    /// OTLP/gRPC: unary `Export` calls over HTTP/2 in clear (h2c) or over TLS.
    Grpc,
}

/// An OTLP collector and how Rampart ships to it.
#[derive(Debug, Clone, PartialEq)]
pub struct OtlpExport {
    /// The endpoint as configured (for logs).
    pub endpoint: String,
    /// The snapshot's internal upstream that reaches it.
    pub upstream: usize,
    pub protocol: OtlpProtocol,
    /// Its `Host`.
    pub authority: String,
    /// The request paths of the two signals (`/v1/traces` and `/v1/logs` under the endpoint's
    /// path for OTLP/HTTP; the services' `Export` methods for gRPC).
    pub traces_path: String,
    pub logs_path: String,
    /// Resource attributes of everything exported (`service.name` first).
    pub resource: Vec<(String, String)>,
    /// Spans (or log records) each worker keeps waiting for export; past it, new ones are
    /// dropped and counted.
    pub queue: usize,
    /// A worker exports as soon as it has this many, and at least every `interval`.
    pub batch: usize,
    pub interval: Duration,
}

impl OtlpExport {
    /// The request path of a signal under OTLP/HTTP (`v1/traces`) or gRPC (`trace`, `Trace`).
    pub fn paths(protocol: OtlpProtocol, base: &str) -> (String, String) {
        match protocol {
            OtlpProtocol::HttpProtobuf => {
                let base = base.trim_end_matches('/');
                (format!("{base}/v1/traces"), format!("{base}/v1/logs"))
            }
            OtlpProtocol::Grpc => (
                "/opentelemetry.proto.collector.trace.v1.TraceService/Export".into(),
                "/opentelemetry.proto.collector.logs.v1.LogsService/Export".into(),
            ),
        }
    }
}
