//! Rampart's HTTP/2 frames and HPACK against an independent implementation: the `h2` crate's
//! client sends requests over an in-memory connection; this side reads its frames with
//! [`h2frame::decode`], decodes each request's field block with [`Decoder`] (the client's
//! encoder chose the representations: indexed, literal, Huffman, dynamic table entries) and
//! answers with frames from [`h2frame`]'s writers carrying field blocks from [`Encoder`], which
//! the client must read back as written.

use rampart_proto::h2frame::{self, Frame, PREFACE};
use rampart_proto::hpack::{Decoder, Encoder};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

/// The next frame's bytes (the buffer's front holds it whole after this).
async fn next_frame(io: &mut DuplexStream, buf: &mut Vec<u8>) -> usize {
    loop {
        if let Some((_, used)) = h2frame::decode(buf, 16_384).expect("a frame the client wrote") {
            return used;
        }
        let mut chunk = [0u8; 16 * 1024];
        let n = io.read(&mut chunk).await.expect("read");
        assert!(n > 0, "the client closed");
        buf.extend_from_slice(&chunk[..n]);
    }
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
    let mut out = Vec::new();
    h2frame::write_settings(&mut out, false, &[]);
    io.write_all(&out).await.unwrap();
    // The block being gathered (HEADERS, then CONTINUATIONs), and its stream.
    let mut pending: Option<(u32, Vec<u8>)> = None;
    let mut decoder = Decoder::new(4096, 64 * 1024);
    let mut encoder = Encoder::default();
    let mut answered = 0usize;
    while answered < 60 {
        let used = next_frame(&mut io, &mut buf).await;
        let frame = buf.drain(..used).collect::<Vec<u8>>();
        let (frame, _) = h2frame::decode(&frame, 16_384).unwrap().unwrap();
        let ended = match frame {
            Frame::Settings { ack: false, params } => {
                h2frame::Settings::default()
                    .apply(params)
                    .expect("the client's settings");
                let mut ack = Vec::new();
                h2frame::write_settings(&mut ack, true, &[]);
                io.write_all(&ack).await.unwrap();
                None
            }
            Frame::Headers {
                stream,
                end_headers,
                block,
                ..
            } => {
                pending = Some((stream, block.to_vec()));
                end_headers.then_some(stream)
            }
            Frame::Continuation {
                stream,
                end_headers,
                block,
            } => {
                let (on, gathered) = pending.as_mut().expect("CONTINUATION after HEADERS");
                assert_eq!(*on, stream);
                gathered.extend_from_slice(block);
                end_headers.then_some(stream)
            }
            // WINDOW_UPDATE, PRIORITY, a SETTINGS acknowledgement: nothing to check.
            _ => None,
        };
        let Some(stream) = ended else {
            continue;
        };
        let (_, block) = pending.take().unwrap();
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
        // A small frame size for the answers, so that larger blocks go on in CONTINUATIONs.
        let mut frames = Vec::new();
        h2frame::write_headers(&mut frames, stream, &block, true, 256);
        io.write_all(&frames).await.unwrap();
        answered += 1;
    }
    client.await.expect("the client saw every answer as written");
}
