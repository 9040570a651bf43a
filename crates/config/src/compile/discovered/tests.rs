use std::sync::Arc;

use super::*;
use crate::compile::compile_toml;

const CONFIG: &str = r#"
[global]
resolvers = ["127.0.0.1:5353"]
dns_ttl_min = "2s"

[listeners.web]
bind = "127.0.0.1:7777"
upstream = "app"

[upstreams.app]
balance = "weighted_round_robin"
targets = ["127.0.0.1:9001", { dns = "api.test", port = 8080, weight = 2 }, "srv+_http._tcp.api.test"]
"#;

fn found(addr: &str, host: &str, priority: u16, weight: u16) -> Found {
    Found {
        addr: addr.parse().unwrap(),
        host: host.into(),
        priority,
        weight,
    }
}

fn summary(s: &Snapshot) -> Vec<(String, u32, bool)> {
    s.upstreams[0]
        .targets
        .iter()
        .map(|t| (t.name.clone(), t.weight, t.backup))
        .collect()
}

#[test]
fn answers_become_targets_beside_the_written_ones() {
    let mut live = LiveState::default();
    let compiled = compile_toml("t.toml", CONFIG, &mut live).unwrap().snapshot;
    assert_eq!(compiled.dns.resolvers, Some(vec!["127.0.0.1:5353".parse().unwrap()]));
    assert_eq!(compiled.dns.ttl_min, std::time::Duration::from_secs(2));
    let u = &compiled.upstreams[0];
    assert_eq!(u.targets.len(), 1, "only the address is a target before any answer");
    assert_eq!(u.lookups.len(), 2);
    assert!(
        with_answers(&compiled, &Answers::new(), &mut live).is_none(),
        "nothing answered, nothing changed"
    );

    let mut answers = Answers::new();
    answers.insert(
        Query::host("api.test", 8080).unwrap(),
        vec![
            found("10.0.0.1:8080", "api.test", 0, 0),
            found("10.0.0.2:8080", "api.test", 0, 0),
        ],
    );
    answers.insert(
        Query::srv("_http._tcp.api.test").unwrap(),
        vec![
            found("10.0.1.1:9000", "a.api.test", 10, 3000),
            found("10.0.1.2:9000", "b.api.test", 10, 0),
            found("10.0.1.3:9000", "c.api.test", 20, 5),
            // Already a target by another lookup: not added twice.
            found("10.0.0.1:8080", "api.test", 10, 1),
        ],
    );
    let published = with_answers(&compiled, &answers, &mut live).unwrap();
    assert!(published.generation > compiled.generation);
    assert!(Arc::ptr_eq(&published.listeners, &compiled.listeners));
    assert_eq!(
        summary(&published),
        [
            ("127.0.0.1:9001".to_string(), 1, false),
            ("10.0.0.1:8080".to_string(), 2, false),
            ("10.0.0.2:8080".to_string(), 2, false),
            // SRV weights over 1000 are scaled, 0 counts as 1; a later priority is a backup.
            ("10.0.1.1:9000".to_string(), 1000, false),
            ("10.0.1.2:9000".to_string(), 1, false),
            ("10.0.1.3:9000".to_string(), 1, true),
        ]
    );
    assert!(
        with_answers(&published, &answers, &mut live).is_none(),
        "the same answers change nothing"
    );

    // One address goes: the others keep their health and counters.
    let health = published.upstreams[0].targets[2].health.clone();
    let cells = published.upstreams[0].targets[2].metrics.clone();
    answers.insert(
        Query::host("api.test", 8080).unwrap(),
        vec![found("10.0.0.2:8080", "api.test", 0, 0)],
    );
    let next = with_answers(&published, &answers, &mut live).unwrap();
    let kept = next.upstreams[0]
        .targets
        .iter()
        .find(|t| t.name == "10.0.0.2:8080")
        .unwrap();
    assert!(Arc::ptr_eq(&kept.health, &health) && Arc::ptr_eq(&kept.metrics, &cells));
    // 10.0.0.1 stays as an answer of the SRV lookup.
    assert_eq!(next.upstreams[0].targets.len(), 6);

    // A reload compiles the upstream without the answers; publishing them again keeps the state.
    let reloaded = compile_toml("t.toml", CONFIG, &mut live).unwrap().snapshot;
    let again = with_answers(&reloaded, &answers, &mut live).unwrap();
    let kept = again.upstreams[0]
        .targets
        .iter()
        .find(|t| t.name == "10.0.0.2:8080")
        .unwrap();
    assert!(Arc::ptr_eq(&kept.health, &health) && Arc::ptr_eq(&kept.metrics, &cells));
}

#[test]
fn a_name_with_no_address_leaves_an_empty_upstream() {
    let src = r#"
[listeners.web]
bind = "127.0.0.1:7777"
upstream = "app"

[upstreams.app]
balance = "consistent_hash"
targets = ["dns+api.test:80"]
"#;
    let mut live = LiveState::default();
    let compiled = compile_toml("t.toml", src, &mut live).unwrap().snapshot;
    let mut answers = Answers::new();
    answers.insert(
        Query::host("api.test", 80).unwrap(),
        vec![found("10.0.0.1:80", "api.test", 0, 0)],
    );
    let one = with_answers(&compiled, &answers, &mut live).unwrap();
    assert_eq!(one.upstreams[0].targets.len(), 1);
    assert!(one.upstreams[0].maglev.is_some());
    answers.insert(Query::host("api.test", 80).unwrap(), vec![]);
    let none = with_answers(&one, &answers, &mut live).unwrap();
    assert!(none.upstreams[0].targets.is_empty() && none.upstreams[0].maglev.is_none());
}

#[test]
fn targets_by_name_are_checked_where_they_are_written() {
    let errors = |targets: &str| {
        let src = format!(
            "[listeners.web]\nbind = \"127.0.0.1:7777\"\nupstream = \"app\"\n\n[upstreams.app]\ntargets = {targets}\n"
        );
        let e = compile_toml("t.toml", &src, &mut LiveState::default()).unwrap_err();
        e.0.iter().map(|e| e.to_string()).collect::<Vec<_>>()
    };
    assert_eq!(
        errors(r#"[{ dns = "api.test" }]"#),
        ["t.toml:6:12: `dns = \"api.test\"` needs a `port`"]
    );
    assert_eq!(
        errors(r#"[{ dns = "api.test", port = 70000 }]"#),
        ["t.toml:6:12: port 70000 is out of range (1 to 65535)"]
    );
    assert_eq!(
        errors(r#"[{ address = "127.0.0.1:1", srv = "_x._tcp.test" }]"#),
        ["t.toml:6:12: a target has one of `address`, `dns` (with `port`) or `srv`"]
    );
    assert_eq!(
        errors(r#"[{ srv = "_x._tcp.test", weight = 5 }]"#),
        ["t.toml:6:12: `weight` does not apply to an `srv` target: its records carry their own weights"]
    );
    assert_eq!(
        errors(r#"["dns+api.test:80", "dns+API.test.:80"]"#),
        ["t.toml:6:31: target `dns+api.test:80` is listed twice in upstream `app`"]
    );
    assert_eq!(
        errors(r#"["dns+api test:80"]"#),
        ["t.toml:6:12: `api test` is not a DNS name"]
    );
}
