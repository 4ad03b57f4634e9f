//! Every default of the method, named, each with where it comes from.
//!
//! "pathChirp 2.3" is the original C tool (release 2.3.x, `pathchirp_rcv`'s defaults
//! and its analysis); values chosen by this project say so, with the reason.

/// Probe size, IP bytes (pathChirp 2.3: `-p 1000` bytes of UDP payload, 1028 at the
/// IP level, where this tool counts every rate).
pub const SIZE: u32 = 1028;

/// Spread factor γ: each gap of a chirp is the previous one divided by γ
/// (pathChirp 2.3: `-s 1.2`).
pub const SPREAD: f64 = 1.2;

/// Smallest spread factor accepted (pathChirp 2.3's sender rejects less than 1.05).
pub const MIN_SPREAD: f64 = 1.05;

/// Lowest rate inside a chirp, bit/s (pathChirp 2.3: `-l 10` Mbit/s).
pub const LOW_BPS: f64 = 10e6;

/// Highest rate inside a chirp, bit/s (pathChirp 2.3: `-u 200` Mbit/s).
pub const HIGH_BPS: f64 = 200e6;

/// Highest rate the range may grow to, bit/s (pathChirp 2.3: `MAX_HIGH_RATE`).
pub const MAX_HIGH_BPS: f64 = 1500e6;

/// Quiet time before each chirp, ns (this project: 20 ms). pathChirp 2.3 ran alone and
/// left at least a chirp's duration idle between chirps; through a sender that serves
/// other methods, a chirp to a receiver starts right after the last probe of the
/// train before it to that receiver, while that train's last probes and its sender's
/// report (a few KB of departure stamps, sent 1–3 ms after the train) are still queued
/// at the narrow link: 7 KB take 9 ms to drain at 6 Mbit/s, and a chirp they run into
/// reads a queue its own rate did not build. 20 ms covers that on paths of a few Mbit/s
/// and up, and costs the receiver's other methods 20 ms of their turn per chirp.
pub const LEAD_NS: u64 = 20_000_000;

/// Average probing rate, IP bit/s. pathChirp 2.3's `-a 0.3` Mbit/s counted payload
/// bytes (0.31 Mbit/s at the IP level, 2.3 MB a minute); this project probes at
/// 0.25 Mbit/s of IP bytes (1.9 MB a minute) so that continuous monitoring stays
/// within a third of what pathload-rs spends at a 10 s interval.
pub const AVG_BPS: f64 = 0.25e6;

/// Bounds of the average rate after a range change, bit/s (pathChirp 2.3:
/// `MIN_AVG_RATE` 0.005 and `MAX_AVG_RATE` 3 Mbit/s).
pub const AVG_BPS_BOUNDS: (f64, f64) = (5e3, 3e6);

/// Per-chirp estimates averaged into the published one (pathChirp 2.3: `-n 11`).
pub const SMOOTH: usize = 11;

/// Decrease factor F: an excursion ends where the queuing delay has fallen back to
/// within 1/F of its peak above the excursion's start (pathChirp 2.3: `-d 1.5`).
pub const DECREASE: f64 = 1.5;

/// Busy-period threshold L: an excursion counts only if it spans at least L packets
/// (pathChirp 2.3: `-b 5`, an integer above 2).
pub const BUSY_PERIOD: usize = 5;

/// Receive gaps shorter than this mark a packet as coalesced by the receiving
/// interface, ns (pathChirp 2.3: `context_receive_thresh`, 10 µs).
pub const COALESCENCE_NS: i64 = 10_000;

/// After this many coalesced packets in a row the chirp is analysed only up to them
/// (pathChirp 2.3: `CONSEC_BAD_PKTS`).
pub const CONSECUTIVE_COALESCED: usize = 2;

/// A probe of the chirp's final queue that came out of the path sooner after the one
/// before than this share of the queue's lower-quartile receive gap (and not within
/// [`COALESCENCE_NS`], which is coalescence) marks the chirp as disturbed: a busy
/// bottleneck lets probes out no faster than its rate, so the one before was held up
/// beyond the path (this project; see [`crate::analysis::Unusable::Disturbed`]).
pub const COMPRESSED: f64 = 0.75;

/// Most gaps per chirp (pathChirp 2.3: `MAXCHIRPSIZE` − 1); a range that needs more
/// has its high rate lowered to fit.
pub const MAX_GAPS: usize = 199;

/// The range shrinks when the smoothed estimate stays below this share of the low
/// rate... (pathChirp 2.3: 1.5 × low)
pub const LOW_TRIGGER: f64 = 1.5;

/// ...and grows when it stays above this share of the high rate (pathChirp 2.3:
/// 0.66 × high)...
pub const HIGH_TRIGGER: f64 = 0.66;

/// ...for more than this many published estimates in a row (pathChirp 2.3: 2).
pub const TRIGGER_COUNT: u32 = 2;

/// The factor a range change divides and multiplies by (pathChirp 2.3: 7, or 4 when
/// the rate it starts from is at most 1 Mbit/s).
pub const RANGE_FACTOR: (f64, f64) = (7.0, 4.0);

/// Onset gaps whose receive rate is taken for the onset estimate (this project: as
/// many as the busy-period threshold by default, see [`crate::analysis::Onset`]).
pub const ONSET_GAPS: usize = BUSY_PERIOD;
