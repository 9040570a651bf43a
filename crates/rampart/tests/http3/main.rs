//! HTTP/3 end to end: Rampart's HTTP/3 listener (`http3 = true`) with clients over real QUIC on
//! 127.0.0.1: a quinn + h3 client of the tests' own ([`client`]), and aioquic, quic-go and
//! ngtcp2 ([`real_clients`]); HTTP/1.1 and h2c upstreams behind; the protections; drain and
//! binary upgrade.

use std::path::Path;

use crate::common;

mod client;
mod lifecycle;
mod protections;
mod real_clients;
mod serving;

use common::tls::{Ca, CertSpec};
use common::{free_port, write_file, Rampart};

/// The files of a TLS listener: its `[listeners.web.tls]` table, and the CA clients trust.
pub struct Tls {
    pub table: String,
    pub ca: Ca,
    pub ca_file: String,
}

/// A certificate for `localhost` and `127.0.0.1` under a fresh CA, written into `dir`.
pub fn tls(dir: &Path) -> Tls {
    let ca = Ca::new("Rampart HTTP/3 Test CA");
    let leaf = ca.issue(&CertSpec::new(&["localhost", "127.0.0.1"]));
    let (cert, key) = leaf.write(dir, "localhost");
    let ca_file = ca.write(dir, "ca.pem");
    Tls {
        table: format!("[listeners.web.tls]\ncertificates = [{{ cert = \"{cert}\", key = \"{key}\" }}]"),
        ca,
        ca_file,
    }
}

/// A one-worker HTTP/3 gateway: listener `web` (TLS, `http3 = true`, `listener` lines) on a free
/// port, upstream `app` with `targets` and `upstream` lines. Returns the proxy, its port (TCP and
/// UDP) and its TLS.
pub fn gateway(dir: &Path, targets: &[String], listener: &str, upstream: &str) -> (Rampart, u16, Tls) {
    gateway_on(dir, "127.0.0.1", targets, listener, upstream)
}

/// [`gateway`] on address `ip` (`0.0.0.0`: reachable from a test's network namespace too).
pub fn gateway_on(dir: &Path, ip: &str, targets: &[String], listener: &str, upstream: &str) -> (Rampart, u16, Tls) {
    let port = free_port();
    let tls = tls(dir);
    let list: Vec<String> = targets.iter().map(|t| format!("\"{t}\"")).collect();
    let cfg = format!(
        "[listeners.web]\nbind = \"{ip}:{port}\"\nprotocol = \"http\"\nhttp3 = true\nupstream = \"app\"\n{listener}\n\n\
         {}\n\n[upstreams.app]\ntargets = [{}]\n{upstream}\n",
        tls.table,
        list.join(", ")
    );
    let path = write_file(dir, "h3.toml", &cfg);
    (Rampart::start(dir, &["run", "-c", &path, "--workers", "1"]), port, tls)
}
