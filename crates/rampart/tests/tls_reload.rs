//! Certificates and reloads: SIGHUP re-reads every certificate and key file even when the config
//! text is unchanged; open connections go on; a missing or mismatched file keeps the running
//! certificate and is reported at the config key that names it; an expired one is loaded with a
//! warning at that key.

use crate::common;

use std::path::Path;

use common::http::{HttpBackend, Reply};
use common::tls::*;
use common::*;

const NAME: &str = "reload.example.com";

/// The config, and the 1-based lines of its `cert = ` and `key = ` keys.
fn reload_config(port: u16, target: &str, cert: &str, key: &str) -> (String, usize, usize) {
    let cfg = format!(
        "[listeners.web]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\nupstream = \"app\"\n\n\
         [listeners.web.tls]\nhandshake_timeout = \"5s\"\n\n\
         [[listeners.web.tls.certificates]]\ncert = \"{cert}\"\nkey = \"{key}\"\n\n\
         [upstreams.app]\ntargets = [\"{target}\"]\n"
    );
    let line_of = |prefix: &str| cfg.lines().position(|l| l.starts_with(prefix)).unwrap() + 1;
    let (cert_line, key_line) = (line_of("cert = "), line_of("key = "));
    (cfg, cert_line, key_line)
}

/// Whether `log` has `PATH:LINE:COL:` for `path` and one of `lines`.
fn has_location(log: &str, path: &str, lines: &[usize]) -> bool {
    lines.iter().any(|line| {
        let prefix = format!("{path}:{line}:");
        log.match_indices(&prefix).any(|(at, _)| {
            let rest = &log[at + prefix.len()..];
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            digits > 0 && rest[digits..].starts_with(':')
        })
    })
}

fn write_pair(dir: &Path, cert: &Issued, key_of: &Issued) {
    std::fs::write(dir.join("site.pem"), cert.chain_pem()).unwrap();
    std::fs::write(dir.join("site.key"), &key_of.key_pem).unwrap();
}

fn get_ok(tls: &mut TlsStream) {
    let response = request(tls, &get_host("/", NAME)).expect("request over TLS");
    assert_eq!(response.status, 200, "{response:?}");
}

#[test]
fn sighup_rereads_certificate_files_and_open_connections_go_on() {
    let backend = HttpBackend::start(Reply::Echo);
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("Rampart Test CA");
    let first = ca.issue(&CertSpec::new(&[NAME]));
    let second = ca.issue(&CertSpec::new(&[NAME]));
    write_pair(dir.path(), &first, &first);
    let port = free_port();
    let (cert, key) = (
        dir.path().join("site.pem").display().to_string(),
        dir.path().join("site.key").display().to_string(),
    );
    let (cfg, _, _) = reload_config(port, &backend.target(), &cert, &key);
    let (mut proxy, _) = start_config(dir.path(), &cfg, 2);
    let client = ClientOpts::new(&ca).build();
    let both = [&first, &second];

    let mut open = handshake(port, &client, NAME).unwrap();
    assert_eq!(served(&open, &both), Some(0));
    get_ok(&mut open);

    // New files, same config text.
    write_pair(dir.path(), &second, &second);
    let outcome = proxy.reload();
    assert!(outcome.contains("reloaded"), "{outcome}");
    // The connection made before the reload keeps working.
    for _ in 0..3 {
        get_ok(&mut open);
    }
    // Every new handshake, on any worker, gets the new certificate.
    for i in 0..6 {
        let mut conn = handshake(port, &client, NAME).unwrap();
        assert_eq!(served(&conn, &both), Some(1), "handshake {i} after the reload");
        get_ok(&mut conn);
    }
    get_ok(&mut open);
}

#[test]
fn a_missing_or_mismatched_file_at_reload_keeps_the_running_certificate_and_an_expired_one_loads_loudly() {
    let backend = HttpBackend::start(Reply::Echo);
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("Rampart Test CA");
    let good = ca.issue(&CertSpec::new(&[NAME]));
    let other = ca.issue(&CertSpec::new(&[NAME]));
    let expired = ca.issue(&CertSpec::new(&[NAME]).valid_days(-60, -1));
    let replacement = ca.issue(&CertSpec::new(&[NAME]));
    write_pair(dir.path(), &good, &good);
    let port = free_port();
    let (cert, key) = (
        dir.path().join("site.pem").display().to_string(),
        dir.path().join("site.key").display().to_string(),
    );
    let (cfg, cert_line, key_line) = reload_config(port, &backend.target(), &cert, &key);
    let (mut proxy, cfg_path) = start_config(dir.path(), &cfg, 1);
    let client = ClientOpts::new(&ca).build();
    let all = [&good, &other, &expired, &replacement];
    let mut open = handshake(port, &client, NAME).unwrap();
    assert_eq!(served(&open, &all), Some(0));

    let still_the_good_one = |what: &str| {
        let mut conn = handshake(port, &client, NAME).unwrap_or_else(|e| panic!("after {what}: {e}"));
        assert_eq!(
            served(&conn, &all),
            Some(0),
            "after {what} the running certificate changed"
        );
        get_ok(&mut conn);
    };

    // The certificate file is gone.
    std::fs::remove_file(dir.path().join("site.pem")).unwrap();
    let outcome = proxy.reload();
    assert!(outcome.contains("reload failed"), "missing file: {outcome}");
    assert!(
        has_location(&outcome, &cfg_path, &[cert_line]),
        "missing file: no {cfg_path}:{cert_line}:COL: in {outcome}"
    );
    still_the_good_one("a missing certificate file");
    get_ok(&mut open);

    // A certificate with another certificate's key.
    write_pair(dir.path(), &other, &good);
    let outcome = proxy.reload();
    assert!(outcome.contains("reload failed"), "mismatched key: {outcome}");
    assert!(
        has_location(&outcome, &cfg_path, &[cert_line, key_line]),
        "mismatched key: no {cfg_path}:{cert_line} or {key_line}:COL: in {outcome}"
    );
    assert!(outcome.contains("does not match"), "{outcome}");
    still_the_good_one("a mismatched key");

    // An expired certificate (with its own key) is loaded, as nginx and HAProxy do: a loud
    // warning at its place, and it is served (clients refuse it and say why).
    write_pair(dir.path(), &expired, &expired);
    let outcome = proxy.reload();
    assert!(outcome.contains("reloaded"), "expired: {outcome}");
    let warning = proxy
        .log
        .iter()
        .find(|l| l.contains("EXPIRED"))
        .unwrap_or_else(|| panic!("no warning about the expired certificate in {:?}", proxy.log));
    assert!(
        has_location(warning, &cfg_path, &[cert_line]),
        "expired: no {cfg_path}:{cert_line}:COL: in {warning}"
    );
    let check = ClientOpts::new(&ca).build();
    let Err(refused) = handshake(port, &check, NAME) else {
        panic!("a verifying client took the expired certificate");
    };
    assert!(
        matches!(
            rustls_error(&refused),
            Some(rustls::Error::InvalidCertificate(
                rustls::CertificateError::Expired | rustls::CertificateError::ExpiredContext { .. }
            ))
        ),
        "{refused}"
    );
    get_ok(&mut open);

    // A good pair again: taken.
    write_pair(dir.path(), &replacement, &replacement);
    let outcome = proxy.reload();
    assert!(outcome.contains("reloaded"), "{outcome}");
    let mut conn = handshake(port, &client, NAME).unwrap();
    assert_eq!(served(&conn, &all), Some(3));
    get_ok(&mut conn);
    get_ok(&mut open);
}
