//! Reloads that change what a listener is, with clients connected through it: HTTP → TCP,
//! TCP → HTTP, TLS on → off, the listener removed. Each live HTTP/1.1, HTTP/2 and TCP client
//! gets an answer, a refusal (REFUSED_STREAM and GOAWAY) or a clean close on its next request,
//! and the process goes on serving (docs/design.md: nothing on the network path panics).
//! HTTP/2 clients here write frames by hand, so the same client runs in clear and over TLS.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use super::common::http::{get, read_response, HttpBackend, Reply};
use super::common::tls::{handshake, Ca, CertSpec, ClientOpts};
use super::common::{free_port, read_line, write_file, Backend, Behavior, Rampart};
use super::protections::{frame, get_block, END_HEADERS, END_STREAM, GOAWAY, HEADERS, PING, RST_STREAM, SETTINGS};

const ACK: u8 = 1;
const REFUSED_STREAM: u32 = 7;

/// What listener `web` is in one config.
#[derive(Clone, Copy)]
enum Web {
    Http,
    HttpTls,
    Tcp,
    Gone,
}

/// The gateway's config files, ports and backends: listener `steady` (HTTP, in every config)
/// and listener `web`, whose kind each reload changes.
struct Setup {
    dir: tempfile::TempDir,
    steady: u16,
    web: u16,
    http: HttpBackend,
    tcp: Backend,
    tls: String,
    ca: Ca,
}

impl Setup {
    fn new() -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let ca = Ca::new("Rampart Reload Test CA");
        let (cert, key) = ca.issue(&CertSpec::new(&["localhost"])).write(dir.path(), "localhost");
        Setup {
            tls: format!("[listeners.web.tls]\ncertificates = [{{ cert = \"{cert}\", key = \"{key}\" }}]\n"),
            dir,
            steady: free_port(),
            web: free_port(),
            http: HttpBackend::start(Reply::Echo),
            tcp: Backend::start("tcp-echo", Behavior::TagEcho),
            ca,
        }
    }

    /// Writes the config with `web` as `kind`; returns its path.
    fn write(&self, kind: Web) -> String {
        let web = match kind {
            Web::Http => format!(
                "[listeners.web]\nbind = \"127.0.0.1:{}\"\nprotocol = \"http\"\nupstream = \"app\"\n",
                self.web
            ),
            Web::HttpTls => format!(
                "[listeners.web]\nbind = \"127.0.0.1:{}\"\nprotocol = \"http\"\nupstream = \"app\"\n{}",
                self.web, self.tls
            ),
            Web::Tcp => format!(
                "[listeners.web]\nbind = \"127.0.0.1:{}\"\nupstream = \"echo\"\n",
                self.web
            ),
            Web::Gone => String::new(),
        };
        let cfg = format!(
            "[listeners.steady]\nbind = \"127.0.0.1:{}\"\nprotocol = \"http\"\nupstream = \"app\"\n\n{web}\n\
             [upstreams.app]\ntargets = [\"{}\"]\n\n[upstreams.echo]\ntargets = [\"{}\"]\n",
            self.steady,
            self.http.target(),
            self.tcp.target()
        );
        write_file(self.dir.path(), "reload.toml", &cfg)
    }

    fn start(&self, kind: Web) -> Rampart {
        let path = self.write(kind);
        Rampart::start(self.dir.path(), &["run", "-c", &path, "--workers", "1"])
    }

    fn reload(&self, rampart: &mut Rampart, kind: Web) {
        self.write(kind);
        let outcome = rampart.reload();
        assert!(outcome.contains("reloaded"), "{outcome}");
    }

    /// The process still serves: a new request on the listener that never changed.
    fn still_serving(&self) {
        let mut client = TcpStream::connect(("127.0.0.1", self.steady)).expect("the process lives");
        client.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        client.write_all(&get("/steady")).unwrap();
        assert_eq!(read_response(&mut client).0, 200);
    }
}

/// How an HTTP/2 request ended.
#[derive(Debug, PartialEq)]
enum H2Answer {
    /// A response head came.
    Answered,
    /// The stream was reset with this code.
    Reset(u32),
    /// The connection ended first; the GOAWAY code if one came.
    ConnectionEnded(Option<u32>),
}

/// An HTTP/2 client written frame by frame over any byte stream.
struct RawH2<S> {
    s: S,
    next: u32,
    /// The code of a GOAWAY read so far.
    goaway: Option<u32>,
}

impl<S: Read + Write> RawH2<S> {
    fn start(mut s: S) -> RawH2<S> {
        let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        hello.extend(frame(SETTINGS, 0, 0, &[]));
        s.write_all(&hello).unwrap();
        RawH2 {
            s,
            next: 1,
            goaway: None,
        }
    }

    /// GET / on a new stream; reads until its answer (answering SETTINGS and PING on the way).
    fn get(&mut self) -> H2Answer {
        let id = self.next;
        self.next += 2;
        let head = frame(HEADERS, END_STREAM | END_HEADERS, id, &get_block());
        if self.s.write_all(&head).is_err() {
            return H2Answer::ConnectionEnded(self.goaway);
        }
        loop {
            let mut head = [0u8; 9];
            if self.s.read_exact(&mut head).is_err() {
                return H2Answer::ConnectionEnded(self.goaway);
            }
            let len = (head[0] as usize) << 16 | (head[1] as usize) << 8 | head[2] as usize;
            let (kind, flags) = (head[3], head[4]);
            let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
            let mut payload = vec![0u8; len];
            if self.s.read_exact(&mut payload).is_err() {
                return H2Answer::ConnectionEnded(self.goaway);
            }
            let code = |p: &[u8], at: usize| u32::from_be_bytes(p[at..at + 4].try_into().unwrap());
            match kind {
                SETTINGS if flags & ACK == 0 => {
                    let _ = self.s.write_all(&frame(SETTINGS, ACK, 0, &[]));
                }
                PING if flags & ACK == 0 => {
                    let _ = self.s.write_all(&frame(PING, ACK, 0, &payload));
                }
                GOAWAY if payload.len() >= 8 => self.goaway = Some(code(&payload, 4)),
                HEADERS if stream == id => return H2Answer::Answered,
                RST_STREAM if stream == id && payload.len() >= 4 => return H2Answer::Reset(code(&payload, 0)),
                _ => {}
            }
        }
    }

    /// Reads until the connection ends; the GOAWAY code seen by then, if any.
    fn until_closed(&mut self) -> Option<u32> {
        let answer = self.get();
        assert!(
            matches!(answer, H2Answer::ConnectionEnded(_) | H2Answer::Reset(REFUSED_STREAM)),
            "{answer:?}"
        );
        self.goaway
    }
}

fn clear_h2(port: u16) -> RawH2<TcpStream> {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    RawH2::start(s)
}

fn http1(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// One keep-alive HTTP/1.1 request: its status and whether the answer said the connection
/// closes.
fn http1_get(s: &mut impl ReadWrite) -> (u16, bool) {
    s.write_all(&get("/live")).unwrap();
    let (status, head, _) = read_any_response(s);
    (status, head.to_ascii_lowercase().contains("connection: close"))
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

/// Reads one response with a content-length body from any stream.
fn read_any_response(s: &mut impl Read) -> (u16, String, Vec<u8>) {
    let mut raw = Vec::new();
    let mut byte = [0u8; 1];
    while !raw.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte) {
            Ok(1) => raw.push(byte[0]),
            _ => return (0, String::from_utf8_lossy(&raw).into_owned(), Vec::new()),
        }
    }
    let head = String::from_utf8_lossy(&raw).into_owned();
    let status = head.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    let length = super::common::http::header(&head, "content-length")
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    s.read_exact(&mut body).unwrap();
    (status, head, body)
}

fn tcp_client(port: u16) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    assert_eq!(read_line(&mut s), "tcp-echo");
    s
}

fn echoes(s: &mut TcpStream, text: &str) -> bool {
    if s.write_all(format!("{text}\n").as_bytes()).is_err() {
        return false;
    }
    let mut buf = vec![0u8; text.len() + 1];
    s.read_exact(&mut buf).is_ok() && buf == format!("{text}\n").as_bytes()
}

#[test]
fn http_listener_becomes_tcp_with_clients_connected() {
    let setup = Setup::new();
    let mut rampart = setup.start(Web::Http);
    let mut h1 = http1(setup.web);
    assert_eq!(http1_get(&mut h1), (200, false));
    let mut h2 = clear_h2(setup.web);
    assert_eq!(h2.get(), H2Answer::Answered);

    setup.reload(&mut rampart, Web::Tcp);
    // The HTTP/1.1 client's next request is answered under the config it came in with, and the
    // connection closes after it.
    assert_eq!(http1_get(&mut h1), (200, true));
    // The HTTP/2 client's next stream is refused unprocessed, and the connection says GOAWAY.
    assert_eq!(h2.get(), H2Answer::Reset(REFUSED_STREAM));
    assert_eq!(h2.until_closed(), Some(0));
    // New connections get the TCP listener.
    let mut tcp = tcp_client(setup.web);
    assert!(echoes(&mut tcp, "after"));
    setup.still_serving();
}

#[test]
fn tcp_listener_becomes_http_with_a_client_connected() {
    let setup = Setup::new();
    let mut rampart = setup.start(Web::Tcp);
    let mut tcp = tcp_client(setup.web);
    assert!(echoes(&mut tcp, "before"));

    setup.reload(&mut rampart, Web::Http);
    // The relayed connection goes on as it was.
    assert!(echoes(&mut tcp, "during"));
    // New connections speak HTTP/1.1 and HTTP/2.
    assert_eq!(http1_get(&mut http1(setup.web)), (200, false));
    assert_eq!(clear_h2(setup.web).get(), H2Answer::Answered);
    setup.still_serving();
}

#[test]
fn tls_turned_off_with_tls_clients_connected() {
    let setup = Setup::new();
    let mut rampart = setup.start(Web::HttpTls);
    let h1_config = ClientOpts::new(&setup.ca).alpn(&["http/1.1"]).build();
    let h2_config = ClientOpts::new(&setup.ca).alpn(&["h2"]).build();
    let mut h1 = handshake(setup.web, &h1_config, "localhost").unwrap();
    assert_eq!(http1_get(&mut h1), (200, false));
    let mut h2 = RawH2::start(handshake(setup.web, &h2_config, "localhost").unwrap());
    assert_eq!(h2.get(), H2Answer::Answered);

    setup.reload(&mut rampart, Web::Http);
    // Connections already past their handshake go on with the new config.
    assert_eq!(http1_get(&mut h1), (200, false));
    assert_eq!(h2.get(), H2Answer::Answered);
    // New connections are in clear.
    assert_eq!(http1_get(&mut http1(setup.web)), (200, false));
    assert_eq!(clear_h2(setup.web).get(), H2Answer::Answered);
    setup.still_serving();
}

#[test]
fn listener_removed_with_clients_connected() {
    for kind in [Web::Http, Web::Tcp] {
        let setup = Setup::new();
        let mut rampart = setup.start(kind);
        let mut live = match kind {
            Web::Tcp => Live::Tcp(tcp_client(setup.web)),
            _ => {
                let mut h1 = http1(setup.web);
                assert_eq!(http1_get(&mut h1), (200, false));
                let mut h2 = clear_h2(setup.web);
                assert_eq!(h2.get(), H2Answer::Answered);
                Live::Http(h1, h2)
            }
        };

        setup.reload(&mut rampart, Web::Gone);
        match &mut live {
            Live::Http(h1, h2) => {
                assert_eq!(http1_get(h1), (200, true));
                assert_eq!(h2.get(), H2Answer::Reset(REFUSED_STREAM));
                assert_eq!(h2.until_closed(), Some(0));
            }
            // A relayed connection outlives its listener (as a drain would let it).
            Live::Tcp(tcp) => assert!(echoes(tcp, "orphan")),
        }
        assert!(
            TcpStream::connect(("127.0.0.1", setup.web)).is_err(),
            "the port is closed"
        );
        setup.still_serving();
    }
}

enum Live {
    Http(TcpStream, RawH2<TcpStream>),
    Tcp(TcpStream),
}
