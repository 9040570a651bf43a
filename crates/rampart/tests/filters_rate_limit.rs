//! The `rate_limit` filter end to end through the real binary: a LOCAL limit held within 5% at a
//! fixed request rate, keys by header and route, the IETF fields; a GLOBAL limit held across
//! three Rampart processes sharing one `redis-server` (started here from Debian's package, which
//! `scripts/servers` installs), with Redis round trips per request counted; and Redis killed and
//! restarted mid-test, each fail mode answering without waiting on it.
//!
//! Clients send at a fixed rate (the load is paced by the clock, as a load generator is); every
//! other wait is on an event.

use crate::common;

use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

use common::http::{header, HttpBackend, Reply};
use common::load::{assert_within_5_percent, exchange, paced};
use common::servers::RedisServer;
use common::Bounded;
use common::*;

struct Site {
    proxies: Vec<Rampart>,
    ports: Vec<u16>,
    backend: HttpBackend,
    _dir: tempfile::TempDir,
}

/// `copies` Rampart processes with one worker each and the same routes.
fn site(copies: usize, routes: &str) -> Site {
    let backend = HttpBackend::start(Reply::Echo);
    let dir = tempfile::tempdir().unwrap();
    let mut proxies = Vec::new();
    let mut ports = Vec::new();
    for i in 0..copies {
        let port = free_port();
        let cfg = format!(
            "[listeners.gw]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\n\n{routes}\n\
             [upstreams.app]\ntargets = [\"{}\"]\n",
            backend.target()
        );
        let path = write_file(dir.path(), &format!("gw{i}.toml"), &cfg);
        proxies.push(Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]));
        ports.push(port);
    }
    Site {
        proxies,
        ports,
        backend,
        _dir: dir,
    }
}

const GET: &str = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";

#[test]
fn a_local_limit_holds_within_5_percent_at_a_fixed_rate() {
    let s = site(
        1,
        "[[listeners.gw.routes]]\nupstream = \"app\"\nfilters = [{ type = \"rate_limit\", rate = \"40/s\", burst = 10 }]\n",
    );
    // Twice the limit, from four connections.
    let t = paced(&s.ports, 4, 80, Duration::from_secs(4), GET);
    assert_within_5_percent(&t, 40.0, 10.0);
    assert!(t.refused > 100, "{t:?}");
}

#[test]
fn refusals_and_answers_carry_the_ietf_fields_and_keys_count_apart() {
    let s = site(
        1,
        "[[listeners.gw.routes]]\nname = \"by-key\"\nmatch = { path_prefix = \"/k\" }\nupstream = \"app\"\n\
         filters = [{ type = \"rate_limit\", rate = \"2/m\", key = \"header:X-Api-Key\", name = \"per-key\" }]\n\n\
         [[listeners.gw.routes]]\nname = \"whole\"\nmatch = { path_prefix = \"/r\" }\nupstream = \"app\"\n\
         filters = [{ type = \"rate_limit\", rate = \"3/h\", burst = 1, key = \"route\", headers = false }]\n",
    );
    let port = s.ports[0];
    let mut c = connect(port);
    let key = |k: &str| format!("GET /k HTTP/1.1\r\nHost: x\r\nX-Api-Key: {k}\r\n\r\n");
    // Two a minute per key, at once (the burst is the rate's count).
    let (status, head) = exchange(&mut c, key("alpha").as_bytes());
    assert_eq!(status, 200);
    assert_eq!(header(&head, "ratelimit-policy"), Some("\"per-key\";q=2;w=60"));
    assert_eq!(header(&head, "ratelimit"), Some("\"per-key\";r=1;t=30"));
    assert_eq!(exchange(&mut c, key("alpha").as_bytes()).0, 200);
    let (status, head) = exchange(&mut c, key("alpha").as_bytes());
    assert_eq!(status, 429);
    assert_eq!(header(&head, "retry-after"), Some("30"));
    assert_eq!(header(&head, "ratelimit"), Some("\"per-key\";r=0;t=60"));
    // Another key has its own budget.
    assert_eq!(exchange(&mut c, key("beta").as_bytes()).0, 200);
    // One bucket for the whole route, whoever asks; no fields on its answers.
    let route = "GET /r HTTP/1.1\r\nHost: x\r\n\r\n";
    let (status, head) = exchange(&mut c, route.as_bytes());
    assert_eq!(status, 200);
    assert_eq!(header(&head, "ratelimit"), None);
    let mut other = connect_from(std::net::Ipv4Addr::new(127, 0, 0, 9), port);
    let (status, head) = exchange(&mut other, route.as_bytes());
    assert_eq!(status, 429);
    assert_eq!(header(&head, "retry-after"), Some("1200"));
}

#[test]
fn a_global_limit_holds_across_three_processes_sharing_redis() {
    let redis = RedisServer::start();
    let routes = format!(
        "[[listeners.gw.routes]]\nmatch = {{ path_prefix = \"/fast\" }}\nupstream = \"app\"\nfilters = [{{ type = \"rate_limit\", \
         rate = \"100000/s\", mode = \"global\", redis = \"{0}\", name = \"fast\" }}]\n\n\
         [[listeners.gw.routes]]\nupstream = \"app\"\nfilters = [{{ type = \"rate_limit\", rate = \"60/s\", \
         burst = 10, mode = \"global\", redis = \"{0}\", name = \"shared\" }}]\n",
        redis.addr()
    );
    let s = site(3, &routes);
    let calls = |r: &RedisServer| -> u64 {
        let stats = r.cli(&["info", "commandstats"]);
        stats
            .lines()
            .filter(|l| l.starts_with("cmdstat_evalsha:"))
            .filter_map(|l| l.split("calls=").nth(1)?.split(',').next()?.parse::<u64>().ok())
            .sum()
    };
    let before = calls(&redis);
    // 150 a second spread over the three, against 60 a second shared.
    let t = paced(&s.ports, 6, 150, Duration::from_secs(4), GET);
    assert_within_5_percent(&t, 60.0, 10.0);
    // At this rate every request is a round trip (a denial is remembered only until a token
    // may be back, 1/60 s, and the lease is one token: a tenth of the burst).
    assert!(calls(&redis) - before <= t.allowed + t.refused);
    // Under a high limit, workers take leases that grow with use: far fewer round trips than
    // requests (the target is under 0.1 per request).
    let before = calls(&redis);
    let fast = "GET /fast HTTP/1.1\r\nHost: x\r\n\r\n";
    let mut requests = 0;
    for &port in &s.ports {
        let mut c = connect(port);
        for _ in 0..400 {
            assert_eq!(exchange(&mut c, fast.as_bytes()).0, 200);
            requests += 1;
        }
    }
    let per_request = (calls(&redis) - before) as f64 / requests as f64;
    assert!(per_request < 0.1, "{per_request} Redis round trips per request");
    let _ = &s.proxies;
}

#[test]
fn redis_killed_mid_test_means_each_fail_mode_without_waiting_then_the_limit_again() {
    let mut redis = RedisServer::start();
    let routes = format!(
        "[[listeners.gw.routes]]\nname = \"open\"\nmatch = {{ path_prefix = \"/open\" }}\nupstream = \"app\"\n\
         filters = [{{ type = \"rate_limit\", rate = \"1/h\", key = \"header:X-Client\", mode = \"global\", \
         redis = \"{0}\", on_redis_error = \"allow\" }}]\n\n\
         [[listeners.gw.routes]]\nname = \"closed\"\nupstream = \"app\"\n\
         filters = [{{ type = \"rate_limit\", rate = \"1/h\", key = \"header:X-Client\", mode = \"global\", \
         redis = \"{0}\", on_redis_error = \"deny\", redis_timeout = \"200ms\" }}]\n",
        redis.addr()
    );
    let mut s = site(1, &routes);
    let mut c = connect(s.ports[0]);
    let mut ask = |path: &str, client: &str| {
        let sent = Instant::now();
        let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nX-Client: {client}\r\n\r\n");
        let (status, head) = exchange(&mut c, request.as_bytes());
        // No answer waits on Redis for long, up or down.
        assert!(
            sent.elapsed() < Duration::from_millis(1500),
            "waited {:?}",
            sent.elapsed()
        );
        (status, head)
    };
    // Redis up: one an hour per client.
    assert_eq!(ask("/open", "a").0, 200);
    assert_eq!(ask("/open", "a").0, 429);
    assert_eq!(ask("/closed", "a").0, 200);
    assert_eq!(ask("/closed", "a").0, 429);
    redis.kill();
    // Down: `allow` lets new clients through (what was refused before stays refused: the worker
    // remembers a denial until it may change), `deny` answers 503.
    for i in 0..20 {
        assert_eq!(ask("/open", &format!("down-{i}")).0, 200);
        let (status, head) = ask("/closed", &format!("down-{i}"));
        assert_eq!(status, 503);
        assert_eq!(header(&head, "retry-after"), Some("1"));
    }
    assert_eq!(ask("/open", "a").0, 429);
    s.proxies[0].wait_for("rate_limit: Redis at");
    // Back: a new, empty Redis; the limit holds again once the worker tries it (after its
    // backoff, at most 5 s: until then `deny` still answers 503).
    redis.restart();
    let deadline = Instant::now() + WAIT;
    let mut i = 0;
    loop {
        i += 1;
        let client = format!("up-{i}");
        match ask("/closed", &client).0 {
            503 => {
                assert!(Instant::now() < deadline, "Redis never used again");
                thread::sleep(Duration::from_millis(50));
            }
            200 => {
                assert_eq!(ask("/closed", &client).0, 429);
                break;
            }
            other => panic!("{other}"),
        }
    }
    s.proxies[0].wait_for("answers again");
    // One warning for the outage, not one per request.
    let log = s.proxies[0].log.join("\n");
    assert_eq!(log.matches("rate_limit: Redis at").count(), 2, "{log}");
}

#[test]
fn rate_limit_config_errors_point_at_their_place() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = "[listeners.gw]\nbind = \"127.0.0.1:1\"\nprotocol = \"http\"\n\n\
               [[listeners.gw.routes]]\nupstream = \"app\"\nfilters = [\n\
               { type = \"rate_limit\", rate = \"10/fortnight\" },\n\
               { type = \"rate_limit\", rate = \"10/s\", key = \"cookie:x\" },\n\
               { type = \"rate_limit\", rate = \"10/s\", mode = \"global\" },\n\
               { type = \"rate_limit\", rate = \"10/s\", redis = \"127.0.0.1:6379\" },\n\
               { type = \"rate_limit\", rate = \"10/s\", mode = \"global\", redis = \"redis://:pw@h:99999\" },\n\
               ]\n\n[upstreams.app]\ntargets = [\"127.0.0.1:2\"]\n";
    let path = write_file(dir.path(), "gw.toml", cfg);
    let (code, _, err) = run_rampart(dir.path(), &["check", "-c", &path]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("gw.toml:8:31: `10/fortnight` is not a rate"), "{err}");
    assert!(err.contains("gw.toml:9:45: `key` = `cookie:x`"), "{err}");
    assert!(
        err.contains("gw.toml:10:1: a `rate_limit` with mode = \"global\" needs `redis`"),
        "{err}"
    );
    assert!(err.contains("gw.toml:11:1: `redis` is for mode = \"global\""), "{err}");
    assert!(
        err.contains("gw.toml:12:64: `redis://***@h:99999` is not a Redis address"),
        "{err}"
    );
    assert!(!err.contains("pw"), "{err}");
}

const JWT_SECRET: &[u8] = b"a shared HMAC secret, 32 bytes or more";

/// One Rampart whose only route runs `filters` (TOML tables), beside `jwt.key` (the HS256
/// secret of [`hs256`]).
fn jwt_site(filters: &str) -> Site {
    let backend = HttpBackend::start(Reply::Echo);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("jwt.key"), JWT_SECRET).unwrap();
    let port = free_port();
    let cfg = format!(
        "[listeners.gw]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\n\n\
         [[listeners.gw.routes]]\nupstream = \"app\"\nfilters = [\n{filters}]\n\n\
         [upstreams.app]\ntargets = [\"{}\"]\n",
        backend.target()
    );
    let path = write_file(dir.path(), "gw.toml", &cfg);
    let proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    Site {
        proxies: vec![proxy],
        ports: vec![port],
        backend,
        _dir: dir,
    }
}

/// A token for `sub` that expires in ten minutes, signed with [`JWT_SECRET`].
fn hs256(sub: &str) -> String {
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 600;
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &serde_json::json!({ "sub": sub, "exp": exp }),
        &jsonwebtoken::EncodingKey::from_secret(JWT_SECRET),
    )
    .unwrap()
}

#[test]
fn a_limit_keyed_on_a_jwt_claim_counts_each_subject_apart() {
    let s = jwt_site(
        "{ type = \"jwt\", keys = \"jwt.key\" },\n{ type = \"rate_limit\", rate = \"2/m\", key = \"claim:sub\" },\n",
    );
    let (alice, bob) = (hs256("alice"), hs256("bob"));
    let mut c = connect(s.ports[0]);
    let ask = |c: &mut TcpStream, t: &str| {
        let request = format!("GET / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {t}\r\n\r\n");
        exchange(c, request.as_bytes()).0
    };
    assert_eq!(ask(&mut c, &alice), 200);
    assert_eq!(ask(&mut c, &alice), 200);
    assert_eq!(ask(&mut c, &alice), 429);
    // Same address, another subject: its own bucket.
    assert_eq!(ask(&mut c, &bob), 200);
    // A request the jwt filter refuses never reaches the limit.
    assert_eq!(ask(&mut c, "bad.token.here"), 401);
}

/// `curl --http2-prior-knowledge` with `args`: status and response head.
fn curl_h2(url: &str, args: &[&str]) -> (u16, String) {
    let out = std::process::Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "10",
            "--http2-prior-knowledge",
            "-D",
            "-",
            "-o",
            "/dev/null",
        ])
        .args(args)
        .arg(url)
        .output_within(common::TOOL_WAIT)
        .expect("curl runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let head = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(head.starts_with("HTTP/2 "), "{head}");
    (head[7..10].parse().unwrap(), head)
}

#[test]
fn http2_clients_meet_the_same_filters() {
    let s = jwt_site(
        "{ type = \"request_id\" },\n{ type = \"jwt\", keys = \"jwt.key\" },\n\
         { type = \"rate_limit\", rate = \"2/m\", key = \"claim:sub\" },\n",
    );
    let url = format!("http://127.0.0.1:{}/", s.ports[0]);
    let auth = format!("Authorization: Bearer {}", hs256("h2-user"));
    // No token: 401 with the challenge, and a request id all the same.
    let (status, head) = curl_h2(&url, &[]);
    assert_eq!(status, 401, "{head}");
    assert!(head.contains("www-authenticate: Bearer realm=\"rampart\""), "{head}");
    assert!(head.contains("x-request-id: "), "{head}");
    // Two a minute, then 429 with the fields.
    for _ in 0..2 {
        let (status, head) = curl_h2(&url, &["-H", &auth]);
        assert_eq!(status, 200, "{head}");
        assert!(head.contains("ratelimit: \"default\";r="), "{head}");
        assert!(s.backend.next_head().to_ascii_lowercase().contains("x-request-id: "));
    }
    let (status, head) = curl_h2(&url, &["-H", &auth]);
    assert_eq!(status, 429, "{head}");
    assert!(head.contains("retry-after: 30"), "{head}");
}
