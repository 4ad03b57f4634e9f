//! The node's state: [`shared`], what its threads and the API share, and `store`,
//! each link's history on disk across restarts.

pub mod shared;
pub(crate) mod store;
