//! Abusive HTTP/2 clients, written frame by frame: rapid reset (CVE-2023-44487), CONTINUATION
//! floods (CVE-2024-27316), SETTINGS and PING floods, header list bombs, zero-window stalls. Each
//! ends the offender's connection or stream, and another client is served meanwhile.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use super::clients::{connect, exchange, get, runtime};
use super::common::http::{HttpBackend, Reply};
use super::gateway;

const DATA: u8 = 0;
pub(super) const HEADERS: u8 = 1;
pub(super) const RST_STREAM: u8 = 3;
pub(super) const SETTINGS: u8 = 4;
pub(super) const PING: u8 = 6;
pub(super) const GOAWAY: u8 = 7;
const CONTINUATION: u8 = 9;
pub(super) const END_STREAM: u8 = 1;
pub(super) const END_HEADERS: u8 = 4;
const ENHANCE_YOUR_CALM: u32 = 11;

pub(super) fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut out = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// A GET / header block (HPACK: static :method GET, :scheme http, :path /, and :authority).
pub(super) fn get_block() -> Vec<u8> {
    let mut block = vec![0x82, 0x86, 0x84, 0x41, 9];
    block.extend_from_slice(b"localhost");
    block
}

/// A raw client past the preface and an empty SETTINGS, with `settings` entries if any.
fn raw_client(port: u16, settings: &[(u16, u32)]) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut payload = Vec::new();
    for (id, value) in settings {
        payload.extend_from_slice(&id.to_be_bytes());
        payload.extend_from_slice(&value.to_be_bytes());
    }
    let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    hello.extend(frame(SETTINGS, 0, 0, &payload));
    s.write_all(&hello).unwrap();
    s
}

/// Reads frames until one of `kind` (for `stream`, or any stream when `None`) or the end of the
/// connection: that frame's payload, or `None` at the end. A GOAWAY met on the way is skipped
/// like any other ([`read_frames`] reports it).
fn read_until(s: &mut TcpStream, kind: u8, stream: Option<u32>) -> Option<Vec<u8>> {
    read_frames(s, kind, stream).1
}

/// [`read_until`], also giving the error code of a GOAWAY read on the way.
fn read_frames(s: &mut TcpStream, kind: u8, stream: Option<u32>) -> (Option<u32>, Option<Vec<u8>>) {
    let mut goaway = None;
    let found = read_frames_into(s, kind, stream, &mut goaway);
    (goaway, found)
}

fn read_frames_into(s: &mut TcpStream, kind: u8, stream: Option<u32>, goaway: &mut Option<u32>) -> Option<Vec<u8>> {
    loop {
        let mut head = [0u8; 9];
        s.read_exact(&mut head).ok()?;
        let len = (head[0] as usize) << 16 | (head[1] as usize) << 8 | head[2] as usize;
        let id = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        let mut payload = vec![0u8; len];
        s.read_exact(&mut payload).ok()?;
        if head[3] == GOAWAY && payload.len() >= 8 {
            *goaway = Some(u32::from_be_bytes(payload[4..8].try_into().unwrap()));
        }
        if head[3] == kind && stream.is_none_or(|want| want == id) {
            return Some(payload);
        }
    }
}

/// Whether the connection ends within the wait (EOF or reset).
fn closes(s: &mut TcpStream) -> bool {
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::TimedOut => {
                return false
            }
            Err(_) => return true,
        }
    }
}

/// Another client gets its answer now.
fn others_are_served(port: u16) {
    let started = Instant::now();
    runtime().block_on(async {
        let send = connect(port).await;
        let (status, _, _) = exchange(&send, get(port, "/other"), b"").await;
        assert_eq!(status, 200);
    });
    assert!(started.elapsed() < Duration::from_secs(5), "another client waited");
}

#[test]
fn rapid_reset_gets_goaway_enhance_your_calm() {
    let dir = tempfile::tempdir().unwrap();
    let backend = HttpBackend::start(Reply::Slow(Duration::from_millis(200)));
    let (_proxy, port) = gateway(dir.path(), &[backend.target()], "", "");
    let mut s = raw_client(port, &[]);
    let mut burst = Vec::new();
    for i in 0..2000u32 {
        let id = 2 * i + 1;
        burst.extend(frame(HEADERS, END_STREAM | END_HEADERS, id, &get_block()));
        burst.extend(frame(RST_STREAM, 0, id, &8u32.to_be_bytes()));
    }
    // The server may close before it has read everything.
    let _ = s.write_all(&burst);
    let goaway = read_until(&mut s, GOAWAY, Some(0)).expect("a GOAWAY");
    assert_eq!(u32::from_be_bytes(goaway[4..8].try_into().unwrap()), ENHANCE_YOUR_CALM);
    assert!(closes(&mut s));
    others_are_served(port);
}

#[test]
fn streams_reset_after_they_were_taken_count_toward_the_reset_limit() {
    let dir = tempfile::tempdir().unwrap();
    let backend = HttpBackend::start(Reply::Slow(Duration::from_millis(100)));
    let (_proxy, port) = gateway(dir.path(), &[backend.target()], "http2_max_resets_per_second = 20", "");
    let mut s = raw_client(port, &[]);
    let mut id = 1u32;
    let mut goaway = None;
    // Paced so that each batch is taken (the PING's answer says the frames before it were
    // read) before its streams are reset: the `h2` crate's own pending-stream limit never fires.
    for round in 0..10u64 {
        let mut batch = Vec::new();
        let first = id;
        for _ in 0..10 {
            batch.extend(frame(HEADERS, END_STREAM | END_HEADERS, id, &get_block()));
            id += 2;
        }
        batch.extend(frame(PING, 0, 0, &round.to_be_bytes()));
        if s.write_all(&batch).is_err() {
            break;
        }
        let (calm, ack) = read_frames(&mut s, PING, Some(0));
        if calm.is_some() {
            goaway = calm;
            break;
        }
        if ack.is_none() {
            break;
        }
        let resets: Vec<u8> = (first..id)
            .step_by(2)
            .flat_map(|stream| frame(RST_STREAM, 0, stream, &8u32.to_be_bytes()))
            .collect();
        if s.write_all(&resets).is_err() {
            break;
        }
    }
    if goaway.is_none() {
        goaway = read_frames(&mut s, GOAWAY, Some(0)).0;
    }
    assert_eq!(goaway, Some(ENHANCE_YOUR_CALM));
    others_are_served(port);
}

#[test]
fn a_continuation_flood_ends_the_connection() {
    let dir = tempfile::tempdir().unwrap();
    let backend = HttpBackend::start(Reply::Echo);
    let (_proxy, port) = gateway(dir.path(), &[backend.target()], "", "");
    let mut s = raw_client(port, &[]);
    let mut flood = frame(HEADERS, END_STREAM, 1, &get_block());
    // Each CONTINUATION adds a literal field `x-N: 64 bytes`, never ending the block.
    for i in 0..20_000u32 {
        let name = format!("x-{i}");
        let mut field = vec![0x00, name.len() as u8];
        field.extend_from_slice(name.as_bytes());
        field.push(64);
        field.extend_from_slice(&[b'v'; 64]);
        flood.extend(frame(CONTINUATION, 0, 1, &field));
    }
    let _ = s.write_all(&flood);
    let goaway = read_until(&mut s, GOAWAY, Some(0)).expect("a GOAWAY");
    let code = u32::from_be_bytes(goaway[4..8].try_into().unwrap());
    assert!(code == ENHANCE_YOUR_CALM || code == 1, "GOAWAY code {code}");
    assert!(closes(&mut s));
    others_are_served(port);
}

#[test]
fn an_empty_frame_flood_ends_the_connection() {
    let dir = tempfile::tempdir().unwrap();
    let backend = HttpBackend::start(Reply::Echo);
    let (_proxy, port) = gateway(dir.path(), &[backend.target()], "", "");
    let mut s = raw_client(port, &[]);
    // A POST whose body never comes: empty DATA frames, each ending nothing.
    let mut block = get_block();
    block[0] = 0x83;
    let mut flood = frame(HEADERS, END_HEADERS, 1, &block);
    for _ in 0..1000 {
        flood.extend(frame(DATA, 0, 1, &[]));
    }
    let _ = s.write_all(&flood);
    let (goaway, _) = read_frames(&mut s, DATA, Some(1));
    assert_eq!(goaway, Some(ENHANCE_YOUR_CALM));
    assert!(closes(&mut s));
    others_are_served(port);
}

#[test]
fn settings_and_ping_floods_do_not_stop_the_worker() {
    let dir = tempfile::tempdir().unwrap();
    let backend = HttpBackend::start(Reply::Echo);
    let (_proxy, port) = gateway(dir.path(), &[backend.target()], "", "");
    for (kind, payload) in [(SETTINGS, &[][..]), (PING, &[0u8; 8][..])] {
        let mut s = raw_client(port, &[]);
        s.set_write_timeout(Some(Duration::from_secs(3))).unwrap();
        let mut flood = Vec::new();
        for _ in 0..50_000 {
            flood.extend(frame(kind, 0, 0, payload));
        }
        // Nothing is read back: once the answers fill the socket and the connection's output,
        // Rampart stops reading this client, and the write here stalls.
        let writer = std::thread::spawn(move || {
            let _ = s.write_all(&flood);
            s
        });
        others_are_served(port);
        drop(writer.join().unwrap());
    }
    others_are_served(port);
}

#[test]
fn a_header_list_bomb_gets_431() {
    let dir = tempfile::tempdir().unwrap();
    let backend = HttpBackend::start(Reply::Echo);
    let (_proxy, port) = gateway(
        dir.path(),
        &[backend.target()],
        "http2_max_header_list_size = \"16KiB\"",
        "",
    );
    runtime().block_on(async {
        let send = connect(port).await;
        let mut request = get(port, "/bomb");
        request
            .headers_mut()
            .insert("x-big", "b".repeat(20_000).parse().unwrap());
        let mut send = send.ready().await.unwrap();
        let (response, _) = send.send_request(request, true).unwrap();
        let status = response.await.map(|r| r.status().as_u16());
        assert!(matches!(status, Ok(431)), "{status:?}");
    });
    others_are_served(port);
}

#[test]
fn a_stream_whose_window_stays_shut_is_reset_and_others_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let backend = HttpBackend::start(Reply::ChunkedDownload(1 << 20));
    let (_proxy, port) = gateway(dir.path(), &[backend.target()], "", "read_timeout = \"1s\"");
    // SETTINGS_INITIAL_WINDOW_SIZE = 0: the response head may come, no body byte.
    let mut s = raw_client(port, &[(4, 0)]);
    s.write_all(&frame(HEADERS, END_STREAM | END_HEADERS, 1, &get_block()))
        .unwrap();
    let other = HttpBackend::start(Reply::Echo);
    let dir2 = tempfile::tempdir().unwrap();
    let (_other_proxy, other_port) = gateway(dir2.path(), &[other.target()], "", "");
    others_are_served(other_port);
    let reset = read_until(&mut s, RST_STREAM, Some(1)).expect("the stalled stream is reset");
    assert_eq!(reset.len(), 4);
    others_are_served(port);
}
