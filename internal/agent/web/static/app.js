// vramguard dashboard. Everything it shows comes from the agent's JSON API
// (/api/v1/); nothing is loaded from elsewhere. Text from jobs (names,
// command lines, messages) is only ever set as textContent.
"use strict";

const vg = (window.vg = { plots: {}, timelines: {}, events: [], lastEvent: 0, range: "1h", ready: false, renderMs: null, live: false });

const GiB = 1024 ** 3;
const colors = { gpu: "#2f6fdf", reserved: "#e08a1e", alloc: "#2aa876", limit: "#c8354a" };
const evColors = { oom: "#c8354a", died: "#c8354a", leak: "#c8354a", oom_forecast: "#c8354a", checkpoint: "#2aa876", restart: "#e08a1e", unsaved_work: "#e08a1e", start: "#9aa3b5", exit: "#9aa3b5", note: "#6b46c1" };
const markedKinds = new Set(["oom", "checkpoint", "restart", "leak", "oom_forecast", "died", "exit", "unsaved_work", "note"]);

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null) continue;
    if (k === "class") e.className = v;
    else if (k.startsWith("data-")) e.setAttribute(k, v);
    else e[k] = v;
  }
  for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(k === undefined || k === null ? "" : String(k)));
  return e;
}

function bytes(n) {
  if (n === undefined || n === null) return "–";
  if (n >= GiB) return (n / GiB).toFixed(2) + " GiB";
  return (n / 1024 ** 2).toFixed(0) + " MiB";
}

function dur(s) {
  if (s === undefined || s === null) return "–";
  s = Math.round(s);
  if (s < 120) return s + " s";
  if (s < 7200) return Math.round(s / 60) + " min";
  if (s < 172800) return (s / 3600).toFixed(1) + " h";
  return (s / 86400).toFixed(1) + " d";
}

function clock(t) {
  return new Date(t).toLocaleTimeString([], { hour12: false });
}

async function get(path) {
  const r = await fetch(path, { cache: "no-store" });
  if (!r.ok) throw new Error(path + ": " + r.status);
  return r.json();
}

function rangeSeconds(r) {
  const m = /^(\d+)([mh])$/.exec(r);
  return m ? Number(m[1]) * (m[2] === "h" ? 3600 : 60) : 3600;
}

// ---- tables

function renderDevices(d) {
  const tb = document.querySelector("#devices tbody");
  tb.replaceChildren(...d.devices.map((x) => {
    const frac = x.total_bytes ? x.used_bytes / x.total_bytes : 0;
    return el("tr", { "data-uuid": x.uuid },
      el("td", {}, x.index), el("td", {}, x.name),
      el("td", { class: "num" }, bytes(x.used_bytes) + " / " + bytes(x.total_bytes)),
      el("td", {}, el("div", { class: "bar" }, el("i", { style: "width:" + (100 * frac).toFixed(1) + "%" }))),
      el("td", { class: "num" }, x.util_percent >= 0 ? x.util_percent + "%" : "–"),
      el("td", {}, (x.jobs || []).length));
  }));
}

function renderJobs(d) {
  const tb = document.querySelector("#jobs tbody");
  vg.jobs = d.jobs;
  tb.replaceChildren(...d.jobs.map((j) => el("tr", { "data-key": j.key },
    el("td", {}, j.name), el("td", {}, j.kind),
    el("td", { class: "num" }, bytes(j.gpu_bytes)),
    el("td", { class: "num" }, bytes(j.reserved_bytes)),
    el("td", { class: "num" }, bytes(j.allocated_bytes)),
    el("td", { class: "num" }, bytes(j.rss_bytes)),
    el("td", {}, (j.devices || []).join(",")),
    el("td", { class: j.leak ? "leak" : "" }, j.verdict || "–"),
    el("td", { class: "num" }, j.oom_eta_s != null ? dur(j.oom_eta_s) : "–"),
    el("td", { class: "num" }, j.seconds_since_checkpoint != null ? dur(j.seconds_since_checkpoint) + " ago" : "none seen"),
    el("td", {}, j.live ? "running" : "ended"))));
}

function renderRuns(d) {
  const tb = document.querySelector("#runs tbody");
  tb.replaceChildren(...d.runs.map((r) => {
    const tr = el("tr", { "data-id": r.id },
      el("td", {}, r.name || r.id), el("td", {}, r.status), el("td", { class: r.reason && r.reason !== "ok" ? "died" : "" }, r.reason || "–"),
      el("td", {}, new Date(r.started_at).toLocaleString()), el("td", { class: "num" }, bytes(r.peak_gpu_bytes)));
    tr.onclick = async () => {
      const pm = document.getElementById("postmortem");
      const x = await get("/api/v1/runs/" + encodeURIComponent(r.id));
      // the post-mortem document `vramguard explain --json` prints, less its event list
      const { events, run, ...doc } = x;
      pm.textContent = JSON.stringify(doc, null, 2);
      pm.hidden = false;
    };
    return tr;
  }));
}

function eventItem(e) {
  return el("li", { "data-id": e.id, "data-kind": e.kind, class: e.kind },
    el("time", {}, clock(e.t)), el("b", {}, e.kind), " ", e.message);
}

function addEvents(evs) {
  if (!evs.length) return;
  const ol = document.getElementById("events");
  for (const e of evs) {
    if (e.id <= vg.lastEvent) continue;
    vg.lastEvent = e.id;
    vg.events.push(e);
    ol.prepend(eventItem(e));
    const p = vg.plots[e.job_key];
    if (p && markedKinds.has(e.kind)) p.redraw(false, false);
  }
  while (ol.children.length > 500) ol.lastChild.remove();
}

// ---- plots

function eventMarkers(key) {
  return {
    hooks: {
      draw: [(u) => {
        const ctx = u.ctx;
        const [x0, x1] = [u.scales.x.min, u.scales.x.max];
        ctx.save();
        for (const e of vg.events) {
          if (e.job_key !== key || !markedKinds.has(e.kind)) continue;
          const t = new Date(e.t).getTime() / 1000;
          if (t < x0 || t > x1) continue;
          const x = Math.round(u.valToPos(t, "x", true));
          ctx.strokeStyle = evColors[e.kind] || "#888";
          ctx.lineWidth = 2 * devicePixelRatio;
          ctx.beginPath();
          ctx.moveTo(x, u.bbox.top);
          ctx.lineTo(x, u.bbox.top + u.bbox.height);
          ctx.stroke();
          ctx.fillStyle = ctx.strokeStyle;
          ctx.font = 10 * devicePixelRatio + "px sans-serif";
          ctx.fillText(e.kind, x + 3 * devicePixelRatio, u.bbox.top + 10 * devicePixelRatio);
        }
        ctx.restore();
      }],
    },
  };
}

function plotData(tl) {
  const limit = tl.t.map(() => tl.limit_bytes || null);
  return [tl.t, tl.gpu, tl.reserved, tl.alloc, limit];
}

function makePlot(tl, width) {
  const card = el("div", { class: "job" + (tl.live ? "" : " ended"), "data-key": tl.key },
    el("h3", {}, el("span", {}, tl.name + " ", el("span", { class: "muted" }, tl.kind)), el("span", { class: "now muted" })));
  const opts = {
    width: width, height: 170,
    legend: { show: false },
    cursor: { drag: { x: true, y: false } },
    scales: { x: { time: true }, y: { range: (u, lo, hi) => [0, Math.max(hi, 1) * 1.05] } },
    axes: [{}, { size: 64, values: (u, vals) => vals.map((v) => (v / GiB).toFixed(v >= 10 * GiB ? 0 : 1) + "G") }],
    series: [
      {},
      { label: "used", stroke: colors.gpu, width: 1.5 },
      { label: "reserved", stroke: colors.reserved, width: 1.5, spanGaps: false },
      { label: "allocated", stroke: colors.alloc, width: 1.5, spanGaps: false },
      { label: "limit", stroke: colors.limit, width: 1, dash: [6, 4] },
    ],
    plugins: [eventMarkers(tl.key)],
  };
  const u = new uPlot(opts, plotData(tl), card);
  u.vgKey = tl.key;
  card.u = u;
  return card;
}

function updateNow(key) {
  const tl = vg.timelines[key];
  const card = document.querySelector('.job[data-key="' + CSS.escape(key) + '"] .now');
  if (!tl || !card) return;
  const n = tl.t.length;
  card.textContent = n ? "used " + bytes(tl.gpu[n - 1]) + (tl.limit_bytes ? " of " + bytes(tl.limit_bytes) : "") : "no samples";
  card.dataset.gpu = n ? tl.gpu[n - 1] : "";
}

function plotWidth() {
  const w = document.getElementById("plots").clientWidth;
  const cols = Math.max(1, Math.floor(w / 470));
  return Math.floor(w / cols) - 30;
}

function renderPlots(d) {
  const box = document.getElementById("plots");
  for (const p of Object.values(vg.plots)) p.destroy();
  vg.plots = {};
  vg.timelines = {};
  const w = plotWidth();
  const cards = [];
  for (const tl of d.timelines) {
    vg.timelines[tl.key] = tl;
    const card = makePlot(tl, w);
    vg.plots[tl.key] = card.u;
    cards.push(card);
  }
  box.replaceChildren(...cards);
  for (const tl of d.timelines) updateNow(tl.key);
  const step = d.timelines.length ? d.timelines[0].step_s : null;
  document.getElementById("resolution").textContent = step ? "(one point per " + dur(step) + ")" : "";
}

// appendTimelines adds new points (live updates) and drops what left the range.
function appendTimelines(d) {
  const cut = Date.now() / 1000 - rangeSeconds(vg.range);
  let rebuild = false;
  for (const add of d.timelines) {
    const tl = vg.timelines[add.key];
    if (!tl) { rebuild = true; continue; }
    const last = tl.t.length ? tl.t[tl.t.length - 1] : -Infinity;
    for (let i = 0; i < add.t.length; i++) {
      if (add.t[i] <= last) continue;
      tl.t.push(add.t[i]); tl.gpu.push(add.gpu[i]); tl.rss.push(add.rss[i]);
      tl.alloc.push(add.alloc[i]); tl.reserved.push(add.reserved[i]);
    }
    tl.limit_bytes = add.limit_bytes;
    let k = 0;
    while (k < tl.t.length && tl.t[k] < cut) k++;
    if (k) for (const s of ["t", "gpu", "rss", "alloc", "reserved"]) tl[s].splice(0, k);
    vg.plots[add.key].setData(plotData(tl));
    updateNow(add.key);
  }
  return rebuild;
}

// ---- loading and live updates

// pointsFor: up to an hour every sample; beyond, one peak per pixel column
// (the server keeps each bucket's peak, so no spike is lost).
function pointsFor(r) {
  return rangeSeconds(r) <= 3600 ? 4000 : Math.max(300, Math.min(4000, plotWidth()));
}

let lastSample = 0;
let gen = 0;

async function loadAll() {
  const my = ++gen;
  const t0 = performance.now();
  const r = encodeURIComponent(vg.range);
  const [status, devices, jobs, tls, evs, runs] = await Promise.all([
    get("/api/v1/status"), get("/api/v1/devices"), get("/api/v1/jobs?range=" + r),
    get("/api/v1/timelines?range=" + r + "&points=" + pointsFor(vg.range)), get("/api/v1/events?range=" + r + "&limit=500"), get("/api/v1/runs"),
  ]);
  if (my !== gen) return;
  vg.status = status;
  document.getElementById("status").textContent = status.backend + " · sampling every " + status.interval_s + " s · " + (status.version || "");
  renderDevices(devices);
  renderJobs(jobs);
  vg.events = [];
  vg.lastEvent = 0;
  document.getElementById("events").replaceChildren();
  addEvents(evs.events);
  renderPlots(tls);
  renderRuns(runs);
  lastSample = Date.now();
  vg.loadMs = performance.now() - t0;
  vg.renderMs = performance.now();
  vg.ready = true;
  document.body.dataset.ready = vg.range;
}

async function tick() {
  if (!vg.ready) return;
  const my = gen;
  try {
    const [devices, jobs] = await Promise.all([get("/api/v1/devices"), get("/api/v1/jobs?range=" + encodeURIComponent(vg.range))]);
    if (my !== gen) return;
    renderDevices(devices);
    renderJobs(jobs);
    let from = Infinity;
    for (const tl of Object.values(vg.timelines)) if (tl.t.length) from = Math.min(from, tl.t[tl.t.length - 1]);
    const big = rangeSeconds(vg.range) > 6 * 3600;
    if (!big && from !== Infinity) {
      const d = await get("/api/v1/timelines?from=" + Math.floor(from * 1000 + 1) + "&points=100000");
      if (my !== gen) return;
      if (appendTimelines(d)) await loadAll();
    } else if (big && Date.now() - lastSample > 60000) {
      await loadAll();
    }
    setLive(true);
  } catch (e) {
    setLive(false);
  }
}

function setLive(on) {
  vg.live = on;
  document.getElementById("live").classList.toggle("on", on);
}

async function followEvents() {
  for (;;) {
    try {
      const d = await get("/api/v1/events?after=" + vg.lastEvent + "&wait=25s");
      if (vg.ready) addEvents(d.events);
    } catch (e) {
      setLive(false);
      await new Promise((r) => setTimeout(r, 2000));
    }
  }
}

function setRange(r) {
  vg.range = r;
  vg.ready = false;
  for (const b of document.querySelectorAll("#ranges button")) b.classList.toggle("on", b.dataset.range === r);
  history.replaceState(null, "", "#range=" + r);
  return loadAll().catch((e) => { document.getElementById("status").textContent = String(e); });
}

for (const b of document.querySelectorAll("#ranges button")) b.onclick = () => setRange(b.dataset.range);
const m = /range=(\w+)/.exec(location.hash);
setRange(m ? m[1] : "1h").then(() => { setLive(true); followEvents(); });
setInterval(tick, 1000);
