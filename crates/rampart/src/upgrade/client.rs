//! `rampart upgrade --pid PID`: asks a running Rampart to upgrade (SIGUSR2) and says how it went.
//!
//! The outcome is read from outside, in /proc. The new process holds the very listening sockets
//! the old one held (they are handed over, not bound again), and the old one closes its copies
//! once the new one is ready. So the upgrade worked when another process holds those sockets and
//! the old one holds none (or has exited); it failed when the old one's child is gone while the
//! old one still listens, or when nothing changed within the timeout.

use std::collections::HashSet;
use std::time::{Duration, Instant};

/// How often /proc is read.
const POLL: Duration = Duration::from_millis(10);

/// Upgrades `pid`; `Ok` with what happened, `Err` with why it did not work.
pub fn upgrade(pid: i32, timeout: Duration) -> Result<String, String> {
    if state(pid).is_none() {
        return Err(format!("no process {pid}"));
    }
    let sockets: HashSet<u64> = listening(pid).into_iter().collect();
    if sockets.is_empty() {
        return Err(format!("process {pid} holds no listening socket: is it Rampart?"));
    }
    let before: HashSet<i32> = children(pid).into_iter().collect();
    // SAFETY: kill only sends a signal.
    if unsafe { libc::kill(pid, libc::SIGUSR2) } == -1 {
        return Err(format!(
            "cannot signal process {pid}: {}",
            std::io::Error::last_os_error()
        ));
    }
    let deadline = Instant::now() + timeout;
    let mut child = None;
    loop {
        let old_alive = alive(pid);
        if old_alive {
            if let Some(c) = children(pid).into_iter().find(|c| !before.contains(c)) {
                child = Some(c);
            }
        }
        // (The sockets' inodes were read once: /proc/PID/net/tcp lists every socket of the
        // namespace and can be long.)
        let old_listens = old_alive && holds_any(pid, &sockets);
        if !old_listens {
            // The old process let go of its sockets: who holds them now? While it lives, its
            // child; after it exited, the child has another parent: look at every process.
            let candidates = match child {
                Some(c) if old_alive => vec![c],
                _ => processes(),
            };
            if let Some(new) = candidates.into_iter().find(|&p| p != pid && holds_any(p, &sockets)) {
                return Ok(format!(
                    "process {new} serves now; {pid} drains its connections and exits"
                ));
            }
            if !old_alive {
                return Err(format!(
                    "process {pid} exited, and no process holds its listening sockets"
                ));
            }
        } else if let Some(c) = child.filter(|&c| !alive(c)) {
            return Err(format!(
                "the new process {c} exited before it was ready; {pid} keeps serving (its log says why)"
            ));
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "no new process took over within {timeout:?}; {pid} keeps serving (its log says why)"
            ));
        }
        std::thread::sleep(POLL);
    }
}

/// Whether `pid` runs (exists and is no zombie).
fn alive(pid: i32) -> bool {
    state(pid).is_some_and(|s| s != 'Z')
}

/// Every process id in /proc.
fn processes() -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .collect()
}

/// Whether `pid` holds a socket whose inode is in `sockets`.
fn holds_any(pid: i32, sockets: &HashSet<u64>) -> bool {
    socket_inodes(pid).any(|inode| sockets.contains(&inode))
}

/// The inodes of the sockets `pid` holds (none when its descriptors cannot be read).
fn socket_inodes(pid: i32) -> impl Iterator<Item = u64> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .filter_map(|fd| {
            let link = std::fs::read_link(fd.ok()?.path()).ok()?;
            link.to_str()?
                .strip_prefix("socket:[")?
                .strip_suffix(']')?
                .parse::<u64>()
                .ok()
        })
}

/// The state letter of `pid` (`Z` for a zombie), or `None` when there is no such process.
fn state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    after_comm(&stat).and_then(|rest| rest.chars().next())
}

/// The fields after `PID (COMM) ` of a stat line (the name may hold spaces and parentheses).
fn after_comm(stat: &str) -> Option<&str> {
    stat.rfind(')').map(|at| stat[at + 1..].trim_start())
}

/// The processes whose parent is `pid`.
fn children(pid: i32) -> Vec<i32> {
    processes()
        .into_iter()
        .filter(|&p| {
            std::fs::read_to_string(format!("/proc/{p}/stat"))
                .ok()
                .and_then(|stat| after_comm(&stat)?.split_whitespace().nth(1)?.parse::<i32>().ok())
                == Some(pid)
        })
        .collect()
}

/// The listening TCP sockets `pid` holds, by inode.
fn listening(pid: i32) -> Vec<u64> {
    let mut listeners = HashSet::new();
    // TCP sockets in LISTEN (st 0A), and UDP sockets bound but not connected (st 07: a UDP
    // listener's, which a process with only UDP listeners holds alone).
    for (table, listen) in [("tcp", "0A"), ("tcp6", "0A"), ("udp", "07"), ("udp6", "07")] {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // The inode is the tenth field.
            if fields.get(3) == Some(&listen) {
                if let Some(inode) = fields.get(9).and_then(|i| i.parse::<u64>().ok()) {
                    listeners.insert(inode);
                }
            }
        }
    }
    socket_inodes(pid).filter(|inode| listeners.contains(inode)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process_and_its_listening_socket() {
        let me = std::process::id() as i32;
        assert!(matches!(state(me), Some('R' | 'S')));
        assert_eq!(after_comm("12 (a) b) S 1 2"), Some("S 1 2"));
        use std::os::unix::fs::MetadataExt;
        let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&held);
        let inode = std::fs::metadata(format!("/proc/self/fd/{fd}")).unwrap().ino();
        assert!(listening(me).contains(&inode));
        drop(held);
        assert!(!listening(me).contains(&inode));
    }
}
