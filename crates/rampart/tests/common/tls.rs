//! TLS for the end-to-end tests: certificates made at test time (rcgen), a rustls client that
//! reports what the server presented and negotiated, a threaded rustls HTTP/1.1 backend that
//! reports the SNI and ALPN it was sent, raw ClientHellos for what rustls cannot send, and config
//! snippets for TLS listeners.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use rampart_proto::h1::{parse_request, parse_response, Framing, Limits};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::server::WebPkiClientVerifier;
use rustls::{
    AlertDescription, CertificateError, CipherSuite, ClientConfig, ClientConnection, DigitallySignedStruct,
    RootCertStore, ServerConfig, ServerConnection, SignatureScheme, StreamOwned, SupportedProtocolVersion,
};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};

use super::WAIT;

/// The crypto provider every test client and backend uses.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// Polls `check` until it holds (or fails the test after [`WAIT`]).
pub fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        thread::sleep(Duration::from_millis(20));
    }
}

// ---------------------------------------------------------------------------------------------
// Certificates

/// The key type of a certificate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyKind {
    EcdsaP256,
    Rsa2048,
}

/// What to put in a leaf certificate.
#[derive(Clone, Debug)]
pub struct CertSpec {
    /// Subject alternative names: DNS names, or IP addresses when they parse as one.
    pub names: Vec<String>,
    pub key: KeyKind,
    /// Validity, in days from now (negative: in the past).
    pub valid_from_days: i64,
    pub valid_to_days: i64,
    /// Subject common name (default: the first name) and organization.
    pub common_name: Option<String>,
    pub organization: Option<String>,
    pub uris: Vec<String>,
}

impl CertSpec {
    pub fn new(names: &[&str]) -> CertSpec {
        CertSpec {
            names: names.iter().map(|n| n.to_string()).collect(),
            key: KeyKind::EcdsaP256,
            valid_from_days: -1,
            valid_to_days: 365,
            common_name: None,
            organization: None,
            uris: Vec::new(),
        }
    }

    pub fn rsa(mut self) -> CertSpec {
        self.key = KeyKind::Rsa2048;
        self
    }

    pub fn valid_days(mut self, from: i64, to: i64) -> CertSpec {
        self.valid_from_days = from;
        self.valid_to_days = to;
        self
    }

    pub fn subject(mut self, common_name: &str, organization: &str) -> CertSpec {
        self.common_name = Some(common_name.into());
        self.organization = Some(organization.into());
        self
    }

    pub fn uri(mut self, uri: &str) -> CertSpec {
        self.uris.push(uri.into());
        self
    }
}

fn key_pair(kind: KeyKind) -> KeyPair {
    match kind {
        KeyKind::EcdsaP256 => KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap(),
        KeyKind::Rsa2048 => KeyPair::generate_for(&rcgen::PKCS_RSA_SHA256).unwrap(),
    }
}

fn days(n: i64) -> time::OffsetDateTime {
    time::OffsetDateTime::now_utc() + time::Duration::days(n)
}

/// A certificate authority that issues leaf certificates.
pub struct Ca {
    cert: rcgen::Certificate,
    key: KeyPair,
    pub pem: String,
    pub der: CertificateDer<'static>,
}

impl Ca {
    pub fn new(name: &str) -> Ca {
        let key = key_pair(KeyKind::EcdsaP256);
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        params.not_before = days(-30);
        params.not_after = days(3650);
        let cert = params.self_signed(&key).unwrap();
        Ca {
            pem: cert.pem(),
            der: cert.der().clone(),
            cert,
            key,
        }
    }

    /// Writes the CA certificate as PEM into `dir` and returns its path.
    pub fn write(&self, dir: &Path, name: &str) -> String {
        super::write_file(dir, name, &self.pem)
    }

    /// A root store holding this CA.
    pub fn roots(&self) -> Arc<RootCertStore> {
        let mut roots = RootCertStore::empty();
        roots.add(self.der.clone()).unwrap();
        Arc::new(roots)
    }

    pub fn issue(&self, spec: &CertSpec) -> Issued {
        let key = key_pair(spec.key);
        let mut params = CertificateParams::new(spec.names.clone()).unwrap();
        for uri in &spec.uris {
            params
                .subject_alt_names
                .push(SanType::URI(uri.as_str().try_into().unwrap()));
        }
        let cn = spec
            .common_name
            .clone()
            .or_else(|| spec.names.first().cloned())
            .unwrap_or_else(|| "rampart test".into());
        params.distinguished_name.push(DnType::CommonName, cn);
        if let Some(org) = &spec.organization {
            params.distinguished_name.push(DnType::OrganizationName, org.as_str());
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        params.not_before = days(spec.valid_from_days);
        params.not_after = days(spec.valid_to_days);
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        Issued {
            cert_pem: cert.pem(),
            ca_pem: self.pem.clone(),
            key_pem: key.serialize_pem(),
            key_pkcs8: key.serialize_der(),
            der: cert.der().clone(),
            ca_der: self.der.clone(),
            kind: spec.key,
        }
    }
}

/// A leaf certificate and its key.
#[derive(Clone)]
pub struct Issued {
    pub cert_pem: String,
    pub ca_pem: String,
    /// PKCS#8 PEM.
    pub key_pem: String,
    pub key_pkcs8: Vec<u8>,
    pub der: CertificateDer<'static>,
    pub ca_der: CertificateDer<'static>,
    pub kind: KeyKind,
}

impl Issued {
    /// The chain (leaf, then the CA) as PEM.
    pub fn chain_pem(&self) -> String {
        format!("{}{}", self.cert_pem, self.ca_pem)
    }

    /// Writes `STEM.pem` (the chain) and `STEM.key` (PKCS#8) into `dir`; returns both paths.
    pub fn write(&self, dir: &Path, stem: &str) -> (String, String) {
        (
            super::write_file(dir, &format!("{stem}.pem"), &self.chain_pem()),
            super::write_file(dir, &format!("{stem}.key"), &self.key_pem),
        )
    }

    /// The key in its traditional form: PKCS#1 (`RSA PRIVATE KEY`) for RSA, SEC1 with the
    /// curve named (`EC PRIVATE KEY`) for ECDSA.
    pub fn traditional_key_pem(&self) -> String {
        // PrivateKeyInfo ::= SEQUENCE { version, AlgorithmIdentifier, OCTET STRING privateKey }
        let info = der_children(der_content(&self.key_pkcs8));
        let inner = info[2].1;
        match self.kind {
            KeyKind::Rsa2048 => pem("RSA PRIVATE KEY", inner),
            KeyKind::EcdsaP256 => {
                // ECPrivateKey ::= SEQUENCE { version, OCTET STRING key, [0] curve OPTIONAL,
                // [1] publicKey OPTIONAL }: PKCS#8 leaves the curve out; a lone SEC1 key names it.
                let fields = der_children(der_content(inner));
                let mut body = Vec::new();
                for (_, _, whole) in &fields[..2] {
                    body.extend_from_slice(whole);
                }
                if fields.iter().all(|f| f.0 != 0xa0) {
                    // [0] { OID 1.2.840.10045.3.1.7 (prime256v1) }
                    body.extend_from_slice(&[0xa0, 0x0a, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07]);
                }
                for (_, _, whole) in &fields[2..] {
                    body.extend_from_slice(whole);
                }
                pem("EC PRIVATE KEY", &der_wrap(0x30, &body))
            }
        }
    }

    pub fn key_der(&self) -> PrivateKeyDer<'static> {
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key_pkcs8.clone()))
    }

    /// The chain as rustls wants it.
    pub fn chain_der(&self) -> Vec<CertificateDer<'static>> {
        vec![self.der.clone(), self.ca_der.clone()]
    }
}

/// The content octets of one DER element at the start of `der`.
fn der_content(der: &[u8]) -> &[u8] {
    let (_, content, _) = der_element(der);
    content
}

/// (tag, content, whole element) of the DER element at the start of `der`.
fn der_element(der: &[u8]) -> (u8, &[u8], &[u8]) {
    let tag = der[0];
    let (len, header) = match der[1] {
        n if n < 0x80 => (n as usize, 2),
        n => {
            let count = (n & 0x7f) as usize;
            let len = der[2..2 + count].iter().fold(0usize, |acc, b| (acc << 8) | *b as usize);
            (len, 2 + count)
        }
    };
    (tag, &der[header..header + len], &der[..header + len])
}

fn der_children(mut content: &[u8]) -> Vec<(u8, &[u8], &[u8])> {
    let mut out = Vec::new();
    while !content.is_empty() {
        let element = der_element(content);
        content = &content[element.2.len()..];
        out.push(element);
    }
    out
}

fn der_wrap(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    match body.len() {
        n if n < 0x80 => out.push(n as u8),
        n if n < 0x100 => out.extend_from_slice(&[0x81, n as u8]),
        n => out.extend_from_slice(&[0x82, (n >> 8) as u8, n as u8]),
    }
    out.extend_from_slice(body);
    out
}

fn pem(label: &str, der: &[u8]) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut b64 = String::new();
    for chunk in der.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, b)| acc | (*b as u32) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                b64.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                b64.push('=');
            }
        }
    }
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).unwrap());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

// ---------------------------------------------------------------------------------------------
// Client

/// A server certificate verifier: the chain must lead to the given roots and every handshake
/// signature is checked; the name check can be waived (to see which certificate a server picks
/// for a name it has none for), and the signature schemes offered can be narrowed (to make an
/// ECDSA-only or RSA-only client).
#[derive(Debug)]
struct TestVerifier {
    inner: Arc<WebPkiServerVerifier>,
    check_name: bool,
    schemes: Option<Vec<SignatureScheme>>,
}

impl ServerCertVerifier for TestVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .inner
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.check_name => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        match &self.schemes {
            Some(only) => only.clone(),
            None => self.inner.supported_verify_schemes(),
        }
    }
}

pub const ECDSA_SCHEMES: &[SignatureScheme] = &[
    SignatureScheme::ECDSA_NISTP256_SHA256,
    SignatureScheme::ECDSA_NISTP384_SHA384,
    SignatureScheme::ECDSA_NISTP521_SHA512,
];

pub const RSA_SCHEMES: &[SignatureScheme] = &[
    SignatureScheme::RSA_PSS_SHA256,
    SignatureScheme::RSA_PSS_SHA384,
    SignatureScheme::RSA_PSS_SHA512,
    SignatureScheme::RSA_PKCS1_SHA256,
    SignatureScheme::RSA_PKCS1_SHA384,
    SignatureScheme::RSA_PKCS1_SHA512,
];

/// What a test client offers.
pub struct ClientOpts {
    roots: Arc<RootCertStore>,
    versions: Vec<&'static SupportedProtocolVersion>,
    schemes: Option<Vec<SignatureScheme>>,
    suites: Option<Vec<CipherSuite>>,
    alpn: Vec<Vec<u8>>,
    check_name: bool,
    client_cert: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
    resume: bool,
    session_id_only: bool,
}

impl ClientOpts {
    /// TLS 1.2 and 1.3, no ALPN, no resumption (so that every handshake shows the server's
    /// certificate), the server's certificate verified against `ca` (name included).
    pub fn new(ca: &Ca) -> ClientOpts {
        ClientOpts {
            roots: ca.roots(),
            versions: vec![&rustls::version::TLS13, &rustls::version::TLS12],
            schemes: None,
            suites: None,
            alpn: Vec::new(),
            check_name: true,
            client_cert: None,
            resume: false,
            session_id_only: false,
        }
    }

    /// As [`ClientOpts::new`], verifying against the root certificates in `pem` instead.
    pub fn with_roots(pem: &str) -> ClientOpts {
        let mut roots = RootCertStore::empty();
        for der in CertificateDer::pem_slice_iter(pem.as_bytes()) {
            roots.add(der.unwrap()).unwrap();
        }
        ClientOpts {
            roots: Arc::new(roots),
            ..ClientOpts::new(&Ca::new("unused"))
        }
    }

    pub fn tls12_only(mut self) -> Self {
        self.versions = vec![&rustls::version::TLS12];
        self
    }

    pub fn tls13_only(mut self) -> Self {
        self.versions = vec![&rustls::version::TLS13];
        self
    }

    pub fn schemes(mut self, schemes: &[SignatureScheme]) -> Self {
        self.schemes = Some(schemes.to_vec());
        self
    }

    pub fn suites(mut self, suites: &[CipherSuite]) -> Self {
        self.suites = Some(suites.to_vec());
        self
    }

    pub fn alpn(mut self, protocols: &[&str]) -> Self {
        self.alpn = protocols.iter().map(|p| p.as_bytes().to_vec()).collect();
        self
    }

    /// Accept a certificate (chained to the roots) that does not name the server.
    pub fn any_name(mut self) -> Self {
        self.check_name = false;
        self
    }

    pub fn client_cert(mut self, cert: &Issued) -> Self {
        self.client_cert = Some((cert.chain_der(), cert.key_der()));
        self
    }

    /// Keep sessions (tickets and session ids) and offer them on later handshakes with the same
    /// config.
    pub fn resume(mut self) -> Self {
        self.resume = true;
        self
    }

    /// Keep sessions, but resume TLS 1.2 by session id only (no tickets offered).
    pub fn session_id_only(mut self) -> Self {
        self.resume = true;
        self.session_id_only = true;
        self
    }

    pub fn build(self) -> Arc<ClientConfig> {
        let mut provider = rustls::crypto::aws_lc_rs::default_provider();
        if let Some(only) = &self.suites {
            provider.cipher_suites.retain(|s| only.contains(&s.suite()));
        }
        let provider = Arc::new(provider);
        let inner = WebPkiServerVerifier::builder_with_provider(self.roots.clone(), provider.clone())
            .build()
            .unwrap();
        let verifier = Arc::new(TestVerifier {
            inner,
            check_name: self.check_name,
            schemes: self.schemes,
        });
        let builder = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&self.versions)
            .unwrap()
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let mut config = match self.client_cert {
            Some((chain, key)) => builder.with_client_auth_cert(chain, key).unwrap(),
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = self.alpn;
        if !self.resume {
            config.resumption = rustls::client::Resumption::disabled();
        } else if self.session_id_only {
            config.resumption = rustls::client::Resumption::in_memory_sessions(64)
                .tls12_resumption(rustls::client::Tls12Resumption::SessionIdOnly);
        }
        Arc::new(config)
    }
}

pub type TlsStream = StreamOwned<ClientConnection, TcpStream>;

/// Connects to 127.0.0.1:`port` and completes a handshake for `name` (an IP address sends no
/// SNI). A failure is the io error rustls reported (see [`alert`], [`rustls_error`]).
pub fn handshake(port: u16, config: &Arc<ClientConfig>, name: &str) -> io::Result<TlsStream> {
    handshake_at(([127, 0, 0, 1], port).into(), config, name)
}

/// [`handshake`] with the server at `addr`.
pub fn handshake_at(addr: std::net::SocketAddr, config: &Arc<ClientConfig>, name: &str) -> io::Result<TlsStream> {
    let mut sock = TcpStream::connect(addr)?;
    sock.set_read_timeout(Some(WAIT))?;
    let server_name = ServerName::try_from(name.to_string()).expect("server name");
    let mut conn = ClientConnection::new(config.clone(), server_name).map_err(io::Error::other)?;
    while conn.is_handshaking() {
        conn.complete_io(&mut sock)?;
    }
    Ok(StreamOwned::new(conn, sock))
}

/// The rustls error inside an io error, if that is what it is.
pub fn rustls_error(e: &io::Error) -> Option<rustls::Error> {
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .cloned()
}

/// The alert the server sent, if the io error is one.
pub fn alert(e: &io::Error) -> Option<AlertDescription> {
    match rustls_error(e) {
        Some(rustls::Error::AlertReceived(a)) => Some(a),
        _ => None,
    }
}

/// Which of `candidates` the server presented as its leaf certificate (index), if any. Only for
/// full handshakes: a resumed one shows the certificate of the session it resumed.
pub fn served(tls: &TlsStream, candidates: &[&Issued]) -> Option<usize> {
    assert_ne!(
        tls.conn.handshake_kind(),
        Some(rustls::HandshakeKind::Resumed),
        "a resumed handshake presents no certificate"
    );
    let leaf = tls.conn.peer_certificates()?.first()?.clone();
    candidates.iter().position(|c| c.der == leaf)
}

/// The negotiated protocol version as Rampart logs it ("TLSv1.3" / "TLSv1.2").
pub fn version_name(tls: &TlsStream) -> &'static str {
    match tls.conn.protocol_version() {
        Some(rustls::ProtocolVersion::TLSv1_3) => "TLSv1.3",
        Some(rustls::ProtocolVersion::TLSv1_2) => "TLSv1.2",
        other => panic!("unexpected version {other:?}"),
    }
}

/// The negotiated cipher suite's rustls name (e.g. `TLS13_AES_128_GCM_SHA256`).
pub fn suite_name(tls: &TlsStream) -> String {
    format!("{:?}", tls.conn.negotiated_cipher_suite().unwrap().suite())
}

/// One HTTP response read by [`request`].
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub head: String,
    pub body: Vec<u8>,
}

impl Response {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Writes `raw` and reads one response (bytes after it are an error: tests don't pipeline here).
pub fn request<S: Read + Write>(stream: &mut S, raw: &[u8]) -> io::Result<Response> {
    stream.write_all(raw)?;
    stream.flush()?;
    read_response(stream)
}

/// A `GET path` with `Host: host`, keep-alive.
pub fn get_host(path: &str, host: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n").into_bytes()
}

/// Reads one response (interim 1xx skipped); chunked bodies are decoded.
pub fn read_response<S: Read>(stream: &mut S) -> io::Result<Response> {
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    let mut fill = |buf: &mut Vec<u8>| -> io::Result<()> {
        match stream.read(&mut chunk)? {
            0 => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("closed after {:?}", String::from_utf8_lossy(buf)),
            )),
            n => {
                buf.extend_from_slice(&chunk[..n]);
                Ok(())
            }
        }
    };
    loop {
        let mut res = rampart_proto::message::ResponseHead::default();
        let head = match parse_response(&buf, &Limits::default(), false, &mut res) {
            Ok(Some(head)) => head,
            Ok(None) => {
                fill(&mut buf)?;
                continue;
            }
            Err(e) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{e:?}: {:?}", String::from_utf8_lossy(&buf)),
                ))
            }
        };
        let head_text = String::from_utf8_lossy(&buf[..head.len]).into_owned();
        buf.drain(..head.len);
        if (100..200).contains(&res.status) && res.status != 101 {
            continue;
        }
        let body = match head.framing {
            Framing::None => Vec::new(),
            Framing::Length(n) => {
                while (buf.len() as u64) < n {
                    fill(&mut buf)?;
                }
                buf.truncate(n as usize);
                buf
            }
            Framing::UntilClose => loop {
                match fill(&mut buf) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => break buf,
                    Err(e) => return Err(e),
                }
            },
            Framing::Chunked => {
                let mut body = Vec::new();
                loop {
                    // A size line, its data and CRLF; a zero size ends the body (no trailers here).
                    let Some(end) = buf.windows(2).position(|w| w == b"\r\n") else {
                        fill(&mut buf)?;
                        continue;
                    };
                    let line = String::from_utf8_lossy(&buf[..end]).into_owned();
                    let size = usize::from_str_radix(line.split(';').next().unwrap().trim(), 16)
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{line:?}: {e}")))?;
                    let need = end + 2 + size + 2;
                    while buf.len() < need {
                        fill(&mut buf)?;
                    }
                    body.extend_from_slice(&buf[end + 2..end + 2 + size]);
                    buf.drain(..need);
                    if size == 0 {
                        break body;
                    }
                }
            }
        };
        return Ok(Response {
            status: res.status,
            head: head_text,
            body,
        });
    }
}

/// Reads until the peer closes (or resets) and returns what came; panics if it stays open past
/// [`WAIT`].
pub fn read_until_closed(stream: &mut TcpStream) -> Vec<u8> {
    stream.set_read_timeout(Some(WAIT)).unwrap();
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match stream.read(&mut chunk) {
            Ok(0) => return got,
            Ok(n) => got.extend_from_slice(&chunk[..n]),
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                panic!("the connection is still open after {WAIT:?}; got {got:?}")
            }
            Err(_) => return got,
        }
    }
}

/// The description of the fatal alert record at the start of `bytes`, if they start with one.
pub fn fatal_alert(bytes: &[u8]) -> Option<u8> {
    (bytes.len() >= 7 && bytes[0] == 0x15 && bytes[1] == 0x03 && bytes[5] == 2).then(|| bytes[6])
}

/// A ClientHello as an old or odd client would send it: `version` as the legacy version in the
/// record and the hello (0x0301 = TLS 1.0, 0x0302 = TLS 1.1, 0x0303 = TLS 1.2), these cipher
/// suites, SNI, the usual groups and signature algorithms, and no supported_versions extension.
pub fn raw_client_hello(version: u16, suites: &[u16], sni: &str) -> Vec<u8> {
    fn u16be(out: &mut Vec<u8>, v: u16) {
        out.extend_from_slice(&v.to_be_bytes());
    }
    fn extension(out: &mut Vec<u8>, kind: u16, body: &[u8]) {
        u16be(out, kind);
        u16be(out, body.len() as u16);
        out.extend_from_slice(body);
    }
    let mut ext = Vec::new();
    let mut name = vec![0u8];
    u16be(&mut name, sni.len() as u16);
    name.extend_from_slice(sni.as_bytes());
    let mut list = Vec::new();
    u16be(&mut list, name.len() as u16);
    list.extend_from_slice(&name);
    extension(&mut ext, 0x0000, &list);
    extension(&mut ext, 0x000a, &[0x00, 0x04, 0x00, 0x1d, 0x00, 0x17]);
    extension(&mut ext, 0x000b, &[0x01, 0x00]);
    let algs: [u16; 6] = [0x0403, 0x0804, 0x0401, 0x0503, 0x0201, 0x0203];
    let mut sig = Vec::new();
    u16be(&mut sig, (algs.len() * 2) as u16);
    for a in algs {
        u16be(&mut sig, a);
    }
    extension(&mut ext, 0x000d, &sig);
    extension(&mut ext, 0xff01, &[0x00]);

    let mut hello = Vec::new();
    u16be(&mut hello, version);
    hello.extend((0..32u8).map(|i| i.wrapping_mul(37).wrapping_add(11)));
    hello.push(0); // session id
    u16be(&mut hello, (suites.len() * 2) as u16);
    for s in suites {
        u16be(&mut hello, *s);
    }
    hello.extend_from_slice(&[1, 0]); // compression: null
    u16be(&mut hello, ext.len() as u16);
    hello.extend_from_slice(&ext);

    let mut handshake = vec![1u8];
    handshake.extend_from_slice(&(hello.len() as u32).to_be_bytes()[1..]);
    handshake.extend_from_slice(&hello);
    let mut record = vec![0x16];
    u16be(&mut record, version.min(0x0301));
    u16be(&mut record, handshake.len() as u16);
    record.extend_from_slice(&handshake);
    record
}

// ---------------------------------------------------------------------------------------------
// Backend

/// What a [`TlsBackend`] saw of one handshake.
#[derive(Clone, Debug)]
pub struct SeenHandshake {
    pub sni: Option<String>,
    pub alpn: Option<String>,
    pub client_cert: bool,
}

/// A threaded rustls HTTP/1.1 server on 127.0.0.1 (and on [::1] at the same port when it can):
/// it reports each completed handshake and each request head, and answers every request with
/// 200 and a body of `TAG\nHEAD`. Keep-alive unless the request says otherwise.
pub struct TlsBackend {
    pub addr: SocketAddr,
    pub handshakes: Receiver<SeenHandshake>,
    pub heads: Receiver<String>,
    /// Handshakes that failed (a plain client, an untrusted client certificate...).
    pub failed: Arc<AtomicUsize>,
}

impl TlsBackend {
    /// Serves `cert` with tag `tag`; ALPN `http/1.1` offered.
    pub fn start(tag: &str, cert: &Issued) -> TlsBackend {
        TlsBackend::start_with(tag, cert, None)
    }

    /// As [`TlsBackend::start`], requiring client certificates issued by `client_ca` if given.
    pub fn start_with(tag: &str, cert: &Issued, client_ca: Option<&Ca>) -> TlsBackend {
        let provider = provider();
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap();
        let builder = match client_ca {
            Some(ca) => builder.with_client_cert_verifier(
                WebPkiClientVerifier::builder_with_provider(ca.roots(), provider)
                    .build()
                    .unwrap(),
            ),
            None => builder.with_no_client_auth(),
        };
        let mut config = builder.with_single_cert(cert.chain_der(), cert.key_der()).unwrap();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let config = Arc::new(config);

        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let mut listeners = vec![listener];
        if let Ok(v6) = TcpListener::bind(("::1", addr.port())) {
            listeners.push(v6);
        }
        let (seen_tx, seen_rx) = channel();
        let (heads_tx, heads_rx) = channel();
        let failed = Arc::new(AtomicUsize::new(0));
        for listener in listeners {
            let (config, seen_tx, heads_tx, failed) =
                (config.clone(), seen_tx.clone(), heads_tx.clone(), failed.clone());
            let tag = tag.to_string();
            thread::spawn(move || {
                for conn in listener.incoming().flatten() {
                    let (config, seen_tx, heads_tx, failed, tag) = (
                        config.clone(),
                        seen_tx.clone(),
                        heads_tx.clone(),
                        failed.clone(),
                        tag.clone(),
                    );
                    thread::spawn(move || {
                        if serve_tls(conn, config, &seen_tx, &heads_tx, &tag).is_err() {
                            failed.fetch_add(1, Ordering::SeqCst);
                        }
                    });
                }
            });
        }
        TlsBackend {
            addr,
            handshakes: seen_rx,
            heads: heads_rx,
            failed,
        }
    }

    pub fn target(&self) -> String {
        self.addr.to_string()
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    pub fn next_handshake(&self) -> SeenHandshake {
        self.handshakes
            .recv_timeout(WAIT)
            .expect("the TLS backend completed no handshake")
    }

    pub fn next_head(&self) -> String {
        self.heads
            .recv_timeout(WAIT)
            .expect("the TLS backend received no request")
    }
}

/// Err when the handshake failed; Ok once a handshaken connection ends.
fn serve_tls(
    mut sock: TcpStream,
    config: Arc<ServerConfig>,
    seen: &Sender<SeenHandshake>,
    heads: &Sender<String>,
    tag: &str,
) -> io::Result<()> {
    sock.set_read_timeout(Some(Duration::from_secs(60)))?;
    let mut conn = ServerConnection::new(config).map_err(io::Error::other)?;
    while conn.is_handshaking() {
        conn.complete_io(&mut sock)?;
    }
    let _ = seen.send(SeenHandshake {
        sni: conn.server_name().map(str::to_string),
        alpn: conn.alpn_protocol().map(|p| String::from_utf8_lossy(p).into_owned()),
        client_cert: conn.peer_certificates().is_some_and(|c| !c.is_empty()),
    });
    let mut tls = StreamOwned::new(conn, sock);
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        let mut req = rampart_proto::message::RequestHead::default();
        let head = match parse_request(&buf, &Limits::default(), &mut req) {
            Ok(Some(head)) => head,
            Ok(None) => match tls.read(&mut chunk) {
                Ok(0) | Err(_) => return Ok(()),
                Ok(n) => {
                    buf.extend_from_slice(&chunk[..n]);
                    continue;
                }
            },
            Err(_) => return Ok(()),
        };
        let head_text = String::from_utf8_lossy(&buf[..head.len]).into_owned();
        let body_len = match head.framing {
            Framing::Length(n) => n as usize,
            _ => 0,
        };
        while buf.len() < head.len + body_len {
            match tls.read(&mut chunk) {
                Ok(0) | Err(_) => return Ok(()),
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        buf.drain(..head.len + body_len);
        let _ = heads.send(head_text.clone());
        let body = format!("{tag}\n{head_text}");
        let close = !req.keep_alive;
        let reply = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n{}\r\n{body}",
            body.len(),
            if close { "connection: close\r\n" } else { "" }
        );
        if tls.write_all(reply.as_bytes()).and_then(|_| tls.flush()).is_err() || close {
            tls.conn.send_close_notify();
            let _ = tls.flush();
            return Ok(());
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Config

/// `certificates = [...]` for these (cert, key) path pairs.
pub fn certificates(pairs: &[(String, String)]) -> String {
    let list: Vec<String> = pairs
        .iter()
        .map(|(c, k)| format!("{{ cert = \"{c}\", key = \"{k}\" }}"))
        .collect();
    format!("certificates = [{}]", list.join(", "))
}

/// An HTTP listener `web` on `port` with `listener_extra` lines, a `[listeners.web.tls]` table of
/// `tls` lines, and upstream `app` over `target`.
pub fn https_config(port: u16, target: &str, listener_extra: &str, tls: &str) -> String {
    format!(
        "[listeners.web]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\nupstream = \"app\"\n{listener_extra}\n\n\
         [listeners.web.tls]\n{tls}\n\n[upstreams.app]\ntargets = [\"{target}\"]\n"
    )
}

/// Writes `cfg` as `rampart.toml` in `dir` and starts `rampart run` with `workers`; returns the
/// proxy and the config path.
pub fn start_config(dir: &Path, cfg: &str, workers: u16) -> (super::Rampart, String) {
    let path = super::write_file(dir, "rampart.toml", cfg);
    let workers = workers.to_string();
    (
        super::Rampart::start(dir, &["run", "-c", &path, "--workers", &workers]),
        path,
    )
}

/// The lines of a log file once one satisfies `check` (polled until [`WAIT`]).
pub fn log_lines_once(path: &Path, what: &str, check: impl Fn(&str) -> bool) -> Vec<String> {
    let mut lines = Vec::new();
    eventually(what, || {
        lines = std::fs::read_to_string(path)
            .map(|s| s.lines().map(str::to_string).collect())
            .unwrap_or_default();
        lines.iter().any(|l| check(l))
    });
    lines
}
