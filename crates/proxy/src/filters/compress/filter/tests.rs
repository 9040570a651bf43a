//! The phases on real parsed heads: what the filter edits, when it asks for the body phase, and
//! that the bytes it writes decode to the body.

use std::borrow::Cow;
use std::future::Future;
use std::io::Read;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use arc_swap::ArcSwap;
use rampart_config::{compile_toml, LiveState};
use rampart_model::filter::compress::CompressSettings;
use rampart_model::route::HeaderOps;
use rampart_proto::h1::{parse_request_owned, parse_response_owned, Limits};

use super::*;
use crate::http::filter::RequestFacts;
use crate::worker::WorkerContext;

/// A worker and a snapshot for the phases' context (the filter reads neither).
struct Worker {
    worker: WorkerContext,
    snapshot: Arc<rampart_model::Snapshot>,
    facts: RequestFacts,
}

impl Worker {
    fn new() -> Worker {
        let text = "[listeners.web]\nbind = \"127.0.0.1:1\"\nprotocol = \"http\"\nupstream = \"app\"\n\n\
                    [upstreams.app]\ntargets = [\"127.0.0.1:2\"]\n";
        let snapshot = Arc::new(
            compile_toml("t.toml", text, &mut LiveState::default())
                .unwrap()
                .snapshot,
        );
        let shared = Arc::new(ArcSwap::new(snapshot.clone()));
        Worker {
            worker: WorkerContext::new(0, Default::default(), shared, None),
            snapshot,
            facts: RequestFacts::default(),
        }
    }

    fn cx(&mut self) -> FilterCx<'_> {
        FilterCx {
            worker: crate::http::filter::FilterWorker::new(
                &self.worker.http.filters,
                rampart_model::filter::FilterSlot::fresh(0),
            ),
            context: &self.worker,
            snapshot: &self.snapshot,
            listener: "web",
            route: "default",
            route_index: 0,
            peer: "192.0.2.1:1000".parse().unwrap(),
            scheme: "http",
            facts: &mut self.facts,
        }
    }
}

/// The request phase for a raw request head.
fn request(settings: &CompressSettings, worker: &mut Worker, raw: &str) -> CompressRequest {
    let (_, head) = parse_request_owned(raw.as_bytes(), &Limits::default())
        .unwrap()
        .unwrap();
    let mut parts = RequestParts::of(&head, Cow::Owned(HeaderOps::default()), Some(0));
    let mut state = CompressRequest::default();
    let mut cx = worker.cx();
    {
        let future = std::pin::pin!(settings.request_head(&mut cx, &mut state, &mut parts));
        // The phase never waits.
        let Poll::Ready(verdict) = future.poll(&mut Context::from_waker(Waker::noop())) else {
            panic!("request_head waited")
        };
        assert!(matches!(verdict, Verdict::Continue));
    }
    state
}

/// What the response phase did to an upstream response head.
struct Outcome {
    edits: HeaderOps,
    /// The body phase was asked for (an encoder made).
    compressing: bool,
}

fn response(
    settings: &CompressSettings,
    worker: &mut Worker,
    state: &mut CompressRequest,
    raw: &str,
    edits: HeaderOps,
    can_transform: bool,
) -> Outcome {
    let (parsed, head) = parse_response_owned(raw.as_bytes(), &Limits::default(), false)
        .unwrap()
        .unwrap();
    let view = ResponseParts::of(&head, parsed.reason, Cow::Owned(edits));
    let mut parts = view.for_filters(can_transform);
    settings.response_head(&mut worker.cx(), state, &mut parts);
    Outcome {
        edits: parts.edits.into_owned(),
        compressing: state.compressing.is_some(),
    }
}

const GZIP_GET: &str = "GET /page HTTP/1.1\r\nHost: a\r\nAccept-Encoding: gzip\r\n\r\n";

const HTML: &str = "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: 5000\r\n\
                    ETag: \"v1\"\r\nAccept-Ranges: bytes\r\nVary: Origin\r\n\r\n";

fn set(edits: &HeaderOps, name: &str) -> Option<String> {
    edits.set.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone())
}

fn added(edits: &HeaderOps, name: &str) -> Vec<String> {
    edits
        .add
        .iter()
        .filter(|(n, _)| n == name)
        .map(|(_, v)| v.clone())
        .collect()
}

#[test]
fn a_compressed_response_gets_its_edits_and_a_body_that_decodes() {
    let settings = CompressSettings::default();
    let mut worker = Worker::new();
    let mut state = request(&settings, &mut worker, GZIP_GET);
    let out = response(&settings, &mut worker, &mut state, HTML, HeaderOps::default(), true);
    assert!(out.compressing);
    assert_eq!(set(&out.edits, "content-encoding").as_deref(), Some("gzip"));
    assert_eq!(set(&out.edits, "etag").as_deref(), Some("W/\"v1\""));
    assert_eq!(added(&out.edits, "vary"), ["Accept-Encoding"]);
    for gone in ["content-length", "accept-ranges"] {
        assert!(out.edits.remove.iter().any(|r| r == gone), "{gone}: {:?}", out.edits);
    }
    // Three runs of the body, the last one empty with `end`.
    let text: Vec<u8> = (0..5000u32).map(|i| b"<p>hello</p>\n"[i as usize % 13]).collect();
    let mut wire = Vec::new();
    let mut body = Vec::new();
    for (piece, end) in [(&text[..3000], false), (&text[3000..], false), (&[][..], true)] {
        body.clear();
        body.extend_from_slice(piece);
        settings
            .response_body(&mut worker.cx(), &mut state, &mut body, end)
            .unwrap();
        if !end {
            // Flushed: what went out so far decodes to the body so far.
            assert!(!body.is_empty());
        }
        wire.extend_from_slice(&body);
    }
    assert!(state.compressing.is_none(), "the encoder is freed at the end");
    assert!(wire.len() < text.len() / 10, "{} bytes", wire.len());
    let mut decoded = Vec::new();
    flate2::read::GzDecoder::new(&wire[..])
        .read_to_end(&mut decoded)
        .unwrap();
    assert_eq!(decoded, text);
}

#[test]
fn a_request_that_takes_no_coding_gets_vary_and_nothing_else() {
    let settings = CompressSettings::default();
    let mut worker = Worker::new();
    for raw in [
        "GET / HTTP/1.1\r\nHost: a\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a\r\nAccept-Encoding: identity, gzip;q=0\r\n\r\n",
        "GET / HTTP/1.0\r\nAccept-Encoding: gzip\r\n\r\n",
        "HEAD / HTTP/1.1\r\nHost: a\r\nAccept-Encoding: gzip\r\n\r\n",
    ] {
        let mut state = request(&settings, &mut worker, raw);
        let out = response(&settings, &mut worker, &mut state, HTML, HeaderOps::default(), true);
        assert!(!out.compressing, "{raw}");
        assert!(
            out.edits.set.is_empty() && out.edits.remove.is_empty(),
            "{raw}: {:?}",
            out.edits
        );
        assert_eq!(added(&out.edits, "vary"), ["Accept-Encoding"], "{raw}");
    }
}

#[test]
fn responses_no_request_would_get_compressed_are_untouched() {
    let settings = CompressSettings::default();
    let mut worker = Worker::new();
    let cases = [
        "HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nContent-Length: 5000\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 100\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Encoding: br\r\nContent-Length: 5000\r\n\r\n",
        "HTTP/1.1 206 Partial Content\r\nContent-Type: text/html\r\nContent-Range: bytes 0-4999/9000\r\n\
         Content-Length: 5000\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nCache-Control: public, no-transform\r\n\
         Content-Length: 5000\r\n\r\n",
        "HTTP/1.1 304 Not Modified\r\nContent-Type: text/html\r\nETag: \"v1\"\r\n\r\n",
        "HTTP/1.1 204 No Content\r\nContent-Type: text/html\r\n\r\n",
    ];
    for raw in cases {
        let mut state = request(&settings, &mut worker, GZIP_GET);
        let out = response(&settings, &mut worker, &mut state, raw, HeaderOps::default(), true);
        assert!(!out.compressing, "{raw}");
        assert!(out.edits.is_empty(), "{raw}: {:?}", out.edits);
    }
}

#[test]
fn a_body_that_cannot_be_reframed_is_untouched_and_gets_no_vary() {
    // Delimited by the upstream's close: the filter model cannot transform it, so no request
    // would get it compressed.
    let settings = CompressSettings::default();
    let mut worker = Worker::new();
    let mut state = request(&settings, &mut worker, GZIP_GET);
    let raw = "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n";
    let out = response(&settings, &mut worker, &mut state, raw, HeaderOps::default(), false);
    assert!(!out.compressing);
    assert!(out.edits.is_empty(), "{:?}", out.edits);
}

#[test]
fn the_fields_are_read_after_the_edits_the_response_met_before() {
    let settings = CompressSettings::default();
    let mut worker = Worker::new();
    let decide_with = |worker: &mut Worker, raw: &str, edits: HeaderOps| {
        let mut state = request(&settings, worker, GZIP_GET);
        response(&settings, worker, &mut state, raw, edits, true)
    };
    // A `no-transform` set by a response edit counts.
    let mut no_transform = HeaderOps::default();
    no_transform.set("cache-control", "no-transform");
    assert!(!decide_with(&mut worker, HTML, no_transform).compressing);
    // A removed Content-Type leaves nothing to match.
    let mut untyped = HeaderOps::default();
    untyped.remove("content-type");
    assert!(!decide_with(&mut worker, HTML, untyped).compressing);
    // A Content-Type set over an image's makes it text.
    let image = "HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nContent-Length: 5000\r\n\r\n";
    let mut retyped = HeaderOps::default();
    retyped.set("content-type", "application/json");
    assert!(decide_with(&mut worker, image, retyped).compressing);
    // An ETag set by an edit is the one weakened; a Vary added by one is seen.
    let mut tagged = HeaderOps::default();
    tagged.set("etag", "\"edited\"");
    tagged.add("vary", "accept-encoding");
    let out = decide_with(&mut worker, HTML, tagged);
    assert_eq!(set(&out.edits, "etag").as_deref(), Some("W/\"edited\""));
    assert_eq!(added(&out.edits, "vary"), ["accept-encoding"], "not named twice");
}

#[test]
fn answers_of_rampart_own_are_never_touched() {
    let settings = CompressSettings::default();
    let mut worker = Worker::new();
    let mut state = request(&settings, &mut worker, GZIP_GET);
    let body = "x".repeat(5000);
    let headers = [("content-type", "text/html")];
    let mut parts = ResponseParts::local(200, body.len(), &headers, Cow::Owned(HeaderOps::default()));
    settings.response_head(&mut worker.cx(), &mut state, &mut parts);
    assert!(parts.edits.is_empty());
    assert!(state.compressing.is_none());
}

#[test]
fn a_failed_encoder_refuses_the_rest_of_the_body() {
    let settings = CompressSettings {
        algorithms: vec![rampart_model::filter::compress::Algorithm::Zstd],
        ..CompressSettings::default()
    };
    let mut worker = Worker::new();
    let mut state = request(
        &settings,
        &mut worker,
        "GET / HTTP/1.1\r\nHost: a\r\nAccept-Encoding: zstd\r\n\r\n",
    );
    let chunked = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
    assert!(response(&settings, &mut worker, &mut state, chunked, HeaderOps::default(), true).compressing);
    // An encoder that stops (as one does after an error) fails every later call: no byte goes out
    // uncompressed under Content-Encoding.
    let compressing = state.compressing.as_mut().unwrap();
    compressing.encoder.finish(&mut Vec::new()).unwrap();
    for end in [false, true] {
        let mut body = b"{\"a\": 1}".to_vec();
        let refused = settings.response_body(&mut worker.cx(), &mut state, &mut body, end);
        assert_eq!(
            refused,
            Err(Rejection {
                status: 500,
                reason: COMPRESS_FAILED
            })
        );
    }
}

#[test]
fn framing_of_the_upstream_body_does_not_matter_to_the_filter() {
    // A chunked body (no length, so no size hint) is compressed as a Length one is.
    let settings = CompressSettings::default();
    let mut worker = Worker::new();
    let mut state = request(
        &settings,
        &mut worker,
        "GET / HTTP/1.1\r\nHost: a\r\nAccept-Encoding: br\r\n\r\n",
    );
    let chunked = "HTTP/1.1 200 OK\r\nContent-Type: text/css\r\nTransfer-Encoding: chunked\r\n\r\n";
    let out = response(&settings, &mut worker, &mut state, chunked, HeaderOps::default(), true);
    assert!(out.compressing);
    assert_eq!(set(&out.edits, "content-encoding").as_deref(), Some("br"));
    let css = b"body { margin: 0; padding: 0 }\n".repeat(200);
    let mut wire = Vec::new();
    for (i, piece) in css.chunks(1000).enumerate() {
        let mut body = piece.to_vec();
        let end = (i + 1) * 1000 >= css.len();
        settings
            .response_body(&mut worker.cx(), &mut state, &mut body, end)
            .unwrap();
        wire.extend_from_slice(&body);
    }
    let mut decoded = Vec::new();
    brotli::Decompressor::new(&wire[..], 4096)
        .read_to_end(&mut decoded)
        .unwrap();
    assert_eq!(decoded, css);
}
