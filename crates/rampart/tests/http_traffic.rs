//! Traffic control on real backends: a route's `split` shares its requests among upstreams by
//! weight (a canary), and a request carrying the canary's header or cookie goes to it whatever
//! the weights.

mod common;

use common::http::{send, HttpBackend, Reply};
use common::{free_port, write_file, Rampart};

fn seen(backend: &HttpBackend) -> usize {
    backend.heads.try_iter().count()
}

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
    let (to_stable, to_canary) = (seen(&stable), seen(&canary));
    assert_eq!(to_stable + to_canary, 1000);
    assert!((140..=260).contains(&to_canary), "about 20% to the canary: {to_canary}");

    // The tester: by header, then by cookie, every request to the canary.
    let by_header = b"GET / HTTP/1.1\r\nHost: app.test\r\nx-canary: yes\r\n\r\n";
    let by_cookie = b"GET / HTTP/1.1\r\nHost: app.test\r\ncookie: session=1; canary=on\r\n\r\n";
    for request in [&by_header[..], &by_cookie[..]] {
        for _ in 0..50 {
            assert_eq!(send(&mut conn, request).0, 200);
        }
        assert_eq!((seen(&stable), seen(&canary)), (0, 50));
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
