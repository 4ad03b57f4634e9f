//! The probe header's kind byte: which of a tool's batches a probe belongs to.
//!
//! A tool chooses its own kinds, below [`RESERVED`], with [`tool`]:
//!
//! ```
//! /// A train of the example tool's.
//! pub const TRAIN: u8 = mgrp_tool::kind::tool(0);
//! ```
//!
//! Probes reach only the session that asked for them (its own probe port, and a tag
//! mask of 64 random bits), so tools need not keep out of each other's kinds; a
//! tool's kinds only tell its own batches apart. The kinds from [`RESERVED`] up are
//! this crate's: [`PROOF`] now, and room for more. A sender refuses a batch of one.

/// The first kind a tool may not use.
pub const RESERVED: u8 = 0xF0;

/// The one probe a sender sends to an address a receiver named as its own but did
/// not connect from (`control::Request::Proof`).
pub const PROOF: u8 = u8::MAX;

/// `kind`, checked to be a tool's (below [`RESERVED`]). In a `const` the check is
/// made when the tool is compiled.
///
/// # Panics
///
/// When `kind` is [`RESERVED`] or above.
#[must_use]
pub const fn tool(kind: u8) -> u8 {
    assert!(kind < RESERVED, "kinds from 0xF0 up are mgrp-tool's own");
    kind
}

/// Whether `kind` is one a tool may ask for.
#[must_use]
pub const fn is_tools(kind: u8) -> bool {
    kind < RESERVED
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_proof_kind_is_reserved_and_a_tools_are_not() {
        assert!(!is_tools(PROOF));
        assert!(!is_tools(RESERVED));
        assert!((0..RESERVED).all(is_tools));
        assert_eq!(tool(RESERVED - 1), RESERVED - 1);
    }

    #[test]
    #[should_panic(expected = "mgrp-tool's own")]
    fn a_reserved_kind_is_no_tools() {
        let _ = tool(std::hint::black_box(PROOF));
    }
}
