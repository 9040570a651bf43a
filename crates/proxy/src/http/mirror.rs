//! A route's `mirror`: a copy of a share of its requests sent to a shadow upstream, on a task of
//! its own, so that it never delays or fails the request itself. The copy is the request head as
//! it goes to the route's upstream; requests with a body are not copied. The shadow's answer is
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

/// Sends a copy of the request whose upstream head is `head` to the mirror's upstream, when the
/// draw falls in its share and the request has no body.
pub fn copy(ctx: &WorkerContext, snapshot: &Snapshot, mirror: &Mirror, head: Option<&[u8]>, bodiless: bool) {
    let Some(head) = head.filter(|_| bodiless) else { return };
    if ctx.http.filters.random() % 100 >= u64::from(mirror.percent) {
        return;
    }
    let up = &snapshot.upstreams[mirror.upstream];
    let cells = up.metrics.clone();
    let worker = ctx.id;
    cells.worker(worker).mirrored.add(1);
    // Plain HTTP/1.1 only: a TLS or HTTP/2 shadow counts every copy as failed.
    let target = (up.tls.is_none())
        .then(|| ctx.pick(snapshot, mirror.upstream, 0, &Tried::default()))
        .flatten();
    let Some(target) = target else {
        return failed(&cells, worker);
    };
    let addr = up.targets[target].addr;
    let (connect, answer) = (up.connect_timeout, up.http.response_header_timeout);
    let head = head.to_vec();
    tokio::task::spawn_local(async move {
        if !answered(addr, &head, connect, answer).await {
            failed(&cells, worker);
        }
    });
}

fn failed(cells: &Arc<PerWorker<UpstreamCells>>, worker: usize) {
    cells.worker(worker).mirror_failed.add(1);
}

/// Whether the shadow at `addr` took the request and answered with a head in time.
async fn answered(addr: SocketAddr, head: &[u8], connect: Duration, answer: Duration) -> bool {
    let Ok(Ok(mut conn)) = tokio::time::timeout(connect, TcpStream::connect(addr)).await else {
        return false;
    };
    if conn.write_all(head).await.is_err() {
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
