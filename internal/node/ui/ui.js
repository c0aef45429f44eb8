// The SWD status page: polls /ui/state every second and draws the cluster
// graph (SVG), the time-series charts (Chart.js, embedded) and the tables.
"use strict";
(function () {
  const WINDOW_MS = 5 * 60 * 1000; // what the charts show
  const KEEP = 300;                 // samples kept per node
  const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#ca8a04", "#db2777"];
  const SVG = "http://www.w3.org/2000/svg";
  const store = {};   // node name -> samples, oldest first
  let lastT = 0;      // newest sample time seen, Unix ms
  let charts = null;

  function color(nd) {
    if (nd.role === "dispatcher") return "#6b7280";
    return COLORS[Math.max(nd.ring_id, 0) % COLORS.length];
  }
  function fmtRate(v) { return v >= 10 ? Math.round(v).toString() : v.toFixed(1); }
  function fmtMs(v) { return v >= 100 ? Math.round(v).toString() : v >= 10 ? v.toFixed(1) : v.toFixed(2); }
  function fmtBytes(n) {
    if (n >= (1 << 20) && n % (1 << 20) === 0) return (n / (1 << 20)) + " MiB";
    if (n >= 1024 && n % 1024 === 0) return (n / 1024) + " KiB";
    return n + " B";
  }
  // A policy epoch is the wall-clock millisecond it was set at; 0 is the
  // policy the node started with.
  function fmtEpoch(epoch) {
    if (!epoch) return "since start";
    const d = new Date(epoch);
    const today = new Date().toDateString() === d.toDateString();
    return "set " + (today ? d.toLocaleTimeString() : d.toLocaleString());
  }
  function el(ns, tag, attrs, text) {
    const e = ns ? document.createElementNS(ns, tag) : document.createElement(tag);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function row(tb, cells, attrs) {
    const tr = el(null, "tr", attrs || {});
    for (const c of cells) {
      const td = document.createElement("td");
      if (c instanceof Node) td.appendChild(c); else td.textContent = c;
      tr.appendChild(td);
    }
    tb.appendChild(tr);
    return tr;
  }
  function last(name) { const s = store[name]; return s && s.length ? s[s.length - 1] : null; }

  // ---- the graph ----
  function drawGraph(s) {
    const svg = document.getElementById("graph");
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    const defs = el(SVG, "defs", {});
    svg.appendChild(defs);
    const ring = s.nodes.filter(n => n.ring_id >= 0).sort((a, b) => a.ring_id - b.ring_id);
    const others = s.nodes.filter(n => n.ring_id < 0);
    const R = ring.length > 1 ? 150 : 0, pos = {}, byName = {};
    ring.forEach((nd, i) => {
      const a = 2 * Math.PI * i / Math.max(ring.length, 1) - Math.PI / 2;
      pos[nd.name] = [R * Math.cos(a), R * Math.sin(a), a];
    });
    others.forEach((nd, i) => { pos[nd.name] = [(i - (others.length - 1) / 2) * 70, 0, null]; });
    for (const nd of s.nodes) byName[nd.name] = nd;
    let markers = 0;
    // An arrowhead of a fixed size (in the graph's units) for one arrow.
    const marker = (fill, size) => {
      const id = "m" + (markers++);
      const m = el(SVG, "marker", { id, viewBox: "0 0 10 10", refX: 7, refY: 5, markerWidth: size, markerHeight: size, markerUnits: "userSpaceOnUse", orient: "auto" });
      m.appendChild(el(SVG, "path", { d: "M0,0 L10,5 L0,10 z", fill }));
      defs.appendChild(m);
      return "url(#" + id + ")";
    };

    // Client arrows: requests answered per second, from outside the ring.
    for (const nd of ring) {
      const smp = last(nd.name); const rate = smp ? smp.requests : 0;
      const [x, y, a] = pos[nd.name];
      if (a === null || rate <= 0) continue;
      const ox = (R + 72) * Math.cos(a), oy = (R + 72) * Math.sin(a), ix = (R + 34) * Math.cos(a), iy = (R + 34) * Math.sin(a);
      const w = Math.min(1.5 + Math.sqrt(rate) / 1.5, 9);
      svg.appendChild(el(SVG, "line", { x1: ox, y1: oy, x2: ix, y2: iy, stroke: "#9ca3af", "stroke-width": w, "marker-end": marker("#9ca3af", 10 + 1.2 * w), "data-client": nd.name, "data-rate": rate.toFixed(3) }));
      const lx = (R + 86) * Math.cos(a), ly = (R + 86) * Math.sin(a) + 4;
      svg.appendChild(el(SVG, "text", { x: lx, y: ly, "text-anchor": "middle", "font-size": 12, fill: "#6b7280" }, fmtRate(rate) + "/s"));
    }

    // Transfer arrows: curved (a→b and b→a apart), width by rate.
    const live = s.edges.filter(e => e.per_second > 0.05 && pos[e.from] && pos[e.to]);
    const maxRate = Math.max(1, ...live.map(e => e.per_second));
    for (const e of live) {
      const [x1, y1] = pos[e.from], [x2, y2] = pos[e.to];
      const dx = x2 - x1, dy = y2 - y1, len = Math.hypot(dx, dy) || 1;
      const ux = dx / len, uy = dy / len, nx = -uy, ny = ux, bend = 0.18 * len;
      const sx = x1 + ux * 30, sy = y1 + uy * 30, tx = x2 - ux * 34, ty = y2 - uy * 34;
      const cx = (x1 + x2) / 2 + nx * bend, cy = (y1 + y2) / 2 + ny * bend;
      const w = 1.5 + 11 * Math.sqrt(e.per_second / maxRate);
      const from = byName[e.from];
      svg.appendChild(el(SVG, "path", {
        d: `M${sx},${sy} Q${cx},${cy} ${tx},${ty}`, fill: "none", stroke: color(from), "stroke-width": w.toFixed(2),
        "stroke-opacity": 0.75, "marker-end": marker(color(from), 10 + 1.2 * w),
        "data-from": e.from, "data-to": e.to, "data-rate": e.per_second.toFixed(3), "data-total": e.total,
      }));
      const mx = 0.25 * sx + 0.5 * cx + 0.25 * tx, my = 0.25 * sy + 0.5 * cy + 0.25 * ty;
      const label = el(SVG, "text", { x: mx, y: my + 4, "text-anchor": "middle", "font-size": 12, "font-weight": 600, fill: color(from), stroke: "#fff", "stroke-width": 3, "paint-order": "stroke" }, fmtRate(e.per_second) + "/s");
      svg.appendChild(label);
    }

    // Nodes: a circle per node (its color; red outline when its entry is
    // stale), the requests it holds inside, a queue bar below.
    for (const nd of s.nodes) {
      const [x, y] = pos[nd.name];
      const load = nd.ring_id >= 0 ? nd.load : nd.in_flight;
      const g = el(SVG, "g", { "data-node": nd.name });
      if (nd.role === "dispatcher") {
        g.appendChild(el(SVG, "rect", { x: x - 28, y: y - 20, width: 56, height: 40, rx: 6, fill: color(nd), stroke: "#374151" }));
      } else {
        g.appendChild(el(SVG, "circle", { cx: x, cy: y, r: 27, fill: color(nd), stroke: nd.known ? (nd.self ? "#111" : "#fff") : "#b91c1c", "stroke-width": nd.self ? 3 : 2 }));
      }
      g.appendChild(el(SVG, "text", { x, y: y + 7, "text-anchor": "middle", "font-size": 20, "font-weight": 700, fill: "#fff" }, String(load)));
      const below = nd.role === "dispatcher" ? 34 : 42;
      g.appendChild(el(SVG, "text", { x, y: y + below, "text-anchor": "middle", "font-size": 12, "font-weight": nd.self ? 700 : 500 }, nd.name + (nd.self ? " (this)" : "")));
      if (!nd.error && nd.role !== "dispatcher") {
        const cells = Math.min(nd.queue, 20), wcell = 5;
        for (let k = 0; k < nd.in_flight && k < 8; k++) g.appendChild(el(SVG, "rect", { x: x - 30 + k * (wcell + 1), y: y + below + 5, width: wcell, height: 7, fill: "#374151" }));
        const off = Math.min(nd.in_flight, 8) * (wcell + 1) + 2;
        for (let k = 0; k < cells; k++) g.appendChild(el(SVG, "rect", { x: x - 30 + off + k * (wcell + 1), y: y + below + 5, width: wcell, height: 7, fill: color(nd), opacity: 0.55 }));
      }
      svg.appendChild(g);
    }
    document.getElementById("legend").textContent =
      "Arrows between nodes: requests moved per second (width grows with the rate). Grey arrows: client requests answered per second. " +
      "Number in a node: requests it holds; bar below: dark = in service, light = waiting.";
  }

  // ---- the charts ----
  function makeChart(id, yTitle, log) {
    return new Chart(document.getElementById(id), {
      type: "line",
      data: { datasets: [] },
      options: {
        animation: false, responsive: true, maintainAspectRatio: false, parsing: false, normalized: true,
        elements: { point: { radius: 0 }, line: { borderWidth: 2, tension: 0 } },
        plugins: { legend: { position: "bottom", labels: { boxWidth: 10, font: { size: 11 }, filter: it => !it.text.endsWith(" p50") } }, tooltip: { enabled: false } },
        scales: {
          x: { type: "linear", ticks: { maxTicksLimit: 6, font: { size: 10 }, callback: v => new Date(v).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" }) } },
          y: { type: log ? "logarithmic" : "linear", beginAtZero: !log, title: { display: !!yTitle, text: yTitle, font: { size: 10 } }, ticks: { font: { size: 10 }, maxTicksLimit: 6 } },
        },
      },
    });
  }
  function series(nd, field, extra) {
    return Object.assign({
      label: nd.name, borderColor: color(nd), backgroundColor: color(nd),
      data: (store[nd.name] || []).map(p => ({ x: p.t, y: field(p) })),
    }, extra || {});
  }
  function drawCharts(s) {
    if (typeof Chart === "undefined") return;
    if (!charts) charts = { load: makeChart("c-load"), req: makeChart("c-req", "req/s"), lat: makeChart("c-lat", "", true), xfer: makeChart("c-xfer", "transfers/s") };
    const ring = s.nodes.filter(n => n.role !== "dispatcher");
    charts.load.data.datasets = ring.map(nd => series(nd, p => p.queue + p.in_flight));
    charts.req.data.datasets = ring.map(nd => series(nd, p => p.app));
    charts.lat.data.datasets = [];
    for (const nd of s.nodes) {
      if (!(store[nd.name] || []).some(p => p.requests > 0)) continue; // answers no client
      charts.lat.data.datasets.push(series(nd, p => p.requests > 0 ? p.p99_ms : null, { spanGaps: false }));
      charts.lat.data.datasets.push(series(nd, p => p.requests > 0 ? p.p50_ms : null, { label: nd.name + " p50", borderDash: [5, 4], borderWidth: 1.5, spanGaps: false }));
    }
    charts.xfer.data.datasets = s.nodes.map(nd => series(nd, p => p.out));
    // The last five minutes, or since the first sample (at least a minute).
    let first = s.time_ms;
    for (const name in store) if (store[name].length) first = Math.min(first, store[name][0].t);
    const from = Math.max(s.time_ms - WINDOW_MS, Math.min(first, s.time_ms - 60 * 1000));
    for (const c of Object.values(charts)) {
      c.options.scales.x.min = from;
      c.options.scales.x.max = s.time_ms;
      c.update("none");
    }
  }

  // ---- the tables ----
  function drawTables(s) {
    const tb = document.querySelector("#nodes tbody"); tb.innerHTML = "";
    for (const nd of s.nodes) {
      const smp = last(nd.name) || {};
      const name = el(null, "span", {}); const dot = el(null, "span", { class: "dot" }); dot.style.background = color(nd);
      name.append(dot, nd.name + (nd.role === "dispatcher" ? " (dispatcher)" : ""));
      const r = row(tb, [name, nd.ring_id >= 0 ? nd.load : "–", nd.error ? "?" : nd.queue, nd.error ? "?" : nd.in_flight, smp.requests !== undefined ? fmtRate(smp.requests) : "",
        smp.requests ? fmtMs(smp.p50_ms) : "–", smp.requests ? fmtMs(smp.p99_ms) : "–",
        smp.out !== undefined ? fmtRate(smp.out) : "", smp.in !== undefined ? fmtRate(smp.in) : "",
        nd.self || nd.ring_id < 0 ? "–" : (nd.known ? nd.age_ms.toFixed(0) + " ms" : "stale"), nd.policy + " (" + fmtEpoch(nd.epoch) + ")",
        nd.work_ms > 0 ? fmtMs(nd.work_ms) : "–"],
        { "data-node": nd.name, class: (nd.self ? "self " : "") + (nd.known || nd.ring_id < 0 ? "" : "stale") });
      if (nd.error) r.title = "status: " + nd.error;
    }
    const te = document.querySelector("#edges tbody"); te.innerHTML = "";
    for (const e of s.edges.filter(e => e.total > 0 || e.per_second > 0)) {
      row(te, [e.from, e.to, fmtRate(e.per_second), e.total, (e.bytes_per_second / 1024).toFixed(1), fmtRate(e.failed_per_second)],
        { "data-from": e.from, "data-to": e.to, "data-total": e.total });
    }
    if (!te.firstChild) row(te, ["no transfer yet", "", "", "", "", ""]);

    const withCosts = s.nodes.filter(n => n.handoff && n.handoff.length);
    const th = document.querySelector("#costs thead"); th.innerHTML = "";
    const tc = document.querySelector("#costs tbody"); tc.innerHTML = "";
    row(th, ["body size"].concat(withCosts.map(n => n.name)));
    if (withCosts.length) {
      withCosts[0].handoff.forEach((c, i) => {
        const size = i === 0 ? "≤ " + fmtBytes(c.max_bytes) : (c.max_bytes > 1e15 ? "> " + fmtBytes(withCosts[0].handoff[i - 1].max_bytes) : "≤ " + fmtBytes(c.max_bytes));
        row(tc, [size].concat(withCosts.map(n => { const k = n.handoff[i]; return k && k.samples ? fmtMs(k.ms) + " (" + k.samples + ")" : "–"; })));
      });
    }
    const routes = s.nodes.flatMap(n => (n.routes || []).map(r => [n.name, r]));
    document.getElementById("routes-card").hidden = routes.length === 0;
    const tr = document.querySelector("#routes tbody"); tr.innerHTML = "";
    for (const [name, r] of routes) row(tr, [name, r.name, r.limit || "–", r.in_flight, r.waiting, r.cost_ms ? fmtMs(r.cost_ms) : "–", fmtRate(r.throughput)]);

    const tk = document.querySelector("#counters tbody"); tk.innerHTML = "";
    for (const k of Object.keys(s.counters).sort()) row(tk, [k, s.counters[k]]);
    if (s.ejected.length) row(tk, ["ejected peers", s.ejected.join(", ")]);
  }

  function draw(s) {
    s.nodes = s.nodes || []; s.edges = s.edges || []; s.counters = s.counters || {}; s.ejected = s.ejected || [];
    for (const nd of s.nodes) {
      const have = store[nd.name] || (store[nd.name] = []);
      for (const p of nd.samples || []) {
        if (!have.length || p.t > have[have.length - 1].t) have.push(p);
        lastT = Math.max(lastT, p.t);
      }
      if (have.length > KEEP) have.splice(0, have.length - KEEP);
    }
    for (const name of Object.keys(store)) if (!s.nodes.some(n => n.name === name)) delete store[name];
    const total = s.nodes.reduce((a, n) => a + ((last(n.name) || {}).requests || 0), 0);
    const moving = s.edges.reduce((a, e) => a + e.per_second, 0);
    const sum = document.getElementById("summary"); sum.innerHTML = "";
    sum.append(s.nodes.filter(n => n.ring_id >= 0).length + " nodes · policy ", el(null, "b", {}, s.policy), " (" + fmtEpoch(s.epoch) + ") · ",
      el(null, "b", { id: "total-rate" }, fmtRate(total)), " req/s answered · ", el(null, "b", { id: "moving-rate" }, fmtRate(moving)),
      " transfers/s · seen from " + s.node + (s.draining ? " (DRAINING)" : "") + " · " + new Date(s.time).toLocaleTimeString());
    drawGraph(s);
    drawCharts(s);
    drawTables(s);
  }

  async function poll() {
    try {
      const since = lastT ? Math.max(lastT - 5000, 0) : 0;
      const r = await fetch("/ui/state?since=" + since, { cache: "no-store" });
      if (r.ok) draw(await r.json());
    } catch (e) { /* the next poll retries */ }
    setTimeout(poll, 1000);
  }
  poll();
})();
