//! Delayed binding against real servers and their real clients, each through one TCP listener
//! with routes on the connection's first bytes: PostgreSQL (`psql`: a StartupMessage first, an
//! SSLRequest first), Redis (`redis-cli`, and a `deny_regex` filter that closes a FLUSHALL), SSH
//! (`ssh` logging in, `ssh-keyscan`, which waits for the server to speak), HTTP Host routing
//! (`curl`) and a server that speaks first behind the listener's default. The servers run as
//! children of the test on free 127.0.0.1 ports with their files in a tempdir, and are stopped when
//! the test ends, passed or failed. `scripts/servers` installs the Debian packages when they are
//! missing; a test fails (it never skips) when they cannot be had.

use crate::common;

use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use common::http::{HttpBackend, Reply};
use common::tls::start_config;
use common::*;
use serde_json::Value;

// ---------------------------------------------------------------------------------------------
// Servers and clients

fn running_as_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// A server process started by a test, its stdout and stderr in `NAME.log` of the test's dir.
/// Dropping it stops it: `stop` (a signal), then SIGKILL if it is still there after 5 s.
struct Server {
    name: String,
    child: Option<Child>,
    log: PathBuf,
    stop: i32,
}

impl Server {
    fn start(name: &str, dir: &Path, cmd: &mut Command, stop: i32) -> Server {
        let log = dir.join(format!("{name}.log"));
        let file = File::create(&log).unwrap();
        cmd.stdin(Stdio::null()).stdout(file.try_clone().unwrap()).stderr(file);
        // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec. It kills
        // the server should the test process die without unwinding (a signal); the kernel drops
        // it again where the server changes its user (PostgreSQL under setpriv).
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name} ({cmd:?}): {e}"));
        Server {
            name: name.to_string(),
            child: Some(child),
            log,
            stop,
        }
    }

    fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Polls `ready` (every 50 ms) until it holds; panics with the server's output when the
    /// server exits first or [`WAIT`] passes.
    fn wait_ready(&mut self, what: &str, mut ready: impl FnMut() -> bool) {
        let deadline = Instant::now() + WAIT;
        loop {
            if ready() {
                return;
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!(
                    "{} exited ({status}) before {what}; its output:\n{}",
                    self.name,
                    self.output()
                );
            }
            assert!(
                Instant::now() < deadline,
                "{} not ready ({what}) within {WAIT:?}; its output:\n{}",
                self.name,
                self.output()
            );
            thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else { return };
        // SAFETY: signalling our own child, which has not been reaped (try_wait below reaps it).
        unsafe { libc::kill(child.id() as i32, self.stop) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// Runs a client to completion (killed, and the test failed, after [`WAIT`]).
fn client(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let deadline = Instant::now() + WAIT;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "{cmd:?} still running after {WAIT:?}; stdout {:?}, stderr {:?}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// A client's stdout, trimmed; the test fails when it exits non-zero.
fn client_ok(cmd: &mut Command) -> String {
    let out = client(cmd);
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}): stdout {:?}, stderr {:?}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Output of a command that must succeed (`id`, `initdb`, `ssh-keygen`).
fn tool(program: &str, args: &[&str]) -> String {
    client_ok(Command::new(program).args(args))
}

// ---------------------------------------------------------------------------------------------
// The listener

/// Where each upstream of [`edge_config`] points; unused ones at an address where nothing listens.
struct Targets {
    pg: String,
    redis: String,
    ssh: String,
    web: String,
    fallback: String,
}

impl Targets {
    fn none() -> Targets {
        Targets {
            pg: dead_target(),
            redis: dead_target(),
            ssh: dead_target(),
            web: dead_target(),
            fallback: dead_target(),
        }
    }
}

/// One TCP listener `edge` on `port`: routes `pg` (protocol postgres), `redis` (protocol redis,
/// with a FLUSHALL filter), `ssh` (protocol ssh), `web` (HTTP Host app.example), each to the
/// upstream of that name, and the default upstream `fallback`; `listener_extra` lines in the
/// listener; session records in `log`.
fn edge_config(port: u16, log: &Path, t: &Targets, listener_extra: &str) -> String {
    format!(
        r#"[global]
session_log = "{log}"

[listeners.edge]
bind = "127.0.0.1:{port}"
upstream = "fallback"
{listener_extra}

[[listeners.edge.routes]]
name = "pg"
match = {{ protocol = "postgres" }}
upstream = "pg"

[[listeners.edge.routes]]
name = "redis"
match = {{ protocol = "redis" }}
upstream = "redis"
deny_regex = "(?i)flushall"

[[listeners.edge.routes]]
name = "ssh"
match = {{ protocol = "ssh" }}
upstream = "ssh"

[[listeners.edge.routes]]
name = "web"
match = {{ http_host = "app.example" }}
upstream = "web"

[upstreams.pg]
targets = ["{}"]
[upstreams.redis]
targets = ["{}"]
[upstreams.ssh]
targets = ["{}"]
[upstreams.web]
targets = ["{}"]
[upstreams.fallback]
targets = ["{}"]
"#,
        t.pg,
        t.redis,
        t.ssh,
        t.web,
        t.fallback,
        log = log.display(),
    )
}

/// Starts Rampart with [`edge_config`] (two workers); returns it and its port.
fn start_edge(dir: &Path, log: &Path, t: &Targets, listener_extra: &str) -> (Rampart, u16) {
    let port = free_port();
    let (proxy, _) = start_config(dir, &edge_config(port, log, t, listener_extra), 2);
    (proxy, port)
}

/// The session records in `log` once `count` of them satisfy `pick` (polled until [`WAIT`]; the
/// test fails with all records then).
fn records(log: &Path, count: usize, pick: impl Fn(&Value) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + WAIT;
    loop {
        let all: Vec<Value> = std::fs::read_to_string(log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect();
        if all.iter().filter(|r| pick(r)).count() >= count {
            return all;
        }
        assert!(
            Instant::now() < deadline,
            "fewer than {count} matching session records after {WAIT:?}; all:\n{}",
            all.iter().map(Value::to_string).collect::<Vec<_>>().join("\n")
        );
        thread::sleep(Duration::from_millis(20));
    }
}

fn route_is(r: &Value, route: &str) -> bool {
    r["route"] == route
}

// ---------------------------------------------------------------------------------------------
// PostgreSQL

/// PostgreSQL in `dir/pg` on a free port, trust authentication, user `postgres`. As root it runs as
/// `nobody` (PostgreSQL refuses to run as root) through `setpriv`, which execs it in place, so that
/// the child is the postmaster itself and the guard's signal reaches it.
fn start_postgres(dir: &Path) -> (Server, u16) {
    let bin = common::servers::installed();
    let home = dir.join("pg");
    std::fs::create_dir(&home).unwrap();
    let sockets = home.join("sockets");
    std::fs::create_dir(&sockets).unwrap();
    let data = home.join("data");
    let as_user = |program: &Path| -> Command {
        if running_as_root() {
            let (uid, gid) = (tool("id", &["-u", "nobody"]), tool("id", &["-g", "nobody"]));
            let mut cmd = Command::new("setpriv");
            cmd.arg(format!("--reuid={uid}"))
                .arg(format!("--regid={gid}"))
                .arg("--clear-groups")
                .arg(program);
            cmd
        } else {
            Command::new(program)
        }
    };
    if running_as_root() {
        use std::os::unix::fs::PermissionsExt;
        // `nobody` must reach its directories inside the test's (0700) tempdir.
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let uid: u32 = tool("id", &["-u", "nobody"]).parse().unwrap();
        let gid: u32 = tool("id", &["-g", "nobody"]).parse().unwrap();
        for d in [&home, &sockets] {
            std::os::unix::fs::chown(d, Some(uid), Some(gid)).unwrap();
        }
    }
    let data_arg = data.display().to_string();
    client_ok(as_user(&bin.join("initdb")).args([
        "-D",
        &data_arg,
        "-U",
        "postgres",
        "--auth=trust",
        "--no-locale",
        "-E",
        "UTF8",
        "--no-sync",
    ]));
    let port = free_port();
    let mut server = Server::start(
        "postgres",
        dir,
        as_user(&bin.join("postgres")).args([
            "-D",
            &data_arg,
            "-p",
            &port.to_string(),
            "-k",
            &sockets.display().to_string(),
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            "fsync=off",
        ]),
        // Fast shutdown: clients disconnected, no waiting for them.
        libc::SIGINT,
    );
    server.wait_ready("pg_isready says it accepts connections", || {
        Command::new("pg_isready")
            .args(["-q", "-h", "127.0.0.1", "-p", &port.to_string(), "-U", "postgres"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status_within(WAIT)
            .is_ok_and(|s| s.success())
    });
    (server, port)
}

/// `psql` to `port` with this `sslmode`: `select 40+2`.
fn psql(port: u16, sslmode: &str) -> Command {
    let mut cmd = Command::new("psql");
    cmd.arg(format!(
        "host=127.0.0.1 port={port} user=postgres dbname=postgres sslmode={sslmode} connect_timeout=10"
    ))
    .args(["-X", "-A", "-t", "-c", "select 40+2"]);
    cmd
}

#[test]
fn psql_reaches_postgres_by_startup_message_and_by_ssl_request() {
    let dir = tempfile::tempdir().unwrap();
    let (_pg, pg_port) = start_postgres(dir.path());
    let log = dir.path().join("sessions.jsonl");
    let targets = Targets {
        pg: format!("127.0.0.1:{pg_port}"),
        ..Targets::none()
    };
    let (_proxy, port) = start_edge(dir.path(), &log, &targets, "");

    // A StartupMessage first.
    assert_eq!(client_ok(&mut psql(port, "disable")), "42");
    // An SSLRequest first: PostgreSQL without TLS answers 'N' and psql goes on in the clear.
    assert_eq!(client_ok(&mut psql(port, "prefer")), "42");
    // An SSLRequest that must succeed: PostgreSQL's 'N' reaches psql, which gives up.
    let out = client(&mut psql(port, "require"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("server does not support SSL"),
        "sslmode=require: {}, stderr {err:?}",
        out.status
    );

    let all = records(&log, 3, |r| r["close"] != Value::Null);
    assert_eq!(all.len(), 3, "{all:#?}");
    for r in &all {
        assert_eq!(r["listener"], "edge", "{r}");
        assert_eq!(r["protocol"], "postgres", "{r}");
        assert_eq!(r["route"], "pg", "{r}");
        assert_eq!(r["upstream"], "pg", "{r}");
        assert_eq!(r["target"], targets.pg, "{r}");
    }
    // psql ends its sessions itself (Terminate, then close).
    let completed = all.iter().filter(|r| r["close"] == "completed").count();
    assert!(completed >= 2, "{all:#?}");
}

// ---------------------------------------------------------------------------------------------
// Redis

fn redis_cli(port: u16, args: &[&str]) -> Command {
    let mut cmd = Command::new("redis-cli");
    cmd.args(["-h", "127.0.0.1", "-p", &port.to_string()]).args(args);
    cmd
}

/// Writes one RESP command and reads one reply (enough for the short ones used here).
fn resp(conn: &mut std::net::TcpStream, args: &[&str]) -> String {
    let mut out = format!("*{}\r\n", args.len());
    for a in args {
        out.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    conn.write_all(out.as_bytes()).unwrap();
    let mut buf = [0u8; 256];
    let n = conn.read(&mut buf).unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[test]
fn redis_cli_reaches_redis_and_flushall_is_filtered() {
    let _ = common::servers::installed();
    let dir = tempfile::tempdir().unwrap();
    let redis_port = free_port();
    let mut redis = Server::start(
        "redis",
        dir.path(),
        Command::new("redis-server")
            .args(["--port", &redis_port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(dir.path()),
        libc::SIGTERM,
    );
    redis.wait_ready("redis-cli ping answers PONG", || {
        client(&mut redis_cli(redis_port, &["ping"])).stdout == b"PONG\n"
    });
    let log = dir.path().join("sessions.jsonl");
    let targets = Targets {
        redis: format!("127.0.0.1:{redis_port}"),
        ..Targets::none()
    };
    let (_proxy, port) = start_edge(dir.path(), &log, &targets, "");

    assert_eq!(client_ok(&mut redis_cli(port, &["set", "k", "v"])), "OK");
    assert_eq!(client_ok(&mut redis_cli(port, &["get", "k"])), "v");

    // A connection through the same route, open across the filtered one below.
    let mut open = connect(port);
    let open_client = open.local_addr().unwrap().to_string();
    assert_eq!(resp(&mut open, &["PING"]), "+PONG\r\n");

    // FLUSHALL: the filter closes the connection before Redis sees the command.
    let out = client(&mut redis_cli(port, &["flushall"]));
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        !stdout.contains("OK") && !out.status.success(),
        "redis-cli flushall through the filter: {}, stdout {stdout:?}, stderr {stderr:?}",
        out.status
    );
    let all = records(&log, 1, |r| r["close"] == "filter_closed");
    let filtered: Vec<&Value> = all.iter().filter(|r| r["close"] == "filter_closed").collect();
    assert_eq!(filtered.len(), 1, "{all:#?}");
    assert_eq!(filtered[0]["route"], "redis", "{}", filtered[0]);
    assert_eq!(filtered[0]["protocol"], "redis", "{}", filtered[0]);
    assert_eq!(filtered[0]["bytes_up"], 0, "nothing relayed: {}", filtered[0]);

    // Nothing was flushed, and the other connection goes on.
    assert_eq!(resp(&mut open, &["GET", "k"]), "$1\r\nv\r\n");
    drop(open);
    assert_eq!(client_ok(&mut redis_cli(port, &["get", "k"])), "v");
    assert_eq!(client_ok(&mut redis_cli(redis_port, &["dbsize"])), "1");

    // set, get, the open one, flushall, get.
    let all = records(&log, 5, |r| route_is(r, "redis"));
    assert_eq!(all.len(), 5, "{all:#?}");
    for r in &all {
        assert_eq!(r["protocol"], "redis", "{r}");
        assert_eq!(r["route"], "redis", "{r}");
        assert_eq!(r["upstream"], "redis", "{r}");
    }
    let completed = all.iter().filter(|r| r["close"] == "completed").count();
    assert_eq!(completed, 4, "{all:#?}");
    // The peeked PING counts as relayed, as the GET after it does.
    let r = all.iter().find(|r| r["client"] == open_client.as_str()).unwrap();
    assert_eq!((&r["bytes_up"], &r["bytes_down"]), (&34.into(), &14.into()), "{r}");
}

// ---------------------------------------------------------------------------------------------
// SSH

/// `ssh` to `port` as the current user with `key`, trusting only `known_hosts`; runs `command`.
fn ssh(port: u16, key: &Path, known_hosts: &Path, user: &str, command: &str) -> Command {
    let mut cmd = Command::new("ssh");
    cmd.args(["-F", "/dev/null", "-p", &port.to_string()])
        .args(["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes"])
        .args(["-o", "GlobalKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR"])
        .args(["-o", "IdentitiesOnly=yes", "-o", "ConnectTimeout=10"])
        .args(["-o", "HostKeyAlgorithms=ssh-ed25519"])
        .arg("-o")
        .arg(format!("UserKnownHostsFile={}", known_hosts.display()))
        .arg("-i")
        .arg(key)
        .arg(format!("{user}@127.0.0.1"))
        .arg(command);
    cmd
}

#[test]
fn ssh_logs_in_by_its_banner_and_ssh_keyscan_waits_for_the_default() {
    let _ = common::servers::installed();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let keygen = |name: &str| {
        let path = d.join(name).display().to_string();
        tool(
            "ssh-keygen",
            &["-q", "-t", "ed25519", "-N", "", "-C", name, "-f", &path],
        );
        std::fs::read_to_string(format!("{path}.pub")).unwrap()
    };
    let host_pub = keygen("host_key");
    let client_pub = keygen("client_key");
    write_file(d, "authorized_keys", &client_pub);
    let sshd_config = write_file(
        d,
        "sshd_config",
        &format!(
            "HostKey {dir}/host_key\nPidFile none\nStrictModes no\nUsePAM no\n\
             PasswordAuthentication no\nKbdInteractiveAuthentication no\nPubkeyAuthentication yes\n\
             AuthorizedKeysFile {dir}/authorized_keys\nPermitRootLogin prohibit-password\n\
             ListenAddress 127.0.0.1\nLogLevel VERBOSE\n",
            dir = d.display()
        ),
    );
    if running_as_root() {
        // Privilege separation chroots into it.
        std::fs::create_dir_all("/run/sshd").unwrap();
    }
    let sshd_port = free_port();
    let host_key = d.join("host_key").display().to_string();
    let mut sshd = Server::start(
        "sshd",
        d,
        Command::new("/usr/sbin/sshd").args([
            "-D",
            "-e",
            "-f",
            &sshd_config,
            "-p",
            &sshd_port.to_string(),
            "-h",
            &host_key,
        ]),
        libc::SIGTERM,
    );
    let sshd_log = sshd.log.clone();
    sshd.wait_ready("it logs `Server listening`", || {
        std::fs::read_to_string(&sshd_log).is_ok_and(|s| s.contains("Server listening on 127.0.0.1"))
    });

    // The listener's default is sshd too: unlike ssh, ssh-keyscan sends nothing before it has read
    // the server's banner, so only the peek timeout decides its connection.
    let log = d.join("sessions.jsonl");
    let target = format!("127.0.0.1:{sshd_port}");
    let targets = Targets {
        ssh: target.clone(),
        fallback: target.clone(),
        ..Targets::none()
    };
    let (_proxy, port) = start_edge(d, &log, &targets, "peek_timeout = \"1s\"");

    let known_hosts = write_file(d, "known_hosts", &format!("[127.0.0.1]:{port} {host_pub}"));
    let user = tool("id", &["-un"]);
    let out = client_ok(&mut ssh(
        port,
        &d.join("client_key"),
        Path::new(&known_hosts),
        &user,
        "echo ssh-ok",
    ));
    assert_eq!(out, "ssh-ok");
    let all = records(&log, 1, |r| route_is(r, "ssh"));
    let r = all.iter().find(|r| route_is(r, "ssh")).unwrap();
    assert_eq!(r["protocol"], "ssh", "{r}");
    assert_eq!(r["upstream"], "ssh", "{r}");
    assert_eq!(r["close"], "completed", "{r}");
    let peek = r["peek_ms"].as_f64().unwrap();
    assert!(peek < 1000.0, "the banner decided, not the timeout: {r}");

    // ssh-keyscan: the same host key, through the default after the peek timeout.
    let scanned = client_ok(Command::new("ssh-keyscan").args([
        "-T",
        "10",
        "-t",
        "ed25519",
        "-p",
        &port.to_string(),
        "127.0.0.1",
    ]));
    let line = scanned
        .lines()
        .find(|l| !l.starts_with('#'))
        .unwrap_or_else(|| panic!("ssh-keyscan found no key: {scanned:?}"));
    // `[127.0.0.1]:PORT ssh-ed25519 AAAA...` against `ssh-ed25519 AAAA... host_key`.
    let got: Vec<&str> = line.split_whitespace().skip(1).take(2).collect();
    let want: Vec<&str> = host_pub.split_whitespace().take(2).collect();
    assert_eq!(got, want, "{scanned}");
    let all = records(&log, 2, |r| r["close"] != Value::Null);
    let r = all.iter().find(|r| r["route"].is_null()).unwrap();
    assert_eq!(r["upstream"], "fallback", "{r}");
    assert!(r["protocol"].is_null(), "{r}");
    assert!(r["peek_ms"].as_f64().unwrap() >= 1000.0, "{r}");
}

// ---------------------------------------------------------------------------------------------
// HTTP

fn curl(port: u16, host: &str) -> Command {
    let mut cmd = Command::new("curl");
    cmd.args(["-s", "-S", "--max-time", "10", "-H"])
        .arg(format!("Host: {host}"))
        .arg(format!("http://127.0.0.1:{port}/"));
    cmd
}

#[test]
fn curl_reaches_the_backend_of_its_host_and_others_the_default() {
    let _ = common::servers::installed();
    let app = HttpBackend::start(Reply::Raw(
        b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\nconnection: close\r\n\r\napp\n",
    ));
    let other = HttpBackend::start(Reply::Raw(
        b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\nconnection: close\r\n\r\nfallback\n",
    ));
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("sessions.jsonl");
    let targets = Targets {
        web: app.target(),
        fallback: other.target(),
        ..Targets::none()
    };
    let (_proxy, port) = start_edge(dir.path(), &log, &targets, "");

    assert_eq!(client_ok(&mut curl(port, "app.example")), "app");
    let app_head = app.next_head();
    assert!(app_head.contains("Host: app.example"), "{app_head}");
    assert_eq!(client_ok(&mut curl(port, "other.example")), "fallback");
    let other_head = other.next_head();
    assert!(other_head.contains("Host: other.example"), "{other_head}");

    let all = records(&log, 2, |r| r["close"] != Value::Null);
    assert_eq!(all.len(), 2, "{all:#?}");
    let web = all.iter().find(|r| route_is(r, "web")).expect("a record of route web");
    assert_eq!(web["protocol"], "http", "{web}");
    assert_eq!(web["http_host"], "app.example", "{web}");
    assert_eq!(web["upstream"], "web", "{web}");
    // The request was peeked whole, and counts as relayed.
    assert_eq!(web["bytes_up"], app_head.len(), "{web}");
    let default = all.iter().find(|r| r["route"].is_null()).expect("a default record");
    assert_eq!(default["protocol"], "http", "{default}");
    assert_eq!(default["http_host"], "other.example", "{default}");
    assert_eq!(default["upstream"], "fallback", "{default}");
    assert_eq!(default["bytes_up"], other_head.len(), "{default}");
}

// ---------------------------------------------------------------------------------------------
// A server that speaks first

#[test]
fn a_client_that_waits_for_the_server_reaches_the_default_after_the_peek_timeout() {
    // Like SMTP or MySQL: the greeting comes first, then the backend echoes.
    let greeter = Backend::start("220 hello", Behavior::TagEcho);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("sessions.jsonl");
    let targets = Targets {
        fallback: greeter.target(),
        ..Targets::none()
    };
    let (_proxy, port) = start_edge(dir.path(), &log, &targets, "peek_timeout = \"300ms\"");

    let started = Instant::now();
    let mut conn = connect(port);
    assert_eq!(read_line(&mut conn), "220 hello");
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(300), "greeted after {waited:?}");
    conn.write_all(b"EHLO client\n").unwrap();
    assert_eq!(read_line(&mut conn), "EHLO client");
    drop(conn);

    let all = records(&log, 1, |r| r["close"] != Value::Null);
    assert_eq!(all.len(), 1, "{all:#?}");
    let r = &all[0];
    assert!(r["route"].is_null(), "{r}");
    assert!(r["protocol"].is_null(), "{r}");
    assert_eq!(r["upstream"], "fallback", "{r}");
    assert_eq!(r["close"], "completed", "{r}");
    let peek = r["peek_ms"].as_f64().unwrap();
    assert!(peek >= 300.0 && peek < WAIT.as_millis() as f64, "peek_ms {peek}: {r}");
}
