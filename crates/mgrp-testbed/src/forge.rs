//! Hand-made packets for tests and benches that play a peer or a stranger: an IPv4
//! packet with a correct header checksum, a UDP datagram inside one, and an MGRP
//! continuation carrying a whole rider.

use std::net::Ipv4Addr;

use mgrp_core::wire::{Chunk, Header, Repr, Version};

/// An IPv4 header (checksum included) in front of `payload`.
pub fn ipv4_packet(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, payload: &[u8]) -> Vec<u8> {
    let len = u16::try_from(20 + payload.len()).expect("an IPv4 packet of at most 64 KiB");
    let mut p = vec![0u8; 20];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&len.to_be_bytes());
    p[8] = 64;
    p[9] = protocol;
    p[12..16].copy_from_slice(&src.octets());
    p[16..20].copy_from_slice(&dst.octets());
    let sum = mgrp_core::ip::header_checksum(&p);
    p[10..12].copy_from_slice(&sum.to_be_bytes());
    p.extend_from_slice(payload);
    p
}

/// A UDP datagram from port 4000 to `port` carrying `text` (checksum 0: none, allowed
/// over IPv4), as a whole IP packet whose protocol field says `protocol`.
pub fn udp_packet(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, port: u16, text: &[u8]) -> Vec<u8> {
    let len = u16::try_from(8 + text.len()).expect("a UDP datagram of at most 64 KiB");
    let mut udp = vec![0u8; 8];
    udp[0..2].copy_from_slice(&4000u16.to_be_bytes());
    udp[2..4].copy_from_slice(&port.to_be_bytes());
    udp[4..6].copy_from_slice(&len.to_be_bytes());
    udp.extend_from_slice(text);
    ipv4_packet(src, dst, protocol, &udp)
}

/// An MGRP continuation carrying `rider` whole as rider `rider_id`, with a zeroed
/// trailer of `trailer_len` bytes (to be sealed, or left for a receiver to refuse).
pub fn continuation(rider_id: u32, rider: &[u8], trailer_len: u16) -> Vec<u8> {
    let repr = Repr {
        version: Version::V1,
        header: Header::continuation(),
        tool_header: &[],
        chunks: vec![Chunk {
            rider_id,
            offset: 0,
            rider_len: u16::try_from(rider.len()).expect("a rider of at most 64 KiB"),
            data: rider,
        }],
        trailer_len,
    };
    let mut buf = vec![0u8; repr.buffer_len()];
    repr.emit(&mut buf)
        .expect("a buffer of the packet's own length");
    buf
}
