//! systemd's notify protocol, heard on a test-side `NOTIFY_SOCKET`.

use std::os::unix::net::UnixDatagram;

use super::{gone, wait_gone, Processes};
use crate::common::{free_port, write_file, Backend, Behavior, Rampart, WAIT};

/// The next message, as `KEY=VALUE` lines.
fn next(socket: &UnixDatagram) -> Vec<String> {
    let mut buf = [0u8; 4096];
    let n = socket.recv(&mut buf).expect("a notify message");
    String::from_utf8_lossy(&buf[..n]).lines().map(str::to_string).collect()
}

#[test]
fn systemd_hears_ready_reloading_the_new_main_pid_and_stopping() {
    let dir = tempfile::tempdir().unwrap();
    let socket_path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).unwrap();
    socket.set_read_timeout(Some(WAIT)).unwrap();
    let backend = Backend::start("a", Behavior::TagEcho);
    let port = free_port();
    let cfg = format!(
        "[listeners.main]\nbind = \"127.0.0.1:{port}\"\nupstream = \"app\"\n\n[upstreams.app]\ntargets = [\"{}\"]\n",
        backend.target()
    );
    let path = write_file(dir.path(), "n.toml", &cfg);
    let notify = socket_path.to_str().unwrap();
    let mut rampart = Rampart::start_with_env(
        dir.path(),
        &["run", "-c", &path],
        &[("NOTIFY_SOCKET", notify), ("RAMPART_LOG", "info")],
    );
    let mut started = Processes::default();
    let ready = next(&socket);
    assert!(ready.contains(&"READY=1".to_string()), "{ready:?}");

    rampart.signal(libc::SIGHUP);
    let reloading = next(&socket);
    assert!(reloading.contains(&"RELOADING=1".to_string()), "{reloading:?}");
    assert!(
        reloading.iter().any(|l| l
            .strip_prefix("MONOTONIC_USEC=")
            .is_some_and(|v| v.parse::<u64>().is_ok())),
        "{reloading:?}"
    );
    let reloaded = next(&socket);
    assert!(reloaded.contains(&"READY=1".to_string()), "{reloaded:?}");

    // An upgrade: the old process names the new one the main process, and it alone speaks.
    let old = rampart.pid();
    rampart.signal(libc::SIGUSR2);
    let handed = next(&socket);
    let new: i32 = handed
        .iter()
        .find_map(|l| l.strip_prefix("MAINPID="))
        .unwrap_or_else(|| panic!("no MAINPID in {handed:?}"))
        .parse()
        .unwrap();
    started.add(new);
    assert!(handed.contains(&"READY=1".to_string()), "{handed:?}");
    assert_ne!(new, old);
    assert!(!gone(new));
    assert_eq!(rampart.wait_exit(), 0);
    wait_gone(old, &rampart);

    // SAFETY: only sends a signal, to the process the upgrade started.
    unsafe { libc::kill(new, libc::SIGTERM) };
    let stopping = next(&socket);
    assert!(stopping.contains(&"STOPPING=1".to_string()), "{stopping:?}");
    wait_gone(new, &rampart);
}
