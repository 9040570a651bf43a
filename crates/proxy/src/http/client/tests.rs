//! The internal client against real upstreams on 127.0.0.1: HTTP/1.1 and h2c, from a request
//! path's task and from a background task that holds only the worker's context and a snapshot.

use std::cell::RefCell;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::rc::Rc;
use std::sync::mpsc;

use bytes::Bytes;

use super::*;
use crate::http::testing::shared_worker_for;

/// A config with upstream `app` on `target`, with `extra` lines.
fn config(target: &str, extra: &str) -> String {
    format!(
        "[listeners.web]\nbind = \"127.0.0.1:1\"\nprotocol = \"http\"\nupstream = \"app\"\n\n\
         [upstreams.app]\ntargets = [\"{target}\"]\n{extra}\n"
    )
}

/// An HTTP/1.1 upstream that reads one request (its head and a `content-length` body), reports
/// it whole, and answers `reply`.
fn h1_upstream(reply: &'static [u8]) -> (String, mpsc::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let Ok((mut conn, _)) = listener.accept() else { return };
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        let whole = |got: &[u8]| {
            let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") else {
                return false;
            };
            let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
            let len = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .map_or(0, |n| n.trim().parse().unwrap_or(0));
            got.len() >= end + 4 + len
        };
        while !whole(&got) {
            match conn.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        let _ = tx.send(String::from_utf8_lossy(&got).into_owned());
        let _ = conn.write_all(reply);
    });
    (addr.to_string(), rx)
}

/// An h2c upstream: each request is reported as `METHOD PATH AUTHORITY x-test=VALUE BODY` and
/// answered `201` with `x-answer: yes` and body `made`.
fn h2c_upstream() -> (String, mpsc::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            let Ok((tcp, _)) = listener.accept().await else { return };
            let Ok(mut conn) = h2::server::handshake(tcp).await else {
                return;
            };
            while let Some(Ok((request, respond))) = conn.accept().await {
                // On a task of its own: the connection is driven by `accept` meanwhile.
                tokio::spawn(answer(request, respond, tx.clone()));
            }
        });
    });
    (addr.to_string(), rx)
}

/// Reports one h2c request and answers it (see [`h2c_upstream`]).
async fn answer(
    request: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
    tx: mpsc::Sender<String>,
) {
    let (parts, mut body) = request.into_parts();
    let mut data = Vec::new();
    while let Some(Ok(chunk)) = body.data().await {
        let _ = body.flow_control().release_capacity(chunk.len());
        data.extend_from_slice(&chunk);
    }
    let header = parts.headers.get("x-test").map(|v| v.to_str().unwrap_or("?"));
    let _ = tx.send(format!(
        "{} {} {} x-test={} {}",
        parts.method,
        parts.uri.path_and_query().map_or("", |p| p.as_str()),
        parts.uri.authority().map_or("", |a| a.as_str()),
        header.unwrap_or("-"),
        String::from_utf8_lossy(&data)
    ));
    let response = http::Response::builder()
        .status(201)
        .header("x-answer", "yes")
        .body(())
        .unwrap();
    let Ok(mut send) = respond.send_response(response, false) else {
        return;
    };
    let _ = send.send_data(Bytes::from_static(b"made"), true);
}

/// A request head and its body.
type Request = (RequestHead, Option<Bytes>);

fn post() -> Request {
    let fields: [(&[u8], &[u8]); 2] = [
        (b"x-test", b"one"),
        // Framing is the client's to write: this one is dropped.
        (b"transfer-encoding", b"chunked"),
    ];
    let head = request_head(b"POST", b"app.test", b"/items?x=1", fields).unwrap();
    (head, Some(Bytes::from_static(b"hello")))
}

fn get(path: &[u8]) -> RequestHead {
    request_head::<&[u8], &[u8]>(b"GET", b"", path, []).unwrap()
}

/// Sends `request` to upstream 0 of `config` from a request path's task.
fn send_once(config: &str, request: &Request, options: InternalOptions) -> Result<Collected, InternalError> {
    let (runtime, ctx) = shared_worker_for(config);
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async {
        let snapshot = ctx.snapshot();
        send(&ctx, &snapshot, 0, &request.0, request.1.clone(), &options).await
    })
}

#[test]
fn a_request_to_an_http1_upstream_goes_as_text_and_its_response_is_collected() {
    let (target, seen) = h1_upstream(b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\nx-answer: yes\r\n\r\ndone");
    let response = send_once(&config(&target, ""), &post(), InternalOptions::new("test", 1024)).unwrap();
    assert_eq!(
        seen.recv().unwrap(),
        "POST /items?x=1 HTTP/1.1\r\nhost: app.test\r\nx-test: one\r\ncontent-length: 5\r\n\r\nhello"
    );
    assert_eq!((response.status(), &response.body[..]), (200, &b"done"[..]));
    assert_eq!(response.field("X-Answer"), Some(&b"yes"[..]));
}

#[test]
fn a_request_to_an_h2c_upstream_goes_as_fields_and_its_response_is_collected() {
    let (target, seen) = h2c_upstream();
    let config = config(&target, "protocol = \"h2c\"");
    let response = send_once(&config, &post(), InternalOptions::new("test", 1024)).unwrap();
    assert_eq!(seen.recv().unwrap(), "POST /items?x=1 app.test x-test=one hello");
    assert_eq!((response.status(), &response.body[..]), (201, &b"made"[..]));
    assert_eq!(response.field("x-answer"), Some(&b"yes"[..]));
}

#[test]
fn a_body_past_the_bound_cuts_the_response_and_no_answer_is_an_error() {
    let (target, _seen) = h1_upstream(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n0123456789");
    let result = send_once(&config(&target, ""), &post(), InternalOptions::new("test", 4));
    assert_eq!(result.unwrap_err(), InternalError::TooLarge { status: 200, max: 4 });

    let closed = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let result = send_once(
        &config(&closed, "connect_attempts = 1"),
        &post(),
        InternalOptions::new("test", 4),
    );
    assert_eq!(result.unwrap_err(), InternalError::NoResponse(HttpError::ConnectFailed));

    let bad = request_head::<&[u8], &[u8]>(b"POST", b"app.test", b"no slash", []);
    assert_eq!(bad.unwrap_err(), InternalError::Invalid("path"));
    let bad = request_head(b"GET", b"", b"/", [(&b"x"[..], &b"a\r\nb: c"[..])]);
    assert_eq!(bad.unwrap_err(), InternalError::Invalid("header field"));
}

/// A background request: spawned with only the worker's context and a snapshot, no client
/// connection anywhere; its outcome comes to the callback.
#[test]
fn a_background_request_runs_on_a_task_of_its_own() {
    let (target, seen) = h2c_upstream();
    let (runtime, ctx) = shared_worker_for(&config(&target, "protocol = \"h2c\""));
    let local = tokio::task::LocalSet::new();
    let outcome: Rc<RefCell<Option<Result<Collected, InternalError>>>> = Rc::default();
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    let got = outcome.clone();
    local.block_on(&runtime, async {
        spawn(
            &ctx,
            ctx.snapshot(),
            0,
            get(b"/revalidate"),
            None,
            InternalOptions::new("test", 1024),
            move |result| {
                *got.borrow_mut() = Some(result);
                let _ = done_tx.send(());
            },
        )
        .unwrap();
        done_rx.await.unwrap();
    });
    // No authority given: the upstream's name.
    assert_eq!(seen.recv().unwrap(), "GET /revalidate app x-test=- ");
    let response = outcome.take().unwrap().unwrap();
    assert_eq!((response.status(), &response.body[..]), (201, &b"made"[..]));

    // A context no task can hold cannot run one.
    let (_runtime, plain) = crate::http::testing::worker_for(&config(&target, ""));
    let refused = spawn(
        &plain,
        plain.snapshot(),
        0,
        get(b"/"),
        None,
        InternalOptions::new("test", 0),
        |_| {},
    );
    assert_eq!(refused, Err(InternalError::NoWorker));
}

/// A request pinned to one target goes there and nowhere else, down or not, and is no traffic:
/// no target metrics, no passive health, no outlier detection.
#[test]
fn a_pinned_request_reaches_its_target_only_even_a_down_one_and_is_not_counted() {
    let (alive, seen) = h1_upstream(b"HTTP/1.1 204 No Content\r\n\r\n");
    let closed = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let config = format!(
        "[listeners.web]\nbind = \"127.0.0.1:1\"\nprotocol = \"http\"\nupstream = \"app\"\n\n\
         [upstreams.app]\ntargets = [\"{alive}\", \"{closed}\"]\nconnect_attempts = 2\n\
         retry_on = [\"reset\", \"5xx\"]\n\
         outlier_detection = {{ consecutive_5xx = 1 }}\n"
    );
    let (runtime, ctx) = shared_worker_for(&config);
    let local = tokio::task::LocalSet::new();
    let get = get(b"/health");
    let pinned = |target| InternalOptions {
        pinned: Some(target),
        ..InternalOptions::new("test", 1024)
    };
    let snapshot = ctx.snapshot();
    let up = &snapshot.upstreams[0];
    // The closed target: the connect does not move on to the live one, and the failure is not
    // the target's passive health nor its metrics.
    let result = local.block_on(&runtime, send(&ctx, &snapshot, 0, &get, None, &pinned(1)));
    assert_eq!(result.unwrap_err(), InternalError::NoResponse(HttpError::ConnectFailed));
    let cells = up.targets[1].metrics.worker(0);
    assert!(up.targets[1].health.is_available());
    assert_eq!(cells.errors.iter().map(|c| c.get()).sum::<u64>(), 0);

    // The live target, marked down by a health check: reached all the same, and its answer is
    // counted nowhere.
    up.targets[0].health.set_active_up(false);
    assert!(!up.targets[0].health.is_available());
    let response = local
        .block_on(&runtime, send(&ctx, &snapshot, 0, &get, None, &pinned(0)))
        .unwrap();
    assert_eq!(response.status(), 204);
    assert!(seen.recv().unwrap().starts_with("GET /health HTTP/1.1\r\n"));
    let cells = up.targets[0].metrics.worker(0);
    assert_eq!(cells.responses.iter().map(|c| c.get()).sum::<u64>(), 0);
    assert_eq!((cells.opened.get(), cells.active.get()), (0, 0));

    // Unpinned, the same request finds no target: one is down, the other refuses connections.
    let result = local.block_on(
        &runtime,
        send(&ctx, &snapshot, 0, &get, None, &InternalOptions::new("test", 1024)),
    );
    assert!(matches!(result, Err(InternalError::NoResponse(_))), "{result:?}");
}
