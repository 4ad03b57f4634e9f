//! mgrpd's own receive path, driven packet by packet without sockets: the receivers,
//! `Endpoints::identify`, the keyring and its replay windows, reassembly and rider
//! admission of a daemon whose data path loops back. For the fuzz targets; not an
//! API.
//!
//! The daemon is 10.0.0.1 (its `source`), with three peers: 10.0.0.2 over raw IP and
//! 10.0.0.4 over UDP at 192.0.2.4:4253, both with the shared key (and a next key, as
//! in a rotation), and 10.0.0.3 over UDP with a key of its own, roaming. A second
//! keyring, configured as 10.0.0.2, seals packets as that peer would, so inputs reach
//! the paths behind the tag.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use mgrp_core::WallTime;
use mgrp_core::api::DaemonStats;
use mgrp_core::auth::{Key, TRAILER_LEN};
use mgrp_core::wire::Packet;

use crate::config::{Config, Keys, PeerKey};
use crate::daemon::Daemon;
use crate::endpoints::Endpoints;
use crate::keyring::Keyring;
use crate::receiver::Receiver;

/// This daemon's address.
pub const ME: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
/// The raw IP peer with the shared key.
pub const RAW_PEER: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
/// The roaming UDP peer with a key of its own.
pub const ROAMING_PEER: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 3));
/// The UDP peer at a configured endpoint.
pub const UDP_PEER: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 4));
/// [`UDP_PEER`]'s endpoint.
pub const UDP_ENDPOINT: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 4)), 4253);

/// The keys: shared, next (of a rotation), the roaming peer's.
const KEYS: [[u8; 32]; 3] = [[0x42; 32], [0x43; 32], [0x44; 32]];

/// The configuration of daemon `me` with these peers (and what their tables add),
/// every packet keyed: the shared key with a next key, the roaming peer's own.
fn config(me: IpAddr, peers: &[(IpAddr, &str)]) -> Config {
    let mut text = format!("source = \"{me}\"\n");
    for (peer, extra) in peers {
        text.push_str(&format!("[[peers]]\nprefix = \"{peer}/32\"\n{extra}\n"));
    }
    let mut c = Config::from_toml(&text).expect("the fuzzing configuration");
    // The roaming peer holds only its own key.
    let shared = if me == ROAMING_PEER {
        PeerKey {
            key: Key::from_bytes(KEYS[2]),
            next: None,
        }
    } else {
        PeerKey {
            key: Key::from_bytes(KEYS[0]),
            next: Some(Key::from_bytes(KEYS[1])),
        }
    };
    c.keys = Keys {
        default: Some(shared),
        per_peer: vec![(
            mgrp_core::peers::Prefix::host(ROAMING_PEER),
            PeerKey {
                key: Key::from_bytes(KEYS[2]),
                next: None,
            },
        )],
    };
    for p in &mut c.udp.peers {
        p.roams = p.prefix.addr() == ROAMING_PEER;
    }
    c.policy.trailer_len = TRAILER_LEN;
    c.state_dir = "/nonexistent/mgrp-fuzzing".into();
    c
}

/// The receive path of a keyed daemon, and a peer's sealing.
#[derive(Debug)]
pub struct ReceivePath {
    daemon: Daemon,
    raw: Receiver,
    udp: Receiver,
    /// Seal as the peers do for [`ME`]: [`RAW_PEER`], [`ROAMING_PEER`], [`UDP_PEER`],
    /// and [`RAW_PEER`] with the next key of the rotation.
    peers: [Keyring; 4],
    /// Keeps the daemon's route events' channel open.
    _events: tokio::sync::mpsc::UnboundedReceiver<crate::exchange::RouteEvent>,
}

impl Default for ReceivePath {
    fn default() -> Self {
        Self::new()
    }
}

impl ReceivePath {
    /// A fresh daemon: no endpoint learned, empty windows.
    pub fn new() -> Self {
        // Parsed once: each input starts from copies.
        static CONFIGS: std::sync::OnceLock<[Config; 5]> = std::sync::OnceLock::new();
        let [me, raw, roaming, udp, next] = CONFIGS.get_or_init(Self::configs).clone();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let daemon = Daemon::loopback(me, tx).expect("a loopback daemon");
        let (raw_rx, udp_rx) = (daemon.receiver(false, false), daemon.receiver(false, true));
        let keyring = |them: Config| {
            let them = Arc::new(them);
            Keyring::new(them.clone(), Arc::new(Endpoints::new(them)))
        };
        Self {
            daemon,
            raw: raw_rx,
            udp: udp_rx,
            peers: [keyring(raw), keyring(roaming), keyring(udp), keyring(next)],
            _events: rx,
        }
    }

    /// This daemon's configuration, then its peers': [`RAW_PEER`],
    /// [`ROAMING_PEER`], [`UDP_PEER`], and [`RAW_PEER`] sealing with the next key.
    fn configs() -> [Config; 5] {
        let me = config(
            ME,
            &[
                (RAW_PEER, ""),
                (ROAMING_PEER, "encap = \"udp\""),
                (UDP_PEER, "encap = \"udp\"\nendpoint = \"192.0.2.4:4253\""),
            ],
        );
        let mut next = config(RAW_PEER, &[(ME, "")]);
        next.keys.default = Some(PeerKey {
            key: Key::from_bytes(KEYS[1]),
            next: None,
        });
        [
            me,
            config(RAW_PEER, &[(ME, "")]),
            config(ROAMING_PEER, &[(ME, "")]),
            config(UDP_PEER, &[(ME, "")]),
            next,
        ]
    }

    /// A packet over raw IP from `from` to this daemon.
    pub fn raw(&mut self, from: IpAddr, payload: &[u8]) {
        let ip_len = payload.len() + 20;
        self.raw.handle_mgrp(
            from,
            None,
            Some(ME),
            payload,
            ip_len,
            WallTime::from_nanos(1),
        );
    }

    /// A UDP datagram from `from` to this daemon.
    pub fn udp(&mut self, from: SocketAddr, payload: &[u8]) {
        let ip_len = payload.len() + 28;
        self.udp
            .handle_udp(from, Some(ME), payload, ip_len, WallTime::from_nanos(1));
    }

    /// `packet` sealed as [`RAW_PEER`] seals for this daemon (with the shared key).
    pub fn sealed_by_peer(&self, packet: &mut Packet<Vec<u8>>) {
        self.sealed_by(RAW_PEER, packet);
    }

    /// `packet` sealed as `peer` ([`RAW_PEER`], [`ROAMING_PEER`] or [`UDP_PEER`])
    /// seals for this daemon.
    pub fn sealed_by(&self, peer: IpAddr, packet: &mut Packet<Vec<u8>>) {
        let i = [RAW_PEER, ROAMING_PEER, UDP_PEER]
            .iter()
            .position(|p| *p == peer)
            .expect("one of the fuzzing peers");
        self.peers[i].seal(ME, packet);
    }

    /// `packet` sealed as `peer` would with the next key of a rotation.
    pub fn sealed_with_next_key(&self, peer: IpAddr, packet: &mut Packet<Vec<u8>>) {
        assert_eq!(peer, RAW_PEER, "the rotation's peer");
        self.peers[3].seal(ME, packet);
    }

    /// `packet` sealed as this daemon seals for `peer`: sent back to it, a reflection.
    pub fn sealed_by_me(&self, peer: IpAddr, packet: &mut Packet<Vec<u8>>) {
        self.daemon.net().keyring.seal(peer, packet);
    }

    /// Where the daemon sends `peer`'s packets now.
    pub fn endpoint(&self, peer: IpAddr) -> Option<SocketAddr> {
        self.daemon.net().endpoints().endpoint(peer)
    }

    /// The daemon's counters.
    pub fn stats(&self) -> DaemonStats {
        self.daemon.stats().get()
    }
}
