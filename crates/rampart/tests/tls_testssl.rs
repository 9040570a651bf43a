//! testssl.sh against an HTTP TLS listener with an ECDSA and an RSA certificate: no SSL, no TLS
//! 1.0/1.1, no NULL, EXPORT, RC4, 3DES, anonymous or CBC-with-SHA1 suites, and forward secrecy
//! for every suite. `scripts/testssl` installs testssl.sh when it is missing (Debian package).
//! It takes about 20-40 s: testssl probes every cipher per protocol with its own sockets.

use crate::common;

use std::collections::BTreeMap;
use std::process::Command;

use common::http::{HttpBackend, Reply};
use common::tls::*;
use common::Bounded;
use common::*;

/// Every `{ "id": ..., "finding": ... }` in the scan result, whatever section it is in (section
/// names differ between testssl versions: `pfs` in 3.0, `fs` later).
fn findings(json: &serde_json::Value) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let scans = json["scanResult"].as_array().expect("scanResult");
    assert_eq!(scans.len(), 1, "one target scanned");
    for section in scans[0].as_object().unwrap().values() {
        for item in section.as_array().into_iter().flatten() {
            if let (Some(id), Some(finding)) = (item["id"].as_str(), item["finding"].as_str()) {
                out.insert(id.to_string(), finding.to_string());
            }
        }
    }
    out
}

/// What is wrong in `found`, one line per problem.
fn problems(found: &BTreeMap<String, String>) -> Vec<String> {
    let mut bad = Vec::new();
    let mut expect = |id: &str, ok: &dyn Fn(&str) -> bool, want: &str| match found.get(id) {
        Some(f) if ok(f) => {}
        other => bad.push(format!("{id}: {want} expected, got {other:?}")),
    };
    for id in ["SSLv2", "SSLv3", "TLS1", "TLS1_1"] {
        expect(id, &|f| f == "not offered", "not offered");
    }
    expect("TLS1_2", &|f| f.starts_with("offered"), "offered");
    expect("TLS1_3", &|f| f.starts_with("offered"), "offered");
    for id in [
        "cipherlist_NULL",
        "cipherlist_aNULL",
        "cipherlist_EXPORT",
        "cipherlist_LOW",
        "cipherlist_3DES_IDEA",
    ] {
        expect(id, &|f| f == "not offered", "not offered");
    }
    expect(id_or(found, "PFS", "FS"), &|f| f == "offered", "offered");

    // -E: one `cipher-PROTO_xHEX` finding per accepted suite:
    // `TLS 1.2 xc02b ECDHE-ECDSA-AES128-GCM-SHA256 ECDH 253 AESGCM 128 TLS_ECDHE_ECDSA_WITH_...`
    let suites: Vec<&String> = found
        .iter()
        .filter(|(id, _)| id.starts_with("cipher-tls") || id.starts_with("cipher-ssl"))
        .map(|(_, f)| f)
        .collect();
    if suites.is_empty() {
        bad.push("no cipher-per-protocol findings (-E)".into());
    }
    for suite in suites {
        let words: Vec<&str> = suite.split_whitespace().collect();
        let (openssl_name, kx, iana) = (words[3], words[4], *words.last().unwrap());
        let upper = suite.to_ascii_uppercase();
        for weak in [
            "NULL", "EXP", "RC4", "3DES", "DES-CBC3", "_DES_", "ANON", "ADH", "AECDH", "IDEA",
        ] {
            if upper.contains(weak) {
                bad.push(format!("weak suite ({weak}): {suite}"));
            }
        }
        if openssl_name.ends_with("-SHA") || iana.ends_with("_CBC_SHA") {
            bad.push(format!("CBC with SHA-1: {suite}"));
        }
        if !(kx.starts_with("ECDH") || kx == "DH") {
            bad.push(format!("no forward secrecy (key exchange {kx}): {suite}"));
        }
    }
    bad
}

fn id_or<'a>(found: &BTreeMap<String, String>, id: &'a str, fallback: &'a str) -> &'a str {
    if found.contains_key(id) {
        id
    } else {
        fallback
    }
}

#[test]
fn testssl_finds_only_modern_protocols_and_forward_secret_aead_suites() {
    let backend = HttpBackend::start(Reply::Echo);
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("Rampart Test CA");
    let ecdsa = ca.issue(&CertSpec::new(&["testssl.example.com"]));
    let rsa = ca.issue(&CertSpec::new(&["testssl.example.com"]).rsa());
    let pairs = vec![ecdsa.write(dir.path(), "ecdsa"), rsa.write(dir.path(), "rsa")];
    let port = free_port();
    let cfg = https_config(port, &backend.target(), "", &certificates(&pairs));
    let (_proxy, _) = start_config(dir.path(), &cfg, 1);
    // The listener serves TLS before testssl looks at it.
    let client = ClientOpts::new(&ca).build();
    let mut conn = handshake(port, &client, "testssl.example.com").expect("handshake");
    assert_eq!(
        request(&mut conn, &get_host("/", "testssl.example.com"))
            .unwrap()
            .status,
        200
    );

    let out = dir.path().join("testssl.json");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/testssl");
    let run = Command::new(script)
        .arg(format!("127.0.0.1:{port}"))
        .arg(&out)
        .output_within(common::TOOL_WAIT)
        .expect("run scripts/testssl");
    assert!(
        run.status.success(),
        "scripts/testssl failed: {}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).expect("testssl JSON");
    let found = findings(&json);
    let bad = problems(&found);
    assert!(
        bad.is_empty(),
        "testssl findings:\n{}\n\nall: {found:#?}",
        bad.join("\n")
    );
}

/// The checks above flag what they should: run on a scan of a server that offers CBC-SHA1
/// suites and no TLS 1.0, kept as the shape testssl 3.0 writes.
#[test]
fn the_testssl_checks_flag_weak_findings() {
    let mut found = BTreeMap::new();
    for (id, f) in [
        ("SSLv2", "not offered"),
        ("SSLv3", "not offered"),
        ("TLS1", "offered"),
        ("TLS1_1", "not offered"),
        ("TLS1_2", "offered"),
        ("TLS1_3", "offered with final"),
        ("cipherlist_NULL", "not offered"),
        ("cipherlist_aNULL", "not offered"),
        ("cipherlist_EXPORT", "not offered"),
        ("cipherlist_LOW", "not offered"),
        ("cipherlist_3DES_IDEA", "offered"),
        ("PFS", "offered"),
        (
            "cipher-tls1_2_xc02b",
            "TLS 1.2 xc02b ECDHE-ECDSA-AES128-GCM-SHA256 ECDH 253 AESGCM 128 TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
        ),
        (
            "cipher-tls1_2_xc009",
            "TLS 1.2 xc009 ECDHE-ECDSA-AES128-SHA ECDH 253 AES 128 TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
        ),
        (
            "cipher-tls1_2_x9c",
            "TLS 1.2 x9c AES128-GCM-SHA256 RSA AESGCM 128 TLS_RSA_WITH_AES_128_GCM_SHA256",
        ),
    ] {
        found.insert(id.to_string(), f.to_string());
    }
    let bad = problems(&found);
    assert_eq!(bad.len(), 4, "{bad:#?}");
    assert!(bad[0].starts_with("TLS1:"), "{bad:#?}");
    assert!(bad[1].starts_with("cipherlist_3DES_IDEA:"), "{bad:#?}");
    assert!(bad
        .iter()
        .any(|b| b.starts_with("CBC with SHA-1") && b.contains("xc009")));
    assert!(bad
        .iter()
        .any(|b| b.starts_with("no forward secrecy") && b.contains("x9c")));
}
