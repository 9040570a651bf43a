//! Loading certificates: names for SNI, key/certificate pairs, dates, and the places errors point at.

use std::path::Path;

use rcgen::{CertificateParams, KeyPair};
use time::{Duration, OffsetDateTime};

use crate::compile::{compile_toml, LiveState};

/// Writes a self-signed certificate for `names` valid from `from` days to `to` days from now, and
/// its key, as `stem.pem` and `stem.key`.
fn cert(dir: &Path, stem: &str, names: &[&str], (from, to): (i64, i64)) -> KeyPair {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
    params.not_before = OffsetDateTime::now_utc() + Duration::days(from);
    params.not_after = OffsetDateTime::now_utc() + Duration::days(to);
    let cert = params.self_signed(&key).unwrap();
    std::fs::write(dir.join(format!("{stem}.pem")), cert.pem()).unwrap();
    std::fs::write(dir.join(format!("{stem}.key")), key.serialize_pem()).unwrap();
    key
}

fn config(dir: &Path, tls: &str) -> String {
    let path = dir.join("rampart.toml");
    let text = format!(
        "[listeners.web]\nbind = \"127.0.0.1:8443\"\nprotocol = \"http\"\nupstream = \"app\"\n\n\
         [listeners.web.tls]\n{tls}\n\n[upstreams.app]\ntargets = [\"127.0.0.1:3000\"]\n"
    );
    std::fs::write(&path, &text).unwrap();
    path.display().to_string()
}

fn load(path: &str) -> Result<crate::Compiled, Vec<String>> {
    let text = std::fs::read_to_string(path).unwrap();
    compile_toml(path, &text, &mut LiveState::default()).map_err(|e| e.0.iter().map(ToString::to_string).collect())
}

#[test]
fn certificates_are_found_relative_to_the_config_and_served_by_name() {
    let dir = tempfile::tempdir().unwrap();
    cert(dir.path(), "a", &["a.example.com", "*.apps.example.com"], (-1, 90));
    cert(dir.path(), "b", &["b.example.com"], (-1, 90));
    let path = config(
        dir.path(),
        "certificates = [{ cert = \"a.pem\", key = \"a.key\" }, { cert = \"b.pem\", key = \"b.key\" }]\n\
         default_certificate = \"b.example.com\"",
    );
    let compiled = load(&path).unwrap();
    assert!(compiled.warnings.is_empty(), "{:?}", compiled.warnings);
    let tls = compiled.snapshot.listeners[0].tls.as_ref().unwrap();
    let set = &tls.certificates;
    assert!(set.knows(Some("a.example.com")) && set.knows(Some("x.apps.example.com")));
    assert!(!set.knows(Some("c.example.com")));
    // The default is the named certificate, not the first entry.
    let b = set.named("b.example.com").unwrap()[0].clone();
    assert!(std::sync::Arc::ptr_eq(
        &set.candidates(Some("c.example.com"), false)[0],
        &b
    ));
    // An HTTP listener offers HTTP/2 first.
    assert_eq!(tls.config.alpn_protocols, vec![b"h2".to_vec(), b"http/1.1".to_vec()]);
}

#[test]
fn a_mismatched_or_missing_file_points_at_its_key() {
    let dir = tempfile::tempdir().unwrap();
    cert(dir.path(), "a", &["a.example.com"], (-1, 90));
    cert(dir.path(), "b", &["b.example.com"], (-1, 90));
    let path = config(
        dir.path(),
        "certificates = [\n  { cert = \"a.pem\", key = \"b.key\" },\n  { cert = \"b.pem\", key = \"unreadable.key\" },\n  \
         { cert = \"none.pem\", key = \"a.key\" },\n]",
    );
    let errors = load(&path).unwrap_err();
    assert_eq!(errors.len(), 3, "{errors:?}");
    assert!(
        errors[0].starts_with(&format!("{path}:8:27: key b.key does not match the certificate a.pem")),
        "{errors:?}"
    );
    assert!(
        errors[1].starts_with(&format!("{path}:9:27: unreadable.key: cannot read")),
        "{errors:?}"
    );
    assert!(
        errors[2].starts_with(&format!("{path}:10:12: none.pem: cannot read")),
        "{errors:?}"
    );
}

#[test]
fn an_expired_certificate_is_a_loud_warning_and_is_served() {
    let dir = tempfile::tempdir().unwrap();
    cert(dir.path(), "a", &["a.example.com"], (-1, 90));
    cert(dir.path(), "old", &["old.example.com"], (-30, -1));
    let path = config(
        dir.path(),
        "certificates = [{ cert = \"a.pem\", key = \"a.key\" }, { cert = \"old.pem\", key = \"old.key\" }]",
    );
    let compiled = load(&path).unwrap();
    let warnings: Vec<String> = compiled.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with(&format!("{path}:7:61: certificate old.pem EXPIRED on ")),
        "{warnings:?}"
    );
    let tls = compiled.snapshot.listeners[0].tls.as_ref().unwrap();
    assert!(tls.certificates.knows(Some("old.example.com")));
    let info: Vec<(&str, bool)> = tls
        .certificate_info
        .iter()
        .map(|c| (c.file.as_str(), c.expired()))
        .collect();
    assert_eq!(info, [("a.pem", false), ("old.pem", true)]);
}

#[test]
fn bad_tls_settings_name_their_place() {
    let dir = tempfile::tempdir().unwrap();
    cert(dir.path(), "a", &["a.example.com"], (-1, 90));
    let certs = "certificates = [{ cert = \"a.pem\", key = \"a.key\" }]";
    for (setting, want) in [
        ("min_version = \"1.1\"", "min_version `1.1` is not supported"),
        (
            "default_certificate = \"z.example.com\"",
            "default_certificate `z.example.com` is not a name of any certificate (they serve: a.example.com)",
        ),
        ("client_auth = \"optional\"", "client_auth needs client_ca"),
        (
            "client_auth = \"sometimes\"\nclient_ca = \"a.pem\"",
            "client_auth `sometimes` must be",
        ),
        ("alpn = [\"h2\"]", "ALPN `h2` needs HTTP/2"),
        (
            "forward_client_cert = \"bad header\"",
            "`bad header` is not a header name",
        ),
    ] {
        let path = config(dir.path(), &format!("{certs}\n{setting}"));
        let errors = load(&path).unwrap_err();
        assert!(
            errors.len() == 1 && errors[0].starts_with(&format!("{path}:8:")) && errors[0].contains(want),
            "{setting}: {errors:?}"
        );
    }
}

#[test]
fn upstream_tls_names_targets_and_warns_when_not_verifying() {
    let dir = tempfile::tempdir().unwrap();
    cert(dir.path(), "ca", &["backend.internal"], (-1, 90));
    let text = "[listeners.web]\nbind = \"127.0.0.1:8080\"\nprotocol = \"http\"\nupstream = \"app\"\n\n\
                [upstreams.app]\ntargets = [\"localhost:3000\", \"127.0.0.1:3001\"]\n\
                [upstreams.app.tls]\nca = \"ca.pem\"\n\n\
                [upstreams.other]\ntargets = [\"127.0.0.1:3002\"]\n[upstreams.other.tls]\nverify = false\nsni = \"backend.internal\"\n";
    let path = dir.path().join("rampart.toml");
    std::fs::write(&path, text).unwrap();
    let compiled = load(&path.display().to_string()).unwrap();
    let app = &compiled.snapshot.upstreams[0];
    let names: Vec<String> = app
        .targets
        .iter()
        .map(|t| format!("{:?}", t.tls_name.as_ref().unwrap()))
        .collect();
    assert_eq!(
        names,
        ["DnsName(\"localhost\")", "IpAddress(V4(Ipv4Addr([127, 0, 0, 1])))"]
    );
    let other = &compiled.snapshot.upstreams[1];
    assert!(format!("{:?}", other.targets[0].tls_name).contains("backend.internal"));
    assert_eq!(compiled.warnings.len(), 1);
    assert!(compiled.warnings[0].message.contains("verify = false"));
}
