//! Any bytes as the body a route-control member's API answered (its `/v1/links` or
//! `/v1/routes`), read as route control reads them (the views' types): decoding must
//! never panic, and what route control takes from what decodes is within range — a hop's rate above 0 and finite, its loss and a heartbeat's loss
//! between 0 and 1, a round trip not negative — whatever the member says.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mgrp_route::control::{hop_estimates, remote_heartbeat};
use mgrp_views::link::Links;
use mgrp_views::routes::RoutesView;

fuzz_target!(|data: &[u8]| {
    let from = std::net::IpAddr::from([10, 0, 0, 1]);
    if let Ok(links) = serde_json::from_slice::<Links>(data) {
        let hop = hop_estimates(&links, from, 60.0);
        if let Some(r) = hop.rate_bps {
            assert!(r.is_finite() && r > 0.0, "{r}");
        }
        if let Some(l) = hop.loss {
            assert!((0.0..=1.0).contains(&l), "{l}");
        }
    }
    if let Ok(routes) = serde_json::from_slice::<RoutesView>(data)
        && let Some(h) = remote_heartbeat(&routes, from)
    {
        assert!(h.rtt_s.is_none_or(|r| r >= 0.0 && r.is_finite()));
        assert!(h.loss.is_none_or(|l| (0.0..=1.0).contains(&l)));
    }
});
