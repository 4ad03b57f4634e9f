//! mgrpd's configuration: a TOML file ([`settings`], every key with its default),
//! the flags applied onto it ([`flags`]), checked by the rules of [`checks`], and the
//! peers' tables built from it ([`peers`]), all in force as one [`Config`].
//! Routing queries on it are in [`crate::routes`]; `--check-config` prints
//! [`Config::summary`].

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use ipnet::IpNet;
use mgrp_core::auth::{Scheme, TRAILER_LEN};
use mgrp_core::peers::{Peers, Prefix};
use mgrp_core::planner::{EncapTable, HoldMode, Packing, Policy};

mod checks;
mod error;
mod flags;
mod mesh;
mod peers;
pub mod reload;
mod settings;
mod summary;
#[cfg(test)]
mod tests;

pub use self::error::ConfigError;
use self::error::bad;
pub use self::flags::{Cli, Command};
pub use self::peers::{Keys, NextHopDevice, PeerKey, RouteSources, Udp, UdpPeer};
use self::settings::Settings;
pub use self::settings::{
    DEFAULT_MIN_GAP, DEFAULT_UDP_PORT, DEFAULT_WIRE, EncapArg, HoldModeArg, PacerCpu, PackingArg,
    parse_duration,
};

/// The settings in force, after the file, the flags and the defaults are merged and
/// checked.
#[derive(Debug, Clone)]
pub struct Config {
    /// TUN device name.
    pub tun: String,
    /// IPv4 address of the TUN (/32).
    pub tun_address: std::net::Ipv4Addr,
    /// MTU of the TUN and of the path.
    pub mtu: u16,
    /// Whether the TUN uses offloads.
    pub tun_offload: bool,
    /// API socket path.
    pub socket: PathBuf,
    /// Group owning the API socket, if not root's.
    pub socket_group: Option<String>,
    /// Where the Prometheus exporter listens, if anywhere.
    pub metrics: Option<std::net::SocketAddr>,
    /// User to run as once set up.
    pub user: Option<String>,
    /// IP protocol number of MGRP.
    pub protocol: u8,
    /// Firewall mark on everything mgrpd sends.
    pub fwmark: u32,
    /// Routing table of the tunnel routes.
    pub table: u32,
    /// Priority of the policy rule.
    pub rule_priority: u32,
    /// Whether mgrpd installs the rule and routes.
    pub manage_routes: bool,
    /// Whether routes are installed only while trains run (on-demand hold only).
    pub route_on_demand: bool,
    /// Piggyback policy of every destination.
    pub policy: Policy,
    /// How their tags are computed.
    pub auth: Scheme,
    /// The oldest tags version taken (at most `auth`).
    pub auth_accept: Scheme,
    /// Where the packet counter and the peers' replay windows outlive a restart.
    pub state_dir: PathBuf,
    /// The command line this was loaded with, to load the keys again on SIGHUP.
    pub reload: Option<Cli>,
    /// How often the mesh description is read again and put in force, if at all.
    pub mesh_refresh: Option<Duration>,
    /// Where the pacer runs (see [`PacerCpu`]).
    pub pacer_cpu: PacerCpu,
    /// Whether to ask for SCHED_FIFO.
    pub realtime: bool,
    /// Sleep-then-spin margin of the pacer.
    pub busy_poll_margin: Duration,
    /// Lateness above which a probe counts as late in its report.
    pub late_threshold: Duration,
    /// Whether probes get kernel transmit stamps (where the kernel can name them).
    pub kernel_departures: bool,
    /// Whether unchanged TUN super-packets leave whole through a link-layer socket.
    pub super_packets: bool,
    /// Log level.
    pub log_level: tracing::Level,
    /// How log lines look.
    pub log_format: mgrp_service::logging::LogFormat,
    /// Most probes in one train.
    pub max_probes_per_train: usize,
    /// Smallest gap between probes.
    pub min_gap: Duration,
    /// Largest gap between probes.
    pub max_gap: Duration,
    /// Largest sum of a train's gaps.
    pub max_train_duration: Duration,
    /// Longest the pacer spins for one train; the rest of it is paced by the timer
    /// alone.
    pub max_train_spin: Duration,
    /// Most API connections at once.
    pub max_connections: usize,
    /// Most trains queued in the daemon.
    pub max_queued_trains: usize,
    /// Most trains one API connection may have queued.
    pub max_trains_per_client: usize,
    /// Most trains in flight at once, each to a destination of its own.
    pub max_trains_in_flight: usize,
    /// Most probe listeners over all connections.
    pub max_listeners: usize,
    /// Longest API request line, in bytes.
    pub max_request_bytes: usize,
    /// Probes and probe bytes per second one user (by uid) may submit.
    pub per_user_rate: (f64, f64),
    /// Probes and probe bytes per second all users together may submit.
    pub total_rate: (f64, f64),
    /// Reassembly bounds.
    pub reassembly: mgrp_core::reassembly::Limits,
    /// Most rider bytes held over all destinations (each destination's own bound is
    /// in the policy).
    pub max_held_bytes: usize,
    /// Most destinations with a planner at once; riders to further destinations are
    /// sent unchanged.
    pub max_destinations: usize,
    /// Next-hop devices, one per peer that has one.
    pub next_hops: Vec<NextHopDevice>,
    /// The peers, their keys and the routes, which a reload may replace (shared by
    /// every clone of this configuration).
    peering: PeeringCell,
}

/// The part of the configuration a reload replaces while mgrpd runs: who the peers
/// are, how each is reached, with which key, and what is routed to them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peering {
    /// Prefixes routed into the tunnel.
    pub routes: Vec<IpNet>,
    /// MGRP peer of each destination that is not its own peer.
    pub via: BTreeMap<IpAddr, IpAddr>,
    /// Configured source addresses for traffic routed into the tunnel.
    pub sources: RouteSources,
    /// The hosts MGRP packets are taken from, what their riders may claim, and the
    /// local prefixes riders may be addressed to.
    pub peers: Peers,
    /// Keys authenticating MGRP packets.
    pub keys: Keys,
    /// How MGRP packets travel to each peer.
    pub encap: EncapTable,
    /// The UDP port and the peers reached over UDP.
    pub udp: Udp,
    /// The peers' names, where their tables give one (for metrics and logs).
    pub peer_names: Vec<(Prefix, String)>,
}

impl Peering {
    /// The name the `[[peers]]` table of `prefix` gives it, if any.
    pub fn peer_name(&self, prefix: Prefix) -> Option<&str> {
        self.peer_names
            .iter()
            .find(|(p, _)| *p == prefix)
            .map(|(_, n)| n.as_str())
    }

    /// The MGRP peer that carries traffic for `dst`.
    pub fn peer_of(&self, dst: IpAddr) -> IpAddr {
        self.via.get(&dst).copied().unwrap_or(dst)
    }
}

/// The [`Peering`] in force, replaced whole: a reader holds the one it loaded until
/// it lets it go.
#[derive(Debug, Clone)]
struct PeeringCell(Arc<RwLock<Arc<Peering>>>);

impl PeeringCell {
    fn new(p: Peering) -> Self {
        Self(Arc::new(RwLock::new(Arc::new(p))))
    }
}

impl Config {
    /// Reads the file named by `--config` or `--check-config` (if any) and applies the
    /// flags on top.
    pub fn load(cli: &Cli) -> Result<Self, ConfigError> {
        let file = match cli.config.as_ref().or(cli.check_config.as_ref()) {
            Some(path) => read_file(path)?,
            None => Settings::default(),
        };
        let mut config = Self::merge(file, cli)?;
        config.reload = Some(cli.clone());
        Ok(config)
    }

    /// Parses configuration text (no flags), for tests and `--check-config`.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let file: Settings = toml::from_str(text).map_err(|e| bad(e.to_string()))?;
        Self::resolve(file)
    }

    /// The file's settings with the flags applied.
    fn merge(mut s: Settings, cli: &Cli) -> Result<Self, ConfigError> {
        cli.apply(&mut s);
        Self::resolve(s)
    }

    /// Checks the settings and builds what is in force from them.
    fn resolve(mut s: Settings) -> Result<Self, ConfigError> {
        mesh::apply(&mut s)?;
        s.routes.sort();
        s.routes.dedup();
        checks::check(&s).map_err(bad)?;
        let t = peers::build(&s)?;
        let pb = &s.piggyback;
        let hold_mode = match s.hold_mode {
            HoldModeArg::Always => HoldMode::Always,
            HoldModeArg::OnDemand => HoldMode::OnDemand,
        };
        let policy = Policy {
            hold: s.hold,
            hold_mode,
            packing: match pb.packing {
                PackingArg::One => Packing::OnePerProbe,
                PackingArg::Multiple => Packing::Multiple,
            },
            max_train_fraction: pb.max_train_fraction,
            first_n: Some(pb.first_n).filter(|&n| n > 0),
            max_queued_riders: pb.max_queued_riders,
            max_queued_bytes: pb.max_queued_bytes,
            min_fragment: pb.min_fragment,
            trailer_len: if t.keys.enabled() { TRAILER_LEN } else { 0 },
        };
        let l = &s.limits;
        Ok(Self {
            tun: s.tun.clone(),
            tun_address: s.tun_address,
            mtu: s.mtu,
            tun_offload: s.tun_offload,
            socket: s.socket.clone(),
            socket_group: s.socket_group.clone(),
            metrics: s.metrics,
            user: s.user.clone(),
            protocol: s.protocol,
            fwmark: s.fwmark,
            table: s.table,
            rule_priority: s.rule_priority,
            manage_routes: !s.no_routes,
            // A UDP peer's traffic reaches it only through the tunnel (a NAT or
            // firewall stops it on the kernel's path), so its routes stay.
            route_on_demand: hold_mode == HoldMode::OnDemand
                && !t.encap.any_udp()
                && s.route_on_demand.unwrap_or(true),
            policy,
            auth: s.auth,
            auth_accept: s.auth_accept.unwrap_or(s.auth),
            state_dir: s.state_dir.clone(),
            reload: None,
            mesh_refresh: s.mesh_refresh,
            pacer_cpu: s.pacer_cpu,
            realtime: s.realtime,
            busy_poll_margin: s.busy_poll_margin,
            late_threshold: s.late_threshold,
            kernel_departures: s.kernel_departures,
            super_packets: s.super_packets,
            log_level: s.log_level.parse().expect("checked"),
            log_format: s.log_format,
            max_probes_per_train: l.max_probes_per_train,
            min_gap: l.min_gap,
            max_gap: l.max_gap,
            max_train_duration: l.max_train_duration,
            max_train_spin: l.max_train_spin,
            max_connections: l.max_connections,
            max_queued_trains: l.max_queued_trains,
            max_trains_per_client: l.max_trains_per_client,
            max_trains_in_flight: l.max_trains_in_flight,
            max_listeners: l.max_listeners,
            max_request_bytes: l.max_request_bytes,
            per_user_rate: (
                l.probes_per_second_per_user,
                l.probe_bytes_per_second_per_user,
            ),
            total_rate: (l.probes_per_second, l.probe_bytes_per_second),
            reassembly: mgrp_core::reassembly::Limits {
                per_peer_bytes: l.reassembly_bytes_per_peer,
                total_bytes: l.reassembly_bytes,
                timeout: l.reassembly_timeout,
                remembered: mgrp_core::reassembly::Limits::default().remembered,
                max_rider_len: usize::from(s.mtu),
            },
            max_held_bytes: pb.max_held_bytes,
            max_destinations: l.max_destinations,
            next_hops: t.next_hops,
            peering: PeeringCell::new(Peering {
                peers: t.peers,
                keys: t.keys,
                encap: t.encap,
                udp: t.udp,
                sources: t.sources,
                peer_names: s
                    .peers
                    .iter()
                    .filter_map(|p| Some((p.prefix, p.name.clone()?)))
                    .collect(),
                routes: s.routes,
                via: s.via,
            }),
        })
    }

    /// The peers, keys and routes in force now.
    pub fn peering(&self) -> Arc<Peering> {
        self.peering
            .0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Puts `peering` in force for every clone of this configuration.
    pub(crate) fn set_peering(&self, peering: Peering) {
        *self
            .peering
            .0
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Arc::new(peering);
    }

    /// Changes the peering in force for every clone of this configuration.
    pub fn update_peering(&self, f: impl FnOnce(&mut Peering)) {
        let mut peering = (*self.peering()).clone();
        f(&mut peering);
        self.set_peering(peering);
    }

    /// This configuration with a cell of its own, so that changing its peering
    /// leaves that of the clones it was made from alone.
    #[must_use]
    pub fn detach(mut self) -> Self {
        self.peering = PeeringCell::new((*self.peering()).clone());
        self
    }

    /// The MGRP peer that carries traffic for `dst`.
    pub fn peer_of(&self, dst: IpAddr) -> IpAddr {
        self.peering().peer_of(dst)
    }
}

fn read_file(path: &Path) -> Result<Settings, ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| bad(format!("cannot read config file {}: {e}", path.display())))?;
    toml::from_str(&text).map_err(|e| {
        let msg = e.to_string().replace('\n', " ");
        bad(format!("config file {}: {}", path.display(), msg.trim()))
    })
}
