//! The fetcher against a real JWKS server on 127.0.0.1:0 (plain and TLS), whose document a test
//! changes to play a key rotation or an outage; readiness is awaited by polling the source with
//! a deadline. Each fetch goes through the internal client, on a context of its own and a
//! snapshot compiled with a `jwt` filter for the server's URL (so with its internal upstream),
//! as on the control plane. The schedule is tested on its own with made-up instants.

use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use jsonwebtoken::{EncodingKey, Header};
use rampart_config::{compile_toml, LiveState};
use rampart_model::filter::jwt::{JwtAlgorithm, JwtSettings};
use rampart_model::tls::{ListenerTls, UpstreamTls};
use serde_json::json;
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;

use super::*;
use crate::filters::auth::jwt::{verify, JwtRejection};
use crate::filters::auth::testing::{accept_stream, tls_pair};
use crate::http::error::HttpError;
use crate::stream::Stream;

const NOW: u64 = 1_700_000_000;

/// How the test server frames its answer.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Body {
    Length,
    Chunked,
    UntilClose,
}

#[derive(Clone)]
struct Answer {
    status: u16,
    body: Vec<u8>,
    framing: Body,
    max_age: Option<u64>,
}

impl Answer {
    fn ok(body: impl Into<Vec<u8>>) -> Self {
        Answer {
            status: 200,
            body: body.into(),
            framing: Body::Length,
            max_age: None,
        }
    }
}

/// A JWKS server: answers every request with the current `answer`, then closes.
struct JwksServer {
    port: u16,
    answer: Arc<ArcSwap<Answer>>,
    requests: Arc<AtomicUsize>,
}

impl JwksServer {
    async fn start(answer: Answer, tls: Option<ListenerTls>) -> JwksServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let answer = Arc::new(ArcSwap::from_pointee(answer));
        let requests = Arc::new(AtomicUsize::new(0));
        let tls = tls.map(Arc::new);
        let (current, count) = (answer.clone(), requests.clone());
        tokio::spawn(async move {
            loop {
                let (tcp, _) = listener.accept().await.unwrap();
                let (current, count, tls) = (current.clone(), count.clone(), tls.clone());
                tokio::spawn(async move {
                    let Some(stream) = accept_stream(tcp, tls.as_deref()).await else {
                        return;
                    };
                    serve(stream, &current.load(), &count).await;
                });
            }
        });
        JwksServer { port, answer, requests }
    }

    fn set(&self, answer: Answer) {
        self.answer.store(Arc::new(answer));
    }

    fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/.well-known/jwks.json", self.port)
    }
}

async fn serve(mut stream: Stream, answer: &Answer, count: &AtomicUsize) {
    let mut head = Vec::new();
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let mut chunk = [0u8; 1024];
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&chunk[..n]),
        }
    }
    assert!(head.starts_with(b"GET /.well-known/jwks.json HTTP/1.1\r\n"));
    count.fetch_add(1, Ordering::SeqCst);
    let mut out = format!("HTTP/1.1 {} X\r\nContent-Type: application/json\r\n", answer.status);
    if let Some(age) = answer.max_age {
        out.push_str(&format!("Cache-Control: public, max-age={age}\r\n"));
    }
    let mut out = out.into_bytes();
    match answer.framing {
        Body::Length => {
            out.extend_from_slice(format!("Content-Length: {}\r\n\r\n", answer.body.len()).as_bytes());
            out.extend_from_slice(&answer.body);
        }
        Body::Chunked => {
            out.extend_from_slice(b"Transfer-Encoding: chunked\r\n\r\n");
            for part in answer.body.chunks(7) {
                out.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
                out.extend_from_slice(part);
                out.extend_from_slice(b"\r\n");
            }
            out.extend_from_slice(b"0\r\n\r\n");
        }
        Body::UntilClose => {
            out.extend_from_slice(b"Connection: close\r\n\r\n");
            out.extend_from_slice(&answer.body);
        }
    }
    let _ = stream.write_all(&out).await;
    stream.shutdown_write();
}

/// An ES256 key: its JWK (with `kid`) and what signs with it.
fn es256(kid: &str) -> (serde_json::Value, EncodingKey) {
    let kp = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let raw = kp.public_key_raw();
    let jwk = json!({
        "kty": "EC", "crv": "P-256", "kid": kid, "use": "sig", "alg": "ES256",
        "x": URL_SAFE_NO_PAD.encode(&raw[1..33]), "y": URL_SAFE_NO_PAD.encode(&raw[33..65]),
    });
    (jwk, EncodingKey::from_ec_pem(kp.serialize_pem().as_bytes()).unwrap())
}

fn jwks(keys: &[&serde_json::Value]) -> Vec<u8> {
    json!({ "keys": keys }).to_string().into_bytes()
}

fn token(kid: &str, key: &EncodingKey) -> String {
    let mut header = Header::new(JwtAlgorithm::ES256);
    header.kid = Some(kid.to_string());
    jsonwebtoken::encode(&header, &json!({"sub": kid, "exp": NOW + 60}), key).unwrap()
}

/// A context of its own and a snapshot whose one `jwt` filter fetches `url` (for `https://`,
/// trusting what `tls` trusts), as the control plane's; `fetch` is that filter's.
struct Fetcher {
    ctx: Rc<WorkerContext>,
    snapshot: Arc<Snapshot>,
    fetch: JwksFetch,
}

impl Fetcher {
    fn new(url: &str, tls: Option<Arc<rustls::ClientConfig>>) -> Fetcher {
        let config = format!(
            "[listeners.gw]\nbind = \"127.0.0.1:1\"\nprotocol = \"http\"\n\n\
             [[listeners.gw.routes]]\nupstream = \"app\"\nfilters = [{{ type = \"jwt\", jwks_url = \"{url}\" }}]\n\n\
             [upstreams.app]\ntargets = [\"127.0.0.1:2\"]\n"
        );
        let mut snapshot = compile_toml("t.toml", &config, &mut LiveState::default())
            .unwrap()
            .snapshot;
        let fetch = snapshot
            .http_filters()
            .find_map(|f| match f {
                Filter::Jwt(jwt) => jwt.jwks.clone(),
                _ => None,
            })
            .unwrap();
        if let Some(client) = tls {
            // The test's trust roots instead of the system's.
            let up = &mut snapshot.upstreams[fetch.upstream.unwrap()];
            up.tls = Some(UpstreamTls {
                config: client,
                sni: None,
            });
        }
        let snapshot = Arc::new(snapshot);
        let current = Arc::new(ArcSwap::new(snapshot.clone()));
        let ctx = WorkerContext::shared(0, Default::default(), current, None);
        Fetcher { ctx, snapshot, fetch }
    }

    /// Fetch settings for tests: no waiting between requested fetches, quick retries.
    fn quick(url: &str) -> Fetcher {
        let mut fetcher = Fetcher::new(url, None);
        let fetch = &mut fetcher.fetch;
        fetch.refresh = Duration::from_secs(3600);
        fetch.min_refresh = Duration::ZERO;
        fetch.retry = Duration::from_millis(10);
        fetch.timeout = Duration::from_secs(5);
        fetcher
    }

    async fn get(&self, fetch: &JwksFetch) -> Result<JwksDocument, JwksFetchError> {
        fetch_jwks(&self.ctx, &self.snapshot, fetch).await
    }

    /// [`run_jwks_fetch`] of `fetch` into `source`, on a task of its own.
    fn spawn(&self, fetch: JwksFetch, source: Arc<JwtKeySource>) -> tokio::task::JoinHandle<()> {
        tokio::task::spawn_local(run_jwks_fetch(self.ctx.clone(), fetch, source))
    }
}

async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Runs `test` in a `LocalSet`, as the control plane's context runs its tasks.
fn run(test: impl std::future::Future<Output = ()>) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    tokio::task::LocalSet::new().block_on(&runtime, test);
}

#[test]
fn keys_are_fetched_and_follow_a_rotation_when_a_worker_asks() {
    run(async {
        let (k1, sign1) = es256("k1");
        let (k2, sign2) = es256("k2");
        let server = JwksServer::start(Answer::ok(jwks(&[&k1])), None).await;
        let source = Arc::new(JwtKeySource::awaiting_fetch());
        let fetcher = Fetcher::quick(&server.url());
        let task = fetcher.spawn(fetcher.fetch.clone(), source.clone());
        wait_for("the first key set", || source.generation() == 1).await;
        let settings = JwtSettings::new(vec![JwtAlgorithm::ES256]);
        let check = |t: &str| verify(t.as_bytes(), &settings, &source.current().keys, NOW);
        assert!(check(&token("k1", &sign1)).is_ok());

        // A token of a key the set does not have yet: the worker asks for a fetch. The
        // document has not changed, so nothing is published (caches stay valid).
        assert_eq!(check(&token("k2", &sign2)), Err(JwtRejection::UnknownKey));
        source.request_refresh();
        wait_for("the second request", || server.requests() == 2).await;
        wait_for("the request flag to be taken", || !source.refresh_requested()).await;
        assert_eq!(source.generation(), 1);

        // The issuer rotates; the next asked-for fetch publishes the new set.
        server.set(Answer::ok(jwks(&[&k1, &k2])));
        source.request_refresh();
        wait_for("the rotated key set", || source.generation() == 2).await;
        assert!(check(&token("k2", &sign2)).is_ok());
        assert!(check(&token("k1", &sign1)).is_ok());
        assert_eq!(server.requests(), 3);
        task.abort();
    });
}

/// Counts the warnings logged while it is the default subscriber.
#[derive(Default)]
struct WarningCounter(Arc<AtomicUsize>);

impl tracing::Subscriber for WarningCounter {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        if *event.metadata().level() == tracing::Level::WARN {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[test]
fn an_outage_keeps_the_last_set_retries_and_is_logged_once() {
    let warnings = Arc::new(AtomicUsize::new(0));
    let subscriber = WarningCounter(warnings.clone());
    tracing::subscriber::with_default(subscriber, || {
        run(async {
            let (k1, sign1) = es256("k1");
            let (k2, sign2) = es256("k2");
            let server = JwksServer::start(Answer::ok(jwks(&[&k1])), None).await;
            let source = Arc::new(JwtKeySource::awaiting_fetch());
            let fetcher = Fetcher::quick(&server.url());
            let task = fetcher.spawn(fetcher.fetch.clone(), source.clone());
            wait_for("the first key set", || source.generation() == 1).await;

            // The server fails: fetches go on (backing off), the set stays.
            server.set(Answer {
                status: 500,
                ..Answer::ok("oops")
            });
            source.request_refresh();
            wait_for("retries", || server.requests() >= 4).await;
            // A document that is not JWKS fails the same way.
            server.set(Answer::ok("<html>maintenance</html>"));
            let seen = server.requests();
            wait_for("more retries", || server.requests() >= seen + 2).await;
            assert_eq!(source.generation(), 1);
            let settings = JwtSettings::new(vec![JwtAlgorithm::ES256]);
            let keys = &source.current().keys;
            assert!(verify(token("k1", &sign1).as_bytes(), &settings, keys, NOW).is_ok());
            assert_eq!(warnings.load(Ordering::SeqCst), 1, "one warning for the whole outage");

            // Back, with a rotated set: picked up by the next retry, nobody has to ask.
            server.set(Answer::ok(jwks(&[&k2])));
            wait_for("recovery", || source.generation() == 2).await;
            let keys = &source.current().keys;
            assert!(verify(token("k2", &sign2).as_bytes(), &settings, keys, NOW).is_ok());
            assert_eq!(
                verify(token("k1", &sign1).as_bytes(), &settings, keys, NOW),
                Err(JwtRejection::UnknownKey)
            );
            task.abort();
        });
    });
}

#[test]
fn a_max_age_schedules_the_next_fetches() {
    run(async {
        let (k1, _) = es256("k1");
        let (k2, _) = es256("k2");
        let answer = |keys: &[&serde_json::Value]| Answer {
            max_age: Some(0),
            framing: Body::Chunked,
            ..Answer::ok(jwks(keys))
        };
        let server = JwksServer::start(answer(&[&k1]), None).await;
        let source = Arc::new(JwtKeySource::awaiting_fetch());
        // max-age=0 is held to min_refresh (20 ms): fetches follow each other without any
        // request from a worker.
        let fetcher = Fetcher::quick(&server.url());
        let mut fetch = fetcher.fetch.clone();
        fetch.min_refresh = Duration::from_millis(20);
        let task = fetcher.spawn(fetch, source.clone());
        wait_for("three scheduled fetches", || server.requests() >= 3).await;
        assert_eq!(source.generation(), 1, "an unchanged document publishes nothing");
        server.set(answer(&[&k2]));
        wait_for("the new set", || source.generation() == 2).await;
        assert_eq!(source.current().keys.keys()[0].kid(), Some("k2"));
        task.abort();
    });
}

#[test]
fn one_fetch_reads_each_framing_and_refuses_what_is_wrong() {
    run(async {
        let (k1, _) = es256("k1");
        let doc = jwks(&[&k1]);
        let server = JwksServer::start(Answer::ok(doc.clone()), None).await;
        let fetcher = Fetcher::quick(&server.url());
        let fetch = fetcher.fetch.clone();
        let got = fetcher.get(&fetch).await.unwrap();
        assert_eq!((got.body.as_slice(), got.max_age), (doc.as_slice(), None));
        for framing in [Body::Chunked, Body::UntilClose] {
            server.set(Answer {
                framing,
                max_age: Some(120),
                ..Answer::ok(doc.clone())
            });
            let got = fetcher.get(&fetch).await.unwrap();
            assert_eq!(got.body, doc);
            assert_eq!(got.max_age, Some(Duration::from_secs(120)));
        }
        server.set(Answer {
            status: 404,
            ..Answer::ok("not here")
        });
        assert!(matches!(fetcher.get(&fetch).await, Err(JwksFetchError::Status(404))));
        // Over the size limit, however the body is framed.
        let mut small = fetch.clone();
        small.max_body = 100;
        for framing in [Body::Length, Body::Chunked, Body::UntilClose] {
            server.set(Answer {
                framing,
                ..Answer::ok(doc.clone())
            });
            assert!(
                matches!(
                    fetcher.get(&small).await,
                    Err(JwksFetchError::Request(InternalError::TooLarge { max: 100, .. }))
                ),
                "framing {}",
                framing as u8
            );
        }
        // Nobody listening.
        let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", closed.local_addr().unwrap());
        drop(closed);
        let nobody = Fetcher::quick(&url);
        assert!(matches!(
            nobody.get(&nobody.fetch).await,
            Err(JwksFetchError::Request(InternalError::NoResponse(_)))
        ));
    });
}

#[test]
fn https_fetches_check_the_server_certificate() {
    run(async {
        let (k1, _) = es256("k1");
        let (server_tls, client) = tls_pair();
        let server = JwksServer::start(Answer::ok(jwks(&[&k1])), Some(server_tls)).await;
        let url = format!("https://127.0.0.1:{}/.well-known/jwks.json", server.port);
        let fetcher = Fetcher::new(&url, Some(client));
        let got = fetcher.get(&fetcher.fetch).await.unwrap();
        assert_eq!(JwtKeySet::from_jwks(&got.body).unwrap().len(), 1);
        // A client that trusts another CA refuses the server.
        let (_, stranger) = tls_pair();
        let fetcher = Fetcher::new(&url, Some(stranger));
        assert!(matches!(
            fetcher.get(&fetcher.fetch).await,
            Err(JwksFetchError::Request(InternalError::NoResponse(
                HttpError::UpstreamTls
            )))
        ));
    });
}

#[test]
fn the_schedule_honours_refresh_max_age_min_refresh_and_backs_off() {
    let mut fetch = JwksFetch::new("http://idp.test/keys", None).unwrap();
    fetch.refresh = Duration::from_secs(300);
    fetch.min_refresh = Duration::from_secs(5);
    fetch.retry = Duration::from_secs(1);
    let t0 = Instant::now();
    let secs = Duration::from_secs;
    let mut s = FetchSchedule::new(&fetch, t0);
    assert_eq!((s.due(), s.earliest()), (t0, t0), "the first fetch at once");
    s.started(t0);
    s.succeeded(t0, None);
    assert_eq!(s.due(), t0 + secs(300));
    assert_eq!(s.earliest(), t0 + secs(5), "an early request waits for min_refresh");
    s.succeeded(t0, Some(secs(60)));
    assert_eq!(s.due(), t0 + secs(60));
    s.succeeded(t0, Some(secs(0)));
    assert_eq!(s.due(), t0 + secs(5), "max-age held to min_refresh");
    s.succeeded(t0, Some(secs(86400)));
    assert_eq!(s.due(), t0 + secs(300), "and to refresh");
    // Failures back off from `retry`, doubling, up to a minute.
    let waits: Vec<u64> = (0..9)
        .map(|_| {
            s.failed(t0);
            (s.due() - t0).as_secs()
        })
        .collect();
    assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
    assert_eq!(s.failures(), 9);
    s.succeeded(t0, None);
    assert_eq!(s.failures(), 0);
    s.failed(t0);
    assert_eq!(s.due(), t0 + secs(1), "a new outage starts from `retry` again");
    // A refresh shorter than min_refresh is taken as min_refresh (and never panics).
    fetch.refresh = Duration::from_secs(1);
    let mut s = FetchSchedule::new(&fetch, t0);
    s.succeeded(t0, Some(secs(3)));
    assert_eq!(s.due(), t0 + secs(5));
    for _ in 0..3 {
        s.failed(t0);
    }
    assert_eq!(s.due(), t0 + secs(4), "backoff below the (raised) refresh");
}

#[test]
fn max_age_is_read_from_cache_control() {
    assert_eq!(max_age(b"public, max-age=600"), Some(Duration::from_secs(600)));
    assert_eq!(
        max_age(b"MAX-AGE = \"30\" , must-revalidate"),
        Some(Duration::from_secs(30))
    );
    assert_eq!(max_age(b"no-cache"), None);
    assert_eq!(max_age(b"max-age=soon"), None);
    assert_eq!(max_age(b"s-maxage=5"), None);
}
