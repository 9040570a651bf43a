//! What the upstream speaks makes no difference to the cache: a response from an HTTP/2-only
//! upstream (over TLS, ALPN `h2`) is stored and answers the next request without it.

use super::{get, proxy_with};
use common::h2_tls::{H2Answer, H2TlsServer};
use common::http::header;
use common::tls::Ca;

use crate::common;

#[test]
fn a_response_from_an_http2_upstream_is_stored_and_answered_without_it() {
    let ca = Ca::new("Upstream CA");
    let server = H2TlsServer::start(
        &ca,
        "user-agent",
        H2Answer {
            header: ("cache-control", "max-age=600"),
            body: bytes::Bytes::from_static(b"from h2"),
        },
    );
    let dir = tempfile::tempdir().unwrap();
    let ca_path = ca.write(dir.path(), "ca.pem");
    let upstream = format!(
        "targets = [\"{}\"]\nprotocol = \"h2\"\n\n[upstreams.h.tls]\nca = \"{ca_path}\"\n",
        server.addr
    );
    let (_rampart, port) = proxy_with(dir.path(), "h", &upstream);
    // The first goes out chunked (the upstream's HTTP/2 response said no length).
    let (status, _, body) = get(port, "/h/x", "");
    assert_eq!((status, body.as_slice()), (200, &b"7\r\nfrom h2\r\n0\r\n\r\n"[..]));
    let (status, head, body) = get(port, "/h/x", "");
    assert_eq!(header(&head, "content-length"), Some("7"), "{head}");
    assert_eq!((status, body.as_slice()), (200, &b"from h2"[..]));
    assert!(
        header(&head, "cache-status").is_some_and(|s| s.starts_with("Rampart; hit")),
        "{head}"
    );
    assert_eq!(
        server.requests.try_iter().count(),
        1,
        "one request reached the upstream"
    );
}
