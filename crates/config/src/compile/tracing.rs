//! `[tracing]`: the sampling ratio, the tail decisions, and the OTLP collector spans and logs go
//! to, which becomes an internal upstream of the snapshot (`otlp`), so that exports go through
//! the internal client like any of Rampart's own requests (pooled connections, TLS, HTTP/2 for
//! gRPC).

use std::time::Duration;

use rampart_model::defaults;
use rampart_model::filter::endpoint::HttpEndpoint;
use rampart_model::trace::{OtlpExport, OtlpProtocol, TraceSettings};

use super::{Checker, LiveState};
use crate::raw::RawTracing;

impl Checker<'_> {
    pub(super) fn tracing(&mut self, t: &RawTracing, live: &mut LiveState) -> TraceSettings {
        let d = TraceSettings::default();
        let sampling = match &t.sampling {
            None => d.sampling,
            Some(s) if (0.0..=1.0).contains(s.get_ref()) => *s.get_ref(),
            Some(s) => {
                self.error(s.span(), format!("sampling = {} is out of range (0 to 1)", s.get_ref()));
                d.sampling
            }
        };
        let slower_than = t
            .slower_than
            .as_ref()
            .map(|_| self.duration(&t.slower_than, Duration::from_secs(1)));
        let export = self.otlp_export(t, live);
        if t.endpoint.is_none() {
            // Keys that mean nothing without a collector.
            let keys = [
                ("protocol", t.protocol.as_ref().map(|v| v.span())),
                ("ca", t.ca.as_ref().map(|v| v.span())),
                ("service_name", t.service_name.as_ref().map(|v| v.span())),
                ("resource", t.resource.values().next().map(|v| v.span())),
                ("queue", t.queue.as_ref().map(|v| v.span())),
                ("batch", t.batch.as_ref().map(|v| v.span())),
                ("interval", t.interval.as_ref().map(|v| v.span())),
                ("errors", t.errors.as_ref().map(|v| v.span())),
                ("slower_than", t.slower_than.as_ref().map(|v| v.span())),
            ];
            for (key, span) in keys {
                if let Some(span) = span {
                    self.error(
                        span,
                        format!("[tracing] `{key}` needs an `endpoint` (the OTLP collector)"),
                    );
                }
            }
        }
        TraceSettings {
            sampling,
            errors: t.errors.as_ref().is_some_and(|e| *e.get_ref()),
            slower_than,
            export,
        }
    }

    fn otlp_export(&mut self, t: &RawTracing, live: &mut LiveState) -> Option<OtlpExport> {
        let url = t.endpoint.as_ref()?;
        let endpoint = match HttpEndpoint::parse(url.get_ref()) {
            Ok(e) => e,
            Err(e) => {
                self.error(url.span(), e);
                return None;
            }
        };
        let protocol = match t.protocol.as_ref().map(|p| (p, p.get_ref().as_str())) {
            None | Some((_, "http" | "http/protobuf")) => OtlpProtocol::HttpProtobuf,
            Some((_, "grpc")) => OtlpProtocol::Grpc,
            Some((p, other)) => {
                self.error(
                    p.span(),
                    format!("unknown OTLP protocol `{other}` (expected \"http\" or \"grpc\")"),
                );
                return None;
            }
        };
        let tls = self.endpoint_tls(&endpoint, t.ca.as_ref(), ("endpoint", url.span()))?;
        let roots = t.ca.as_ref().map(|c| c.get_ref().as_str());
        // gRPC in clear is HTTP/2 by prior knowledge; over TLS, ALPN offers h2 first.
        let speaks = match (protocol, endpoint.https) {
            (OtlpProtocol::Grpc, false) => "h2c",
            _ => "auto",
        };
        let upstream =
            self.internal_upstream_speaking("otlp", &endpoint, (tls.as_ref(), roots), (speaks, url.span()), live)?;
        let base = endpoint.path.split('?').next().unwrap_or("/");
        let (traces_path, logs_path) = OtlpExport::paths(protocol, base);
        let mut resource = vec![(
            "service.name".to_string(),
            t.service_name
                .as_ref()
                .map_or_else(|| "rampart".to_string(), |s| s.get_ref().clone()),
        )];
        resource.push(("service.version".into(), env!("CARGO_PKG_VERSION").into()));
        if let Some(host) = host_name() {
            resource.push(("host.name".into(), host));
        }
        for (key, value) in &t.resource {
            if key.is_empty() {
                self.error(value.span(), "a resource attribute needs a name");
                continue;
            }
            match resource.iter_mut().find(|(k, _)| k == key) {
                Some(kept) => kept.1 = value.get_ref().clone(),
                None => resource.push((key.clone(), value.get_ref().clone())),
            }
        }
        let count = |this: &mut Self, v: &Option<toml::Spanned<i64>>, what: &str, default: usize| {
            v.as_ref()
                .map_or(Some(default), |v| this.count(v, what, 1, 1 << 20))
                .unwrap_or(default)
        };
        let queue = count(self, &t.queue, "queue", defaults::OTLP_QUEUE);
        let batch = count(self, &t.batch, "batch", defaults::OTLP_BATCH);
        if let (Some(b), true) = (&t.batch, batch > queue) {
            self.error(b.span(), format!("batch = {batch} is larger than queue = {queue}"));
        }
        Some(OtlpExport {
            endpoint: endpoint.log_url(),
            upstream,
            protocol,
            authority: endpoint.host_header.clone(),
            traces_path,
            logs_path,
            resource,
            queue,
            batch,
            interval: self.duration(&t.interval, defaults::OTLP_INTERVAL),
        })
    }
}

/// This machine's name, for the `host.name` resource attribute.
fn host_name() -> Option<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    let name = name.trim();
    (!name.is_empty()).then(|| name.to_string())
}

#[cfg(test)]
mod tests;
