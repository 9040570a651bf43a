use super::{locate, peek, ClientHello, Located, Verdict::*, MAX_CLIENT_HELLO};

/// OpenSSL 3.0 `s_client -tls1_3 -servername Example.COM -alpn h2,http/1.1`, one record.
const OPENSSL_TLS13: &[u8] = include_bytes!("../../../../../fuzz/corpus/detect/tls13_openssl_sni_alpn");
/// OpenSSL 3.0 `s_client -tls1_2 -noservername`, one record.
const OPENSSL_NO_SNI: &[u8] = include_bytes!("../../../../../fuzz/corpus/detect/tls12_openssl_no_sni");
/// OpenSSL 3.0 with 22 ALPN names and `-max_send_frag 512`: a 2 KB ClientHello in 4 records.
const OPENSSL_4_RECORDS: &[u8] = include_bytes!("../../../../../fuzz/corpus/detect/tls13_openssl_4_records");

fn extension(kind: u16, data: &[u8]) -> Vec<u8> {
    let mut e = kind.to_be_bytes().to_vec();
    e.extend_from_slice(&(data.len() as u16).to_be_bytes());
    e.extend_from_slice(data);
    e
}

/// A TLS 1.3-style ClientHello handshake message (header included).
fn client_hello(sni: Option<&[u8]>, alpn: &[&[u8]], key_share: usize) -> Vec<u8> {
    let mut exts = Vec::new();
    if let Some(name) = sni {
        let mut list = vec![0];
        list.extend_from_slice(&(name.len() as u16).to_be_bytes());
        list.extend_from_slice(name);
        let mut data = (list.len() as u16).to_be_bytes().to_vec();
        data.extend_from_slice(&list);
        exts.extend(extension(0, &data));
    }
    exts.extend(extension(0x0a0a, &[])); // GREASE
    if !alpn.is_empty() {
        let mut list = Vec::new();
        for p in alpn {
            list.push(p.len() as u8);
            list.extend_from_slice(p);
        }
        let mut data = (list.len() as u16).to_be_bytes().to_vec();
        data.extend_from_slice(&list);
        exts.extend(extension(16, &data));
    }
    exts.extend(extension(43, &[2, 3, 4]));
    // key_share: one X25519MLKEM768-sized entry (group 0x11ec).
    let mut share = vec![0x11, 0xec];
    share.extend_from_slice(&(key_share as u16).to_be_bytes());
    share.extend(std::iter::repeat_n(0x5a, key_share));
    let mut data = (share.len() as u16).to_be_bytes().to_vec();
    data.extend_from_slice(&share);
    exts.extend(extension(51, &data));

    let mut body = vec![3, 3];
    body.extend_from_slice(&[7; 32]); // random
    body.push(32);
    body.extend_from_slice(&[9; 32]); // legacy session id
    body.extend_from_slice(&[0, 6, 0x13, 0x01, 0x13, 0x02, 0x13, 0x03]);
    body.extend_from_slice(&[1, 0]); // null compression
    body.extend_from_slice(&(exts.len() as u16).to_be_bytes());
    body.extend_from_slice(&exts);
    let mut message = vec![1];
    message.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    message.extend_from_slice(&body);
    message
}

/// `message` in handshake records of the given fragment sizes (the last one takes the rest).
fn records(message: &[u8], sizes: &[usize]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut rest = message;
    for &size in sizes.iter().chain(std::iter::once(&usize::MAX)) {
        let (fragment, tail) = rest.split_at(size.min(rest.len()));
        if fragment.is_empty() {
            break;
        }
        out.extend_from_slice(&[0x16, 3, 1]);
        out.extend_from_slice(&(fragment.len() as u16).to_be_bytes());
        out.extend_from_slice(fragment);
        rest = tail;
    }
    out
}

fn hello(sni: &str, alpn: &[&str], message_len: usize) -> ClientHello {
    ClientHello {
        sni: Some(sni.into()),
        alpn: alpn.iter().map(|p| p.as_bytes().to_vec()).collect(),
        message_len,
    }
}

/// Every proper prefix needs more; the whole buffer (and it with anything after) gives `want`.
fn assert_needs_every_byte(buf: &[u8], want: &ClientHello) {
    for cut in 0..buf.len() {
        assert_eq!(peek(&buf[..cut]), NeedMore, "cut at {cut} of {}", buf.len());
    }
    assert_eq!(peek(buf), Match(want.clone()));
    let mut longer = buf.to_vec();
    longer.extend_from_slice(b"\x17\x03\x03\x00\x05early");
    assert_eq!(peek(&longer), Match(want.clone()));
}

#[test]
fn a_real_client_hello_in_one_record() {
    let want = hello("example.com", &["h2", "http/1.1"], OPENSSL_TLS13.len());
    assert_needs_every_byte(OPENSSL_TLS13, &want);
}

#[test]
fn a_real_client_hello_in_four_records() {
    let Match(got) = peek(OPENSSL_4_RECORDS) else {
        panic!("no match")
    };
    assert_eq!(got.sni.as_deref(), Some("big.example.org"));
    assert_eq!(got.alpn.len(), 22);
    assert_eq!(&got.alpn[..2], &[b"h2".to_vec(), b"http/1.1".to_vec()]);
    assert_eq!(got.message_len, 2060);
    assert_needs_every_byte(OPENSSL_4_RECORDS, &got);
}

#[test]
fn a_client_hello_without_sni_matches_with_no_name() {
    let Match(got) = peek(OPENSSL_NO_SNI) else {
        panic!("no match")
    };
    assert_eq!((got.sni, got.message_len), (None, OPENSSL_NO_SNI.len()));
    let m = client_hello(None, &[b"h2"], 32);
    assert_eq!(peek(&records(&m, &[])).map_sni(), Match(None));
}

#[test]
fn split_across_two_and_three_records_and_any_segments() {
    // A post-quantum-sized ClientHello: ~1.8 KB.
    let m = client_hello(Some(b"Api.Example.COM"), &[b"h2", b"http/1.1"], 1700);
    assert!(m.len() > 1800);
    for sizes in [&[][..], &[1000], &[700, 700], &[2, 3], &[1], &[4], &[5, 1, 1]] {
        let buf = records(&m, sizes);
        let want = hello("api.example.com", &["h2", "http/1.1"], buf.len());
        assert_needs_every_byte(&buf, &want);
    }
}

#[test]
fn alpn_keeps_the_client_order() {
    let m = client_hello(Some(b"a.b"), &[b"http/1.1", b"h2", b"acme-tls/1"], 32);
    let buf = records(&m, &[]);
    assert_eq!(
        peek(&buf),
        Match(hello("a.b", &["http/1.1", "h2", "acme-tls/1"], buf.len()))
    );
}

#[test]
fn host_names_over_255_bytes_or_with_odd_characters_are_not_tls() {
    let long = vec![b'a'; 256];
    assert_eq!(peek(&records(&client_hello(Some(&long), &[], 32), &[])), NotThis);
    let max = vec![b'a'; 255];
    assert!(matches!(
        peek(&records(&client_hello(Some(&max), &[], 32), &[])),
        Match(_)
    ));
    for bad in [&b""[..], b"a b", b"\xc3\xa9.example", b"a/b", b"::1", b"a\0b"] {
        assert_eq!(
            peek(&records(&client_hello(Some(bad), &[], 32), &[])),
            NotThis,
            "{bad:?}"
        );
    }
    let Match(got) = peek(&records(&client_hello(Some(b"_srv.X-1.example."), &[], 32), &[])) else {
        panic!("no match")
    };
    assert_eq!(got.sni.as_deref(), Some("_srv.x-1.example."));
}

#[test]
fn bad_record_headers_are_not_tls() {
    let buf = records(&client_hello(Some(b"a.b"), &[], 32), &[]);
    let mut bad = buf.clone();
    bad[3..5].copy_from_slice(&(16384u16 + 2049).to_be_bytes()); // record too long
    assert_eq!(peek(&bad), NotThis);
    assert_eq!(peek(&bad[..4]), NeedMore); // 0x48__ could still be 0x4800, the longest
    assert_eq!(peek(&[0x16, 3, 1, 0x49]), NotThis);
    assert_eq!(peek(&[0x16, 3, 1, 0, 0, 1]), NotThis); // empty handshake record
    assert_eq!(peek(&[0x16, 3, 5]), NotThis); // version 3.5
    assert_eq!(peek(&[0x16, 2]), NotThis);
    assert_eq!(peek(&[0x17, 3, 3, 0, 1, 0]), NotThis);
    // A record length that runs past the message: the message ends inside it, then garbage.
    let mut longer = buf.clone();
    let len = u16::from_be_bytes([buf[3], buf[4]]) + 3;
    longer[3..5].copy_from_slice(&len.to_be_bytes());
    assert_eq!(peek(&longer), NeedMore);
    longer.extend_from_slice(b"xyz");
    assert!(matches!(peek(&longer), Match(_)));
    // The handshake length disagrees with the ClientHello's own lengths: tls-parser says no.
    let mut m = client_hello(Some(b"a.b"), &[], 32);
    m.push(0);
    let n = (m.len() - 4) as u32;
    m[1..4].copy_from_slice(&n.to_be_bytes()[1..]);
    assert_eq!(peek(&records(&m, &[])), NotThis);
}

#[test]
fn a_truncated_record_needs_more() {
    let buf = records(&client_hello(Some(b"a.b"), &[], 32), &[]);
    assert_eq!(peek(&buf[..buf.len() - 1]), NeedMore);
    assert_eq!(peek(&buf[..5]), NeedMore);
    assert_eq!(peek(&[0x16]), NeedMore);
    assert_eq!(peek(&[]), NeedMore);
}

#[test]
fn an_alert_or_other_record_mid_way_is_not_tls() {
    let m = client_hello(Some(b"a.b"), &[], 32);
    let two = records(&m, &[60]);
    let mut alert = two[..65].to_vec();
    alert.extend_from_slice(&[0x15, 3, 3, 0, 2, 2, 40]);
    assert_eq!(peek(&alert), NotThis);
    assert_eq!(peek(&alert[..66]), NotThis);
    assert_eq!(peek(&alert[..65]), NeedMore);
}

#[test]
fn other_handshake_messages_and_oversized_ones_are_not_tls() {
    let mut server_hello = client_hello(None, &[], 32);
    server_hello[0] = 2;
    assert_eq!(peek(&records(&server_hello, &[])), NotThis);
    assert_eq!(peek(&[0x16, 3, 1, 0, 1, 2]), NotThis);
    // A header announcing 64 KiB + 1: refused before the body arrives.
    let n = (MAX_CLIENT_HELLO + 1) as u32;
    let header = [1, n.to_be_bytes()[1], n.to_be_bytes()[2], n.to_be_bytes()[3]];
    assert_eq!(locate(&records(&header, &[])), Located::NotThis);
    assert_eq!(peek(&records(&header, &[1, 1])), NotThis);
    let n = MAX_CLIENT_HELLO as u32;
    let header = [1, n.to_be_bytes()[1], n.to_be_bytes()[2], n.to_be_bytes()[3]];
    assert_eq!(peek(&records(&header, &[])), NeedMore);
}

#[test]
fn garbage_after_a_handshake_byte_is_not_tls() {
    let mut garbage = vec![0x16];
    garbage.extend((0..16 * 1024).map(|i| (i * 7 + 3) as u8));
    assert_eq!(peek(&garbage), NotThis);
}

/// The SNI of a match, for short assertions.
trait MapSni {
    fn map_sni(self) -> crate::detect::Verdict<Option<String>>;
}

impl MapSni for crate::detect::Verdict<ClientHello> {
    fn map_sni(self) -> crate::detect::Verdict<Option<String>> {
        match self {
            Match(h) => Match(h.sni),
            NeedMore => NeedMore,
            NotThis => NotThis,
        }
    }
}
