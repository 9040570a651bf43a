//! A scriptable HTTP/1.1 test backend on 127.0.0.1. It reports every request head it receives
//! (raw bytes) and every connection it accepts, so tests can prove what reached it.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use rampart_proto::h1::{parse_request, ChunkedDecoder, ChunkedPart, ChunkedProgress, Framing, Limits};

/// What the backend does after reading a request (head and body).
#[derive(Clone)]
pub enum Reply {
    /// 200 with a body describing the request: `method target\nheaders...\n\nbody-length`
    /// (a chunked body's trailer lines between the head and `body-length`).
    Echo,
    /// A fixed raw response, written as is.
    Raw(&'static [u8]),
    /// Close without answering.
    Close,
    /// Wait this long, then answer like Echo.
    Slow(Duration),
    /// A chunked body of this many bytes in 64 KiB chunks.
    ChunkedDownload(u64),
    /// `101 Switching Protocols`, then echo bytes both ways until EOF.
    Upgrade,
    /// 200 with `LENGTH SHA256-HEX\n` of the request body it read (whole uploads checked).
    Digest,
}

pub struct HttpBackend {
    pub addr: SocketAddr,
    pub heads: Receiver<String>,
    pub connections: Arc<AtomicUsize>,
    /// Connections that ended (closed by either side).
    pub closed: Arc<AtomicUsize>,
}

/// A 503 for [`Reply::Raw`]: a backend that fails every request.
pub const UNAVAILABLE: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 4\r\n\r\ndown";

/// A config with an admin listener on `admin` and an HTTP listener on `port` whose requests go
/// to the upstream `app` of `backends` (round robin), with `upstream_extra` keys.
pub fn one_upstream_config(port: u16, admin: u16, backends: &[&HttpBackend], upstream_extra: &str) -> String {
    let targets: Vec<String> = backends.iter().map(|b| format!("\"{}\"", b.target())).collect();
    format!(
        "[admin]\nlisten = \"127.0.0.1:{admin}\"\n\n\
         [listeners.web]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\nupstream = \"app\"\n\n\
         [upstreams.app]\ntargets = [{}]\n{upstream_extra}\n",
        targets.join(", ")
    )
}

impl HttpBackend {
    /// Request heads it has read since the last call (it reports each one).
    pub fn seen(&self) -> usize {
        self.heads.try_iter().count()
    }

    pub fn start(reply: Reply) -> HttpBackend {
        HttpBackend::serve_on(TcpListener::bind("127.0.0.1:0").unwrap(), reply)
    }

    /// A backend at `addr` (a target that was dead until now).
    pub fn start_on(addr: SocketAddr, reply: Reply) -> HttpBackend {
        HttpBackend::serve_on(TcpListener::bind(addr).unwrap(), reply)
    }

    /// A backend on a socket the caller bound.
    pub fn serve_on(listener: TcpListener, reply: Reply) -> HttpBackend {
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = channel();
        let connections = Arc::new(AtomicUsize::new(0));
        let closed = Arc::new(AtomicUsize::new(0));
        let (count, ended) = (connections.clone(), closed.clone());
        thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                count.fetch_add(1, Ordering::SeqCst);
                let (tx, reply, ended) = (tx.clone(), reply.clone(), ended.clone());
                thread::spawn(move || {
                    serve(conn, tx, reply);
                    ended.fetch_add(1, Ordering::SeqCst);
                });
            }
        });
        HttpBackend {
            addr,
            heads: rx,
            connections,
            closed,
        }
    }

    pub fn target(&self) -> String {
        self.addr.to_string()
    }

    /// The next request head the backend received.
    pub fn next_head(&self) -> String {
        self.heads
            .recv_timeout(super::WAIT)
            .expect("the backend received no request")
    }
}

fn serve(mut conn: TcpStream, heads: Sender<String>, reply: Reply) {
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        // Read one head.
        let mut req = rampart_proto::message::RequestHead::default();
        let head = loop {
            match parse_request(&buf, &Limits::default(), &mut req) {
                Ok(Some(h)) => break h,
                Ok(None) => {}
                Err(_) => return,
            }
            match conn.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let mut head_text = String::from_utf8_lossy(&buf[..head.len]).into_owned();
        let _ = heads.send(head_text.clone());
        buf.drain(..head.len);
        // Read the body, hashing it.
        let mut body_len = 0u64;
        let mut hasher = <sha2::Sha256 as sha2::Digest>::new();
        match head.framing {
            Framing::Length(n) => {
                // Counted and discarded, so that large uploads cost no memory here.
                let mut left = n;
                let take = (buf.len() as u64).min(left) as usize;
                sha2::Digest::update(&mut hasher, &buf[..take]);
                buf.drain(..take);
                left -= take as u64;
                while left > 0 {
                    match conn.read(&mut chunk) {
                        Ok(0) | Err(_) => return,
                        Ok(k) => {
                            let take = (k as u64).min(left) as usize;
                            sha2::Digest::update(&mut hasher, &chunk[..take]);
                            left -= take as u64;
                            buf.extend_from_slice(&chunk[take..k]);
                        }
                    }
                }
                body_len = n;
            }
            Framing::Chunked => {
                let mut d = ChunkedDecoder::new();
                // A trailer section is echoed behind the head.
                let mut trailers = Vec::new();
                loop {
                    let decoded = d.decode(&buf, |part| match part {
                        ChunkedPart::Trailer(t) => trailers.extend_from_slice(t),
                        ChunkedPart::Data(data) => sha2::Digest::update(&mut hasher, data),
                    });
                    let (used, p) = match decoded {
                        Ok(x) => x,
                        Err(_) => return,
                    };
                    buf.drain(..used);
                    if p == ChunkedProgress::Done {
                        head_text.push_str(&String::from_utf8_lossy(&trailers));
                        break;
                    }
                    match conn.read(&mut chunk) {
                        Ok(0) | Err(_) => return,
                        Ok(k) => buf.extend_from_slice(&chunk[..k]),
                    }
                }
                body_len = d.declared_size();
            }
            _ => {}
        }
        if let Reply::Digest = reply {
            let digest: Vec<String> = sha2::Digest::finalize(hasher)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            let said = format!("{body_len} {}\n", digest.concat());
            let response = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{said}", said.len());
            if conn.write_all(response.as_bytes()).is_err() || !req.keep_alive {
                return;
            }
            continue;
        }
        if !answer(&mut conn, &reply, &head_text, body_len, &buf) {
            return;
        }
        if !req.keep_alive {
            return;
        }
    }
}

/// Writes the reply; false when the connection must end.
fn answer(conn: &mut TcpStream, reply: &Reply, head: &str, body_len: u64, rest: &[u8]) -> bool {
    match reply {
        Reply::Echo => echo(conn, head, body_len),
        Reply::Slow(d) => {
            thread::sleep(*d);
            echo(conn, head, body_len)
        }
        Reply::Raw(bytes) => conn.write_all(bytes).is_ok(),
        Reply::Close => false,
        Reply::ChunkedDownload(total) => {
            let piece = vec![b'x'; 64 * 1024];
            if conn
                .write_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
                .is_err()
            {
                return false;
            }
            let mut left = *total;
            while left > 0 {
                let n = left.min(piece.len() as u64) as usize;
                if conn.write_all(format!("{n:x}\r\n").as_bytes()).is_err()
                    || conn.write_all(&piece[..n]).is_err()
                    || conn.write_all(b"\r\n").is_err()
                {
                    return false;
                }
                left -= n as u64;
            }
            conn.write_all(b"0\r\n\r\n").is_ok()
        }
        Reply::Upgrade => {
            if conn
                .write_all(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
                .is_err()
            {
                return false;
            }
            if !rest.is_empty() && conn.write_all(rest).is_err() {
                return false;
            }
            let mut buf = [0u8; 4096];
            while let Ok(n) = conn.read(&mut buf) {
                if n == 0 || conn.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            false
        }
        // Answered before `answer` is called.
        Reply::Digest => false,
    }
}

fn echo(conn: &mut TcpStream, head: &str, body_len: u64) -> bool {
    let body = format!("{head}body-length: {body_len}\n");
    let response = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(response.as_bytes()).is_ok()
}

/// Sends raw bytes and reads one response: the status, the head text and the body (by
/// content-length or chunked, or to EOF).
/// A plain `GET path` request for host `app.test`.
pub fn get(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: app.test\r\n\r\n").into_bytes()
}

pub fn send(stream: &mut TcpStream, raw: &[u8]) -> (u16, String, Vec<u8>) {
    stream.write_all(raw).unwrap();
    read_response(stream)
}

/// Reads exactly one response (skipping interim 1xx ones) and nothing after it, so pipelined
/// responses stay in the socket for the next call: heads are parsed from peeked bytes and then
/// consumed to their exact length.
pub fn read_response(stream: &mut TcpStream) -> (u16, String, Vec<u8>) {
    let mut peeked = vec![0u8; 128 * 1024];
    let mut res = rampart_proto::message::ResponseHead::default();
    // Bytes already consumed of a head that was not complete yet (all of them belong to it).
    let mut prefix: Vec<u8> = Vec::new();
    loop {
        let n = match stream.peek(&mut peeked) {
            Ok(0) | Err(_) => return (0, String::from_utf8_lossy(&prefix).into_owned(), Vec::new()),
            Ok(n) => n,
        };
        let mut joined = prefix.clone();
        joined.extend_from_slice(&peeked[..n]);
        let head = match rampart_proto::h1::parse_response(&joined, &Limits::default(), false, &mut res) {
            Ok(Some(head)) => head,
            Ok(None) => {
                let mut more = vec![0u8; n];
                stream.read_exact(&mut more).unwrap();
                prefix.extend_from_slice(&more);
                continue;
            }
            Err(_) => return (0, String::from_utf8_lossy(&joined).into_owned(), Vec::new()),
        };
        let head_text = String::from_utf8_lossy(&joined[..head.len]).into_owned();
        let mut rest_of_head = vec![0u8; head.len - prefix.len()];
        stream.read_exact(&mut rest_of_head).unwrap();
        prefix.clear();
        if (100..200).contains(&res.status) && res.status != 101 {
            continue;
        }
        let mut body = Vec::new();
        match head.framing {
            Framing::Length(len) => {
                body = vec![0u8; len as usize];
                stream.read_exact(&mut body).expect("connection closed mid-body");
            }
            Framing::UntilClose => {
                let _ = stream.read_to_end(&mut body);
            }
            Framing::Chunked => {
                let mut d = ChunkedDecoder::new();
                loop {
                    let n = stream.peek(&mut peeked).expect("connection closed mid-body");
                    assert!(n > 0, "connection closed mid-body");
                    let (used, p) = d.advance(&peeked[..n]).unwrap();
                    let start = body.len();
                    body.resize(start + used, 0);
                    stream.read_exact(&mut body[start..]).unwrap();
                    if p == ChunkedProgress::Done {
                        break;
                    }
                }
            }
            Framing::None => {}
        }
        return (res.status, head_text, body);
    }
}

/// The value of the first field `name` (any case) of a response head's text.
pub fn header<'h>(head: &'h str, name: &str) -> Option<&'h str> {
    head.lines().find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// Whether the server closed the connection (a read returns EOF or a reset).
pub fn is_closed(stream: &mut TcpStream) -> bool {
    let mut b = [0u8; 1];
    matches!(stream.read(&mut b), Ok(0) | Err(_))
}
