//! `Source::File`: a config file with the files it includes, compiled, with `file:line:col`
//! errors.

use rampart_config::LiveState;
use rampart_control::Source;

use super::{tcp_config, write};

fn file_source(path: std::path::PathBuf) -> Source {
    Source::File {
        path,
        session_log: None,
        watch: false,
    }
}

#[test]
fn a_config_file_and_its_include_load_as_one_with_their_text_hash_and_files() {
    let dir = tempfile::tempdir().unwrap();
    let main = write(
        dir.path(),
        "rampart.toml",
        &format!("include = [\"conf.d/*.toml\"]\n\n{}", tcp_config(&["127.0.0.1:9"], "")),
    );
    let included = write(
        dir.path(),
        "conf.d/more.toml",
        "[listeners.more]\nbind = \"127.0.0.1:1\"\nupstream = \"other\"\n\n\
         [upstreams.other]\ntargets = [\"127.0.0.1:10\", \"127.0.0.1:11\"]\n",
    );
    let loaded = file_source(main.clone()).load(&mut LiveState::default()).unwrap();

    let mut listeners: Vec<&str> = loaded.snapshot.listeners.iter().map(|l| l.name.as_str()).collect();
    listeners.sort();
    assert_eq!(listeners, ["main", "more"]);
    let targets: usize = loaded.snapshot.upstreams.iter().map(|u| u.targets.len()).sum();
    assert_eq!(targets, 3);
    // Each file's text is kept after a header naming it, and hashed as one.
    assert!(loaded.text.contains("# file: "), "{}", loaded.text);
    assert!(loaded.text.contains("[upstreams.other]"), "{}", loaded.text);
    let sha256 = loaded.sha256.as_deref().unwrap();
    assert_eq!(sha256.len(), 64);
    // The files a change of which reloads under --watch: both, and the include pattern.
    assert!(
        loaded.watch.files.iter().any(|f| f.ends_with("rampart.toml")),
        "{:?}",
        loaded.watch
    );
    assert!(
        loaded.watch.files.iter().any(|f| f.ends_with("more.toml")),
        "{:?}",
        loaded.watch
    );
    assert_eq!(loaded.watch.patterns.len(), 1, "{:?}", loaded.watch);

    // Another text, another hash.
    std::fs::write(&included, "[upstreams.other]\ntargets = [\"127.0.0.1:10\"]\n").unwrap();
    std::fs::write(&main, tcp_config(&["127.0.0.1:9"], "")).unwrap();
    let again = file_source(main).load(&mut LiveState::default()).unwrap();
    assert_ne!(again.sha256.as_deref(), Some(sha256));
    assert_eq!(again.snapshot.listeners.len(), 1);
}

#[test]
fn an_error_in_an_included_file_names_its_file_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let main = write(
        dir.path(),
        "rampart.toml",
        &format!("include = [\"conf.d/*.toml\"]\n\n{}", tcp_config(&["127.0.0.1:9"], "")),
    );
    write(
        dir.path(),
        "conf.d/app.toml",
        "[upstreams.more]\ntargets = [\"127.0.0.1:9\"]\nconnect_timeout = \"soon\"\n",
    );
    let error = file_source(main)
        .load(&mut LiveState::default())
        .err()
        .expect("refused");
    let lines: Vec<&str> = error.lines().collect();
    assert_eq!(lines.len(), 1, "{error}");
    let place = format!("{}:3:19: ", dir.path().join("conf.d/app.toml").display());
    assert!(lines[0].starts_with(&place), "{error}");
    assert!(lines[0].contains("`soon` is not a duration"), "{error}");
}

#[test]
fn a_missing_file_is_an_error_that_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("absent.toml");
    let error = file_source(path.clone())
        .load(&mut LiveState::default())
        .err()
        .expect("refused");
    assert!(
        error
            .to_string()
            .starts_with(&format!("{}: cannot read: ", path.display())),
        "{error}"
    );
}

#[test]
fn a_session_log_from_the_command_line_applies_where_the_file_names_none() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "r.toml", &tcp_config(&["127.0.0.1:9"], ""));
    let source = Source::File {
        path,
        session_log: Some(dir.path().join("sessions.log")),
        watch: false,
    };
    let loaded = source.load(&mut LiveState::default()).unwrap();
    assert_eq!(
        loaded.snapshot.session_log.as_deref(),
        Some(dir.path().join("sessions.log").as_path())
    );
}
