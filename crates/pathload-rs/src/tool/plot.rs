//! `--plot`: each fleet's rate and verdict, and the range converging, as SVG.

use std::path::Path;

use crate::{FleetReport, FleetVerdict, Outcome};
use mgrp_tool::plot::{self, Frame};
use plotters::prelude::*;

/// Draws the run into `path`.
pub(crate) fn draw(path: &Path, fleets: &[FleetReport], o: &Outcome) -> anyhow::Result<()> {
    let n = fleets.len().max(1) as f64;
    let top = fleets
        .iter()
        .map(|f| f.actual_rate.max(f.requested_rate))
        .fold(o.unadjusted_high.max(o.high), f64::max)
        .max(1.0)
        * 1.15;
    let frame = Frame {
        caption: format!(
            "pathload-rs: {:.2} - {:.2} Mbps ({})",
            o.low,
            o.high,
            o.reason.describe()
        ),
        x: (0.5..n + 0.5, "fleet"),
        y: (0.0..top, "rate (Mbit/s)"),
        whole_x: Some(fleets.len().clamp(2, 20)),
        legend: SeriesLabelPosition::LowerRight,
    };
    plot::draw(path, frame, |chart| {
        // The final range as a band across the plot.
        let band = RGBColor(90, 140, 220).mix(0.35);
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(0.5, o.low), (n + 0.5, o.high.max(o.low + top * 0.002))],
                band.filled(),
            )))?
            .label("result (adjusted)")
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 16, y + 5)], band.filled()));

        // Rmin and Rmax after each fleet, as steps.
        let steps = |pick: fn(&FleetReport) -> Option<f64>| -> Vec<(f64, f64)> {
            let mut pts = Vec::new();
            for (i, f) in fleets.iter().enumerate() {
                if let Some(v) = pick(f) {
                    pts.push((i as f64 + 0.5, v));
                    pts.push((i as f64 + 1.5, v));
                }
            }
            pts
        };
        let rmin = steps(|f| f.bounds.rmin.map(|b| b.rate));
        let rmax = steps(|f| f.bounds.rmax.map(|b| b.rate));
        chart
            .draw_series(LineSeries::new(rmin, GREEN.stroke_width(2)))?
            .label("Rmin")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], GREEN.stroke_width(2)));
        chart
            .draw_series(LineSeries::new(rmax, RED.stroke_width(2)))?
            .label("Rmax")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], RED.stroke_width(2)));

        // Each fleet: where it was sent and what it showed.
        let colour = |v: FleetVerdict| match v {
            FleetVerdict::Increasing => RED,
            FleetVerdict::NoTrend => GREEN,
            FleetVerdict::Grey => RGBColor(128, 128, 128),
            FleetVerdict::Unusable | FleetVerdict::RateMissed => BLACK,
        };
        chart
            .draw_series(fleets.iter().enumerate().map(|(i, f)| {
                Circle::new(
                    (i as f64 + 1.0, f.actual_rate),
                    6,
                    colour(f.verdict).filled(),
                )
            }))?
            .label("fleet: increasing / no trend / grey")
            .legend(|(x, y)| Circle::new((x + 8, y), 5, RED.filled()));
        Ok(())
    })
}
