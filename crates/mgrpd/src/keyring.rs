//! Keyed MGRP in the daemon: which key seals a packet to a peer and which keys open
//! one from it, the direction each tag is bound to, the packet counter, and one replay
//! window per peer, shared by the raw and the UDP receivers and kept across restarts.
//!
//! A tag binds its packet to a direction: this daemon and the peer, each named by the
//! address the other knows it by (`mgrp_core::auth::Direction`). A peer is named by
//! its peer address here; this daemon by the address its riders to that peer leave
//! from (`Config::source_plan` in routes.rs: the configured `source`, else its address on the way
//! to the peer's endpoint), which is the address the peer admits its riders from and
//! so the one it names this daemon by. A packet arriving for this daemon is opened as
//! sealed by its peer for that address, or for the address the packet was sent to
//! (the same one, unless a NAT in front of this host rewrote it), with the sending
//! key and then the next key of a rotation. What opens no way is checked once more
//! the other way round (a packet this daemon sealed, sent back to it) and with the
//! tag of daemons before directions, so the log and the counters say which it was.
//!
//! Keys are swapped whole on SIGHUP; the counter and the windows are written to
//! `state-dir` every few seconds and at shutdown, and read at start.

use std::collections::HashMap;
use std::net::IpAddr;
use std::os::unix::fs::DirBuilderExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use mgrp_core::auth::{self, Binding, Direction, Freshness, ReplayWindow, Scheme};
use mgrp_core::wire::Packet;
use tracing::{info, warn};

use crate::config::{Config, Keys, PeerKey};
use crate::endpoints::Endpoints;
use crate::routes::SourcePlan;
use crate::sys;

/// Added to the saved counter at start: more packets than a daemon sends between two
/// saves, so none of the last ones before a crash is sent again with its counter.
const COUNTER_MARGIN: u64 = 1 << 32;

/// Own addresses remembered per peer at most; beyond, they are looked up each time.
/// Only peers this daemon sends to are remembered.
const MAX_IDENTITIES: usize = 4096;

/// Refused packets looked at again per second, to tell a reflection or an old tag
/// from a wrong one; beyond, they count as wrong tags.
const DIAGNOSES_PER_SECOND: u32 = 100;

/// What became of a packet's trailer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// No key for its peer, and no trailer: taken as it is.
    Plain,
    /// Authentic and not seen before; `newest`: above every counter of the peer's
    /// seen so far (only such a packet may move a roaming peer).
    Authentic { newest: bool },
    /// Refused, and why.
    Refused(Refusal),
}

/// Why a packet was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// No trailer, but its peer has a key.
    Unauthenticated,
    /// A trailer, but its peer has no key.
    Unexpected,
    /// Opens with no key in its direction.
    BadTag,
    /// Opens as a packet this daemon sealed for the peer it claims to come from.
    Reflected,
    /// Opens with the tag of daemons before directions, which `auth = 2` refuses.
    OldScheme,
    /// Its counter was seen, or is too old.
    Replayed,
}

/// The keys in force and how tags are computed; swapped whole on reload.
#[derive(Debug, Clone)]
struct Current {
    keys: Keys,
    scheme: Scheme,
}

/// The daemon's keys, counter and replay windows.
#[derive(Debug)]
pub(crate) struct Keyring {
    config: Arc<Config>,
    endpoints: Arc<Endpoints>,
    current: RwLock<Current>,
    /// The counter of the next sealed packet.
    counter: AtomicU64,
    /// One per peer, by peer address.
    windows: Mutex<HashMap<IpAddr, ReplayWindow>>,
    /// This daemon's address as each peer knows it, for the peers it sends to.
    identities: RwLock<HashMap<IpAddr, IpAddr>>,
    /// Refused packets looked at again this second: (second, count).
    diagnoses: Mutex<(u64, u32)>,
    /// Whether the state file can be written.
    saving: AtomicBool,
    /// Looks those addresses up, on any thread.
    sources: sys::SourceFinder,
    /// Where the counter and the windows are saved, if keys are in use.
    state: Option<PathBuf>,
    /// Whether anything changed since the last save.
    dirty: AtomicBool,
}

impl Keyring {
    /// The keyring of `config`, its counter and windows read from the state file.
    pub(crate) fn new(config: Arc<Config>, endpoints: Arc<Endpoints>) -> Self {
        let state = config
            .keys
            .enabled()
            .then(|| config.state_dir.join(format!("{}.replay", config.tun)));
        let saved = state.as_deref().map(load).unwrap_or_default();
        let clock = mgrp_rt::wall_now().as_nanos();
        let counter = saved
            .counter
            .map_or(clock, |c| clock.max(c.saturating_add(COUNTER_MARGIN)));
        let windows = saved
            .tops
            .into_iter()
            .map(|(peer, top)| (peer, ReplayWindow::resumed(top)))
            .collect();
        let sources = sys::SourceFinder::new(config.fwmark);
        let keyring = Self {
            current: RwLock::new(Current {
                keys: config.keys.clone(),
                scheme: config.auth,
            }),
            config,
            endpoints,
            counter: AtomicU64::new(counter),
            windows: Mutex::new(windows),
            identities: RwLock::default(),
            diagnoses: Mutex::default(),
            saving: AtomicBool::new(true),
            sources,
            state,
            dirty: AtomicBool::new(false),
        };
        if keyring.config.keys.enabled() {
            // The peers this daemon will send to, looked up while it may still use
            // every capability; the pacer then finds them in the cache.
            let peers: Vec<IpAddr> = keyring
                .config
                .peers
                .peers()
                .iter()
                .filter(|p| p.prefix.len() == if p.prefix.addr().is_ipv4() { 32 } else { 128 })
                .map(|p| p.prefix.addr())
                .chain(keyring.config.via.values().copied())
                .collect();
            for peer in peers {
                keyring.identity(peer);
            }
        }
        keyring
    }

    /// Whether packets are authenticated at all.
    pub(crate) fn enabled(&self) -> bool {
        self.current().keys.enabled()
    }

    fn current(&self) -> std::sync::RwLockReadGuard<'_, Current> {
        self.current.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Seals `packet` for `peer` when it has a key; the last step before it is sent.
    pub(crate) fn seal(&self, peer: IpAddr, packet: &mut Packet<Vec<u8>>) {
        let current = self.current();
        let Some(key) = current.keys.key_for(peer) else {
            return;
        };
        let binding = match current.scheme {
            Scheme::V1 => Binding::None,
            Scheme::V2 => Binding::To(Direction {
                from: self.identity(peer),
                to: peer,
            }),
        };
        let counter = self.counter.fetch_add(1, Ordering::Relaxed);
        self.dirty.store(true, Ordering::Relaxed);
        // The planner reserves the trailer whenever keys are configured.
        let _ = auth::seal(&key.key, binding, packet, counter);
    }

    /// Checks the trailer of a packet from peer `from`, sent to `to` (this host's
    /// address on it, where known), and its counter against the peer's window.
    pub(crate) fn open(&self, from: IpAddr, to: Option<IpAddr>, packet: &Packet<&[u8]>) -> Verdict {
        let has_trailer = packet.trailer().len() == usize::from(auth::TRAILER_LEN);
        let current = self.current();
        let Some(keys) = current.keys.key_for(from) else {
            return if has_trailer {
                Verdict::Refused(Refusal::Unexpected)
            } else {
                Verdict::Plain
            };
        };
        if !has_trailer {
            return Verdict::Refused(Refusal::Unauthenticated);
        }
        let selves = self.selves(from, to);
        let Some(counter) = opened(keys, &selves, from, current.scheme, packet) else {
            let why = if self.may_diagnose() {
                diagnosed(keys, &selves, from, current.scheme, packet)
            } else {
                Refusal::BadTag
            };
            return Verdict::Refused(why);
        };
        drop(current);
        let mut windows = mgrp_rt::lock(&self.windows);
        let verdict = match windows.entry(from).or_default().check(counter) {
            Freshness::Newest => Verdict::Authentic { newest: true },
            Freshness::Late => Verdict::Authentic { newest: false },
            Freshness::Replayed => return Verdict::Refused(Refusal::Replayed),
        };
        self.dirty.store(true, Ordering::Relaxed);
        verdict
    }

    /// Whether one more refused packet may be looked at again to say what it was (a
    /// reflection, an old tag): at most [`DIAGNOSES_PER_SECOND`], so a flood of
    /// forgeries costs the forward checks only.
    fn may_diagnose(&self) -> bool {
        let now = mgrp_rt::mono_now().as_nanos() / 1_000_000_000;
        let mut d = mgrp_rt::lock(&self.diagnoses);
        if d.0 != now {
            *d = (now, 0);
        }
        d.1 += 1;
        d.1 <= DIAGNOSES_PER_SECOND
    }

    /// Whether a packet sent to `to` opens as `peer`'s with one of its keys (the tag
    /// alone; the window is left to [`Self::open`]).
    pub(crate) fn opens_as(
        &self,
        peer: IpAddr,
        to: Option<IpAddr>,
        packet: &Packet<&[u8]>,
    ) -> bool {
        let current = self.current();
        current.keys.key_for(peer).is_some_and(|keys| {
            let selves = self.selves(peer, to);
            opened(keys, &selves, peer, current.scheme, packet).is_some()
        })
    }

    /// The addresses `from` may know this daemon by: the one the packet came to, and
    /// the one its riders to `from` leave from when that is known without a lookup
    /// (configured, or found before for a packet sent to it). A packet, authentic or
    /// not, never costs a route lookup or a place in the cache.
    /// Kept on the stack: this runs for every keyed packet received.
    fn selves(&self, from: IpAddr, to: Option<IpAddr>) -> Selves {
        let known = self
            .identities
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&from)
            .copied()
            .or_else(|| self.config.sources.for_peer(from));
        let second = known.filter(|k| to != Some(*k));
        match (to, second) {
            (Some(a), Some(b)) => Selves([a, b], 2),
            (Some(a), None) | (None, Some(a)) => Selves([a, a], 1),
            (None, None) => Selves([from, from], 0),
        }
    }

    /// This daemon's address as `peer` knows it.
    pub(crate) fn identity(&self, peer: IpAddr) -> IpAddr {
        if let Some(a) = self
            .identities
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&peer)
        {
            return *a;
        }
        let a = self.resolve(peer);
        tracing::debug!("peer {peer} knows this host as {a}: packets to and from it are sealed so");
        let mut known = self
            .identities
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if known.len() < MAX_IDENTITIES {
            known.insert(peer, a);
        }
        a
    }

    fn resolve(&self, peer: IpAddr) -> IpAddr {
        let plan = self
            .config
            .source_plan(ipnet::IpNet::from(peer), |p| self.endpoints.endpoint(p));
        let found = match plan {
            SourcePlan::Configured(a) => Ok(a),
            SourcePlan::Toward { endpoint, .. } => self.sources.source_for(endpoint),
            SourcePlan::Roaming(p) => self.sources.source_for(p),
        };
        found.unwrap_or(match peer {
            IpAddr::V4(_) => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
            IpAddr::V6(_) => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
        })
    }

    /// Looks up again this daemon's address as each peer knows it (a roaming peer
    /// heard from elsewhere, a changed address), and saves the counter and windows
    /// if they changed. Called every few seconds, off the data path.
    pub(crate) fn refresh(&self) {
        let peers: Vec<IpAddr> = self
            .identities
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .copied()
            .collect();
        for peer in peers {
            let a = self.resolve(peer);
            let mut known = self
                .identities
                .write()
                .unwrap_or_else(PoisonError::into_inner);
            if known.insert(peer, a).is_some_and(|old| old != a) {
                info!("peer {peer} now knows this host as {a}: packets to it are sealed so");
            }
        }
        self.save();
    }

    /// Makes the state directory (mode 0700), owned by `user` when mgrpd becomes that
    /// user once set up, and saves the counter there: a directory it cannot write
    /// is said at start, not at the first save.
    pub(crate) fn prepare(&self, user: Option<&str>) {
        let Some(dir) = self.state.as_deref().and_then(Path::parent) else {
            return;
        };
        use std::os::unix::fs::MetadataExt as _;
        let existed = dir.exists();
        let owner = user.and_then(sys::user_ids);
        let made = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .and_then(|()| match owner {
                // Only a directory mgrpd made is given away, never one it found.
                Some((uid, gid)) if !existed => sys::give_to(dir, uid, gid),
                Some((uid, _)) if std::fs::metadata(dir)?.uid() != uid => {
                    Err(std::io::Error::other(format!(
                        "it is not owned by user {}, whom mgrpd becomes (chown it, or give systemd's StateDirectory with User=)",
                        user.unwrap_or_default()
                    )))
                }
                _ => Ok(()),
            });
        if let Err(e) = made {
            self.saving.store(false, Ordering::Relaxed);
            warn!(
                "cannot keep state in {}: {e}; replay windows will not outlive a restart",
                dir.display()
            );
            return;
        }
        self.dirty.store(true, Ordering::Relaxed);
        self.save();
    }

    /// Writes the counter and the windows to the state file, if anything changed.
    pub(crate) fn save(&self) {
        let Some(path) = &self.state else {
            return;
        };
        if !self.saving.load(Ordering::Relaxed) || !self.dirty.swap(false, Ordering::Relaxed) {
            return;
        }
        let mut text = String::from(
            "# mgrpd's packet counter and its peers' replay windows (the highest counter seen), kept across restarts\n",
        );
        text.push_str(&format!(
            "counter {}\n",
            self.counter.load(Ordering::Relaxed)
        ));
        for (peer, w) in mgrp_rt::lock(&self.windows).iter() {
            if let Some(top) = w.top() {
                text.push_str(&format!("peer {peer} {top}\n"));
            }
        }
        if let Err(e) = write_private(path, &text) {
            // Said once: the directory will not become writable by itself.
            self.saving.store(false, Ordering::Relaxed);
            warn!(
                "cannot save the replay windows to {}: {e}; they are not saved from now on, so after a restart packets recorded on the way could be taken once more (give a writable --state-dir, then restart)",
                path.display()
            );
        }
    }

    /// Takes the keys (and the tag scheme) of a configuration loaded again.
    pub(crate) fn reload(&self, keys: Keys, scheme: Scheme) -> Result<(), String> {
        let mut current = self.current.write().unwrap_or_else(PoisonError::into_inner);
        if keys.enabled() != current.keys.enabled() {
            return Err(
                "keys cannot be turned on or off by a reload (the trailer changes every packet's room): restart mgrpd"
                    .into(),
            );
        }
        let changed = current.keys != keys || current.scheme != scheme;
        *current = Current { keys, scheme };
        drop(current);
        if changed {
            info!(
                "keys reloaded: packets are sealed with each peer's key-file and opened with it or its next-key-file; tags of version {}",
                scheme.number()
            );
        } else {
            info!("keys reloaded: nothing changed");
        }
        Ok(())
    }
}

/// Up to two addresses this daemon may be known by (see [`Keyring::selves`]).
#[derive(Debug, Clone, Copy)]
struct Selves([IpAddr; 2], usize);

impl std::ops::Deref for Selves {
    type Target = [IpAddr];

    fn deref(&self) -> &[IpAddr] {
        &self.0[..self.1]
    }
}

/// The counter of `packet` if it opens as sealed by `from` for one of `selves` with
/// one of `keys` (or, under `Scheme::V1`, with a version 1 tag as well).
fn opened(
    keys: &PeerKey,
    selves: &[IpAddr],
    from: IpAddr,
    scheme: Scheme,
    packet: &Packet<&[u8]>,
) -> Option<u64> {
    let v1 = (scheme == Scheme::V1).then_some(Binding::None);
    keys.accepted().find_map(|k| {
        selves
            .iter()
            .map(|&me| Binding::To(Direction { from, to: me }))
            .chain(v1)
            .find_map(|b| auth::open(k, b, packet).ok())
    })
}

/// What a packet that did not open is: one this daemon sealed for `from` (sent back
/// to it), one with a version 1 tag (`auth = 2` refuses those), or a wrong one.
fn diagnosed(
    keys: &PeerKey,
    selves: &[IpAddr],
    from: IpAddr,
    scheme: Scheme,
    packet: &Packet<&[u8]>,
) -> Refusal {
    let opens = |b: Binding| keys.accepted().any(|k| auth::open(k, b, packet).is_ok());
    if scheme == Scheme::V2 && opens(Binding::None) {
        return Refusal::OldScheme;
    }
    if selves
        .iter()
        .any(|&me| opens(Binding::To(Direction { from: me, to: from })))
    {
        return Refusal::Reflected;
    }
    Refusal::BadTag
}

/// What the state file held.
#[derive(Debug, Default)]
struct Saved {
    counter: Option<u64>,
    tops: Vec<(IpAddr, u64)>,
}

/// Reads the state file; a missing one is a first start, a bad one is said and
/// ignored.
fn load(path: &Path) -> Saved {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            info!(
                "no saved replay windows at {} (a first start): each peer's first packet is taken as its newest",
                path.display()
            );
            return Saved::default();
        }
        Err(e) => {
            warn!(
                "cannot read the saved replay windows at {}: {e}; starting without them",
                path.display()
            );
            return Saved::default();
        }
    };
    match parse_state(&text) {
        Ok(s) => {
            info!(
                "replay windows of {} peers read from {}",
                s.tops.len(),
                path.display()
            );
            s
        }
        Err(line) => {
            warn!(
                "{} line {line} is not `counter N` or `peer ADDR N`; starting without the saved replay windows",
                path.display()
            );
            Saved::default()
        }
    }
}

/// Parses the state file's text; `Err(line number)` at the first bad line.
fn parse_state(text: &str) -> Result<Saved, usize> {
    let mut saved = Saved::default();
    for (i, line) in text.lines().enumerate() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            [] => {}
            [w, ..] if w.starts_with('#') => {}
            ["counter", n] => saved.counter = Some(n.parse().map_err(|_| i + 1)?),
            ["peer", a, n] => saved
                .tops
                .push((a.parse().map_err(|_| i + 1)?, n.parse().map_err(|_| i + 1)?)),
            _ => return Err(i + 1),
        }
    }
    Ok(saved)
}

/// Writes `text` to `path` through a temporary file only the owner may read, so a
/// crash mid-write leaves the old state whole.
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let tmp = path.with_extension("replay.new");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(text.as_bytes())?;
    f.sync_data()?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_file_reads_back_and_bad_lines_are_named() {
        let s = parse_state("# c\ncounter 42\n\npeer 10.0.0.2 7\npeer 2001:db8::1 9\n").unwrap();
        assert_eq!(s.counter, Some(42));
        assert_eq!(
            s.tops,
            vec![
                ("10.0.0.2".parse().unwrap(), 7),
                ("2001:db8::1".parse().unwrap(), 9)
            ]
        );
        assert_eq!(parse_state("counter 1\npeer x 2\n").unwrap_err(), 2);
        assert_eq!(parse_state("counter\n").unwrap_err(), 1);
        assert_eq!(parse_state("peer 10.0.0.1 -3\n").unwrap_err(), 1);
    }
}
