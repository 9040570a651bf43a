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

/// Moves bytes both ways between `conn` and `io` until `step` says it is done: whatever the
/// connection wrote goes out, whatever came in is read, each event handed to `step` with the
/// bytes it was read from.
async fn drive(
    conn: &mut rampart_proto::h2conn::Connection,
    io: &mut DuplexStream,
    mut step: impl FnMut(&mut rampart_proto::h2conn::Connection, rampart_proto::h2conn::Event, &[u8]) -> bool,
) {
    let mut input = Vec::new();
    loop {
        let out = std::mem::take(conn.output());
        io.write_all(&out).await.unwrap();
        loop {
            let received = conn.receive(&input).expect("no connection error");
            let event = received.event;
            let done = event.is_some_and(|e| step(conn, e, &input));
            input.drain(..received.used);
            if done {
                let out = std::mem::take(conn.output());
                io.write_all(&out).await.unwrap();
                return;
            }
            if event.is_none() {
                break;
            }
        }
        let out = std::mem::take(conn.output());
        io.write_all(&out).await.unwrap();
        let mut chunk = [0u8; 16 * 1024];
        let n = io.read(&mut chunk).await.unwrap();
        assert!(n > 0, "the peer closed");
        input.extend_from_slice(&chunk[..n]);
    }
}

/// Rampart's server side against the `h2` crate's client: requests with bodies and trailers
/// both ways, many at once, windows smaller than the bodies.
#[tokio::test]
async fn the_server_side_serves_the_h2_crate_client() {
    use rampart_proto::h2conn::{Connection, Event, ServerConfig};
    let (client_io, mut io) = tokio::io::duplex(1 << 16);
    let client = tokio::spawn(async move {
        let (send, connection) = h2::client::Builder::new()
            .initial_window_size(20_000)
            .handshake::<_, bytes::Bytes>(client_io)
            .await
            .expect("handshake");
        tokio::spawn(async move {
            let _ = connection.await;
        });
        let mut calls = Vec::new();
        for i in 0..20u32 {
            let mut send = send.clone().ready().await.expect("ready");
            calls.push(tokio::spawn(async move {
                let request = http::Request::builder()
                    .method("POST")
                    .uri(format!("http://app.example/echo/{i}"))
                    .body(())
                    .unwrap();
                let (response, mut body) = send.send_request(request, false).unwrap();
                body.send_data(vec![i as u8; 50_000].into(), false).unwrap();
                let mut trailers = http::HeaderMap::new();
                trailers.insert("x-sum", i.to_string().parse().unwrap());
                body.send_trailers(trailers).unwrap();
                let response = response.await.expect("response");
                assert_eq!(response.status(), 200);
                let mut recv = response.into_body();
                let mut got = 0usize;
                while let Some(data) = recv.data().await {
                    let data = data.unwrap();
                    assert!(data.iter().all(|b| *b == i as u8));
                    got += data.len();
                    recv.flow_control().release_capacity(data.len()).unwrap();
                }
                assert_eq!(got, 50_000);
                let trailers = recv.trailers().await.unwrap().unwrap();
                assert_eq!(trailers["x-echoed"], i.to_string());
            }));
        }
        for call in calls {
            call.await.unwrap();
        }
    });
    let mut conn = Connection::server(ServerConfig {
        max_concurrent_streams: 100,
        max_header_list_size: 16 * 1024,
        stream_window: 30_000,
        connection_window: 1 << 20,
        connect_protocol: false,
    });
    // Per stream: the body received so far, and whether its answer has gone.
    let mut bodies: std::collections::HashMap<u32, Vec<u8>> = Default::default();
    let mut answered = 0;
    drive(&mut conn, &mut io, |conn, event, input| {
        match event {
            Event::Request { stream, .. } => {
                bodies.insert(stream, Vec::new());
            }
            Event::Data { stream, at, len, .. } => {
                bodies.get_mut(&stream).unwrap().extend_from_slice(&input[at..at + len]);
                conn.release(stream, len as u32);
            }
            Event::Trailers { stream } => {
                let (bytes, fields) = conn.fields();
                let sum = fields
                    .iter()
                    .find(|f| f.name(bytes) == b"x-sum")
                    .unwrap()
                    .value(bytes)
                    .to_vec();
                let body = bodies.remove(&stream).unwrap();
                assert_eq!(body.len(), 50_000);
                assert!(conn.send_headers(stream, Some(200), std::iter::empty(), false));
                // The whole body cannot go at once (the client's window is 20,000): what the
                // window takes now; the rest as it opens.
                let sent = conn.send_data(stream, &body, false).unwrap();
                bodies.insert(stream | 0x4000_0000, body[sent..].to_vec());
                let _ = sum;
                bodies.insert(stream | 0x2000_0000, sum);
            }
            Event::WindowOpened => {}
            other => panic!("{other:?}"),
        }
        // Everything still owed goes as far as the windows allow.
        let owed: Vec<u32> = bodies.keys().filter(|k| *k & 0x4000_0000 != 0).copied().collect();
        for key in owed {
            let stream = key & 0x3fff_ffff;
            let rest = bodies.remove(&key).unwrap();
            let sent = conn.send_data(stream, &rest, false).unwrap();
            if sent == rest.len() {
                let sum = bodies.remove(&(stream | 0x2000_0000)).unwrap();
                assert!(conn.send_headers(stream, None, [(&b"x-echoed"[..], &sum[..])].into_iter(), true));
                answered += 1;
            } else {
                bodies.insert(key, rest[sent..].to_vec());
            }
        }
        answered == 20
    })
    .await;
    client.await.unwrap();
}

/// Rampart's client side against the `h2` crate's server: requests with and without bodies,
/// an interim answer, trailers, a response larger than the stream window.
#[tokio::test]
async fn the_client_side_talks_to_the_h2_crate_server() {
    use rampart_proto::h2conn::{ClientConfig, Connection, Event};
    let (server_io, mut io) = tokio::io::duplex(1 << 16);
    let server = tokio::spawn(async move {
        let mut conn = h2::server::handshake(server_io).await.expect("handshake");
        while let Some(accepted) = conn.accept().await {
            let (request, mut respond) = accepted.unwrap();
            tokio::spawn(async move {
                let path = request.uri().path().to_string();
                let mut body = request.into_body();
                let mut got = 0;
                while let Some(data) = body.data().await {
                    let data = data.unwrap();
                    got += data.len();
                    body.flow_control().release_capacity(data.len()).unwrap();
                }
                let response = http::Response::builder()
                    .status(200)
                    .header("x-path", path)
                    .header("x-got", got.to_string())
                    .body(())
                    .unwrap();
                let mut send = respond.send_response(response, false).unwrap();
                send.reserve_capacity(100_000);
                send.send_data(vec![7u8; 100_000].into(), false).unwrap();
                let mut trailers = http::HeaderMap::new();
                trailers.insert("grpc-status", "0".parse().unwrap());
                send.send_trailers(trailers).unwrap();
            });
        }
    });
    let mut conn = Connection::client(ClientConfig {
        max_header_list_size: 16 * 1024,
        stream_window: 30_000,
        connection_window: 1 << 20,
    });
    let mut streams = Vec::new();
    for i in 0..10u32 {
        let path = format!("/call/{i}");
        let with_body = i % 2 == 0;
        let id = conn
            .open_stream(!with_body, false, |w| {
                w.field(b":method", if with_body { b"POST" } else { b"GET" });
                w.field(b":scheme", b"http");
                w.field(b":authority", b"app.example");
                w.field(b":path", path.as_bytes());
            })
            .unwrap();
        if with_body {
            assert_eq!(conn.send_data(id, &[1u8; 1000], true), Some(1000));
        }
        streams.push(id);
    }
    let mut received: std::collections::HashMap<u32, (bool, usize, bool)> = Default::default();
    drive(&mut conn, &mut io, |conn, event, _| {
        match event {
            Event::Response {
                stream,
                end_stream: false,
            } => {
                let (bytes, fields) = conn.fields();
                let pairs: Vec<(&[u8], &[u8])> = fields.iter().map(|f| (f.name(bytes), f.value(bytes))).collect();
                assert_eq!(pairs[0], (&b":status"[..], &b"200"[..]));
                let got = pairs.iter().find(|(n, _)| *n == b"x-got").unwrap().1;
                let expected: &[u8] = if stream % 4 == 1 { b"1000" } else { b"0" };
                assert_eq!(got, expected, "stream {stream}");
                received.entry(stream).or_default().0 = true;
            }
            Event::Data { stream, len, .. } => {
                received.entry(stream).or_default().1 += len;
                conn.release(stream, len as u32);
            }
            Event::Trailers { stream } => {
                let (bytes, fields) = conn.fields();
                assert_eq!(fields[0].value(bytes), b"0");
                received.entry(stream).or_default().2 = true;
            }
            Event::WindowOpened => {}
            other => panic!("{other:?}"),
        }
        received.len() == 10 && received.values().all(|r| *r == (true, 100_000, true))
    })
    .await;
    assert_eq!(streams, (0..10).map(|i| 2 * i + 1).collect::<Vec<u32>>());
    drop(io);
    server.abort();
}
