//! The publisher: a reload that applies swaps the engine's snapshot; one that changes a setting
//! read at start only, has errors, or cannot bind is refused and the running snapshot stays.

use std::net::TcpListener;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rampart_config::{LiveState, SimpleL4};
use rampart_control::discovery::Discovery;
use rampart_control::{CommandLine, Publisher, Reload, ReloadOutcome, Source, StartOnly, Started};
use rampart_model::balance::BalancePolicy;
use rampart_proxy::session_log::SessionLogWriter;
use rampart_runtime::{Engine, EngineOptions, InheritedSockets};

use super::{tcp_config, write};

/// Loads `source` and starts an engine (one worker) on it, as the binary does at start.
fn start(source: Source, command_line: CommandLine) -> Publisher {
    let mut live = LiveState::new(None);
    let loaded = source.load(&mut live).unwrap();
    let start_only = StartOnly::of(&loaded, command_line);
    let session_log = SessionLogWriter::start(None).unwrap();
    let engine = Engine::start(
        EngineOptions { workers: 1, pin: false },
        loaded.snapshot,
        session_log.sink(),
        InheritedSockets::default(),
    )
    .unwrap();
    Publisher::new(Started {
        source,
        live,
        discovery: Discovery::new(),
        engine,
        session_log,
        command_line,
        start_only,
        watch: loaded.watch,
        revision: loaded.revision,
    })
}

fn file(path: &Path) -> Source {
    Source::File {
        path: path.to_path_buf(),
        session_log: None,
        watch: false,
    }
}

/// The targets of upstream `app` in force.
fn targets(publisher: &Publisher) -> Vec<String> {
    let current = publisher.current();
    let app = current.upstreams.iter().find(|u| u.name == "app").unwrap();
    app.targets.iter().map(|t| t.addr.to_string()).collect()
}

fn stop(publisher: Publisher) {
    let (engine, _) = publisher.into_parts();
    engine.shutdown(Duration::ZERO);
}

/// The reasons of a refused reload (panics on another outcome).
fn refused(reload: Reload) -> Vec<String> {
    match reload {
        Reload::Refused(errors) => errors,
        other => panic!("expected a refusal, got {:?}", other.outcome()),
    }
}

#[tokio::test]
async fn a_reload_that_applies_swaps_the_snapshot_in_force() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "r.toml", &tcp_config(&["127.0.0.1:9"], ""));
    let mut publisher = start(file(&path), CommandLine::default());
    assert_eq!(targets(&publisher), ["127.0.0.1:9"]);

    write(dir.path(), "r.toml", &tcp_config(&["127.0.0.1:10", "127.0.0.1:11"], ""));
    let reload = publisher.reload().await;
    let Reload::Applied(applied) = &reload else {
        panic!("expected applied, got {:?}", reload.outcome());
    };
    assert!(applied.summary.contains("2 targets"), "{}", applied.summary);
    assert!(applied.text.contains("127.0.0.1:11"), "{}", applied.text);
    assert_eq!(applied.admin_token, None);
    assert!(matches!(
        reload.outcome(),
        ReloadOutcome::Applied { sha256: Some(_), .. }
    ));
    assert_eq!(targets(&publisher), ["127.0.0.1:10", "127.0.0.1:11"]);
    stop(publisher);
}

#[tokio::test]
async fn a_reload_that_changes_a_start_only_setting_is_refused_and_the_snapshot_stays() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "r.toml", &tcp_config(&["127.0.0.1:9"], "workers = 2"));
    let mut publisher = start(file(&path), CommandLine::default());
    let before = publisher.current();

    write(dir.path(), "r.toml", &tcp_config(&["127.0.0.1:10"], "workers = 4"));
    let errors = refused(publisher.reload().await);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].starts_with("[global] workers changed from 2 to 4: "),
        "{errors:?}"
    );
    assert!(Arc::ptr_eq(&before, &publisher.current()));
    assert_eq!(targets(&publisher), ["127.0.0.1:9"]);

    // Put back, the same file applies (with its new target).
    write(dir.path(), "r.toml", &tcp_config(&["127.0.0.1:10"], "workers = 2"));
    assert!(matches!(publisher.reload().await, Reload::Applied(_)));
    assert_eq!(targets(&publisher), ["127.0.0.1:10"]);
    stop(publisher);
}

#[tokio::test]
async fn a_start_only_setting_the_command_line_fixes_is_not_compared() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "r.toml", &tcp_config(&["127.0.0.1:9"], "workers = 2"));
    let command_line = CommandLine {
        workers: true,
        ..CommandLine::default()
    };
    let mut publisher = start(file(&path), command_line);
    write(dir.path(), "r.toml", &tcp_config(&["127.0.0.1:10"], "workers = 4"));
    assert!(matches!(publisher.reload().await, Reload::Applied(_)));
    assert_eq!(targets(&publisher), ["127.0.0.1:10"]);
    stop(publisher);
}

#[tokio::test]
async fn a_config_with_an_error_is_refused_with_its_place_and_the_snapshot_stays() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "r.toml", &tcp_config(&["127.0.0.1:9"], ""));
    let mut publisher = start(file(&path), CommandLine::default());
    let before = publisher.current();

    let bad = format!("{}connect_timeout = \"soon\"\n", tcp_config(&["127.0.0.1:10"], ""));
    write(dir.path(), "r.toml", &bad);
    let errors = refused(publisher.reload().await);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].starts_with(&format!("{}:10:19: ", path.display())),
        "{errors:?}"
    );
    assert!(Arc::ptr_eq(&before, &publisher.current()));
    stop(publisher);
}

#[tokio::test]
async fn a_reload_onto_an_address_another_socket_holds_is_refused_and_the_snapshot_stays() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "r.toml", &tcp_config(&["127.0.0.1:9"], ""));
    let mut publisher = start(file(&path), CommandLine::default());
    let before = publisher.current();

    let held = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = held.local_addr().unwrap();
    let two = format!(
        "{}\n[listeners.second]\nbind = \"{addr}\"\nupstream = \"app\"\n",
        tcp_config(&["127.0.0.1:10"], "")
    );
    write(dir.path(), "r.toml", &two);
    let errors = refused(publisher.reload().await);
    assert_eq!(errors, [format!("{addr}: already in use by another process")]);
    assert!(Arc::ptr_eq(&before, &publisher.current()));

    // Once the other socket is gone, the same config applies.
    drop(held);
    assert!(matches!(publisher.reload().await, Reload::Applied(_)));
    assert_eq!(publisher.current().listeners.len(), 2);
    stop(publisher);
}

#[tokio::test]
async fn a_command_line_with_no_certificate_has_nothing_to_reload() {
    let spec = SimpleL4 {
        http: false,
        udp: false,
        bind: "127.0.0.1:0".parse().unwrap(),
        targets: vec!["127.0.0.1:9".to_string()],
        policy: BalancePolicy::RoundRobin,
        session_log: None,
        tls: Vec::new(),
        access_log: None,
        upstream_protocol: None,
        http3: false,
        sni: Vec::new(),
        acme: None,
        tracing: None,
    };
    let mut publisher = start(Source::Fixed(Box::new(spec)), CommandLine::default());
    let before = publisher.current();
    assert!(matches!(publisher.reload().await, Reload::NotReloadable));
    assert!(Arc::ptr_eq(&before, &publisher.current()));
    stop(publisher);
}
