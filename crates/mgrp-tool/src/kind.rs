//! The probe header's kind byte, one table for every tool: a receiver knows its own
//! batches' probes from another tool's (or a proof probe) by it, so no two tools may
//! share a value. A new tool takes the next free one here.

/// pathload-rs: a back-to-back train.
pub const PATHLOAD_TRAIN: u8 = 0;
/// pathload-rs: a stream at one rate.
pub const PATHLOAD_STREAM: u8 = 1;
/// pathchirp-rs: a chirp.
pub const CHIRP: u8 = 2;
/// badabing-rs: a window of experiments.
pub const BADABING_WINDOW: u8 = 3;
/// btc-rs: a capacity bunch.
pub const BTC_BUNCH: u8 = 4;
/// btc-rs: a batch of squeezed pairs.
pub const BTC_PAIRS: u8 = 5;
/// The one probe a sender sends to an address a receiver named as its own but did
/// not connect from (`control::Request::Proof`); above every tool's.
pub const PROOF: u8 = u8::MAX;

/// Every kind with its owner, for the check that none is taken twice.
pub const ALL: [(u8, &str); 7] = [
    (PATHLOAD_TRAIN, "pathload-rs train"),
    (PATHLOAD_STREAM, "pathload-rs stream"),
    (CHIRP, "pathchirp-rs chirp"),
    (BADABING_WINDOW, "badabing-rs window"),
    (BTC_BUNCH, "btc-rs bunch"),
    (BTC_PAIRS, "btc-rs pairs"),
    (PROOF, "proof probe"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_two_tools_share_a_kind() {
        for (i, (k, who)) in ALL.iter().enumerate() {
            for (l, other) in &ALL[i + 1..] {
                assert_ne!(k, l, "{who} and {other} share kind {k}");
            }
        }
    }
}
