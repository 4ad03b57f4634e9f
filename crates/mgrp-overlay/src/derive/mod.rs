//! What is derived from the runs and from the applications' own traffic.
//!
//! - [`prediction`]: what a bulk TCP transfer from each neighbour will get, from the
//!   runs and the neighbour's kernel (no I/O).
//! - [`history`]: the earlier TCP flows from each neighbour, for the prediction
//!   (no I/O).
//! - [`passive`]: estimates from the applications' TCP flows, which stand in for
//!   active runs while they flow (no I/O).
//! - [`timing`]: passive dispersion and trend from the flows' segments stamped at
//!   both ends (no I/O).

pub mod history;
pub mod passive;
pub mod prediction;
pub mod timing;
