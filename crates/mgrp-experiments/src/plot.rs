//! SVG plots of experiment runs, in the spirit of the MGRP paper's figures: the
//! per-second traffic at the bottleneck stacked by kind with the available bandwidth
//! and the estimates (its Figures 6 and 7), CDFs (Figures 9 to 12), and average
//! per-second throughput by kind (Figures 8 and 13).

use std::path::Path;

use anyhow::Context as _;
use mgrp_testbed::accounting::Kind;
use plotters::prelude::*;

use crate::experiment::Outcome;

/// The kinds stacked in a time series and a bar, bottom first, with their colours.
const STACK: [(Kind, &str, RGBColor); 4] = [
    (Kind::Cross, "cross", RGBColor(170, 170, 170)),
    (Kind::Source, "source", RGBColor(70, 130, 200)),
    (
        Kind::Piggybacked,
        "source in probes",
        RGBColor(90, 190, 120),
    ),
    (Kind::ProbeOnly, "probe only", RGBColor(30, 30, 30)),
];

fn err(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("{e}")
}

/// The series' legend, boxed, at `position`.
fn legend<'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, CT>,
    position: SeriesLabelPosition,
) -> anyhow::Result<()> {
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(err)
}

/// Writes the finished drawing out.
fn present(
    root: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    path: &Path,
) -> anyhow::Result<()> {
    root.present()
        .map_err(err)
        .with_context(|| format!("cannot write {}", path.display()))
}

/// One panel per run, stacked per-second throughput at the bottleneck, the available
/// bandwidth as a line, pathload's ranges as bars at the second each ended.
pub fn timeseries(path: &Path, runs: &[&Outcome], capacity: f64) -> anyhow::Result<()> {
    let height = 320 * u32::try_from(runs.len().max(1))?;
    let root = SVGBackend::new(path, (960, height)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let panels = root.split_evenly((runs.len().max(1), 1));
    for (run, area) in runs.iter().zip(panels.iter()) {
        let n = run.series.seconds.len().max(1) as f64;
        let mut chart = ChartBuilder::on(area)
            .caption(&run.label, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(34)
            .y_label_area_size(48)
            .build_cartesian_2d(0.0..n, 0.0..capacity * 1.6)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("second")
            .y_desc("Mbit/s at the bottleneck")
            .draw()
            .map_err(err)?;
        // Cumulative tops, drawn from the top layer down so each covers the rest.
        let mut tops = vec![vec![0.0; run.series.seconds.len()]; STACK.len()];
        for (i, s) in run.series.seconds.iter().enumerate() {
            let mut acc = 0.0;
            for (k, (kind, _, _)) in STACK.iter().enumerate() {
                acc += s.mbps(*kind);
                tops[k][i] = acc;
            }
        }
        for (k, (_, name, colour)) in STACK.iter().enumerate().rev() {
            let pts: Vec<(f64, f64)> = tops[k]
                .iter()
                .enumerate()
                .flat_map(|(i, &v)| [(i as f64, v), (i as f64 + 1.0, v)])
                .collect();
            let colour = *colour;
            chart
                .draw_series(AreaSeries::new(pts, 0.0, colour.filled()))
                .map_err(err)?
                .label(*name)
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 14, y + 5)], colour.filled())
                });
        }
        let truth: Vec<(f64, f64)> = run
            .truth
            .iter()
            .enumerate()
            .flat_map(|(i, &v)| [(i as f64, v), (i as f64 + 1.0, v)])
            .collect();
        let line = RGBColor(200, 40, 40);
        chart
            .draw_series(LineSeries::new(truth, line.stroke_width(2)))
            .map_err(err)?
            .label("available bandwidth")
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 14, y)], line.stroke_width(2))
            });
        let est = RGBColor(230, 120, 0);
        let finished: Vec<_> = run.estimates.iter().filter(|e| e.low.is_finite()).collect();
        if !finished.is_empty() {
            chart
                .draw_series(finished.iter().map(|e| {
                    PathElement::new(
                        vec![(e.ended, e.low), (e.ended, e.high)],
                        est.stroke_width(4),
                    )
                }))
                .map_err(err)?
                .label("pathload estimate")
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x + 7, y - 5), (x + 7, y + 5)], est.stroke_width(4))
                });
            chart
                .draw_series(
                    finished
                        .iter()
                        .map(|e| Circle::new((e.ended, (e.low + e.high) / 2.0), 3, est.filled())),
                )
                .map_err(err)?;
        }
        legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    }
    present(&root, path)
}

/// Empirical CDFs of named samples, one line each.
pub fn cdf(
    path: &Path,
    title: &str,
    x_desc: &str,
    samples: &[(String, Vec<f64>)],
) -> anyhow::Result<()> {
    let top = samples
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max)
        .max(1.0)
        * 1.05;
    let lines: Vec<(String, Vec<(f64, f64)>)> = samples
        .iter()
        .map(|(name, values)| (name.clone(), mgrp_tool::plot::cdf_steps(values, top)))
        .collect();
    cdf_lines(path, title, x_desc, top, &lines)
}

/// CDFs already drawn as steps (`(x, share)`, as [`mgrp_tool::plot::cdf_steps`]
/// makes them, or from a histogram), one line each, on `0..top`.
pub fn cdf_lines(
    path: &Path,
    title: &str,
    x_desc: &str,
    top: f64,
    lines: &[(String, Vec<(f64, f64)>)],
) -> anyhow::Result<()> {
    let root = SVGBackend::new(path, (760, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(48)
        .build_cartesian_2d(0.0..top, 0.0..1.0)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc("fraction")
        .draw()
        .map_err(err)?;
    for (i, (name, pts)) in lines.iter().enumerate() {
        if pts.is_empty() {
            continue;
        }
        let colour = Palette99::pick(i).to_rgba();
        let dashed = name.starts_with("mgrpOFF");
        let style = colour.stroke_width(if dashed { 1 } else { 2 });
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), style))
            .map_err(err)?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 14, y)], style));
    }
    legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
    present(&root, path)
}

/// Average per-second Mbit/s by kind, one stacked bar per run.
pub fn bars(path: &Path, title: &str, runs: &[&Outcome], from: usize) -> anyhow::Result<()> {
    let width = 120 + 80 * u32::try_from(runs.len().max(1))?;
    let root = SVGBackend::new(path, (width.max(600), 480)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let n = runs.len().max(1);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(48)
        .build_cartesian_2d((0..n).into_segmented(), 0.0..14.0)
        .map_err(err)?;
    // Short labels under the bars: the title names the cross traffic.
    let labels: Vec<String> = runs
        .iter()
        .map(|r| {
            let mut parts = r.label.split('.');
            let (mode, probes) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            if probes == "none" {
                "no probes".to_string()
            } else {
                format!("{probes} {}", mode.trim_start_matches("mgrp"))
            }
        })
        .collect();
    chart
        .configure_mesh()
        .y_desc("average Mbit/s at the bottleneck")
        .x_labels(n)
        .x_label_style(("sans-serif", 11))
        .x_label_formatter(&|x| match x {
            SegmentValue::CenterOf(i) => labels.get(*i).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .draw()
        .map_err(err)?;
    for (k, (kind, name, colour)) in STACK.iter().enumerate() {
        let colour = *colour;
        let rects: Vec<Rectangle<(SegmentValue<usize>, f64)>> = runs
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let below: f64 = STACK[..k]
                    .iter()
                    .map(|(kk, _, _)| r.mean_mbps(*kk, from))
                    .sum();
                let top = below + r.mean_mbps(*kind, from);
                let mut rect = Rectangle::new(
                    [
                        (SegmentValue::Exact(i), below),
                        (SegmentValue::Exact(i + 1), top),
                    ],
                    colour.filled(),
                );
                rect.set_margin(0, 0, 8, 8);
                rect
            })
            .collect();
        chart
            .draw_series(rects)
            .map_err(err)?
            .label(*name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], colour.filled()));
    }
    legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    present(&root, path)
}

/// A MediaNet run like the paper's Figures 17–19: on top, the bandwidth available to
/// the streams (shaded), what the global scheduler believed available (a line) and
/// the overlay's estimates (marks at the second each ended, low to high); below, the
/// frames decoded each second per stream, stacked.
pub fn medianet(run: &crate::medianet::run::Outcome, path: &Path) -> anyhow::Result<()> {
    use crate::medianet::run::STREAMS;
    let root = SVGBackend::new(path, (960, 640)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let (top, bottom) = root.split_vertically(340);
    let n = run.seconds.max(1) as f64;
    let ymax = run.available.iter().copied().fold(10.0, f64::max) * 1.1;
    let mut chart = ChartBuilder::on(&top)
        .caption(
            format!("{}: bandwidth for the streams", run.label),
            ("sans-serif", 18),
        )
        .margin(10)
        .x_label_area_size(34)
        .y_label_area_size(48)
        .build_cartesian_2d(0.0..n, 0.0..ymax)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("second")
        .y_desc("Mbit/s")
        .draw()
        .map_err(err)?;
    let shade = RGBColor(200, 200, 200);
    let avail: Vec<(f64, f64)> = run
        .available
        .iter()
        .enumerate()
        .flat_map(|(i, &v)| [(i as f64, v), (i as f64 + 1.0, v)])
        .collect();
    chart
        .draw_series(AreaSeries::new(avail, 0.0, shade.filled()))
        .map_err(err)?
        .label("available (capacity less cross traffic)")
        .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], shade.filled()));
    let blue = RGBColor(30, 80, 200);
    let mut believed: Vec<(f64, f64)> = Vec::new();
    let mut last = None;
    for (t, b, _) in &run.beliefs {
        if let Some(l) = last {
            believed.push((*t, l));
        }
        believed.push((*t, *b));
        last = Some(*b);
    }
    if let Some(l) = last {
        believed.push((n, l));
    }
    chart
        .draw_series(LineSeries::new(believed, blue.stroke_width(2)))
        .map_err(err)?
        .label("believed by the global scheduler")
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 14, y)], blue.stroke_width(2)));
    let green = RGBColor(20, 150, 60);
    chart
        .draw_series(
            run.estimates
                .iter()
                .filter(|e| e.4)
                .map(|e| Cross::new((e.1, (e.2 + e.3) / 2.0), 5, green.stroke_width(2))),
        )
        .map_err(err)?
        .label("overlay estimate (mid-range, at its end)")
        .legend(move |(x, y)| Cross::new((x + 7, y), 4, green.stroke_width(2)));
    legend(&mut chart, SeriesLabelPosition::LowerLeft)?;

    let mut chart = ChartBuilder::on(&bottom)
        .caption("frames decoded per second", ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(34)
        .y_label_area_size(48)
        .build_cartesian_2d(0.0..n, 0.0..100.0)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("second")
        .y_desc("frames/s")
        .draw()
        .map_err(err)?;
    let colours = [
        RGBColor(40, 90, 200),
        RGBColor(40, 160, 80),
        RGBColor(200, 60, 50),
    ];
    let mut tops = vec![vec![0.0; run.seconds]; STREAMS];
    for s in 0..run.seconds {
        let mut acc = 0.0;
        for (i, top) in tops.iter_mut().enumerate() {
            acc += f64::from(run.fps(i)[s]);
            top[s] = acc;
        }
    }
    for (i, top) in tops.iter().enumerate().rev() {
        let pts: Vec<(f64, f64)> = top
            .iter()
            .enumerate()
            .flat_map(|(s, &v)| [(s as f64, v), (s as f64 + 1.0, v)])
            .collect();
        let c = colours[i % colours.len()];
        chart
            .draw_series(AreaSeries::new(pts, 0.0, c.filled()))
            .map_err(err)?
            .label(format!("stream {}", i + 1))
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], c.filled()));
    }
    legend(&mut chart, SeriesLabelPosition::LowerRight)?;
    present(&root, path)
}

/// A time series: `lines` drawn as lines (a truth, a rate), `points` as dots (the
/// estimates of each method), against seconds, on one panel of `height` pixels.
pub fn series(
    path: &Path,
    title: &str,
    y_desc: &str,
    lines: &[(String, Vec<(f64, f64)>)],
    points: &[(String, Vec<(f64, f64)>)],
) -> anyhow::Result<()> {
    let root = SVGBackend::new(path, (900, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let all = || {
        lines
            .iter()
            .chain(points)
            .flat_map(|(_, v)| v.iter().copied())
            .filter(|(x, y)| x.is_finite() && y.is_finite())
    };
    let right = all().map(|p| p.0).fold(1.0, f64::max);
    let top = all().map(|p| p.1).fold(1.0, f64::max) * 1.08;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(48)
        .build_cartesian_2d(0.0..right, 0.0..top)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc(y_desc)
        .draw()
        .map_err(err)?;
    for (i, (name, v)) in lines.iter().enumerate() {
        let style = if i == 0 {
            BLACK.stroke_width(2)
        } else {
            RGBColor(150, 150, 150).stroke_width(1)
        };
        chart
            .draw_series(LineSeries::new(v.iter().copied(), style))
            .map_err(err)?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 14, y)], style));
    }
    for (i, (name, v)) in points.iter().enumerate() {
        let colour = Palette99::pick(i + 1).to_rgba();
        chart
            .draw_series(
                v.iter()
                    .map(move |&(x, y)| Circle::new((x, y), 2, colour.filled())),
            )
            .map_err(err)?
            .label(name.as_str())
            .legend(move |(x, y)| Circle::new((x + 7, y), 3, colour.filled()));
    }
    legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    present(&root, path)
}

/// One panel of [`periods`]: a mode's series, and the moments it switched.
#[derive(Debug, Clone)]
pub struct Panel {
    /// The panel's title.
    pub label: String,
    /// Its value per second.
    pub per_second: Vec<f64>,
    /// Its switches: the second, and what it switched to.
    pub switches: Vec<(f64, String)>,
}

/// A centred moving average of `v` over `window` values (fewer at the ends).
pub fn moving_average(v: &[f64], window: usize) -> Vec<f64> {
    let half = window / 2;
    (0..v.len())
        .map(|i| {
            let s = &v[i.saturating_sub(half)..(i + half + 1).min(v.len())];
            s.iter().sum::<f64>() / s.len() as f64
        })
        .collect()
}

/// One panel per mode, stacked on one time axis: each second's value as a thin grey
/// line, its moving average over `smooth` seconds as a thick line of the panel's own
/// colour, the periods of `period_s` shaded in turn and named at the top
/// (`period_names`, repeating), and each switch a dashed red line with what it
/// switched to.
pub fn periods(
    path: &Path,
    title: &str,
    y_desc: &str,
    period_s: f64,
    period_names: &[&str],
    smooth: usize,
    panels: &[Panel],
) -> anyhow::Result<()> {
    let n = panels.len().max(1);
    let height = 60 + 200 * u32::try_from(n)?;
    let root = SVGBackend::new(path, (960, height)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let root = root.titled(title, ("sans-serif", 18)).map_err(err)?;
    let right = panels
        .iter()
        .map(|p| p.per_second.len() as f64)
        .fold(1.0, f64::max);
    let top = panels
        .iter()
        .flat_map(|p| p.per_second.iter().copied())
        .filter(|v| v.is_finite())
        .fold(1.0, f64::max)
        * 1.15;
    let shade = RGBColor(232, 232, 232);
    for (i, (p, area)) in panels
        .iter()
        .zip(root.split_evenly((n, 1)).iter())
        .enumerate()
    {
        let mut chart = ChartBuilder::on(area)
            .caption(&p.label, ("sans-serif", 15))
            .margin(6)
            .x_label_area_size(if i + 1 == n { 30 } else { 18 })
            .y_label_area_size(48)
            .build_cartesian_2d(0.0..right, 0.0..top)
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_mesh()
            .x_desc(if i + 1 == n { "seconds" } else { "" })
            .y_desc(y_desc)
            .draw()
            .map_err(err)?;
        let count = (right / period_s).ceil() as usize;
        for k in 0..count {
            let (a, b) = (k as f64 * period_s, ((k + 1) as f64 * period_s).min(right));
            if k % 2 == 1 {
                chart
                    .draw_series(std::iter::once(Rectangle::new(
                        [(a, 0.0), (b, top)],
                        shade.filled(),
                    )))
                    .map_err(err)?;
            }
            if let Some(name) = period_names.get(k % period_names.len().max(1)) {
                chart
                    .draw_series(std::iter::once(Text::new(
                        (*name).to_owned(),
                        (a + period_s * 0.02, top * 0.97),
                        ("sans-serif", 11),
                    )))
                    .map_err(err)?;
            }
        }
        let raw: Vec<(f64, f64)> = p
            .per_second
            .iter()
            .enumerate()
            .map(|(s, v)| (s as f64, *v))
            .collect();
        chart
            .draw_series(LineSeries::new(
                raw,
                RGBColor(170, 170, 170).stroke_width(1),
            ))
            .map_err(err)?;
        // Dark colours, one a panel, none red (the switches' colour).
        const COLOURS: [RGBColor; 4] = [
            RGBColor(0, 90, 180),
            RGBColor(0, 130, 60),
            RGBColor(200, 110, 0),
            RGBColor(120, 50, 160),
        ];
        let colour = COLOURS[i % COLOURS.len()];
        let avg: Vec<(f64, f64)> = moving_average(&p.per_second, smooth)
            .into_iter()
            .enumerate()
            .map(|(s, v)| (s as f64, v))
            .collect();
        chart
            .draw_series(LineSeries::new(avg, colour.stroke_width(3)))
            .map_err(err)?;
        for (t, to) in &p.switches {
            chart
                .draw_series(DashedLineSeries::new(
                    [(*t, 0.0), (*t, top * 0.9)],
                    4,
                    3,
                    RED.stroke_width(1),
                ))
                .map_err(err)?;
            chart
                .draw_series(std::iter::once(Text::new(
                    format!("→ {to}"),
                    (*t + right * 0.003, top * 0.86),
                    ("sans-serif", 10).into_font().color(&RED),
                )))
                .map_err(err)?;
        }
    }
    root.present()
        .map_err(err)
        .with_context(|| format!("cannot write {}", path.display()))
}
