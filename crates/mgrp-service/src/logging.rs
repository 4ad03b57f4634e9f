//! The daemons' logs: on stderr, as text or as one JSON object a line, at the level
//! `--log-level` gives unless `RUST_LOG` is set, whose directives (tracing's
//! env-filter syntax, `info,mgrpd::pacer=debug`) then decide.

use std::fmt;
use std::str::FromStr;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::LevelFilter;

/// How log lines look.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// Lines for people: time, level, message, fields.
    #[default]
    Text,
    /// One JSON object a line (`timestamp`, `level`, `message`, the fields), for
    /// log collectors.
    Json,
}

impl FromStr for LogFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "text" => Ok(Self::Text),
            "json" => Ok(Self::Json),
            other => Err(format!("log format {other:?}: use text or json")),
        }
    }
}

impl fmt::Display for LogFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Text => "text",
            Self::Json => "json",
        })
    }
}

/// The filter in force: `RUST_LOG`'s directives when it is set and not empty, else
/// `level` for everything. A `RUST_LOG` that does not parse is an error naming it.
pub fn filter(level: tracing::Level, rust_log: Option<&str>) -> Result<EnvFilter, String> {
    match rust_log.map(str::trim).filter(|s| !s.is_empty()) {
        Some(spec) => EnvFilter::builder()
            .parse(spec)
            .map_err(|e| format!("RUST_LOG={spec:?}: {e}")),
        None => Ok(EnvFilter::default().add_directive(LevelFilter::from_level(level).into())),
    }
}

/// Installs the process's log subscriber ([`filter`] of `level` and `RUST_LOG`,
/// lines as `format` says). A subscriber already installed (a daemon embedded in a
/// test or another program) is kept.
pub fn init(level: tracing::Level, format: LogFormat) -> Result<(), String> {
    let rust_log = std::env::var("RUST_LOG").ok();
    let filter = filter(level, rust_log.as_deref())?;
    let lines = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_writer(std::io::stderr);
    // A second subscriber (when embedded) is not an error worth stopping for.
    let _ = match format {
        LogFormat::Text => lines
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .try_init(),
        LogFormat::Json => lines.json().flatten_event(true).try_init(),
    };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_read_and_print_back() {
        for f in [LogFormat::Text, LogFormat::Json] {
            assert_eq!(f.to_string().parse::<LogFormat>(), Ok(f));
        }
        assert!(
            "xml"
                .parse::<LogFormat>()
                .unwrap_err()
                .contains("text or json")
        );
    }

    #[test]
    fn rust_log_decides_when_set() {
        use tracing::Level;
        let level = |f: EnvFilter| f.max_level_hint();
        let f = filter(Level::INFO, None).unwrap();
        assert_eq!(level(f), Some(LevelFilter::INFO));
        let f = filter(Level::INFO, Some("  ")).unwrap();
        assert_eq!(level(f), Some(LevelFilter::INFO));
        let f = filter(Level::INFO, Some("warn,mgrpd::pacer=trace")).unwrap();
        assert_eq!(level(f), Some(LevelFilter::TRACE));
        let f = filter(Level::DEBUG, Some("error")).unwrap();
        assert_eq!(level(f), Some(LevelFilter::ERROR));
        let e = filter(Level::INFO, Some("pacer=loud")).unwrap_err();
        assert!(e.contains("RUST_LOG=\"pacer=loud\""), "{e}");
    }
}
