//! The DNS-01 challenge against a real CA and a real DNS server: Pebble (`-strict`) validates
//! by reading `_acme-challenge` TXT records from BIND 9, to which Rampart adds them with
//! dynamic updates signed with a TSIG key. A wildcard and a plain name (DNS-01 chosen) are
//! issued and verified by a client; the records are gone afterwards; a wrong secret is a clear
//! error in the log, and everything else keeps working.

use crate::common;

use common::dns::DnsServer;
use common::pebble::{get_verified, Pebble};
use common::tls::{handshake, ClientOpts};
use common::{free_port, write_file, Rampart};

/// The TSIG key BIND knows (hmac-sha256, 32 bytes in base64).
const KEY_NAME: &str = "rampart-acme";
const SECRET: &str = "3q2+7wABAgMEBQYHCAkKCwwNDg8QERITFBUWFxgZGhs=";
/// Another secret of the same length: BIND refuses what it signs.
const WRONG_SECRET: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

/// `[acme]` with `[acme.dns01]` (the secret in a file, as `tsig-keygen` writes it), a plain
/// HTTP listener on `http` and a TLS one on `https` obtaining `names`.
fn config(
    dir: &std::path::Path,
    pebble: &Pebble,
    dns: &DnsServer,
    (http, https): (u16, u16),
    challenge: &str,
    secret: &str,
    names: &str,
) -> String {
    write_file(
        dir,
        "acme.key",
        &format!("key \"{KEY_NAME}\" {{\n\talgorithm hmac-sha256;\n\tsecret \"{secret}\";\n}};\n"),
    );
    let config = format!(
        "[acme]\ndirectory = \"{}\"\nemail = \"ops@fleet.test\"\nca = \"{}\"\nstorage = \"acme\"\n{challenge}\n\
         [acme.dns01]\nserver = \"127.0.0.1:{}\"\nkey_name = \"{KEY_NAME}\"\nkey_secret_file = \"acme.key\"\n\n\
         [listeners.plain]\nbind = \"127.0.0.1:{http}\"\nprotocol = \"http\"\n\n\
         [[listeners.plain.routes]]\nrespond = {{ status = 200, body = \"plain\" }}\n\n\
         [listeners.secure]\nbind = \"127.0.0.1:{https}\"\nprotocol = \"http\"\n\n\
         [listeners.secure.tls]\nacme = [{names}]\n\n\
         [[listeners.secure.routes]]\nrespond = {{ status = 200, body = \"secure\" }}\n",
        pebble.directory(),
        pebble.api_ca.display(),
        dns.port,
    );
    write_file(dir, "acme.toml", &config)
}

/// `GET /` over plain HTTP: the status.
fn get_plain(port: u16) -> u16 {
    let mut plain = common::connect(port);
    let (status, _, _) = common::http::send(&mut plain, b"GET / HTTP/1.1\r\nHost: plain.fleet.test\r\n\r\n");
    status
}

#[test]
fn dns_01_issues_a_wildcard_and_a_chosen_plain_name_then_withdraws_the_records() {
    let dns = DnsServer::start_with_key("", KEY_NAME, SECRET);
    let (http, https) = (free_port(), free_port());
    // Pebble's HTTP-01 port is one nothing listens on: only DNS-01 can succeed.
    let pebble = Pebble::start(free_port(), https, &dns, 0);
    let dir = tempfile::tempdir().unwrap();
    let path = config(
        dir.path(),
        &pebble,
        &dns,
        (http, https),
        "challenge = \"dns-01\"",
        SECRET,
        "\"*.w.fleet.test\", \"p.fleet.test\"",
    );
    let mut proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    let issued = [
        proxy.wait_for("certificate issued"),
        proxy.wait_for("certificate issued"),
    ]
    .join("\n");
    assert!(
        issued.contains("*.w.fleet.test") && issued.contains("p.fleet.test"),
        "{issued}"
    );
    let log = proxy.log.join("\n");
    assert!(
        log.contains("DNS-01 record _acme-challenge.w.fleet.test. added"),
        "{log}"
    );
    assert!(
        log.contains("DNS-01 record _acme-challenge.p.fleet.test. added"),
        "{log}"
    );

    let root = pebble.issuing_root();
    assert_eq!(get_verified(https, &root, "x.w.fleet.test"), "secure");
    assert_eq!(get_verified(https, &root, "other.w.fleet.test"), "secure");
    assert_eq!(get_verified(https, &root, "p.fleet.test"), "secure");
    // A wildcard covers one label only.
    assert!(handshake(https, &ClientOpts::with_roots(&root).build(), "a.b.w.fleet.test").is_err());

    // Each record was withdrawn before its order was finalized, so before "certificate issued".
    assert!(
        log.contains("DNS-01 record _acme-challenge.w.fleet.test. withdrawn"),
        "{log}"
    );
    assert!(
        log.contains("DNS-01 record _acme-challenge.p.fleet.test. withdrawn"),
        "{log}"
    );
    assert_eq!(dns.txt("_acme-challenge.w.fleet.test"), Vec::<String>::new());
    assert_eq!(dns.txt("_acme-challenge.p.fleet.test"), Vec::<String>::new());
    // The updates were signed: BIND took them with the key (it refuses unsigned ones).
    assert!(dns.log().contains(&format!("signer \"{KEY_NAME}\"")), "{}", dns.log());
    proxy.stop();
    assert!(
        dir.path().join("acme/certs/_wildcard.w.fleet.test.pem").exists(),
        "the wildcard's certificate is kept under a file name without `*`"
    );
}

#[test]
fn a_wrong_tsig_secret_is_a_clear_error_and_disturbs_nothing_else() {
    let dns = DnsServer::start_with_key("a 60 IN A 127.0.0.1", KEY_NAME, SECRET);
    let (http, https) = (free_port(), free_port());
    let pebble = Pebble::start(http, https, &dns, 0);
    let dir = tempfile::tempdir().unwrap();
    // HTTP-01 (the default) for the plain name, DNS-01 for the wildcard, whose updates BIND
    // refuses.
    let path = config(
        dir.path(),
        &pebble,
        &dns,
        (http, https),
        "",
        WRONG_SECRET,
        "\"*.w.fleet.test\", \"a.fleet.test\"",
    );
    let mut proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    // The line that says how the order ended (after the one that says it started).
    let refused = proxy.wait_for("trying again");
    assert!(refused.contains("acme: *.w.fleet.test: "), "{refused}");
    assert!(
        refused.contains("BADSIG") && refused.contains(&format!("is the secret of key `{KEY_NAME}`")),
        "{refused}"
    );
    assert!(refused.contains("trying again"), "{refused}");
    // The other name is issued by HTTP-01 all the same, and the listeners serve.
    let issued = proxy.wait_for("certificate issued");
    assert!(issued.contains("a.fleet.test"), "{issued}");
    let root = pebble.issuing_root();
    assert_eq!(get_verified(https, &root, "a.fleet.test"), "secure");
    assert_eq!(get_plain(http), 200);
    assert_eq!(dns.txt("_acme-challenge.w.fleet.test"), Vec::<String>::new());
    assert_eq!(proxy.stop(), 0);
}
