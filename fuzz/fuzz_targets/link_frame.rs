//! Any bytes as a frame the testbed's accounting reads off the bottleneck link (a
//! virtio-net header, then an Ethernet frame). Nothing may panic; the kinds a frame's
//! bytes are sorted into add up to its bytes on the link, and the rider bytes never
//! exceed the frame.
#![no_main]

use std::net::{IpAddr, Ipv4Addr};

use libfuzzer_sys::fuzz_target;
use mgrp_testbed::accounting::Classifier;
use mgrp_testbed::link::{VNET_HDR_LEN, VnetHdr};

fuzz_target!(|data: &[u8]| {
    let classifier = Classifier {
        source: vec![IpAddr::V4(Ipv4Addr::new(10, 78, 1, 2))],
        mgrp_protocol: 253,
    };
    let vnet = VnetHdr::parse(data);
    let frame = data.get(VNET_HDR_LEN..).unwrap_or_default();
    let wire = vnet.wire_bytes(frame.len());
    assert!(wire >= frame.len() as u64);
    let sorted = classifier.classify(frame, wire);
    assert_eq!(sorted.parts.iter().map(|(_, b)| b).sum::<u64>(), wire);
    assert!(sorted.rider_bytes <= frame.len() as u64);
    assert!(sorted.padding <= frame.len() as u64);
    assert!(sorted.mgrp || sorted.rider_bytes + sorted.padding == 0);
});
