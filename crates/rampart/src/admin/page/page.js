"use strict";
// The status page's script: polls the admin JSON API and draws what it says. No library, no
// external resource. The admin token, when the listener has one, is kept in sessionStorage (this
// tab only) and sent as `Authorization: Bearer` on every request.
(function () {
  const POLL_MS = 2000;
  const TOKEN_KEY = "rampart-admin-token";
  const KINDS = [["listener", "Listeners"], ["route", "Routes"], ["upstream", "Upstreams"]];
  const $ = (id) => document.getElementById(id);

  let token = sessionStorage.getItem(TOKEN_KEY) || "";
  let timer = null;
  let lastHistory = null;
  const protocols = new Map(); // listener name -> "http" | "tcp", from /api/status
  const rows = new Map(); // "upstream/target" -> {tr, cells, button, busy}
  const blocks = new Map(); // "kind:name" -> {el, now, canvases}

  // ---- the API ----

  class NeedToken extends Error {}

  async function api(method, path) {
    const headers = token ? { Authorization: "Bearer " + token } : {};
    const res = await fetch(path, { method, headers, cache: "no-store" });
    if (res.status === 401) throw new NeedToken("this admin listener needs its token");
    let body = null;
    try {
      body = await res.json();
    } catch (_) {
      body = null;
    }
    if (!res.ok) {
      const err = new Error((body && body.error) || res.status + " " + res.statusText);
      err.status = res.status;
      err.body = body;
      throw err;
    }
    return body;
  }

  async function poll() {
    timer = null;
    try {
      const missing = (e) => {
        if (e.status === 404) return null; // a Rampart without this endpoint
        throw e;
      };
      const [status, upstreams, history, caches] = await Promise.all([
        api("GET", "/api/status"),
        api("GET", "/api/upstreams"),
        api("GET", "/api/history").catch(missing),
        api("GET", "/api/caches").catch(missing),
      ]);
      showStatus(status);
      showTargets(upstreams);
      Caches.show(caches);
      showHistory(history);
      notice("");
      $("updated").textContent = "updated " + clock(new Date());
    } catch (e) {
      if (e instanceof NeedToken) {
        askToken();
        return; // polling resumes once a token is given
      }
      notice("Cannot read the admin API: " + e.message);
    }
    schedule();
  }

  function schedule(ms) {
    if (timer) clearTimeout(timer);
    timer = setTimeout(poll, ms === undefined ? POLL_MS : ms);
  }

  function notice(message) {
    const el = $("notice");
    el.textContent = message;
    el.hidden = !message;
  }

  // ---- the token ----

  function askToken() {
    $("token-form").hidden = false;
    notice(token ? "The admin API refused this token." : "This admin listener needs its token.");
    $("token").focus();
  }

  $("token-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    token = $("token").value.trim();
    $("token").value = "";
    if (token) sessionStorage.setItem(TOKEN_KEY, token);
    else sessionStorage.removeItem(TOKEN_KEY);
    $("token-form").hidden = true;
    schedule(0);
  });
  $("token-clear").addEventListener("click", () => {
    token = "";
    sessionStorage.removeItem(TOKEN_KEY);
    $("token-form").hidden = true;
    schedule(0);
  });
  $("token-toggle").addEventListener("click", () => {
    $("token-form").hidden = !$("token-form").hidden;
  });

  // ---- status and reload ----

  function showStatus(s) {
    $("version").textContent = "v" + s.version;
    $("process").textContent =
      s.workers + " worker" + (s.workers === 1 ? "" : "s") + " · up " + duration(s.uptime_seconds);
    const ready = $("readiness");
    ready.textContent = s.draining ? "draining" : s.ready ? "ready" : "not ready";
    ready.className = "badge " + (s.ready && !s.draining ? "ok" : "bad");
    protocols.clear();
    for (const l of s.listeners) protocols.set(l.name, l.protocol);
    $("config-path").textContent = s.config ? s.config.path : "command line";
    $("config-sha").textContent = s.config ? "sha256 " + s.config.sha256.slice(0, 12) : "";
    $("config-sha").title = s.config ? s.config.sha256 : "";

    const box = $("reload-status");
    const lr = s.last_reload;
    box.dataset.result = lr ? lr.result : "";
    const parts = [span("", "loaded " + when(s.loaded_at))];
    if (lr) {
      parts.push(span("", " · last reload " + when(lr.at) + ": "));
      parts.push(span(lr.result === "ok" ? "ok" : "bad", lr.result));
    } else {
      parts.push(span("muted", " · no reload since start"));
    }
    parts.push(span("muted", " · " + s.reloads.succeeded + " applied, " + s.reloads.failed + " refused"));
    if (lr && lr.errors && lr.errors.length) {
      const pre = document.createElement("pre");
      pre.textContent = lr.errors.join("\n");
      parts.push(pre);
    }
    box.replaceChildren(...parts);
    Certificates.show(s);
  }

  $("reload-button").addEventListener("click", async () => {
    const button = $("reload-button");
    button.disabled = true;
    try {
      await api("POST", "/api/reload");
    } catch (e) {
      if (e instanceof NeedToken) askToken();
      else if (e.status !== 422) notice("Reload: " + e.message); // 422: the status shows why
    }
    button.disabled = false;
    schedule(0);
  });

  // ---- targets ----

  const COLUMNS = ["upstream", "target", "weight", "health", "check", "passive", "state", "active",
    "latency", "errors", "responses"];

  function showTargets(data) {
    const body = $("targets").tBodies[0];
    const seen = new Set();
    let i = 0;
    for (const u of data.upstreams) {
      for (const t of u.targets) {
        const key = u.name + "/" + t.target;
        seen.add(key);
        let row = rows.get(key);
        if (!row) {
          row = newRow(u.name, t.target, key);
          rows.set(key, row);
        }
        if (body.children[i] !== row.tr) body.insertBefore(row.tr, body.children[i] || null);
        fillRow(row, u, t);
        i++;
      }
    }
    for (const [key, row] of rows) {
      if (!seen.has(key)) {
        row.tr.remove();
        rows.delete(key);
      }
    }
  }

  function newRow(upstream, target, key) {
    const tr = document.createElement("tr");
    tr.dataset.target = key;
    const cells = {};
    for (const c of COLUMNS) {
      const td = document.createElement("td");
      td.dataset.col = c;
      tr.append(td);
      cells[c] = td;
    }
    const td = document.createElement("td");
    const button = document.createElement("button");
    button.type = "button";
    td.append(button);
    tr.append(td);
    const row = { tr, cells, button, busy: false, upstream, target };
    button.addEventListener("click", () => toggleDrain(row));
    return row;
  }

  function fillRow(row, u, t) {
    const c = row.cells;
    c.upstream.textContent = u.name;
    c.target.textContent = t.target;
    c.target.title = t.address;
    c.weight.textContent = t.weight;
    c.health.textContent = t.available ? "available" : "unavailable";
    c.health.className = t.available ? "up" : "down";
    c.check.textContent = t.active_check || "–";
    c.check.className = t.active_check === "up" ? "up" : t.active_check === "down" ? "down" : "";
    // Passive health: ejected by outlier detection (why, for how long), backing off after
    // failed connects, or the failures in a row (failed connects, then 5xx responses and
    // gateway failures).
    const p = t.passive || {};
    const o = t.outlier || {};
    const reasons = { "5xx": "5xx responses", gateway_failure: "gateway failures", slow_response: "slow responses" };
    if (t.ejected_for_ms > 0) {
      c.passive.textContent = "ejected " + duration(t.ejected_for_ms / 1000)
        + (o.ejection_reason ? " (" + (reasons[o.ejection_reason] || o.ejection_reason) + ")" : "");
    } else if (p.down_for_ms > 0) {
      c.passive.textContent = "backing off " + duration(p.down_for_ms / 1000);
    } else {
      c.passive.textContent = ((p.consecutive_failures || 0) + (o.bad_outcomes_in_a_row || 0)) + " failures";
    }
    c.passive.className = t.ejected_for_ms > 0 || p.down_for_ms > 0 ? "down" : "";
    // What the target does now: drained by an operator, down (its health check failed),
    // ejected (outlier detection), backing off (failed connects), or serving.
    const state = t.state || (t.drained ? "drained" : t.available ? "serving" : "down");
    c.state.textContent = state.replace("_", " ");
    c.state.className = state === "serving" ? "" : state === "drained" ? "drained" : "down";
    row.tr.dataset.state = state;
    c.active.textContent = t.active === undefined ? "–" : t.active;
    c.latency.textContent = t.latency_ewma_ms == null ? "–" : ms(t.latency_ewma_ms);
    c.latency.dataset.value = t.latency_ewma_ms == null ? "" : String(t.latency_ewma_ms);
    c.errors.textContent = t.errors_last_minute === undefined ? "–" : t.errors_last_minute;
    c.errors.className = t.errors_last_minute > 0 ? "down" : "";
    c.responses.textContent = responses(t.responses);
    row.tr.dataset.drained = String(t.drained);
    if (!row.busy) {
      row.button.dataset.action = t.drained ? "enable" : "drain";
      row.button.textContent = t.drained ? "Enable" : "Drain";
      row.button.disabled = false;
    }
  }

  async function toggleDrain(row) {
    if (row.busy) return;
    const action = row.button.dataset.action;
    row.busy = true;
    row.button.disabled = true;
    try {
      const path = "/api/upstreams/" + encodeURIComponent(row.upstream) + "/targets/" +
        encodeURIComponent(row.target) + "/" + action;
      await api("POST", path);
    } catch (e) {
      if (e instanceof NeedToken) askToken();
      else notice(action + " " + row.target + ": " + e.message);
    }
    row.busy = false;
    schedule(0);
  }

  function responses(r) {
    if (!r) return "–";
    const parts = Object.keys(r).filter((k) => r[k] > 0).map((k) => k + " " + count(r[k]));
    return parts.length ? parts.join(" · ") : "0";
  }

  // ---- history ----

  // What a series' figures are: HTTP listeners and routes count requests, 4xx and 5xx answers
  // and request time; TCP listeners connections, refused connections and session time;
  // upstreams responses, 4xx responses, errors (failed attempts, 5xx responses, and requests
  // that found no available target, answered 503) and response time. The last two entries name
  // the errors and the client errors in the one-line summary (null: none shown).
  function flavour(s) {
    if (s.kind === "upstream") {
      return ["upstream", "responses/s", "errors/s", "response time", "resp/s", "errors/s", "4xx/s"];
    }
    if (s.kind === "listener" && protocols.get(s.name) === "tcp") {
      return ["tcp", "connections/s", "refused/s", "session time", "conn/s", "refused/s", null];
    }
    return ["http", "requests/s", "errors/s", "latency", "req/s", "5xx/s", "4xx/s"];
  }

  function showHistory(h) {
    lastHistory = h;
    const note = $("history-note");
    if (!h) {
      note.textContent = "(this Rampart keeps no history: /api/history is missing)";
      for (const id of ["total-rps", "total-errors", "total-4xx", "total-requests", "worst-p99"]) setCard(id, null, rate);
      return;
    }
    const n = h.times.length;
    $("charts").dataset.intervals = String(n);
    note.textContent = n
      ? "(every " + h.interval_seconds + " s; the newest interval runs to " + clock(new Date(h.times[n - 1] * 1000)) + ")"
      : "(no reading yet: the first comes within " + h.interval_seconds + " s)";
    // The cards add up HTTP listeners (TCP listeners count connections, not requests).
    const listeners = h.series.filter((s) => s.kind === "listener" && flavour(s)[0] === "http");
    const tcp = h.series.filter((s) => s.kind === "listener" && flavour(s)[0] === "tcp");
    const last = (values) => (n && values[n - 1] != null ? values[n - 1] : null);
    const sum = (list, f) => (n ? list.reduce((acc, s) => acc + (last(f(s)) || 0), 0) : null);
    setCard("total-rps", sum(listeners, (s) => s.rps), rate);
    setCard("total-errors", sum(listeners, (s) => s.errors_per_s), rate);
    setCard("total-4xx", sum(listeners, (s) => s.client_errors_per_s || []), rate);
    $("tcp-card").hidden = !tcp.length;
    setCard("total-cps", tcp.length ? sum(tcp, (s) => s.rps) : null, rate);
    // Intervals are interval_seconds long, but for the newest, which runs to the moment of asking:
    // its length is known from the one before it, so a single interval gives no total yet.
    const seconds = h.times.map((t, i) => (i ? t - h.times[i - 1] : h.interval_seconds));
    const requests = (s) => s.rps.reduce((acc, v, i) => acc + (v || 0) * seconds[i], 0);
    const total = n >= 2 ? listeners.reduce((acc, s) => acc + requests(s), 0) : null;
    setCard("total-requests", total === null ? null : Math.round(total), count);
    const p99s = listeners.map((s) => last(s.p99_ms)).filter((v) => v !== null);
    setCard("worst-p99", p99s.length ? Math.max(...p99s) : null, ms);
    drawCharts(h);
  }

  function setCard(id, value, format) {
    const el = $(id);
    el.dataset.value = value === null ? "" : String(value);
    el.textContent = value === null ? "–" : format(value);
  }

  function drawCharts(h) {
    const root = $("charts");
    const seen = new Set();
    const range = Chart.timeSpan(h);
    for (const [kind, title] of KINDS) {
      // Requests that matched no route are charted only when there were some.
      const idle = (s) => s.name.endsWith("/(unrouted)") && s.rps.every((v) => !v);
      const series = h.series.filter((s) => s.kind === kind && !(kind === "route" && idle(s)));
      let group = root.querySelector('.kind[data-kind="' + kind + '"]');
      if (!series.length) {
        if (group) group.remove();
        continue;
      }
      if (!group) {
        group = document.createElement("div");
        group.className = "kind";
        group.dataset.kind = kind;
        const h3 = document.createElement("h3");
        h3.textContent = title;
        group.append(h3);
        root.append(group);
      }
      for (const s of series) {
        const key = kind + ":" + s.name + ":" + flavour(s)[0];
        seen.add(key);
        let block = blocks.get(key);
        if (!block) {
          block = newBlock(s);
          blocks.set(key, block);
        }
        if (block.el.parentNode !== group) group.append(block.el);
        fillBlock(block, h, s, range);
      }
    }
    for (const [key, block] of blocks) {
      if (!seen.has(key)) {
        block.el.remove();
        blocks.delete(key);
      }
    }
  }

  function newBlock(s) {
    const el = document.createElement("div");
    el.className = "series";
    el.dataset.kind = s.kind;
    el.dataset.name = s.name;
    const head = document.createElement("div");
    const name = span("name", s.name);
    const now = document.createElement("div");
    now.className = "now";
    head.append(name, now);
    el.append(head);
    const canvases = {};
    const [, rps, errors, latency] = flavour(s);
    for (const [key, title] of [["rps", rps], ["errors", errors], ["latency", latency]]) {
      const box = document.createElement("div");
      box.className = "chart";
      const t = document.createElement("div");
      t.className = "title";
      if (key === "latency") {
        t.append(span("", title + " "), span("legend-p50", "p50"), span("", " / "), span("legend-p99", "p99"));
      } else if (key === "errors" && flavour(s)[6]) {
        t.append(span("", title + " "), span("legend-5xx", s.kind === "upstream" ? "errors" : "5xx"), span("", " / "),
          span("legend-4xx", "4xx"));
      } else {
        t.textContent = title;
      }
      const canvas = document.createElement("canvas");
      canvas.dataset.chart = key;
      box.append(t, canvas);
      el.append(box);
      canvases[key] = canvas;
    }
    return { el, now, canvases };
  }

  function fillBlock(block, h, s, range) {
    const n = h.times.length;
    const at = (values) => (n && values[n - 1] != null ? values[n - 1] : null);
    const p50 = at(s.p50_ms);
    const p99 = at(s.p99_ms);
    const clientErrors = s.client_errors_per_s || [];
    const f = flavour(s);
    block.now.textContent = n
      ? rate(at(s.rps) || 0) + " " + f[4] +
        (f[6] ? " · " + rate(at(clientErrors) || 0) + " " + f[6] : "") +
        " · " + rate(at(s.errors_per_s) || 0) + " " + f[5] +
        (p50 === null ? "" : " · p50 " + ms(p50)) + (p99 === null ? "" : " · p99 " + ms(p99))
      : "no reading yet";
    // The newest figures, for scripts and tests.
    const d = block.el.dataset;
    d.rps = String(at(s.rps) ?? "");
    d.errors = String(at(s.errors_per_s) ?? "");
    d.clientErrors = f[6] ? String(at(clientErrors) ?? "") : "";
    d.p50 = String(p50 ?? "");
    d.p99 = String(p99 ?? "");
    const css = getComputedStyle(document.documentElement);
    const color = (name) => css.getPropertyValue(name).trim();
    Chart.draw(block.canvases.rps, h.times, [{ values: s.rps, color: color("--accent") }], "", range);
    const errorLines = [{ values: s.errors_per_s, color: color("--err") }];
    if (f[6]) errorLines.push({ values: clientErrors, color: color("--warn") });
    Chart.draw(block.canvases.errors, h.times, errorLines, "", range);
    Chart.draw(block.canvases.latency, h.times, [
      { values: s.p50_ms, color: color("--accent") },
      { values: s.p99_ms, color: color("--p99") },
    ], " ms", range);
  }

  window.addEventListener("resize", () => {
    if (lastHistory) drawCharts(lastHistory);
  });

  // ---- formatting ----

  function span(cls, text) {
    const el = document.createElement("span");
    if (cls) el.className = cls;
    el.textContent = text;
    return el;
  }

  function rate(v) {
    if (v >= 100) return Math.round(v).toLocaleString("en-US");
    if (v >= 10) return v.toFixed(1);
    if (v === 0) return "0";
    return v.toFixed(2);
  }

  function ms(v) {
    if (v >= 1000) return (v / 1000).toFixed(2) + " s";
    if (v >= 100) return Math.round(v) + " ms";
    if (v >= 10) return v.toFixed(1) + " ms";
    return v.toFixed(2) + " ms";
  }

  function count(v) {
    return Math.round(v).toLocaleString("en-US");
  }

  function duration(seconds) {
    const s = Math.floor(seconds);
    if (s < 60) return s + " s";
    if (s < 3600) return Math.floor(s / 60) + " min " + (s % 60) + " s";
    if (s < 86400) return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
    return Math.floor(s / 86400) + " d " + Math.floor((s % 86400) / 3600) + " h";
  }

  function clock(date) {
    return date.toLocaleTimeString("en-GB", { hour12: false });
  }

  function when(unixSeconds) {
    const ago = Math.max(0, Date.now() / 1000 - unixSeconds);
    return clock(new Date(unixSeconds * 1000)) + " (" + duration(ago) + " ago)";
  }

  poll();
})();
