use super::*;

use crate::message::RequestHead;

/// What the tests read of a parsed request: the codec's facts and the owned head's.
#[derive(Debug, PartialEq, Eq)]
struct Req {
    len: usize,
    method: (u32, u32),
    target: (u32, u32),
    version: Version,
    framing: Framing,
    keep_alive: bool,
    expect_continue: bool,
    upgrade: bool,
    host: Option<(u32, u32)>,
}

fn parse(raw: &[u8], fields: &mut Vec<Field>) -> Result<Option<Req>, H1Error> {
    let mut head = RequestHead::default();
    let parsed = parse_request(raw, &Limits::default(), &mut head);
    *fields = head.fields.clone();
    Ok(parsed?.map(|p| Req {
        len: p.len,
        method: head.method,
        target: head.target,
        version: p.version,
        framing: p.framing,
        keep_alive: head.keep_alive,
        expect_continue: head.expect_continue,
        upgrade: head.upgrade,
        host: head.host,
    }))
}

fn req(raw: &[u8]) -> Result<Option<Req>, H1Error> {
    parse(raw, &mut Vec::new())
}

/// What the tests read of a parsed response: its status and the codec's facts.
#[derive(Debug, PartialEq, Eq)]
struct Res {
    status: u16,
    framing: Framing,
    keep_alive: bool,
    reason: (u32, u32),
}

fn res(raw: &[u8], head: bool) -> Result<Option<Res>, H1Error> {
    let mut owned = crate::message::ResponseHead::default();
    let parsed = parse_response(raw, &Limits::default(), head, &mut owned)?;
    Ok(parsed.map(|p| Res {
        status: owned.status,
        framing: p.framing,
        keep_alive: p.keep_alive,
        reason: p.reason,
    }))
}

#[test]
fn a_plain_get() {
    let raw = b"GET /a?b=c HTTP/1.1\r\nHost: example.com\r\nX-Y: z\r\n\r\nNEXT";
    let mut fields = Vec::new();
    let h = parse(raw, &mut fields).unwrap().unwrap();
    assert_eq!(h.len, raw.len() - 4);
    assert_eq!(&raw[h.method.0 as usize..h.method.1 as usize], b"GET");
    assert_eq!(&raw[h.target.0 as usize..h.target.1 as usize], b"/a?b=c");
    assert_eq!(
        (h.version, h.framing, h.keep_alive),
        (Version::Http11, Framing::None, true)
    );
    assert_eq!(fields.len(), 2);
    assert_eq!(fields[1].name(raw), b"X-Y");
    assert_eq!(fields[1].value(raw), b"z");
    let host = h.host.unwrap();
    assert_eq!(&raw[host.0 as usize..host.1 as usize], b"example.com");
}

#[test]
fn framing_and_connection_facts() {
    let h = req(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 12\r\n\r\n")
        .unwrap()
        .unwrap();
    assert_eq!(h.framing, Framing::Length(12));
    let h = req(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\n")
        .unwrap()
        .unwrap();
    assert_eq!(h.framing, Framing::Length(5));
    let h = req(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n")
        .unwrap()
        .unwrap();
    assert_eq!(h.framing, Framing::Chunked);
    let h = req(b"GET / HTTP/1.0\r\n\r\n").unwrap().unwrap();
    assert!(!h.keep_alive);
    let h = req(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        .unwrap()
        .unwrap();
    assert!(h.keep_alive);
    let h = req(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        .unwrap()
        .unwrap();
    assert!(!h.keep_alive);
    let h = req(b"PUT / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n")
        .unwrap()
        .unwrap();
    assert!(h.expect_continue);
    let h = req(b"GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
        .unwrap()
        .unwrap();
    assert!(h.upgrade);
    let h = req(b"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n").unwrap().unwrap();
    assert_eq!(h.framing, Framing::None);
    assert!(
        req(b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n")
            .unwrap()
            .is_some()
    );
    assert!(req(b"GET http://example.com/x HTTP/1.1\r\nHost: example.com\r\n\r\n")
        .unwrap()
        .is_some());
}

#[test]
fn every_prefix_of_a_valid_request_is_incomplete() {
    let raw = b"POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\n";
    for cut in 0..raw.len() {
        assert_eq!(req(&raw[..cut]), Ok(None), "prefix of {cut}");
    }
}

/// Malformed and smuggling-shaped requests, each with the error (and so the status) it gets.
#[test]
fn malformed_requests_are_rejected_with_the_right_status() {
    let long_target = format!("GET /{} HTTP/1.1\r\nHost: a\r\n\r\n", "a".repeat(9000));
    let big_field = format!("GET / HTTP/1.1\r\nHost: a\r\nX: {}\r\n\r\n", "b".repeat(70_000));
    let many_fields = format!("GET / HTTP/1.1\r\nHost: a\r\n{}\r\n", "X-A: 1\r\n".repeat(101));
    let cases: Vec<(&[u8], H1Error)> = vec![
        (
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
            H1Error::LengthAndChunked,
        ),
        (
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
            H1Error::LengthAndChunked,
        ),
        (
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
            H1Error::BadContentLength,
        ),
        (
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3, 4\r\n\r\n",
            H1Error::BadContentLength,
        ),
        (
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n",
            H1Error::BadContentLength,
        ),
        (
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\n",
            H1Error::BadContentLength,
        ),
        (
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0x10\r\n\r\n",
            H1Error::BadContentLength,
        ),
        (
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: \r\n\r\n",
            H1Error::BadContentLength,
        ),
        (
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1 2\r\n\r\n",
            H1Error::BadContentLength,
        ),
        (
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999\r\n\r\n",
            H1Error::BadContentLength,
        ),
        (
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n",
            H1Error::BadTransferEncoding,
        ),
        (
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
            H1Error::BadTransferEncoding,
        ),
        (
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
            H1Error::BadTransferEncoding,
        ),
        (
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: xchunked\r\n\r\n",
            H1Error::BadTransferEncoding,
        ),
        (
            b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
            H1Error::BadTransferEncoding,
        ),
        (
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding : chunked\r\n\r\n",
            H1Error::BadFieldName,
        ),
        (b"GET / HTTP/1.1\r\nHost : a\r\n\r\n", H1Error::BadFieldName),
        (
            b"GET / HTTP/1.1\r\nHost: a\r\nX-A: 1\r\n  folded\r\n\r\n",
            H1Error::ObsFold,
        ),
        (
            b"GET / HTTP/1.1\r\nHost: a\r\nX-A: 1\r\n\tfolded\r\n\r\n",
            H1Error::ObsFold,
        ),
        (
            b"GET / HTTP/1.1\r\nHost: a\r\nX-A: a\0b\r\n\r\n",
            H1Error::BadFieldValue,
        ),
        (
            b"GET / HTTP/1.1\r\nHost: a\r\nX-A: a\rb\r\n\r\n",
            H1Error::BadFieldValue,
        ),
        (b"GET / HTTP/1.1\nHost: a\n\n", H1Error::BareLf),
        (b"GET / HTTP/1.1\r\nHost: a\nX: y\r\n\r\n", H1Error::BareLf),
        (b"GET / HTTP/1.1\r\nHost: a\r\n\n", H1Error::BareLf),
        (b"GET /a b HTTP/1.1\r\nHost: a\r\n\r\n", H1Error::BadVersion),
        (b"GET a HTTP/1.1\r\nHost: a\r\n\r\n", H1Error::BadTarget),
        (b"GET * HTTP/1.1\r\nHost: a\r\n\r\n", H1Error::BadTarget),
        (b"GET ftp://x/ HTTP/1.1\r\nHost: a\r\n\r\n", H1Error::BadTarget),
        (b"CONNECT /x HTTP/1.1\r\nHost: a\r\n\r\n", H1Error::BadTarget),
        (b"GET /#frag HTTP/1.1\r\nHost: a\r\n\r\n", H1Error::BadTarget),
        (b"G@T / HTTP/1.1\r\nHost: a\r\n\r\n", H1Error::BadMethod),
        (b"GET / HTTP/2.0\r\nHost: a\r\n\r\n", H1Error::BadVersion),
        (b"GET / HTTP/1.1\r\n\r\n", H1Error::MissingHost),
        (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", H1Error::DuplicateHost),
        (b"GET / HTTP/1.1\r\nHost: a b\r\n\r\n", H1Error::BadFieldValue),
        (b"GET / HTTP/1.1\r\nHost: evil.com/x\r\n\r\n", H1Error::BadFieldValue),
        (b"GET / HTTP/1.1\r\nHost: a@b\r\n\r\n", H1Error::BadFieldValue),
        (
            b"GET / HTTP/1.1\r\nHost: a\r\n: empty-name\r\n\r\n",
            H1Error::BadFieldName,
        ),
        (b"GET / HTTP/1.1\r\nHost: a\r\nX\x7fY: 1\r\n\r\n", H1Error::BadFieldName),
        (long_target.as_bytes(), H1Error::RequestLineTooLong),
        (big_field.as_bytes(), H1Error::HeadTooLarge),
        (many_fields.as_bytes(), H1Error::TooManyFields),
    ];
    assert!(cases.len() >= 40);
    for (raw, want) in &cases {
        let got = req(raw);
        assert_eq!(
            got,
            Err(*want),
            "{:?}",
            String::from_utf8_lossy(&raw[..raw.len().min(120)])
        );
    }
    assert_eq!(H1Error::RequestLineTooLong.status(), 414);
    assert_eq!(H1Error::TooManyFields.status(), 431);
    assert_eq!(H1Error::BareLf.status(), 400);
}

#[test]
fn limits_apply_before_the_head_is_complete() {
    let partial_line = format!("GET /{}", "a".repeat(9000));
    assert_eq!(req(partial_line.as_bytes()), Err(H1Error::RequestLineTooLong));
    let partial_head = format!("GET / HTTP/1.1\r\nHost: a\r\nX: {}", "b".repeat(70_000));
    assert_eq!(req(partial_head.as_bytes()), Err(H1Error::HeadTooLarge));
}

/// Found by the fuzzer: a reason phrase with obs-text, which httparse hands back as a `""` of its
/// own, not a slice of the buffer.
#[test]
fn a_reason_phrase_of_obs_text_reads_as_none() {
    let r = res(b"HTTP/1.1 204 No Cont\xadnt\r\n\r\n", false).unwrap().unwrap();
    assert_eq!((r.status, r.reason), (204, (0, 0)));
}

#[test]
fn responses_and_their_framing() {
    let r = res(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", false)
        .unwrap()
        .unwrap();
    assert_eq!((r.status, r.framing, r.keep_alive), (200, Framing::Length(5), true));
    let r = res(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", true)
        .unwrap()
        .unwrap();
    assert_eq!(r.framing, Framing::None, "HEAD responses have no body");
    for status in [
        "100 Continue",
        "101 Switching Protocols",
        "204 No Content",
        "304 Not Modified",
    ] {
        let raw = format!("HTTP/1.1 {status}\r\nContent-Length: 10\r\n\r\n");
        assert_eq!(
            res(raw.as_bytes(), false).unwrap().unwrap().framing,
            Framing::None,
            "{status}"
        );
    }
    let r = res(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", false)
        .unwrap()
        .unwrap();
    assert_eq!(r.framing, Framing::Chunked);
    let r = res(b"HTTP/1.1 200 OK\r\n\r\n", false).unwrap().unwrap();
    assert_eq!((r.framing, r.keep_alive), (Framing::UntilClose, false));
    let r = res(b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n", false)
        .unwrap()
        .unwrap();
    assert!(!r.keep_alive);
}

#[test]
fn malformed_responses_are_rejected() {
    let cases: Vec<(&[u8], H1Error)> = vec![
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
            H1Error::LengthAndChunked,
        ),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            H1Error::BadContentLength,
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
            H1Error::BadTransferEncoding,
        ),
        (b"HTTP/1.1 200 OK\nContent-Length: 1\n\n", H1Error::BareLf),
        (b"HTTP/1.1 2000 OK\r\n\r\n", H1Error::BadStatus),
        (b"HTTP/1.1 099 Nope\r\n\r\n", H1Error::BadStatus),
        (b"HTTP/1.1 200 OK\r\nX-A : 1\r\n\r\n", H1Error::BadFieldName),
        (b"HTTP/3 200 OK\r\n\r\n", H1Error::BadVersion),
    ];
    for (raw, want) in &cases {
        assert_eq!(res(raw, false), Err(*want), "{:?}", String::from_utf8_lossy(raw));
    }
}

fn walk(body: &[u8], step: usize) -> Result<(usize, bool), H1Error> {
    let mut d = ChunkedDecoder::new();
    let mut used = 0;
    for piece in body.chunks(step.max(1)) {
        let (n, p) = d.advance(piece)?;
        used += n;
        if p == ChunkedProgress::Done {
            return Ok((used, true));
        }
    }
    Ok((used, false))
}

#[test]
fn chunked_bodies_end_exactly_where_they_should() {
    let body = b"5\r\nhello\r\n6;name=\"va;l\\\"ue\"\r\n world\r\n0\r\nX-Trailer: yes\r\n\r\nNEXT REQUEST";
    let end = body.len() - "NEXT REQUEST".len();
    for step in [1, 2, 3, 7, 64, body.len()] {
        assert_eq!(walk(body, step), Ok((end, true)), "step {step}");
    }
    assert_eq!(walk(b"0\r\n\r\n", 1), Ok((5, true)));
    assert_eq!(walk(b"A\r\n0123456789\r\n", 4), Ok((15, false)));
    assert_eq!(
        walk(b"ffffffffffffffff\r\n", 100),
        Ok((18, false)),
        "the largest size is accepted"
    );
}

#[test]
fn malformed_chunked_bodies_are_rejected() {
    let cases: &[(&[u8], H1Error)] = &[
        (b"\r\n", H1Error::BadChunkSize),
        (b"g\r\n", H1Error::BadChunkSize),
        (b"5 \r\nhello\r\n", H1Error::BadChunkSize),
        (b" 5\r\nhello\r\n", H1Error::BadChunkSize),
        (b"-5\r\n", H1Error::BadChunkSize),
        (b"0x5\r\n", H1Error::BadChunkSize),
        (b"10000000000000000\r\n", H1Error::BadChunkSize),
        (b"5\nhello\r\n", H1Error::BadChunkSize),
        (b"5;a\x00b\r\nhello\r\n", H1Error::BadChunkExtension),
        (b"5;a\nb\r\n", H1Error::BadChunkExtension),
        (b"5\r\nhelloX\r\n", H1Error::BadChunkEnd),
        (b"5\r\nhello\n0\r\n\r\n", H1Error::BadChunkEnd),
        (b"0\r\nBad Trailer: x\r\n\r\n", H1Error::BadTrailer),
        (b"0\r\n folded\r\n\r\n", H1Error::BadTrailer),
        (b"0\r\nX: a\x00\r\n\r\n", H1Error::BadTrailer),
        (b"0\r\n\n", H1Error::BadTrailer),
    ];
    for (body, want) in cases {
        assert_eq!(
            walk(body, 1).map(|_| ()),
            Err(*want),
            "{:?}",
            String::from_utf8_lossy(body)
        );
    }
    let long_ext = [b"5;".as_slice(), &[b'a'; 2000]].concat();
    assert_eq!(walk(&long_ext, 50).map(|_| ()), Err(H1Error::BadChunkExtension));
}

#[test]
fn name_tests_and_the_request_line_length() {
    use super::head::{is_name, request_line_len};
    for (name, lower, same) in [
        (&b"Content-Length"[..], &b"content-length"[..], true),
        (b"CONTENT-LENGTH", b"content-length", true),
        (b"content-lengtH", b"content-length", true),
        (b"Content-Lengths", b"content-length", false),
        (b"Content_Length", b"content-length", false),
        (b"Transfer-Encoding", b"transfer-encoding", true),
        (b"Transfer-Encodinx", b"transfer-encoding", false),
        (b"User-Agent", b"connection", false),
        (b"HoSt", b"host", true),
        (b"Hose", b"host", false),
        (b"Expect", b"expect", true),
        (b"Server", b"expect", false),
        (b"te", b"te", true),
    ] {
        assert_eq!(is_name(name, lower), same, "{}", String::from_utf8_lossy(name));
    }
    let line_len = |raw: &[u8]| {
        let head = req(raw).unwrap().unwrap();
        let slice = |r: (u32, u32)| &raw[r.0 as usize..r.1 as usize];
        request_line_len(raw, slice(head.method), slice(head.target))
    };
    assert_eq!(line_len(b"GET /abc HTTP/1.1\r\nHost: a\r\n\r\n"), 18);
    assert_eq!(line_len(b"\r\nGET /abc HTTP/1.0\r\n\r\n"), 20);
    let limits = Limits {
        max_request_line: 18,
        ..Limits::default()
    };
    let parse = |raw: &[u8]| parse_request(raw, &limits, &mut RequestHead::default()).map(|h| h.is_some());
    assert_eq!(parse(b"GET /abc HTTP/1.1\r\nHost: a\r\n\r\n"), Ok(true));
    assert_eq!(
        parse(b"GET /abcd HTTP/1.1\r\nHost: a\r\n\r\n"),
        Err(H1Error::RequestLineTooLong)
    );
    assert_eq!(parse(b"GET /abcd HTTP/1.1\nHost: a\r\n\r\n"), Err(H1Error::BareLf));
}
