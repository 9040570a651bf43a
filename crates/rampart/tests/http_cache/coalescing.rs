//! Request coalescing: concurrent misses for one key make one upstream request; waiters go
//! upstream themselves when the leader's response cannot be stored; a waiter gets the head and
//! the body received so far while the upstream is still sending, and the rest as it comes;
//! `stale-while-revalidate`'s background request leads the misses for its key.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use super::{get, next_head, proxy, scripted, validating_backend, FRESH};
use common::http::header;
use common::tls::eventually;

use crate::common;

/// Reads from `conn` until the head and `body` octets of the body have come.
fn read_until(conn: &mut std::net::TcpStream, got: &mut Vec<u8>, body: usize) -> usize {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        if let Some(at) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            if got.len() - (at + 4) >= body {
                return at + 4;
            }
        }
        let n = conn.read(&mut buf).expect("the response keeps coming");
        assert!(
            n > 0,
            "closed early: {}",
            String::from_utf8_lossy(&got[..got.len().min(300)])
        );
        got.extend_from_slice(&buf[..n]);
    }
}

/// Half of the body of [`halting_backend`]'s response.
const HALF: usize = 96 << 10;

/// A backend that answers its first request with a 200 of `2 * HALF` octets: the head and the
/// first half at once, the second half (`finish`) or its connection closed (not `finish`) only
/// once the test sends on the returned channel. Returns its address, its request count, and
/// that channel.
fn halting_backend(finish: bool) -> (String, Arc<AtomicUsize>, mpsc::Sender<()>) {
    let (release, released) = mpsc::channel::<()>();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let target = listener.local_addr().unwrap().to_string();
    let asked = Arc::new(AtomicUsize::new(0));
    let count = asked.clone();
    std::thread::spawn(move || {
        let Ok((mut conn, _)) = listener.accept() else { return };
        next_head(&mut conn, &mut Vec::new());
        count.fetch_add(1, Ordering::SeqCst);
        let head = format!(
            "HTTP/1.1 200 OK\r\ncache-control: max-age=600\r\ncontent-length: {}\r\n\r\n",
            2 * HALF
        );
        let _ = conn.write_all(head.as_bytes());
        let _ = conn.write_all(&vec![b'a'; HALF]);
        if released.recv().is_ok() && finish {
            let _ = conn.write_all(&vec![b'b'; HALF]);
        }
        // Returning drops the connection and the listener: later connections are refused.
    });
    (target, asked, release)
}

/// A request for `/s/x` that waits for the leader, sent; the head and the first half of the body
/// read into `got`. Returns the connection and where the body starts in `got`.
fn waiter_with_first_half(port: u16, got: &mut Vec<u8>) -> (std::net::TcpStream, usize) {
    let mut waiter = common::connect(port);
    waiter.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    waiter
        .write_all(b"GET /s/x HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n\r\n")
        .unwrap();
    let body_at = read_until(&mut waiter, got, HALF);
    (waiter, body_at)
}

#[test]
fn a_coalesced_request_is_answered_as_the_leaders_response_arrives() {
    let (target, asked, release) = halting_backend(true);
    let (_rampart, port, _dir) = proxy(&[("s", &target)]);
    let leader = std::thread::spawn(move || get(port, "/s/x", ""));
    eventually("the leader's request reached the upstream", || {
        asked.load(Ordering::SeqCst) == 1
    });

    let mut got = Vec::new();
    // The head and the first half come while the upstream still holds the second.
    let (mut waiter, body_at) = waiter_with_first_half(port, &mut got);
    let head = String::from_utf8_lossy(&got[..body_at]).to_string();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        header(&head, "cache-status").is_some_and(|s| s.starts_with("Rampart; hit; collapsed")),
        "{head}"
    );
    assert_eq!(header(&head, "content-length"), Some(&*(2 * HALF).to_string()));
    release.send(()).unwrap();
    waiter.read_to_end(&mut got).unwrap();
    let body = &got[body_at..];
    assert_eq!(body.len(), 2 * HALF);
    assert!(body[..HALF].iter().all(|&b| b == b'a') && body[HALF..].iter().all(|&b| b == b'b'));
    let (status, _, leader_body) = leader.join().unwrap();
    assert_eq!((status, leader_body.as_slice()), (200, body));
    assert_eq!(asked.load(Ordering::SeqCst), 1, "one request went upstream");
    // Stored whole: the next one is a hit.
    let (_, head, _) = get(port, "/s/x", "");
    assert!(
        header(&head, "cache-status").is_some_and(|s| s.starts_with("Rampart; hit; ttl")),
        "{head}"
    );
}

#[test]
fn a_leader_cut_short_cuts_its_waiters_short_and_stores_nothing() {
    // The upstream dies in the middle of the body.
    let (target, asked, release) = halting_backend(false);
    let (_rampart, port, _dir) = proxy(&[("s", &target)]);
    let leader = std::thread::spawn(move || {
        let mut conn = common::connect(port);
        conn.write_all(b"GET /s/x HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut got = Vec::new();
        let _ = conn.read_to_end(&mut got);
        got.len()
    });
    eventually("the leader's request reached the upstream", || {
        asked.load(Ordering::SeqCst) == 1
    });
    let mut got = Vec::new();
    let (mut waiter, body_at) = waiter_with_first_half(port, &mut got);
    release.send(()).unwrap();
    let _ = waiter.read_to_end(&mut got);
    assert_eq!(
        got.len() - body_at,
        HALF,
        "the waiter's response stops where the leader's did"
    );
    assert!(leader.join().unwrap() < body_at + 2 * HALF);
    // Nothing was stored: the next request goes upstream (where nobody answers now).
    let (status, head, _) = get(port, "/s/x", "");
    assert!(status >= 500, "{head}");
}

/// A backend that takes `delay` to answer each request with a fresh `hello` (the delay is the
/// backend's behaviour, not a wait of the test); it counts requests.
fn slow_backend(delay: std::time::Duration, response: &'static [u8]) -> (String, Arc<AtomicUsize>) {
    let count = Arc::new(AtomicUsize::new(0));
    let counted = count.clone();
    let target = scripted(move |_| {
        counted.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(delay);
        response
    });
    (target, count)
}

#[test]
fn concurrent_misses_for_one_key_make_one_upstream_request() {
    let (target, count) = slow_backend(std::time::Duration::from_millis(500), FRESH);
    let (_rampart, port, _dir) = proxy(&[("co", &target)]);
    let clients: Vec<_> = (0..8)
        .map(|_| std::thread::spawn(move || get(port, "/co/x", "")))
        .collect();
    let answers: Vec<_> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    assert_eq!(count.load(Ordering::SeqCst), 1, "one request went upstream");
    for (status, head, body) in &answers {
        assert_eq!((*status, body.as_slice()), (200, &b"hello"[..]), "{head}");
    }
    let status = |head: &str| header(head, "cache-status").unwrap_or_default().to_string();
    let collapsed = answers
        .iter()
        .filter(|(_, head, _)| status(head).contains("collapsed"))
        .count();
    let hits = answers
        .iter()
        .filter(|(_, head, _)| status(head).starts_with("Rampart; hit"))
        .count();
    // Every client but the leader waited for it (or, come after it ended, found it stored).
    assert_eq!(hits, 7, "{answers:?}");
    assert!(collapsed >= 1, "{answers:?}");
}

#[test]
fn waiters_go_upstream_themselves_when_the_leaders_response_is_not_cacheable() {
    let (target, count) = slow_backend(
        std::time::Duration::from_millis(200),
        b"HTTP/1.1 200 OK\r\ncache-control: no-store\r\ncontent-length: 5\r\n\r\nhello",
    );
    let (_rampart, port, _dir) = proxy(&[("un", &target)]);
    let clients: Vec<_> = (0..4)
        .map(|_| std::thread::spawn(move || get(port, "/un/x", "")))
        .collect();
    for c in clients {
        let (status, _, body) = c.join().unwrap();
        assert_eq!((status, body.as_slice()), (200, &b"hello"[..]));
    }
    assert_eq!(count.load(Ordering::SeqCst), 4);
}

#[test]
fn stale_while_revalidate_answers_stale_at_once_and_revalidates_in_the_background() {
    let (target, full, conditional) = validating_backend(
        b"HTTP/1.1 200 OK\r\netag: \"v1\"\r\ncache-control: max-age=0, stale-while-revalidate=60\r\ncontent-length: 5\r\n\r\nhello",
    );
    let (_rampart, port, _dir) = proxy(&[("w", &target)]);
    assert_eq!(get(port, "/w/x", "").0, 200);
    let (status, head, body) = get(port, "/w/x", "");
    assert_eq!((status, body.as_slice()), (200, &b"hello"[..]), "{head}");
    assert!(
        header(&head, "cache-status").is_some_and(|s| s.contains("stale-while-revalidate")),
        "{head}"
    );
    // The revalidation ran on its own (a conditional request, answered 304) and refreshed the
    // stored response: later requests are plain hits.
    common::tls::eventually("the background revalidation refreshed the response", || {
        let (_, head, _) = get(port, "/w/x", "");
        header(&head, "cache-status").is_some_and(|s| s.starts_with("Rampart; hit; ttl="))
    });
    assert_eq!(full.load(Ordering::SeqCst), 1);
    assert_eq!(conditional.load(Ordering::SeqCst), 1);
}
