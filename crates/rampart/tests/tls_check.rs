//! `rampart check` loads every certificate and key: a mismatched pair or a missing file fails with
//! the place of the config key; an expired certificate, or one that expires within 30 days, is a
//! warning there.

use crate::common;

use std::path::Path;

use common::tls::*;
use common::*;

fn check(dir: &Path, cfg: &str) -> (i32, String, String) {
    run_rampart(dir, &["check", "-c", cfg])
}

/// A config with one TLS listener whose one certificate is (`cert`, `key`); writes it and returns
/// its path and the lines of its `cert = ` and `key = ` keys.
fn write_config(dir: &Path, cert: &str, key: &str) -> (String, usize, usize) {
    let cfg = format!(
        "[listeners.web]\nbind = \"127.0.0.1:{}\"\nprotocol = \"http\"\nupstream = \"app\"\n\n\
         [listeners.web.tls]\nmin_version = \"1.2\"\n\n\
         [[listeners.web.tls.certificates]]\ncert = \"{cert}\"\nkey = \"{key}\"\n\n\
         [upstreams.app]\ntargets = [\"127.0.0.1:1\"]\n",
        free_port()
    );
    let line_of = |prefix: &str| cfg.lines().position(|l| l.starts_with(prefix)).unwrap() + 1;
    let lines = (line_of("cert = "), line_of("key = "));
    (write_file(dir, "rampart.toml", &cfg), lines.0, lines.1)
}

/// Whether `text` has `PATH:LINE:COL:` for one of `lines`.
fn has_location(text: &str, path: &str, lines: &[usize]) -> bool {
    lines.iter().any(|line| {
        let prefix = format!("{path}:{line}:");
        text.match_indices(&prefix).any(|(at, _)| {
            let rest = &text[at + prefix.len()..];
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            digits > 0 && rest[digits..].starts_with(':')
        })
    })
}

#[test]
fn check_accepts_a_good_pair_without_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("Rampart Test CA");
    let (cert, key) = ca.issue(&CertSpec::new(&["ok.example.com"])).write(dir.path(), "ok");
    let (path, _, _) = write_config(dir.path(), &cert, &key);
    let (code, out, err) = check(dir.path(), &path);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(": ok:"), "{out}");
    assert!(!format!("{out}{err}").contains("expires"), "{out}{err}");
}

#[test]
fn check_refuses_a_key_that_does_not_match_its_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("Rampart Test CA");
    let (cert, _) = ca.issue(&CertSpec::new(&["a.example.com"])).write(dir.path(), "a");
    let (_, key) = ca.issue(&CertSpec::new(&["a.example.com"])).write(dir.path(), "b");
    let (path, cert_line, key_line) = write_config(dir.path(), &cert, &key);
    let (code, out, err) = check(dir.path(), &path);
    assert_ne!(code, 0, "{out}{err}");
    assert!(
        has_location(&err, &path, &[cert_line, key_line]),
        "no {path}:{cert_line} or {key_line}:COL: in {err}"
    );
    assert!(err.contains("does not match"), "{err}");

    // An RSA key with an ECDSA certificate is a mismatch too.
    let (_, rsa_key) = ca
        .issue(&CertSpec::new(&["a.example.com"]).rsa())
        .write(dir.path(), "rsa");
    let (path, cert_line, key_line) = write_config(dir.path(), &cert, &rsa_key);
    let (code, _, err) = check(dir.path(), &path);
    assert_ne!(code, 0, "{err}");
    assert!(has_location(&err, &path, &[cert_line, key_line]), "{err}");
    assert!(err.contains("does not match"), "{err}");
}

#[test]
fn check_warns_about_an_expired_certificate_and_refuses_missing_files() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("Rampart Test CA");
    let (cert, key) = ca
        .issue(&CertSpec::new(&["old.example.com"]).valid_days(-90, -2))
        .write(dir.path(), "old");
    let (path, cert_line, _) = write_config(dir.path(), &cert, &key);
    let (code, out, err) = check(dir.path(), &path);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        has_location(&err, &path, &[cert_line]),
        "no {path}:{cert_line}:COL: in {err}"
    );
    assert!(err.contains("warning: certificate") && err.contains("EXPIRED"), "{err}");

    let (cert, _) = ca.issue(&CertSpec::new(&["new.example.com"])).write(dir.path(), "new");
    let missing_key = dir.path().join("nope.key").display().to_string();
    let (path, _, key_line) = write_config(dir.path(), &cert, &missing_key);
    let (code, _, err) = check(dir.path(), &path);
    assert_ne!(code, 0, "{err}");
    assert!(
        has_location(&err, &path, &[key_line]),
        "no {path}:{key_line}:COL: in {err}"
    );
}

#[test]
fn check_warns_about_a_certificate_expiring_within_30_days() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("Rampart Test CA");
    let (cert, key) = ca
        .issue(&CertSpec::new(&["soon.example.com"]).valid_days(-300, 10))
        .write(dir.path(), "soon");
    let (path, _, _) = write_config(dir.path(), &cert, &key);
    let (code, out, err) = check(dir.path(), &path);
    assert_eq!(code, 0, "{out}{err}");
    let all = format!("{out}{err}");
    assert!(
        all.lines().any(|l| l.contains("expires")),
        "no warning line about the expiry: {all}"
    );
}

#[test]
fn check_refuses_an_upstream_client_key_that_does_not_match() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("Rampart Test CA");
    let (cert, _) = ca
        .issue(&CertSpec::new(&["client.example.com"]))
        .write(dir.path(), "c1");
    let (_, key) = ca
        .issue(&CertSpec::new(&["client.example.com"]))
        .write(dir.path(), "c2");
    let cfg = format!(
        "[listeners.web]\nbind = \"127.0.0.1:{}\"\nprotocol = \"http\"\nupstream = \"app\"\n\n\
         [upstreams.app]\ntargets = [\"127.0.0.1:1\"]\n\n[upstreams.app.tls]\nverify = true\n\
         cert = \"{cert}\"\nkey = \"{key}\"\n",
        free_port()
    );
    let line_of = |prefix: &str| cfg.lines().position(|l| l.starts_with(prefix)).unwrap() + 1;
    let (cert_line, key_line) = (line_of("cert = "), line_of("key = "));
    let path = write_file(dir.path(), "rampart.toml", &cfg);
    let (code, out, err) = check(dir.path(), &path);
    assert_ne!(code, 0, "{out}{err}");
    assert!(has_location(&err, &path, &[cert_line, key_line]), "{err}");
    assert!(err.contains("does not match"), "{err}");
}
