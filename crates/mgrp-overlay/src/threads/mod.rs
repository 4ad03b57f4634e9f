//! The node's threads that drive the rooms below: they read the configuration, run
//! the methods, derive what the runs and the neighbours say, and write it into the
//! shared state. Every import here points down.
//!
//! - [`runner`]: the scheduler's thread and each run.
//! - [`traffic`]: links waiting for application traffic to ride.
//! - [`serve`]: the neighbours' measurements of the paths out of this node served.
//! - [`collect`]: the mesh's matrix, read from every member (`[matrix]`).
//! - [`neighbours`]: the neighbours asked every poll (their kernels' view of the TCP
//!   flows, their stamps), and what they say kept.

pub mod collect;
pub mod neighbours;
pub mod runner;
pub mod serve;
pub mod traffic;
