use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::health::TargetHealth;
use crate::snapshot::{PassiveHealth, Target};

fn upstream(policy: BalancePolicy, weights: &[u32]) -> Upstream {
    let targets: Vec<Target> = weights
        .iter()
        .enumerate()
        .map(|(i, &w)| Target {
            name: format!("10.0.0.{i}:80"),
            addr: format!("10.0.0.{i}:80").parse().unwrap(),
            weight: w,
            health: Arc::new(TargetHealth::default()),
        })
        .collect();
    let keys: Vec<&str> = targets.iter().map(|t| t.name.as_str()).collect();
    let maglev = Maglev::build(&keys, weights);
    Upstream {
        name: "u".into(),
        policy,
        maglev,
        targets,
        connect_timeout: Duration::from_secs(1),
        connect_attempts: 3,
        send_proxy_protocol: None,
        passive_health: PassiveHealth {
            base_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(1),
        },
        health_check: None,
        http: Default::default(),
    }
}

fn client() -> IpAddr {
    "192.0.2.7".parse().unwrap()
}

fn counts(policy: BalancePolicy, weights: &[u32], picks: usize) -> Vec<usize> {
    let up = upstream(policy, weights);
    let mut state = BalancerState::new(weights.len(), 0);
    let mut counts = vec![0; weights.len()];
    for _ in 0..picks {
        counts[state.pick(&up, client(), &Tried::default()).unwrap()] += 1;
    }
    counts
}

#[test]
fn round_robin_is_even() {
    assert_eq!(counts(BalancePolicy::RoundRobin, &[1, 5, 1], 300), [100, 100, 100]);
}

#[test]
fn smooth_weighted_round_robin_follows_weights_without_bursts() {
    assert_eq!(
        counts(BalancePolicy::WeightedRoundRobin, &[5, 1, 1], 700),
        [500, 100, 100]
    );
    let up = upstream(BalancePolicy::WeightedRoundRobin, &[5, 1, 1]);
    let mut state = BalancerState::new(3, 0);
    let seq: Vec<usize> = (0..7)
        .map(|_| state.pick(&up, client(), &Tried::default()).unwrap())
        .collect();
    assert_eq!(seq, [0, 0, 1, 0, 2, 0, 0], "nginx's smooth sequence for 5,1,1");
}

#[test]
fn least_connections_prefers_the_idlest_relative_to_weight() {
    let up = upstream(BalancePolicy::LeastConnections, &[1, 1, 2]);
    let mut state = BalancerState::new(3, 0);
    for _ in 0..8 {
        let t = state.pick(&up, client(), &Tried::default()).unwrap();
        state.opened(t);
    }
    assert_eq!(state.open, [2, 2, 4]);
    state.closed(0);
    state.closed(0);
    assert_eq!(state.pick(&up, client(), &Tried::default()), Some(0));
}

#[test]
fn random_two_spreads_and_favours_the_less_loaded() {
    let c = counts(BalancePolicy::RandomTwo, &[1, 1, 1, 1], 4000);
    assert!(c.iter().all(|&x| x > 700), "{c:?}");
    let up = upstream(BalancePolicy::RandomTwo, &[1, 1]);
    let mut state = BalancerState::new(2, 42);
    state.open = vec![10, 0];
    for _ in 0..50 {
        assert_eq!(state.pick(&up, client(), &Tried::default()), Some(1));
    }
}

#[test]
fn unavailable_and_tried_targets_are_skipped() {
    for policy in [
        BalancePolicy::RoundRobin,
        BalancePolicy::WeightedRoundRobin,
        BalancePolicy::LeastConnections,
        BalancePolicy::RandomTwo,
        BalancePolicy::ConsistentHash,
    ] {
        let up = upstream(policy, &[1, 1, 1]);
        up.targets[0].health.set_active_up(false);
        let mut state = BalancerState::new(3, 7);
        let mut tried = Tried::default();
        tried.push(1);
        for _ in 0..20 {
            assert_eq!(state.pick(&up, client(), &tried), Some(2), "{policy:?}");
        }
        tried.push(2);
        assert_eq!(state.pick(&up, client(), &tried), None, "{policy:?}");
    }
}

#[test]
fn consistent_hash_keeps_clients_and_moves_about_one_nth() {
    let ips: Vec<IpAddr> = (0..20_000u32)
        .map(|i| IpAddr::from((0x0a00_0000 + i * 7919).to_be_bytes()))
        .collect();
    let names: Vec<String> = (0..10).map(|i| format!("10.9.0.{i}:80")).collect();
    let keys: Vec<&str> = names.iter().map(String::as_str).collect();
    let full = Maglev::build(&keys, &[1; 10]).unwrap();
    let fewer = Maglev::build(&keys[..9], &[1; 9]).unwrap();
    let mut moved = 0;
    let mut per_target = [0usize; 10];
    for &ip in &ips {
        let a = full.lookup(client_hash(ip), |_| true).unwrap();
        let b = fewer.lookup(client_hash(ip), |_| true).unwrap();
        per_target[a] += 1;
        if keys[a] != keys[b] {
            moved += 1;
        }
    }
    let fraction = moved as f64 / ips.len() as f64;
    assert!((0.08..0.13).contains(&fraction), "moved {fraction}");
    assert!(per_target.iter().all(|&c| (1500..2500).contains(&c)), "{per_target:?}");
}
