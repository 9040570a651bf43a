//! The OTLP writer read back with `opentelemetry-proto`'s prost types (the wire format's
//! reference implementation in Rust).

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use prost::Message;

use super::otlp::*;

fn value(attrs: &[KeyValue], key: &str) -> Option<any_value::Value> {
    attrs
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.clone()?.value)
}

fn resource() -> Vec<(String, String)> {
    vec![
        ("service.name".into(), "edge".into()),
        ("deployment.environment".into(), "test".into()),
    ]
}

#[test]
fn spans_read_back_as_written() {
    let long = "x".repeat(300);
    let waited = [("rampart.queue.waited_us", Value::Int(1500))];
    let events = [Event {
        time: 1_700_000_000_000_000_500,
        name: "rampart.queue.wait",
        attributes: &waited,
    }];
    let attrs = [
        ("http.request.method", Value::Str(b"GET")),
        ("http.response.status_code", Value::Int(502)),
        ("rampart.connection.reused", Value::Bool(true)),
    ];
    let server = SpanData {
        trace_id: [1; 16],
        span_id: [2; 8],
        parent: Some([3; 8]),
        remote_parent: true,
        trace_state: b"rojo=00f067aa0ba902b7",
        flags: 1,
        name: [b"GET", b"api"],
        kind: SpanKind::Server,
        start: 1_700_000_000_000_000_000,
        end: 1_700_000_000_002_000_000,
        attributes: &attrs,
        events: &events,
        error: Some(b"upstream_connect_failed"),
    };
    let client = SpanData {
        span_id: [4; 8],
        parent: Some([2; 8]),
        remote_parent: false,
        name: [b"GET", b""],
        kind: SpanKind::Client,
        attributes: &[],
        events: &[],
        error: None,
        trace_state: b"",
        ..server
    };
    let mut batch = Vec::new();
    // Attributes from the list and written in place, long and short, texts absent or empty left
    // out.
    write_span(&mut batch, &server, |w| {
        w.add("url.path", Value::Str(long.as_bytes()));
        w.add("rampart.negative", Value::Int(-3));
        w.text("rampart.absent", None);
        w.text("rampart.empty", Some(b""));
        w.text("user_agent.original", Some(b"probe/1"));
    });
    write_span(&mut batch, &client, |_| {});
    for grpc in [false, true] {
        let body = envelope(&resource(), &batch, grpc);
        let body = if grpc {
            assert_eq!(body[0], 0);
            let len = u32::from_be_bytes(body[1..5].try_into().unwrap()) as usize;
            assert_eq!(len, body.len() - 5);
            &body[5..]
        } else {
            &body[..]
        };
        let req = ExportTraceServiceRequest::decode(body).unwrap();
        assert_eq!(req.resource_spans.len(), 1);
        let rs = &req.resource_spans[0];
        let res = rs.resource.as_ref().unwrap();
        assert_eq!(
            value(&res.attributes, "service.name"),
            Some(any_value::Value::StringValue("edge".into()))
        );
        let scope = &rs.scope_spans[0];
        assert_eq!(scope.scope.as_ref().unwrap().name, "rampart");
        let [s, c] = &scope.spans[..] else { panic!("two spans") };
        assert_eq!(s.trace_id, vec![1; 16]);
        assert_eq!(s.span_id, vec![2; 8]);
        assert_eq!(s.parent_span_id, vec![3; 8]);
        assert_eq!(s.trace_state, "rojo=00f067aa0ba902b7");
        assert_eq!(s.name, "GET api");
        assert_eq!(s.kind, 2);
        assert_eq!(
            (s.start_time_unix_nano, s.end_time_unix_nano),
            (server.start, server.end)
        );
        assert_eq!(s.flags, 0x301, "sampled, with a remote parent");
        assert_eq!(c.flags, 0x101, "sampled, with a local parent");
        assert_eq!(
            value(&s.attributes, "http.response.status_code"),
            Some(any_value::Value::IntValue(502))
        );
        assert_eq!(
            value(&s.attributes, "rampart.negative"),
            Some(any_value::Value::IntValue(-3))
        );
        assert_eq!(
            value(&s.attributes, "rampart.connection.reused"),
            Some(any_value::Value::BoolValue(true))
        );
        assert_eq!(
            value(&s.attributes, "url.path"),
            Some(any_value::Value::StringValue(long.clone()))
        );
        assert_eq!(
            value(&s.attributes, "user_agent.original"),
            Some(any_value::Value::StringValue("probe/1".into()))
        );
        assert_eq!(s.attributes.len(), 6, "{:?}", s.attributes);
        assert_eq!(s.events.len(), 1);
        assert_eq!(s.events[0].name, "rampart.queue.wait");
        assert_eq!(s.events[0].time_unix_nano, events[0].time);
        assert_eq!(
            value(&s.events[0].attributes, "rampart.queue.waited_us"),
            Some(any_value::Value::IntValue(1500))
        );
        let status = s.status.as_ref().unwrap();
        assert_eq!((status.code, status.message.as_str()), (2, "upstream_connect_failed"));
        assert_eq!(c.name, "GET");
        assert_eq!(c.kind, 3);
        assert_eq!(c.parent_span_id, vec![2; 8]);
        assert!(c.status.is_none());
    }
}

#[test]
fn log_records_read_back_with_their_span() {
    let mut batch = Vec::new();
    let attrs = [("rampart.log", Value::Str(b"access"))];
    write_log(
        &mut batch,
        &LogData {
            time: 42,
            body: b"{\"status\":200}",
            trace: Some(([7; 16], [8; 8], 1)),
            attributes: &attrs,
        },
    );
    write_log(
        &mut batch,
        &LogData {
            time: 43,
            body: b"{\"listener\":\"l4\"}",
            trace: None,
            attributes: &[],
        },
    );
    let req = ExportLogsServiceRequest::decode(&envelope(&resource(), &batch, false)[..]).unwrap();
    let logs = &req.resource_logs[0].scope_logs[0].log_records;
    assert_eq!(logs.len(), 2);
    assert_eq!(logs[0].time_unix_nano, 42);
    assert_eq!(logs[0].severity_number, 9);
    assert_eq!(logs[0].severity_text, "INFO");
    assert_eq!(
        logs[0].body.as_ref().and_then(|b| b.value.clone()),
        Some(any_value::Value::StringValue("{\"status\":200}".into()))
    );
    assert_eq!(
        (logs[0].trace_id.clone(), logs[0].span_id.clone(), logs[0].flags),
        (vec![7; 16], vec![8; 8], 1)
    );
    assert_eq!(
        value(&logs[0].attributes, "rampart.log"),
        Some(any_value::Value::StringValue("access".into()))
    );
    assert!(logs[1].trace_id.is_empty());
}

#[test]
fn a_batch_splits_between_entries() {
    let mut batch = Vec::new();
    let long = vec![b'x'; 300];
    for body in [&b"short"[..], &long, b"third"] {
        write_log(
            &mut batch,
            &LogData {
                time: 1,
                body,
                trace: None,
                attributes: &[],
            },
        );
    }
    let first = entries_end(&batch, 1);
    let two = entries_end(&batch, 2);
    assert!(0 < first && first < two && two < batch.len());
    assert_eq!(entries_end(&batch, 3), batch.len());
    assert_eq!(entries_end(&batch, 9), batch.len());
    assert_eq!(entries_end(&batch, 0), 0);
    for (from, to, count) in [(0, first, 1), (first, two, 1), (two, batch.len(), 1), (0, two, 2)] {
        let req = ExportLogsServiceRequest::decode(&envelope(&resource(), &batch[from..to], false)[..]).unwrap();
        assert_eq!(req.resource_logs[0].scope_logs[0].log_records.len(), count);
    }
}

#[test]
fn spans_of_every_size_read_back_whole() {
    // Lengths of one, two and three octets in front of a span's content (the two-octet room left
    // for it is taken away from or added to).
    for size in [0, 100, 20_000] {
        let path = "p".repeat(size);
        let span = SpanData {
            trace_id: [1; 16],
            span_id: [2; 8],
            parent: None,
            remote_parent: false,
            trace_state: b"",
            flags: 1,
            name: [b"GET", b""],
            kind: SpanKind::Server,
            start: 1,
            end: 2,
            attributes: &[],
            events: &[],
            error: None,
        };
        let mut batch = b"before".to_vec();
        write_span(&mut batch, &span, |w| w.text("url.path", Some(path.as_bytes())));
        write_span(&mut batch, &span, |_| {});
        let body = envelope(&resource(), &batch[6..], false);
        let req = ExportTraceServiceRequest::decode(&body[..]).unwrap();
        let spans = &req.resource_spans[0].scope_spans[0].spans;
        assert_eq!(spans.len(), 2, "{size}");
        let expected = (size > 0).then(|| any_value::Value::StringValue(path.clone()));
        assert_eq!(value(&spans[0].attributes, "url.path"), expected, "{size}");
        assert_eq!(&batch[..6], b"before");
    }
}
