use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use rampart_proto::detect::{Detected, Detection, Protocol, Wants};
use regex::bytes::RegexBuilder;

use super::{host_matches, strip_port, Decision, L4Filters, Peeked, TcpAction, TcpMatcher, TcpRoute, TcpRouting};
use crate::metrics::PerWorker;
use crate::route::HostMatch;

fn routing(matchers: Vec<TcpMatcher>) -> TcpRouting {
    TcpRouting {
        routes: matchers
            .into_iter()
            .enumerate()
            .map(|(i, matcher)| TcpRoute {
                name: format!("r{i}"),
                matcher,
                action: TcpAction::Reject,
                filters: L4Filters::default(),
                metrics: Arc::new(PerWorker::new(1)),
            })
            .collect(),
        peek_timeout: Duration::from_secs(3),
        peek_max: 16 << 10,
        wants: Wants::default(),
        default_metrics: Arc::new(PerWorker::new(1)),
    }
}

fn tls(sni: &str) -> Detection {
    Detection::Done(Detected {
        protocol: Protocol::Tls,
        sni: Some(sni.into()),
        alpn: vec![b"h2".to_vec()],
        ..Detected::default()
    })
}

fn peeked<'a>(bytes: &'a [u8], detection: &'a Detection, last: bool) -> Peeked<'a> {
    Peeked {
        bytes,
        detection,
        client: IpAddr::from([127, 0, 0, 1]),
        proxy_header: false,
        last,
    }
}

#[test]
fn the_first_route_that_accepts_decides() {
    let r = routing(vec![
        TcpMatcher {
            sni: Some(HostMatch::Exact("a.example".into())),
            ..TcpMatcher::default()
        },
        TcpMatcher {
            sni: Some(HostMatch::Suffix(".example".into())),
            ..TcpMatcher::default()
        },
    ]);
    assert_eq!(r.decide(&peeked(b"\x16", &tls("a.example"), false)), Decision::Route(0));
    assert_eq!(r.decide(&peeked(b"\x16", &tls("B.Example"), false)), Decision::Route(1));
    assert_eq!(r.decide(&peeked(b"\x16", &tls("example"), false)), Decision::Default);
    assert_eq!(r.decide(&peeked(b"\x16", &Detection::NeedMore, false)), Decision::Wait);
    assert_eq!(
        r.decide(&peeked(b"\x16", &Detection::NeedMore, true)),
        Decision::Default
    );
}

#[test]
fn an_undecided_earlier_route_holds_a_later_one_that_accepts() {
    let r = routing(vec![
        TcpMatcher {
            prefix: Some(b"ABCD".to_vec()),
            ..TcpMatcher::default()
        },
        TcpMatcher::default(),
    ]);
    assert_eq!(r.decide(&peeked(b"AB", &Detection::NeedMore, false)), Decision::Wait);
    assert_eq!(r.decide(&peeked(b"AB", &Detection::NeedMore, true)), Decision::Route(1));
    assert_eq!(
        r.decide(&peeked(b"ABCDE", &Detection::NeedMore, false)),
        Decision::Route(0)
    );
    assert_eq!(
        r.decide(&peeked(b"AX", &Detection::NeedMore, false)),
        Decision::Route(1)
    );
    assert_eq!(r.decides_without_bytes(IpAddr::from([127, 0, 0, 1]), false), None);
}

#[test]
fn source_and_alpn_and_regex() {
    let r = routing(vec![
        TcpMatcher {
            source: vec!["10.0.0.0/8".parse().unwrap()],
            ..TcpMatcher::default()
        },
        TcpMatcher {
            alpn: Some(b"h2".to_vec()),
            ..TcpMatcher::default()
        },
        TcpMatcher {
            regex: Some(RegexBuilder::new("(?i)select").unicode(false).build().unwrap()),
            ..TcpMatcher::default()
        },
    ]);
    let unknown = Detection::Done(Detected::default());
    assert_eq!(r.decide(&peeked(b"\x16", &tls("x"), false)), Decision::Route(1));
    assert_eq!(r.decide(&peeked(b"xx SELECT", &unknown, false)), Decision::Route(2));
    assert_eq!(r.decide(&peeked(b"xx", &unknown, false)), Decision::Default);
    let from_ten = Peeked {
        client: IpAddr::from([10, 1, 2, 3]),
        ..peeked(b"", &Detection::NeedMore, false)
    };
    assert_eq!(r.decide(&from_ten), Decision::Route(0));
}

#[test]
fn hosts_match_without_port_and_trailing_dot() {
    assert_eq!(strip_port("example.com:8080"), "example.com");
    assert_eq!(strip_port("[::1]:80"), "::1");
    assert_eq!(strip_port("example.com"), "example.com");
    assert!(host_matches(&HostMatch::Exact("example.com".into()), "EXAMPLE.com."));
    assert!(!host_matches(&HostMatch::Suffix(".example.com".into()), "example.com"));
    assert!(host_matches(
        &HostMatch::Suffix(".example.com".into()),
        "a.b.example.com"
    ));
}
