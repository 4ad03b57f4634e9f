//! The configuration file as written, every key with its default in one place
//! ([`Settings::default`]); a missing key keeps it, and the flags are applied on top
//! ([`super::flags`]).

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use ipnet::IpNet;
use mgrp_core::auth::Scheme;
use mgrp_core::pair::PublicKey;
pub use mgrp_core::parse_duration;
use mgrp_core::peers::Prefix;
use mgrp_core::planner::Policy;
use mgrp_core::wire::Version;
use mgrp_service::logging::LogFormat;
use serde::{Deserialize, Deserializer};

/// The format version peers are sent unless told otherwise.
pub const DEFAULT_WIRE: Version = Version::V2;

/// The UDP port mgrpd uses unless told otherwise.
pub const DEFAULT_UDP_PORT: u16 = 4253;

/// The smallest gap between probes unless configured: at the default MTU a probe
/// rate of 2.4 Gbit/s, above what this daemon forwards, so it holds back no
/// measurement the tunnel could carry, while a train can no longer ask for "as fast
/// as the CPU goes".
pub const DEFAULT_MIN_GAP: Duration = Duration::from_micros(5);

/// The configuration file's top level. Flags override it ([`super::Cli::apply`]).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct Settings {
    pub(crate) tun: String,
    pub(crate) tun_address: Ipv4Addr,
    pub(crate) mtu: u16,
    pub(crate) tun_offload: bool,
    pub(crate) routes: Vec<IpNet>,
    pub(crate) socket: PathBuf,
    pub(crate) socket_group: Option<String>,
    pub(crate) metrics: Option<SocketAddr>,
    pub(crate) user: Option<String>,
    pub(crate) protocol: u8,
    pub(crate) fwmark: u32,
    pub(crate) table: u32,
    pub(crate) rule_priority: u32,
    pub(crate) no_routes: bool,
    #[serde(deserialize_with = "de_duration")]
    pub(crate) hold: Duration,
    pub(crate) hold_mode: HoldModeArg,
    /// Unset means yes where it can be (not with UDP peers); set to yes where it
    /// cannot be, it is refused.
    pub(crate) route_on_demand: Option<bool>,
    #[serde(deserialize_with = "de_pacer_cpu")]
    pub(crate) pacer_cpu: PacerCpu,
    pub(crate) realtime: bool,
    #[serde(deserialize_with = "de_duration")]
    pub(crate) busy_poll_margin: Duration,
    #[serde(deserialize_with = "de_duration")]
    pub(crate) late_threshold: Duration,
    pub(crate) kernel_departures: bool,
    pub(crate) super_packets: bool,
    pub(crate) log_level: String,
    #[serde(deserialize_with = "de_from_str")]
    pub(crate) log_format: LogFormat,
    pub(crate) piggyback: PiggybackSettings,
    pub(crate) via: BTreeMap<IpAddr, IpAddr>,
    pub(crate) peers: Vec<PeerSettings>,
    /// `--peer`: hosts MGRP packets are also taken from, with nothing else said of
    /// them (the file says it in a `[[peers]]` table).
    #[serde(skip)]
    pub(crate) peer_prefixes: Vec<Prefix>,
    pub(crate) local_prefixes: Vec<Prefix>,
    #[serde(deserialize_with = "de_sources")]
    pub(crate) source: Vec<IpAddr>,
    pub(crate) key_file: Option<PathBuf>,
    pub(crate) next_key_file: Option<PathBuf>,
    /// This host's own private key, for the keys it derives with each peer that has a
    /// `public-key`.
    pub(crate) private_key_file: Option<PathBuf>,
    /// The other private key of this host's key-pair rotation: keys derived from it
    /// open packets but seal none.
    pub(crate) next_private_key_file: Option<PathBuf>,
    #[serde(deserialize_with = "de_auth")]
    pub(crate) auth: Scheme,
    #[serde(deserialize_with = "de_opt_auth")]
    pub(crate) auth_accept: Option<Scheme>,
    pub(crate) state_dir: PathBuf,
    /// A mesh description this host takes its peers and routes from: a file or an
    /// `https://` URL.
    pub(crate) mesh: Option<String>,
    /// The authority that signed the certificate of the server a mesh URL names.
    pub(crate) mesh_ca_file: Option<PathBuf>,
    /// A token the server a mesh URL names asks for.
    pub(crate) mesh_token_file: Option<PathBuf>,
    /// How often the description is read again and put in force, if at all.
    #[serde(deserialize_with = "de_opt_duration")]
    pub(crate) mesh_refresh: Option<Duration>,
    /// This host's name in the mesh.
    pub(crate) node: Option<String>,
    #[serde(deserialize_with = "de_encap")]
    pub(crate) encap: EncapArg,
    #[serde(deserialize_with = "de_wire")]
    pub(crate) wire: Version,
    pub(crate) limits: LimitsSettings,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            tun: "mgrp0".into(),
            tun_address: Ipv4Addr::new(169, 254, 77, 1),
            mtu: 1500,
            tun_offload: true,
            routes: Vec::new(),
            socket: PathBuf::from("/run/mgrp/mgrpd.sock"),
            socket_group: None,
            metrics: None,
            user: None,
            protocol: 253,
            fwmark: 0x4d47,
            table: 4242,
            rule_priority: 4242,
            no_routes: false,
            hold: Policy::default().hold,
            hold_mode: HoldModeArg::OnDemand,
            route_on_demand: None,
            pacer_cpu: PacerCpu::Auto,
            realtime: true,
            busy_poll_margin: Duration::from_micros(150),
            late_threshold: Duration::from_micros(50),
            kernel_departures: true,
            super_packets: true,
            log_level: "info".into(),
            log_format: LogFormat::Text,
            piggyback: PiggybackSettings::default(),
            via: BTreeMap::new(),
            peers: Vec::new(),
            peer_prefixes: Vec::new(),
            local_prefixes: Vec::new(),
            source: Vec::new(),
            key_file: None,
            next_key_file: None,
            private_key_file: None,
            next_private_key_file: None,
            auth: Scheme::default(),
            auth_accept: None,
            state_dir: PathBuf::from("/var/lib/mgrp"),
            mesh: None,
            mesh_ca_file: None,
            mesh_token_file: None,
            mesh_refresh: None,
            node: None,
            encap: EncapArg::Raw,
            wire: DEFAULT_WIRE,
            limits: LimitsSettings::default(),
        }
    }
}

/// `[piggyback]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct PiggybackSettings {
    pub(crate) packing: PackingArg,
    pub(crate) max_train_fraction: f64,
    /// 0: every probe may carry riders.
    pub(crate) first_n: u16,
    pub(crate) min_fragment: usize,
    pub(crate) max_queued_riders: usize,
    pub(crate) max_queued_bytes: usize,
    pub(crate) max_held_bytes: usize,
}

impl Default for PiggybackSettings {
    fn default() -> Self {
        let p = Policy::default();
        Self {
            packing: PackingArg::One,
            max_train_fraction: p.max_train_fraction,
            first_n: 0,
            min_fragment: p.min_fragment,
            max_queued_riders: p.max_queued_riders,
            max_queued_bytes: p.max_queued_bytes,
            max_held_bytes: 32 << 20,
        }
    }
}

/// `[limits]`: what requesters may ask of the daemon, and what it keeps.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct LimitsSettings {
    pub(crate) max_probes_per_train: usize,
    #[serde(deserialize_with = "de_duration")]
    pub(crate) min_gap: Duration,
    #[serde(deserialize_with = "de_duration")]
    pub(crate) max_gap: Duration,
    #[serde(deserialize_with = "de_duration")]
    pub(crate) max_train_duration: Duration,
    #[serde(deserialize_with = "de_duration")]
    pub(crate) max_train_spin: Duration,
    pub(crate) max_connections: usize,
    pub(crate) max_queued_trains: usize,
    pub(crate) max_trains_per_client: usize,
    pub(crate) max_trains_in_flight: usize,
    pub(crate) max_listeners: usize,
    pub(crate) max_request_bytes: usize,
    pub(crate) max_destinations: usize,
    pub(crate) probes_per_second_per_user: f64,
    pub(crate) probe_bytes_per_second_per_user: f64,
    pub(crate) probes_per_second: f64,
    pub(crate) probe_bytes_per_second: f64,
    pub(crate) reassembly_bytes: usize,
    pub(crate) reassembly_bytes_per_peer: usize,
    #[serde(deserialize_with = "de_duration")]
    pub(crate) reassembly_timeout: Duration,
}

impl Default for LimitsSettings {
    fn default() -> Self {
        let r = mgrp_core::reassembly::Limits::default();
        Self {
            max_probes_per_train: 10_000,
            min_gap: DEFAULT_MIN_GAP,
            max_gap: Duration::from_secs(1),
            max_train_duration: Duration::from_secs(30),
            max_train_spin: Duration::from_millis(250),
            max_connections: 128,
            max_queued_trains: 64,
            max_trains_per_client: 16,
            max_trains_in_flight: 16,
            max_listeners: 256,
            max_request_bytes: mgrp_core::api::DEFAULT_MAX_REQUEST,
            max_destinations: 1024,
            probes_per_second_per_user: 50_000.0,
            probe_bytes_per_second_per_user: 50_000_000.0,
            probes_per_second: 100_000.0,
            probe_bytes_per_second: 100_000_000.0,
            reassembly_bytes: r.total_bytes,
            reassembly_bytes_per_peer: r.per_peer_bytes,
            reassembly_timeout: r.timeout,
        }
    }
}

/// One `[[peers]]` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct PeerSettings {
    pub(crate) prefix: Prefix,
    pub(crate) name: Option<String>,
    #[serde(default)]
    pub(crate) allowed_sources: Vec<Prefix>,
    pub(crate) key_file: Option<PathBuf>,
    pub(crate) next_key_file: Option<PathBuf>,
    /// The peer's public key: the key with it is derived from this host's private key.
    #[serde(default, deserialize_with = "de_opt_public_key")]
    pub(crate) public_key: Option<PublicKey>,
    /// The peer's other public key during its key-pair rotation (opens only).
    #[serde(default, deserialize_with = "de_opt_public_key")]
    pub(crate) next_public_key: Option<PublicKey>,
    #[serde(default, deserialize_with = "de_opt_encap")]
    pub(crate) encap: Option<EncapArg>,
    pub(crate) endpoint: Option<SocketAddr>,
    #[serde(default, deserialize_with = "de_opt_duration")]
    pub(crate) keepalive: Option<Duration>,
    #[serde(default, deserialize_with = "de_opt_wire")]
    pub(crate) wire: Option<Version>,
    pub(crate) source: Option<IpAddr>,
    #[serde(default)]
    pub(crate) relay_to: Vec<Prefix>,
    pub(crate) device: Option<String>,
}

impl PeerSettings {
    /// Whether the table names one host (a /32 or /128 prefix).
    pub(crate) fn single(&self) -> bool {
        self.prefix.len()
            == if self.prefix.addr().is_ipv4() {
                32
            } else {
                128
            }
    }
}

/// Where the pacer runs, and which CPU the daemon's other threads keep off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PacerCpu {
    /// When the pacer asks for SCHED_FIFO and the daemon may run on two CPUs or more:
    /// the last of them, kept for the pacer. Otherwise anywhere.
    #[default]
    Auto,
    /// This CPU, kept for the pacer when the daemon may run on another.
    Cpu(usize),
    /// Anywhere, and so are the other threads.
    Unpinned,
}

impl std::fmt::Display for PacerCpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Auto => f.write_str("auto"),
            Self::Cpu(c) => write!(f, "{c}"),
            Self::Unpinned => f.write_str("none"),
        }
    }
}

impl std::str::FromStr for PacerCpu {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "auto" => Ok(Self::Auto),
            "none" => Ok(Self::Unpinned),
            n => n
                .parse()
                .map(Self::Cpu)
                .map_err(|_| format!("pacer-cpu {s:?}: use a CPU number, \"auto\" or \"none\"")),
        }
    }
}

/// `pacer-cpu = 3` or `pacer-cpu = "auto"`.
fn de_pacer_cpu<'de, D: Deserializer<'de>>(d: D) -> Result<PacerCpu, D::Error> {
    struct V;
    impl serde::de::Visitor<'_> for V {
        type Value = PacerCpu;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a CPU number, \"auto\" or \"none\"")
        }

        fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<PacerCpu, E> {
            usize::try_from(n)
                .map(PacerCpu::Cpu)
                .map_err(|_| E::custom(format!("CPU {n} does not exist")))
        }

        fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<PacerCpu, E> {
            u64::try_from(n)
                .map_err(|_| E::custom(format!("pacer-cpu {n}: CPUs are numbered from 0")))
                .and_then(|n| self.visit_u64(n))
        }

        fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<PacerCpu, E> {
            s.parse().map_err(E::custom)
        }
    }
    d.deserialize_any(V)
}

/// An `encap` value: raw IP, or UDP with a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EncapArg {
    /// IP protocol `protocol`.
    Raw,
    /// UDP, to this port if one is given.
    Udp(Option<u16>),
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

/// `raw`, `udp` or `udp:PORT`.
pub(crate) fn parse_encap(s: &str) -> Result<EncapArg, String> {
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

/// A tag scheme by its number.
pub(crate) fn auth_scheme(n: u8) -> Result<Scheme, String> {
    Scheme::from_number(n)
        .ok_or_else(|| format!("auth {n}: use 3 (or 2 or 1 while peers are upgraded)"))
}

/// A wire version by its number.
pub(crate) fn wire_version(n: u8) -> Result<Version, String> {
    Version::from_number(n).ok_or_else(|| format!("wire version {n}: use 1 or 2"))
}

fn de_from_str<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: std::str::FromStr<Err = String>,
{
    String::deserialize(d)?
        .parse()
        .map_err(serde::de::Error::custom)
}

fn de_opt_public_key<'de, D: Deserializer<'de>>(d: D) -> Result<Option<PublicKey>, D::Error> {
    String::deserialize(d)?
        .parse()
        .map(Some)
        .map_err(serde::de::Error::custom)
}

fn de_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    parse_duration(&String::deserialize(d)?).map_err(serde::de::Error::custom)
}

fn de_opt_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    de_duration(d).map(Some)
}

fn de_encap<'de, D: Deserializer<'de>>(d: D) -> Result<EncapArg, D::Error> {
    parse_encap(&String::deserialize(d)?).map_err(serde::de::Error::custom)
}

fn de_opt_encap<'de, D: Deserializer<'de>>(d: D) -> Result<Option<EncapArg>, D::Error> {
    de_encap(d).map(Some)
}

fn de_auth<'de, D: Deserializer<'de>>(d: D) -> Result<Scheme, D::Error> {
    auth_scheme(u8::deserialize(d)?).map_err(serde::de::Error::custom)
}

fn de_opt_auth<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Scheme>, D::Error> {
    de_auth(d).map(Some)
}

fn de_wire<'de, D: Deserializer<'de>>(d: D) -> Result<Version, D::Error> {
    wire_version(u8::deserialize(d)?).map_err(serde::de::Error::custom)
}

fn de_opt_wire<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Version>, D::Error> {
    de_wire(d).map(Some)
}

/// `source = "ADDR"` or `source = ["ADDR", "ADDR"]`.
fn de_sources<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<IpAddr>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(IpAddr),
        Many(Vec<IpAddr>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(a) => vec![a],
        OneOrMany::Many(v) => v,
    })
}
