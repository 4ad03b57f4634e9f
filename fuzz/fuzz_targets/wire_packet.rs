//! Any bytes handed to the MGRP packet parser: it must never panic, and whatever it
//! accepts must emit back to the same bytes (padding aside) and parse again equal.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mgrp_core::wire::{Packet, Repr};

fuzz_target!(|data: &[u8]| {
    let Ok(packet) = Packet::new_checked(data) else {
        return;
    };
    let _ = (
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
    // Everything but padding (not checked on receipt) must be byte-identical.
    let end = repr.buffer_len() - usize::from(repr.trailer_len);
    assert_eq!(buf[..end], data[..end]);
});
