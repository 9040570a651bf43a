//! TLS toward etcd (`https://` endpoints): the trust roots (`--etcd-ca`, else the system's) and
//! an optional client certificate (`--etcd-cert`, `--etcd-key`), and the connection type the
//! client reads and writes, plain or TLS.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};

/// The files TLS toward etcd takes, each optional.
#[derive(Debug, Clone, Default)]
pub struct TlsFiles {
    /// PEM certificates of the CAs that sign etcd's certificate (else the system's roots).
    pub ca: Option<PathBuf>,
    /// A client certificate chain (PEM), for an etcd started with `--client-cert-auth`.
    pub cert: Option<PathBuf>,
    /// Its private key (PEM).
    pub key: Option<PathBuf>,
}

impl TlsFiles {
    fn is_empty(&self) -> bool {
        self.ca.is_none() && self.cert.is_none() && self.key.is_none()
    }
}

/// The client configuration for `files`.
pub fn client_config(files: &TlsFiles) -> anyhow::Result<Arc<ClientConfig>> {
    let mut roots = RootCertStore::empty();
    match &files.ca {
        Some(path) => {
            for cert in read_certs(path, "--etcd-ca")? {
                roots
                    .add(cert)
                    .with_context(|| format!("--etcd-ca {}: a certificate rustls refuses", path.display()))?;
            }
        }
        None => {
            roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
        }
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS toward etcd")?
        .with_root_certificates(roots);
    let config = match (&files.cert, &files.key) {
        (Some(cert), Some(key)) => {
            let chain = read_certs(cert, "--etcd-cert")?;
            let key = PrivateKeyDer::from_pem_file(key)
                .map_err(|e| anyhow::anyhow!("--etcd-key {}: no private key read ({e})", key.display()))?;
            builder
                .with_client_auth_cert(chain, key)
                .context("--etcd-cert and --etcd-key do not make a client certificate")?
        }
        (None, None) => builder.with_no_client_auth(),
        _ => bail!("--etcd-cert and --etcd-key go together"),
    };
    Ok(Arc::new(config))
}

/// The TLS configuration for endpoints some of which are `https` (`any_https`): none when none
/// is, and then TLS files are a mistake worth saying.
pub fn for_endpoints(any_https: bool, files: &TlsFiles) -> anyhow::Result<Option<Arc<ClientConfig>>> {
    match (any_https, files.is_empty()) {
        (true, _) => client_config(files).map(Some),
        (false, true) => Ok(None),
        (false, false) => bail!("--etcd-ca, --etcd-cert and --etcd-key are for https:// endpoints"),
    }
}

fn read_certs(path: &Path, flag: &str) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| anyhow::anyhow!("{flag} {}: cannot read PEM certificates ({e})", path.display()))?;
    if certs.is_empty() {
        bail!("{flag} {}: no certificate in it", path.display());
    }
    Ok(certs)
}

/// A connection to etcd: plain, or TLS over TCP.
pub enum Conn {
    Plain(TcpStream),
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

impl Conn {
    /// `tcp` wrapped in TLS toward `host` (checked against etcd's certificate); the handshake
    /// happens with the first write.
    pub fn tls(tcp: TcpStream, config: &Arc<ClientConfig>, host: &str) -> anyhow::Result<Conn> {
        let name = ServerName::try_from(host.to_string()).with_context(|| format!("{host}: not a server name"))?;
        let tls = ClientConnection::new(config.clone(), name).context("TLS toward etcd")?;
        Ok(Conn::Tls(Box::new(StreamOwned::new(tls, tcp))))
    }

    fn socket(&self) -> &TcpStream {
        match self {
            Conn::Plain(tcp) => tcp,
            Conn::Tls(tls) => tls.get_ref(),
        }
    }

    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> std::io::Result<()> {
        self.socket().set_read_timeout(timeout)
    }

    /// Everything until the peer closes (a TLS peer that closes without `close_notify` after
    /// sending something ends it too: the answer is framed and checked by its parser).
    pub fn read_all(&mut self, limit: usize) -> std::io::Result<Vec<u8>> {
        let mut raw = Vec::new();
        let mut buf = [0u8; 16 * 1024];
        loop {
            match self.read(&mut buf) {
                Ok(0) => return Ok(raw),
                Ok(n) => {
                    raw.extend_from_slice(&buf[..n]);
                    if raw.len() > limit {
                        return Err(std::io::Error::other("an answer over 16 MiB"));
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => return Ok(raw),
                Err(e) => return Err(e),
            }
        }
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Conn::Plain(tcp) => tcp.read(buf),
            Conn::Tls(tls) => tls.read(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Conn::Plain(tcp) => tcp.write(buf),
            Conn::Tls(tls) => tls.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Conn::Plain(tcp) => tcp.flush(),
            Conn::Tls(tls) => tls.flush(),
        }
    }
}
