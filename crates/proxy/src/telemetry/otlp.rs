//! OTLP's protobuf messages, written straight from Rampart's own records into a worker's export
//! buffer: a span ([`write_span`]) or a log record ([`write_log`]) when it ends, the request around
//! a batch of them ([`envelope`]) when it is exported. No message is built as a tree of owned
//! values first (as `opentelemetry-proto`'s prost types would have it: an allocation per
//! attribute); the field numbers are those of `opentelemetry/proto` v1 (trace, logs, common,
//! resource), and the tests read what is written back with `opentelemetry-proto`'s types.

/// A span's kind (`Span.SpanKind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanKind {
    Server = 2,
    Client = 3,
}

/// An attribute's value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value<'a> {
    Str(&'a [u8]),
    Int(i64),
    Bool(bool),
}

/// One attribute.
pub type Attribute<'a> = (&'a str, Value<'a>);

/// A span event: a moment in the span, with attributes.
#[derive(Debug, Clone, Copy)]
pub struct Event<'a> {
    pub time: u64,
    pub name: &'static str,
    pub attributes: &'a [Attribute<'a>],
}

/// What one span says.
#[derive(Debug, Clone, Copy)]
pub struct SpanData<'a> {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub parent: Option<[u8; 8]>,
    /// The parent is another process's (a caller's span).
    pub remote_parent: bool,
    /// The W3C `tracestate` the span's context carries.
    pub trace_state: &'a [u8],
    /// The W3C trace flags (bit 0: sampled).
    pub flags: u8,
    /// The name, written as its parts joined by a space (`GET api`).
    pub name: [&'a [u8]; 2],
    pub kind: SpanKind,
    /// Unix nanoseconds.
    pub start: u64,
    pub end: u64,
    pub attributes: &'a [Attribute<'a>],
    pub events: &'a [Event<'a>],
    /// An error status with its message, or unset.
    pub error: Option<&'a [u8]>,
}

/// The span a log record belongs to: trace id, span id, W3C flags.
pub type SpanRef = ([u8; 16], [u8; 8], u8);

/// What one log record says: its line and, for an access log line, the request's span.
#[derive(Debug, Clone, Copy)]
pub struct LogData<'a> {
    pub time: u64,
    pub body: &'a [u8],
    pub trace: Option<SpanRef>,
    pub attributes: &'a [Attribute<'a>],
}

const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;
const FIXED32: u8 = 5;

#[inline]
fn varint(out: &mut Vec<u8>, mut v: u64) {
    if v < 0x80 {
        out.push(v as u8);
        return;
    }
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[inline]
fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

#[inline]
fn tag(out: &mut Vec<u8>, field: u32, wire: u8) {
    let key = field << 3 | u32::from(wire);
    if key < 0x80 {
        out.push(key as u8);
    } else {
        varint(out, u64::from(key));
    }
}

#[inline]
fn bytes(out: &mut Vec<u8>, field: u32, b: &[u8]) {
    tag(out, field, LEN);
    varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

#[inline]
fn fixed64(out: &mut Vec<u8>, field: u32, v: u64) {
    tag(out, field, FIXED64);
    out.extend_from_slice(&v.to_le_bytes());
}

#[inline]
fn fixed32(out: &mut Vec<u8>, field: u32, v: u32) {
    tag(out, field, FIXED32);
    out.extend_from_slice(&v.to_le_bytes());
}

#[inline]
fn uint(out: &mut Vec<u8>, field: u32, v: u64) {
    tag(out, field, VARINT);
    varint(out, v);
}

/// Octets of a length-delimited field of `len` content octets (tag of a field below 16, length,
/// content).
#[inline]
fn delimited_len(len: usize) -> usize {
    1 + varint_len(len as u64) + len
}

/// The content length of an `AnyValue`.
#[inline]
fn any_value_len(value: &Value<'_>) -> usize {
    match *value {
        Value::Str(s) => delimited_len(s.len()),
        Value::Bool(_) => 2,
        Value::Int(i) => 1 + varint_len(i as u64),
    }
}

/// The content length of a `KeyValue`.
#[inline]
fn attribute_len((key, value): &Attribute<'_>) -> usize {
    delimited_len(key.len()) + delimited_len(any_value_len(value))
}

/// Writes attributes straight into the span being written (see [`write_span`]): no list of them
/// is made first, and a key known where it is written is copied as a constant.
pub struct AttributeWriter<'b> {
    out: &'b mut Vec<u8>,
}

impl AttributeWriter<'_> {
    #[inline(always)]
    pub fn add(&mut self, key: &str, value: Value<'_>) {
        attribute(self.out, 9, &(key, value));
    }

    /// A text attribute, left out when it is absent or empty.
    #[inline(always)]
    pub fn text(&mut self, key: &str, value: Option<&[u8]>) {
        if let Some(v) = value.filter(|v| !v.is_empty()) {
            self.add(key, Value::Str(v));
        }
    }
}

/// A `KeyValue` in field `field` (below 16), its lengths known before it is written.
#[inline(always)]
fn attribute(out: &mut Vec<u8>, field: u32, kv: &Attribute<'_>) {
    debug_assert!(field < 16);
    let (key, value) = kv;
    let key = key.as_bytes();
    // Where every length fits one octet (nearly always), each header goes as one small copy.
    match *value {
        Value::Str(v) if key.len() + v.len() < 0x80 - 6 => {
            let len = key.len() + v.len() + 6;
            out.reserve(len + 2);
            out.extend_from_slice(&[(field << 3) as u8 | LEN, len as u8, 0x0a, key.len() as u8]);
            out.extend_from_slice(key);
            out.extend_from_slice(&[0x12, v.len() as u8 + 2, 0x0a, v.len() as u8]);
            out.extend_from_slice(v);
            return;
        }
        Value::Bool(b) if key.len() < 0x80 - 6 => {
            out.extend_from_slice(&[(field << 3) as u8 | LEN, key.len() as u8 + 6, 0x0a, key.len() as u8]);
            out.extend_from_slice(key);
            out.extend_from_slice(&[0x12, 2, 0x10, u8::from(b)]);
            return;
        }
        Value::Int(i) if key.len() < 0x80 - 15 => {
            let int_len = varint_len(i as u64);
            out.extend_from_slice(&[
                (field << 3) as u8 | LEN,
                (key.len() + int_len + 5) as u8,
                0x0a,
                key.len() as u8,
            ]);
            out.extend_from_slice(key);
            out.extend_from_slice(&[0x12, int_len as u8 + 1, 0x18]);
            varint(out, i as u64);
            return;
        }
        _ => {}
    }
    long_attribute(out, field, kv);
}

/// A `KeyValue` some length of which takes more than one octet.
#[cold]
fn long_attribute(out: &mut Vec<u8>, field: u32, kv: &Attribute<'_>) {
    let (key, value) = kv;
    let key = key.as_bytes();
    let len = attribute_len(kv);
    tag(out, field, LEN);
    varint(out, len as u64);
    bytes(out, 1, key);
    any_value(out, 2, value);
}

/// An `AnyValue` in field `field`.
#[inline]
fn any_value(out: &mut Vec<u8>, field: u32, value: &Value<'_>) {
    tag(out, field, LEN);
    varint(out, any_value_len(value) as u64);
    match *value {
        Value::Str(s) => bytes(out, 1, s),
        Value::Bool(b) => uint(out, 2, u64::from(b)),
        Value::Int(i) => uint(out, 3, i as u64),
    }
}

/// The content length of an `Event`.
fn event_len(e: &Event<'_>) -> usize {
    9 + delimited_len(e.name.len())
        + e.attributes
            .iter()
            .map(|a| delimited_len(attribute_len(a)))
            .sum::<usize>()
}

/// Appends `span` as a `ScopeSpans.spans` entry (field 2), with its `attributes` and those
/// `more` writes. Its content is written in place behind two octets left for its length, which
/// fit a span of 128 to 16,383 octets (nearly every one): the content of another is moved.
pub fn write_span(out: &mut Vec<u8>, span: &SpanData<'_>, more: impl FnOnce(&mut AttributeWriter<'_>)) {
    let at = out.len();
    out.extend_from_slice(&[(2 << 3) | LEN, 0, 0]);
    write_span_content(out, span, more);
    let len = out.len() - at - 3;
    if varint_len(len as u64) == 2 {
        out[at + 1..at + 3].copy_from_slice(&[len as u8 | 0x80, (len >> 7) as u8]);
    } else {
        let mut prefix = Vec::with_capacity(4);
        varint(&mut prefix, len as u64);
        out.splice(at + 1..at + 3, prefix);
    }
}

fn write_span_content(body: &mut Vec<u8>, span: &SpanData<'_>, more: impl FnOnce(&mut AttributeWriter<'_>)) {
    bytes(body, 1, &span.trace_id);
    bytes(body, 2, &span.span_id);
    if !span.trace_state.is_empty() {
        bytes(body, 3, span.trace_state);
    }
    if let Some(parent) = &span.parent {
        bytes(body, 4, parent);
    }
    let [first, second] = span.name;
    tag(body, 5, LEN);
    let sep = usize::from(!second.is_empty());
    varint(body, (first.len() + sep + second.len()) as u64);
    body.extend_from_slice(first);
    if sep == 1 {
        body.push(b' ');
        body.extend_from_slice(second);
    }
    uint(body, 6, span.kind as u64);
    fixed64(body, 7, span.start);
    fixed64(body, 8, span.end.max(span.start));
    for a in span.attributes {
        attribute(body, 9, a);
    }
    more(&mut AttributeWriter { out: body });
    for e in span.events {
        tag(body, 11, LEN);
        varint(body, event_len(e) as u64);
        fixed64(body, 1, e.time);
        bytes(body, 2, e.name.as_bytes());
        for a in e.attributes {
            attribute(body, 3, a);
        }
    }
    if let Some(message) = span.error {
        tag(body, 15, LEN);
        varint(body, (delimited_len(message.len()) + 2) as u64);
        bytes(body, 2, message);
        uint(body, 3, 2); // STATUS_CODE_ERROR
    }
    // W3C flags, with whether the parent is another process's known (bit 8) and said (bit 9).
    let remote = if span.remote_parent { 0x200 } else { 0 };
    // Field 16: a two-octet tag.
    tag(body, 16, FIXED32);
    body.extend_from_slice(&(u32::from(span.flags) | 0x100 | remote).to_le_bytes());
}

/// Appends `log` as a `ScopeLogs.log_records` entry (field 2), at severity INFO.
pub fn write_log(out: &mut Vec<u8>, log: &LogData<'_>) {
    let body = Value::Str(log.body);
    let len = 9 // time
        + 2 // severity number
        + delimited_len(4) // severity text
        + delimited_len(any_value_len(&body))
        + log.attributes.iter().map(|a| delimited_len(attribute_len(a))).sum::<usize>()
        + log.trace.map_or(0, |_| 5 + delimited_len(16) + delimited_len(8))
        + 9; // observed time
    tag(out, 2, LEN);
    varint(out, len as u64);
    fixed64(out, 1, log.time);
    uint(out, 2, 9); // SEVERITY_NUMBER_INFO
    bytes(out, 3, b"INFO");
    any_value(out, 5, &body);
    for a in log.attributes {
        attribute(out, 6, a);
    }
    if let Some((trace_id, span_id, flags)) = &log.trace {
        fixed32(out, 8, u32::from(*flags));
        bytes(out, 9, trace_id);
        bytes(out, 10, span_id);
    }
    fixed64(out, 11, log.time);
}

/// Where the first `n` entries (spans or log records, as [`write_span`] and [`write_log`] wrote
/// them) of `batch` end: a byte offset (the whole batch when it holds `n` or fewer).
pub fn entries_end(batch: &[u8], n: usize) -> usize {
    let mut at = 0;
    for _ in 0..n {
        // The tag (one byte: field 2, length-delimited), the length, the message.
        let mut len = 0usize;
        let mut shift = 0;
        let mut i = at + 1;
        while let Some(&b) = batch.get(i) {
            len |= usize::from(b & 0x7f) << shift;
            shift += 7;
            i += 1;
            if b < 0x80 {
                break;
            }
        }
        if i >= batch.len() && len > 0 {
            return batch.len();
        }
        at = (i + len).min(batch.len());
        if at == batch.len() {
            break;
        }
    }
    at
}

/// The export request around a batch of entries written by [`write_span`] (or [`write_log`]):
/// `ExportTraceServiceRequest { resource_spans: [ResourceSpans { resource, scope_spans: [
/// ScopeSpans { scope: rampart, spans: batch }] }] }` (the logs' messages have the same shape).
/// With `grpc`, in gRPC's length-prefixed frame.
pub fn envelope(resource: &[(String, String)], batch: &[u8], grpc: bool) -> Vec<u8> {
    let mut scope = Vec::with_capacity(32);
    bytes(&mut scope, 1, b"rampart");
    bytes(&mut scope, 2, env!("CARGO_PKG_VERSION").as_bytes());
    let mut res = Vec::with_capacity(128);
    for (k, v) in resource {
        attribute(&mut res, 1, &(k.as_str(), Value::Str(v.as_bytes())));
    }
    // ScopeSpans / ScopeLogs: scope (1), entries (already tagged 2).
    let scoped_len = 1 + varint_len(scope.len() as u64) + scope.len() + batch.len();
    // ResourceSpans / ResourceLogs: resource (1), scoped (2).
    let resourced_len = 1 + varint_len(res.len() as u64) + res.len() + 1 + varint_len(scoped_len as u64) + scoped_len;
    let total = 1 + varint_len(resourced_len as u64) + resourced_len;
    let mut out = Vec::with_capacity(total + 5);
    if grpc {
        out.push(0); // not compressed
        out.extend_from_slice(&(total as u32).to_be_bytes());
    }
    tag(&mut out, 1, LEN);
    varint(&mut out, resourced_len as u64);
    bytes(&mut out, 1, &res);
    tag(&mut out, 2, LEN);
    varint(&mut out, scoped_len as u64);
    bytes(&mut out, 1, &scope);
    out.extend_from_slice(batch);
    debug_assert_eq!(out.len(), total + if grpc { 5 } else { 0 });
    out
}
