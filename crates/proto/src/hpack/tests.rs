use super::*;

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn decode(d: &mut Decoder, block: &[u8]) -> Result<Vec<(String, String)>, HpackError> {
    let mut out = Vec::new();
    let mut fields = Vec::new();
    d.decode(block, &mut out, |f| fields.push(f))?;
    let text = |r: (u32, u32)| String::from_utf8_lossy(&out[r.0 as usize..r.1 as usize]).into_owned();
    Ok(fields.into_iter().map(|f| (text(f.name), text(f.value))).collect())
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect()
}

#[test]
fn integers_as_rfc_7541_c1_writes_them() {
    let mut out = Vec::new();
    write_int(&mut out, 0, 5, 10);
    assert_eq!(out, [0x0a]);
    out.clear();
    write_int(&mut out, 0, 5, 1337);
    assert_eq!(out, [0x1f, 0x9a, 0x0a]);
    assert_eq!(read_int(&out, 5), Ok((1337, 3)));
    out.clear();
    write_int(&mut out, 0, 8, 42);
    assert_eq!(out, [0x2a]);
    assert_eq!(read_int(&[0x1f, 0x9a], 5), Err(HpackError::Truncated));
    assert_eq!(
        read_int(&[0x1f, 0xff, 0xff, 0xff, 0xff, 0x7f], 5),
        Err(HpackError::IntegerOverflow)
    );
}

/// RFC 7541 C.3 and C.4: three requests on one connection, without and with Huffman coding.
#[test]
fn the_rfc_request_examples_decode_and_encode_alike() {
    let first = [
        (":method", "GET"),
        (":scheme", "http"),
        (":path", "/"),
        (":authority", "www.example.com"),
    ];
    let second = [
        (":method", "GET"),
        (":scheme", "http"),
        (":path", "/"),
        (":authority", "www.example.com"),
        ("cache-control", "no-cache"),
    ];
    let third = [
        (":method", "GET"),
        (":scheme", "https"),
        (":path", "/index.html"),
        (":authority", "www.example.com"),
        ("custom-key", "custom-value"),
    ];
    let plain = [
        hex("8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d"),
        hex("8286 84be 5808 6e6f 2d63 6163 6865"),
        hex("8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65"),
    ];
    let huffman = [
        hex("8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff"),
        hex("8286 84be 5886 a8eb 1064 9cbf"),
        hex("8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf"),
    ];
    let lists: [&[(&str, &str)]; 3] = [&first, &second, &third];
    for blocks in [&plain, &huffman] {
        let mut d = Decoder::new(4096, 16 * 1024);
        for (block, list) in blocks.iter().zip(lists) {
            assert_eq!(decode(&mut d, block).unwrap(), pairs(list));
        }
    }
    // The encoder makes the Huffman examples byte for byte.
    let mut e = Encoder::default();
    for (block, list) in huffman.iter().zip(lists) {
        let mut out = Vec::new();
        e.encode(list.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())), &mut out);
        assert_eq!(&out, block);
    }
}

#[test]
fn blocks_round_trip_through_a_small_table_that_evicts() {
    let mut e = Encoder::new(256);
    let mut d = Decoder::new(256, 64 * 1024);
    for i in 0..200 {
        let value = format!("value-{i}-{}", "x".repeat(i % 50));
        let list = [
            (":status", "200"),
            ("content-type", "application/grpc"),
            ("x-request", value.as_str()),
            ("authorization", "Bearer secret"),
            ("x-same", "same"),
        ];
        let mut out = Vec::new();
        e.encode(list.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())), &mut out);
        assert_eq!(decode(&mut d, &out).unwrap(), pairs(&list), "block {i}");
        // A secret is never indexed: its literal goes on every block.
        assert!(out.windows(6).any(|w| w == b"Bearer") || out.len() > 10);
        if i == 100 {
            // The peer shrinks the table: the next block announces it first.
            e.set_max_size(64);
        }
    }
}

#[test]
fn a_traceparent_goes_as_a_literal_and_makes_no_entry() {
    let mut e = Encoder::default();
    let mut d = Decoder::new(4096, 64 * 1024);
    let mut sizes = Vec::new();
    for i in 0..20u32 {
        let tp = format!("00-4bf92f3577b34da6a3ce929d0e0e{i:04x}-00f067aa0ba902b7-01");
        let list = [(":method", "GET"), ("traceparent", tp.as_str()), ("x-same", "same")];
        let mut out = Vec::new();
        e.encode(list.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())), &mut out);
        assert_eq!(decode(&mut d, &out).unwrap(), pairs(&list), "block {i}");
        // The value as it is, not Huffman-coded.
        assert!(out.windows(tp.len()).any(|w| w == tp.as_bytes()), "block {i}");
        sizes.push(out.len());
    }
    // After the first block, each is the same size: `:method` and `x-same` by index (no entry
    // of a `traceparent` pushed `x-same` out), the `traceparent` a literal, name and value.
    assert!(sizes[1] < sizes[0]);
    assert!(sizes[1..].iter().all(|&s| s == sizes[1]), "{sizes:?}");
    assert_eq!(sizes[1], 1 + (1 + 1 + 11 + 1 + 55) + 1, "{sizes:?}");
}

#[test]
fn fresh_value_fields_decode_with_the_others_around_them() {
    // Literals between indexed fields, one of them long: each decodes, and the fields encoded
    // after them still do.
    let mut e = Encoder::new(256);
    let mut d = Decoder::new(256, 64 * 1024);
    let long = "x".repeat(100);
    for i in 0..6u32 {
        let state = format!("congo=t{i}");
        let fresh = [
            ("x-probe", "probe"),
            ("tracestate", state.as_str()),
            ("x-long", long.as_str()),
        ];
        let mut out = Vec::new();
        e.begin(&mut out);
        e.field(b":method", b"GET", &mut out);
        for (name, value) in fresh {
            e.fresh_value_field(name.as_bytes(), value.as_bytes(), &mut out);
        }
        e.field(b"x-same", b"same", &mut out);
        let sent = [(":method", "GET"), fresh[0], fresh[1], fresh[2], ("x-same", "same")];
        assert_eq!(decode(&mut d, &out).unwrap(), pairs(&sent), "block {i}");
    }
}

#[test]
fn malformed_blocks_are_refused() {
    let mut d = Decoder::new(4096, 16 * 1024);
    assert_eq!(decode(&mut d, &[0x80]), Err(HpackError::BadIndex(0)));
    assert_eq!(decode(&mut d, &[0xbe]), Err(HpackError::BadIndex(62)));
    // A literal whose value runs past the block.
    assert_eq!(decode(&mut d, &hex("4003 6162 6305 61")), Err(HpackError::Truncated));
    // A size update above the limit, and one after a field.
    assert!(decode(&mut d, &hex("3fe1 1f")).is_ok(), "4,096: the limit itself");
    assert_eq!(decode(&mut d, &hex("3fe2 1f")), Err(HpackError::BadSizeUpdate));
    assert_eq!(decode(&mut d, &hex("8220")), Err(HpackError::BadSizeUpdate));
    assert!(decode(&mut d, &hex("2082")).is_ok());
}

/// An HPACK bomb: one large entry, then a block that names it again and again. The list's limit
/// stops it, and the table stays in step (the block after is read right).
#[test]
fn a_field_list_past_the_limit_is_refused_without_keeping_it() {
    let mut e = Encoder::new(4096);
    let mut d = Decoder::new(4096, 8 * 1024);
    let big = "b".repeat(900);
    let mut first = Vec::new();
    e.encode([(&b"x-big"[..], big.as_bytes())], &mut first);
    assert_eq!(decode(&mut d, &first).unwrap().len(), 1);
    // The entry again, 100 times: 100 octets of block for about 93 kB of fields.
    let bomb = vec![0xbe; 100];
    let mut out = Vec::new();
    let mut kept = 0;
    assert_eq!(d.decode(&bomb, &mut out, |_| kept += 1), Err(HpackError::ListTooLarge));
    assert!(
        out.len() <= 8 * 1024 && kept < 10,
        "{} octets, {kept} fields",
        out.len()
    );
    let mut next = Vec::new();
    e.encode([(&b"x-big"[..], big.as_bytes()), (b"x-after", b"1")], &mut next);
    assert_eq!(
        decode(&mut d, &next).unwrap(),
        pairs(&[("x-big", &big), ("x-after", "1")])
    );
}

#[test]
fn the_static_lookup_agrees_with_a_walk_of_the_table() {
    for (i, &(name, value)) in super::STATIC.iter().enumerate() {
        let walked = super::STATIC
            .iter()
            .position(|&(n, v)| n == name && v == value)
            .unwrap()
            + 1;
        assert_eq!(
            super::static_lookup(name, value),
            Some((walked, true)),
            "entry {}",
            i + 1
        );
        let first = super::STATIC.iter().position(|&(n, _)| n == name).unwrap() + 1;
        assert_eq!(super::static_lookup(name, b"\x00no such value"), Some((first, false)));
    }
    assert_eq!(super::static_lookup(b"x-unknown", b""), None);
}
