use rampart_model::filter::auth::ApiKeySet;

use super::*;
use crate::filters::auth::testing::{block_on, request_head, worker, RawRequest};

const KEY: &str = "k3y-0123456789abcdef";

fn filter(header: Option<&str>, query: Option<&str>, bearer: bool, hide: bool) -> ApiKey {
    let mut keys = ApiKeySet::default();
    keys.insert(ApiKeySet::digest(KEY.as_bytes()), "ci");
    keys.insert(ApiKeySet::digest(b"key+with/odd=chars"), "odd");
    ApiKey {
        keys,
        header: header.map(String::from),
        query: query.map(String::from),
        bearer,
        hide_credentials: hide,
        forward_name_header: Some("x-consumer".into()),
    }
}

fn get(target: &str, fields: &str) -> RawRequest {
    RawRequest::new(&format!("GET {target} HTTP/1.1\r\nHost: a\r\n{fields}\r\n"))
}

#[test]
fn keys_are_read_from_the_header_then_the_query_then_a_bearer_token() {
    let f = filter(Some("x-api-key"), Some("apikey"), true, true);
    let read =
        |raw: RawRequest| presented_key(&f, &raw.parts()).map(|(k, place)| (String::from_utf8(k).unwrap(), place));
    assert_eq!(
        read(get("/", &format!("X-Api-Key:  {KEY} \r\n"))),
        Ok((KEY.to_string(), KeyPlace::Header))
    );
    assert_eq!(
        read(get(&format!("/?a=1&apikey={KEY}"), "")),
        Ok((KEY.to_string(), KeyPlace::Query))
    );
    assert_eq!(
        read(get("/?apikey=key%2Bwith%2Fodd%3Dchars", "")),
        Ok(("key+with/odd=chars".to_string(), KeyPlace::Query))
    );
    assert_eq!(
        read(get("/", &format!("Authorization: bearer {KEY}\r\n"))),
        Ok((KEY.to_string(), KeyPlace::Bearer))
    );
    // The header wins over the query.
    assert_eq!(
        read(get("/?apikey=other", &format!("x-api-key: {KEY}\r\n"))).map(|(_, p)| p),
        Ok(KeyPlace::Header)
    );
    assert_eq!(read(get("/", "")), Err("api_key_missing"));
    assert_eq!(read(get("/", "Authorization: Basic YTpi\r\n")), Err("api_key_missing"));
    assert_eq!(
        read(get("/", "x-api-key: a\r\nx-api-key: b\r\n")),
        Err("api_key_malformed")
    );
    assert_eq!(read(get("/", "x-api-key: \r\n")), Err("api_key_malformed"));
    assert_eq!(read(get("/?apikey=%zz", "")), Err("api_key_malformed"));
    assert_eq!(read(get("/?apikey=", "")), Err("api_key_malformed"));
    // Places the filter was not given are not read.
    let header_only = filter(Some("x-api-key"), None, false, true);
    assert_eq!(
        presented_key(
            &header_only,
            &get(&format!("/?apikey={KEY}"), &format!("Authorization: Bearer {KEY}\r\n")).parts()
        ),
        Err("api_key_missing")
    );
}

#[test]
fn a_known_key_passes_with_its_name_and_is_hidden_from_upstream() {
    let w = worker();
    block_on(async {
        let f = filter(Some("x-api-key"), Some("apikey"), true, true);
        let raw = get("/", &format!("X-Api-Key: {KEY}\r\nX-Consumer: forged\r\n"));
        let mut parts = raw.parts();
        let (verdict, facts) = request_head(&f, &w, &mut parts).await;
        assert!(matches!(verdict, Verdict::Continue), "{verdict:?}");
        assert_eq!(facts.user.as_deref(), Some("ci"));
        assert_eq!(parts.edits.remove, ["x-api-key"]);
        assert_eq!(parts.edits.set, [("x-consumer".to_string(), "ci".to_string())]);

        let raw = get(&format!("/items?page=2&apikey={KEY}&sort=asc"), "");
        let mut parts = raw.parts();
        assert!(matches!(request_head(&f, &w, &mut parts).await.0, Verdict::Continue));
        assert_eq!(&*parts.target, b"/items?page=2&sort=asc");
        assert!(parts.edits.remove.is_empty());

        let raw = get("/", &format!("Authorization: Bearer {KEY}\r\n"));
        let mut parts = raw.parts();
        assert!(matches!(request_head(&f, &w, &mut parts).await.0, Verdict::Continue));
        assert_eq!(parts.edits.remove, ["authorization"]);

        // Kept when asked.
        let keep = filter(None, Some("apikey"), false, false);
        let raw = get(&format!("/items?apikey={KEY}"), "");
        let mut parts = raw.parts();
        assert!(matches!(request_head(&keep, &w, &mut parts).await.0, Verdict::Continue));
        assert_eq!(&*parts.target, format!("/items?apikey={KEY}").as_bytes());
    });
}

#[test]
fn unknown_missing_and_malformed_keys_get_401_without_the_key() {
    let w = worker();
    block_on(async {
        let f = filter(Some("x-api-key"), None, false, true);
        for (raw, reason) in [
            (get("/", "x-api-key: not-a-known-key\r\n"), "api_key_unknown"),
            (get("/", ""), "api_key_missing"),
            (get("/", "x-api-key: a\r\nx-api-key: b\r\n"), "api_key_malformed"),
        ] {
            let (verdict, facts) = request_head(&f, &w, &mut raw.parts()).await;
            let Verdict::Respond(answer) = verdict else {
                panic!("let through")
            };
            assert_eq!((answer.status, answer.reason), (401, Some(reason)));
            assert!(answer.headers.contains(&("www-authenticate".into(), "Key".into())));
            assert!(!String::from_utf8_lossy(&answer.body).contains("not-a-known-key"));
            assert_eq!(facts.user, None);
        }
        let bearer = filter(None, None, true, true);
        let Verdict::Respond(answer) = request_head(&bearer, &w, &mut get("/", "").parts()).await.0 else {
            panic!("let through")
        };
        assert!(answer.headers.contains(&("www-authenticate".into(), "Bearer".into())));
    });
}

#[test]
fn only_the_named_query_parameter_is_removed() {
    assert_eq!(without_query_param(b"/p?apikey=1", "apikey"), b"/p");
    assert_eq!(without_query_param(b"/p?a=1&apikey=2&b=3", "apikey"), b"/p?a=1&b=3");
    assert_eq!(without_query_param(b"/p?apikey=1&apikey=2&b", "apikey"), b"/p?b");
    assert_eq!(without_query_param(b"/p?apikeys=1", "apikey"), b"/p?apikeys=1");
    assert_eq!(without_query_param(b"/p", "apikey"), b"/p");
}
