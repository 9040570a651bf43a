//! The origins the `compress` tests proxy to, the bodies they serve, and reading heads.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::thread;

use rampart_proto::h1::{parse_request, Limits};

/// The HTML page the origin serves: about 30 KB that compresses well, as real pages do.
pub fn page() -> Vec<u8> {
    let mut html = String::from("<!doctype html>\n<html><head><title>Rows</title></head><body>\n<table>\n");
    for row in 0..500u32 {
        html.push_str(&format!(
            "<tr class=\"row\"><td>{row}</td><td>item {}</td><td>{} units</td></tr>\n",
            row.wrapping_mul(7919) % 1000,
            row % 17
        ));
    }
    html.push_str("</table>\n</body></html>\n");
    html.into_bytes()
}

/// A JSON document of about 4 KB.
pub fn json() -> Vec<u8> {
    let items: Vec<String> = (0..100).map(|i| format!("{{\"id\":{i},\"name\":\"n{i}\"}}")).collect();
    format!("[{}]", items.join(",")).into_bytes()
}

/// Bytes that do not compress (an image, say).
pub fn noise(len: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// `page()` gzipped by the origin itself.
pub fn pre_gzipped() -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(&page()).unwrap();
    encoder.finish().unwrap()
}

/// An HTTP/1.1 origin answering by the last segment of the path (`/custom/page` is `page`).
pub struct Origin {
    pub addr: SocketAddr,
    pub heads: Receiver<String>,
}

impl Origin {
    pub fn start() -> Origin {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, heads) = channel();
        thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let tx = tx.clone();
                thread::spawn(move || serve_origin(conn, tx));
            }
        });
        Origin { addr, heads }
    }
}

/// Requests on a connection, one after the other (bodiless: these tests send none).
fn serve_origin(mut conn: TcpStream, heads: Sender<String>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
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
        let _ = heads.send(text.clone());
        if conn.write_all(&origin_answer(&text)).is_err() || !req.keep_alive {
            return;
        }
    }
}

/// The origin's response to a request head.
fn origin_answer(head: &str) -> Vec<u8> {
    let mut words = head.split(' ');
    let method = words.next().unwrap_or_default();
    let path = words.next().unwrap_or_default();
    let name = path.rsplit('/').next().unwrap_or_default();
    let html = "content-type: text/html; charset=utf-8";
    let content_range;
    let (status, fields, body): (&str, Vec<&str>, Vec<u8>) = match name {
        "page" => match header(head, "range").and_then(|r| r.strip_prefix("bytes=")) {
            Some(range) => {
                let (from, to) = range.split_once('-').unwrap();
                let (from, to): (usize, usize) = (from.parse().unwrap(), to.parse().unwrap());
                let page = page();
                content_range = format!("content-range: bytes {from}-{to}/{}", page.len());
                let fields = vec![html, "etag: \"page-v1\"", content_range.as_str()];
                ("206 Partial Content", fields, page[from..=to].to_vec())
            }
            None => (
                "200 OK",
                vec![html, "etag: \"page-v1\"", "accept-ranges: bytes"],
                page(),
            ),
        },
        "varied" => ("200 OK", vec![html, "vary: Origin"], page()),
        "weak" => ("200 OK", vec![html, "etag: W/\"weak-v1\""], page()),
        "small" => ("200 OK", vec![html], b"<p>small</p>\n".repeat(16)),
        "json" => ("200 OK", vec!["content-type: application/json"], json()),
        "image" => ("200 OK", vec!["content-type: image/png"], noise(20_000)),
        "encoded" => ("200 OK", vec![html, "content-encoding: gzip"], pre_gzipped()),
        "no-transform" => ("200 OK", vec![html, "cache-control: public, no-transform"], page()),
        "chunked" => {
            // The page in four chunks of one framed body.
            let page = page();
            let mut out = format!("HTTP/1.1 200 OK\r\n{html}\r\ntransfer-encoding: chunked\r\n\r\n").into_bytes();
            if method != "HEAD" {
                for piece in page.chunks(page.len() / 4 + 1) {
                    out.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
                    out.extend_from_slice(piece);
                    out.extend_from_slice(b"\r\n");
                }
                out.extend_from_slice(b"0\r\n\r\n");
            }
            return out;
        }
        _ => (
            "404 Not Found",
            vec!["content-type: text/plain"],
            b"no such thing\n".to_vec(),
        ),
    };
    let mut out = format!("HTTP/1.1 {status}\r\n").into_bytes();
    for field in fields {
        out.extend_from_slice(field.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(format!("content-length: {}\r\n\r\n", body.len()).as_bytes());
    if method != "HEAD" {
        out.extend_from_slice(&body);
    }
    out
}

/// The first value of field `name` in a head.
pub fn header<'h>(head: &'h str, name: &str) -> Option<&'h str> {
    head.lines().skip(1).find_map(|line| {
        let (n, v) = line.split_once(':')?;
        n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// Every name every `Vary` field of a head lists, lower-case.
pub fn vary(head: &str) -> Vec<String> {
    head.lines()
        .skip(1)
        .filter_map(|line| line.split_once(':'))
        .filter(|(n, _)| n.trim().eq_ignore_ascii_case("vary"))
        .flat_map(|(_, v)| v.split(',').map(|name| name.trim().to_ascii_lowercase()))
        .collect()
}

/// An origin that sends a chunked JSON body piece by piece, each piece only once the test says
/// so (a message on `gate`), so that the test can see each compressed piece arrive before the
/// next leaves the origin.
pub fn gated_origin(pieces: Vec<Vec<u8>>) -> (SocketAddr, Sender<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (gate, opened) = channel::<()>();
    thread::spawn(move || {
        // One connection at a time: each test request is served to its end before the next.
        for mut conn in listener.incoming().flatten() {
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                match conn.read(&mut chunk) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            let head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n";
            if conn.write_all(head).is_err() {
                return;
            }
            for piece in &pieces {
                if opened.recv().is_err() {
                    return;
                }
                let framed = [format!("{:x}\r\n", piece.len()).as_bytes(), piece, b"\r\n"].concat();
                if conn.write_all(&framed).is_err() {
                    return;
                }
            }
            if opened.recv().is_err() || conn.write_all(b"0\r\n\r\n").is_err() {
                return;
            }
        }
    });
    (addr, gate)
}
