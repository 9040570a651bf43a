use std::sync::Arc;

use super::*;

fn slotted(filter: Filter) -> Arc<FilterInstance> {
    Arc::new(FilterInstance::unslotted(filter))
}

fn headers(set: &[(&str, &str)]) -> HeaderOps {
    let mut ops = HeaderOps::default();
    for (n, v) in set {
        ops.set(n, v);
    }
    ops
}

fn request_id() -> Arc<FilterInstance> {
    slotted(Filter::RequestId(RequestId {
        header: "x-request-id".into(),
        keep_incoming: true,
        echo: true,
    }))
}

#[test]
fn static_edits_before_any_dynamic_filter_fold_into_the_start() {
    let chain = build_chain(vec![
        slotted(Filter::RequestHeaders(RequestHeaders {
            ops: headers(&[("x-a", "1")]),
        })),
        slotted(Filter::RequestHeaders(RequestHeaders {
            ops: headers(&[("x-a", "2"), ("x-b", "3")]),
        })),
        slotted(Filter::ResponseHeaders(ResponseHeaders {
            ops: headers(&[("x-r", "1")]),
            always: false,
        })),
    ]);
    assert!(chain.is_empty(), "only static edits: nothing runs per request");
    assert_eq!(
        chain.request_edits.set,
        vec![
            ("x-a".to_string(), "2".to_string()),
            ("x-b".to_string(), "3".to_string())
        ]
    );
    assert_eq!(
        chain.response_edits.on_success.set,
        vec![("x-r".to_string(), "1".to_string())]
    );
}

#[test]
fn static_edits_after_a_dynamic_filter_keep_their_place() {
    let chain = build_chain(vec![
        slotted(Filter::RequestHeaders(RequestHeaders {
            ops: headers(&[("x-a", "1")]),
        })),
        request_id(),
        slotted(Filter::RequestHeaders(RequestHeaders {
            ops: headers(&[("x-request-id", "fixed")]),
        })),
        slotted(Filter::ResponseHeaders(ResponseHeaders {
            ops: headers(&[("x-r", "1")]),
            always: false,
        })),
    ]);
    // The first request edit folds; the one after request_id runs after it, per request. The
    // response edit comes after request_id in the chain, so responses meet it first: it folds.
    assert_eq!(chain.filters.len(), 2);
    assert_eq!(chain.filters[0].type_name(), "request_id");
    assert_eq!(chain.filters[1].type_name(), "request_headers");
    assert_eq!(chain.request_edits.set.len(), 1);
    assert_eq!(chain.response_edits.on_success.set.len(), 1);
}

#[test]
fn response_edits_fold_in_response_order() {
    // Responses run the chain backwards: the second filter's edits apply first, the first's last.
    let chain = build_chain(vec![
        slotted(Filter::ResponseHeaders(ResponseHeaders {
            ops: headers(&[("x-r", "outer")]),
            always: false,
        })),
        slotted(Filter::ResponseHeaders(ResponseHeaders {
            ops: headers(&[("x-r", "inner")]),
            always: false,
        })),
    ]);
    assert_eq!(
        chain.response_edits.on_success.set,
        vec![("x-r".to_string(), "outer".to_string())]
    );
    let before_dynamic = build_chain(vec![
        slotted(Filter::ResponseHeaders(ResponseHeaders {
            ops: headers(&[("x-r", "1")]),
            always: false,
        })),
        request_id(),
    ]);
    assert_eq!(
        before_dynamic.filters.len(),
        2,
        "request_id answers first, so the edit must wait"
    );
}

#[test]
fn compress_reads_response_headers_so_edits_it_meets_later_keep_their_place() {
    // Responses meet `compress` after the edits that follow it in the chain (folded into the
    // starting edits, which it reads) and before the edits that precede it (which stay filters).
    let chain = build_chain(vec![
        slotted(Filter::ResponseHeaders(ResponseHeaders {
            ops: headers(&[("x-before", "1")]),
            always: false,
        })),
        slotted(Filter::Compress(Compress::default())),
        slotted(Filter::ResponseHeaders(ResponseHeaders {
            ops: headers(&[("cache-control", "no-transform")]),
            always: false,
        })),
    ]);
    let types: Vec<&str> = chain.filters.iter().map(|f| f.type_name()).collect();
    assert_eq!(types, ["response_headers", "compress"]);
    assert_eq!(
        chain.response_edits.on_success.set,
        vec![("cache-control".to_string(), "no-transform".to_string())]
    );
    assert!(!chain.filters[1].edits_request_headers_per_request());
}

#[test]
fn response_edits_without_always_are_for_success_statuses_only() {
    let chain = build_chain(vec![
        slotted(Filter::ResponseHeaders(ResponseHeaders {
            ops: headers(&[("cache-control", "max-age=3600")]),
            always: false,
        })),
        slotted(Filter::ResponseHeaders(ResponseHeaders {
            ops: headers(&[("strict-transport-security", "max-age=63072000")]),
            always: true,
        })),
    ]);
    let names = |status: u16| -> Vec<String> {
        chain
            .response_edits
            .for_status(status)
            .set
            .iter()
            .map(|(n, _)| n.clone())
            .collect()
    };
    assert_eq!(names(200), ["strict-transport-security", "cache-control"]);
    assert_eq!(names(304), names(200));
    assert_eq!(names(404), ["strict-transport-security"]);
    assert_eq!(names(502), ["strict-transport-security"]);
}
