//! The request path driven with no socket and no protocol: a client side ([`TestSide`]) that
//! records what the request path says to it through the seam, and requests handed to
//! [`RequestPath::handle`] as neutral heads (method, path, authority, fields, laid out as an
//! HTTP/2 stream's are: no HTTP/1 text) with their body as frames. Routing, filters, answers of
//! Rampart's own and the proxy action (to a real upstream on 127.0.0.1) are tested here without
//! a client connection, a mux or a codec's I/O.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use rampart_model::ListenerKey;
use rampart_proto::h1::Version;
use rampart_proto::h2map::lay_out_request;
use rampart_proto::message::Protocol;

use super::RequestPath;
use crate::http::client_side::ClientSide;
use crate::http::context::RequestContext;
use crate::http::downstream::ClientTerms;
use crate::http::filter::FilterRun;
use crate::http::iobuf::IoBuf;
use crate::http::state::HttpWorkerState;
use crate::http::testing::{worker_for, Recording, Said};
use crate::stream::Stream;
use crate::tls::TlsInfo;
use crate::worker::WorkerContext;

const BIND: &str = "127.0.0.1:1";

/// A client side that only records (see [`Recording`]).
struct TestSide {
    said: Said,
    protocol: Protocol,
}

impl ClientSide for TestSide {
    type Down<'b> = Recording<&'b mut IoBuf>;

    fn downstream<'b>(
        &'b mut self,
        inbuf: &'b mut IoBuf,
        _: &'b mut Vec<u8>,
        _: &'b HttpWorkerState,
        _: ClientTerms,
    ) -> Recording<&'b mut IoBuf> {
        Recording::new(inbuf, self.said.clone())
    }

    fn scheme(&self) -> &'static str {
        "http"
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok("192.0.2.1:80".parse().unwrap())
    }

    fn client_cert(&self) -> Option<&str> {
        None
    }

    fn tls_info(&self) -> Option<TlsInfo<'_>> {
        None
    }

    fn protocol(&self, _: Version) -> Protocol {
        self.protocol
    }

    async fn tunnel(&mut self, _: &WorkerContext, _: &mut Stream, _: Duration, _: usize) -> (u64, u64) {
        (0, 0)
    }
}

/// A request as the test mux hands it over.
#[derive(Clone, Copy)]
struct TestRequest<'a> {
    method: &'a str,
    path: &'a str,
    fields: &'a [(&'a str, &'a str)],
    /// The body (none when empty: the head ends the request).
    body: &'a [u8],
}

impl<'a> TestRequest<'a> {
    fn get(path: &'a str) -> Self {
        TestRequest {
            method: "GET",
            path,
            fields: &[],
            body: b"",
        }
    }
}

/// Handles each of `requests` from `client` on listener `web` of `config`; returns what each was
/// answered.
fn answers(config: &str, client: &str, requests: &[TestRequest<'_>]) -> Vec<Vec<String>> {
    let (runtime, ctx) = worker_for(config);
    runtime.block_on(async {
        let client: SocketAddr = client.parse().unwrap();
        let mut out = Vec::new();
        for request in requests {
            let said = Said::default();
            let side = TestSide {
                said: said.clone(),
                protocol: Protocol::Http2,
            };
            let key = ListenerKey::Bound(rampart_model::Transport::Tcp, BIND.parse().unwrap());
            let Ok(mut path) = RequestPath::for_stream(&ctx, side, client, client.ip().to_string(), key) else {
                panic!("listener web speaks HTTP");
            };
            path.ensure_out();
            let pseudo: [(&[u8], &[u8]); 4] = [
                (b":method", request.method.as_bytes()),
                (b":scheme", b"http"),
                (b":authority", b"a.test"),
                (b":path", request.path.as_bytes()),
            ];
            let fields = request.fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes()));
            let limits = path.http().limits;
            let end = request.body.is_empty();
            let block = pseudo.into_iter().chain(fields);
            let (head, _) = lay_out_request(block, end, &[], &limits, Default::default()).unwrap();
            // The body's frames wait in the stream's buffer.
            path.inbuf.extend_from(&ctx.http, request.body);
            let mut rctx = RequestContext::new(false);
            let mut run = FilterRun::default();
            path.handle(&head, &mut rctx, &mut run, true).await;
            path.finish(Some(&head), &rctx, &mut run);
            path.release_idle();
            out.push(said.take());
        }
        out
    })
}

#[test]
fn routes_filters_and_local_answers_without_a_socket() {
    let config = format!(
        "[listeners.web]\nbind = \"{BIND}\"\nprotocol = \"http\"\n\n\
         [[listeners.web.routes]]\nname = \"hello\"\nmatch = {{ path = \"/hello\" }}\n\
         respond = {{ status = 200, body = \"hi\", headers = {{ x-route = \"hello\" }} }}\n\n\
         [[listeners.web.routes]]\nname = \"moved\"\nmatch = {{ path_prefix = \"/old\" }}\n\
         redirect = {{ to = \"https://new.example\", keep_path = true }}\n\n\
         [[listeners.web.routes]]\nname = \"private\"\nmatch = {{ path_prefix = \"/private\" }}\n\
         filters = [{{ type = \"ip_filter\", allow = [\"10.0.0.0/8\"] }}]\n\
         respond = {{ status = 200, body = \"secret\" }}\n"
    );
    let [hello, moved, missing, refused] = <[Vec<String>; 4]>::try_from(answers(
        &config,
        "192.0.2.9:5000",
        &[
            TestRequest::get("/hello"),
            TestRequest::get("/old/page?x=1"),
            TestRequest::get("/nowhere"),
            TestRequest::get("/private"),
        ],
    ))
    .unwrap();
    assert_eq!(hello, ["local 200 [x-route=hello] hi"]);
    assert_eq!(
        moved,
        ["local 302 [location=https://new.example/old/page?x=1] 302 redirect to https://new.example/old/page?x=1"]
    );
    assert_eq!(missing, ["local 404 [] 404 Not Found"]);
    assert!(refused[0].starts_with("local 403 "), "{refused:?}");
    // A client the filter allows gets the route's answer.
    let allowed = answers(&config, "10.1.2.3:5000", &[TestRequest::get("/private")]);
    assert_eq!(allowed, [["local 200 [] secret"]]);
}

/// An upstream on 127.0.0.1 that reads one request (its head, and a chunked body to its end)
/// and answers with what it got, the framing lines of the body included.
fn echo_upstream() -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let Ok((mut conn, _)) = listener.accept() else { return };
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        let ended = |got: &[u8]| {
            let head_end = got.windows(4).position(|w| w == b"\r\n\r\n");
            let chunked = got
                .windows(26)
                .any(|w| w.eq_ignore_ascii_case(b"transfer-encoding: chunked"));
            head_end.is_some_and(|end| !chunked || got[end + 4..].ends_with(b"0\r\n\r\n"))
        };
        while !ended(&got) {
            match conn.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        let reply = format!("HTTP/1.1 201 Created\r\ncontent-length: {}\r\n\r\n", got.len());
        let _ = conn.write_all(reply.as_bytes());
        let _ = conn.write_all(&got);
    });
    addr.to_string()
}

/// The proxy action through the test mux: the neutral request (no HTTP/1 text on the client
/// side) goes to a real HTTP/1 upstream with the route's header edits, forwarded fields and its
/// body chunked (its length unknown); the upstream's answer comes back through the seam.
#[test]
fn the_proxy_action_without_a_client_socket() {
    let target = echo_upstream();
    let config = format!(
        "[listeners.web]\nbind = \"{BIND}\"\nprotocol = \"http\"\n\n\
         [[listeners.web.routes]]\nname = \"api\"\nmatch = {{ path_prefix = \"/api\" }}\n\
         upstream = \"app\"\nrequest_headers = {{ set = {{ x-route = \"api\" }} }}\n\n\
         [upstreams.app]\ntargets = [\"{target}\"]\n"
    );
    let post = TestRequest {
        method: "POST",
        path: "/api/items",
        fields: &[("content-type", "text/plain")],
        body: b"hello",
    };
    let [said] = <[Vec<String>; 1]>::try_from(answers(&config, "192.0.2.9:5000", &[post])).unwrap();
    let all = said.join("|").replace("|data ", "");
    let all = all.strip_suffix("|end").unwrap_or(&all);
    assert!(all.starts_with("head 201 Exact("), "{said:?}");
    let echoed = all.to_ascii_lowercase();
    assert!(
        echoed.contains("post /api/items http/1.1\r\nhost: a.test\r\n"),
        "{said:?}"
    );
    assert!(echoed.contains("\r\ncontent-type: text/plain\r\n"), "{said:?}");
    assert!(echoed.contains("\r\nx-route: api\r\n"), "{said:?}");
    assert!(echoed.contains("\r\nx-forwarded-for: 192.0.2.9\r\n"), "{said:?}");
    assert!(echoed.contains("\r\ntransfer-encoding: chunked\r\n"), "{said:?}");
    assert!(echoed.ends_with("\r\n\r\n5\r\nhello\r\n0\r\n\r\n"), "{said:?}");
}
