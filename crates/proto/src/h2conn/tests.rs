use super::*;
use crate::h2frame::ErrorCode;
use crate::h2frame::{self, decode, flag, kind, write_header, Frame, PREFACE};
use crate::hpack::Encoder;

fn config() -> ServerConfig {
    ServerConfig {
        max_concurrent_streams: 100,
        max_header_list_size: 16 * 1024,
        stream_window: 65_535,
        connection_window: 1 << 20,
        connect_protocol: true,
    }
}

/// A client's side: it writes frames and reads what the server wrote.
struct Client {
    encoder: Encoder,
    wire: Vec<u8>,
}

impl Client {
    fn new() -> Self {
        let mut wire = PREFACE.to_vec();
        h2frame::write_settings(&mut wire, false, &[]);
        Client {
            encoder: Encoder::default(),
            wire,
        }
    }

    fn request(&mut self, stream: u32, path: &str, end_stream: bool) {
        let mut block = Vec::new();
        self.encoder.encode(
            [
                (&b":method"[..], &b"GET"[..]),
                (b":scheme", b"http"),
                (b":authority", b"example"),
                (b":path", path.as_bytes()),
            ],
            &mut block,
        );
        h2frame::write_headers(&mut self.wire, stream, &block, end_stream, 16_384);
    }
}

/// Feeds everything written so far; returns the events and what the server wrote.
fn run(conn: &mut Connection, wire: &mut Vec<u8>) -> Result<Vec<Event>, ConnectionError> {
    let mut events = Vec::new();
    loop {
        let received = conn.receive(wire)?;
        wire.drain(..received.used);
        match received.event {
            Some(e) => events.push(e),
            None => return Ok(events),
        }
    }
}

/// The frames the server wrote, as (kind, flags, stream, payload).
fn written(conn: &mut Connection) -> Vec<(u8, u8, u32, Vec<u8>)> {
    let out = std::mem::take(conn.output());
    let mut at = 0;
    let mut frames = Vec::new();
    while at < out.len() {
        let len = (out[at] as usize) << 16 | (out[at + 1] as usize) << 8 | out[at + 2] as usize;
        let stream = u32::from_be_bytes([out[at + 5], out[at + 6], out[at + 7], out[at + 8]]);
        frames.push((out[at + 3], out[at + 4], stream, out[at + 9..at + 9 + len].to_vec()));
        at += 9 + len;
    }
    frames
}

#[test]
fn a_request_is_read_and_answered_and_settings_and_pings_are_acknowledged() {
    let mut conn = Connection::server(config());
    let greeting = written(&mut conn);
    assert_eq!(greeting[0].0, kind::SETTINGS);
    assert_eq!((greeting[1].0, greeting[1].2), (kind::WINDOW_UPDATE, 0));
    let mut client = Client::new();
    h2frame::write_ping(&mut client.wire, false, *b"12345678");
    client.request(1, "/a", true);
    let events = run(&mut conn, &mut client.wire).unwrap();
    assert_eq!(
        events,
        vec![Event::Request {
            stream: 1,
            end_stream: true
        }]
    );
    let (bytes, fields) = conn.fields();
    let pairs: Vec<(&[u8], &[u8])> = fields.iter().map(|f| (f.name(bytes), f.value(bytes))).collect();
    assert_eq!(pairs[3], (&b":path"[..], &b"/a"[..]));
    let frames = written(&mut conn);
    assert_eq!((frames[0].0, frames[0].1), (kind::SETTINGS, flag::ACK));
    assert_eq!(
        (frames[1].0, frames[1].1, &frames[1].3[..]),
        (kind::PING, flag::ACK, &b"12345678"[..])
    );
    assert!(conn.send_headers(
        1,
        Some(200),
        [(&b"Content-Type"[..], &b"text/plain"[..])].into_iter(),
        false
    ));
    assert_eq!(conn.send_data(1, b"hello", true), Some(5));
    assert!(!conn.can_send(1));
    let frames = written(&mut conn);
    assert_eq!((frames[0].0, frames[0].1), (kind::HEADERS, flag::END_HEADERS));
    assert_eq!(
        (frames[1].0, frames[1].1, &frames[1].3[..]),
        (kind::DATA, flag::END_STREAM, &b"hello"[..])
    );
    assert_eq!(conn.open_streams(), 0);
}

#[test]
fn data_arrives_in_place_and_its_credit_goes_back_as_it_is_passed_on() {
    let mut conn = Connection::server(config());
    written(&mut conn);
    let mut client = Client::new();
    client.request(1, "/upload", false);
    for _ in 0..3 {
        write_header(&mut client.wire, 12_000, kind::DATA, 0, 1);
        client.wire.extend(std::iter::repeat_n(7u8, 12_000));
    }
    let received = conn.receive(&client.wire).unwrap();
    assert_eq!(
        received.event,
        Some(Event::Request {
            stream: 1,
            end_stream: false
        })
    );
    client.wire.drain(..received.used);
    for _ in 0..3 {
        let received = conn.receive(&client.wire).unwrap();
        let Some(Event::Data {
            stream: 1,
            at,
            len,
            end_stream: false,
        }) = received.event
        else {
            panic!("{received:?}");
        };
        assert_eq!((at, len, received.used), (9, 12_000, 12_009));
        client.wire.drain(..received.used);
    }
    written(&mut conn);
    // Passed on: half the stream's window is due back, so both windows get their credit.
    conn.release(1, 36_000);
    let frames = written(&mut conn);
    assert!(
        frames.iter().any(|f| f.0 == kind::WINDOW_UPDATE && f.2 == 1),
        "{frames:?}"
    );
    // More than the stream's window: a stream error, the connection lives.
    client.wire.clear();
    write_header(&mut client.wire, 16_384, kind::DATA, 0, 1);
    client.wire.extend([0u8; 16_384]);
    for _ in 0..5 {
        let received = conn.receive(&client.wire).unwrap();
        if let Some(Event::Reset {
            stream: 1,
            code,
            by_peer: false,
        }) = received.event
        {
            assert_eq!(code, ErrorCode::FlowControl as u32);
            return;
        }
    }
    panic!("never reset");
}

#[test]
fn a_head_past_the_list_limit_is_answered_431_and_the_table_stays_in_step() {
    let mut conn = Connection::server(config());
    written(&mut conn);
    let mut client = Client::new();
    let big = "x".repeat(20_000);
    let mut block = Vec::new();
    client.encoder.encode(
        [
            (&b":method"[..], &b"GET"[..]),
            (b":scheme", b"http"),
            (b":path", b"/"),
            (b"x-big", big.as_bytes()),
            (b"x-kept", b"indexed"),
        ],
        &mut block,
    );
    h2frame::write_headers(&mut client.wire, 1, &block, true, 16_384);
    client.request(3, "/after", true);
    let events = run(&mut conn, &mut client.wire).unwrap();
    assert_eq!(
        events,
        vec![Event::Request {
            stream: 3,
            end_stream: true
        }]
    );
    let frames = written(&mut conn);
    let answer = frames.iter().find(|f| f.0 == kind::HEADERS).unwrap();
    assert_eq!(answer.2, 1);
    assert_eq!(answer.1 & flag::END_STREAM, flag::END_STREAM);
    let mut decoder = crate::hpack::Decoder::new(4096, 1 << 16);
    let mut out = Vec::new();
    decoder.decode(&answer.3, &mut out, |_| {}).unwrap();
    assert!(out.ends_with(b"431"));
}

#[test]
fn a_continuation_flood_ends_the_connection_before_it_is_buffered() {
    let mut conn = Connection::server(config());
    let mut client = Client::new();
    write_header(&mut client.wire, 0, kind::HEADERS, 0, 1);
    let mut error = None;
    for _ in 0..10_000 {
        write_header(&mut client.wire, 1000, kind::CONTINUATION, 0, 1);
        client.wire.extend([0x41u8; 1000]);
        if let Err(e) = run(&mut conn, &mut client.wire) {
            error = Some(e);
            break;
        }
    }
    assert_eq!(error.map(|e| e.code), Some(ErrorCode::EnhanceYourCalm));
    let frames = written(&mut conn);
    assert_eq!(frames.last().map(|f| f.0), Some(kind::GOAWAY));
    // Nothing more is read.
    assert!(!conn.wants_input());
}

#[test]
fn empty_frames_in_a_row_end_the_connection() {
    let mut conn = Connection::server(config());
    let mut client = Client::new();
    client.request(1, "/", false);
    for _ in 0..=EMPTY_FRAMES {
        write_header(&mut client.wire, 0, kind::DATA, 0, 1);
    }
    let error = run(&mut conn, &mut client.wire).unwrap_err();
    assert_eq!(error.code, ErrorCode::EnhanceYourCalm);
}

#[test]
fn pings_whose_answers_are_not_read_stop_the_reading() {
    let mut conn = Connection::server(config());
    let mut client = Client::new();
    for _ in 0..100_000 {
        h2frame::write_ping(&mut client.wire, false, [0; 8]);
    }
    run(&mut conn, &mut client.wire).unwrap();
    // Read until the answers piled up to the limit, and no further.
    assert!(!conn.wants_input());
    assert!(!client.wire.is_empty());
    assert!(conn.output().len() < OUTPUT_LIMIT + 64);
    conn.output().clear();
    assert!(conn.wants_input());
}

#[test]
fn rapid_resets_end_the_connection_with_enhance_your_calm() {
    let mut conn = Connection::server(config());
    let mut client = Client::new();
    let mut id = 1;
    let error = loop {
        client.request(id, "/", true);
        h2frame::write_rst_stream(&mut client.wire, id, ErrorCode::Cancel);
        if let Err(e) = run(&mut conn, &mut client.wire) {
            break e;
        }
        id += 2;
        assert!(id < 100_000);
    };
    assert_eq!(error.code, ErrorCode::EnhanceYourCalm);
}

#[test]
fn protocol_errors_are_connection_errors() {
    type Write = fn(&mut Vec<u8>);
    let cases: [(&str, Write); 4] = [
        ("a frame before SETTINGS", |w| {
            w.truncate(PREFACE.len());
            h2frame::write_ping(w, false, [0; 8]);
        }),
        ("PUSH_PROMISE from a client", |w| {
            write_header(w, 4, kind::PUSH_PROMISE, flag::END_HEADERS, 1);
            w.extend([0, 0, 0, 2]);
        }),
        ("an interrupted field block", |w| {
            write_header(w, 0, kind::HEADERS, 0, 1);
            h2frame::write_ping(w, false, [0; 8]);
        }),
        ("a block that does not decode", |w| {
            write_header(w, 1, kind::HEADERS, flag::END_HEADERS, 1);
            w.push(0xff);
        }),
    ];
    for (what, write) in cases {
        let mut conn = Connection::server(config());
        let mut client = Client::new();
        write(&mut client.wire);
        assert!(run(&mut conn, &mut client.wire).is_err(), "{what}");
    }
    let mut conn = Connection::server(config());
    let mut wire = b"GET / HTTP/1.1\r\n".to_vec();
    assert!(run(&mut conn, &mut wire).is_err());
}

#[test]
fn goaway_lets_the_streams_seen_finish_and_drops_later_ones() {
    let mut conn = Connection::server(config());
    let mut client = Client::new();
    client.request(1, "/", false);
    run(&mut conn, &mut client.wire).unwrap();
    conn.go_away(ErrorCode::NoError);
    client.request(3, "/late", true);
    h2frame::write_data_header(&mut client.wire, 1, 2, true);
    client.wire.extend(*b"ok");
    let events = run(&mut conn, &mut client.wire).unwrap();
    assert!(
        matches!(
            events[..],
            [Event::Data {
                stream: 1,
                len: 2,
                end_stream: true,
                ..
            }]
        ),
        "{events:?}"
    );
    let frames = written(&mut conn);
    let goaway = frames.iter().find(|f| f.0 == kind::GOAWAY).unwrap();
    assert_eq!(&goaway.3[..4], &1u32.to_be_bytes());
    // The output this test read back decodes as frames.
    assert!(decode(&[], 16_384).unwrap().is_none());
    let _ = Frame::Unknown { kind: 0, stream: 0 };
}

/// A response head or trailers with a value an HTTP/1.1 peer would read as split lines (or a
/// name that is not a lowercase token) is malformed: the stream is reset, nothing is passed on.
#[test]
fn fields_http2_forbids_reset_the_stream_on_either_side() {
    // Client side: a response with CR LF in a value.
    let mut conn = Connection::client(ClientConfig {
        max_header_list_size: 16 * 1024,
        stream_window: 65_535,
        connection_window: 65_535,
    });
    let id = conn
        .open_stream(true, false, |w| {
            w.field(b":method", b"GET");
            w.field(b":scheme", b"http");
            w.field(b":authority", b"a");
            w.field(b":path", b"/");
        })
        .unwrap();
    let mut wire = Vec::new();
    h2frame::write_settings(&mut wire, false, &[]);
    let mut block = Vec::new();
    Encoder::default().encode(
        [(&b":status"[..], &b"200"[..]), (b"x-split", b"a\r\nset-cookie: b")],
        &mut block,
    );
    h2frame::write_headers(&mut wire, id, &block, false, 16_384);
    let events = run(&mut conn, &mut wire).unwrap();
    assert!(
        matches!(events[..], [Event::Reset { code, by_peer: false, .. }] if code == ErrorCode::Protocol as u32),
        "{events:?}"
    );
    // Server side: trailers with an uppercase name.
    let mut conn = Connection::server(config());
    let mut client = Client::new();
    client.request(1, "/", false);
    let mut block = Vec::new();
    client.encoder.encode([(&b"X-Upper"[..], &b"1"[..])], &mut block);
    // The encoder lowercases names; write the literal by hand instead.
    block.clear();
    block.extend_from_slice(&[0x00, 7]);
    block.extend_from_slice(b"X-Upper");
    block.extend_from_slice(&[1, b'1']);
    h2frame::write_headers(&mut client.wire, 1, &block, true, 16_384);
    let events = run(&mut conn, &mut client.wire).unwrap();
    assert!(
        matches!(events[..], [Event::Request { .. }, Event::Reset { code, .. }] if code == ErrorCode::Protocol as u32),
        "{events:?}"
    );
}
