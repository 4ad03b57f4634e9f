//! The checks every configuration file of the workspace makes the same way: names
//! that go into URLs and metric labels, durations, and token files. Each refusal is
//! one line that names the key and what would be accepted.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// A value refused, in words that name its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid(pub String);

impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Invalid {}

/// Names appear in URLs and metric labels: letters, digits and `.:_-` only, 1 to 64.
pub fn check_name(key: &str, name: &str) -> Result<(), Invalid> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | ':' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(Invalid(format!(
            "{key}: {name:?}; use 1 to 64 letters, digits, '.', ':', '_' or '-'"
        )))
    }
}

/// The duration at `key` (`"250ms"`, `"5s"`), or `default` when not given.
pub fn duration(key: &str, v: Option<&String>, default: Duration) -> Result<Duration, Invalid> {
    match v {
        None => Ok(default),
        Some(s) => mgrp_core::parse_duration(s).map_err(|e| Invalid(format!("{key}: {e}"))),
    }
}

/// The number at `key`, or `default` when not given; refused outside `range`, the
/// error saying what it is (`what`) and the range.
pub fn number(
    key: &str,
    v: Option<f64>,
    default: f64,
    range: std::ops::RangeInclusive<f64>,
    what: &str,
) -> Result<f64, Invalid> {
    let x = v.unwrap_or(default);
    if range.contains(&x) {
        Ok(x)
    } else {
        Err(Invalid(format!(
            "{key}: {x}; {what}, {} to {}",
            range.start(),
            range.end()
        )))
    }
}

/// Reads a token file (relative to `dir`, the configuration's folder, if given),
/// which only its owner may read; returns its path and the token, trimmed.
pub fn read_token_file(path: &Path, dir: Option<&Path>) -> Result<(PathBuf, String), Invalid> {
    let p = match dir {
        Some(d) if path.is_relative() => d.join(path),
        _ => path.to_path_buf(),
    };
    let t = crate::secret::read_private(&p, "token file").map_err(Invalid)?;
    Ok((p, t.trim().to_string()))
}

/// A duration as a configuration file would give it, in seconds: `5s`, `0.25s`.
pub fn seconds(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{s:.0}s")
    } else {
        format!("{s}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_durations_are_checked_with_their_key() {
        assert!(check_name("name", "west-0.a_b:c").is_ok());
        for bad in ["", "a b", "ä", &"x".repeat(65)] {
            let e = check_name("link 2: name", bad).unwrap_err().0;
            assert!(e.starts_with("link 2: name: "), "{e}");
        }
        let d = Duration::from_secs(3);
        assert_eq!(duration("poll", None, d), Ok(d));
        assert_eq!(
            duration("poll", Some(&"250ms".into()), d),
            Ok(Duration::from_millis(250))
        );
        let e = duration("routing.poll", Some(&"1x".into()), d)
            .unwrap_err()
            .0;
        assert!(e.starts_with("routing.poll: "), "{e}");
    }
}
