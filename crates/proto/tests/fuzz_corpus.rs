//! Replays every fuzz corpus input through its decoder, with the fuzz target's own checks.

use std::path::Path;

use rampart_proto::h1::{parse_request, parse_response, ChunkedDecoder, Limits};
use rampart_proto::proxy_protocol::decode;

/// Every input of one corpus (at least `min` of them).
fn corpus(target: &str, min: usize) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let inputs: Vec<Vec<u8>> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| std::fs::read(entry.unwrap().path()).unwrap())
        .collect();
    assert!(inputs.len() >= min, "corpus at {} looks empty", dir.display());
    inputs
}

#[test]
fn h1_request_corpus_replays_cleanly() {
    for data in corpus("h1_request", 8) {
        let mut head = rampart_proto::message::RequestHead::default();
        for cut in 0..=data.len() {
            if let Ok(Some(parsed)) = parse_request(&data[..cut], &Limits::default(), &mut head) {
                assert!(parsed.len <= cut);
                head.attach(data[..cut].to_vec(), 0, parsed.len);
                // The owned head reads its parts from its own bytes, all within the head.
                let within = |r: (u32, u32)| r.0 <= r.1 && r.1 as usize <= parsed.len;
                assert!(within(head.method) && within(head.target) && head.host.is_none_or(within));
                assert!(head.fields.iter().all(|f| within(f.name) && within(f.value)));
                assert!(!head.method().is_empty() && !head.target().is_empty());
            }
        }
    }
}

#[test]
fn h1_response_corpus_replays_cleanly() {
    for data in corpus("h1_response", 6) {
        let mut head = rampart_proto::message::ResponseHead::default();
        for head_request in [false, true] {
            if let Ok(Some(parsed)) = parse_response(&data, &Limits::default(), head_request, &mut head) {
                assert!(parsed.len <= data.len());
                head.attach(data[..parsed.len].to_vec(), 0, parsed.len);
                let within = |r: (u32, u32)| r.0 <= r.1 && r.1 as usize <= parsed.len;
                assert!(within(parsed.reason) && head.fields.iter().all(|f| within(f.name) && within(f.value)));
                assert!((100..=599).contains(&head.status));
            }
        }
    }
}

#[test]
fn h1_chunked_corpus_replays_cleanly() {
    for data in corpus("h1_chunked", 6) {
        let whole = ChunkedDecoder::new().advance(&data);
        let mut d = ChunkedDecoder::new();
        let mut used = 0;
        let mut split = Ok(());
        for b in data.chunks(1) {
            match d.advance(b) {
                Ok((n, _)) => used += n,
                Err(e) => {
                    split = Err(e);
                    break;
                }
            }
            if d.is_done() {
                break;
            }
        }
        match whole {
            Ok((n, _)) => assert_eq!((n, split), (used, Ok(()))),
            Err(e) => assert_eq!(split, Err(e)),
        }
    }
}

#[test]
fn proxy_protocol_corpus_replays_cleanly() {
    for data in corpus("proxy_protocol", 10) {
        if let Ok(Some((_, used))) = decode(&data) {
            assert!(used <= data.len());
        }
        // Every prefix too: a decoder must never panic on a partial read.
        for cut in 0..data.len().min(600) {
            let _ = decode(&data[..cut]);
        }
    }
}

#[test]
fn tls_peek_corpus_replays_cleanly() {
    use rampart_proto::tls_peek::{classify, FirstBytes};
    for data in corpus("tls_peek", 6) {
        let whole = classify(&data);
        for cut in 0..data.len() {
            let verdict = classify(&data[..cut]);
            assert!(
                verdict == FirstBytes::NeedMore || verdict == whole,
                "{data:?} cut at {cut}"
            );
        }
    }
}

#[test]
fn h2_request_corpus_replays_cleanly() {
    for data in corpus("h2_request", 6) {
        for cut in 0..=data.len() {
            rampart_proto::h2map::fuzzing::request_translation_holds(&data[..cut]);
        }
    }
}

#[test]
fn h2_fields_corpus_replays_cleanly() {
    for data in corpus("h2_fields", 5) {
        for cut in 0..=data.len() {
            rampart_proto::h2map::fuzzing::fields_mapping_holds(&data[..cut]);
        }
    }
}

#[test]
fn h2_frame_corpus_replays_cleanly() {
    for data in corpus("h2_frame", 7) {
        for cut in 0..=data.len() {
            rampart_proto::h2frame::fuzzing::frames_read_cleanly(&data[..cut]);
        }
    }
}

#[test]
fn h2_conn_corpus_replays_cleanly() {
    for data in corpus("h2_conn", 6) {
        for cut in 0..=data.len() {
            rampart_proto::h2conn::fuzzing::connection_survives(&data[..cut]);
        }
    }
}

#[test]
fn hpack_corpus_replays_cleanly() {
    for data in corpus("hpack", 8) {
        for cut in 0..=data.len() {
            rampart_proto::hpack::fuzzing::round_trip_holds(&data[..cut]);
        }
    }
}

#[test]
fn detect_corpus_replays_cleanly() {
    use rampart_proto::detect::{detect, Detected, Detection, Protocol, Wants};
    for data in corpus("detect", 12) {
        for http_head in [false, true] {
            let wants = Wants { http_head };
            let mut decided: Option<(usize, Detection)> = None;
            for cut in 0..=data.len() {
                let verdict = detect(&data[..cut], wants);
                match (&decided, &verdict) {
                    (Some((at, first)), _) => {
                        assert_eq!(first, &verdict, "{data:?}: decided at {at}, changed at {cut}")
                    }
                    (None, Detection::Done(d)) => {
                        assert!(
                            d.message_len <= cut,
                            "{data:?}: message_len {} beyond {cut}",
                            d.message_len
                        );
                        if d.protocol == Protocol::Unknown {
                            assert_eq!(d, &Detected::default());
                        }
                        decided = Some((cut, verdict));
                    }
                    (None, Detection::NeedMore) => {}
                }
            }
        }
    }
}

#[test]
fn detect_corpus_seeds_are_recognised() {
    use rampart_proto::detect::{detect, Detection, Protocol, Wants};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/detect");
    let wants = Wants { http_head: true };
    for (seed, protocol, host) in [
        ("tls13_openssl_sni_alpn", Protocol::Tls, Some("example.com")),
        ("tls13_two_records", Protocol::Tls, Some("example.com")),
        ("tls13_three_records_header_split", Protocol::Tls, Some("example.com")),
        ("tls13_openssl_4_records", Protocol::Tls, Some("big.example.org")),
        ("tls12_openssl_no_sni", Protocol::Tls, None),
        ("tls_alert_after_first_record", Protocol::Unknown, None),
        ("http11_get_host", Protocol::Http, Some("example.com:8080")),
        ("http10_absolute_form", Protocol::Http, Some("proxy.example.net")),
        ("h2_preface", Protocol::H2, None),
        ("ssh_banner", Protocol::Ssh, None),
        ("postgres_sslrequest", Protocol::Postgres, None),
        ("postgres_startup_v3", Protocol::Postgres, None),
        ("redis_ping", Protocol::Redis, None),
        ("proxy_v1_line", Protocol::Unknown, None),
        ("garbage", Protocol::Unknown, None),
    ] {
        let data = std::fs::read(dir.join(seed)).unwrap();
        let Detection::Done(d) = detect(&data, wants) else {
            panic!("{seed}: undecided")
        };
        assert_eq!(d.protocol, protocol, "{seed}");
        let name = if protocol == Protocol::Tls { d.sni } else { d.http_host };
        assert_eq!(name.as_deref(), host, "{seed}");
    }
}

#[test]
fn resp_corpus_replays_cleanly() {
    for data in corpus("resp", 12) {
        rampart_proto::resp::fuzzing::decision_is_stable(&data);
    }
}

#[test]
fn resp_corpus_seeds_parse_as_named() {
    use rampart_proto::resp::{parse_reply, RespError, RespLimits};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/resp");
    let limits = RespLimits::default();
    for (seed, verdict) in [
        ("simple_ok", Ok(true)),
        ("error_noscript", Ok(true)),
        ("script_reply", Ok(true)),
        ("array_nested", Ok(true)),
        ("array_depth_8", Ok(true)),
        ("array_truncated", Ok(false)),
        ("array_depth_9", Err(RespError::TooDeep)),
        ("bad_bulk_end", Err(RespError::BadBulkEnd)),
        ("bad_line_cr", Err(RespError::BadLineEnd)),
        ("integer_overflow", Err(RespError::BadInteger)),
        ("resp3_map", Err(RespError::UnknownType(b'%'))),
    ] {
        let data = std::fs::read(dir.join(seed)).unwrap();
        let parsed = parse_reply(&data, &limits).map(|r| r.is_some());
        assert_eq!(parsed, verdict, "{seed}");
    }
}

#[test]
fn trace_context_corpus_replays_cleanly() {
    for data in corpus("trace_context", 8) {
        rampart_proto::trace_context::round_trip_holds(&data);
    }
}
