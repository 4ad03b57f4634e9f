//! `--plot`: the two squeezed-pair histograms, as SVG, with the sending gaps, the
//! back-to-back gap and the gaps of one 500-byte and one 1500-byte packet at the
//! capacity marked (the seed's Figure 5).

use std::path::Path;

use mgrp_tool::plot::{self, Frame};
use plotters::prelude::*;

use crate::squeezed::{Squeeze, tx_ns};

/// Draws `s` into `path`; `capacity_bps` places the marks.
pub fn histograms(path: &Path, s: &Squeeze, capacity_bps: f64) -> anyhow::Result<()> {
    let us = |bin: usize| (bin as u64 * s.bin_ns) as f64 / 1e3;
    let end = us(s.histograms[0].len().max(1));
    let share = |k: usize, c: u32| f64::from(c) / s.pairs[k].max(1) as f64;
    let top = (0..2)
        .flat_map(|k| s.histograms[k].iter().map(move |&c| share(k, c)))
        .fold(0.01, f64::max)
        * 1.1;
    let caption = format!(
        "btc-rs squeezed pairs at {:.1} Mbit/s: {:?} (score {:+})",
        capacity_bps / 1e6,
        s.class,
        s.score
    );
    let frame = Frame::new(
        caption,
        (0.0..end, "received gap (µs)"),
        (0.0..top, "share of pairs"),
        SeriesLabelPosition::UpperRight,
    );
    plot::draw(path, frame, |chart| {
        let colours = [RGBColor(200, 60, 40), RGBColor(40, 90, 200)];
        let names = ["spaced by half of 500 B", "spaced by half of 1500 B"];
        for k in 0..2 {
            let c = colours[k];
            let points: Vec<(f64, f64)> = s.histograms[k]
                .iter()
                .enumerate()
                .map(|(i, &n)| (us(i) + us(1) / 2.0, share(k, n)))
                .collect();
            chart
                .draw_series(LineSeries::new(points, c.stroke_width(2)))?
                .label(names[k])
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2))
                });
            let g = s.sending_gap_ns[k] as f64 / 1e3;
            chart.draw_series(std::iter::once(PathElement::new(
                vec![(g, 0.0), (g, top)],
                c.stroke_width(1),
            )))?;
        }
        let grey = RGBColor(120, 120, 120);
        for (mark, label) in [
            (s.back_to_back_ns as f64 / 1e3, "b2b"),
            (
                (s.back_to_back_ns + tx_ns(500, capacity_bps)) as f64 / 1e3,
                "500B",
            ),
            (
                (s.back_to_back_ns + tx_ns(1500, capacity_bps)) as f64 / 1e3,
                "1500B",
            ),
        ] {
            chart.draw_series(std::iter::once(PathElement::new(
                vec![(mark, 0.0), (mark, top * 0.9)],
                grey.stroke_width(1),
            )))?;
            chart.draw_series(std::iter::once(Text::new(
                label,
                (mark, top * 0.93),
                ("sans-serif", 14).into_font(),
            )))?;
        }
        Ok(())
    })
}
