//! `--plot`: every chirp's estimate and the smoothed estimate over time, as SVG.

use std::path::Path;

use mgrp_tool::plot::{self, Frame};
use plotters::prelude::*;

use crate::tool::Measurement;

/// Draws the run into `path`.
pub(crate) fn draw(path: &Path, m: &Measurement, mgrp: bool) -> anyhow::Result<()> {
    let end = m.series.last().map_or(1.0, |p| p.t).max(1.0);
    let top = m
        .series
        .iter()
        .filter_map(|p| p.chirp_bps)
        .fold(1e6, f64::max)
        / 1e6
        * 1.1;
    let caption = match m.last {
        Some(s) => format!(
            "pathchirp-rs: {:.2} Mbit/s (last smoothed estimate)",
            if mgrp { s.adjusted_bps } else { s.bps } / 1e6
        ),
        None => "pathchirp-rs: no estimate".to_string(),
    };
    let frame = Frame::new(
        caption,
        (0.0..end, "time (s)"),
        (0.0..top, "available bandwidth (Mbit/s)"),
        SeriesLabelPosition::LowerRight,
    );
    plot::draw(path, frame, |chart| {
        let grey = RGBColor(150, 150, 150);
        chart
            .draw_series(m.series.iter().filter_map(|p| {
                p.chirp_bps
                    .map(|b| Circle::new((p.t, b / 1e6), 2, grey.filled()))
            }))?
            .label("per chirp")
            .legend(move |(x, y)| Circle::new((x + 8, y), 3, grey.filled()));
        let line = |f: fn(&crate::tool::Point) -> Option<f64>| -> Vec<(f64, f64)> {
            m.series
                .iter()
                .filter_map(|p| f(p).map(|v| (p.t, v / 1e6)))
                .collect()
        };
        let blue = RGBColor(40, 90, 200);
        chart
            .draw_series(LineSeries::new(
                line(|p| p.smoothed_bps),
                blue.stroke_width(2),
            ))?
            .label("smoothed")
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], blue.stroke_width(2))
            });
        if mgrp {
            chart
                .draw_series(LineSeries::new(
                    line(|p| p.adjusted_bps),
                    RED.stroke_width(2),
                ))?
                .label("smoothed, less riders")
                .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], RED.stroke_width(2)));
        }
        Ok(())
    })
}
