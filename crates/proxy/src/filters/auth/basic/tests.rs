use argon2::password_hash::{PasswordHasher, SaltString};
use base64::engine::general_purpose::STANDARD;
use rampart_model::filter::auth::PasswordFile;

use super::*;
use crate::filters::auth::testing::{block_on, filter_worker, request_head, worker, RawRequest};

fn bcrypt_hash(password: &str) -> PasswordHash {
    PasswordHash::Bcrypt(bcrypt::hash(password, 4).unwrap())
}

/// A cheap argon2id hash (8 KiB, one pass).
fn argon2_hash(password: &str) -> PasswordHash {
    let params = argon2::Params::new(8, 1, 1, None).unwrap();
    let salt = SaltString::from_b64("c29tZXNhbHRzb21lc2FsdA").unwrap();
    let hash = argon2::Argon2::new(argon2::Algorithm::Argon2id, argon2::Version::V0x13, params)
        .hash_password(password.as_bytes(), &salt)
        .unwrap();
    PasswordHash::Argon2(hash.to_string())
}

fn filter() -> BasicAuth {
    let mut users = PasswordFile::default();
    users.insert("alice", bcrypt_hash("wonderland"));
    users.insert("bob", argon2_hash("builder"));
    BasicAuth {
        users,
        challenge: BasicAuth::challenge_for("test"),
        forward_user_header: Some("x-user".into()),
        hide_credentials: true,
        max_pending_checks: 4,
    }
}

fn with_authorization(value: &str) -> RawRequest {
    RawRequest::new(&format!("GET /x HTTP/1.1\r\nHost: a\r\nAuthorization: {value}\r\n\r\n"))
}

fn basic(user_password: &str) -> RawRequest {
    with_authorization(&format!("Basic {}", STANDARD.encode(user_password)))
}

/// The status, log reason and `WWW-Authenticate` of a refusal.
fn refusal(verdict: &Verdict) -> (u16, Option<&'static str>, Option<&str>) {
    match verdict {
        Verdict::Respond(a) => (
            a.status,
            a.reason,
            a.headers
                .iter()
                .find(|(n, _)| n == "www-authenticate")
                .map(|(_, v)| v.as_str()),
        ),
        Verdict::Continue => panic!("let through"),
    }
}

#[test]
fn credentials_are_read_from_one_basic_authorization_field() {
    let read = |raw: RawRequest| {
        basic_credentials(&raw.parts()).map(|c| {
            let (u, p) = c.user_password();
            (
                String::from_utf8_lossy(u).into_owned(),
                String::from_utf8_lossy(p).into_owned(),
            )
        })
    };
    assert_eq!(
        read(basic("alice:pw:with:colons")),
        Ok(("alice".into(), "pw:with:colons".into()))
    );
    assert_eq!(read(with_authorization("basic   YTpi")), Ok(("a".into(), "b".into())));
    // Without padding too ("a:bc" is YTpiYw==).
    assert_eq!(read(with_authorization("Basic YTpiYw")), Ok(("a".into(), "bc".into())));
    assert_eq!(read(basic(":")), Ok((String::new(), String::new())));
    assert_eq!(
        read(RawRequest::new("GET / HTTP/1.1\r\nHost: a\r\n\r\n")),
        Err("basic_auth_missing")
    );
    assert_eq!(read(with_authorization("Bearer abc.def")), Err("basic_auth_missing"));
    assert_eq!(read(with_authorization("Basic")), Err("basic_auth_malformed"));
    assert_eq!(read(with_authorization("Basic !!!")), Err("basic_auth_malformed"));
    assert_eq!(read(basic("no-colon")), Err("basic_auth_malformed"));
    let long = format!("Basic {}", "A".repeat(MAX_TOKEN_LEN + 4));
    assert_eq!(read(with_authorization(&long)), Err("basic_auth_malformed"));
    let twice =
        RawRequest::new("GET / HTTP/1.1\r\nHost: a\r\nAuthorization: Basic YTpi\r\nAuthorization: Basic YTpi\r\n\r\n");
    assert_eq!(read(twice), Err("basic_auth_malformed"));
}

#[test]
fn bcrypt_and_argon2_users_get_in_and_everyone_else_gets_401() {
    let f = filter();
    let w = worker();
    block_on(async {
        for (login, user) in [("alice:wonderland", "alice"), ("bob:builder", "bob")] {
            let raw = basic(login);
            let mut parts = raw.parts();
            let (verdict, facts) = request_head(&f, &w, &mut parts).await;
            assert!(matches!(verdict, Verdict::Continue), "{login}: {verdict:?}");
            assert_eq!(facts.user.as_deref(), Some(user));
            assert_eq!(parts.edits.set, [("x-user".to_string(), user.to_string())]);
            assert_eq!(parts.edits.remove, ["authorization"]);
        }
        let challenge = r#"Basic realm="test", charset="UTF-8""#;
        for (raw, reason) in [
            (basic("alice:wrong"), "basic_auth_wrong_password"),
            (basic("bob:wonderland"), "basic_auth_wrong_password"),
            (basic("carol:wonderland"), "basic_auth_unknown_user"),
            (with_authorization("Basic ???"), "basic_auth_malformed"),
            (
                RawRequest::new("GET / HTTP/1.1\r\nHost: a\r\n\r\n"),
                "basic_auth_missing",
            ),
        ] {
            let mut parts = raw.parts();
            let (verdict, facts) = request_head(&f, &w, &mut parts).await;
            assert_eq!(refusal(&verdict), (401, Some(reason), Some(challenge)));
            assert_eq!(facts.user, None);
            assert!(parts.edits.set.is_empty());
            let Verdict::Respond(answer) = verdict else {
                unreachable!()
            };
            assert!(!String::from_utf8_lossy(&answer.body).contains("wonderland"));
        }
    });
}

#[test]
fn outcomes_are_cached_and_one_check_serves_every_request_with_the_same_credentials() {
    let f = filter();
    let w = worker();
    block_on(async {
        let hash = f.users.get(b"alice").unwrap();
        let digest = credential_digest(b"alice", b"wonderland", hash);
        filter_worker(&w, &f).builtin_state(&f, |c| {
            let first = c.begin(digest, Instant::now(), hash, b"wonderland", 4);
            let second = c.begin(digest, Instant::now(), hash, b"wonderland", 4);
            let (Step::Wait(a), Step::Wait(b)) = (first, second) else {
                panic!("two waits")
            };
            assert!(a.same_channel(&b), "the second request waits for the first one's check");
            assert_eq!(c.in_flight.len(), 1);
        });
        // A request answered from the check in flight, then from the cache.
        let raw = basic("alice:wonderland");
        assert!(matches!(
            request_head(&f, &w, &mut raw.parts()).await.0,
            Verdict::Continue
        ));
        filter_worker(&w, &f).builtin_state(&f, |c| {
            assert!(c.in_flight.is_empty());
            assert_eq!(c.cache.len(), (1, 0));
            assert!(matches!(
                c.begin(digest, Instant::now(), hash, b"wonderland", 4),
                Step::Known(true)
            ));
        });
        // A wrong guess is remembered as refused.
        assert_eq!(
            refusal(&request_head(&f, &w, &mut basic("alice:nope").parts()).await.0).0,
            401
        );
        filter_worker(&w, &f).builtin_state(&f, |c| assert_eq!(c.cache.len(), (1, 1)));
    });
}

#[test]
fn a_check_nobody_waits_for_still_ends_in_the_cache() {
    let f = filter();
    block_on(async {
        let hash = f.users.get(b"bob").unwrap();
        let digest = credential_digest(b"bob", b"builder", hash);
        let mut checks = PasswordChecks::default();
        // The request that started the check goes away.
        drop(checks.begin(digest, Instant::now(), hash, b"builder", 4));
        let pending = checks.in_flight.get(&digest).cloned().unwrap();
        assert_eq!(outcome_of(pending).await, Some(true));
        // The next check started sweeps the outcome in.
        let other = credential_digest(b"bob", b"other", hash);
        drop(checks.begin(other, Instant::now(), hash, b"other", 4));
        assert!(!checks.in_flight.contains_key(&digest));
        assert!(matches!(
            checks.begin(digest, Instant::now(), hash, b"builder", 4),
            Step::Known(true)
        ));
    });
}

#[test]
fn past_the_bound_new_checks_are_refused_with_503_but_cached_users_pass() {
    let f = BasicAuth {
        max_pending_checks: 1,
        ..filter()
    };
    let w = worker();
    block_on(async {
        // alice's outcome is cached first.
        assert!(matches!(
            request_head(&f, &w, &mut basic("alice:wonderland").parts()).await.0,
            Verdict::Continue
        ));
        // One check pending (held as if its thread were busy).
        let held = filter_worker(&w, &f).builtin_state(&f, |c| {
            c.pending.fetch_add(1, Ordering::AcqRel);
            PendingGuard(c.pending.clone())
        });
        let (verdict, _) = request_head(&f, &w, &mut basic("bob:builder").parts()).await;
        let Verdict::Respond(answer) = verdict else {
            panic!("refused")
        };
        assert_eq!((answer.status, answer.reason), (503, Some("basic_auth_busy")));
        assert!(answer.headers.iter().any(|(n, v)| n == "retry-after" && v == "1"));
        assert!(matches!(
            request_head(&f, &w, &mut basic("alice:wonderland").parts()).await.0,
            Verdict::Continue
        ));
        drop(held);
        assert_eq!(filter_worker(&w, &f).builtin_state(&f, |c| c.pending()), 0);
        assert!(matches!(
            request_head(&f, &w, &mut basic("bob:builder").parts()).await.0,
            Verdict::Continue
        ));
    });
}
