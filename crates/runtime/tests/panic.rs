//! A panic on one request closes that request's connection only: the worker serves the next
//! request, and the panic is counted. A filter registered by this test panics on `/boom`
//! (the test-only filter the safety net is checked with); the engine runs in this process, on
//! 127.0.0.1, with one worker, as the binary runs it.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use rampart_config::{compile_toml, LiveState};
use rampart_model::filter::FilterRegistry;
use rampart_proxy::http::filter::external::register;
use rampart_proxy::http::filter::{FilterCx, HttpFilter, RequestParts, Verdict};
use rampart_proxy::session_log::SessionLogWriter;
use rampart_runtime::{worker_panics, Engine, EngineOptions, InheritedSockets};

/// Panics on the request head of `/boom`; lets every other request through.
struct Boom;

impl HttpFilter for Boom {
    type State = ();
    type WorkerState = ();

    async fn request_head(&self, _: &mut FilterCx<'_>, _: &mut (), req: &mut RequestParts<'_>) -> Verdict {
        if req.path == b"/boom" {
            panic!("the test filter panics on /boom");
        }
        Verdict::Continue
    }
}

const CONFIG: &str = r#"
[global]
workers = 1

[listeners.web]
bind = "127.0.0.1:0"
protocol = "http"
filters = [{ type = "boom" }]

[[listeners.web.routes]]
name = "hello"
respond = { status = 200, body = "hello" }
"#;

/// One request on a new connection: the response's bytes, whatever came before the close.
fn get(addr: SocketAddr, path: &str) -> String {
    let mut conn = TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(conn, "GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").unwrap();
    let mut got = Vec::new();
    // A reset (the panicking task's socket closed with our request unread) counts as no answer.
    let _ = conn.read_to_end(&mut got);
    String::from_utf8_lossy(&got).into_owned()
}

#[test]
fn a_panic_on_one_request_closes_its_connection_and_the_worker_serves_the_next() {
    let mut registry = FilterRegistry::default();
    register(&mut registry, "boom", |_| Ok(Boom));
    let mut live = LiveState::default().with_filters(registry);
    let snapshot = compile_toml("t.toml", CONFIG, &mut live).unwrap().snapshot;
    let log = SessionLogWriter::start(None).unwrap();
    let options = EngineOptions { workers: 1, pin: false };
    let engine = Engine::start(options, snapshot, log.sink(), InheritedSockets::default()).unwrap();
    let addr = {
        let fd = engine.listening_sockets().next().expect("one listening socket");
        socket2::SockRef::from(&fd).local_addr().unwrap().as_socket().unwrap()
    };

    assert!(get(addr, "/").starts_with("HTTP/1.1 200"), "served before the panic");
    let before = worker_panics();
    let answer = get(addr, "/boom");
    assert_eq!(
        answer, "",
        "the panicking request's connection closes without an answer"
    );
    assert_eq!(worker_panics(), before + 1, "the panic is counted");
    for _ in 0..3 {
        let next = get(addr, "/");
        assert!(
            next.starts_with("HTTP/1.1 200"),
            "the worker serves on after the panic: {next:?}"
        );
        assert!(next.ends_with("hello"));
    }
    assert_eq!(
        engine.shutdown(Duration::from_secs(5)),
        0,
        "no connection was left to cut"
    );
}
