//! Rampart's HTTP/3 with other implementations' clients, each a real process: aioquic (Python),
//! quic-go (Go) and ngtcp2 (C, Debian's `gtlsclient`), through Rampart to HTTP/1.1 and h2c
//! upstreams; and 10,000 requests over a path that loses 1% of its packets.

use super::gateway_on;
use crate::common::h3::{aioquic, generated_body, ngtcp2, quic_go, quic_go_in, sha256_hex, H3Response};
use crate::common::http::{HttpBackend, Reply};
use crate::common::netns::LossyNetns;
use crate::http2::upstream::{Behaviour, H2Backend};

/// A digest upstream on `/up`, an echo upstream for the rest, and an h2c upstream with
/// trailers on `/grpc`.
fn site(dir: &std::path::Path, ip: &str) -> (crate::common::Rampart, u16, super::Tls, Vec<Box<dyn std::any::Any>>) {
    let echo = HttpBackend::start(Reply::Echo);
    let digest = HttpBackend::start(Reply::Digest);
    let h2c = H2Backend::start(Behaviour::Trailers);
    let routes = "[[listeners.web.routes]]\nmatch = { path = \"/up\" }\nupstream = \"digest\"\n\
                  [[listeners.web.routes]]\nmatch = { path_prefix = \"/grpc\" }\nupstream = \"h2c\"\n";
    let upstreams = format!(
        "[upstreams.digest]\ntargets = [\"{}\"]\n[upstreams.h2c]\ntargets = [\"{}\"]\nprotocol = \"h2c\"\n",
        digest.target(),
        h2c.addr
    );
    let (proxy, port, tls) = gateway_on(dir, ip, &[echo.target()], routes, &upstreams);
    (proxy, port, tls, vec![Box::new(echo), Box::new(digest), Box::new(h2c)])
}

fn statuses(got: &[H3Response]) -> Vec<u16> {
    got.iter().map(|r| r.status).collect()
}

#[test]
fn aioquic_and_quic_go_get_post_and_run_a_hundred_streams_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let (_proxy, port, tls, _servers) = site(dir.path(), "127.0.0.1");
    let url = |path: &str| format!("https://localhost:{port}{path}");
    let connect = format!("127.0.0.1:{port}");
    let body = generated_body(1 << 20);
    let want = format!("{} {}\n", body.len(), sha256_hex(&body));
    let (hello, up, many, grpc) = (url("/hello"), url("/up"), url("/many"), url("/grpc/Call"));
    for (name, client) in [("aioquic", aioquic as fn(&[&str]) -> _), ("quic-go", quic_go)] {
        let base = ["--ca", tls.ca_file.as_str(), "--connect", connect.as_str()];
        // GET, its certificate checked against the test CA.
        let got = client(&[&[hello.as_str()][..], &base].concat()).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(statuses(&got), [200], "{name}");
        assert_eq!(
            got[0].header("alt-svc"),
            Some(format!("h3=\":{port}\"; ma=86400").as_str()),
            "{name}"
        );
        // 1 MiB up: the upstream saw every byte.
        let args = [&[up.as_str(), "--method", "POST", "--data-size", "1048576"][..], &base].concat();
        let got = client(&args).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(statuses(&got), [200], "{name}");
        assert_eq!(got[0].body_len, want.len() as u64, "{name}");
        assert_eq!(got[0].body_sha256, sha256_hex(want.as_bytes()), "{name}");
        // 100 requests at once on one connection, 300 in all.
        let args = [&[many.as_str(), "--concurrent", "100", "--count", "300"][..], &base].concat();
        let got = client(&args).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(got.len(), 300, "{name}");
        assert!(got.iter().all(|r| r.status == 200), "{name}");
        // Trailers from an h2c upstream.
        let args = [&[grpc.as_str(), "--trailers"][..], &base].concat();
        let got = client(&args).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(statuses(&got), [200], "{name}");
        assert!(
            got[0].trailers.contains(&("grpc-status".into(), "0".into())),
            "{name}: {:?}",
            got[0]
        );
    }
}

#[test]
fn ngtcp2_gets_and_posts_through_rampart() {
    let dir = tempfile::tempdir().unwrap();
    let (_proxy, port, _tls, _servers) = site(dir.path(), "127.0.0.1");
    let got = ngtcp2(None, &format!("https://127.0.0.1:{port}/hello"), &[]).unwrap();
    assert_eq!(got.status, 200);
    assert!(
        String::from_utf8_lossy(&got.body).starts_with("GET /hello HTTP/1.1\r\n"),
        "{:?}",
        got.body
    );
    let body = generated_body(300_000);
    let file = dir.path().join("upload");
    std::fs::write(&file, &body).unwrap();
    let file = file.display().to_string();
    let got = ngtcp2(
        None,
        &format!("https://127.0.0.1:{port}/up"),
        &["-m", "POST", "-d", &file],
    )
    .unwrap();
    assert_eq!(got.status, 200);
    assert_eq!(
        String::from_utf8_lossy(&got.body),
        format!("{} {}\n", body.len(), sha256_hex(&body))
    );
}

#[test]
fn ten_thousand_requests_over_a_lossy_path_all_succeed() {
    let dir = tempfile::tempdir().unwrap();
    let ns = LossyNetns::new(1.0).unwrap();
    let (_proxy, port, tls, _servers) = site(dir.path(), "0.0.0.0");
    let url = format!("https://localhost:{port}/lossy");
    let connect = format!("{}:{port}", ns.host_addr);
    let args = [
        url.as_str(),
        "--ca",
        tls.ca_file.as_str(),
        "--connect",
        connect.as_str(),
        "--concurrent",
        "100",
        "--count",
        "10000",
    ];
    let got = quic_go_in(&ns, &args).unwrap_or_else(|e| panic!("over {} loss: {e}", ns.method));
    assert_eq!(got.len(), 10_000);
    let failed = got.iter().filter(|r| r.status != 200).count();
    assert_eq!(failed, 0, "{failed} of 10000 failed over 1% loss ({})", ns.method);
}
