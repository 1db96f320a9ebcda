// vramguard dashboard. Everything it shows comes from the agent's JSON API
// (/api/v1/); nothing is loaded from elsewhere. Text from jobs (names,
// command lines, messages) is only ever set as textContent.
"use strict";

const vg = (window.vg = { plots: {}, timelines: {}, events: [], lastEvent: 0, range: "1h", ready: false, renderMs: null, live: false });

const GiB = 1024 ** 3;
const colors = { gpu: "#2f6fdf", reserved: "#e08a1e", alloc: "#2aa876", limit: "#c8354a" };
const evColors = { oom: "#c8354a", died: "#c8354a", leak: "#c8354a", oom_forecast: "#c8354a", checkpoint: "#2aa876", restart: "#e08a1e", unsaved_work: "#e08a1e", start: "#9aa3b5", exit: "#9aa3b5", note: "#6b46c1", cell: "#3b7dd8" };
const markedKinds = new Set(["oom", "checkpoint", "restart", "leak", "oom_forecast", "died", "exit", "unsaved_work", "note", "cell"]);

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null) continue;
    if (k === "class") e.className = v;
    else if (k.startsWith("data-") || k.startsWith("aria-")) e.setAttribute(k, v);
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


// goDuration writes seconds as Go's time.Duration does once rounded to
// roundMs ("100ms", "2.5s", "1m2.3s", "1h0m5s").
function goDuration(sec, roundMs) {
  let ms = Math.round((sec * 1000) / roundMs) * roundMs;
  if (ms === 0) return "0s";
  if (ms < 1000) return ms + "ms";
  const h = Math.floor(ms / 3600000);
  ms -= h * 3600000;
  const m = Math.floor(ms / 60000);
  ms -= m * 60000;
  const s = (ms / 1000).toFixed(3).replace(/\.?0+$/, "");
  return (h ? h + "h" : "") + (h || m ? m + "m" : "") + s + "s";
}

// formatSeconds is postmortem.FormatSeconds: milliseconds under a second,
// tenths under an hour, whole seconds beyond.
function formatSeconds(s) {
  return goDuration(s, s < 1 ? 1 : s < 3600 ? 100 : 1000);
}

// approxDuration is analyze.FormatDuration ("45s", "12m", "3.5h", "2.0d").
function approxDuration(s) {
  if (s === null || s === undefined || Number.isNaN(s)) return "?";
  if (s < 120) return s.toFixed(0) + "s";
  if (s < 7200) return (s / 60).toFixed(0) + "m";
  if (s < 172800) return (s / 3600).toFixed(1) + "h";
  return (s / 86400).toFixed(1) + "d";
}

function plural(n, thing) {
  if (n === 1) return "1 " + thing;
  return n + " " + thing + (thing.endsWith("s") ? "es" : "s");
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

// stamp is a compact local date and time: "2025-06-01 12:04".
function stamp(t) {
  const d = new Date(t);
  const p = (n) => String(n).padStart(2, "0");
  return d.getFullYear() + "-" + p(d.getMonth() + 1) + "-" + p(d.getDate()) + " " + p(d.getHours()) + ":" + p(d.getMinutes());
}

// reasonClass colours a run's reason by what it means: success is good, a
// stop or restart someone asked for is information, a run lost or stalled
// wants a look, everything else is a failure.
function reasonClass(reason) {
  switch (reason) {
    case "success": return "good";
    case "interrupted": case "restarted": case "": case undefined: case null: return "info";
    case "lost": case "stalled": return "warn";
  }
  return "bad";
}

// verdict says what the job's monitor concluded, in words.
function verdict(j) {
  switch (j.verdict) {
    case "insufficient_data": {
      if (!(j.judging_s > 0)) return { text: "judging…", cls: "judging" };
      const n = Math.max(1, Math.ceil(j.judging_s / 60));
      return { text: "judging — " + n + " more minute" + (n === 1 ? "" : "s"), cls: "judging" };
    }
    case "leak": return { text: "leak", cls: "bad" };
    case "cache_growth": return { text: "cache growth", cls: "warn" };
    case "stable": return { text: "stable", cls: "good" };
    case undefined: case null: case "":
      return j.run_id ? { text: "no leak raised", cls: "muted", title: "judged by the run's own monitor" } : { text: "–", cls: "" };
  }
  return { text: j.verdict, cls: "" };
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

// userFilter lists the owners of the jobs shown (keeping the one chosen
// even while it has none) and returns the chosen one ("" for everyone).
function userFilter(jobs) {
  const sel = document.getElementById("user-filter");
  const names = [...new Set(jobs.map((j) => j.user).filter(Boolean))].sort();
  if (sel.value && !names.includes(sel.value)) names.push(sel.value);
  const have = [...sel.options].slice(1).map((o) => o.value);
  if (have.join("\n") !== names.join("\n")) {
    const keep = sel.value;
    sel.replaceChildren(el("option", { value: "" }, "everyone"), ...names.map((n) => el("option", { value: n }, n)));
    sel.value = keep;
  }
  return sel.value;
}

function renderJobs(d) {
  const tb = document.querySelector("#jobs tbody");
  vg.jobs = d.jobs;
  const user = userFilter(d.jobs);
  tb.replaceChildren(...d.jobs.filter((j) => !user || j.user === user).flatMap((j) => {
    const ranks = j.live ? rankRows(j) : null;
    return ranks ? [jobRow(j), ranks] : [jobRow(j)];
  }));
}

// rankRows is, for a distributed job (its processes name their ranks), a
// row under the job's listing its processes grouped by rank, in rank
// order (the API's), with each rank's GPU memory and RSS summed over the
// rank's process and its workers; null for a job without ranks.
function rankRows(j) {
  const procs = j.processes || [];
  if (!procs.some((p) => p.rank != null)) return null;
  const groups = [];
  for (const p of procs) {
    const key = p.rank == null ? "none" : String(p.rank);
    let g = groups.find((x) => x.key === key);
    if (!g) groups.push((g = { key: key, first: p, procs: [], gpu: 0, rss: 0 }));
    g.procs.push(p);
    g.gpu += p.gpu_bytes || 0;
    g.rss += p.rss_bytes || 0;
  }
  const items = groups.map((g) => {
    const p = g.first;
    let head = "not a rank (launcher)";
    if (p.rank != null) {
      head = "rank " + p.rank + (p.world_size != null ? "/" + p.world_size : "");
      const extra = [];
      if (p.local_rank != null) extra.push("local rank " + p.local_rank);
      if (p.node) extra.push("node " + p.node);
      if (extra.length) head += " (" + extra.join(", ") + ")";
    }
    const who = g.procs.map((x) => x.pid + " " + x.comm + (x.role === "worker" ? " (worker)" : "")).join(", ");
    return el("li", { "data-rank": g.key }, el("b", {}, head), " GPU " + bytes(g.gpu) + " · RSS " + bytes(g.rss) + " · ",
      el("span", { class: "muted" }, "pid " + who));
  });
  return el("tr", { class: "ranks", "data-key": j.key }, el("td", { colSpan: 10 }, el("ul", { class: "ranks" }, ...items)));
}

function jobRow(j) {
  const v = verdict(j);
  const gpus = (j.devices || []).length ? (j.devices.length > 1 ? "GPUs " : "GPU ") + j.devices.join(",") : "no GPU";
  // an ended job has no current figures (its timeline has them all)
  const now = (n) => (j.live ? bytes(n) : "–");
  return el("tr", { "data-key": j.key },
    el("td", { class: "name" }, j.name, el("span", { class: "sub muted" }, j.kind + " · " + gpus)),
    el("td", { class: "user" }, j.user || "unknown"),
    el("td", { class: "num" }, now(j.gpu_bytes)),
    el("td", { class: "num" }, now(j.reserved_bytes)),
    el("td", { class: "num" }, now(j.allocated_bytes)),
    el("td", { class: "num" }, now(j.rss_bytes)),
    el("td", { class: "verdict " + v.cls, title: v.title }, v.text),
    el("td", { class: "num" + (j.oom_eta_s != null ? " bad" : "") }, j.oom_eta_s != null ? dur(j.oom_eta_s) : "–"),
    el("td", { class: "num" }, j.seconds_since_checkpoint != null ? dur(j.seconds_since_checkpoint) + " ago" : j.live ? "none seen" : "–"),
    el("td", {}, j.live ? "running" : "ended"));
}

function renderRuns(d) {
  const tb = document.querySelector("#runs tbody");
  tb.replaceChildren(...d.runs.map((r) => {
    const peak = r.peak_gpu_bytes > 0 ? bytes(r.peak_gpu_bytes) : "—";
    const tr = el("tr", { "data-id": r.id, class: r.id === vg.shownRun ? "on" : "" },
      el("td", { class: "name" }, r.name || r.id),
      el("td", {}, r.status),
      el("td", { class: "reason " + reasonClass(r.reason) }, r.reason || (r.status === "running" ? "running" : "–")),
      el("td", {}, stamp(r.started_at)),
      el("td", { class: "num", title: r.peak_gpu_bytes > 0 ? "peak GPU memory of the run's processes" : "no GPU memory seen" }, peak));
    tr.onclick = () => showRun(r.id);
    return tr;
  }));
}

async function showRun(id) {
  const pm = document.getElementById("postmortem");
  vg.shownRun = id;
  for (const tr of document.querySelectorAll("#runs tbody tr")) tr.classList.toggle("on", tr.dataset.id === id);
  const doc = await get("/api/v1/runs/" + encodeURIComponent(id));
  if (vg.shownRun !== id) return;
  pm.replaceChildren(...postmortem(doc));
  pm.dataset.run = id;
  pm.hidden = false;
}

// postmortem renders the document `vramguard explain` prints (and
// `explain --json` writes): reason, evidence, what to change, attempts, the
// monitor, the memory timeline and what the probe saw.
function postmortem(d) {
  const out = [];
  const close = el("button", { title: "close", "aria-label": "close" }, "×");
  close.onclick = () => {
    const pm = document.getElementById("postmortem");
    pm.hidden = true;
    vg.shownRun = null;
    for (const tr of document.querySelectorAll("#runs tbody tr")) tr.classList.remove("on");
  };
  out.push(el("h3", {}, el("span", {}, "run " + d.run_id + (d.name ? " (" + d.name + ")" : "")), close));

  const facts = el("dl", { class: "facts" });
  const fact = (k, ...v) => facts.append(el("dt", {}, k), el("dd", {}, ...v));
  fact("command", el("code", {}, (d.command || []).join(" ")));
  fact("status", d.status);
  if (d.reason) fact("reason", el("b", { class: "reason " + reasonClass(d.reason) }, d.reason), " — " + d.summary);
  else fact("reason", el("span", { class: "muted" }, "(none yet) "), d.summary);
  if (d.ended) fact("exit", String(d.exit_code) + (d.signal ? " (" + d.signal + ")" : ""));
  if (d.duration_s) fact("ran for", formatSeconds(d.duration_s));
  out.push(facts);

  const list = (title, items, cls) => {
    if (!items || !items.length) return;
    out.push(el("section", { class: cls }, el("h4", {}, title), el("ul", {}, ...items.map((x) => el("li", {}, x)))));
  };
  list("evidence", d.evidence, "evidence");
  if (d.oom) {
    const dl = el("dl", {});
    for (const [name, v] of [["tried to allocate", d.oom.tried_bytes], ["GPU total", d.oom.total_bytes], ["GPU free", d.oom.free_bytes],
      ["allocated by PyTorch", d.oom.allocated_bytes], ["reserved, unallocated", d.oom.reserved_unallocated_bytes]]) {
      if (v !== null && v !== undefined) dl.append(el("dt", {}, name), el("dd", {}, fmtBytes(v)));
    }
    out.push(el("section", { class: "oom-numbers" }, el("h4", {}, "CUDA OOM numbers"), dl));
  }
  list("what to change", d.advice, "advice");
  if (d.adaptations && d.adaptations.length) {
    const sec = el("section", { class: "adaptations" }, el("h4", {}, "adaptations (--adapt)"),
      el("ul", {}, ...d.adaptations.map((st) => el("li", {}, stepText(st) + " — " + st.why))));
    if (d.settings) sec.append(el("p", {}, (d.reason === "success" ? "settings that fit: " : "last settings: ") + settingsText(d.settings)));
    out.push(sec);
  }
  if (d.restart_decision) out.push(el("section", { class: "restart" }, el("h4", {}, "restart"), el("p", {}, d.restart_decision)));

  if (d.attempts_detail && d.attempts_detail.length) {
    const rows = d.attempts_detail.map((a) => el("tr", {},
      el("td", {}, "#" + a.n),
      el("td", { class: "reason " + reasonClass(a.reason) }, a.reason || "-"),
      el("td", { class: "num" }, "exit " + (a.exit_code === null || a.exit_code === undefined ? "-" : a.exit_code)),
      el("td", { class: "num" }, goDuration(a.duration_s, 100)),
      el("td", {}, [a.settings ? settingsText(a.settings) : "", a.resume_from ? "resumed from " + a.resume_from : ""].filter(Boolean).join("  "))));
    out.push(el("section", { class: "attempts" }, el("h4", {}, "attempts"), el("table", {}, el("tbody", {}, ...rows))));
  }

  if (d.monitor) out.push(monitorSection(d.monitor));
  const mem = memorySection(d.timeline);
  if (mem) out.push(mem);
  if (d.probe) out.push(probeSection(d.probe, d.oom_allocation_sites, d.oom_allocation_sites_error, d.run_id));
  out.push(el("p", { class: "more muted" }, "more: ", el("code", {}, "vramguard explain " + d.run_id), " · ", el("code", {}, "vramguard logs " + d.run_id)));
  return out;
}

// settingsText and stepText write what --adapt ran with and changed, as
// explain does: "batch 16, accum 4, workers 2"; "attempt 2 after cuda_oom:
// batch 64→32, accum 1→2".
function settingsText(st) {
  const parts = [];
  for (const k of ["batch", "accum", "workers"]) if (st[k] !== undefined) parts.push(k + " " + st[k]);
  if (st.alloc_conf) parts.push("PYTORCH_CUDA_ALLOC_CONF=" + st.alloc_conf);
  return parts.join(", ");
}

function stepText(st) {
  const parts = [];
  for (const k of ["batch", "accum", "workers", "alloc_conf"]) {
    const c = (st.changes || {})[k];
    if (!c) continue;
    parts.push(k === "alloc_conf" ? "PYTORCH_CUDA_ALLOC_CONF=" + c[1] : k + " " + c[0] + "→" + c[1]);
  }
  return "attempt " + st.attempt + " after " + st.after_reason + ": " + parts.join(", ");
}

function seriesName(s) {
  return { rss: "host memory", allocated: "PyTorch allocated", reserved: "PyTorch reserved", used: "GPU memory (NVML)" }[s] || s;
}

function monitorSection(m) {
  const dl = el("dl", {});
  let v = m.verdict;
  if (m.series) v += " (" + seriesName(m.series) + ")";
  dl.append(el("dt", {}, "verdict"), el("dd", {}, v + ", over " + plural(m.samples, "sample")));
  if (m.leak) {
    const l = m.leak;
    let s = "first seen " + clock(l.detected_at) + " (t=" + l.detected_at_s.toFixed(0) + "s): +" + fmtBytes(l.leak_rate_bytes_per_s) +
      "/s of " + seriesName(l.series) + " since t=" + l.leak_start_s.toFixed(0) + "s";
    if (l.oom_eta_s != null) s += "; forecast then: out of memory in about " + approxDuration(l.oom_eta_s);
    dl.append(el("dt", {}, "leak"), el("dd", { class: "bad" }, s));
  }
  const f = m.oom_forecast;
  if (f && f.oom_eta_s != null) {
    dl.append(el("dt", {}, "forecast"), el("dd", {}, "at " + clock(f.detected_at) + " (t=" + f.detected_at_s.toFixed(0) + "s): out of memory in about " + approxDuration(f.oom_eta_s)));
  }
  return el("section", { class: "monitor" }, el("h4", {}, "monitor"), dl);
}

function memorySection(tl) {
  if (!tl || !tl.samples) return null;
  const dl = el("dl", {});
  const row = (k, ...v) => dl.append(el("dt", {}, k), el("dd", {}, ...v));
  row("host RSS", el("span", { class: "spark" }, tl.sparkline), "  first " + fmtBytes(tl.rss_first_bytes) + ", peak " + fmtBytes(tl.rss_peak_bytes) +
    ", last " + fmtBytes(tl.rss_last_bytes) + " (summed over the job's processes; " + plural(tl.samples, "sample") + ", up to " + plural(tl.max_processes, "process") + ")");
  if (tl.pss_peak_bytes != null) row("host PSS", "peak " + fmtBytes(tl.pss_peak_bytes) + " (shared pages split between the processes sharing them)");
  if (tl.cgroup_peak_bytes != null) {
    row("cgroup", "peak " + fmtBytes(tl.cgroup_peak_bytes) + (tl.cgroup_limit_bytes != null ? " of its " + fmtBytes(tl.cgroup_limit_bytes) + " limit" : "") +
      " (the job's own cgroup, page cache included)");
  }
  if (tl.gpu_peak_bytes != null) row("GPU", "peak " + fmtBytes(tl.gpu_peak_bytes) + " (NVML, the job's processes)");
  if (tl.allocated_peak_bytes != null) {
    row("PyTorch", "peak allocated " + fmtBytes(tl.allocated_peak_bytes) + (tl.reserved_peak_bytes != null ? ", reserved " + fmtBytes(tl.reserved_peak_bytes) : "") +
      " (the probe, summed over processes)");
  }
  return el("section", { class: "memory" }, el("h4", {}, "memory timeline"), dl);
}

function probeSection(p, sites, sitesErr, runID) {
  const dl = el("dl", {});
  const row = (k, ...v) => dl.append(el("dt", {}, k), el("dd", {}, ...v));
  row("steps", p.optimizer_steps + " optimizer steps" + (p.user_steps > 0 ? ", " + p.user_steps + " counted by the job" : "") +
    " (" + plural(p.samples, "sample") + " from " + plural((p.pids || []).length, "process") + ")");
  if (p.peak_allocated_bytes != null || p.peak_reserved_bytes != null) {
    const parts = [];
    if (p.peak_allocated_bytes != null) parts.push("allocated " + fmtBytes(p.peak_allocated_bytes));
    if (p.peak_reserved_bytes != null) parts.push("reserved " + fmtBytes(p.peak_reserved_bytes));
    row("peaks", parts.join(", ") + " (one device of one process)");
  }
  if (p.peak_rss_bytes > 0) row("host", "largest RSS of one process " + fmtBytes(p.peak_rss_bytes));
  if (p.num_alloc_retries > 0 || p.num_ooms > 0) row("allocator", p.num_alloc_retries + " retries, " + p.num_ooms + " OOMs");
  const cks = p.checkpoints || [];
  if (cks.length) {
    const shown = cks.slice(-10);
    const items = shown.map((c) => el("li", {}, clock(c.t) + "  " + c.path.split("/").pop() + "  " +
      (c.error ? "failed: " + c.error : fmtBytes(c.bytes) + " in " + formatSeconds(c.seconds)) + " (step " + c.optimizer_steps + (c.atomic ? ", atomic" : "") + ")"));
    if (cks.length > shown.length) items.unshift(el("li", { class: "muted" }, "… " + (cks.length - shown.length) + " earlier"));
    row("checkpoints (" + cks.length + ")", el("ul", {}, ...items));
  }
  if (p.oom) {
    const o = p.oom;
    let s = clock(o.t) + " in pid " + o.pid + " (" + o.source + ")";
    if (o.alloc_bytes != null) s += ", tried to allocate " + fmtBytes(o.alloc_bytes);
    if (o.count > 1) s += ", " + o.count + " in all";
    row("CUDA OOM", el("span", { class: "bad" }, s), o.snapshot_path ? el("div", {}, "snapshot ", el("code", {}, o.snapshot_path), " ", el("a", { class: "snapshot-link", href: "snapshot.html?run=" + encodeURIComponent(runID) }, "draw it")) : "");
  }
  if (sites && sites.length) {
    row("largest allocation sites at the OOM", el("ul", {}, ...sites.map((x) => el("li", {}, fmtBytes(x.bytes) + "  " + x.file + ":" + x.line + " " + x.function + " (" + x.blocks + " blocks)"))));
  } else if (sitesErr) {
    row("allocation sites", "unreadable: " + sitesErr);
  }
  for (const e of p.errors || []) row("probe error", e);
  return el("section", { class: "probe" }, el("h4", {}, "probe (inside PyTorch)"), dl);
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
    // a cell may lie past the plot's axis: setData takes its span in again
    if (p && e.kind === "cell") p.setData(p.data);
    else if (p && markedKinds.has(e.kind)) p.redraw(false, false);
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
        u.cellMarks = [];
        for (const e of vg.events) {
          if (e.job_key !== key || !markedKinds.has(e.kind)) continue;
          if (e.kind === "cell") { cellMark(u, e); continue; }
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

// cellSpan is the time axis of a job's plot: its samples' span (lo to hi,
// null without samples), widened to take in the job's notebook cells, so
// that a cell run after the last sample (a kernel shut down before its probe
// sampled again) is still marked. Without cells it is uPlot's own range of
// a time axis: the samples' span.
function cellSpan(key, lo, hi) {
  for (const e of vg.events) {
    if (e.job_key !== key || e.kind !== "cell") continue;
    const d = e.data || {};
    const t1 = new Date(d.end || e.t).getTime() / 1000, t0 = d.start ? new Date(d.start).getTime() / 1000 : t1;
    lo = lo == null ? t0 : Math.min(lo, t0);
    hi = hi == null ? t1 : Math.max(hi, t1);
  }
  return lo == null ? [null, null] : [lo, hi];
}

// cellMark shades a notebook cell's span (its start to its end, from the
// probe's cell message) on the kernel's plot and labels it In[N]; the marks
// drawn are kept on the plot (u.cellMarks) for tests and tooltips.
function cellMark(u, e) {
  const d = e.data || {};
  const t1 = new Date(d.end || e.t).getTime() / 1000, t0 = d.start ? new Date(d.start).getTime() / 1000 : t1;
  if (t1 < u.scales.x.min || t0 > u.scales.x.max) return;
  const ctx = u.ctx, dpr = devicePixelRatio;
  const x0 = Math.round(u.valToPos(Math.max(t0, u.scales.x.min), "x", true));
  const x1 = Math.max(x0 + dpr, Math.round(u.valToPos(Math.min(t1, u.scales.x.max), "x", true)));
  ctx.fillStyle = "rgba(59, 125, 216, 0.12)";
  ctx.fillRect(x0, u.bbox.top, x1 - x0, u.bbox.height);
  ctx.fillStyle = evColors.cell;
  ctx.fillRect(x0, u.bbox.top, dpr, u.bbox.height);
  ctx.font = 10 * dpr + "px sans-serif";
  const label = "In[" + d.execution_count + "]";
  ctx.fillText(label, x0 + 3 * dpr, u.bbox.top + 22 * dpr);
  u.cellMarks.push({ label: label, x0: x0, x1: x1, t0: t0, t1: t1 });
}

// plotData turns a timeline into uPlot's columns. Where two points lie
// further apart than the timeline's gap_s (the job had no samples between
// them) a point of nulls goes between, so the lines break there; the limit
// line carries on.
function plotData(tl) {
  const gap = tl.gap_s > 0 ? tl.gap_s : Infinity;
  const lim = tl.limit_bytes || null;
  const t = [], gpu = [], res = [], alloc = [], limit = [];
  for (let i = 0; i < tl.t.length; i++) {
    if (i > 0 && tl.t[i] - tl.t[i - 1] > gap) {
      t.push((tl.t[i - 1] + tl.t[i]) / 2);
      gpu.push(null); res.push(null); alloc.push(null); limit.push(lim);
    }
    t.push(tl.t[i]); gpu.push(tl.gpu[i]); res.push(tl.reserved[i]); alloc.push(tl.alloc[i]); limit.push(lim);
  }
  return [t, gpu, res, alloc, limit];
}

const MiB = 1024 ** 2;
// yIncrs: tick steps are whole MiB, GiB or TiB (1, 2, 5, 10, 20, 50, ... of
// them), never decimal gigabytes.
const yIncrs = [];
for (const unit of [MiB, GiB, 1024 * GiB]) for (const k of [1, 2, 5, 10, 20, 50, 100, 200, 500]) yIncrs.push(k * unit);

// tickLabel writes a tick of a step incr in the step's unit.
function tickLabel(v, incr) {
  if (v === 0) return "0";
  for (const [unit, name] of [[1024 * GiB, "TiB"], [GiB, "GiB"], [MiB, "MiB"]]) {
    if (incr >= unit) return +(v / unit).toFixed(3) + " " + name;
  }
  return fmtBytes(v);
}

// limitName says what the limit line is: the total memory of the job's GPUs.
function limitName(tl) {
  const d = tl.devices || [];
  const which = d.length === 0 ? "its GPUs'" : d.length === 1 ? "GPU " + d[0] : "GPUs " + d.join("+");
  return "limit " + fmtBytes(tl.limit_bytes) + " (" + which + " total)";
}

// limitLabel keeps the limit line's label next to the line.
function limitLabel(key) {
  return {
    hooks: {
      draw: [(u) => {
        const tl = vg.timelines[key];
        let lab = u.over.querySelector(".limit-label");
        if (!tl || !tl.limit_bytes) { if (lab) lab.remove(); return; }
        if (!lab) { lab = el("span", { class: "limit-label" }); u.over.append(lab); }
        lab.textContent = limitName(tl);
        // above the line, or below it where the plot's top leaves no room
        const y = u.valToPos(tl.limit_bytes, "y"), h = lab.offsetHeight;
        lab.style.top = (y - h - 2 >= 0 ? y - h - 2 : y + 2) + "px";
      }],
    },
  };
}

function makeCard(tl) {
  return el("div", { class: "job" + (tl.live ? "" : " ended"), "data-key": tl.key },
    el("h3", {}, el("span", {}, tl.name + " ", el("span", { class: "muted" }, tl.kind)), el("span", { class: "now muted" })));
}

function makePlot(card, tl, width) {
  const opts = {
    width: width, height: 170,
    legend: { show: false },
    cursor: { drag: { x: true, y: false } },
    scales: { x: { time: true, range: (u, lo, hi) => cellSpan(tl.key, lo, hi) }, y: { range: (u, lo, hi) => [0, Math.max(hi, 1) * 1.05] } },
    axes: [{}, { size: 64, space: 24, incrs: yIncrs, values: (u, vals, ax, space, incr) => vals.map((v) => tickLabel(v, incr)) }],
    series: [
      {},
      { label: "used", stroke: colors.gpu, width: 1.5, spanGaps: false },
      { label: "reserved", stroke: colors.reserved, width: 1.5, spanGaps: false },
      { label: "allocated", stroke: colors.alloc, width: 1.5, spanGaps: false },
      { label: "limit", stroke: colors.limit, width: 1, dash: [6, 4], spanGaps: true },
    ],
    plugins: [eventMarkers(tl.key), limitLabel(tl.key)],
  };
  const u = new uPlot(opts, plotData(tl), card);
  u.vgKey = tl.key;
  return u;
}

function updateNow(key) {
  const tl = vg.timelines[key];
  const card = document.querySelector('.job[data-key="' + CSS.escape(key) + '"] .now');
  if (!tl || !card) return;
  const n = tl.t.length;
  card.textContent = n ? "used " + bytes(tl.gpu[n - 1]) + (tl.limit_bytes ? " of " + bytes(tl.limit_bytes) : "") : "no samples";
  card.dataset.gpu = n ? tl.gpu[n - 1] : "";
}

// plotWidth is the width a plot gets: its card's, less the card's padding
// (the grid of cards sets their width; an estimate before there are any).
function plotWidth() {
  const card = document.querySelector("#plots .job");
  if (!card) return Math.max(100, document.getElementById("plots").clientWidth - 22);
  const cs = getComputedStyle(card);
  return Math.max(100, Math.floor(card.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight)));
}

// The plots follow their cards' width (the window's, less a scroll bar
// that comes and goes).
let resizeTimer = 0;
new ResizeObserver(() => {
  clearTimeout(resizeTimer);
  resizeTimer = setTimeout(() => {
    const w = plotWidth();
    for (const u of Object.values(vg.plots)) if (u.width !== w) u.setSize({ width: w, height: 170 });
  }, 50);
}).observe(document.getElementById("plots"));

function renderPlots(d) {
  const box = document.getElementById("plots");
  for (const p of Object.values(vg.plots)) p.destroy();
  vg.plots = {};
  vg.timelines = {};
  const cards = d.timelines.map(makeCard);
  box.replaceChildren(...cards);
  const w = plotWidth();
  d.timelines.forEach((tl, i) => {
    vg.timelines[tl.key] = tl;
    vg.plots[tl.key] = makePlot(cards[i], tl, w);
  });
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
    tl.devices = add.devices;
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
document.getElementById("user-filter").onchange = () => { if (vg.jobs) renderJobs({ jobs: vg.jobs }); };
const m = /range=(\w+)/.exec(location.hash);
setRange(m ? m[1] : "1h").then(() => { setLive(true); followEvents(); });
setInterval(tick, 1000);
