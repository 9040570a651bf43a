//! A test auth service for `forward_auth` on 127.0.0.1:0: a real HTTP/1.1 server (keep-alive)
//! that reports every request head it receives and decides by the `X-Forwarded-Uri` Rampart
//! sends:
//!
//! - `/login...`: 302 to a login page, with two cookies and a body;
//! - `/denied...`: 401 with a `WWW-Authenticate` challenge and a JSON body;
//! - `/slow...`: no answer at all (the connection is held until Rampart gives up and closes it);
//! - anything else: 200 with `X-Auth-User: alice` and `X-Auth-Roles: admin`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread;

use rampart_proto::h1::{parse_request, Limits};

pub struct AuthService {
    pub addr: SocketAddr,
    pub heads: Receiver<String>,
    /// Connections accepted so far.
    pub connections: Arc<AtomicUsize>,
}

impl AuthService {
    pub fn start() -> AuthService {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, heads) = channel();
        let connections = Arc::new(AtomicUsize::new(0));
        let count = connections.clone();
        thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                count.fetch_add(1, Ordering::SeqCst);
                let tx = tx.clone();
                thread::spawn(move || serve(conn, tx));
            }
        });
        AuthService {
            addr,
            heads,
            connections,
        }
    }

    /// The next request head the service received.
    pub fn next_head(&self) -> String {
        self.heads
            .recv_timeout(crate::common::WAIT)
            .expect("the auth service received no request")
    }
}

fn serve(mut conn: TcpStream, heads: Sender<String>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let mut req = rampart_proto::message::RequestHead::default();
        let head = loop {
            match parse_request(&buf, &Limits::default(), &mut req) {
                Ok(Some(head)) => break head,
                Ok(None) => {}
                Err(_) => return,
            }
            match conn.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let text = String::from_utf8_lossy(&buf[..head.len]).into_owned();
        buf.drain(..head.len);
        let uri = text
            .lines()
            .find_map(|l| l.strip_prefix("x-forwarded-uri: "))
            .unwrap_or("")
            .to_string();
        let _ = heads.send(text);
        let answer: &[u8] = if uri.starts_with("/login") {
            b"HTTP/1.1 302 Found\r\nLocation: https://login.example/?rd=%2Flogin\r\nSet-Cookie: csrf=1; Path=/\r\n\
              Set-Cookie: flow=2; Path=/\r\nContent-Type: text/plain\r\nContent-Length: 9\r\n\r\ngo log in"
        } else if uri.starts_with("/denied") {
            b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer realm=\"shop\"\r\nContent-Type: application/json\r\n\
              Content-Length: 16\r\n\r\n{\"error\":\"nope\"}"
        } else if uri.starts_with("/slow") {
            // Hold the connection without answering until the other side closes it.
            while matches!(conn.read(&mut chunk), Ok(n) if n > 0) {}
            return;
        } else {
            b"HTTP/1.1 200 OK\r\nX-Auth-User: alice\r\nX-Auth-Roles: admin\r\nContent-Length: 0\r\n\r\n"
        };
        if conn.write_all(answer).is_err() {
            return;
        }
    }
}
