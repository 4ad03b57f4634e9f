//! mgrpd's own receive path (`mgrpd::fuzzing::ReceivePath`: its receivers,
//! `Endpoints::identify`, the keyring and its replay windows, reassembly, rider
//! admission) fed one record at a time. A record sends bytes as they are over raw IP
//! or UDP from a peer, its endpoint or a stranger; or seals them first as a peer
//! would (with its key or the next key of a rotation); or seals them as the daemon
//! itself would for a peer and sends them back as that peer's (a reflection); or
//! sends the last record's datagram again (a replay).
//!
//! Nothing may panic; the receive counters always balance; a reflection is never
//! taken and moves no roaming peer; a datagram taken once is not taken again; and a
//! datagram costs at most [`MAX_CHECKS`] tag checks, whatever it holds.
//!
//! Run it with a time and memory budget per input, so that amplifying or quadratic
//! paths fail: `RUSTC_BOOTSTRAP=1 cargo fuzz run receive -- -timeout=1 -malloc_limit_mb=64`.
#![no_main]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use libfuzzer_sys::fuzz_target;
use mgrp_core::api::DaemonStats;
use mgrp_core::auth::TRAILER_LEN;
use mgrp_core::wire::Packet;
use mgrpd::fuzzing::{RAW_PEER, ROAMING_PEER, ReceivePath, UDP_ENDPOINT, UDP_PEER};

const STRANGER: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 77));
const PEERS: [IpAddr; 3] = [RAW_PEER, UDP_PEER, ROAMING_PEER];

/// Tag checks one datagram may cost: its peer's two keys of a rotation (the key
/// index names one, but a forgery may name either) for each of the two addresses
/// this daemon may be known by, and as many again to say why it was refused.
const MAX_CHECKS: u64 = 2 * 2 * 2;

/// Where a datagram may come from.
fn endpoint(sel: u8) -> SocketAddr {
    match sel % 4 {
        0 => UDP_ENDPOINT,
        1 => SocketAddr::new(RAW_PEER, 4253),
        2 => "203.0.113.7:40001".parse().unwrap(),
        _ => "198.51.100.9:5555".parse().unwrap(),
    }
}

/// How a record's packet travels.
#[derive(Clone, Copy)]
enum Via {
    Raw(IpAddr),
    Udp(SocketAddr),
}

fn send(path: &mut ReceivePath, via: Via, bytes: &[u8]) {
    match via {
        Via::Raw(from) => path.raw(from, bytes),
        Via::Udp(at) => path.udp(at, bytes),
    }
}

/// How `peer`'s own packets travel to the daemon.
fn way_of(peer: IpAddr, sel: u8) -> Via {
    match peer {
        p if p == RAW_PEER => Via::Raw(RAW_PEER),
        p if p == UDP_PEER => Via::Udp(UDP_ENDPOINT),
        _ => Via::Udp(endpoint(sel)),
    }
}

/// The bytes as a packet with room for a trailer, or a keepalive with one.
fn sealable(bytes: &[u8]) -> Packet<Vec<u8>> {
    match Packet::new_checked(bytes.to_vec()) {
        Ok(p) if p.trailer().len() == usize::from(TRAILER_LEN) => p,
        _ => mgrpd::fuzzing::keepalive(),
    }
}

/// Packets taken (any kind).
fn taken(s: &DaemonStats) -> u64 {
    s.daemon.probes_received + s.daemon.continuations_received + s.daemon.keepalives_received
}

fuzz_target!(|data: &[u8]| {
    let mut path = ReceivePath::new();
    let mut last: Option<(Via, Vec<u8>, bool)> = None;
    let mut rest = data;
    // Each record: operation, selector, length (2 bytes), bytes.
    while rest.len() >= 4 {
        let (op, sel) = (rest[0], rest[1]);
        let len = usize::from(u16::from_le_bytes([rest[2], rest[3]])).min(rest.len() - 4);
        let (bytes, tail) = rest[4..].split_at(len);
        rest = tail;
        let before = path.stats();
        let roaming_before = path.endpoint(ROAMING_PEER);
        let checked = |path: &ReceivePath| {
            let c = path.stats().daemon.tag_checks - before.daemon.tag_checks;
            assert!(c <= MAX_CHECKS, "one datagram cost {c} tag checks");
        };
        let sent = match op % 6 {
            0 => {
                let from = [RAW_PEER, UDP_PEER, ROAMING_PEER, STRANGER][usize::from(sel % 4)];
                Some((Via::Raw(from), bytes.to_vec()))
            }
            1 => Some((Via::Udp(endpoint(sel)), bytes.to_vec())),
            2 => {
                let peer = PEERS[usize::from(sel % 3)];
                let mut p = sealable(bytes);
                path.sealed_by(peer, &mut p);
                Some((way_of(peer, sel / 3), p.into_inner()))
            }
            3 => {
                // The daemon's own packet for a peer, back as that peer's.
                let peer = PEERS[usize::from(sel % 3)];
                let mut p = sealable(bytes);
                path.sealed_by_me(peer, &mut p);
                let via = way_of(peer, sel / 3);
                send(&mut path, via, p.as_bytes());
                let after = path.stats();
                assert_eq!(taken(&after), taken(&before), "a reflection was taken");
                assert_eq!(path.endpoint(ROAMING_PEER), roaming_before);
                assert!(after.receive_conserved(), "{after:#?}");
                checked(&path);
                last = Some((via, p.into_inner(), false));
                None
            }
            4 => {
                // The last datagram again: taken at most once.
                if let Some((via, bytes, was_taken)) = last.take() {
                    send(&mut path, via, &bytes);
                    let after = path.stats();
                    if was_taken {
                        assert_eq!(taken(&after), taken(&before), "a replay was taken");
                    }
                    assert!(after.receive_conserved(), "{after:#?}");
                    checked(&path);
                    last = Some((via, bytes, was_taken));
                }
                None
            }
            _ => {
                let mut p = sealable(bytes);
                path.sealed_with_next_key(RAW_PEER, &mut p);
                Some((Via::Raw(RAW_PEER), p.into_inner()))
            }
        };
        if let Some((via, bytes)) = sent {
            send(&mut path, via, &bytes);
            let after = path.stats();
            assert!(after.receive_conserved(), "{after:#?}");
            checked(&path);
            let was_taken = taken(&after) > taken(&before);
            last = Some((via, bytes, was_taken));
        }
    }
});
