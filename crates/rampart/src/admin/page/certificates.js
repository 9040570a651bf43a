"use strict";
// The status page's certificate table: every listener's file certificates and every ACME name,
// from /api/status, with when each expires and (ACME) where its renewal stands. `Certificates.show`
// fills the table; the section stays hidden while the process has no certificate.
const Certificates = (function () {
  const DAY = 86400;

  // One row per file certificate and per ACME name: [key, cells, state class, title].
  function rows(s) {
    const now = Date.now() / 1000;
    const out = [];
    for (const c of s.certificates || []) {
      const state = c.expired ? "expired" : c.days_left < 14 ? "expiring" : "valid";
      out.push(["file:" + c.listener + ":" + c.file, [
        c.names.join(", "), "file " + c.file + " (listener " + c.listener + ")", state,
        expiry(c.not_after, now), "–", "",
      ], state]);
    }
    const acme = s.acme || { names: [] };
    for (const n of acme.names) {
      const expired = n.not_after !== null && n.not_after < now;
      const state = expired ? "expired" : n.state;
      let renewal = n.renew_at ? day(n.renew_at) : "–";
      if (n.renewal_window) renewal += " (the CA's window " + day(n.renewal_window.start) + " – " +
        day(n.renewal_window.end) + ")";
      const error = n.error ? n.failures + " failed: " + n.error : "";
      out.push(["acme:" + n.name, [
        n.name, "ACME " + acme.directory, state,
        n.not_after ? expiry(n.not_after, now) : "–", renewal, error,
      ], state]);
    }
    return out;
  }

  function show(s) {
    const list = rows(s);
    $("certificates-section").hidden = list.length === 0;
    const body = $("certificates").tBodies[0];
    body.replaceChildren(...list.map(([key, cells, state]) => {
      const tr = document.createElement("tr");
      tr.dataset.cert = key;
      tr.dataset.state = state;
      for (const [i, text] of cells.entries()) {
        const td = document.createElement("td");
        td.textContent = text;
        if (i === 2) td.className = state === "valid" ? "up" : state === "obtaining" || state === "renewing" ? "drained" : "down";
        if (i === 5) td.className = "down wrap";
        tr.append(td);
      }
      return tr;
    }));
  }

  function expiry(notAfter, now) {
    const days = Math.floor((notAfter - now) / DAY);
    return day(notAfter) + (days < 0 ? " (expired)" : " (" + days + " d left)");
  }

  function day(unixSeconds) {
    return new Date(unixSeconds * 1000).toISOString().slice(0, 16).replace("T", " ") + " UTC";
  }

  function $(id) {
    return document.getElementById(id);
  }

  return { show };
})();
