//! What a configuration must hold before anything is built from it: one rule per
//! entry, each saying in one line which key is wrong and what would be accepted.
//! Rules that need the peers' tables built (keys read, peers collected from the
//! routes) are in [`super::peers`].

use std::net::IpAddr;
use std::str::FromStr;
use std::time::Duration;

use super::settings::{EncapArg, PeerSettings, Settings};

/// A rule on the whole file.
type Rule = fn(&Settings) -> Result<(), String>;

/// A rule on one `[[peers]]` table, which may look at the rest of the file.
type PeerRule = fn(&PeerSettings, &Settings) -> Result<(), String>;

/// The rules on the whole file, in the order their complaints are given.
pub(super) const RULES: &[Rule] = &[
    |s| match s.auth_accept {
        Some(a) if a > s.auth => Err(format!(
            "auth-accept = {} is above auth = {}: this daemon would refuse from its peers the very tags it sends; set auth-accept to {} or lower, or remove it",
            a.number(),
            s.auth.number(),
            s.auth.number()
        )),
        _ => Ok(()),
    },
    |s| match s.piggyback.max_train_fraction {
        f if (0.0..=1.0).contains(&f) => Ok(()),
        f => Err(format!(
            "piggyback.max-train-fraction must be between 0 and 1, got {f}"
        )),
    },
    |s| match s.hold {
        h if h <= Duration::from_secs(1) => Ok(()),
        h => Err(format!(
            "hold of {h:?} is too long: riders would stall their connections; use at most 1s"
        )),
    },
    |s| interface_name(&s.tun, "tun name"),
    |s| match s.mtu {
        576..=9000 => Ok(()),
        m => Err(format!("mtu {m} is out of range; use 576 to 9000")),
    },
    |s| {
        for (v4, family) in [(true, "IPv4"), (false, "IPv6")] {
            if s.source.iter().filter(|a| a.is_ipv4() == v4).count() > 1 {
                return Err(format!(
                    "source: give at most one {family} address (the address the peers know this host by)"
                ));
            }
        }
        s.source.iter().try_for_each(|a| source(*a, "source"))
    },
    |s| match s.fwmark {
        0 => Err("fwmark must not be 0: the rule `not fwmark 0` would match nothing".into()),
        _ => Ok(()),
    },
    |s| match s.table {
        t @ (0 | 253..=255) => Err(format!(
            "table {t} is reserved (unspec, default, main or local); choose another, e.g. 4242"
        )),
        _ => Ok(()),
    },
    |s| match s.protocol {
        p @ (0 | 1 | 4 | 6 | 17 | 41 | 58 | 255) => Err(format!(
            "protocol {p} is taken by a standard protocol; use 253 or 254 (reserved for experiments)"
        )),
        _ => Ok(()),
    },
    |s| match tracing::Level::from_str(&s.log_level) {
        Ok(_) => Ok(()),
        Err(_) => Err(format!(
            "log level {:?} is unknown; use error, warn, info, debug or trace",
            s.log_level
        )),
    },
    |s| match s.busy_poll_margin {
        m if m <= Duration::from_millis(5) => Ok(()),
        m => Err(format!(
            "busy-poll-margin of {m:?} would spin too long; use at most 5ms"
        )),
    },
    |s| match s.piggyback.max_held_bytes < usize::from(s.mtu) {
        true => Err(format!(
            "piggyback.max-held-bytes must hold at least one packet of the MTU ({} bytes)",
            s.mtu
        )),
        false => Ok(()),
    },
    |s| match s.limits.max_trains_in_flight {
        0 => Err(
            "limits.max-trains-in-flight must be at least 1 (1 runs one train at a time)".into(),
        ),
        _ => Ok(()),
    },
    |s| {
        match s.limits.max_destinations {
        0 => Err("limits.max-destinations must be at least 1 (it bounds the destinations riders wait for)".into()),
        _ => Ok(()),
    }
    },
    |s| {
        let l = &s.limits;
        for (name, v) in [
            ("probes-per-second-per-user", l.probes_per_second_per_user),
            (
                "probe-bytes-per-second-per-user",
                l.probe_bytes_per_second_per_user,
            ),
            ("probes-per-second", l.probes_per_second),
            ("probe-bytes-per-second", l.probe_bytes_per_second),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(format!("limits.{name} must be a positive number, got {v}"));
            }
        }
        Ok(())
    },
    |s| match s.next_key_file.is_some() && s.key_file.is_none() {
        true => Err("next-key-file is the second key of a rotation: give key-file too".into()),
        false => Ok(()),
    },
    |s| match s.next_private_key_file.is_some() && s.private_key_file.is_none() {
        true => Err(
            "next-private-key-file is the second key of a rotation: give private-key-file too"
                .into(),
        ),
        false => Ok(()),
    },
    |s| {
        match any_udp(s) && s.route_on_demand == Some(true) {
        true => Err("route-on-demand cannot be used with UDP peers: their traffic reaches them only through the tunnel, so their routes must stay; drop route-on-demand".into()),
        false => Ok(()),
    }
    },
];

/// The rules on each `[[peers]]` table; a complaint is prefixed with the peer.
pub(super) const PEER_RULES: &[PeerRule] = &[
    |p, s| match &p.name {
        Some(name) => {
            mgrp_service::settings::check_name("name", name).map_err(|e| e.0)?;
            match s
                .peers
                .iter()
                .filter(|q| q.name.as_ref() == Some(name))
                .count()
            {
                1 => Ok(()),
                _ => Err(format!("name {name:?} is given to more than one peer")),
            }
        }
        None => Ok(()),
    },
    |p, _| {
        match (p.next_key_file.is_some() || p.next_public_key.is_some())
        && p.key_file.is_none()
        && p.public_key.is_none()
    {
        true => Err(
            "next-key-file and next-public-key are the second key of a rotation: give key-file or public-key too"
                .into(),
        ),
        false => Ok(()),
    }
    },
    |p, _| match p.source {
        Some(src) if src.is_ipv4() != p.prefix.addr().is_ipv4() => {
            source(src, "source")?;
            Err(format!("source {src} is not of the peer's address family"))
        }
        Some(src) => source(src, "source"),
        None => Ok(()),
    },
    |p, s| {
        let udp = matches!(p.encap.unwrap_or(s.encap), EncapArg::Udp(_));
        match !udp && (p.endpoint.is_some() || p.keepalive.is_some()) {
            true => Err("endpoint and keepalive need encap = \"udp\" (in its [[peers]] table, or --encap udp for all)".into()),
            false => Ok(()),
        }
    },
    |p, _| match p.keepalive {
        Some(_) if !p.single() => {
            Err("keepalive needs one host (a /32 or /128 prefix) to send to".into())
        }
        Some(k) if k < Duration::from_secs(1) => Err(
            "keepalive must be at least 1s (NATs keep UDP mappings for 30 s or more; 25s is usual)"
                .into(),
        ),
        _ => Ok(()),
    },
    |p, s| match &p.device {
        Some(name) => {
            interface_name(name, "device")?;
            if !p.single() {
                return Err(
                    "a device sends to one host; give the peer a /32 or /128 prefix".into(),
                );
            }
            let uses = s
                .peers
                .iter()
                .filter(|q| q.device.as_ref() == Some(name))
                .count();
            if *name == s.tun || uses > 1 {
                return Err(format!(
                    "device {name:?} is used twice; give each peer's device its own name"
                ));
            }
            Ok(())
        }
        None => Ok(()),
    },
];

/// Every rule's complaint about `s`, the first one only.
pub(super) fn check(s: &Settings) -> Result<(), String> {
    RULES.iter().try_for_each(|rule| rule(s))?;
    for p in &s.peers {
        for rule in PEER_RULES {
            rule(p, s).map_err(|e| format!("peer {}: {e}", p.prefix))?;
        }
    }
    Ok(())
}

/// Whether any peer is reached over UDP.
pub(super) fn any_udp(s: &Settings) -> bool {
    std::iter::once(Some(s.encap))
        .chain(s.peers.iter().map(|p| p.encap))
        .any(|e| matches!(e, Some(EncapArg::Udp(_))))
}

fn interface_name(name: &str, what: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 15 || name.contains(['/', ' ', '\0', ':']) {
        return Err(format!(
            "{what} {name:?} is not a valid interface name (1-15 characters, no '/', ':' or spaces)"
        ));
    }
    Ok(())
}

/// A source address must be one a host can have.
fn source(a: IpAddr, what: &str) -> Result<(), String> {
    if a.is_unspecified() || a.is_multicast() || a.is_loopback() {
        return Err(format!(
            "{what} {a}: give an address of this host that its peers know it by (not unspecified, multicast or loopback)"
        ));
    }
    Ok(())
}
