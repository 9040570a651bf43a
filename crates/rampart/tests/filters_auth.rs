//! The auth filters end to end through the real binary: `basic_auth` with bcrypt and argon2
//! users from an htpasswd file made here (its cache, shared checks and bound), `api_key` by
//! header, query and bearer token, `forward_auth` against a real auth service; what the
//! client, the backend, the auth service and the access log see, and that no password or key
//! reaches a log. Config errors at their place.

#[path = "filters_auth/auth_service.rs"]
mod auth_service;
use crate::common;

use std::io::Write;
use std::time::Instant;

use argon2::password_hash::{PasswordHasher, SaltString};
use auth_service::AuthService;
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use common::h2_tls::{H2Answer, H2TlsServer};
use common::http::{header, read_response, send};
use common::*;

/// A one-worker gateway with `routes` (upstream `app`: an echoing backend), its access log in
/// JSON, and `files` written beside its config first.
fn gateway(files: &[(&str, String)], routes: &str) -> FilterGateway {
    let files: Vec<(&str, &[u8])> = files.iter().map(|(n, c)| (*n, c.as_bytes())).collect();
    filter_gateway(&files, "", routes)
}

fn request(port: u16, raw: &str) -> (u16, String, String) {
    let mut client = connect(port);
    let (status, head, body) = send(&mut client, raw.as_bytes());
    (status, head, String::from_utf8_lossy(&body).into_owned())
}

fn get(port: u16, path: &str, fields: &str) -> (u16, String, String) {
    request(port, &format!("GET {path} HTTP/1.1\r\nHost: shop.test\r\n{fields}\r\n"))
}

fn basic(user_password: &str) -> String {
    format!("Authorization: Basic {}\r\n", STANDARD.encode(user_password))
}

/// Stops the proxy and returns everything it logged and the access log, for secrets to be
/// looked for.
fn all_logs(gw: &mut FilterGateway) -> String {
    gw.proxy.stop();
    format!(
        "{}\n{}",
        gw.proxy.log.join("\n"),
        std::fs::read_to_string(&gw.log).unwrap_or_default()
    )
}

/// An argon2id hash with small parameters (64 KiB, 2 passes).
fn argon2_hash(password: &str) -> String {
    let params = argon2::Params::new(64, 2, 1, None).unwrap();
    let salt = SaltString::from_b64("cmFtcGFydHNhbHRyYW1wYXJ0").unwrap();
    argon2::Argon2::new(argon2::Algorithm::Argon2id, argon2::Version::V0x13, params)
        .hash_password(password.as_bytes(), &salt)
        .unwrap()
        .to_string()
}

#[test]
fn basic_auth_lets_bcrypt_and_argon2_users_in_and_refuses_the_rest_with_401() {
    let htpasswd = format!(
        "# made by the test\nalice:{}\nbob:{}\n",
        bcrypt::hash("Wonder-1and", 5).unwrap(),
        argon2_hash("B0b-the-builder")
    );
    let mut gw = gateway(
        &[("users.htpasswd", htpasswd)],
        "[[listeners.gw.routes]]\nupstream = \"app\"\n\
         filters = [{ type = \"basic_auth\", users_file = \"users.htpasswd\", realm = \"Staff only\", forward_user_header = \"X-User\" }]\n",
    );
    // Right passwords, bcrypt and argon2; a forged X-User is replaced; Authorization goes on.
    let (status, _, body) = get(
        gw.port,
        "/a",
        &format!("{}X-User: mallory\r\n", basic("alice:Wonder-1and")),
    );
    assert_eq!(status, 200, "{body}");
    let upstream = gw.backend.next_head().to_ascii_lowercase();
    assert!(
        upstream.contains("x-user: alice\r\n") && !upstream.contains("mallory"),
        "{upstream}"
    );
    assert!(upstream.contains("authorization: basic "), "{upstream}");
    assert_eq!(get(gw.port, "/b", &basic("bob:B0b-the-builder")).0, 200);
    assert!(gw.backend.next_head().to_ascii_lowercase().contains("x-user: bob\r\n"));

    // Everything else: 401 with the challenge and a short reason, and nothing upstream.
    let challenge = r#"Basic realm="Staff only", charset="UTF-8""#;
    let refused = [
        (
            basic("alice:wrong-Password"),
            "basic_auth_wrong_password",
            "invalid user name or password",
        ),
        (
            basic("bob:Wonder-1and"),
            "basic_auth_wrong_password",
            "invalid user name or password",
        ),
        (
            basic("carol:Wonder-1and"),
            "basic_auth_unknown_user",
            "invalid user name or password",
        ),
        (
            "Authorization: Basic %%%not-base64\r\n".to_string(),
            "basic_auth_malformed",
            "malformed Authorization header",
        ),
        (
            basic("no-colon-here"),
            "basic_auth_malformed",
            "malformed Authorization header",
        ),
        (String::new(), "basic_auth_missing", "credentials required"),
    ];
    for (fields, _, detail) in &refused {
        let (status, head, body) = get(gw.port, "/c", fields);
        assert_eq!(status, 401, "{fields}");
        assert_eq!(header(&head, "www-authenticate"), Some(challenge));
        assert_eq!(body, format!("401 Unauthorized: {detail}\n"));
    }
    assert!(
        gw.backend.heads.try_recv().is_err(),
        "a refused request reached the backend"
    );

    let lines = json_log_lines(&gw.log, 2 + refused.len());
    assert_eq!(
        (lines[0]["user"].as_str(), lines[0]["error"].as_str()),
        (Some("alice"), None)
    );
    assert_eq!(lines[1]["user"], "bob");
    for (line, (_, reason, _)) in lines[2..].iter().zip(&refused) {
        assert_eq!(
            (line["status"].as_u64(), line["error"].as_str()),
            (Some(401), Some(*reason))
        );
        assert!(line.get("user").is_none(), "{line}");
    }
    let logs = all_logs(&mut gw);
    for secret in [
        "Wonder-1and",
        "B0b-the-builder",
        "wrong-Password",
        &STANDARD.encode("alice:Wonder-1and"),
    ] {
        assert!(!logs.contains(secret), "{secret} in the logs");
    }
}

#[test]
fn basic_auth_checks_are_cached_shared_and_bounded() {
    // `slow` has a costly bcrypt hash: its check stays in flight long enough to be seen.
    let htpasswd = format!(
        "alice:{}\nslow:{}\n",
        bcrypt::hash("alice-pw", 4).unwrap(),
        bcrypt::hash("slow-pw", 13).unwrap()
    );
    let gw = gateway(
        &[("users.htpasswd", htpasswd)],
        "[[listeners.gw.routes]]\nupstream = \"app\"\n\
         filters = [{ type = \"basic_auth\", users_file = \"users.htpasswd\", max_pending_checks = 1 }]\n",
    );
    // alice's first login is checked; the next hundred come from the worker's cache.
    for _ in 0..100 {
        assert_eq!(get(gw.port, "/", &basic("alice:alice-pw")).0, 200);
    }
    // Six clients log in as `slow` at once: with one check allowed in flight, they all get in
    // only because they share one check.
    let port = gw.port;
    let logins: Vec<_> = (0..6)
        .map(|_| {
            let mut c = connect(port);
            c.write_all(format!("GET /s HTTP/1.1\r\nHost: a\r\n{}\r\n", basic("slow:slow-pw")).as_bytes())
                .unwrap();
            c
        })
        .collect();
    // While that check runs, a login that needs a check of its own is refused with 503 ...
    let deadline = Instant::now() + WAIT;
    let mut guess = 0;
    let busy = loop {
        guess += 1;
        let (status, head, _) = get(gw.port, "/", &basic(&format!("alice:guess-{guess}")));
        if status == 503 {
            break head;
        }
        assert_eq!(status, 401);
        assert!(Instant::now() < deadline, "no login was ever refused as busy");
    };
    assert_eq!(header(&busy, "retry-after"), Some("1"));
    // ... while a cached one still gets in.
    assert_eq!(get(gw.port, "/", &basic("alice:alice-pw")).0, 200);
    for mut c in logins {
        assert_eq!(read_response(&mut c).0, 200);
    }
    let lines = json_log_lines(&gw.log, 100 + guess + 1 + 6);
    assert!(lines
        .iter()
        .any(|l| l["error"] == "basic_auth_busy" && l["status"] == 503));
    assert_eq!(lines.iter().filter(|l| l["user"] == "slow").count(), 6);
}

#[test]
fn api_keys_come_by_header_query_or_bearer_token_and_stay_out_of_upstream_and_logs() {
    const KEY: &str = "8f14e45fceea167a5a36dedd4bea2543";
    const OTHER: &str = "c9f0f895fb98ab9159f51fd0297e236d";
    let keys = format!("# name key\nci {KEY}\n{OTHER}\n");
    let mut gw = gateway(
        &[("keys.txt", keys)],
        "[[listeners.gw.routes]]\nname = \"hidden\"\nmatch = { path_prefix = \"/h\" }\nupstream = \"app\"\n\
         filters = [{ type = \"api_key\", keys_file = \"keys.txt\", forward_name_header = \"X-Consumer\" }]\n\n\
         [[listeners.gw.routes]]\nname = \"query\"\nmatch = { path_prefix = \"/q\" }\nupstream = \"app\"\n\
         filters = [{ type = \"api_key\", keys_file = \"keys.txt\", query = \"api_key\" }]\n\n\
         [[listeners.gw.routes]]\nname = \"kept\"\nmatch = { path_prefix = \"/k\" }\nupstream = \"app\"\n\
         filters = [{ type = \"api_key\", keys_file = \"keys.txt\", header = \"X-Key\", bearer = true, hide_credentials = false }]\n",
    );
    // By header: the key is removed upstream, its name forwarded (a forged one replaced).
    let (status, _, _) = get(gw.port, "/h/1", &format!("X-Api-Key: {KEY}\r\nX-Consumer: forged\r\n"));
    assert_eq!(status, 200);
    let up = gw.backend.next_head().to_ascii_lowercase();
    assert!(!up.contains(KEY) && !up.contains("x-api-key"), "{up}");
    assert!(up.contains("x-consumer: ci\r\n") && !up.contains("forged"), "{up}");
    // A key listed without a name is known by its digest's label.
    assert_eq!(get(gw.port, "/h/2", &format!("x-api-key: {OTHER}\r\n")).0, 200);
    gw.backend.next_head();
    // By query: the parameter is removed upstream, the rest of the query kept.
    assert_eq!(
        get(gw.port, &format!("/q/items?page=2&api_key={KEY}&sort=asc"), "").0,
        200
    );
    assert!(gw
        .backend
        .next_head()
        .starts_with("GET /q/items?page=2&sort=asc HTTP/1.1"));
    // By bearer token, or by its own header, on a route that keeps the key.
    assert_eq!(get(gw.port, "/k", &format!("Authorization: Bearer {KEY}\r\n")).0, 200);
    assert!(gw.backend.next_head().contains(&format!("Authorization: Bearer {KEY}")));
    assert_eq!(get(gw.port, "/k", &format!("X-Key: {KEY}\r\n")).0, 200);
    assert!(gw.backend.next_head().contains(&format!("X-Key: {KEY}")));

    // Refusals: 401 with a short reason, nothing upstream.
    let mut reasons = Vec::new();
    for (path, fields, reason) in [
        ("/h/3", "X-Api-Key: 0000000000000000\r\n".to_string(), "api_key_unknown"),
        ("/h/4", String::new(), "api_key_missing"),
        (
            "/h/5",
            format!("X-Api-Key: {KEY}\r\nX-Api-Key: {KEY}\r\n"),
            "api_key_malformed",
        ),
        ("/q/6?api_key=wrong-key-0000", String::new(), "api_key_unknown"),
        ("/q/7", format!("X-Api-Key: {KEY}\r\n"), "api_key_missing"),
    ] {
        let (status, head, body) = get(gw.port, path, &fields);
        assert_eq!(status, 401, "{path}");
        assert!(header(&head, "www-authenticate").is_some(), "{head}");
        assert!(body.starts_with("401 Unauthorized: ") && !body.contains(KEY), "{body}");
        reasons.push(reason);
    }
    assert!(
        gw.backend.heads.try_recv().is_err(),
        "a refused request reached the backend"
    );

    let lines = json_log_lines(&gw.log, 10);
    let users: Vec<&str> = lines[..5].iter().map(|l| l["user"].as_str().unwrap()).collect();
    let label = format!("sha256:{}", &sha256_hex(OTHER)[..8]);
    assert_eq!(users, ["ci", label.as_str(), "ci", "ci", "ci"]);
    assert_eq!(lines[2]["path"], "/q/items?page=2&api_key=REDACTED&sort=asc");
    let logged: Vec<&str> = lines[5..].iter().map(|l| l["error"].as_str().unwrap()).collect();
    assert_eq!(logged, reasons);
    assert_eq!(lines[8]["path"], "/q/6?api_key=REDACTED");
    let logs = all_logs(&mut gw);
    for secret in [KEY, OTHER, "wrong-key-0000"] {
        assert!(!logs.contains(secret), "{secret} in the logs");
    }
}

fn sha256_hex(s: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(s.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[test]
fn forward_auth_asks_the_service_and_passes_its_yes_or_its_answer() {
    let auth = AuthService::start();
    let dead = dead_target();
    let gw = gateway(
        &[],
        &format!(
            "[[listeners.gw.routes]]\nname = \"down\"\nmatch = {{ path_prefix = \"/down\" }}\nupstream = \"app\"\n\
             filters = [{{ type = \"forward_auth\", url = \"http://{dead}/verify\" }}]\n\n\
             [[listeners.gw.routes]]\nname = \"app\"\nupstream = \"app\"\n\
             filters = [{{ type = \"forward_auth\", url = \"http://{}/verify?app=shop\", timeout = \"500ms\", \
             response_headers = [\"X-Auth-User\", \"X-Auth-Roles\"], user_header = \"X-Auth-User\" }}]\n",
            auth.addr
        ),
    );
    // Allowed: the service sees the client's fields and Rampart's X-Forwarded-*, the backend
    // the service's fields in place of forged ones.
    let (status, _, _) = request(
        gw.port,
        "POST /orders?id=7 HTTP/1.1\r\nHost: shop.test\r\nCookie: session=s1\r\nX-Auth-User: mallory\r\n\
         X-Forwarded-Uri: /forged\r\nContent-Length: 2\r\n\r\nhi",
    );
    assert_eq!(status, 200);
    let asked = auth.next_head();
    assert!(asked.starts_with("GET /verify?app=shop HTTP/1.1\r\n"), "{asked}");
    for field in [
        format!("host: {}\r\n", auth.addr),
        "Cookie: session=s1\r\n".to_string(),
        "x-forwarded-method: POST\r\n".to_string(),
        "x-forwarded-proto: http\r\n".to_string(),
        "x-forwarded-host: shop.test\r\n".to_string(),
        "x-forwarded-uri: /orders?id=7\r\n".to_string(),
        "x-forwarded-for: 127.0.0.1\r\n".to_string(),
    ] {
        assert!(asked.contains(&field), "{field:?} not in {asked}");
    }
    assert!(
        !asked.contains("/forged") && !asked.contains("Content-Length"),
        "{asked}"
    );
    let upstream = gw.backend.next_head().to_ascii_lowercase();
    assert!(upstream.starts_with("post /orders?id=7 "), "{upstream}");
    assert!(upstream.contains("x-auth-user: alice\r\n") && upstream.contains("x-auth-roles: admin\r\n"));
    assert!(!upstream.contains("mallory"), "{upstream}");

    // A redirect to a login page and a 401 go back to the client as the service gave them.
    let (status, head, body) = get(gw.port, "/login/next", "");
    assert_eq!((status, body.as_str()), (302, "go log in"));
    assert_eq!(header(&head, "location"), Some("https://login.example/?rd=%2Flogin"));
    assert_eq!(
        head.matches("Set-Cookie:").count() + head.matches("set-cookie:").count(),
        2,
        "{head}"
    );
    let (status, head, body) = get(gw.port, "/denied", "");
    assert_eq!((status, body.as_str()), (401, "{\"error\":\"nope\"}"));
    assert_eq!(header(&head, "www-authenticate"), Some("Bearer realm=\"shop\""));
    assert_eq!(header(&head, "content-type"), Some("application/json"));
    assert_eq!(
        auth.connections.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "one keep-alive connection"
    );

    // No answer in time: 504; nothing listening: 503. Neither reaches the backend.
    assert_eq!(get(gw.port, "/slow", "").0, 504);
    assert_eq!(get(gw.port, "/down", "").0, 503);
    // The service answers again after the timeout (on a new connection).
    assert_eq!(get(gw.port, "/again", "").0, 200);
    gw.backend.next_head();
    assert!(
        gw.backend.heads.try_recv().is_err(),
        "a refused request reached the backend"
    );

    let lines = json_log_lines(&gw.log, 6);
    let seen: Vec<(u64, Option<&str>, Option<&str>)> = lines
        .iter()
        .map(|l| (l["status"].as_u64().unwrap(), l["error"].as_str(), l["user"].as_str()))
        .collect();
    assert_eq!(
        seen,
        [
            (200, None, Some("alice")),
            (302, Some("forward_auth_denied"), None),
            (401, Some("forward_auth_denied"), None),
            (504, Some("forward_auth_timeout"), None),
            (503, Some("forward_auth_unavailable"), None),
            (200, None, Some("alice")),
        ]
    );
    // The outage is logged once when it starts and once when it ends.
    let mut proxy = gw.proxy;
    proxy.wait_for("forward_auth: no answer within 500ms; requests fail closed");
    proxy.wait_for("forward_auth: the service answers again");
}

/// An auth service that speaks only HTTP/2 over TLS: the checks reach it as HTTP/2 (its
/// internal upstream offers `h2` by ALPN), both on one pooled connection. (Before the internal
/// client, the check was HTTP/1.1 only and the handshake failed: 502.)
#[test]
fn forward_auth_reaches_an_http2_only_tls_service_on_one_connection() {
    let ca = common::tls::Ca::new("auth service CA");
    // An auth service that speaks only HTTP/2 over TLS; every check is answered 200 with
    // `X-Auth-User: alice`.
    let answer = H2Answer {
        header: ("x-auth-user", "alice"),
        body: bytes::Bytes::from_static(b"ok"),
    };
    let auth = H2TlsServer::start(&ca, "x-forwarded-uri", answer);
    let gw = gateway(
        &[("auth-ca.pem", ca.pem.clone())],
        &format!(
            "[[listeners.gw.routes]]\nupstream = \"app\"\n\
             filters = [{{ type = \"forward_auth\", url = \"https://{}/verify\", ca = \"auth-ca.pem\", \
             response_headers = [\"X-Auth-User\"], user_header = \"X-Auth-User\" }}]\n",
            auth.addr
        ),
    );
    for path in ["/one", "/two"] {
        let (status, _, body) = get(gw.port, path, "X-Auth-User: mallory\r\n");
        assert_eq!(status, 200, "{body}");
        let check = auth
            .requests
            .recv_timeout(common::WAIT)
            .expect("the auth service received no check");
        assert_eq!(check, format!("GET /verify {path}"));
        let upstream = gw.backend.next_head().to_ascii_lowercase();
        assert!(upstream.contains("x-auth-user: alice\r\n"), "{upstream}");
        assert!(!upstream.contains("mallory"), "{upstream}");
    }
    assert_eq!(
        auth.connections.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "both checks on one HTTP/2 connection"
    );
}

#[test]
fn auth_filter_config_errors_point_at_their_place() {
    let dir = tempfile::tempdir().unwrap();
    write_file(
        dir.path(),
        "users.htpasswd",
        "alice:{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=\n",
    );
    let cfg = "[listeners.gw]\nbind = \"127.0.0.1:1\"\nprotocol = \"http\"\n\n\
               [[listeners.gw.routes]]\nupstream = \"app\"\nfilters = [\n\
               { type = \"basic_auth\", users_file = \"users.htpasswd\" },\n\
               { type = \"api_key\", keys_file = \"missing-keys.txt\" },\n\
               { type = \"forward_auth\", url = \"auth.internal/verify\" },\n\
               { type = \"forward_auth\", url = \"http://auth.internal/\", response_header = [\"x-user\"] },\n]\n\n\
               [upstreams.app]\ntargets = [\"127.0.0.1:2\"]\n";
    let path = write_file(dir.path(), "gw.toml", cfg);
    let (code, _, err) = run_rampart(dir.path(), &["check", "-c", &path]);
    assert_ne!(code, 0);
    let users = dir.path().join("users.htpasswd").display().to_string();
    for expected in [
        format!("{users}:1:7: unsupported hash for user \"alice\": SHA-1"),
        format!("{path}:9:33: missing-keys.txt: "),
        format!("{path}:10:32: `auth.internal/verify` is not a URL"),
        format!("{path}:11:57: `response_header` is not a key of a `forward_auth` filter"),
    ] {
        assert!(err.contains(&expected), "{expected:?} not in:\n{err}");
    }
}
