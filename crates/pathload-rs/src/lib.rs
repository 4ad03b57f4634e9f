//! `pathload-rs`: the pathload available-bandwidth estimator (Jain and Dovrolis' SLoPS).
//!
//! Its job: a sans-IO estimator that is fed the sender and receiver timestamps of probe
//! streams and answers per-stream trends, per-fleet verdicts and the rate search, plus
//! a CLI that drives it over `mgrp-client` or over plain UDP as the no-MGRP baseline.
//!
//! Nothing is implemented yet; this crate holds its place in the workspace.
