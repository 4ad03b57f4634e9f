//! Any bytes as a heartbeat datagram, fed to an echo and a pinger as the overlay's
//! route control would. Nothing may panic; what parses emits the same bytes, and a
//! hop's loss stays a share.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mgrp_core::heartbeat::{Echo, Message, Pinger, Settings};

fuzz_target!(|data: &[u8]| {
    let s = Settings::default();
    let mut pinger = Pinger::default();
    let mut echo = Echo::default();
    let from = std::net::SocketAddr::from(([10, 0, 0, 1], 7701));
    for (i, chunk) in data.chunks(21).enumerate() {
        let now = i as f64 * 0.1;
        pinger.ping(now);
        let _ = pinger.poll(now, &s);
        if let Ok(m) = Message::parse(chunk) {
            assert_eq!(m.emit(), chunk);
            match m {
                Message::Ping { seq } => {
                    let _ = echo.answer(from, seq, now);
                }
                Message::Pong { seq, received } => {
                    pinger.pong(now, seq, received, &s);
                }
                Message::StampedPing { seq } => {
                    let _ = echo.answer_stamped(from, seq, now);
                }
                Message::StampedPong { seq, at_ns } => {
                    pinger.stamped_pong(now, seq, at_ns, &s);
                }
            }
        }
        let h = pinger.state(now, &s);
        if let Some(l) = h.loss {
            assert!((0.0..=1.0).contains(&l));
        }
        for d in [h.forward_s, h.back_s].into_iter().flatten() {
            assert!(d.is_finite());
        }
    }
});
