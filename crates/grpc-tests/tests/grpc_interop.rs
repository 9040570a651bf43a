//! grpc-go's interop suite through Rampart: the suite's own client calling the suite's own server
//! (google.golang.org/grpc/interop, built by `scripts/grpc-interop`), every case that needs no
//! cloud credentials or second server, with Rampart between them. Once in clear (h2c toward both),
//! once over TLS on both sides (ALPN h2 from the client, `protocol = "h2"` to the server): both of
//! Rampart's HTTP/2 sides, against a gRPC implementation that is not Rust's.

use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::common::tls::TestCa;
use crate::common::{free_port, grpc_config, write_file, Rampart};

/// The suite's cases that need nothing but a client and a server.
const CASES: [&str; 14] = [
    "empty_unary",
    "large_unary",
    "client_streaming",
    "server_streaming",
    "ping_pong",
    "empty_stream",
    "timeout_on_sleeping_server",
    "cancel_after_begin",
    "cancel_after_first_response",
    "status_code_and_message",
    "special_status_message",
    "custom_metadata",
    "unimplemented_method",
    "unimplemented_service",
];

/// The interop server and client binaries (built on first use, once per test process).
fn binaries() -> (String, String) {
    static PATHS: OnceLock<(String, String)> = OnceLock::new();
    PATHS.get_or_init(build_binaries).clone()
}

fn build_binaries() -> (String, String) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/grpc-interop");
    let out = Command::new(script).output().expect("scripts/grpc-interop runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let paths = String::from_utf8(out.stdout).unwrap();
    let mut lines = paths.lines().map(str::to_string);
    (lines.next().unwrap(), lines.next().unwrap())
}

/// The interop server, killed on drop.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the interop server on a free port (with `tls`: its certificate and key files) and
/// waits until it accepts connections.
fn start_server(bin: &str, tls: Option<(&str, &str)>) -> (Server, u16) {
    let port = free_port();
    let mut cmd = Command::new(bin);
    cmd.arg(format!("-port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if let Some((cert, key)) = tls {
        cmd.args([
            "-use_tls=true",
            &format!("-tls_cert_file={cert}"),
            &format!("-tls_key_file={key}"),
        ]);
    }
    let server = Server(cmd.spawn().expect("start the interop server"));
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "the interop server never listened on {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
    (server, port)
}

/// Runs every case with the interop client against Rampart's `port` (`ca`: over TLS, verified
/// against that CA for `localhost`); returns the cases that failed, with the client's words.
fn run_cases(client: &str, port: u16, ca: Option<&str>) -> Vec<String> {
    let mut failed = Vec::new();
    for case in CASES {
        let mut cmd = Command::new(client);
        cmd.args([
            "-server_host=127.0.0.1".to_string(),
            format!("-server_port={port}"),
            format!("-test_case={case}"),
        ]);
        if let Some(ca) = ca {
            // `-use_test_ca` makes the client trust `-ca_file` instead of the system roots.
            cmd.args([
                "-use_tls=true",
                "-use_test_ca=true",
                &format!("-ca_file={ca}"),
                "-server_host_override=localhost",
            ]);
        }
        let out = cmd.output().expect("run the interop client");
        if !out.status.success() {
            failed.push(format!(
                "{case}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    failed
}

#[test]
fn the_interop_suite_passes_through_rampart_in_clear() {
    let (server_bin, client_bin) = binaries();
    let (_server, server_port) = start_server(&server_bin, None);
    let port = free_port();
    let config = grpc_config(
        port,
        &[format!("127.0.0.1:{server_port}")],
        "upstream = \"echo\"",
        "protocol = \"h2c\"",
        "",
    );
    let mut rampart = Rampart::start(&config);
    let failed = run_cases(&client_bin, port, None);
    assert!(failed.is_empty(), "{}\n{}", failed.join("\n"), rampart.log_so_far());
}

#[test]
fn the_interop_suite_passes_through_rampart_over_tls_on_both_sides() {
    let (server_bin, client_bin) = binaries();
    let ca = TestCa::new();
    let dir = tempfile::tempdir().unwrap();
    let leaf = ca.leaf();
    let cert = write_file(dir.path(), "listener.pem", &leaf.cert_pem);
    let key = write_file(dir.path(), "listener.key", &leaf.key_pem);
    let ca_file = write_file(dir.path(), "ca.pem", &ca.cert_pem);
    let (_server, server_port) = start_server(&server_bin, Some((&cert, &key)));
    let port = free_port();
    let tail = "[listeners.grpc.tls]\ncertificates = [{ cert = \"listener.pem\", key = \"listener.key\" }]\n\n\
                [upstreams.echo.tls]\nca = \"ca.pem\"\n";
    let config = grpc_config(
        port,
        &[format!("127.0.0.1:{server_port}")],
        "upstream = \"echo\"",
        "protocol = \"h2\"",
        tail,
    );
    let mut rampart = Rampart::start_in(dir, &config);
    let failed = run_cases(&client_bin, port, Some(&ca_file));
    assert!(failed.is_empty(), "{}\n{}", failed.join("\n"), rampart.log_so_far());
}
