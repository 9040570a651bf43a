use std::net::IpAddr;
use std::time::{Duration, Instant};

use super::*;

/// An upstream of `weights.len()` targets (`10.0.0.I:80`), compiled from a config like any other.
fn upstream(policy: BalancePolicy, weights: &[u32]) -> Upstream {
    let targets: Vec<String> = weights
        .iter()
        .enumerate()
        .map(|(i, w)| format!("{{ address = \"10.0.0.{i}:80\", weight = {w} }}"))
        .collect();
    let text = format!(
        "[listeners.l]\nbind = \"127.0.0.1:1\"\nupstream = \"u\"\n\n\
         [upstreams.u]\ntargets = [{}]\nbalance = \"{}\"\n",
        targets.join(", "),
        policy.name()
    );
    let mut snapshot = rampart_config::compile_toml("t.toml", &text, &mut Default::default())
        .unwrap()
        .snapshot;
    snapshot.upstreams.remove(0)
}

/// Every balancing policy.
const EVERY_POLICY: [BalancePolicy; 6] = [
    BalancePolicy::RoundRobin,
    BalancePolicy::WeightedRoundRobin,
    BalancePolicy::LeastConnections,
    BalancePolicy::RandomTwo,
    BalancePolicy::ConsistentHash,
    BalancePolicy::P2cEwma,
];

fn client() -> IpAddr {
    "192.0.2.7".parse().unwrap()
}

fn counts(policy: BalancePolicy, weights: &[u32], picks: usize) -> Vec<usize> {
    let up = upstream(policy, weights);
    let mut state = BalancerState::new(weights.len(), 0);
    let mut counts = vec![0; weights.len()];
    for _ in 0..picks {
        counts[state.pick(&up, client_hash(client()), &Tried::default(), true).unwrap()] += 1;
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
        .map(|_| state.pick(&up, client_hash(client()), &Tried::default(), true).unwrap())
        .collect();
    assert_eq!(seq, [0, 0, 1, 0, 2, 0, 0], "nginx's smooth sequence for 5,1,1");
}

#[test]
fn least_connections_prefers_the_idlest_relative_to_weight() {
    let up = upstream(BalancePolicy::LeastConnections, &[1, 1, 2]);
    let mut state = BalancerState::new(3, 0);
    for _ in 0..8 {
        let t = state.pick(&up, client_hash(client()), &Tried::default(), true).unwrap();
        state.opened(t);
    }
    assert_eq!(state.open, [2, 2, 4]);
    state.closed(0);
    state.closed(0);
    assert_eq!(state.pick(&up, client_hash(client()), &Tried::default(), true), Some(0));
}

#[test]
fn random_two_spreads_and_favours_the_less_loaded() {
    let c = counts(BalancePolicy::RandomTwo, &[1, 1, 1, 1], 4000);
    assert!(c.iter().all(|&x| x > 700), "{c:?}");
    let up = upstream(BalancePolicy::RandomTwo, &[1, 1]);
    let mut state = BalancerState::new(2, 42);
    state.open = vec![10, 0];
    for _ in 0..50 {
        assert_eq!(state.pick(&up, client_hash(client()), &Tried::default(), true), Some(1));
    }
}

/// Targets 0 and 1 primary, 2 and 3 backups: backups only while no primary is available.
#[test]
fn backups_stand_in_only_while_no_primary_can() {
    for policy in EVERY_POLICY {
        let mut up = upstream(policy, &[1, 1, 1, 1]);
        up.targets[2].backup = true;
        up.targets[3].backup = true;
        let mut state = BalancerState::new(4, 3);
        let none = Tried::default();
        for _ in 0..40 {
            let picked = state.pick(&up, client_hash(client()), &none, true).unwrap();
            assert!(picked < 2, "{policy:?} picked backup {picked} while primaries are up");
        }
        // A primary down and the other tried: a backup.
        up.targets[0].health.set_active_up(false);
        let mut tried = Tried::default();
        tried.push(1);
        let picked = state.pick(&up, client_hash(client()), &tried, true).unwrap();
        assert!(picked >= 2, "{policy:?}");
        // Every primary down: the backups share the load.
        up.targets[1].health.set_active_up(false);
        let mut seen = [0; 4];
        for _ in 0..40 {
            seen[state.pick(&up, client_hash(client()), &none, true).unwrap()] += 1;
        }
        assert_eq!(seen[0] + seen[1], 0, "{policy:?}");
        // A primary back: it takes everything again.
        up.targets[0].health.set_active_up(true);
        for _ in 0..40 {
            assert_eq!(
                state.pick(&up, client_hash(client()), &none, true),
                Some(0),
                "{policy:?}"
            );
        }
    }
}

#[test]
fn unavailable_and_tried_targets_are_skipped() {
    for policy in EVERY_POLICY {
        let up = upstream(policy, &[1, 1, 1]);
        up.targets[0].health.set_active_up(false);
        let mut state = BalancerState::new(3, 7);
        let mut tried = Tried::default();
        tried.push(1);
        for _ in 0..20 {
            assert_eq!(
                state.pick(&up, client_hash(client()), &tried, true),
                Some(2),
                "{policy:?}"
            );
        }
        tried.push(2);
        assert_eq!(state.pick(&up, client_hash(client()), &tried, true), None, "{policy:?}");
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

#[test]
fn p2c_ewma_sends_most_requests_to_the_fastest_target() {
    let up = upstream(BalancePolicy::P2cEwma, &[1, 1, 1]);
    let mut state = BalancerState::new(3, 11);
    // Target 1 answers in 1 ms, the others in 20 ms; each pick is answered before the next.
    let mut counts = [0usize; 3];
    for _ in 0..3000 {
        let t = state.pick(&up, 0, &Tried::default(), true).unwrap();
        counts[t] += 1;
        let took = if t == 1 {
            Duration::from_millis(1)
        } else {
            Duration::from_millis(20)
        };
        state.observe_latency(t, took);
    }
    // Two random choices: the fast one wins whenever it is one of the two (2 of 3 draws).
    assert!(counts[1] > 1800, "{counts:?}");
    assert!(
        counts[0] > 0 && counts[2] > 0,
        "slow targets still get their share: {counts:?}"
    );
}

#[test]
fn p2c_ewma_weighs_latency_by_requests_in_flight() {
    let up = upstream(BalancePolicy::P2cEwma, &[1, 1]);
    let mut state = BalancerState::new(2, 3);
    state.observe_latency(0, Duration::from_millis(1));
    state.observe_latency(1, Duration::from_millis(3));
    assert_eq!(state.pick(&up, 0, &Tried::default(), true), Some(0));
    // Five requests in flight on the faster target make it cost 6 ms against 3 ms.
    (0..5).for_each(|_| state.opened(0));
    assert_eq!(state.pick(&up, 0, &Tried::default(), true), Some(1));
}

#[test]
fn peak_ewma_jumps_up_and_eases_down() {
    let start = Instant::now();
    let mut l = Latency::default();
    l.observe(Duration::from_millis(10), start);
    l.observe(Duration::from_millis(100), start + Duration::from_millis(1));
    assert_eq!(
        l.current(start + Duration::from_millis(1)) as u64,
        100_000_000,
        "a slower sample is taken at once"
    );
    l.observe(Duration::from_millis(10), start + Duration::from_secs(10));
    let eased = l.current(start + Duration::from_secs(10)) / 1e6;
    // 10 s after the peak the old value weighs 1/e: 100/e + 10(1 - 1/e) = 43.1 ms.
    assert!((42.0..44.0).contains(&eased), "{eased}");
    // Without samples the figure decays, so an unused target gets tried again.
    assert!(l.current(start + Duration::from_secs(60)) < l.current(start + Duration::from_secs(10)) / 50.0);
}

#[test]
fn slow_start_keeps_a_new_target_to_a_small_share_and_targets_from_the_start_alike() {
    let mut up = upstream(BalancePolicy::RoundRobin, &[1, 1, 1]);
    up.slow_start = Some(std::time::Duration::from_secs(60));
    let mut b = BalancerState::new(3, 7);
    let mut counts = [0usize; 3];
    for _ in 0..300 {
        counts[b.pick(&up, 0, &Tried::default(), true).unwrap()] += 1;
    }
    assert_eq!(counts, [100, 100, 100], "targets there from the start do not ramp");

    // A target that just joined (a reload, a DNS answer).
    up.targets[2].health = std::sync::Arc::new(rampart_model::health::TargetHealth::default());
    let mut counts = [0usize; 3];
    for _ in 0..300 {
        counts[b.pick(&up, 0, &Tried::default(), true).unwrap()] += 1;
    }
    assert!(counts[2] < 10, "{counts:?}");
}

#[test]
fn a_target_that_just_failed_is_passed_over_by_first_picks_while_others_are_left() {
    for policy in EVERY_POLICY {
        let up = upstream(policy, &[1, 1, 1]);
        let mut state = BalancerState::new(3, 5);
        let none = Tried::default();
        state.pass_over(1, Duration::from_secs(60));
        for _ in 0..30 {
            let picked = state.pick(&up, client_hash(client()), &none, true).unwrap();
            assert_ne!(picked, 1, "{policy:?}");
        }
        // A retry is not steered by it; and with every other target out, it is picked.
        let mut tried = Tried::default();
        tried.push(0);
        up.targets[2].health.set_active_up(false);
        assert_eq!(
            state.pick(&up, client_hash(client()), &tried, false),
            Some(1),
            "{policy:?}"
        );
        assert_eq!(
            state.pick(&up, client_hash(client()), &tried, true),
            Some(1),
            "{policy:?}"
        );
        // Every target passed over: picks go on as if none were.
        up.targets[2].health.set_active_up(true);
        (0..3).for_each(|t| state.pass_over(t, Duration::from_secs(60)));
        let mut seen = [0; 3];
        for _ in 0..60 {
            seen[state.pick(&up, client_hash(client()), &none, true).unwrap()] += 1;
        }
        let spread = seen.iter().filter(|n| **n > 0).count();
        assert!(
            policy == BalancePolicy::ConsistentHash || spread == 3,
            "{policy:?} {seen:?}"
        );
    }
}

#[test]
fn a_retry_takes_no_round_robin_turn() {
    // Two targets, the first failing: the retry goes to the second without moving the cursor
    // past it, so (the failed one passed over) the next request's first pick is the second,
    // and with the pass-over gone the rotation is where it was.
    for policy in [
        BalancePolicy::RoundRobin,
        BalancePolicy::WeightedRoundRobin,
        BalancePolicy::LeastConnections,
    ] {
        let up = upstream(policy, &[1, 1]);
        let mut state = BalancerState::new(2, 0);
        let none = Tried::default();
        assert_eq!(state.pick(&up, 0, &none, true), Some(0), "{policy:?}");
        let mut tried = Tried::default();
        tried.push(0);
        assert_eq!(state.pick(&up, 0, &tried, false), Some(1), "{policy:?}");
        // Without a turn taken by the retry, the next first pick is 1, then 0 again.
        assert_eq!(state.pick(&up, 0, &none, true), Some(1), "{policy:?}");
        assert_eq!(state.pick(&up, 0, &none, true), Some(0), "{policy:?}");
    }
}
