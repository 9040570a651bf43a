use super::{peek, peek_head, Request, Verdict::*, MAX_HEAD, MAX_REQUEST_LINE};

fn head(host: Option<&str>, message_len: usize) -> Request {
    Request {
        host: host.map(str::to_owned),
        message_len,
    }
}

#[test]
fn the_request_line_is_enough_without_the_head() {
    let req = b"GET /index.html HTTP/1.1\r\nHost: example.com\r\n\r\n";
    for cut in 0..26 {
        assert_eq!(peek(&req[..cut]), NeedMore, "cut at {cut}");
    }
    assert_eq!(peek(&req[..26]), Match(head(None, 26)));
    assert_eq!(peek(req), Match(head(None, 26)));
    assert_eq!(peek(b"M-SEARCH * HTTP/1.1\r\n"), Match(head(None, 21)));
    assert_eq!(peek(b"SEARCH /x HTTP/1.0\r\n"), Match(head(None, 20)));
    assert_eq!(peek(b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\n"), NotThis);
}

#[test]
fn the_host_is_read_from_the_head() {
    let req = b"GET / HTTP/1.1\r\nUser-Agent: x\r\nHOST:  Example.COM:8443 \r\nAccept: */*\r\n\r\nbody";
    let len = req.len() - 4;
    for cut in 0..len {
        assert_eq!(peek_head(&req[..cut]), NeedMore, "cut at {cut}");
    }
    assert_eq!(peek_head(&req[..len]), Match(head(Some("example.com:8443"), len)));
    assert_eq!(peek_head(req), Match(head(Some("example.com:8443"), len)));
    // No header fields at all: the head is the request line and an empty line.
    assert_eq!(peek_head(b"GET / HTTP/1.0\r\n\r\n"), Match(head(None, 18)));
}

#[test]
fn an_absolute_form_target_gives_the_authority() {
    let req = b"GET http://user@Proxy.Example.net:81/a?b HTTP/1.1\r\nHost: other.example\r\n\r\n";
    assert_eq!(peek_head(req), Match(head(Some("proxy.example.net:81"), req.len())));
    let req = b"OPTIONS https://[::1]:8443 HTTP/1.1\r\n\r\n";
    assert_eq!(peek_head(req), Match(head(Some("[::1]:8443"), req.len())));
    let req = b"GET /http://x.example/ HTTP/1.1\r\nHost: y.example\r\n\r\n";
    assert_eq!(peek_head(req), Match(head(Some("y.example"), req.len())));
}

#[test]
fn unusable_hosts_are_none() {
    for req in [
        &b"GET / HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\n\r\n"[..],
        b"GET / HTTP/1.1\r\nHost:\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a.example, b.example\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a/b\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a b\r\n\r\n",
        // Rejected by httparse (a space before the colon): still HTTP, without a host.
        b"GET / HTTP/1.1\r\nHost : a.example\r\n\r\n",
    ] {
        assert_eq!(
            peek_head(req),
            Match(head(None, req.len())),
            "{}",
            String::from_utf8_lossy(req)
        );
    }
}

#[test]
fn a_head_over_16_kib_is_http_without_a_host() {
    let mut req = b"GET / HTTP/1.1\r\nHost: a.example\r\nX-Big: ".to_vec();
    req.resize(MAX_HEAD - 1, b'x');
    assert_eq!(peek_head(&req), NeedMore);
    req.push(b'x');
    assert_eq!(peek_head(&req), Match(head(None, 16)));
    req.extend_from_slice(b"\r\n\r\n");
    assert_eq!(peek_head(&req), Match(head(None, 16)));
    // A head that ends exactly at the limit is read.
    let mut req = b"GET / HTTP/1.1\r\nHost: a.example\r\nX-Big: ".to_vec();
    req.resize(MAX_HEAD - 4, b'x');
    req.extend_from_slice(b"\r\n\r\n");
    assert_eq!(peek_head(&req), Match(head(Some("a.example"), MAX_HEAD)));
}

#[test]
fn request_lines_over_8_kib_are_not_http() {
    let mut line = b"GET /".to_vec();
    line.resize(MAX_REQUEST_LINE - 9, b'a');
    assert_eq!(peek(&line), NeedMore);
    let mut ok = line.clone();
    ok.extend_from_slice(b" HTTP/1.1\r\n");
    assert_eq!(peek(&ok), Match(head(None, MAX_REQUEST_LINE + 2)));
    line.push(b'a');
    assert_eq!(peek(&line), NotThis);
    assert_eq!(peek_head(&line), NotThis);
}

#[test]
fn pri_star_http_2_is_not_http_1() {
    assert_eq!(peek(b"PRI * HTTP/2"), NotThis);
    assert_eq!(peek(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), NotThis);
    assert_eq!(peek_head(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), NotThis);
    assert_eq!(peek(b"PRI * HTTP/1"), NeedMore);
}

#[test]
fn malformed_request_lines_are_not_http() {
    for bad in [
        &b"get / HTTP/1.1\r\n"[..],
        b" GET / HTTP/1.1\r\n",
        b"GET  / HTTP/1.1\r\n",
        b"GET / HTTP/1.1\n",
        b"GET / HTTP/1.2\r\n",
        b"GET / http/1.1\r\n",
        b"GET /\t HTTP/1.1\r\n",
        b"GET / HTTP/1.1 \r\n",
        b"GET /\r\n",
        b"ABCDEFGHIJKLMNOPQ / HTTP/1.1\r\n",
        b"GET\r\n",
        b"SSH-2.0-OpenSSH_9.6\r\n",
    ] {
        assert_eq!(peek(bad), NotThis, "{}", String::from_utf8_lossy(bad));
    }
    assert_eq!(peek(b"ABCDEFGHIJKLMNOP / HTTP/1.1\r\n"), Match(head(None, 29)));
    assert_eq!(peek(b"GET /caf\xc3\xa9 HTTP/1.1\r\n"), Match(head(None, 21)));
}
