//! HPACK against an independent implementation: the `h2` crate's client sends requests over an
//! in-memory connection; this side reads its frames by hand, decodes each request's field block
//! with [`Decoder`] (the client's encoder chose the representations: indexed, literal, Huffman,
//! dynamic table entries) and answers with a field block from [`Encoder`], which the client's
//! decoder must read back as written.

use rampart_proto::hpack::{Decoder, Encoder};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// A frame as read off the wire: its type, flags, stream and payload.
struct Frame {
    kind: u8,
    flags: u8,
    stream: u32,
    payload: Vec<u8>,
}

async fn read_frame(io: &mut DuplexStream, buf: &mut Vec<u8>) -> Frame {
    loop {
        if buf.len() >= 9 {
            let len = (usize::from(buf[0]) << 16) | (usize::from(buf[1]) << 8) | usize::from(buf[2]);
            if buf.len() >= 9 + len {
                let stream = u32::from_be_bytes([buf[5], buf[6], buf[7], buf[8]]) & 0x7fff_ffff;
                let frame = Frame {
                    kind: buf[3],
                    flags: buf[4],
                    stream,
                    payload: buf[9..9 + len].to_vec(),
                };
                buf.drain(..9 + len);
                return frame;
            }
        }
        let mut chunk = [0u8; 16 * 1024];
        let n = io.read(&mut chunk).await.expect("read");
        assert!(n > 0, "the client closed");
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len();
    let mut out = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// The field block of a HEADERS frame (and the CONTINUATIONs after it), padding and priority
/// taken off.
async fn field_block(io: &mut DuplexStream, buf: &mut Vec<u8>, first: Frame) -> (u32, Vec<u8>) {
    let mut payload = &first.payload[..];
    if first.flags & 0x08 != 0 {
        let pad = usize::from(payload[0]);
        payload = &payload[1..payload.len() - pad];
    }
    if first.flags & 0x20 != 0 {
        payload = &payload[5..];
    }
    let mut block = payload.to_vec();
    let mut ended = first.flags & 0x04 != 0;
    while !ended {
        let next = read_frame(io, buf).await;
        assert_eq!(next.kind, 9, "CONTINUATION follows");
        block.extend_from_slice(&next.payload);
        ended = next.flags & 0x04 != 0;
    }
    (first.stream, block)
}

#[tokio::test]
async fn the_h2_crate_reads_what_the_encoder_writes_and_the_decoder_reads_what_it_writes() {
    let (client_io, mut io) = tokio::io::duplex(1 << 20);
    let client = tokio::spawn(async move {
        let (mut send, connection) = h2::client::handshake(client_io).await.expect("handshake");
        tokio::spawn(async move {
            let _ = connection.await;
        });
        for i in 0..60usize {
            let long = "v".repeat(i * 37 % 700);
            let request = http::Request::builder()
                .method(if i % 3 == 0 { "POST" } else { "GET" })
                .uri(format!("http://app.example:8080/items/{i}?q={}", i * 7))
                .header("user-agent", "oracle/1.0")
                .header("x-long", long.as_str())
                .header(
                    "x-bytes",
                    http::HeaderValue::from_bytes(&[b'a', 0xff, b' ', 0x80 + (i as u8 % 100)]).unwrap(),
                )
                .header("cookie", format!("session={i}"))
                .body(())
                .unwrap();
            send = send.ready().await.expect("ready");
            let (response, _) = send.send_request(request, true).expect("send");
            let response = response.await.expect("response");
            assert_eq!(response.status().as_u16(), 200 + (i as u16 % 5));
            let headers = response.headers();
            assert_eq!(headers["x-echo"], format!("{i}"));
            assert_eq!(headers["content-type"], "application/grpc");
            assert_eq!(headers["x-long-back"].len(), long.len());
            assert_eq!(headers.get_all("x-twice").iter().count(), 2);
        }
    });

    let mut buf = Vec::new();
    let mut preface = [0u8; 24];
    io.read_exact(&mut preface).await.unwrap();
    assert_eq!(&preface[..], PREFACE);
    io.write_all(&frame(4, 0, 0, &[])).await.unwrap();
    let mut decoder = Decoder::new(4096, 64 * 1024);
    let mut encoder = Encoder::default();
    let mut answered = 0usize;
    while answered < 60 {
        let next = read_frame(&mut io, &mut buf).await;
        match next.kind {
            // SETTINGS (acknowledged), WINDOW_UPDATE, PRIORITY: nothing to check.
            4 if next.flags & 1 == 0 => io.write_all(&frame(4, 1, 0, &[])).await.unwrap(),
            1 => {
                let (stream, block) = field_block(&mut io, &mut buf, next).await;
                let mut out = Vec::new();
                let mut fields = Vec::new();
                decoder
                    .decode(&block, &mut out, |f| fields.push(f))
                    .expect("a block the client wrote");
                let field = |name: &[u8]| {
                    fields
                        .iter()
                        .find(|f| f.name(&out) == name)
                        .map(|f| f.value(&out).to_vec())
                        .unwrap_or_default()
                };
                let i = answered;
                let method: &[u8] = if i % 3 == 0 { b"POST" } else { b"GET" };
                assert_eq!(field(b":method"), method);
                assert_eq!(field(b":scheme"), b"http");
                assert_eq!(field(b":authority"), b"app.example:8080");
                assert_eq!(field(b":path"), format!("/items/{i}?q={}", i * 7).as_bytes());
                assert_eq!(field(b"user-agent"), b"oracle/1.0");
                assert_eq!(field(b"x-long"), "v".repeat(i * 37 % 700).as_bytes());
                assert_eq!(field(b"x-bytes"), [b'a', 0xff, b' ', 0x80 + (i as u8 % 100)]);
                assert_eq!(field(b"cookie"), format!("session={i}").as_bytes());
                let status = (200 + i % 5).to_string();
                let echo = i.to_string();
                let back = "w".repeat(i * 37 % 700);
                let answer: [(&[u8], &[u8]); 6] = [
                    (b":status", status.as_bytes()),
                    (b"content-type", b"application/grpc"),
                    (b"x-echo", echo.as_bytes()),
                    (b"x-long-back", back.as_bytes()),
                    (b"x-twice", b"1"),
                    (b"x-twice", b"2"),
                ];
                let mut block = Vec::new();
                encoder.encode(answer, &mut block);
                // END_STREAM and END_HEADERS; a block over the default frame size goes on in a
                // CONTINUATION.
                let (head, rest) = block.split_at(block.len().min(16 * 1024));
                let flags = if rest.is_empty() { 0x05 } else { 0x01 };
                io.write_all(&frame(1, flags, stream, head)).await.unwrap();
                if !rest.is_empty() {
                    io.write_all(&frame(9, 0x04, stream, rest)).await.unwrap();
                }
                answered += 1;
            }
            _ => {}
        }
    }
    client.await.expect("the client saw every answer as written");
}
