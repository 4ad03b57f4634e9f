//! The receiving daemon's path as a whole, without I/O: for each record of the input,
//! a packet from one of four senders (two peers, one keyed, and two strangers) goes
//! through the peer check, authentication and the replay window, the parser,
//! reassembly and rider admission, as mgrpd does. Nothing may panic; strangers and
//! unauthenticated packets must create no state; memory stays within its bounds;
//! nothing refused is ever delivered.
//!
//! Run it with a time and memory budget per input, so that amplifying or quadratic
//! paths fail: `RUSTC_BOOTSTRAP=1 cargo fuzz run receive -- -timeout=1 -malloc_limit_mb=64`.
#![no_main]

use std::net::{IpAddr, Ipv4Addr};

use libfuzzer_sys::fuzz_target;
use mgrp_core::MonoTime;
use mgrp_core::auth::{self, Key, ReplayWindow};
use mgrp_core::peers::{Peer, Peers, Prefix};
use mgrp_core::reassembly::{ChunkOutcome, Limits, Reassembler};
use mgrp_core::wire::Packet;

const ME: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
const SENDERS: [IpAddr; 4] = [
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, 3)),
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, 9)),
    IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)),
];

fuzz_target!(|data: &[u8]| {
    let peers = Peers::new(
        vec![
            Peer::new(Prefix::host(SENDERS[0])),
            Peer::new(Prefix::host(SENDERS[1])),
        ],
        Vec::new(),
        253,
    );
    // The second peer authenticates with this key.
    let key = Key::from_bytes([0x42; 32]);
    let limits = Limits {
        per_peer_bytes: 8 << 10,
        total_bytes: 12 << 10,
        timeout: std::time::Duration::from_millis(50),
        remembered: 64,
        max_rider_len: 1500,
    };
    let mut reasm: Reassembler<IpAddr> = Reassembler::new(limits);
    let mut window = ReplayWindow::default();
    let mut now = 0u64;
    let mut rest = data;
    // Each record: sender, time step, packet length (2 bytes), packet.
    while rest.len() >= 4 {
        let sender = SENDERS[usize::from(rest[0] % 4)];
        now += u64::from(rest[1]) * 1_000_000;
        let len = usize::from(u16::from_le_bytes([rest[2], rest[3]])).min(rest.len() - 4);
        let (packet, tail) = rest[4..].split_at(len);
        rest = tail;
        let before = reasm.counters().chunks_in;
        let deliver = |reasm: &mut Reassembler<IpAddr>| {
            let Ok(p) = Packet::new_checked(packet) else {
                return;
            };
            for chunk in p.chunks() {
                if let ChunkOutcome::Complete(rider) =
                    reasm.handle_chunk(MonoTime::from_nanos(now), sender, &chunk)
                {
                    assert!(rider.len() <= 1500);
                    if peers.admit(sender, ME, &rider).is_ok() {
                        // What is admitted is a sound packet from the sender itself.
                        assert!(rider.len() >= 20);
                        assert_eq!(&rider[12..16], &[10, 0, 0, u8::from(sender == SENDERS[1]) + 2]);
                    }
                }
            }
        };
        if !peers.is_peer(sender) {
            // Dropped before parsing: no state.
        } else if sender == SENDERS[1] {
            let opened = Packet::new_checked(packet).map(|p| auth::open(&key, &p));
            if let Ok(Ok(counter)) = opened {
                if window.check_and_update(counter) {
                    deliver(&mut reasm);
                }
            }
        } else {
            deliver(&mut reasm);
        }
        let c = reasm.counters();
        if !peers.is_peer(sender) {
            assert_eq!(c.chunks_in, before, "a stranger's packet reached reassembly");
        }
        assert!(c.bytes_pending as usize <= limits.total_bytes);
    }
});
