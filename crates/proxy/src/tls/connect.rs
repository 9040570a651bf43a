//! The client handshake to an upstream target.

use std::sync::Arc;

use rampart_model::tls::TargetTlsName;
use tokio::net::TcpStream;

use super::accept::{handshake, HandshakeFailure};
use super::{TlsSession, TlsStream};

/// Runs the client handshake of `config` on `tcp` for a target whose certificate must carry
/// `name` (sent as SNI when it is a DNS name). The caller bounds the time.
pub async fn connect(
    tcp: TcpStream,
    config: &Arc<rustls::ClientConfig>,
    name: &TargetTlsName,
) -> Result<TlsStream, HandshakeFailure> {
    let conn = rustls::ClientConnection::new(config.clone(), name.clone()).map_err(HandshakeFailure::Tls)?;
    let mut conn = rustls::Connection::Client(conn);
    handshake(&tcp, &mut conn).await?;
    Ok(TlsStream::new(
        tcp,
        TlsSession {
            conn,
            client_cert: None,
        },
    ))
}
