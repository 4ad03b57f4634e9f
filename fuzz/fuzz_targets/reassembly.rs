//! Arbitrary sequences of chunks from a few peers: reassembly must never panic, never
//! exceed its memory bounds, and only release riders whose every byte matches what the
//! chunks said.
#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use mgrp_core::MonoTime;
use mgrp_core::reassembly::{ChunkOutcome, Limits, Reassembler};
use mgrp_core::wire::Chunk;

fuzz_target!(|data: &[u8]| {
    let limits = Limits {
        per_peer_bytes: 600,
        total_bytes: 1000,
        timeout: Duration::from_millis(5),
        remembered: 8,
        max_rider_len: 400,
    };
    let mut r = Reassembler::new(limits);
    let mut now = 0u64;
    let mut rest = data;
    // Each record: peer, rider id, offset, rider length, chunk length, time step.
    while rest.len() >= 6 {
        let (h, tail) = rest.split_at(6);
        let peer = h[0] % 3;
        let id = u32::from(h[1] % 4);
        let rider_len = u16::from(h[3] % 64) + 1;
        let offset = u16::from(h[2]) % rider_len;
        let want = usize::from(h[4] % 64) + 1;
        now += u64::from(h[5]) * 50_000;
        let len = want.min(usize::from(rider_len - offset)).min(tail.len());
        if len == 0 {
            break;
        }
        let (body, tail) = tail.split_at(len);
        rest = tail;
        let chunk = Chunk {
            rider_id: id,
            offset,
            rider_len,
            data: body,
        };
        if let ChunkOutcome::Complete(rider) =
            r.handle_chunk(MonoTime::from_nanos(now), peer, &chunk)
        {
            assert_eq!(rider.len(), usize::from(rider_len));
            let at = usize::from(offset);
            assert_eq!(&rider[at..at + len], body);
        }
        let c = r.counters();
        assert!(c.bytes_pending <= 1000);
    }
});
