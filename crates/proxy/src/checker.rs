//! Active health checks, run by the control plane: every interval, a TCP connect and, for a TLS
//! upstream, a handshake (or, for `http` checks, a `GET` whose status must fall in the expected
//! range); `fall` consecutive
//! failures take a target down, `rise` consecutive successes bring it back. Workers see the
//! verdict through the shared [`TargetHealth`](rampart_model::health::TargetHealth).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use rampart_proto::h1::{parse_response, Limits};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::task::JoinSet;

use rampart_model::health::TargetHealth;
use rampart_model::tls::TargetTlsName;
use rampart_model::{HealthCheck, HttpCheck, Snapshot};

use crate::stream::Stream;

/// Counts the targets whose first check has not finished yet (for readiness: Rampart is ready once
/// every target was checked once). A task that is stopped before its first check counts as done.
#[derive(Debug, Clone, Default)]
pub struct FirstRound(Arc<AtomicUsize>);

impl FirstRound {
    /// Whether every target counted here has been checked once.
    pub fn is_done(&self) -> bool {
        self.0.load(Ordering::Acquire) == 0
    }
}

/// One task's place in a [`FirstRound`], given up after its first check (or when it stops).
struct FirstCheck(Option<Arc<AtomicUsize>>);

impl FirstCheck {
    fn done(&mut self) {
        if let Some(count) = self.0.take() {
            count.fetch_sub(1, Ordering::Release);
        }
    }
}

impl Drop for FirstCheck {
    fn drop(&mut self) {
        self.done();
    }
}

/// Starts one checking task per target of every upstream that has a health check. Dropping (or
/// aborting) the returned set stops them all, as a reload does before starting the new set. With
/// `first_round`, each task counts there until its first check is done.
pub fn spawn_checks(snapshot: &Snapshot, first_round: Option<&FirstRound>) -> JoinSet<()> {
    let mut set = JoinSet::new();
    for upstream in &snapshot.upstreams {
        let Some(check) = &upstream.health_check else { continue };
        for target in &upstream.targets {
            let health = target.health.clone();
            let label = Arc::new((upstream.name.clone(), target.name.clone()));
            let (addr, check) = (target.addr, check.clone());
            // Over TLS when the upstream speaks it (verified as requests are).
            let tls = upstream
                .tls
                .as_ref()
                .zip(target.tls_name.clone())
                .map(|(t, name)| (t.config.clone(), name));
            let first = FirstCheck(first_round.map(|r| {
                r.0.fetch_add(1, Ordering::AcqRel);
                r.0.clone()
            }));
            set.spawn(async move { check_target(label, addr, tls, health, check, first).await });
        }
    }
    set
}

/// TLS settings of a check: the upstream's client configuration and the target's name.
type CheckTls = Option<(Arc<rustls::ClientConfig>, TargetTlsName)>;

async fn check_target(
    // The upstream's and the target's names.
    label: Arc<(String, String)>,
    addr: SocketAddr,
    tls: CheckTls,
    health: Arc<TargetHealth>,
    check: HealthCheck,
    mut first: FirstCheck,
) {
    let (mut successes, mut failures) = (0u32, 0u32);
    let mut ticker = tokio::time::interval(check.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let result = match tokio::time::timeout(check.timeout, probe(addr, tls.as_ref(), check.http.as_ref())).await {
            Ok(r) => r,
            Err(_) => Err(format!("no answer within {:?}", check.timeout)),
        };
        match result {
            Ok(()) => {
                successes += 1;
                failures = 0;
                if successes >= check.rise && health.set_active_up(true) {
                    let (upstream, target) = (label.0.as_str(), label.1.as_str());
                    tracing::warn!(
                        upstream,
                        target,
                        state = "up",
                        checks = successes,
                        "health check: target is up"
                    );
                }
            }
            Err(why) => {
                failures += 1;
                successes = 0;
                if failures >= check.fall && health.set_active_up(false) {
                    let (upstream, target, reason) = (label.0.as_str(), label.1.as_str(), why.as_str());
                    tracing::warn!(
                        upstream,
                        target,
                        state = "down",
                        reason,
                        checks = failures,
                        "health check: target is down"
                    );
                }
            }
        }
        first.done();
    }
}

/// One check: a connect (and the TLS handshake, for a TLS upstream), and for HTTP checks a
/// request and a status in range.
async fn probe(
    addr: SocketAddr,
    tls: Option<&(Arc<rustls::ClientConfig>, TargetTlsName)>,
    http: Option<&HttpCheck>,
) -> Result<(), String> {
    let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let mut stream = match tls {
        None => Stream::Tcp(tcp),
        Some((config, name)) => Stream::Tls(Box::new(
            crate::tls::connect::connect(tcp, config, name)
                .await
                .map_err(|e| format!("TLS: {e}"))?,
        )),
    };
    let Some(http) = http else { return Ok(()) };
    let request = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: rampart-health-check\r\nConnection: close\r\n\r\n",
        http.path, http.host
    );
    stream.write_all(request.as_bytes()).await.map_err(|e| e.to_string())?;
    let mut buf = Vec::with_capacity(1024);
    let mut fields = Vec::new();
    loop {
        let mut chunk = [0u8; 1024];
        let n = stream.read(&mut chunk).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("connection closed before a response".into());
        }
        buf.extend_from_slice(&chunk[..n]);
        match parse_response(&buf, &Limits::default(), false, &mut fields) {
            Ok(Some(head)) => {
                let (lo, hi) = http.expect_status;
                return if (lo..=hi).contains(&head.status) {
                    Ok(())
                } else {
                    Err(format!("status {} outside {lo}-{hi}", head.status))
                };
            }
            Ok(None) if buf.len() < 64 * 1024 => continue,
            Ok(None) => return Err("response head too large".into()),
            Err(e) => return Err(format!("bad response: {e}")),
        }
    }
}
