//! Any bytes as one line of the daemon's API: decoding must never panic, and whatever
//! decodes must encode and decode back to the same request.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mgrp_core::api::Request;

fuzz_target!(|data: &[u8]| {
    if let Ok(req) = serde_json::from_slice::<Request>(data) {
        let line = serde_json::to_vec(&req).expect("a request encodes");
        let again: Request = serde_json::from_slice(&line).expect("an encoded request decodes");
        assert_eq!(again, req);
    }
});
