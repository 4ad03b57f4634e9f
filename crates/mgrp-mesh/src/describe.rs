//! The description's text: its TOML form, and the checks that make it a [`Mesh`].

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::IpAddr;

use mgrp_core::pair::PublicKey;
use mgrp_core::peers::Prefix;
use serde::Deserialize;
use toml::Spanned;

use crate::budget::{Budget, CostOverride};
use crate::{Api, Group, Member, Mesh};

/// Which pairs of a group's members measure each other (each pair both ways).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupKind {
    /// Every member with every other (`kind = "full-mesh"`, `members`).
    FullMesh(Vec<String>),
    /// The hub with each leaf (`kind = "star"`, `hub`, `members` the leaves).
    Star {
        /// The member in the middle.
        hub: String,
        /// The others.
        leaves: Vec<String>,
    },
    /// Every member of a set with every member of each other set, none within a set
    /// (`kind = "sets"`, `sets`).
    Sets(Vec<Vec<String>>),
    /// Each member with the next `k` in the list, wrapping around (`kind = "ring"`,
    /// `members`, `k`): each member is in 2k pairs when the ring has more than 2k + 1
    /// members, every pair when it has fewer, and a mesh of many members is measured
    /// at n·k pairs instead of n(n−1)/2.
    Ring {
        /// The members, in ring order.
        members: Vec<String>,
        /// How many of the next members each is paired with.
        k: usize,
    },
    /// Each member with `k` others spread around the list (`kind = "spread"`,
    /// `members`, `k`): the members `n/(2k+1)`, `2n/(2k+1)`, … `kn/(2k+1)` places on,
    /// wrapping, so each is in 2k pairs and a list ordered by place (a region, a
    /// provider) is measured across it, which inferring the pairs not measured needs.
    Spread {
        /// The members, in list order.
        members: Vec<String>,
        /// How many strides each takes.
        k: usize,
    },
}

impl GroupKind {
    /// The group's pairs, each once, in a fixed order.
    pub fn pairs(&self) -> Vec<(&str, &str)> {
        let mut out = Vec::new();
        match self {
            Self::FullMesh(m) => {
                for (i, a) in m.iter().enumerate() {
                    for b in &m[i + 1..] {
                        out.push((a.as_str(), b.as_str()));
                    }
                }
            }
            Self::Star { hub, leaves } => {
                out.extend(leaves.iter().map(|l| (hub.as_str(), l.as_str())));
            }
            Self::Sets(sets) => {
                for (i, s) in sets.iter().enumerate() {
                    for t in &sets[i + 1..] {
                        for a in s {
                            out.extend(t.iter().map(|b| (a.as_str(), b.as_str())));
                        }
                    }
                }
            }
            Self::Ring { members, k } => {
                let n = members.len();
                let mut seen = BTreeSet::new();
                for i in 0..n {
                    for step in 1..=*k {
                        let j = (i + step) % n;
                        let pair = (i.min(j), i.max(j));
                        if i != j && seen.insert(pair) {
                            out.push((members[pair.0].as_str(), members[pair.1].as_str()));
                        }
                    }
                }
            }
            Self::Spread { members, k } => {
                let n = members.len();
                let mut seen = BTreeSet::new();
                for i in 0..n {
                    for step in spread_strides(n, *k) {
                        let j = (i + step) % n;
                        let pair = (i.min(j), i.max(j));
                        if i != j && seen.insert(pair) {
                            out.push((members[pair.0].as_str(), members[pair.1].as_str()));
                        }
                    }
                }
            }
        }
        out
    }
}

/// A spread group's strides: `j·n/(2k+1)` rounded, for `j` from 1 to `k`, each at
/// least one more than the last (distinct, and below `n/2` since `k < n/2`).
fn spread_strides(n: usize, k: usize) -> Vec<usize> {
    let mut out: Vec<usize> = Vec::with_capacity(k);
    for j in 1..=k {
        let s = ((j * n) as f64 / (2 * k + 1) as f64).round() as usize;
        let s = s.max(out.last().map_or(1, |l| l + 1));
        out.push(s);
    }
    out
}

/// How a method's probes travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Transport {
    /// Through mgrpd, application traffic riding in the probes.
    Mgrp,
    /// Plain UDP, the baseline.
    Udp,
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Mgrp => "mgrp",
            Self::Udp => "udp",
        })
    }
}

/// What is wrong with a description: where, under which key, and what.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, {key}: {message}")]
pub struct MeshError {
    /// The line, from 1.
    pub line: usize,
    /// The key (or table) at fault.
    pub key: String,
    /// What is wrong, and what to do.
    pub message: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    member: Vec<Spanned<MemberFile>>,
    #[serde(default)]
    group: Vec<Spanned<GroupFile>>,
    routing: Option<Spanned<RoutingFile>>,
    budget: Option<Spanned<BudgetFile>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct BudgetFile {
    node_mb_per_hour: Spanned<f64>,
    link_mb_per_hour: Option<Spanned<f64>>,
    age: Spanned<String>,
    ride_share: Option<Spanned<f64>>,
    passive_share: Option<Spanned<f64>>,
    heartbeat_interval: Option<Spanned<String>>,
    #[serde(default)]
    method: BTreeMap<String, Spanned<MethodCostFile>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct MethodCostFile {
    mb_per_run: Option<Spanned<f64>>,
    time_limit: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RoutingFile {
    members: Vec<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct MemberFile {
    name: Spanned<String>,
    address: Spanned<IpAddr>,
    api: Option<Spanned<String>>,
    metrics: Option<Spanned<String>>,
    public_key: Option<Spanned<String>>,
    #[serde(default)]
    networks: Vec<Spanned<String>>,
    device: Option<Spanned<String>>,
    region: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct GroupFile {
    name: Spanned<String>,
    kind: Spanned<String>,
    #[serde(default)]
    members: Vec<Spanned<String>>,
    hub: Option<Spanned<String>>,
    #[serde(default)]
    sets: Vec<Vec<Spanned<String>>>,
    k: Option<Spanned<usize>>,
    methods: Spanned<Vec<Spanned<String>>>,
    transports: Option<Vec<Spanned<String>>>,
    interval: Option<Spanned<String>>,
}

/// Line numbers of the text's byte offsets.
struct Lines<'a>(&'a str);

impl Lines<'_> {
    fn at<T>(&self, s: &Spanned<T>, key: &str, message: impl Into<String>) -> MeshError {
        let line = self.0[..s.span().start.min(self.0.len())]
            .matches('\n')
            .count()
            + 1;
        MeshError {
            line,
            key: key.to_owned(),
            message: message.into(),
        }
    }
}

/// A name as labels and link names need it: 1 to 64 letters, digits, '.', '_' or '-'.
fn name_ok(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// `HOST:PORT`: a name or an address (an IPv6 one in brackets) and a port other
/// than 0.
fn host_port(s: &str) -> Option<String> {
    let (host, port) = s.rsplit_once(':')?;
    let port: u16 = port.parse().ok().filter(|&p| p != 0)?;
    let ok = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(v6) => v6.parse::<std::net::Ipv6Addr>().is_ok(),
        None => {
            !host.is_empty()
                && host.len() <= 253
                && host
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-'))
        }
    };
    ok.then(|| format!("{host}:{port}"))
}

/// An overlay's API: `http://` or `https://`, then [`host_port`], and at most a
/// trailing `/`.
fn api(s: &str) -> Option<Api> {
    let (tls, rest) = if let Some(r) = s.strip_prefix("https://") {
        (true, r)
    } else {
        (false, s.strip_prefix("http://")?)
    };
    let target = host_port(rest.strip_suffix('/').unwrap_or(rest))?;
    Some(Api { tls, target })
}

pub(crate) fn parse(text: &str) -> Result<Mesh, MeshError> {
    let lines = Lines(text);
    let file: File = toml::from_str(text).map_err(|e| MeshError {
        line: e.span().map_or(1, |s| {
            text[..s.start.min(text.len())].matches('\n').count() + 1
        }),
        key: "the file".into(),
        message: e.message().to_owned(),
    })?;
    let members = members(&lines, &file.member)?;
    let mut groups = Vec::new();
    let mut names = BTreeSet::new();
    for g in &file.group {
        let g = g.get_ref();
        if !names.insert(g.name.get_ref().clone()) {
            return Err(lines.at(
                &g.name,
                "group.name",
                format!("a second group named {:?}", g.name.get_ref()),
            ));
        }
        groups.push(group(&lines, g, &members)?);
    }
    let routing = match &file.routing {
        Some(r) => routing(&lines, r, &file.member, &members)?,
        None => {
            if let Some(m) = file
                .member
                .iter()
                .map(Spanned::get_ref)
                .find(|m| !m.networks.is_empty() || m.device.is_some())
            {
                let at = m.networks.first().or(m.device.as_ref()).expect("given");
                return Err(lines.at(
                    at,
                    if m.networks.is_empty() { "member.device" } else { "member.networks" },
                    format!(
                        "member {:?}: networks and device are route control's; name the routing members in [routing] members",
                        m.name.get_ref()
                    ),
                ));
            }
            Vec::new()
        }
    };
    let budget = match &file.budget {
        Some(b) => {
            if let Some(g) = file
                .group
                .iter()
                .map(Spanned::get_ref)
                .find(|g| g.interval.is_some())
            {
                return Err(lines.at(
                    g.interval.as_ref().expect("given"),
                    "group.interval",
                    format!(
                        "group {:?} gives an interval, and [budget] plans every link's: leave one out",
                        g.name.get_ref()
                    ),
                ));
            }
            Some(budget(&lines, b)?)
        }
        None => None,
    };
    let mesh = Mesh {
        members,
        groups,
        routing,
        budget,
    };
    conflicts(&lines, &mesh, &file.group)?;
    Ok(mesh)
}

/// The routing members, checked with their networks and next-hop devices.
fn routing(
    lines: &Lines<'_>,
    r: &Spanned<RoutingFile>,
    files: &[Spanned<MemberFile>],
    members: &BTreeMap<String, Member>,
) -> Result<Vec<String>, MeshError> {
    let mut seen = BTreeSet::new();
    let names = named(
        lines,
        &r.get_ref().members,
        "routing.members",
        members,
        &mut seen,
    )?;
    if names.len() < 2 {
        return Err(lines.at(
            r,
            "routing.members",
            "route control needs two routing members at least (one to route from, one to reach)",
        ));
    }
    if members.values().any(|m| m.public_key.is_none()) {
        return Err(lines.at(
            r,
            "routing.members",
            "routing members relay each other's traffic, which takes keys: give every member a public-key",
        ));
    }
    let mut devices: BTreeMap<String, &str> = BTreeMap::new();
    let mut networks: Vec<(Prefix, &str)> = Vec::new();
    for f in files.iter().map(Spanned::get_ref) {
        let name = f.name.get_ref();
        let routes = names.contains(name);
        if !routes && (!f.networks.is_empty() || f.device.is_some()) {
            let at = f.networks.first().or(f.device.as_ref()).expect("given");
            return Err(lines.at(
                at,
                if f.networks.is_empty() { "member.device" } else { "member.networks" },
                format!("member {name:?} is no routing member: networks and device are route control's; name it in [routing] members"),
            ));
        }
        if !routes {
            continue;
        }
        let device = members[name].device();
        if !device_ok(&device) {
            let (at, why) = match &f.device {
                Some(d) => (
                    lines.at(d, "member.device", ""),
                    format!(
                        "{device:?} is not an interface name: 1 to 15 letters, digits, '-', '_' or '.'"
                    ),
                ),
                None => (
                    lines.at(&f.name, "member.name", ""),
                    format!(
                        "its next-hop device would be {device:?}, longer than an interface name may be (15): give device"
                    ),
                ),
            };
            return Err(MeshError { message: why, ..at });
        }
        if let Some(other) = devices.insert(device.clone(), name) {
            let at = f.device.as_ref().map_or_else(
                || lines.at(&f.name, "member.name", ""),
                |d| lines.at(d, "member.device", ""),
            );
            return Err(MeshError {
                message: format!(
                    "next-hop device {device:?} is member {other:?}'s too: give one of them another device"
                ),
                ..at
            });
        }
        // Parsed in the file's order, so each prefix stands beside its text.
        for (n, net) in f.networks.iter().zip(&members[name].networks) {
            if let Some(m) = members.values().find(|m| net.contains(m.address)) {
                return Err(lines.at(n, "member.networks", format!("{net} holds member {:?}'s address {}: route control steers the networks behind members, never their own addresses (their tunnels run there)", m.name, m.address)));
            }
            if let Some((o, owner)) = networks
                .iter()
                .find(|(o, _)| o.contains(net.addr()) || net.contains(o.addr()))
            {
                return Err(lines.at(
                    n,
                    "member.networks",
                    format!("{net} overlaps {o}, member {owner:?}'s"),
                ));
            }
            networks.push((*net, name.as_str()));
        }
    }
    Ok(names)
}

/// An interface name Linux takes: 1 to 15 characters, none that `ip` would misread.
fn device_ok(d: &str) -> bool {
    (1..=15).contains(&d.len())
        && d.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn members(
    lines: &Lines<'_>,
    files: &[Spanned<MemberFile>],
) -> Result<BTreeMap<String, Member>, MeshError> {
    let mut out = BTreeMap::new();
    let mut addresses = BTreeSet::new();
    let mut keys = BTreeSet::new();
    for m in files {
        let m = m.get_ref();
        let name = m.name.get_ref();
        if !name_ok(name) {
            return Err(lines.at(
                &m.name,
                "member.name",
                format!("{name:?}: a name is 1 to 64 letters, digits, '.', '_' or '-'"),
            ));
        }
        if out.contains_key(name) {
            return Err(lines.at(
                &m.name,
                "member.name",
                format!("a second member named {name:?}"),
            ));
        }
        if !addresses.insert(*m.address.get_ref()) {
            return Err(lines.at(
                &m.address,
                "member.address",
                format!("{} is another member's address too", m.address.get_ref()),
            ));
        }
        let api = match &m.api {
            Some(a) => Some(api(a.get_ref()).ok_or_else(|| {
                lines.at(
                    a,
                    "member.api",
                    format!(
                        "{:?}: the overlay's API as http://HOST:PORT or https://HOST:PORT",
                        a.get_ref()
                    ),
                )
            })?),
            None => None,
        };
        let metrics = match &m.metrics {
            Some(a) => Some(host_port(a.get_ref()).ok_or_else(|| {
                lines.at(
                    a,
                    "member.metrics",
                    format!(
                        "{:?}: where Prometheus reaches mgrpd's metrics, as HOST:PORT",
                        a.get_ref()
                    ),
                )
            })?),
            None => None,
        };
        if let (Some(a), Some(m2)) = (&api, &metrics)
            && a.target() == m2.as_str()
        {
            return Err(lines.at(
                m.metrics.as_ref().expect("given"),
                "member.metrics",
                format!("{m2} is its overlay's API too: mgrpd's metrics need a port of their own"),
            ));
        }
        let public_key = match &m.public_key {
            Some(k) => {
                let key: PublicKey = k
                    .get_ref()
                    .parse()
                    .map_err(|e| lines.at(k, "member.public-key", format!("{e}")))?;
                if !keys.insert(key.to_string()) {
                    return Err(lines.at(
                        k,
                        "member.public-key",
                        "another member's public key too: each member needs a key pair of its own",
                    ));
                }
                Some(key)
            }
            None => None,
        };
        let region = match &m.region {
            Some(r) if !name_ok(r.get_ref()) => {
                return Err(lines.at(
                    r,
                    "member.region",
                    format!("{:?}: a region is named as a member is: 1 to 64 letters, digits, '.', '_' or '-'", r.get_ref()),
                ));
            }
            r => r.as_ref().map(|r| r.get_ref().clone()),
        };
        let mut networks = Vec::new();
        for n in &m.networks {
            let net: Prefix = n.get_ref().parse().map_err(|e| {
                lines.at(
                    n,
                    "member.networks",
                    format!("{:?}: {e} (a prefix such as 10.1.0.0/24)", n.get_ref()),
                )
            })?;
            if !net.addr().is_ipv4() {
                return Err(lines.at(
                    n,
                    "member.networks",
                    format!("{net}: route control steers IPv4 prefixes only"),
                ));
            }
            if networks.contains(&net) {
                return Err(lines.at(n, "member.networks", format!("{net} is named twice")));
            }
            networks.push(net);
        }
        out.insert(
            name.clone(),
            Member {
                name: name.clone(),
                address: *m.address.get_ref(),
                api,
                metrics,
                public_key,
                networks,
                device: m.device.as_ref().map(|d| d.get_ref().clone()),
                region,
            },
        );
    }
    let keyed = out.values().filter(|m| m.public_key.is_some()).count();
    if keyed > 0 && keyed < out.len() {
        let m = files
            .iter()
            .map(Spanned::get_ref)
            .find(|m| m.public_key.is_none())
            .expect("a member without a key");
        return Err(lines.at(&m.name, "member.public-key", format!("member {:?} has no public-key while others do: give every member one (a node derives the key of each pair from them)", m.name.get_ref())));
    }
    Ok(out)
}

/// The names `list` gives, each a member, none twice.
fn named(
    lines: &Lines<'_>,
    list: &[Spanned<String>],
    key: &str,
    members: &BTreeMap<String, Member>,
    seen: &mut BTreeSet<String>,
) -> Result<Vec<String>, MeshError> {
    list.iter()
        .map(|n| {
            let name = n.get_ref();
            if !members.contains_key(name) {
                return Err(lines.at(n, key, format!("{name:?} is no member of the mesh")));
            }
            if !seen.insert(name.clone()) {
                return Err(lines.at(n, key, format!("{name:?} is named twice in the group")));
            }
            Ok(name.clone())
        })
        .collect()
}

fn group(
    lines: &Lines<'_>,
    g: &GroupFile,
    members: &BTreeMap<String, Member>,
) -> Result<Group, MeshError> {
    let mut seen = BTreeSet::new();
    let kind = match g.kind.get_ref().as_str() {
        "full-mesh" => GroupKind::FullMesh(named(
            lines,
            &g.members,
            "group.members",
            members,
            &mut seen,
        )?),
        "star" => {
            let Some(hub) = &g.hub else {
                return Err(lines.at(&g.kind, "group.hub", "a star needs its hub"));
            };
            let hub = named(
                lines,
                std::slice::from_ref(hub),
                "group.hub",
                members,
                &mut seen,
            )?
            .remove(0);
            GroupKind::Star {
                hub,
                leaves: named(lines, &g.members, "group.members", members, &mut seen)?,
            }
        }
        "sets" => {
            if g.sets.len() < 2 {
                return Err(lines.at(&g.kind, "group.sets", "sets pair the members of one set with those of the others: give two sets at least"));
            }
            let sets = g
                .sets
                .iter()
                .map(|s| named(lines, s, "group.sets", members, &mut seen))
                .collect::<Result<Vec<_>, _>>()?;
            GroupKind::Sets(sets)
        }
        "ring" => {
            let list = named(lines, &g.members, "group.members", members, &mut seen)?;
            let Some(k) = &g.k else {
                return Err(lines.at(
                    &g.kind,
                    "group.k",
                    "a ring needs k, how many of the next members each is paired with",
                ));
            };
            if *k.get_ref() == 0 || *k.get_ref() >= list.len().max(1) {
                return Err(lines.at(
                    k,
                    "group.k",
                    format!(
                        "k = {}: between 1 and the members less one ({})",
                        k.get_ref(),
                        list.len().saturating_sub(1)
                    ),
                ));
            }
            GroupKind::Ring {
                members: list,
                k: *k.get_ref(),
            }
        }
        "spread" => {
            let list = named(lines, &g.members, "group.members", members, &mut seen)?;
            let Some(k) = &g.k else {
                return Err(lines.at(
                    &g.kind,
                    "group.k",
                    "a spread group needs k, how many others each member is paired with each way",
                ));
            };
            let most = list.len().saturating_sub(1) / 2;
            if *k.get_ref() == 0 || *k.get_ref() > most {
                return Err(lines.at(
                    k,
                    "group.k",
                    format!(
                        "k = {}: between 1 and half the members less one ({most}); a full-mesh pairs them all",
                        k.get_ref()
                    ),
                ));
            }
            GroupKind::Spread {
                members: list,
                k: *k.get_ref(),
            }
        }
        other => {
            return Err(lines.at(
                &g.kind,
                "group.kind",
                format!("{other:?}: full-mesh, star, sets, ring or spread"),
            ));
        }
    };
    if kind.pairs().is_empty() {
        return Err(lines.at(
            &g.name,
            "group.members",
            format!(
                "group {:?} pairs nobody: name two members at least",
                g.name.get_ref()
            ),
        ));
    }
    if g.methods.get_ref().is_empty() {
        return Err(lines.at(
            &g.methods,
            "group.methods",
            "no method: name what the group measures (pathload-fast, pathchirp, badabing, btc, …)",
        ));
    }
    let mut methods = Vec::new();
    for m in g.methods.get_ref() {
        let ok = !m.get_ref().is_empty()
            && m.get_ref()
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if !ok || methods.contains(m.get_ref()) {
            return Err(lines.at(
                m,
                "group.methods",
                format!("{:?}: a method's name, once", m.get_ref()),
            ));
        }
        methods.push(m.get_ref().clone());
    }
    let transports = match &g.transports {
        None => vec![Transport::Mgrp],
        Some(list) if list.is_empty() => {
            return Err(lines.at(
                &g.methods,
                "group.transports",
                "no transport: mgrp, udp or both",
            ));
        }
        Some(list) => {
            let mut out = Vec::new();
            for t in list {
                let t2 = match t.get_ref().as_str() {
                    "mgrp" => Transport::Mgrp,
                    "udp" => Transport::Udp,
                    other => {
                        return Err(lines.at(
                            t,
                            "group.transports",
                            format!("{other:?}: mgrp or udp"),
                        ));
                    }
                };
                if out.contains(&t2) {
                    return Err(lines.at(t, "group.transports", format!("{t2} is named twice")));
                }
                out.push(t2);
            }
            out
        }
    };
    if let Some(i) = &g.interval
        && let Err(e) = mgrp_core::parse_duration(i.get_ref())
    {
        return Err(lines.at(i, "group.interval", e.to_string()));
    }
    Ok(Group {
        name: g.name.get_ref().clone(),
        kind,
        methods,
        transports,
        interval: g.interval.as_ref().map(|i| i.get_ref().clone()),
    })
}

/// The `[budget]`, checked.
fn budget(lines: &Lines<'_>, b: &Spanned<BudgetFile>) -> Result<Budget, MeshError> {
    let b = b.get_ref();
    let mb = |v: &Spanned<f64>, key: &str| -> Result<u64, MeshError> {
        let x = *v.get_ref();
        if !(x.is_finite() && x > 0.0 && x <= 1e9) {
            return Err(lines.at(v, key, format!("{x}: megabytes an hour, above 0")));
        }
        Ok((x * 1e6).round() as u64)
    };
    let share = |v: &Option<Spanned<f64>>, key: &str| -> Result<f64, MeshError> {
        match v {
            None => Ok(0.0),
            Some(v) if (0.0..=0.95).contains(v.get_ref()) => Ok(*v.get_ref()),
            Some(v) => Err(lines.at(
                v,
                key,
                format!(
                    "{}: a share from 0 to 0.95, as measured on the mesh",
                    v.get_ref()
                ),
            )),
        }
    };
    let duration = |v: &Spanned<String>, key: &str| {
        mgrp_core::parse_duration(v.get_ref())
            .map_err(|e| lines.at(v, key, e))
            .and_then(|d| {
                if d.is_zero() {
                    Err(lines.at(v, key, "a duration above 0"))
                } else {
                    Ok(d)
                }
            })
    };
    let node = mb(&b.node_mb_per_hour, "budget.node-mb-per-hour")?;
    let link = match &b.link_mb_per_hour {
        Some(v) => mb(v, "budget.link-mb-per-hour")?,
        None => node,
    };
    let mut methods = BTreeMap::new();
    for (name, c) in &b.method {
        let f = c.get_ref();
        let bytes_per_run = match &f.mb_per_run {
            Some(v) if v.get_ref().is_finite() && *v.get_ref() >= 0.0 && *v.get_ref() <= 1e6 => {
                Some((v.get_ref() * 1e6).round() as u64)
            }
            Some(v) => {
                return Err(lines.at(
                    v,
                    "budget.method.mb-per-run",
                    format!(
                        "{}: megabytes of probes one run sends, 0 or more",
                        v.get_ref()
                    ),
                ));
            }
            None => None,
        };
        let time_limit = match &f.time_limit {
            Some(v) => Some(duration(v, "budget.method.time-limit")?),
            None => None,
        };
        methods.insert(
            name.clone(),
            CostOverride {
                bytes_per_run,
                time_limit,
            },
        );
    }
    Ok(Budget {
        node_bytes_per_hour: node,
        link_bytes_per_hour: link,
        age: duration(&b.age, "budget.age")?,
        ride_share: share(&b.ride_share, "budget.ride-share")?,
        passive_share: share(&b.passive_share, "budget.passive-share")?,
        heartbeat_interval: match &b.heartbeat_interval {
            Some(v) => duration(v, "budget.heartbeat-interval")?,
            None => std::time::Duration::from_millis(100),
        },
        methods,
    })
}

/// Two groups that give one link (the same path, method and transport) two
/// intervals: the second is refused.
fn conflicts(
    lines: &Lines<'_>,
    mesh: &Mesh,
    files: &[Spanned<GroupFile>],
) -> Result<(), MeshError> {
    let mut given = BTreeMap::new();
    for (i, g) in mesh.groups.iter().enumerate() {
        for l in g.links() {
            let first = *given.entry(l).or_insert(i);
            if mesh.groups[first].interval != g.interval {
                let f = files[i].get_ref();
                return Err(lines.at(
                    f.interval.as_ref().unwrap_or(&f.name),
                    "group.interval",
                    format!(
                        "group {:?} measures {} to {} by {} over {}, which group {:?} measures at another interval: give both the same, or leave the pair to one",
                        g.name, l.from, l.to, l.method, l.transport, mesh.groups[first].name
                    ),
                ));
            }
        }
    }
    Ok(())
}
