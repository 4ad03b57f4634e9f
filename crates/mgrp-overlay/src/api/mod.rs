//! What the node serves: [`http`] (the JSON API and the event stream), [`metrics`]
//! (Prometheus), [`page`] (the status page), over [`tls`] when configured, each
//! connection bounded as [`conns`] says.

pub mod conns;
pub mod http;
pub mod metrics;
pub mod page;
pub mod tls;
