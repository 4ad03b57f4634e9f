//! Any bytes as the body a route-control member's API answered (its `/v1/links` or
//! `/v1/routes`), read as route control reads them (the views' types): decoding must
//! never panic, and what route control takes from what decodes is within range — a hop's rate above 0 and finite, its loss and a heartbeat's loss
//! between 0 and 1, a round trip not negative — whatever the member says. The
//! matrix a collector makes of those links (the member and its neighbours as the
//! mesh) holds only rates above 0, ages not negative and loss shares of 0 to 1.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mgrp_route::control::{hop_estimates, remote_heartbeat};
use mgrp_views::link::Links;
use mgrp_views::routes::RoutesView;

fuzz_target!(|data: &[u8]| {
    let from = std::net::IpAddr::from([10, 0, 0, 1]);
    if let Ok(links) = serde_json::from_slice::<Links>(data) {
        matrix_of_member(&links);
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

/// The matrix of a mesh of `links`' member and (up to 16 of) its neighbours, from its
/// links alone: whatever they say, every value is a rate above 0, every age is not
/// negative, and every loss share is 0 to 1.
fn matrix_of_member(links: &Links) {
    let mut names: Vec<&str> = links
        .links
        .iter()
        .filter_map(|l| l.neighbour.as_deref())
        .take(16)
        .collect();
    names.push("fuzzed");
    names.sort_unstable();
    names.dedup();
    let mut text = String::new();
    for (i, n) in names.iter().enumerate() {
        text.push_str(&format!(
            "[[member]]\nname = {}\naddress = \"10.9.0.{}\"\n",
            toml::Value::from(*n),
            i + 1
        ));
    }
    let Ok(mesh) = mgrp_mesh::Mesh::parse(&text) else {
        return;
    };
    let read = std::collections::BTreeMap::from([("fuzzed".to_owned(), Ok(links.clone()))]);
    let m = mgrp_overlay::matrix::matrix_of(&mesh, &read, 1.8e9);
    for c in &m.cells {
        assert!(c.bps.is_finite() && c.bps > 0.0, "{c:?}");
        assert!(c.age_s >= 0.0, "{c:?}");
    }
    for l in &m.losses {
        assert!((0.0..=1.0).contains(&l.episode_frequency), "{l:?}");
        assert!((0.0..=1.0).contains(&l.loss_rate), "{l:?}");
        assert!(l.age_s >= 0.0, "{l:?}");
    }
}
