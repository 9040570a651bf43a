use std::borrow::Cow;

use rampart_model::ForwardedHeaders;
use rampart_proto::h1::{parse_request_owned, parse_response_owned, Limits};
use rampart_proto::message::{BodyLength, RequestHead};

use super::*;

fn request_out(raw: &[u8], forwarded: ForwardedHeaders, ops: &HeaderOps) -> String {
    encode_request(raw, forwarded, ops, |_| {})
}

/// The head `raw` parses to, owned.
fn owned(raw: &[u8]) -> RequestHead {
    parse_request_owned(raw, &Limits::default()).unwrap().unwrap().1
}

/// The fields of HTTP/1.1 text Rampart wrote.
fn pairs(text: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    owned(text).pairs().map(|(n, v)| (n.to_vec(), v.to_vec())).collect()
}

/// The forwarding of the tests: upstream `app`, client 192.0.2.7 over plain HTTP.
fn forwarding<'a>(head: &'a RequestHead, forwarded: ForwardedHeaders) -> Forwarding<'a> {
    Forwarding {
        host: head.host(),
        replace_host: false,
        default_host: "app",
        client_ip: "192.0.2.7",
        scheme: "http",
        forwarded,
        client_cert: None,
        internal: false,
        trace: None,
    }
}

/// The head `raw` parses to, as sent upstream after `edit` (a filter, say) changed its view.
fn encode_request(
    raw: &[u8],
    forwarded: ForwardedHeaders,
    ops: &HeaderOps,
    edit: impl Fn(&mut RequestParts<'_>),
) -> String {
    encode_request_with(raw, forwarded, None, ops, edit)
}

/// [`encode_request`] with a client certificate field to forward.
fn encode_request_with(
    raw: &[u8],
    forwarded: ForwardedHeaders,
    client_cert: Option<(&str, Option<&str>)>,
    ops: &HeaderOps,
    edit: impl Fn(&mut RequestParts<'_>),
) -> String {
    let head = owned(raw);
    let mut parts = RequestParts::of(&head, Cow::Borrowed(ops), Some(0));
    let to_upstream = Forwarding {
        client_cert,
        ..forwarding(&head, forwarded)
    };
    parts.forwarding = Some(&to_upstream);
    edit(&mut parts);
    let mut out = Vec::new();
    write_request_head(&mut out, &parts);
    // The same head with its fields laid out as names and values only (as an HTTP/2 stream's
    // are: no lines to copy) is written field by field, to the same fields.
    let mut laid = RequestHead::with_storage(Vec::new(), Vec::new());
    laid.method = laid.append(head.method());
    laid.target = laid.append(head.target());
    for (name, value) in head.pairs() {
        let field = laid.push_field(name, value);
        if name.eq_ignore_ascii_case(b"host") {
            laid.host = Some(field.value);
        }
    }
    (laid.body, laid.upgrade, laid.protocol) = (head.body, head.upgrade, head.protocol);
    let mut laid_parts = RequestParts::of(&laid, Cow::Borrowed(ops), Some(0));
    let laid_to_upstream = Forwarding {
        client_cert,
        ..forwarding(&laid, forwarded)
    };
    laid_parts.forwarding = Some(&laid_to_upstream);
    edit(&mut laid_parts);
    let mut field_by_field = Vec::new();
    write_request_head(&mut field_by_field, &laid_parts);
    assert_eq!(pairs(&field_by_field), pairs(&out));
    // The fields an HTTP/2 upstream gets are those of the text, less the HTTP/1 framing and
    // `Connection`; an owned copy of what is sent has the same method and target.
    let from_text: Vec<(Vec<u8>, Vec<u8>)> = pairs(&out)
        .into_iter()
        .filter(|(n, _)| !n.eq_ignore_ascii_case(b"transfer-encoding") && !n.eq_ignore_ascii_case(b"connection"))
        .collect();
    let sent: Vec<(Vec<u8>, Vec<u8>)> = parts.sent_headers();
    assert_eq!(sent, from_text);
    let copy = lay_out_sent(&parts, Default::default());
    let parsed = owned(&out);
    assert_eq!((copy.method(), copy.target()), (parsed.method(), parsed.target()));
    assert_eq!(
        copy.pairs().map(|(n, v)| (n.to_vec(), v.to_vec())).collect::<Vec<_>>(),
        sent
    );
    String::from_utf8(out).unwrap()
}

/// The response head `raw` parses to (with `edits`), as an HTTP/1.1 client gets it.
fn response_out(raw: &[u8], edits: HeaderOps, close: bool, chunked: bool) -> String {
    let (parsed, head) = parse_response_owned(raw, &Limits::default(), false).unwrap().unwrap();
    written(
        &ResponseParts::of(&head, parsed.reason, Cow::Owned(edits)),
        close,
        chunked,
    )
}

/// `header` written for an HTTP/1.1 client.
fn written(header: &ResponseParts<'_>, close: bool, chunked: bool) -> String {
    let mut out = Vec::new();
    let fate = ClientFate {
        close,
        keep_alive_10: false,
        chunked,
    };
    write_response_head(&mut out, header, &fate);
    String::from_utf8(out).unwrap()
}

#[test]
fn hop_by_hop_fields_are_dropped_and_forwarded_headers_added() {
    let raw = b"POST /x HTTP/1.1\r\nHost: a.example\r\nConnection: keep-alive, X-Secret\r\nKeep-Alive: 5\r\nX-Secret: 1\r\nTE: trailers\r\nProxy-Connection: x\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\nUpgrade: h2c\r\nX-Kept: yes\r\n\r\n";
    let out = request_out(raw, ForwardedHeaders::Append, &HeaderOps::default());
    assert_eq!(
        out,
        "POST /x HTTP/1.1\r\nHost: a.example\r\nX-Kept: yes\r\nx-forwarded-for: 192.0.2.7\r\nx-forwarded-proto: http\r\nx-forwarded-host: a.example\r\ntransfer-encoding: chunked\r\n\r\n"
    );
}

#[test]
fn forwarded_modes() {
    let raw = b"GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 10.0.0.1\r\nX-Forwarded-For: 10.0.0.2\r\nX-Forwarded-Proto: https\r\n\r\n";
    let append = request_out(raw, ForwardedHeaders::Append, &HeaderOps::default());
    assert!(
        append.contains("x-forwarded-for: 10.0.0.1, 10.0.0.2, 192.0.2.7\r\n"),
        "{append}"
    );
    assert!(
        append.contains("X-Forwarded-Proto: https\r\n") && !append.contains("x-forwarded-proto: http\r\n"),
        "{append}"
    );
    let replace = request_out(raw, ForwardedHeaders::Replace, &HeaderOps::default());
    assert!(
        replace.contains("x-forwarded-for: 192.0.2.7\r\n") && !replace.contains("10.0.0.1"),
        "{replace}"
    );
    assert!(replace.contains("x-forwarded-proto: http\r\n"), "{replace}");
    let off = request_out(raw, ForwardedHeaders::Off, &HeaderOps::default());
    assert!(
        off.contains("X-Forwarded-For: 10.0.0.1\r\nX-Forwarded-For: 10.0.0.2\r\n") && !off.contains("192.0.2.7"),
        "{off}"
    );
}

#[test]
fn header_ops_remove_set_add() {
    let raw = b"GET / HTTP/1.1\r\nHost: h\r\nX-Drop: 1\r\nX-Set: old\r\nX-Add: first\r\n\r\n";
    let ops = HeaderOps {
        remove: vec!["x-drop".into()],
        set: vec![("X-Set".into(), "new".into())],
        add: vec![("X-Add".into(), "second".into())],
    };
    let out = request_out(raw, ForwardedHeaders::Off, &ops);
    assert!(!out.contains("X-Drop") && !out.contains("old"), "{out}");
    assert!(
        out.contains("X-Set: new\r\n") && out.contains("X-Add: first\r\n") && out.contains("X-Add: second\r\n"),
        "{out}"
    );
}

#[test]
fn upgrade_requests_keep_their_upgrade() {
    let raw =
        b"GET /ws HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: k\r\n\r\n";
    let out = request_out(raw, ForwardedHeaders::Off, &HeaderOps::default());
    assert!(
        out.contains("Upgrade: websocket\r\n") && out.contains("connection: upgrade\r\n"),
        "{out}"
    );
}

#[test]
fn response_heads_are_cleaned_and_marked() {
    let raw = b"HTTP/1.0 200 Fine\r\nConnection: close, X-Hop\r\nX-Hop: 1\r\nKeep-Alive: t=5\r\nContent-Length: 2\r\nX-App: 1\r\n\r\nhi";
    assert_eq!(
        response_out(raw, HeaderOps::default(), true, false),
        "HTTP/1.1 200 Fine\r\nContent-Length: 2\r\nX-App: 1\r\nconnection: close\r\n\r\n"
    );
}

#[test]
fn a_missing_host_gets_the_upstream_name() {
    let out = request_out(
        b"GET /old HTTP/1.0\r\n\r\n",
        ForwardedHeaders::Off,
        &HeaderOps::default(),
    );
    assert_eq!(out, "GET /old HTTP/1.1\r\nhost: app\r\n\r\n");
}

#[test]
fn a_filter_edits_a_request_head_without_touching_the_routes_edits() {
    let raw = b"GET /x HTTP/1.1\r\nHost: a.example\r\nX-Old: 1\r\nX-Keep: 2\r\n\r\n";
    let mut route_ops = HeaderOps::default();
    route_ops.set("x-route", "r");
    let out = encode_request(raw, ForwardedHeaders::Off, &route_ops, |header| {
        header.remove_header("X-Old");
        header.set_header("x-route", "filtered");
        header.add_header("x-added", "yes");
        header.target = Cow::Owned(b"/rewritten".to_vec());
    });
    assert_eq!(
        out,
        "GET /rewritten HTTP/1.1\r\nHost: a.example\r\nX-Keep: 2\r\nx-route: filtered\r\nx-added: yes\r\n\r\n"
    );
    assert_eq!(route_ops.set, [("x-route".to_string(), "r".to_string())]);
}

#[test]
fn the_client_cert_header_is_ours_alone() {
    let raw = b"GET / HTTP/1.1\r\nHost: h\r\nX-Client-Cert: Subject=\"CN=forged\"\r\nX-Other: 1\r\n\r\n";
    let with = |cert| {
        encode_request_with(
            raw,
            ForwardedHeaders::Append,
            Some(("x-client-cert", cert)),
            &HeaderOps::default(),
            |_| {},
        )
    };
    let verified = with(Some("Subject=\"CN=real\""));
    assert!(
        !verified.contains("forged") && verified.contains("x-client-cert: Subject=\"CN=real\"\r\n"),
        "{verified}"
    );
    let anonymous = with(None);
    assert!(!anonymous.to_ascii_lowercase().contains("x-client-cert"), "{anonymous}");
    assert!(anonymous.contains("X-Other: 1\r\n"), "{anonymous}");
    let off = request_out(raw, ForwardedHeaders::Append, &HeaderOps::default());
    assert!(off.contains("forged"), "without the setting the field passes: {off}");
}

#[test]
fn a_head_from_http2_gets_its_reason_its_length_and_clean_trailers() {
    let fields = vec![rampart_proto::h1::Field {
        name: (0, 12),
        value: (12, 28),
    }];
    let head = rampart_proto::message::ResponseHead::laid_out(
        200,
        b"content-typeapplication/grpc".to_vec(),
        fields,
        BodyLength::Exact(0),
    );
    let header = ResponseParts::of(&head, (0, 0), Cow::Owned(HeaderOps::default()));
    assert_eq!(
        written(&header, false, false),
        "HTTP/1.1 200 OK\r\ncontent-type: application/grpc\r\ncontent-length: 0\r\n\r\n"
    );
    assert!(written(&header, false, true).ends_with("transfer-encoding: chunked\r\n\r\n"));

    let trailers: [(&[u8], &[u8]); 4] = [
        (b"Grpc-Status", b"0"),
        (b"transfer-encoding", b"chunked"),
        (b"x-bad", b"a\r\nb"),
        (b"X-Ok", b"yes"),
    ];
    let mut out = Vec::new();
    write_chunked_end(&mut out, FieldsRef::Pairs(&trailers));
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "0\r\nGrpc-Status: 0\r\nX-Ok: yes\r\n\r\n"
    );
}

#[test]
fn response_field_lines_that_cross_go_out_as_they_came() {
    let raw =
        b"HTTP/1.1 200 OK\r\nA: 1\r\nKeep-Alive: x\r\nB:  2 \r\nC: 3\r\nD: 4\r\nTransfer-Encoding: chunked\r\n\r\n";
    let mut edits = HeaderOps::default();
    edits.remove("c");
    edits.add("x-added", "yes");
    assert_eq!(
        response_out(raw, edits, false, true),
        "HTTP/1.1 200 OK\r\nA: 1\r\nB:  2 \r\nD: 4\r\nx-added: yes\r\ntransfer-encoding: chunked\r\n\r\n"
    );
}

#[test]
fn request_field_lines_that_cross_go_out_as_they_came() {
    let raw = b"GET / HTTP/1.1\r\nHost: h\r\nA:  1 \r\nConnection: x-hop\r\nX-Hop: 1\r\nX-Forwarded-For: 10.0.0.1\r\nB:2\r\nX-Forwarded-Protocol: p\r\n\r\n";
    assert_eq!(
        request_out(raw, ForwardedHeaders::Append, &HeaderOps::default()),
        "GET / HTTP/1.1\r\nHost: h\r\nA:  1 \r\nB:2\r\nX-Forwarded-Protocol: p\r\nx-forwarded-for: 10.0.0.1, 192.0.2.7\r\nx-forwarded-proto: http\r\nx-forwarded-host: h\r\n\r\n"
    );
}

#[test]
fn an_attempts_edits_apply_to_the_head_as_written_and_spare_the_framing() {
    let raw = b"POST /a?b HTTP/1.1\r\nHost: app\r\nX-Sig: old\r\nTransfer-Encoding: chunked\r\n\r\n";
    let head = owned(raw);
    let mut route_ops = HeaderOps::default();
    route_ops.set("x-early", "1");
    let mut parts = RequestParts::of(&head, Cow::Borrowed(&route_ops), Some(0));
    let to_upstream = forwarding(&head, ForwardedHeaders::Off);
    parts.forwarding = Some(&to_upstream);
    let to = AttemptTo {
        upstream: "app",
        target: "one",
        address: "127.0.0.1:9".parse().unwrap(),
    };
    let mut attempt = parts.for_attempt(to);
    assert_eq!(attempt.sent_header("x-early"), Some(b"1".to_vec()));
    assert_eq!(attempt.sent_header("X-Sig"), Some(b"old".to_vec()));
    assert!(attempt.set_header("x-sig", "new"));
    assert!(attempt.add_header("x-backend", "one"));
    assert!(attempt.remove_header("x-early"));
    assert!(
        !attempt.remove_header("transfer-encoding"),
        "framing is not the filters'"
    );
    assert!(!attempt.set_header("x-bad", "a\r\nb: c"));
    assert!(!attempt.set_header("bad name", "v"));
    let mut out = Vec::new();
    write_request_head(&mut out, &attempt);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "POST /a?b HTTP/1.1\r\nHost: app\r\ntransfer-encoding: chunked\r\nx-sig: new\r\nx-backend: one\r\n\r\n"
    );
    // The request's own view is as it was: a retry starts from it again.
    let mut again = Vec::new();
    write_request_head(&mut again, &parts);
    assert_eq!(
        String::from_utf8(again).unwrap(),
        "POST /a?b HTTP/1.1\r\nHost: app\r\nX-Sig: old\r\ntransfer-encoding: chunked\r\nx-early: 1\r\n\r\n"
    );
}

#[test]
fn a_request_of_ramparts_own_writes_its_host_and_length_itself() {
    let head = crate::http::client::request_head(
        b"POST",
        b"",
        b"/items",
        [
            (&b"x-test"[..], &b"one"[..]),
            (b"content-length", b"99"),
            (b"connection", b"close"),
        ],
    )
    .unwrap();
    let ops = HeaderOps::default();
    let mut parts = RequestParts::of(&head, Cow::Borrowed(&ops), Some(0));
    parts.body = BodyLength::Exact(5);
    let internal = Forwarding {
        internal: true,
        trace: None,
        forwarded: ForwardedHeaders::Append,
        ..forwarding(&head, ForwardedHeaders::Off)
    };
    parts.forwarding = Some(&internal);
    let mut out = Vec::new();
    write_request_head(&mut out, &parts);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "POST /items HTTP/1.1\r\nhost: app\r\nx-test: one\r\ncontent-length: 5\r\n\r\n"
    );
}
