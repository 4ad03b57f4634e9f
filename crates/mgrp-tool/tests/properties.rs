//! Properties of what crosses the network between a tool's two ends: the probe header
//! round-trips, any bytes parse or not without panicking, and a batch lists exactly
//! the probes its runs describe (its lead not among the gaps).

use mgrp_tool::control::{
    Batch, PROBE_HEADER_LEN, ProbeHeader, Reply, Request, Run, SentReport, Tag,
};
use proptest::prelude::*;

fn runs() -> impl Strategy<Value = Vec<Run>> {
    prop::collection::vec(
        (0u32..50, 72u32..1600, 0u64..2_000_000_000, any::<bool>()).prop_map(
            |(count, size, gap_ns, ride)| Run {
                count,
                size,
                gap_ns,
                ride,
            },
        ),
        0..8,
    )
}

proptest! {
    #[test]
    fn probe_headers_round_trip(kind: u8, fleet: u32, stream: u32, seq: u32, sent_ns: i64, tail in prop::collection::vec(any::<u8>(), 0..64)) {
        let h = ProbeHeader { tag: Tag { kind, fleet, stream }, seq, sent_ns };
        let mut buf = vec![0u8; PROBE_HEADER_LEN];
        h.emit(&mut buf);
        buf.extend_from_slice(&tail);
        prop_assert_eq!(ProbeHeader::parse(&buf), Some(h));
        prop_assert_eq!(ProbeHeader::parse(&buf[..PROBE_HEADER_LEN - 1]), None);
    }

    #[test]
    fn any_bytes_parse_or_not_without_panic(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        let _ = ProbeHeader::parse(&bytes);
        let _ = serde_json::from_slice::<Request>(&bytes);
        let _ = serde_json::from_slice::<Reply>(&bytes);
    }

    #[test]
    fn a_batch_is_its_runs(kind: u8, runs in runs(), lead_ns in prop_oneof![Just(0u64), 0u64..2_000_000_000]) {
        let b = Batch { tag: Tag { kind, fleet: 1, stream: 2 }, runs: runs.clone(), lead_ns };
        let probes: Vec<_> = b.probes().collect();
        let n: u32 = runs.iter().map(|r| r.count).sum();
        prop_assert_eq!(probes.len() as u32, n);
        prop_assert_eq!(b.packets(), n);
        prop_assert_eq!(probes.iter().map(|p| u64::from(p.size)).sum::<u64>(), b.bytes());
        prop_assert_eq!(probes.iter().skip(1).map(|p| p.gap_ns).sum::<u64>(), b.duration_ns());
        if let Some(first) = probes.first() {
            prop_assert_eq!(first.gap_ns, lead_ns);
        }
        let refused = b.refusal(1500);
        let over = probes.iter().any(|p| p.size > 1500) || probes.iter().skip(1).any(|p| p.gap_ns > 1_000_000_000);
        // The kinds from 0xF0 up are mgrp-tool's own (the proof probe's): no batch of one.
        let reserved = kind >= mgrp_tool::kind::RESERVED;
        prop_assert_eq!(refused.is_some(), reserved || n == 0 || n > 10_000 || over || runs.iter().any(|r| r.size > 1500 || r.gap_ns > 1_000_000_000) || lead_ns > 1_000_000_000);
        // A batch and its report survive the control line.
        let line = serde_json::to_vec(&Request::Probes(b.clone())).unwrap();
        prop_assert_eq!(serde_json::from_slice::<Request>(&line).unwrap(), Request::Probes(b.clone()));
        let report = Reply::Sent(SentReport { tag: b.tag, sent: n, sender_stamps: vec![Some(1); n as usize], ..SentReport::default() });
        let line = serde_json::to_vec(&report).unwrap();
        prop_assert_eq!(serde_json::from_slice::<Reply>(&line).unwrap(), report);
    }
}
