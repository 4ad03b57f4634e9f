//! The MGRP paper's §5 application: an adaptive streaming overlay in the spirit of
//! MediaNet that streams three MPEG-like streams from `m3` to `m5` over TCP, adapts
//! them by dropping frames at the sender, and learns about available bandwidth from
//! its local schedulers' reports and from the Measurement Overlay.
//!
//! - [`media`]: the frames (the paper's Table 2), the adaptations and the receiver's
//!   decoding rule (sans-IO).
//! - [`scheduler`]: the global scheduler (sans-IO).

pub mod media;
pub mod scheduler;
