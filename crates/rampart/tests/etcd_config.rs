//! The config in etcd: `rampart push` validates a config file and writes it to a real etcd in one
//! transaction conditioned on a revision; `rampart pull` reads it back. Two operators cannot
//! overwrite each other silently.

mod common;

use common::servers::EtcdServer;
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
    let (code, _, err) = run_rampart(dir.path(), &["pull", "--etcd", "https://127.0.0.1:2379"]);
    assert_eq!(code, 1);
    assert!(err.contains("http://HOST:PORT"), "{err}");
}

/// Writes `text` as the config under `prefix` straight through etcd's JSON gateway (as another
/// tool would, with no validation).
fn put_raw(etcd: &EtcdServer, prefix: &str, text: &str) {
    use base64::Engine as _;
    use std::io::{Read, Write};
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let body = serde_json::json!({ "key": b64(&format!("{prefix}config")), "value": b64(text) }).to_string();
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", etcd.port)).unwrap();
    let request = format!(
        "POST /v3/kv/put HTTP/1.1\r\nHost: x\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    conn.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
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
    // /api/status names the source and the revision applied.
    let mut client = std::net::TcpStream::connect(&admin).unwrap();
    let (status, _, body) = common::http::send(&mut client, &common::http::get("/api/status"));
    assert_eq!(status, 200);
    let status: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status["config"]["revision"], serde_json::json!(three), "{status}");
    let source = status["config"]["path"].as_str().unwrap_or_default();
    assert!(
        source.starts_with("etcd http://") && source.ends_with("/live/config"),
        "{status}"
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
