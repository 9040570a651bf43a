//! On-demand TLS in the control plane: deciding on the names handshakes asked for. A name is
//! obtained when a listener's `allow` covers it, its `ask` URL (if any) answers 200 to
//! `GET PATH?domain=NAME`, and the process-wide rate (`per_minute`) has room; otherwise the name
//! is refused for [`DENY_FOR`], and its handshakes stop waiting.

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use rampart_model::acme::OnDemand;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long a refused name stays refused.
pub(super) const DENY_FOR: Duration = Duration::from_secs(600);
/// Time for the ask URL's answer.
const ASK_TIMEOUT: Duration = Duration::from_secs(3);

/// The decisions' memory: the orders of the last minute.
#[derive(Default)]
pub(super) struct Gate {
    recent: Vec<Instant>,
}

impl Gate {
    /// Whether `name` may be obtained now; `Err` says why not.
    pub(super) async fn decide(&mut self, policies: &[OnDemand], name: &str) -> anyhow::Result<()> {
        let Some(policy) = policies.iter().find(|p| p.allows(name)) else {
            bail!("no listener's `allow` covers it");
        };
        if let Some(ask) = &policy.ask {
            let status = tokio::time::timeout(ASK_TIMEOUT, ask_status(ask, name))
                .await
                .map_err(|_| anyhow!("{ask} did not answer within {ASK_TIMEOUT:?}"))??;
            if status != 200 {
                bail!("{ask} answered {status} for it");
            }
        }
        let now = Instant::now();
        self.recent.retain(|t| now.duration_since(*t) < Duration::from_secs(60));
        let per_minute = policies.iter().map(|p| p.per_minute).max().unwrap_or(policy.per_minute);
        if self.recent.len() >= per_minute as usize {
            bail!("{per_minute} certificates a minute were obtained on demand already");
        }
        self.recent.push(now);
        Ok(())
    }
}

/// The status `GET PATH?domain=NAME` gets from the `http://HOST:PORT/PATH` of `ask`.
async fn ask_status(ask: &str, name: &str) -> anyhow::Result<u16> {
    let rest = ask
        .strip_prefix("http://")
        .ok_or_else(|| anyhow!("{ask}: not http://"))?;
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let path = if path.is_empty() { "/" } else { path };
    let joiner = if path.contains('?') { '&' } else { '?' };
    let mut conn = TcpStream::connect(authority)
        .await
        .with_context(|| format!("ask URL {ask}"))?;
    let request = format!("GET {path}{joiner}domain={name} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n");
    conn.write_all(request.as_bytes()).await?;
    let mut head = Vec::new();
    let mut chunk = [0u8; 1024];
    while !head.windows(2).any(|w| w == b"\r\n") && head.len() < 8192 {
        let n = conn.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&chunk[..n]);
    }
    let line = String::from_utf8_lossy(&head);
    line.split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| anyhow!("{ask}: not an HTTP answer"))
}
