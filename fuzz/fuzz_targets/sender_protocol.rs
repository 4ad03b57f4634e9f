//! A sender's connections in any order: many requesters connect, say hello with any
//! version, transport and address, echo proofs right and wrong, ask for batches and
//! queries, say bye, hang up, and let time pass (`mgrp_tool::server::fuzzing`).
//! After every record the sender's places keep their caps and match the connections
//! holding them; no batch leaves outside a measurement, to an address never proven,
//! or without being charged first; one proof at most per connection and never to a
//! group, loopback or this host; no requester over its hourly budget; queries only
//! about the asker's own address; nothing served past a connection's deadline.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    mgrp_tool::server::fuzzing::run(data);
});
