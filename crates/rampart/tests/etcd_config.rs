//! The config in etcd: `rampart push` validates a config file and writes it to a real etcd in one
//! transaction conditioned on a revision; `rampart pull` reads it back. Two operators cannot
//! overwrite each other silently.

use crate::common;

use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::servers::EtcdServer;
use common::tls::eventually;
use common::{run_rampart, write_file};

fn config(port: u16, body: &str) -> String {
    format!(
        "[listeners.web]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\n\n\
         [[listeners.web.routes]]\nname = \"hello\"\nrespond = {{ status = 200, body = \"{body}\" }}\n"
    )
}

/// `rampart push` of a config serving `body` on `port` to `prefix` of `url`: the new revision.
fn push_config(dir: &std::path::Path, url: &str, prefix: &str, port: u16, body: &str) -> i64 {
    let file = write_file(dir, "rampart.toml", &config(port, body));
    let (code, out, err) = run_rampart(dir, &["push", "-c", &file, "--etcd", url, "--etcd-prefix", prefix]);
    assert_eq!(code, 0, "{out}{err}");
    pushed_revision(&out)
}

/// The revision `rampart push` printed (`... at revision N`).
fn pushed_revision(stdout: &str) -> i64 {
    stdout
        .trim()
        .rsplit(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no revision in {stdout:?}"))
}

#[test]
fn push_and_pull_through_a_real_etcd_with_revisions() {
    let etcd = EtcdServer::start();
    let dir = tempfile::tempdir().unwrap();
    let url = etcd.url();
    let prefix = "/fleet-a/";
    let pull = || run_rampart(dir.path(), &["pull", "--etcd", &url, "--etcd-prefix", prefix]);

    // Nothing there yet.
    let (code, _, err) = pull();
    assert_eq!(code, 1);
    assert!(err.contains("/fleet-a/config: no config in etcd"), "{err}");

    // A valid config goes in, and comes back as written.
    let first = config(8080, "one");
    let file = write_file(dir.path(), "rampart.toml", &first);
    let (code, out, err) = run_rampart(
        dir.path(),
        &["push", "-c", &file, "--etcd", &url, "--etcd-prefix", prefix],
    );
    assert_eq!(code, 0, "{out}{err}");
    let r1 = pushed_revision(&out);
    let (code, text, err) = pull();
    assert_eq!((code, text.as_str()), (0, first.as_str()), "{err}");
    assert!(err.contains(&format!("revision {r1}")), "{err}");

    // An invalid config is refused before anything is written, with its place.
    let bad = write_file(dir.path(), "bad.toml", "[listeners.web]\nbind = 42\n");
    let (code, _, err) = run_rampart(
        dir.path(),
        &["push", "-c", &bad, "--etcd", &url, "--etcd-prefix", prefix],
    );
    assert_eq!(code, 1);
    assert!(err.contains("bad.toml:2:") && err.contains("not pushed"), "{err}");
    assert_eq!(pull().1, first);

    // Two operators edit revision r1: the first push wins, the second is refused.
    let second = write_file(dir.path(), "second.toml", &config(8080, "two"));
    let r1s = r1.to_string();
    let args = |file: &str| -> Vec<String> {
        [
            "push",
            "-c",
            file,
            "--etcd",
            &url,
            "--etcd-prefix",
            prefix,
            "--expect-revision",
            &r1s,
        ]
        .map(String::from)
        .to_vec()
    };
    let run = |args: Vec<String>| run_rampart(dir.path(), &args.iter().map(String::as_str).collect::<Vec<_>>());
    let (code, out, err) = run(args(&second));
    assert_eq!(code, 0, "{out}{err}");
    let r2 = pushed_revision(&out);
    assert!(r2 > r1);
    let third = write_file(dir.path(), "third.toml", &config(8080, "three"));
    let (code, _, err) = run(args(&third));
    assert_eq!(code, 1);
    assert!(
        err.contains(&format!("changed since revision {r1} (it is at {r2} now)")),
        "{err}"
    );
    assert_eq!(pull().1, config(8080, "two"));

    // --force writes over it.
    let (code, out, err) = run_rampart(
        dir.path(),
        &["push", "-c", &third, "--etcd", &url, "--etcd-prefix", prefix, "--force"],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(pushed_revision(&out) > r2);
    assert_eq!(pull().1, config(8080, "three"));

    // Another prefix is another fleet.
    let (code, _, _) = run_rampart(dir.path(), &["pull", "--etcd", &url, "--etcd-prefix", "/fleet-b/"]);
    assert_eq!(code, 1);
}

#[test]
fn an_etcd_that_is_not_there_is_said_plainly() {
    let dir = tempfile::tempdir().unwrap();
    let dead = common::dead_target();
    let (code, _, err) = run_rampart(dir.path(), &["pull", "--etcd", &format!("http://{dead}")]);
    assert_eq!(code, 1);
    assert!(err.contains(&format!("etcd at {dead}")), "{err}");
    let (code, _, err) = run_rampart(dir.path(), &["pull", "--etcd", "127.0.0.1:2379"]);
    assert_eq!(code, 1);
    assert!(err.contains("http://HOST:PORT or https://HOST:PORT"), "{err}");
    let (code, _, err) = run_rampart(
        dir.path(),
        &["pull", "--etcd", "http://127.0.0.1:2379", "--etcd-ca", "ca.pem"],
    );
    assert_eq!(code, 1);
    assert!(err.contains("for https:// endpoints"), "{err}");
}

/// Writes `text` as the config under `prefix`, as [`EtcdServer::put`].
fn put_raw(etcd: &EtcdServer, prefix: &str, text: &str) -> i64 {
    etcd.put(&format!("{prefix}config"), text)
}

/// The body of `GET /` on `port`.
fn body_at(port: u16) -> String {
    let mut client = common::connect(port);
    let (_, _, body) = common::http::send(&mut client, &common::http::get("/"));
    String::from_utf8_lossy(&body).into_owned()
}

/// Waits until `GET /` on `port` answers `want`.
fn eventually_serves(port: u16, want: &str) {
    let deadline = std::time::Instant::now() + common::WAIT;
    loop {
        let got = body_at(port);
        if got == want {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "still {got:?}, not {want:?}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// `rampart run --etcd`: an instance runs from the config in etcd and applies each change pushed
/// there, refuses a bad one written by another tool (keeping the running config), and takes the
/// next good one.
#[test]
fn an_instance_runs_from_etcd_and_follows_each_change() {
    let etcd = EtcdServer::start();
    let dir = tempfile::tempdir().unwrap();
    let (url, prefix) = (etcd.url(), "/live/");
    let port = common::free_port();
    let push = |body: &str| push_config(dir.path(), &url, prefix, port, body);
    push("one");
    let admin = format!("127.0.0.1:{}", common::free_port());
    let args = [
        "run",
        "--etcd",
        &url,
        "--etcd-prefix",
        prefix,
        "--workers",
        "1",
        "--admin",
        &admin,
    ];
    let mut proxy = common::Rampart::start(dir.path(), &args);
    assert_eq!(body_at(port), "one");
    push("two");
    eventually_serves(port, "two");
    put_raw(&etcd, prefix, "[listeners.web]\nbind = 42\n");
    let refused = proxy.wait_for("reload failed; the running config stays in force");
    assert!(refused.contains("etcd:/live/config:2:"), "{refused}");
    assert_eq!(body_at(port), "two");
    let three = push("three");
    eventually_serves(port, "three");
    // /api/status names the source and the revision applied (recorded just after the new
    // config takes traffic: wait for it).
    let status_now = || {
        let mut client = std::net::TcpStream::connect(&admin).unwrap();
        let (status, _, body) = common::http::send(&mut client, &common::http::get("/api/status"));
        assert_eq!(status, 200);
        serde_json::from_slice::<serde_json::Value>(&body).unwrap()
    };
    eventually("/api/status shows the revision applied", || {
        status_now()["config"]["revision"] == serde_json::json!(three)
    });
    let status = status_now();
    assert_eq!(status["config"]["revision"], serde_json::json!(three), "{status}");
    let source = status["config"]["path"].as_str().unwrap_or_default();
    assert!(
        source.starts_with("etcd http://") && source.ends_with("/live/config"),
        "{status}"
    );

    // How long from a write to etcd until the instance serves it (printed, not asserted: it is
    // a measurement, not a condition for passing).
    let mut took: Vec<Duration> = (0..10)
        .map(|i| {
            let body = format!("v{i}");
            put_raw(&etcd, prefix, &config(port, &body));
            let written = Instant::now();
            while body_at(port) != body {
                assert!(written.elapsed() < common::WAIT, "{body} never served");
                std::thread::sleep(Duration::from_millis(1));
            }
            written.elapsed()
        })
        .collect();
    took.sort();
    println!(
        "etcd write -> served (10 writes, 1 ms polling): min {:?}, median {:?}, max {:?}",
        took[0], took[5], took[9]
    );
    assert_eq!(proxy.stop(), 0);
}

/// `--state-dir`: the last config applied from etcd is kept on disk, and an instance that starts
/// while etcd is down serves it; without a kept config it does not start.
#[test]
fn an_instance_starts_from_the_kept_config_while_etcd_is_down() {
    let etcd = EtcdServer::start();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let (url, prefix) = (etcd.url(), "/kept/");
    let port = common::free_port();
    push_config(dir.path(), &url, prefix, port, "kept");
    let state_arg = state.display().to_string();
    let args = [
        "run",
        "--etcd",
        &url,
        "--etcd-prefix",
        prefix,
        "--state-dir",
        &state_arg,
        "--workers",
        "1",
    ];
    let mut first = common::Rampart::start(dir.path(), &args);
    assert_eq!(body_at(port), "kept");
    assert_eq!(first.stop(), 0);
    assert_eq!(
        std::fs::read_to_string(state.join("etcd-config.toml")).unwrap(),
        config(port, "kept")
    );

    drop(etcd);
    let mut second = common::Rampart::start(dir.path(), &args);
    assert_eq!(body_at(port), "kept");
    assert!(
        second
            .log
            .iter()
            .any(|l| l.contains("starting from the config kept in")),
        "{:?}",
        second.log
    );
    assert_eq!(second.stop(), 0);

    // No kept config: no start, and why.
    let other = dir.path().join("empty-state").display().to_string();
    let (code, _, err) = run_rampart(dir.path(), &["run", "--etcd", &url, "--state-dir", &other]);
    assert_eq!(code, 1);
    assert!(err.contains("etcd at"), "{err}");
}

/// A TCP relay on 127.0.0.1 in front of etcd, so a test can break an instance's watch without
/// stopping etcd: [`Relay::blip`] closes every connection through it; [`Relay::cut`] does that
/// and closes each new one at once, until [`Relay::mend`].
struct Relay {
    port: u16,
    /// Connections accepted so far.
    accepted: Arc<AtomicUsize>,
    /// Bumped by each cut: a connection made before it is closed.
    cuts: Arc<AtomicUsize>,
    open: Arc<AtomicBool>,
}

impl Relay {
    fn start(etcd: &EtcdServer) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let relay = Relay {
            port: listener.local_addr().unwrap().port(),
            accepted: Arc::default(),
            cuts: Arc::default(),
            open: Arc::new(AtomicBool::new(true)),
        };
        let (accepted, cuts, open, to) = (
            relay.accepted.clone(),
            relay.cuts.clone(),
            relay.open.clone(),
            etcd.port,
        );
        std::thread::spawn(move || {
            for down in listener.incoming().flatten() {
                accepted.fetch_add(1, Ordering::SeqCst);
                if !open.load(Ordering::SeqCst) {
                    continue; // dropped: closed at once
                }
                let Ok(up) = TcpStream::connect(("127.0.0.1", to)) else {
                    continue;
                };
                let generation = cuts.load(Ordering::SeqCst);
                let pairs = [(down.try_clone().unwrap(), up.try_clone().unwrap()), (up, down)];
                for (from, to) in pairs {
                    let cuts = cuts.clone();
                    std::thread::spawn(move || pump(from, to, &cuts, generation));
                }
            }
        });
        relay
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    fn blip(&self) {
        self.cuts.fetch_add(1, Ordering::SeqCst);
    }

    fn cut(&self) {
        self.open.store(false, Ordering::SeqCst);
        self.blip();
    }

    fn mend(&self) {
        self.open.store(true, Ordering::SeqCst);
    }
}

/// Copies `from` to `to` until either ends or a cut comes after `generation`; then closes both.
fn pump(mut from: TcpStream, mut to: TcpStream, cuts: &AtomicUsize, generation: usize) {
    use std::io::{Read, Write};
    let _ = from.set_read_timeout(Some(Duration::from_millis(5)));
    let mut buf = [0u8; 16 * 1024];
    while cuts.load(Ordering::SeqCst) == generation {
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

/// An instance running from `url` (`--etcd`) under `prefix`, with its admin API on the port
/// returned, and `extra` arguments.
fn run_from_etcd(dir: &std::path::Path, url: &str, prefix: &str, extra: &[&str]) -> (common::Rampart, u16) {
    let admin = common::free_port();
    let admin_addr = format!("127.0.0.1:{admin}");
    let mut args = vec![
        "run",
        "--etcd",
        url,
        "--etcd-prefix",
        prefix,
        "--workers",
        "1",
        "--admin",
        &admin_addr,
    ];
    args.extend_from_slice(extra);
    (common::Rampart::start(dir, &args), admin)
}

/// Reloads so far from `/api/status`: (applied, refused).
fn reloads(admin: u16) -> (u64, u64) {
    let (_, status) = common::admin(admin, "GET", "/api/status", None);
    let count = |r: &str| status["reloads"][r].as_u64().unwrap();
    (count("succeeded"), count("failed"))
}

/// [`reloads`] once a reload is recorded: `/api/status` is stored just after the new config
/// starts serving, so a test that saw it serve may ask a moment too soon.
fn recorded_reloads(admin: u16) -> (u64, u64) {
    let mut seen = (0, 0);
    eventually("the reload is recorded in /api/status", || {
        seen = reloads(admin);
        seen != (0, 0)
    });
    seen
}

/// `rampart_config_source_up` on `admin`.
fn source_up(admin: u16) -> f64 {
    common::scrape::value(&common::scrape::scrape(admin), "rampart_config_source_up", &[])
}

/// Compacts etcd's history up to its current revision (`physical`: done when this returns).
fn compact(etcd: &EtcdServer, revision: i64) {
    let body = serde_json::json!({ "revision": revision.to_string(), "physical": true });
    let (status, answer) = etcd.call("/v3/kv/compaction", &body, None);
    assert_eq!(status, 200, "{answer}");
}

/// A compaction under a watching instance, and its watch made again afterwards (past the
/// compacted history), reload nothing: nothing changed. A push afterwards arrives, as one reload.
#[test]
fn a_compaction_under_a_watching_instance_reloads_nothing_and_misses_nothing() {
    let etcd = EtcdServer::start();
    let relay = Relay::start(&etcd);
    let dir = tempfile::tempdir().unwrap();
    let (prefix, port) = ("/compact/", common::free_port());
    put_raw(&etcd, prefix, &config(port, "one"));
    let (mut proxy, admin) = run_from_etcd(dir.path(), &relay.url(), prefix, &[]);
    assert_eq!(body_at(port), "one");

    // Other keys move the store's revision on; then etcd forgets all history before now.
    let mut now = 0;
    for i in 0..5 {
        now = etcd.put("/compact/other", &i.to_string());
    }
    compact(&etcd, now);
    // The watch breaks: the instance reads the key again and watches again (two connections
    // through the relay, the reload that a change would cause done in between).
    let before = relay.accepted();
    relay.blip();
    eventually("the instance watches again", || relay.accepted() >= before + 2);
    assert_eq!(reloads(admin), (0, 0));

    put_raw(&etcd, prefix, &config(port, "two"));
    eventually_serves(port, "two");
    assert_eq!(recorded_reloads(admin), (1, 0));
    assert_eq!(proxy.stop(), 0);
}

/// Changes pushed while an instance's watch is lost (etcd out of its reach) are applied when it
/// is back, in one reload straight to the latest. With `--ready-requires-etcd`, /readyz says 503
/// meanwhile; without it the instance stays ready on its last good config. /api/status and
/// /metrics say when the config in force was applied.
#[test]
fn changes_made_while_the_watch_is_lost_are_applied_once_etcd_is_back() {
    let etcd = EtcdServer::start();
    let relay = Relay::start(&etcd);
    let dir = tempfile::tempdir().unwrap();
    let (port, lax_port) = (common::free_port(), common::free_port());
    put_raw(&etcd, "/lost/", &config(port, "one"));
    put_raw(&etcd, "/lax/", &config(lax_port, "lax"));
    let (mut proxy, admin) = run_from_etcd(dir.path(), &relay.url(), "/lost/", &["--ready-requires-etcd"]);
    let (mut lax, lax_admin) = run_from_etcd(dir.path(), &relay.url(), "/lax/", &[]);
    assert_eq!(body_at(port), "one");
    let ready = |admin: u16| common::admin(admin, "GET", "/readyz", None);
    assert_eq!(ready(admin).0, 200);

    relay.cut();
    eventually("both instances see etcd gone", || {
        source_up(admin) == 0.0 && source_up(lax_admin) == 0.0
    });
    let (status, why) = ready(admin);
    assert_eq!(status, 503, "{why}");
    assert!(why["reason"].as_str().unwrap().contains("etcd"), "{why}");
    assert_eq!(ready(lax_admin).0, 200, "serving its last good config, it stays ready");
    let (_, lax_status) = common::admin(lax_admin, "GET", "/api/status", None);
    assert_eq!(lax_status["config"]["reachable"], false, "{lax_status}");
    put_raw(&etcd, "/lost/", &config(port, "three"));
    let four = put_raw(&etcd, "/lost/", &config(port, "four"));
    assert_eq!(body_at(port), "one");

    let mended = unix_now();
    relay.mend();
    eventually_serves(port, "four");
    assert_eq!(recorded_reloads(admin), (1, 0), "one reload, straight to the latest");
    eventually("etcd is up again", || source_up(admin) == 1.0);
    assert_eq!(ready(admin).0, 200);

    let (_, status) = common::admin(admin, "GET", "/api/status", None);
    assert_eq!(status["config"]["revision"], serde_json::json!(four), "{status}");
    assert_eq!(status["config"]["reachable"], true, "{status}");
    let applied = status["loaded_at"].as_u64().unwrap();
    assert!(applied >= mended, "{status}");
    let samples = common::scrape::scrape(admin);
    let metric = common::scrape::value(&samples, "rampart_config_last_reload_success_timestamp_seconds", &[]);
    assert_eq!(metric as u64, applied);
    assert_eq!(
        common::scrape::value(&samples, "rampart_config_etcd_revision", &[]),
        four as f64
    );
    assert_eq!(proxy.stop(), 0);
    assert_eq!(lax.stop(), 0);
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Turns on authentication in `etcd`: a `root` user (of the `root` role) with `password`.
fn enable_auth(etcd: &EtcdServer, password: &str) {
    let calls = [
        (
            "/v3/auth/user/add",
            serde_json::json!({ "name": "root", "password": password }),
        ),
        ("/v3/auth/role/add", serde_json::json!({ "name": "root" })),
        (
            "/v3/auth/user/grant",
            serde_json::json!({ "user": "root", "role": "root" }),
        ),
        ("/v3/auth/enable", serde_json::json!({})),
    ];
    for (path, body) in calls {
        let (status, answer) = etcd.call(path, &body, None);
        assert_eq!(status, 200, "{path}: {answer}");
    }
}

/// `--etcd-user` against an etcd with authentication enabled: push, pull and run log in (the
/// password from a file or from RAMPART_ETCD_PASSWORD); without a user, or with a wrong
/// password, the error says so. A token etcd no longer knows (etcd restarted) is replaced by a
/// new login, and the next push arrives. Of two endpoints, the dead one is passed over.
#[test]
fn an_instance_logs_in_to_an_etcd_with_authentication() {
    let mut etcd = EtcdServer::start();
    enable_auth(&etcd, "s3cret");
    let dir = tempfile::tempdir().unwrap();
    let port = common::free_port();
    let password_file = write_file(dir.path(), "etcd-password", "s3cret\n");
    let wrong_file = write_file(dir.path(), "wrong-password", "nope\n");
    let dead = common::dead_target();
    let urls = format!("http://{dead},{}", etcd.url());
    let push = |body: &str, password: &str| {
        let file = write_file(dir.path(), "rampart.toml", &config(port, body));
        let args = [
            "push",
            "-c",
            &file,
            "--etcd",
            &urls,
            "--etcd-user",
            "root",
            "--etcd-password-file",
            password,
        ];
        run_rampart(dir.path(), &args)
    };

    let file = write_file(dir.path(), "rampart.toml", &config(port, "one"));
    let (code, _, err) = run_rampart(dir.path(), &["push", "-c", &file, "--etcd", &etcd.url()]);
    assert_eq!(code, 1);
    assert!(err.contains("authentication") && err.contains("--etcd-user"), "{err}");
    let (code, _, err) = push("one", &wrong_file);
    assert_eq!(code, 1);
    assert!(err.contains("cannot authenticate as root"), "{err}");
    let (code, out, err) = push("one", &password_file);
    assert_eq!(code, 0, "{out}{err}");

    let admin = format!("127.0.0.1:{}", common::free_port());
    let args = [
        "run",
        "--etcd",
        &urls,
        "--etcd-user",
        "root",
        "--workers",
        "1",
        "--admin",
        &admin,
    ];
    let mut proxy = common::Rampart::start_with_env(dir.path(), &args, &[("RAMPART_ETCD_PASSWORD", "s3cret")]);
    assert_eq!(body_at(port), "one");
    let (code, out, err) = push("two", &password_file);
    assert_eq!(code, 0, "{out}{err}");
    eventually_serves(port, "two");

    // A restarted etcd has forgotten every token.
    etcd.kill();
    etcd.restart();
    let (code, out, err) = push("three", &password_file);
    assert_eq!(code, 0, "{out}{err}");
    eventually_serves(port, "three");
    assert_eq!(proxy.stop(), 0);
}

/// `--etcd https://...` to an etcd that speaks TLS and asks for a client certificate: push, pull
/// and run with `--etcd-ca`, `--etcd-cert` and `--etcd-key`; without the client certificate,
/// the error names etcd.
#[test]
fn an_instance_reaches_etcd_over_tls_with_a_client_certificate() {
    use common::tls::{Ca, CertSpec};
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("etcd test CA");
    let ca_file = ca.write(dir.path(), "ca.pem");
    let (server_cert, server_key) = ca.issue(&CertSpec::new(&["127.0.0.1"])).write(dir.path(), "etcd");
    let (client_cert, client_key) = ca.issue(&CertSpec::new(&["rampart"])).write(dir.path(), "client");
    let etcd = EtcdServer::start_tls(&server_cert, &server_key, &ca_file);
    let url = etcd.url();
    assert!(url.starts_with("https://"), "{url}");
    let tls = [
        "--etcd-ca",
        &ca_file,
        "--etcd-cert",
        &client_cert,
        "--etcd-key",
        &client_key,
    ];
    let with_tls = |args: &[&str]| -> Vec<String> { args.iter().chain(&tls).map(|a| a.to_string()).collect() };
    let run = |args: Vec<String>| run_rampart(dir.path(), &args.iter().map(String::as_str).collect::<Vec<_>>());
    eventually("etcd answers over TLS", || {
        let (code, _, err) = run(with_tls(&["pull", "--etcd", &url]));
        code == 1 && err.contains("no config in etcd")
    });

    let (code, _, err) = run_rampart(dir.path(), &["pull", "--etcd", &url, "--etcd-ca", &ca_file]);
    assert_eq!(code, 1);
    assert!(err.contains(&format!("etcd at 127.0.0.1:{}", etcd.port)), "{err}");

    let port = common::free_port();
    let push = |body: &str| {
        let file = write_file(dir.path(), "rampart.toml", &config(port, body));
        let (code, out, err) = run(with_tls(&["push", "-c", &file, "--etcd", &url]));
        assert_eq!(code, 0, "{out}{err}");
    };
    push("one");
    let args = with_tls(&["run", "--etcd", &url, "--workers", "1"]);
    let mut proxy = common::Rampart::start(dir.path(), &args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(body_at(port), "one");
    push("two");
    eventually_serves(port, "two");
    assert_eq!(proxy.stop(), 0);
}
