//! Many instances as one: three Rampart processes fed by one real etcd, resolving their targets
//! through one real DNS server (BIND 9) and sharing a rate limit in one `redis-server`, under
//! steady HTTP load through all three. One config for all: each process gets its addresses from
//! the environment (`bind = "${BIND}"`).
//!
//! - 100 `rampart push`es of a route change: each applied by all three (push → applied is
//!   measured and printed, p50/p99/max; the bound asserted is the 1 s);
//! - a bad config put straight into etcd: refused by all three, the old one stays;
//! - etcd killed, then restarted: traffic goes on, and a push after the restart arrives;
//! - a DNS record added, then removed: every instance follows within its TTL + 1 s;
//! - a global limit of 60 requests/s across the three holds within 5%;
//!
//! and not one of the steady requests fails.

use crate::common;

use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use common::dns::DnsServer;
use common::load::{assert_within_5_percent, paced, two_backends, Load};
use common::servers::{EtcdServer, RedisServer};
use common::{free_port, run_rampart, write_file, Rampart, WAIT};

fn config(dns: &DnsServer, redis: &RedisServer, backend_port: u16, version: usize) -> String {
    format!(
        "[global]\n{}\n\n[admin]\nlisten = \"${{ADMIN:-127.0.0.1:9090}}\"\n\n\
         [listeners.web]\nbind = \"${{BIND:-127.0.0.1:8080}}\"\nprotocol = \"http\"\n\n\
         [[listeners.web.routes]]\nname = \"limited\"\nmatch = {{ path_prefix = \"/limited\" }}\nupstream = \"app\"\n\
         filters = [{{ type = \"rate_limit\", rate = \"60/s\", burst = 10, mode = \"global\", redis = \"{}\", name = \"shared\" }}]\n\n\
         [[listeners.web.routes]]\nname = \"all\"\nupstream = \"app\"\n\
         response_headers = {{ set = {{ \"x-config\" = \"v{version}\" }} }}\n\n\
         [upstreams.app]\ntargets = [{{ dns = \"api.fleet.test\", port = {backend_port} }}]\n",
        dns.resolvers(),
        redis.addr()
    )
}

/// `rampart push` of `text`: the revision it wrote.
fn push(dir: &Path, etcd: &EtcdServer, text: &str) -> i64 {
    let file = write_file(dir, "fleet.toml", text);
    let (code, out, err) = run_rampart(dir, &["push", "-c", &file, "--etcd", &etcd.url()]);
    assert_eq!(code, 0, "{out}{err}");
    out.trim()
        .rsplit(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no revision in {out:?}"))
}

struct Instance {
    proxy: Rampart,
    port: u16,
    admin: u16,
    _state: tempfile::TempDir,
}

impl Instance {
    fn start(dir: &Path, etcd: &EtcdServer) -> Instance {
        let (port, admin) = (free_port(), free_port());
        let state = tempfile::tempdir().unwrap();
        let (bind, admin_at) = (format!("127.0.0.1:{port}"), format!("127.0.0.1:{admin}"));
        let args = [
            "run",
            "--etcd",
            &etcd.url(),
            "--state-dir",
            state.path().to_str().unwrap(),
            "--workers",
            "1",
        ];
        let proxy = Rampart::start_with_env(dir, &args, &[("BIND", &bind), ("ADMIN", &admin_at)]);
        Instance {
            proxy,
            port,
            admin,
            _state: state,
        }
    }

    fn status(&self) -> serde_json::Value {
        common::admin(self.admin, "GET", "/api/status", None).1
    }

    fn target_addresses(&self) -> Vec<String> {
        let (_, upstreams) = common::admin(self.admin, "GET", "/api/upstreams", None);
        upstreams["upstreams"][0]["targets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["address"].as_str().unwrap().to_string())
            .collect()
    }
}

/// Waits until `ok` holds for every instance; how long that took.
fn all(fleet: &[Instance], what: &str, ok: impl Fn(&Instance) -> bool) -> Duration {
    let started = Instant::now();
    let mut pending: Vec<&Instance> = fleet.iter().collect();
    while !pending.is_empty() {
        pending.retain(|i| !ok(i));
        assert!(started.elapsed() < WAIT, "{what}: not within {WAIT:?}");
        if !pending.is_empty() {
            thread::sleep(Duration::from_millis(1));
        }
    }
    started.elapsed()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1]
}

#[test]
fn three_instances_behave_as_one() {
    let (backend_port, _a, _b) = two_backends();
    let dns = DnsServer::start("api 1 IN A 127.0.0.2");
    let redis = RedisServer::start();
    let mut etcd = EtcdServer::start();
    let dir = tempfile::tempdir().unwrap();
    let mut version = 1;
    let first = push(dir.path(), &etcd, &config(&dns, &redis, backend_port, version));
    let fleet: Vec<Instance> = (0..3).map(|_| Instance::start(dir.path(), &etcd)).collect();
    for i in &fleet {
        assert_eq!(i.status()["config"]["revision"], first);
    }
    let ports: Vec<u16> = fleet.iter().map(|i| i.port).collect();
    let mut load = Load::start(&ports);
    load.wait_until(0, "answers from all three", |seen| seen.len() >= 30);

    // 100 pushes of a route change, each applied by all three.
    let mut took = Vec::new();
    for _ in 0..100 {
        version += 1;
        let revision = push(dir.path(), &etcd, &config(&dns, &redis, backend_port, version));
        took.push(all(&fleet, "a push applied", |i| {
            i.status()["config"]["revision"] == revision
        }));
    }
    took.sort();
    let (p50, p99, max) = (percentile(&took, 0.5), percentile(&took, 0.99), took[took.len() - 1]);
    eprintln!("push -> applied by all three, over 100 pushes: p50 {p50:?}, p99 {p99:?}, max {max:?}");
    assert!(p99 < Duration::from_secs(1), "p99 {p99:?}");
    let mut probe = common::connect(fleet[0].port);
    let (status, head, _) = common::http::send(&mut probe, b"GET / HTTP/1.1\r\nHost: app\r\n\r\n");
    assert_eq!(
        (status, common::http::header(&head, "x-config")),
        (200, Some(format!("v{version}").as_str()))
    );

    // A bad config in etcd: every instance refuses it and keeps the one in force.
    let applied = fleet[0].status()["config"]["revision"].clone();
    etcd.put(
        "/rampart/config",
        "[listeners.web]\nbind = \"${BIND}\"\nprotocol = \"carrier pigeon\"\n",
    );
    all(&fleet, "the bad config refused", |i| {
        i.status()["reloads"]["failed"] == 1
    });
    for i in &fleet {
        let status = i.status();
        assert_eq!(status["config"]["revision"], applied, "{status}");
        let errors = status["last_reload"]["errors"].to_string();
        assert!(errors.contains("carrier pigeon"), "{errors}");
    }

    // etcd killed and restarted: traffic goes on, and a push after the restart arrives.
    etcd.kill();
    let from = load.count();
    load.wait_until(from, "traffic while etcd is down", |seen| seen.len() >= 30);
    etcd.restart();
    version += 1;
    let revision = push(dir.path(), &etcd, &config(&dns, &redis, backend_port, version));
    all(&fleet, "the push after the restart", |i| {
        i.status()["config"]["revision"] == revision
    });

    // A DNS record added, then removed: every instance follows within the TTL (1 s) + 1 s.
    dns.update(&["add api.fleet.test. 1 A 127.0.0.3"]);
    let second = format!("127.0.0.3:{backend_port}");
    let joined = all(&fleet, "the added address", |i| i.target_addresses().contains(&second));
    let from = load.count();
    load.wait_until(from, "the added address takes requests", |seen| {
        seen.iter().any(|s| s == "B")
    });
    dns.update(&["delete api.fleet.test. A 127.0.0.2"]);
    let first_address = format!("127.0.0.2:{backend_port}");
    let left = all(&fleet, "the removed address", |i| {
        !i.target_addresses().contains(&first_address)
    });
    eprintln!("a DNS record reached all three in {joined:?} when added, {left:?} when removed");
    assert!(joined <= Duration::from_secs(2) && left <= Duration::from_secs(2));

    // A global limit of 60 a second (burst 10) across the three, sent 150 a second.
    let limited = "GET /limited HTTP/1.1\r\nHost: app\r\n\r\n";
    let t = paced(&ports, 6, 150, Duration::from_secs(4), limited);
    assert_within_5_percent(&t, 60.0, 10.0);

    let answers = load.finish();
    let failed: Vec<&String> = answers.iter().filter(|s| *s != "A" && *s != "B").collect();
    eprintln!("{} steady requests, {} failed", answers.len(), failed.len());
    assert!(failed.is_empty(), "{failed:?}");
    for mut i in fleet {
        i.proxy.stop();
    }
}
