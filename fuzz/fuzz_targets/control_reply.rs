//! Any bytes as a batch a receiver asked for (the first line) and the sender's answer
//! (the rest): decoding must never panic, and a report the receiver believes (no
//! mismatch) claims no more probes or stamps than were asked for, so what the
//! receiver sets aside for the arrivals is bounded by its own request.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mgrp_tool::control::{Batch, MAX_BATCH_PROBES, Reply};

fuzz_target!(|data: &[u8]| {
    let cut = data.iter().position(|&b| b == b'\n').unwrap_or(data.len());
    let (asked, answer) = data.split_at(cut);
    let Ok(batch) = serde_json::from_slice::<Batch>(asked) else {
        return;
    };
    if batch.packets() == 0 || batch.packets() > MAX_BATCH_PROBES {
        return; // a receiver never asks for such a batch
    }
    let Ok(reply) = serde_json::from_slice::<Reply>(answer.get(1..).unwrap_or_default()) else {
        return;
    };
    if let Reply::Sent(report) = reply {
        if report.mismatch(&batch).is_none() {
            assert!(report.sent <= batch.packets());
            let arrivals: Vec<u64> = Vec::with_capacity(report.sent as usize);
            assert!(arrivals.capacity() <= MAX_BATCH_PROBES as usize * 2);
            assert!(report.stamps().len() <= batch.packets() as usize);
        }
    }
});
