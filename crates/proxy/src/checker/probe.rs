//! One check of one target: a bare connect (and the TLS handshake, for a TLS upstream), an HTTP
//! request through the internal client, pinned to the target, or a DNS query over UDP.

use rampart_model::{HealthCheck, HttpCheck, Snapshot};
use tokio::net::TcpStream;

use crate::http::client::{self, InternalOptions};
use crate::worker::WorkerContext;

/// The most response body bytes an HTTP check reads (the status decides; past this the
/// connection is closed).
const MAX_BODY: usize = 64 * 1024;

/// Checks target `target` of upstream `upstream`: `Err` says why it failed.
pub(super) async fn probe(
    ctx: &WorkerContext,
    snapshot: &Snapshot,
    upstream: usize,
    target: usize,
    check: &HealthCheck,
) -> Result<(), String> {
    if let Some(name) = &check.dns {
        let up = snapshot.upstreams.get(upstream).ok_or("no such upstream")?;
        let t = up.targets.get(target).ok_or("no such target")?;
        return super::dns::check(t.addr, name).await;
    }
    match &check.http {
        None => connect(snapshot, upstream, target).await,
        Some(http) => request(ctx, snapshot, upstream, target, http).await,
    }
}

/// A TCP connect, and the handshake (verified as requests' are) for a TLS upstream.
async fn connect(snapshot: &Snapshot, upstream: usize, target: usize) -> Result<(), String> {
    let up = snapshot.upstreams.get(upstream).ok_or("no such upstream")?;
    let t = up.targets.get(target).ok_or("no such target")?;
    let tcp = TcpStream::connect(t.addr).await.map_err(|e| e.to_string())?;
    if let Some((tls, name)) = up.tls.as_ref().zip(t.tls_name.as_ref()) {
        crate::tls::connect::connect(tcp, &tls.config, name)
            .await
            .map_err(|e| format!("TLS: {e}"))?;
    }
    Ok(())
}

/// `GET path` with the check's `Host`, sent to the target alone in the upstream's protocol (over
/// its TLS, on its pooled connections; one resend on a stale connection), counted as no traffic.
/// The response's status decides, whether or not its body comes whole.
async fn request(
    ctx: &WorkerContext,
    snapshot: &Snapshot,
    upstream: usize,
    target: usize,
    http: &HttpCheck,
) -> Result<(), String> {
    let user_agent: [(&[u8], &[u8]); 1] = [(b"user-agent", b"rampart-health-check")];
    let request = client::request_head(b"GET", http.host.as_bytes(), http.path.as_bytes(), user_agent)
        .map_err(|e| e.to_string())?;
    let options = InternalOptions {
        retries: 1,
        keep_body: false,
        pinned: Some(target),
        ..InternalOptions::new("health_check", MAX_BODY)
    };
    let status = match client::send(ctx, snapshot, upstream, &request, None, &options).await {
        Ok(response) => response.status(),
        Err(e) => e.status().ok_or_else(|| e.to_string())?,
    };
    let (lo, hi) = http.expect_status;
    if (lo..=hi).contains(&status) {
        Ok(())
    } else {
        Err(format!("status {status} outside {lo}-{hi}"))
    }
}
