//! TLS termination on TCP listeners: the `tcp` command line with a certificate, plain bytes to
//! the target, no ALPN, and the TLS fields of session records.

use crate::common;

use std::io::{BufRead, BufReader, Write};

use common::tls::*;
use common::*;

const NAME: &str = "tcp.example.com";

#[test]
fn the_tcp_command_line_terminates_tls_and_relays_plain_bytes() {
    let backend = Backend::start("plain-target", Behavior::TagEcho);
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("Rampart Test CA");
    let cert = ca.issue(&CertSpec::new(&[NAME]));
    let (cert_path, key_path) = cert.write(dir.path(), "tcp");
    let sessions = dir.path().join("sessions.jsonl");
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let target = backend.target();
    let sessions_arg = sessions.display().to_string();
    let _proxy = Rampart::start(
        dir.path(),
        &[
            "tcp",
            "--listen",
            &listen,
            "--to",
            &target,
            "--tls-cert",
            &cert_path,
            "--tls-key",
            &key_path,
            "--workers",
            "1",
            "--session-log",
            &sessions_arg,
        ],
    );
    // A client offering ALPN gets none: TCP listeners have no default ALPN.
    let client = ClientOpts::new(&ca).tls13_only().alpn(&["http/1.1"]).build();
    let conn = handshake(port, &client, NAME).expect("handshake");
    assert_eq!(served(&conn, &[&cert]), Some(0));
    assert_eq!(conn.conn.alpn_protocol(), None);
    let suite = suite_name(&conn);
    let mut reader = BufReader::new(conn);
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    assert_eq!(line, "plain-target\n");
    for msg in ["hello over tls\n", "and again\n"] {
        reader.get_mut().write_all(msg.as_bytes()).unwrap();
        line.clear();
        reader.read_line(&mut line).unwrap();
        assert_eq!(line, msg);
    }
    let mut conn = reader.into_inner();
    conn.conn.send_close_notify();
    conn.flush().unwrap();
    drop(conn);

    let lines = log_lines_once(&sessions, "the session is recorded", |l| l.contains("tls_version"));
    let record = lines.iter().find(|l| l.contains("tls_version")).unwrap();
    assert!(record.contains("\"tls_version\":\"TLSv1.3\""), "{record}");
    assert!(record.contains(&format!("\"tls_cipher\":\"{suite}\"")), "{record}");
    assert!(record.contains(&format!("\"tls_sni\":\"{NAME}\"")), "{record}");
    assert!(record.contains("\"tls_alpn\":null"), "{record}");
}

#[test]
fn a_tcp_listener_from_the_config_file_terminates_tls_with_the_alpn_it_is_given() {
    let backend = Backend::start("cfg-target", Behavior::TagEcho);
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("Rampart Test CA");
    let cert = ca.issue(&CertSpec::new(&[NAME]).rsa());
    let pair = cert.write(dir.path(), "tcp");
    let sessions = dir.path().join("sessions.jsonl");
    let port = free_port();
    let cfg = format!(
        "[global]\nsession_log = \"{}\"\n\n[listeners.db]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"tcp\"\n\
         upstream = \"db\"\n\n[listeners.db.tls]\n{}\nalpn = [\"postgresql\"]\n\n\
         [upstreams.db]\ntargets = [\"{}\"]\n",
        sessions.display(),
        certificates(&[pair]),
        backend.target()
    );
    let (_proxy, _) = start_config(dir.path(), &cfg, 1);
    let client = ClientOpts::new(&ca).tls12_only().alpn(&["postgresql"]).build();
    let conn = handshake(port, &client, NAME).expect("handshake");
    assert_eq!(conn.conn.alpn_protocol(), Some(&b"postgresql"[..]));
    let mut reader = BufReader::new(conn);
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    assert_eq!(line, "cfg-target\n");
    drop(reader);
    let lines = log_lines_once(&sessions, "the session is recorded", |l| l.contains("tls_version"));
    let record = lines.iter().find(|l| l.contains("tls_version")).unwrap();
    assert!(record.contains("\"tls_version\":\"TLSv1.2\""), "{record}");
    assert!(record.contains("\"tls_alpn\":\"postgresql\""), "{record}");
    assert!(record.contains("\"listener\":\"db\""), "{record}");
}
