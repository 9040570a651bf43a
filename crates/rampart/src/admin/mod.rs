//! The admin listener: a small HTTP/1.1 server on its own thread (a slow or flooding admin client
//! never touches a worker, and it keeps answering while the control plane drains). It reads shared
//! state the control loop publishes and sends it commands (reload) over a channel.
//!
//! - [`api`]: the endpoints.
//! - [`metrics`]: `GET /metrics`.
//! - [`page`]: `GET /`, the live status page.
//! - [`state`]: what the control loop shares with it.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use rampart_config::AdminAddress;
use rampart_proto::h1::{parse_request, Framing, Limits};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

pub mod api;
pub mod caches;
pub mod history;
pub mod metrics;
pub mod page;
pub mod state;
mod telemetry_metrics;
pub mod traffic;

pub use state::{AdminShared, Command};

use crate::upgrade::inherit::Handover;

/// Time a client has to send a whole request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest request body read (and dropped): no endpoint takes one yet.
const MAX_BODY: u64 = 64 * 1024;

/// Binds `address` (or takes the socket for it that a binary upgrade handed over) and serves it
/// on a thread of its own until the process exits or hands the listener to a new process.
/// Binding happens before this returns, so a bad address stops the start. Returns a duplicate of
/// the listening socket, to hand over in an upgrade.
pub fn start(address: &AdminAddress, shared: Arc<AdminShared>, handover: &mut Handover) -> anyhow::Result<OwnedFd> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the admin runtime")?;
    let listener = {
        let _entered = runtime.enter();
        Listener::bind(address, handover).with_context(|| format!("admin listen {address}"))?
    };
    let copy = listener.duplicate().context("admin listener")?;
    // The first reading is of the start, before any traffic.
    shared.history.record(&shared);
    std::thread::Builder::new()
        .name("rampart-admin".into())
        .spawn(move || {
            runtime.spawn(history::sample(shared.clone()));
            runtime.block_on(accept_loop(listener, shared))
        })
        .context("cannot start the admin thread")?;
    Ok(copy)
}

enum Listener {
    Tcp(tokio::net::TcpListener),
    /// The path is removed when the listener closes, unless it was handed over.
    Unix(tokio::net::UnixListener, Option<std::path::PathBuf>),
}

impl Listener {
    /// Needs a runtime entered (the sockets register with its reactor).
    fn bind(address: &AdminAddress, handover: &mut Handover) -> std::io::Result<Listener> {
        match address {
            AdminAddress::Tcp(addr) => {
                let socket = match handover.take_tcp(*addr) {
                    Some(socket) => socket,
                    None => std::net::TcpListener::bind(addr)?,
                };
                socket.set_nonblocking(true)?;
                tokio::net::TcpListener::from_std(socket).map(Listener::Tcp)
            }
            AdminAddress::Unix(path) => {
                let socket = match handover.take_unix(path) {
                    Some(socket) => socket,
                    None => {
                        // A socket file left by a process that is gone is replaced; a live one is not.
                        if path.exists() && std::os::unix::net::UnixStream::connect(path).is_err() {
                            std::fs::remove_file(path)?;
                        }
                        std::os::unix::net::UnixListener::bind(path)?
                    }
                };
                socket.set_nonblocking(true)?;
                tokio::net::UnixListener::from_std(socket).map(|l| Listener::Unix(l, Some(path.clone())))
            }
        }
    }

    fn duplicate(&self) -> std::io::Result<OwnedFd> {
        match self {
            Listener::Tcp(l) => l.as_fd().try_clone_to_owned(),
            Listener::Unix(l, _) => l.as_fd().try_clone_to_owned(),
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Listener::Unix(_, Some(path)) = self {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Accepts until the listener is handed over in an upgrade; connections already open go on.
async fn accept_loop(mut listener: Listener, shared: Arc<AdminShared>) {
    loop {
        let accepted = tokio::select! {
            // A hand-over wins over a connection waiting at the same time: that one is the new
            // process's to take.
            biased;
            _ = shared.handed_over.notified() => break,
            accepted = accept(&listener) => accepted,
        };
        match accepted {
            Ok(Connection::Tcp(stream)) => {
                tokio::spawn(serve_connection(stream, shared.clone()));
            }
            Ok(Connection::Unix(stream)) => {
                tokio::spawn(serve_connection(stream, shared.clone()));
            }
            Err(e) => accept_failed(e).await,
        }
    }
    // The new process serves the socket file now.
    if let Listener::Unix(_, path) = &mut listener {
        path.take();
    }
    drop(listener);
    std::future::pending::<()>().await
}

enum Connection {
    Tcp(tokio::net::TcpStream),
    Unix(tokio::net::UnixStream),
}

async fn accept(listener: &Listener) -> std::io::Result<Connection> {
    match listener {
        Listener::Tcp(l) => l.accept().await.map(|(s, _)| Connection::Tcp(s)),
        Listener::Unix(l, _) => l.accept().await.map(|(s, _)| Connection::Unix(s)),
    }
}

/// Out of descriptors or similar: say so and give the system a moment.
async fn accept_failed(e: std::io::Error) {
    tracing::warn!("admin: accept failed: {e}");
    tokio::time::sleep(Duration::from_millis(100)).await;
}

/// Answers requests on one connection until the client closes, asks to close, or errs.
async fn serve_connection(mut stream: impl AsyncRead + AsyncWrite + Unpin, shared: Arc<AdminShared>) {
    let mut buf = Vec::with_capacity(2048);
    loop {
        let request = match tokio::time::timeout(REQUEST_TIMEOUT, read_request(&mut stream, &mut buf)).await {
            Ok(Ok(Some(r))) => r,
            Ok(Ok(None)) => return,
            Ok(Err(status)) => {
                let answer = api::Answer::error(status, "malformed request");
                let _ = stream.write_all(&answer.encode(false, false)).await;
                return;
            }
            Err(_) => return,
        };
        let answer = api::handle(&shared, &request).await;
        let bytes = answer.encode(request.keep_alive, request.method == "HEAD");
        if stream.write_all(&bytes).await.is_err() || !request.keep_alive {
            return;
        }
    }
}

/// One request as the endpoints see it.
#[derive(Debug)]
pub struct Request {
    pub method: String,
    pub path: String,
    /// What follows `?` in the target (empty when nothing does).
    pub query: String,
    pub authorization: Option<String>,
    pub keep_alive: bool,
}

/// Reads one request (its body, if any, is read and dropped). `Ok(None)` when the client closed
/// between requests; `Err(status)` for a malformed or oversized one.
async fn read_request(stream: &mut (impl AsyncRead + Unpin), buf: &mut Vec<u8>) -> Result<Option<Request>, u16> {
    let limits = Limits::default();
    let mut req = rampart_proto::message::RequestHead::default();
    loop {
        match parse_request(buf, &limits, &mut req) {
            Ok(Some(head)) => {
                let slice = |r: (u32, u32)| String::from_utf8_lossy(&buf[r.0 as usize..r.1 as usize]).into_owned();
                let target = slice(req.target);
                let (path, query) = target.split_once('?').unwrap_or((&target, ""));
                let (path, query) = (path.to_string(), query.to_string());
                let authorization = req
                    .fields
                    .iter()
                    .find(|f| f.name(buf).eq_ignore_ascii_case(b"authorization"))
                    .map(|f| String::from_utf8_lossy(f.value(buf)).into_owned());
                let request = Request {
                    method: slice(req.method),
                    path,
                    query,
                    authorization,
                    keep_alive: req.keep_alive,
                };
                let body = match head.framing {
                    Framing::None => 0,
                    Framing::Length(n) if n <= MAX_BODY => n as usize,
                    _ => return Err(413),
                };
                buf.drain(..head.len);
                while buf.len() < body {
                    let mut chunk = [0u8; 4096];
                    match stream.read(&mut chunk).await {
                        Ok(0) | Err(_) => return Ok(None),
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                buf.drain(..body);
                return Ok(Some(request));
            }
            Ok(None) => {}
            Err(e) => return Err(e.status()),
        }
        let mut chunk = [0u8; 4096];
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return Ok(None),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}
