//! Any bytes as what the measurement tools read from the network (pathload-rs,
//! pathchirp-rs and badabing-rs share them through mgrp-tool): a probe header, a
//! control message from either side, or a stream of arrivals for pathload's trend
//! analysis. Nothing
//! may panic; whatever decodes must encode and decode back to itself; the analysis
//! never yields NaN.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pathload_rs::control::{PROBE_HEADER_LEN, ProbeHeader, Reply, Request};
use pathload_rs::trend::{Arrival, analyse};

fuzz_target!(|data: &[u8]| {
    if let Some(h) = ProbeHeader::parse(data) {
        let mut buf = [0u8; PROBE_HEADER_LEN];
        h.emit(&mut buf);
        assert_eq!(ProbeHeader::parse(&buf), Some(h));
    }
    if let Ok(req) = serde_json::from_slice::<Request>(data) {
        let line = serde_json::to_vec(&req).expect("a request encodes");
        assert_eq!(serde_json::from_slice::<Request>(&line).ok(), Some(req));
    }
    if let Ok(rep) = serde_json::from_slice::<Reply>(data) {
        let line = serde_json::to_vec(&rep).expect("a reply encodes");
        assert_eq!(serde_json::from_slice::<Reply>(&line).ok(), Some(rep));
    }
    // 20 bytes per arrival: seq, sender stamp, receive stamp.
    let arrivals: Vec<Arrival> = data
        .chunks_exact(20)
        .map(|c| Arrival {
            seq: u32::from_le_bytes([c[0], c[1], c[2], c[3]]) % 512,
            sent_ns: i64::from_le_bytes(c[4..12].try_into().unwrap_or([0; 8])),
            received_ns: i64::from_le_bytes(c[12..20].try_into().unwrap_or([0; 8])),
        })
        .collect();
    let sent = data.first().map_or(0, |&b| u32::from(b) * 2);
    let spacing = data.get(1).map_or(1, |&b| u64::from(b) * 10_000);
    let r = analyse(sent, spacing, &arrivals);
    assert!(!r.loss.is_nan());
    assert!(r.pct.is_none_or(|p| !p.is_nan()) && r.pdt.is_none_or(|p| !p.is_nan()));
});
