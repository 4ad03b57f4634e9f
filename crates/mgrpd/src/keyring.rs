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
//!
//! Replay windows hold across a crash as well as a clean stop. A sealed packet's
//! counter follows its sender's clock: its high 32 bits are at least the second it
//! was sealed in (`max(last + 1, second << 32)`), so a counter says when its packet
//! was sealed however long its sender has run, while within a second counters still
//! count packets (the window takes packets reordered by up to 1,984 places, and a
//! peer's window of the second before is kept for those reordered across a second's
//! turn). A
//! receiver never takes a counter above the *bound* it last wrote to its state file
//! (its own clock plus [`ACCEPT_AHEAD`], moved on as packets come; a counter beyond
//! it is written first). After a clean stop the file says so and each peer's window
//! resumes at its highest counter; after anything else (a kill, a crash, power lost,
//! the file gone or unreadable) every counter up to the bound, or up to the clock plus
//! [`ACCEPT_AHEAD`] when no bound survives, is refused from every peer: nothing taken
//! before can be taken again, and a live peer's packets clear that floor within
//! [`ACCEPT_AHEAD`] of the last save.

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
use crate::counters::Counters;
use crate::endpoints::Endpoints;
use crate::routes::SourcePlan;
use crate::sys;

/// Bits of a counter below its second.
const SECOND_BITS: u32 = 32;

/// Added to the saved counter at start: more than the seconds between two saves and
/// the one after, so none of the last counters before a crash is sealed again even
/// if the clock went back.
const COUNTER_MARGIN: u64 = 4 << SECOND_BITS;

/// The lowest counter of the second wall-clock time `ns` falls in.
fn second_counter(ns: u64) -> u64 {
    (ns / 1_000_000_000) << SECOND_BITS
}

/// How far past this host's clock the bound of counters it takes is written ahead:
/// the clocks' allowed disagreement (wire version 2 needs them within ±2.1 s), the
/// time between two saves (2 s), and a margin. A peer's counter beyond the bound
/// (a clock further ahead, or a sender just restarted with [`COUNTER_MARGIN`]) has the
/// bound written on before it is taken. After an unclean stop the floor is at most
/// this far ahead of the last save, so a live peer is refused for no longer.
const ACCEPT_AHEAD: u64 = 5 << SECOND_BITS;

/// Longest pause between attempts to save after a failed one.
const SAVE_RETRY_MAX: std::time::Duration = std::time::Duration::from_secs(60);

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
    /// Opens with the tag of an older scheme than this daemon's `auth` takes (that of
    /// daemons before key indexes, or before keys per direction).
    OldScheme(Scheme),
    /// Its counter was seen, or is too old.
    Replayed,
}

/// The keys in force and how tags are computed; swapped whole on reload.
#[derive(Debug, Clone)]
struct Current {
    keys: Keys,
    scheme: Scheme,
    /// The oldest scheme taken (at most `scheme`).
    accept: Scheme,
    /// The roaming peers by the index of each key they may seal with.
    roaming: HashMap<u32, Vec<IpAddr>>,
    /// Every roaming peer, tried one after the other on a packet of an older scheme.
    roaming_all: Vec<IpAddr>,
}

impl Current {
    fn new(config: &Config, keys: Keys, scheme: Scheme, accept: Scheme) -> Self {
        let peering = config.peering();
        let roaming_all = peering.udp.roaming();
        let mut roaming: HashMap<u32, Vec<IpAddr>> = HashMap::new();
        for &peer in &roaming_all {
            for k in keys.key_for(peer).into_iter().flat_map(PeerKey::accepted) {
                let peers = roaming.entry(k.index()).or_default();
                if !peers.contains(&peer) {
                    peers.push(peer);
                }
            }
        }
        Self {
            keys,
            scheme,
            accept: accept.min(scheme),
            roaming,
            roaming_all,
        }
    }
}

/// The daemon's keys, counter and replay windows.
#[derive(Debug)]
pub(crate) struct Keyring {
    config: Arc<Config>,
    endpoints: Arc<Endpoints>,
    current: RwLock<Current>,
    /// Where the tag checks are counted.
    counters: Arc<Counters>,
    /// The counter of the next sealed packet.
    counter: AtomicU64,
    /// One per peer, by peer address.
    windows: Mutex<HashMap<IpAddr, PeerWindow>>,
    /// This daemon's address as each peer knows it, for the peers it sends to.
    identities: RwLock<HashMap<IpAddr, IpAddr>>,
    /// Refused packets looked at again this second: (second, count).
    diagnoses: Mutex<(u64, u32)>,
    /// Whether the state directory could be made at all.
    saving: AtomicBool,
    /// Counters above this are written as the bound before one is taken.
    bound: AtomicU64,
    /// Counters at or below this are refused from every peer (after an unclean
    /// stop); 0 when none are.
    floor: u64,
    /// One save at a time, and when the next may be tried after a failed one.
    saver: Mutex<SaveState>,
    /// Looks those addresses up, on any thread.
    sources: sys::SourceFinder,
    /// Where the counter and the windows are saved, if keys are in use.
    state: Option<PathBuf>,
    /// Whether anything changed since the last save.
    dirty: AtomicBool,
}

impl Keyring {
    /// The keyring of `config`, its counter and windows read from the state file.
    pub(crate) fn new(
        config: Arc<Config>,
        endpoints: Arc<Endpoints>,
        counters: Arc<Counters>,
    ) -> Self {
        let peering = config.peering();
        let state = peering
            .keys
            .enabled()
            .then(|| config.state_dir.join(format!("{}.replay", config.tun)));
        let (saved, found) = state
            .as_deref()
            .map_or((Saved::default(), Found::FirstStart), load);
        // The next second's first counter: above any this host sealed by its clock.
        let clock = second_counter(mgrp_rt::wall_now().as_nanos()) + (1 << SECOND_BITS);
        let counter = saved
            .counter
            .map_or(clock, |c| clock.max(c.saturating_add(COUNTER_MARGIN)));
        let floor = floor_after(found, &saved, clock);
        if floor > 0 {
            warn!(
                "{}: every peer's packets sealed before {:.1} s from now are refused as possible replays (a live peer's next ones are taken after that)",
                found.why(),
                floor.saturating_sub(clock) as f64 / 1e9
            );
        }
        let windows = saved
            .tops
            .into_iter()
            .map(|(peer, top)| (peer, PeerWindow::resumed(top.max(floor))))
            .collect();
        let sources = sys::SourceFinder::new(config.fwmark);
        let keyring = Self {
            current: RwLock::new(Current::new(
                &config,
                peering.keys.clone(),
                config.auth,
                config.auth_accept,
            )),
            counters,
            config,
            endpoints,
            counter: AtomicU64::new(counter),
            windows: Mutex::new(windows),
            identities: RwLock::default(),
            diagnoses: Mutex::default(),
            saving: AtomicBool::new(true),
            bound: AtomicU64::new(0),
            floor,
            saver: Mutex::default(),
            sources,
            state,
            dirty: AtomicBool::new(false),
        };
        if peering.keys.enabled() {
            // The peers this daemon will send to, looked up while it may still use
            // every capability; the pacer then finds them in the cache.
            let peers: Vec<IpAddr> = peering
                .peers
                .peers()
                .iter()
                .filter(|p| p.prefix.len() == if p.prefix.addr().is_ipv4() { 32 } else { 128 })
                .map(|p| p.prefix.addr())
                .chain(peering.via.values().copied())
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
        let binding = current.scheme.binding(Direction {
            from: self.identity(peer),
            to: peer,
        });
        let now = second_counter(mgrp_rt::wall_now().as_nanos());
        let counter = match self
            .counter
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| {
                Some(next_counter(c, now))
            }) {
            Ok(c) | Err(c) => next_counter(c, now),
        };
        self.dirty.store(true, Ordering::Relaxed);
        // The planner reserves the trailer whenever keys are configured.
        let _ = auth::seal(&key.key, binding, packet, counter);
    }

    /// Checks the trailer of a packet from peer `from`, sent to `to` (this host's
    /// address on it, where known), and its counter against the peer's window.
    /// `opened`: the counter its tag was already checked for (a roaming peer's packet
    /// found by [`Self::find_roaming`]), so that it is not opened twice.
    pub(crate) fn open(
        &self,
        from: IpAddr,
        to: Option<IpAddr>,
        packet: &Packet<&[u8]>,
        opened: Option<u64>,
    ) -> Verdict {
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
        let counter = match opened {
            // Its tag was checked when it was found.
            Some(c) => c,
            None => match self.check_tag(keys, current.accept, from, to, packet) {
                Ok(c) => c,
                Err(why) => return Verdict::Refused(why),
            },
        };
        drop(current);
        if counter > self.bound.load(Ordering::Relaxed) {
            // Written on before it is taken, so a crash cannot take it again.
            self.save_bound(counter);
        }
        let mut windows = mgrp_rt::lock(&self.windows);
        let floor = self.floor;
        let window = windows.entry(from).or_insert_with(|| {
            if floor > 0 {
                PeerWindow::resumed(floor)
            } else {
                PeerWindow::default()
            }
        });
        let verdict = match window.check(counter) {
            Freshness::Newest => Verdict::Authentic { newest: true },
            Freshness::Late => Verdict::Authentic { newest: false },
            Freshness::Replayed => return Verdict::Refused(Refusal::Replayed),
        };
        self.dirty.store(true, Ordering::Relaxed);
        verdict
    }

    /// The counter of `packet` if its tag opens as `from`'s with `keys` under a scheme
    /// from `accept` on, else what it was (a reflection, an older scheme, a wrong tag).
    fn check_tag(
        &self,
        keys: &PeerKey,
        accept: Scheme,
        from: IpAddr,
        to: Option<IpAddr>,
        packet: &Packet<&[u8]>,
    ) -> Result<u64, Refusal> {
        let trial = Trial {
            keys,
            selves: &self.selves(from, to),
            from,
            scheme: accept,
            packet,
            checks: &self.counters.tag_checks,
        };
        trial.open().ok_or_else(|| {
            if self.may_diagnose() {
                trial.diagnose()
            } else {
                Refusal::BadTag
            }
        })
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

    /// The roaming peer that sealed a packet sent to `to` from an endpoint no peer is
    /// known at, and its counter (the tag alone; the window is left to
    /// [`Self::open`]). A scheme 3 packet names its key: the roaming peers holding a
    /// key of that index are tried, and none when no one holds it, so a datagram
    /// costs a table lookup and at most one check per address this host is known by.
    /// Under `auth` 2 or 1 a packet is then tried against every roaming peer's keys, as
    /// daemons before key indexes need. `may_try` is asked before each round of
    /// checks (the bound on trials), and a refusal ends the search.
    pub(crate) fn find_roaming(
        &self,
        to: Option<IpAddr>,
        packet: &Packet<&[u8]>,
        may_try: &mut dyn FnMut() -> bool,
    ) -> Option<(IpAddr, u64)> {
        let index = auth::index_of(packet)?;
        let current = self.current();
        let checks = &self.counters.tag_checks;
        let opens = |peer: IpAddr| {
            let trial = Trial {
                keys: current.keys.key_for(peer)?,
                selves: &self.selves(peer, to),
                from: peer,
                scheme: current.accept,
                packet,
                checks,
            };
            trial.open().map(|c| (peer, c))
        };
        if let Some(peers) = current.roaming.get(&index) {
            if !may_try() {
                return None;
            }
            if let Some(found) = peers.iter().find_map(|&p| opens(p)) {
                return Some(found);
            }
        }
        if current.accept > Scheme::V2 || current.roaming_all.is_empty() || !may_try() {
            return None;
        }
        current.roaming_all.iter().find_map(|&p| opens(p))
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
            .or_else(|| self.config.peering().sources.for_peer(from));
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

    /// Writes the counter, the bound and the windows to the state file, if anything
    /// changed.
    pub(crate) fn save(&self) {
        if self.dirty.swap(false, Ordering::Relaxed) && !self.write_state(false, 0) {
            self.dirty.store(true, Ordering::Relaxed);
        }
    }

    /// Writes the state as a clean stop leaves it: the next start resumes each
    /// peer's window where it is, with no floor.
    pub(crate) fn save_at_stop(&self) {
        self.write_state(true, 0);
    }

    /// Writes a bound above `counter` before it is taken (on a receiver, when a
    /// counter passed the bound written last).
    fn save_bound(&self, counter: u64) {
        self.write_state(false, counter);
    }

    /// Writes the state file: the counter, a bound of the counters taken above
    /// both `at_least` and the clock plus [`ACCEPT_AHEAD`], each window's top, and
    /// whether this is a clean stop. Returns whether it was written. A failed write
    /// is tried again at the next call after a pause that doubles up to
    /// [`SAVE_RETRY_MAX`] (a full disk, say, frees up), and said each time.
    fn write_state(&self, clean: bool, at_least: u64) -> bool {
        let Some(path) = &self.state else {
            return true;
        };
        if !self.saving.load(Ordering::Relaxed) {
            return false;
        }
        let mut saver = mgrp_rt::lock(&self.saver);
        if !clean && at_least > 0 && at_least <= self.bound.load(Ordering::Relaxed) {
            // Another thread wrote a bound high enough while this one waited.
            return true;
        }
        let now_mono = std::time::Instant::now();
        if saver.retry_at.is_some_and(|t| now_mono < t) && !clean {
            return false;
        }
        let now = second_counter(mgrp_rt::wall_now().as_nanos());
        let bound = now
            .max(at_least)
            .saturating_add(ACCEPT_AHEAD)
            .max(self.bound.load(Ordering::Relaxed));
        let mut text = String::from(
            "# mgrpd's packet counter, the bound of the counters it takes, and its peers' replay windows (the highest counter seen), kept across restarts\n",
        );
        text.push_str(&format!(
            "counter {}\nbound {bound}\n",
            self.counter.load(Ordering::Relaxed)
        ));
        for (peer, w) in mgrp_rt::lock(&self.windows).iter() {
            if let Some(top) = w.top() {
                text.push_str(&format!("peer {peer} {top}\n"));
            }
        }
        if clean {
            text.push_str("clean\n");
        }
        text.push_str("end\n");
        match write_private(path, &text) {
            Ok(()) => {
                self.bound.store(bound, Ordering::Relaxed);
                if saver.retry_at.take().is_some() {
                    info!("the replay windows are saved to {} again", path.display());
                }
                saver.pause = std::time::Duration::ZERO;
                true
            }
            Err(e) => {
                saver.pause = (saver.pause * 2)
                    .max(std::time::Duration::from_secs(2))
                    .min(SAVE_RETRY_MAX);
                saver.retry_at = Some(now_mono + saver.pause);
                warn!(
                    "cannot save the replay windows to {}: {e}; trying again in {:?} (until then, packets taken above the last bound saved could be taken again after a crash)",
                    path.display(),
                    saver.pause
                );
                false
            }
        }
    }

    /// Takes the keys (and the tag scheme, and the oldest one taken) of a
    /// configuration loaded again.
    pub(crate) fn reload(&self, keys: Keys, scheme: Scheme, accept: Scheme) -> Result<(), String> {
        let mut current = self.current.write().unwrap_or_else(PoisonError::into_inner);
        if keys.enabled() != current.keys.enabled() {
            return Err(
                "keys cannot be turned on or off by a reload (the trailer changes every packet's room): restart mgrpd"
                    .into(),
            );
        }
        let changed = current.keys != keys
            || current.scheme != scheme
            || current.accept != accept.min(scheme);
        *current = Current::new(&self.config, keys, scheme, accept);
        drop(current);
        if changed {
            info!(
                "keys reloaded: packets are sealed with each peer's key (its key-file, or derived from its public-key) and opened with it or its next one (next-key-file, next-public-key, next-private-key-file); tags of version {}, taken from version {} on",
                scheme.number(),
                accept.min(scheme).number()
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

/// Opens `packet` with `key` under `binding`, counting the check in `checks` when a
/// tag is computed: a scheme 3 packet that names another key's index costs none.
fn check(
    key: &auth::Key,
    binding: Binding,
    packet: &Packet<&[u8]>,
    checks: &AtomicU64,
) -> Option<u64> {
    if matches!(binding, Binding::Indexed(_)) && auth::index_of(packet) != Some(key.index()) {
        return None;
    }
    checks.fetch_add(1, Ordering::Relaxed);
    auth::open(key, binding, packet).ok()
}

/// The schemes a daemon whose oldest taken is `scheme` takes: that one and every
/// later one (so a daemon set back to an older scheme while its peers are upgraded still takes
/// what the upgraded ones send), newest first.
fn taken(scheme: Scheme) -> impl Iterator<Item = Scheme> {
    [Scheme::V3, Scheme::V2, Scheme::V1]
        .into_iter()
        .filter(move |s| *s >= scheme)
}

/// A packet's tag tried as sealed by `from` for one of `selves` (the addresses this
/// host is known by) with one of `keys`, under the schemes `scheme` takes; every tag
/// computed is counted in `checks`.
struct Trial<'a> {
    keys: &'a PeerKey,
    selves: &'a [IpAddr],
    from: IpAddr,
    scheme: Scheme,
    packet: &'a Packet<&'a [u8]>,
    checks: &'a AtomicU64,
}

impl Trial<'_> {
    /// The packet's counter, if it opens.
    fn open(&self) -> Option<u64> {
        let from = self.from;
        self.keys.accepted().find_map(|k| {
            taken(self.scheme).find_map(|s| match s {
                // Version 1 tags bind no direction: one check whoever this host is.
                Scheme::V1 => check(k, Binding::None, self.packet, self.checks),
                _ => self.selves.iter().find_map(|&me| {
                    check(
                        k,
                        s.binding(Direction { from, to: me }),
                        self.packet,
                        self.checks,
                    )
                }),
            })
        })
    }

    /// What a packet that did not open is: one this daemon sealed for `from` (sent
    /// back to it), one with an older scheme's tag than `scheme` takes, or a wrong one.
    fn diagnose(&self) -> Refusal {
        let from = self.from;
        let opens = |b: Binding| {
            self.keys
                .accepted()
                .any(|k| check(k, b, self.packet, self.checks).is_some())
        };
        let older = [Scheme::V2, Scheme::V1]
            .into_iter()
            .filter(|s| *s < self.scheme);
        if let Some(s) = older.into_iter().find(|s| match s {
            Scheme::V1 => opens(Binding::None),
            _ => self
                .selves
                .iter()
                .any(|&me| opens(s.binding(Direction { from, to: me }))),
        }) {
            return Refusal::OldScheme(s);
        }
        if taken(self.scheme).filter(|s| *s > Scheme::V1).any(|s| {
            self.selves
                .iter()
                .any(|&me| opens(s.binding(Direction { from: me, to: from })))
        }) {
            return Refusal::Reflected;
        }
        Refusal::BadTag
    }
}

/// The counter of the packet sealed after one with counter `last`, in the second
/// whose first counter is `now` ([`second_counter`]): one more, or that second's
/// first when that is higher, so a counter says when its packet was sealed however
/// many came before it.
fn next_counter(last: u64, now: u64) -> u64 {
    last.saturating_add(1).max(now)
}

/// A peer's replay window, and the one of the second before its newest counter's,
/// kept for packets reordered across the turn of a second (whose counters jump).
#[derive(Debug, Clone, Default)]
struct PeerWindow {
    current: ReplayWindow,
    before: Option<ReplayWindow>,
}

impl PeerWindow {
    /// A window that refuses every counter up to `top`.
    fn resumed(top: u64) -> Self {
        Self {
            current: ReplayWindow::resumed(top),
            before: None,
        }
    }

    fn top(&self) -> Option<u64> {
        self.current.top()
    }

    /// How fresh `counter` is; a new one is remembered.
    fn check(&mut self, counter: u64) -> Freshness {
        let second = |c: u64| c >> SECOND_BITS;
        match self.current.top() {
            Some(top) if second(counter) > second(top) => {
                // A new second: the old one's window stays for its late packets.
                self.before = Some(self.current.clone());
                self.current.check(counter)
            }
            Some(top) if second(counter) < second(top) => match &mut self.before {
                Some(b) if b.top().is_some_and(|t| second(t) == second(counter)) => {
                    match b.check(counter) {
                        Freshness::Replayed => Freshness::Replayed,
                        _ => Freshness::Late,
                    }
                }
                _ => Freshness::Replayed,
            },
            _ => self.current.check(counter),
        }
    }
}

/// What the state file held.
#[derive(Debug, Default)]
struct Saved {
    counter: Option<u64>,
    /// The bound of the counters taken, as last written.
    bound: Option<u64>,
    tops: Vec<(IpAddr, u64)>,
    /// Whether the daemon that wrote it stopped cleanly.
    clean: bool,
}

/// What the start found of the state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Found {
    /// No state directory yet: nothing was ever taken here.
    FirstStart,
    /// The state of a clean stop.
    Clean,
    /// The state of a daemon that did not stop cleanly (killed, crashed, power
    /// lost), or of an mgrpd before bounds.
    Unclean,
    /// The directory is there but the file is not, or cannot be read or parsed.
    Lost,
}

impl Found {
    fn why(self) -> &'static str {
        match self {
            Self::FirstStart | Self::Clean => "",
            Self::Unclean => "mgrpd did not stop cleanly last time",
            Self::Lost => "the saved replay windows are missing or unreadable",
        }
    }
}

/// State kept by the saver.
#[derive(Debug, Default)]
struct SaveState {
    /// When a save may be tried again after a failed one.
    retry_at: Option<std::time::Instant>,
    /// The pause after the last failed save.
    pause: std::time::Duration,
}

/// The counters refused from every peer after a start that found `found` and
/// `saved`, at `clock`: none after a clean stop or on a first start; after an unclean
/// stop every counter up to the bound written (or, from a daemon that wrote none, up
/// to the highest of its tops and `clock` plus [`ACCEPT_AHEAD`]); with the state lost,
/// every counter up to `clock` plus [`ACCEPT_AHEAD`] (what any bound written before was
/// below, while this host's clock has not gone back).
fn floor_after(found: Found, saved: &Saved, clock: u64) -> u64 {
    let ahead = clock.saturating_add(ACCEPT_AHEAD);
    match found {
        Found::FirstStart | Found::Clean => 0,
        Found::Unclean => saved
            .bound
            .unwrap_or_else(|| saved.tops.iter().map(|(_, t)| *t).fold(ahead, u64::max)),
        Found::Lost => ahead,
    }
}

/// Reads the state file and says what was found: a missing file in a directory that
/// does not exist yet is a first start; a missing, unreadable or bad one in an
/// existing directory is state lost.
fn load(path: &Path) -> (Saved, Found) {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e)
            if e.kind() == std::io::ErrorKind::NotFound
                && !path.parent().is_some_and(Path::exists) =>
        {
            info!(
                "no state directory for the replay windows yet (a first start): each peer's first packet is taken as its newest"
            );
            return (Saved::default(), Found::FirstStart);
        }
        Err(e) => {
            warn!(
                "cannot read the saved replay windows at {}: {e}",
                path.display()
            );
            return (Saved::default(), Found::Lost);
        }
    };
    match parse_state(&text) {
        Ok(s) => {
            info!(
                "replay windows of {} peers read from {}{}",
                s.tops.len(),
                path.display(),
                if s.clean { "" } else { " (not a clean stop)" }
            );
            let found = if s.clean {
                Found::Clean
            } else {
                Found::Unclean
            };
            (s, found)
        }
        Err(line) => {
            warn!(
                "{} line {line} is not `counter N`, `bound N`, `peer ADDR N`, `clean` or the last line `end` (cut short?)",
                path.display()
            );
            (Saved::default(), Found::Lost)
        }
    }
}

/// Parses the state file's text; `Err(line number)` at the first bad line. Its
/// last line is `end`: a file cut short anywhere (a number cut to fewer digits
/// included) is refused whole, so it can never lower a floor.
fn parse_state(text: &str) -> Result<Saved, usize> {
    let mut saved = Saved::default();
    let mut ended = false;
    let lines = text.lines().count();
    for (i, line) in text.lines().enumerate() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if ended {
            return Err(i + 1);
        }
        match words.as_slice() {
            ["end"] => ended = true,
            [] => {}
            [w, ..] if w.starts_with('#') => {}
            ["counter", n] => saved.counter = Some(n.parse().map_err(|_| i + 1)?),
            ["bound", n] => saved.bound = Some(n.parse().map_err(|_| i + 1)?),
            ["peer", a, n] => saved
                .tops
                .push((a.parse().map_err(|_| i + 1)?, n.parse().map_err(|_| i + 1)?)),
            ["clean"] => saved.clean = true,
            _ => return Err(i + 1),
        }
    }
    if ended { Ok(saved) } else { Err(lines + 1) }
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
    std::fs::rename(&tmp, path)?;
    // The rename itself outlives a power cut only once the directory is on disk.
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_file_reads_back_and_bad_lines_are_named() {
        let s = parse_state(
            "# c\ncounter 42\nbound 99\n\npeer 10.0.0.2 7\npeer 2001:db8::1 9\nclean\nend\n",
        )
        .unwrap();
        assert_eq!((s.counter, s.bound, s.clean), (Some(42), Some(99), true));
        assert_eq!(
            s.tops,
            vec![
                ("10.0.0.2".parse().unwrap(), 7),
                ("2001:db8::1".parse().unwrap(), 9)
            ]
        );
        assert_eq!(parse_state("counter 1\npeer x 2\nend\n").unwrap_err(), 2);
        assert_eq!(parse_state("counter\nend\n").unwrap_err(), 1);
        assert_eq!(parse_state("peer 10.0.0.1 -3\nend\n").unwrap_err(), 1);
        assert_eq!(parse_state("end\ncounter 1\n").unwrap_err(), 2);
    }

    /// A file cut short anywhere is refused, so a number cut to fewer digits never
    /// lowers the floor, and a clean stop's file without its end is not clean.
    #[test]
    fn a_state_file_cut_short_is_refused_whole() {
        let whole = "counter 1700000000000000000\nbound 1700000005000000000\npeer 10.0.0.2 1700000001000000000\nclean\nend\n";
        assert!(parse_state(whole).is_ok());
        for cut in 0..whole.len() - 1 {
            assert!(parse_state(&whole[..cut]).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn the_floor_after_each_kind_of_start() {
        let clock = second_counter(1_000 * 1_000_000_000);
        let saved = Saved {
            counter: Some(5),
            bound: Some(clock - (3 << SECOND_BITS)),
            tops: vec![("10.0.0.2".parse().unwrap(), clock - (4 << SECOND_BITS))],
            clean: false,
        };
        assert_eq!(floor_after(Found::FirstStart, &Saved::default(), clock), 0);
        assert_eq!(floor_after(Found::Clean, &saved, clock), 0);
        // Killed: every counter up to the bound it wrote.
        assert_eq!(
            floor_after(Found::Unclean, &saved, clock),
            clock - (3 << SECOND_BITS)
        );
        // State lost, or a file without a bound: the clock plus the lead.
        assert_eq!(
            floor_after(Found::Lost, &saved, clock),
            clock + ACCEPT_AHEAD
        );
        let no_bound = Saved {
            bound: None,
            ..saved
        };
        assert_eq!(
            floor_after(Found::Unclean, &no_bound, clock),
            clock + ACCEPT_AHEAD
        );
    }

    /// A sender's counters follow its clock however long it has run and however
    /// many packets it sealed, so the floor a receiver sets after a crash (the bound
    /// it wrote: its clock then plus the lead) is passed by a live peer's next
    /// packets once the lead has passed, whether the peer started a minute or a week
    /// ago; counters that counted packets from the start fell days behind.
    #[test]
    fn a_peer_running_for_days_clears_the_floor_after_a_crash() {
        let s = 1_000_000_000u64;
        let start = 1_700_000_000 * s;
        for running in [60u64, 7 * 24 * 3600] {
            // The peer seals bursts of 1,000 packets (a train) every 10 s of its run.
            let (mut counter, mut counted) = (second_counter(start), second_counter(start));
            let mut t = start;
            while t < start + running * s {
                for _ in 0..1_000 {
                    counter = next_counter(counter, second_counter(t));
                    counted += 1;
                }
                t += 10 * s;
            }
            assert!(
                counter >= second_counter(t - 10 * s),
                "the counter keeps up with the clock"
            );
            // The receiver crashes right after the last train; its bound was its
            // clock plus the lead.
            let crash = second_counter(t);
            let bound = crash + ACCEPT_AHEAD;
            let saved = Saved {
                bound: Some(bound),
                ..Saved::default()
            };
            let floor = floor_after(Found::Unclean, &saved, crash);
            let mut w = PeerWindow::resumed(floor);
            // Everything sealed before the crash is refused.
            assert_eq!(w.check(counter), Freshness::Replayed);
            // The peer's next packet once the lead has passed is taken.
            let later = second_counter(t + 6 * s);
            assert_eq!(w.check(next_counter(counter, later)), Freshness::Newest);
            // Counting packets from its start instead fell far below the floor.
            assert!(counted + 1 < floor);
        }
    }

    /// Packets reordered across the turn of a second (whose counters jump by up to
    /// 2³²) are taken once each; two seconds back they are refused.
    #[test]
    fn packets_reordered_across_a_second_are_taken_once() {
        let t = second_counter(1_700_000_000 * 1_000_000_000);
        let next = t + (1 << SECOND_BITS);
        let mut w = PeerWindow::default();
        assert_eq!(w.check(t + 1), Freshness::Newest);
        assert_eq!(w.check(t + 2), Freshness::Newest);
        assert_eq!(w.check(next), Freshness::Newest);
        // Sealed before the turn, arrived after it.
        assert_eq!(w.check(t + 3), Freshness::Late);
        assert_eq!(w.check(t + 3), Freshness::Replayed);
        assert_eq!(w.check(t + 2), Freshness::Replayed);
        assert_eq!(w.check(next + 1), Freshness::Newest);
        assert_eq!(w.check(next), Freshness::Replayed);
        // Two seconds on, the first second's counters are refused.
        let after = next + (1 << SECOND_BITS);
        assert_eq!(w.check(after), Freshness::Newest);
        assert_eq!(w.check(t + 4), Freshness::Replayed);
        assert_eq!(w.check(next + 2), Freshness::Late);
    }
}
