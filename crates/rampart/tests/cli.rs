//! The command line: `check`, the zero-config hosts-file start, and its errors.

use crate::common;

use common::*;

#[test]
fn check_accepts_a_good_file_with_a_summary() {
    let dir = tempfile::tempdir().unwrap();
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/l4-full.toml");
    let (code, out, _) = run_rampart(dir.path(), &["check", "-c", example]);
    assert_eq!(code, 0);
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(out.contains(": ok: 2 listeners, 2 upstreams, 5 targets"), "{out}");
}

#[test]
fn check_reports_each_error_with_its_place() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = "[listeners.web]\nbind = \"127.0.0.1:99999\"\nupstream = \"nope\"\n\n[upstreams.app]\ntargets = [\"127.0.0.1:1\"]\nbalance = \"random\"\n";
    let path = write_file(dir.path(), "bad.toml", cfg);
    let (code, out, err) = run_rampart(dir.path(), &["check", "-c", &path]);
    assert_eq!(code, 1);
    assert!(out.is_empty());
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 3, "{err}");
    assert!(
        lines[0].starts_with(&format!("{path}:2:8: `127.0.0.1:99999` is not a listen address")),
        "{err}"
    );
    assert!(
        lines[1].starts_with(&format!(
            "{path}:3:12: listener `web` refers to unknown upstream `nope`"
        )),
        "{err}"
    );
    assert!(
        lines[2].starts_with(&format!("{path}:7:11: unknown balance policy `random`")),
        "{err}"
    );
}

#[test]
fn check_reports_unknown_keys_and_unreadable_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_file(
        dir.path(),
        "bad.toml",
        "[listeners.web]\nbind = \"127.0.0.1:1\"\nupstream = \"a\"\ntimeout = \"5s\"\n",
    );
    let (code, _, err) = run_rampart(dir.path(), &["check", "-c", &path]);
    assert_eq!(code, 1);
    assert!(err.starts_with(&format!("{path}:4:1: unknown key `timeout`")), "{err}");
    let (code, _, err) = run_rampart(dir.path(), &["check", "-c", "missing.toml"]);
    assert_eq!(code, 1);
    assert!(err.starts_with("missing.toml: cannot read"), "{err}");
}

#[test]
fn zero_config_start_reads_hosts_beside_it() {
    let a = Backend::start("a", Behavior::TagEcho);
    let b = Backend::start("b", Behavior::TagEcho);
    let dir = tempfile::tempdir().unwrap();
    // Host names are resolved.
    let b_named = format!("localhost:{}", b.addr.port());
    write_file(
        dir.path(),
        "hosts",
        &format!("# two backends\n\n{}\n{b_named}   # by name\n", a.target()),
    );
    let port = free_port();
    let port_arg = port.to_string();
    let mut proxy = Rampart::start(dir.path(), &[port_arg.as_str(), "--workers", "1"]);
    let seen: std::collections::HashSet<String> = (0..4).map(|_| which_backend(port)).collect();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(proxy.stop(), 0);
}

#[test]
fn hosts_file_problems_name_the_file_and_line_and_exit_one() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port().to_string();
    let (code, _, err) = run_rampart(dir.path(), &[&port]);
    assert_eq!(code, 1);
    assert!(err.contains("hosts: cannot read hosts file"), "{err}");

    write_file(dir.path(), "hosts", "# nothing yet\n\n");
    let (code, _, err) = run_rampart(dir.path(), &[&port]);
    assert_eq!(code, 1);
    assert!(err.contains("hosts:1:1: no targets"), "{err}");

    write_file(dir.path(), "hosts", "127.0.0.1:1\n\n  127.0.0.1:notaport\n");
    let (code, _, err) = run_rampart(dir.path(), &[&port]);
    assert_eq!(code, 1);
    assert!(
        err.contains("hosts:3:3: `127.0.0.1:notaport` has no valid port"),
        "{err}"
    );

    let other = write_file(dir.path(), "backends.txt", "no-such-host.invalid:80\n");
    let (code, _, err) = run_rampart(dir.path(), &[&port, "--hosts", &other]);
    assert_eq!(code, 1);
    assert!(
        err.contains("backends.txt:1:1: cannot resolve `no-such-host.invalid`"),
        "{err}"
    );
}

#[test]
fn bad_command_lines_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (code, _, err) = run_rampart(dir.path(), &["tcp", "--listen", "127.0.0.1:1"]);
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = run_rampart(dir.path(), &["tcp", "--listen", "nowhere", "--to", "127.0.0.1:1"]);
    assert_eq!(code, 1);
    assert!(err.contains("--listen: `nowhere` is not a listen address"), "{err}");
    let (code, _, err) = run_rampart(dir.path(), &["7777", "--balance", "fastest"]);
    assert_eq!(code, 2);
    assert!(err.contains("possible values"), "{err}");
}

#[test]
fn a_mistyped_subcommand_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let (code, _, err) = run_rampart(dir.path(), &["chek", "-c", "x.toml"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("unrecognized subcommand 'chek'"), "{err}");
    assert!(err.contains("a similar subcommand exists: 'check'"), "{err}");
    let (code, _, err) = run_rampart(dir.path(), &["tcpp", "--listen", "127.0.0.1:1", "--to", "127.0.0.1:2"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("a similar subcommand exists: 'tcp'"), "{err}");
    let (code, _, err) = run_rampart(dir.path(), &["nowhere"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("'nowhere' is neither [ADDR:]PORT"), "{err}");
}

#[test]
fn a_port_in_use_is_a_clear_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let (code, _, err) = run_rampart(dir.path(), &["tcp", "--listen", &addr, "--to", "127.0.0.1:1"]);
    assert_eq!(code, 1);
    assert!(
        err.contains(&format!("rampart: {addr}: already in use by another process")),
        "{err}"
    );
}

#[test]
fn a_bind_error_says_its_reason_once() {
    // 192.0.2.1 (TEST-NET-1) is no address of this machine.
    let addr = format!("192.0.2.1:{}", free_port());
    let dir = tempfile::tempdir().unwrap();
    let (code, _, err) = run_rampart(dir.path(), &["tcp", "--listen", &addr, "--to", "127.0.0.1:1"]);
    assert_eq!(code, 1);
    assert!(err.contains(&format!("rampart: cannot listen on {addr}: ")), "{err}");
    assert_eq!(err.matches("os error").count(), 1, "{err}");
}

/// SO_REUSEPORT would let a second Rampart of the same user share the first one's address (and
/// take part of its connections); it is refused instead, also where one of the two addresses is
/// the wildcard over the other.
#[test]
fn a_second_rampart_on_a_held_address_exits_one() {
    let backend = Backend::start("first", Behavior::TagEcho);
    let dir = tempfile::tempdir().unwrap();
    for (first, second) in [
        ("127.0.0.1", "127.0.0.1"),
        ("0.0.0.0", "127.0.0.1"),
        ("127.0.0.1", "0.0.0.0"),
    ] {
        let port = free_port();
        let (a_listen, b_listen) = (format!("{first}:{port}"), format!("{second}:{port}"));
        let target = backend.target();
        let mut a = Rampart::start(
            dir.path(),
            &["tcp", "--listen", &a_listen, "--to", &target, "--workers", "2"],
        );
        let mut b = Rampart::spawn(dir.path(), &["tcp", "--listen", &b_listen, "--to", &target]);
        assert_eq!(b.wait_exit(), 1, "{:?}", b.log);
        let want = format!("rampart: {b_listen}: already in use by another process");
        assert!(b.log.iter().any(|l| l == &want), "want {want:?}, got {:?}", b.log);
        for _ in 0..4 {
            assert_eq!(which_backend(port), "first");
        }
        assert_eq!(a.stop(), 0);
    }
}

/// A log file that cannot be opened is a config error with its place (`check` and `run`), or a
/// command-line error for `--session-log`; never a failure at the first request.
#[test]
fn log_files_that_cannot_be_opened_are_refused_before_serving() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let missing = dir.path().join("gone").join("x.log").display().to_string();
    let reason = "No such file or directory (os error 2)";
    let access = format!(
        "[listeners.gw]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\nupstream = \"app\"\n\
         access_log = {{ path = \"{missing}\" }}\n[upstreams.app]\ntargets = [\"127.0.0.1:1\"]\n"
    );
    let session = format!(
        "[global]\nsession_log = \"{missing}\"\n{}",
        config(port, &["127.0.0.1:1".into()], "", "")
    );
    for (name, cfg, at, what) in [
        ("access.toml", access, "5:23", "access log"),
        ("session.toml", session, "2:15", "session log"),
    ] {
        let path = write_file(dir.path(), name, &cfg);
        let want = format!("{path}:{at}: cannot open {what} {missing}: {reason}");
        let (code, _, err) = run_rampart(dir.path(), &["check", "-c", &path]);
        assert_eq!((code, err.trim()), (1, want.as_str()));
        let mut run = Rampart::spawn(dir.path(), &["run", "-c", &path]);
        assert_eq!(run.wait_exit(), 1, "{:?}", run.log);
        assert!(run.log.iter().any(|l| l.contains(&want)), "{:?}", run.log);
    }
    let want = format!("rampart: --session-log {missing}: cannot open: {reason}");
    let listen = format!("127.0.0.1:{port}");
    let good = write_file(dir.path(), "good.toml", &config(port, &["127.0.0.1:1".into()], "", ""));
    for args in [
        &[
            "tcp",
            "--listen",
            &listen,
            "--to",
            "127.0.0.1:1",
            "--session-log",
            &missing,
        ][..],
        &["run", "-c", &good, "--session-log", &missing][..],
    ] {
        let mut run = Rampart::spawn(dir.path(), args);
        assert_eq!(run.wait_exit(), 1, "{args:?}: {:?}", run.log);
        assert!(run.log.contains(&want), "{args:?}: {:?}", run.log);
    }
}

/// The scripts find the binaries where cargo put them, `CARGO_TARGET_DIR` included.
#[test]
fn scripts_run_binaries_from_the_cargo_target_dir() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    // (bench/run.sh asks cargo where it put the binary.)
    for script in ["scripts/quickstart"] {
        let text = std::fs::read_to_string(format!("{root}/{script}")).unwrap();
        let mut runs = 0;
        for line in text.lines().filter(|l| !l.trim_start().starts_with('#')) {
            for (at, _) in line.match_indices("/release/") {
                let before = &line[..at];
                assert!(
                    before.ends_with("${CARGO_TARGET_DIR:-target}") || before.ends_with("$target"),
                    "{script}: `{line}` does not honour CARGO_TARGET_DIR"
                );
                runs += 1;
            }
        }
        assert!(runs > 0, "{script}: no release binary run found");
        if text.contains("$target/") {
            assert!(text.contains("target=\"${CARGO_TARGET_DIR:-target}\""), "{script}");
        }
    }
}

#[test]
fn the_one_liners_write_access_logs() {
    let backend = common::http::HttpBackend::start(common::http::Reply::Echo);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut proxy = Rampart::start(
        dir.path(),
        &[
            "http",
            "--listen",
            &listen,
            "--to",
            &backend.target(),
            "--workers",
            "1",
            "--access-log",
            "access.log",
            "--access-log-format",
            "combined",
        ],
    );
    let (status, _, _) = common::http::send(&mut connect(port), &common::http::get("/logged"));
    assert_eq!(status, 200);
    // The writer flushes at exit at the latest.
    assert_eq!(proxy.stop(), 0);
    let log = std::fs::read_to_string(dir.path().join("access.log")).unwrap();
    assert!(log.contains("\"GET /logged HTTP/1.1\" 200 "), "{log}");
    // `rampart tcp` logs each connection as one JSON line (its session record).
    let tcp_backend = Backend::start("t", Behavior::TagEcho);
    let tcp_port = free_port();
    let tcp_listen = format!("127.0.0.1:{tcp_port}");
    let mut tcp = Rampart::start(
        dir.path(),
        &[
            "tcp",
            "--listen",
            &tcp_listen,
            "--to",
            &tcp_backend.target(),
            "--workers",
            "1",
            "--access-log",
            "tcp.log",
        ],
    );
    let mut session = connect(tcp_port);
    assert_eq!(read_line(&mut session), "t");
    drop(session);
    assert_eq!(tcp.stop(), 0);
    let log = std::fs::read_to_string(dir.path().join("tcp.log")).unwrap();
    let record: serde_json::Value = serde_json::from_str(log.lines().next().expect("one line")).unwrap();
    assert_eq!(record["target"], tcp_backend.target());
    // `rampart tcp` has no log format to choose: the flag is not one of its own.
    let (code, _, err) = run_rampart(
        dir.path(),
        &[
            "tcp",
            "--listen",
            "127.0.0.1:1",
            "--to",
            "127.0.0.1:2",
            "--access-log",
            "a.log",
            "--access-log-format",
            "combined",
        ],
    );
    assert_eq!(code, 2);
    assert!(err.contains("unexpected argument '--access-log-format'"), "{err}");
}

/// Every example config passes `check` from a fresh clone (the certificates it names are in
/// examples/certs), and `check FILE` is the same as `check -c FILE`.
#[test]
fn every_example_passes_check_given_either_way() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples"));
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.push(root.join("quickstart/gateway.toml"));
    assert!(files.len() >= 6, "{files:?}");
    for file in &files {
        let file = file.display().to_string();
        for args in [&["check", file.as_str()][..], &["check", "-c", file.as_str()][..]] {
            let (code, out, err) = run_rampart(dir.path(), args);
            assert_eq!(code, 0, "{args:?}: {out}{err}");
            assert!(out.contains(": ok: "), "{args:?}: {out}");
            assert!(!err.contains("warning"), "{args:?}: {err}");
        }
    }
}

/// A subcommand typed right is never "corrected" to itself.
#[test]
fn a_right_subcommand_with_a_wrong_argument_says_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let (code, _, err) = run_rampart(dir.path(), &["check", "a.toml", "b.toml"]);
    assert_eq!(code, 2, "{err}");
    assert!(!err.contains("similar subcommand"), "{err}");
    assert!(err.contains("'b.toml'"), "{err}");
    let (code, _, err) = run_rampart(dir.path(), &["check", "a.toml", "-c", "b.toml"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("cannot be used with"), "{err}");
    let (code, _, err) = run_rampart(dir.path(), &["run", "missing.toml"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("missing.toml: cannot read"), "{err}");
}

/// `tcp --help` and `http --help` each list only what that mode accepts, and each refuses the
/// other's flags as a usage error.
#[test]
fn each_one_line_mode_offers_only_its_own_flags() {
    let dir = tempfile::tempdir().unwrap();
    let (_, tcp, _) = run_rampart(dir.path(), &["tcp", "--help"]);
    let (_, http, _) = run_rampart(dir.path(), &["http", "--help"]);
    assert_ne!(tcp, http);
    assert!(
        tcp.contains("--sni") && !tcp.contains("--upstream-protocol") && !tcp.contains("--access-log-format"),
        "{tcp}"
    );
    assert!(
        http.contains("--upstream-protocol") && http.contains("--access-log-format") && !http.contains("--sni"),
        "{http}"
    );
    // Only the values it takes.
    assert!(
        http.contains("[possible values: http1, h2c]") && !http.contains("auto"),
        "{http}"
    );
    let (code, _, err) = run_rampart(
        dir.path(),
        &[
            "http",
            "--listen",
            "127.0.0.1:1",
            "--to",
            "127.0.0.1:2",
            "--sni",
            "a=b:1",
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--sni"), "{err}");
}

/// Errors in what the one-line modes stand for name the flag and its value, not a place in a
/// config nobody wrote.
#[test]
fn one_line_errors_name_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let (code, _, err) = run_rampart(
        dir.path(),
        &[
            "http",
            "--listen",
            "127.0.0.1:0",
            "--to",
            "127.0.0.1:2",
            "--tls-cert",
            "site.pem",
            "--tls-key",
            "site.key",
        ],
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("--tls-cert site.pem: "), "{err}");
    assert!(!err.contains("command line:"), "{err}");
}

/// `--pid-file` names the serving process while it serves and is gone after it stops.
#[test]
fn the_pid_file_names_the_serving_process() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Backend::start("p", Behavior::TagEcho);
    let pid_file = dir.path().join("rampart.pid");
    let pid_arg = pid_file.display().to_string();
    let port = free_port().to_string();
    let mut proxy = Rampart::start(
        dir.path(),
        &[
            "tcp",
            "--listen",
            &format!("localhost:{port}"),
            "--to",
            &backend.target(),
            "--workers",
            "1",
            "--pid-file",
            &pid_arg,
        ],
    );
    let pid = std::fs::read_to_string(&pid_file).unwrap();
    assert_eq!(pid.trim(), proxy.pid().to_string());
    let mut session = connect(port.parse().unwrap());
    assert_eq!(read_line(&mut session), "p");
    drop(session);
    assert_eq!(proxy.stop(), 0);
    assert!(!pid_file.exists());
}

/// Closing the quickstart's terminal (SIGHUP to its process group), Ctrl-C (SIGINT) or SIGTERM
/// stops everything the script started: the gateway too, which on its own would take SIGHUP as
/// a reload and go on holding its ports. The script runs against stand-ins for the two binaries
/// (built in release mode they take minutes), each of which records its PID and, like the
/// gateway, survives SIGHUP.
#[test]
fn the_quickstart_stops_everything_it_started() {
    use std::os::unix::process::CommandExt;
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    for signal in [libc::SIGHUP, libc::SIGINT, libc::SIGTERM] {
        let dir = tempfile::tempdir().unwrap();
        let release = dir.path().join("release");
        std::fs::create_dir_all(release.join("examples")).unwrap();
        let pids = dir.path().join("pids");
        let stand_in = format!(
            "#!/bin/sh\ntrap '' HUP\necho $$ >> {}\nwhile :; do sleep 1; done\n",
            pids.display()
        );
        for name in ["rampart", "examples/demo_backend"] {
            let path = release.join(name);
            std::fs::write(&path, &stand_in).unwrap();
            std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        }
        let mut cmd = std::process::Command::new("bash");
        cmd.arg(format!("{root}/scripts/quickstart"))
            .env("QUICKSTART_SKIP_BUILD", "1")
            .env("CARGO_TARGET_DIR", dir.path())
            .stdout(std::process::Stdio::null());
        // SAFETY: setsid and signal are async-signal-safe; the child gets its own process group,
        // as a terminal's foreground job has, and the default action for the signals the script
        // traps: a test run as a background job of a script inherits SIGINT ignored, and a shell
        // cannot trap a signal ignored at its start (the script would never stop).
        unsafe {
            cmd.pre_exec(|| {
                libc::setsid();
                for s in [libc::SIGHUP, libc::SIGINT, libc::SIGTERM] {
                    libc::signal(s, libc::SIG_DFL);
                }
                Ok(())
            });
        }
        let mut script = cmd.spawn().unwrap();
        let started = wait_until(|| {
            let text = std::fs::read_to_string(&pids).unwrap_or_default();
            (text.lines().count() == 3).then_some(text)
        });
        let pids: Vec<i32> = started.lines().map(|l| l.trim().parse().unwrap()).collect();
        // The whole process group, as the terminal sends it.
        // SAFETY: plain kill(2) on the group this test created.
        unsafe { libc::kill(-(script.id() as i32), signal) };
        let status = common::wait_bounded(&mut script, WAIT, "scripts/quickstart");
        assert!(!status.success(), "signal {signal}: {status:?}");
        for pid in &pids {
            wait_until(|| {
                // SAFETY: kill with signal 0 only asks whether the process exists.
                let gone = unsafe { libc::kill(*pid, 0) } != 0;
                gone.then_some(())
            });
        }
    }
}

/// Polls `f` until it gives a value (readiness, not a fixed sleep), failing after [`WAIT`].
fn wait_until<T>(mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(std::time::Instant::now() < deadline, "timed out");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
