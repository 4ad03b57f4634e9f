//! What a Measurement Overlay node's API serves and what the other members' route
//! control reads back: one set of types, serialised by the node and deserialised by
//! its readers, so a field cannot be renamed on one side only. The JSON is held by
//! the files in `tests/golden/`.
//!
//! Layers, each importing only those above it:
//! - [`estimate`]: one run of a link, how it ended, runs counted by outcome.
//! - [`passive`]: what the applications' own traffic gave.
//! - [`prediction`]: what a bulk transfer from a neighbour will get.
//! - [`link`]: a link with its state, latest estimate, prediction and passive side.
//! - [`routes`]: route control's members, destinations, paths, hops and switches.
//! - [`matrix`]: every pair of a mesh, measured or inferred.
//! - `sample` (feature `sample`): every view filled, for tests.

pub mod estimate;
pub mod link;
pub mod matrix;
pub mod passive;
pub mod prediction;
pub mod routes;
#[cfg(any(test, feature = "sample"))]
pub mod sample;
