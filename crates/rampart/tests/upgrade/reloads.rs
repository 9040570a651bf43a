//! 100 config reloads under load, adding and removing routes, targets and upstreams.

use std::io::{Read, Write};
use std::net::TcpStream;

use super::load::Load;
use crate::common::http::{HttpBackend, Reply};
use crate::common::{free_port, write_file, Backend, Behavior, Rampart};

/// Version `v` of the config: even versions route `/probe` to backend one, odd ones to backend
/// two (a route and an upstream that exist only then), and move the TCP listener and the default
/// route between targets.
fn version(v: usize, http: u16, tcp: u16, apps: &[String; 2], probes: &[String; 2], echoes: &[String; 2]) -> String {
    let odd = v % 2 == 1;
    let probe_upstream = if odd { "two" } else { "one" };
    let apps_list = if odd {
        format!("\"{}\", \"{}\"", apps[0], apps[1])
    } else {
        format!("\"{}\"", apps[0])
    };
    let extra_upstream = if odd {
        format!("[upstreams.two]\ntargets = [\"{}\"]\n", probes[1])
    } else {
        format!("[upstreams.one]\ntargets = [\"{}\"]\n", probes[0])
    };
    format!(
        "# version {v}\n\
         [listeners.web]\nbind = \"127.0.0.1:{http}\"\nprotocol = \"http\"\n\n\
         [[listeners.web.routes]]\nmatch = {{ path_prefix = \"/probe\" }}\nupstream = \"{probe_upstream}\"\n\n\
         [[listeners.web.routes]]\nmatch = {{ path_prefix = \"/\" }}\nupstream = \"app\"\n\n\
         [listeners.raw]\nbind = \"127.0.0.1:{tcp}\"\nupstream = \"echo\"\n\n\
         [upstreams.app]\ntargets = [{apps_list}]\n\n\
         [upstreams.echo]\ntargets = [\"{}\"]\n\n{extra_upstream}",
        echoes[v % 2]
    )
}

/// The body of the answer to `GET /probe` on a kept-alive connection.
fn probe(stream: &mut TcpStream) -> String {
    stream
        .write_all(b"GET /probe HTTP/1.1\r\nHost: probe.test\r\n\r\n")
        .unwrap();
    let mut got = Vec::new();
    let mut chunk = [0u8; 1024];
    // The probe backends answer with a two-byte body.
    while !(got.windows(4).any(|w| w == b"\r\n\r\n")
        && got.len() >= got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 6)
    {
        let n = stream.read(&mut chunk).unwrap();
        assert!(
            n > 0,
            "the probe connection closed: {:?}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&chunk[..n]);
    }
    let text = String::from_utf8_lossy(&got).into_owned();
    text.rsplit("\r\n\r\n").next().unwrap().to_string()
}

#[test]
fn a_hundred_reloads_under_load_fail_no_request_and_keep_alive_connections_follow_the_new_routes() {
    let dir = tempfile::tempdir().unwrap();
    let a = [HttpBackend::start(Reply::Echo), HttpBackend::start(Reply::Echo)];
    let p = [
        HttpBackend::start(Reply::Raw(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nP1")),
        HttpBackend::start(Reply::Raw(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nP2")),
    ];
    let e = [
        Backend::start("e1", Behavior::TagEcho),
        Backend::start("e2", Behavior::TagEcho),
    ];
    let apps = [a[0].target(), a[1].target()];
    let probes = [p[0].target(), p[1].target()];
    let echoes = [e[0].target(), e[1].target()];
    let (http, tcp) = (free_port(), free_port());
    let path = write_file(dir.path(), "r.toml", &version(0, http, tcp, &apps, &probes, &echoes));
    let mut rampart = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "2"]);
    let load = Load::start(http, "/app", tcp);
    let mut kept = TcpStream::connect(("127.0.0.1", http)).unwrap();
    kept.set_read_timeout(Some(crate::common::WAIT)).unwrap();
    assert_eq!(probe(&mut kept), "P1");
    for v in 1..=100 {
        write_file(dir.path(), "r.toml", &version(v, http, tcp, &apps, &probes, &echoes));
        rampart.signal(libc::SIGHUP);
        let line = rampart.wait_for("reload");
        assert!(line.contains("reloaded"), "reload {v}: {line}");
        // The same connection, at its next request, takes the route of the config now in force.
        let want = if v % 2 == 1 { "P2" } else { "P1" };
        assert_eq!(probe(&mut kept), want, "after reload {v}");
    }
    let tally = load.stop();
    tally.assert_clean(100, &rampart.log);
    // A reload closes no client connection: no request had to be sent again.
    assert_eq!(tally.retried, 0, "{tally:?}");
    assert_eq!(rampart.stop(), 0);
}
