//! Traffic control on real backends: a route's `split` shares its requests among upstreams by
//! weight (a canary), and a request carrying the canary's header or cookie goes to it whatever
//! the weights; an upstream's `sticky_cookie` keeps a client on the target that answered it
//! first, until that target is out; a target a reload adds ramps up under `slow_start`; a
//! route's `mirror` copies its bodiless requests to a shadow upstream, a dead one disturbing
//! nothing.

use crate::common;

use common::http::{send, HttpBackend, Reply};
use common::{free_port, write_file, Rampart};

#[test]
fn a_split_route_sends_its_share_to_the_canary_and_the_tester_always_there() {
    let (stable, canary) = (HttpBackend::start(Reply::Echo), HttpBackend::start(Reply::Echo));
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let text = format!(
        "[listeners.web]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\n\n\
         [[listeners.web.routes]]\n\
         split = [{{ upstream = \"stable\", weight = 80 }}, \
                  {{ upstream = \"canary\", weight = 20, header = \"X-Canary\", cookie = \"canary\" }}]\n\n\
         [upstreams.stable]\ntargets = [\"{}\"]\n\n[upstreams.canary]\ntargets = [\"{}\"]\n",
        stable.target(),
        canary.target()
    );
    let path = write_file(dir.path(), "split.toml", &text);
    let _proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);

    let mut conn = common::connect(port);
    let plain = b"GET / HTTP/1.1\r\nHost: app.test\r\n\r\n";
    for _ in 0..1000 {
        assert_eq!(send(&mut conn, plain).0, 200);
    }
    let (to_stable, to_canary) = (stable.seen(), canary.seen());
    assert_eq!(to_stable + to_canary, 1000);
    assert!((140..=260).contains(&to_canary), "about 20% to the canary: {to_canary}");

    // The tester: by header, then by cookie, every request to the canary.
    let by_header = b"GET / HTTP/1.1\r\nHost: app.test\r\nx-canary: yes\r\n\r\n";
    let by_cookie = b"GET / HTTP/1.1\r\nHost: app.test\r\ncookie: session=1; canary=on\r\n\r\n";
    for request in [&by_header[..], &by_cookie[..]] {
        for _ in 0..50 {
            assert_eq!(send(&mut conn, request).0, 200);
        }
        assert_eq!((stable.seen(), canary.seen()), (0, 50));
    }
}

#[test]
fn a_bad_split_is_refused_where_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let text = "[listeners.web]\nbind = \"127.0.0.1:1\"\nprotocol = \"http\"\n\n\
                [[listeners.web.routes]]\n\
                split = [{ upstream = \"stable\", weight = 0 }, { upstream = \"canry\", weight = 5 }]\n\n\
                [upstreams.stable]\ntargets = [\"127.0.0.1:2\"]\n\n[upstreams.canary]\ntargets = [\"127.0.0.1:3\"]\n";
    let path = write_file(dir.path(), "bad.toml", text);
    let (code, _, err) = common::run_rampart(dir.path(), &["check", "-c", &path]);
    assert_eq!(code, 1);
    assert!(
        err.contains("bad.toml:6:60: route `web#1`: split to unknown upstream `canry`"),
        "{err}"
    );
}

/// The `Set-Cookie` value of a response head, if it has one.
fn set_cookie(head: &str) -> Option<String> {
    common::http::header(head, "set-cookie").map(str::to_string)
}

#[test]
fn a_sticky_cookie_keeps_a_client_on_its_target_until_that_target_is_out() {
    let backends = [
        HttpBackend::start(Reply::Echo),
        HttpBackend::start(Reply::Echo),
        HttpBackend::start(Reply::Echo),
    ];
    let dir = tempfile::tempdir().unwrap();
    let (port, admin) = (free_port(), free_port());
    let targets: Vec<String> = backends.iter().map(|b| format!("\"{}\"", b.target())).collect();
    let text = format!(
        "[admin]\nlisten = \"127.0.0.1:{admin}\"\n\n\
         [listeners.web]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\nupstream = \"app\"\n\n\
         [upstreams.app]\ntargets = [{}]\nsticky_cookie = {{ name = \"srv\", max_age = \"1h\" }}\n",
        targets.join(", ")
    );
    let path = write_file(dir.path(), "sticky.toml", &text);
    let _proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    let mut conn = common::connect(port);

    // The first answer names its target; the address is not in the cookie.
    let (status, head, _) = send(&mut conn, b"GET / HTTP/1.1\r\nHost: app.test\r\n\r\n");
    assert_eq!(status, 200);
    let cookie = set_cookie(&head).expect("a sticky cookie");
    assert!(
        cookie.starts_with("srv=") && cookie.contains("; Max-Age=3600"),
        "{cookie}"
    );
    let value = cookie.split(';').next().unwrap().to_string();
    let first = backends
        .iter()
        .position(|b| b.seen() == 1)
        .expect("one backend answered");

    // With it, every request goes there, and the cookie is not set again.
    let with_cookie = format!("GET / HTTP/1.1\r\nHost: app.test\r\nCookie: a=b; {value}\r\n\r\n");
    for _ in 0..30 {
        let (status, head, _) = send(&mut conn, with_cookie.as_bytes());
        assert_eq!((status, set_cookie(&head)), (200, None));
    }
    let counts: Vec<usize> = backends.iter().map(HttpBackend::seen).collect();
    assert_eq!((counts[first], counts.iter().sum::<usize>()), (30, 30), "{counts:?}");

    // Its target drained: the request goes elsewhere and the answer names the new target.
    let drain = format!("/api/upstreams/app/targets/{}/drain", backends[first].target());
    assert_eq!(common::admin(admin, "POST", &drain, None).0, 200);
    let (status, head, _) = send(&mut conn, with_cookie.as_bytes());
    assert_eq!(status, 200);
    let moved = set_cookie(&head).expect("a new sticky cookie");
    assert_ne!(moved.split(';').next().unwrap(), value);
    assert_eq!(backends[first].seen(), 0);
}

#[test]
fn a_target_added_by_a_reload_ramps_up_under_slow_start() {
    let (old, new) = (HttpBackend::start(Reply::Echo), HttpBackend::start(Reply::Echo));
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let text = |targets: &str| {
        format!(
            "[listeners.web]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\nupstream = \"app\"\n\n\
             [upstreams.app]\ntargets = [{targets}]\nslow_start = \"3s\"\n"
        )
    };
    let path = write_file(dir.path(), "slow.toml", &text(&format!("\"{}\"", old.target())));
    let mut proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    let both = format!("\"{}\", \"{}\"", old.target(), new.target());
    write_file(dir.path(), "slow.toml", &text(&both));
    assert!(proxy.reload().contains("reloaded"));

    // Just added: a small share (round robin would give it half).
    let mut conn = common::connect(port);
    let plain = b"GET / HTTP/1.1\r\nHost: app.test\r\n\r\n";
    for _ in 0..200 {
        assert_eq!(send(&mut conn, plain).0, 200);
    }
    let (to_old, to_new) = (old.seen(), new.seen());
    assert_eq!(to_old + to_new, 200);
    assert!(to_new < 60, "ramping up: {to_new} of 200");

    // Three seconds on, its full half.
    common::tls::eventually("the new target takes its full share", || {
        for _ in 0..100 {
            send(&mut conn, plain);
        }
        let (to_old, to_new) = (old.seen(), new.seen());
        to_new >= 45 && to_old <= 55
    });
}

#[test]
fn a_mirror_gets_a_copy_of_each_request_and_a_dead_one_disturbs_nothing() {
    let (real, shadow) = (HttpBackend::start(Reply::Echo), HttpBackend::start(Reply::Echo));
    let dead = common::dead_target();
    let dir = tempfile::tempdir().unwrap();
    let (port, admin) = (free_port(), free_port());
    let text = format!(
        "[admin]\nlisten = \"127.0.0.1:{admin}\"\n\n\
         [listeners.web]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\n\n\
         [[listeners.web.routes]]\nmatch = {{ path_prefix = \"/dead\" }}\nupstream = \"real\"\n\
         mirror = {{ upstream = \"dead\" }}\n\n\
         [[listeners.web.routes]]\nupstream = \"real\"\nmirror = {{ upstream = \"shadow\", percent = 100 }}\n\n\
         [upstreams.real]\ntargets = [\"{}\"]\n\n[upstreams.shadow]\ntargets = [\"{}\"]\n\n\
         [upstreams.dead]\ntargets = [\"{dead}\"]\n",
        real.target(),
        shadow.target()
    );
    let path = write_file(dir.path(), "mirror.toml", &text);
    let _proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    let mut conn = common::connect(port);
    for i in 0..20 {
        let request = format!("GET /item/{i} HTTP/1.1\r\nHost: app.test\r\n\r\n");
        assert_eq!(send(&mut conn, request.as_bytes()).0, 200);
    }
    // Requests with a body are copied with it, of a known length or chunked, once the real
    // target has it (the shadow reads each body whole before it answers, and only answered
    // copies are counted below); one past `retry_max_body_size` (64 KiB) is not kept, and its
    // copy fails.
    let post = b"POST /item HTTP/1.1\r\nHost: app.test\r\ncontent-length: 2\r\n\r\nhi";
    assert_eq!(send(&mut conn, post).0, 200);
    let chunked = b"PUT /item HTTP/1.1\r\nHost: app.test\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n";
    assert_eq!(send(&mut conn, chunked).0, 200);
    let mut big = format!(
        "POST /big HTTP/1.1\r\nHost: app.test\r\ncontent-length: {}\r\n\r\n",
        100_000
    )
    .into_bytes();
    big.extend_from_slice(&[b'b'; 100_000]);
    assert_eq!(send(&mut conn, &big).0, 200);
    assert_eq!(real.seen(), 23);
    let mut copies = Vec::new();
    common::tls::eventually("the shadow has its 22 copies", || {
        copies.extend(shadow.heads.try_iter());
        copies.len() >= 22
    });
    // Each copy goes on its own connection: they may arrive in any order.
    let count = |prefix: &str| copies.iter().filter(|h| h.starts_with(prefix)).count();
    assert_eq!(
        (count("GET /item/"), count("POST /item "), count("PUT /item ")),
        (20, 1, 1),
        "{copies:?}"
    );
    common::tls::eventually("the shadow answered 22 copies, and one failed", || {
        let samples = common::scrape::scrape(admin);
        let answered = [("upstream", "shadow"), ("result", "answered")];
        let failed = [("upstream", "shadow"), ("result", "failed")];
        common::scrape::value(&samples, "rampart_upstream_mirrored_total", &answered) == 22.0
            && common::scrape::value(&samples, "rampart_upstream_mirrored_total", &failed) == 1.0
    });

    // A shadow nobody answers at: every request is answered all the same, the copies counted
    // as failed.
    for _ in 0..10 {
        assert_eq!(send(&mut conn, b"GET /dead HTTP/1.1\r\nHost: app.test\r\n\r\n").0, 200);
    }
    common::tls::eventually("the failed copies are counted", || {
        let samples = common::scrape::scrape(admin);
        let failed = [("upstream", "dead"), ("result", "failed")];
        common::scrape::value(&samples, "rampart_upstream_mirrored_total", &failed) == 10.0
    });
}
