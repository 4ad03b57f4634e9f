//! Any bytes as what the kernel's netlink answers are read from: a `sock_diag` dump of
//! TCP connections (mgrp-tool), the `tcp_info` and BBR's model inside one, and a qdisc dump
//! (the testbed's bottleneck truth). Nothing may panic; a connection's `tcp_info` is
//! never longer than the buffer it came from.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut out = Vec::new();
    let _ = mgrp_tool::sockdiag::parse(data, &mut out);
    for c in &out {
        assert!(c.info.len() <= data.len());
        let _ = btc_rs::tcpinfo::parse(&c.info);
    }
    if let Some(b) = btc_rs::tcpinfo::BbrInfo::parse(data) {
        assert!(b.bandwidth_bps >= 0.0 && b.min_rtt_s >= 0.0);
    }
    if let Some(s) = btc_rs::tcpinfo::parse(data) {
        let _ = s.network_limited();
    }
    let _ = mgrp_testbed::qdisc::parse_dump(data, 1);
});
