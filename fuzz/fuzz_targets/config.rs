//! Any text as mgrpd's configuration file: loading must never panic; it is accepted
//! or refused with a message. Inputs naming a key file are skipped, since loading one
//! reads the file system.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if text.contains("key-file") || text.contains("key_file") {
        return;
    }
    match mgrpd::config::Config::from_toml(text) {
        Ok(c) => {
            assert!((576..=9000).contains(&c.mtu));
            assert!(c.fwmark != 0);
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
});
