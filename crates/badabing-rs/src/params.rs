//! Every default of the method, named, with where it comes from. badabing's paper
//! (Sommers, Barford, Duffield and Ron, SIGCOMM 2005) and code could not be read
//! here: values marked "recalled" are what the literature is remembered to say and
//! were not verified; values marked "this project" are choices, with the reason.

/// Slot length Δ, ns (recalled: 5 ms).
pub const SLOT_NS: u64 = 5_000_000;

/// Probability p that an experiment starts in a slot (this project: 0.3, within the
/// 0.1–0.9 the paper is recalled to evaluate; the load is about 2·p·N·size/Δ, here
/// 0.9 Mbit/s of IP bytes).
pub const P: f64 = 0.3;

/// Consecutive slots an experiment probes (recalled: a basic experiment probes two).
pub const SLOTS_PER_EXPERIMENT: u32 = 2;

/// Packets per probe, sent back to back (recalled: 3).
pub const PACKETS: u32 = 3;

/// Probe packet size, IP bytes (recalled: 600).
pub const SIZE: u32 = 600;

/// A probe without loss is congested if its queuing delay is at least (1 − α) of the
/// largest seen around losses (recalled: α = 0.1).
pub const ALPHA: f64 = 0.1;

/// "Around losses": probes within τ of a lost one, ns (recalled: 40–50 ms; this
/// project takes 40 ms).
pub const TAU_NS: u64 = 40_000_000;

/// Slots per probe batch (this project: one batch covers a second at the default Δ;
/// experiments do not cross batches, and the time between batches is not sampled).
pub const WINDOW_SLOTS: u32 = 200;

/// z for the two-sided 95 % confidence intervals.
pub const Z95: f64 = 1.96;
