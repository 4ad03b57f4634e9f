//! Exit codes of the tools' receivers (`rcv`), the same for every tool.

/// Any other error.
pub const ERROR: i32 = 1;
/// A time or count limit ended the run before it gave an estimate.
pub const LIMIT: i32 = 3;
/// The quantity is beyond the rates the sender reaches, or the rates asked for could
/// not be sent.
pub const RATE: i32 = 4;
/// No usable measurement.
pub const UNUSABLE: i32 = 5;
/// The sender could not be reached or went away.
pub const PEER: i32 = 6;
/// The sender is there but turned this receiver away (busy) or could not send what it
/// was asked for (its mgrpd refused the train, or a limit there): its log says why.
pub const SENDER: i32 = 7;
/// Interrupted by a signal.
pub const INTERRUPTED: i32 = 130;
