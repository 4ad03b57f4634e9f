//! A configuration problem.

use std::fmt;

/// A configuration problem, in one line naming the key and the fix.
#[derive(Debug)]
pub struct ConfigError(String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

/// The error saying `msg`.
pub(super) fn bad(msg: impl Into<String>) -> ConfigError {
    ConfigError(msg.into())
}
