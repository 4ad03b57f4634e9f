//! The status page at `/`: one panel per link with its estimates over time as a
//! plot, the share of probe bytes that carried application traffic, its state and
//! last error. The panels are in the page as served; a script fills and refreshes
//! them from the API every few seconds.

use crate::config::Config;

/// The page for `config`'s links. Link and node names are restricted to
/// `[A-Za-z0-9.:_-]` by the configuration, so they need no escaping here.
pub fn render(config: &Config) -> String {
    let panels: String = config
        .links
        .iter()
        .map(|l| {
            format!(
                r#"<section class="link" id="link-{name}" data-link="{name}">
<h2>{name}</h2>
<p class="meta">from {from}:{port} over {transport}, {method}, every {interval:.0} s</p>
<p class="latest">no estimate yet</p>
<svg class="plot" viewBox="0 0 600 160" preserveAspectRatio="none"></svg>
<p class="share"></p>
<p class="state"></p>
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
    PAGE.replace("{node}", &config.name)
        .replace("{panels}", &panels)
}

const PAGE: &str = r##"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>mgrp-overlay {node}</title>
<style>
body { font: 14px system-ui, sans-serif; margin: 1.5em; color: #222; }
.link { border: 1px solid #ccc; border-radius: 6px; padding: 0.5em 1em; margin-bottom: 1em; max-width: 640px; }
.link h2 { margin: 0.2em 0; font-size: 1.1em; }
.meta, .share, .state { color: #555; margin: 0.2em 0; }
.error { color: #b00; margin: 0.2em 0; }
.plot { width: 600px; height: 160px; background: #fafafa; border: 1px solid #eee; }
</style>
</head>
<body>
<h1>Measurement Overlay: node {node}</h1>
<p id="updated">loading…</p>
{panels}
<script>
"use strict";
const token = new URLSearchParams(location.search).get("token");
const opts = token ? { headers: { Authorization: "Bearer " + token } } : {};
const mbps = (bps) => (bps / 1e6).toFixed(2);

function plot(svg, estimates) {
  const ok = estimates.filter((e) => e.converged);
  svg.replaceChildren();
  if (ok.length === 0) return;
  const t0 = ok[0].ended_at, t1 = Math.max(ok[ok.length - 1].ended_at, t0 + 1);
  const top = Math.max(...ok.map((e) => e.unadjusted_high_bps || e.high_bps)) * 1.1;
  const x = (t) => 10 + ((t - t0) / (t1 - t0)) * 580;
  const y = (v) => 150 - (v / top) * 140;
  const ns = "http://www.w3.org/2000/svg";
  for (const [key, color] of [["low_bps", "#1f77b4"], ["high_bps", "#ff7f0e"]]) {
    const line = document.createElementNS(ns, "polyline");
    line.setAttribute("points", ok.map((e) => x(e.ended_at) + "," + y(e[key])).join(" "));
    line.setAttribute("fill", "none");
    line.setAttribute("stroke", color);
    line.setAttribute("stroke-width", "2");
    svg.appendChild(line);
  }
}

async function refresh() {
  try {
    const r = await fetch("/v1/links", opts);
    if (!r.ok) throw new Error((await r.json()).error || r.statusText);
    const body = await r.json();
    for (const link of body.links) {
      const panel = document.getElementById("link-" + link.name);
      if (!panel) continue;
      const latest = link.latest;
      panel.querySelector(".latest").textContent = latest
        ? "available " + mbps(latest.low_bps) + "–" + mbps(latest.high_bps) + " Mbit/s, " + Math.round(link.age_s) + " s ago"
        : "no estimate yet";
      panel.querySelector(".share").textContent = link.probe_bytes > 0
        ? "probe bytes that carried application traffic: " + Math.round((100 * link.riding_probe_bytes) / link.probe_bytes) + " %"
        : "";
      panel.querySelector(".state").textContent = "state: " + link.state.replace("_", " ")
        + (link.next_run_in_s != null ? ", next run in " + Math.round(link.next_run_in_s) + " s" : "")
        + (link.ride_min_bps != null ? ", traffic to ride " + mbps(link.traffic_bps || 0) + " of " + mbps(link.ride_min_bps) + " Mbit/s" : "")
        + "; runs: " + link.runs.estimate + " estimates, " + link.runs.no_estimate + " without, " + link.runs.peer_down + " neighbour down";
      panel.querySelector(".error").textContent = link.last_error ? "last error: " + link.last_error : "";
      const h = await fetch("/v1/links/" + encodeURIComponent(link.name) + "/history?limit=200", opts);
      if (h.ok) plot(panel.querySelector(".plot"), (await h.json()).estimates);
    }
    document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (e) {
    document.getElementById("updated").textContent = "cannot reach the API: " + e.message;
  }
}
refresh();
setInterval(refresh, 5000);
</script>
</body>
</html>
"##;
