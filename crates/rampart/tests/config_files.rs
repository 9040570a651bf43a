//! Config files as operators write them: `include = [...]` files, `${VAR}` environment
//! variables, `rampart check` errors that point into the included file, and `run --watch`,
//! which reloads when a file of the config (a certificate included) changes.

use crate::common;

use std::net::TcpStream;
use std::path::Path;

use common::http::{get, send};
use common::tls::*;
use common::*;
use sha2::Digest;

/// `GET path` on a new connection: status and body.
fn fetch(port: u16, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to rampart");
    s.set_read_timeout(Some(WAIT)).unwrap();
    let (status, _, body) = send(&mut s, &get(path));
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// A listener `NAME` on `port` answering `path` with `body` (a TOML basic string's content).
fn respond_listener(name: &str, port: &str, path: &str, body: &str) -> String {
    format!(
        "[listeners.{name}]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\n\n\
         [[listeners.{name}.routes]]\nmatch = {{ path = \"{path}\" }}\nrespond = {{ status = 200, body = \"{body}\" }}\n"
    )
}

/// The main file: an HTTP listener `main` on `port` that includes `conf.d/*.toml`.
fn main_file(dir: &Path, port: u16) {
    let main = format!(
        "include = [\"conf.d/*.toml\"]\n\n{}",
        respond_listener("main", &port.to_string(), "/main", "main")
    );
    write_file(dir, "rampart.toml", &main);
    std::fs::create_dir_all(dir.join("conf.d")).unwrap();
}

#[test]
fn an_included_file_adds_a_listener_that_answers() {
    let dir = tempfile::tempdir().unwrap();
    let (port, site_port) = (free_port(), free_port());
    main_file(dir.path(), port);
    write_file(
        dir.path(),
        "conf.d/site.toml",
        &respond_listener("site", &site_port.to_string(), "/site", "from the included file"),
    );
    let admin_port = free_port();
    let admin_at = format!("127.0.0.1:{admin_port}");
    let mut proxy = Rampart::start(
        dir.path(),
        &["run", "-c", "rampart.toml", "--workers", "1", "--admin", &admin_at],
    );
    assert_eq!(fetch(port, "/main"), (200, "main".to_string()));
    assert_eq!(fetch(site_port, "/site"), (200, "from the included file".to_string()));
    // The admin API shows every file, each under its own header.
    let (_, config) = admin(admin_port, "GET", "/api/config", None);
    let text = config["text"].as_str().unwrap();
    assert!(
        text.starts_with("# file: rampart.toml\n") && text.contains("# file: conf.d/site.toml\n"),
        "{text}"
    );
    // The hash is that of the same text (whose last newline /api/config leaves out), so it
    // changes when any file does.
    let (_, status) = admin(admin_port, "GET", "/api/status", None);
    let hash: String = sha2::Sha256::digest(format!("{text}\n").as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(status["config"]["sha256"].as_str(), Some(hash.as_str()), "{status}");
    proxy.stop();
}

#[test]
fn environment_variables_fill_in_values_and_stay_inside_their_string() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = "[listeners.main]\nbind = \"127.0.0.1:${PORT}\"\nprotocol = \"http\"\n\n\
               [[listeners.main.routes]]\nmatch = { path = \"/\" }\nrespond = { status = ${STATUS:-203}, body = \"${GREETING}\" }\n";
    write_file(dir.path(), "rampart.toml", cfg);
    // A value that would end the string and add a table of its own if pasted in as it is.
    let greeting = "hello \"world\"\n[admin]\nlisten = \"127.0.0.1:1\"";
    let port_text = port.to_string();
    let vars = [("PORT", port_text.as_str()), ("GREETING", greeting)];
    let mut proxy = Rampart::start_with_env(dir.path(), &["run", "-c", "rampart.toml", "--workers", "1"], &vars);
    assert_eq!(fetch(port, "/"), (203, greeting.to_string()));
    proxy.stop();
    assert!(!proxy.log.iter().any(|l| l.contains("admin API")), "{:?}", proxy.log);
}

#[test]
fn check_points_into_the_included_file() {
    let dir = tempfile::tempdir().unwrap();
    main_file(dir.path(), free_port());
    write_file(
        dir.path(),
        "conf.d/app.toml",
        "[upstreams.app]\ntargets = [\"127.0.0.1:9\"]\nconnect_timeout = \"soon\"\n",
    );
    let (code, _, stderr) = run_rampart(dir.path(), &["check", "-c", "rampart.toml"]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.starts_with("conf.d/app.toml:3:19: "), "{stderr}");

    // An unset variable is an error at its reference.
    write_file(
        dir.path(),
        "conf.d/app.toml",
        "[upstreams.app]\ntargets = [\"${RAMPART_TEST_UNSET_BACKEND}\"]\n",
    );
    let (code, _, stderr) = run_rampart(dir.path(), &["check", "-c", "rampart.toml"]);
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(
        stderr.trim(),
        "conf.d/app.toml:2:13: environment variable RAMPART_TEST_UNSET_BACKEND is not set (write ${RAMPART_TEST_UNSET_BACKEND:-default} for a default)"
    );

    write_file(
        dir.path(),
        "conf.d/app.toml",
        "[upstreams.app]\ntargets = [\"127.0.0.1:9\"]\n",
    );
    let (code, stdout, stderr) = run_rampart(dir.path(), &["check", "-c", "rampart.toml"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.starts_with("rampart.toml: ok: "), "{stdout}");
}

#[test]
fn watch_reloads_when_an_included_file_changes_and_keeps_serving_through_a_broken_edit() {
    let dir = tempfile::tempdir().unwrap();
    let (port, site_port) = (free_port(), free_port());
    main_file(dir.path(), port);
    let site = |path: &str, body: &str| respond_listener("site", &site_port.to_string(), path, body);
    write_file(dir.path(), "conf.d/site.toml", &site("/old", "old"));
    let mut proxy = Rampart::start(dir.path(), &["run", "-c", "rampart.toml", "--watch", "--workers", "1"]);
    assert_eq!(fetch(site_port, "/old"), (200, "old".to_string()));

    // An edit in place.
    write_file(dir.path(), "conf.d/site.toml", &site("/new", "new"));
    proxy.wait_for("reloaded");
    assert_eq!(fetch(site_port, "/new"), (200, "new".to_string()));
    assert_eq!(fetch(site_port, "/old").0, 404);

    // A broken edit: the error at its place in the included file, and the running config stays.
    write_file(dir.path(), "conf.d/site.toml", "[listeners.site\n");
    let failed = proxy.wait_for("reload failed");
    assert!(failed.contains("conf.d/site.toml:1:"), "{failed}");
    assert_eq!(fetch(site_port, "/new"), (200, "new".to_string()));

    // A new file matching the include pattern, written elsewhere and renamed in, as editors do.
    write_file(dir.path(), "conf.d/site.toml", &site("/new", "new"));
    proxy.wait_for("reloaded");
    let extra_port = free_port();
    write_file(
        dir.path(),
        "extra.tmp",
        &respond_listener("extra", &extra_port.to_string(), "/extra", "extra"),
    );
    std::fs::rename(dir.path().join("extra.tmp"), dir.path().join("conf.d/extra.toml")).unwrap();
    proxy.wait_for("reloaded");
    assert_eq!(fetch(extra_port, "/extra"), (200, "extra".to_string()));
    proxy.stop();
}

#[test]
fn watch_picks_up_a_renewed_certificate() {
    const NAME: &str = "watch.example.com";
    let backend = common::http::HttpBackend::start(common::http::Reply::Echo);
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("Rampart Test CA");
    let first = ca.issue(&CertSpec::new(&[NAME]));
    let second = ca.issue(&CertSpec::new(&[NAME]));
    first.write(dir.path(), "site");
    let port = free_port();
    let tls = certificates(&[("site.pem".to_string(), "site.key".to_string())]);
    write_file(
        dir.path(),
        "rampart.toml",
        &https_config(port, &backend.target(), "", &tls),
    );
    let mut proxy = Rampart::start(dir.path(), &["run", "-c", "rampart.toml", "--watch", "--workers", "1"]);
    let client = ClientOpts::new(&ca).build();
    let both = [&first, &second];
    assert_eq!(served(&handshake(port, &client, NAME).unwrap(), &both), Some(0));

    second.write(dir.path(), "site");
    proxy.wait_for("reloaded");
    assert_eq!(served(&handshake(port, &client, NAME).unwrap(), &both), Some(1));
    proxy.stop();
}
