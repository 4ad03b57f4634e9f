//! Metrics exposition for Prometheus in the format the scraper asks for.
//!
//! The daemon and the overlay build their metrics with `prometheus-client`, which
//! writes OpenMetrics 1.0. Prometheus asks for that, but `promtool check metrics`,
//! older scrapers and most text tools read the Prometheus text format 0.0.4, where a
//! counter's `HELP` and `TYPE` lines name the sample (`x_total`), not the family (`x`),
//! and there is no `# EOF`, `# UNIT` or `_created`. [`negotiate`] reads the request's
//! `Accept` header, [`to_text`] turns OpenMetrics into the text format.

/// OpenMetrics' content type.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The Prometheus text format's content type.
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The formats served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics 1.0.
    OpenMetrics,
    /// Prometheus text format 0.0.4.
    Text,
}

impl Format {
    /// The `Content-Type` of an answer in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Self::OpenMetrics => OPENMETRICS_CONTENT_TYPE,
            Self::Text => TEXT_CONTENT_TYPE,
        }
    }
}

/// The format to answer a request whose `Accept` header is `accept`: OpenMetrics when
/// the scraper ranks it at least as high as the text format, the text format otherwise
/// (also without the header, as the text format is what any scraper reads).
pub fn negotiate(accept: Option<&str>) -> Format {
    let Some(accept) = accept else {
        return Format::Text;
    };
    let mut open = None::<f64>;
    let mut text = None::<f64>;
    for item in accept.split(',') {
        let mut parts = item.split(';').map(str::trim);
        let kind = parts.next().unwrap_or("").to_ascii_lowercase();
        let q = parts
            .filter_map(|p| p.strip_prefix("q="))
            .find_map(|q| q.parse::<f64>().ok())
            .unwrap_or(1.0);
        let slot = match kind.as_str() {
            "application/openmetrics-text" => &mut open,
            "text/plain" => &mut text,
            _ => continue,
        };
        *slot = Some(slot.map_or(q, |s| s.max(q)));
    }
    match (open, text) {
        (Some(o), t) if o > 0.0 && o >= t.unwrap_or(0.0) => Format::OpenMetrics,
        _ => Format::Text,
    }
}

/// `openmetrics` (as `prometheus-client` writes it) in `format`.
pub fn render(openmetrics: String, format: Format) -> String {
    match format {
        Format::OpenMetrics => openmetrics,
        Format::Text => to_text(&openmetrics),
    }
}

/// OpenMetrics text in the Prometheus text format 0.0.4: counter families' `HELP` and
/// `TYPE` lines name their `_total` samples, `# UNIT`, `# EOF` and `_created` samples
/// go, and `HELP` keeps only the escapes the text format knows (`\\` and `\n`).
pub fn to_text(openmetrics: &str) -> String {
    let counters: Vec<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.strip_suffix(" counter"))
        .collect();
    let is_counter = |name: &str| counters.contains(&name);
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            let help = help.replace("\\\"", "\"");
            let name = if is_counter(name) {
                format!("{name}_total")
            } else {
                name.to_string()
            };
            out.push_str(&format!("# HELP {name} {help}\n"));
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, ""));
            if kind == "counter" {
                out.push_str(&format!("# TYPE {name}_total counter\n"));
            } else {
                out.push_str(line);
                out.push('\n');
            }
            continue;
        }
        let sample = line.split(['{', ' ']).next().unwrap_or("");
        if sample.strip_suffix("_created").is_some_and(&is_counter) {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPEN: &str = "# HELP x_runs Runs by \\\"outcome\\\".\n# TYPE x_runs counter\n\
        x_runs_total{outcome=\"a\"} 3\nx_runs_created{outcome=\"a\"} 1.5\n\
        # HELP x_rate_bytes_per_second Rate.\n# TYPE x_rate_bytes_per_second gauge\n\
        # UNIT x_rate_bytes_per_second bytes_per_second\nx_rate_bytes_per_second 2.5\n# EOF\n";

    #[test]
    fn counters_are_named_by_their_samples_and_openmetrics_only_lines_go() {
        assert_eq!(
            to_text(OPEN),
            "# HELP x_runs_total Runs by \"outcome\".\n# TYPE x_runs_total counter\n\
             x_runs_total{outcome=\"a\"} 3\n\
             # HELP x_rate_bytes_per_second Rate.\n# TYPE x_rate_bytes_per_second gauge\n\
             x_rate_bytes_per_second 2.5\n"
        );
        assert_eq!(render(OPEN.to_string(), Format::OpenMetrics), OPEN);
    }

    #[test]
    fn the_scraper_gets_what_it_ranks_highest() {
        // What Prometheus 2.x sends.
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(negotiate(Some(prometheus)), Format::OpenMetrics);
        assert_eq!(negotiate(None), Format::Text);
        assert_eq!(negotiate(Some("*/*")), Format::Text);
        assert_eq!(negotiate(Some("text/plain")), Format::Text);
        assert_eq!(
            negotiate(Some("text/plain;q=0.9, application/openmetrics-text;q=0.5")),
            Format::Text
        );
        assert_eq!(
            negotiate(Some("application/openmetrics-text; q=0")),
            Format::Text
        );
        assert_eq!(
            negotiate(Some("Application/OpenMetrics-Text")),
            Format::OpenMetrics
        );
    }
}
