//! What this node's configuration asks for that needs more than a plain process
//! has, checked once at start so that the log says which features are off and why,
//! rather than each failing later on its own (the overlay's unit grants the base and
//! a drop-in per feature: `docs/overlay.md`, "Running as a service").
//!
//! Each check does what the feature will do, as far as it can without effect: opens
//! and closes the socket it needs (so an address family the sandbox refuses shows
//! as one), reads the capability it needs, finds the commands it runs.

use std::path::Path;

use mgrp_rt::caps::{cap, cap_bit, effective_capabilities};
use socket2::{Domain, Protocol, Socket, Type};

use crate::config::Config;

/// A feature the configuration asks for, and whether it can work here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Feature {
    /// What it is, as the configuration calls it.
    pub name: &'static str,
    /// Why it cannot work, if it cannot.
    pub off: Option<String>,
    /// The drop-in of the packaged unit that grants what it needs (under
    /// `/usr/share/mgrp/systemd/mgrp-overlay.service.d/`), if it needs one.
    pub drop_in: Option<&'static str>,
}

/// Where the packaged drop-ins are.
pub const DROP_INS: &str = "/usr/share/mgrp/systemd/mgrp-overlay.service.d";

// linux/socket.h, linux/netlink.h: socket2 names neither without its "all" feature.
const AF_NETLINK: i32 = 16;
const AF_PACKET: i32 = 17;
const NETLINK_ROUTE: i32 = 0;
const NETLINK_SOCK_DIAG: i32 = 4;
/// ETH_P_ALL, in network order as a packet socket's protocol.
const ETH_P_ALL_BE: i32 = 0x0003_u16.to_be() as i32;

/// Opens and closes a socket, saying what refused it.
fn can_open(domain: i32, ty: Type, protocol: i32, what: &str) -> Result<(), String> {
    Socket::new(Domain::from(domain), ty, Some(Protocol::from(protocol)))
        .map(drop)
        .map_err(|e| format!("cannot open {what} ({e})"))
}

/// Whether `program` is an executable file on `PATH`.
fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|d| is_executable(&d.join(program))))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Whether the process holds capability `c` (named `name`).
fn holds(c: u32, name: &str) -> Result<(), String> {
    match effective_capabilities() {
        Ok(mask) if mask & cap_bit(c) != 0 => Ok(()),
        Ok(_) => Err(format!("it needs {name}, which this process does not hold")),
        Err(e) => Err(format!("cannot read this process's capabilities ({e})")),
    }
}

/// The features `config` asks for, each checked.
pub fn check(config: &Config) -> Vec<Feature> {
    let mut out = Vec::new();
    if !config.serve.is_empty() {
        // The neighbours' btc and passive-tcp ask this node's kernel of their TCP
        // flows here (sock_diag: no capability, but its address family).
        out.push(Feature {
            name: "kernel poll (answering neighbours' btc and passive-tcp)",
            off: can_open(
                AF_NETLINK,
                Type::RAW,
                NETLINK_SOCK_DIAG,
                "a sock_diag netlink socket",
            )
            .err(),
            drop_in: None,
        });
    }
    if config.passive && config.passive_timing {
        out.push(Feature {
            name: "[passive] timing",
            off: holds(cap::NET_RAW, "CAP_NET_RAW")
                .and_then(|()| can_open(AF_PACKET, Type::RAW, ETH_P_ALL_BE, "a packet socket"))
                .err(),
            drop_in: Some("passive-timing.conf"),
        });
    }
    if config.routing.is_some() {
        let missing: Vec<&str> = ["nft", "conntrack"]
            .into_iter()
            .filter(|p| !on_path(p))
            .collect();
        out.push(Feature {
            name: "[routing]",
            off: holds(cap::NET_ADMIN, "CAP_NET_ADMIN")
                .and_then(|()| {
                    can_open(
                        AF_NETLINK,
                        Type::RAW,
                        NETLINK_ROUTE,
                        "a routing netlink socket",
                    )
                })
                .and_then(|()| {
                    if missing.is_empty() {
                        Ok(())
                    } else {
                        Err(format!(
                            "{} not found on PATH (Debian: nftables, conntrack)",
                            missing.join(" and ")
                        ))
                    }
                })
                .err(),
            drop_in: Some("route-control.conf"),
        });
    }
    out
}

/// The log line of `f`.
pub fn describe(f: &Feature) -> String {
    match (&f.off, f.drop_in) {
        (None, _) => format!("{}: on", f.name),
        (Some(why), Some(drop_in)) => format!(
            "{}: off: {why}; under the packaged unit, add its drop-in: ln -s {DROP_INS}/{drop_in} /etc/systemd/system/mgrp-overlay.service.d/",
            f.name
        ),
        (Some(why), None) => format!(
            "{}: off: {why}; the unit's RestrictAddressFamilies must allow AF_NETLINK",
            f.name
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_feature_not_asked_for_is_not_checked() {
        let c = Config::from_toml("name = \"n\"\n[passive]\nenabled = false\n", None).unwrap();
        assert!(check(&c).iter().all(|f| f.name != "[passive] timing"));
        assert!(check(&c).iter().all(|f| f.name != "[routing]"));
    }

    #[test]
    fn an_off_feature_says_why_and_what_turns_it_on() {
        let f = Feature {
            name: "[passive] timing",
            off: Some("it needs CAP_NET_RAW, which this process does not hold".into()),
            drop_in: Some("passive-timing.conf"),
        };
        let line = describe(&f);
        assert!(line.contains("off: it needs CAP_NET_RAW"), "{line}");
        assert!(
            line.contains(&format!("{DROP_INS}/passive-timing.conf")),
            "{line}"
        );
        assert_eq!(
            describe(&Feature { off: None, ..f }),
            "[passive] timing: on"
        );
    }

    #[test]
    fn the_socket_protocol_of_every_packet_is_in_network_order() {
        assert_eq!(u16::from_be(ETH_P_ALL_BE as u16), 0x0003);
    }
}
