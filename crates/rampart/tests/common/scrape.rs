//! `GET /metrics` read with a Prometheus text-format parser.

use std::io::{Read, Write};

/// One scraped sample: metric name, sorted labels, value.
pub type Sample = (String, Vec<(String, String)>, f64);

/// `GET /metrics`, parsed by a Prometheus text-format parser.
pub fn scrape(port: u16) -> Vec<Sample> {
    let mut s = super::connect(port);
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    assert!(
        head.starts_with("HTTP/1.1 200") && head.contains("application/openmetrics-text"),
        "{head}"
    );
    assert!(body.ends_with("# EOF\n"), "{body}");
    let lines = body.lines().map(|l| Ok(l.to_string()));
    let scraped = prometheus_parse::Scrape::parse(lines).expect("the exposition parses");
    scraped
        .samples
        .into_iter()
        .flat_map(|s| {
            let mut labels: Vec<(String, String)> = s.labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            labels.sort();
            match s.value {
                prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Untyped(v) => vec![(s.metric, labels, v)],
                // Buckets become `NAME_bucket{le=...}` samples.
                prometheus_parse::Value::Histogram(buckets) => buckets
                    .iter()
                    .map(|b| {
                        let mut labels = labels.clone();
                        let le = if b.less_than.is_infinite() {
                            "+Inf".to_string()
                        } else {
                            b.less_than.to_string()
                        };
                        labels.push(("le".to_string(), le));
                        labels.sort();
                        (format!("{}_bucket", s.metric), labels, b.count)
                    })
                    .collect(),
                other => panic!("{}: unexpected {other:?}", s.metric),
            }
        })
        .collect()
}

pub fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    let mut want: Vec<(String, String)> = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    want.sort();
    samples
        .iter()
        .find(|(n, l, _)| n == name && *l == want)
        .unwrap_or_else(|| panic!("no {name}{labels:?} in {samples:?}"))
        .2
}
