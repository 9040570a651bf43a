//! The control plane's etcd source through the library API (`rampart_control`), in this
//! process against a real etcd (no `rampart` process): the conditioned write, the load with its
//! kept copy for when etcd is gone, and the follower's reload request on a change. Here rather
//! than in `crates/control` because the etcd server helper lives beside the other servers.

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::servers::EtcdServer;
use common::WAIT;
use rampart_config::LiveState;
use rampart_control::etcd::{Etcd, TlsFiles, Written};
use rampart_control::{ReloadOutcome, Source};

const CONFIG: &str = "[listeners.main]\nbind = \"127.0.0.1:0\"\nupstream = \"app\"\n\n\
                      [upstreams.app]\ntargets = [\"127.0.0.1:9\"]\n";

fn store(etcd: &EtcdServer, prefix: &str) -> Arc<Etcd> {
    Arc::new(Etcd::new(&etcd.url(), prefix, &TlsFiles::default()).unwrap())
}

#[test]
fn a_write_conditioned_on_a_revision_is_refused_once_the_key_moved_on() {
    let etcd = EtcdServer::start();
    let store = store(&etcd, "/lib-a/");
    assert_eq!(store.config_key(), "/lib-a/config");
    assert!(store.get().unwrap().0.is_none());

    let Written::Done(first) = store.put_if(CONFIG, 0).unwrap() else {
        panic!("the first write finds no key");
    };
    let (stored, _) = store.get().unwrap();
    let stored = stored.unwrap();
    assert_eq!((stored.text.as_str(), stored.mod_revision), (CONFIG, first));
    assert_eq!(store.revisions().unwrap().0, first);

    // Written as if the key were still absent: refused, with the revision it is at.
    match store.put_if("# other\n", 0).unwrap() {
        Written::Conflict(now) => assert_eq!(now, first),
        Written::Done(_) => panic!("a stale write went through"),
    }
    let Written::Done(second) = store.put_if("# other\n", first).unwrap() else {
        panic!("a write on the current revision applies");
    };
    assert!(second > first);
    assert_eq!(store.get().unwrap().0.unwrap().text, "# other\n");
}

#[test]
fn the_etcd_source_loads_and_starts_from_its_kept_copy_when_etcd_is_gone() {
    let mut etcd = EtcdServer::start();
    let revision = etcd.put("/lib-b/config", CONFIG);
    let state = tempfile::tempdir().unwrap();
    let source = Source::Etcd {
        url: etcd.url(),
        store: store(&etcd, "/lib-b/"),
        ready_requires_etcd: false,
        state_dir: Some(state.path().to_path_buf()),
        session_log: None,
    };
    let loaded = source.load(&mut LiveState::default()).unwrap();
    assert_eq!(loaded.revision, Some(revision));
    assert_eq!(loaded.text, CONFIG);
    assert_eq!(loaded.snapshot.listeners.len(), 1);

    etcd.kill();
    let kept = source.load(&mut LiveState::default()).unwrap();
    assert_eq!((kept.revision, kept.text.as_str()), (Some(revision), CONFIG));

    // Without a kept copy, etcd's absence is the error.
    let no_state = Source::Etcd {
        url: etcd.url(),
        store: store(&etcd, "/lib-b/"),
        ready_requires_etcd: false,
        state_dir: None,
        session_log: None,
    };
    let error = no_state.load(&mut LiveState::default()).err().expect("etcd is gone");
    assert!(error.to_string().contains("127.0.0.1"), "{error}");
}

#[test]
fn the_follower_asks_for_a_reload_when_the_config_changes_in_etcd() {
    let etcd = EtcdServer::start();
    let applied = etcd.put("/lib-c/config", CONFIG);
    let reachable = Arc::new(AtomicBool::new(false));
    let (reloads, mut requests) = tokio::sync::mpsc::unbounded_channel();
    rampart_control::etcd::follow(store(&etcd, "/lib-c/"), applied, reachable.clone(), reloads).unwrap();

    let changed = etcd.put("/lib-c/config", &format!("{CONFIG}# changed\n"));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let reply = runtime
        .block_on(async { tokio::time::timeout(WAIT, requests.recv()).await })
        .expect("a reload request within the wait")
        .expect("the follower is running");
    reply
        .send(ReloadOutcome::Applied {
            summary: String::new(),
            sha256: None,
            revision: Some(changed),
        })
        .unwrap();
    assert!(reachable.load(Ordering::Relaxed), "etcd answered the follower");
}
