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
    c.update_peering(|p| {
        p.keys = Keys {
            default: Some(shared),
            per_peer: vec![(
                mgrp_core::peers::Prefix::host(ROAMING_PEER),
                PeerKey {
                    key: Key::from_bytes(KEYS[2]),
                    next: None,
                },
            )],
            derived: Vec::new(),
        };
        for u in &mut p.udp.peers {
            u.roams = u.prefix.addr() == ROAMING_PEER;
        }
    });
    c.policy.trailer_len = TRAILER_LEN;
    c.state_dir = "/nonexistent/mgrp-fuzzing".into();
    c
}

/// An empty keepalive with room for the trailer, to seal.
pub fn keepalive() -> Packet<Vec<u8>> {
    let repr = mgrp_core::wire::Repr {
        version: mgrp_core::wire::Version::V2,
        header: mgrp_core::wire::Header::keepalive(),
        tool_header: &[],
        chunks: vec![],
        trailer_len: TRAILER_LEN,
    };
    repr.emit_into(vec![0u8; repr.buffer_len()])
        .expect("a keepalive fits its own length")
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
            Keyring::new(them.clone(), Arc::new(Endpoints::new(them)), Arc::default())
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
        let next = config(RAW_PEER, &[(ME, "")]);
        next.update_peering(|p| {
            p.keys.default = Some(PeerKey {
                key: Key::from_bytes(KEYS[1]),
                next: None,
            });
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

#[cfg(test)]
mod tests {
    use super::*;
    use mgrp_core::auth::Scheme;

    fn taken(s: &DaemonStats) -> u64 {
        s.daemon.keepalives_received
    }

    #[test]
    fn a_peers_packet_is_taken_once_and_this_hosts_own_sent_back_never() {
        let mut path = ReceivePath::new();
        let mut p = keepalive();
        path.sealed_by_peer(&mut p);
        path.raw(RAW_PEER, p.as_bytes());
        assert_eq!(taken(&path.stats()), 1);
        path.raw(RAW_PEER, p.as_bytes());
        let s = path.stats();
        assert_eq!((taken(&s), s.daemon.mgrp_replayed), (1, 1));
        // What this host sealed for the peer, sent back as the peer's: refused, and
        // the peer's window does not move (its next packet is still taken).
        let mut mine = keepalive();
        path.sealed_by_me(RAW_PEER, &mut mine);
        path.raw(RAW_PEER, mine.as_bytes());
        // Or passed to this host under another peer's name (same shared key).
        path.udp(UDP_ENDPOINT, mine.as_bytes());
        let s = path.stats();
        assert_eq!((taken(&s), s.daemon.mgrp_reflected), (1, 1), "{s:#?}");
        assert_eq!(s.daemon.mgrp_bad_tag, 1, "{s:#?}");
        let mut next = keepalive();
        path.sealed_by_peer(&mut next);
        path.raw(RAW_PEER, next.as_bytes());
        assert_eq!(taken(&path.stats()), 2);
        // The peer's packet from the UDP peer's endpoint: not that peer's.
        let mut p = keepalive();
        path.sealed_by_peer(&mut p);
        path.udp(UDP_ENDPOINT, p.as_bytes());
        let s = path.stats();
        assert_eq!((taken(&s), s.daemon.mgrp_bad_tag), (2, 2), "{s:#?}");
        assert!(s.receive_conserved(), "{s:#?}");
    }

    #[test]
    fn a_reflected_packet_moves_no_roaming_peer() {
        let mut path = ReceivePath::new();
        assert_eq!(path.endpoint(ROAMING_PEER), None);
        let attacker: SocketAddr = "198.51.100.9:5555".parse().unwrap();
        let mut mine = keepalive();
        path.sealed_by_me(ROAMING_PEER, &mut mine);
        path.udp(attacker, mine.as_bytes());
        let s = path.stats();
        assert_eq!(path.endpoint(ROAMING_PEER), None);
        assert_eq!(
            (s.daemon.peer_endpoint_changes, s.daemon.mgrp_not_peer),
            (0, 1)
        );
        // The peer's own packet moves it; an older one of its, from elsewhere, not.
        let (mut old, mut new) = (keepalive(), keepalive());
        path.sealed_by(ROAMING_PEER, &mut old);
        path.sealed_by(ROAMING_PEER, &mut new);
        let at: SocketAddr = "203.0.113.7:40001".parse().unwrap();
        path.udp(at, new.as_bytes());
        assert_eq!(path.endpoint(ROAMING_PEER), Some(at));
        path.udp(attacker, old.as_bytes());
        assert_eq!(path.endpoint(ROAMING_PEER), Some(at));
        let s = path.stats();
        assert_eq!(s.daemon.peer_endpoint_changes, 1, "{s:#?}");
        assert!(s.receive_conserved(), "{s:#?}");
    }

    fn checks(path: &ReceivePath) -> u64 {
        path.stats().daemon.tag_checks
    }

    /// This daemon, or every peer, set to tag scheme `scheme` as a reload would.
    fn set_scheme(keyring: &Keyring, config: &Config, scheme: Scheme) {
        let peering = config.peering();
        keyring
            .reload(peering.keys.clone(), scheme, scheme)
            .unwrap();
    }

    /// With key indexes (scheme 3) an authentic packet costs one tag check, found by
    /// address or, for a roaming peer, by the index alone (and is not opened again
    /// once found); a datagram naming no key costs none and uses up no trial.
    #[test]
    fn a_packet_costs_one_tag_check_and_one_naming_no_key_none() {
        let mut path = ReceivePath::new();
        let mut p = keepalive();
        path.sealed_by_peer(&mut p);
        path.raw(RAW_PEER, p.as_bytes());
        assert_eq!((taken(&path.stats()), checks(&path)), (1, 1));
        // The next key of a rotation: the index picks it, the sending key is not
        // tried. (A daemon of its own: the two peers' keyrings count alike.)
        let mut rotating = ReceivePath::new();
        let mut q = keepalive();
        rotating.sealed_with_next_key(RAW_PEER, &mut q);
        rotating.raw(RAW_PEER, q.as_bytes());
        assert_eq!((taken(&rotating.stats()), checks(&rotating)), (1, 1));
        // The roaming peer from an endpoint never seen: found by its key's index.
        let at: SocketAddr = "203.0.113.7:40001".parse().unwrap();
        let mut r = keepalive();
        path.sealed_by(ROAMING_PEER, &mut r);
        path.udp(at, r.as_bytes());
        assert_eq!(path.endpoint(ROAMING_PEER), Some(at));
        assert_eq!((taken(&path.stats()), checks(&path)), (2, 2));
        // Junk from elsewhere: its index is no key's, so no tag is computed.
        let stranger: SocketAddr = "198.51.100.9:5555".parse().unwrap();
        let mut junk = keepalive();
        path.sealed_by(ROAMING_PEER, &mut junk);
        let mut junk = junk.into_inner();
        let n = junk.len();
        junk[n - 13] ^= 0x01; // the index's last byte
        for _ in 0..1_000 {
            path.udp(stranger, &junk);
        }
        let s = path.stats();
        assert_eq!(checks(&path), 2, "{s:#?}");
        assert_eq!(
            (s.daemon.mgrp_not_peer, s.daemon.trials_refused),
            (1_000, 0)
        );
        // A forgery that copies the roaming peer's index costs one check each,
        // within the trials a source is given a second.
        let mut forged = keepalive();
        path.sealed_by(ROAMING_PEER, &mut forged);
        let mut forged = forged.into_inner();
        forged[n - 1] ^= 0x01;
        for _ in 0..10 {
            path.udp(stranger, &forged);
        }
        let s = path.stats();
        let tried = 10 - s.daemon.trials_refused;
        assert!(
            tried <= u64::from(crate::endpoints::TRIALS_PER_SOURCE_PER_SECOND) * 2,
            "{s:#?}"
        );
        assert_eq!(checks(&path), 2 + tried, "{s:#?}");
        assert_eq!(path.endpoint(ROAMING_PEER), Some(at));
        assert!(s.receive_conserved(), "{s:#?}");
    }

    /// Upgrading to key indexes: a daemon set to `auth = 2` takes scheme 3 packets
    /// as well as its own, and finds a roaming peer of either by trying its keys; one
    /// on `auth = 3` refuses scheme 2 as an older mgrpd's (said as such), and tries
    /// no key on a scheme 2 packet from an unknown endpoint.
    #[test]
    fn old_and_new_schemes_meet_under_the_auth_rule() {
        let configs = ReceivePath::configs();
        let mut path = ReceivePath::new();
        let me = &path.daemon.net().keyring;
        set_scheme(me, &configs[0], Scheme::V2);
        // Peers still on scheme 3, and then on 2: both taken.
        let mut p = keepalive();
        path.sealed_by_peer(&mut p);
        path.raw(RAW_PEER, p.as_bytes());
        for (i, c) in configs[1..4].iter().enumerate() {
            set_scheme(&path.peers[i], c, Scheme::V2);
        }
        let mut q = keepalive();
        path.sealed_by_peer(&mut q);
        path.raw(RAW_PEER, q.as_bytes());
        let at: SocketAddr = "203.0.113.7:40001".parse().unwrap();
        let mut r = keepalive();
        path.sealed_by(ROAMING_PEER, &mut r);
        path.udp(at, r.as_bytes());
        let s = path.stats();
        assert_eq!((taken(&s), s.daemon.mgrp_old_auth), (3, 0), "{s:#?}");
        assert_eq!(path.endpoint(ROAMING_PEER), Some(at));
        // This daemon on 3: the peers' scheme 2 packets are an older mgrpd's.
        let mut path = ReceivePath::new();
        for (i, c) in configs[1..4].iter().enumerate() {
            set_scheme(&path.peers[i], c, Scheme::V2);
        }
        let mut p = keepalive();
        path.sealed_by_peer(&mut p);
        path.raw(RAW_PEER, p.as_bytes());
        let before = checks(&path);
        let mut r = keepalive();
        path.sealed_by(ROAMING_PEER, &mut r);
        path.udp(at, r.as_bytes());
        let s = path.stats();
        assert_eq!((taken(&s), s.daemon.mgrp_old_auth), (0, 1), "{s:#?}");
        assert_eq!((s.daemon.mgrp_not_peer, checks(&path)), (1, before));
        assert_eq!(path.endpoint(ROAMING_PEER), None);
    }

    /// The guide's upgrade from tags version 2, step by step, the two daemons of a
    /// pair switched one after the other: every packet either way is taken at every
    /// moment. Steps: both on version 2 (a daemon upgraded with `auth = 2`), then
    /// `auth = 3` with `auth-accept = 2`, then `auth = 3` alone.
    #[test]
    fn the_upgrade_from_version_2_refuses_nothing_at_any_step() {
        let configs = ReceivePath::configs();
        let mut path = ReceivePath::new();
        let steps = [
            (Scheme::V2, Scheme::V2),
            (Scheme::V3, Scheme::V2),
            (Scheme::V3, Scheme::V3),
        ];
        let mut sent = 0;
        let me = |p: &ReceivePath, (seal, accept): (Scheme, Scheme)| {
            p.daemon
                .net()
                .keyring
                .reload(configs[0].peering().keys.clone(), seal, accept)
                .unwrap();
        };
        let peer = |p: &ReceivePath, (seal, accept): (Scheme, Scheme)| {
            p.peers[0]
                .reload(configs[1].peering().keys.clone(), seal, accept)
                .unwrap();
        };
        let mut exchange = |p: &mut ReceivePath| {
            // The peer's packet to this daemon, and this daemon's to the peer (as it
            // would open it: sealed by this daemon, opened by the peer's keyring).
            let mut k = keepalive();
            p.sealed_by_peer(&mut k);
            p.raw(RAW_PEER, k.as_bytes());
            sent += 1;
            let mut back = keepalive();
            p.sealed_by_me(RAW_PEER, &mut back);
            let back = Packet::new_checked(back.as_bytes()).unwrap();
            let verdict = p.peers[0].open(ME, Some(RAW_PEER), &back, None);
            assert!(
                matches!(verdict, crate::keyring::Verdict::Authentic { .. }),
                "{verdict:?}"
            );
            let s = p.stats();
            assert_eq!(taken(&s), sent, "{s:#?}");
        };
        me(&path, steps[0]);
        peer(&path, steps[0]);
        exchange(&mut path);
        for step in &steps[1..] {
            me(&path, *step);
            exchange(&mut path);
            peer(&path, *step);
            exchange(&mut path);
        }
        // Once on version 3 alone, a packet of version 2 is refused as older.
        peer(&path, steps[0]);
        let mut old = keepalive();
        path.sealed_by_peer(&mut old);
        path.raw(RAW_PEER, old.as_bytes());
        assert_eq!(path.stats().daemon.mgrp_old_auth, 1);
    }

    #[test]
    fn keys_of_a_rotation_open_and_others_do_not() {
        let mut path = ReceivePath::new();
        // UDP_PEER's packets come from its configured endpoint.
        let mut p = keepalive();
        path.sealed_by(UDP_PEER, &mut p);
        path.udp(UDP_ENDPOINT, p.as_bytes());
        let mut q = keepalive();
        path.sealed_with_next_key(RAW_PEER, &mut q);
        path.raw(RAW_PEER, q.as_bytes());
        let s = path.stats();
        assert_eq!(taken(&s), 2, "{s:#?}");
        // A key that is neither of the peer's (the roaming peer's own) does not open.
        let mut other = keepalive();
        path.sealed_by(ROAMING_PEER, &mut other);
        path.raw(RAW_PEER, other.as_bytes());
        let s = path.stats();
        assert_eq!((taken(&s), s.daemon.mgrp_bad_tag), (2, 1), "{s:#?}");
    }
}
