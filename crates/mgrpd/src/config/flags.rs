//! The command line: each flag overrides the configuration file's key of the same
//! name ([`Cli::apply`]); the defaults shown in `--help` are [`Settings::default`]'s.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use ipnet::IpNet;
use mgrp_core::auth::Scheme;
use mgrp_core::peers::Prefix;
use mgrp_core::wire::Version;
use mgrp_service::logging::LogFormat;

use super::settings::{
    EncapArg, HoldModeArg, PacerCpu, PackingArg, Settings, auth_scheme, parse_duration,
    parse_encap, wire_version,
};

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
        queued packets and sends the trains with exact gaps, over raw IP (protocol 253) or, \
        through NATs and firewalls, UDP (--encap). On the receiving \
        side it takes the packets out again, writes them back through its TUN, and hands \
        the probes with kernel timestamps to the tools listening for them.\n\n\
        Needs CAP_NET_ADMIN and CAP_NET_RAW (run as root). See mgrpd.example.toml for a \
        commented configuration file, and docs/mgrpd.md in the source repository for \
        the guide (peers, source addresses, keys, UDP and NATs, wire versions). `mgrpd genkey` prints a new key for --key-file."
)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Cli {
    /// What to do instead of running the daemon.
    #[command(subcommand)]
    pub command: Option<Command>,
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
    /// The CPU kept for the pacer: the daemon's other threads keep off it. `auto`: the
    /// last CPU the daemon may run on, when the pacer asks for SCHED_FIFO and there
    /// are two or more; `none`: no CPU kept [default: auto].
    #[arg(long, value_name = "N|auto|none")]
    pub pacer_cpu: Option<PacerCpu>,
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
    /// How log lines look: `text`, or `json` (one object a line); RUST_LOG, when set,
    /// overrides the level with its directives [default: text].
    #[arg(long, value_name = "text|json")]
    pub log_format: Option<LogFormat>,
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
    /// rotation (see the guide). SIGHUP re-reads every key file, with the peers and
    /// routes.
    #[arg(long, value_name = "FILE")]
    pub next_key_file: Option<PathBuf>,
    /// This host's own private key (file mode 0600; make one with `mgrpd genkey
    /// --private`, and give its public key, `mgrpd pubkey`, to the peers): the key
    /// with each peer whose [[peers]] table has a public-key is derived from the two,
    /// so no secret is copied between hosts.
    #[arg(long, value_name = "FILE")]
    pub private_key_file: Option<PathBuf>,
    /// The other private key of a key-pair rotation: keys derived from it open
    /// packets but seal none (see the guide).
    #[arg(long, value_name = "FILE")]
    pub next_private_key_file: Option<PathBuf>,
    /// Take peers and routes from this mesh description (docs/mesh.md), a file or an
    /// https:// URL: each member this host measures with becomes a peer, named, with
    /// its public key, and a route. Needs --node.
    #[arg(long, value_name = "FILE|URL")]
    pub mesh: Option<String>,
    /// The authority (PEM) that signed the certificate of the server a --mesh URL
    /// names.
    #[arg(long, value_name = "FILE")]
    pub mesh_ca_file: Option<PathBuf>,
    /// A file holding the bearer token the server a --mesh URL names asks for.
    #[arg(long, value_name = "FILE")]
    pub mesh_token_file: Option<PathBuf>,
    /// Read (fetch) the mesh description again this often and put what changed in
    /// force, as SIGHUP does (e.g. 5m; at least 1s).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub mesh_refresh: Option<Duration>,
    /// This host's name in the mesh description.
    #[arg(long, value_name = "NAME")]
    pub node: Option<String>,
    /// How tags are computed: 3 binds each packet to its direction (who sealed it,
    /// for whom), so a reflected packet is refused, and names its key by an index, so
    /// a packet costs one key lookup; 2 (no index) and 1 (no direction: a reflected
    /// packet is believed) are what older mgrpd sent, for an upgrade only (mgrpd
    /// takes its own scheme and every later one, and warns) [default: 3].
    #[arg(long, value_name = "1|2|3", value_parser = parse_auth)]
    pub auth: Option<Scheme>,
    /// The oldest tags version taken, for the last step of an upgrade: with
    /// `--auth 3 --auth-accept 2` a daemon seals with version 3 and still takes the
    /// version 2 of peers not yet switched [default: the --auth version].
    #[arg(long, value_name = "1|2|3", value_parser = parse_auth)]
    pub auth_accept: Option<Scheme>,
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

impl Cli {
    /// Applies the flags given onto `s`, the file's settings: a value flag replaces its
    /// key, a `--no-…` switch turns its key off, and a repeatable flag adds to its
    /// key's list (`--source`, which names this host, replaces it).
    pub(crate) fn apply(&self, s: &mut Settings) {
        // `key => flag`: the key takes the flag's value; `key => Some(flag)`: an
        // optional key does.
        macro_rules! set {
            ($($key:expr => $($some:ident)? ($flag:ident)),* $(,)?) => {
                $(if let Some(v) = &self.$flag {
                    $key = $($some)? (v.clone());
                })*
            };
        }
        set! {
            s.tun => (tun),
            s.tun_address => (tun_address),
            s.mtu => (mtu),
            s.socket => (socket),
            s.socket_group => Some(socket_group),
            s.metrics => Some(metrics),
            s.user => Some(user),
            s.protocol => (protocol),
            s.fwmark => (fwmark),
            s.table => (table),
            s.rule_priority => (rule_priority),
            s.hold => (hold),
            s.hold_mode => (hold_mode),
            s.route_on_demand => Some(route_on_demand),
            s.pacer_cpu => (pacer_cpu),
            s.busy_poll_margin => (busy_poll_margin),
            s.late_threshold => (late_threshold),
            s.log_level => (log_level),
            s.log_format => (log_format),
            s.key_file => Some(key_file),
            s.next_key_file => Some(next_key_file),
            s.private_key_file => Some(private_key_file),
            s.next_private_key_file => Some(next_private_key_file),
            s.mesh => Some(mesh),
            s.mesh_ca_file => Some(mesh_ca_file),
            s.mesh_token_file => Some(mesh_token_file),
            s.mesh_refresh => Some(mesh_refresh),
            s.node => Some(node),
            s.auth => (auth),
            s.auth_accept => Some(auth_accept),
            s.state_dir => (state_dir),
            s.encap => (encap),
            s.wire => (wire),
            s.piggyback.packing => (packing),
            s.piggyback.max_train_fraction => (max_train_fraction),
            s.piggyback.first_n => (first_n),
            s.limits.max_probes_per_train => (max_probes_per_train),
            s.limits.max_queued_trains => (max_queued_trains),
            s.limits.max_request_bytes => (max_request_bytes),
            s.limits.min_gap => (min_gap),
        }
        for (key, off) in [
            (&mut s.tun_offload, self.no_tun_offload),
            (&mut s.realtime, self.no_realtime),
            (&mut s.kernel_departures, self.no_kernel_departures),
            (&mut s.super_packets, self.no_super_packets),
        ] {
            *key &= !off;
        }
        s.no_routes |= self.no_routes;
        s.routes.extend(&self.routes);
        s.via.extend(self.via.iter().copied());
        s.local_prefixes.extend(&self.local);
        s.peer_prefixes.extend(&self.peers);
        if !self.sources.is_empty() {
            s.source.clone_from(&self.sources);
        }
    }
}

/// What mgrpd does instead of running.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum Command {
    /// Print a new random key for --key-file (32 bytes as hex) and exit:
    /// `mgrpd genkey > FILE && chmod 600 FILE`, then copy FILE to the peers. With
    /// --private, a private key for --private-key-file instead, which stays on this
    /// host: `(umask 077; mgrpd genkey --private > FILE)`.
    Genkey {
        /// Print a private key of a key pair (X25519) instead of a shared key.
        #[arg(long)]
        private: bool,
    },
    /// Read a private key on standard input and print its public key, for the peers'
    /// public-key: `mgrpd pubkey < FILE`.
    Pubkey,
}

fn parse_auth(s: &str) -> Result<Scheme, String> {
    s.trim()
        .parse::<u8>()
        .ok()
        .and_then(|n| auth_scheme(n).ok())
        .ok_or_else(|| format!("auth {s:?}: use 3 (or 2 or 1 while peers are upgraded)"))
}

pub(super) fn parse_wire(s: &str) -> Result<Version, String> {
    s.trim()
        .parse::<u8>()
        .ok()
        .and_then(|n| wire_version(n).ok())
        .ok_or_else(|| format!("wire version {s:?}: use 1 or 2"))
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
