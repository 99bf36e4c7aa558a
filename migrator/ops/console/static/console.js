// The migrator console: polls the JSON endpoints and draws them (DOM tables, inline SVG charts).
"use strict";

const POLL_MS = 2000;
const FINAL = new Set(["done", "cleaned", "aborted", "rolled_back", "failed"]);
const SVG = "http://www.w3.org/2000/svg";
const COLORS = ["#2f6fd6", "#0f9d8a", "#c2410c", "#7c3aed", "#ca8a04", "#db2777", "#0891b2", "#4d7c0f"];

// -- the token: from the address's fragment (#token=...), kept for this tab only -------------------------
function takeToken() {
  const m = location.hash.match(/token=([^&]+)/);
  if (m) {
    sessionStorage.setItem("migrator-token", decodeURIComponent(m[1]));
    history.replaceState(null, "", location.pathname + location.search);
  }
  return sessionStorage.getItem("migrator-token");
}
let token = takeToken();

async function api(path) {
  const res = await fetch(path, {headers: {Authorization: "Bearer " + token}});
  const body = await res.json().catch(() => ({}));
  if (!res.ok) {
    const err = new Error((body.error && body.error.message) || res.statusText);
    err.status = res.status;
    throw err;
  }
  return body;
}

// -- building the page ----------------------------------------------------------------------------------
function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== null && v !== undefined && v !== false) el.setAttribute(k, v);
  }
  for (const kid of kids.flat()) {
    if (kid !== null && kid !== undefined) el.append(kid instanceof Node ? kid : String(kid));
  }
  return el;
}
function s(tag, attrs, ...kids) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, v);
  for (const kid of kids.flat()) if (kid !== null && kid !== undefined) el.append(kid);
  return el;
}
function fill(id, ...kids) {
  const el = document.getElementById(id);
  el.replaceChildren(...kids.flat().filter(k => k !== null && k !== undefined));
  return el;
}
function rows(id, list) { document.getElementById(id).querySelector("tbody").replaceChildren(...list); }
function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n.toFixed(0)) + " " + units[i];
}
function num(n, digits = 0) { return n === null || n === undefined ? "–" : Number(n).toLocaleString("en", {maximumFractionDigits: digits}); }
function when(t) { return t ? new Date(t * 1000).toISOString().replace("T", " ").slice(0, 19) : ""; }
function span(lo, hi) { return lo === hi ? String(lo) : lo + "-" + hi; }
const colorOf = {};
function color(pair) {
  if (!(pair in colorOf)) colorOf[pair] = COLORS[Object.keys(colorOf).length % COLORS.length];
  return colorOf[pair];
}

// a horizontal bar (value against the largest of its column)
function bar(value, max, label, fillColor) {
  const w = 100, frac = max > 0 && value ? Math.min(1, value / max) : 0;
  return s("svg", {width: w + 80, height: 16, class: "bar"},
    s("rect", {x: 0, y: 2, width: w, height: 12, fill: "#eef1f6"}),
    s("rect", {x: 0, y: 2, width: Math.max(frac * w, value ? 1 : 0), height: 12, fill: fillColor || "#2f6fd6"}),
    s("text", {x: w + 6, y: 13}, label));
}

// grouped bars: for each key, one bar per series ([[name, {key: value}], ...])
function groupedBars(keys, series, fmt) {
  const rowH = 14 * series.length + 8, w = 520, left = 110, width = w - left - 90;
  const max = Math.max(1e-9, ...series.flatMap(([, vals]) => keys.map(k => vals[k] || 0)));
  const svg = s("svg", {width: w, height: keys.length * rowH + 24, class: "chart"});
  series.forEach(([name], j) => svg.append(
    s("rect", {x: left + j * 110, y: 2, width: 10, height: 10, fill: COLORS[j]}),
    s("text", {x: left + j * 110 + 14, y: 11}, name)));
  keys.forEach((k, i) => {
    const y0 = 20 + i * rowH;
    svg.append(s("text", {x: 0, y: y0 + 11}, k));
    series.forEach(([, vals], j) => {
      const v = vals[k] || 0;
      svg.append(s("rect", {x: left, y: y0 + j * 14, width: Math.max(1, v / max * width), height: 12, fill: COLORS[j]}),
                 s("text", {x: left + v / max * width + 4, y: y0 + j * 14 + 10}, fmt(v)));
    });
  });
  return svg;
}

// the catch-up passes: delta (events) as bars, predicted freeze (ms) as a line on its own scale
function passChart(passes) {
  const w = 520, hgt = 150, left = 40, right = 50, top = 16, bottom = 20;
  const iw = w - left - right, ih = hgt - top - bottom, n = passes.length;
  const maxE = Math.max(1, ...passes.map(p => p.events || 0));
  const maxF = Math.max(1, ...passes.map(p => p.predicted_freeze_ms || 0));
  const bw = iw / n;
  const svg = s("svg", {width: w, height: hgt, class: "chart passes"},
    s("line", {x1: left, y1: top + ih, x2: left + iw, y2: top + ih, class: "axis"}),
    s("text", {x: 0, y: 11}, "delta (events)"), s("text", {x: w - 120, y: 11, fill: "#c2410c"}, "predicted freeze (ms)"),
    s("text", {x: 0, y: top + 10}, num(maxE)), s("text", {x: left + iw + 4, y: top + 10}, num(maxF)));
  const pts = [];
  passes.forEach((p, i) => {
    const bh = (p.events || 0) / maxE * ih, x = left + i * bw;
    svg.append(s("rect", {x: x + bw * 0.15, y: top + ih - bh, width: bw * 0.7, height: Math.max(bh, 0.5),
                          fill: p.converged ? "#15803d" : "#2f6fd6"}, s("title", {}, `pass ${p.number}: ${p.events} events`)));
    if (n <= 30 || i % Math.ceil(n / 30) === 0) svg.append(s("text", {x: x + bw / 2 - 3, y: hgt - 6}, String(p.number)));
    pts.push(`${x + bw / 2},${top + ih - (p.predicted_freeze_ms || 0) / maxF * ih}`);
  });
  svg.append(s("polyline", {points: pts.join(" "), fill: "none", stroke: "#c2410c", "stroke-width": 2}));
  return svg;
}

// -- the fleet ------------------------------------------------------------------------------------------
function drawFleet(f) {
  fill("epoch", `shard map epoch ${f.epoch} · ${f.num_shards} shards` + (f.frozen.length ? ` · frozen ${f.frozen.map(r => span(...r)).join(", ")}` : ""));
  const w = 1000, strip = s("svg", {width: "100%", height: 34, viewBox: `0 0 ${w} 34`, preserveAspectRatio: "none"});
  for (const p of f.pairs) {
    for (const r of p.ranges) {
      const x = r.lo / f.num_shards * w, rw = r.shards / f.num_shards * w;
      strip.append(s("rect", {x, y: 4, width: rw, height: 26, fill: color(p.master), stroke: r.frozen ? "#dc2626" : "#fff",
                              "stroke-width": r.frozen ? 4 : 1, class: r.frozen ? "frozen" : ""},
                     s("title", {}, `${span(r.lo, r.hi)} on ${p.master}${r.frozen ? " (frozen)" : ""}`)));
    }
  }
  fill("shard-strip", strip);
  const maxB = Math.max(0, ...f.pairs.map(p => p.bytes || 0)), maxW = Math.max(0, ...f.pairs.map(p => p.writes_per_s || 0));
  rows("pairs", f.pairs.map(p => h("tr", {"data-pair": p.master},
    h("td", {}, h("span", {class: "swatch", style: `color:${color(p.master)}`}, "■ "), h("span", {class: "pair"}, p.master), h("br"),
      h("span", {class: "muted"}, p.slave)),
    h("td", {}, p.ranges.map(r => h("span", {class: "range" + (r.frozen ? " frozen" : "")}, span(r.lo, r.hi) + (r.frozen ? " frozen" : "")))),
    h("td", {}, p.shards),
    h("td", {}, p.bytes === null ? "measuring…" : bar(p.bytes, maxB, bytes(p.bytes))),
    h("td", {}, p.writes_per_s === null ? "measuring…" : bar(p.writes_per_s, maxW, num(p.writes_per_s, 1), "#0f9d8a")))));
  const m = f.measurement;
  fill("measurement", m.measured_at ? `measured ${when(m.measured_at)} (every ${m.every_s}s, ${m.window_s}s of binlog, took ${m.took_s}s)`
                                    : "measuring the fleet…", m.error ? h("span", {class: "error"}, " last measurement failed: " + m.error) : null);
  if (f.spare_pairs.length) document.getElementById("measurement").append(" · spare pairs: " + f.spare_pairs.map(p => p.join("/")).join(", "));
  rows("queues", (f.queues || []).flatMap(q => q.partitions.map(p => h("tr", {"data-partition": `${q.name}[${p.index}]`},
    h("td", {}, q.name), h("td", {}, p.index), h("td", {}, p.shard),
    h("td", {}, h("span", {class: "swatch", style: `color:${color(p.master)}`}, "■ "), p.master,
      p.routed ? h("span", {class: "muted"}, " (own route)") : "", p.frozen ? h("span", {class: "range frozen"}, " frozen") : ""),
    h("td", {class: "muted"}, p.tables.join(", "))))));
  fill("epochs", f.epoch_history.slice().reverse().map(a =>
    h("li", {}, `${when(a.when)} epoch ${a.old_epoch ?? "–"} → ${a.epoch}: ${a.reason}` + (a.migration ? ` [${a.migration}]` : "") + ` by ${a.who}`)));
}

// -- migrations -----------------------------------------------------------------------------------------
function note(m) {
  if (m.stopped) return [h("span", {class: "error"}, `stopped in ${m.stopped.step}: ${m.stopped.reason}`), h("br"),
                         h("span", {class: "next"}, "next: " + m.stopped.next)];
  if (m.paused) return "paused";
  return m.error ? h("span", {class: "error"}, m.error) : "";
}
function drawMigrations(listing) {
  rows("migrations", listing.migrations.map(m => h("tr", {"data-migration": m.id},
    h("td", {}, m.id), h("td", {class: `phase phase-${m.phase}`}, m.phase), h("td", {}, m.kind),
    h("td", {}, m.shards.join(",")), h("td", {}, `${m.source} → ${m.target}`), h("td", {}, note(m)))));
  const past = listing.migrations.filter(m => m.freeze_ms !== null && m.freeze_ms !== undefined);
  fill("freezes", past.length ? groupedBars(past.map(m => m.id), [["freeze (ms)", Object.fromEntries(past.map(m => [m.id, m.freeze_ms]))],
      ["predicted (ms)", Object.fromEntries(past.map(m => [m.id, m.predicted_freeze_ms || 0]))]], v => num(v) + " ms")
    : h("p", {class: "muted"}, "no cutover yet"));
  rows("workers", (listing.workers || []).map(w => h("tr", {},
    h("td", {}, w.name), h("td", {}, w.state), h("td", {}, (w.queues || []).join(",")), h("td", {}, w.job_description || w.job || ""))));
}
function detail(st) {
  const c = st.copy, spec = st.spec || {};
  const maxRows = Math.max(1, ...c.per_shard.map(x => Math.max(x.est_rows, x.rows)));
  const passes = st.passes || [];
  const last = passes.slice(-3).map(p => p.events || 0);
  const converging = st.not_converging ? "not converging" : last.length >= 2 ? (last[last.length - 1] <= last[0] ? "converging" : "deltas growing") : "";
  return h("div", {class: "card", "data-detail": st.id},
    h("div", {}, h("b", {}, st.id), ": phase ", h("span", {class: `phase phase-${st.phase}`}, st.phase),
      st.paused ? " (paused)" : "", st.postpone_cutover ? " (cutover postponed)" : "",
      `  ${spec.source_master} → ${spec.target_master}`),
    h("div", {}, `copy ${c.done}/${c.tables} tables, ${num(c.rows)} of ~${num(c.est_rows)} rows (${bytes(c.bytes)}), ` +
      `${num(c.rows_per_s)} rows/s, ETA ${c.eta_s === 0 ? "done" : c.eta_s === null ? "unknown" : num(c.eta_s) + " s"}`),
    h("table", {class: "per-shard"}, h("tbody", {}, c.per_shard.map(x => h("tr", {},
      h("td", {}, x.db), h("td", {}, `${x.done}/${x.tables} tables`),
      h("td", {}, bar(x.rows, maxRows, `${num(x.rows)} / ${num(x.est_rows)} rows`, x.done === x.tables ? "#15803d" : "#2f6fd6")))))),
    passes.length ? [h("h3", {}, `catch-up passes (${passes.length}) ${converging}`), passChart(passes.slice(-40))] : null,
    st.predicted_freeze_ms !== null ? h("div", {}, `predicted freeze ${num(st.predicted_freeze_ms)} ms`) : null,
    st.freeze_ms !== null ? h("div", {}, `last write freeze ${num(st.freeze_ms)} ms`) : null,
    st.stopped || st.error ? h("div", {}, note(st)) : null);
}

// -- rebalances -----------------------------------------------------------------------------------------
function movesTable(moves) {
  return h("table", {class: "moves"}, h("thead", {}, h("tr", {}, ["#", "wave", "from", "to", "shards", "bytes", "eta", "state"].map(c => h("th", {}, c)))),
    h("tbody", {}, moves.map((m, i) => h("tr", {}, h("td", {}, m.index ?? i), h("td", {}, m.wave ?? ""), h("td", {}, m.source), h("td", {}, m.target),
      h("td", {}, m.runs.map(r => span(...r)).join(",")), h("td", {}, bytes(m.bytes)), h("td", {}, m.eta_s ? num(m.eta_s) + " s" : ""),
      h("td", {}, (m.state || "planned") + (m.error ? ": " + m.error : ""))))));
}
function planView(p) {
  const fmt = p.objective === "bytes" ? bytes : v => num(v, 1);
  return [groupedBars(p.pairs, [["before", p.load_before], ["after", p.load_after]], fmt),
          p.moves.length ? movesTable(p.moves) : h("p", {class: "muted"}, "no moves: every pair is within the threshold")];
}
async function drawRebalances(list) {
  if (!list.rebalances.length) { fill("rebalances", h("p", {class: "muted"}, "no rebalance")); return; }
  const shown = list.rebalances.slice(-3).reverse();
  const plans = await Promise.all(shown.map(r => api(`/api/rebalances/${encodeURIComponent(r.id)}/plan`).catch(e => ({error: e.message}))));
  fill("rebalances", shown.map((r, i) => h("div", {class: "card", "data-rebalance": r.id},
    h("div", {}, h("b", {}, r.id), `: ${r.phase}${r.paused ? " (paused)" : ""}, ${r.done} done, ${r.running} running, ` +
      `${r.waiting} waiting, ${r.failed} failed; ${bytes(r.bytes_done)} of ${bytes(r.bytes)}`),
    plans[i].error ? h("p", {class: "error"}, plans[i].error) : planView(plans[i]))));
}
async function drawPlan(ev) {
  if (ev) ev.preventDefault();
  const q = new URLSearchParams({objective: document.getElementById("objective").value,
                                 threshold: document.getElementById("threshold").value});
  for (const name of ["add-pair", "drain"]) {
    for (const p of document.getElementById(name).value.split(/[ ,]+/).filter(Boolean)) q.append(name.replace("-", "_"), p);
  }
  fill("plan", h("p", {class: "muted"}, "planning…"));
  try {
    const p = await api("/api/plan?" + q);
    fill("plan", h("p", {}, `imbalance ${num(p.imbalance_before, 2)} → ${num(p.imbalance_after, 2)}, ${bytes(p.bytes_moved)} to move in ${p.waves} waves, about ${num(p.total_s)} s`),
         planView(p));
  } catch (e) {
    fill("plan", h("p", {class: "error"}, e.message));
  }
}

// -- polling --------------------------------------------------------------------------------------------
async function poll() {
  const banner = document.getElementById("banner");
  try {
    const [f, listing, rbs] = await Promise.all([api("/api/fleet"), api("/api/status"), api("/api/rebalances")]);
    drawFleet(f);
    drawMigrations(listing);
    const active = listing.migrations.filter(m => !FINAL.has(m.phase) || m.stopped);
    const details = await Promise.all(active.map(m => api(`/api/status/${encodeURIComponent(m.id)}`).catch(() => null)));
    fill("details", details.filter(Boolean).map(detail));
    await drawRebalances(rbs);
    banner.hidden = true;
    fill("updated", "updated " + new Date().toLocaleTimeString());
  } catch (e) {
    banner.hidden = false;
    banner.textContent = e.status === 401 ? "the token was refused: give the [queue] token of the secrets file" : "cannot reach the fleet: " + e.message;
    if (e.status === 401) { sessionStorage.removeItem("migrator-token"); token = null; askToken(); return; }
  }
  setTimeout(poll, POLL_MS);
}
function askToken() {
  const form = document.getElementById("token-form");
  form.hidden = false;
  form.onsubmit = ev => {
    ev.preventDefault();
    token = document.getElementById("token").value.trim();
    sessionStorage.setItem("migrator-token", token);
    form.hidden = true;
    start();
  };
}
function start() {
  poll();
  drawPlan();
}
document.getElementById("plan-form").addEventListener("submit", drawPlan);
if (token) start(); else askToken();
