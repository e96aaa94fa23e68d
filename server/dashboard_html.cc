#include "server/dashboard_html.h"

namespace braid::server {

namespace {

// Element ids the end-to-end test reads: #jobs (one row per job, with
// data-job-id and a .phase cell), #detail-id, #baselines, #timeline, #workers.
// Per job the jobs table shows the predicted iteration time next to the one
// the training ranks measured (ReportMeasurement), and the detail line says
// when a plan was rolled back.
// Every value from the API goes into the page through textContent or an SVG
// attribute, never as markup.
constexpr std::string_view kHtml = R"HTML(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>braid status</title>
<style>
  body { font: 14px/1.4 system-ui, sans-serif; margin: 0; color: #1d2330; background: #f5f6f8; }
  header { background: #1d2330; color: #fff; padding: 10px 20px; display: flex; gap: 16px; align-items: baseline; }
  header h1 { font-size: 18px; margin: 0; }
  header span { color: #aab; font-size: 12px; }
  main { padding: 12px 20px; display: grid; gap: 16px; grid-template-columns: minmax(0, 1fr); }
  section { background: #fff; border: 1px solid #dde; border-radius: 6px; padding: 10px 14px; }
  h2 { font-size: 15px; margin: 0 0 8px; }
  table { border-collapse: collapse; width: 100%; }
  th, td { text-align: left; padding: 4px 6px; border-bottom: 1px solid #eef; white-space: nowrap; }
  th { font-weight: 600; color: #556; font-size: 12px; }
  td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
  tr.job { cursor: pointer; }
  tr.job:hover { background: #f0f4ff; }
  tr.selected { background: #e3ebff; }
  .phase { font-weight: 600; }
  .phase-done { color: #17803d; } .phase-failed { color: #b42318; } .phase-cancelled { color: #777; }
  .phase-searching, .phase-importing, .phase-profiling { color: #1f5fbf; }
  .muted { color: #889; }
  .error { color: #b42318; }
  #banner { display: none; background: #fde8e8; color: #b42318; padding: 8px 20px; }
  .row { display: grid; gap: 16px; grid-template-columns: minmax(240px, 1fr) auto; }
  .row > div { min-width: 0; }
  svg { width: 100%; background: #fbfbfd; border: 1px solid #eef; }
  svg text { font-size: 11px; fill: #556; }
  tr.braid td { font-weight: 600; background: #eefbf1; }
  button { font: inherit; padding: 2px 10px; }
</style>
</head>
<body>
<header><h1>braid strategy service</h1><span id="updated">loading&hellip;</span></header>
<div id="banner"></div>
<main>
  <section>
    <h2>Jobs</h2>
    <table>
      <thead><tr><th>Job</th><th>Name</th><th>Phase</th><th class="num">Best cost (ms)</th>
        <th class="num">Candidates</th><th class="num">Elapsed (s)</th><th>Created</th>
        <th class="num">Predicted (ms)</th><th class="num">Measured (ms)</th></tr></thead>
      <tbody id="jobs"><tr><td colspan="9" class="muted">no jobs yet</td></tr></tbody>
    </table>
  </section>
  <section id="detail">
    <h2>Job <span id="detail-id" class="muted">(select a job)</span>
      <span id="detail-phase" class="phase"></span></h2>
    <div id="detail-summary" class="muted"></div>
    <div class="row">
      <div>
        <h2>Best predicted iteration time</h2>
        <svg id="chart" viewBox="0 0 480 200" preserveAspectRatio="none"></svg>
        <div id="chart-note" class="muted"></div>
      </div>
      <div>
        <h2>Baselines</h2>
        <table>
          <thead><tr><th>Plan</th><th class="num">Iteration (ms)</th><th class="num">Compute (ms)</th>
            <th class="num">Comm (ms)</th><th class="num">braid speedup</th></tr></thead>
          <tbody id="baselines"><tr><td colspan="5" class="muted">available when the job is done</td></tr></tbody>
        </table>
      </div>
    </div>
    <h2 style="margin-top:12px">Simulated iteration of braid's plan
      <button id="trace" disabled>Chrome trace JSON</button></h2>
    <svg id="timeline" viewBox="0 0 960 60" preserveAspectRatio="none"></svg>
    <div id="timeline-note" class="muted"></div>
  </section>
  <section>
    <h2>Workers</h2>
    <table>
      <thead><tr><th>Worker</th><th>Name</th><th>Device kind</th><th class="num">Slots</th>
        <th>Last heartbeat</th><th>State</th></tr></thead>
      <tbody id="workers"><tr><td colspan="6" class="muted">no workers registered</td></tr></tbody>
    </table>
  </section>
</main>
<script>
"use strict";
const token = new URLSearchParams(location.search).get("token") || "";
const SVG = "http://www.w3.org/2000/svg";
let selected = null;          // job id shown in the detail section
let userSelected = false;     // the user clicked a row
let detailFinal = null;       // feedbackKey of the finished job whose detail is rendered
let timelineFor = null;       // id whose timeline is rendered

async function api(path) {
  const r = await fetch(path, { headers: { "Authorization": "Bearer " + token } });
  const body = await r.json().catch(() => ({ error: "HTTP " + r.status }));
  if (!r.ok) throw new Error(path + ": " + (body.error || ("HTTP " + r.status)));
  return body;
}
function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}
function svgEl(tag, attrs, text) {
  const e = document.createElementNS(SVG, tag);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  return e;
}
function ms(s) { return (s === null || s === undefined) ? "" : (s * 1e3).toFixed(3); }
function secs(s) { return (s === null || s === undefined) ? "" : s.toFixed(1); }
// What the training ranks measured (null until they reported).
function measuredText(j) {
  if (j.measured_iteration_s === null || j.measured_iteration_s === undefined) return "";
  let t = ms(j.measured_iteration_s);
  if (j.measured_baseline_s) t += " (ddp " + ms(j.measured_baseline_s) + ")";
  if (j.rolled_back) t += " rolled back";
  return t;
}
function isFinal(p) { return p === "done" || p === "failed" || p === "cancelled"; }
function fill(tbody, rows, cols, empty) {
  tbody.replaceChildren();
  if (rows.length === 0) {
    const tr = el("tr"); const td = el("td", empty, "muted"); td.colSpan = cols; tr.append(td); tbody.append(tr);
  }
  for (const r of rows) tbody.append(r);
}
function banner(msg) {
  const b = document.getElementById("banner");
  b.textContent = msg || ""; b.style.display = msg ? "block" : "none";
}

function renderJobs(jobs) {
  const rows = jobs.map(j => {
    const tr = el("tr", null, "job" + (j.id === selected ? " selected" : ""));
    tr.dataset.jobId = j.id;
    tr.append(el("td", j.id), el("td", j.name), el("td", j.phase, "phase phase-" + j.phase),
              el("td", ms(j.best_cost_s), "num"), el("td", j.candidates_evaluated, "num"),
              el("td", secs(j.elapsed_s), "num"),
              el("td", new Date(j.created_unix_s * 1000).toLocaleString()),
              el("td", ms(j.predicted_iteration_s), "num"),
              el("td", measuredText(j), "num" + (j.rolled_back ? " error" : "")));
    tr.addEventListener("click", () => { selected = j.id; userSelected = true; detailFinal = null; refresh(); });
    return tr;
  });
  fill(document.getElementById("jobs"), rows, 9, "no jobs yet");
}

function renderChart(history, note) {
  const svg = document.getElementById("chart");
  svg.replaceChildren();
  const W = 480, H = 200, L = 56, B = 22, T = 8, R = 8;
  if (history.length < 2) {
    document.getElementById("chart-note").textContent = note;
    return;
  }
  document.getElementById("chart-note").textContent =
      history.length + " progress points (kept in memory by this server process)";
  const xs = history.map(p => p[0]), ys = history.map(p => p[1]);
  const x0 = Math.min(...xs), x1 = Math.max(...xs) || 1;
  let y0 = Math.min(...ys), y1 = Math.max(...ys);
  if (y1 - y0 < 1e-12) { y0 *= 0.95; y1 *= 1.05; }
  const sx = x => L + (W - L - R) * (x - x0) / ((x1 - x0) || 1);
  const sy = y => T + (H - T - B) * (1 - (y - y0) / (y1 - y0));
  let pts = "";
  history.forEach((p, i) => {
    if (i > 0) pts += sx(p[0]) + "," + sy(history[i - 1][1]) + " ";
    pts += sx(p[0]) + "," + sy(p[1]) + " ";
  });
  svg.append(svgEl("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: "#99a" }),
             svgEl("line", { x1: L, y1: T, x2: L, y2: H - B, stroke: "#99a" }),
             svgEl("polyline", { points: pts, fill: "none", stroke: "#1f5fbf", "stroke-width": 2 }),
             svgEl("text", { x: 2, y: T + 10 }, ms(y1) + " ms"),
             svgEl("text", { x: 2, y: H - B }, ms(y0) + " ms"),
             svgEl("text", { x: L, y: H - 6 }, x0.toFixed(1) + " s"),
             svgEl("text", { x: W - R - 40, y: H - 6 }, x1.toFixed(1) + " s"));
}

function renderBaselines(plan) {
  const rows = [];
  if (plan) {
    const braid = plan.iteration_s;
    for (const b of plan.baselines) {
      const tr = el("tr");
      tr.append(el("td", b.name), el("td", ms(b.iteration_s), "num"), el("td", ms(b.compute_s), "num"),
                el("td", ms(b.comm_s), "num"),
                el("td", braid > 0 ? (b.iteration_s / braid).toFixed(3) + "x" : "", "num"));
      rows.push(tr);
    }
    const tb = el("tr", null, "braid");
    tb.append(el("td", "braid (" + plan.origin + (plan.rolled_back ? ", rolled back" : "") + ")"),
              el("td", ms(braid), "num"), el("td", ms(plan.compute_s), "num"),
              el("td", ms(plan.comm_s), "num"), el("td", "1.000x", "num"));
    rows.push(tb);
    const fo = el("tr");
    fo.append(el("td", "fully overlapped bound (FO)"), el("td", ms(plan.fo_bound_s), "num"), el("td", ""),
              el("td", ""), el("td", braid > 0 ? (plan.fo_bound_s / braid).toFixed(3) + "x" : "", "num"));
    rows.push(fo);
  }
  fill(document.getElementById("baselines"), rows, 5, "available when the job is done");
}

function renderTimeline(t) {
  const svg = document.getElementById("timeline");
  svg.replaceChildren();
  const note = document.getElementById("timeline-note");
  if (!t) { svg.setAttribute("viewBox", "0 0 960 60"); return; }
  const W = 960, L = 80, lane = 22, H = t.lanes.length * lane + 20;
  svg.setAttribute("viewBox", "0 0 " + W + " " + H);
  svg.style.height = Math.max(60, H) + "px";
  const span = t.iteration_s || 1;
  t.lanes.forEach((name, i) => svg.append(svgEl("text", { x: 2, y: i * lane + 15 }, name)));
  for (const [ln, s, e, name] of t.tasks) {
    const x = L + (W - L - 4) * s / span, w = Math.max(0.5, (W - L - 4) * (e - s) / span);
    const comm = t.lanes[ln].startsWith("comm");
    const r = svgEl("rect", { x: x, y: ln * lane + 3, width: w, height: lane - 6,
                              fill: comm ? "#e8833a" : "#3a78d8", "fill-opacity": 0.85 });
    r.append(svgEl("title", {}, name + ": " + ms(e - s) + " ms at " + ms(s) + " ms"));
    svg.append(r);
  }
  svg.append(svgEl("text", { x: L, y: H - 4 }, "0 ms"),
             svgEl("text", { x: W - 90, y: H - 4 }, ms(span) + " ms"));
  note.textContent = t.task_count + " tasks, iteration " + ms(t.iteration_s) + " ms (re-simulated with the current cost model)" +
      (t.truncated ? "; first " + t.tasks.length + " tasks drawn" : "");
}

// A finished job changes only when its ranks report measurements.
function feedbackKey(id, j) {
  return j ? id + "|" + j.measured_iteration_s + "|" + j.rolled_back : id;
}
async function renderDetail(id, listed) {
  if (!id) return;
  if (detailFinal === feedbackKey(id, listed)) return;
  const j = await api("/api/v1/jobs/" + encodeURIComponent(id));
  document.getElementById("detail-id").textContent = j.id;
  document.getElementById("detail-id").className = "";
  const ph = document.getElementById("detail-phase");
  ph.textContent = j.phase; ph.className = "phase phase-" + j.phase;
  let summary = (j.name ? j.name + " - " : "") + "best " + ms(j.best_cost_s) + " ms, " +
      j.candidates_evaluated + " candidates, " + secs(j.elapsed_s) + " s elapsed";
  if (!isFinal(j.phase)) summary += ", at most " + secs(j.eta_s) + " s left";
  if (j.from_cache) summary += ", plan from the plan cache";
  if (j.parallel) {
    summary += ", parallel plan " + j.parallel.strategy + " (D x M = " + j.parallel.d_x_m + ")";
  }
  if (j.measured_iteration_s) {
    summary += "; predicted " + ms(j.predicted_iteration_s) + " ms vs measured " +
        ms(j.measured_iteration_s) + " ms";
    if (j.measured_baseline_s) summary += " (ddp measured " + ms(j.measured_baseline_s) + " ms)";
  }
  if (j.rolled_back) summary += "; rolled back to the DDP baseline: " + j.rollback_reason;
  if (j.error) summary += " - " + j.error;
  document.getElementById("detail-summary").textContent = summary;
  renderChart(j.history, j.from_cache ? "served from the plan cache: no search ran"
                                      : "no progress recorded by this server process yet");
  renderBaselines(j.plan);
  const btn = document.getElementById("trace");
  btn.disabled = j.phase !== "done";
  if (j.phase === "done" && timelineFor !== id) {
    timelineFor = id;
    try {
      renderTimeline(await api("/api/v1/jobs/" + encodeURIComponent(id) + "/timeline"));
    } catch (e) {
      renderTimeline(null); document.getElementById("timeline-note").textContent = e.message;
    }
  } else if (j.phase !== "done") {
    timelineFor = null; renderTimeline(null);
    document.getElementById("timeline-note").textContent = "available when the job is done";
  }
  if (isFinal(j.phase)) detailFinal = feedbackKey(id, j);
}

function renderWorkers(ws) {
  const rows = ws.workers.map(w => {
    const tr = el("tr");
    tr.append(el("td", w.id), el("td", w.name), el("td", w.device_kind), el("td", w.slots, "num"),
              el("td", new Date(w.last_heartbeat_unix_s * 1000).toLocaleString() + " (" +
                       Math.round(w.heartbeat_age_s) + " s ago)"),
              el("td", w.live ? "live" : "lost", w.live ? "phase-done" : "error"));
    return tr;
  });
  fill(document.getElementById("workers"), rows, 6, "no workers registered");
}

document.getElementById("trace").addEventListener("click", async () => {
  if (!selected) return;
  const r = await fetch("/api/v1/jobs/" + encodeURIComponent(selected) + "/trace",
                        { headers: { "Authorization": "Bearer " + token } });
  const a = document.createElement("a");
  a.href = URL.createObjectURL(await r.blob());
  a.download = selected + ".trace.json";
  a.click();
});

async function refresh() {
  try {
    const [jobs, workers] = await Promise.all([api("/api/v1/jobs"), api("/api/v1/workers")]);
    if (!userSelected || !jobs.jobs.some(j => j.id === selected)) {
      const done = jobs.jobs.find(j => j.phase === "done");
      selected = done ? done.id : (jobs.jobs.length ? jobs.jobs[0].id : null);
    }
    renderJobs(jobs.jobs);
    renderWorkers(workers);
    await renderDetail(selected, jobs.jobs.find(j => j.id === selected));
    document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
    banner("");
  } catch (e) {
    banner(e.message + (token ? "" : " (open this page as /?token=<client token>)"));
  }
}
(async function loop() { await refresh(); setTimeout(loop, 2000); })();
</script>
</body>
</html>
)HTML";

}  // namespace

std::string_view DashboardHtml() { return kHtml; }

}  // namespace braid::server
