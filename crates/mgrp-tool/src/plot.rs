//! The frame every tool's `--plot` draws in: a 900 × 540 SVG on white with a caption
//! and labelled axes; the tool draws its series, and the legend and the file are
//! finished here.

use std::ops::Range;
use std::path::Path;

use anyhow::Context as _;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

/// The chart a tool draws its series on.
pub type Chart<'a, 'b> =
    ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// What the frame shows besides the tool's series.
#[derive(Debug, Clone)]
pub struct Frame<'a> {
    /// The caption, the result in words.
    pub caption: String,
    /// The x axis: its range and its name.
    pub x: (Range<f64>, &'a str),
    /// The y axis: its range and its name.
    pub y: (Range<f64>, &'a str),
    /// Label the x axis at whole numbers only, about this many (a count axis).
    pub whole_x: Option<usize>,
    /// Where the legend goes.
    pub legend: SeriesLabelPosition,
}

impl<'a> Frame<'a> {
    /// A frame with `caption`, axes `x` and `y` (range and name) and the legend at
    /// `legend`, labelled as plots usually are.
    pub fn new(
        caption: String,
        x: (Range<f64>, &'a str),
        y: (Range<f64>, &'a str),
        legend: SeriesLabelPosition,
    ) -> Self {
        Self {
            caption,
            x,
            y,
            whole_x: None,
            legend,
        }
    }
}

/// Draws `frame` into `path`, `series` on it, then the legend, and writes the file.
pub fn draw(
    path: &Path,
    frame: Frame<'_>,
    series: impl FnOnce(&mut Chart<'_, '_>) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let root = SVGBackend::new(path, (900, 540)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(frame.caption, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(56)
        .build_cartesian_2d(frame.x.0, frame.y.0)?;
    let mut mesh = chart.configure_mesh();
    mesh.x_desc(frame.x.1).y_desc(frame.y.1);
    let whole = |x: &f64| format!("{x:.0}");
    if let Some(n) = frame.whole_x {
        mesh.x_labels(n).x_label_formatter(&whole);
    }
    mesh.draw()?;
    series(&mut chart)?;
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(frame.legend)
        .draw()?;
    root.present()
        .with_context(|| format!("cannot write the plot to {}", path.display()))?;
    Ok(())
}

/// The steps of the empirical CDF of `values` (the finite ones), from (0, 0) to
/// (`top`, 1): each distinct value rises by the share of values equal to it. Empty
/// when no value is finite.
pub fn cdf_steps(values: &[f64], top: f64) -> Vec<(f64, f64)> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return Vec::new();
    }
    v.sort_by(f64::total_cmp);
    let n = v.len() as f64;
    let mut pts = vec![(0.0, 0.0)];
    let mut below = 0usize;
    for (j, &x) in v.iter().enumerate() {
        if v.get(j + 1) == Some(&x) {
            continue;
        }
        pts.push((x, below as f64 / n));
        below = j + 1;
        pts.push((x, below as f64 / n));
    }
    pts.push((top, 1.0));
    pts
}

#[cfg(test)]
mod tests {
    use super::cdf_steps;

    #[test]
    fn a_cdf_rises_at_each_distinct_value_by_its_share() {
        assert_eq!(cdf_steps(&[f64::NAN], 5.0), []);
        assert_eq!(
            cdf_steps(&[2.0, 1.0, 2.0, f64::INFINITY, 3.0], 5.0),
            [
                (0.0, 0.0),
                (1.0, 0.0),
                (1.0, 0.25),
                (2.0, 0.25),
                (2.0, 0.75),
                (3.0, 0.75),
                (3.0, 1.0),
                (5.0, 1.0)
            ]
        );
    }
}
