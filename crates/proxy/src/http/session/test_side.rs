//! The request path driven with no socket and no protocol: a client side ([`TestSide`]) that
//! records what the request path says to it through the seam, and requests handed to
//! [`RequestPath::handle`] as heads already parsed. Routing, filters and answers of Rampart's own
//! are tested here without a connection, a mux or a codec's I/O.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use rampart_model::ListenerKey;
use rampart_proto::h1::{parse_request, Version};
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

/// Handles each of `requests` (HTTP/1.1 heads, parsed before they reach the request path) from
/// `client` on listener `web` of `config`; returns what each was answered.
fn answers(config: &str, client: &str, requests: &[&str]) -> Vec<Vec<String>> {
    let (runtime, ctx) = worker_for(config);
    runtime.block_on(async {
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
