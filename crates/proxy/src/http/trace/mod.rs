//! W3C Trace Context on proxied requests, and their spans (`[tracing]`). A request that comes
//! with a valid `traceparent` continues its trace, with the caller's sampling decision; one
//! without starts a new trace, sampled at the configured ratio. Either way the request gets a
//! server span of Rampart's own (its id is the access log's `span_id`), and each attempt at the
//! upstream a client span under it, whose id the upstream sees as its parent in the
//! `traceparent` Rampart writes in place of the client's; a `tracestate` goes on as it came
//! beside a valid `traceparent`, and is dropped beside none or a bad one (or when it is itself
//! invalid). The trace id goes into the access log. With a collector configured, the spans of a
//! sampled request (or of one a tail decision keeps) are written when it ends ([`span`]).

use std::cell::Cell;
use std::time::Instant;

use rampart_model::trace::TraceSettings;
use rampart_proto::message::RequestHead;
use rampart_proto::trace_context::{hex_into, parse_traceparent, TraceParent, TraceState, TRACEPARENT_LEN};

pub(crate) mod span;

/// The trace context of one request, shared (`Rc`) by its context and the head written for each
/// attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestTrace {
    /// The trace, the request's own (server) span in it, and the sampling flags.
    pub outgoing: TraceParent,
    /// The caller's span, when the request continued a trace.
    pub parent: Option<[u8; 8]>,
    /// The `tracestate` to send on, if any.
    pub tracestate: Option<Box<[u8]>>,
    /// Its spans may be exported: a collector is configured, and the request is sampled or a
    /// tail decision could keep it.
    pub recording: bool,
    /// The attempt whose head is being written (its client span is the upstream's parent), and
    /// the `traceparent` value it sends (written once an attempt: a head may be read twice).
    attempt: Cell<u8>,
    sent: Cell<[u8; TRACEPARENT_LEN]>,
    /// When the request waited in its upstream's queue: from, to.
    pub(crate) queued: Cell<Option<(Instant, Instant)>>,
    /// When a filter answered in place of the route.
    pub(crate) refused_at: Cell<Option<Instant>>,
}

impl RequestTrace {
    /// The trace context of `head` under `settings`; `random` gives 64 random bits.
    pub fn of(head: &RequestHead, settings: &TraceSettings, random: impl FnMut() -> u64) -> RequestTrace {
        // One walk over the fields, by length first (most are neither); a second for the
        // `tracestate` values only where there is one beside a valid `traceparent`.
        let (mut traceparent, mut traceparents, mut tracestate) = (None, 0, false);
        for (name, value) in head.fields_ref().iter() {
            match name.len() {
                11 if name.eq_ignore_ascii_case(b"traceparent") => {
                    traceparent.get_or_insert(value);
                    traceparents += 1;
                }
                10 => tracestate |= name.eq_ignore_ascii_case(b"tracestate"),
                _ => {}
            }
        }
        let incoming = parse_traceparent(traceparent.filter(|_| traceparents == 1).into_iter());
        let states = || {
            head.fields_ref()
                .iter()
                .filter(|(n, _)| n.eq_ignore_ascii_case(b"tracestate"))
                .map(|(_, v)| v)
        };
        let tracestate = incoming
            .filter(|_| tracestate)
            .and_then(|_| TraceState::parse(states()))
            .filter(|s| !s.is_empty())
            .map(|s| Box::from(s.as_bytes()));
        RequestTrace::continuing(incoming, tracestate, settings, random)
    }

    /// A new trace, or one continuing `incoming`.
    pub fn continuing(
        incoming: Option<TraceParent>,
        tracestate: Option<Box<[u8]>>,
        settings: &TraceSettings,
        mut random: impl FnMut() -> u64,
    ) -> RequestTrace {
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
        let trace = RequestTrace {
            outgoing,
            parent,
            tracestate,
            recording: settings.export.is_some() && (outgoing.sampled() || settings.has_tail_rules()),
            attempt: Cell::new(0),
            sent: Cell::new([0; TRACEPARENT_LEN]),
            queued: Cell::new(None),
            refused_at: Cell::new(None),
        };
        trace.sent.set(trace.sent_for(0));
        trace
    }

    /// The client span of attempt `index` (0 for the first): derived from the server span, so
    /// that the head written for the attempt and the span written at the end agree without
    /// keeping anything per attempt.
    pub fn attempt_span(&self, index: usize) -> [u8; 8] {
        let server = u64::from_be_bytes(self.outgoing.parent_id);
        let mut z = server.wrapping_add((index as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        if z == 0 || z == server {
            z = !server | 1;
        }
        z.to_be_bytes()
    }

    /// The attempt `index` begins: the heads written from now on name its span.
    pub fn attempt_begins(&self, index: usize) {
        let index = index.min(usize::from(u8::MAX)) as u8;
        if index != self.attempt.get() {
            self.attempt.set(index);
            self.sent.set(self.sent_for(usize::from(index)));
        }
    }

    /// The `traceparent` value sent upstream on the attempt going on.
    pub fn traceparent(&self) -> [u8; TRACEPARENT_LEN] {
        self.sent.get()
    }

    fn sent_for(&self, attempt: usize) -> [u8; TRACEPARENT_LEN] {
        TraceParent {
            parent_id: self.attempt_span(attempt),
            ..self.outgoing
        }
        .to_bytes()
    }

    /// The trace id as 32 lowercase hex digits (the access log's `trace_id`).
    pub fn trace_id_hex(&self) -> [u8; 32] {
        let mut out = [0u8; 32];
        hex_into(&self.outgoing.trace_id, &mut out);
        out
    }

    /// The request's (server) span id as 16 lowercase hex digits (the access log's `span_id`).
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
mod tests;
