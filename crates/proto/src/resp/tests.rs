use super::*;

fn parse(buf: &[u8]) -> Result<Option<(Reply<'_>, usize)>, RespError> {
    parse_reply(buf, &RespLimits::default())
}

/// Parses a whole reply and checks that every strict prefix asks for more bytes.
fn whole(buf: &[u8]) -> Reply<'_> {
    for cut in 0..buf.len() {
        assert_eq!(parse(&buf[..cut]), Ok(None), "{buf:?} cut at {cut}");
    }
    let (reply, used) = parse(buf).unwrap().unwrap();
    assert_eq!(used, buf.len(), "{buf:?}");
    reply
}

#[test]
fn encodes_a_command_as_an_array_of_bulk_strings() {
    let mut out = Vec::new();
    encode_command(&mut out, &[b"SET", b"key", b""]);
    assert_eq!(out, b"*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$0\r\n\r\n");
}

#[test]
fn encodes_integers_as_bulk_strings() {
    for (n, text) in [
        (0, "0"),
        (7, "7"),
        (-1, "-1"),
        (1234567890, "1234567890"),
        (i64::MAX, "9223372036854775807"),
        (i64::MIN, "-9223372036854775808"),
    ] {
        let mut out = Vec::new();
        encode_bulk_int(&mut out, n);
        assert_eq!(out, format!("${}\r\n{text}\r\n", text.len()).as_bytes());
    }
}

#[test]
fn pieces_make_the_same_command_as_encode_command() {
    let mut pieces = Vec::new();
    encode_array_header(&mut pieces, 3);
    encode_bulk(&mut pieces, b"EVALSHA");
    encode_bulk(&mut pieces, b"abc");
    encode_bulk_int(&mut pieces, 12);
    let mut whole = Vec::new();
    encode_command(&mut whole, &[b"EVALSHA", b"abc", b"12"]);
    assert_eq!(pieces, whole);
}

#[test]
fn encoding_appends_without_touching_what_is_there() {
    let mut out = b"before".to_vec();
    encode_command(&mut out, &[b"PING"]);
    assert_eq!(out, b"before*1\r\n$4\r\nPING\r\n");
}

#[test]
fn parses_each_kind() {
    assert_eq!(whole(b"+OK\r\n"), Reply::Simple(b"OK"));
    assert_eq!(whole(b"+\r\n"), Reply::Simple(b""));
    assert_eq!(whole(b"-ERR unknown command\r\n"), Reply::Error(b"ERR unknown command"));
    assert_eq!(whole(b":0\r\n"), Reply::Integer(0));
    assert_eq!(whole(b":-42\r\n"), Reply::Integer(-42));
    assert_eq!(whole(b":9223372036854775807\r\n"), Reply::Integer(i64::MAX));
    assert_eq!(whole(b":-9223372036854775808\r\n"), Reply::Integer(i64::MIN));
    assert_eq!(whole(b"$5\r\nhello\r\n"), Reply::Bulk(Some(b"hello")));
    assert_eq!(whole(b"$0\r\n\r\n"), Reply::Bulk(Some(b"")));
    assert_eq!(whole(b"$-1\r\n"), Reply::Bulk(None));
    assert_eq!(whole(b"*0\r\n"), Reply::Array(Some(vec![])));
    assert_eq!(whole(b"*-1\r\n"), Reply::Array(None));
}

#[test]
fn bulk_strings_are_binary() {
    assert_eq!(whole(b"$4\r\n\r\n\0\n\r\n"), Reply::Bulk(Some(b"\r\n\0\n")));
}

#[test]
fn parses_nested_arrays() {
    let reply = whole(b"*3\r\n:1\r\n*2\r\n$1\r\na\r\n$-1\r\n*-1\r\n");
    assert_eq!(
        reply,
        Reply::Array(Some(vec![
            Reply::Integer(1),
            Reply::Array(Some(vec![Reply::Bulk(Some(b"a")), Reply::Bulk(None)])),
            Reply::Array(None),
        ]))
    );
    assert_eq!(reply.as_array().unwrap()[0].as_integer(), Some(1));
}

#[test]
fn the_script_reply_shape() {
    let reply = whole(b"*4\r\n:3\r\n:0\r\n:300000\r\n:7\r\n");
    let items: Vec<i64> = reply
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_integer().unwrap())
        .collect();
    assert_eq!(items, [3, 0, 300000, 7]);
}

#[test]
fn leaves_what_follows_a_reply() {
    let buf = b"+PONG\r\n:1\r\n$3\r\nab";
    let (first, used) = parse(buf).unwrap().unwrap();
    assert_eq!((first, used), (Reply::Simple(b"PONG"), 7));
    let (second, more) = parse(&buf[used..]).unwrap().unwrap();
    assert_eq!((second, more), (Reply::Integer(1), 4));
    assert_eq!(parse(&buf[used + more..]), Ok(None));
}

#[test]
fn accessors() {
    assert_eq!(Reply::Simple(b"OK").as_bytes(), Some(&b"OK"[..]));
    assert_eq!(Reply::Bulk(Some(b"x")).as_bytes(), Some(&b"x"[..]));
    assert_eq!(Reply::Bulk(None).as_bytes(), None);
    assert_eq!(Reply::Error(b"ERR x").as_error(), Some(&b"ERR x"[..]));
    assert_eq!(Reply::Integer(1).as_error(), None);
    assert_eq!(Reply::Array(None).as_array(), None);
    assert_eq!(Reply::Simple(b"1").as_integer(), None);
}

#[test]
fn rejects_malformed_input() {
    for (buf, error) in [
        (&b"?"[..], RespError::UnknownType(b'?')),
        (b"_\r\n", RespError::UnknownType(b'_')), // RESP3 null
        (b"+O\nK\r\n", RespError::BadLineEnd),
        (b"+OK\rX", RespError::BadLineEnd),
        (b"+OK\n", RespError::BadLineEnd),
        (b":\r\n", RespError::BadInteger),
        (b":-\r\n", RespError::BadInteger),
        (b":+1\r\n", RespError::BadInteger),
        (b":1a\r\n", RespError::BadInteger),
        (b": 1\r\n", RespError::BadInteger),
        (b":9223372036854775808\r\n", RespError::BadInteger),
        (b":-9223372036854775809\r\n", RespError::BadInteger),
        (b":123456789012345678901", RespError::LineTooLong),
        (b"$-2\r\n", RespError::BadBulkLen),
        (b"$536870913\r\n", RespError::BadBulkLen),
        (b"$x\r\n", RespError::BadInteger),
        (b"$3\r\nabcd\r\n", RespError::BadBulkEnd),
        (b"$3\r\nabc\n\r", RespError::BadBulkEnd),
        (b"*-2\r\n", RespError::BadArrayLen),
        (b"*1048577\r\n", RespError::BadArrayLen),
        (b"*2\r\n:1\r\n!", RespError::UnknownType(b'!')),
    ] {
        assert_eq!(parse(buf), Err(error), "{buf:?}");
        // The same verdict with more bytes after it.
        let mut longer = buf.to_vec();
        longer.extend_from_slice(b"\r\n+OK\r\n$1\r\n");
        assert_eq!(parse(&longer), Err(error), "{buf:?} extended");
    }
}

#[test]
fn line_length_is_limited() {
    let limits = RespLimits {
        max_line_len: 4,
        ..RespLimits::default()
    };
    assert_eq!(parse_reply(b"+abcd\r\n", &limits).unwrap().unwrap().1, 7);
    assert_eq!(parse_reply(b"+abcd", &limits), Ok(None));
    assert_eq!(parse_reply(b"+abcde", &limits), Err(RespError::LineTooLong));
    assert_eq!(parse_reply(b"-abcde\r\n", &limits), Err(RespError::LineTooLong));
}

#[test]
fn bulk_and_array_lengths_are_limited() {
    let limits = RespLimits {
        max_line_len: 64,
        max_bulk_len: 3,
        max_array_len: 2,
    };
    assert!(parse_reply(b"$3\r\nabc\r\n", &limits).unwrap().is_some());
    assert_eq!(parse_reply(b"$4\r\n", &limits), Err(RespError::BadBulkLen));
    assert!(parse_reply(b"*2\r\n:1\r\n:2\r\n", &limits).unwrap().is_some());
    assert_eq!(parse_reply(b"*3\r\n", &limits), Err(RespError::BadArrayLen));
}

#[test]
fn a_huge_declared_array_allocates_only_for_what_arrived() {
    // A million elements announced, two present: answered "need more", not an allocation of a
    // million replies (nothing to assert on memory here beyond not aborting; the capacity bound is
    // `min(len, bytes / 3)`).
    assert_eq!(parse(b"*1048576\r\n:1\r\n:2\r\n"), Ok(None));
    assert_eq!(parse(b"$536870912\r\nabc"), Ok(None));
}

#[test]
fn nesting_is_limited() {
    let nested = |depth: usize| {
        let mut buf = b"*1\r\n".repeat(depth - 1);
        buf.extend_from_slice(b"*0\r\n");
        buf
    };
    let ok = nested(MAX_DEPTH);
    assert!(parse(&ok).unwrap().is_some());
    let deep = nested(MAX_DEPTH + 1);
    assert_eq!(parse(&deep), Err(RespError::TooDeep));
    // Decided on the type byte of the array that is too deep, before its length.
    let cut = 4 * MAX_DEPTH + 1;
    assert_eq!(parse(&deep[..cut]), Err(RespError::TooDeep));
    assert_eq!(parse(&deep[..cut - 1]), Ok(None));
    // Far deeper input is rejected without recursing into it.
    assert_eq!(parse(&b"*1\r\n".repeat(100_000)), Err(RespError::TooDeep));
}

#[test]
fn the_fuzz_checks_hold_on_handwritten_inputs() {
    for data in [
        &b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"[..],
        b"*4\r\n:1\r\n:0\r\n:100\r\n:9\r\n+tail",
        b"$-1\r\n",
        b"-NOSCRIPT No matching script\r\n",
        b"+O\rK",
        b"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n",
        b"$20\r\nabcdefghijklmnopqrst\r\n",
    ] {
        fuzzing::decision_is_stable(data);
    }
}
