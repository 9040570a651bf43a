//! The filter against a scripted auth service on 127.0.0.1:0, in the worker's own runtime.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use rampart_model::filter::endpoint::HttpEndpoint;
use rampart_model::tls::ListenerTls;
use rampart_proto::h1::parse_request;
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use std::sync::Arc;

use arc_swap::ArcSwap;
use rampart_config::compile::{compile_toml, LiveState};
use rampart_model::tls::UpstreamTls;

use super::*;
use crate::filters::auth::testing::{accept_stream, block_on, request_head, tls_pair, RawRequest};
use crate::worker::WorkerContext;

/// What the service does with one request: the bytes it answers, and whether it closes after.
type Script = Rc<dyn Fn(&str) -> (Vec<u8>, bool)>;

/// A scripted auth service: the heads it received, and how many connections it accepted.
struct Service {
    url: String,
    heads: mpsc::UnboundedReceiver<String>,
    connections: Rc<Cell<usize>>,
}

async fn service(script: Script) -> Service {
    service_over(script, None).await
}

/// The same over TLS with `tls` (`https://` in its url).
async fn service_over(script: Script, tls: Option<ListenerTls>) -> Service {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let scheme = if tls.is_some() { "https" } else { "http" };
    let url = format!("{scheme}://{}/verify", listener.local_addr().unwrap());
    let tls = tls.map(Rc::new);
    let (tx, heads) = mpsc::unbounded_channel();
    let connections = Rc::new(Cell::new(0));
    let count = connections.clone();
    tokio::task::spawn_local(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            count.set(count.get() + 1);
            let (tx, script, tls) = (tx.clone(), script.clone(), tls.clone());
            tokio::task::spawn_local(async move {
                let Some(mut conn) = accept_stream(tcp, tls.as_deref()).await else {
                    return;
                };
                let mut buf = Vec::new();
                loop {
                    let mut parsed_head = rampart_proto::message::RequestHead::default();
                    let head = match parse_request(&buf, &Default::default(), &mut parsed_head) {
                        Ok(Some(head)) => head,
                        Ok(None) => {
                            let mut chunk = [0u8; 4096];
                            match conn.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            }
                            continue;
                        }
                        Err(_) => return,
                    };
                    let text = String::from_utf8_lossy(&buf[..head.len]).into_owned();
                    buf.drain(..head.len);
                    let (answer, close) = script(&text);
                    let _ = tx.send(text);
                    if conn.write_all(&answer).await.is_err() || close {
                        return;
                    }
                }
            });
        }
    });
    Service {
        url,
        heads,
        connections,
    }
}

fn filter(url: &str) -> ForwardAuth {
    ForwardAuth {
        endpoint: HttpEndpoint::parse(url).unwrap(),
        tls: None,
        upstream: 0,
        timeout: Duration::from_secs(5),
        request_headers: None,
        response_headers: vec!["x-user".into(), "x-roles".into()],
        user_header: Some("x-user".into()),
        max_body: 64,
    }
}

/// A worker whose snapshot has the internal upstream of a `forward_auth` filter to `url` (over
/// TLS with `tls` as the client configuration, for an `https://` one), and the filter.
fn served(url: &str, tls: Option<Arc<rustls::ClientConfig>>) -> (WorkerContext, ForwardAuth) {
    let config = format!(
        "[listeners.web]\nbind = \"127.0.0.1:1\"\nprotocol = \"http\"\n\n\
         [[listeners.web.routes]]\nupstream = \"app\"\nfilters = [{{ type = \"forward_auth\", url = \"{url}\" }}]\n\n\
         [upstreams.app]\ntargets = [\"127.0.0.1:2\"]\n"
    );
    let mut snapshot = compile_toml("t.toml", &config, &mut LiveState::default())
        .unwrap()
        .snapshot;
    let upstream = snapshot.upstreams.iter().position(|u| u.is_internal()).unwrap();
    let endpoint = HttpEndpoint::parse(url).unwrap();
    let tls = tls.map(|config| endpoint.client_tls(Some(config)).unwrap().unwrap());
    if let Some((config, name)) = &tls {
        let up = &mut snapshot.upstreams[upstream];
        up.tls = Some(UpstreamTls {
            config: config.clone(),
            sni: None,
        });
        up.targets[0].tls_name = Some(name.clone());
    }
    let current = Arc::new(ArcSwap::from_pointee(snapshot));
    let worker = WorkerContext::new(0, Default::default(), current, None);
    let f = ForwardAuth {
        tls,
        upstream,
        ..filter(url)
    };
    (worker, f)
}

fn client_request() -> RawRequest {
    RawRequest::new(
        "POST /orders/7?debug=1 HTTP/1.1\r\nHost: shop.example:8443\r\nCookie: session=abc\r\n\
         Connection: keep-alive, X-Hop\r\nX-Hop: 1\r\nContent-Length: 3\r\nX-User: forged\r\n\
         X-Forwarded-For: 203.0.113.9\r\nX-Forwarded-Uri: /forged\r\n\r\n",
    )
}

const ALLOW: &[u8] =
    b"HTTP/1.1 200 OK\r\nX-User: alice\r\nX-Roles: admin\r\nX-Roles: ops\r\nContent-Length: 2\r\n\r\nok";

fn answer(verdict: Verdict) -> Answer {
    match verdict {
        Verdict::Respond(a) => a,
        Verdict::Continue => panic!("let through"),
    }
}

/// A sub-request as `METHOD PATH AUTHORITY` and a `name: value` line for each field (its `host`,
/// the authority, left out).
fn text(request: Result<RequestHead, InternalError>) -> String {
    let request = request.expect("a valid sub-request");
    let mut out = format!(
        "{} {} {}\r\n",
        String::from_utf8_lossy(request.method()),
        String::from_utf8_lossy(request.target()),
        String::from_utf8_lossy(request.host().unwrap_or_default())
    );
    for (name, value) in request.pairs().skip(usize::from(request.host.is_some())) {
        out.push_str(&format!(
            "{}: {}\r\n",
            String::from_utf8_lossy(name),
            String::from_utf8_lossy(value)
        ));
    }
    assert_eq!(request.body, rampart_proto::message::BodyLength::None);
    out
}

#[test]
fn the_check_carries_the_clients_fields_and_ramparts_forwarded_ones() {
    let f = filter("http://auth.internal:9000/verify?app=shop");
    let raw = client_request();
    let request = text(check_request(&f, &raw.parts(), "https", [192, 0, 2, 7].into()));
    assert!(
        request.starts_with("GET /verify?app=shop auth.internal:9000\r\n"),
        "{request}"
    );
    for sent in [
        "Cookie: session=abc\r\n",
        "X-User: forged\r\n",
        "x-forwarded-method: POST\r\n",
        "x-forwarded-proto: https\r\n",
        "x-forwarded-host: shop.example:8443\r\n",
        "x-forwarded-uri: /orders/7?debug=1\r\n",
        "x-forwarded-for: 192.0.2.7\r\n",
    ] {
        assert!(request.contains(sent), "{sent:?} in {request}");
    }
    for kept in [
        "Connection:",
        "X-Hop:",
        "Content-Length:",
        "203.0.113.9",
        "/forged",
        "Host: shop",
    ] {
        assert!(!request.contains(kept), "{kept:?} in {request}");
    }
    // A list sends only the fields it names.
    let listed = ForwardAuth {
        request_headers: Some(vec!["cookie".into(), "x-hop".into()]),
        ..filter("http://auth.internal/")
    };
    let request = text(check_request(&listed, &raw.parts(), "http", [192, 0, 2, 7].into()));
    assert!(request.contains("Cookie: session=abc\r\nX-Hop: 1\r\n"), "{request}");
    assert!(!request.contains("X-User"), "{request}");
}

#[test]
fn a_2xx_lets_the_request_through_with_the_answers_fields_over_the_clients() {
    block_on(async {
        let mut svc = service(Rc::new(|_: &str| (ALLOW.to_vec(), false))).await;
        let (w, f) = served(&svc.url, None);
        for _ in 0..3 {
            let raw = client_request();
            let mut parts = raw.parts();
            let (verdict, facts) = request_head(&f, &w, &mut parts).await;
            assert!(matches!(verdict, Verdict::Continue), "{verdict:?}");
            assert_eq!(facts.user.as_deref(), Some("alice"));
            assert_eq!(parts.edits.remove, ["x-user", "x-roles"]);
            assert_eq!(
                parts.edits.add,
                [("x-user", "alice"), ("x-roles", "admin"), ("x-roles", "ops")]
                    .map(|(n, v)| (n.to_string(), v.to_string()))
            );
            assert!(svc.heads.recv().await.unwrap().contains("x-forwarded-method: POST"));
        }
        assert_eq!(svc.connections.get(), 1, "one keep-alive connection for every check");
    });
}

#[test]
fn a_denial_goes_to_the_client_with_its_fields_and_body() {
    block_on(async {
        let svc = service(Rc::new(|_: &str| {
            (
                b"HTTP/1.1 302 Found\r\nLocation: https://login.example/?next=%2F\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\n\
                  Connection: close, X-Private\r\nX-Private: no\r\nKeep-Alive: timeout=5\r\nContent-Type: text/html\r\n\
                  Transfer-Encoding: chunked\r\n\r\n5\r\nlogin\r\n0\r\n\r\n"
                    .to_vec(),
                true,
            )
        }))
        .await;
        let (w, f) = served(&svc.url, None);
        let (verdict, facts) = request_head(&f, &w, &mut client_request().parts()).await;
        let a = answer(verdict);
        assert_eq!((a.status, a.reason), (302, Some("forward_auth_denied")));
        let headers: Vec<(String, String)> = a.headers.iter().map(|(n, v)| (n.to_string(), v.clone())).collect();
        assert_eq!(
            headers,
            [
                ("location", "https://login.example/?next=%2F"),
                ("set-cookie", "a=1"),
                ("set-cookie", "b=2"),
                ("content-type", "text/html"),
            ]
            .map(|(n, v)| (n.to_string(), v.to_string()))
        );
        assert_eq!(&*a.body, b"login");
        assert_eq!(facts.user, None);
    });
}

#[test]
fn a_closed_idle_connection_is_replaced_once() {
    block_on(async {
        // Answers with keep-alive, then closes anyway (as a service's idle timeout would).
        let svc = service(Rc::new(|_: &str| (ALLOW.to_vec(), true))).await;
        let (w, f) = served(&svc.url, None);
        for _ in 0..3 {
            assert!(matches!(
                request_head(&f, &w, &mut client_request().parts()).await.0,
                Verdict::Continue
            ));
        }
        assert_eq!(svc.connections.get(), 3);
    });
}

#[test]
fn without_a_usable_answer_the_request_fails_closed() {
    block_on(async {
        // Nothing listens.
        let dead = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let (w, f) = served(&format!("http://{dead}/verify"), None);
        let a = answer(request_head(&f, &w, &mut client_request().parts()).await.0);
        assert_eq!((a.status, a.reason), (503, Some("forward_auth_unavailable")));

        // Garbage, and a denial body over max_body.
        for reply in [
            &b"SSH-2.0-OpenSSH_9.6\r\n\r\n"[..],
            b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 65\r\n\r\n",
            b"HTTP/1.1 403 Forbidden\r\nContent-Length: 10\r\n\r\nshort",
        ] {
            let svc = service(Rc::new(move |_: &str| (reply.to_vec(), true))).await;
            let (w, f) = served(&svc.url, None);
            let a = answer(request_head(&f, &w, &mut client_request().parts()).await.0);
            assert_eq!(
                (a.status, a.reason),
                (502, Some("forward_auth_bad_response")),
                "{reply:?}"
            );
        }

        // No answer in time.
        let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (w, f) = served(&format!("http://{}/verify", silent.local_addr().unwrap()), None);
        let f = ForwardAuth {
            timeout: Duration::from_millis(100),
            ..f
        };
        let a = answer(request_head(&f, &w, &mut client_request().parts()).await.0);
        assert_eq!((a.status, a.reason), (504, Some("forward_auth_timeout")));
        drop(silent);
    });
}

#[test]
fn an_https_service_is_reached_through_rustls_and_its_certificate_checked() {
    block_on(async {
        let (server_tls, client) = tls_pair();
        let svc = service_over(Rc::new(|_: &str| (ALLOW.to_vec(), false)), Some(server_tls)).await;
        let (w, f) = served(&svc.url, Some(client));
        for _ in 0..2 {
            let (verdict, facts) = request_head(&f, &w, &mut client_request().parts()).await;
            assert!(matches!(verdict, Verdict::Continue), "{verdict:?}");
            assert_eq!(facts.user.as_deref(), Some("alice"));
        }
        assert_eq!(svc.connections.get(), 1, "the TLS connection is kept alive");
        // A client that trusts another CA refuses the service: 502.
        let (_, stranger) = tls_pair();
        let (w, f) = served(&svc.url, Some(stranger));
        let a = answer(request_head(&f, &w, &mut client_request().parts()).await.0);
        assert_eq!((a.status, a.reason), (502, Some("forward_auth_bad_response")));
    });
}
