//! Any bytes as the body a route-control member's API answered (its `/v1/links` or
//! `/v1/routes`): decoding must never panic, and what route control takes from it is
//! within range — a hop's rate above 0 and finite, its loss and a heartbeat's loss
//! between 0 and 1, a round trip not negative — whatever the member says.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mgrp_overlay::routing::control::{hop_estimates, remote_heartbeat};

fuzz_target!(|data: &[u8]| {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let from = std::net::IpAddr::from([10, 0, 0, 1]);
    let hop = hop_estimates(&v, from, 60.0);
    if let Some(r) = hop.rate_bps {
        assert!(r.is_finite() && r > 0.0, "{r}");
    }
    if let Some(l) = hop.loss {
        assert!((0.0..=1.0).contains(&l), "{l}");
    }
    if let Some(h) = remote_heartbeat(&v, from) {
        assert!(h.rtt_s.is_none_or(|r| r >= 0.0 && r.is_finite()));
        assert!(h.loss.is_none_or(|l| (0.0..=1.0).contains(&l)));
    }
});
