//! In-process tests of the control plane's library API: the config sources, the watcher and the
//! publisher, with no `rampart` process (the end-to-end tests in `crates/rampart/tests` run the
//! binary; the etcd ones against the library are there too, beside the etcd server they start).

mod file_source;
mod publisher;
mod watch;

use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long any wait in these tests may take before the test fails.
pub const WAIT: Duration = Duration::from_secs(15);

/// Writes `text` to `dir/name` (creating its directory): the path.
pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, text).unwrap();
    path
}

/// A TCP listener `main` on 127.0.0.1, port 0 (the engine binds it, the tests connect to
/// nothing), forwarding to upstream `app` over `targets`; `global` lines in `[global]`.
pub fn tcp_config(targets: &[&str], global: &str) -> String {
    let list: Vec<String> = targets.iter().map(|t| format!("\"{t}\"")).collect();
    format!(
        "[global]\n{global}\n\n[listeners.main]\nbind = \"127.0.0.1:0\"\nupstream = \"app\"\n\n\
         [upstreams.app]\ntargets = [{}]\n",
        list.join(", ")
    )
}
