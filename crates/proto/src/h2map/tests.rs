use super::*;
use crate::h1::{parse_request, write_chunk, ChunkedDecoder, ChunkedPart, Framing, Limits};
use crate::message::RequestHead;

type Fields<'a> = &'a [(&'a [u8], &'a [u8])];

/// The pseudo-header fields of a request: `:method`, `:authority`, `:path`, `:protocol` (each
/// left out when `None`).
#[derive(Clone, Copy)]
struct Pseudo<'a> {
    method: &'a [u8],
    authority: Option<&'a [u8]>,
    path: Option<&'a [u8]>,
    protocol: Option<&'a [u8]>,
}

impl<'a> Pseudo<'a> {
    fn block(&self, fields: Fields<'a>) -> Vec<(&'a [u8], &'a [u8])> {
        let mut block: Vec<(&[u8], &[u8])> = vec![(b":method", self.method), (b":scheme", b"https")];
        let named: [(&[u8], _); 3] = [
            (b":authority", self.authority),
            (b":path", self.path),
            (b":protocol", self.protocol),
        ];
        block.extend(named.into_iter().filter_map(|(n, v)| Some((n, v?))));
        block.extend_from_slice(fields);
        block
    }
}

fn get(path: &[u8]) -> Pseudo<'_> {
    Pseudo {
        method: b"GET",
        authority: Some(b"example.com"),
        path: Some(path),
        protocol: None,
    }
}

fn parse(text: &[u8]) -> (crate::h1::Parsed, RequestHead) {
    let mut head = RequestHead::default();
    let parsed = parse_request(text, &Limits::default(), &mut head).unwrap().unwrap();
    head.attach(text.to_vec(), 0, parsed.len);
    (parsed, head)
}

fn translate(pseudo: &Pseudo<'_>, fields: Fields<'_>, end: bool) -> Result<String, H2MapError> {
    let mut out = Vec::new();
    request_head(
        pseudo.block(fields).into_iter(),
        end,
        b"dGhlIHNhbXBsZSBub25jZQ==",
        &mut out,
    )?;
    Ok(String::from_utf8(out).unwrap())
}

#[test]
fn the_preface_is_told_from_http1_as_soon_as_the_bytes_differ() {
    assert_eq!(preface(PREFACE), Preface::Http2);
    assert_eq!(preface(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\x12\x04"), Preface::Http2);
    assert_eq!(preface(b"PRI * HT"), Preface::NeedMore);
    assert_eq!(preface(b""), Preface::NeedMore);
    assert_eq!(preface(b"GET / HTTP/1.1\r\n"), Preface::Other);
    assert_eq!(preface(b"PRIX"), Preface::Other);
    assert_eq!(preface(b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n"), Preface::Invalid);
}

#[test]
fn a_request_becomes_an_http1_head_the_codec_reads() {
    let head = translate(
        &get(b"/a?b=1"),
        &[
            (b"accept", b"*/*"),
            (b"cookie", b"a=1"),
            (b"x", b"y"),
            (b"cookie", b"b=2"),
        ],
        true,
    )
    .unwrap();
    assert_eq!(
        head,
        "GET /a?b=1 HTTP/1.1\r\nhost: example.com\r\naccept: */*\r\ncookie: a=1; b=2\r\nx: y\r\n\r\n"
    );
    let (parsed, head) = parse(head.as_bytes());
    assert_eq!(parsed.framing, Framing::None);
    assert!(head.host.is_some());
}

#[test]
fn a_body_without_length_is_chunked_and_one_with_length_keeps_it() {
    let post = Pseudo {
        method: b"POST",
        ..get(b"/up")
    };
    let chunked = translate(
        &post,
        &[(b"content-type", b"application/grpc"), (b"te", b"trailers")],
        false,
    )
    .unwrap();
    assert!(
        chunked.ends_with("te: trailers\r\ntransfer-encoding: chunked\r\n\r\n"),
        "{chunked}"
    );
    let sized = translate(&post, &[(b"content-length", b"5")], false).unwrap();
    assert!(!sized.contains("transfer-encoding"));
    let (parsed, _) = parse(sized.as_bytes());
    assert_eq!(parsed.framing, Framing::Length(5));
}

#[test]
fn malformed_requests_are_refused() {
    let e = |pseudo: &Pseudo<'_>, fields: Fields<'_>| translate(pseudo, fields, true).unwrap_err();
    assert_eq!(
        e(&get(b"/"), &[(b"connection", b"close")]),
        H2MapError::ConnectionSpecific
    );
    assert_eq!(
        e(&get(b"/"), &[(b"transfer-encoding", b"chunked")]),
        H2MapError::ConnectionSpecific
    );
    assert_eq!(e(&get(b"/"), &[(b"te", b"gzip")]), H2MapError::ConnectionSpecific);
    assert_eq!(e(&get(b"/"), &[(b"X-Upper", b"1")]), H2MapError::BadName);
    assert_eq!(e(&get(b"/"), &[(b"x", b"a\r\nevil: 1")]), H2MapError::BadValue);
    assert_eq!(e(&get(b"/"), &[(b"host", b"other.example")]), H2MapError::HostMismatch);
    assert_eq!(e(&get(b""), &[]), H2MapError::MissingPath);
    assert_eq!(e(&get(b"a b"), &[]), H2MapError::BadPath);
    let connect = Pseudo {
        method: b"CONNECT",
        path: None,
        ..get(b"/")
    };
    assert_eq!(e(&connect, &[]), H2MapError::Connect);
    let other = Pseudo {
        method: b"CONNECT",
        protocol: Some(b"chat"),
        ..get(b"/")
    };
    assert_eq!(e(&other, &[]), H2MapError::UnsupportedProtocol);
}

#[test]
fn pseudo_header_fields_come_first_once_each_and_known() {
    let e = |block: Fields<'_>| request_head(block.iter().copied(), true, b"k", &mut Vec::new()).unwrap_err();
    let get: [(&[u8], &[u8]); 2] = [(b":method", b"GET"), (b":path", b"/")];
    let twice = [get[0], get[1], (b":path", b"/b")];
    assert_eq!(e(&twice), H2MapError::BadPseudo);
    let late = [get[0], (b"x", b"1"), get[1]];
    assert_eq!(e(&late), H2MapError::BadPseudo);
    let unknown = [get[0], get[1], (b":status", b"200")];
    assert_eq!(e(&unknown), H2MapError::BadPseudo);
    assert_eq!(e(&[get[1]]), H2MapError::BadPseudo);
    // The scheme is required (RFC 9113 8.3.1).
    assert_eq!(e(&get), H2MapError::BadPseudo);
    // The authority may also come as `host`.
    let with_scheme = [get[0], (b":scheme", b"https"), get[1], (b"host", b"a")];
    let mut out = Vec::new();
    request_head(with_scheme.iter().copied(), true, b"k", &mut out).unwrap();
    assert_eq!(out, b"GET / HTTP/1.1\r\nhost: a\r\n\r\n");
    let (laid, _) = lay_out_request(
        with_scheme.iter().copied(),
        true,
        b"k",
        &Limits::default(),
        Default::default(),
    )
    .unwrap();
    let (_, parsed) = parse(&out);
    assert_eq!(
        (laid.method(), laid.target(), laid.host()),
        (&b"GET"[..], &b"/"[..], Some(&b"a"[..]))
    );
    assert_eq!(laid.pairs().collect::<Vec<_>>(), parsed.pairs().collect::<Vec<_>>());
}

#[test]
fn an_extended_connect_becomes_a_websocket_upgrade() {
    let ws = Pseudo {
        method: b"CONNECT",
        protocol: Some(b"websocket"),
        ..get(b"/chat")
    };
    let mut out = Vec::new();
    let kind = request_head(
        ws.block(&[(b"sec-websocket-version", b"13")]).into_iter(),
        false,
        b"dGhlIHNhbXBsZSBub25jZQ==",
        &mut out,
    )
    .unwrap();
    assert_eq!(kind, RequestKind::WebSocket);
    let (parsed, head) = parse(&out);
    assert!(head.upgrade);
    assert_eq!(parsed.framing, Framing::None);
    assert!(String::from_utf8(out).unwrap().starts_with("GET /chat HTTP/1.1\r\n"));
}

#[test]
fn chunks_and_trailers_round_trip_through_the_decoder() {
    let mut body = Vec::new();
    write_chunk(b"hello ", &mut body);
    write_chunk(b"", &mut body);
    write_chunk(&[b'x'; 300], &mut body);
    body.extend_from_slice(b"0\r\ngrpc-status: 0\r\ngrpc-message: ok\r\n\r\n");
    let (mut data, mut trailers) = (Vec::new(), Vec::new());
    let mut decoder = ChunkedDecoder::new();
    // Fed in small pieces: parts must come out whole across the splits.
    for piece in body.chunks(7) {
        decoder
            .decode(piece, |part| match part {
                ChunkedPart::Data(d) => data.extend_from_slice(d),
                ChunkedPart::Trailer(t) => trailers.extend_from_slice(t),
            })
            .unwrap();
    }
    assert!(decoder.is_done());
    assert_eq!(data.len(), 306);
    let fields: Vec<_> = trailer_fields(&trailers).collect();
    assert_eq!(
        fields,
        [(&b"grpc-status"[..], &b"0"[..]), (&b"grpc-message"[..], &b"ok"[..])]
    );
}

/// A request laid out in place (the decoded section kept, with what it gains appended) is the
/// head the HTTP/1 codec reads from the HTTP/1.1 text it stands for.
#[test]
fn a_request_laid_out_in_place_is_the_head_its_http1_text_reads_as() {
    let key = b"dGhlIHNhbXBsZSBub25jZQ==";
    let ws = Pseudo {
        method: b"CONNECT",
        protocol: Some(b"websocket"),
        ..get(b"/chat")
    };
    let cases: [(Pseudo<'_>, Fields<'_>, bool); 4] = [
        (
            get(b"/a?b=c"),
            &[
                (b"cookie", b" a=1"),
                (b"accept", b"  text/html "),
                (b"cookie", b"b=2"),
                (b"cookie", b"c=3 "),
            ],
            true,
        ),
        (get(b"/"), &[(b"cookie", b" only=1 "), (b"content-length", b"3")], false),
        (ws, &[(b"sec-websocket-version", b"13"), (b"cookie", b"x=1")], false),
        (
            Pseudo {
                authority: None,
                ..get(b"/")
            },
            &[(b"host", b"h.example"), (b"x", b"\ty")],
            false,
        ),
    ];
    for (pseudo, fields, end) in cases {
        let mut text = Vec::new();
        request_head(pseudo.block(fields).into_iter(), end, key, &mut text).unwrap();
        let (_, parsed) = parse(&text);
        let block = pseudo.block(fields);
        let (laid, _) =
            lay_out_request(block.iter().copied(), end, key, &Limits::default(), Default::default()).unwrap();
        let text = String::from_utf8_lossy(&text);
        assert_eq!(
            (laid.method(), laid.target(), laid.host(), laid.body, laid.upgrade),
            (
                parsed.method(),
                parsed.target(),
                parsed.host(),
                parsed.body,
                parsed.upgrade
            ),
            "{text}"
        );
        // But for the HTTP/1.1 head's framing field: the layout's body length says it.
        let framed = |(name, _): &(&[u8], &[u8])| *name != b"transfer-encoding";
        let parsed_pairs: Vec<_> = parsed.pairs().filter(framed).collect();
        assert_eq!(laid.pairs().collect::<Vec<_>>(), parsed_pairs, "{text}");
    }
    // Neither `:authority` nor `host`: refused as HTTP/1.1 refuses a head without `Host`.
    let block = Pseudo {
        authority: None,
        ..get(b"/")
    }
    .block(&[(b"accept", b"x")]);
    let refused = lay_out_request(block.iter().copied(), true, key, &Limits::default(), Default::default());
    assert_eq!(
        refused.err().map(|(e, _)| e),
        Some(LayoutError::Refused(crate::h1::H1Error::MissingHost))
    );
}
