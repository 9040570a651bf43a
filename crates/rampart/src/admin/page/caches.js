"use strict";
// The status page's HTTP cache table: one row per store that routes use, from /api/caches: its
// memory tier (bytes of its size, objects, evictions), its disk tier when it has one, and what the
// routes that use it did. `Caches.show` fills the table; the section stays hidden while no route
// caches (or the admin API has no /api/caches). The hit ratio counts, as nginx's and Varnish's
// usual one does, every request answered from the store: fresh hits, stale ones, revalidated ones
// (the upstream said 304) and collapsed ones (they waited for another request's response), over
// all requests including misses; since the routes' counters began (a reload keeps them).
const Caches = (function () {
  const SERVED = ["hit", "stale", "revalidated", "collapsed"];
  const OUTCOMES = ["hit", "stale", "revalidated", "collapsed", "miss"];
  const COLUMNS = ["store", "memory", "objects", "evictions", "disk", "disk-objects", "disk-errors",
    "ratio", "requests", "routes"];

  function show(data) {
    const list = (data && data.caches) || [];
    $("caches-section").hidden = list.length === 0;
    $("caches").tBodies[0].replaceChildren(...list.map(row));
  }

  function row(c) {
    const r = c.requests || {};
    const served = SERVED.reduce((acc, k) => acc + (r[k] || 0), 0);
    const all = served + (r.miss || 0);
    const d = c.disk;
    const errors = d ? d.write_errors + d.read_errors : 0;
    const cells = {
      store: c.name,
      memory: tier(c),
      objects: count(c.objects),
      evictions: count(c.evictions),
      disk: d ? tier(d) : "–",
      "disk-objects": d ? count(d.objects) : "–",
      "disk-errors": d ? count(d.write_errors) + " write · " + count(d.read_errors) + " read" : "–",
      ratio: all ? (100 * served / all).toFixed(1) + "%" : "–",
      requests: OUTCOMES.filter((k) => r[k] > 0).map((k) => k + " " + count(r[k])).join(" · ") || "0",
      routes: (c.routes || []).join(", "),
    };
    const tr = document.createElement("tr");
    // The figures, for scripts and tests.
    Object.assign(tr.dataset, {
      store: c.name, objects: String(c.objects), served: String(served), requests: String(all),
      ratio: all ? String(served / all) : "", diskObjects: d ? String(d.objects) : "",
    });
    for (const col of COLUMNS) {
      const td = document.createElement("td");
      td.dataset.col = col;
      td.textContent = cells[col];
      if (col === "disk-errors" && errors > 0) td.className = "down";
      if (col === "routes") td.className = "wrap";
      if (col === "disk" && d) td.title = d.dir;
      tr.append(td);
    }
    return tr;
  }

  // A tier's bytes of its size, and the share used.
  function tier(t) {
    const percent = t.size ? Math.round(100 * t.bytes / t.size) : null;
    const share = percent === null ? "" : " (" + (percent === 0 && t.bytes > 0 ? "<1" : percent) + "%)";
    return bytes(t.bytes) + " of " + bytes(t.size) + share;
  }

  function bytes(n) {
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) {
      n /= 1024;
      i++;
    }
    return (i === 0 || n >= 100 ? Math.round(n) : Number(n.toFixed(1))) + " " + units[i];
  }

  function count(v) {
    return Math.round(v).toLocaleString("en-US");
  }

  function $(id) {
    return document.getElementById(id);
  }

  return { show };
})();
