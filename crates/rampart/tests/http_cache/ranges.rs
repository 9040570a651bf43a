//! Range requests on a route that caches: answered with 206 from a stored complete response,
//! 416 past its end, the whole response when `If-Range` no longer holds; on a miss the whole
//! response is fetched (no `Range` upstream) and stored.

// The test backend keeps a record of what it was asked, behind a lock: test code, no hot path.
#![allow(clippy::disallowed_types)]

use std::sync::{Arc, Mutex};

use super::{get, proxy, scripted};
use common::http::header;

use crate::common;

const WHOLE: &[u8] =
    b"HTTP/1.1 200 OK\r\ncache-control: max-age=600\r\netag: \"v1\"\r\ncontent-length: 10\r\n\r\n0123456789";

#[test]
fn ranges_are_answered_from_the_stored_whole_response() {
    let heads = Arc::new(Mutex::new(Vec::new()));
    let seen = heads.clone();
    let target = scripted(move |head| {
        seen.lock().unwrap().push(head.to_string());
        WHOLE
    });
    let (_rampart, port, _dir) = proxy(&[("r", &target)]);
    // A miss with a range: the whole response comes back and is stored; the upstream was not
    // asked for the range.
    let (status, _, body) = get(port, "/r/x", "Range: bytes=2-4\r\n");
    assert_eq!((status, body.as_slice()), (200, &b"0123456789"[..]));
    {
        let asked = heads.lock().unwrap();
        assert_eq!(asked.len(), 1);
        assert!(!asked[0].contains("\r\nrange:"), "{}", asked[0]);
    }
    let part = |range: &str| get(port, "/r/x", &format!("Range: {range}\r\n"));
    let (status, head, body) = part("bytes=2-4");
    assert_eq!((status, body.as_slice()), (206, &b"234"[..]), "{head}");
    assert_eq!(header(&head, "content-range"), Some("bytes 2-4/10"));
    assert_eq!(header(&head, "content-length"), Some("3"));
    assert!(
        header(&head, "cache-status").is_some_and(|s| s.contains("hit")),
        "{head}"
    );
    let (status, _, body) = part("bytes=7-");
    assert_eq!((status, body.as_slice()), (206, &b"789"[..]));
    let (status, _, body) = part("bytes=-1");
    assert_eq!((status, body.as_slice()), (206, &b"9"[..]));
    let (status, head, _) = part("bytes=10-");
    assert_eq!(status, 416);
    assert_eq!(header(&head, "content-range"), Some("bytes */10"));
    // Several ranges, or an If-Range that names another version: the whole response.
    let (status, _, body) = part("bytes=0-1, 4-5");
    assert_eq!((status, body.len()), (200, 10));
    let (status, _, body) = get(port, "/r/x", "Range: bytes=0-1\r\nIf-Range: \"v0\"\r\n");
    assert_eq!((status, body.len()), (200, 10));
    let (status, _, body) = get(port, "/r/x", "Range: bytes=0-1\r\nIf-Range: \"v1\"\r\n");
    assert_eq!((status, body.as_slice()), (206, &b"01"[..]));
    assert_eq!(heads.lock().unwrap().len(), 1, "every range came from the store");
}
