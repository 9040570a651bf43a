"use strict";
// The status page's charts: line charts on a canvas, drawn by this code alone (no library).
// `Chart.draw` draws one; `Chart.timeSpan` picks the span all of them share.
const Chart = (function () {
  const WINDOW_S = 15 * 60;

  // How much time the charts span: 15 minutes, or less while the process is younger, so that a
  // new process's first minutes are not a sliver at the right edge. [seconds, tick step].
  const SPANS = [[60, 15], [120, 30], [300, 60], [600, 120], [WINDOW_S, 300]];

  function timeSpan(h) {
    const n = h.times.length;
    const covered = n ? h.times[n - 1] - h.times[0] + h.interval_seconds : 0;
    return SPANS.find(([seconds]) => seconds >= covered) || SPANS[SPANS.length - 1];
  }

  function ago(seconds) {
    if (seconds === 0) return "now";
    return seconds % 60 === 0 ? "-" + seconds / 60 + "m" : "-" + seconds + "s";
  }

  // A line chart on a canvas: y from 0 to a round maximum, a gap wherever a value is null (no
  // request in that interval).
  function chart(canvas, times, lines, unit, [seconds, step]) {
    const dpr = window.devicePixelRatio || 1;
    const w = canvas.clientWidth;
    const h = canvas.clientHeight;
    if (!w || !h) return;
    if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
      canvas.width = Math.round(w * dpr);
      canvas.height = Math.round(h * dpr);
    }
    const ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, w, h);
    const box = { left: 52, right: 6, top: 6, bottom: 16 };
    const pw = w - box.left - box.right;
    const ph = h - box.top - box.bottom;
    const end = times.length ? times[times.length - 1] : Date.now() / 1000;
    const start = end - seconds;
    let max = 0;
    for (const line of lines) for (const v of line.values) if (v != null && v > max) max = v;
    const top = niceCeil(max) || 1;
    const x = (t) => box.left + ((t - start) / seconds) * pw;
    const y = (v) => box.top + ph - (v / top) * ph;

    ctx.font = "10px system-ui, sans-serif";
    ctx.lineWidth = 1;
    ctx.strokeStyle = "#e2e5ea";
    ctx.fillStyle = "#6b7385";
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    for (const f of [0, 0.5, 1]) {
      const yy = Math.round(y(top * f)) + 0.5;
      ctx.beginPath();
      ctx.moveTo(box.left, yy);
      ctx.lineTo(w - box.right, yy);
      ctx.stroke();
      ctx.fillText(tick(top * f) + unit, box.left - 4, yy);
    }
    ctx.textBaseline = "top";
    for (let back = seconds; back >= 0; back -= step) {
      ctx.textAlign = back === seconds ? "left" : back === 0 ? "right" : "center";
      ctx.fillText(ago(back), x(end - back), h - box.bottom + 3);
    }

    ctx.lineWidth = 1.5;
    ctx.lineJoin = "round";
    for (const line of lines) {
      ctx.strokeStyle = line.color;
      ctx.fillStyle = line.color;
      let open = false;
      ctx.beginPath();
      for (let i = 0; i < times.length; i++) {
        const v = line.values[i];
        if (v == null || times[i] < start) {
          open = false;
          continue;
        }
        const px = x(times[i]);
        const py = y(v);
        const lone = (i === 0 || line.values[i - 1] == null) && (i + 1 >= times.length || line.values[i + 1] == null);
        if (lone) ctx.fillRect(px - 1.5, py - 1.5, 3, 3);
        if (open) ctx.lineTo(px, py);
        else ctx.moveTo(px, py);
        open = true;
      }
      ctx.stroke();
    }
  }

  function niceCeil(v) {
    if (!(v > 0)) return 0;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }

  // An axis label: few digits (the maximum is a round number).
  function tick(v) {
    if (v >= 1e6) return +(v / 1e6).toFixed(2) + "M";
    if (v >= 1e3) return +(v / 1e3).toFixed(2) + "k";
    return String(+v.toFixed(2));
  }

  return { draw: chart, timeSpan };
})();
