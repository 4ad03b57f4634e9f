//! The `[btc]` section: how the transfer-rate prediction per neighbour is made.

use std::time::Duration;

use serde::Deserialize;

use super::check::{ConfigError, invalid};
use mgrp_service::settings::duration;

/// How the transfer-rate prediction per neighbour is made (`[btc]`).
#[derive(Debug, Clone, PartialEq)]
pub struct PredictionSettings {
    /// Factors that scale the available bandwidth by the squeezed-pair class.
    pub factors: btc_rs::model::Factors,
    /// How often each neighbour is asked what its kernel says of its TCP flows to
    /// this node; `None`: never.
    pub kernel_poll: Option<Duration>,
    /// Estimates older than this are not used.
    pub max_age: Duration,
    /// Segment size for Mathis's bound, bytes.
    pub mss: u32,
    /// The transfers predicted are BBR's: Mathis's bound is shown but does not cap
    /// the prediction (it is Reno's).
    pub bbr: bool,
    /// How an earlier flow from the neighbour is blended in when none runs now;
    /// `None`: it is not.
    pub history: Option<btc_rs::history::Limits>,
}

impl Default for PredictionSettings {
    fn default() -> Self {
        Self {
            factors: btc_rs::model::Factors::TESTBED,
            kernel_poll: Some(Duration::from_secs(2)),
            max_age: Duration::from_secs(600),
            mss: 1448,
            bbr: false,
            history: Some(btc_rs::history::Limits::default()),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct PredictionFile {
    like_narrow: Option<f64>,
    unlike_narrow: Option<f64>,
    undecided: Option<f64>,
    kernel_poll: Option<String>,
    max_age: Option<String>,
    mss: Option<u32>,
    congestion: Option<String>,
    history_max_age: Option<String>,
    history_change: Option<f64>,
}

impl PredictionFile {
    pub(super) fn check(self) -> Result<PredictionSettings, ConfigError> {
        let d = PredictionSettings::default();
        let factor = |key: &str, v: Option<f64>, default: f64| match v {
            None => Ok(default),
            Some(f) if f > 0.0 && f <= 2.0 => Ok(f),
            Some(f) => Err(invalid(format!(
                "btc.{key}: {f}; a factor that scales the available bandwidth is above 0 and at most 2"
            ))),
        };
        let kernel_poll = duration(
            "btc.kernel-poll",
            self.kernel_poll.as_ref(),
            d.kernel_poll.unwrap_or_default(),
        )?;
        if !kernel_poll.is_zero() && kernel_poll < Duration::from_millis(500) {
            return Err(invalid(format!(
                "btc.kernel-poll: {kernel_poll:?}; use at least 500ms, or 0s to never ask"
            )));
        }
        let max_age = duration("btc.max-age", self.max_age.as_ref(), d.max_age)?;
        if max_age < Duration::from_secs(1) {
            return Err(invalid(format!(
                "btc.max-age: {max_age:?}; use at least 1s"
            )));
        }
        let mss = self.mss.unwrap_or(d.mss);
        if !(536..=65_483).contains(&mss) {
            return Err(invalid(format!(
                "btc.mss: {mss}; a TCP segment is 536 to 65483 bytes (1448 on Ethernet with timestamps)"
            )));
        }
        let bbr = match self.congestion.as_deref() {
            None | Some("cubic" | "reno") => false,
            Some("bbr") => true,
            Some(other) => {
                return Err(invalid(format!(
                    "btc.congestion: {other:?}; the senders' congestion control is \"cubic\", \"reno\" or \"bbr\""
                )));
            }
        };
        let d_history = d.history.unwrap_or_default();
        let history_max_age = duration(
            "btc.history-max-age",
            self.history_max_age.as_ref(),
            Duration::from_secs_f64(d_history.max_age_s),
        )?;
        if !history_max_age.is_zero() && history_max_age < Duration::from_secs(10) {
            return Err(invalid(format!(
                "btc.history-max-age: {history_max_age:?}; use at least 10s, or 0s to leave earlier flows out of the prediction"
            )));
        }
        let change = match self.history_change {
            None => d_history.change,
            Some(c) if c > 1.0 && c <= 10.0 => c,
            Some(c) => {
                return Err(invalid(format!(
                    "btc.history-change: {c}; the factor by which the probes must change for an earlier flow to stop counting is above 1 and at most 10"
                )));
            }
        };
        Ok(PredictionSettings {
            bbr,
            history: (!history_max_age.is_zero()).then_some(btc_rs::history::Limits {
                max_age_s: history_max_age.as_secs_f64(),
                change,
            }),
            factors: btc_rs::model::Factors {
                like_narrow: factor("like-narrow", self.like_narrow, d.factors.like_narrow)?,
                unlike_narrow: factor(
                    "unlike-narrow",
                    self.unlike_narrow,
                    d.factors.unlike_narrow,
                )?,
                undecided: factor("undecided", self.undecided, d.factors.undecided)?,
            },
            kernel_poll: (!kernel_poll.is_zero()).then_some(kernel_poll),
            max_age,
            mss,
        })
    }
}
