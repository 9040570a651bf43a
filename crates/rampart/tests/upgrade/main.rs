//! Zero downtime: binary upgrades (SIGUSR2, `POST /api/upgrade`, `rampart upgrade --pid`) and
//! config reloads, each under a steady load that must see no failed request and no refused
//! connection; a new binary that fails leaves the old process serving; systemd's notify
//! messages.

use crate::common;
mod cache_disk;
mod load;
mod notify;
mod reloads;

use std::path::Path;
use std::time::Instant;

use common::http::{HttpBackend, Reply};
use common::{admin, free_port, run_rampart, write_file, Backend, Behavior, Rampart, WAIT};
use load::Load;

/// Kills the processes it holds when dropped, so that a failed test leaves none behind (the
/// processes an upgrade starts are not the test's children).
#[derive(Default)]
pub struct Processes(Vec<i32>);

impl Processes {
    pub fn add(&mut self, pid: i32) {
        self.0.push(pid);
    }
}

impl Drop for Processes {
    fn drop(&mut self) {
        for &pid in &self.0 {
            if !gone(pid) {
                // SAFETY: only sends a signal, to a process this test started (through an upgrade).
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
}

/// Whether `pid` has exited (no such process, or a zombie nobody reaped yet).
pub fn gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rfind(')')
            .is_some_and(|at| stat[at + 1..].trim_start().starts_with('Z')),
        Err(_) => true,
    }
}

/// Waits until `pid` has exited.
pub fn wait_gone(pid: i32, log: &Rampart) {
    let deadline = Instant::now() + WAIT;
    while !gone(pid) {
        assert!(
            Instant::now() < deadline,
            "process {pid} did not exit; log:\n{}",
            log.log.join("\n")
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Two backends and a config in `dir` with an HTTP listener and a TCP listener in front of them,
/// and an admin listener; `global` lines go into `[global]`.
struct Site {
    _app: HttpBackend,
    _echo: Backend,
    http: u16,
    tcp: u16,
    admin: u16,
    config: String,
}

impl Site {
    fn new(dir: &Path, global: &str) -> Site {
        let app = HttpBackend::start(Reply::Echo);
        let echo = Backend::start("echo", Behavior::TagEcho);
        let (http, tcp, admin) = (free_port(), free_port(), free_port());
        let text = format!(
            "[global]\ndrain_timeout = \"10s\"\n{global}\n\n[admin]\nlisten = \"127.0.0.1:{admin}\"\n\n\
             [listeners.web]\nbind = \"127.0.0.1:{http}\"\nprotocol = \"http\"\nupstream = \"app\"\n\n\
             [listeners.raw]\nbind = \"127.0.0.1:{tcp}\"\nupstream = \"echo\"\n\n\
             [upstreams.app]\ntargets = [\"{}\"]\n\n[upstreams.echo]\ntargets = [\"{}\"]\n",
            app.target(),
            echo.target()
        );
        let config = write_file(dir, "up.toml", &text);
        Site {
            _app: app,
            _echo: echo,
            http,
            tcp,
            admin,
            config,
        }
    }
}

/// The PID in `process N serves now` (the upgrade command) or `PID N is ready` (the log).
pub fn pid_in(text: &str, before: &str) -> i32 {
    let at = text.find(before).unwrap_or_else(|| panic!("no {before:?} in {text:?}")) + before.len();
    text[at..].split_whitespace().next().unwrap().parse().unwrap()
}

#[test]
fn five_binary_upgrades_in_a_row_under_load_fail_no_request_and_refuse_no_connection() {
    let dir = tempfile::tempdir().unwrap();
    let site = Site::new(dir.path(), "");
    let (path, admin_port) = (&site.config, site.admin);
    let mut rampart = Rampart::start(dir.path(), &["run", "-c", path, "--workers", "2"]);
    let mut started = Processes::default();
    let load = Load::start(site.http, "/up", site.tcp);
    let mut pid = rampart.pid();
    for round in 0..5 {
        // Each way of asking: the command, the admin API, the signal.
        let new = match round % 3 {
            0 => {
                let (code, out, err) = run_rampart(dir.path(), &["upgrade", "--pid", &pid.to_string()]);
                assert_eq!(code, 0, "rampart upgrade: {out}{err}\nlog:\n{}", rampart.log.join("\n"));
                let new = pid_in(&out, "process ");
                // Every upgrade logs that its new process serves; the signal round reads it.
                assert_eq!(pid_in(&rampart.wait_for("is ready and serves"), "PID "), new);
                new
            }
            1 => {
                let (status, body) = admin(admin_port, "POST", "/api/upgrade", None);
                assert_eq!(status, 200, "{body}");
                let new = body["pid"].as_i64().unwrap() as i32;
                assert_eq!(pid_in(&rampart.wait_for("is ready and serves"), "PID "), new);
                // The admin address is the new process's now.
                let (_, status) = admin(admin_port, "GET", "/api/status", None);
                assert_eq!(status["pid"].as_i64(), Some(i64::from(new)), "{status}");
                new
            }
            _ => {
                // SAFETY: only sends a signal, to the process this test started.
                assert_eq!(unsafe { libc::kill(pid, libc::SIGUSR2) }, 0);
                pid_in(&rampart.wait_for("is ready and serves"), "PID ")
            }
        };
        started.add(new);
        assert_ne!(new, pid);
        assert!(!gone(new), "the new process {new} is not running");
        wait_gone(pid, &rampart);
        pid = new;
    }
    load.stop().assert_clean(100, &rampart.log);
    // The first process exited by itself, with 0.
    assert_eq!(rampart.wait_exit(), 0);
    // A process started by hand on a port the upgraded one holds is still refused.
    let (code, _, err) = run_rampart(dir.path(), &["run", "-c", path]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("already in use by another process"), "{err}");
    // SAFETY: only sends a signal, to the last process the upgrades started.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let deadline = Instant::now() + WAIT;
    while !gone(pid) && Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(gone(pid), "the last process did not stop on SIGTERM");
}

/// Puts `content` at `program` the way a package upgrade does: a new file renamed over it (the
/// running binary cannot be written in place).
fn replace_binary(program: &Path, content: &[u8]) {
    use std::os::unix::fs::PermissionsExt;
    let next = program.with_extension("new");
    std::fs::write(&next, content).unwrap();
    std::fs::set_permissions(&next, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::rename(&next, program).unwrap();
}

#[test]
fn an_upgrade_to_a_binary_that_fails_or_hangs_leaves_the_old_process_serving() {
    let dir = tempfile::tempdir().unwrap();
    let site = Site::new(dir.path(), "upgrade_timeout = \"1s\"");
    let (path, admin_port) = (&site.config, site.admin);
    let program = dir.path().join("rampart");
    let real = std::fs::read(env!("CARGO_BIN_EXE_rampart")).unwrap();
    replace_binary(&program, &real);
    let mut rampart = Rampart::spawn_program(&program, dir.path(), &["run", "-c", path], &[("RAMPART_LOG", "info")]);
    rampart.wait_for("listening:");
    let mut started = Processes::default();
    let load = Load::start(site.http, "/up", site.tcp);

    // A binary that exits at once, then one that never says it is ready.
    for (script, want) in [
        (
            &b"#!/bin/sh\nexit 3\n"[..],
            "exited (exit status: 3) before it was ready",
        ),
        (
            b"#!/bin/sh\nexec sleep 60\n",
            "was not ready within 1s (upgrade_timeout); killed it",
        ),
    ] {
        replace_binary(&program, script);
        let (status, body) = admin(admin_port, "POST", "/api/upgrade", None);
        assert_eq!(status, 500, "{body}");
        let reason = body["reason"].as_str().unwrap();
        assert!(reason.contains(want), "{reason}");
        rampart.wait_for("upgrade failed");
    }

    // The real binary again: the next upgrade works.
    replace_binary(&program, &real);
    let (status, body) = admin(admin_port, "POST", "/api/upgrade", None);
    assert_eq!(status, 200, "{body}");
    let new = body["pid"].as_i64().unwrap() as i32;
    started.add(new);
    assert_eq!(rampart.wait_exit(), 0);
    load.stop().assert_clean(1, &rampart.log);
    // The new process answers on the admin port it was handed.
    let (status, body) = admin(admin_port, "GET", "/healthz", None);
    assert_eq!((status, &body["status"]), (200, &serde_json::json!("ok")));
}

#[test]
fn an_upgrade_to_fewer_or_more_workers_accepts_on_every_handed_over_socket() {
    let dir = tempfile::tempdir().unwrap();
    let echo = Backend::start("echo", Behavior::TagEcho);
    let port = free_port();
    let cfg = |workers: usize| {
        format!(
            "[global]\nworkers = {workers}\n\n[listeners.raw]\nbind = \"127.0.0.1:{port}\"\nupstream = \"echo\"\n\n\
             [upstreams.echo]\ntargets = [\"{}\"]\n",
            echo.target()
        )
    };
    let path = write_file(dir.path(), "w.toml", &cfg(1));
    let mut rampart = Rampart::start(dir.path(), &["run", "-c", &path]);
    let mut started = Processes::default();
    let mut pid = rampart.pid();
    // One socket to three workers (two more are bound beside it), then three sockets to one
    // worker (each must be accepted on, or the connections the kernel put in the others' queues
    // would wait forever).
    for (workers, took) in [(3, 1), (1, 3)] {
        write_file(dir.path(), "w.toml", &cfg(workers));
        // SAFETY: only sends a signal, to a process this test started.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGUSR2) }, 0);
        let line = rampart.wait_for("took over");
        assert!(
            line.contains(&format!("took over {took} listening socket(s)")),
            "{line}"
        );
        let new = pid_in(&rampart.wait_for("is ready and serves"), "PID ");
        started.add(new);
        wait_gone(pid, &rampart);
        pid = new;
        // Connections spread over the sockets by a hash of their addresses: 60 of them miss
        // none of three sockets but for a chance of under 1e-10.
        for _ in 0..60 {
            assert_eq!(common::which_backend(port), "echo");
        }
    }
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    wait_gone(pid, &rampart);
}

#[test]
fn an_upgrade_starts_what_the_path_it_was_started_by_names_now_through_a_symlink_too() {
    let dir = tempfile::tempdir().unwrap();
    let site = Site::new(dir.path(), "");
    // `current` points at one version; an upgrade follows it to whatever it points at then.
    let link = dir.path().join("current");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_rampart"), &link).unwrap();
    let mut rampart = Rampart::spawn_program(
        &link,
        dir.path(),
        &["run", "-c", &site.config],
        &[("RAMPART_LOG", "info")],
    );
    rampart.wait_for("listening:");
    let other = dir.path().join("v2");
    replace_binary(&other, b"#!/bin/sh\nexit 4\n");
    let next = dir.path().join("current.new");
    std::os::unix::fs::symlink(&other, &next).unwrap();
    std::fs::rename(&next, &link).unwrap();
    let (status, body) = admin(site.admin, "POST", "/api/upgrade", None);
    assert_eq!(status, 500, "{body}");
    let reason = body["reason"].as_str().unwrap();
    assert!(reason.contains("exited (exit status: 4)"), "{reason}");
    assert_eq!(rampart.stop(), 0);
}

#[test]
fn an_admin_listener_on_a_unix_socket_is_handed_over_and_its_file_kept() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let echo = Backend::start("echo", Behavior::TagEcho);
    let port = free_port();
    let socket = dir.path().join("admin.sock");
    let cfg = format!(
        "[admin]\nlisten = \"unix:{}\"\n\n[listeners.raw]\nbind = \"127.0.0.1:{port}\"\nupstream = \"echo\"\n\n\
         [upstreams.echo]\ntargets = [\"{}\"]\n",
        socket.display(),
        echo.target()
    );
    let path = write_file(dir.path(), "u.toml", &cfg);
    let mut rampart = Rampart::start(dir.path(), &["run", "-c", &path]);
    let mut started = Processes::default();
    rampart.signal(libc::SIGUSR2);
    let new = pid_in(&rampart.wait_for("is ready and serves"), "PID ");
    started.add(new);
    assert_eq!(rampart.wait_exit(), 0);
    // The old process left the socket file to the new one, which answers on it.
    let mut admin = std::os::unix::net::UnixStream::connect(&socket).expect("the admin socket file is there");
    admin
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    admin.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // SAFETY: only sends a signal, to the process the upgrade started.
    unsafe { libc::kill(new, libc::SIGTERM) };
    wait_gone(new, &rampart);
}
