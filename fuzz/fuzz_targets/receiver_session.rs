//! The receiver's side of a measurement against a sender that answers anything, in
//! any order and after any delay, with probes of its batch and of others
//! (`mgrp_tool::session::fuzzing`). After every answer a ping is timed only by its
//! pong, one address proof at most is echoed, the run starts only on a hello, a
//! batch's report is taken only if it is that batch's, in time and no larger than
//! what was asked, and no probe of another batch, nor more than the report says
//! left, is counted.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    mgrp_tool::session::fuzzing::run(data);
});
