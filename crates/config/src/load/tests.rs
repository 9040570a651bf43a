use std::path::Path;

use super::*;

fn env(name: &str) -> Option<String> {
    match name {
        "PORT" => Some("7101".into()),
        "PREFIX" => Some("/a-rather-long-prefix-for-the-offsets".into()),
        _ => None,
    }
}

/// Writes `files` (name, text) into a new directory; the first is the main file.
fn config_dir(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        let path = dir.path().join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    dir
}

fn load(dir: &Path, main: &str) -> Result<LoadedConfig, ConfigErrors> {
    let name = dir.join(main).display().to_string();
    let text = std::fs::read_to_string(&name).unwrap();
    compile_config(&name, &text, &env, &mut LiveState::default())
}

/// The errors, with the directory taken out of the file names.
fn errors(dir: &Path, main: &str) -> Vec<String> {
    let prefix = format!("{}/", dir.display());
    load(dir, main)
        .unwrap_err()
        .0
        .iter()
        .map(|e| e.to_string().replace(&prefix, ""))
        .collect()
}

const MAIN: &str = "include = [\"conf.d/*.toml\"]\n\n[listeners.web]\nbind = \"127.0.0.1:7100\"\nprotocol = \"http\"\nupstream = \"app\"\n";
const APP: &str = "[upstreams.app]\ntargets = [\"127.0.0.1:9\"]\n";

#[test]
fn included_files_merge_into_one_config_in_name_order() {
    let api = "[listeners.api]\nbind = \"127.0.0.1:${PORT}\"\nprotocol = \"http\"\nupstream = \"app\"\n";
    let dir = config_dir(&[
        ("rampart.toml", MAIN),
        ("conf.d/b-api.toml", api),
        ("conf.d/a-app.toml", APP),
        ("conf.d/notes.txt", "not toml"),
        ("conf.d/.hidden.toml", "not toml either"),
    ]);
    let loaded = load(dir.path(), "rampart.toml").unwrap();
    let snapshot = &loaded.compiled.snapshot;
    let names: Vec<&str> = snapshot.listeners.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, ["api", "web"]);
    assert_eq!(snapshot.listeners[0].bind.unwrap().port(), 7101);
    assert_eq!(snapshot.upstreams.len(), 1);
    let sources: Vec<String> = loaded
        .sources
        .iter()
        .map(|s| s.name.replace(&format!("{}/", dir.path().display()), ""))
        .collect();
    assert_eq!(sources, ["rampart.toml", "conf.d/a-app.toml", "conf.d/b-api.toml"]);
    // The text shown for the config: every file under its own header, as written.
    let text = loaded.text();
    assert!(
        text.starts_with(&format!(
            "# file: {}\ninclude",
            dir.path().join("rampart.toml").display()
        )),
        "{text}"
    );
    assert!(text.contains("bind = \"127.0.0.1:${PORT}\""), "{text}");
    // What a watcher looks at: the files, and the pattern's directory.
    assert_eq!(loaded.watch.files.len(), 3);
    assert_eq!(
        loaded.watch.patterns,
        [(dir.path().join("conf.d"), "*.toml".to_string())]
    );
}

#[test]
fn a_name_defined_in_two_files_is_an_error_naming_both_places() {
    let dir = config_dir(&[
        ("rampart.toml", &format!("{MAIN}\n{APP}")),
        ("conf.d/again.toml", &format!("# the same upstream\n{APP}")),
    ]);
    assert_eq!(
        errors(dir.path(), "rampart.toml"),
        ["conf.d/again.toml:2:12: upstream `app` is already defined at rampart.toml:8:12"]
    );
    let dir = config_dir(&[
        ("rampart.toml", &format!("{MAIN}\n[global]\nworkers = 1\n")),
        ("conf.d/app.toml", &format!("{APP}\n[global]\npin = true\n")),
    ]);
    let found = errors(dir.path(), "rampart.toml");
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with("conf.d/app.toml:4:") && found[0].contains("[global] is already set at rampart.toml:8:"),
        "{found:?}"
    );
}

#[test]
fn syntax_and_validation_errors_point_into_the_included_file() {
    let dir = config_dir(&[
        ("rampart.toml", MAIN),
        ("conf.d/app.toml", "[upstreams.app]\ntargets = [\"127.0.0.1:9\"\n"),
    ]);
    let found = errors(dir.path(), "rampart.toml");
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].starts_with("conf.d/app.toml:3:1: "), "{found:?}");

    // A validation error after a substitution on the same line: the column is the one in the
    // text as written.
    let line = "routes = [{ match = { path_prefix = \"${PREFIX}\" }, upstream = \"app\", max_body_size = \"lots\" }]";
    let listener = format!("[listeners.api]\nbind = \"127.0.0.1:7102\"\nprotocol = \"http\"\n{line}\n");
    let dir = config_dir(&[
        ("rampart.toml", MAIN),
        ("conf.d/app.toml", APP),
        ("conf.d/routes.toml", &listener),
    ]);
    let found = errors(dir.path(), "rampart.toml");
    let col = line.find("\"lots\"").unwrap() + 1;
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with(&format!("conf.d/routes.toml:4:{col}: ")),
        "{found:?}"
    );
}

#[test]
fn an_unset_variable_is_an_error_at_its_reference_in_its_file() {
    let dir = config_dir(&[
        ("rampart.toml", MAIN),
        ("conf.d/app.toml", "[upstreams.app]\ntargets = [\"${BACKEND}\"]\n"),
    ]);
    assert_eq!(
        errors(dir.path(), "rampart.toml"),
        ["conf.d/app.toml:2:13: environment variable BACKEND is not set (write ${BACKEND:-default} for a default)"]
    );
    // With a default, and with `$${` left as text.
    let dir = config_dir(&[
        ("rampart.toml", MAIN),
        (
            "conf.d/app.toml",
            "[upstreams.app]\ntargets = [\"${BACKEND:-127.0.0.1:9}\"]\n# $${NOT_A_VARIABLE}\n",
        ),
    ]);
    let loaded = load(dir.path(), "rampart.toml").unwrap();
    assert_eq!(loaded.compiled.snapshot.upstreams[0].targets[0].name, "127.0.0.1:9");
}

#[test]
fn a_missing_file_a_cycle_and_a_file_included_twice_are_errors_at_the_entry() {
    let dir = config_dir(&[(
        "rampart.toml",
        "include = [\"nope.toml\", \"empty/*.toml\"]\n[listeners.web]\nbind = \"127.0.0.1:7100\"\nupstream = \"app\"\n",
    )]);
    std::fs::create_dir(dir.path().join("empty")).unwrap();
    let found = errors(dir.path(), "rampart.toml");
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with("rampart.toml:1:12: include ") && found[0].contains("nope.toml"),
        "{found:?}"
    );

    let dir = config_dir(&[
        ("rampart.toml", MAIN),
        ("conf.d/a.toml", &format!("include = [\"b.toml\"]\n{APP}")),
        ("conf.d/b.toml", "include = [\"../rampart.toml\"]\n"),
    ]);
    let found = errors(dir.path(), "rampart.toml");
    assert_eq!(found.len(), 2, "{found:?}");
    // b.toml is matched by the pattern after a.toml included it; b.toml includes the main file.
    assert!(
        found
            .iter()
            .any(|e| e.starts_with("conf.d/b.toml:1:12: include cycle: ")),
        "{found:?}"
    );
    assert!(
        found
            .iter()
            .any(|e| e.starts_with("rampart.toml:1:12: include ") && e.contains("already included")),
        "{found:?}"
    );
}

#[test]
fn includes_nest_only_so_deep() {
    let mut files = vec![(
        "rampart.toml".to_string(),
        format!("include = [\"d1.toml\"]\n{MAIN}\n{APP}").replace("include = [\"conf.d/*.toml\"]\n", ""),
    )];
    for i in 1..=MAX_DEPTH + 1 {
        files.push((format!("d{i}.toml"), format!("include = [\"d{}.toml\"]\n", i + 1)));
    }
    files.push((format!("d{}.toml", MAX_DEPTH + 2), String::new()));
    let refs: Vec<(&str, &str)> = files.iter().map(|(n, t)| (n.as_str(), t.as_str())).collect();
    let dir = config_dir(&refs);
    let found = errors(dir.path(), "rampart.toml");
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].contains(&format!("nest more than {MAX_DEPTH} deep")),
        "{found:?}"
    );
}

#[test]
fn paths_in_an_included_file_are_relative_to_it() {
    let routes = "[listeners.api]\nbind = \"127.0.0.1:7103\"\nprotocol = \"http\"\nupstream = \"app\"\nfilters = [{ type = \"basic_auth\", realm = \"x\", users_file = \"users.htpasswd\" }]\n";
    let dir = config_dir(&[("rampart.toml", &format!("{MAIN}\n{APP}")), ("conf.d/api.toml", routes)]);
    let found = errors(dir.path(), "rampart.toml");
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].starts_with("conf.d/api.toml:5:"), "{found:?}");
    let user = format!("ann:{}\n", bcrypt::hash("secret", 4).unwrap());
    std::fs::write(dir.path().join("conf.d/users.htpasswd"), user).unwrap();
    let loaded = load(dir.path(), "rampart.toml").unwrap();
    assert!(
        loaded.watch.files.contains(&dir.path().join("conf.d/users.htpasswd")),
        "{:?}",
        loaded.watch
    );
}

#[test]
fn file_name_patterns() {
    for (pattern, name, matches) in [
        ("*.toml", "a.toml", true),
        ("*.toml", "a.toml.bak", false),
        ("*.toml", ".a.toml", false),
        (".*.toml", ".a.toml", true),
        ("site-?.toml", "site-1.toml", true),
        ("site-?.toml", "site-10.toml", false),
        ("*", "anything", true),
        ("a*b*c", "aXbYbZc", true),
        ("a*b*c", "aXbYbZ", false),
        ("é*", "été", true),
    ] {
        assert_eq!(glob_match(pattern, name), matches, "{pattern} {name}");
    }
}

#[test]
fn include_is_for_config_files() {
    let err = crate::compile_toml("x.toml", "include = [\"a.toml\"]\n", &mut LiveState::default()).unwrap_err();
    assert_eq!(err.to_string(), "x.toml:1:12: `include` is read from config files only");
}

#[test]
fn an_included_file_may_start_with_a_byte_order_mark() {
    let dir = config_dir(&[("rampart.toml", MAIN), ("conf.d/app.toml", &format!("\u{feff}{APP}"))]);
    load(dir.path(), "rampart.toml").unwrap();
}
