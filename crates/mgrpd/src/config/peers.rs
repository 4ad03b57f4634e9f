//! The peers' tables: who MGRP packets are taken from, with which keys, over which
//! encapsulation, from which source address, and their next-hop devices, built from
//! the routes, `via`, `--peer` and the `[[peers]]` tables.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use mgrp_core::auth::Key;
use mgrp_core::pair::{PrivateKey, PublicKey};
use mgrp_core::peers::{Peer, Peers, Prefix};
use mgrp_core::planner::{Encap, EncapTable};

use super::error::{ConfigError, bad};
use super::settings::{DEFAULT_UDP_PORT, EncapArg, PeerSettings, Settings};

/// What the peers' tables give.
#[derive(Debug, Clone)]
pub(super) struct PeerTables {
    /// The hosts MGRP packets are taken from and what their riders may claim.
    pub(super) peers: Peers,
    /// Keys authenticating MGRP packets.
    pub(super) keys: Keys,
    /// How MGRP packets travel to each peer.
    pub(super) encap: EncapTable,
    /// The UDP port and the peers reached over UDP.
    pub(super) udp: Udp,
    /// Configured source addresses.
    pub(super) sources: RouteSources,
    /// Next-hop devices.
    pub(super) next_hops: Vec<NextHopDevice>,
}

/// Builds the peers' tables of checked settings (whose `routes` are the routed
/// prefixes), reading the key files.
pub(super) fn build(s: &Settings) -> Result<PeerTables, ConfigError> {
    let encap_of = |e: EncapArg| match e {
        EncapArg::Raw => Encap::Raw,
        EncapArg::Udp(_) => Encap::Udp,
    };
    let udp_port = match s.encap {
        EncapArg::Udp(Some(p)) => p,
        _ => DEFAULT_UDP_PORT,
    };
    let mut t = PeerTables {
        peers: Peers::new(Vec::new(), Vec::new(), s.protocol),
        keys: Keys {
            default: match &s.key_file {
                Some(path) => Some(read_peer_key(path, s.next_key_file.as_ref())?),
                None => None,
            },
            per_peer: Vec::new(),
            derived: Vec::new(),
        },
        encap: EncapTable {
            default: encap_of(s.encap),
            per_peer: Vec::new(),
            wire_default: s.wire,
            wire_per_peer: Vec::new(),
        },
        udp: Udp {
            port: udp_port,
            peers: Vec::new(),
        },
        sources: RouteSources {
            default: s.source.clone(),
            per_peer: Vec::new(),
        },
        next_hops: Vec::new(),
    };
    for r in &s.routes {
        let prefix =
            Prefix::new(r.addr(), r.prefix_len()).map_err(|e| bad(format!("route {r}: {e}")))?;
        t.peers.add_peer(Peer::new(prefix));
    }
    for p in &s.peer_prefixes {
        t.peers.add_peer(Peer::new(*p));
    }
    let own = OwnKeys::read(s)?;
    for p in &s.peers {
        if let Some(key) = own
            .peer_key(p)
            .map_err(|e| bad(format!("peer {}: {e}", p.prefix)))?
        {
            t.keys.per_peer.push((p.prefix, key));
            if p.public_key.is_some() {
                t.keys.derived.push(p.prefix);
            }
        }
        if let Some(e) = p.encap {
            t.encap.per_peer.push((p.prefix, encap_of(e)));
        }
        if let Some(w) = p.wire {
            t.encap.wire_per_peer.push((p.prefix, w));
        }
        if let Some(src) = p.source {
            t.sources.per_peer.push((p.prefix, src));
        }
        if let EncapArg::Udp(_) = p.encap.unwrap_or(s.encap) {
            t.udp.peers.push(UdpPeer {
                prefix: p.prefix,
                port: match p.encap {
                    Some(EncapArg::Udp(Some(port))) => port,
                    _ => udp_port,
                },
                endpoint: p.endpoint,
                keepalive: p.keepalive,
                roams: (p.key_file.is_some() || p.public_key.is_some()) && p.single(),
            });
        }
        if let Some(name) = &p.device {
            t.next_hops.push(NextHopDevice {
                name: name.clone(),
                peer: p.prefix.addr(),
            });
        }
        t.peers.add_peer(Peer {
            prefix: p.prefix,
            allowed_sources: p.allowed_sources.clone(),
            relay_to: p.relay_to.clone(),
        });
    }
    for peer in s.via.values() {
        t.peers.add_peer(Peer::new(Prefix::host(*peer)));
    }
    for l in &s.local_prefixes {
        t.peers.add_local(*l);
    }
    t.check_keys()?;
    Ok(t)
}

impl PeerTables {
    /// Keys are all or nothing, and what only a key makes safe needs one.
    fn check_keys(&self) -> Result<(), ConfigError> {
        let (peers, keys) = (&self.peers, &self.keys);
        if keys.enabled() {
            if let Some(p) = peers
                .peers()
                .iter()
                .find(|p| keys.key_for(p.prefix.addr()).is_none())
            {
                return Err(bad(format!(
                    "peer {} has no key while others do; give every peer a key (public-key or key-file in its [[peers]] table, or --key-file for all)",
                    p.prefix
                )));
            }
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
        // A roaming peer is told apart by its key alone: no other peer may share it.
        for (i, (prefix, key)) in keys.per_peer.iter().enumerate() {
            let roams = self
                .udp
                .peers
                .iter()
                .any(|p| p.roams && p.prefix == *prefix);
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
        Ok(())
    }
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

/// The source addresses configured for traffic routed into the tunnel.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
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

/// How a daemon reaches its peers over UDP.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Udp {
    /// This daemon's UDP port: where it receives, and where its packets come from.
    pub port: u16,
    /// The `[[peers]]` tables reached over UDP.
    pub peers: Vec<UdpPeer>,
}

/// A `[[peers]]` table reached over UDP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdpPeer {
    /// Its addresses.
    pub prefix: Prefix,
    /// Its UDP port, unless an endpoint is configured.
    pub port: u16,
    /// Where its packets go until it is heard from elsewhere.
    pub endpoint: Option<SocketAddr>,
    /// How often to send it a keepalive when nothing else was sent.
    pub keepalive: Option<Duration>,
    /// Whether its endpoint is learned from its authenticated packets: it has a key
    /// of its own and is one host.
    pub roams: bool,
}

impl Udp {
    /// The peers that roam (one host with a key of its own), by their addresses.
    pub fn roaming(&self) -> Vec<IpAddr> {
        self.peers
            .iter()
            .filter(|p| p.roams)
            .map(|p| p.prefix.addr())
            .collect()
    }

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
    pub fn configured_endpoint(&self, peer: IpAddr) -> Option<SocketAddr> {
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
    /// The `[[peers]]` tables whose key is derived from their public key.
    pub derived: Vec<Prefix>,
}

impl Keys {
    /// Whether packets are authenticated at all.
    pub fn enabled(&self) -> bool {
        self.default.is_some() || !self.per_peer.is_empty()
    }

    /// Whether `ip` has a key of its own (a `[[peers]]` table's) rather than the
    /// shared one.
    pub fn own_key(&self, ip: IpAddr) -> bool {
        self.per_peer.iter().any(|(p, _)| p.contains(ip))
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
    let text = mgrp_service::secret::read_private(path, "key file").map_err(bad)?;
    text.parse()
        .map_err(|e| bad(format!("key file {}: {e}", path.display())))
}

/// This host's own private keys (`private-key-file`, `next-private-key-file`).
struct OwnKeys {
    private: Option<PrivateKey>,
    next: Option<PrivateKey>,
}

impl OwnKeys {
    fn read(s: &Settings) -> Result<Self, ConfigError> {
        let read = |path: &Path| -> Result<PrivateKey, ConfigError> {
            let text = mgrp_service::secret::read_private(path, "private key file").map_err(bad)?;
            text.parse()
                .map_err(|e| bad(format!("private key file {}: {e}", path.display())))
        };
        Ok(Self {
            private: s.private_key_file.as_deref().map(read).transpose()?,
            next: s.next_private_key_file.as_deref().map(read).transpose()?,
        })
    }

    /// The key derived with the peer whose public key is `theirs`, from this host's
    /// private key, or from its next one (`next`).
    fn pair(&self, theirs: &PublicKey, next: bool) -> Result<Key, String> {
        let mine = if next { &self.next } else { &self.private };
        let Some(mine) = mine else {
            return Err("public-key and next-public-key need this host's own private key: give private-key-file (made with `mgrpd genkey --private`)".into());
        };
        mgrp_core::pair::pair_key(mine, theirs).map_err(|e| e.to_string())
    }

    /// A `[[peers]]` table's key, if it gives one: the key it seals with (from
    /// `key-file`, or derived from `public-key`) and the one more it opens with during
    /// a rotation: `next-key-file`, a key derived from `next-public-key` (the peer
    /// rotates its pair, or moves from a key file to a pair), or, with `public-key`, the
    /// key derived from this host's `next-private-key-file` (this host rotates).
    fn peer_key(&self, p: &PeerSettings) -> Result<Option<PeerKey>, String> {
        let key = match (&p.key_file, &p.public_key) {
            (Some(path), None) => read_key(path).map_err(|e| e.to_string())?,
            (None, Some(public)) => self.pair(public, false)?,
            (None, None) => return Ok(None),
            (Some(_), Some(_)) => {
                return Err("key-file and public-key both give the key it seals with: keep one (public-key derives it, so no secret is copied; the other can be the next key during a move, as next-key-file or next-public-key)".into());
            }
        };
        let mut next = Vec::new();
        if let Some(path) = &p.next_key_file {
            next.push(read_key(path).map_err(|e| e.to_string())?);
        }
        if let Some(public) = &p.next_public_key {
            next.push(self.pair(public, false)?);
        }
        if let (Some(public), Some(_)) = (&p.public_key, &self.next) {
            next.push(self.pair(public, true)?);
        }
        if next.len() > 1 {
            return Err("more than one next key (next-key-file, next-public-key, this host's next-private-key-file): one rotation at a time, and one end of a pair rotates at a time".into());
        }
        Ok(Some(PeerKey {
            key,
            next: next.pop(),
        }))
    }
}

/// Reads a key file and, if named, the next key's.
fn read_peer_key(key: &Path, next: Option<&PathBuf>) -> Result<PeerKey, ConfigError> {
    Ok(PeerKey {
        key: read_key(key)?,
        next: next.map(|p| read_key(p)).transpose()?,
    })
}
