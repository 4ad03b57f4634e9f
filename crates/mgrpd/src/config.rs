//! mgrpd's configuration: a TOML file, every key of which a command-line flag can
//! override, validated in one place so that a bad value is reported in one line that
//! names the key and what would be accepted.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use clap::Parser;
use ipnet::IpNet;
use mgrp_core::auth::{Key, Scheme, TRAILER_LEN};
pub use mgrp_core::parse_duration;
use mgrp_core::peers::{Peer, Peers, Prefix};
use mgrp_core::planner::{Encap, EncapTable, HoldMode, Packing, Policy};
use mgrp_core::wire::Version;
use serde::{Deserialize, Deserializer};

/// The daemon's command line. Every flag overrides the key of the same name in the
/// configuration file.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "mgrpd",
    version,
    about = "MGRP daemon: piggybacks application packets in measurement probe trains",
    long_about = "MGRP daemon: piggybacks application packets in measurement probe trains.\n\n\
        Application traffic for the --route prefixes is routed into a TUN device; tools \
        submit probe trains over the Unix socket; mgrpd fills the probes' padding with the \
        queued packets and sends the trains over raw IP with exact gaps. On the receiving \
        side it takes the packets out again, writes them back through its TUN, and hands \
        the probes with kernel timestamps to the tools listening for them.\n\n\
        Needs CAP_NET_ADMIN and CAP_NET_RAW (run as root). See mgrpd.example.toml for a \
        commented configuration file, and docs/mgrpd.md in the source repository for \
        the guide (peers, source addresses, keys, UDP and NATs, wire versions). `mgrpd genkey` prints a new key for --key-file."
)]
pub struct Cli {
    /// Read settings from this TOML file (flags given as well override it).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Validate this configuration file, print the settings in force, and exit.
    #[arg(long, value_name = "FILE", conflicts_with = "config")]
    pub check_config: Option<PathBuf>,
    /// Name of the TUN device to create [default: mgrp0].
    #[arg(long, value_name = "NAME")]
    pub tun: Option<String>,
    /// IPv4 address given to the TUN as /32 (the kernel drops packets written into a
    /// TUN without an IPv4 address while reverse-path filtering is on)
    /// [default: 169.254.77.1].
    #[arg(long, value_name = "ADDR")]
    pub tun_address: Option<std::net::Ipv4Addr>,
    /// MTU of the TUN device and largest IP packet sent on the path [default: 1500].
    #[arg(long, value_name = "BYTES")]
    pub mtu: Option<u16>,
    /// Do not use TUN offloads (TSO/GSO super-packets read in one system call).
    #[arg(long)]
    pub no_tun_offload: bool,
    /// Destination prefix whose traffic enters the tunnel (repeatable), e.g. 10.0.0.2/32.
    #[arg(long = "route", value_name = "PREFIX")]
    pub routes: Vec<IpNet>,
    /// Path of the API socket [default: /run/mgrp/mgrpd.sock].
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// IP protocol number of MGRP packets [default: 253].
    #[arg(long, value_name = "N")]
    pub protocol: Option<u8>,
    /// Firewall mark on everything mgrpd sends, so policy routing skips the tunnel
    /// [default: 0x4d47].
    #[arg(long, value_name = "N", value_parser = parse_u32)]
    pub fwmark: Option<u32>,
    /// Routing table holding the tunnel routes [default: 4242].
    #[arg(long, value_name = "N")]
    pub table: Option<u32>,
    /// Priority of the `not fwmark M lookup T` rule [default: 4242].
    #[arg(long, value_name = "N")]
    pub rule_priority: Option<u32>,
    /// Install no rule and no routes (route traffic into the TUN yourself).
    #[arg(long)]
    pub no_routes: bool,
    /// How long a packet may wait for a probe, e.g. 10ms, 500us [default: 10ms].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub hold: Option<Duration>,
    /// `on-demand`: packets wait only while a train to their destination is queued or
    /// in flight, and with routes on demand they do not even enter the tunnel
    /// otherwise; `always`: every packet of a routed destination waits up to the hold
    /// time whether or not a train comes (the paper's mode, for experiments)
    /// [default: on-demand].
    #[arg(long, value_name = "MODE")]
    pub hold_mode: Option<HoldModeArg>,
    /// With on-demand hold: route a destination into the tunnel only while a train to it
    /// is queued or in flight, plus the hold time (`true`/`false`) [default: true].
    #[arg(long, value_name = "BOOL")]
    pub route_on_demand: Option<bool>,
    /// Pin the pacer thread to this CPU.
    #[arg(long, value_name = "N")]
    pub pacer_cpu: Option<usize>,
    /// Do not ask for SCHED_FIFO for the pacer (lower timing precision).
    #[arg(long)]
    pub no_realtime: bool,
    /// How long before a deadline the pacer stops sleeping and spins [default: 150us].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub busy_poll_margin: Option<Duration>,
    /// A probe that leaves more than this after its deadline counts as late in its
    /// train's report (`probes_late`) [default: 50us].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub late_threshold: Option<Duration>,
    /// Do not ask the kernel for transmit stamps of probes; reports then carry the
    /// daemon's own departure stamps only.
    #[arg(long)]
    pub no_kernel_departures: bool,
    /// Send packets that go on unchanged one by one through the raw socket, never as
    /// whole super-packets through a link-layer socket.
    #[arg(long)]
    pub no_super_packets: bool,
    /// Log level: error, warn, info, debug or trace [default: info].
    #[arg(long, value_name = "LEVEL")]
    pub log_level: Option<String>,
    /// Group owning the API socket, so its members may use mgrpd [default: root's].
    #[arg(long, value_name = "GROUP")]
    pub socket_group: Option<String>,
    /// Serve the daemon's counters to Prometheus at http://ADDR/metrics, e.g.
    /// 127.0.0.1:9577 [default: off].
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics: Option<std::net::SocketAddr>,
    /// Once set up, run as this user (and its group) instead of root, keeping only
    /// the capabilities the running daemon needs [default: keep the user id].
    #[arg(long, value_name = "USER")]
    pub user: Option<String>,
    /// Riders per probe: `one` (the paper's) or `multiple` [default: one].
    #[arg(long, value_name = "HOW")]
    pub packing: Option<PackingArg>,
    /// Largest fraction of a train's probes that may carry riders [default: 1.0].
    #[arg(long, value_name = "F")]
    pub max_train_fraction: Option<f64>,
    /// Only the first N probes of a train may carry riders (0 = all) [default: 0].
    #[arg(long, value_name = "N")]
    pub first_n: Option<u16>,
    /// Most probes in one train [default: 10000].
    #[arg(long, value_name = "N")]
    pub max_probes_per_train: Option<usize>,
    /// Most trains queued in the daemon [default: 64].
    #[arg(long, value_name = "N")]
    pub max_queued_trains: Option<usize>,
    /// Longest API request line mgrpd reads, in bytes; a longer one is refused with a
    /// message (clients learn the limit when they connect) [default: 65536].
    #[arg(long, value_name = "BYTES")]
    pub max_request_bytes: Option<usize>,
    /// Smallest gap a train may ask for; back-to-back probes ask for this (clients
    /// learn it when they connect) [default: 5us].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub min_gap: Option<Duration>,
    /// Traffic to DST rides in trains to PEER, as DST=PEER (repeatable) [default: every
    /// destination is its own peer]. PEER becomes a peer.
    #[arg(long = "via", value_name = "DST=PEER", value_parser = parse_peer)]
    pub via: Vec<(IpAddr, IpAddr)>,
    /// Source address for traffic routed into the tunnel: the address the peers know
    /// this host by (one per address family). Needed only where mgrpd cannot find it:
    /// a host whose only route to a peer is the tunnel, or a UDP peer that roams and
    /// has not been heard from. [default: the host's address on the way to each
    /// peer's endpoint]
    #[arg(long = "source", value_name = "ADDR")]
    pub sources: Vec<IpAddr>,
    /// Also take MGRP packets from the hosts in PREFIX (repeatable); the hosts inside
    /// the --route prefixes are always peers, and nobody else is.
    #[arg(long = "peer", value_name = "PREFIX")]
    pub peers: Vec<Prefix>,
    /// Also accept riders addressed to PREFIX (repeatable), besides the address each
    /// MGRP packet was sent to.
    #[arg(long = "local", value_name = "PREFIX")]
    pub local: Vec<Prefix>,
    /// Authenticate every MGRP packet with the key in FILE (32 bytes as hex or base64,
    /// file mode 0600; make one with `mgrpd genkey`). Peers need the same key.
    #[arg(long, value_name = "FILE")]
    pub key_file: Option<PathBuf>,
    /// A second key, accepted from peers but never sent with: the other key of a key
    /// rotation (see the guide). SIGHUP re-reads every key file.
    #[arg(long, value_name = "FILE")]
    pub next_key_file: Option<PathBuf>,
    /// How tags are computed: 2 binds each packet to its direction (who sealed it,
    /// for whom), so a reflected packet is refused; 1 is what mgrpd before keys per
    /// direction sent, for an upgrade only (a reflected packet is believed; mgrpd
    /// warns) [default: 2].
    #[arg(long, value_name = "1|2", value_parser = parse_auth)]
    pub auth: Option<Scheme>,
    /// Where mgrpd keeps what must outlive a restart: its packet counter and its
    /// peers' replay windows, in TUN.replay [default: /var/lib/mgrp].
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// How MGRP packets travel to peers without an `encap` of their own: `raw` (IP
    /// protocol --protocol) or `udp[:PORT]` (UDP datagrams, which NATs and firewalls
    /// pass; PORT is this daemon's UDP port and its peers') [default: raw; port 4253].
    #[arg(long, value_name = "raw|udp[:PORT]", value_parser = parse_encap)]
    pub encap: Option<EncapArg>,
    /// MGRP format version sent to peers without a `wire` of their own: 2 (the lean
    /// header) or 1 (for peers running an mgrpd older than version 2's). Both are
    /// always received [default: 2].
    #[arg(long, value_name = "1|2", value_parser = parse_wire)]
    pub wire: Option<Version>,
}

fn parse_auth(s: &str) -> Result<Scheme, String> {
    s.trim()
        .parse::<u8>()
        .ok()
        .and_then(Scheme::from_number)
        .ok_or_else(|| format!("auth {s:?}: use 2 (or 1 while peers are upgraded)"))
}

fn de_auth<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Scheme>, D::Error> {
    let n = u8::deserialize(d)?;
    Scheme::from_number(n).map(Some).ok_or_else(|| {
        serde::de::Error::custom(format!("auth {n}: use 2 (or 1 while peers are upgraded)"))
    })
}

fn parse_wire(s: &str) -> Result<Version, String> {
    s.trim()
        .parse::<u8>()
        .ok()
        .and_then(Version::from_number)
        .ok_or_else(|| format!("wire version {s:?}: use 1 or 2"))
}

fn de_wire<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Version>, D::Error> {
    let n = u8::deserialize(d)?;
    Version::from_number(n)
        .map(Some)
        .ok_or_else(|| serde::de::Error::custom(format!("wire version {n}: use 1 or 2")))
}

/// The format version peers are sent unless told otherwise.
pub const DEFAULT_WIRE: Version = Version::V2;

/// An `encap` value: raw IP, or UDP with a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EncapArg {
    /// IP protocol `protocol`.
    Raw,
    /// UDP, to this port if one is given.
    Udp(Option<u16>),
}

fn parse_encap(s: &str) -> Result<EncapArg, String> {
    match s.trim() {
        "raw" => Ok(EncapArg::Raw),
        "udp" => Ok(EncapArg::Udp(None)),
        other => other
            .strip_prefix("udp:")
            .and_then(|p| p.parse::<u16>().ok())
            .filter(|p| *p != 0)
            .map(|p| EncapArg::Udp(Some(p)))
            .ok_or_else(|| format!("{s:?} is not raw, udp or udp:PORT (PORT 1-65535)")),
    }
}

fn de_encap<'de, D: Deserializer<'de>>(d: D) -> Result<Option<EncapArg>, D::Error> {
    let s = String::deserialize(d)?;
    parse_encap(&s).map(Some).map_err(serde::de::Error::custom)
}

/// `--hold-mode` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HoldModeArg {
    /// Wait up to the hold time always.
    Always,
    /// Wait only while a train is queued or in flight.
    OnDemand,
}

/// `piggyback.packing` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PackingArg {
    /// One rider per probe.
    One,
    /// As many riders as fit.
    Multiple,
}

/// The configuration file, as written. Missing keys take their defaults.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct File {
    tun: Option<String>,
    tun_address: Option<std::net::Ipv4Addr>,
    mtu: Option<u16>,
    tun_offload: Option<bool>,
    routes: Option<Vec<IpNet>>,
    socket: Option<PathBuf>,
    socket_group: Option<String>,
    metrics: Option<std::net::SocketAddr>,
    user: Option<String>,
    protocol: Option<u8>,
    fwmark: Option<u32>,
    table: Option<u32>,
    rule_priority: Option<u32>,
    no_routes: Option<bool>,
    #[serde(default, deserialize_with = "de_duration")]
    hold: Option<Duration>,
    hold_mode: Option<HoldModeArg>,
    route_on_demand: Option<bool>,
    pacer_cpu: Option<usize>,
    realtime: Option<bool>,
    #[serde(default, deserialize_with = "de_duration")]
    busy_poll_margin: Option<Duration>,
    #[serde(default, deserialize_with = "de_duration")]
    late_threshold: Option<Duration>,
    kernel_departures: Option<bool>,
    super_packets: Option<bool>,
    log_level: Option<String>,
    #[serde(default)]
    piggyback: PiggybackFile,
    #[serde(default)]
    via: BTreeMap<IpAddr, IpAddr>,
    #[serde(default)]
    peers: Vec<PeerFile>,
    #[serde(default)]
    local_prefixes: Vec<Prefix>,
    #[serde(default)]
    source: Option<OneOrMany>,
    key_file: Option<PathBuf>,
    next_key_file: Option<PathBuf>,
    #[serde(default, deserialize_with = "de_auth")]
    auth: Option<Scheme>,
    state_dir: Option<PathBuf>,
    #[serde(default, deserialize_with = "de_encap")]
    encap: Option<EncapArg>,
    #[serde(default, deserialize_with = "de_wire")]
    wire: Option<Version>,
    #[serde(default)]
    limits: LimitsFile,
}

/// One `[[peers]]` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct PeerFile {
    prefix: Prefix,
    #[serde(default)]
    allowed_sources: Vec<Prefix>,
    key_file: Option<PathBuf>,
    next_key_file: Option<PathBuf>,
    #[serde(default, deserialize_with = "de_encap")]
    encap: Option<EncapArg>,
    endpoint: Option<std::net::SocketAddr>,
    #[serde(default, deserialize_with = "de_duration")]
    keepalive: Option<Duration>,
    #[serde(default, deserialize_with = "de_wire")]
    wire: Option<Version>,
    source: Option<IpAddr>,
    #[serde(default)]
    relay_to: Vec<Prefix>,
    device: Option<String>,
}

/// A next-hop device: a TUN of its own whose every packet goes to one peer, wrapped
/// in MGRP, whatever its destination. Policy routing (the Measurement Overlay's route
/// control) points a destination at it to send that destination's traffic through
/// the peer, which relays it on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NextHopDevice {
    /// The device's name.
    pub name: String,
    /// The peer its packets go to.
    pub peer: IpAddr,
}

fn check_interface_name(name: &str, what: &str) -> Result<(), ConfigError> {
    if name.is_empty() || name.len() > 15 || name.contains(['/', ' ', '\0', ':']) {
        return Err(bad(format!(
            "{what} {name:?} is not a valid interface name (1-15 characters, no '/', ':' or spaces)"
        )));
    }
    Ok(())
}

/// `source = "ADDR"` or `source = ["ADDR", "ADDR"]`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(IpAddr),
    Many(Vec<IpAddr>),
}

/// The source addresses configured for traffic routed into the tunnel.
#[derive(Debug, Clone, Default)]
pub struct RouteSources {
    /// For every peer without its own (at most one per address family).
    pub default: Vec<IpAddr>,
    /// `source` in a `[[peers]]` table.
    pub per_peer: Vec<(Prefix, IpAddr)>,
}

impl RouteSources {
    /// The configured source for traffic to `peer` of `peer`'s family: its table's
    /// (longest prefix), else the default one of that family.
    pub fn for_peer(&self, peer: IpAddr) -> Option<IpAddr> {
        self.per_peer
            .iter()
            .filter(|(p, _)| p.contains(peer))
            .max_by_key(|(p, _)| p.len())
            .map(|(_, s)| *s)
            .or_else(|| {
                self.default
                    .iter()
                    .copied()
                    .find(|s| s.is_ipv4() == peer.is_ipv4())
            })
    }
}

/// Where the source address of a route into the tunnel comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourcePlan {
    /// Configured (`source`, `--source`).
    Configured(IpAddr),
    /// The host's address on its way (outside the tunnel) to this address: the peer's
    /// endpoint, where its MGRP packets go.
    Toward {
        /// The MGRP peer.
        peer: IpAddr,
        /// Where its MGRP packets go.
        endpoint: IpAddr,
    },
    /// Not known yet: the peer roams and has not been heard from (the address towards
    /// the peer itself is the best guess until then).
    Roaming(IpAddr),
}

/// The UDP port mgrpd uses unless told otherwise.
pub const DEFAULT_UDP_PORT: u16 = 4253;

/// How a daemon reaches its peers over UDP.
#[derive(Debug, Clone, Default)]
pub struct Udp {
    /// This daemon's UDP port: where it receives, and where its packets come from.
    pub port: u16,
    /// The `[[peers]]` tables reached over UDP.
    pub peers: Vec<UdpPeer>,
}

/// A `[[peers]]` table reached over UDP.
#[derive(Debug, Clone)]
pub struct UdpPeer {
    /// Its addresses.
    pub prefix: Prefix,
    /// Its UDP port, unless an endpoint is configured.
    pub port: u16,
    /// Where its packets go until it is heard from elsewhere.
    pub endpoint: Option<std::net::SocketAddr>,
    /// How often to send it a keepalive when nothing else was sent.
    pub keepalive: Option<Duration>,
    /// Whether its endpoint is learned from its authenticated packets: it has a key
    /// of its own and is one host.
    pub roams: bool,
}

impl Udp {
    /// The `[[peers]]` table of `peer`, if it has one that names UDP (longest prefix).
    pub fn peer(&self, peer: IpAddr) -> Option<&UdpPeer> {
        self.peers
            .iter()
            .filter(|p| p.prefix.contains(peer))
            .max_by_key(|p| p.prefix.len())
    }

    /// Where `peer`'s packets go unless it was heard from elsewhere: its configured
    /// endpoint, else its own address at its port, unless it roams without a
    /// configured endpoint (then nowhere until it is heard from).
    pub fn configured_endpoint(&self, peer: IpAddr) -> Option<std::net::SocketAddr> {
        match self.peer(peer) {
            Some(p) if p.endpoint.is_some() => p.endpoint,
            Some(p) if p.roams => None,
            Some(p) => Some((peer, p.port).into()),
            None => Some((peer, self.port).into()),
        }
    }
}

/// The keys of a peer: the one packets are sealed with, and the other key of a
/// rotation, accepted too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerKey {
    /// Seals and opens.
    pub key: Key,
    /// Opens only (`next-key-file`).
    pub next: Option<Key>,
}

impl PeerKey {
    /// The keys a packet may be sealed with, the sending key first.
    pub fn accepted(&self) -> impl Iterator<Item = &Key> {
        std::iter::once(&self.key).chain(&self.next)
    }
}

/// The keys that authenticate MGRP packets, if any.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Keys {
    /// The key of every peer without one of its own.
    pub default: Option<PeerKey>,
    /// Keys of `[[peers]]` tables.
    pub per_peer: Vec<(Prefix, PeerKey)>,
}

impl Keys {
    /// Whether packets are authenticated at all.
    pub fn enabled(&self) -> bool {
        self.default.is_some() || !self.per_peer.is_empty()
    }

    /// The key for packets to or from `ip`: its `[[peers]]` key (longest prefix), else
    /// the default one.
    pub fn key_for(&self, ip: IpAddr) -> Option<&PeerKey> {
        self.per_peer
            .iter()
            .filter(|(p, _)| p.contains(ip))
            .max_by_key(|(p, _)| p.len())
            .map(|(_, k)| k)
            .or(self.default.as_ref())
    }
}

/// Reads a key file, which only its owner may read.
fn read_key(path: &Path) -> Result<Key, ConfigError> {
    let text = mgrp_rt::secret::read_private(path, "key file").map_err(bad)?;
    text.parse()
        .map_err(|e| bad(format!("key file {}: {e}", path.display())))
}

/// Reads a key file and, if named, the next key's.
fn read_peer_key(key: &Path, next: Option<&PathBuf>) -> Result<PeerKey, ConfigError> {
    Ok(PeerKey {
        key: read_key(key)?,
        next: next.map(|p| read_key(p)).transpose()?,
    })
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct PiggybackFile {
    packing: Option<PackingArg>,
    max_train_fraction: Option<f64>,
    first_n: Option<u16>,
    min_fragment: Option<usize>,
    max_queued_riders: Option<usize>,
    max_queued_bytes: Option<usize>,
    max_held_bytes: Option<usize>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct LimitsFile {
    max_probes_per_train: Option<usize>,
    #[serde(default, deserialize_with = "de_duration")]
    min_gap: Option<Duration>,
    #[serde(default, deserialize_with = "de_duration")]
    max_gap: Option<Duration>,
    #[serde(default, deserialize_with = "de_duration")]
    max_train_duration: Option<Duration>,
    #[serde(default, deserialize_with = "de_duration")]
    max_train_spin: Option<Duration>,
    max_connections: Option<usize>,
    max_queued_trains: Option<usize>,
    max_trains_per_client: Option<usize>,
    max_listeners: Option<usize>,
    max_request_bytes: Option<usize>,
    max_destinations: Option<usize>,
    probes_per_second_per_user: Option<f64>,
    probe_bytes_per_second_per_user: Option<f64>,
    probes_per_second: Option<f64>,
    probe_bytes_per_second: Option<f64>,
    reassembly_bytes: Option<usize>,
    reassembly_bytes_per_peer: Option<usize>,
    #[serde(default, deserialize_with = "de_duration")]
    reassembly_timeout: Option<Duration>,
}

/// The smallest gap between probes unless configured: at the default MTU a probe
/// rate of 2.4 Gbit/s, above what this daemon forwards, so it holds back no
/// measurement the tunnel could carry, while a train can no longer ask for "as fast
/// as the CPU goes".
pub const DEFAULT_MIN_GAP: Duration = Duration::from_micros(5);

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
    /// Prefixes routed into the tunnel.
    pub routes: Vec<IpNet>,
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
    /// MGRP peer of each destination that is not its own peer.
    pub via: BTreeMap<IpAddr, IpAddr>,
    /// Configured source addresses for traffic routed into the tunnel.
    pub sources: RouteSources,
    /// The hosts MGRP packets are taken from, what their riders may claim, and the
    /// local prefixes riders may be addressed to.
    pub peers: Peers,
    /// Keys authenticating MGRP packets.
    pub keys: Keys,
    /// How their tags are computed.
    pub auth: Scheme,
    /// Where the packet counter and the peers' replay windows outlive a restart.
    pub state_dir: PathBuf,
    /// The command line this was loaded with, to load the keys again on SIGHUP.
    pub reload: Option<Cli>,
    /// How MGRP packets travel to each peer.
    pub encap: EncapTable,
    /// The UDP port and the peers reached over UDP.
    pub udp: Udp,
    /// CPU to pin the pacer to.
    pub pacer_cpu: Option<usize>,
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
}

/// A configuration problem, in one line naming the key and the fix.
#[derive(Debug)]
pub struct ConfigError(String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

fn bad(msg: impl Into<String>) -> ConfigError {
    ConfigError(msg.into())
}

impl Config {
    /// Reads the file named by `--config` or `--check-config` (if any) and applies the
    /// flags on top.
    pub fn load(cli: &Cli) -> Result<Self, ConfigError> {
        let file = match cli.config.as_ref().or(cli.check_config.as_ref()) {
            Some(path) => read_file(path)?,
            None => File::default(),
        };
        let mut config = Self::merge(file, cli)?;
        config.reload = Some(cli.clone());
        Ok(config)
    }

    /// Parses configuration text (no flags), for tests and `--check-config`.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let file: File = toml::from_str(text).map_err(|e| bad(e.to_string()))?;
        Self::merge(file, &Cli::parse_from(["mgrpd"]))
    }

    fn merge(mut f: File, cli: &Cli) -> Result<Self, ConfigError> {
        let hold_mode = match cli
            .hold_mode
            .or(f.hold_mode)
            .unwrap_or(HoldModeArg::OnDemand)
        {
            HoldModeArg::Always => HoldMode::Always,
            HoldModeArg::OnDemand => HoldMode::OnDemand,
        };
        let pb = &f.piggyback;
        let defaults = Policy::default();
        let mut policy = Policy {
            hold: cli.hold.or(f.hold).unwrap_or(defaults.hold),
            hold_mode,
            packing: match cli.packing.or(pb.packing).unwrap_or(PackingArg::One) {
                PackingArg::One => Packing::OnePerProbe,
                PackingArg::Multiple => Packing::Multiple,
            },
            max_train_fraction: cli
                .max_train_fraction
                .or(pb.max_train_fraction)
                .unwrap_or(defaults.max_train_fraction),
            first_n: cli.first_n.or(pb.first_n).filter(|&n| n > 0),
            max_queued_riders: pb.max_queued_riders.unwrap_or(defaults.max_queued_riders),
            max_queued_bytes: pb.max_queued_bytes.unwrap_or(defaults.max_queued_bytes),
            min_fragment: pb.min_fragment.unwrap_or(defaults.min_fragment),
            trailer_len: 0,
        };
        if !(0.0..=1.0).contains(&policy.max_train_fraction) {
            return Err(bad(format!(
                "piggyback.max-train-fraction must be between 0 and 1, got {}",
                policy.max_train_fraction
            )));
        }
        if policy.hold > Duration::from_secs(1) {
            return Err(bad(format!(
                "hold of {:?} is too long: riders would stall their connections; use at most 1s",
                policy.hold
            )));
        }
        let tun = cli.tun.clone().or(f.tun).unwrap_or_else(|| "mgrp0".into());
        check_interface_name(&tun, "tun name")?;
        let mtu = cli.mtu.or(f.mtu).unwrap_or(1500);
        if !(576..=9000).contains(&mtu) {
            return Err(bad(format!("mtu {mtu} is out of range; use 576 to 9000")));
        }
        let mut routes = f.routes.unwrap_or_default();
        routes.extend(cli.routes.iter().copied());
        routes.sort();
        routes.dedup();
        let via = {
            let mut v = f.via.clone();
            v.extend(cli.via.iter().copied());
            v
        };
        let mut sources = RouteSources {
            default: if cli.sources.is_empty() {
                match f.source.take() {
                    None => Vec::new(),
                    Some(OneOrMany::One(a)) => vec![a],
                    Some(OneOrMany::Many(v)) => v,
                }
            } else {
                cli.sources.clone()
            },
            per_peer: Vec::new(),
        };
        for family_v4 in [true, false] {
            if sources
                .default
                .iter()
                .filter(|a| a.is_ipv4() == family_v4)
                .count()
                > 1
            {
                return Err(bad(format!(
                    "source: give at most one {} address (the address the peers know this host by)",
                    if family_v4 { "IPv4" } else { "IPv6" }
                )));
            }
        }
        for a in &sources.default {
            check_source(*a, "source")?;
        }
        let fwmark = cli.fwmark.or(f.fwmark).unwrap_or(0x4d47);
        if fwmark == 0 {
            return Err(bad(
                "fwmark must not be 0: the rule `not fwmark 0` would match nothing",
            ));
        }
        let table = cli.table.or(f.table).unwrap_or(4242);
        if matches!(table, 0 | 253..=255) {
            return Err(bad(format!(
                "table {table} is reserved (unspec, default, main or local); choose another, e.g. 4242"
            )));
        }
        let protocol = cli.protocol.or(f.protocol).unwrap_or(253);
        if matches!(protocol, 0 | 1 | 4 | 6 | 17 | 41 | 58 | 255) {
            return Err(bad(format!(
                "protocol {protocol} is taken by a standard protocol; use 253 or 254 (reserved for experiments)"
            )));
        }
        let level = cli
            .log_level
            .clone()
            .or(f.log_level)
            .unwrap_or_else(|| "info".into());
        let log_level = tracing::Level::from_str(&level).map_err(|_| {
            bad(format!(
                "log level {level:?} is unknown; use error, warn, info, debug or trace"
            ))
        })?;
        let limits = &f.limits;
        let min_gap = cli.min_gap.or(limits.min_gap).unwrap_or(DEFAULT_MIN_GAP);
        let rd = mgrp_core::reassembly::Limits::default();
        let reassembly = mgrp_core::reassembly::Limits {
            per_peer_bytes: limits
                .reassembly_bytes_per_peer
                .unwrap_or(rd.per_peer_bytes),
            total_bytes: limits.reassembly_bytes.unwrap_or(rd.total_bytes),
            timeout: limits.reassembly_timeout.unwrap_or(rd.timeout),
            remembered: rd.remembered,
            max_rider_len: usize::from(mtu),
        };
        let busy_poll_margin = cli
            .busy_poll_margin
            .or(f.busy_poll_margin)
            .unwrap_or(Duration::from_micros(150));
        if busy_poll_margin > Duration::from_millis(5) {
            return Err(bad(format!(
                "busy-poll-margin of {busy_poll_margin:?} would spin too long; use at most 5ms"
            )));
        }
        if f.piggyback
            .max_held_bytes
            .is_some_and(|b| b < usize::from(mtu))
        {
            return Err(bad(format!(
                "piggyback.max-held-bytes must hold at least one packet of the MTU ({mtu} bytes)"
            )));
        }
        if limits.max_destinations == Some(0) {
            return Err(bad(
                "limits.max-destinations must be at least 1 (it bounds the destinations riders wait for)",
            ));
        }
        for (name, v) in [
            (
                "probes-per-second-per-user",
                limits.probes_per_second_per_user,
            ),
            (
                "probe-bytes-per-second-per-user",
                limits.probe_bytes_per_second_per_user,
            ),
            ("probes-per-second", limits.probes_per_second),
            ("probe-bytes-per-second", limits.probe_bytes_per_second),
        ] {
            if let Some(v) = v.filter(|v| !(v.is_finite() && *v > 0.0)) {
                return Err(bad(format!(
                    "limits.{name} must be a positive number, got {v}"
                )));
            }
        }
        let encap_arg = cli.encap.or(f.encap).unwrap_or(EncapArg::Raw);
        let udp_port = match (cli.encap, f.encap) {
            (Some(EncapArg::Udp(Some(p))), _) | (_, Some(EncapArg::Udp(Some(p)))) => p,
            _ => DEFAULT_UDP_PORT,
        };
        let mut encap = EncapTable {
            default: match encap_arg {
                EncapArg::Raw => Encap::Raw,
                EncapArg::Udp(_) => Encap::Udp,
            },
            per_peer: Vec::new(),
            wire_default: cli.wire.or(f.wire).unwrap_or(DEFAULT_WIRE),
            wire_per_peer: Vec::new(),
        };
        let mut udp = Udp {
            port: udp_port,
            peers: Vec::new(),
        };
        let mut next_hops = Vec::new();
        let (peers, keys) = {
            let mut peers = Peers::new(Vec::new(), Vec::new(), protocol);
            let next = cli.next_key_file.as_ref().or(f.next_key_file.as_ref());
            let mut keys = Keys {
                default: match cli.key_file.as_ref().or(f.key_file.as_ref()) {
                    Some(path) => Some(read_peer_key(path, next)?),
                    None if next.is_some() => {
                        return Err(bad(
                            "next-key-file is the second key of a rotation: give key-file too",
                        ));
                    }
                    None => None,
                },
                per_peer: Vec::new(),
            };
            for r in &routes {
                let prefix = Prefix::new(r.addr(), r.prefix_len())
                    .map_err(|e| bad(format!("route {r}: {e}")))?;
                peers.add_peer(Peer::new(prefix));
            }
            for p in &cli.peers {
                peers.add_peer(Peer::new(*p));
            }
            for p in f.peers {
                match (&p.key_file, &p.next_key_file) {
                    (Some(path), next) => {
                        keys.per_peer
                            .push((p.prefix, read_peer_key(path, next.as_ref())?));
                    }
                    (None, Some(_)) => {
                        return Err(bad(format!(
                            "peer {}: next-key-file is the second key of a rotation: give key-file too",
                            p.prefix
                        )));
                    }
                    (None, None) => {}
                }
                let peer_encap = match p.encap {
                    Some(EncapArg::Raw) => Encap::Raw,
                    Some(EncapArg::Udp(_)) => Encap::Udp,
                    None => encap.default,
                };
                if p.encap.is_some() {
                    encap.per_peer.push((p.prefix, peer_encap));
                }
                if let Some(w) = p.wire {
                    encap.wire_per_peer.push((p.prefix, w));
                }
                if let Some(src) = p.source {
                    let what = format!("peer {}: source", p.prefix);
                    check_source(src, &what)?;
                    if src.is_ipv4() != p.prefix.addr().is_ipv4() {
                        return Err(bad(format!(
                            "{what} {src} is not of the peer's address family"
                        )));
                    }
                    sources.per_peer.push((p.prefix, src));
                }
                let single = p.prefix.len() == if p.prefix.addr().is_ipv4() { 32 } else { 128 };
                if peer_encap == Encap::Udp {
                    udp.peers.push(UdpPeer {
                        prefix: p.prefix,
                        port: match p.encap {
                            Some(EncapArg::Udp(Some(port))) => port,
                            _ => udp_port,
                        },
                        endpoint: p.endpoint,
                        keepalive: p.keepalive,
                        roams: p.key_file.is_some() && single,
                    });
                } else if p.endpoint.is_some() || p.keepalive.is_some() {
                    return Err(bad(format!(
                        "peer {}: endpoint and keepalive need encap = \"udp\" (in its [[peers]] table, or --encap udp for all)",
                        p.prefix
                    )));
                }
                if p.keepalive.is_some() && !single {
                    return Err(bad(format!(
                        "peer {}: keepalive needs one host (a /32 or /128 prefix) to send to",
                        p.prefix
                    )));
                }
                if p.keepalive.is_some_and(|k| k < Duration::from_secs(1)) {
                    return Err(bad(format!(
                        "peer {}: keepalive must be at least 1s (NATs keep UDP mappings for 30 s or more; 25s is usual)",
                        p.prefix
                    )));
                }
                if let Some(name) = p.device {
                    check_interface_name(&name, &format!("peer {}: device", p.prefix))?;
                    if !single {
                        return Err(bad(format!(
                            "peer {}: a device sends to one host; give the peer a /32 or /128 prefix",
                            p.prefix
                        )));
                    }
                    if name == tun || next_hops.iter().any(|d: &NextHopDevice| d.name == name) {
                        return Err(bad(format!(
                            "peer {}: device {name:?} is used twice; give each peer's device its own name",
                            p.prefix
                        )));
                    }
                    next_hops.push(NextHopDevice {
                        name,
                        peer: p.prefix.addr(),
                    });
                }
                peers.add_peer(Peer {
                    prefix: p.prefix,
                    allowed_sources: p.allowed_sources,
                    relay_to: p.relay_to,
                });
            }
            for peer in via.values() {
                peers.add_peer(Peer::new(Prefix::host(*peer)));
            }
            for l in f.local_prefixes.iter().chain(&cli.local) {
                peers.add_local(*l);
            }
            (peers, keys)
        };
        if keys.enabled() {
            if let Some(p) = peers
                .peers()
                .iter()
                .find(|p| keys.key_for(p.prefix.addr()).is_none())
            {
                return Err(bad(format!(
                    "peer {} has no key while others do; give every peer a key (key-file in its [[peers]] table, or --key-file for all)",
                    p.prefix
                )));
            }
            policy.trailer_len = TRAILER_LEN;
        } else if let Some(p) = peers
            .peers()
            .iter()
            .find(|p| !p.relay_to.is_empty() || !p.allowed_sources.is_empty())
        {
            // A peer's address alone, which anyone on the path can put on a packet,
            // would let its sender speak for other addresses or reach other hosts.
            return Err(bad(format!(
                "peer {} has relay-to or allowed-sources but no key: anyone who can spoof its address could use them; give the peers a key (key-file, made with `mgrpd genkey`)",
                p.prefix
            )));
        }
        if encap.any_udp() && cli.route_on_demand.or(f.route_on_demand) == Some(true) {
            return Err(bad(
                "route-on-demand cannot be used with UDP peers: their traffic reaches them only through the tunnel, so their routes must stay; drop route-on-demand",
            ));
        }
        // A roaming peer is told apart by its key alone: no other peer may share it.
        for (i, (prefix, key)) in keys.per_peer.iter().enumerate() {
            let roams = udp.peers.iter().any(|p| p.roams && p.prefix == *prefix);
            let shared = keys.default.as_ref().is_some_and(|d| d.key == key.key)
                || keys
                    .per_peer
                    .iter()
                    .enumerate()
                    .any(|(j, (_, other))| j != i && other.key == key.key);
            if roams && shared {
                return Err(bad(format!(
                    "peer {prefix} learns its endpoint from its key, so the key must be its own: give it a key-file no other peer uses"
                )));
            }
        }
        Ok(Self {
            tun,
            tun_address: cli
                .tun_address
                .or(f.tun_address)
                .unwrap_or(std::net::Ipv4Addr::new(169, 254, 77, 1)),
            mtu,
            tun_offload: !cli.no_tun_offload && f.tun_offload.unwrap_or(true),
            routes,
            socket: cli
                .socket
                .clone()
                .or(f.socket)
                .unwrap_or_else(|| PathBuf::from("/run/mgrp/mgrpd.sock")),
            socket_group: cli.socket_group.clone().or(f.socket_group),
            metrics: cli.metrics.or(f.metrics),
            user: cli.user.clone().or(f.user),
            protocol,
            fwmark,
            table,
            rule_priority: cli.rule_priority.or(f.rule_priority).unwrap_or(4242),
            manage_routes: !(cli.no_routes || f.no_routes.unwrap_or(false)),
            // A UDP peer's traffic reaches it only through the tunnel (a NAT or
            // firewall stops it on the kernel's path), so its routes stay.
            route_on_demand: hold_mode == HoldMode::OnDemand
                && !encap.any_udp()
                && cli.route_on_demand.or(f.route_on_demand).unwrap_or(true),
            policy,
            peers,
            keys,
            auth: cli.auth.or(f.auth).unwrap_or_default(),
            state_dir: cli
                .state_dir
                .clone()
                .or(f.state_dir)
                .unwrap_or_else(|| PathBuf::from("/var/lib/mgrp")),
            reload: None,
            encap,
            udp,
            via,
            sources,
            pacer_cpu: cli.pacer_cpu.or(f.pacer_cpu),
            realtime: !cli.no_realtime && f.realtime.unwrap_or(true),
            busy_poll_margin,
            late_threshold: cli
                .late_threshold
                .or(f.late_threshold)
                .unwrap_or(Duration::from_micros(50)),
            kernel_departures: !cli.no_kernel_departures && f.kernel_departures.unwrap_or(true),
            super_packets: !cli.no_super_packets && f.super_packets.unwrap_or(true),
            log_level,
            max_probes_per_train: cli
                .max_probes_per_train
                .or(limits.max_probes_per_train)
                .unwrap_or(10_000),
            min_gap,
            max_gap: limits.max_gap.unwrap_or(Duration::from_secs(1)),
            max_train_duration: limits.max_train_duration.unwrap_or(Duration::from_secs(30)),
            max_train_spin: limits.max_train_spin.unwrap_or(Duration::from_millis(250)),
            max_connections: limits.max_connections.unwrap_or(128),
            max_queued_trains: cli
                .max_queued_trains
                .or(limits.max_queued_trains)
                .unwrap_or(64),
            max_trains_per_client: limits.max_trains_per_client.unwrap_or(16),
            max_listeners: limits.max_listeners.unwrap_or(256),
            max_request_bytes: cli
                .max_request_bytes
                .or(limits.max_request_bytes)
                .unwrap_or(mgrp_core::api::DEFAULT_MAX_REQUEST),
            per_user_rate: (
                limits.probes_per_second_per_user.unwrap_or(50_000.0),
                limits
                    .probe_bytes_per_second_per_user
                    .unwrap_or(50_000_000.0),
            ),
            total_rate: (
                limits.probes_per_second.unwrap_or(100_000.0),
                limits.probe_bytes_per_second.unwrap_or(100_000_000.0),
            ),
            reassembly,
            max_held_bytes: pb.max_held_bytes.unwrap_or(32 << 20),
            max_destinations: limits.max_destinations.unwrap_or(1024),
            next_hops,
        })
    }

    /// Whether the kernel's strict reverse-path filter (`rp_filter=1`) can run on the
    /// TUN, and if not, why. A rider written into the TUN passes it only if the route
    /// back to its source leads into the TUN, which holds for the routed prefixes
    /// while their routes are installed: so only with permanent routes, and only if
    /// every IPv4 peer and every source a peer may speak for lies inside them.
    /// (IPv6 has no such filter; rider admission checks sources in both families.)
    pub fn strict_rp_filter(&self) -> Result<(), &'static str> {
        if !self.manage_routes {
            return Err("mgrpd installs no routes (--no-routes)");
        }
        if self.route_on_demand {
            return Err("routes are installed only while trains run");
        }
        let routed = |p: &Prefix| {
            p.addr().is_ipv6()
                || self
                    .routes
                    .iter()
                    .any(|r| r.prefix_len() <= p.len() && r.contains(&p.addr()))
        };
        let all_routed = self
            .peers
            .peers()
            .iter()
            .all(|peer| routed(&peer.prefix) && peer.allowed_sources.iter().all(routed));
        if all_routed {
            Ok(())
        } else {
            Err("a peer or a source it may speak for lies outside the routed prefixes")
        }
    }

    /// The MTU for the route of `net` into the TUN, when a UDP peer may carry its
    /// traffic: the longest packet that rides whole in one continuation to that peer
    /// ([`mgrp_core::planner::Path::whole_rider_room`]), so TCP sizes its segments to
    /// it and none is cut in two. `None` (the TUN's MTU) when only raw peers carry
    /// `net`: what does not ride reaches them as it came.
    pub fn route_mtu(&self, net: IpNet) -> Option<u16> {
        if !self.encap.any_udp() {
            return None;
        }
        let overlaps = |p: &Prefix| net.contains(&p.addr()) || p.contains(net.network());
        std::iter::once(self.peer_of(net.network()))
            .chain(
                self.encap
                    .per_peer
                    .iter()
                    .filter(|(p, e)| *e == Encap::Udp && overlaps(p))
                    .map(|(p, _)| p.addr()),
            )
            .filter(|peer| self.encap.for_peer(*peer) == Encap::Udp)
            .map(|peer| {
                self.encap
                    .path(peer, self.mtu)
                    .whole_rider_room(self.policy.trailer_len)
            })
            .min()
            .and_then(|room| u16::try_from(room).ok())
    }

    /// The MGRP peer that carries traffic for `dst`.
    pub fn peer_of(&self, dst: IpAddr) -> IpAddr {
        self.via.get(&dst).copied().unwrap_or(dst)
    }

    /// Where the source address of the route of `net` into the tunnel comes from:
    /// the configured one, else the host's address towards the endpoint of the peer
    /// that carries `net` (its learned endpoint if `learned` knows one, else its
    /// configured one, else its own address over raw IP). The peer admits riders
    /// from the address its MGRP packets come from, which is that one.
    pub fn source_plan(
        &self,
        net: IpNet,
        learned: impl Fn(IpAddr) -> Option<std::net::SocketAddr>,
    ) -> SourcePlan {
        let peer = self.peer_of(net.network());
        if let Some(s) = self.sources.for_peer(peer) {
            return SourcePlan::Configured(s);
        }
        if self.encap.for_peer(peer) != Encap::Udp {
            return SourcePlan::Toward {
                peer,
                endpoint: peer,
            };
        }
        match learned(peer).or_else(|| self.udp.configured_endpoint(peer)) {
            Some(e) => SourcePlan::Toward {
                peer,
                endpoint: e.ip(),
            },
            None => SourcePlan::Roaming(peer),
        }
    }
}

/// A source address must be one a host can have.
fn check_source(a: IpAddr, what: &str) -> Result<(), ConfigError> {
    if a.is_unspecified() || a.is_multicast() || a.is_loopback() {
        return Err(ConfigError(format!(
            "{what} {a}: give an address of this host that its peers know it by (not unspecified, multicast or loopback)"
        )));
    }
    Ok(())
}

fn read_file(path: &Path) -> Result<File, ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| bad(format!("cannot read config file {}: {e}", path.display())))?;
    toml::from_str(&text).map_err(|e| {
        let msg = e.to_string().replace('\n', " ");
        bad(format!("config file {}: {}", path.display(), msg.trim()))
    })
}

fn de_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    let s = String::deserialize(d)?;
    parse_duration(&s)
        .map(Some)
        .map_err(serde::de::Error::custom)
}

fn parse_peer(s: &str) -> Result<(IpAddr, IpAddr), String> {
    let (dst, peer) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?} is not DST=PEER"))?;
    let ip = |x: &str| {
        x.trim()
            .parse::<IpAddr>()
            .map_err(|_| format!("{x:?} is not an IP address"))
    };
    Ok((ip(dst)?, ip(peer)?))
}

fn parse_u32(s: &str) -> Result<u32, String> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16),
        None => s.parse(),
    };
    r.map_err(|_| format!("{s:?} is not a 32-bit number (decimal or 0x hex)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10ms"), Ok(Duration::from_millis(10)));
        assert_eq!(parse_duration("150us"), Ok(Duration::from_micros(150)));
        assert_eq!(parse_duration("150µs"), Ok(Duration::from_micros(150)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("10").unwrap_err().contains("unit"));
        assert!(parse_duration("ms").is_err());
    }

    #[test]
    fn defaults() {
        let c = Config::from_toml("").unwrap();
        assert_eq!(c.tun, "mgrp0");
        assert_eq!(c.protocol, 253);
        assert_eq!(c.policy.hold, Duration::from_millis(10));
        // Nothing waits and nothing is routed into the tunnel while nobody measures.
        assert_eq!(c.policy.hold_mode, HoldMode::OnDemand);
        assert!(c.route_on_demand);
        assert_eq!(c.busy_poll_margin, Duration::from_micros(150));
        assert_eq!(c.socket, PathBuf::from("/run/mgrp/mgrpd.sock"));
    }

    #[test]
    fn file_and_flags() {
        let c = keyed(
            r#"
            tun = "m1"
            routes = ["10.9.0.0/24"]
            hold = "5ms"
            hold-mode = "on-demand"
            local-prefixes = ["10.200.0.0/16"]
            [piggyback]
            packing = "multiple"
            max-train-fraction = 0.5
            first-n = 10
            [via]
            "10.9.0.7" = "10.9.0.1"
            [[peers]]
            prefix = "10.50.0.0/24"
            allowed-sources = ["192.168.0.0/16"]
            "#,
        )
        .unwrap();
        assert_eq!(c.tun, "m1");
        assert_eq!(c.policy.packing, Packing::Multiple);
        assert_eq!(c.policy.first_n, Some(10));
        assert!(c.route_on_demand);
        assert_eq!(
            c.peer_of("10.9.0.7".parse().unwrap()),
            "10.9.0.1".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            c.peer_of("10.9.0.8".parse().unwrap()),
            "10.9.0.8".parse::<IpAddr>().unwrap()
        );
        // Peers: the route, the via target, the table; nobody else.
        for (ip, peer) in [
            ("10.9.0.200", true),
            ("10.9.0.1", true),
            ("10.50.0.3", true),
            ("10.9.1.1", false),
            ("10.50.1.3", false),
        ] {
            assert_eq!(c.peers.is_peer(ip.parse().unwrap()), peer, "{ip}");
        }
        let table = c.peers.find("10.50.0.3".parse().unwrap()).unwrap();
        assert_eq!(table.allowed_sources.len(), 1);
        assert_eq!(c.peers.local().len(), 1);
        let cli = Cli::parse_from(["mgrpd", "--peer", "fd00::/64", "--local", "10.1.2.3"]);
        let c = Config::merge(File::default(), &cli).unwrap();
        assert!(c.peers.is_peer("fd00::9".parse().unwrap()));
        assert!(!c.peers.is_peer("10.9.0.200".parse().unwrap()));
        assert_eq!(c.peers.local().len(), 1);

        let cli = Cli::parse_from([
            "mgrpd",
            "--hold",
            "2ms",
            "--route",
            "10.1.0.0/16",
            "--fwmark",
            "0x10",
        ]);
        let c = Config::merge(toml::from_str("hold = \"5ms\"").unwrap(), &cli).unwrap();
        assert_eq!(c.policy.hold, Duration::from_millis(2));
        assert_eq!(c.fwmark, 0x10);
        assert_eq!(c.routes, ["10.1.0.0/16".parse::<IpNet>().unwrap()]);
    }

    #[test]
    fn strict_reverse_path_filtering_only_where_routes_lead_back() {
        let permanent =
            "hold-mode = \"on-demand\"\nroute-on-demand = false\nroutes = [\"10.1.0.0/16\"]\n";
        let c = Config::from_toml(permanent).unwrap();
        assert_eq!(c.strict_rp_filter(), Ok(()));
        // On demand, the route back exists only while trains run.
        let c = Config::from_toml("hold-mode = \"on-demand\"\nroutes = [\"10.1.0.0/16\"]").unwrap();
        assert!(c.strict_rp_filter().is_err());
        // Holding always keeps the routes installed; the default is on demand.
        let c = Config::from_toml("hold-mode = \"always\"\nroutes = [\"10.1.0.0/16\"]").unwrap();
        assert_eq!(c.strict_rp_filter(), Ok(()));
        let c = Config::from_toml("routes = [\"10.1.0.0/16\"]").unwrap();
        assert!(c.strict_rp_filter().is_err());
        // A peer outside the routes, or a source outside them, needs loose filtering.
        let c = Config::from_toml(&format!(
            "{permanent}[[peers]]\nprefix = \"192.0.2.1/32\"\n"
        ))
        .unwrap();
        assert!(c.strict_rp_filter().is_err());
        let c = keyed(&format!(
            "{permanent}[[peers]]\nprefix = \"10.1.0.1/32\"\nallowed-sources = [\"10.0.0.0/8\"]\n"
        ))
        .unwrap();
        assert!(c.strict_rp_filter().is_err());
        let c = keyed(&format!(
            "{permanent}[[peers]]\nprefix = \"10.1.0.1/32\"\nallowed-sources = [\"10.1.2.0/24\"]\n"
        ))
        .unwrap();
        assert_eq!(c.strict_rp_filter(), Ok(()));
    }

    #[test]
    fn wire_versions_default_to_2_and_are_chosen_per_peer() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let base = "routes = [\"10.0.0.2/32\"]\n";
        let c = Config::from_toml(base).unwrap();
        assert_eq!(c.encap.wire_for_peer(ip("10.0.0.2")), Version::V2);
        let c = Config::from_toml(&format!(
            "{base}wire = 1\n[[peers]]\nprefix = \"10.0.1.0/24\"\nwire = 2\n"
        ))
        .unwrap();
        assert_eq!(c.encap.wire_for_peer(ip("10.0.0.2")), Version::V1);
        assert_eq!(c.encap.wire_for_peer(ip("10.0.1.7")), Version::V2);
        assert_eq!(c.encap.path(ip("10.0.1.7"), 1500).wire, Version::V2);
        let e = Config::from_toml(&format!("{base}wire = 3\n")).unwrap_err();
        assert!(e.to_string().contains("use 1 or 2"), "{e}");
        assert_eq!(parse_wire("1"), Ok(Version::V1));
        assert!(parse_wire("v2").is_err());
    }

    #[test]
    fn a_route_sources_from_the_configured_address_else_towards_its_peers_endpoint() {
        use std::net::SocketAddr;
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let net = |s: &str| s.parse::<IpNet>().unwrap();
        let text = "routes = [\"10.0.0.2/32\", \"10.0.5.0/24\", \"10.0.6.0/24\", \"2001:db8::2/128\"]\n\
                    source = [\"192.0.2.1\"]\n\
                    via = { \"10.0.7.1\" = \"10.0.0.2\" }\n\
                    [[peers]]\nprefix = \"10.0.5.0/24\"\nsource = \"198.51.100.1\"\n\
                    [[peers]]\nprefix = \"10.0.6.0/24\"\nencap = \"udp\"\nendpoint = \"203.0.113.6:4253\"\n";
        let c = Config::from_toml(text).unwrap();
        let none = |_: IpAddr| None::<SocketAddr>;
        // A peer's own source, then the default of the family.
        assert_eq!(
            c.source_plan(net("10.0.5.0/24"), none),
            SourcePlan::Configured(ip("198.51.100.1"))
        );
        assert_eq!(
            c.source_plan(net("10.0.0.2/32"), none),
            SourcePlan::Configured(ip("192.0.2.1"))
        );
        // No IPv6 source configured: towards the peer itself (raw IP).
        assert_eq!(
            c.source_plan(net("2001:db8::2/128"), none),
            SourcePlan::Toward {
                peer: ip("2001:db8::2"),
                endpoint: ip("2001:db8::2")
            }
        );
        let c = Config::from_toml(&text.replace("source = [\"192.0.2.1\"]\n", "")).unwrap();
        // Traffic via a peer: towards that peer.
        assert_eq!(
            c.source_plan(net("10.0.7.1/32"), none),
            SourcePlan::Toward {
                peer: ip("10.0.0.2"),
                endpoint: ip("10.0.0.2")
            }
        );
        // A UDP peer: towards its endpoint, a learned one first.
        assert_eq!(
            c.source_plan(net("10.0.6.0/24"), none),
            SourcePlan::Toward {
                peer: ip("10.0.6.0"),
                endpoint: ip("203.0.113.6")
            }
        );
        let learned = |_: IpAddr| Some("203.0.113.99:61000".parse::<SocketAddr>().unwrap());
        assert_eq!(
            c.source_plan(net("10.0.6.0/24"), learned),
            SourcePlan::Toward {
                peer: ip("10.0.6.0"),
                endpoint: ip("203.0.113.99")
            }
        );
        for (bad, says) in [
            (
                "source = [\"192.0.2.1\", \"192.0.2.2\"]",
                "at most one IPv4 address",
            ),
            ("source = \"0.0.0.0\"", "not unspecified"),
            ("source = \"127.0.0.1\"", "loopback"),
            (
                "[[peers]]\nprefix = \"10.0.9.0/24\"\nsource = \"2001:db8::1\"",
                "not of the peer's address family",
            ),
        ] {
            let e = Config::from_toml(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
        let cli = Cli::parse_from(["mgrpd", "--source", "192.0.2.3", "--route", "10.0.0.2/32"]);
        let c = Config::merge(File::default(), &cli).unwrap();
        assert_eq!(c.sources.for_peer(ip("10.0.0.2")), Some(ip("192.0.2.3")));
        assert_eq!(c.sources.for_peer(ip("2001:db8::2")), None);
    }

    /// `text` with a top-level `key-file` (a private file holding `byte` 32 times);
    /// the file is removed once read.
    fn keyed_with(text: &str, byte: &str) -> Result<Config, ConfigError> {
        use std::os::unix::fs::PermissionsExt as _;
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let path = std::env::temp_dir().join(format!(
            "mgrpd-keyed-{}-{}.key",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::write(&path, byte.repeat(32)).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let c = Config::from_toml(&format!("key-file = \"{}\"\n{text}", path.display()));
        let _ = std::fs::remove_file(&path);
        c
    }

    fn keyed(text: &str) -> Result<Config, ConfigError> {
        keyed_with(text, "5a")
    }

    #[test]
    fn relaying_and_speaking_for_others_need_a_key() {
        for table in [
            "allowed-sources = [\"10.7.0.0/24\"]",
            "relay-to = [\"10.9.0.0/24\"]",
        ] {
            let text = format!("[[peers]]\nprefix = \"10.0.0.2/32\"\n{table}\n");
            let e = Config::from_toml(&text).unwrap_err().to_string();
            assert!(
                e.contains("but no key") && e.contains("mgrpd genkey"),
                "{e}"
            );
            assert!(keyed(&text).is_ok());
        }
    }

    #[test]
    fn tag_versions_and_the_state_directory() {
        let c = keyed("routes = [\"10.0.0.2/32\"]").unwrap();
        assert_eq!(c.auth, Scheme::V2);
        assert_eq!(c.state_dir, PathBuf::from("/var/lib/mgrp"));
        let c = keyed("auth = 1\nstate-dir = \"/tmp/s\"\nroutes = [\"10.0.0.2/32\"]").unwrap();
        assert_eq!((c.auth, c.state_dir), (Scheme::V1, PathBuf::from("/tmp/s")));
        let e = keyed("auth = 3").unwrap_err().to_string();
        assert!(e.contains("use 2"), "{e}");
        let e = Config::from_toml("next-key-file = \"/nonexistent\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("give key-file too"), "{e}");
    }

    #[test]
    fn udp_peers_their_endpoints_and_who_roams() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir();
        let key = |name: &str, byte: &str| {
            let path = dir.join(format!("mgrpd-udp-{}-{name}.key", std::process::id()));
            std::fs::write(&path, byte.repeat(32)).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
            path
        };
        let (ka, kb) = (key("a", "a1"), key("b", "b2"));
        let text = format!(
            "routes = [\"10.0.0.2/32\"]\nencap = \"udp:5000\"\nkey-file = \"{}\"\n\
             [[peers]]\nprefix = \"10.0.1.2/32\"\nkey-file = \"{}\"\nkeepalive = \"25s\"\n\
             [[peers]]\nprefix = \"10.0.2.0/24\"\nencap = \"udp:6000\"\nendpoint = \"192.0.2.9:7000\"\n\
             [[peers]]\nprefix = \"10.0.3.0/24\"\nencap = \"raw\"\n",
            kb.display(),
            ka.display()
        );
        let c = Config::from_toml(&text).unwrap();
        assert_eq!(c.udp.port, 5000);
        assert!(!c.route_on_demand, "UDP peers keep their routes");
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(c.encap.for_peer(ip("10.0.0.2")), Encap::Udp);
        assert_eq!(c.encap.for_peer(ip("10.0.3.1")), Encap::Raw);
        // The host with a key of its own roams: nowhere to send until heard from.
        let a = c.udp.peer(ip("10.0.1.2")).unwrap();
        assert!(a.roams && a.keepalive == Some(Duration::from_secs(25)));
        assert_eq!(c.udp.configured_endpoint(ip("10.0.1.2")), None);
        // A prefix with an endpoint goes there; a route's peer to its own address.
        let e: std::net::SocketAddr = "192.0.2.9:7000".parse().unwrap();
        assert_eq!(c.udp.configured_endpoint(ip("10.0.2.5")), Some(e));
        assert!(!c.udp.peer(ip("10.0.2.5")).unwrap().roams);
        assert_eq!(
            c.udp.configured_endpoint(ip("10.0.0.2")),
            Some("10.0.0.2:5000".parse().unwrap())
        );

        // A roaming peer's key must be its own.
        let shared = format!(
            "routes = [\"10.0.0.2/32\"]\nkey-file = \"{0}\"\nencap = \"udp\"\n[[peers]]\nprefix = \"10.0.1.2/32\"\nkey-file = \"{0}\"\n",
            ka.display()
        );
        let e = Config::from_toml(&shared).unwrap_err().to_string();
        assert!(e.contains("must be its own"), "{e}");
        for (bad, says) in [
            ("encap = \"udp:0\"", "udp:PORT"),
            ("encap = \"tcp\"", "udp:PORT"),
            ("encap = \"udp\"\nroute-on-demand = true", "route-on-demand"),
            (
                "[[peers]]\nprefix = \"10.0.9.0/24\"\nencap = \"udp\"\nkeepalive = \"25s\"",
                "one host",
            ),
            (
                "[[peers]]\nprefix = \"10.0.9.1/32\"\nencap = \"udp\"\nkeepalive = \"100ms\"",
                "at least 1s",
            ),
            (
                "[[peers]]\nprefix = \"10.0.9.1/32\"\nendpoint = \"192.0.2.1:1\"",
                "need encap",
            ),
        ] {
            let e = Config::from_toml(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
        let cli = Cli::parse_from(["mgrpd", "--encap", "udp:4300"]);
        let c = Config::merge(File::default(), &cli).unwrap();
        assert_eq!((c.udp.port, c.encap.default), (4300, Encap::Udp));
        let _ = (std::fs::remove_file(ka), std::fs::remove_file(kb));
    }

    #[test]
    fn routes_to_udp_peers_take_the_mtu_of_one_continuation() {
        let net = |s: &str| s.parse::<IpNet>().unwrap();
        let raw = Config::from_toml("routes = [\"10.0.0.0/16\"]\n").unwrap();
        assert_eq!(
            raw.route_mtu(net("10.0.0.0/16")),
            None,
            "raw peers: the TUN's"
        );
        let text = "routes = [\"10.0.0.0/16\", \"10.9.0.2/32\", \"fd00::2/128\"]\nencap = \"raw\"\n\
                    [[peers]]\nprefix = \"10.0.5.0/24\"\nencap = \"udp\"\n\
                    [[peers]]\nprefix = \"fd00::/64\"\nencap = \"udp\"\nwire = 1\n";
        let c = Config::from_toml(text).unwrap();
        // IPv4 20 + UDP 8 + a continuation's 2 + a whole rider's 2.
        assert_eq!(c.route_mtu(net("10.0.5.0/24")), Some(1500 - 32));
        // A route holding a UDP peer's prefix takes its MTU too; one holding none not.
        assert_eq!(c.route_mtu(net("10.0.0.0/16")), Some(1500 - 32));
        assert_eq!(c.route_mtu(net("10.9.0.2/32")), None);
        // IPv6 40 + UDP 8 + version 1's 28 and 12.
        assert_eq!(c.route_mtu(net("fd00::2/128")), Some(1500 - 88));
    }

    #[test]
    fn example_config_is_valid() {
        let c = Config::from_toml(include_str!("../mgrpd.example.toml")).unwrap();
        assert_eq!(c.routes.len(), 2);
        assert_eq!(c.policy.max_queued_bytes, 4_194_304);
        assert_eq!(c.reassembly.timeout, Duration::from_secs(1));
    }

    #[test]
    fn next_hop_devices_and_relay_prefixes() {
        let c = keyed(
            "[[peers]]\nprefix = \"10.0.0.2/32\"\nencap = \"udp\"\ndevice = \"mgrp-n\"\n\
             allowed-sources = [\"10.7.0.0/24\"]\nrelay-to = [\"10.9.0.0/24\"]\n\
             [[peers]]\nprefix = \"10.0.0.3/32\"\n",
        )
        .unwrap();
        assert_eq!(
            c.next_hops,
            vec![NextHopDevice {
                name: "mgrp-n".into(),
                peer: "10.0.0.2".parse().unwrap()
            }]
        );
        let member = c.peers.find("10.0.0.2".parse().unwrap()).unwrap();
        assert_eq!(member.relay_to, vec!["10.9.0.0/24".parse().unwrap()]);
        assert!(
            c.peers
                .find("10.0.0.3".parse().unwrap())
                .unwrap()
                .relay_to
                .is_empty()
        );
        for (text, says) in [
            ("prefix = \"10.0.0.0/24\"\ndevice = \"mgrp-n\"", "one host"),
            ("prefix = \"10.0.0.2/32\"\ndevice = \"mgrp0\"", "used twice"),
            (
                "prefix = \"10.0.0.2/32\"\ndevice = \"a-very-long-device-name\"",
                "interface name",
            ),
        ] {
            let e = Config::from_toml(&format!("[[peers]]\n{text}\n")).unwrap_err();
            assert!(e.to_string().contains(says), "{e}");
        }
    }

    #[test]
    fn errors_name_the_key() {
        let e = Config::from_toml("holdd = \"5ms\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("holdd"), "{e}");
        let e = Config::from_toml("hold = \"5\"").unwrap_err().to_string();
        assert!(e.contains("unit"), "{e}");
        let e = Config::from_toml("table = 254").unwrap_err().to_string();
        assert!(e.contains("reserved"), "{e}");
        let e = Config::from_toml("[piggyback]\nmax-train-fraction = 2.0")
            .unwrap_err()
            .to_string();
        assert!(e.contains("max-train-fraction"), "{e}");
        let e = Config::from_toml("tun = \"a/b\"").unwrap_err().to_string();
        assert!(e.contains("interface name"), "{e}");
        let e = Config::from_toml("[piggyback]\nmax-held-bytes = 1000")
            .unwrap_err()
            .to_string();
        assert!(e.contains("max-held-bytes"), "{e}");
        let e = Config::from_toml("[limits]\nmax-destinations = 0")
            .unwrap_err()
            .to_string();
        assert!(e.contains("max-destinations"), "{e}");
    }

    #[test]
    fn keys_come_from_private_files_and_every_peer_needs_one() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = std::env::temp_dir();
        let key = dir.join(format!("mgrpd-test-{}.key", std::process::id()));
        std::fs::write(&key, "ab".repeat(32)).unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        let toml = format!(
            "routes = [\"10.0.0.2/32\"]\nkey-file = \"{}\"",
            key.display()
        );
        let e = Config::from_toml(&toml).unwrap_err().to_string();
        assert!(e.contains("chmod 600"), "{e}");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        let c = Config::from_toml(&toml).unwrap();
        assert!(c.keys.enabled());
        assert_eq!(c.policy.trailer_len, TRAILER_LEN);
        assert!(c.keys.key_for("10.0.0.2".parse().unwrap()).is_some());
        assert!(
            !format!("{c:?}").contains(&"ab".repeat(32)),
            "keys never print"
        );
        // A per-peer key only: the route's peer has none.
        let toml = format!(
            "routes = [\"10.0.0.2/32\"]\n[[peers]]\nprefix = \"10.0.1.0/24\"\nkey-file = \"{}\"",
            key.display()
        );
        let e = Config::from_toml(&toml).unwrap_err().to_string();
        assert!(e.contains("10.0.0.2/32 has no key"), "{e}");
        std::fs::write(&key, "short").unwrap();
        let toml = format!("key-file = \"{}\"", key.display());
        let e = Config::from_toml(&toml).unwrap_err().to_string();
        assert!(e.contains("mgrpd genkey"), "{e}");
        let _ = std::fs::remove_file(&key);
        assert!(!Config::from_toml("").unwrap().keys.enabled());
    }
}
