//! Any bytes as one line a receiver sends a measurement sender: decoding must never
//! panic, whatever decodes must encode and decode back to the same request, and a
//! batch the sender accepts (no refusal) must stay within its limits when walked.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mgrp_tool::control::{MAX_BATCH_PROBES, MAX_GAP_NS, MAX_PROBE_IP_BYTES, Request};

fuzz_target!(|data: &[u8]| {
    let Ok(req) = serde_json::from_slice::<Request>(data) else {
        return;
    };
    let line = serde_json::to_vec(&req).expect("a request encodes");
    let again: Request = serde_json::from_slice(&line).expect("an encoded request decodes");
    assert_eq!(again, req);
    if let Request::Probes(batch) = req {
        if batch.refusal(MAX_PROBE_IP_BYTES).is_none() {
            let n = batch.packets();
            assert!((1..=MAX_BATCH_PROBES).contains(&n));
            let mut walked = 0u32;
            for p in batch.probes() {
                assert!(p.size <= MAX_PROBE_IP_BYTES && p.gap_ns <= MAX_GAP_NS);
                walked += 1;
            }
            assert_eq!(walked, n);
            assert!(batch.bytes() <= u64::from(n) * u64::from(MAX_PROBE_IP_BYTES));
            assert!(batch.duration_ns() <= u64::from(n) * MAX_GAP_NS);
        }
    }
});
