//! Any bytes as a packet the passive capture hands over (cut after its TCP header by
//! the kernel's filter, or not). Nothing may panic; a segment that parses has its
//! headers inside the bytes, and its payload is what its IP length leaves.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mgrp_core::segment;

fuzz_target!(|data: &[u8]| {
    let kept = segment::header_len(data);
    if let Ok(s) = segment::parse(data) {
        let h = kept.expect("a parsed segment has a header length");
        assert!(h <= data.len());
        assert_eq!(s.payload_len as usize + h, s.ip_len as usize);
    }
});
