//! Test hosts on one machine, for tests, benches and the demo. Everything here creates
//! its own uniquely named namespaces and touches nothing else; processes are ended only
//! by the PIDs this crate started.
//!
//! By job, from the bottom up (each room imports only the ones before it):
//!
//! - namespaces and the commands run in them ([`Netns`], [`unique`], [`sh`],
//!   [`veth_pair`]);
//! - processes started in a namespace and stopped even when a test fails
//!   ([`Process`]);
//! - mgrpd in a namespace and a blocking client of its API ([`Daemon`]);
//! - the topologies: two hosts, optionally through a router with a tbf bottleneck
//!   ([`TwoHosts`], [`daemon_pair`]), and a star ([`Star`]);
//! - TCP transfers that check every byte ([`tcp_transfer`]);
//! - and, in modules of their own: the paper's testbed ([`paper`], with the user-space
//!   [`delay`] line and the bottleneck's [`accounting`]), cross traffic ([`traffic`]),
//!   a tool's two commands ([`tool`]), qdisc counters ([`qdisc`]), the namespace
//!   tests' harness ([`harness`]), the host's load ([`host`]), the Debian packages
//!   the tests need ([`packages`]), and certificates and an HTTPS server ([`tls`]).

pub mod accounting;
pub mod browser;
pub mod delay;
pub mod forge;
pub mod harness;
pub mod host;
pub mod http;
pub mod link;
pub mod packages;
pub mod paper;
pub mod previous;
pub mod qdisc;
pub mod sandbox;
pub mod threads;
pub mod tls;
pub mod tool;
pub mod traffic;

mod daemon;
mod hosts;
mod netns;
mod process;
mod transfer;

pub use daemon::*;
pub use hosts::*;
pub use netns::*;
pub use process::*;
pub use transfer::*;

/// A small, fixed-seed generator (xorshift64*) for the testbed's random draws (loss,
/// web flow arrivals and sizes), so experiments repeat.
#[derive(Debug, Clone)]
pub struct Seeded(u64);

impl Seeded {
    /// A generator from `seed` (0 is replaced, xorshift needs a non-zero state).
    pub fn new(seed: u64) -> Self {
        Self(if seed == 0 {
            0x9e37_79b9_7f4a_7c15
        } else {
            seed
        })
    }

    /// A draw uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d);
        (x >> 11) as f64 / (1u64 << 53) as f64
    }
}
