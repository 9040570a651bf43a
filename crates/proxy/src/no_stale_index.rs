//! The data path reads the snapshot's lists (listeners, routes, upstreams, targets) with checked
//! access only: an index expression on one of them would panic if an index ever outlived the list
//! it came from. This test reads the crate's own sources and fails on any such expression outside
//! test code (a file's test module, which by the crate's convention comes last, and test files).

use std::path::Path;

const LISTS: [&str; 4] = ["listeners[", "routes[", "upstreams[", "targets["];

fn visit(dir: &Path, found: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            visit(&path, found);
            continue;
        }
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if !name.ends_with(".rs") || matches!(name, "tests.rs" | "testing.rs" | "test_side.rs" | "no_stale_index.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let shipped = text.split("#[cfg(test)]\nmod tests").next().unwrap_or_default();
        for (n, line) in shipped.lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            if LISTS.iter().any(|list| code.contains(list)) {
                found.push(format!("{}:{}: {}", path.display(), n + 1, line.trim()));
            }
        }
    }
}

#[test]
fn the_data_path_has_no_index_expression_on_the_snapshots_lists() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = Vec::new();
    visit(&src, &mut found);
    assert!(
        found.is_empty(),
        "index expressions on the snapshot's lists (use `.get()` and refuse clearly):\n{}",
        found.join("\n")
    );
}
