//! The request path driven with no socket and no protocol: a client side ([`TestSide`]) that
//! records what the request path says to it through the seam, and requests handed to
//! [`RequestPath::handle`] as heads already parsed. Routing, filters and answers of Rampart's own
//! are tested here without a connection, a mux or a codec's I/O.

use std::cell::RefCell;
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use rampart_config::{compile_toml, LiveState};
use rampart_model::ListenerKey;
use rampart_proto::h1::{parse_request, Version};
use rampart_proto::message::{FieldsRef, Protocol};

use super::RequestPath;
use crate::http::client_side::ClientSide;
use crate::http::context::RequestContext;
use crate::http::downstream::{Downstream, LocalAnswer, NoBodySource};
use crate::http::error::HttpError;
use crate::http::filter::FilterRun;
use crate::http::iobuf::IoBuf;
use crate::http::message::ResponseHeader;
use crate::http::state::HttpWorkerState;
use crate::stream::Stream;
use crate::tls::TlsInfo;
use crate::worker::WorkerContext;

const BIND: &str = "127.0.0.1:1";

/// What the request path said to the client, in order.
type Said = Rc<RefCell<Vec<String>>>;

/// A client side that only records.
struct TestSide {
    said: Said,
    protocol: Protocol,
}

/// Its downstream side for one request.
struct Recorder<'b> {
    said: &'b Said,
    body: &'b mut IoBuf,
}

impl Recorder<'_> {
    fn say(&self, line: String) {
        self.said.borrow_mut().push(line);
    }
}

impl Downstream for Recorder<'_> {
    type BodySource = NoBodySource;

    fn take_body_source(&mut self) -> Option<NoBodySource> {
        None
    }

    fn body(&mut self) -> &mut IoBuf {
        self.body
    }

    async fn read_body(&mut self) -> Result<(), HttpError> {
        Err(HttpError::ClientGone)
    }

    async fn send_continue(&mut self) -> Result<(), HttpError> {
        self.say("continue".into());
        Ok(())
    }

    async fn send_informational(&mut self, head: &ResponseHeader<'_>) -> Result<(), HttpError> {
        self.say(format!("interim {}", head.status));
        Ok(())
    }

    async fn send_response_head(
        &mut self,
        head: &ResponseHeader<'_>,
        body: &[u8],
        _: Duration,
    ) -> Result<(), HttpError> {
        self.say(format!(
            "head {} {:?} {}",
            head.status,
            head.length,
            String::from_utf8_lossy(body)
        ));
        Ok(())
    }

    async fn send_data(&mut self, data: &[u8]) -> Result<(), HttpError> {
        self.say(format!("data {}", String::from_utf8_lossy(data)));
        Ok(())
    }

    async fn send_trailers(&mut self, trailers: FieldsRef<'_>) -> Result<(), HttpError> {
        self.say(format!("trailers {}", trailers.iter().count()));
        Ok(())
    }

    async fn end_body(&mut self) -> Result<(), HttpError> {
        self.say("end".into());
        Ok(())
    }

    async fn send_local(&mut self, answer: &LocalAnswer<'_>) -> Result<(), HttpError> {
        let headers: Vec<String> = answer.headers.iter().map(|(n, v)| format!("{n}={v}")).collect();
        self.say(format!(
            "local {} [{}] {}",
            answer.status,
            headers.join(" "),
            String::from_utf8_lossy(answer.body).trim_end()
        ));
        Ok(())
    }

    fn bytes_sent(&self) -> u64 {
        0
    }

    fn keeps_alive(&self) -> bool {
        true
    }
}

impl ClientSide for TestSide {
    type Down<'b> = Recorder<'b>;

    fn downstream<'b>(
        &'b mut self,
        inbuf: &'b mut IoBuf,
        _: &'b mut Vec<u8>,
        _: &'b HttpWorkerState,
        _: Duration,
        _: bool,
        _: bool,
        _: bool,
    ) -> Recorder<'b> {
        Recorder {
            said: &self.said,
            body: inbuf,
        }
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

/// Handles each of `requests` (HTTP/1.1 heads, parsed before they reach the request path) from
/// `client` on listener `web` of `config`; returns what each was answered.
fn answers(config: &str, client: &str, requests: &[&str]) -> Vec<Vec<String>> {
    let snapshot = compile_toml("t.toml", config, &mut LiveState::default())
        .unwrap()
        .snapshot;
    let shared = Arc::new(ArcSwap::from_pointee(snapshot));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let ctx = WorkerContext::new(0, Default::default(), shared, None);
        let client: SocketAddr = client.parse().unwrap();
        let mut out = Vec::new();
        for raw in requests {
            let said = Said::default();
            let side = TestSide {
                said: said.clone(),
                protocol: Protocol::Http2,
            };
            let key = ListenerKey::Bound(BIND.parse().unwrap());
            let Ok(mut path) = RequestPath::for_stream(&ctx, side, client, client.ip().to_string(), key) else {
                panic!("listener web speaks HTTP");
            };
            path.ensure_out();
            path.inbuf.extend_from(&ctx.http, raw.as_bytes());
            let limits = path.http().limits;
            let head = parse_request(path.inbuf.filled(), &limits, &mut path.fields)
                .unwrap()
                .unwrap();
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
            "GET /hello HTTP/1.1\r\nHost: a\r\n\r\n",
            "GET /old/page?x=1 HTTP/1.1\r\nHost: a\r\n\r\n",
            "GET /nowhere HTTP/1.1\r\nHost: a\r\n\r\n",
            "GET /private HTTP/1.1\r\nHost: a\r\n\r\n",
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
    let allowed = answers(&config, "10.1.2.3:5000", &["GET /private HTTP/1.1\r\nHost: a\r\n\r\n"]);
    assert_eq!(allowed, [["local 200 [] secret"]]);
}
