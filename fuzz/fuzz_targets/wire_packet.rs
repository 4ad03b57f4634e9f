//! Any bytes handed to the MGRP packet parser, either version: it must never panic,
//! and whatever it accepts must emit back to the same bytes and parse again equal.
//! Padding is not compared, and in version 1 neither are the flag bytes of the packet
//! and of each chunk: their reserved bits are ignored on receipt and sent as zero, and
//! a chunk's last-chunk bit is recomputed from its offset and length on emit (the
//! parser trusts the lengths, not the bit). Version 2 has no reserved bits and one
//! encoding per packet: every byte but padding must come back.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mgrp_core::wire::{Packet, Repr, Version};

fuzz_target!(|data: &[u8]| {
    let Ok(packet) = Packet::new_checked(data) else {
        return;
    };
    let _ = (
        packet.sender_time_near(mgrp_core::WallTime::from_nanos(u64::from(data[0]) << 40)),
        packet.padding_len(),
        packet.kind(),
        packet.tool_header(),
        packet.trailer(),
        packet.rider_bytes(),
    );
    let repr = Repr::parse(&packet);
    let mut buf = vec![0xa5; data.len()];
    repr.emit(&mut buf)
        .expect("a parsed packet fits its own length");
    let again = Packet::new_checked(&buf[..]).expect("an emitted packet parses");
    assert_eq!(Repr::parse(&again), repr);
    // Everything but padding and flag bytes must be byte-identical.
    let end = repr.buffer_len() - usize::from(repr.trailer_len);
    let mut expected = data[..end].to_vec();
    let mut got = buf[..end].to_vec();
    let mut flag_bytes = Vec::new();
    if packet.version() == Version::V1 {
        flag_bytes.push(2);
        for i in 0..usize::from(data[3]) {
            flag_bytes.extend([28 + 12 * i + 10, 28 + 12 * i + 11]);
        }
    }
    for i in flag_bytes {
        expected[i] = 0;
        got[i] = 0;
    }
    assert_eq!(got, expected);
    // Emitting is idempotent, flag bytes included.
    let mut twice = vec![0x5a; data.len()];
    Repr::parse(&again).emit(&mut twice).expect("re-emit");
    assert_eq!(twice[..end], buf[..end]);
});
