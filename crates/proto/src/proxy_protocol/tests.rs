use super::*;

fn addrs(src: &str, dst: &str) -> ProxyAddresses {
    ProxyAddresses {
        source: src.parse().unwrap(),
        destination: dst.parse().unwrap(),
    }
}

#[test]
fn v1_round_trip_ipv4_and_ipv6() {
    for a in [
        addrs("192.0.2.1:5000", "198.51.100.2:80"),
        addrs("[2001:db8::1]:5000", "[2001:db8::2]:443"),
    ] {
        let mut out = Vec::new();
        encode_v1(&a, &mut out);
        out.extend_from_slice(b"payload");
        let (h, used) = decode(&out).unwrap().unwrap();
        assert_eq!(h.version, ProxyVersion::V1);
        assert_eq!(h.addresses, Some(a));
        assert_eq!(&out[used..], b"payload");
    }
}

#[test]
fn v1_exact_text() {
    let mut out = Vec::new();
    encode_v1(&addrs("10.1.2.3:40000", "10.0.0.1:443"), &mut out);
    assert_eq!(out, b"PROXY TCP4 10.1.2.3 10.0.0.1 40000 443\r\n");
}

#[test]
fn v2_round_trip_ipv4_and_ipv6() {
    for a in [
        addrs("192.0.2.1:5000", "198.51.100.2:80"),
        addrs("[2001:db8::1]:5000", "[2001:db8::2]:443"),
    ] {
        let mut out = Vec::new();
        encode_v2(&a, &mut out);
        out.extend_from_slice(b"xyz");
        let (h, used) = decode(&out).unwrap().unwrap();
        assert_eq!(h.version, ProxyVersion::V2);
        assert_eq!(h.addresses, Some(a));
        assert_eq!(&out[used..], b"xyz");
    }
}

#[test]
fn mixed_families_become_ipv6() {
    let mut out = Vec::new();
    encode_v1(&addrs("192.0.2.1:1", "[2001:db8::2]:2"), &mut out);
    assert_eq!(out, b"PROXY TCP6 ::ffff:192.0.2.1 2001:db8::2 1 2\r\n");
}

#[test]
fn every_prefix_of_a_valid_header_asks_for_more() {
    let a = addrs("192.0.2.1:5000", "198.51.100.2:80");
    for encode in [encode_v1, encode_v2] {
        let mut out = Vec::new();
        encode(&a, &mut out);
        for cut in 0..out.len() {
            assert_eq!(decode(&out[..cut]), Ok(None), "prefix of {cut} bytes");
        }
    }
}

#[test]
fn unknown_and_local_carry_no_addresses() {
    let (h, used) = decode(b"PROXY UNKNOWN whatever\r\nrest").unwrap().unwrap();
    assert_eq!((h.addresses, used), (None, 24));
    let mut local = V2_SIGNATURE.to_vec();
    local.extend_from_slice(&[0x20, 0x00, 0, 0]);
    let (h, used) = decode(&local).unwrap().unwrap();
    assert_eq!((h.addresses, used), (None, 16));
}

#[test]
fn malformed_headers_are_rejected() {
    let cases: &[(&[u8], ProxyError)] = &[
        (b"GET / HTTP/1.1\r\n", ProxyError::NotProxy),
        (b"PROXX TCP4", ProxyError::NotProxy),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n", ProxyError::V1Malformed),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 01 2\r\n", ProxyError::V1Malformed),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 70000\r\n", ProxyError::V1Malformed),
        (b"PROXY TCP4 ::1 5.6.7.8 1 2\r\n", ProxyError::V1Malformed),
        (b"PROXY TCP5 1.2.3.4 5.6.7.8 1 2\r\n", ProxyError::V1Malformed),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n", ProxyError::V1Malformed),
    ];
    for (input, want) in cases {
        assert_eq!(decode(input), Err(want.clone()), "{}", String::from_utf8_lossy(input));
    }
    let long = [b"PROXY TCP4 ".as_slice(), &[b'1'; 120]].concat();
    assert_eq!(decode(&long), Err(ProxyError::V1TooLong));
    let mut bad = V2_SIGNATURE.to_vec();
    bad.extend_from_slice(&[0x31, 0x11, 0, 12]);
    assert_eq!(decode(&bad), Err(ProxyError::V2BadVersionCommand(0x31)));
    let mut short = V2_SIGNATURE.to_vec();
    short.extend_from_slice(&[0x21, 0x11, 0, 4, 1, 2, 3, 4]);
    assert_eq!(decode(&short), Err(ProxyError::V2ShortAddresses));
}

#[test]
fn a_datagram_header_says_udp_in_its_protocol_byte() {
    let v4 = ProxyAddresses {
        source: "192.0.2.1:5353".parse().unwrap(),
        destination: "198.51.100.2:53".parse().unwrap(),
    };
    let (mut stream, mut datagram) = (Vec::new(), Vec::new());
    encode_v2(&v4, &mut stream);
    encode_v2_for(&v4, true, &mut datagram);
    assert_eq!((stream[13], datagram[13]), (0x11, 0x12));
    assert_eq!(stream[14..], datagram[14..], "only the protocol byte differs");
    let v6 = ProxyAddresses {
        source: "[2001:db8::1]:5353".parse().unwrap(),
        destination: "[2001:db8::2]:53".parse().unwrap(),
    };
    datagram.clear();
    encode_v2_for(&v6, true, &mut datagram);
    assert_eq!(datagram[13], 0x22);
}
