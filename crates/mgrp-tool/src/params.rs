//! What every method's parameters are checked with.

/// A parameter outside what the method accepts; the message names the parameter and
/// its limit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// Checks a probe's size, IP bytes, against what every transport carries.
pub fn probe_size(size: u32) -> Result<(), ConfigError> {
    use crate::control::{MAX_PROBE_IP_BYTES, MIN_PROBE_IP_BYTES};
    if (MIN_PROBE_IP_BYTES..=MAX_PROBE_IP_BYTES).contains(&size) {
        Ok(())
    } else {
        Err(ConfigError(format!(
            "probe size {size} bytes must be within {MIN_PROBE_IP_BYTES}..={MAX_PROBE_IP_BYTES} (IP bytes)"
        )))
    }
}
