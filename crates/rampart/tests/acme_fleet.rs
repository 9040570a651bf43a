//! ACME for a fleet: three Rampart processes share one store for ACME, a Redis, or the etcd
//! their config comes from. Exactly one order is placed for the name, every instance serves the
//! certificate, and a challenge answer put up by one is answered by all (the CA may reach any of
//! them: the name's A records point at all three).

use crate::common;

use std::net::{SocketAddr, TcpListener};

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

/// The store the fleet shares.
enum Store {
    Redis(RedisServer),
    /// The config in etcd under `/fleet/`, ACME's keys under `/fleet/acme/`.
    Etcd(EtcdServer),
}

const ETCD_PREFIX: &str = "/fleet/";

impl Store {
    fn storage(&self) -> String {
        match self {
            Store::Redis(redis) => format!("redis://{}", redis.addr()),
            Store::Etcd(_) => "etcd".to_string(),
        }
    }

    /// Puts up (or takes down) an HTTP-01 answer as an instance would.
    fn http_answer(&self, token: &str, key_authorization: Option<&str>) {
        match (self, key_authorization) {
            (Store::Redis(redis), Some(k)) => drop(redis.cli(&["HSET", "rampart:acme:http-01", token, k])),
            (Store::Redis(redis), None) => drop(redis.cli(&["HDEL", "rampart:acme:http-01", token])),
            (Store::Etcd(etcd), Some(k)) => drop(etcd.put(&format!("{ETCD_PREFIX}acme/http-01/{token}"), k)),
            (Store::Etcd(etcd), None) => {
                let key = b64(&format!("{ETCD_PREFIX}acme/http-01/{token}"));
                let (status, answer) = etcd.call("/v3/kv/deleterange", &serde_json::json!({ "key": key }), None);
                assert_eq!(status, 200, "{answer}");
            }
        }
    }
}

#[test]
fn three_instances_sharing_redis_place_one_order_and_all_serve_it() {
    fleet_places_one_order(Store::Redis(RedisServer::start()));
}

#[test]
fn three_instances_sharing_the_etcd_of_their_config_place_one_order_and_all_serve_it() {
    let store = Store::Etcd(EtcdServer::start());
    fleet_places_one_order(store);
}

fn fleet_places_one_order(store: Store) {
    let records: Vec<String> = IPS.iter().map(|ip| format!("a 60 IN A {ip}")).collect();
    let dns = DnsServer::start(&records.join("\n"));
    let (http, https) = (port_on_all(), port_on_all());
    let pebble = Pebble::start(http, https, &dns, 0);
    let dir = tempfile::tempdir().unwrap();
    let cfg = format!(
        "[acme]\ndirectory = \"{}\"\nca = \"{}\"\nstorage = \"{}\"\n\n\
         [listeners.plain]\nbind = \"${{HTTP}}\"\nprotocol = \"http\"\n\n\
         [[listeners.plain.routes]]\nrespond = {{ status = 200, body = \"plain\" }}\n\n\
         [listeners.secure]\nbind = \"${{HTTPS}}\"\nprotocol = \"http\"\n\n\
         [listeners.secure.tls]\nacme = [\"a.fleet.test\"]\n\n\
         [[listeners.secure.routes]]\nrespond = {{ status = 200, body = \"secure\" }}\n",
        pebble.directory(),
        pebble.api_ca.display(),
        store.storage()
    );
    let path = write_file(dir.path(), "fleet.toml", &cfg);
    let args: Vec<String> = match &store {
        Store::Redis(_) => ["run", "-c", &path].map(String::from).to_vec(),
        Store::Etcd(etcd) => {
            etcd.put(&format!("{ETCD_PREFIX}config"), &cfg);
            ["run", "--etcd", &etcd.url(), "--etcd-prefix", ETCD_PREFIX]
                .map(String::from)
                .to_vec()
        }
    };
    let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
    args.extend(["--workers", "1"]);
    let mut fleet: Vec<Rampart> = IPS
        .iter()
        .map(|ip| {
            let (h, s) = (format!("{ip}:{http}"), format!("{ip}:{https}"));
            Rampart::start_with_env(dir.path(), &args, &[("HTTP", &h), ("HTTPS", &s)])
        })
        .collect();

    // Every instance serves a certificate that verifies against Pebble's root.
    let root = pebble.issuing_root();
    let client = ClientOpts::with_roots(&root).build();
    for ip in IPS {
        let at: SocketAddr = format!("{ip}:{https}").parse().unwrap();
        eventually(&format!("{ip} serves the certificate"), || {
            handshake_at(at, &client, "a.fleet.test").is_ok()
        });
    }
    assert_eq!(
        pebble.log().matches("POST /order-plz").count(),
        1,
        "one order: {}",
        pebble.log()
    );

    // An answer put up in the shared store is given by every instance.
    store.http_answer("tok3n", Some("tok3n.thumbprint"));
    for ip in IPS {
        eventually(&format!("{ip} answers the shared token"), || {
            let mut c = std::net::TcpStream::connect((ip, http)).unwrap();
            let (status, _, body) = common::http::send(
                &mut c,
                b"GET /.well-known/acme-challenge/tok3n HTTP/1.1\r\nHost: a.fleet.test\r\n\r\n",
            );
            status == 200 && body == b"tok3n.thumbprint"
        });
    }
    store.http_answer("tok3n", None);

    let mut issued = 0;
    for proxy in &mut fleet {
        proxy.stop();
        issued += proxy.log.iter().filter(|l| l.contains("certificate issued")).count();
    }
    // Lines read while waiting are in `log`; stop() reads the rest.
    assert_eq!(issued, 1, "exactly one instance ordered");
    if let Store::Etcd(etcd) = &store {
        let key = b64(&format!("{ETCD_PREFIX}acme/cert/a.fleet.test"));
        let (_, answer) = etcd.call(
            "/v3/kv/range",
            &serde_json::json!({ "key": key, "keys_only": true }),
            None,
        );
        assert_eq!(answer["count"], "1", "the certificate is kept in etcd: {answer}");
    }
}
