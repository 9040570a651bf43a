//! A route's `mirror`: a copy of a share of its requests sent to a shadow upstream, on a task of
//! its own, so that it never delays or fails the request itself. The copy is the request head as
//! it goes to the route's upstream, with its body: a request without one is copied at once; one
//! with a body once the exchange has sent it (kept, as for a retry, up to the upstream's
//! `retry_max_body_size`; a body not kept whole makes the copy fail). The shadow's answer is
//! read up to the end of its head (that it answered is all that is counted), then the
//! connection is dropped.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rampart_model::metrics::{PerWorker, UpstreamCells};
use rampart_model::split::Mirror;
use rampart_model::Snapshot;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::balance::Tried;
use crate::worker::WorkerContext;

/// The most of the shadow's answer read while looking for the end of its head.
const MAX_HEAD: usize = 64 * 1024;

/// Whether this request is one the mirror copies (a draw against its share).
pub fn drawn(ctx: &WorkerContext, mirror: &Mirror) -> bool {
    ctx.http.filters.random() % 100 < u64::from(mirror.percent)
}

/// The body of a copy: none, or the request's as it was kept (`None` when it was not kept whole:
/// the copy fails), framed as `head` says (chunked when its length was not known).
pub enum CopyBody<'a> {
    None,
    Kept { data: Option<&'a [u8]>, chunked: bool },
}

/// Sends a copy of the request whose upstream head is `head` (`None`: not written as HTTP/1 text;
/// the copy fails) and whose body is `body` to the mirror's upstream.
pub fn copy(ctx: &WorkerContext, snapshot: &Snapshot, mirror: &Mirror, head: Option<&[u8]>, body: CopyBody<'_>) {
    let Some(up) = snapshot.upstreams.get(mirror.upstream) else {
        return;
    };
    let cells = up.metrics.clone();
    let worker = ctx.id;
    cells.worker(worker).mirrored.add(1);
    // Plain HTTP/1.1 only: a TLS or HTTP/2 shadow counts every copy as failed.
    let target = (up.tls.is_none())
        .then(|| ctx.pick(snapshot, mirror.upstream, 0, &Tried::default(), true))
        .flatten();
    let request = head.and_then(|head| with_body(head, body));
    let (Some(target), Some(request)) = (target, request) else {
        return failed(&cells, worker);
    };
    let Some(addr) = up.targets.get(target).map(|t| t.addr) else {
        return failed(&cells, worker);
    };
    let (connect, answer) = (up.connect_timeout, up.http.response_header_timeout);
    tokio::task::spawn_local(async move {
        if !answered(addr, &request, connect, answer).await {
            failed(&cells, worker);
        }
    });
}

/// The copy's bytes: the head and its body as the head frames it (`None`: the body was not kept).
fn with_body(head: &[u8], body: CopyBody<'_>) -> Option<Vec<u8>> {
    let mut out = head.to_vec();
    match body {
        CopyBody::None => {}
        CopyBody::Kept { data: None, .. } => return None,
        CopyBody::Kept {
            data: Some(data),
            chunked: true,
        } => {
            if !data.is_empty() {
                out.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
                out.extend_from_slice(data);
                out.extend_from_slice(b"\r\n");
            }
            out.extend_from_slice(b"0\r\n\r\n");
        }
        CopyBody::Kept {
            data: Some(data),
            chunked: false,
        } => out.extend_from_slice(data),
    }
    Some(out)
}

fn failed(cells: &Arc<PerWorker<UpstreamCells>>, worker: usize) {
    cells.worker(worker).mirror_failed.add(1);
}

/// Whether the shadow at `addr` took the request (head and body) and answered with a head in time.
async fn answered(addr: SocketAddr, request: &[u8], connect: Duration, answer: Duration) -> bool {
    let Ok(Ok(mut conn)) = tokio::time::timeout(connect, TcpStream::connect(addr)).await else {
        return false;
    };
    if conn.write_all(request).await.is_err() {
        return false;
    }
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + answer;
    loop {
        match tokio::time::timeout_at(deadline, conn.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
            _ => return false,
        }
        if got.windows(4).any(|w| w == b"\r\n\r\n") {
            return true;
        }
        if got.len() > MAX_HEAD {
            return false;
        }
    }
}
