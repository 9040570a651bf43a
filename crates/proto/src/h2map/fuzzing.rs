//! The properties the HTTP/2 fuzz targets check (and the corpus replay tests re-check).
//!
//! `h2_request`: an HTTP/2 request either is refused, or is laid out as an owned head with the
//! same method, target and host, and a body length that matches the stream's; and the layout
//! ([`lay_out_request`]) is the same owned head ([`RequestHead::same_request`]) as the HTTP/1
//! codec makes of the HTTP/1.1 head the request stands for ([`request_head`]): the same fields,
//! facts and body length, or the same refusal. Both codecs' heads are the one owned type.

use super::{is_token_lower, lay_out_request, request_head, LayoutError, RequestKind};
use crate::h1::{parse_request, Framing, Limits};
use crate::message::{BodyLength, Protocol, RequestHead};

/// Reads fuzz input as an HTTP/2 request: a flags byte (bit 0: END_STREAM on the head; bits 1-2:
/// which limits apply), then `\n`-separated lines: `:method`, `:authority`, `:path`, `:protocol`
/// (an empty line is absent, except for the method), then fields as `name\0value` (a name
/// beginning with `:` is one more pseudo-header field, where the field block has it).
pub fn request_translation_holds(data: &[u8]) {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let mut lines = rest.split(|&b| b == b'\n');
    let mut pseudo_line = || lines.next().filter(|l| !l.is_empty());
    let method = pseudo_line().unwrap_or(b"GET");
    let (authority, path, protocol) = (pseudo_line(), pseudo_line(), pseudo_line());
    let mut fields: Vec<(&[u8], &[u8])> = vec![(b":method", method)];
    let named: [(&[u8], _); 3] = [(b":authority", authority), (b":path", path), (b":protocol", protocol)];
    fields.extend(named.into_iter().filter_map(|(n, v)| Some((n, v?))));
    fields.extend(lines.filter_map(|l| {
        let at = l.iter().position(|&b| b == 0)?;
        Some((&l[..at], &l[at + 1..]))
    }));
    let end_stream = flags & 1 == 1;
    let limits = match (flags >> 1) & 3 {
        0 => Limits {
            max_request_line: usize::MAX,
            max_head: usize::MAX,
            max_fields: usize::MAX,
        },
        1 => Limits {
            max_request_line: 24,
            max_head: 160,
            max_fields: 3,
        },
        2 => Limits {
            max_request_line: 64,
            max_head: 64,
            max_fields: 1,
        },
        _ => Limits::default(),
    };
    let key = b"dGhlIHNhbXBsZSBub25jZQ==";
    let laid_out =
        lay_out_request(fields.iter().copied(), end_stream, key, &limits, Default::default()).map_err(|(e, _)| e);
    let mut out = Vec::new();
    let kind = match request_head(fields.iter().copied(), end_stream, key, &mut out) {
        Ok(kind) => kind,
        Err(e) => {
            assert_eq!(laid_out.err(), Some(LayoutError::Malformed(e)), "refused alike");
            return;
        }
    };
    let mut head = RequestHead::default();
    let parsed = match parse_request(&out, &limits, &mut head) {
        Ok(Some(parsed)) => parsed,
        Err(e) => {
            assert_eq!(
                laid_out.err(),
                Some(LayoutError::Refused(e)),
                "{:?}",
                String::from_utf8_lossy(&out)
            );
            return;
        }
        Ok(None) => panic!("a translated head is complete: {:?}", String::from_utf8_lossy(&out)),
    };
    assert_eq!(parsed.len, out.len(), "one head, nothing behind it");
    head.attach(out.clone(), 0, parsed.len);
    match kind {
        RequestKind::Plain => assert_eq!(head.method(), method),
        RequestKind::WebSocket => assert!(head.upgrade && head.method() == b"GET"),
    }
    assert_eq!(Some(head.target()), path);
    if let Some(authority) = authority {
        assert_eq!(head.host(), Some(authority));
    }
    let has_length = fields.iter().any(|(n, _)| *n == b"content-length");
    match parsed.framing {
        Framing::Chunked => assert!(!end_stream && !has_length && kind == RequestKind::Plain),
        Framing::Length(_) => assert!(has_length),
        Framing::None => assert!(end_stream || has_length || kind == RequestKind::WebSocket),
        Framing::UntilClose => panic!("a request is never delimited by close"),
    }
    assert_eq!(head.body, BodyLength::of_framing(parsed.framing));

    // The layout is the head the HTTP/1 codec made of the text, but for the protocol and the
    // framing field (the HTTP/1.1 head's way of saying the length is unknown).
    let (laid, laid_kind) = match laid_out {
        Ok(laid) => laid,
        Err(e) => panic!("laid out alike: {e:?} for {:?}", String::from_utf8_lossy(&out)),
    };
    assert_eq!(laid_kind, kind);
    assert_eq!(laid.protocol, Protocol::Http2);
    if parsed.framing == Framing::Chunked {
        let last = head.fields.pop().map(|f| f.name(head.bytes()).to_vec());
        assert_eq!(last, Some(b"transfer-encoding".to_vec()));
    }
    head.protocol = Protocol::Http2;
    assert!(laid.same_request(&head), "{laid:?} against {head:?}");
}

/// The property the `h2_fields` fuzz target checks: whatever fields a neutral message holds
/// (fuzz input: `name\0value` lines; the first byte's low bit says whether they are trailers,
/// which makes no difference to the rules), those [`super::crosses_into_h2`] lets out are only
/// fields HTTP/2 may carry, and they come back from Rampart's HPACK encoder and decoder as
/// lowercase tokens with their values, in order.
pub fn fields_mapping_holds(data: &[u8]) {
    let Some((_, rest)) = data.split_first() else {
        return;
    };
    let pairs: Vec<(&[u8], &[u8])> = rest
        .split(|&b| b == b'\n')
        .filter_map(|l| {
            let at = l.iter().position(|&b| b == 0)?;
            Some((&l[..at], &l[at + 1..]))
        })
        .collect();
    let crossing: Vec<(&[u8], &[u8])> = pairs
        .iter()
        .copied()
        .filter(|(n, v)| super::crosses_into_h2(n, v))
        .collect();
    let mut block = Vec::new();
    crate::hpack::Encoder::default().encode(crossing.iter().copied(), &mut block);
    let mut out = Vec::new();
    let mut list = Vec::new();
    crate::hpack::Decoder::new(4096, usize::MAX)
        .decode(&block, &mut out, |f| list.push(f))
        .expect("the encoder's block decodes");
    assert_eq!(list.len(), crossing.len());
    for (f, (name, value)) in list.iter().zip(&crossing) {
        let (n, v) = (f.name(&out), f.value(&out));
        assert!(is_token_lower(n), "{n:?} is a lowercase token");
        assert_eq!(n, name.to_ascii_lowercase());
        assert_eq!(v, *value);
        assert!(!super::is_connection_specific(n, v));
        assert!(!v.iter().any(|b| matches!(b, b'\r' | b'\n' | 0)));
    }
}
