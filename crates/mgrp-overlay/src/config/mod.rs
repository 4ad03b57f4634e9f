//! The overlay's configuration: one TOML file (see `mgrp-overlay.example.toml`,
//! every key commented), checked in one place so that a bad value is reported in one
//! line that names the key and what would be accepted.
//!
//! - `check`: the error and the checks every section shares.
//! - `link`: the `[[link]]` sections.
//! - `prediction`: the `[btc]` section.
//! - [`tls`]: the API's certificate and key.

mod check;
mod link;
mod matrix;
mod mesh;
mod prediction;
pub mod reload;
pub mod tls;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use matrix::MatrixSettings;
pub use mesh::budget_costs;
use pathload_rs::control::{DEFAULT_PROBE_PORT, Transport};
use serde::Deserialize;

use mgrp_service::settings::{check_name, seconds};

pub use self::check::ConfigError;
use self::check::invalid;
use self::link::LinkFile;
pub use self::link::{DEFAULT_MGRP_PORT, DEFAULT_UDP_PORT, Link};
use self::prediction::PredictionFile;
pub use self::prediction::PredictionSettings;
pub use crate::measure::registry::Method;

/// Where the HTTP API listens unless told otherwise: this host only.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7700";

/// The most exclusive runs into one node at once (`max-running`).
pub const MAX_RUNNING: usize = 16;

/// The node's whole configuration. Its `Debug` form leaves the token out.
#[derive(Clone, PartialEq)]
pub struct Config {
    /// This node's name.
    pub name: String,
    /// Where the HTTP API, `/metrics` and the status page listen.
    pub listen: SocketAddr,
    /// When set, every request must carry `Authorization: Bearer <token>` (or
    /// `?token=` for the status page).
    pub token: Option<String>,
    /// When set, the API is served over TLS only (`tls-cert`, `tls-key`).
    pub tls: Option<tls::ServerTls>,
    /// The operator means the API to answer anyone who reaches it: without a token,
    /// an address beyond loopback is refused unless this is set (`open-api`).
    pub open_api: bool,
    /// mgrpd's API socket.
    pub socket: PathBuf,
    /// Exclusive runs into this node that may be in flight at once (background runs
    /// are not counted).
    pub max_running: usize,
    /// Where the mesh description's probe budget falls short of its own age goal
    /// (the links run within the budget, at the age it affords).
    pub budget_shortfalls: Vec<String>,
    /// Estimates kept per link.
    pub history: usize,
    /// Where each link's history is kept across restarts; `None`: in memory only.
    pub state_dir: Option<PathBuf>,
    /// Transports this node serves its neighbours' measurements over, with their
    /// control ports.
    pub serve: Vec<(Transport, u16)>,
    /// Whether application traffic may ride in the probes this node sends.
    pub serve_piggyback: bool,
    /// The hosts it serves measurements to: any (empty) or those inside these.
    pub serve_allow: Vec<mgrp_core::peers::Prefix>,
    /// Probe bytes each of them may have per hour.
    pub serve_bytes_per_hour: u64,
    /// The probe rate each of them may have, averaged over 10 s, bit/s.
    pub serve_probe_bps: u64,
    /// How many bits of an IPv6 address make one requester for every limit.
    pub serve_ipv6_prefix: u8,
    /// How much each server serves at once (`[serve] max-measurements` and the
    /// others; a mesh's budget plan raises them where it needs more).
    pub serve_limits: mgrp_tool::server::SenderLimits,
    /// The links into this node.
    pub links: Vec<Link>,
    /// How the transfer-rate (BTC) prediction is made.
    pub prediction: PredictionSettings,
    /// Whether estimates from the applications' own TCP flows (the neighbour's
    /// kernel's view of them) stand in for active runs of bandwidth links while they
    /// flow (`[passive] enabled`).
    pub passive: bool,
    /// Whether the applications' segments from each neighbour are stamped at both
    /// ends for passive dispersion and trend estimates (`[passive] timing`; needs
    /// CAP_NET_RAW here and at the neighbour).
    pub passive_timing: bool,
    /// Route control (`[routing]`), when configured.
    pub routing: Option<mgrp_route::settings::Routing>,
    /// The first probe port a link may take (`probe-port-base`).
    pub probe_port_base: u16,
    /// How often the mesh description is read again (`mesh-refresh`), if at all.
    pub mesh_refresh: Option<Duration>,
    /// The mesh's matrix this node collects (`[matrix]`), if it does.
    pub matrix: Option<MatrixSettings>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct File {
    name: Option<String>,
    listen: Option<String>,
    token_file: Option<PathBuf>,
    open_api: Option<bool>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    socket: Option<PathBuf>,
    max_running: Option<usize>,
    history: Option<usize>,
    state_dir: Option<PathBuf>,
    probe_port_base: Option<u16>,
    #[serde(default)]
    serve: ServeFile,
    #[serde(default, rename = "link")]
    links: Vec<LinkFile>,
    #[serde(default)]
    btc: PredictionFile,
    #[serde(default)]
    passive: PassiveFile,
    routing: Option<mgrp_route::settings::RoutingFile>,
    matrix: Option<matrix::MatrixFile>,
    /// A mesh description this node takes its links from (docs/mesh.md): a file,
    /// or an `https://` URL.
    mesh: Option<String>,
    /// The authority that signed the certificate of the server a mesh URL names.
    mesh_ca_file: Option<PathBuf>,
    /// A token the server a mesh URL names asks for.
    mesh_token_file: Option<PathBuf>,
    /// How often the description is read again (fetched again), and put in force when
    /// it changed.
    mesh_refresh: Option<String>,
    /// This node's name in the mesh.
    node: Option<String>,
    /// Where the mesh's probe budget falls short of its own age goal.
    #[serde(skip)]
    budget_shortfalls: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct PassiveFile {
    enabled: Option<bool>,
    timing: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct ServeFile {
    transports: Option<Vec<Transport>>,
    mgrp_port: Option<u16>,
    udp_port: Option<u16>,
    piggyback: Option<bool>,
    allow: Option<Vec<String>>,
    max_mb_per_hour: Option<f64>,
    max_probe_mbps: Option<f64>,
    ipv6_prefix: Option<u8>,
    pub(super) max_measurements: Option<usize>,
    pub(super) max_measurements_per_requester: Option<usize>,
    max_exclusive: Option<usize>,
    max_waiting: Option<usize>,
    max_connections: Option<usize>,
    max_connections_per_requester: Option<usize>,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("name", &self.name)
            .field("listen", &self.listen)
            .field("token", &self.token.as_ref().map(|_| "(set, not shown)"))
            .field("socket", &self.socket)
            .field("max_running", &self.max_running)
            .field("budget_shortfalls", &self.budget_shortfalls)
            .field("history", &self.history)
            .field("state_dir", &self.state_dir)
            .field("serve", &self.serve)
            .field("serve_piggyback", &self.serve_piggyback)
            .field("links", &self.links)
            .field("prediction", &self.prediction)
            .field("passive", &self.passive)
            .field("routing", &self.routing)
            .field("probe_port_base", &self.probe_port_base)
            .field("mesh_refresh", &self.mesh_refresh)
            .field("matrix", &self.matrix)
            .finish()
    }
}

fn yes_no(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

impl Config {
    /// What an operator needs to see of the settings in force, in words, without the
    /// token: one line per setting of the node, one per link.
    pub fn summary(&self) -> String {
        let mut out = String::new();
        let scope = if self.listen.ip().is_loopback() {
            "this host only"
        } else {
            "reachable from other hosts"
        };
        let token = if self.token.is_some() {
            "required (from token-file)"
        } else {
            "none"
        };
        out.push_str(&format!("node {}\n", self.name));
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        out.push_str(&format!(
            "  API, /metrics and status page: {scheme}://{}/ ({scope}); token: {token}\n",
            self.listen
        ));
        out.push_str(&format!("  mgrpd socket: {}\n", self.socket.display()));
        out.push_str(&format!(
            "  runs into this node at once: {}; estimates kept per link: {}, {}\n",
            self.max_running,
            self.history,
            self.state_dir.as_ref().map_or_else(
                || "in memory only (no state-dir)".to_string(),
                |d| format!("across restarts in {}", d.display())
            )
        ));
        let serve: Vec<String> = self
            .serve
            .iter()
            .map(|(t, p)| format!("{t} on control port {p}"))
            .collect();
        out.push_str(&format!(
            "  serves its neighbours' measurements: {}; riders in the probes it sends: {}\n",
            if serve.is_empty() {
                "no".to_string()
            } else {
                serve.join(", ")
            },
            yes_no(self.serve_piggyback)
        ));
        out.push_str(&format!(
            "  serves: {}; at most {:.0} MB of probes per hour to each\n",
            if self.serve_allow.is_empty() {
                "any host that reaches its control ports".to_string()
            } else {
                self.serve_allow
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            },
            self.serve_bytes_per_hour as f64 / 1e6
        ));
        let b = &self.prediction;
        out.push_str(&format!(
            "  transfer-rate prediction: available bandwidth x {} (tight link like the narrow one), x {} (unlike), x {} (undecided); neighbours' kernels asked about their TCP flows {}; estimates used up to {} old; Mathis with {}-byte segments, {}; {}\n",
            b.factors.like_narrow,
            b.factors.unlike_narrow,
            b.factors.undecided,
            b.kernel_poll
                .map_or_else(|| "never".to_string(), |p| format!("every {}", seconds(p))),
            seconds(b.max_age),
            b.mss,
            if b.bbr {
                "shown but not capping (BBR senders)"
            } else {
                "capping (loss-based senders)"
            },
            b.history.map_or_else(
                || "earlier flows left out".to_string(),
                |h| format!(
                    "earlier flows blended in up to {} old unless the probes changed by more than x{}",
                    seconds(Duration::from_secs_f64(h.max_age_s)),
                    h.change
                )
            )
        ));
        out.push_str(&format!(
            "  passive estimates from the applications' TCP flows: {}\n",
            if self.passive {
                "stand in for bandwidth links' runs while a network-limited flow runs (links with active-always excepted)"
            } else {
                "off ([passive] enabled = false)"
            }
        ));
        out.push_str(&format!(
            "  passive packet timing (dispersion, trend): {}\n",
            if self.passive_timing {
                "the applications' segments stamped by the kernel at both ends, headers only"
            } else {
                "off"
            }
        ));
        if let Some(r) = &self.routing {
            out.push_str(&r.summary());
        }
        out.push_str(&format!("links into this node: {}\n", self.links.len()));
        for l in &self.links {
            let t = &l.timing;
            let ride = t.ride_min_bps.map_or(String::new(), |b| {
                format!(
                    ", waits up to {} for {b} bit/s of traffic to ride",
                    t.ride_max_wait
                        .map_or_else(|| "one interval".to_string(), seconds)
                )
            });
            out.push_str(&format!(
                "  {}: from {} port {} over {}, {}, every {} ±{:.0} %, at most {} a run, after failures {} doubling to {}, riders: {}{ride}, probes to port {}{}{}\n",
                l.name,
                l.from,
                l.port,
                l.transport,
                l.method.name(),
                seconds(t.interval),
                t.jitter * 100.0,
                seconds(l.time_limit),
                seconds(t.backoff),
                seconds(t.max_backoff),
                match l.transport {
                    Transport::Mgrp => yes_no(l.piggyback),
                    Transport::Udp => "none (plain UDP)",
                },
                l.probe_port,
                l.probe_address
                    .map_or(String::new(), |a| format!(" at {a}")),
                if t.passive {
                    ", passive estimates may stand in"
                } else {
                    ""
                },
            ));
        }
        out
    }

    /// Whether the API may listen where it is told to: beyond loopback without a
    /// token, anyone who reaches it could read the estimates and start measurements,
    /// so that needs `open-api = true`. Checked after `--listen` has had its say.
    pub fn check_exposure(&self) -> Result<(), ConfigError> {
        if self.listen.ip().is_loopback() || self.token.is_some() || self.open_api {
            return Ok(());
        }
        Err(invalid(format!(
            "listen: {} is beyond loopback and there is no token-file: anyone who reaches it could read the estimates and start measurements; set token-file, listen on 127.0.0.1, or set open-api = true if an API open to everyone who reaches it is what you mean",
            self.listen
        )))
    }

    /// Settings that work but are probably not what the operator wants.
    pub fn warnings(&self) -> Vec<String> {
        let mut w = Vec::new();
        if !self.listen.ip().is_loopback() && self.token.is_none() {
            w.push(format!(
                "the API listens on {} without a token (open-api): anyone who reaches it can read the estimates and start measurements",
                self.listen
            ));
        }
        if !self.listen.ip().is_loopback() && self.token.is_some() && self.tls.is_none() {
            w.push(format!(
                "the API listens on {} in clear HTTP: its token crosses the network readable by anyone on the path (set tls-cert and tls-key, or put a TLS proxy in front and listen on 127.0.0.1)",
                self.listen
            ));
        }
        for s in &self.budget_shortfalls {
            w.push(format!("the mesh's budget falls short: {s}"));
        }
        w
    }
}

impl Config {
    /// Reads and checks the file at `path`.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::from_toml(&text, path.parent())
    }

    /// Checks a configuration given as TOML; a `token-file` is read relative to
    /// `dir`.
    pub fn from_toml(text: &str, dir: Option<&Path>) -> Result<Self, ConfigError> {
        Self::from_toml_as(text, dir, false)
    }

    /// [`Self::from_toml`] as `--check-mesh` derives a member's part: route control
    /// speaks to the members' APIs without TLS, whose authority (`ca-file`) is each
    /// node's own setting and not in the description; everything else is checked.
    pub(crate) fn from_mesh_for_check(text: &str) -> Result<Self, ConfigError> {
        Self::from_toml_as(text, None, true)
    }

    fn from_toml_as(text: &str, dir: Option<&Path>, no_tls: bool) -> Result<Self, ConfigError> {
        let mut f: File = toml::from_str(text).map_err(|e| ConfigError::Toml(e.to_string()))?;
        let mesh_refresh = match &f.mesh_refresh {
            None => None,
            Some(_) if f.mesh.is_none() => {
                return Err(invalid("mesh-refresh: give mesh too".into()));
            }
            Some(t) => {
                let d = mgrp_core::parse_duration(t)
                    .map_err(|e| invalid(format!("mesh-refresh: {e}")))?;
                if d < Duration::from_secs(1) {
                    return Err(invalid(format!("mesh-refresh: {t}; use at least 1s")));
                }
                Some(d)
            }
        };
        mesh::apply(&mut f, dir)?;
        let matrix = f
            .matrix
            .take()
            .map(|m| {
                matrix::check(
                    m,
                    (
                        f.mesh.as_ref(),
                        f.mesh_ca_file.as_deref(),
                        f.mesh_token_file.as_deref(),
                    ),
                    dir,
                )
            })
            .transpose()?;
        if no_tls && let Some(r) = &mut f.routing {
            r.without_tls();
        }
        let name = f.name.unwrap_or_else(|| "node".into());
        check_name("name", &name)?;
        let listen_text = f.listen.as_deref().unwrap_or(DEFAULT_LISTEN);
        let listen: SocketAddr = listen_text.parse().map_err(|_| {
            invalid(format!(
                "listen: {listen_text:?} is not an address and port, e.g. {DEFAULT_LISTEN}"
            ))
        })?;
        let token = match &f.token_file {
            None => None,
            Some(p) => {
                let (p, t) = mgrp_service::settings::read_token_file(p, dir)?;
                if t.len() < 16 {
                    return Err(invalid(format!(
                        "token-file: {} holds {} characters; use at least 16 (e.g. `openssl rand -hex 16`)",
                        p.display(),
                        t.len()
                    )));
                }
                Some(t)
            }
        };
        let in_dir = |p: &Path| match dir {
            Some(d) if p.is_relative() => d.join(p),
            _ => p.to_path_buf(),
        };
        let tls = match (&f.tls_cert, &f.tls_key) {
            (None, None) => None,
            (Some(c), Some(k)) => Some(
                tls::ServerTls::load(&in_dir(c), &in_dir(k))
                    .map_err(|e| invalid(format!("tls-cert/tls-key: {e}")))?,
            ),
            _ => {
                return Err(invalid(
                    "tls-cert and tls-key go together: the API's certificate chain and its private key (PEM)".into(),
                ));
            }
        };
        let max_running = f.max_running.unwrap_or(1);
        if !(1..=MAX_RUNNING).contains(&max_running) {
            return Err(invalid(format!(
                "max-running: {max_running}; use 1 to 16 exclusive runs into this node at once (paths into a node share its downlink)"
            )));
        }
        let history = f.history.unwrap_or(1000);
        if !(1..=100_000).contains(&history) {
            return Err(invalid(format!("history: {history}; use 1 to 100000")));
        }
        let transports = f
            .serve
            .transports
            .unwrap_or_else(|| vec![Transport::Mgrp, Transport::Udp]);
        let mgrp_port = f.serve.mgrp_port.unwrap_or(DEFAULT_MGRP_PORT);
        let udp_port = f.serve.udp_port.unwrap_or(DEFAULT_UDP_PORT);
        let mut serve = Vec::new();
        for t in transports {
            let port = match t {
                Transport::Mgrp => mgrp_port,
                Transport::Udp => udp_port,
            };
            if serve.iter().any(|(u, _)| *u == t) {
                return Err(invalid(format!("serve.transports: {t} is listed twice")));
            }
            serve.push((t, port));
        }
        let serve_allow = f
            .serve
            .allow
            .unwrap_or_default()
            .iter()
            .map(|a| {
                a.parse::<mgrp_core::peers::Prefix>().map_err(|e| {
                    invalid(format!(
                        "serve.allow: {a:?} is not an address or prefix ({e}), e.g. \"10.0.0.5\" or \"10.0.0.0/24\""
                    ))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mb = f
            .serve
            .max_mb_per_hour
            .unwrap_or(mgrp_tool::server::DEFAULT_BYTES_PER_HOUR as f64 / 1e6);
        if !(mb.is_finite() && mb > 0.0 && mb <= 1e9) {
            return Err(invalid(format!(
                "serve.max-mb-per-hour: {mb}; use a number of megabytes above 0 (100 by default)"
            )));
        }
        let serve_bytes_per_hour = (mb * 1e6) as u64;
        let mbps = f
            .serve
            .max_probe_mbps
            .unwrap_or(mgrp_tool::server::DEFAULT_PROBE_BPS as f64 / 1e6);
        if !(mbps.is_finite() && mbps > 0.0 && mbps <= 1e6) {
            return Err(invalid(format!(
                "serve.max-probe-mbps: {mbps}; use a rate in Mbit/s above 0 ({} by default)",
                mgrp_tool::server::DEFAULT_PROBE_BPS / 1_000_000
            )));
        }
        let serve_probe_bps = (mbps * 1e6) as u64;
        let serve_ipv6_prefix = f
            .serve
            .ipv6_prefix
            .unwrap_or(mgrp_tool::server::DEFAULT_IPV6_PREFIX);
        if !(1..=128).contains(&serve_ipv6_prefix) {
            return Err(invalid(format!(
                "serve.ipv6-prefix: {serve_ipv6_prefix}; use a prefix length from 1 to 128 ({} by default: a /64 is one requester)",
                mgrp_tool::server::DEFAULT_IPV6_PREFIX
            )));
        }
        use mgrp_tool::server::SenderLimits;
        let defaults = SenderLimits::default();
        let serve_limits = SenderLimits::given(
            f.serve.max_measurements,
            f.serve.max_measurements_per_requester,
            f.serve.max_exclusive,
            f.serve.max_waiting,
            f.serve.max_connections,
            f.serve.max_connections_per_requester,
        );
        serve_limits.check().map_err(|e| {
            invalid(format!(
                "[serve] limits: {e} (max-measurements {}, max-measurements-per-requester {}, max-exclusive {}, max-waiting {} by default; max-connections and max-connections-per-requester {} and {}, or twice the measurements where that is more)",
                defaults.measurements,
                defaults.measurements_per_requester,
                defaults.exclusive,
                defaults.waiting,
                defaults.connections,
                defaults.connections_per_requester
            ))
        })?;
        if mgrp_port == udp_port && serve.len() == 2 {
            return Err(invalid(format!(
                "serve: mgrp-port and udp-port are both {mgrp_port}; each transport needs its own"
            )));
        }
        let passive = f.passive.enabled.unwrap_or(true);
        let passive_timing = passive && f.passive.timing.unwrap_or(true);
        let probe_port_base = f.probe_port_base.unwrap_or(DEFAULT_PROBE_PORT);
        let links = link::check(f.links, probe_port_base, passive)?;
        Ok(Self {
            name,
            listen,
            token,
            tls,
            open_api: f.open_api.unwrap_or(false),
            socket: f
                .socket
                .unwrap_or_else(|| PathBuf::from(mgrp_client::DEFAULT_SOCKET)),
            max_running,
            budget_shortfalls: f.budget_shortfalls,
            history,
            state_dir: f.state_dir.map(|p| match dir {
                Some(d) if p.is_relative() => d.join(p),
                _ => p,
            }),
            serve,
            serve_piggyback: f.serve.piggyback.unwrap_or(true),
            serve_allow,
            serve_bytes_per_hour,
            serve_probe_bps,
            serve_ipv6_prefix,
            serve_limits,
            links,
            prediction: f.btc.check()?,
            passive,
            passive_timing,
            routing: f.routing.map(|r| r.check(dir)).transpose()?,
            probe_port_base,
            mesh_refresh,
            matrix,
        })
    }

    /// The link named `name`, with its index.
    pub fn link(&self, name: &str) -> Option<(usize, &Link)> {
        self.links.iter().enumerate().find(|(_, l)| l.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example description (docs/mesh/example.toml) gives each member's overlay
    /// what the per-node file derived from it (docs/mesh/derived/NAME.overlay.toml)
    /// gives, and each derived link's method is one this overlay has. The routing
    /// members' APIs are over TLS: their authority is this node's own setting
    /// (`[routing] ca-file`), given to both.
    #[test]
    fn the_example_mesh_gives_what_its_derived_per_node_files_say() {
        let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/mesh");
        let dir = mgrp_testbed::TempDir::new("overlay-example-mesh").unwrap();
        let ca = mgrp_testbed::tls::Authority::new(dir.path(), "members").unwrap();
        let local = format!("[routing]\nca-file = \"{}\"\n", ca.ca_file.display());
        for node in ["nyc1", "lon1", "fra1", "edge7"] {
            let derived =
                std::fs::read_to_string(docs.join(format!("derived/{node}.overlay.toml"))).unwrap();
            let routes = derived.contains("[routing]\n");
            assert_eq!(routes, node != "edge7", "{node}");
            let from_mesh = Config::from_toml(
                &format!(
                    "mesh = \"example.toml\"\nnode = \"{node}\"\n{}",
                    if routes { local.as_str() } else { "" }
                ),
                Some(&docs),
            )
            .unwrap();
            let from_file =
                Config::from_toml(&derived.replace("[routing]\n", &local), None).unwrap();
            assert!(!from_file.links.is_empty(), "{node}");
            assert_eq!(
                from_file.routing.as_ref().map(|r| r.destinations.len()),
                routes.then_some(if node == "fra1" { 2 } else { 3 }),
                "{node}"
            );
            assert!(
                from_mesh == from_file,
                "{node}: {from_mesh:?}\n{from_file:?}"
            );
        }
    }

    #[test]
    fn defaults_and_a_link() {
        let c = Config::from_toml("[[link]]\nfrom = \"10.0.0.5\"\n", None).unwrap();
        assert_eq!(c.listen, DEFAULT_LISTEN.parse().unwrap());
        assert_eq!(c.token, None);
        assert_eq!(c.max_running, 1);
        assert_eq!(c.serve.len(), 2);
        let l = &c.links[0];
        assert_eq!(l.name, "10.0.0.5-mgrp");
        assert_eq!((l.transport, l.port), (Transport::Mgrp, DEFAULT_MGRP_PORT));
        assert_eq!(l.method.name(), "pathload-fast");
        assert_eq!(l.timing.interval, Duration::from_secs(60));
        assert_eq!(l.probe_port, DEFAULT_PROBE_PORT);
        assert_eq!(c.link("10.0.0.5-mgrp").map(|(i, _)| i), Some(0));
    }

    #[test]
    fn a_mesh_description_gives_the_links_the_allow_list_and_the_name() {
        let dir = std::env::temp_dir().join(format!("overlay-mesh-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut mesh = String::new();
        for (i, name) in ["a", "b", "c"].iter().enumerate() {
            mesh.push_str(&format!(
                "[[member]]\nname = \"{name}\"\naddress = \"10.0.0.{}\"\n",
                i + 1
            ));
        }
        mesh.push_str(
            "[[group]]\nname = \"all\"\nkind = \"full-mesh\"\nmembers = [\"a\", \"b\", \"c\"]\n\
             methods = [\"pathchirp\", \"badabing\"]\ntransports = [\"mgrp\", \"udp\"]\ninterval = \"5m\"\n",
        );
        std::fs::write(dir.join("mesh.toml"), &mesh).unwrap();
        let load = |text: &str| Config::from_toml(text, Some(&dir));
        let c = load("mesh = \"mesh.toml\"\nnode = \"a\"\n").unwrap();
        assert_eq!(c.name, "a");
        let names: Vec<&str> = c.links.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "b-badabing",
                "b-badabing-udp",
                "b-pathchirp",
                "b-pathchirp-udp",
                "c-badabing",
                "c-badabing-udp",
                "c-pathchirp",
                "c-pathchirp-udp",
            ]
        );
        let l = &c.links[3];
        assert_eq!(
            (l.neighbour.as_deref(), l.transport, l.method.name()),
            (Some("b"), Transport::Udp, "pathchirp")
        );
        assert_eq!(l.timing.interval, Duration::from_secs(300));
        let allowed: Vec<String> = c.serve_allow.iter().map(ToString::to_string).collect();
        assert_eq!(allowed, ["10.0.0.2/32", "10.0.0.3/32"]);
        // Eight links, eight probe ports, none the sender's own.
        let mut ports: Vec<u16> = c.links.iter().map(|l| l.probe_port).collect();
        assert!(!ports.contains(&mgrp_tool::control::DEFAULT_SENDER_PROBE_PORT));
        ports.dedup();
        assert_eq!(ports.len(), 8);
        // The file's own link of the same name, its own name and its allow-list stay.
        let c = load(
            "name = \"a-node\"\nmesh = \"mesh.toml\"\nnode = \"a\"\n[serve]\nallow = [\"10.0.0.0/24\"]\n\
             [[link]]\nname = \"b-pathchirp\"\nfrom = \"10.0.0.2\"\nmethod = \"pathchirp\"\ninterval = \"1m\"\n",
        )
        .unwrap();
        assert_eq!(c.name, "a-node");
        assert_eq!(c.links.len(), 8);
        let own = c.links.iter().find(|l| l.name == "b-pathchirp").unwrap();
        assert_eq!(own.timing.interval, Duration::from_secs(60));
        assert_eq!(c.serve_allow.len(), 1);
        // What cannot be is said, with the description's file.
        for (text, says) in [
            (
                "mesh = \"mesh.toml\"\nnode = \"z\"\n",
                "no member is named \"z\"",
            ),
            ("mesh = \"mesh.toml\"\n", "mesh needs node"),
            ("mesh-refresh = \"1m\"\n", "mesh-refresh: give mesh too"),
            (
                "mesh = \"mesh.toml\"\nnode = \"a\"\nmesh-refresh = \"10ms\"\n",
                "use at least 1s",
            ),
            (
                "mesh = \"mesh.toml\"\nnode = \"a\"\nmesh-ca-file = \"ca.pem\"\n",
                "for a mesh fetched over https://",
            ),
            (
                "mesh = \"http://192.0.2.1/mesh.toml\"\nnode = \"a\"\n",
                "over https://",
            ),
            ("node = \"a\"\n", "give mesh too"),
        ] {
            let e = load(text).unwrap_err().to_string();
            assert!(e.contains(says), "{text}: {e}");
        }
        std::fs::write(dir.join("odd.toml"), mesh.replace("badabing", "ping")).unwrap();
        let e = load("mesh = \"odd.toml\"\nnode = \"a\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("odd.toml") && e.contains("\"ping\""), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_neighbour_has_one_name() {
        let two = |a: &str, b: &str| {
            Config::from_toml(
                &format!(
                    "[[link]]\nfrom = \"10.0.0.5\"\nneighbour = \"{a}\"\n\
                     [[link]]\nfrom = \"10.0.0.5\"\ntransport = \"udp\"\nneighbour = \"{b}\"\n"
                ),
                None,
            )
        };
        let c = two("m5", "m5").unwrap();
        assert_eq!(c.links[1].neighbour.as_deref(), Some("m5"));
        // Named on one link, it is the neighbour's name on every link from it.
        let c = Config::from_toml(
            "[[link]]\nfrom = \"10.0.0.5\"\n\
             [[link]]\nfrom = \"10.0.0.5\"\ntransport = \"udp\"\nneighbour = \"m5\"\n\
             [[link]]\nfrom = \"10.0.0.6\"\n",
            None,
        )
        .unwrap();
        let names: Vec<_> = c.links.iter().map(|l| l.neighbour.as_deref()).collect();
        assert_eq!(names, [Some("m5"), Some("m5"), None]);
        let e = two("m5", "m6").unwrap_err().to_string();
        assert!(
            e.contains("link 2: neighbour \"m6\"") && e.contains("\"m5\""),
            "{e}"
        );
        let e = two("m 5", "m5").unwrap_err().to_string();
        assert!(e.contains("link 1: neighbour"), "{e}");
    }

    #[test]
    fn the_btc_section_is_checked() {
        let base = "[[link]]\nfrom = \"10.0.0.1\"\nmethod = \"btc\"\n[btc]\n";
        let c = Config::from_toml(base, None).unwrap();
        assert_eq!(c.links[0].method.name(), "btc");
        assert_eq!(c.links[0].name, "10.0.0.1-mgrp-btc");
        assert_eq!(c.prediction, PredictionSettings::default());
        let c = Config::from_toml(
            &format!("{base}kernel-poll = \"0s\"\nlike-narrow = 0.3\n"),
            None,
        )
        .unwrap();
        assert_eq!(c.prediction.kernel_poll, None);
        assert_eq!(c.prediction.factors.like_narrow, 0.3);
        let c = Config::from_toml(
            &format!("{base}history-max-age = \"10m\"\nhistory-change = 2\n"),
            None,
        )
        .unwrap();
        let h = c.prediction.history.unwrap();
        assert_eq!((h.max_age_s, h.change), (600.0, 2.0));
        assert!(
            c.summary()
                .contains("up to 600s old unless the probes changed by more than x2")
        );
        let c = Config::from_toml(&format!("{base}history-max-age = \"0s\"\n"), None).unwrap();
        assert_eq!(c.prediction.history, None);
        for (bad, says) in [
            ("history-max-age = \"5s\"", "at least 10s"),
            ("history-change = 1", "btc.history-change"),
            ("like-narrow = 0", "btc.like-narrow"),
            ("unlike-narrow = 3.5", "at most 2"),
            ("kernel-poll = \"100ms\"", "at least 500ms"),
            ("max-age = \"0s\"", "btc.max-age"),
            ("mss = 100", "536 to 65483"),
            ("congestion = \"vegas\"", "btc.congestion"),
            ("factor = 1", "unknown field"),
        ] {
            let e = Config::from_toml(&format!("{base}{bad}\n"), None)
                .unwrap_err()
                .to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    /// Plain UDP probes carry no riders, whatever `piggyback` says.
    #[test]
    fn the_summary_says_riders_only_where_they_can_ride() {
        let c = Config::from_toml(
            "name = \"a\"\n[[link]]\nname = \"m\"\nfrom = \"10.0.0.5\"\n\
             [[link]]\nname = \"u\"\nfrom = \"10.0.0.6\"\ntransport = \"udp\"\n",
            None,
        )
        .unwrap();
        let s = c.summary();
        let line = |name: &str| {
            s.lines()
                .find(|l| l.trim_start().starts_with(&format!("{name}:")))
                .unwrap_or_else(|| panic!("no line for {name}: {s}"))
                .to_owned()
        };
        assert!(line("m").contains("riders: yes"), "{s}");
        assert!(line("u").contains("riders: none (plain UDP)"), "{s}");
    }

    #[test]
    fn serve_names_whom_it_serves_and_how_much() {
        let c = Config::from_toml("name = \"a\"\n", None).unwrap();
        assert!(c.serve_allow.is_empty());
        assert_eq!(c.serve_bytes_per_hour, 100_000_000);
        let c = Config::from_toml(
            "name = \"a\"\n[serve]\nallow = [\"10.0.0.5\", \"10.1.0.0/16\"]\nmax-mb-per-hour = 2000\n",
            None,
        )
        .unwrap();
        assert_eq!(c.serve_allow.len(), 2);
        assert!(c.serve_allow[1].contains("10.1.2.3".parse().unwrap()));
        assert_eq!(c.serve_bytes_per_hour, 2_000_000_000);
        assert!(c.summary().contains("10.0.0.5/32"), "{}", c.summary());
        let rated = Config::from_toml(
            "name = \"a\"\n[serve]\nmax-probe-mbps = 1000\nipv6-prefix = 56\n",
            None,
        )
        .unwrap();
        assert_eq!(
            (rated.serve_probe_bps, rated.serve_ipv6_prefix),
            (1_000_000_000, 56)
        );
        assert_eq!(
            rated.serve_limits,
            mgrp_tool::server::SenderLimits::default()
        );
        // The limits: connections follow the measurements unless given.
        let wide = Config::from_toml(
            "name = \"a\"\n[serve]\nmax-measurements = 100\nmax-measurements-per-requester = 6\nmax-exclusive = 2\nmax-waiting = 10\n",
            None,
        )
        .unwrap();
        assert_eq!(
            wide.serve_limits,
            mgrp_tool::server::SenderLimits {
                connections: 200,
                connections_per_requester: 12,
                measurements: 100,
                measurements_per_requester: 6,
                exclusive: 2,
                waiting: 10,
            }
        );
        for (bad, says) in [
            ("allow = [\"ten\"]", "serve.allow"),
            ("max-mb-per-hour = 0", "serve.max-mb-per-hour"),
            ("max-mb-per-hour = -1", "serve.max-mb-per-hour"),
            ("max-probe-mbps = 0", "serve.max-probe-mbps"),
            ("ipv6-prefix = 0", "serve.ipv6-prefix"),
            ("ipv6-prefix = 129", "serve.ipv6-prefix"),
            ("max-measurements = 0", "[serve] limits: measurements: 0"),
            (
                "max-measurements-per-requester = 40",
                "measurements per requester: 40 is more than the 32",
            ),
            ("max-exclusive = 5000", "exclusive measurements: 5000"),
            (
                "max-measurements = 100\nmax-connections = 50",
                "connections: 50 cannot hold the 100",
            ),
        ] {
            let e = Config::from_toml(&format!("name = \"a\"\n[serve]\n{bad}\n"), None)
                .unwrap_err()
                .to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn the_example_file_is_valid() {
        let text = include_str!("../../mgrp-overlay.example.toml");
        let c = Config::from_toml(text, None).unwrap();
        assert_eq!(c.links.len(), 2);
        assert_ne!(c.links[0].probe_port, c.links[1].probe_port);
        assert_eq!(c.links[0].probe_address, None);
        assert_eq!(c.links[1].probe_address, Some("10.0.1.2".parse().unwrap()));
    }

    /// `[matrix]` takes the node's own description unless it names one, reads it at
    /// once, and names what is wrong.
    #[test]
    fn the_matrix_collector_needs_a_description_it_can_read() {
        let dir = std::env::temp_dir().join(mgrp_testbed::unique("overlay-matrix-config"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("mesh.toml"),
            "[[member]]\nname = \"a\"\naddress = \"10.9.0.1\"\n",
        )
        .unwrap();
        let load = |t: &str| Config::from_toml(t, Some(&dir));
        let c = load("[matrix]\nmesh = \"mesh.toml\"\n").unwrap();
        let m = c.matrix.unwrap();
        assert_eq!((m.interval, m.metrics), (Duration::from_secs(30), true));
        assert_eq!(m.description().unwrap().members.len(), 1);
        let own = load(
            "mesh = \"mesh.toml\"\nnode = \"a\"\n[matrix]\ninterval = \"5s\"\nmetrics = false\n",
        )
        .unwrap()
        .matrix
        .unwrap();
        assert_eq!(
            (own.mesh.as_str(), own.interval, own.metrics),
            ("mesh.toml", Duration::from_secs(5), false)
        );
        let err = |t: &str| load(t).unwrap_err().to_string();
        assert!(
            err("[matrix]\n").contains("give mesh"),
            "{}",
            err("[matrix]\n")
        );
        assert!(err("[matrix]\nmesh = \"none.toml\"\n").contains("matrix.mesh"));
        assert!(
            err("[matrix]\nmesh = \"mesh.toml\"\ninterval = \"100ms\"\n").contains("at least 1s")
        );
        assert!(
            err("[matrix]\nmesh = \"mesh.toml\"\ntoken-file = \"none\"\n")
                .contains("matrix.token-file")
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn mistakes_are_named() {
        let err = |t: &str| Config::from_toml(t, None).unwrap_err().to_string();
        assert!(err("nmae = \"x\"").contains("unknown field"));
        assert!(err("listen = \"localhost\"").contains("listen"));
        assert!(err("max-running = 0").contains("max-running"));
        assert!(err("[[link]]\nfrom = \"10.0.0.5\"\ninterval = \"10\"").contains("interval"));
        assert!(err("[[link]]\nfrom = \"10.0.0.5\"\njitter = 0.9").contains("jitter"));
        assert!(err("[[link]]\nfrom = \"10.0.0.5\"\nname = \"a b\"").contains("name"));
        assert!(
            err("[[link]]\nfrom = \"10.0.0.5\"\n[[link]]\nfrom = \"10.0.0.5\"")
                .contains("used twice")
        );
        assert!(err("[[link]]\nfrom = \"nowhere\"").contains("from"));
        assert!(err("[serve]\nmgrp-port = 1\nudp-port = 1").contains("own"));
        assert!(
            err("[[link]]\nfrom = \"10.0.0.5\"\ntransport = \"udp\"\nride-min-bps = 1000")
                .contains("needs transport = \"mgrp\"")
        );
        assert!(
            err("[[link]]\nfrom = \"10.0.0.5\"\npiggyback = false\nride-min-bps = 1000")
                .contains("piggyback = true")
        );
        assert!(err("[[link]]\nfrom = \"10.0.0.5\"\nride-max-wait = \"5s\"").contains("set both"));
    }
}
