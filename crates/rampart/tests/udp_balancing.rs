//! UDP load balancing end to end: real DNS servers (BIND 9's `named`) behind `rampart udp` and
//! `protocol = "udp"` listeners, queried by `dig` and by a DNS client of the tests' own (fresh
//! source port per query, as a stub resolver's); a server killed, a reload and a binary upgrade
//! under a steady load of queries; sessions, their limit and their records; PROXY v2 per
//! datagram; the DNS health check.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::common::dns::DnsServer;
use crate::common::{free_port, run_rampart, write_file, Bounded, Rampart, TOOL_WAIT, WAIT};
use crate::upgrade::{pid_in, wait_gone, Processes};

/// Two servers that answer `who.fleet.test` each with an address of its own.
fn two_servers() -> (DnsServer, DnsServer) {
    (
        DnsServer::start("who 1 IN A 127.0.0.11"),
        DnsServer::start("who 1 IN A 127.0.0.12"),
    )
}

/// A DNS query for `name` (type A, recursion desired) with id `id`.
fn query(id: u16, name: &str) -> Vec<u8> {
    let mut q = id.to_be_bytes().to_vec();
    q.extend_from_slice(&[1, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.split('.') {
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    q
}

/// The first A record of the answer to query `id`, if it is one.
fn answer_of(id: u16, reply: &[u8]) -> Option<Ipv4Addr> {
    if reply.len() < 12 || reply[..2] != id.to_be_bytes() || reply[7] == 0 {
        return None;
    }
    // Past the question (one name, type, class) to the answer's fixed fields.
    let mut at = 12;
    while reply.get(at).copied()? != 0 {
        at += 1 + usize::from(reply[at]);
    }
    at += 5;
    // The answer's name is a pointer (two octets); then type, class, TTL, length, the address.
    at += 2 + 2 + 2 + 4;
    let len = u16::from_be_bytes([*reply.get(at)?, *reply.get(at + 1)?]);
    let rdata = reply.get(at + 2..at + 2 + usize::from(len))?;
    Some(Ipv4Addr::new(*rdata.first()?, rdata[1], rdata[2], rdata[3]))
}

/// Asks `who.fleet.test` of 127.0.0.1:`port` from a fresh socket (a new session): the address
/// answered and where the reply came from, or `None` if none came within `wait`.
fn ask(port: u16, id: u16, wait: Duration) -> Option<(Ipv4Addr, SocketAddr)> {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket.set_read_timeout(Some(wait)).unwrap();
    socket
        .send_to(&query(id, "who.fleet.test"), ("127.0.0.1", port))
        .unwrap();
    let mut buf = [0u8; 512];
    let deadline = Instant::now() + wait;
    while Instant::now() < deadline {
        let (n, from) = socket.recv_from(&mut buf).ok()?;
        if let Some(addr) = answer_of(id, &buf[..n]) {
            return Some((addr, from));
        }
    }
    None
}

/// A steady load of queries, each from a fresh socket, at about `rate` per second, until
/// stopped: how many were sent and how many got no answer within a second.
struct Load {
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    lost: Arc<AtomicU64>,
    threads: Vec<thread::JoinHandle<()>>,
}

impl Load {
    fn start(port: u16, rate: u32) -> Load {
        let (stop, sent, lost) = Default::default();
        let mut load = Load {
            stop,
            sent,
            lost,
            threads: Vec::new(),
        };
        const THREADS: u32 = 4;
        let gap = Duration::from_secs(1) * THREADS / rate;
        for t in 0..THREADS {
            let (stop, sent, lost) = (load.stop.clone(), load.sent.clone(), load.lost.clone());
            load.threads.push(thread::spawn(move || {
                let mut id = (t as u16) << 12;
                while !stop.load(Ordering::Relaxed) {
                    let began = Instant::now();
                    id = id.wrapping_add(1);
                    sent.fetch_add(1, Ordering::Relaxed);
                    if ask(port, id, Duration::from_secs(1)).is_none() {
                        lost.fetch_add(1, Ordering::Relaxed);
                    }
                    // Pacing (not a wait for readiness): the next query at the steady rate.
                    thread::sleep(gap.saturating_sub(began.elapsed()));
                }
            }));
        }
        load
    }

    /// Stops the load: (sent, lost).
    fn stop(self) -> (u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            t.join().unwrap();
        }
        (self.sent.load(Ordering::Relaxed), self.lost.load(Ordering::Relaxed))
    }

    /// Waits until at least `n` more queries were sent.
    fn wait_sent(&self, n: u64) {
        let target = self.sent.load(Ordering::Relaxed) + n;
        let deadline = Instant::now() + WAIT;
        while self.sent.load(Ordering::Relaxed) < target {
            assert!(Instant::now() < deadline, "the load stalled");
            thread::sleep(Duration::from_millis(10));
        }
    }
}

/// A config with UDP listener `dns` on `port` in front of `servers` (upstream `resolvers` with
/// `upstream` lines; `listener` lines on the listener; `global` lines in `[global]`).
fn config(dir: &Path, port: u16, servers: &[u16], listener: &str, upstream: &str, global: &str) -> String {
    let targets: Vec<String> = servers.iter().map(|p| format!("\"127.0.0.1:{p}\"")).collect();
    let text = format!(
        "[global]\n{global}\n\n[listeners.dns]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"udp\"\nupstream = \"resolvers\"\n{listener}\n\n\
         [upstreams.resolvers]\ntargets = [{}]\n{upstream}\n",
        targets.join(", ")
    );
    write_file(dir, "udp.toml", &text)
}

#[test]
fn dns_answers_come_back_through_rampart_udp_from_both_servers() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = two_servers();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let (to_a, to_b) = (format!("127.0.0.1:{}", a.port), format!("127.0.0.1:{}", b.port));
    let _proxy = Rampart::start(
        dir.path(),
        &[
            "udp",
            "--listen",
            &listen,
            "--to",
            &to_a,
            "--to",
            &to_b,
            "--workers",
            "2",
        ],
    );
    let mut seen = Vec::new();
    for id in 0..20 {
        let (addr, from) = ask(port, id, Duration::from_secs(2)).expect("an answer");
        // The reply comes from the address the client wrote to.
        assert_eq!(from, listen.parse().unwrap());
        seen.push(addr);
    }
    assert!(seen.contains(&Ipv4Addr::new(127, 0, 0, 11)), "{seen:?}");
    assert!(seen.contains(&Ipv4Addr::new(127, 0, 0, 12)), "{seen:?}");
    // A real client too.
    let out = Command::new("dig")
        .args([
            "@127.0.0.1",
            "-p",
            &port.to_string(),
            "who.fleet.test",
            "+short",
            "+tries=1",
            "+time=2",
        ])
        .output_within(TOOL_WAIT)
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(matches!(said.trim(), "127.0.0.11" | "127.0.0.12"), "dig said {said:?}");
}

#[test]
fn consistent_hashing_keeps_a_client_address_on_one_server() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = two_servers();
    let port = free_port();
    let path = config(
        dir.path(),
        port,
        &[a.port, b.port],
        "",
        "balance = \"consistent_hash\"",
        "",
    );
    let _proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    let answers: Vec<Ipv4Addr> = (0..20)
        .map(|id| ask(port, id, Duration::from_secs(2)).expect("an answer").0)
        .collect();
    assert!(answers.iter().all(|a| *a == answers[0]), "{answers:?}");
}

#[test]
fn a_server_killed_under_load_costs_at_most_the_queries_it_held() {
    let dir = tempfile::tempdir().unwrap();
    let (mut a, b) = two_servers();
    let port = free_port();
    let path = config(dir.path(), port, &[a.port, b.port], "", "", "");
    let _proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "2"]);
    let load = Load::start(port, 200);
    load.wait_sent(200);
    a.stop();
    load.wait_sent(400);
    let (sent, lost) = load.stop();
    // A query the dead server's port refuses (ICMP) is sent once more, to the other server;
    // only what it held when it died (none, at this rate, almost always) can be lost.
    assert!(lost <= 2, "{lost} of {sent} queries lost");
    // The dead server is out: every new query is answered by the other.
    for id in 0..10 {
        assert_eq!(
            ask(port, id, Duration::from_secs(2)).unwrap().0,
            Ipv4Addr::new(127, 0, 0, 12)
        );
    }
    drop(b);
}

#[test]
fn a_reload_under_load_loses_no_answer() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = two_servers();
    let c = DnsServer::start("who 1 IN A 127.0.0.13");
    let port = free_port();
    let path = config(dir.path(), port, &[a.port, b.port], "", "", "");
    let mut proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "2"]);
    let load = Load::start(port, 200);
    load.wait_sent(100);
    // A third server joins, the first leaves.
    config(dir.path(), port, &[b.port, c.port], "", "", "");
    proxy.reload();
    load.wait_sent(300);
    let (sent, lost) = load.stop();
    assert_eq!(lost, 0, "{lost} of {sent} queries lost across the reload");
    let answers: Vec<Ipv4Addr> = (0..20)
        .map(|id| ask(port, id, Duration::from_secs(2)).unwrap().0)
        .collect();
    assert!(answers.contains(&Ipv4Addr::new(127, 0, 0, 13)), "{answers:?}");
    assert!(!answers.contains(&Ipv4Addr::new(127, 0, 0, 11)), "{answers:?}");
}

#[test]
fn a_binary_upgrade_under_load_loses_no_answer() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = two_servers();
    let port = free_port();
    let path = config(dir.path(), port, &[a.port, b.port], "", "", "");
    let mut proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "2"]);
    let mut started = Processes::default();
    let old = proxy.pid();
    let load = Load::start(port, 200);
    load.wait_sent(100);
    let (code, out, err) = run_rampart(dir.path(), &["upgrade", "--pid", &old.to_string()]);
    assert_eq!(code, 0, "{out}{err}");
    let new = pid_in(&out, "process ");
    started.add(new);
    wait_gone(old, &proxy);
    load.wait_sent(200);
    let (sent, lost) = load.stop();
    assert_eq!(lost, 0, "{lost} of {sent} queries lost across the upgrade");
    assert_eq!(proxy.wait_exit(), 0);
}

#[test]
fn sessions_are_limited_end_when_idle_and_are_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let (a, _b) = two_servers();
    let port = free_port();
    let log = dir.path().join("sessions.log");
    let global = format!("session_log = \"{}\"", log.display());
    let path = config(
        dir.path(),
        port,
        &[a.port],
        "max_connections = 2\nidle_timeout = \"1s\"",
        "",
        &global,
    );
    let _proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    // Two clients hold the two sessions; a third is refused while they last.
    let clients: Vec<UdpSocket> = (0..3).map(|_| UdpSocket::bind("127.0.0.1:0").unwrap()).collect();
    let mut buf = [0u8; 512];
    for (i, c) in clients.iter().enumerate() {
        c.set_read_timeout(Some(Duration::from_millis(700))).unwrap();
        c.send_to(&query(i as u16, "who.fleet.test"), ("127.0.0.1", port))
            .unwrap();
        let answered = c.recv(&mut buf).ok().and_then(|n| answer_of(i as u16, &buf[..n]));
        assert_eq!(answered.is_some(), i < 2, "client {i}");
    }
    // After a second of silence the sessions end, are recorded, and a new client is served.
    let deadline = Instant::now() + WAIT;
    let records = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.lines().filter(|l| l.contains("\"idle_timeout\"")).count() >= 2 {
            break text;
        }
        assert!(Instant::now() < deadline, "no idle sessions recorded: {text}");
        thread::sleep(Duration::from_millis(50));
    };
    let first: serde_json::Value = serde_json::from_str(records.lines().next().unwrap()).unwrap();
    assert_eq!(first["listener"], "dns");
    assert_eq!(first["target"], format!("127.0.0.1:{}", a.port));
    assert!(
        first["bytes_up"].as_u64().unwrap() > 0 && first["bytes_down"].as_u64().unwrap() > 0,
        "{first}"
    );
    assert!(ask(port, 99, Duration::from_secs(2)).is_some());
}

#[test]
fn with_session_responses_a_session_ends_at_its_answer_and_frees_its_place() {
    let dir = tempfile::tempdir().unwrap();
    let (a, _b) = two_servers();
    let port = free_port();
    let log = dir.path().join("sessions.log");
    let global = format!("session_log = \"{}\"", log.display());
    let listener = "max_connections = 3\nsession_responses = 1";
    let path = config(dir.path(), port, &[a.port], listener, "", &global);
    let _proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    // Thirty queries, each from a new source port (as a stub resolver sends them): three places
    // are enough, since each session ends with its answer rather than after 30 s.
    for id in 0..30 {
        assert!(ask(port, id, Duration::from_secs(2)).is_some(), "query {id}");
    }
    let deadline = Instant::now() + WAIT;
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.lines().filter(|l| l.contains("\"close\":\"answered\"")).count() == 30 {
            break;
        }
        assert!(Instant::now() < deadline, "not 30 answered sessions: {text}");
        thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn each_datagram_to_a_proxy_protocol_target_starts_with_a_v2_header() {
    let dir = tempfile::tempdir().unwrap();
    // A target that reads the header and answers with the source it names.
    let target = UdpSocket::bind("127.0.0.1:0").unwrap();
    let target_port = target.local_addr().unwrap().port();
    thread::spawn(move || {
        let mut buf = [0u8; 2048];
        while let Ok((n, from)) = target.recv_from(&mut buf) {
            let d = &buf[..n];
            let said = if n >= 28 && d[..12] == *b"\r\n\r\n\0\r\nQUIT\n" && d[12] == 0x21 && d[13] == 0x12 {
                let ip = Ipv4Addr::new(d[16], d[17], d[18], d[19]);
                let port = u16::from_be_bytes([d[24], d[25]]);
                format!("{ip}:{port} {}", String::from_utf8_lossy(&d[28..]))
            } else {
                "no header".to_string()
            };
            let _ = target.send_to(said.as_bytes(), from);
        }
    });
    let port = free_port();
    let path = config(dir.path(), port, &[target_port], "", "send_proxy_protocol = \"v2\"", "");
    let _proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    client.set_read_timeout(Some(WAIT)).unwrap();
    let mut buf = [0u8; 512];
    for payload in ["first", "second"] {
        client.send_to(payload.as_bytes(), ("127.0.0.1", port)).unwrap();
        let n = client.recv(&mut buf).unwrap();
        let want = format!("{} {payload}", client.local_addr().unwrap());
        assert_eq!(String::from_utf8_lossy(&buf[..n]), want);
    }
}

#[test]
fn a_dns_health_check_takes_a_silent_server_out() {
    let dir = tempfile::tempdir().unwrap();
    let (a, _b) = two_servers();
    // Bound but silent: no answer, and no refusal either.
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let silent_port = silent.local_addr().unwrap().port();
    let port = free_port();
    let check = "[upstreams.resolvers.health_check]\ndns_query = \"who.fleet.test\"\ninterval = \"200ms\"\ntimeout = \"200ms\"\nfall = 1";
    let path = config(dir.path(), port, &[a.port, silent_port], "", check, "");
    let mut proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    proxy.wait_for("target is down");
    for id in 0..10 {
        let answer = ask(port, id, Duration::from_secs(2));
        assert_eq!(answer.map(|a| a.0), Some(Ipv4Addr::new(127, 0, 0, 11)), "query {id}");
    }
}
