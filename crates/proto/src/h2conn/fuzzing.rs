//! The `h2_conn` fuzz target's check: a connection, either side, driven by any bytes as the
//! peer's, answering what it reads as a proxy would, never panics, keeps its output bounded, and
//! keeps its streams within its limits.

use super::{ClientConfig, Connection, Event, ServerConfig, OUTPUT_LIMIT};
use crate::h2frame::{ErrorCode, PREFACE};

/// The first octet picks the side (even: server, odd: client) and how the rest is cut into
/// reads; the rest is what the peer sends.
pub fn connection_survives(data: &[u8]) {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let server = first & 1 == 0;
    let mut conn = if server {
        Connection::server(ServerConfig {
            max_concurrent_streams: 8,
            max_header_list_size: 4096,
            stream_window: 1024,
            connection_window: 65_535,
            connect_protocol: true,
        })
    } else {
        let mut conn = Connection::client(ClientConfig {
            max_header_list_size: 4096,
            stream_window: 1024,
            connection_window: 65_535,
        });
        for _ in 0..3 {
            let _ = conn.open_stream(false, false, |w| {
                w.field(b":method", b"POST");
                w.field(b":scheme", b"http");
                w.field(b":authority", b"a");
                w.field(b":path", b"/");
            });
        }
        conn
    };
    let mut input = if server { PREFACE.to_vec() } else { Vec::new() };
    let step = usize::from(first >> 1).max(1);
    let mut fed = 0;
    while fed < rest.len() {
        let n = step.min(rest.len() - fed);
        input.extend_from_slice(&rest[fed..fed + n]);
        fed += n;
        loop {
            let Ok(received) = conn.receive(&input) else {
                return;
            };
            assert!(received.used <= input.len());
            if let Some(event) = received.event {
                answer(&mut conn, event, &input);
            }
            input.drain(..received.used);
            // What a proxy does between reads: the output goes out.
            assert!(conn.output().len() <= OUTPUT_LIMIT + 64 * 1024);
            conn.output().clear();
            if received.event.is_none() {
                break;
            }
        }
        assert!(conn.open_streams() <= 8 + 3);
    }
}

/// Acts on an event as the proxy's muxes would.
fn answer(conn: &mut Connection, event: Event, input: &[u8]) {
    match event {
        Event::Request { stream, .. } => {
            let (bytes, fields) = conn.fields();
            assert!(fields
                .iter()
                .all(|f| f.name.1 as usize <= bytes.len() && f.value.1 as usize <= bytes.len()));
            conn.send_headers(
                stream,
                Some(200),
                [(&b"content-type"[..], &b"text/plain"[..])].into_iter(),
                false,
            );
            let _ = conn.send_data(stream, b"hello", true);
        }
        Event::Data { stream, at, len, .. } => {
            assert!(at + len <= input.len());
            conn.release(stream, len as u32);
            if len % 7 == 3 {
                conn.reset(stream, ErrorCode::Cancel);
            }
        }
        Event::Response { stream, .. } | Event::Trailers { stream } => {
            let _ = conn.send_data(stream, b"body", true);
        }
        Event::Reset { .. } | Event::WindowOpened | Event::GoAway { .. } => {}
    }
}
