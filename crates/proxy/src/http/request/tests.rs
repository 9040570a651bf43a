//! The session state machine inside one worker context: a config compiled in the test, a
//! snapshot swapped in place of a reload, and a client on a loopback socket.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener as StdListener, TcpStream as StdStream};
use std::rc::Rc;

use rampart_model::Transport;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use rampart_config::{compile_toml, LiveState};
use rampart_model::Snapshot;

use crate::conn::{self, BoundListener};
use crate::worker::WorkerContext;

const BIND: &str = "127.0.0.1:1";

fn snapshot(live: &mut LiveState, body: &str) -> Snapshot {
    let text = format!(
        "[listeners.web]\nbind = \"{BIND}\"\nprotocol = \"http\"\n\n\
         [[listeners.web.routes]]\nmatch = {{ path = \"/\" }}\nrespond = {{ status = 200, body = \"{body}\" }}\n"
    );
    compile_toml("t.toml", &text, live).unwrap().snapshot
}

/// Runs one connection through the session, in a worker of its own, while `client` talks to it;
/// returns what the client returned.
fn with_session<T: Send + 'static>(
    shared: Arc<ArcSwap<Snapshot>>,
    client: impl FnOnce(StdStream, &dyn Fn()) -> T + Send + 'static,
    next: impl Fn() -> Snapshot + Send + Sync + 'static,
) -> T {
    let listener = StdListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let swap = shared.clone();
    let talker = std::thread::spawn(move || {
        let stream = StdStream::connect(addr).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        client(stream, &|| swap.store(Arc::new(next())))
    });
    let (accepted, peer) = listener.accept().unwrap();
    accepted.set_nonblocking(true).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async {
        let ctx = Rc::new(WorkerContext::new(0, Default::default(), shared.clone(), None));
        let bound = BoundListener::new(
            &ctx.counters,
            &ctx.snapshot(),
            Transport::Tcp,
            BIND.parse::<SocketAddr>().unwrap(),
        )
        .unwrap();
        let stream = tokio::net::TcpStream::from_std(accepted).unwrap();
        conn::serve(&ctx, bound, stream, peer).await;
    });
    talker.join().unwrap()
}

/// Reads until what arrived ends with `suffix`.
fn read_until(stream: &mut StdStream, suffix: &str) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.ends_with(suffix.as_bytes()) {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

#[test]
fn pipelined_requests_are_answered_in_order_and_a_bad_one_ends_the_connection() {
    let mut live = LiveState::default();
    let shared = Arc::new(ArcSwap::from_pointee(snapshot(&mut live, "hi")));
    let seen = with_session(
        shared,
        |mut client, _| {
            client
                .write_all(
                    b"GET / HTTP/1.1\r\nHost: a\r\n\r\nGET /missing HTTP/1.1\r\nHost: a\r\n\r\nGET / HTTP/1.1\r\n\r\n",
                )
                .unwrap();
            let mut all = String::new();
            let _ = client.read_to_string(&mut all);
            all
        },
        || unreachable!(),
    );
    let statuses: Vec<&str> = seen
        .match_indices("HTTP/1.1 ")
        .map(|(at, _)| &seen[at + 9..at + 12])
        .collect();
    // The third request has no Host: 400, and the connection closes (read_to_string returned).
    assert_eq!(statuses, ["200", "404", "400"], "{seen}");
    assert!(seen.contains("connection: close"), "{seen}");
}

#[test]
fn each_request_is_routed_with_the_snapshot_current_when_its_head_arrives() {
    let mut live = LiveState::default();
    let shared = Arc::new(ArcSwap::from_pointee(snapshot(&mut live, "one")));
    let seen = with_session(
        shared,
        |mut client, reload| {
            client.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
            let before = read_until(&mut client, "one");
            reload();
            client
                .write_all(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
                .unwrap();
            let mut after = String::new();
            let _ = client.read_to_string(&mut after);
            (before, after)
        },
        || snapshot(&mut LiveState::default(), "two"),
    );
    assert!(seen.0.ends_with("\r\n\r\none"), "{}", seen.0);
    assert!(seen.1.ends_with("\r\n\r\ntwo"), "{}", seen.1);
}
