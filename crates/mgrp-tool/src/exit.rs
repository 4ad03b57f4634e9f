//! How a receiver's run ends: the exit codes of the tools' receivers (`rcv`), the same
//! for every tool, and the lines every tool prints on stderr about it.

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
/// Bad arguments (what clap exits with for a usage error).
pub const USAGE: i32 = 2;

/// Says on stderr (and with `--json` in a JSON line) that a bad option stops `tool`;
/// returns [`USAGE`].
pub fn bad_options(tool: &str, e: impl std::fmt::Display) -> i32 {
    fail(tool, USAGE, &e.to_string())
}

/// Says on stderr (and with `--json` in a JSON line) that `tool` fails with `status`
/// because of `message`; returns `status`.
pub fn fail(tool: &str, status: i32, message: &str) -> i32 {
    eprintln!("{tool}: {message}");
    crate::json::error(tool, status, message);
    status
}

/// Warns on stderr (and with `--json` in a `warning` line) that `message` went wrong
/// beside the measurement (a plot that could not be drawn).
pub fn warn(tool: &str, message: &str) {
    eprintln!("{tool}: {message}");
    crate::json::warning(tool, message, serde_json::json!({}));
}

/// Warns on stderr that `n` probes came without a kernel receive stamp (nothing if
/// none did): their arrival times are the tool's reading times, less exact.
pub fn warn_unstamped(tool: &str, n: u64) {
    if n > 0 {
        let message =
            format!("{n} probes came without a kernel receive stamp and were stamped on reading");
        eprintln!("{tool}: warning: {message}");
        crate::json::warning(tool, &message, serde_json::json!({"probes_unstamped": n}));
    }
}

/// How a receiver's run ended besides what it measured, the same for every tool:
/// the sender's trouble, if any, and the probes the kernel did not stamp.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ending {
    /// Set when the sender went away mid-run.
    pub peer_gone: Option<String>,
    /// Set when the sender could not send what was asked (its log says why).
    pub sender_failed: Option<String>,
    /// Probes stamped on reading, without a kernel stamp.
    pub unstamped: u64,
}

impl Ending {
    /// Whether the sender stayed and sent everything asked.
    pub fn clean(&self) -> bool {
        self.peer_gone.is_none() && self.sender_failed.is_none()
    }

    /// Takes in the sender's trouble that ended a run.
    pub fn note(&mut self, e: crate::BatchError) {
        match e {
            crate::BatchError::Gone(g) => self.peer_gone = Some(g),
            crate::BatchError::SenderFailed(f) => self.sender_failed = Some(f),
        }
    }

    /// The exit status of `rcv`: the sender's trouble first (it went away, else it
    /// could not send), else `measured`, what the tool makes of its result.
    pub fn exit_code(&self, measured: i32) -> i32 {
        if self.peer_gone.is_some() {
            PEER
        } else if self.sender_failed.is_some() {
            SENDER
        } else {
            measured
        }
    }
}
