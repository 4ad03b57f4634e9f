//! The status page at `/`: one panel per link with its latest answer, a plot of its
//! estimates over time (axes in Mbit/s and clock time, the range as a band, lower
//! bounds as such, failed runs marked; badabing's links plot their loss-episode
//! frequency in percent), its state with when the next run is, its runs
//! by outcome and its last error in words; below, what each outcome means. The panels
//! are in the page as served; a script fills and refreshes them from the API every
//! few seconds.

use crate::config::Config;
use mgrp_views::estimate::RunOutcome;

/// The page for `config`'s links. Link and node names are restricted to
/// `[A-Za-z0-9.:_-]` by the configuration, so they need no escaping here.
pub fn render(config: &Config) -> String {
    let panels: String = config
        .links
        .iter()
        .map(|l| {
            format!(
                r#"<section class="link" id="link-{name}" data-link="{name}">
<h2>{name} <span class="meta">from {from} port {port}, over {transport}, {method}, every {interval:.0} s</span></h2>
<p class="latest">no estimate yet</p>
<p class="btc"></p>
<svg class="plot" viewBox="0 0 640 230" role="img" aria-label="estimates of {name} over time"></svg>
<p class="state"></p>
<p class="runs"></p>
<p class="error"></p>
</section>
"#,
                name = l.name,
                from = l.from,
                port = l.port,
                transport = l.transport,
                method = l.method.name(),
                interval = l.timing.interval.as_secs_f64(),
            )
        })
        .collect();
    let outcomes: String = RunOutcome::ALL
        .iter()
        .map(|o| format!("<dt>{}</dt><dd>{}</dd>\n", o.name(), o.meaning()))
        .collect();
    let meanings: String = RunOutcome::ALL
        .iter()
        .map(|o| format!("  {}: {:?},\n", o.name(), o.meaning()))
        .collect();
    let mut routes = String::new();
    if config.matrix.is_some() {
        routes.push_str(MATRIX_LINK);
    }
    if config.routing.is_some() {
        routes.push_str(ROUTES);
    }
    PAGE.replace("{node}", &config.name)
        .replace("{routes}", &routes)
        .replace("{panels}", &panels)
        .replace("{outcomes}", &outcomes)
        .replace("{meanings}", &meanings)
}

/// Where the mesh's matrix is, on a node that collects it.
const MATRIX_LINK: &str = "<p class=\"matrix-link\"><a href=\"matrix\">the whole mesh</a></p>\n";

/// The route-control panel, on a node with `[routing]`.
const ROUTES: &str = r#"<section class="routes" id="routes">
<h2>Routes</h2>
<div id="routes-body">loading…</div>
</section>
"#;

const PAGE: &str = r##"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>mgrp-overlay {node}</title>
<style>
body { font: 14px system-ui, sans-serif; margin: 1.5em; color: #222; }
.link { border: 1px solid #ccc; border-radius: 6px; padding: 0.5em 1em; margin-bottom: 1em; max-width: 680px; }
.link h2 { margin: 0.2em 0; font-size: 1.1em; }
.link h2 .meta { font-weight: normal; font-size: 0.85em; color: #666; }
.latest { font-size: 1.25em; margin: 0.3em 0; }
.latest .age { font-size: 0.75em; color: #666; }
.state, .runs { color: #444; margin: 0.2em 0; }
.btc { margin: 0.2em 0; }
.btc .basis, .btc .others { color: #555; font-size: 0.9em; }
.error { color: #b00; margin: 0.2em 0; }
.plot { width: 640px; height: 230px; }
.plot text { font: 11px system-ui, sans-serif; fill: #444; }
.plot .grid { stroke: #e4e4e4; }
.plot .axis { stroke: #888; }
.plot .band { fill: #1f77b4; fill-opacity: 0.25; stroke: #1f77b4; stroke-width: 1.5; }
.plot .raw { fill: none; stroke: #ff7f0e; stroke-width: 1.2; stroke-dasharray: 4 3; }
.plot .bound { fill: #2ca02c; }
.plot .failed { stroke: #b00; stroke-width: 1.5; }
.routes { border: 1px solid #ccc; border-radius: 6px; padding: 0.5em 1em; margin-bottom: 1em; max-width: 900px; }
.routes table { border-collapse: collapse; margin: 0.4em 0; }
.routes td, .routes th { border-bottom: 1px solid #e4e4e4; padding: 0.15em 0.6em; text-align: left; }
.routes tr.chosen td { font-weight: bold; }
.routes .down { color: #b00; }
.routes .switches { color: #444; font-size: 0.9em; }
dl.outcomes dt { font-family: monospace; font-weight: bold; float: left; width: 10em; clear: left; }
dl.outcomes dd { margin-left: 10.5em; margin-bottom: 0.3em; color: #444; }
</style>
</head>
<body>
<h1>Measurement Overlay: node {node}</h1>
<p id="updated">loading…</p>
{routes}{panels}
<h2>What the outcomes mean</h2>
<dl class="outcomes">
{outcomes}</dl>
<script>
"use strict";
const token = new URLSearchParams(location.search).get("token");
const opts = token ? { headers: { Authorization: "Bearer " + token } } : {};
const meaning = {
{meanings}};
const ns = "http://www.w3.org/2000/svg";

// Bits per second in the unit that suits `top`, with its name.
function unitFor(top) {
  if (top >= 1e9) return [1e9, "Gbit/s"];
  if (top >= 1e6) return [1e6, "Mbit/s"];
  return [1e3, "kbit/s"];
}
function rate(bps, unit) {
  const [div, name] = unit || unitFor(bps);
  const v = bps / div;
  return (v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2)) + " " + name;
}
// About `n` round steps between lo and hi.
function ticks(lo, hi, n) {
  const raw = (hi - lo) / n;
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw) || 10 * mag;
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(v);
  return out;
}
function duration(s) {
  s = Math.round(s);
  if (s < 120) return s + " s";
  if (s < 7200) return Math.round(s / 60) + " min";
  return (s / 3600).toFixed(1) + " h";
}
function el(name, attrs, text) {
  const e = document.createElementNS(ns, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

// The link's runs over time: the adjusted range as a band, the measured (unadjusted)
// range dashed where riders moved it, lower bounds as upward triangles, runs without
// an answer as red marks on the time axis; axes fitted to the data.
function plot(svg, runs, now) {
  svg.replaceChildren();
  const L = 70, R = 630, T = 12, B = 190;
  // badabing's runs plot their loss-episode frequency, in percent of the time.
  const loss = runs.some((e) => e.loss);
  if (loss) {
    runs = runs.map((e) => {
      if (!e.loss) return e;
      const f = 100 * e.loss.episode_frequency;
      return Object.assign({}, e, { low_bps: f, high_bps: f, unadjusted_low_bps: f, unadjusted_high_bps: f });
    });
  }
  // btc-rs's runs plot the narrow link's capacity.
  runs = runs.map((e) => e.shape
    ? Object.assign({}, e, { low_bps: e.shape.capacity_bps, high_bps: e.shape.capacity_bps,
        unadjusted_low_bps: e.shape.capacity_bps, unadjusted_high_bps: e.shape.capacity_bps })
    : e);
  const capacity = runs.some((e) => e.shape);
  const answered = runs.filter((e) => e.converged || e.lower_bound);
  const values = answered.flatMap((e) => [e.low_bps, e.high_bps, e.unadjusted_low_bps, e.unadjusted_high_bps])
    .filter((v) => v != null);
  if (runs.length === 0) {
    svg.appendChild(el("text", { x: 320, y: 110, "text-anchor": "middle" }, "no runs yet"));
    return;
  }
  let lo = values.length ? Math.min(...values) : 0, hi = values.length ? Math.max(...values) : 1e6;
  const pad = Math.max((hi - lo) * 0.15, hi * 0.02, loss ? 0.5 : 1e3);
  lo = Math.max(0, lo - pad); hi = hi + pad;
  const unit = loss ? [1, "%"] : unitFor(hi);
  const t0 = runs[0].started_at, t1 = Math.max(now, t0 + 60);
  const x = (t) => L + ((t - t0) / (t1 - t0)) * (R - L);
  const y = (v) => B - ((v - lo) / (hi - lo)) * (B - T);
  for (const v of ticks(lo, hi, 5)) {
    svg.appendChild(el("line", { x1: L, x2: R, y1: y(v), y2: y(v), class: "grid" }));
    svg.appendChild(el("text", { x: L - 6, y: y(v) + 4, "text-anchor": "end" }, rate(v, unit).split(" ")[0]));
  }
  svg.appendChild(el("text", { x: 12, y: (T + B) / 2, transform: "rotate(-90 12 " + (T + B) / 2 + ")", "text-anchor": "middle" },
    loss ? "loss episodes, % of time" : (capacity ? "capacity, " : "available, ") + unit[1]));
  for (const t of ticks(t0, t1, 5)) {
    svg.appendChild(el("line", { x1: x(t), x2: x(t), y1: B, y2: B + 4, class: "axis" }));
    const d = new Date(t * 1000);
    svg.appendChild(el("text", { x: x(t), y: B + 16, "text-anchor": "middle" },
      d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: t1 - t0 < 600 ? "2-digit" : undefined, hour12: false })));
  }
  svg.appendChild(el("line", { x1: L, x2: R, y1: B, y2: B, class: "axis" }));
  svg.appendChild(el("line", { x1: L, x2: L, y1: T, y2: B, class: "axis" }));
  const ranges = answered.filter((e) => e.converged);
  if (ranges.length) {
    const pts = ranges.map((e) => x(e.ended_at) + "," + y(e.high_bps))
      .concat(ranges.slice().reverse().map((e) => x(e.ended_at) + "," + y(e.low_bps)));
    const shape = ranges.length === 1
      ? el("rect", { x: x(ranges[0].ended_at) - 3, y: y(ranges[0].high_bps), width: 6,
          height: Math.max(1, y(ranges[0].low_bps) - y(ranges[0].high_bps)), class: "band" })
      : el("polygon", { points: pts.join(" "), class: "band" });
    svg.appendChild(shape);
    const moved = ranges.some((e) => Math.abs(e.unadjusted_high_bps - e.high_bps) > 1e-3 * e.high_bps);
    if (moved) {
      for (const key of ["unadjusted_low_bps", "unadjusted_high_bps"]) {
        svg.appendChild(el("polyline", { points: ranges.map((e) => x(e.ended_at) + "," + y(e[key])).join(" "), class: "raw" }));
      }
    }
  }
  for (const e of answered.filter((e) => e.lower_bound)) {
    const cx = x(e.ended_at), cy = y(e.low_bps);
    svg.appendChild(el("polygon", { points: [cx - 5, cy + 4, cx + 5, cy + 4, cx, cy - 5].join(","), class: "bound" },
      ));
  }
  for (const e of runs.filter((e) => !(e.converged || e.lower_bound))) {
    const m = el("line", { x1: x(e.ended_at), x2: x(e.ended_at), y1: B - 6, y2: B + 6, class: "failed" });
    m.appendChild(el("title", {}, e.outcome + ": " + (e.error || "")));
    svg.appendChild(m);
  }
  // Legend.
  const lx = L + 8, ly = B + 32;
  svg.appendChild(el("rect", { x: lx, y: ly - 8, width: 14, height: 9, class: "band" }));
  svg.appendChild(el("text", { x: lx + 18, y: ly }, loss ? "episode frequency" : capacity ? "capacity" : "range (less riders)"));
  svg.appendChild(el("line", { x1: lx + 140, x2: lx + 158, y1: ly - 4, y2: ly - 4, class: "raw" }));
  svg.appendChild(el("text", { x: lx + 162, y: ly }, "as measured"));
  svg.appendChild(el("polygon", { points: [lx + 250, ly, lx + 260, ly, lx + 255, ly - 9].join(","), class: "bound" }));
  svg.appendChild(el("text", { x: lx + 264, y: ly }, "at least (lower bound)"));
  svg.appendChild(el("line", { x1: lx + 420, x2: lx + 420, y1: ly - 9, y2: ly + 1, class: "failed" }));
  svg.appendChild(el("text", { x: lx + 426, y: ly }, "run without an answer"));
}

function describe(link) {
  const e = link.latest;
  if (!e) return ["no estimate yet", ""];
  const age = ", " + duration(link.age_s) + " ago";
  if (e.loss) {
    const l = e.loss;
    return ["loss episodes " + (100 * l.episode_frequency).toFixed(2) + " % of the time"
      + (l.episode_duration_s != null ? ", " + (1000 * l.episode_duration_s).toFixed(1) + " ms on average" : "")
      + "; " + (100 * l.loss_rate).toFixed(2) + " % of probes lost", age];
  }
  if (e.shape) {
    const sh = e.shape;
    const where = { "tight-like-narrow": "queues form at the narrow link",
      "tight-unlike-narrow": "queues form at a faster link", "undecided": "undecided where queues form" };
    return ["capacity " + rate(sh.capacity_bps) + "; " + (sh.class
      ? where[sh.class] + " (squeezed-pair score " + sh.score + ")"
      : "no squeezed pairs: " + (sh.pairs_skipped || "not sent"))
      + "; round trip " + (1000 * sh.rtt_s).toFixed(1) + " ms", age];
  }
  if (e.method === "passive-tcp") {
    return [rate(e.low_bps) + " (passive: the applications' own TCP flows, " + e.streams + " network-limited)", age];
  }
  if (e.lower_bound) return ["at least " + rate(e.low_bps) + " (above the highest rate the neighbour sends)", age];
  if (e.low_bps === e.high_bps) return [rate(e.low_bps), age];
  return [rate(e.low_bps) + " – " + rate(e.high_bps), age];
}

// What a TCP transfer from the neighbour gets: the prediction to use, what it stands
// on, and every method's value beside it.
function btcLine(panel, link) {
  const p = panel.querySelector(".btc");
  p.replaceChildren();
  const b = link.prediction;
  if (!b || !b.prediction) {
    p.textContent = "TCP transfer from there: no prediction yet"
      + (b && b.inputs.kernel_note ? " (kernel: " + b.inputs.kernel_note + ")" : "");
    return;
  }
  const names = { "kernel": "the kernel's own report", "scaled-abw": "scaled available bandwidth", "mathis": "Mathis's bound" };
  const v = b.prediction;
  const range = v.low_bps !== v.high_bps ? " (" + rate(v.low_bps) + " – " + rate(v.high_bps) + ")" : "";
  p.append("TCP transfer from there: " + rate(v.bps) + range + ", by " + (names[v.method] || v.method));
  const basis = document.createElement("div");
  basis.className = "basis";
  basis.textContent = v.basis;
  p.append(basis);
  const others = b.values.filter((x) => x.method !== v.method);
  if (others.length) {
    const o = document.createElement("div");
    o.className = "others";
    o.textContent = "also: " + others.map((x) => (names[x.method] || x.method) + " " + rate(x.bps)).join(", ");
    others.forEach((x) => { o.title += x.method + ": " + x.basis + "\n"; });
    p.append(o);
  }
}

function stateLine(link) {
  const next = link.next_run_in_s != null ? duration(link.next_run_in_s) : null;
  let s;
  switch (link.state) {
    case "running": s = "measuring now"; break;
    case "ready": {
      const w = link.waiting_for;
      if (w && w.reason === "path") s = "due, waiting for " + w.link + "'s run, which has its path to itself";
      else if (w && w.reason === "node") s = "due, waiting: " + w.max_running + " exclusive runs into this node are in flight, the most max-running allows";
      else s = "due, starting";
      break;
    }
    case "waiting": s = "next run in " + next + " (every " + duration(link.interval_s) + ")"; break;
    case "awaiting_traffic":
      s = "due, waiting up to " + next + " for " + rate(link.ride_min_bps) + " of traffic to ride (now " + rate(link.traffic_bps || 0) + ")";
      break;
    case "backing_off":
      s = "backing off after " + link.failures + (link.failures === 1 ? " failure" : " failures in a row")
        + (link.peer_down ? " (neighbour down)" : "") + ": next run in " + next;
      break;
    default: s = link.state;
  }
  const p = link.passive;
  if (p && p.covered > 0) {
    s += "; passive estimates stood in for " + p.covered + " due runs (" + Math.round(100 * p.coverage) + " %)";
  }
  if (p && p.last && p.last.note && link.state !== "running") s += "; no passive estimate: " + p.last.note;
  const t = p && p.timing;
  if (t && (t.dispersion_bps != null || t.trend_bps != null)) {
    const parts = [];
    if (t.trend_bps != null) {
      parts.push("trend " + rate(t.trend_bps) + " (" + (t.trend_low_bps != null ? rate(t.trend_low_bps) : "?")
        + " – " + (t.trend_high_bps != null ? rate(t.trend_high_bps) : "?") + ", " + (t.streams[0] + t.streams[1]) + " steady streams)");
    }
    if (t.dispersion_bps != null) parts.push("dispersion at most " + rate(t.dispersion_bps) + " (" + t.trains + " trains)");
    s += "; packet timing, " + duration(p.timing_age_s) + " ago: " + parts.join(", ");
  }
  return s;
}

function runsLine(panel, link) {
  const p = panel.querySelector(".runs");
  p.replaceChildren();
  p.append("runs: ");
  const parts = Object.entries(link.runs).filter(([, n]) => n > 0);
  if (parts.length === 0) p.append("none yet");
  parts.forEach(([o, n], i) => {
    const s = document.createElement("span");
    s.title = meaning[o] || "";
    s.textContent = n + " " + o.replace(/_/g, " ");
    if (i) p.append(", ");
    p.append(s);
  });
  if (link.probe_bytes > 0) {
    p.append("; " + (link.probe_bytes / 1e6).toFixed(1) + " MB of probes, "
      + Math.round((100 * link.riding_probe_bytes) / link.probe_bytes) + " % of them carried application traffic");
  }
}

async function refresh() {
  try {
    const r = await fetch("/v1/links", opts);
    if (!r.ok) throw new Error((await r.json()).error || r.statusText);
    const body = await r.json();
    const now = Date.now() / 1000;
    for (const link of body.links) {
      const panel = document.getElementById("link-" + link.name);
      if (!panel) continue;
      const [value, age] = describe(link);
      const latest = panel.querySelector(".latest");
      latest.textContent = value;
      const a = document.createElement("span");
      a.className = "age";
      a.textContent = age;
      latest.append(a);
      btcLine(panel, link);
      panel.querySelector(".state").textContent = stateLine(link);
      runsLine(panel, link);
      const h = await fetch("/v1/links/" + encodeURIComponent(link.name) + "/history?limit=200", opts);
      const runs = h.ok ? (await h.json()).estimates : [];
      const last = runs[runs.length - 1];
      panel.querySelector(".error").textContent = last && last.error
        ? "last run: " + last.outcome.replace(/_/g, " ") + ": " + last.error + ". " + (meaning[last.outcome] || "")
        : "";
      plot(panel.querySelector(".plot"), runs, now);
    }
    document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (e) {
    document.getElementById("updated").textContent = "cannot reach the API: " + e.message;
  }
}
function cell(tr, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  tr.append(td);
}
function ms(s) { return s == null ? "?" : (s * 1e3).toFixed(1) + " ms"; }
function pct(x) { return x == null ? "?" : (100 * x).toFixed(1) + " %"; }
async function refreshRoutes() {
  const box = document.getElementById("routes");
  if (!box) return;
  const r = await fetch("/v1/routes", opts);
  const body = r.ok ? await r.json() : null;
  const out = document.getElementById("routes-body");
  out.replaceChildren();
  if (!body) { out.textContent = "route control has not polled its members yet"; return; }
  const m = document.createElement("p");
  m.textContent = "members: " + body.members.map(x => x.name + (x.heartbeat
    ? (x.heartbeat.alive ? " up" : " DOWN") + " (rtt " + ms(x.heartbeat.rtt_s) + ", loss " + pct(x.heartbeat.loss) + ")"
    : "") + (x.api_ok ? "" : " [API: " + x.api_error + "]")).join("; ")
    + (body.rule === "ratio" || !body.rule
      ? ". Rule: switch when " + (1 + body.eta).toFixed(2) + "× better and " + body.t_ch_s + " s since the last change"
      : ". Rule: switch when clearly better (losses weighed against their noise, held a few seconds) and " + body.t_ch_s + " s or more since the last change")
    + (body.model ? " (" + body.model + " model)" : "") + "; a failed path is left at once.";
  out.append(m);
  for (const d of body.destinations) {
    const h = document.createElement("h3");
    h.textContent = d.prefix + " (behind " + d.owner + "): new flows take " + d.current
      + (d.manual ? " (set by hand)" : "")
      + (d.since_switch_s != null ? ", for " + duration(d.since_switch_s) : "");
    out.append(h);
    const t = document.createElement("table");
    const head = document.createElement("tr");
    for (const c of ["path", "state", "score", "round trip", "loss", "flows", "hops"]) {
      const th = document.createElement("th"); th.textContent = c; head.append(th);
    }
    t.append(head);
    for (const p of d.paths) {
      const tr = document.createElement("tr");
      if (p.chosen) tr.className = "chosen";
      cell(tr, p.name);
      cell(tr, p.score.alive ? "up" : "down", p.score.alive ? "" : "down");
      cell(tr, p.score.bps != null ? rate(p.score.bps) : "unknown");
      cell(tr, ms(p.score.rtt_s));
      cell(tr, pct(p.score.loss));
      cell(tr, p.flows != null ? String(p.flows) : "?");
      cell(tr, p.hops.map(x => x.from + "→" + x.to + (x.alive ? "" : " (down)")
        + (x.loss_source ? ", loss from " + x.loss_source : "")
        + (x.rate_source ? ", rate from " + x.rate_source : "")).join("; "));
      tr.title = p.score.basis;
      t.append(tr);
    }
    out.append(t);
    const sw = document.createElement("p");
    sw.className = "switches";
    sw.textContent = d.switches + " switches" + (d.recent.length ? "; latest: " + d.recent.slice(-5).reverse().map(x =>
      new Date(x.at * 1000).toLocaleTimeString() + " " + x.from + " → " + x.to + ": " + x.reason_text).join("; ") : "");
    out.append(sw);
  }
}
refresh();
setInterval(refresh, 5000);
refreshRoutes().catch(() => {});
setInterval(() => refreshRoutes().catch(() => {}), 2000);
</script>
</body>
</html>
"##;

/// The mesh's matrix at `/matrix` (a node with `[matrix]`): a row per sender, a
/// column per receiver, each pair coloured by its available bandwidth or by its
/// loss-episode frequency, inferred pairs striped and in italics, the basis and
/// age on hover, a click through to the link that measured it on the receiver's
/// own page. A script fills it from `/v1/matrix` and refreshes it.
pub fn render_matrix(config: &Config) -> String {
    let every = config
        .matrix
        .as_ref()
        .map_or(30.0, |m| m.interval.as_secs_f64());
    MATRIX_PAGE.replace("{node}", &config.name).replace(
        "{every_ms}",
        &format!("{:.0}", every.clamp(2.0, 60.0) * 1e3),
    )
}

const MATRIX_PAGE: &str = r##"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>mgrp-overlay {node}: the mesh</title>
<style>
body { font: 14px system-ui, sans-serif; margin: 1.5em; color: #222; }
table.matrix { border-collapse: collapse; margin: 0.8em 0; }
table.matrix th { font-weight: normal; padding: 0.2em 0.4em; color: #444; }
table.matrix th.to { writing-mode: vertical-rl; transform: rotate(180deg); text-align: left; }
table.matrix th.from { text-align: right; }
table.matrix td { width: 3.2em; height: 1.8em; text-align: center; font-size: 0.8em; border: 1px solid #fff; }
table.matrix td.self { background: #eee; }
table.matrix td.none { background: #fafafa; color: #bbb; }
table.matrix td a { color: #000; text-decoration: none; display: block; }
table.matrix td.inferred { font-style: italic;
  background-image: repeating-linear-gradient(45deg, rgba(255,255,255,0.55) 0 3px, transparent 3px 7px); }
.legend span { display: inline-block; padding: 0.1em 0.6em; margin-right: 0.3em; font-size: 0.85em; }
.unread { color: #b00; }
</style>
</head>
<body>
<h1>Measurement Overlay: the mesh, collected by {node}</h1>
<p><a href="./">this node's links</a> ·
colour by <label><input type="radio" name="by" value="bandwidth" checked> available bandwidth</label>
<label><input type="radio" name="by" value="loss"> loss episodes</label></p>
<p id="updated">loading…</p>
<p class="legend" id="legend"></p>
<div id="matrix"></div>
<ul id="unread" class="unread"></ul>
<p>Rows send, columns receive (the receiver measures). A pair in italics over stripes is
inferred, not measured: the least of the sender's uplink, the receiver's downlink and the
core between their regions, each the most a measured path showed. Hover for what a value
rests on and its age; click a pair for the link that measured it.</p>
<script>
"use strict";
const token = new URLSearchParams(location.search).get("token");
const opts = token ? { headers: { Authorization: "Bearer " + token } } : {};
let last = null;

function rate(bps) {
  const [div, name] = bps >= 1e9 ? [1e9, "G"] : bps >= 1e6 ? [1e6, "M"] : [1e3, "k"];
  const v = bps / div;
  return (v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2)) + name;
}
function age(s) {
  if (s < 120) return s.toFixed(0) + " s";
  if (s < 7200) return (s / 60).toFixed(0) + " min";
  return (s / 3600).toFixed(1) + " h";
}
// Red (little) to green (much) on a log scale between the mesh's least and most.
function bandwidthColour(bps, lo, hi) {
  const t = hi > lo ? (Math.log(bps) - Math.log(lo)) / (Math.log(hi) - Math.log(lo)) : 1;
  return "hsl(" + (120 * Math.min(1, Math.max(0, t))).toFixed(0) + ", 65%, 62%)";
}
// Green (no episode) to red (in an episode 5 % of the time or more).
function lossColour(f) {
  return "hsl(" + (120 * (1 - Math.min(1, f / 0.05))).toFixed(0) + ", 65%, 62%)";
}
function linkTo(m, to, link) {
  const api = m.apis[to];
  if (!api) return null;
  return api + "/" + (token ? "?token=" + encodeURIComponent(token) : "") + "#link-" + link;
}
function draw() {
  const m = last;
  if (!m) return;
  const by = document.querySelector('input[name="by"]:checked').value;
  const cells = new Map(), losses = new Map();
  for (const c of m.cells) cells.set(c.from + ">" + c.to, c);
  for (const l of m.losses || []) losses.set(l.from + ">" + l.to, l);
  const bps = m.cells.map(c => c.bps);
  const lo = Math.min(...bps), hi = Math.max(...bps);
  const table = document.createElement("table");
  table.className = "matrix";
  const header = (tr, text, cls, scope) => {
    const th = document.createElement("th");
    if (cls) { th.className = cls; th.scope = scope; }
    th.textContent = text;
    tr.appendChild(th);
  };
  const head = table.insertRow();
  header(head, "from \\ to");
  for (const to of m.members) header(head, to, "to", "col");
  for (const from of m.members) {
    const tr = table.insertRow();
    header(tr, from, "from", "row");
    for (const to of m.members) {
      const td = tr.insertCell();
      td.dataset.from = from;
      td.dataset.to = to;
      if (from === to) { td.className = "self"; continue; }
      const c = cells.get(from + ">" + to), l = losses.get(from + ">" + to);
      let text = "", title = "", href = null;
      if (by === "loss") {
        if (l) {
          td.className = "measured";
          td.dataset.basis = "measured";
          td.style.background = lossColour(l.episode_frequency);
          text = (100 * l.episode_frequency).toFixed(1) + "%";
          title = from + " → " + to + ": in a loss episode " + (100 * l.episode_frequency).toFixed(2) +
            " % of the time, probes lost " + (100 * l.loss_rate).toFixed(2) + " %, measured by " +
            l.link + ", " + age(l.age_s) + " old";
          href = linkTo(m, to, l.link);
        }
      } else if (c) {
        td.style.backgroundColor = bandwidthColour(c.bps, lo, hi);
        text = rate(c.bps);
        const b = c.basis;
        td.dataset.basis = b.kind;
        td.className = b.kind;
        if (b.kind === "measured") {
          title = from + " → " + to + ": " + rate(c.bps) + "bit/s, measured by " + b.link +
            " (" + b.method + "), " + age(c.age_s) + " old";
          href = linkTo(m, to, b.link);
        } else {
          title = from + " → " + to + ": " + rate(c.bps) + "bit/s, inferred from " + from +
            "'s uplink (" + b.uplink + "), " + to + "'s downlink (" + b.downlink + ")" +
            (b.core ? " and the core (" + b.core + ")" : "") + ", " + age(c.age_s) + " old";
          const up = cells.get(b.uplink);
          if (up && up.basis.kind === "measured") href = linkTo(m, up.to, up.basis.link);
        }
      }
      if (!td.className) { td.className = "none"; text = "·"; title = from + " → " + to + ": no value"; }
      td.title = title;
      if (href) {
        const a = document.createElement("a");
        a.href = href;
        a.textContent = text;
        td.appendChild(a);
      } else {
        td.textContent = text;
      }
    }
  }
  const box = document.getElementById("matrix");
  box.replaceChildren(table);
  const legend = document.getElementById("legend");
  legend.replaceChildren();
  const swatch = (text, colour) => {
    const s = document.createElement("span");
    s.textContent = text;
    s.style.background = colour;
    legend.appendChild(s);
  };
  if (by === "loss") {
    swatch("0 %", lossColour(0));
    swatch("2.5 %", lossColour(0.025));
    swatch("≥ 5 % of the time in a loss episode", lossColour(0.05));
  } else if (m.cells.length) {
    swatch(rate(lo) + "bit/s", bandwidthColour(lo, lo, hi));
    swatch(rate(Math.sqrt(lo * hi)) + "bit/s", bandwidthColour(Math.sqrt(lo * hi), lo, hi));
    swatch(rate(hi) + "bit/s", bandwidthColour(hi, lo, hi));
  }
  const unread = document.getElementById("unread");
  unread.replaceChildren();
  for (const u of m.unread) {
    const li = document.createElement("li");
    li.textContent = u.member + ": its links could not be read: " + u.error;
    unread.appendChild(li);
  }
  const measured = m.cells.filter(c => c.basis.kind === "measured").length;
  document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString() +
    ": " + m.members.length + " members, " + measured + " pairs measured, " +
    (m.cells.length - measured) + " inferred, collected " + age(Math.max(0, Date.now() / 1e3 - m.at)) + " ago";
}
async function refresh() {
  try {
    const r = await fetch("/v1/matrix", opts);
    const body = await r.json();
    if (!r.ok) throw new Error(body.error || r.statusText);
    last = body;
    draw();
  } catch (e) {
    document.getElementById("updated").textContent = "no matrix: " + e.message;
  }
}
for (const r of document.querySelectorAll('input[name="by"]')) r.addEventListener("change", draw);
refresh();
setInterval(refresh, {every_ms});
</script>
</body>
</html>
"##;
