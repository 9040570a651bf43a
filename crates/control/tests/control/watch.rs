//! `run --watch`: a change to a file of the config asks the control loop for a reload.

use rampart_config::WatchList;
use rampart_control::watch::Watching;
use rampart_control::ReloadOutcome;
use tokio::sync::mpsc;

use super::{write, WAIT};

/// The next reload request, within [`WAIT`], answered as refused (the watcher waits for the
/// answer before it asks again).
async fn next_request(requests: &mut mpsc::UnboundedReceiver<rampart_control::ReloadRequest>) {
    let reply = tokio::time::timeout(WAIT, requests.recv())
        .await
        .expect("a reload request within the wait")
        .expect("the watcher is running");
    let _ = reply.send(ReloadOutcome::Refused { errors: Vec::new() });
}

#[tokio::test]
async fn a_change_to_a_watched_file_asks_for_a_reload() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(dir.path(), "r.toml", "# first\n");
    let (reloads, mut requests) = mpsc::unbounded_channel();
    let list = WatchList {
        files: vec![config.clone()],
        patterns: Vec::new(),
    };
    let _watching = Watching::start(list, reloads).unwrap();
    // Replaced by renaming a new file over it, as editors and certificate tools do.
    let aside = write(dir.path(), ".r.toml.new", "# second\n");
    std::fs::rename(&aside, &config).unwrap();
    next_request(&mut requests).await;
}

#[tokio::test]
async fn a_new_file_matching_an_include_pattern_asks_for_a_reload() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("conf.d")).unwrap();
    let (reloads, mut requests) = mpsc::unbounded_channel();
    let list = WatchList {
        files: Vec::new(),
        patterns: vec![(dir.path().join("conf.d"), "*.toml".to_string())],
    };
    let _watching = Watching::start(list, reloads).unwrap();
    write(dir.path(), "conf.d/site.toml", "# new\n");
    next_request(&mut requests).await;
}

#[tokio::test]
async fn after_an_update_the_new_list_is_watched() {
    let dir = tempfile::tempdir().unwrap();
    let first = write(dir.path(), "a/first.toml", "# a\n");
    let second = write(dir.path(), "b/second.toml", "# b\n");
    let (reloads, mut requests) = mpsc::unbounded_channel();
    let watching = Watching::start(
        WatchList {
            files: vec![first],
            patterns: Vec::new(),
        },
        reloads,
    )
    .unwrap();
    watching.update(WatchList {
        files: vec![second.clone()],
        patterns: Vec::new(),
    });
    // The watcher's task takes the update when it runs next: on this current-thread runtime,
    // once this task yields (no timing involved).
    tokio::task::yield_now().await;
    std::fs::write(&second, "# b, changed\n").unwrap();
    next_request(&mut requests).await;
}
