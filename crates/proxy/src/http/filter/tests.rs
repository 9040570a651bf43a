//! The filter model end to end inside one worker: a config compiled with an external filter
//! registered the way an embedding program would, clients and backends on loopback sockets.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener as StdListener, TcpStream as StdStream};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use rampart_config::{compile_toml, LiveState};
use rampart_model::filter::{FilterRegistry, OptionValue};
use rampart_model::Snapshot;

use super::external::register;
use super::*;
use crate::conn::{self, BoundListener};
use crate::worker::WorkerContext;

const BIND: &str = "127.0.0.1:1";

/// A test filter that uses every phase: it answers 418 for `/teapot`, sends requests with
/// `x-pick: b` to upstream `b`, refuses request bodies containing `forbidden`, copies a request's
/// `x-checksum` trailer into `x-checksum-seen` and drops its `x-private` trailer, upper-cases
/// response bodies when asked by `x-shout: 1`, adds `x-phases` to responses, echoes a
/// `grpc-status` trailer as `x-checked` and drops `x-internal` trailers, and counts finished
/// requests and their bytes in its log phase.
struct Shout {
    other_upstream: usize,
    logged: Arc<AtomicU64>,
    logged_bytes: Arc<AtomicU64>,
}

#[derive(Default)]
struct ShoutState {
    shout: bool,
    body: Vec<u8>,
}

impl HttpFilter for Shout {
    type State = ShoutState;
    type WorkerState = ();

    async fn request_head(&self, cx: &mut FilterCx<'_>, state: &mut ShoutState, req: &mut RequestParts<'_>) -> Verdict {
        if req.path == b"/teapot" {
            return Verdict::Respond(Answer::plain(418, "teapot", "short and stout").with_header("x-teapot", "yes"));
        }
        if req.header("x-pick") == Some(b"b") {
            req.upstream = Some(self.other_upstream);
        }
        state.shout = req.header("x-shout") == Some(b"1");
        req.set_header("x-filtered-by", cx.route);
        req.remove_header("x-secret");
        if req.body != rampart_proto::message::BodyLength::None {
            req.inspect_body();
        }
        Verdict::Continue
    }

    fn request_body(
        &self,
        _: &mut FilterCx<'_>,
        state: &mut ShoutState,
        chunk: &[u8],
        _: bool,
    ) -> Result<(), Rejection> {
        state.body.extend_from_slice(chunk);
        if state.body.windows(9).any(|w| w == b"forbidden") {
            return Err(Rejection {
                status: 422,
                reason: "forbidden_word",
            });
        }
        Ok(())
    }

    fn response_head(&self, _: &mut FilterCx<'_>, state: &mut ShoutState, resp: &mut ResponseParts<'_>) {
        resp.set_header("x-phases", if resp.local { "local" } else { "upstream" });
        if state.shout {
            resp.transform_body();
        }
    }

    fn response_body(
        &self,
        _: &mut FilterCx<'_>,
        _: &mut ShoutState,
        body: &mut Vec<u8>,
        end: bool,
    ) -> Result<(), Rejection> {
        body.make_ascii_uppercase();
        if end {
            body.extend_from_slice(b"!");
        }
        Ok(())
    }

    fn request_trailers(&self, _: &mut FilterCx<'_>, _: &mut ShoutState, trailers: &mut TrailerParts<'_>) {
        if let Some(sum) = trailers.header("x-checksum") {
            let sum = String::from_utf8_lossy(sum).into_owned();
            trailers.add_header("x-checksum-seen", &sum);
        }
        trailers.remove_header("x-private");
    }

    fn response_trailers(&self, _: &mut FilterCx<'_>, _: &mut ShoutState, trailers: &mut TrailerParts<'_>) {
        if let Some(status) = trailers.header("grpc-status") {
            let status = String::from_utf8_lossy(status).into_owned();
            trailers.add_header("x-checked", &status);
        }
        trailers.remove_header("x-internal");
    }

    fn log(&self, _: &mut FilterCx<'_>, _: &mut ShoutState, outcome: &Outcome) {
        self.logged.fetch_add(1, Ordering::SeqCst);
        self.logged_bytes.fetch_add(outcome.bytes_out, Ordering::SeqCst);
    }
}

/// A backend answering every request on a connection with `reply(request head)` until the
/// client closes; returns what it received.
fn backend(reply: fn(&str) -> Vec<u8>) -> (String, std::thread::JoinHandle<Vec<String>>) {
    let listener = StdListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let handle = std::thread::spawn(move || {
        let mut seen = Vec::new();
        listener.set_nonblocking(false).unwrap();
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { break };
            conn.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            loop {
                let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                    match conn.read(&mut chunk) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                    continue;
                };
                let head = String::from_utf8_lossy(&buf[..end + 4]).into_owned();
                let length = head
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length: ")
                            .map(|v| v.trim().parse::<usize>().unwrap())
                    })
                    .unwrap_or(0);
                while buf.len() < end + 4 + length {
                    match conn.read(&mut chunk) {
                        Ok(0) | Err(_) => return seen,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                buf.drain(..end + 4 + length);
                if head.starts_with("QUIT") {
                    return seen;
                }
                conn.write_all(&reply(&head)).unwrap();
                seen.push(head);
            }
        }
        seen
    });
    (addr, handle)
}

/// Serves `snapshot` in one worker while `client` talks to it (given the listener's address).
fn serve<T: Send + 'static>(snapshot: Snapshot, client: impl FnOnce(SocketAddr) -> T + Send + 'static) -> T {
    serve_shared(Arc::new(ArcSwap::from_pointee(snapshot)), client)
}

/// [`serve`] with the snapshot in `shared`, which the client may replace (a reload).
fn serve_shared<T: Send + 'static>(
    shared: Arc<ArcSwap<Snapshot>>,
    client: impl FnOnce(SocketAddr) -> T + Send + 'static,
) -> T {
    let listener = StdListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let (done_tx, mut done_rx) = tokio::sync::oneshot::channel();
    let talker = std::thread::spawn(move || {
        let out = client(addr);
        let _ = done_tx.send(());
        out
    });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async {
        let ctx = Rc::new(WorkerContext::new(0, Default::default(), shared.clone(), None));
        let listener = tokio::net::TcpListener::from_std(listener).unwrap();
        loop {
            tokio::select! {
                accepted = listener.accept() => {
                    let (stream, peer) = accepted.unwrap();
                    let ctx = ctx.clone();
                    tokio::task::spawn_local(async move {
                        let bound = BoundListener::new(&ctx.counters, &ctx.snapshot(), rampart_model::Transport::Tcp, BIND.parse().unwrap()).unwrap();
                        conn::serve(&ctx, bound, stream, peer).await;
                    });
                }
                _ = &mut done_rx => break,
            }
        }
    });
    talker.join().unwrap()
}

/// Sends `raw` on a new connection and reads one response: (status, head, body).
fn exchange(addr: SocketAddr, raw: &[u8]) -> (u16, String, Vec<u8>) {
    let mut c = StdStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(raw).unwrap();
    let mut got = Vec::new();
    let _ = c.read_to_end(&mut got);
    let end = got.windows(4).position(|w| w == b"\r\n\r\n").expect("a response head") + 4;
    let head = String::from_utf8_lossy(&got[..end]).into_owned();
    let status = head[9..12].parse().unwrap();
    (status, head, got[end..].to_vec())
}

/// Decodes a chunked body.
fn unchunk(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line = body.windows(2).position(|w| w == b"\r\n").unwrap();
        let size = usize::from_str_radix(std::str::from_utf8(&body[..line]).unwrap(), 16).unwrap();
        body = &body[line + 2..];
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&body[..size]);
        body = &body[size + 2..];
    }
}

struct Setup {
    snapshot: Snapshot,
    logged: Arc<AtomicU64>,
    logged_bytes: Arc<AtomicU64>,
}

fn setup(a: &str, b: &str) -> Setup {
    let logged = Arc::new(AtomicU64::new(0));
    let logged_bytes = Arc::new(AtomicU64::new(0));
    let mut registry = FilterRegistry::default();
    let (l, lb) = (logged.clone(), logged_bytes.clone());
    register(&mut registry, "shout", move |options| {
        match options.get("other_upstream") {
            Some(OptionValue::Integer(i)) => Ok(Shout {
                other_upstream: *i as usize,
                logged: l.clone(),
                logged_bytes: lb.clone(),
            }),
            _ => Err("needs other_upstream (an index)".to_string()),
        }
    });
    let text = format!(
        "[listeners.web]\nbind = \"{BIND}\"\nprotocol = \"http\"\nfilters = [{{ type = \"shout\", other_upstream = 1 }}]\n\n\
         [[listeners.web.routes]]\nname = \"hello\"\nmatch = {{ path = \"/hello\" }}\nrespond = {{ status = 200, body = \"hi\" }}\n\n\
         [[listeners.web.routes]]\nname = \"api\"\nupstream = \"a\"\n\n\
         [upstreams.a]\ntargets = [\"{a}\"]\n[upstreams.b]\ntargets = [\"{b}\"]\n"
    );
    let mut live = LiveState::default().with_filters(registry);
    let snapshot = compile_toml("t.toml", &text, &mut live).unwrap().snapshot;
    Setup {
        snapshot,
        logged,
        logged_bytes,
    }
}

fn named(tag: &'static str) -> fn(&str) -> Vec<u8> {
    match tag {
        "a" => |head| {
            let chunked = head.to_ascii_lowercase().contains("x-chunked: 1");
            if chunked {
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nfrom \r\n1\r\na\r\n0\r\ngrpc-status: 0\r\nx-internal: 1\r\n\r\n".to_vec()
            } else {
                b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\nfrom a".to_vec()
            }
        },
        _ => |_| b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\nfrom b".to_vec(),
    }
}

#[test]
fn every_phase_of_an_external_filter_runs() {
    let (a, a_seen) = backend(named("a"));
    let (b, b_seen) = backend(named("b"));
    let s = setup(&a, &b);
    let (logged, logged_bytes) = (s.logged.clone(), s.logged_bytes.clone());
    let results = serve(s.snapshot, move |addr| {
        let teapot = exchange(addr, b"GET /teapot HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        let local = exchange(addr, b"GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        let plain = exchange(
            addr,
            b"GET /x HTTP/1.1\r\nHost: x\r\nX-Secret: s\r\nConnection: close\r\n\r\n",
        );
        let picked = exchange(
            addr,
            b"GET /x HTTP/1.1\r\nHost: x\r\nX-Pick: b\r\nConnection: close\r\n\r\n",
        );
        let shout_length = exchange(
            addr,
            b"GET /x HTTP/1.1\r\nHost: x\r\nX-Shout: 1\r\nConnection: close\r\n\r\n",
        );
        let shout_chunked = exchange(
            addr,
            b"GET /x HTTP/1.1\r\nHost: x\r\nX-Shout: 1\r\nX-Chunked: 1\r\nConnection: close\r\n\r\n",
        );
        let shout_http10 = exchange(addr, b"GET /x HTTP/1.0\r\nHost: x\r\nX-Shout: 1\r\n\r\n");
        let body_ok = exchange(
            addr,
            b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nConnection: close\r\n\r\nfine",
        );
        let body_refused = exchange(
            addr,
            b"POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n4\r\nforb\r\n5\r\nidden\r\n0\r\n\r\n",
        );
        // Ends the backends' loops.
        for target in [&a, &b] {
            let mut c = StdStream::connect(target).unwrap();
            c.write_all(b"QUIT / HTTP/1.1\r\n\r\n").unwrap();
        }
        vec![
            teapot,
            local,
            plain,
            picked,
            shout_length,
            shout_chunked,
            shout_http10,
            body_ok,
            body_refused,
        ]
    });
    let [teapot, local, plain, picked, shout_length, shout_chunked, shout_http10, body_ok, body_refused] =
        <[_; 9]>::try_from(results).unwrap();

    // An answer from the request head phase: the filter that answered sees no response phase.
    assert_eq!(teapot.0, 418);
    assert!(
        teapot.1.contains("x-teapot: yes") && !teapot.1.contains("x-phases"),
        "{}",
        teapot.1
    );
    assert_eq!(teapot.2, b"418 Status: short and stout\n");
    // Rampart's own answers pass the response phase.
    assert_eq!(local.0, 200);
    assert!(local.1.contains("x-phases: local"), "{}", local.1);
    // Upstream responses too; request edits reach the upstream.
    assert_eq!((plain.0, &plain.2[..]), (200, &b"from a"[..]));
    assert!(plain.1.contains("x-phases: upstream"), "{}", plain.1);
    // A filter picked the other upstream.
    assert_eq!(picked.2, b"from b");
    // A transformed body goes out chunked, without the upstream's length, either way it came.
    assert!(
        shout_length.1.contains("transfer-encoding: chunked"),
        "{}",
        shout_length.1
    );
    assert!(!shout_length.1.contains("content-length"), "{}", shout_length.1);
    assert_eq!(unchunk(&shout_length.2), b"FROM A!");
    assert_eq!(unchunk(&shout_chunked.2), b"FROM A!");
    // The response trailers phase: what came passes it, edited, in the last chunk.
    let last_chunk = String::from_utf8_lossy(&shout_chunked.2).into_owned();
    assert!(
        last_chunk.ends_with("0\r\ngrpc-status: 0\r\nx-checked: 0\r\n\r\n"),
        "{last_chunk:?}"
    );
    // HTTP/1.0 cannot take chunks: no transform.
    assert_eq!(shout_http10.2, b"from a");
    // The request body phase: a body passes, a refused one never completes upstream.
    assert_eq!(body_ok.0, 200);
    assert_eq!(body_refused.0, 422);

    let a_seen = a_seen.join().unwrap();
    let b_seen = b_seen.join().unwrap();
    assert_eq!(b_seen.len(), 1, "{b_seen:?}");
    let first = a_seen[0].to_ascii_lowercase();
    assert!(
        first.contains("x-filtered-by: api") && !first.contains("x-secret"),
        "{first}"
    );
    assert!(a_seen.iter().all(|h| !h.contains("forb")), "{a_seen:?}");
    // The log phase saw every request that got past the filter's own request head phase (not
    // the teapot), with the bytes each answer took.
    assert_eq!(logged.load(Ordering::SeqCst), 8);
    let total: usize = [
        &local,
        &plain,
        &picked,
        &shout_length,
        &shout_chunked,
        &shout_http10,
        &body_ok,
        &body_refused,
    ]
    .iter()
    .map(|r| r.1.len() + r.2.len())
    .sum();
    assert_eq!(logged_bytes.load(Ordering::SeqCst), total as u64);
}

/// Counts the requests it sees on each worker (its per-worker state) and answers with the count.
struct Counting {
    tag: String,
}

impl HttpFilter for Counting {
    type State = ();
    type WorkerState = u64;

    async fn request_head(&self, cx: &mut FilterCx<'_>, _: &mut (), _: &mut RequestParts<'_>) -> Verdict {
        let n = cx.worker.with_state(self, |n| {
            *n += 1;
            *n
        });
        Verdict::Respond(Answer {
            status: 200,
            headers: Vec::new(),
            body: format!("{} {n} on {}", self.tag, cx.worker.id()).into_bytes().into(),
            reason: None,
        })
    }
}

fn counting_config(tag: &str, extra_route: bool) -> String {
    let mut text = format!(
        "[listeners.web]\nbind = \"{BIND}\"\nprotocol = \"http\"\nfilters = [{{ type = \"counting\", tag = \"{tag}\" }}]\n\n\
         [[listeners.web.routes]]\nname = \"all\"\nrespond = {{ status = 204 }}\n"
    );
    if extra_route {
        text.push_str(
            "\n[[listeners.web.routes]]\nname = \"other\"\nmatch = { path = \"/other\" }\nrespond = { status = 204 }\n",
        );
    }
    text
}

#[test]
fn an_external_filter_keeps_its_worker_state_across_a_reload_that_leaves_it_unchanged() {
    let mut registry = FilterRegistry::default();
    register(&mut registry, "counting", |options| match options.get("tag") {
        Some(OptionValue::String(tag)) => Ok(Counting { tag: tag.clone() }),
        _ => Err("needs a tag".to_string()),
    });
    let mut live = LiveState::default().with_filters(registry);
    // Compiled in the order a process would load them: each reload compares with the one before.
    let mut compile = |text: String| Arc::new(compile_toml("t.toml", &text, &mut live).unwrap().snapshot);
    let first = compile(counting_config("a", false));
    let unchanged = compile(counting_config("a", true));
    let changed = compile(counting_config("b", true));
    let back = compile(counting_config("a", true));
    assert_ne!(first.generation, unchanged.generation);
    let shared = Arc::new(ArcSwap::new(first));
    let handle = shared.clone();
    let bodies = serve_shared(shared, move |addr| {
        let get = || {
            let (status, _, body) = exchange(addr, b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
            assert_eq!(status, 200);
            String::from_utf8(body).unwrap()
        };
        let mut seen = vec![get(), get()];
        handle.store(unchanged);
        seen.push(get());
        handle.store(changed);
        seen.extend([get(), get()]);
        handle.store(back);
        seen.push(get());
        seen
    });
    assert_eq!(
        bodies,
        ["a 1 on 0", "a 2 on 0", "a 3 on 0", "b 1 on 0", "b 2 on 0", "a 1 on 0"]
    );
}

/// Names the chosen target to it in the upstream-request phase, and drops a field the
/// request-head phase of the same request added.
struct Signer;

impl HttpFilter for Signer {
    type State = ();
    type WorkerState = ();

    async fn request_head(&self, _: &mut FilterCx<'_>, _: &mut (), req: &mut RequestParts<'_>) -> Verdict {
        req.set_header("x-early", "1");
        Verdict::Continue
    }

    fn upstream_request(&self, _: &mut FilterCx<'_>, _: &mut (), req: &mut RequestParts<'_>) {
        let early = req.sent_header("x-early").is_some();
        let to = req.attempt.expect("an attempt");
        let signature = format!(
            "{} {} {} {} {} {early}",
            to.upstream,
            to.target,
            to.address,
            String::from_utf8_lossy(req.method),
            String::from_utf8_lossy(&req.target),
        );
        assert!(req.set_header("x-signed-for", &signature));
        assert!(req.remove_header("x-early"));
        assert!(!req.remove_header("content-length"));
    }
}

#[test]
fn the_upstream_request_phase_sees_the_chosen_target_and_edits_the_head_sent_to_it() {
    let (a, a_seen) = backend(named("a"));
    let mut registry = FilterRegistry::default();
    register(&mut registry, "signer", |_| Ok(Signer));
    let text = format!(
        "[listeners.web]\nbind = \"{BIND}\"\nprotocol = \"http\"\nupstream = \"app\"\nfilters = [{{ type = \"signer\" }}]\n\n\
         [upstreams.app]\ntargets = [\"{a}\"]\n"
    );
    let mut live = LiveState::default().with_filters(registry);
    let snapshot = compile_toml("t.toml", &text, &mut live).unwrap().snapshot;
    let target = a.clone();
    let answer = serve(snapshot, move |addr| {
        let got = exchange(
            addr,
            b"POST /sign?x=1 HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi",
        );
        let mut c = StdStream::connect(&target).unwrap();
        c.write_all(b"QUIT / HTTP/1.1\r\n\r\n").unwrap();
        got
    });
    assert_eq!((answer.0, &answer.2[..]), (200, &b"from a"[..]));
    let seen = a_seen.join().unwrap();
    let head = seen[0].to_ascii_lowercase();
    assert!(
        head.contains(&format!("x-signed-for: app {a} {a} post /sign?x=1 true\r\n")),
        "{head}"
    );
    assert!(!head.contains("x-early"), "{head}");
    assert!(head.contains("content-length: 2\r\n"), "{head}");
}

#[test]
fn client_address_from_trusted_proxies() {
    let trusted: Vec<rampart_model::net::IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
    let fields_of = |xff: &str| {
        let raw = format!("GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: {xff}\r\n\r\n");
        let (_, head) = rampart_proto::h1::parse_request_owned(raw.as_bytes(), &Default::default())
            .unwrap()
            .unwrap();
        head
    };
    let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
    let cases = [
        ("10.0.0.1", "192.0.2.9, 10.0.0.7", "192.0.2.9"),
        ("10.0.0.1", "203.0.113.5, 192.0.2.9", "192.0.2.9"),
        ("10.0.0.1", "10.0.0.8, 10.0.0.7", "10.0.0.8"),
        ("10.0.0.1", "garbage, 10.0.0.7", "10.0.0.7"),
        ("192.0.2.1", "198.51.100.1", "192.0.2.1"),
    ];
    for (peer, xff, want) in cases {
        let head = fields_of(xff);
        let parts = RequestParts::of(&head, std::borrow::Cow::Owned(Default::default()), None);
        assert_eq!(client_ip(ip(peer), &trusted, &parts), ip(want), "{peer} {xff}");
    }
}

/// A backend that reads one chunked request to its end and answers 200; returns the raw bytes.
fn chunked_request_backend() -> (String, std::thread::JoinHandle<Vec<u8>>) {
    let listener = StdListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let handle = std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut got = Vec::new();
        let mut chunk = [0u8; 4096];
        // The body ends with the last chunk and the trailer section's empty line.
        while !(got.windows(5).any(|w| w == b"\r\n0\r\n") && got.ends_with(b"\r\n\r\n")) {
            match conn.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&chunk[..n]),
            }
        }
        conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            .unwrap();
        got
    });
    (addr, handle)
}

/// The request trailers phase: a filter reads the trailers of a chunked request and edits them
/// on their way to the upstream.
#[test]
fn the_request_trailers_phase_edits_what_goes_upstream() {
    let (a, a_got) = chunked_request_backend();
    let (b, _) = backend(named("b"));
    let s = setup(&a, &b);
    let (status, _, body) = serve(s.snapshot, move |addr| {
        exchange(
            addr,
            b"POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n\
              4\r\nsome\r\n0\r\nx-checksum: 42\r\nx-private: secret\r\n\r\n",
        )
    });
    assert_eq!((status, &body[..]), (200, &b"ok"[..]));
    let got = String::from_utf8(a_got.join().unwrap()).unwrap();
    assert!(
        got.ends_with("\r\n\r\n4\r\nsome\r\n0\r\nx-checksum: 42\r\nx-checksum-seen: 42\r\n\r\n"),
        "{got}"
    );
}

/// Records what the per-attempt phases saw, and the attempts as the log phase reads them.
struct AttemptWatcher {
    seen: std::sync::mpsc::Sender<String>,
}

impl HttpFilter for AttemptWatcher {
    type State = ();
    type WorkerState = ();

    fn upstream_response(&self, _: &mut FilterCx<'_>, _: &mut (), a: &UpstreamAttempt<'_>) {
        let server = a.fields.get(b"x-from").map(|v| String::from_utf8_lossy(v).into_owned());
        let line = format!(
            "response #{} {} {:?} reused={} {:?} head_timed={}",
            a.number,
            a.upstream,
            a.attempt.status(),
            a.attempt.reused,
            server,
            a.attempt.response_head.is_some()
        );
        self.seen.send(line).unwrap();
    }

    fn upstream_error(&self, _: &mut FilterCx<'_>, _: &mut (), a: &UpstreamAttempt<'_>) {
        let line = format!(
            "error #{} {} {} {:?} connect_timed={}",
            a.number,
            a.upstream,
            a.target,
            a.attempt.error().map(crate::http::error::HttpError::reason),
            a.attempt.connect.is_some()
        );
        self.seen.send(line).unwrap();
    }
}

#[test]
fn the_per_attempt_phases_see_a_failed_connect_and_then_the_answer() {
    let (live, live_seen) = backend(|_| b"HTTP/1.1 200 OK\r\nx-from: live\r\nContent-Length: 2\r\n\r\nok".to_vec());
    // A port nothing listens on: its connect is refused.
    let dead = StdListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let (recorder, seen) = std::sync::mpsc::channel();
    let mut registry = FilterRegistry::default();
    register(&mut registry, "attempts", move |_| {
        Ok(AttemptWatcher { seen: recorder.clone() })
    });
    let text = format!(
        "[listeners.web]\nbind = \"{BIND}\"\nprotocol = \"http\"\nupstream = \"app\"\nfilters = [{{ type = \"attempts\" }}]\n\n\
         [upstreams.app]\ntargets = [\"{dead}\", {{ address = \"{live}\", backup = true }}]\n"
    );
    let mut live_state = LiveState::default().with_filters(registry);
    let snapshot = compile_toml("t.toml", &text, &mut live_state).unwrap().snapshot;
    let target = live.clone();
    let answer = serve(snapshot, move |addr| {
        let got = exchange(addr, b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        let mut c = StdStream::connect(&target).unwrap();
        c.write_all(b"QUIT / HTTP/1.1\r\n\r\n").unwrap();
        got
    });
    assert_eq!((answer.0, &answer.2[..]), (200, &b"ok"[..]));
    assert_eq!(live_seen.join().unwrap().len(), 1);
    assert_eq!(
        seen.try_iter().collect::<Vec<_>>(),
        [
            format!("error #1 app {dead} Some(\"connect_failed\") connect_timed=true"),
            "response #2 app Some(200) reused=false Some(\"live\") head_timed=true".to_string(),
        ]
    );
}
