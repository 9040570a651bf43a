//! HTTP/1.1 to etcd's JSON gateway, blocking, plain or over TLS: one request per connection for
//! the unary calls (`connection: close`, the answer read to its end), and the head of a streaming
//! call (the watch) whose chunked body [`super::stream::WatchStream`] then reads. Endpoints are
//! tried in turn, starting with the one that answered last.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use rampart_proto::h1::{parse_response_owned, ChunkedDecoder, ChunkedPart, Framing, Limits, Parsed};
use serde_json::Value;

use super::tls::{Conn, TlsFiles};

/// How long one request to etcd may take.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// The most an answer may hold (etcd's own limit on a request is 1.5 MiB; a value comes back
/// base64, a third bigger).
pub const MAX_ANSWER: usize = 16 << 20;

/// etcd's endpoints.
pub struct Endpoints {
    list: Vec<Endpoint>,
    /// The one that answered last: tried first.
    preferred: AtomicUsize,
    /// For the `https` ones.
    tls: Option<Arc<rustls::ClientConfig>>,
}

/// One endpoint.
struct Endpoint {
    /// `HOST:PORT`.
    authority: String,
    /// The host, the name checked in etcd's certificate.
    host: String,
    https: bool,
}

/// etcd answered, with a status other than 200.
#[derive(Debug)]
pub struct Rejected {
    pub endpoint: String,
    pub status: u16,
    pub message: String,
}

impl std::fmt::Display for Rejected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "etcd at {}: {}: {}", self.endpoint, self.status, self.message)
    }
}

impl std::error::Error for Rejected {}

impl Rejected {
    /// Whether etcd wants a user: it has authentication enabled and none was given.
    pub fn wants_user(&self) -> bool {
        self.message.contains("user name is empty")
    }

    /// Whether the token sent is unknown to etcd, or expired: authenticate again.
    pub fn is_stale_token(&self) -> bool {
        self.status == 401 || self.message.contains("invalid auth token")
    }
}

impl Endpoints {
    /// `urls`: one or more `http://HOST:PORT` or `https://HOST:PORT`, separated by commas; `tls`
    /// for the `https` ones.
    pub fn parse(urls: &str, tls: &TlsFiles) -> anyhow::Result<Endpoints> {
        let mut list = Vec::new();
        for url in urls.split(',').map(str::trim) {
            let (https, rest) = match (url.strip_prefix("http://"), url.strip_prefix("https://")) {
                (Some(rest), _) => (false, rest),
                (_, Some(rest)) => (true, rest),
                _ => bail!("--etcd {url}: give each endpoint as http://HOST:PORT or https://HOST:PORT"),
            };
            let authority = rest.trim_end_matches('/');
            let host = match authority.rsplit_once(':') {
                Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => host,
                _ => bail!("--etcd {url}: give each endpoint as http://HOST:PORT or https://HOST:PORT"),
            };
            let host = host.trim_start_matches('[').trim_end_matches(']');
            list.push(Endpoint {
                authority: authority.to_string(),
                host: host.to_string(),
                https,
            });
        }
        let tls = super::tls::for_endpoints(list.iter().any(|e| e.https), tls)?;
        Ok(Endpoints {
            list,
            preferred: AtomicUsize::new(0),
            tls,
        })
    }

    /// The endpoints, `HOST:PORT` each.
    pub fn list(&self) -> Vec<&str> {
        self.list.iter().map(|e| e.authority.as_str()).collect()
    }

    /// A connection to the first endpoint that takes one, starting with the one that answered
    /// last; the error names every endpoint tried.
    fn connect(&self) -> anyhow::Result<(Conn, &str)> {
        let first = self.preferred.load(Ordering::Relaxed);
        let mut failures = Vec::new();
        for i in 0..self.list.len() {
            let index = (first + i) % self.list.len();
            let endpoint = &self.list[index];
            match connect(&endpoint.authority) {
                Ok(tcp) => {
                    self.preferred.store(index, Ordering::Relaxed);
                    let conn = match (&self.tls, endpoint.https) {
                        (Some(config), true) => Conn::tls(tcp, config, &endpoint.host)?,
                        _ => Conn::Plain(tcp),
                    };
                    return Ok((conn, &endpoint.authority));
                }
                Err(e) => failures.push(format!("etcd at {}: {e}", endpoint.authority)),
            }
        }
        Err(anyhow!(failures.join("; ")))
    }

    /// One JSON request to the gateway (with `token` as `Authorization` when there is one); its
    /// JSON answer. A status other than 200 is a [`Rejected`].
    pub fn call(&self, path: &str, body: &Value, token: Option<&str>) -> anyhow::Result<Value> {
        let (mut conn, endpoint) = self.connect()?;
        let context = || format!("etcd at {endpoint}");
        send(&mut conn, endpoint, path, body, token, true).with_context(context)?;
        let raw = conn.read_all(MAX_ANSWER + 64 * 1024).with_context(context)?;
        let (status, answer) = response_body(&raw).ok_or_else(|| anyhow!("etcd at {endpoint}: a malformed answer"))?;
        let json: Value = serde_json::from_slice(&answer)
            .with_context(|| format!("etcd at {endpoint}: an answer that is not JSON"))?;
        if status != 200 {
            return Err(rejected(endpoint, status, &json).into());
        }
        Ok(json)
    }

    /// Starts a streaming call: the connection once etcd answered 200, positioned after the
    /// head, with the bytes of the body already read.
    pub fn open_stream(
        &self,
        path: &str,
        body: &Value,
        token: Option<&str>,
    ) -> anyhow::Result<(Conn, Vec<u8>, String)> {
        let (mut conn, endpoint) = self.connect()?;
        let endpoint = endpoint.to_string();
        send(&mut conn, &endpoint, path, body, token, false).with_context(|| format!("etcd at {endpoint}"))?;
        let mut raw = Vec::new();
        let mut buf = [0u8; 8192];
        let (head, status): (Parsed, u16) = loop {
            let n = conn.read(&mut buf).with_context(|| format!("etcd at {endpoint}"))?;
            if n == 0 {
                bail!("etcd at {endpoint}: closed the connection before answering");
            }
            raw.extend_from_slice(&buf[..n]);
            match parse_response_owned(&raw, &Limits::default(), false) {
                Ok(Some((parsed, owned))) => break (parsed, owned.status),
                Ok(None) => continue,
                Err(e) => bail!("etcd at {endpoint}: a malformed answer ({e})"),
            }
        };
        if status != 200 || head.framing != Framing::Chunked {
            bail!("etcd at {endpoint}: {path}: answered {status} to a watch");
        }
        let rest = raw.split_off(head.len);
        Ok((conn, rest, endpoint))
    }
}

fn connect(endpoint: &str) -> std::io::Result<TcpStream> {
    use std::net::ToSocketAddrs;
    let mut last = None;
    for addr in endpoint.to_socket_addrs()? {
        match TcpStream::connect_timeout(&addr, TIMEOUT) {
            Ok(conn) => {
                conn.set_read_timeout(Some(TIMEOUT))?;
                conn.set_write_timeout(Some(TIMEOUT))?;
                return Ok(conn);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no address")))
}

fn send(
    conn: &mut Conn,
    endpoint: &str,
    path: &str,
    body: &Value,
    token: Option<&str>,
    close: bool,
) -> std::io::Result<()> {
    let body = body.to_string();
    let authorization = token.map_or(String::new(), |t| format!("authorization: {t}\r\n"));
    let connection = if close { "connection: close\r\n" } else { "" };
    // One write: over TLS a peer that refuses the handshake then says why in its answer.
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {endpoint}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{authorization}{connection}\r\n{body}",
        body.len()
    );
    conn.write_all(request.as_bytes())?;
    conn.flush()
}

/// The error etcd's JSON answer with `status` describes.
pub fn rejected(endpoint: &str, status: u16, json: &Value) -> Rejected {
    let message = json["message"]
        .as_str()
        .or(json["error"].as_str())
        .unwrap_or("no message")
        .to_string();
    Rejected {
        endpoint: endpoint.to_string(),
        status,
        message,
    }
}

/// The status and body of the HTTP/1.1 response in `raw` (its body by length, chunks or close).
fn response_body(raw: &[u8]) -> Option<(u16, Vec<u8>)> {
    let (head, owned) = parse_response_owned(raw, &Limits::default(), false).ok()??;
    let rest = &raw[head.len..];
    let body = match head.framing {
        Framing::None => Vec::new(),
        Framing::Length(n) => rest.get(..usize::try_from(n).ok()?)?.to_vec(),
        Framing::UntilClose => rest.to_vec(),
        Framing::Chunked => {
            let mut body = Vec::new();
            ChunkedDecoder::new()
                .decode(rest, |part| {
                    if let ChunkedPart::Data(data) = part {
                        body.extend_from_slice(data);
                    }
                })
                .ok()?;
            body
        }
    };
    Some((owned.status, body))
}

/// An etcd number, which the gateway writes as a string (int64 in JSON); 0 when absent.
pub fn number(value: &Value) -> i64 {
    match value {
        Value::String(s) => s.parse().unwrap_or(0),
        Value::Number(n) => n.as_i64().unwrap_or(0),
        _ => 0,
    }
}
