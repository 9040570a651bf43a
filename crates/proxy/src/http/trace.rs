//! W3C Trace Context on proxied requests (`[tracing]`; issue 41, first part). A request that
//! comes with a valid `traceparent` continues its trace, with the caller's sampling decision; one
//! without starts a new trace, sampled at the configured ratio. Either way the request gets a
//! span id of Rampart's own, which the upstream sees as its parent in the `traceparent` Rampart
//! writes in place of the client's; a `tracestate` goes on as it came beside a valid
//! `traceparent`, and is dropped beside none or a bad one (or when it is itself invalid). The
//! trace id goes into the access log. Spans are not exported yet.

use rampart_model::trace::TraceSettings;
use rampart_proto::message::RequestHead;
use rampart_proto::trace_context::{hex_into, parse_traceparent, TraceParent, TraceState, TRACEPARENT_LEN};

/// The trace context of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestTrace {
    /// The trace, the request's own span in it, and the sampling flags, as sent upstream.
    pub outgoing: TraceParent,
    /// The caller's span, when the request continued a trace.
    pub parent: Option<[u8; 8]>,
    /// The `tracestate` to send on, if any.
    pub tracestate: Option<Box<[u8]>>,
    /// `outgoing` as the field value.
    traceparent: [u8; TRACEPARENT_LEN],
}

impl RequestTrace {
    /// The trace context of `head` under `settings`; `random` gives 64 random bits.
    pub fn of(head: &RequestHead, settings: &TraceSettings, mut random: impl FnMut() -> u64) -> RequestTrace {
        let named = |name: &'static [u8]| {
            head.fields_ref()
                .iter()
                .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v)
        };
        let incoming = parse_traceparent(named(b"traceparent"));
        let span_id = nonzero(&mut random).to_be_bytes();
        let (outgoing, parent) = match incoming {
            Some(caller) => (
                TraceParent {
                    parent_id: span_id,
                    ..caller
                },
                Some(caller.parent_id),
            ),
            None => {
                let mut trace_id = [0u8; 16];
                trace_id[..8].copy_from_slice(&nonzero(&mut random).to_be_bytes());
                trace_id[8..].copy_from_slice(&random().to_be_bytes());
                let draw = (random() >> 11) as f64 / (1u64 << 53) as f64;
                let sampled = draw < settings.sampling;
                let outgoing = TraceParent {
                    trace_id,
                    parent_id: span_id,
                    flags: u8::from(sampled),
                };
                (outgoing, None)
            }
        };
        let tracestate = incoming
            .and_then(|_| TraceState::parse(named(b"tracestate")))
            .filter(|s| !s.is_empty())
            .map(|s| Box::from(s.as_bytes()));
        RequestTrace {
            outgoing,
            parent,
            tracestate,
            traceparent: outgoing.to_bytes(),
        }
    }

    /// The `traceparent` value sent upstream.
    pub fn traceparent(&self) -> &[u8] {
        &self.traceparent
    }

    /// The trace id as 32 lowercase hex digits (the access log's `trace_id`).
    pub fn trace_id_hex(&self) -> [u8; 32] {
        let mut out = [0u8; 32];
        hex_into(&self.outgoing.trace_id, &mut out);
        out
    }

    /// The request's span id as 16 lowercase hex digits (the access log's `span_id`).
    pub fn span_id_hex(&self) -> [u8; 16] {
        let mut out = [0u8; 16];
        hex_into(&self.outgoing.parent_id, &mut out);
        out
    }
}

/// 64 random bits that are not all zero (an all-zero id is invalid).
fn nonzero(random: &mut impl FnMut() -> u64) -> u64 {
    random() | 1 << 63
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(fields: &[(&str, &str)]) -> RequestHead {
        let mut text = String::from("GET / HTTP/1.1\r\nhost: a\r\n");
        for (n, v) in fields {
            text.push_str(&format!("{n}: {v}\r\n"));
        }
        text.push_str("\r\n");
        let mut head = RequestHead::default();
        let limits = rampart_proto::h1::Limits::default();
        let parsed = rampart_proto::h1::parse_request(text.as_bytes(), &limits, &mut head)
            .unwrap()
            .unwrap();
        head.attach(text.into_bytes(), 0, parsed.len);
        head
    }

    fn counter() -> impl FnMut() -> u64 {
        let mut n = 0x1234_5678_9abc_def0u64;
        move || {
            n = n.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            n
        }
    }

    #[test]
    fn a_traceparent_is_continued_with_a_span_of_rampart_own() {
        let h = head(&[
            ("traceparent", "00-12345678901234567890123456789012-1234567890123456-01"),
            ("tracestate", "foo=1,bar=2"),
        ]);
        let t = RequestTrace::of(&h, &TraceSettings { sampling: 0.0 }, counter());
        assert_eq!(&t.trace_id_hex(), b"12345678901234567890123456789012");
        assert_eq!(t.parent, Some([0x12, 0x34, 0x56, 0x78, 0x90, 0x12, 0x34, 0x56]));
        assert_ne!(t.outgoing.parent_id, t.parent.unwrap());
        // The caller's decision, not the ratio.
        assert!(t.outgoing.sampled());
        assert_eq!(t.tracestate.as_deref(), Some(&b"foo=1,bar=2"[..]));
        let sent = std::str::from_utf8(t.traceparent()).unwrap();
        assert!(sent.starts_with("00-12345678901234567890123456789012-"), "{sent}");
        assert!(sent.ends_with("-01"), "{sent}");
        assert_eq!(&sent.as_bytes()[36..52], &t.span_id_hex());
    }

    #[test]
    fn without_a_valid_traceparent_a_new_trace_begins_and_tracestate_is_dropped() {
        for fields in [
            &[("tracestate", "foo=1")][..],
            &[
                ("traceparent", "00-00000000000000000000000000000000-1234567890123456-01"),
                ("tracestate", "foo=1"),
            ],
        ] {
            let t = RequestTrace::of(&head(fields), &TraceSettings { sampling: 1.0 }, counter());
            assert_ne!(t.outgoing.trace_id, [0; 16]);
            assert_eq!(t.parent, None);
            assert_eq!(t.tracestate, None);
            assert!(t.outgoing.sampled(), "ratio 1 samples every new trace");
            assert!(parse_traceparent(std::iter::once(t.traceparent())).is_some());
        }
        let never = RequestTrace::of(&head(&[]), &TraceSettings { sampling: 0.0 }, counter());
        assert!(!never.outgoing.sampled());
    }

    #[test]
    fn a_ratio_samples_about_that_share_of_new_traces() {
        let mut random = counter();
        let settings = TraceSettings { sampling: 0.25 };
        let h = head(&[]);
        let sampled = (0..4000)
            .filter(|_| RequestTrace::of(&h, &settings, &mut random).outgoing.sampled())
            .count();
        assert!((850..1150).contains(&sampled), "{sampled} of 4000");
    }
}
