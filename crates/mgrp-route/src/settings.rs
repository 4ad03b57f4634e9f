//! The `[routing]` section: members, destinations and the switching rule, checked.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use mgrp_core::heartbeat;
use mgrp_core::peers::Prefix;
use serde::Deserialize;

use mgrp_service::settings::{Invalid, check_name, number, read_token_file};

use crate::model::{Model, Rule, RuleKind};

/// Route control's settings.
#[derive(Clone, PartialEq)]
pub struct Routing {
    /// How the other members know this node (links at them come from this address).
    pub address: IpAddr,
    /// The UDP port heartbeats are sent from and answered on, on every member.
    pub heartbeat_port: u16,
    /// Heartbeats' timing and judgement.
    pub heartbeats: heartbeat::Settings,
    /// The switching rule, with the throughput model.
    pub rule: Rule,
    /// How often members' APIs are read and routes decided.
    pub poll: Duration,
    /// Segment size in the model, bytes.
    pub mss: u32,
    /// badabing loss older than this is not used (heartbeats' is).
    pub max_loss_age: Duration,
    /// Whether existing flows move with a change too (otherwise they stay on the path
    /// they started on; a failed path's flows always move).
    pub move_existing: bool,
    /// Routing table of the first path; path k uses `table_base + k`.
    pub table_base: u32,
    /// Priority of the policy rules (before mgrpd's, 4242).
    pub rule_priority: u32,
    /// Source address of the routes, for traffic this host originates.
    pub source: Option<Ipv4Addr>,
    /// mgrpd's TUN: what arrives from it was relayed here, and goes on directly.
    pub tun: String,
    /// The other members.
    pub members: Vec<Member>,
    /// The destinations routed.
    pub destinations: Vec<Destination>,
}

/// Another member of the overlay.
#[derive(Clone, PartialEq)]
pub struct Member {
    /// Its name (the API, metrics and logs).
    pub name: String,
    /// Its address: its mgrpd peer address, where heartbeats go.
    pub address: IpAddr,
    /// This node's mgrpd next-hop device towards it, when paths may start with it.
    pub device: Option<String>,
    /// Its overlay's API.
    pub api: SocketAddr,
    /// The token its API wants, if any.
    pub token: Option<String>,
    /// How its API is spoken to over TLS (`ca-file`), when it serves TLS.
    pub tls: Option<mgrp_service::tls::ClientTls>,
}

impl std::fmt::Debug for Member {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Member")
            .field("name", &self.name)
            .field("address", &self.address)
            .field("device", &self.device)
            .field("api", &self.api)
            .field("token", &self.token.as_ref().map(|_| "(set, not shown)"))
            .field("tls", &self.tls)
            .finish()
    }
}

impl std::fmt::Debug for Routing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Routing")
            .field("address", &self.address)
            .field("rule", &self.rule)
            .field("members", &self.members)
            .field("destinations", &self.destinations)
            .finish_non_exhaustive()
    }
}

/// A destination prefix and its candidate paths.
#[derive(Debug, Clone, PartialEq)]
pub struct Destination {
    /// The prefix.
    pub prefix: Prefix,
    /// The member it lies behind (index into `members`).
    pub owner: usize,
    /// The candidate paths, in order of preference while none has a score.
    pub paths: Vec<Candidate>,
}

/// One candidate path: straight to the owner, or through one other member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    /// The member relaying (index into `members`), `None` for the direct path.
    pub via: Option<usize>,
}

impl Routing {
    /// The switching rule in words.
    pub fn rule_words(&self) -> String {
        let r = &self.rule;
        let t_ch = |s: f64| mgrp_service::settings::seconds(Duration::from_secs_f64(s));
        match r.kind {
            RuleKind::Ratio => format!(
                "ratio rule: switch when 1 + {} times better and {} since the last change",
                r.eta,
                t_ch(r.t_ch_s)
            ),
            RuleKind::Confidence => format!(
                "confidence rule: switch when more than {:.0} % better and than {} standard errors of the scores, for {}, and {} to {} since the last change",
                r.margin * 100.0,
                r.z,
                t_ch(r.confirm_s),
                t_ch(r.t_ch_s),
                t_ch(r.t_ch_s * (1.0 + r.jitter))
            ),
        }
    }

    /// What `--check-config` shows of route control: a line for the whole, one per
    /// destination with its candidate paths.
    pub fn summary(&self) -> String {
        let mut out = format!(
            "  route control: as {} with {} members, {} destinations; {} model; {} (a failed path at once); heartbeats every {:.0} ms on UDP port {}, a hop down after {} lost in a row, loss over {:.0} s; {}\n",
            self.address,
            self.members.len(),
            self.destinations.len(),
            self.rule.model.name(),
            self.rule_words(),
            self.heartbeats.interval_s * 1e3,
            self.heartbeat_port,
            self.heartbeats.down_after,
            self.heartbeats.loss_window_s,
            if self.move_existing {
                "every flow moves with a change"
            } else {
                "flows stay on the path they started on"
            }
        );
        for d in &self.destinations {
            let paths: Vec<String> = d.paths.iter().map(|p| self.path_name(*p)).collect();
            out.push_str(&format!(
                "    {} behind {}: {}\n",
                d.prefix,
                self.members[d.owner].name,
                paths.join(", ")
            ));
        }
        out
    }

    /// A path's name: `direct` or `via NAME`.
    pub fn path_name(&self, p: Candidate) -> String {
        match p.via {
            None => "direct".into(),
            Some(m) => format!("via {}", self.members[m].name),
        }
    }

    /// The member a path's traffic goes to first, with its device.
    pub fn first_hop(&self, d: &Destination, p: Candidate) -> &Member {
        &self.members[p.via.unwrap_or(d.owner)]
    }

    /// Each path's mark and table, numbered 1, 2, … over the destinations in order.
    pub fn path_ids(&self) -> Vec<Vec<u32>> {
        let mut next = 0;
        self.destinations
            .iter()
            .map(|d| {
                d.paths
                    .iter()
                    .map(|_| {
                        next += 1;
                        next
                    })
                    .collect()
            })
            .collect()
    }
}

/// Most paths over all destinations (each needs a mark value below the normal
/// route's, 255).
pub const MAX_PATHS: usize = 254;

/// The `[routing]` section as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct RoutingFile {
    address: Option<IpAddr>,
    heartbeat_port: Option<u16>,
    heartbeat_interval: Option<String>,
    down_after: Option<u32>,
    loss_window: Option<String>,
    rule: Option<String>,
    model: Option<String>,
    eta: Option<f64>,
    margin: Option<f64>,
    z: Option<f64>,
    confirm: Option<String>,
    t_ch: Option<String>,
    t_ch_jitter: Option<f64>,
    poll: Option<String>,
    mss: Option<u32>,
    max_loss_age: Option<String>,
    move_existing: Option<bool>,
    table_base: Option<u32>,
    rule_priority: Option<u32>,
    source: Option<Ipv4Addr>,
    tun: Option<String>,
    /// The authority of every member's API certificate, for members without a
    /// `ca-file` of their own.
    ca_file: Option<PathBuf>,
    /// The token of every member's API spoken to over TLS, for members without a
    /// `token-file` of their own.
    token_file: Option<PathBuf>,
    #[serde(default, rename = "member")]
    members: Vec<MemberFile>,
    #[serde(default, rename = "destination")]
    destinations: Vec<DestinationFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct MemberFile {
    name: String,
    address: IpAddr,
    device: Option<String>,
    api: Option<String>,
    token_file: Option<PathBuf>,
    ca_file: Option<PathBuf>,
    tls_name: Option<String>,
    /// Whether its API is spoken to over TLS; unset: when a `ca-file` (its own or
    /// the section's) is given.
    tls: Option<bool>,
}

/// A routing member as a mesh description gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MeshMember {
    /// Its name.
    pub name: String,
    /// Its address.
    pub address: IpAddr,
    /// This node's next-hop device towards it.
    pub device: String,
    /// Its API, if the description gives one: the address, over TLS or not, and the
    /// name its certificate carries when that is not the address.
    pub api: Option<(SocketAddr, bool, Option<String>)>,
}

impl RoutingFile {
    /// Speaks to every member's API without TLS or token: what `--check-mesh` checks
    /// the rest with, the authority being each node's own file.
    pub fn without_tls(&mut self) {
        self.ca_file = None;
        self.token_file = None;
        for m in &mut self.members {
            m.tls = Some(false);
            m.ca_file = None;
            m.tls_name = None;
            m.token_file = None;
        }
    }

    /// Adds what a mesh description gives route control: this node's address unless
    /// the section gives one, each member the section does not name, and each
    /// destination (a prefix and the member it lies behind) whose prefix it does not
    /// give. What the section gives stays as written.
    pub fn add_from_mesh(
        &mut self,
        address: IpAddr,
        members: impl IntoIterator<Item = MeshMember>,
        destinations: impl IntoIterator<Item = (Prefix, String)>,
    ) {
        self.address.get_or_insert(address);
        for m in members {
            if self.members.iter().any(|o| o.name == m.name) {
                continue;
            }
            let (api, tls, tls_name) = match m.api {
                Some((addr, tls, name)) => (Some(addr.to_string()), Some(tls), name),
                None => (None, None, None),
            };
            self.members.push(MemberFile {
                name: m.name,
                address: m.address,
                device: Some(m.device),
                api,
                token_file: None,
                ca_file: None,
                tls_name,
                tls,
            });
        }
        for (prefix, member) in destinations {
            if self.destinations.iter().all(|d| d.prefix != prefix) {
                self.destinations.push(DestinationFile {
                    prefix,
                    member,
                    via: None,
                    direct: None,
                });
            }
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct DestinationFile {
    prefix: Prefix,
    member: String,
    via: Option<Vec<String>>,
    direct: Option<bool>,
}

fn invalid(msg: String) -> Invalid {
    Invalid(msg)
}

fn duration(key: &str, v: Option<&String>, default: Duration) -> Result<Duration, Invalid> {
    mgrp_service::settings::duration(&format!("routing.{key}"), v, default)
}

impl RoutingFile {
    /// The section checked; token and CA files are read relative to `dir`.
    pub fn check(self, dir: Option<&Path>) -> Result<Routing, Invalid> {
        let address = self.address.ok_or_else(|| {
            invalid("routing.address: missing; the address the other members know this node by (their links into them come from it)".into())
        })?;
        let interval = duration(
            "heartbeat-interval",
            self.heartbeat_interval.as_ref(),
            Duration::from_millis(100),
        )?;
        if !(Duration::from_millis(10)..=Duration::from_secs(10)).contains(&interval) {
            return Err(invalid(format!(
                "routing.heartbeat-interval: {interval:?}; use 10ms to 10s"
            )));
        }
        let down_after = self.down_after.unwrap_or(10);
        if !(2..=1000).contains(&down_after) {
            return Err(invalid(format!(
                "routing.down-after: {down_after}; use 2 to 1000 heartbeats lost in a row"
            )));
        }
        let loss_window = duration(
            "loss-window",
            self.loss_window.as_ref(),
            Duration::from_secs(10),
        )?;
        if loss_window < interval * 20 {
            return Err(invalid(format!(
                "routing.loss-window: {loss_window:?}; it must hold at least 20 heartbeats ({:?})",
                interval * 20
            )));
        }
        let eta = number(
            "routing.eta",
            self.eta,
            0.5,
            0.0..=10.0,
            "the margin a better path needs with the ratio rule (0.5 is SAFIRE's 50 %)",
        )?;
        let t_ch = duration("t-ch", self.t_ch.as_ref(), Duration::from_secs(30))?;
        let defaults = Rule::default();
        let kind = match self.rule.as_deref() {
            None | Some("confidence") => RuleKind::Confidence,
            Some("ratio") => RuleKind::Ratio,
            Some(other) => {
                return Err(invalid(format!(
                    "routing.rule: {other:?}; use \"confidence\" (the difference against its uncertainty) or \"ratio\" (SAFIRE's 1 + eta)"
                )));
            }
        };
        let model = match self.model.as_deref() {
            None | Some("pftk") => Model::Pftk,
            Some("mathis") => Model::Mathis,
            Some(other) => {
                return Err(invalid(format!(
                    "routing.model: {other:?}; use \"pftk\" (with timeouts) or \"mathis\" (SAFIRE's)"
                )));
            }
        };
        let margin = number(
            "routing.margin",
            self.margin,
            defaults.margin,
            0.0..=10.0,
            "the share a better path must score above the current",
        )?;
        let z = number(
            "routing.z",
            self.z,
            defaults.z,
            0.0..=10.0,
            "standard errors by which two paths' losses must differ to count",
        )?;
        let confirm = duration(
            "confirm",
            self.confirm.as_ref(),
            Duration::from_secs_f64(defaults.confirm_s),
        )?;
        if confirm > Duration::from_secs(600) {
            return Err(invalid(format!(
                "routing.confirm: {confirm:?}; use 0s to 10m"
            )));
        }
        let jitter = number(
            "routing.t-ch-jitter",
            self.t_ch_jitter,
            defaults.jitter,
            0.0..=2.0,
            "the largest share of t-ch added to a hold-down at random",
        )?;
        let poll = duration("poll", self.poll.as_ref(), Duration::from_secs(1))?;
        if !(Duration::from_millis(100)..=Duration::from_secs(60)).contains(&poll) {
            return Err(invalid(format!("routing.poll: {poll:?}; use 100ms to 60s")));
        }
        let mss = self.mss.unwrap_or(1448);
        if !(536..=65_483).contains(&mss) {
            return Err(invalid(format!(
                "routing.mss: {mss}; a TCP segment is 536 to 65483 bytes"
            )));
        }
        let max_loss_age = duration(
            "max-loss-age",
            self.max_loss_age.as_ref(),
            Duration::from_secs(30),
        )?;
        let mut members: Vec<Member> = Vec::new();
        for (i, m) in self.members.into_iter().enumerate() {
            let key = format!("routing.member {} ({})", i + 1, m.name);
            check_name(&format!("{key}: name"), &m.name)?;
            if members
                .iter()
                .any(|o| o.name == m.name || o.address == m.address)
            {
                return Err(invalid(format!(
                    "{key}: its name or address is another member's"
                )));
            }
            if m.address == address {
                return Err(invalid(format!(
                    "{key}: address {} is this node's own (routing.address)",
                    m.address
                )));
            }
            if let Some(d) = &m.device
                && (d.is_empty() || d.len() > 15 || d.contains(['/', ' ', ':']))
            {
                return Err(invalid(format!(
                    "{key}: device {d:?} is not an interface name; name the next-hop device its [[peers]] table gives mgrpd"
                )));
            }
            let api: SocketAddr = match &m.api {
                None => SocketAddr::new(m.address, 7700),
                Some(text) => text.parse().map_err(|_| {
                    invalid(format!(
                        "{key}: api {text:?} is not an address and port, e.g. 10.0.0.2:7700"
                    ))
                })?,
            };
            let in_dir = |p: &PathBuf| match dir {
                Some(d) if p.is_relative() => d.join(p),
                _ => p.clone(),
            };
            let ca = match (m.tls, m.ca_file.as_ref().or(self.ca_file.as_ref())) {
                (Some(false), _) => None,
                (_, Some(ca)) => Some(in_dir(ca)),
                (Some(true), None) => {
                    return Err(invalid(format!(
                        "{key}: its API is spoken to over TLS: give ca-file (the member's or routing.ca-file), the authority that signed its certificate"
                    )));
                }
                (None, None) => None,
            };
            let tls = match (&ca, &m.tls_name) {
                (Some(ca), name) => {
                    let name = name.clone().unwrap_or_else(|| api.ip().to_string());
                    Some(
                        mgrp_service::tls::ClientTls::load(ca, &name)
                            .map_err(|e| invalid(format!("{key}: ca-file: {e}")))?,
                    )
                }
                (None, Some(_)) => {
                    return Err(invalid(format!(
                        "{key}: tls-name is the name in the member's certificate; give ca-file too"
                    )));
                }
                (None, None) => None,
            };
            // The section's token goes only where TLS carries it.
            let token_file = m
                .token_file
                .as_ref()
                .or(self.token_file.as_ref().filter(|_| tls.is_some()));
            let token = match token_file {
                None => None,
                Some(p) => Some(read_token_file(p, dir)?.1),
            };
            if token.is_some() && tls.is_none() && !api.ip().is_loopback() {
                return Err(invalid(format!(
                    "{key}: its token would cross the network in clear to {api}; serve that member's API over TLS (its tls-cert and tls-key) and give ca-file here, the certificate of the authority that signed it"
                )));
            }
            members.push(Member {
                name: m.name,
                address: m.address,
                device: m.device,
                api,
                token,
                tls,
            });
        }
        let member = |key: &str, name: &str| {
            members
                .iter()
                .position(|m| m.name == name)
                .ok_or_else(|| invalid(format!("{key}: no [[routing.member]] is named {name:?}")))
        };
        let mut destinations: Vec<Destination> = Vec::new();
        for (i, d) in self.destinations.into_iter().enumerate() {
            let key = format!("routing.destination {} ({})", i + 1, d.prefix);
            if !d.prefix.addr().is_ipv4() {
                return Err(invalid(format!(
                    "{key}: route control steers IPv4 prefixes only"
                )));
            }
            if destinations
                .iter()
                .any(|o| o.prefix.contains(d.prefix.addr()) || d.prefix.contains(o.prefix.addr()))
            {
                return Err(invalid(format!(
                    "{key}: overlaps another destination's prefix"
                )));
            }
            // Steering a member's own address would send the tunnels into themselves.
            if let Some(a) = std::iter::once(address)
                .chain(members.iter().map(|m| m.address))
                .find(|a| d.prefix.contains(*a))
            {
                return Err(invalid(format!(
                    "{key}: holds the member address {a}; route control steers the networks behind members, never the members' own addresses (their tunnels run there)"
                )));
            }
            let owner = member(&key, &d.member)?;
            let mut paths = Vec::new();
            if d.direct.unwrap_or(true) {
                paths.push(Candidate { via: None });
            }
            let vias: Vec<usize> = match d.via {
                Some(names) => names
                    .iter()
                    .map(|n| member(&format!("{key}: via"), n))
                    .collect::<Result<_, _>>()?,
                None => (0..members.len())
                    .filter(|&m| m != owner && members[m].device.is_some())
                    .collect(),
            };
            for v in vias {
                if v == owner {
                    return Err(invalid(format!(
                        "{key}: via {}: the owner is the direct path, not a relay",
                        members[v].name
                    )));
                }
                paths.push(Candidate { via: Some(v) });
            }
            if paths.is_empty() {
                return Err(invalid(format!(
                    "{key}: no candidate path (direct = false and no relay)"
                )));
            }
            for p in &paths {
                let first = &members[p.via.unwrap_or(owner)];
                if first.device.is_none() {
                    return Err(invalid(format!(
                        "{key}: the path {} starts at member {}, which has no device (the mgrpd next-hop device towards it)",
                        match p.via {
                            None => "direct".to_string(),
                            Some(m) => format!("via {}", members[m].name),
                        },
                        first.name
                    )));
                }
            }
            destinations.push(Destination {
                prefix: d.prefix,
                owner,
                paths,
            });
        }
        if destinations.iter().map(|d| d.paths.len()).sum::<usize>() > MAX_PATHS {
            return Err(invalid(format!(
                "routing: more than {MAX_PATHS} candidate paths over all destinations"
            )));
        }
        Ok(Routing {
            address,
            heartbeat_port: self.heartbeat_port.unwrap_or(7701),
            heartbeats: heartbeat::Settings {
                interval_s: interval.as_secs_f64(),
                down_after,
                loss_window_s: loss_window.as_secs_f64(),
                grace_s: 0.5,
            },
            rule: Rule {
                kind,
                model,
                mss: f64::from(mss),
                eta,
                t_ch_s: t_ch.as_secs_f64(),
                margin,
                z,
                confirm_s: confirm.as_secs_f64(),
                jitter,
            },
            poll,
            mss,
            max_loss_age,
            move_existing: self.move_existing.unwrap_or(false),
            table_base: self.table_base.unwrap_or(4300),
            rule_priority: self.rule_priority.unwrap_or(4200),
            source: self.source,
            tun: self.tun.unwrap_or_else(|| "mgrp0".into()),
            members,
            destinations,
        })
    }
}

#[cfg(test)]
mod tests {
    use mgrp_service::settings::Invalid;

    use super::{Model, Routing, RoutingFile, RuleKind};

    /// The `[routing]` section of `text`, checked.
    fn routing(text: &str) -> Result<Routing, Invalid> {
        #[derive(serde::Deserialize)]
        struct File {
            routing: RoutingFile,
        }
        let f: File = toml::from_str(text).map_err(|e| Invalid(e.to_string()))?;
        f.routing.check(None)
    }

    const MEMBERS: &str = "[routing]\naddress = \"10.90.0.1\"\n\
        [[routing.member]]\nname = \"north\"\naddress = \"10.90.0.2\"\ndevice = \"mgrp-n\"\n\
        [[routing.member]]\nname = \"south\"\naddress = \"10.90.0.3\"\ndevice = \"mgrp-s\"\n\
        [[routing.member]]\nname = \"east0\"\naddress = \"10.90.0.4\"\n";

    #[test]
    fn destinations_get_their_candidate_paths_numbered_in_order() {
        let r = routing(&format!(
            "{MEMBERS}[[routing.destination]]\nprefix = \"10.2.0.0/24\"\nmember = \"east0\"\ndirect = false\n\
             [[routing.destination]]\nprefix = \"10.3.0.0/24\"\nmember = \"north\"\n"
        ))
        .unwrap();
        let names: Vec<Vec<String>> = r
            .destinations
            .iter()
            .map(|d| d.paths.iter().map(|p| r.path_name(*p)).collect())
            .collect();
        assert_eq!(
            names,
            [vec!["via north", "via south"], vec!["direct", "via south"]]
        );
        assert_eq!(r.path_ids(), [vec![1, 2], vec![3, 4]]);
        assert_eq!(r.rule.eta, 0.5);
        assert_eq!(r.rule.t_ch_s, 30.0);
        assert!(
            r.summary()
                .contains("10.2.0.0/24 behind east0: via north, via south")
        );
    }

    /// `[routing] ca-file` and `token-file` serve every member over TLS unless it says
    /// `tls = false`, and the token goes only where TLS carries it.
    #[test]
    fn the_sections_authority_and_token_serve_the_members_over_tls() {
        let dir = mgrp_testbed::TempDir::new("route-tls").unwrap();
        let ca = mgrp_testbed::tls::Authority::new(dir.path(), "members").unwrap();
        let token = mgrp_testbed::tls::private_file(dir.path(), "token", "member-token-0123456789")
            .unwrap();
        let text = |section: &str, north: &str| {
            format!(
                "[routing]\naddress = \"10.90.0.1\"\n{section}\
                 [[routing.member]]\nname = \"north\"\naddress = \"10.90.0.2\"\ndevice = \"mgrp-n\"\n{north}\
                 [[routing.member]]\nname = \"south\"\naddress = \"10.90.0.3\"\ndevice = \"mgrp-s\"\ntls = false\n"
            )
        };
        let section = format!(
            "ca-file = \"{}\"\ntoken-file = \"{}\"\n",
            ca.ca_file.display(),
            token.display()
        );
        let r = routing(&text(&section, "")).unwrap();
        let (north, south) = (&r.members[0], &r.members[1]);
        assert_eq!(
            north
                .tls
                .as_ref()
                .map(mgrp_service::tls::ClientTls::name)
                .as_deref(),
            Some("10.90.0.2")
        );
        assert_eq!(north.token.as_deref(), Some("member-token-0123456789"));
        assert!(south.tls.is_none() && south.token.is_none());
        let e = routing(&text("", "tls = true\n")).unwrap_err();
        assert!(e.to_string().contains("give ca-file"), "{e}");
        // What --check-mesh checks a description's routing with: no TLS anywhere.
        #[derive(serde::Deserialize)]
        struct File {
            routing: RoutingFile,
        }
        let mut f: File = toml::from_str(&text(&section, "tls = true\n")).unwrap();
        f.routing.without_tls();
        let r = f.routing.check(None).unwrap();
        assert!(
            r.members
                .iter()
                .all(|m| m.tls.is_none() && m.token.is_none())
        );
    }

    #[test]
    fn errors_name_the_key_and_the_fix() {
        for (extra, says) in [
            (
                "[[routing.destination]]\nprefix = \"10.2.0.0/24\"\nmember = \"west9\"\n",
                "no [[routing.member]] is named \"west9\"",
            ),
            (
                "[[routing.destination]]\nprefix = \"10.2.0.0/24\"\nmember = \"east0\"\n",
                "has no device",
            ),
            (
                "[[routing.destination]]\nprefix = \"10.2.0.0/24\"\nmember = \"east0\"\nvia = [\"east0\"]\ndirect = false\n",
                "the owner is the direct path",
            ),
            (
                "[[routing.destination]]\nprefix = \"fd00::/64\"\nmember = \"north\"\n",
                "IPv4 prefixes only",
            ),
            (
                "[[routing.destination]]\nprefix = \"10.90.0.0/16\"\nmember = \"north\"\n",
                "holds the member address",
            ),
            (
                "[[routing.destination]]\nprefix = \"10.2.0.0/16\"\nmember = \"north\"\n[[routing.destination]]\nprefix = \"10.2.3.0/24\"\nmember = \"north\"\n",
                "overlaps",
            ),
        ] {
            let e = routing(&format!("{MEMBERS}{extra}")).unwrap_err();
            assert!(e.to_string().contains(says), "{e}");
        }
        let e = routing("[routing]\n").unwrap_err();
        assert!(e.to_string().contains("routing.address"), "{e}");
        let e = routing("[routing]\naddress = \"10.0.0.1\"\nloss-window = \"1s\"\n").unwrap_err();
        assert!(e.to_string().contains("at least 20 heartbeats"), "{e}");
        for (key, says) in [
            ("margin = -0.1", "routing.margin: -0.1;"),
            ("z = 11.0", "routing.z: 11;"),
            ("t-ch-jitter = 3.0", "routing.t-ch-jitter: 3;"),
            ("eta = -1.0", "routing.eta: -1;"),
            ("rule = \"fast\"", "routing.rule: \"fast\""),
            ("model = \"reno\"", "routing.model: \"reno\""),
            ("confirm = \"11m\"", "routing.confirm:"),
        ] {
            let e = routing(&format!("[routing]\naddress = \"10.0.0.1\"\n{key}\n")).unwrap_err();
            assert!(e.to_string().contains(says), "{key}: {e}");
        }
        let r = routing("[routing]\naddress = \"10.0.0.1\"\nrule = \"ratio\"\nmodel = \"mathis\"\nmargin = 0.2\n")
            .unwrap();
        assert_eq!(
            (r.rule.kind, r.rule.model, r.rule.margin),
            (RuleKind::Ratio, Model::Mathis, 0.2)
        );
    }
}
