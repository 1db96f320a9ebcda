// The memory snapshot page: `vramguard snapshot FILE --serve` serves it
// with its data at api/v1/snapshot; the dashboard opens a run's OOM
// snapshot as snapshot.html?run=ID (api/v1/runs/ID/snapshot). The server
// sends a downsampled view (internal/snapshot View), so the page draws a
// snapshot of any size at once. Nothing is fetched from elsewhere.
"use strict";

const palette = ["#2f6fdf", "#e08a1e", "#2aa876", "#c8354a", "#6b46c1", "#3b9fb5", "#b5568a", "#7a8f2a",
  "#d4a017", "#5b6bbf", "#a0522d", "#2e8b57", "#9aa3b5"];
const params = new URLSearchParams(location.search);
const run = params.get("run");
const vgs = { view: null, device: 0, selected: null };
window.vgs = vgs;

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else if (k.startsWith("on")) e.addEventListener(k.slice(2), v); else e.setAttribute(k, v);
  }
  for (const k of kids.flat()) if (k !== null && k !== undefined) e.append(k);
  return e;
}
function svg(tag, attrs) {
  const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  return e;
}

function colour(site) { return site < 0 ? "#9aa3b5" : palette[site % palette.length]; }

async function load(device) {
  const base = run ? "api/v1/runs/" + encodeURIComponent(run) + "/snapshot" : "api/v1/snapshot";
  const r = await fetch(base + "?device=" + device);
  const body = await r.json();
  if (!r.ok) throw new Error(body.error || r.statusText);
  vgs.view = body;
  vgs.device = device;
  draw();
  document.body.dataset.ready = String(device);
}

function draw() {
  const v = vgs.view;
  document.getElementById("name").textContent = v.name;
  document.getElementById("back").hidden = !run;
  const nav = document.getElementById("devices");
  nav.replaceChildren(...v.devices.map(d => el("button", { class: d === v.device ? "on" : "", onclick: () => load(d) }, "device " + d)));
  drawSummary(v);
  drawTimeline(v);
  drawSegments(v);
  drawSites(v);
}

function drawSummary(v) {
  const s = v.summary, dl = document.getElementById("summary");
  const rows = [
    ["schema", "torch " + v.schema],
    ["reserved", fmtBytes(s.reserved_bytes) + " in " + s.segments + " segments (" + s.large_segments + " large, " + s.small_segments + " small" +
      (s.expandable_segments ? ", " + s.expandable_segments + " expandable" : "") + ")"],
    ["allocated", fmtBytes(s.allocated_bytes) + " in " + s.live_blocks + " live blocks, " + fmtBytes(s.requested_bytes) + " requested"],
    ["active", fmtBytes(s.active_bytes) + " (" + fmtBytes(s.pending_free_bytes) + " freed, pending on a stream)"],
    ["free", fmtBytes(s.free_bytes) + " cached in " + s.free_blocks + " blocks; largest " + fmtBytes(s.largest_free_block) + ", large pool " + fmtBytes(s.largest_free_large_block)],
  ];
  if (s.oom) {
    rows.push(["OOM", "asked for " + fmtBytes(s.oom.size) + " at " + s.oom.site + "; the device had " + fmtBytes(s.oom.device_free) + " free"]);
    rows.push(["why", s.oom.reason]);
  }
  dl.replaceChildren(...rows.flatMap(([k, t]) => [el("dt", {}, k), el("dd", { class: k === "OOM" ? "bad" : "" }, t)]));
}

// drawTimeline stacks each site's live bytes over the trace's events, as
// memory_viz's active memory timeline does.
function drawTimeline(v) {
  const tl = v.timeline, box = document.getElementById("timeline");
  const n = tl.events ? tl.events.length : 0;
  document.getElementById("tl-note").textContent = n ? "(" + tl.n_events + " events" + (n < tl.n_events ? ", " + n + " points: each the peak of its stretch" : "") + ")" : "";
  if (!n) { box.replaceChildren(el("p", { class: "muted" }, "this snapshot has no trace (record one with torch.cuda.memory._record_memory_history())")); return; }
  const W = 1000, H = 220, pad = 4;
  const maxTotal = Math.max(1, ...tl.total);
  const x = i => pad + (n === 1 ? 0 : i * (W - 2 * pad) / (n - 1));
  const y = b => H - pad - b * (H - 2 * pad) / maxTotal;
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", role: "img", "aria-label": "active memory timeline" });
  const base = new Array(n).fill(0);
  tl.live.forEach((series, s) => {
    const top = series.map((b, i) => base[i] + b);
    let d = "M" + x(0) + "," + y(top[0]);
    for (let i = 1; i < n; i++) d += "L" + x(i) + "," + y(top[i]);
    for (let i = n - 1; i >= 0; i--) d += "L" + x(i) + "," + y(base[i]);
    root.append(svg("path", { d: d + "Z", fill: colour(s), "data-site": s, class: "series" }));
    for (let i = 0; i < n; i++) base[i] = top[i];
  });
  const cursor = svg("line", { x1: 0, x2: 0, y1: 0, y2: H, stroke: "#1d2330", "stroke-width": 1, visibility: "hidden" });
  root.append(cursor);
  root.addEventListener("mousemove", ev => {
    const r = root.getBoundingClientRect();
    const fx = (ev.clientX - r.left) / r.width * W;
    const fy = Math.max(pad, Math.min(H - pad, (ev.clientY - r.top) / r.height * H)); // the padding counts as the edge band
    const i = Math.max(0, Math.min(n - 1, Math.round((fx - pad) / (W - 2 * pad) * (n - 1))));
    cursor.setAttribute("x1", x(i)); cursor.setAttribute("x2", x(i)); cursor.setAttribute("visibility", "visible");
    // the site under the pointer: the band whose stack holds fy
    let acc = 0, under = -1;
    for (let s = 0; s < tl.live.length; s++) {
      const lo = acc; acc += tl.live[s][i];
      if (tl.live[s][i] > 0 && fy <= y(lo) && fy >= y(acc)) under = s;
    }
    hover(i, under);
  });
  root.addEventListener("mouseleave", () => cursor.setAttribute("visibility", "hidden"));
  box.replaceChildren(root);
}

function hover(i, under) {
  const v = vgs.view, tl = v.timeline;
  const parts = ["event " + tl.events[i] + ": " + fmtBytes(tl.total[i]) + " live"];
  if (under >= 0) {
    const site = v.sites[under];
    parts.push(site.site + " holds " + fmtBytes(tl.live[under][i]));
    showStack(site.stack, "site " + site.site);
  }
  document.getElementById("hover").textContent = parts.join("; ");
}

function blockText(v, seg, b) {
  const state = b.state.replace(/_/g, " ");
  const where = "0x" + (BigInt(seg.address) + BigInt(b.offset)).toString(16);
  const site = b.site >= 0 ? " · " + v.sites[b.site].site : "";
  return (b.count > 1 ? b.count + " blocks, " : "") + fmtBytes(b.size) + " " + state + " at " + where + site;
}

function drawSegments(v) {
  const box = document.getElementById("segmap");
  document.getElementById("seg-note").textContent = "(" + v.segments.length + (v.merged ? "; neighbouring blocks of one state merged to draw" : "") + ")";
  const rows = v.segments.map(seg => {
    const bar = el("div", { class: "bar" });
    for (const b of seg.blocks) {
      const cls = b.state === "inactive" ? "inactive" : b.state === "active_pending_free" ? "pending" : "";
      const span = el("span", { class: cls, title: blockText(v, seg, b), style: "width:" + (100 * b.size / seg.total) + "%" + (cls ? "" : ";background:" + colour(b.site)) });
      span.addEventListener("click", () => {
        document.querySelectorAll(".seg .bar span.sel").forEach(s => s.classList.remove("sel"));
        span.classList.add("sel");
        showStack(b.stack, blockText(v, seg, b));
      });
      bar.append(span);
    }
    return el("div", { class: "seg" }, el("span", { class: "label", title: "0x" + BigInt(seg.address).toString(16) + " " + seg.type }, fmtBytes(seg.total) + " " + seg.type), bar);
  });
  box.replaceChildren(...(rows.length ? rows : [el("p", { class: "muted" }, "no segments on this device")]));
}

function drawSites(v) {
  const tb = document.querySelector("#sites tbody");
  tb.replaceChildren(...v.sites.map((s, i) => {
    const tr = el("tr", { "data-site": i }, el("td", {}, el("i", { class: "sw", style: "background:" + colour(i) })),
      el("td", { class: "site" }, s.site), el("td", { class: "num" }, fmtBytes(s.bytes)), el("td", { class: "num" }, String(s.blocks)));
    tr.addEventListener("click", () => {
      tb.querySelectorAll("tr.sel").forEach(r => r.classList.remove("sel"));
      tr.classList.add("sel");
      showStack(s.stack, "site " + s.site);
    });
    return tr;
  }));
}

function showStack(id, what) {
  const v = vgs.view, ol = document.getElementById("stack");
  document.getElementById("stack-what").textContent = what;
  vgs.selected = what;
  if (id === undefined || id < 0) { ol.replaceChildren(el("li", { class: "cpp" }, "no stack was recorded")); return; }
  const frames = v.stacks[id];
  let site = frames.findIndex(f => f.file.endsWith(".py") && !f.file.includes("/torch/") && !f.file.startsWith("torch/"));
  if (site < 0) site = frames.findIndex(f => f.file.endsWith(".py"));
  ol.replaceChildren(...frames.map((f, i) => el("li", { class: !f.file.endsWith(".py") ? "cpp" : i === site ? "site" : "" },
    f.file + ":" + f.line + " " + f.function)));
}

load(0).catch(e => {
  const p = document.getElementById("error");
  p.textContent = "could not load the snapshot: " + e.message;
  p.hidden = false;
  document.body.dataset.ready = "error";
});
