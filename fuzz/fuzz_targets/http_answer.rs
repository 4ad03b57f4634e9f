//! Any bytes as the answer a server gives to one `GET` (route control's poll of a
//! member's API, mgrpd's and the overlay's fetch of a mesh description): reading it
//! must never panic, and a body taken is never longer than the limit asked for.
#![no_main]

use std::io::{Cursor, Read, Write};

use libfuzzer_sys::fuzz_target;

/// A stream whose reads give the fuzzer's bytes and whose writes go nowhere.
struct Answer<'a>(Cursor<&'a [u8]>);

impl Read for Answer<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.0.read(buf)
    }
}

impl Write for Answer<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fuzz_target!(|data: &[u8]| {
    let limit = 4096;
    if let Ok(body) = mgrp_service::http::get(Answer(Cursor::new(data)), "h", "/p", None, limit) {
        assert!(body.len() <= limit, "{}", body.len());
    }
});
