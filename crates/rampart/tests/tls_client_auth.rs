//! Client certificates on a TLS listener: required, optional, missing, from another CA; the
//! verified certificate forwarded upstream in a header, and that header never taken from clients.

use crate::common;

use std::path::Path;

use common::http::{HttpBackend, Reply};
use common::tls::*;
use common::*;

struct Pki {
    server_ca: Ca,
    /// `client.example.com`, O=Rampart Test, URI SAN, issued by `client_ca`.
    client: Issued,
    /// The same subject from a CA the listener does not trust.
    stranger: Issued,
    listener_tls: String,
}

const CLIENT_URI: &str = "spiffe://rampart.test/client";

fn pki(dir: &Path, auth: &str) -> Pki {
    let server_ca = Ca::new("Rampart Server CA");
    let client_ca = Ca::new("Rampart Client CA");
    let other_ca = Ca::new("Someone Else's CA");
    let server = server_ca.issue(&CertSpec::new(&["secure.example.com"]));
    let client_spec = CertSpec::new(&["client.example.com"])
        .subject("client.example.com", "Rampart Test")
        .uri(CLIENT_URI);
    let client = client_ca.issue(&client_spec);
    let stranger = other_ca.issue(&client_spec);
    let pair = server.write(dir, "server");
    let ca_path = client_ca.write(dir, "client-ca.pem");
    let listener_tls = format!(
        "{}\nclient_ca = \"{ca_path}\"\n{auth}\nforward_client_cert = \"x-client-cert\"",
        certificates(&[pair])
    );
    Pki {
        server_ca,
        client,
        stranger,
        listener_tls,
    }
}

const NAME: &str = "secure.example.com";

/// A request on a fresh connection with `config`: the response, or the error (at the handshake
/// or, in TLS 1.3 where the server judges the client's certificate after the client finished,
/// at the first read).
fn try_request(port: u16, config: &std::sync::Arc<rustls::ClientConfig>, raw: &[u8]) -> Result<Response, String> {
    let mut conn = handshake(port, config, NAME).map_err(|e| format!("handshake: {e}"))?;
    request(&mut conn, raw).map_err(|e| format!("request: {e} ({:?})", rustls_error(&e)))
}

fn forwarded_values(head: &str) -> Vec<String> {
    head.split("\r\n")
        .filter_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("x-client-cert")
                .then(|| value.trim().to_string())
        })
        .collect()
}

fn assert_forwarded_cert(head: &str) {
    let values = forwarded_values(head);
    assert_eq!(values.len(), 1, "one x-client-cert expected: {head}");
    let value = &values[0];
    assert!(value.starts_with("Subject=\""), "{value}");
    assert!(value.contains("CN=client.example.com"), "{value}");
    assert!(value.contains("O=Rampart Test"), "{value}");
    assert!(value.contains("DNS=client.example.com"), "{value}");
    assert!(value.contains(&format!("URI={CLIENT_URI}")), "{value}");
    assert!(!value.contains("forged"), "{value}");
}

#[test]
fn a_required_client_certificate_is_verified_and_forwarded() {
    let backend = HttpBackend::start(Reply::Echo);
    let dir = tempfile::tempdir().unwrap();
    let p = pki(dir.path(), "client_auth = \"required\"");
    let port = free_port();
    let (_proxy, _) = start_config(
        dir.path(),
        &https_config(port, &backend.target(), "", &p.listener_tls),
        1,
    );

    for opts in [
        ClientOpts::new(&p.server_ca).tls13_only(),
        ClientOpts::new(&p.server_ca).tls12_only(),
    ] {
        let with_cert = opts.client_cert(&p.client).build();
        let raw = format!("GET /me HTTP/1.1\r\nHost: {NAME}\r\nX-Client-Cert: forged\r\n\r\n");
        let response = try_request(port, &with_cert, raw.as_bytes()).expect("a trusted client certificate");
        assert_eq!(response.status, 200);
        // The client's own header is gone; ours carries the verified certificate.
        assert_forwarded_cert(&backend.next_head());
    }

    // No certificate, or one from a CA the listener does not trust: refused, nothing upstream.
    for (what, opts) in [
        ("no certificate, TLS 1.3", ClientOpts::new(&p.server_ca).tls13_only()),
        ("no certificate, TLS 1.2", ClientOpts::new(&p.server_ca).tls12_only()),
        (
            "another CA's certificate, TLS 1.3",
            ClientOpts::new(&p.server_ca).tls13_only().client_cert(&p.stranger),
        ),
        (
            "another CA's certificate, TLS 1.2",
            ClientOpts::new(&p.server_ca).tls12_only().client_cert(&p.stranger),
        ),
    ] {
        let outcome = try_request(port, &opts.build(), &get_host("/", NAME));
        assert!(outcome.is_err(), "{what}: served: {outcome:?}");
    }
    assert!(
        backend.heads.try_recv().is_err(),
        "a refused client's request reached the upstream"
    );
}

#[test]
fn client_auth_defaults_to_required_when_a_client_ca_is_set() {
    let backend = HttpBackend::start(Reply::Echo);
    let dir = tempfile::tempdir().unwrap();
    let p = pki(dir.path(), "");
    let port = free_port();
    let (_proxy, _) = start_config(
        dir.path(),
        &https_config(port, &backend.target(), "", &p.listener_tls),
        1,
    );
    let without = ClientOpts::new(&p.server_ca).build();
    let outcome = try_request(port, &without, &get_host("/", NAME));
    assert!(outcome.is_err(), "served without a certificate: {outcome:?}");
    let with_cert = ClientOpts::new(&p.server_ca).client_cert(&p.client).build();
    assert_eq!(try_request(port, &with_cert, &get_host("/", NAME)).unwrap().status, 200);
}

#[test]
fn an_optional_client_certificate_is_forwarded_when_given_and_a_forged_header_never_passes() {
    let backend = HttpBackend::start(Reply::Echo);
    let dir = tempfile::tempdir().unwrap();
    let p = pki(dir.path(), "client_auth = \"optional\"");
    let port = free_port();
    let (_proxy, _) = start_config(
        dir.path(),
        &https_config(port, &backend.target(), "", &p.listener_tls),
        1,
    );
    let forged = format!(
        "GET / HTTP/1.1\r\nHost: {NAME}\r\nX-Client-Cert: Subject=\"CN=forged\";DNS=forged.example\r\n\
         x-client-cert: forged-again\r\n\r\n"
    );

    // Without a certificate: served, and no client-cert header at all.
    let anonymous = ClientOpts::new(&p.server_ca).build();
    let response = try_request(port, &anonymous, forged.as_bytes()).expect("no certificate is fine when optional");
    assert_eq!(response.status, 200);
    let head = backend.next_head();
    assert!(forwarded_values(&head).is_empty(), "{head}");
    assert!(!head.contains("forged"), "{head}");

    // With a trusted one: forwarded, the forged ones removed.
    let with_cert = ClientOpts::new(&p.server_ca).client_cert(&p.client).build();
    let response = try_request(port, &with_cert, forged.as_bytes()).expect("a trusted certificate");
    assert_eq!(response.status, 200);
    assert_forwarded_cert(&backend.next_head());

    // One that does not verify is still refused.
    let stranger = ClientOpts::new(&p.server_ca).client_cert(&p.stranger).build();
    let outcome = try_request(port, &stranger, &get_host("/", NAME));
    assert!(outcome.is_err(), "an untrusted certificate was accepted: {outcome:?}");
    assert!(backend.heads.try_recv().is_err());
}

#[test]
fn without_forward_client_cert_no_header_is_added() {
    let backend = HttpBackend::start(Reply::Echo);
    let dir = tempfile::tempdir().unwrap();
    let p = pki(dir.path(), "client_auth = \"optional\"");
    let tls = p.listener_tls.replace("forward_client_cert = \"x-client-cert\"", "");
    let port = free_port();
    let (_proxy, _) = start_config(dir.path(), &https_config(port, &backend.target(), "", &tls), 1);
    let with_cert = ClientOpts::new(&p.server_ca).client_cert(&p.client).build();
    let response = try_request(port, &with_cert, &get_host("/", NAME)).unwrap();
    assert_eq!(response.status, 200);
    let head = backend.next_head();
    assert!(forwarded_values(&head).is_empty(), "forwarded although off: {head}");
}
