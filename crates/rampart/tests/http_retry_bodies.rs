//! Request bodies kept for a retry (`retry_max_body_size`), against real backends: one of three
//! answers 503 to everything, and requests with bodies within the limit (of a known length or
//! chunked) are sent whole to the next target, so clients see no 503; a body past the limit is
//! not kept and its 503 reaches the client; a POST is retried only when `retry_on` names
//! `non-idempotent`. The failed target is not passed over (`retry_pass_over = "0s"`), so that
//! round robin keeps sending it requests to retry, and the budget lets every request retry (a
//! third of them need one, past the default 20%).

use crate::common;

use std::collections::BTreeMap;

use common::http::{one_upstream_config, send, HttpBackend, Reply, UNAVAILABLE};
use common::Bounded;
use common::{free_port, write_file, Rampart};

/// `n` requests on one keep-alive connection: how many got each status, and the body lengths
/// the good targets said they read (their echo's last line).
fn outcomes(port: u16, n: usize, request: &[u8]) -> (BTreeMap<u16, usize>, BTreeMap<String, usize>) {
    let mut conn = common::connect(port);
    let (mut statuses, mut lengths) = (BTreeMap::new(), BTreeMap::new());
    for _ in 0..n {
        let (status, _, body) = send(&mut conn, request);
        *statuses.entry(status).or_default() += 1;
        if status == 200 {
            let text = String::from_utf8_lossy(&body).into_owned();
            *lengths
                .entry(text.lines().last().unwrap_or_default().to_string())
                .or_default() += 1;
        }
    }
    (statuses, lengths)
}

fn with_body(method: &str, body: &[u8]) -> Vec<u8> {
    let mut raw = format!(
        "{method} /upload HTTP/1.1\r\nHost: app.test\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    raw.extend_from_slice(body);
    raw
}

#[test]
fn kept_bodies_go_whole_to_the_next_target() {
    let good = [HttpBackend::start(Reply::Echo), HttpBackend::start(Reply::Echo)];
    let bad = HttpBackend::start(Reply::Raw(UNAVAILABLE));
    let dir = tempfile::tempdir().unwrap();
    let (port, admin) = (free_port(), free_port());
    let backends = [&good[0], &bad, &good[1]];
    let extra = "retries = 2\nretry_on = [\"503\"]\nretry_max_body_size = \"1KiB\"\nretry_pass_over = \"0s\"\nretry_budget = { percent = 100 }";
    let path = write_file(
        dir.path(),
        "bodies.toml",
        &one_upstream_config(port, admin, &backends, extra),
    );
    let proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);

    // PUTs with a 600-byte body: every one answered by a good target, which read all 600 bytes.
    let body = vec![b'x'; 600];
    let (statuses, lengths) = outcomes(port, 30, &with_body("PUT", &body));
    assert_eq!(statuses.get(&200), Some(&30), "{statuses:?}");
    assert_eq!(lengths.get("body-length: 600"), Some(&30), "{lengths:?}");
    let first_bad = bad.seen();
    assert!(first_bad >= 8, "round robin reached the bad target: {first_bad}");

    // A chunked body (length unknown until its end) is kept too.
    let chunked = b"PUT /upload HTTP/1.1\r\nHost: app.test\r\ntransfer-encoding: chunked\r\n\r\n\
                    5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";
    let (statuses, lengths) = outcomes(port, 30, chunked);
    assert_eq!(statuses.get(&200), Some(&30), "{statuses:?}");
    assert_eq!(lengths.get("body-length: 11"), Some(&30), "{lengths:?}");

    // Past the limit the body is not kept: the 503 reaches the client.
    let (statuses, _) = outcomes(port, 30, &with_body("PUT", &vec![b'y'; 2000]));
    assert!(statuses.get(&503).is_some_and(|n| *n >= 5), "{statuses:?}");

    // A POST is not retried by default.
    let (statuses, _) = outcomes(port, 30, &with_body("POST", &body));
    assert!(statuses.get(&503).is_some_and(|n| *n >= 5), "{statuses:?}");
    drop(proxy);

    // `non-idempotent` lets it go again, body and all.
    let extra = "retries = 2\nretry_on = [\"503\", \"non-idempotent\"]\nretry_pass_over = \"0s\"\nretry_budget = { percent = 100 }";
    let path = write_file(
        dir.path(),
        "post.toml",
        &one_upstream_config(port, admin, &backends, extra),
    );
    let _proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    let (statuses, lengths) = outcomes(port, 30, &with_body("POST", &body));
    assert_eq!(statuses.get(&200), Some(&30), "{statuses:?}");
    assert_eq!(lengths.get("body-length: 600"), Some(&30), "{lengths:?}");
}

#[test]
fn a_body_sent_to_a_target_that_closes_goes_whole_to_the_next() {
    // One of three targets reads each request and closes without answering: `reset`, the
    // default `retry_on`, sends the PUT and its body to another target.
    let good = [HttpBackend::start(Reply::Echo), HttpBackend::start(Reply::Echo)];
    let closing = HttpBackend::start(Reply::Close);
    let dir = tempfile::tempdir().unwrap();
    let (port, admin) = (free_port(), free_port());
    let backends = [&good[0], &closing, &good[1]];
    let path = write_file(
        dir.path(),
        "reset.toml",
        &one_upstream_config(
            port,
            admin,
            &backends,
            "retries = 2\nretry_pass_over = \"0s\"\nretry_budget = { percent = 100 }",
        ),
    );
    let _proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    let (statuses, lengths) = outcomes(port, 30, &with_body("PUT", &vec![b'z'; 5000]));
    assert_eq!(statuses.get(&200), Some(&30), "{statuses:?}");
    assert_eq!(lengths.get("body-length: 5000"), Some(&30), "{lengths:?}");
    assert!(closing.seen() >= 8, "round robin reached the closing target");
}

#[test]
fn an_http2_clients_body_is_kept_and_sent_whole_to_the_next_target_too() {
    // The client speaks HTTP/2 (curl, prior knowledge): its body arrives as DATA frames and is
    // kept all the same. One of three targets answers 503.
    let good = [HttpBackend::start(Reply::Echo), HttpBackend::start(Reply::Echo)];
    let bad = HttpBackend::start(Reply::Raw(UNAVAILABLE));
    let dir = tempfile::tempdir().unwrap();
    let (port, admin) = (free_port(), free_port());
    let backends = [&good[0], &bad, &good[1]];
    let extra = "retries = 2\nretry_on = [\"503\"]\nretry_pass_over = \"0s\"\nretry_budget = { percent = 100 }";
    let path = write_file(
        dir.path(),
        "h2.toml",
        &one_upstream_config(port, admin, &backends, extra),
    );
    let _proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    let body = write_file(dir.path(), "body.bin", &"b".repeat(3000));
    for _ in 0..9 {
        let out = std::process::Command::new("curl")
            .args(["-sS", "--max-time", "10", "--http2-prior-knowledge", "-X", "PUT"])
            .args([
                "--data-binary",
                &format!("@{body}"),
                "-w",
                "\n%{http_code} %{http_version}",
            ])
            .arg(format!("http://127.0.0.1:{port}/upload"))
            .output_within(common::TOOL_WAIT)
            .expect("curl runs");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(text.ends_with("\n200 2"), "{text}");
        assert!(text.contains("body-length: 3000"), "{text}");
    }
    assert!(bad.seen() >= 2, "round robin reached the bad target");
}
