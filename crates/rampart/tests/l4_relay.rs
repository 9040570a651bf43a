//! The relay: half-close, integrity, idle timeout, PROXY protocol, connection limit, records.

use crate::common;

use std::io::{Read, Write};
use std::net::Shutdown;
use std::thread;
use std::time::{Duration, Instant};

use common::*;

fn tcp_proxy(dir: &std::path::Path, backend: &Backend, extra: &[&str]) -> (Rampart, u16) {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let target = backend.target();
    let mut args = vec!["tcp", "--listen", listen.as_str(), "--to", target.as_str()];
    args.extend_from_slice(extra);
    (Rampart::start(dir, &args), port)
}

#[test]
fn half_close_keeps_the_other_direction_flowing() {
    let backend = Backend::start("rev", Behavior::ReverseOnEof);
    let dir = tempfile::tempdir().unwrap();
    let (_proxy, port) = tcp_proxy(dir.path(), &backend, &[]);
    let mut s = connect(port);
    s.write_all(b"hello, world").unwrap();
    // Our FIN must reach the backend (it answers only at EOF) while we can still read.
    s.shutdown(Shutdown::Write).unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    assert_eq!(answer, "rev\ndlrow ,olleh");
}

/// A simple deterministic byte stream and a checksum over it.
fn pattern(offset: u64, out: &mut [u8]) {
    for (i, b) in out.iter_mut().enumerate() {
        let x = offset + i as u64;
        *b = (x ^ (x >> 8) ^ (x >> 16)).wrapping_mul(31) as u8;
    }
}

#[test]
fn a_hundred_megabytes_each_way_arrive_intact() {
    const TOTAL: u64 = 100 * 1024 * 1024;
    let backend = Backend::start("echo", Behavior::TagEcho);
    let dir = tempfile::tempdir().unwrap();
    let (_proxy, port) = tcp_proxy(dir.path(), &backend, &["--workers", "2"]);
    let mut s = connect(port);
    assert_eq!(read_line(&mut s), "echo");
    let mut writer = s.try_clone().unwrap();
    let sender = thread::spawn(move || {
        let mut sent = 0u64;
        let mut chunk = vec![0u8; 256 * 1024];
        while sent < TOTAL {
            let n = chunk.len().min((TOTAL - sent) as usize);
            pattern(sent, &mut chunk[..n]);
            writer.write_all(&chunk[..n]).unwrap();
            sent += n as u64;
        }
        writer.shutdown(Shutdown::Write).unwrap();
    });
    let (mut received, mut expected, mut got) = (0u64, vec![0u8; 256 * 1024], vec![0u8; 256 * 1024]);
    loop {
        let n = s.read(&mut got).unwrap();
        if n == 0 {
            break;
        }
        pattern(received, &mut expected[..n]);
        assert!(got[..n] == expected[..n], "corrupted bytes near offset {received}");
        received += n as u64;
    }
    sender.join().unwrap();
    assert_eq!(received, TOTAL);
}

#[test]
fn idle_connections_are_closed() {
    let backend = Backend::start("echo", Behavior::TagEcho);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = config(port, &[backend.target()], "idle_timeout = \"300ms\"", "");
    let path = write_file(dir.path(), "r.toml", &cfg);
    let _proxy = Rampart::start(dir.path(), &["run", "-c", &path]);
    let mut s = connect(port);
    assert_eq!(read_line(&mut s), "echo");
    let start = Instant::now();
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    let waited = start.elapsed();
    assert!(waited >= Duration::from_millis(300), "closed after {waited:?}");
    assert!(waited < Duration::from_secs(5), "closed after {waited:?}");
}

#[test]
fn proxy_protocol_is_accepted_from_trusted_clients_and_sent_to_targets() {
    let backend = Backend::start("pp", Behavior::ProxyHeader);
    let dir = tempfile::tempdir().unwrap();
    let (port_v1, port_v2) = (free_port(), free_port());
    let cfg = format!(
        "[listeners.in-v1]\nbind = \"127.0.0.1:{port_v1}\"\nupstream = \"send-v2\"\nproxy_protocol_from = [\"127.0.0.0/8\"]\n\
         [listeners.in-v2]\nbind = \"127.0.0.1:{port_v2}\"\nupstream = \"send-v1\"\nproxy_protocol_from = [\"127.0.0.1\"]\n\
         [upstreams.send-v2]\ntargets = [\"{t}\"]\nsend_proxy_protocol = \"v2\"\n\
         [upstreams.send-v1]\ntargets = [\"{t}\"]\nsend_proxy_protocol = \"v1\"\n",
        t = backend.target()
    );
    let path = write_file(dir.path(), "r.toml", &cfg);
    let _proxy = Rampart::start(dir.path(), &["run", "-c", &path]);

    // v1 in (with payload in the same packet), v2 out.
    let mut s = connect(port_v1);
    s.write_all(b"PROXY TCP4 192.0.2.9 127.0.0.1 4321 80\r\nhello\n")
        .unwrap();
    assert_eq!(read_line(&mut s), "V2 192.0.2.9:4321");
    assert_eq!(read_line(&mut s), "hello");

    // v2 in, v1 out.
    let mut s = connect(port_v2);
    let addresses = rampart_proto::proxy_protocol::ProxyAddresses {
        source: "[2001:db8::7]:5555".parse().unwrap(),
        destination: "[2001:db8::1]:80".parse().unwrap(),
    };
    let mut header = Vec::new();
    rampart_proto::proxy_protocol::encode_v2(&addresses, &mut header);
    s.write_all(&header).unwrap();
    s.write_all(b"after\n").unwrap();
    assert_eq!(read_line(&mut s), "V1 [2001:db8::7]:5555");
    assert_eq!(read_line(&mut s), "after");

    // A trusted client without a header is refused: nothing reaches the backend.
    let mut s = connect(port_v1);
    s.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    assert!(rest.is_empty(), "got {:?}", String::from_utf8_lossy(&rest));
}

#[test]
fn untrusted_clients_are_relayed_as_they_are_and_get_a_header_from_us() {
    let backend = Backend::start("pp", Behavior::ProxyHeader);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = config(
        port,
        &[backend.target()],
        "proxy_protocol_from = [\"10.0.0.0/8\"]",
        "send_proxy_protocol = \"v1\"",
    );
    let path = write_file(dir.path(), "r.toml", &cfg);
    let _proxy = Rampart::start(dir.path(), &["run", "-c", &path]);
    let mut s = connect(port);
    let local = s.local_addr().unwrap();
    s.write_all(b"PROXY TCP4 192.0.2.9 127.0.0.1 4321 80\r\n").unwrap();
    // Our real address is sent; the client's own header line is just payload.
    assert_eq!(read_line(&mut s), format!("V1 {local}"));
    assert_eq!(read_line(&mut s), "PROXY TCP4 192.0.2.9 127.0.0.1 4321 80\r");
}

#[test]
fn connections_past_the_limit_are_closed_at_once_and_recorded() {
    let backend = Backend::start("echo", Behavior::TagEcho);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let log = dir.path().join("sessions.jsonl");
    let cfg = format!(
        "[global]\nsession_log = \"{}\"\n{}",
        log.display(),
        config(port, &[backend.target()], "max_connections = 2", "")
    );
    let path = write_file(dir.path(), "r.toml", &cfg);
    let mut proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "2"]);
    let mut first = connect(port);
    let mut second = connect(port);
    assert_eq!(read_line(&mut first), "echo");
    assert_eq!(read_line(&mut second), "echo");
    let mut third = connect(port);
    let mut rest = Vec::new();
    let _ = third.read_to_end(&mut rest);
    assert!(rest.is_empty(), "the third connection should be closed without data");
    // Closing one frees a place.
    drop(first);
    let deadline = Instant::now() + WAIT;
    loop {
        let mut again = connect(port);
        let mut buf = [0u8; 5];
        if again.read(&mut buf).unwrap_or(0) > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "a place never freed up");
    }
    drop(second);
    assert_eq!(proxy.stop(), 0);
    let records = std::fs::read_to_string(&log).unwrap();
    assert!(
        records.lines().any(|l| l.contains("\"close\":\"connection_limit\"")),
        "{records}"
    );
}

#[test]
fn session_records_have_every_field() {
    let backend = Backend::start("rev", Behavior::ReverseOnEof);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("s.jsonl");
    let log_arg = log.display().to_string();
    let (mut proxy, port) = tcp_proxy(dir.path(), &backend, &["--session-log", &log_arg]);
    let mut s = connect(port);
    let client = s.local_addr().unwrap().to_string();
    s.write_all(b"abcdef").unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).unwrap();
    assert_eq!(answer, b"rev\nfedcba");
    assert_eq!(proxy.stop(), 0);
    let records = std::fs::read_to_string(&log).unwrap();
    let line = records.lines().next().expect("one record");
    for field in [
        format!("\"client\":\"{client}\""),
        "\"listener\":\"default\"".to_string(),
        format!("\"target\":\"{}\"", backend.target()),
        "\"bytes_up\":6".to_string(),
        "\"bytes_down\":10".to_string(),
        "\"close\":\"completed\"".to_string(),
    ] {
        assert!(line.contains(&field), "{field} missing from {line}");
    }
    for ts in ["accepted", "connected", "first_byte_up", "first_byte_down", "closed"] {
        let key = format!("\"{ts}\":\"20");
        assert!(line.contains(&key), "{ts} missing from {line}");
    }
}

/// `run -c` takes `--session-log` when the config names no session log (the file's wins).
#[test]
fn run_takes_the_session_log_from_the_command_line() {
    let backend = Backend::start("echo", Behavior::TagEcho);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let log = dir.path().join("cli.jsonl");
    let log_arg = log.display().to_string();
    let path = write_file(dir.path(), "r.toml", &config(port, &[backend.target()], "", ""));
    let mut proxy = Rampart::start(
        dir.path(),
        &["run", "-c", &path, "--workers", "1", "--session-log", &log_arg],
    );
    assert_eq!(which_backend(port), "echo");
    assert_eq!(proxy.stop(), 0);
    let records = std::fs::read_to_string(&log).unwrap();
    assert!(records.contains("\"listener\":\"main\""), "{records}");
}

/// How the backend of [`one_exchange`] saw its connection end, and the proxy's address on it.
struct BackendSaw {
    end: Result<usize, std::io::ErrorKind>,
    proxy_side: std::net::SocketAddr,
}

/// One request and answer through the proxy to a backend that keeps its side open, then the
/// client ends its connection with a reset (`reset`) or a FIN; returns how the backend saw the
/// proxy's end of the upstream connection.
fn one_exchange(port: u16, backend: &std::net::TcpListener, reset: bool) -> BackendSaw {
    let mut client = connect(port);
    client.write_all(b"hello\n").unwrap();
    let (mut upstream, proxy_side) = backend.accept().unwrap();
    upstream.set_read_timeout(Some(WAIT)).unwrap();
    let mut request = [0u8; 6];
    upstream.read_exact(&mut request).unwrap();
    upstream.write_all(b"world\n").unwrap();
    assert_eq!(read_line(&mut client), "world");
    if reset {
        socket2::SockRef::from(&client)
            .set_linger(Some(Duration::ZERO))
            .unwrap();
    } else {
        client.shutdown(Shutdown::Write).unwrap();
    }
    drop(client);
    // Blocks until the proxy ends the upstream connection one way or the other.
    let end = upstream.read(&mut [0u8; 16]).map_err(|e| e.kind());
    BackendSaw { end, proxy_side }
}

/// A client that resets after its answer has the upstream connection reset too, so no TIME_WAIT
/// is left on the proxy's ephemeral port (under churn those crowd the port space); a client that
/// closes with a FIN still has it passed on as a FIN.
#[test]
fn a_client_reset_resets_the_upstream_connection_and_leaves_no_time_wait() {
    let backend = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let target = backend.local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let to = target.to_string();
    let _proxy = Rampart::start(dir.path(), &["tcp", "--listen", &listen, "--to", &to, "--workers", "1"]);

    let saw = one_exchange(port, &backend, true);
    assert_eq!(
        saw.end,
        Err(std::io::ErrorKind::ConnectionReset),
        "the proxy should reset"
    );
    // A reset socket is gone at once: nothing of the proxy's is left on that port, in TIME_WAIT
    // or any other state.
    #[cfg(target_os = "linux")]
    {
        let (local, remote) = (
            format!(":{:04X}", saw.proxy_side.port()),
            format!(":{:04X}", target.port()),
        );
        let tcp = std::fs::read_to_string("/proc/net/tcp").unwrap();
        let left: Vec<&str> = tcp
            .lines()
            .filter(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                fields.len() > 2 && fields[1].ends_with(&local) && fields[2].ends_with(&remote)
            })
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }

    let saw = one_exchange(port, &backend, false);
    assert_eq!(saw.end, Ok(0), "a client FIN should reach the backend as a FIN");
}
