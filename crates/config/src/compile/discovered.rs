//! Publishing DNS answers: a snapshot like the running one whose upstreams have the targets the
//! answers gave. Nothing else changes, so listeners, routes and filters are shared with it; a
//! target that stays keeps its health, counters and (the pools key on its address) pooled
//! connections; a target that goes is drained, since requests already on it hold the snapshot
//! they started with.

use std::collections::HashMap;

use rampart_model::discovery::{Found, Lookup, Query};
use rampart_model::{Snapshot, Target, Upstream};
use rustls::pki_types::ServerName;

use super::{build_maglev, LiveState};

/// The addresses each question answered with, in a stable order.
pub type Answers = HashMap<Query, Vec<Found>>;

/// The snapshot `current` with the targets `answers` give to its upstreams' lookups (a question
/// not answered yet gives none, an upstream with no target left answers 503); `None` when every
/// upstream already has exactly those targets.
pub fn with_answers(current: &Snapshot, answers: &Answers, live: &mut LiveState) -> Option<Snapshot> {
    let mut changed = false;
    let upstreams: Vec<Upstream> = current
        .upstreams
        .iter()
        .map(|u| {
            if u.lookups.is_empty() {
                return u.clone();
            }
            let targets = answered_targets(u, answers, live);
            if same_targets(&u.targets, &targets) {
                return u.clone();
            }
            changed = true;
            Upstream {
                maglev: build_maglev(u.policy, &targets),
                targets,
                ..u.clone()
            }
        })
        .collect();
    if !changed {
        return None;
    }
    let snapshot = Snapshot {
        generation: live.next_generation(),
        listeners: current.listeners.clone(),
        upstreams,
        dns: current.dns.clone(),
        acme: current.acme.clone(),
        session_log: current.session_log.clone(),
        drain_timeout: current.drain_timeout,
        upgrade_timeout: current.upgrade_timeout,
        tracing: current.tracing.clone(),
    };
    live.forget_targets(&snapshot, false);
    Some(snapshot)
}

/// The upstream's targets written as addresses, then one per address its lookups answered
/// (an address already a target is not added twice).
fn answered_targets(u: &Upstream, answers: &Answers, live: &mut LiveState) -> Vec<Target> {
    let mut targets: Vec<Target> = u.targets.iter().filter(|t| t.lookup.is_none()).cloned().collect();
    for (index, lookup) in u.lookups.iter().enumerate() {
        let Some(found) = answers.get(&lookup.query) else {
            continue;
        };
        let first_priority = found.iter().map(|f| f.priority).min().unwrap_or(0);
        let heaviest = found.iter().map(|f| f.weight).max().unwrap_or(0);
        for f in found {
            if targets.iter().any(|t| t.addr == f.addr) {
                continue;
            }
            let tls_name = match &u.tls {
                None => None,
                Some(tls) => match tls.sni.clone().or_else(|| ServerName::try_from(f.host.clone()).ok()) {
                    Some(name) => Some(name),
                    // No name a certificate can carry: such a target could never be verified.
                    None => continue,
                },
            };
            let name = f.addr.to_string();
            targets.push(Target {
                metrics: live.target_metrics(&u.name, &name),
                health: live.target_health(&u.name, f.addr),
                name,
                addr: f.addr,
                weight: weight_of(lookup, f, heaviest),
                backup: lookup.backup || f.priority > first_priority,
                tls_name,
                lookup: Some(index),
            });
        }
    }
    targets
}

/// An A/AAAA address weighs what its target was given; an SRV record's weight (0 to 65535) is
/// scaled to Rampart's 1 to 1000 when the heaviest record is over 1000, and 0 counts as 1.
fn weight_of(lookup: &Lookup, found: &Found, heaviest: u16) -> u32 {
    if !matches!(lookup.query, Query::Srv { .. }) {
        return lookup.weight;
    }
    let w = u32::from(found.weight);
    let scaled = if heaviest > 1000 {
        w * 1000 / u32::from(heaviest)
    } else {
        w
    };
    scaled.max(1)
}

fn same_targets(a: &[Target], b: &[Target]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x.addr == y.addr && x.weight == y.weight && x.backup == y.backup && x.lookup == y.lookup)
}

#[cfg(test)]
mod tests;
