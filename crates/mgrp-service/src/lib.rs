//! What the long-running services share (mgrpd, mgrp-overlay and its route control),
//! and a measurement tool does not need:
//!
//! - [`settings`]: the checks configuration files share (names, durations, token
//!   files);
//! - [`secret`]: files holding keys and tokens, read only when only their owner may;
//! - [`logging`]: the daemons' log lines (text or JSON, `RUST_LOG` honoured);
//! - [`tls`] and [`http`]: a TLS client (rustls, the authority given) and one HTTP/1.1
//!   `GET` over it, for route control's reads of members' APIs and for
//!   [`fetch`]: a mesh description fetched over HTTPS, by mgrpd and the overlay alike.

#![warn(missing_docs)]

pub mod fetch;
pub mod http;
pub mod logging;
pub mod notify;
pub mod secret;
pub mod settings;
pub mod tls;
