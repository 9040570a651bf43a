//! The small built-in filters end to end through the real binary: request ids, IP allow/deny
//! (after PROXY headers and trusted X-Forwarded-For), CORS as a client sends it, listener
//! filters inherited by routes, and what the access log records of them.

use crate::common;

use std::io::Write;

use common::http::{header, read_response, send};
use common::*;

fn gateway(listener_extra: &str, routes: &str) -> FilterGateway {
    filter_gateway(&[], listener_extra, routes)
}

fn request(port: u16, raw: &str) -> (u16, String, String) {
    let mut client = connect(port);
    let (status, head, body) = send(&mut client, raw.as_bytes());
    (status, head, String::from_utf8_lossy(&body).into_owned())
}

#[test]
fn request_ids_are_made_kept_forwarded_echoed_and_logged() {
    let gw = gateway(
        "filters = [{ type = \"request_id\" }]",
        "[[listeners.gw.routes]]\nname = \"fresh\"\nmatch = { path_prefix = \"/fresh\" }\nupstream = \"app\"\n\
         inherit_filters = false\nfilters = [{ type = \"request_id\", header = \"x-trace\", keep_incoming = false, echo = false }]\n\n\
         [[listeners.gw.routes]]\nname = \"api\"\nupstream = \"app\"\n",
    );
    // Made: a UUIDv7, sent upstream and back.
    let (status, head, _) = request(gw.port, "GET /a HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(status, 200);
    let made = header(&head, "x-request-id")
        .expect("an id in the response")
        .to_string();
    assert_eq!(made.len(), 36);
    assert_eq!(&made[14..15], "7", "a version 7 UUID: {made}");
    let upstream = gw.backend.next_head().to_ascii_lowercase();
    assert!(upstream.contains(&format!("x-request-id: {made}")), "{upstream}");
    // Kept: the client's own, once.
    let (_, head, _) = request(gw.port, "GET /b HTTP/1.1\r\nHost: x\r\nX-Request-Id: abc-123\r\n\r\n");
    assert_eq!(header(&head, "x-request-id"), Some("abc-123"));
    let upstream = gw.backend.next_head().to_ascii_lowercase();
    assert_eq!(upstream.matches("x-request-id:").count(), 1, "{upstream}");
    assert!(upstream.contains("x-request-id: abc-123"), "{upstream}");
    // A client id with a space is not kept.
    let (_, head, _) = request(gw.port, "GET /c HTTP/1.1\r\nHost: x\r\nX-Request-Id: a b\r\n\r\n");
    assert_ne!(header(&head, "x-request-id"), Some("a b"));
    gw.backend.next_head();
    // The route that opted out runs its own: another header, never kept, not echoed.
    let (_, head, _) = request(gw.port, "GET /fresh HTTP/1.1\r\nHost: x\r\nX-Trace: mine\r\n\r\n");
    assert_eq!(header(&head, "x-trace"), None);
    assert_eq!(header(&head, "x-request-id"), None);
    let upstream = gw.backend.next_head().to_ascii_lowercase();
    assert!(
        !upstream.contains("x-trace: mine") && upstream.contains("x-trace: "),
        "{upstream}"
    );
    // Each id is in its access log line.
    let lines = json_log_lines(&gw.log, 4);
    assert_eq!(lines[0]["request_id"], made.as_str());
    assert_eq!(lines[1]["request_id"], "abc-123");
    assert_eq!(lines[3]["route"], "fresh");
    assert_eq!(lines[3]["request_id"].as_str().map(str::len), Some(36));
}

#[test]
fn ip_filters_see_the_address_after_proxy_headers_and_trusted_forwarded_for() {
    let gw = gateway(
        "proxy_protocol_from = [\"127.0.0.2/32\"]\ntrusted_proxies = [\"127.0.0.3/32\"]",
        "[[listeners.gw.routes]]\nname = \"admin\"\nmatch = { path_prefix = \"/admin\" }\nupstream = \"app\"\n\
         filters = [{ type = \"ip_filter\", allow = [\"127.0.0.0/8\", \"192.0.2.0/24\"], deny = [\"127.0.0.9/32\", \"192.0.2.66/32\"] }]\n",
    );
    let get = "GET /admin HTTP/1.1\r\nHost: x\r\n\r\n";
    let status_from = |from: [u8; 4], raw: &[u8]| {
        let mut c = connect_from(from.into(), gw.port);
        c.write_all(raw).unwrap();
        read_response(&mut c).0
    };
    assert_eq!(status_from([127, 0, 0, 1], get.as_bytes()), 200);
    gw.backend.next_head();
    assert_eq!(status_from([127, 0, 0, 9], get.as_bytes()), 403);
    // A PROXY header from a trusted source names the client.
    let proxied = |client: &str| format!("PROXY TCP4 {client} 127.0.0.1 5000 80\r\n{get}");
    assert_eq!(status_from([127, 0, 0, 2], proxied("198.51.100.7").as_bytes()), 403);
    assert_eq!(status_from([127, 0, 0, 2], proxied("192.0.2.10").as_bytes()), 200);
    gw.backend.next_head();
    // X-Forwarded-For counts only from a trusted proxy, and its right-most untrusted entry.
    let forwarded = |xff: &str| format!("GET /admin HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: {xff}\r\n\r\n");
    assert_eq!(
        status_from([127, 0, 0, 3], forwarded("192.0.2.10, 192.0.2.66").as_bytes()),
        403
    );
    assert_eq!(
        status_from([127, 0, 0, 3], forwarded("192.0.2.66, 198.51.100.1").as_bytes()),
        403
    );
    assert_eq!(
        status_from([127, 0, 0, 3], forwarded("10.9.9.9, 192.0.2.10").as_bytes()),
        200
    );
    gw.backend.next_head();
    // From an untrusted peer it is ignored.
    assert_eq!(status_from([127, 0, 0, 1], forwarded("192.0.2.66").as_bytes()), 200);
    gw.backend.next_head();
    let lines = json_log_lines(&gw.log, 8);
    assert_eq!(lines[1]["status"], 403);
    assert_eq!(lines[1]["error"], "ip_denied");
}

#[test]
fn cors_preflights_are_answered_and_responses_carry_the_headers() {
    let gw = gateway(
        "filters = [{ type = \"cors\", origins = [\"https://app.example\", \"https://*.tenant.example\"], \
         methods = [\"GET\", \"PUT\", \"DELETE\"], allow_headers = [\"x-token\", \"content-type\"], \
         expose_headers = [\"x-total\"], credentials = true, max_age = \"10m\" }]",
        "[[listeners.gw.routes]]\nupstream = \"app\"\n",
    );
    // A preflight as a browser sends it before a PUT with a custom header.
    let preflight = |origin: &str, method: &str, headers: &str| {
        request(
            gw.port,
            &format!(
                "OPTIONS /items/1 HTTP/1.1\r\nHost: api.example\r\nOrigin: {origin}\r\n\
                 Access-Control-Request-Method: {method}\r\nAccess-Control-Request-Headers: {headers}\r\n\
                 Sec-Fetch-Mode: cors\r\n\r\n"
            ),
        )
    };
    let (status, head, body) = preflight("https://app.example", "PUT", "x-token,content-type");
    assert_eq!(status, 204, "{head}");
    assert_eq!(body, "");
    assert_eq!(
        header(&head, "access-control-allow-origin"),
        Some("https://app.example")
    );
    assert_eq!(header(&head, "access-control-allow-methods"), Some("GET, PUT, DELETE"));
    assert_eq!(
        header(&head, "access-control-allow-headers"),
        Some("x-token, content-type")
    );
    assert_eq!(header(&head, "access-control-allow-credentials"), Some("true"));
    assert_eq!(header(&head, "access-control-max-age"), Some("600"));
    assert!(header(&head, "vary").is_some_and(|v| v.contains("Origin")), "{head}");
    // A pattern origin; then refusals: origin, method, header.
    assert_eq!(preflight("https://a.tenant.example", "DELETE", "x-token").0, 204);
    let (status, head, _) = preflight("https://evil.example", "PUT", "x-token");
    assert_eq!(status, 403);
    assert_eq!(header(&head, "access-control-allow-origin"), None);
    assert_eq!(preflight("https://app.example", "PATCH", "x-token").0, 403);
    assert_eq!(preflight("https://app.example", "PUT", "x-other").0, 403);
    // The backend never saw a preflight.
    assert!(gw.backend.heads.try_recv().is_err());
    // The request itself goes through and its response carries the headers.
    let (status, head, _) = request(
        gw.port,
        "PUT /items/1 HTTP/1.1\r\nHost: api.example\r\nOrigin: https://app.example\r\nX-Token: t\r\nContent-Length: 0\r\n\r\n",
    );
    assert_eq!(status, 200);
    assert_eq!(
        header(&head, "access-control-allow-origin"),
        Some("https://app.example")
    );
    assert_eq!(header(&head, "access-control-allow-credentials"), Some("true"));
    assert_eq!(header(&head, "access-control-expose-headers"), Some("x-total"));
    assert!(gw.backend.next_head().starts_with("PUT /items/1"));
    // Another origin's request passes (a browser enforces the answer) but gets no grant.
    let (status, head, _) = request(
        gw.port,
        "GET /items HTTP/1.1\r\nHost: a\r\nOrigin: https://evil.example\r\n\r\n",
    );
    assert_eq!((status, header(&head, "access-control-allow-origin")), (200, None));
    assert!(header(&head, "vary").is_some_and(|v| v.contains("Origin")), "{head}");
    gw.backend.next_head();
    // Without Origin it is no CORS request at all.
    let (_, head, _) = request(gw.port, "GET /items HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(header(&head, "access-control-allow-origin"), None);
    let lines = json_log_lines(&gw.log, 8);
    assert_eq!(
        (lines[0]["status"].as_u64(), &lines[0]["error"]),
        (Some(204), &serde_json::Value::Null)
    );
    assert_eq!(lines[2]["error"], "cors_rejected");
}

#[test]
fn answers_of_earlier_filters_pass_the_response_phase_of_the_ones_before() {
    // CORS first, then an IP filter that refuses: the 403 still carries the CORS grant, so a
    // browser can read why it was refused.
    let gw = gateway(
        "filters = [{ type = \"cors\", origins = [\"https://app.example\"] }, { type = \"ip_filter\", deny = [\"127.0.0.0/8\"] }]",
        "[[listeners.gw.routes]]\nupstream = \"app\"\n",
    );
    let (status, head, body) = request(
        gw.port,
        "GET / HTTP/1.1\r\nHost: a\r\nOrigin: https://app.example\r\n\r\n",
    );
    assert_eq!((status, body.as_str()), (403, "403 Forbidden\n"));
    assert_eq!(
        header(&head, "access-control-allow-origin"),
        Some("https://app.example")
    );
}
