//! The `[[link]]` sections: each link into this node, checked, numbered and named.

use std::collections::HashSet;
use std::net::IpAddr;
use std::time::Duration;

use pathload_rs::control::{DEFAULT_CONTROL_PORT, Transport};
use serde::Deserialize;

use super::check::{ConfigError, invalid};
use crate::measure::method::Gives;
use crate::measure::registry::Method;
use crate::measure::schedule::Timing;
use mgrp_service::settings::{check_name, duration};

/// The control port a node serves (and a link asks its neighbour on) MGRP measurements on.
pub const DEFAULT_MGRP_PORT: u16 = DEFAULT_CONTROL_PORT;
/// The control port a node serves (and a link asks its neighbour on) plain-UDP measurements on.
pub const DEFAULT_UDP_PORT: u16 = DEFAULT_CONTROL_PORT + 10;

/// One link: the path into this node from a neighbour.
#[derive(Debug, Clone, PartialEq)]
pub struct Link {
    /// Its name in the API, the metrics and the logs.
    pub name: String,
    /// The neighbour (its overlay's serving address).
    pub from: IpAddr,
    /// The neighbour's name, if the file gives one (labels the link's metrics).
    pub neighbour: Option<String>,
    /// The neighbour's control port for this transport.
    pub port: u16,
    /// How probes travel.
    pub transport: Transport,
    /// How it is measured.
    pub method: Method,
    /// Longest one run may take.
    pub time_limit: Duration,
    /// When it is measured.
    pub timing: Timing,
    /// This node's probe port for it (unique per link, so runs may overlap).
    pub probe_port: u16,
    /// Where the neighbour sends the probes; `None`: the address the control
    /// connection comes from.
    pub probe_address: Option<IpAddr>,
    /// Whether application traffic may ride in its probes (MGRP).
    pub piggyback: bool,
    /// Whether it runs even while a passive estimate of its path is fresh.
    pub active_always: bool,
}

/// The name a link without one is given: `FROM-TRANSPORT`, and `-METHOD` for the
/// methods other than the first.
fn default_name(from: IpAddr, transport: Transport, method: Method) -> String {
    if method.in_default_names() {
        format!("{from}-{transport}-{}", method.name())
    } else {
        format!("{from}-{transport}")
    }
}

impl Link {
    /// The name it would have had without one of its own: where its history was kept
    /// before it was named (a mesh names links by member).
    pub fn default_name(&self) -> String {
        default_name(self.from, self.transport, self.method)
    }

    /// Whether `other` measures as this one does: every setting the same but the
    /// index of its path among the node's (which moves when links before it come or
    /// go). A reload keeps such a link running as it was.
    pub fn same_measurement(&self, other: &Self) -> bool {
        let mut o = other.clone();
        o.timing.path = self.timing.path;
        *self == o
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct LinkFile {
    name: Option<String>,
    from: IpAddr,
    neighbour: Option<String>,
    port: Option<u16>,
    transport: Option<Transport>,
    method: Option<Method>,
    interval: Option<String>,
    time_limit: Option<String>,
    jitter: Option<f64>,
    backoff: Option<String>,
    max_backoff: Option<String>,
    ride_min_bps: Option<u64>,
    ride_max_wait: Option<String>,
    piggyback: Option<bool>,
    probe_address: Option<IpAddr>,
    active_always: Option<bool>,
}

impl LinkFile {
    /// Its name, if the file gives one.
    pub(super) fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// A link a mesh description gives: everything else as its method's defaults.
    pub(super) fn from_mesh(
        name: String,
        from: IpAddr,
        neighbour: String,
        transport: Transport,
        method: Method,
        interval: Option<String>,
        time_limit: Option<String>,
    ) -> Self {
        Self {
            name: Some(name),
            from,
            neighbour: Some(neighbour),
            port: None,
            transport: Some(transport),
            method: Some(method),
            interval,
            time_limit,
            jitter: None,
            backoff: None,
            max_backoff: None,
            ride_min_bps: None,
            ride_max_wait: None,
            piggyback: None,
            probe_address: None,
            active_always: None,
        }
    }
}

/// A link's jitter unless it gives one: each wait drawn within ±10 % of its interval.
pub(super) const DEFAULT_JITTER: f64 = 0.1;

/// Ports no link listens on: the UDP port this node's own sender sends its probes
/// from (bound with `SO_REUSEPORT`: a link listening there would share its datagrams).
const RESERVED_PORTS: [u16; 1] = [mgrp_tool::control::DEFAULT_SENDER_PROBE_PORT];

/// The first port above `port` that a link may take, if there is one.
fn free_port_after(port: u16) -> Option<u16> {
    (port.checked_add(1)?..=u16::MAX).find(|p| !RESERVED_PORTS.contains(p))
}

/// The first port from `base` up that a link may take and `taken` does not hold.
pub(super) fn free_probe_port(base: u16, taken: &[u16]) -> Option<u16> {
    (base..=u16::MAX).find(|p| !RESERVED_PORTS.contains(p) && !taken.contains(p))
}

/// The links as written, checked: probe ports from `base` up, one per link, skipping
/// [`RESERVED_PORTS`]; passive
/// estimates may stand in for bandwidth links' runs when `passive`.
pub(super) fn check(
    files: Vec<LinkFile>,
    base: u16,
    passive: bool,
) -> Result<Vec<Link>, ConfigError> {
    let mut links = Vec::with_capacity(files.len());
    let mut names = HashSet::new();
    // Links from one neighbour share a path (how they share it is their class).
    let mut paths: Vec<IpAddr> = Vec::new();
    let mut next_port = Some(base)
        .filter(|p| !RESERVED_PORTS.contains(p))
        .or_else(|| free_port_after(base));
    for (i, l) in files.into_iter().enumerate() {
        let key = format!("link {}", i + 1);
        let transport = l.transport.unwrap_or_default();
        let method = l.method.unwrap_or_default();
        let name = l
            .name
            .unwrap_or_else(|| default_name(l.from, transport, method));
        let path = paths.iter().position(|p| *p == l.from).unwrap_or_else(|| {
            paths.push(l.from);
            paths.len() - 1
        });
        check_name(&format!("{key}: name"), &name)?;
        if let Some(n) = &l.neighbour {
            check_name(&format!("{key}: neighbour"), n)?;
            if let Some(other) = links
                .iter()
                .find(|o: &&Link| o.from == l.from && o.neighbour.as_ref().is_some_and(|m| m != n))
            {
                return Err(invalid(format!(
                    "{key}: neighbour {n:?}, but link {:?} from {} calls it {:?}; give one name per neighbour",
                    other.name,
                    l.from,
                    other.neighbour.as_deref().unwrap_or_default()
                )));
            }
        }
        if !names.insert(name.clone()) {
            return Err(invalid(format!("{key}: the name {name:?} is used twice")));
        }
        let interval = match &l.interval {
            None => Duration::from_secs(60),
            Some(s) =>
            // Up to a day: a mesh's budget may run its heavier methods that seldom.
            {
                mgrp_core::parse_duration_within(s, mgrp_mesh::budget::MAX_INTERVAL)
                    .map_err(|e| invalid(format!("{key}: interval: {e}")))?
            }
        };
        let time_limit = duration(
            &format!("{key}: time-limit"),
            l.time_limit.as_ref(),
            Duration::from_secs(30),
        )?;
        if interval < Duration::from_secs(1) {
            return Err(invalid(format!(
                "{key}: interval {interval:?}; use at least 1s"
            )));
        }
        if time_limit < Duration::from_secs(1) {
            return Err(invalid(format!(
                "{key}: time-limit {time_limit:?}; use at least 1s"
            )));
        }
        let jitter = l.jitter.unwrap_or(DEFAULT_JITTER);
        if !(0.0..=0.5).contains(&jitter) {
            return Err(invalid(format!(
                "{key}: jitter {jitter}; use 0 to 0.5 (a fraction of the interval)"
            )));
        }
        let backoff = duration(
            &format!("{key}: backoff"),
            l.backoff.as_ref(),
            Duration::from_secs(5),
        )?;
        let max_backoff = duration(
            &format!("{key}: max-backoff"),
            l.max_backoff.as_ref(),
            Duration::from_secs(300),
        )?;
        if backoff.is_zero() || max_backoff < backoff {
            return Err(invalid(format!(
                "{key}: backoff {backoff:?} and max-backoff {max_backoff:?}; back-off must be above 0 and at most max-backoff"
            )));
        }
        let ride_min_bps = l.ride_min_bps.filter(|b| *b > 0);
        let ride_max_wait = match &l.ride_max_wait {
            None => None,
            Some(_) if ride_min_bps.is_none() => {
                return Err(invalid(format!(
                    "{key}: ride-max-wait without ride-min-bps; set both or neither"
                )));
            }
            Some(v) => Some(duration(
                &format!("{key}: ride-max-wait"),
                Some(v),
                interval,
            )?),
        };
        if ride_min_bps.is_some() && (transport != Transport::Mgrp || l.piggyback == Some(false)) {
            return Err(invalid(format!(
                "{key}: ride-min-bps waits for application traffic to ride in the probes, which needs transport = \"mgrp\" and piggyback = true; remove it or change those"
            )));
        }
        let probe_port = next_port
            .ok_or_else(|| invalid(format!("probe-port-base {base}: too many links for it")))?;
        next_port = free_port_after(probe_port);
        links.push(Link {
            name,
            from: l.from,
            neighbour: l.neighbour,
            port: l.port.unwrap_or(match transport {
                Transport::Mgrp => DEFAULT_MGRP_PORT,
                Transport::Udp => DEFAULT_UDP_PORT,
            }),
            transport,
            method,
            time_limit,
            timing: Timing {
                interval,
                jitter,
                backoff,
                max_backoff,
                ride_min_bps,
                ride_max_wait,
                path,
                passive: passive
                    && !l.active_always.unwrap_or(false)
                    && method.gives() == Gives::AvailableBandwidth,
                class: method.class(),
            },
            probe_port,
            probe_address: l.probe_address,
            piggyback: l.piggyback.unwrap_or(true),
            active_always: l.active_always.unwrap_or(false),
        });
    }
    // A name given on one link from a neighbour is the neighbour's on all of them.
    let names: Vec<(IpAddr, String)> = links
        .iter()
        .filter_map(|l| Some((l.from, l.neighbour.clone()?)))
        .collect();
    for l in links.iter_mut().filter(|l| l.neighbour.is_none()) {
        l.neighbour = names
            .iter()
            .find(|(a, _)| *a == l.from)
            .map(|(_, n)| n.clone());
    }
    Ok(links)
}
