//! The admin endpoints. Every error is JSON `{"error": "..."}` with its status.

use std::sync::atomic::Ordering;

use serde_json::{json, Value};
use tokio::sync::oneshot;

use rampart_proxy::http::local::write_response;

use std::time::Duration;

use rampart_model::metrics::{UpstreamErrorKind, CODE_CLASSES};

use super::history::Reading;
use super::state::{AdminShared, Command, ReloadOutcome};
use super::traffic::{TargetTotals, TrafficTotals};
use super::Request;
use crate::upgrade::spawn::UpgradeOutcome;

/// An answer: status, content type, body, and an `Allow` list for 405.
pub struct Answer {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
    pub allow: Option<&'static str>,
}

impl Answer {
    pub fn json(status: u16, value: &Value) -> Answer {
        let mut body = serde_json::to_vec(value).unwrap_or_default();
        body.push(b'\n');
        Answer {
            status,
            content_type: "application/json",
            body,
            allow: None,
        }
    }

    pub fn error(status: u16, message: &str) -> Answer {
        Answer::json(status, &json!({ "error": message }))
    }

    /// The answer as HTTP/1.1 bytes (written as Rampart's own answers are); `head_only` for HEAD.
    pub fn encode(&self, keep_alive: bool, head_only: bool) -> Vec<u8> {
        let mut headers = vec![("content-type", self.content_type), ("cache-control", "no-store")];
        if let Some(allow) = self.allow {
            headers.push(("allow", allow));
        }
        if self.status == 401 {
            headers.push(("www-authenticate", "Bearer realm=\"rampart\""));
        }
        let mut out = Vec::with_capacity(256 + self.body.len());
        write_response(&mut out, self.status, &headers, &self.body, !keep_alive, head_only);
        out
    }
}

/// The endpoints and the methods each takes.
const ENDPOINTS: &[(&str, &str)] = &[
    ("/healthz", "GET"),
    ("/readyz", "GET"),
    ("/api/status", "GET"),
    ("/api/reload", "POST"),
    ("/api/upgrade", "POST"),
    ("/api/config", "GET"),
    ("/api/upstreams", "GET"),
    ("/api/history", "GET"),
    ("/api/caches", "GET"),
    ("/metrics", "GET"),
];

/// Answers one request.
pub async fn handle(shared: &AdminShared, request: &Request) -> Answer {
    if super::page::serves(&request.path) {
        return super::page::answer(request); // the status page holds no data: no token needed
    }
    if !authorized(shared, request) {
        return Answer::error(401, "this admin listener needs Authorization: Bearer <token>");
    }
    let path = request.path.as_str();
    if let Some(rest) = path.strip_prefix("/api/caches/") {
        if request.method != "POST" {
            let mut answer = Answer::error(405, &format!("{path} takes POST"));
            answer.allow = Some("POST");
            return answer;
        }
        return super::caches::act(shared, rest, &request.query);
    }
    if let Some(rest) = path.strip_prefix("/api/upstreams/") {
        if request.method != "POST" {
            let mut answer = Answer::error(405, &format!("{path} takes POST"));
            answer.allow = Some("POST");
            return answer;
        }
        return drain(shared, rest);
    }
    let Some(&(_, method)) = ENDPOINTS.iter().find(|(p, _)| *p == path) else {
        return Answer::error(404, &format!("no endpoint {path}"));
    };
    let head = request.method == "HEAD" && method == "GET";
    if request.method != method && !head {
        let mut answer = Answer::error(405, &format!("{path} takes {method}"));
        answer.allow = Some(method);
        return answer;
    }
    match path {
        "/healthz" => Answer::json(200, &json!({ "status": "ok" })),
        "/readyz" => match shared.readiness() {
            Ok(()) => Answer::json(200, &json!({ "ready": true })),
            Err(why) => Answer::json(503, &json!({ "ready": false, "reason": why })),
        },
        "/api/status" => status(shared),
        "/api/reload" => reload(shared).await,
        "/api/upgrade" => upgrade(shared).await,
        "/api/config" => Answer::json(200, &serde_json::to_value(&**shared.config.load()).unwrap_or_default()),
        "/api/upstreams" => upstreams(shared),
        "/api/history" => history(shared),
        "/api/caches" => super::caches::list(shared),
        "/metrics" => Answer {
            status: 200,
            content_type: super::metrics::CONTENT_TYPE,
            body: super::metrics::render(shared).into_bytes(),
            allow: None,
        },
        _ => Answer::error(404, &format!("no endpoint {path}")),
    }
}

/// Whether the request carries the token (compared in constant time), or none is needed.
fn authorized(shared: &AdminShared, request: &Request) -> bool {
    let token = shared.token.load();
    let Some(token) = token.as_deref() else { return true };
    let Some(given) = request.authorization.as_deref().and_then(|a| a.strip_prefix("Bearer ")) else {
        return false;
    };
    let (a, b) = (given.trim().as_bytes(), token.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn status(shared: &AdminShared) -> Answer {
    let status = shared.status.load();
    let mut value = serde_json::to_value(&**status).unwrap_or(Value::Null);
    if let Value::Object(map) = &mut value {
        map.insert("pid".into(), json!(std::process::id()));
        map.insert("uptime_seconds".into(), json!(shared.started.elapsed().as_secs()));
        map.insert("ready".into(), json!(shared.readiness().is_ok()));
        map.insert("draining".into(), json!(shared.draining.load(Ordering::Acquire)));
        map.insert("certificates".into(), certificates(shared));
        let acme = shared.acme.load();
        if !acme.names.is_empty() {
            let names: Vec<Value> = acme
                .names
                .iter()
                .map(|(name, s)| {
                    json!({
                        "name": name,
                        "state": s.state,
                        "not_after": s.not_after,
                        "renew_at": s.renew_at,
                        "renewal_window": s.window.map(|(start, end)| json!({ "start": start, "end": end })),
                        "failures": s.failures,
                        "error": s.error,
                    })
                })
                .collect();
            map.insert("acme".into(), json!({ "directory": acme.directory, "names": names }));
        }
        // A config from etcd: whether etcd answered its last read.
        if let (Some(reachable), Some(Value::Object(config))) = (&shared.source_reachable, map.get_mut("config")) {
            config.insert("reachable".into(), json!(reachable.load(Ordering::Relaxed)));
        }
    }
    Answer::json(200, &value)
}

/// Every listener's certificates with their expiry: an expired one is served (with a warning at
/// every load), so this is where monitoring sees it.
fn certificates(shared: &AdminShared) -> Value {
    let snapshot = shared.snapshot.load();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let list: Vec<Value> = snapshot
        .listeners
        .iter()
        .filter_map(|l| l.tls.as_ref().map(|tls| (l, tls)))
        .flat_map(|(l, tls)| {
            tls.certificate_info.iter().map(move |c| {
                let not_after = c.not_after_unix() as i64;
                json!({
                    "listener": l.name,
                    "file": c.file,
                    "names": c.names,
                    "not_after": not_after,
                    "expired": c.expired(),
                    "days_left": (not_after - now).div_euclid(86_400),
                })
            })
        })
        .collect();
    Value::Array(list)
}

/// Every upstream's targets: health as the workers see it, load, latency and errors.
fn upstreams(shared: &AdminShared) -> Answer {
    let snapshot = shared.snapshot.load();
    let traffic = TrafficTotals::read(&snapshot);
    // The errors of a minute ago (or of the oldest reading, in the first minute).
    let minute_ago = shared.history.since(Duration::from_secs(60));
    let errors_before = |upstream: &str, target: &str| -> u64 {
        let Some(reading) = &minute_ago else { return 0 };
        let totals = reading.totals.upstreams.iter().find(|u| u.name == upstream);
        let target = totals.and_then(|u| u.targets.iter().find(|t| t.name == target));
        target.map_or(0, TargetTotals::failures)
    };
    let dns = shared.dns.load();
    let upstreams: Vec<Value> = snapshot
        .upstreams
        .iter()
        .filter(|u| !u.is_internal())
        .zip(&traffic.upstreams)
        .map(|(u, totals)| {
            let lookups: Vec<Value> = dns
                .of_upstream(&u.name)
                .map(|(query, entry)| {
                    json!({
                        "target": query.to_string(),
                        "addresses": entry.found.as_ref().map(|f| f.iter().map(|a| a.addr.to_string()).collect::<Vec<_>>()),
                        "state": entry.state(),
                        "error": entry.error,
                    })
                })
                .collect();
            let targets: Vec<Value> = u
                .targets
                .iter()
                .zip(&totals.targets)
                .map(|(t, traffic)| {
                    let h = &t.health;
                    let ejected_for = h.ejected_for();
                    let mut errors = by_name(&UpstreamErrorKind::ALL.map(|k| k.as_str()), &traffic.errors);
                    errors["status_5xx"] = json!(traffic.responses[4]);
                    json!({
                        "target": t.name,
                        "address": t.addr.to_string(),
                        "weight": t.weight,
                        "backup": t.backup,
                        "available": h.is_available(),
                        "state": target_state(h),
                        "drained": h.is_drained(),
                        "active_check": u.health_check.as_ref().map(|_| if h.is_active_up() { "up" } else { "down" }),
                        "passive": {
                            "consecutive_failures": h.consecutive_failures(),
                            "down_for_ms": h.passive_down_for().as_millis() as u64,
                        },
                        "ejected_for_ms": ejected_for.as_millis() as u64,
                        "outlier": {
                            "bad_outcomes_in_a_row": h.bad_outcomes_in_a_row(),
                            "ejection_reason": (!ejected_for.is_zero()).then(|| h.ejection_reason().map(|r| r.as_str())).flatten(),
                        },
                        "ejections": traffic.ejections,
                        "active": traffic.active,
                        "latency_ewma_ms": traffic.latency_ewma.map(|d| d.as_secs_f64() * 1000.0),
                        "responses": by_name(&CODE_CLASSES, &traffic.responses),
                        "errors": errors,
                        "errors_last_minute": traffic.failures().saturating_sub(errors_before(&u.name, &t.name)),
                        "connections": { "opened": traffic.opened, "reused": traffic.reused },
                    })
                })
                .collect();
            json!({
                "name": u.name,
                "balance": u.policy.name(),
                "tls": u.tls.is_some(),
                "retries_total": totals.retries,
                "retries_over_budget_total": totals.retries_over_budget,
                "no_target_total": totals.no_target,
                "targets": targets,
                "dns": lookups,
                "dns_degraded": dns.of_upstream(&u.name).any(|(_, e)| e.degraded),
            })
        })
        .collect();
    Answer::json(200, &json!({ "upstreams": upstreams }))
}

/// What a target does now: `drained` by an operator, `down` (its active check), `ejected` by
/// outlier detection, `backing_off` after failed connects, else `serving`.
fn target_state(h: &rampart_model::health::TargetHealth) -> &'static str {
    if h.is_drained() {
        "drained"
    } else if !h.is_active_up() {
        "down"
    } else if h.is_ejected() {
        "ejected"
    } else if !h.passive_down_for().is_zero() {
        "backing_off"
    } else if !h.is_available() {
        "down"
    } else {
        "serving"
    }
}

/// `{"NAME": count, ...}` in the order of `names`.
fn by_name(names: &[&str], counts: &[u64]) -> Value {
    let map: serde_json::Map<String, Value> = names
        .iter()
        .zip(counts)
        .map(|(n, c)| (n.to_string(), json!(c)))
        .collect();
    Value::Object(map)
}

/// `GET /api/history`: the ring of readings, and a reading of now when the last one is more than
/// a second old, so the newest interval is always current.
fn history(shared: &AdminShared) -> Answer {
    let mut readings = shared.history.readings();
    if readings.last().is_none_or(|r| r.at.elapsed() > Duration::from_secs(1)) {
        readings.push(std::sync::Arc::new(Reading::now(shared)));
    }
    let view = super::history::view(&readings);
    Answer::json(200, &serde_json::to_value(&view).unwrap_or_default())
}

/// `POST /api/upstreams/{upstream}/targets/{target}/drain` (or `/enable`): the target (as
/// written in the config, or its resolved address; `%3A` for `:` is understood) gets no new
/// connections or requests while drained. The mark lives in the target's shared health, which a
/// reload keeps while the target stays in the config.
fn drain(shared: &AdminShared, rest: &str) -> Answer {
    let parsed = rest.split_once("/targets/").and_then(|(upstream, t)| {
        let (target, action) = t.rsplit_once('/')?;
        Some((percent_decode(upstream), percent_decode(target), action))
    });
    let Some((upstream, target, action)) = parsed else {
        return Answer::error(
            404,
            "expected /api/upstreams/{upstream}/targets/{target}/drain or /enable",
        );
    };
    let drained = match action {
        "drain" => true,
        "enable" => false,
        other => return Answer::error(404, &format!("no action `{other}` (drain or enable)")),
    };
    let snapshot = shared.snapshot.load();
    let Some(up) = snapshot.upstreams.iter().find(|u| u.name == upstream) else {
        return Answer::error(404, &format!("no upstream `{upstream}`"));
    };
    let Some(t) = up
        .targets
        .iter()
        .find(|t| t.name == target || t.addr.to_string() == target)
    else {
        return Answer::error(404, &format!("upstream `{upstream}` has no target `{target}`"));
    };
    let changed = t.health.set_drained(drained);
    if changed {
        let (upstream, target) = (up.name.as_str(), t.name.as_str());
        if drained {
            tracing::info!(
                upstream,
                target,
                action = "drain",
                "admin: target drained (no new connections or requests)"
            );
        } else {
            tracing::info!(upstream, target, action = "enable", "admin: target enabled");
        }
    }
    Answer::json(
        200,
        &json!({ "upstream": up.name, "target": t.name, "drained": drained, "changed": changed }),
    )
}

/// `%XX` escapes decoded (anything malformed is kept as written).
pub(super) fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (
            bytes[i],
            bytes.get(i + 1).copied().and_then(hex),
            bytes.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(hi), Some(lo)) => {
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Answers once the new process is ready (200, with its PID) or has failed (500: this process
/// keeps serving).
async fn upgrade(shared: &AdminShared) -> Answer {
    let (reply, outcome) = oneshot::channel();
    if shared.commands.send(Command::Upgrade(reply)).is_err() {
        return Answer::error(503, "draining: no upgrade can start");
    }
    match outcome.await {
        Ok(UpgradeOutcome::Ready { pid }) => Answer::json(
            200,
            &json!({ "result": "ok", "pid": pid, "summary": format!("process {pid} serves now; this one drains and exits") }),
        ),
        Ok(UpgradeOutcome::Failed { reason }) => Answer::json(
            500,
            &json!({ "error": "upgrade failed; this process keeps serving", "reason": reason }),
        ),
        Err(_) => Answer::error(503, "draining: no upgrade can start"),
    }
}

async fn reload(shared: &AdminShared) -> Answer {
    let (reply, outcome) = oneshot::channel();
    if shared.commands.send(Command::Reload(reply)).is_err() {
        return Answer::error(503, "draining: the config can no longer be reloaded");
    }
    match outcome.await {
        Ok(ReloadOutcome::Applied { summary, .. }) => Answer::json(200, &json!({ "result": "ok", "summary": summary })),
        Ok(ReloadOutcome::Refused { errors }) => Answer::json(
            422,
            &json!({ "error": "reload failed; the running config stays in force", "errors": errors }),
        ),
        Ok(ReloadOutcome::NotReloadable) => Answer::error(
            422,
            "the command line is the whole config and names no certificate; nothing to reload",
        ),
        Err(_) => Answer::error(503, "draining: the config can no longer be reloaded"),
    }
}
