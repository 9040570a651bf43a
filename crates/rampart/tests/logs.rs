//! The process log over a real process: `--log-format json` and `[global] log_format = "json"`
//! give one JSON object per stderr line, and each key event (health change, drain through the
//! admin API, reload applied or refused, bind failure, SIGTERM drain) carries its fields;
//! `RUST_LOG` and `[global] log_level` set the level.

use crate::common;

use std::net::TcpListener;

use common::http::{HttpBackend, Reply};
use common::*;
use serde_json::Value;

/// Every line parsed as a JSON object with timestamp, level, target, message and fields.
fn parse_all(log: &[String]) -> Vec<Value> {
    assert!(!log.is_empty());
    log.iter()
        .map(|line| {
            let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
            let level = v["level"].as_str().unwrap_or_else(|| panic!("no level: {line}"));
            assert!(["ERROR", "WARN", "INFO", "DEBUG", "TRACE"].contains(&level), "{line}");
            let time = v["timestamp"]
                .as_str()
                .unwrap_or_else(|| panic!("no timestamp: {line}"));
            assert!(time.len() == 27 && time.ends_with('Z'), "{line}");
            assert!(v["target"].is_string(), "{line}");
            assert!(v["message"].is_string(), "{line}");
            assert!(v["fields"].is_object(), "{line}");
            v
        })
        .collect()
}

/// The one event whose message starts with `message` (there must be exactly one).
fn event<'a>(events: &'a [Value], message: &str) -> &'a Value {
    let found: Vec<&Value> = events
        .iter()
        .filter(|e| e["message"].as_str().unwrap().starts_with(message))
        .collect();
    assert_eq!(found.len(), 1, "{message:?} in {events:#?}");
    found[0]
}

#[test]
fn json_lines_carry_the_fields_of_every_key_event() {
    let live = HttpBackend::start(Reply::Echo);
    let dead = dead_target();
    let dir = tempfile::tempdir().unwrap();
    let (admin_port, port) = (free_port(), free_port());
    let cfg = |extra: &str| {
        format!(
            "[admin]\nlisten = \"127.0.0.1:{admin_port}\"\n\n\
             [listeners.web]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\nupstream = \"app\"\n\n\
             [upstreams.app]\ntargets = [\"{}\", \"{dead}\"]\n\
             [upstreams.app.health_check]\ninterval = \"50ms\"\nfall = 1\nrise = 1\n{extra}",
            live.target()
        )
    };
    let path = write_file(dir.path(), "r.toml", &cfg(""));
    let mut proxy = Rampart::start(
        dir.path(),
        &["run", "-c", &path, "--workers", "1", "--log-format", "json"],
    );
    proxy.wait_for("target is down");
    // The dead target comes back (and stays).
    let _back = Backend::start_on("back", Behavior::TagEcho, dead.parse().unwrap());
    proxy.wait_for("target is up");

    let drain = format!("/api/upstreams/app/targets/{}/drain", live.target().replace(':', "%3A"));
    assert_eq!(admin(admin_port, "POST", &drain, None).0, 200);
    assert_eq!(
        admin(admin_port, "POST", &drain.replace("/drain", "/enable"), None).0,
        200
    );
    proxy.wait_for("target enabled");

    assert!(proxy.reload().contains("reloaded"));
    write_file(dir.path(), "r.toml", &cfg("timeout = \"often\"\n"));
    assert!(proxy.reload().contains("reload failed"));
    let held = TcpListener::bind("127.0.0.1:0").unwrap();
    let held_addr = held.local_addr().unwrap().to_string();
    let second = format!("[listeners.second]\nbind = \"{held_addr}\"\nupstream = \"app\"\n");
    write_file(dir.path(), "r.toml", &(cfg("") + &second));
    assert!(proxy.reload().contains("reload failed"));
    assert_eq!(proxy.stop(), 0);

    let events = parse_all(&proxy.log);
    let fields = |message: &str| event(&events, message)["fields"].clone();
    let down = event(&events, "health check: target is down");
    assert_eq!(down["level"], "WARN");
    assert_eq!(down["target"], "rampart_proxy::checker");
    let down = &down["fields"];
    assert_eq!(
        (&down["upstream"], &down["target"], &down["state"]),
        (&"app".into(), &dead.as_str().into(), &"down".into())
    );
    assert!(down["reason"].as_str().unwrap().contains("refused"), "{down}");
    assert_eq!(down["checks"], 1);
    let up = fields("health check: target is up");
    assert_eq!(
        (&up["upstream"], &up["target"], &up["state"]),
        (&"app".into(), &dead.as_str().into(), &"up".into())
    );

    for (message, action) in [("admin: target drained", "drain"), ("admin: target enabled", "enable")] {
        let f = fields(message);
        assert_eq!(f["upstream"], "app");
        assert_eq!(f["target"], live.target().as_str());
        assert_eq!(f["action"], action);
    }

    let applied = fields("reloaded");
    assert_eq!(applied["result"], "applied");
    assert_eq!(applied["sha256"].as_str().unwrap().len(), 64, "{applied}");
    assert!(
        applied["summary"]
            .as_str()
            .unwrap()
            .starts_with("1 listener, 1 upstream, 2 targets"),
        "{applied}"
    );
    let refused: Vec<&Value> = events
        .iter()
        .filter(|e| e["message"].as_str().unwrap().starts_with("reload failed"))
        .map(|e| &e["fields"])
        .collect();
    assert_eq!(refused.len(), 2, "{events:#?}");
    assert!(refused.iter().all(|f| f["result"] == "refused"));
    let errors = refused[0]["errors"].as_str().unwrap();
    assert!(errors.starts_with(&format!("{path}:15:11: ")), "{errors}");
    assert!(
        refused[1]["errors"].as_str().unwrap().contains(&held_addr),
        "{refused:?}"
    );
    let bind = fields("cannot bind a listener");
    assert_eq!(bind["listener"], "second");
    assert_eq!(bind["address"], held_addr.as_str());
    assert_eq!(bind["error"], "already in use by another process");

    let start = fields("SIGTERM: no longer accepting");
    assert_eq!(
        (&start["signal"], start["timeout_ms"].as_u64()),
        (&"SIGTERM".into(), Some(30_000))
    );
    let end = fields("drain ended");
    assert_eq!((&end["signal"], &end["cut"]), (&"SIGTERM".into(), &0.into()));
    assert!(end["elapsed_ms"].is_u64(), "{end}");
    assert_eq!(events.last().unwrap()["message"], "stopped");
}

#[test]
fn the_config_file_asks_for_json_and_its_level_follows_a_reload() {
    let backend = HttpBackend::start(Reply::Echo);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = |global: &str| {
        format!(
            "[global]\nlog_format = \"json\"\n{global}\n\
             [listeners.web]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\nupstream = \"app\"\n\
             [upstreams.app]\ntargets = [\"{}\"]\n",
            backend.target()
        )
    };
    let path = write_file(dir.path(), "r.toml", &cfg(""));
    let mut proxy = Rampart::start_with_env(dir.path(), &["run", "-c", &path, "--workers", "1"], &[]);
    bad_request(port);
    write_file(dir.path(), "r.toml", &cfg("log_level = \"debug\""));
    assert!(proxy.reload().contains("reloaded"));
    // The new level is in force by the time the reload is logged.
    assert!(
        !proxy.log.iter().any(|l| l.contains("bad request from")),
        "{:?}",
        proxy.log
    );
    bad_request(port);
    proxy.wait_for("bad request from");
    // The format is read at start only: a reload that changes it is refused, naming it.
    write_file(
        dir.path(),
        "r.toml",
        &cfg("log_level = \"debug\"").replace("\"json\"", "\"text\""),
    );
    assert!(proxy.reload().contains("reload failed"));
    assert_eq!(proxy.stop(), 0);

    let events = parse_all(&proxy.log);
    let level = &event(&events, "log level changed")["fields"];
    assert_eq!((&level["from"], &level["to"]), (&"info".into(), &"debug".into()));
    let refused = event(&events, "reload failed");
    assert_eq!(refused["level"], "ERROR");
    let errors = refused["fields"]["errors"].as_str().unwrap();
    assert!(
        errors.starts_with("[global] log_format changed from json to text: "),
        "{errors}"
    );
    assert_eq!(event(&events, "bad request from")["level"], "DEBUG");
}

/// A request that cannot be parsed; the 400 comes back after the proxy has logged it.
fn bad_request(port: u16) {
    let mut client = connect(port);
    let (status, _, _) = common::http::send(&mut client, b"NOT A REQUEST\r\n\r\n");
    assert_eq!(status, 400);
}

#[test]
fn rust_log_raises_the_level_over_the_config() {
    let backend = HttpBackend::start(Reply::Echo);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let path = write_file(
        dir.path(),
        "r.toml",
        &format!(
            "[global]\nlog_level = \"info\"\n\
             [listeners.web]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\nupstream = \"app\"\n\
             [upstreams.app]\ntargets = [\"{}\"]\n",
            backend.target()
        ),
    );
    let args = ["run", "-c", &path, "--workers", "1"];
    // At info, the bad request (logged at debug before its 400 is sent) leaves no line before
    // the reload's.
    let mut quiet = Rampart::start_with_env(dir.path(), &args, &[]);
    bad_request(port);
    assert!(quiet.reload().contains("reloaded"));
    assert!(
        !quiet.log.iter().any(|l| l.contains("bad request from")),
        "{:?}",
        quiet.log
    );
    assert_eq!(quiet.stop(), 0);

    let mut debug = Rampart::start_with_env(dir.path(), &args, &[("RUST_LOG", "debug")]);
    bad_request(port);
    let line = debug.wait_for("bad request from");
    assert!(line.contains(" DEBUG bad request from 127.0.0.1:"), "{line}");
    assert_eq!(debug.stop(), 0);
}

#[test]
fn a_bind_failure_at_start_is_one_json_line_with_its_fields() {
    let held = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = held.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let (code, _, err) = run_rampart(
        dir.path(),
        &["tcp", "--listen", &addr, "--to", "127.0.0.1:1", "--log-format", "json"],
    );
    assert_eq!(code, 1, "{err}");
    let lines: Vec<String> = err.lines().map(str::to_string).collect();
    let events = parse_all(&lines);
    assert_eq!(events.len(), 1, "{err}");
    assert_eq!(events[0]["level"], "ERROR");
    assert_eq!(events[0]["message"], "cannot bind a listener");
    let f = &events[0]["fields"];
    assert_eq!(
        (&f["listener"], &f["address"], &f["error"]),
        (
            &"default".into(),
            &addr.as_str().into(),
            &"already in use by another process".into()
        )
    );
}

#[test]
fn bad_log_settings_are_config_errors_at_their_place() {
    let dir = tempfile::tempdir().unwrap();
    let body = config(free_port(), &["127.0.0.1:1".into()], "", "");
    let path = write_file(
        dir.path(),
        "bad.toml",
        &format!("[global]\nlog_level = \"chatty\"\nlog_format = \"yaml\"\n{body}"),
    );
    let (code, _, err) = run_rampart(dir.path(), &["check", "-c", &path]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(
        err.lines().collect::<Vec<_>>(),
        [
            format!("{path}:2:13: unknown log_level `chatty` (expected one of: error, warn, info, debug, trace)"),
            format!("{path}:3:14: unknown log_format `yaml` (expected one of: text, json)"),
        ]
    );
}

/// An outage met by two workers: the warnings carry `upstream` and `target` as JSON fields, and
/// the summary is the process's: one first line and one end line per event, whose total counts
/// every failed request, whichever worker served it.
#[test]
fn an_outage_on_two_workers_is_summarised_once_with_its_fields() {
    let dead: std::net::SocketAddr = dead_target().parse().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let path = write_file(
        dir.path(),
        "r.toml",
        &format!(
            "[listeners.web]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\nupstream = \"app\"\n\
             [upstreams.app]\ntargets = [\"{dead}\"]\npassive_backoff = \"100ms\"\npassive_backoff_max = \"200ms\"\n"
        ),
    );
    let mut proxy = Rampart::start(
        dir.path(),
        &["run", "-c", &path, "--workers", "2", "--log-format", "json"],
    );
    // Each request on its own connection: the kernel spreads them over both workers.
    let status = || common::http::send(&mut connect(port), &common::http::get("/")).0;
    const FAILED: u64 = 30;
    for _ in 0..FAILED {
        let s = status();
        assert!(s == 502 || s == 503, "{s}");
    }
    let _back = HttpBackend::start_on(dead, Reply::Echo);
    let deadline = std::time::Instant::now() + WAIT;
    // Past its backoff the target is tried again; the first requests may still fail.
    let mut failed = FAILED;
    loop {
        assert!(std::time::Instant::now() < deadline, "the target never served");
        match status() {
            200 => break,
            _ => failed += 1,
        }
    }
    for _ in 0..30 {
        assert_eq!(status(), 200);
    }
    assert_eq!(proxy.stop(), 0);

    let events = parse_all(&proxy.log);
    let of = |kind: &str| -> Vec<&Value> { events.iter().filter(|e| e["fields"]["event"] == kind).collect() };
    let no_target = of("no_target");
    let first: Vec<&&Value> = no_target
        .iter()
        .filter(|e| e["fields"]["total"].is_null() && e["fields"]["count"].is_null())
        .collect();
    assert_eq!(first.len(), 1, "one first line for the process: {no_target:#?}");
    let first = &first[0]["fields"];
    assert_eq!(
        (&first["upstream"], &first["listener"]),
        (&"app".into(), &"web".into()),
        "{first}"
    );
    let over: Vec<&&Value> = no_target.iter().filter(|e| e["level"] == "INFO").collect();
    assert_eq!(over.len(), 1, "one end line for the process: {no_target:#?}");
    assert_eq!(over[0]["fields"]["upstream"], "app");
    // Every failed request found no target once (in its connect attempts or before them); the
    // repeats reported before the end add up with it.
    let repeats: u64 = no_target
        .iter()
        .filter(|e| e["level"] == "WARN")
        .filter_map(|e| e["fields"]["count"].as_u64())
        .sum();
    assert_eq!(over[0]["fields"]["total"], failed, "{no_target:#?}");
    assert_eq!(repeats + 1, failed, "{no_target:#?}");
    assert!(
        over[0]["message"]
            .as_str()
            .unwrap()
            .starts_with("upstream app: a healthy target again (none was found "),
        "{}",
        over[0]
    );

    let connect_failed = of("connect_failed");
    let first = connect_failed.first().expect("a failed connect is logged");
    assert_eq!(first["level"], "WARN");
    assert_eq!(
        (&first["fields"]["upstream"], &first["fields"]["target"]),
        (&"app".into(), &dead.to_string().into()),
        "{first}"
    );
    assert!(
        first["message"].as_str().unwrap().contains("marked down for"),
        "{first}"
    );
    assert!(
        connect_failed
            .iter()
            .all(|e| e["fields"]["target"] == dead.to_string().as_str()),
        "{connect_failed:#?}"
    );
    // Plain words, plural only past one.
    let listening = event(&events, "listening:")["message"].as_str().unwrap();
    assert!(
        listening.contains(": 1 listener, 1 upstream, 1 target: "),
        "{listening}"
    );
    assert!(
        listening.contains("(http, 1 route)") && listening.ends_with("; 2 workers"),
        "{listening}"
    );
    let words: Vec<&str> = no_target
        .iter()
        .chain(&connect_failed)
        .map(|e| e["message"].as_str().unwrap())
        .collect();
    assert!(
        !words.iter().any(|m| m.contains("(s)") || m.contains("fail:")),
        "{words:#?}"
    );
}
