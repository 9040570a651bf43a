use super::{detect, Detected, Detection, Protocol, Wants};

const LINE: Wants = Wants { http_head: false };
const HEAD: Wants = Wants { http_head: true };

/// `detect` on every prefix of `buf`: need more (or the same answer) until the whole, whose answer
/// is returned; the same for `buf` with anything after it.
fn decided(buf: &[u8], wants: Wants) -> Detected {
    let Detection::Done(whole) = detect(buf, wants) else {
        panic!("{:?}: still needs more", String::from_utf8_lossy(buf))
    };
    let mut first_done = None;
    for cut in 0..buf.len() {
        match detect(&buf[..cut], wants) {
            Detection::NeedMore => assert!(first_done.is_none(), "need more after done, cut at {cut}"),
            Detection::Done(d) => {
                assert_eq!(d, whole, "cut at {cut}");
                first_done.get_or_insert(cut);
            }
        }
    }
    let mut longer = buf.to_vec();
    longer.extend_from_slice(b"\r\n\r\n\x00\xffmore");
    assert_eq!(detect(&longer, wants), Detection::Done(whole.clone()));
    whole
}

fn simple(protocol: Protocol, message_len: usize) -> Detected {
    Detected {
        protocol,
        message_len,
        ..Detected::default()
    }
}

#[test]
fn names_round_trip() {
    for p in Protocol::ALL {
        assert_eq!(Protocol::from_name(p.as_str()), Some(p));
        assert_eq!(p.to_string(), p.as_str());
    }
    let names: Vec<_> = Protocol::ALL.iter().map(|p| p.as_str()).collect();
    assert_eq!(names, ["tls", "http", "h2", "ssh", "postgres", "redis", "unknown"]);
    assert_eq!(Protocol::from_name("TLS"), None);
    assert_eq!(Protocol::from_name(""), None);
    assert_eq!(Detected::default().protocol, Protocol::Unknown);
}

#[test]
fn an_empty_buffer_needs_more() {
    assert_eq!(detect(b"", LINE), Detection::NeedMore);
    assert_eq!(detect(b"", HEAD), Detection::NeedMore);
}

#[test]
fn tls_gives_sni_and_alpn() {
    let hello = include_bytes!("../../../../fuzz/corpus/detect/tls13_openssl_sni_alpn");
    for wants in [LINE, HEAD] {
        let d = decided(hello, wants);
        assert_eq!(d.protocol, Protocol::Tls);
        assert_eq!(d.sni.as_deref(), Some("example.com"));
        assert_eq!(d.alpn, [b"h2".to_vec(), b"http/1.1".to_vec()]);
        assert_eq!((d.http_host, d.message_len), (None, hello.len()));
    }
    let split = include_bytes!("../../../../fuzz/corpus/detect/tls13_three_records_header_split");
    let d = decided(split, LINE);
    assert_eq!(
        (d.protocol, d.sni.as_deref(), d.message_len),
        (Protocol::Tls, Some("example.com"), split.len())
    );
}

#[test]
fn http_with_and_without_the_head() {
    let req = b"GET / HTTP/1.1\r\nHost: WWW.Example.com\r\n\r\n";
    assert_eq!(decided(req, LINE), simple(Protocol::Http, 16));
    let d = decided(req, HEAD);
    assert_eq!(d.http_host.as_deref(), Some("www.example.com"));
    assert_eq!((d.protocol, d.message_len), (Protocol::Http, req.len()));
    let absolute = b"GET http://A.example/x HTTP/1.1\r\nHost: b.example\r\n\r\n";
    assert_eq!(decided(absolute, HEAD).http_host.as_deref(), Some("a.example"));
}

#[test]
fn the_h2_preface_is_h2_not_http() {
    let preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    for wants in [LINE, HEAD] {
        assert_eq!(decided(preface, wants), simple(Protocol::H2, 24));
    }
    // `PRI` with an HTTP/1.1 version is an HTTP/1 request with an odd method.
    assert_eq!(decided(b"PRI * HTTP/1.1\r\n", LINE), simple(Protocol::Http, 16));
}

#[test]
fn ssh_postgres_and_redis() {
    assert_eq!(decided(b"SSH-2.0-", LINE), simple(Protocol::Ssh, 8));
    assert_eq!(decided(b"SSH-1.99-", HEAD), simple(Protocol::Ssh, 9));
    let ssl_request = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];
    assert_eq!(decided(&ssl_request, LINE), simple(Protocol::Postgres, 8));
    let startup = include_bytes!("../../../../fuzz/corpus/detect/postgres_startup_v3");
    assert_eq!(decided(&startup[..8], LINE), simple(Protocol::Postgres, 8));
    assert_eq!(decided(b"*1\r\n$4\r\n", LINE), simple(Protocol::Redis, 8));
}

#[test]
fn everything_else_is_unknown() {
    let unknown = Detected::default();
    for buf in [
        &b"\x00\x01"[..],                    // not a PostgreSQL length
        b"\x00\x00\x00\x08\x00\x02\x00\x00", // PostgreSQL protocol 2
        b"PING\r\n",                         // an inline Redis command
        b"get / HTTP/1.1\r\n",
        b"SSH-1.5-old\r\n",
        b"\x16\x03\x01\x00\x00",
        b"\x15\x03\x03\x00\x02\x02\x28",
        b"\x80\x2e\x01\x03\x01", // an SSLv2-style hello
        b"{\"jsonrpc\":\"2.0\"}",
        b"PROXY TCP4 192.0.2.1 198.51.100.2 51234 443\r\n",
    ] {
        for wants in [LINE, HEAD] {
            assert_eq!(decided(buf, wants), unknown, "{buf:?}");
        }
    }
    let mut garbage = vec![0x16];
    garbage.extend((0..16 * 1024).map(|i: u32| (i.wrapping_mul(2_654_435_761) >> 13) as u8));
    assert_eq!(detect(&garbage, HEAD), Detection::Done(unknown));
}
