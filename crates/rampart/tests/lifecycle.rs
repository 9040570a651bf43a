//! Reload (SIGHUP) and graceful drain (SIGTERM).

use crate::common;

use std::io::{Read, Write};

use common::*;

#[test]
fn sighup_reload_keeps_open_connections_on_the_old_config() {
    let old = Backend::start("old", Behavior::TagEcho);
    let new = Backend::start("new", Behavior::TagEcho);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let path = write_file(dir.path(), "r.toml", &config(port, &[old.target()], "", ""));
    let mut proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "2"]);
    let mut open = connect(port);
    assert_eq!(read_line(&mut open), "old");

    write_file(dir.path(), "r.toml", &config(port, &[new.target()], "", ""));
    assert!(proxy.reload().contains("reloaded"));
    for _ in 0..4 {
        assert_eq!(which_backend(port), "new");
    }
    open.write_all(b"still old?\n").unwrap();
    assert_eq!(read_line(&mut open), "still old?");
}

#[test]
fn a_bad_reload_keeps_the_running_config_and_says_where() {
    let backend = Backend::start("kept", Behavior::TagEcho);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let path = write_file(dir.path(), "r.toml", &config(port, &[backend.target()], "", ""));
    let mut proxy = Rampart::start(dir.path(), &["run", "-c", &path]);
    write_file(
        dir.path(),
        "r.toml",
        &config(port, &[backend.target()], "idle_timeout = \"soon\"", ""),
    );
    let outcome = proxy.reload();
    assert!(outcome.contains("reload failed"), "{outcome}");
    assert!(
        outcome.contains(&format!("{path}:4:16: `soon` is not a duration")),
        "{outcome}"
    );
    assert_eq!(which_backend(port), "kept");
}

#[test]
fn reload_adds_and_removes_listeners() {
    let backend = Backend::start("b", Behavior::TagEcho);
    let dir = tempfile::tempdir().unwrap();
    let (p1, p2) = (free_port(), free_port());
    let two = format!(
        "{}[listeners.second]\nbind = \"127.0.0.1:{p2}\"\nupstream = \"app\"\n",
        config(p1, &[backend.target()], "", "")
    );
    let path = write_file(dir.path(), "r.toml", &config(p1, &[backend.target()], "", ""));
    let mut proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "2"]);
    assert!(std::net::TcpStream::connect(("127.0.0.1", p2)).is_err());
    write_file(dir.path(), "r.toml", &two);
    assert!(proxy.reload().contains("reloaded"));
    assert_eq!(which_backend(p2), "b");
    write_file(dir.path(), "r.toml", &config(p1, &[backend.target()], "", ""));
    assert!(proxy.reload().contains("reloaded"));
    // Removal is handed to each worker; wait until the port refuses.
    let deadline = std::time::Instant::now() + WAIT;
    while std::net::TcpStream::connect(("127.0.0.1", p2)).is_ok() {
        assert!(std::time::Instant::now() < deadline, "listener was not removed");
        std::thread::yield_now();
    }
    assert_eq!(which_backend(p1), "b");
}

/// Only addresses new to a reload are checked for other holders; one held elsewhere (even with
/// SO_REUSEPORT, which would let both share it) fails the reload.
#[test]
fn a_reload_onto_an_address_another_process_holds_is_refused() {
    let backend = Backend::start("b", Behavior::TagEcho);
    let holder = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    holder.set_reuse_address(true).unwrap();
    holder.set_reuse_port(true).unwrap();
    holder
        .bind(&std::net::SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .unwrap();
    holder.listen(16).unwrap();
    let held = holder.local_addr().unwrap().as_socket().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let path = write_file(dir.path(), "r.toml", &config(port, &[backend.target()], "", ""));
    let mut proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "2"]);
    let two = format!(
        "{}[listeners.second]\nbind = \"127.0.0.1:{held}\"\nupstream = \"app\"\n",
        config(port, &[backend.target()], "", "")
    );
    write_file(dir.path(), "r.toml", &two);
    let outcome = proxy.reload();
    assert!(
        outcome.contains("reload failed")
            && outcome.contains(&format!("127.0.0.1:{held}: already in use by another process")),
        "{outcome}"
    );
    assert_eq!(which_backend(port), "b");
    // The running address itself is not probed: a reload that keeps it goes through.
    write_file(dir.path(), "r.toml", &config(port, &[backend.target()], "", ""));
    assert!(proxy.reload().contains("reloaded"));
    assert_eq!(which_backend(port), "b");
}

/// A log file that cannot be opened fails the reload (with its place in the file) rather than
/// the first request after it.
#[test]
fn a_reload_with_a_log_file_that_cannot_be_opened_keeps_the_running_config() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let good = dir.path().join("access.log").display().to_string();
    let missing = dir.path().join("gone").join("x.log").display().to_string();
    let cfg = |global: &str, access_log: &str, body: &str| {
        format!(
            "[global]\n{global}\n[listeners.gw]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\n\
             access_log = {{ path = \"{access_log}\" }}\n[[listeners.gw.routes]]\nrespond = {{ body = \"{body}\" }}\n"
        )
    };
    let body = || {
        let mut client = connect(port);
        let (status, _, body) = common::http::send(&mut client, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        (status, String::from_utf8_lossy(&body).into_owned())
    };
    let path = write_file(dir.path(), "r.toml", &cfg("", &good, "old"));
    let mut proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    assert_eq!(body(), (200, "old".to_string()));
    let reason = "No such file or directory (os error 2)";
    let cases = [
        (
            cfg("", &missing, "new"),
            format!("{path}:6:23: cannot open access log {missing}: {reason}"),
        ),
        (
            cfg(&format!("session_log = \"{missing}\""), &good, "new"),
            format!("{path}:2:15: cannot open session log {missing}: {reason}"),
        ),
    ];
    for (bad, want) in cases {
        write_file(dir.path(), "r.toml", &bad);
        let outcome = proxy.reload();
        assert!(
            outcome.contains("reload failed") && outcome.contains(&want),
            "{outcome}"
        );
        assert_eq!(body(), (200, "old".to_string()));
    }
}

#[test]
fn hosts_file_mode_reloads_the_hosts_file() {
    let a = Backend::start("a", Behavior::TagEcho);
    let b = Backend::start("b", Behavior::TagEcho);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    write_file(dir.path(), "hosts", &format!("# backends\n{}\n", a.target()));
    let port_arg = format!("127.0.0.1:{port}");
    let mut proxy = Rampart::start(dir.path(), &[port_arg.as_str()]);
    assert_eq!(which_backend(port), "a");
    write_file(dir.path(), "hosts", &format!("{}\n", b.target()));
    assert!(proxy.reload().contains("reloaded"));
    assert_eq!(which_backend(port), "b");
    write_file(dir.path(), "hosts", "not an address\n");
    let outcome = proxy.reload();
    assert!(
        outcome.contains("reload failed") && outcome.contains("hosts:1:1:"),
        "{outcome}"
    );
    assert_eq!(which_backend(port), "b");
}

#[test]
fn sigterm_stops_accepting_drains_open_connections_and_exits_zero() {
    let backend = Backend::start("echo", Behavior::TagEcho);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let path = write_file(dir.path(), "r.toml", &config(port, &[backend.target()], "", ""));
    let mut proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "2"]);
    let mut open = connect(port);
    assert_eq!(read_line(&mut open), "echo");
    proxy.signal(libc::SIGTERM);
    proxy.wait_for("no longer accepting");
    // New clients are refused once every worker has dropped its listener.
    let deadline = std::time::Instant::now() + WAIT;
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
        assert!(std::time::Instant::now() < deadline, "still accepting after SIGTERM");
        std::thread::yield_now();
    }
    // The open connection still works until its client is done.
    open.write_all(b"draining\n").unwrap();
    assert_eq!(read_line(&mut open), "draining");
    open.shutdown(std::net::Shutdown::Write).unwrap();
    let mut rest = Vec::new();
    open.read_to_end(&mut rest).unwrap();
    assert_eq!(proxy.wait_exit(), 0);
}

#[test]
fn the_drain_deadline_cuts_connections_that_do_not_finish() {
    let backend = Backend::start("echo", Behavior::TagEcho);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = format!(
        "[global]\ndrain_timeout = \"200ms\"\n{}",
        config(port, &[backend.target()], "", "")
    );
    let path = write_file(dir.path(), "r.toml", &cfg);
    let mut proxy = Rampart::start(dir.path(), &["run", "-c", &path]);
    let mut open = connect(port);
    assert_eq!(read_line(&mut open), "echo");
    assert_eq!(proxy.stop(), 0);
    assert!(
        proxy.log.iter().any(|l| l.contains("still open at the drain deadline")),
        "{:?}",
        proxy.log
    );
    let mut rest = Vec::new();
    let _ = open.read_to_end(&mut rest);
}

/// A reload that changes a setting read at start only is refused, naming it, and the config in
/// force stays (so `/api/config` never shows a setting that is not applied); the admin token is
/// applied by a reload, at once.
#[test]
fn a_reload_refuses_start_only_settings_and_applies_the_admin_token() {
    let backend = Backend::start("one", Behavior::TagEcho);
    let dir = tempfile::tempdir().unwrap();
    let (port, admin) = (free_port(), free_port());
    let with = |global: &str, admin_table: &str| {
        format!(
            "[global]\n{global}\n[admin]\nlisten = \"127.0.0.1:{admin}\"\n{admin_table}\n{}",
            config(port, &[backend.target()], "", "")
        )
    };
    let path = write_file(dir.path(), "r.toml", &with("workers = 2", ""));
    let mut proxy = Rampart::start(dir.path(), &["run", "-c", &path]);
    assert_eq!(common::admin(admin, "GET", "/api/status", None).0, 200);

    // The token: required from the reload on, and removed by the next.
    write_file(dir.path(), "r.toml", &with("workers = 2", "token = \"s3cret\""));
    assert!(proxy.reload().contains("reloaded"));
    assert_eq!(common::admin(admin, "GET", "/api/status", None).0, 401);
    assert_eq!(common::admin(admin, "GET", "/api/status", Some("s3cret")).0, 200);
    let (_, config) = common::admin(admin, "GET", "/api/config", Some("s3cret"));
    assert!(config["text"].as_str().unwrap().contains("<redacted>"), "{config}");

    // Start-only settings: each refused with what to do, the token kept.
    for (global, admin_table, named) in [
        (
            "workers = 4",
            "token = \"s3cret\"",
            "[global] workers changed from 2 to 4",
        ),
        (
            "workers = 2\nlog_format = \"json\"",
            "token = \"s3cret\"",
            "[global] log_format changed from text to json",
        ),
        (
            "workers = 2\npin = true",
            "token = \"s3cret\"",
            "[global] pin changed to true",
        ),
    ] {
        write_file(dir.path(), "r.toml", &with(global, admin_table));
        let outcome = proxy.reload();
        assert!(outcome.contains("reload failed"), "{outcome}");
        assert!(
            outcome.contains(named) && outcome.contains("binary upgrade (SIGUSR2)"),
            "{outcome}"
        );
        assert_eq!(common::admin(admin, "GET", "/api/status", None).0, 401);
        let (_, status) = common::admin(admin, "GET", "/api/status", Some("s3cret"));
        assert_eq!(status["workers"], 2);
        let (_, config) = common::admin(admin, "GET", "/api/config", Some("s3cret"));
        assert!(
            !config["text"]
                .as_str()
                .unwrap()
                .contains(global.lines().last().unwrap()),
            "{config}"
        );
    }
    let moved = format!("listen = \"127.0.0.1:{}\"", free_port());
    let text = with("workers = 2", "token = \"s3cret\"").replace(&format!("listen = \"127.0.0.1:{admin}\""), &moved);
    write_file(dir.path(), "r.toml", &text);
    let outcome = proxy.reload();
    assert!(outcome.contains("[admin] listen changed from 127.0.0.1:"), "{outcome}");

    write_file(dir.path(), "r.toml", &with("workers = 2", ""));
    assert!(proxy.reload().contains("reloaded"));
    assert_eq!(common::admin(admin, "GET", "/api/status", None).0, 200);
    proxy.stop();
}

/// A second SIGINT while a long connection drains quits at once, saying so.
#[test]
fn a_second_sigint_during_the_drain_quits_at_once() {
    let backend = Backend::start("echo", Behavior::TagEcho);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = format!(
        "[global]\ndrain_timeout = \"5m\"\n{}",
        config(port, &[backend.target()], "", "")
    );
    let path = write_file(dir.path(), "r.toml", &cfg);
    let mut proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    let mut open = connect(port);
    assert_eq!(read_line(&mut open), "echo");
    proxy.signal(libc::SIGINT);
    proxy.wait_for("no longer accepting");
    proxy.signal(libc::SIGINT);
    let line = proxy.wait_for("force quit");
    assert!(
        line.contains("SIGINT during the drain: force quit, cutting 1 open connection"),
        "{line}"
    );
    assert_eq!(proxy.wait_exit(), 1);
    let mut rest = Vec::new();
    let _ = open.read_to_end(&mut rest);
}

/// SIGINT while the first DNS answers are awaited stops at once, before binding the port.
#[test]
fn sigint_while_waiting_for_dns_at_start_stops_before_listening() {
    // A resolver that never answers: the start waits up to 5 s for the first answers.
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = format!(
        "[global]\nresolvers = [\"{}\"]\n{}",
        silent.local_addr().unwrap(),
        config(port, &["dns+api.example.test:80".to_string()], "", "")
    );
    let path = write_file(dir.path(), "r.toml", &cfg);
    let mut proxy = Rampart::spawn(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    // The query reaching the resolver says the start is waiting on it.
    let mut buf = [0u8; 512];
    silent.set_read_timeout(Some(WAIT)).unwrap();
    silent.recv_from(&mut buf).expect("the start asks the resolver");
    proxy.signal(libc::SIGINT);
    assert_eq!(proxy.wait_exit(), 0);
    // Without the signal, the start would have bound the port after its 5 s wait.
    assert!(
        proxy
            .log
            .iter()
            .any(|l| l.contains("SIGINT while waiting for the first DNS answers")),
        "{:?}",
        proxy.log
    );
    assert!(!proxy.log.iter().any(|l| l.contains("listening:")), "{:?}", proxy.log);
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());
}
