//! ACME for a fleet: Rampart processes share one store for ACME, a Redis, or the etcd their
//! config comes from. Exactly one order is placed for each name and one account is made, however
//! the instances race (started together, many times over, orders counted at the CA); every
//! instance serves the certificates; and a challenge answer put up by one is answered by all as
//! soon as it is stored, even by an instance busy with an order of its own (the CA may reach any
//! of them: the names' A records point at all of them).

use crate::common;

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::mpsc;
use std::time::Instant;

use common::dns::DnsServer;
use common::pebble::Pebble;
use common::servers::{b64, EtcdServer, RedisServer};
use common::tls::{eventually, handshake_at, ClientOpts};
use common::{write_file, Rampart};
const IPS: [&str; 3] = ["127.0.0.2", "127.0.0.3", "127.0.0.4"];

/// A port free on every address of [`IPS`].
fn port_on_all() -> u16 {
    loop {
        let port = TcpListener::bind((IPS[0], 0)).unwrap().local_addr().unwrap().port();
        if IPS.iter().all(|ip| TcpListener::bind((*ip, port)).is_ok()) {
            return port;
        }
    }
}

/// A gate in front of Pebble's API, so that a fleet's instances meet the CA together once all
/// of them listen (the CA may validate a name at any of them; one that is not listening yet
/// fails the validation): connections are accepted at once and held until the gate opens, then
/// relayed to Pebble. Only the directory is fetched through it; the URLs in the directory are
/// Pebble's own.
struct StartGate {
    port: u16,
    events: mpsc::Sender<GateEvent>,
}

enum GateEvent {
    Connection(TcpStream),
    Open(bool),
}

impl StartGate {
    fn start(pebble: &Pebble) -> StartGate {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let (events, arrivals) = mpsc::channel();
        let accepted = events.clone();
        std::thread::spawn(move || {
            for down in listener.incoming().map_while(Result::ok) {
                if accepted.send(GateEvent::Connection(down)).is_err() {
                    break;
                }
            }
        });
        let to = pebble.port;
        std::thread::spawn(move || {
            let (mut open, mut held) = (false, Vec::new());
            for event in arrivals {
                match event {
                    GateEvent::Connection(down) if open => relay(down, to),
                    GateEvent::Connection(down) => held.push(down),
                    GateEvent::Open(now) => open = now,
                }
                if open {
                    held.drain(..).for_each(|down| relay(down, to));
                }
            }
        });
        StartGate { port, events }
    }

    /// The directory URL through the gate.
    fn directory(&self) -> String {
        format!("https://127.0.0.1:{}/dir", self.port)
    }

    fn set(&self, open: bool) {
        self.events.send(GateEvent::Open(open)).unwrap();
    }
}

/// Copies `down` to Pebble's API on `port` and back, on threads of its own.
fn relay(down: TcpStream, port: u16) {
    let Ok(up) = TcpStream::connect(("127.0.0.1", port)) else {
        return;
    };
    let (mut down_r, mut up_w) = (down.try_clone().unwrap(), up.try_clone().unwrap());
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut down_r, &mut up_w);
        let _ = up_w.shutdown(std::net::Shutdown::Write);
    });
    let (mut up_r, mut down_w) = (up, down);
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut up_r, &mut down_w);
        let _ = down_w.shutdown(std::net::Shutdown::Write);
    });
}

/// The config in etcd under `/fleet/`, ACME's keys under `/fleet/acme/`.
const ETCD_PREFIX: &str = "/fleet/";

/// Orders the CA was asked for (Pebble logs each new order's request).
fn orders(pebble: &Pebble) -> usize {
    pebble.log().matches("POST /order-plz").count()
}

/// Accounts the CA was asked to make.
fn accounts(pebble: &Pebble) -> usize {
    pebble.log().matches("POST /sign-me-up").count()
}

/// `[acme]` for `pebble` (through `gate`) and `storage`, a plain HTTP listener on `${HTTP}` and a TLS one on
/// `${HTTPS}` obtaining `names`.
fn fleet_config(pebble: &Pebble, gate: &StartGate, storage: &str, names: &[&str]) -> String {
    let names: Vec<String> = names.iter().map(|n| format!("\"{n}\"")).collect();
    format!(
        "[acme]\ndirectory = \"{}\"\nca = \"{}\"\nstorage = \"{storage}\"\n\n\
         [listeners.plain]\nbind = \"${{HTTP}}\"\nprotocol = \"http\"\n\n\
         [[listeners.plain.routes]]\nrespond = {{ status = 200, body = \"plain\" }}\n\n\
         [listeners.secure]\nbind = \"${{HTTPS}}\"\nprotocol = \"http\"\n\n\
         [listeners.secure.tls]\nacme = [{}]\n\n\
         [[listeners.secure.routes]]\nrespond = {{ status = 200, body = \"secure\" }}\n",
        gate.directory(),
        pebble.api_ca.display(),
        names.join(", ")
    )
}

/// Starts one instance per `(ip, args)` at once (none waits for another), waits until each
/// listens, then opens `gate`: they meet the CA together.
fn start_together(
    dir: &Path,
    gate: &StartGate,
    instances: &[(&str, Vec<String>)],
    (http, https): (u16, u16),
) -> Vec<Rampart> {
    gate.set(false);
    let program = Path::new(env!("CARGO_BIN_EXE_rampart"));
    let mut fleet: Vec<Rampart> = instances
        .iter()
        .map(|(ip, args)| {
            let (h, s) = (format!("{ip}:{http}"), format!("{ip}:{https}"));
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            Rampart::spawn_program(program, dir, &args, &[("HTTP", &h), ("HTTPS", &s)])
        })
        .collect();
    for proxy in &mut fleet {
        proxy.wait_for("listening:");
    }
    gate.set(true);
    fleet
}

/// How many times the fleet is started together with new names.
const ROUNDS: usize = 20;

#[test]
fn three_instances_sharing_redis_started_together_place_one_order_per_name_and_make_one_account() {
    let redis = RedisServer::start();
    let records: Vec<String> = (0..ROUNDS)
        .flat_map(|round| ["a", "b"].map(|n| format!("{n}{round}")))
        .flat_map(|name| IPS.map(|ip| format!("{name} 60 IN A {ip}")))
        .collect();
    let dns = DnsServer::start(&records.join("\n"));
    let (http, https) = (port_on_all(), port_on_all());
    let pebble = Pebble::start(http, https, &dns, 0);
    let gate = StartGate::start(&pebble);
    let root = pebble.issuing_root();
    let client = ClientOpts::with_roots(&root).build();
    let storage = format!("redis://{}", redis.addr());
    let started = Instant::now();
    let mut counted = Vec::new();
    let mut answered_at_once = Vec::new();
    for round in 0..ROUNDS {
        // A fleet that starts afresh: no account and no certificate kept.
        redis.cli(&["FLUSHALL"]);
        let names = [format!("a{round}.fleet.test"), format!("b{round}.fleet.test")];
        let dir = tempfile::tempdir().unwrap();
        let cfg = fleet_config(&pebble, &gate, &storage, &[&names[0], &names[1]]);
        let path = write_file(dir.path(), "fleet.toml", &cfg);
        let args: Vec<String> = ["run", "-c", &path, "--workers", "1"].map(String::from).to_vec();
        let (orders_before, accounts_before) = (orders(&pebble), accounts(&pebble));
        let instances: Vec<(&str, Vec<String>)> = IPS.iter().map(|ip| (*ip, args.clone())).collect();
        let mut fleet = start_together(dir.path(), &gate, &instances, (http, https));
        // Every instance serves both certificates, verified against Pebble's root.
        for ip in IPS {
            let at: SocketAddr = format!("{ip}:{https}").parse().unwrap();
            for name in &names {
                eventually(&format!("round {round}: {ip} serves {name}"), || {
                    handshake_at(at, &client, name).is_ok()
                });
            }
        }
        if round == ROUNDS - 1 {
            // An answer put up in the store is given by every instance at once: not a mirror's
            // 500 ms later.
            for (i, ip) in IPS.iter().enumerate() {
                let token = format!("fleet-tok3n-{i}");
                redis.cli(&["HSET", "rampart:acme:http-01", &token, &format!("{token}.thumbprint")]);
                let (status, body) = challenge_answer(ip, http, &token);
                answered_at_once.push((ip, status, body == format!("{token}.thumbprint")));
                redis.cli(&["HDEL", "rampart:acme:http-01", &token]);
            }
        }
        for proxy in &fleet {
            proxy.signal(libc::SIGTERM);
        }
        let mut issued = 0;
        for proxy in &mut fleet {
            proxy.wait_exit();
            issued += proxy.log.iter().filter(|l| l.contains("certificate issued")).count();
        }
        let (placed, made) = (orders(&pebble) - orders_before, accounts(&pebble) - accounts_before);
        counted.push((placed, made, issued));
        if (placed, made, issued) != (2, 1, 2) {
            eprintln!(
                "round {round}: {placed} orders, {made} accounts, {issued} certificates issued for 2 names:\n{}",
                fleet
                    .iter()
                    .map(|p| p.log.join("\n"))
                    .collect::<Vec<_>>()
                    .join("\n----\n")
            );
        }
    }
    eprintln!(
        "{ROUNDS} rounds of 3 instances started together, 2 names each, in {:?}: (orders, accounts, issued) {counted:?}",
        started.elapsed()
    );
    let wrong: Vec<usize> = (0..ROUNDS).filter(|r| counted[*r] != (2, 1, 2)).collect();
    assert!(
        wrong.is_empty(),
        "rounds {wrong:?} of {ROUNDS} did not give one order per name and one account: (orders, accounts, issued) {counted:?}"
    );
    assert!(
        answered_at_once
            .iter()
            .all(|(_, status, right)| *status == 200 && *right),
        "a token put into Redis, asked for at once: {answered_at_once:?}"
    );
}

/// The status and body an instance at `ip` answers for an HTTP-01 `token`.
fn challenge_answer(ip: &str, http: u16, token: &str) -> (u16, String) {
    let mut c = std::net::TcpStream::connect((ip, http)).unwrap();
    let request = format!("GET /.well-known/acme-challenge/{token} HTTP/1.1\r\nHost: a.fleet.test\r\n\r\n");
    let (status, _, body) = common::http::send(&mut c, request.as_bytes());
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[test]
fn an_instance_busy_with_its_own_order_answers_the_token_of_another_instances_order() {
    // x is ordered by the instance on .2 and validated at .3; y the other way round. Each is
    // busy with its own order when the CA comes for the other's token.
    let redis = RedisServer::start();
    let dns = DnsServer::start(&format!("x 60 IN A {}\ny 60 IN A {}", IPS[1], IPS[0]));
    let (http, https) = (port_on_all(), port_on_all());
    let pebble = Pebble::start(http, https, &dns, 0);
    let gate = StartGate::start(&pebble);
    let storage = format!("redis://{}", redis.addr());
    let dir = tempfile::tempdir().unwrap();
    let instances: Vec<(&str, Vec<String>)> = [(IPS[0], "x.fleet.test"), (IPS[1], "y.fleet.test")]
        .iter()
        .map(|(ip, name)| {
            let path = write_file(
                dir.path(),
                &format!("{ip}.toml"),
                &fleet_config(&pebble, &gate, &storage, &[name]),
            );
            (*ip, ["run", "-c", &path, "--workers", "1"].map(String::from).to_vec())
        })
        .collect();
    let mut fleet = start_together(dir.path(), &gate, &instances, (http, https));
    for (proxy, name) in fleet.iter_mut().zip(["x.fleet.test", "y.fleet.test"]) {
        proxy.wait_for(&format!("acme: {name}: certificate issued"));
    }
    for proxy in &mut fleet {
        proxy.stop();
        let log = proxy.log.join("\n");
        assert!(
            !log.contains("trying again"),
            "the first order of each name succeeds:\n{log}"
        );
    }
    assert_eq!(orders(&pebble), 2, "{}", pebble.log());
}

#[test]
fn three_instances_sharing_the_etcd_of_their_config_place_one_order_and_all_serve_it() {
    let etcd = EtcdServer::start();
    let records: Vec<String> = IPS.iter().map(|ip| format!("a 60 IN A {ip}")).collect();
    let dns = DnsServer::start(&records.join("\n"));
    let (http, https) = (port_on_all(), port_on_all());
    let pebble = Pebble::start(http, https, &dns, 0);
    let gate = StartGate::start(&pebble);
    let dir = tempfile::tempdir().unwrap();
    etcd.put(
        &format!("{ETCD_PREFIX}config"),
        &fleet_config(&pebble, &gate, "etcd", &["a.fleet.test"]),
    );
    let args: Vec<String> = [
        "run",
        "--etcd",
        &etcd.url(),
        "--etcd-prefix",
        ETCD_PREFIX,
        "--workers",
        "1",
    ]
    .map(String::from)
    .to_vec();
    let instances: Vec<(&str, Vec<String>)> = IPS.iter().map(|ip| (*ip, args.clone())).collect();
    let mut fleet = start_together(dir.path(), &gate, &instances, (http, https));

    // Every instance serves a certificate that verifies against Pebble's root.
    let root = pebble.issuing_root();
    let client = ClientOpts::with_roots(&root).build();
    for ip in IPS {
        let at: SocketAddr = format!("{ip}:{https}").parse().unwrap();
        eventually(&format!("{ip} serves the certificate"), || {
            handshake_at(at, &client, "a.fleet.test").is_ok()
        });
    }
    assert_eq!(orders(&pebble), 1, "one order: {}", pebble.log());
    assert_eq!(accounts(&pebble), 1, "one account: {}", pebble.log());

    // An answer put up in the shared store is given by every instance at once.
    let key = format!("{ETCD_PREFIX}acme/http-01/tok3n");
    etcd.put(&key, "tok3n.thumbprint");
    for ip in IPS {
        assert_eq!(
            challenge_answer(ip, http, "tok3n"),
            (200, "tok3n.thumbprint".to_string()),
            "{ip}"
        );
    }
    let (status, answer) = etcd.call("/v3/kv/deleterange", &serde_json::json!({ "key": b64(&key) }), None);
    assert_eq!(status, 200, "{answer}");

    let mut issued = 0;
    for proxy in &mut fleet {
        proxy.stop();
        issued += proxy.log.iter().filter(|l| l.contains("certificate issued")).count();
    }
    // Lines read while waiting are in `log`; stop() reads the rest.
    assert_eq!(issued, 1, "exactly one instance ordered");
    let key = b64(&format!("{ETCD_PREFIX}acme/cert/a.fleet.test"));
    let (_, answer) = etcd.call(
        "/v3/kv/range",
        &serde_json::json!({ "key": key, "keys_only": true }),
        None,
    );
    assert_eq!(answer["count"], "1", "the certificate is kept in etcd: {answer}");
}
