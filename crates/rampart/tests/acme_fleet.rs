//! ACME for a fleet: three Rampart processes share one Redis as their ACME store. Exactly one
//! order is placed for the name, every instance serves the certificate, and a challenge answer
//! put up by one is answered by all (the CA may reach any of them: the name's A records point at
//! all three).

mod common;

use std::net::{SocketAddr, TcpListener};

use common::dns::DnsServer;
use common::pebble::Pebble;
use common::servers::RedisServer;
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

#[test]
fn three_instances_sharing_redis_place_one_order_and_all_serve_it() {
    let records: Vec<String> = IPS.iter().map(|ip| format!("a 60 IN A {ip}")).collect();
    let dns = DnsServer::start(&records.join("\n"));
    let (http, https) = (port_on_all(), port_on_all());
    let pebble = Pebble::start(http, https, &dns, 0);
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let cfg = format!(
        "[acme]\ndirectory = \"{}\"\nca = \"{}\"\nstorage = \"redis://{}\"\n\n\
         [listeners.plain]\nbind = \"${{HTTP}}\"\nprotocol = \"http\"\n\n\
         [[listeners.plain.routes]]\nrespond = {{ status = 200, body = \"plain\" }}\n\n\
         [listeners.secure]\nbind = \"${{HTTPS}}\"\nprotocol = \"http\"\n\n\
         [listeners.secure.tls]\nacme = [\"a.fleet.test\"]\n\n\
         [[listeners.secure.routes]]\nrespond = {{ status = 200, body = \"secure\" }}\n",
        pebble.directory(),
        pebble.api_ca.display(),
        redis.addr()
    );
    let path = write_file(dir.path(), "fleet.toml", &cfg);
    let mut fleet: Vec<Rampart> = IPS
        .iter()
        .map(|ip| {
            let (h, s) = (format!("{ip}:{http}"), format!("{ip}:{https}"));
            Rampart::start_with_env(
                dir.path(),
                &["run", "-c", &path, "--workers", "1"],
                &[("HTTP", &h), ("HTTPS", &s)],
            )
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
    redis.cli(&["HSET", "rampart:acme:http-01", "tok3n", "tok3n.thumbprint"]);
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
    redis.cli(&["HDEL", "rampart:acme:http-01", "tok3n"]);

    let mut issued = 0;
    for proxy in &mut fleet {
        proxy.stop();
        issued += proxy.log.iter().filter(|l| l.contains("certificate issued")).count();
    }
    // Lines read while waiting are in `log`; stop() reads the rest.
    assert_eq!(issued, 1, "exactly one instance ordered");
}
