//! What every method's parameters are checked with.

/// A parameter outside what the method accepts; the message names the parameter and
/// its limit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);
