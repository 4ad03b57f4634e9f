//! What every section of the configuration checks the same way, and the error a
//! refusal is: one line that names the key and what would be accepted.

use std::path::PathBuf;

use mgrp_service::settings::Invalid;

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// Which file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The TOML does not parse or has an unknown key or a wrong type.
    #[error("{0}")]
    Toml(String),
    /// A value is out of range or links contradict each other.
    #[error("{0}")]
    Invalid(String),
}

pub(super) fn invalid(msg: String) -> ConfigError {
    ConfigError::Invalid(msg)
}

impl From<Invalid> for ConfigError {
    fn from(e: Invalid) -> Self {
        Self::Invalid(e.0)
    }
}
