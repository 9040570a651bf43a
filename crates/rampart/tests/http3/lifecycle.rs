//! HTTP/3 across a process's life: a reload turns it on and off, a drain lets requests in flight
//! finish behind GOAWAY, a binary upgrade closes the old process's connections at once and the
//! new process serves the clients' next ones.

use std::time::Duration;

use super::client::{block_on, client_config, connect, endpoint, fetch, request, Request};
use super::{gateway, tls};
use crate::common::http::{HttpBackend, Reply};
use crate::common::{free_port, run_rampart, write_file, Rampart};
use crate::upgrade::{gone, pid_in, wait_gone, Processes};

/// How a connection ended, as the client saw it: closed by the server with this application
/// error code, or `None` when the client's HTTP/3 layer closed it itself (which it does once a
/// GOAWAY came and its requests are done).
fn closed_with(closed: Result<quinn::ConnectionError, tokio::time::error::Elapsed>) -> Option<u64> {
    match closed {
        Ok(quinn::ConnectionError::ApplicationClosed(close)) => Some(close.error_code.into_inner()),
        Ok(quinn::ConnectionError::LocallyClosed) => None,
        other => panic!("the connection should have ended gracefully: {other:?}"),
    }
}

#[test]
fn a_drain_answers_the_requests_in_flight_then_closes_with_no_error() {
    let dir = tempfile::tempdir().unwrap();
    let slow = HttpBackend::start(Reply::Slow(Duration::from_millis(800)));
    let (proxy, port, tls) = gateway(dir.path(), &[slow.target()], "", "");
    let ep = endpoint(client_config(&tls.ca, false));
    let (answered, closed) = block_on(async {
        let (conn, mut send) = connect(&ep, port).await.unwrap();
        let in_flight = tokio::spawn(async move { request(&mut send, &Request::get("/slow")).await });
        // Once the upstream has the request, the proxy is told to stop (and kept: dropping it
        // would kill it).
        let _proxy = tokio::task::spawn_blocking(move || {
            slow.next_head();
            proxy.signal(libc::SIGTERM);
            proxy
        })
        .await
        .unwrap();
        let answered = in_flight.await.unwrap();
        let closed = tokio::time::timeout(Duration::from_secs(10), conn.closed()).await;
        (answered, closed)
    });
    assert_eq!(answered.unwrap().status, 200);
    // GOAWAY, then the end: the server's CONNECTION_CLOSE (H3_NO_ERROR) or the client's own.
    let code = closed_with(closed);
    assert!(matches!(code, None | Some(0x100)), "{code:?}");
}

#[test]
fn a_reload_turns_http3_on_and_off() {
    let dir = tempfile::tempdir().unwrap();
    let echo = HttpBackend::start(Reply::Echo);
    let port = free_port();
    let tls = tls(dir.path());
    let write = |http3: bool| {
        let text = format!(
            "[listeners.web]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\nhttp3 = {http3}\nupstream = \"app\"\n\n\
             {}\n\n[upstreams.app]\ntargets = [\"{}\"]\n",
            tls.table,
            echo.target()
        );
        write_file(dir.path(), "reload.toml", &text)
    };
    let path = write(false);
    let mut proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "2"]);
    assert!(fetch(&tls.ca, port, &Request::get("/")).is_err(), "no HTTP/3 yet");
    write(true);
    proxy.reload();
    assert_eq!(fetch(&tls.ca, port, &Request::get("/")).unwrap().status, 200);
    write(false);
    proxy.reload();
    assert!(fetch(&tls.ca, port, &Request::get("/")).is_err(), "HTTP/3 is off again");
}

#[test]
fn an_upgrade_closes_the_old_process_connections_and_the_new_process_serves() {
    let dir = tempfile::tempdir().unwrap();
    let echo = HttpBackend::start(Reply::Echo);
    let (mut proxy, port, tls) = gateway(dir.path(), &[echo.target()], "", "");
    let mut started = Processes::default();
    let ep = endpoint(client_config(&tls.ca, false));
    let old_pid = proxy.pid();
    // `send` is kept: the client's HTTP/3 layer closes the connection once every handle to it
    // is gone.
    let (conn, _send, first) = block_on(async {
        let (conn, mut send) = connect(&ep, port).await.unwrap();
        let first = request(&mut send, &Request::get("/before")).await.unwrap();
        (conn, send, first)
    });
    assert_eq!(first.status, 200);
    let (code, out, err) = run_rampart(dir.path(), &["upgrade", "--pid", &old_pid.to_string()]);
    assert_eq!(code, 0, "{out}{err}");
    let new_pid = pid_in(&out, "process ");
    started.add(new_pid);
    // The old process no longer reads the socket: its connection is closed at once, with no
    // error, rather than left to time out.
    let closed = block_on(async { tokio::time::timeout(Duration::from_secs(10), conn.closed()).await });
    assert_eq!(closed_with(closed), Some(0x100));
    wait_gone(old_pid, &proxy);
    // The client's next connection reaches the new process.
    assert_eq!(fetch(&tls.ca, port, &Request::get("/after")).unwrap().status, 200);
    assert!(!gone(new_pid));
    assert_eq!(proxy.wait_exit(), 0);
}
