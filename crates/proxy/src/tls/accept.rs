//! The server handshake, in the connection stage after any PROXY header.
//!
//! The first bytes are looked at before rustls sees them: a plain HTTP request gets an HTTP 400
//! that says the port speaks HTTPS (nginx does the same), anything that is not a TLS handshake
//! is closed. With `strict_sni`, the ClientHello's name is checked before a certificate is
//! chosen, and an unknown one is refused with the `unrecognized_name` alert.

use std::io;

use rampart_model::tls::ListenerTls;
use rampart_proto::tls_peek::{classify, FirstBytes};
use rustls::server::{Acceptor, ServerConnection};
use tokio::net::TcpStream;

use super::{info::client_cert_header, SocketRead, SocketWrite, TlsSession, TlsStream};

/// Why a handshake did not finish.
#[derive(Debug)]
pub enum HandshakeFailure {
    /// The client sent a plain HTTP request.
    PlainHttp,
    /// The first bytes were not a TLS handshake.
    NotTls,
    /// The client asked for a name no certificate has, and the listener is strict.
    UnknownName(Option<String>),
    /// rustls refused the handshake (no shared version or cipher, a bad certificate, a
    /// malformed message); an alert was sent where TLS allows one.
    Tls(rustls::Error),
    /// The client closed, or the socket failed.
    Io(io::Error),
    /// The handshake did not finish within the listener's `handshake_timeout`.
    TimedOut,
}

impl HandshakeFailure {
    /// The name used in session records.
    pub fn as_str(&self) -> &'static str {
        match self {
            HandshakeFailure::PlainHttp => "plain_http_on_tls_port",
            HandshakeFailure::TimedOut => "tls_handshake_timeout",
            _ => "tls_handshake_failed",
        }
    }
}

impl std::fmt::Display for HandshakeFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HandshakeFailure::PlainHttp => f.write_str("plain HTTP request on a TLS port"),
            HandshakeFailure::NotTls => f.write_str("not a TLS handshake"),
            HandshakeFailure::UnknownName(Some(n)) => write!(f, "no certificate for name `{n}` (strict_sni)"),
            HandshakeFailure::UnknownName(None) => f.write_str("no server name sent (strict_sni)"),
            HandshakeFailure::Tls(e) => write!(f, "{e}"),
            HandshakeFailure::Io(e) => write!(f, "{e}"),
            HandshakeFailure::TimedOut => f.write_str("timed out"),
        }
    }
}

impl From<io::Error> for HandshakeFailure {
    fn from(e: io::Error) -> Self {
        HandshakeFailure::Io(e)
    }
}

/// A fatal `unrecognized_name` alert in a plaintext TLS 1.2-versioned record: rustls has no call
/// to send an alert of our choosing before a connection exists, and this one is seven fixed bytes.
const UNRECOGNIZED_NAME_ALERT: [u8; 7] = [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x70];

/// Reads until the first bytes say what the client speaks: `Ok` for a TLS handshake. `early`
/// holds bytes already read (behind a PROXY header) and receives what is read here.
pub async fn first_bytes(tcp: &TcpStream, early: &mut Vec<u8>) -> Result<(), HandshakeFailure> {
    loop {
        match classify(early) {
            FirstBytes::TlsHandshake => return Ok(()),
            FirstBytes::PlainHttp => return Err(HandshakeFailure::PlainHttp),
            FirstBytes::Other => return Err(HandshakeFailure::NotTls),
            FirstBytes::NeedMore => read_more(tcp, early).await?,
        }
    }
}

/// Runs the server handshake of `tls` on `tcp`, after [`first_bytes`] saw one begin in `early`.
/// Bytes that arrive with the client's Finished stay inside rustls, decrypted. The caller bounds
/// the time.
pub async fn accept(tcp: TcpStream, early: &mut Vec<u8>, tls: &ListenerTls) -> Result<TlsStream, HandshakeFailure> {
    let conn = if tls.strict_sni || tls.on_demand.is_some() {
        hello_first(&tcp, early, tls).await?
    } else {
        let mut conn = ServerConnection::new(tls.config.clone()).map_err(HandshakeFailure::Tls)?;
        feed(&tcp, &mut conn, early)?;
        conn
    };
    let mut conn = rustls::Connection::Server(conn);
    handshake(&tcp, &mut conn).await?;
    let client_cert = match (&tls.forward_client_cert, conn.peer_certificates()) {
        (Some(_), Some(chain)) => client_cert_header(chain),
        _ => None,
    };
    Ok(TlsStream::new(tcp, TlsSession { conn, client_cert }))
}

/// Answers a plain HTTP request on a TLS port with [`PLAIN_HTTP_ANSWER`], then reads (and drops)
/// what the client still sends until it closes or `linger` passes, so that the answer is not lost
/// to a reset.
pub async fn answer_plain_http(tcp: TcpStream, linger: std::time::Duration) {
    if crate::stream::write_all(&tcp, PLAIN_HTTP_ANSWER).await.is_err() {
        return;
    }
    let _ = socket2::SockRef::from(&tcp).shutdown(std::net::Shutdown::Write);
    let drain = async {
        let mut sink = [0u8; 1024];
        loop {
            if tcp.readable().await.is_err() {
                return;
            }
            match tcp.try_read(&mut sink) {
                Ok(0) => return,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => return,
            }
        }
    };
    let _ = tokio::time::timeout(linger, drain).await;
}

/// Appends whatever the socket has to `buf` (at least one byte, or an error at its end).
async fn read_more(tcp: &TcpStream, buf: &mut Vec<u8>) -> io::Result<()> {
    // Room for a whole ClientHello (a post-quantum key share makes it about 1.8 KiB): rustls gets
    // it in one piece.
    let mut chunk = [0u8; 2048];
    loop {
        tcp.readable().await?;
        match tcp.try_read(&mut chunk) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                return Ok(());
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Hands `bytes` (already read from the socket) to rustls and processes them.
fn feed(tcp: &TcpStream, conn: &mut ServerConnection, bytes: &mut Vec<u8>) -> Result<(), HandshakeFailure> {
    let mut rest = &bytes[..];
    while !rest.is_empty() {
        conn.read_tls(&mut rest)?;
        if let Err(e) = conn.process_new_packets() {
            let _ = conn.write_tls(&mut SocketWrite(tcp));
            return Err(HandshakeFailure::Tls(e));
        }
    }
    bytes.clear();
    Ok(())
}

/// Asks the control plane for a certificate for `name` when it has none and the listener's
/// `allow` covers it, and waits until it is served, or until the control plane says no (the ask
/// URL said no, the rate is spent, the CA failed); the handshake timeout bounds the wait.
async fn obtain_on_demand(
    tls: &ListenerTls,
    on_demand: &rampart_model::acme::OnDemand,
    acme: &rampart_model::acme::AcmeShared,
    name: &str,
) {
    if tls.certificates.knows(Some(name)) || acme.certificate(name).is_some() {
        return;
    }
    let lower = name.trim_end_matches('.').to_ascii_lowercase();
    if !on_demand.allows(&lower) {
        return;
    }
    acme.request(&lower);
    while acme.certificate(&lower).is_none() && !acme.denied(&lower) {
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
}

/// Reads the ClientHello with rustls' acceptor first: on-demand TLS obtains a certificate for an
/// allowed name that has none (the handshake waits for it, within the handshake timeout), and
/// `strict_sni` refuses a name no certificate has. Then the connection, with the hello processed.
async fn hello_first(
    tcp: &TcpStream,
    early: &mut Vec<u8>,
    tls: &ListenerTls,
) -> Result<ServerConnection, HandshakeFailure> {
    let mut acceptor = Acceptor::default();
    let mut rest = &early[..];
    while !rest.is_empty() {
        acceptor.read_tls(&mut rest)?;
    }
    early.clear();
    loop {
        match acceptor.accept() {
            Ok(Some(accepted)) => {
                let name = accepted.client_hello().server_name().map(str::to_string);
                if let (Some((on_demand, acme)), Some(name)) = (&tls.on_demand, name.as_deref()) {
                    obtain_on_demand(tls, on_demand, acme, name).await;
                }
                if tls.strict_sni && !tls.knows(name.as_deref()) {
                    let _ = SocketWrite(tcp).write_all_now(&UNRECOGNIZED_NAME_ALERT);
                    return Err(HandshakeFailure::UnknownName(name));
                }
                return accepted.into_connection(tls.config.clone()).map_err(|(e, mut alert)| {
                    let _ = alert.write(&mut SocketWrite(tcp));
                    HandshakeFailure::Tls(e)
                });
            }
            Ok(None) => {
                tcp.readable().await?;
                match acceptor.read_tls(&mut SocketRead(tcp)) {
                    Ok(0) => return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into()),
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e.into()),
                }
            }
            Err((e, mut alert)) => {
                let _ = alert.write(&mut SocketWrite(tcp));
                return Err(HandshakeFailure::Tls(e));
            }
        }
    }
}

/// Drives a handshake (either side) until it is done and its last flight is sent.
pub(crate) async fn handshake(tcp: &TcpStream, conn: &mut rustls::Connection) -> Result<(), HandshakeFailure> {
    loop {
        while conn.wants_write() {
            match conn.write_tls(&mut SocketWrite(tcp)) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => tcp.writable().await?,
                Err(e) => return Err(e.into()),
            }
        }
        if !conn.is_handshaking() {
            return Ok(());
        }
        tcp.readable().await?;
        match conn.read_tls(&mut SocketRead(tcp)) {
            Ok(0) => return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into()),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e.into()),
        }
        if let Err(e) = conn.process_new_packets() {
            let _ = conn.write_tls(&mut SocketWrite(tcp));
            return Err(HandshakeFailure::Tls(e));
        }
    }
}

/// The answer to a plain HTTP request on a TLS port of an HTTP listener.
pub const PLAIN_HTTP_ANSWER: &[u8] = b"HTTP/1.1 400 Bad Request\r\n\
Content-Type: text/plain\r\n\
Content-Length: 61\r\n\
Connection: close\r\n\
\r\n\
This port speaks HTTPS: a plain HTTP request was sent to it.\n";

impl SocketWrite<'_> {
    /// Writes what the socket takes now (for one-off answers before closing).
    fn write_all_now(&mut self, bytes: &[u8]) -> io::Result<()> {
        use std::io::Write;
        self.write_all(bytes)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_plain_http_answer_has_the_right_length() {
        let text = std::str::from_utf8(super::PLAIN_HTTP_ANSWER).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.contains(&format!("Content-Length: {}", body.len())));
    }
}
