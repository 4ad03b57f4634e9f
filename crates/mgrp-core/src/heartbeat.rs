//! Heartbeats between Measurement Overlay members (no I/O, no clock): whether a hop is alive, its round
//! trip and its one-way loss, fresh to a second.
//!
//! Each node pings every member every `interval` over the hop itself (through its
//! mgrpd next-hop device, so a dead daemon shows as a dead hop). The member answers
//! each ping with a pong that carries how many of this sender's pings it has
//! received so far; two pongs a window apart then give the *forward* loss
//! (pings sent between them against pings received between them), with no guess
//! about the way back. A hop is down when `down_after` pings in a row went
//! unanswered (RON's rule of consecutive lost probes; its numbers are configurable).
//!
//! A ping counts unanswered once it is late: older than the hop's round trip plus
//! four times its variation (TCP's retransmission timeout, RFC 6298), at least 50 ms
//! and at most `grace_s`. When three in a row are late, the rest of `down_after`
//! go at once, 10 ms apart, and as many regular pings are skipped after them: a hop
//! that went silent is found down within a few hundred milliseconds rather than
//! `down_after` intervals, and a pinger sends no more pings in an hour than before.
//! [`Pinger::poll`] keeps that schedule.
//!
//! **One-way delays.** One regular ping in ten goes as a *stamped* ping instead (the
//! same sequence); the member counts it as a ping and answers it with its own
//! clock's time of arrival. Its send time, that stamp and the answer's arrival give
//! the delay each way, each off by the two clocks' offset: a constant (to their
//! drift, parts per million) that cancels in a delay's *change* over its least in
//! the last two minutes. The hop's smoothed round trip is split between the two
//! directions in the ratio of half the least round trip plus each one's median
//! change over the loss window. The pair is as long as a ping and a pong, and every
//! ping still counts for the loss: heartbeat bytes and loss samples do not change. A
//! member of an earlier version does not know the kind and drops it, uncounted: the
//! loss leaves stamped pings out until one is answered, and after five unanswered
//! while regular pings are answered, stamps stop for five minutes and the hop is
//! scored as before.
//!
//! Wire format (UDP payload, big-endian): `MGRH`, kind (1 ping, 2 pong, 3 stamped
//! ping, 4 stamped pong), sequence number (u64); a pong adds the count of this
//! sender's pings received (u64), a stamped pong the time the stamped ping arrived
//! (u64 nanoseconds on the member's steady clock).

use std::collections::VecDeque;

use crate::requester::Requester;

/// A heartbeat's first bytes.
pub const MAGIC: &[u8; 4] = b"MGRH";
/// A ping's length.
pub const PING_LEN: usize = 13;
/// A pong's length.
pub const PONG_LEN: usize = 21;

/// A heartbeat, parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Message {
    /// Ping number `seq`.
    Ping {
        /// Its sequence number.
        seq: u64,
    },
    /// The answer to ping `seq`.
    Pong {
        /// The ping's sequence number.
        seq: u64,
        /// Pings of this sender the member has received so far.
        received: u64,
    },
    /// Stamped ping number `seq` (the pings' sequence): count it and answer with its
    /// arrival time.
    StampedPing {
        /// Its sequence number.
        seq: u64,
    },
    /// The answer to stamped ping `seq`.
    StampedPong {
        /// The stamped ping's sequence number.
        seq: u64,
        /// When it arrived, ns on the member's steady clock.
        at_ns: u64,
    },
}

/// Why bytes are no heartbeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Not the magic, or the wrong length for its kind.
    #[error("not a heartbeat (magic or length)")]
    NotHeartbeat,
    /// A kind this version does not know.
    #[error("unknown heartbeat kind {0}")]
    Kind(u8),
}

impl Message {
    /// Parses one datagram.
    pub fn parse(b: &[u8]) -> Result<Self, ParseError> {
        if b.len() < PING_LEN || &b[..4] != MAGIC {
            return Err(ParseError::NotHeartbeat);
        }
        let u64_at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_be_bytes(a)
        };
        match b[4] {
            1 if b.len() == PING_LEN => Ok(Self::Ping { seq: u64_at(5) }),
            2 if b.len() == PONG_LEN => Ok(Self::Pong {
                seq: u64_at(5),
                received: u64_at(13),
            }),
            3 if b.len() == PING_LEN => Ok(Self::StampedPing { seq: u64_at(5) }),
            4 if b.len() == PONG_LEN => Ok(Self::StampedPong {
                seq: u64_at(5),
                at_ns: u64_at(13),
            }),
            1..=4 => Err(ParseError::NotHeartbeat),
            k => Err(ParseError::Kind(k)),
        }
    }

    /// Its bytes.
    pub fn emit(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(PONG_LEN);
        v.extend_from_slice(MAGIC);
        match *self {
            Self::Ping { seq } => {
                v.push(1);
                v.extend_from_slice(&seq.to_be_bytes());
            }
            Self::Pong { seq, received } => {
                v.push(2);
                v.extend_from_slice(&seq.to_be_bytes());
                v.extend_from_slice(&received.to_be_bytes());
            }
            Self::StampedPing { seq } => {
                v.push(3);
                v.extend_from_slice(&seq.to_be_bytes());
            }
            Self::StampedPong { seq, at_ns } => {
                v.push(4);
                v.extend_from_slice(&seq.to_be_bytes());
                v.extend_from_slice(&at_ns.to_be_bytes());
            }
        }
        v
    }
}

/// How heartbeats judge a hop.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settings {
    /// Seconds between pings.
    pub interval_s: f64,
    /// Pings unanswered in a row (each late) that make a hop down.
    pub down_after: u32,
    /// Seconds over which forward loss is counted.
    pub loss_window_s: f64,
    /// The longest a ping is given before it counts late (before any answer, the
    /// time it is given).
    pub grace_s: f64,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            interval_s: 0.1,
            down_after: 10,
            loss_window_s: 10.0,
            grace_s: 0.5,
        }
    }
}

/// What heartbeats say of one hop now.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct HopState {
    /// Whether it answers: answered at least once, and fewer than `down_after` pings
    /// in a row are unanswered.
    pub alive: bool,
    /// Round trip, s: a moving average (7/8 old, 1/8 new) of the pongs' round trips.
    pub rtt_s: Option<f64>,
    /// The round trips' mean deviation (RFC 6298's RTTVAR), s: how far one round
    /// trip strays from `rtt_s`.
    #[serde(default)]
    pub rtt_var_s: Option<f64>,
    /// Forward loss over the window, 0 to 1: (lost + 0.5) / (sent + 1), so a finite
    /// count never claims none. `None` until 20 pings span the window.
    pub loss: Option<f64>,
    /// Pings the loss stands on.
    pub loss_samples: u64,
    /// Pings unanswered since the last answered one (late: older than the round
    /// trip and four times its variation, within 50 ms and the grace time).
    pub lost_in_row: u32,
    /// Pings sent.
    pub sent: u64,
    /// Pongs received.
    pub answered: u64,
    /// Delay on the way to the member, s: the round trip's share that half the least
    /// round trip of the last two minutes plus the median of how far this direction's
    /// one-way delay is above its least, over the loss window, makes. `None` without
    /// stamps (a member of an earlier version, or none answered in the window).
    #[serde(default)]
    pub forward_s: Option<f64>,
    /// Delay of the member's answers on their way back (the member's normal route
    /// to this node), s, as `forward_s`.
    #[serde(default)]
    pub back_s: Option<f64>,
    /// Stamped answers the one-way delays of the window stand on.
    #[serde(default)]
    pub stamps: u64,
    /// Stamped pings sent (not in `sent`).
    #[serde(default)]
    pub stamped_sent: u64,
    /// Stamped pongs received (not in `answered`).
    #[serde(default)]
    pub stamped_answered: u64,
}

/// Fewest pings a loss figure stands on.
const MIN_LOSS_SAMPLES: u64 = 20;

/// Late pings in a row that make a hop suspect: the rest of `down_after` then go
/// at once.
const SUSPECT_AFTER: u32 = 3;
/// Least time a ping has before it counts late, s.
const LATE_MIN_S: f64 = 0.05;
/// Most time between two pings of a burst, s.
const BURST_SPACING_S: f64 = 0.01;

/// One regular ping in this many goes stamped.
const STAMP_EVERY: u64 = 10;
/// Stamped pings unanswered in a row, while regular ones are answered, after which
/// the member is taken to be of an earlier version.
const STAMPS_UNANSWERED: u32 = 5;
/// How long stamps pause for a member taken to be of an earlier version, s.
const STAMPS_PAUSE_S: f64 = 300.0;
/// How far back a one-way delay's least is taken, s.
const DELAY_BASE_S: f64 = 120.0;
/// Stamped pings awaited at most (one a second, each given twice the grace time).
const MAX_STAMPED_OUT: usize = 64;

/// One stamped exchange: when it left, the member's stamp and when its answer came
/// (each delay off by the clocks' offset).
#[derive(Debug, Clone, Copy)]
struct Stamp {
    at: f64,
    /// Arrival stamp minus send time, s.
    forward: f64,
    /// Answer's arrival minus stamp, s.
    back: f64,
    rtt: f64,
}

/// The sending side of one hop's heartbeats.
#[derive(Debug, Clone, Default)]
pub struct Pinger {
    next_seq: u64,
    /// Pings sent and not yet answered or given up, with when they left.
    outstanding: VecDeque<(u64, f64)>,
    /// Recent pongs: when, which ping, the member's count of pings received.
    pongs: VecDeque<(f64, u64, u64)>,
    highest_answered: Option<u64>,
    rtt_s: Option<f64>,
    /// The round trips' mean deviation (RFC 6298's RTTVAR), s.
    rtt_var_s: Option<f64>,
    sent: u64,
    answered: u64,
    /// When the next regular ping is due (`None` before the first).
    next_at: Option<f64>,
    /// Pings of a burst still to go, and when the next goes.
    burst_left: u32,
    burst_next: f64,
    /// Regular pings still to skip, paying for a burst's.
    skip: u32,
    /// Whether the current silence has had its burst.
    burst_spent: bool,
    /// Regular ping slots so far (every `STAMP_EVERY`th goes stamped).
    slots: u64,
    /// Stamped pings sent.
    stamped_sent: u64,
    /// The sequence numbers of recent stamped pings (a member of an earlier version
    /// neither answers nor counts them: the loss leaves them out until one is
    /// answered).
    stamped_seqs: VecDeque<u64>,
    /// Whether the member answered a stamped ping: it counts them as pings.
    counts_stamps: bool,
    /// Stamped pings not yet answered, with when they left and the regular answers
    /// by then.
    stamped_out: VecDeque<(u64, f64, u64)>,
    /// Stamped pings unanswered in a row (counted once late).
    stamps_missed: u32,
    /// Regular answers when the first of those left.
    answered_at_miss: u64,
    /// No stamped pings before this (a member of an earlier version).
    stamps_paused_until: Option<f64>,
    /// Stamped exchanges of the last `DELAY_BASE_S`.
    stamps: VecDeque<Stamp>,
    /// Sends the stamped pings alone ([`Pinger::stamps_only`]).
    only_stamps: bool,
    stamped_answered: u64,
}

/// Pings remembered for their round trip at most (older ones are lost).
const MAX_OUTSTANDING: usize = 4096;

impl Pinger {
    /// A pinger that sends only the stamped pings (one every ten intervals): the
    /// delays each way of a member's normal route, where this node has no hop to it
    /// (the way a flow's acknowledgements come back from it), at a tenth of a hop's
    /// bytes. Its state's liveness and loss say nothing.
    pub fn stamps_only() -> Self {
        Self {
            only_stamps: true,
            ..Self::default()
        }
    }

    /// The next ping to send at `now` (seconds on any steady clock).
    pub fn ping(&mut self, now: f64) -> Vec<u8> {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.sent += 1;
        if self.outstanding.len() == MAX_OUTSTANDING {
            self.outstanding.pop_front();
        }
        self.outstanding.push_back((seq, now));
        Message::Ping { seq }.emit()
    }

    /// Takes in a pong received at `now`; anything else is ignored. Returns whether it
    /// answered one of this pinger's pings.
    pub fn pong(&mut self, now: f64, seq: u64, received: u64, s: &Settings) -> bool {
        let Some(i) = self.outstanding.iter().position(|(q, _)| *q == seq) else {
            return false;
        };
        let (_, at) = self.outstanding[i];
        // Earlier pings still outstanding were overtaken: they stay until answered or
        // too old, and count as lost in a row only past the grace time.
        self.outstanding.remove(i);
        self.answered += 1;
        let rtt = (now - at).max(0.0);
        self.rtt_var_s = Some(match (self.rtt_var_s, self.rtt_s) {
            (Some(v), Some(r)) => 0.75 * v + 0.25 * (r - rtt).abs(),
            _ => rtt / 2.0,
        });
        self.rtt_s = Some(match self.rtt_s {
            Some(r) => 0.875 * r + 0.125 * rtt,
            None => rtt,
        });
        // Answered: the silence, if any, is over.
        self.burst_spent = false;
        self.burst_left = 0;
        if self.highest_answered.is_none_or(|h| seq > h) {
            self.highest_answered = Some(seq);
            self.pongs.push_back((now, seq, received));
        }
        // Keep one pong older than the window, the loss's starting point.
        while self.pongs.len() > 2 && self.pongs[1].0 <= now - s.loss_window_s {
            self.pongs.pop_front();
        }
        true
    }

    /// How long a ping has before it counts late, s: the round trip plus four
    /// times its variation, within 50 ms and `grace_s`; `grace_s` before any answer.
    pub fn late_after(&self, s: &Settings) -> f64 {
        match (self.rtt_s, self.rtt_var_s) {
            (Some(r), Some(v)) => (r + 4.0 * v).max(LATE_MIN_S).min(s.grace_s),
            _ => s.grace_s,
        }
    }

    /// Pings answered by nothing newer than them and late at `now`.
    fn late_in_row(&self, now: f64, s: &Settings) -> u32 {
        let (highest, late) = (self.highest_answered, self.late_after(s));
        self.outstanding
            .iter()
            .filter(|(q, at)| highest.is_none_or(|h| *q > h) && *at <= now - late)
            .count() as u32
    }

    /// The ping to send at `now`, if one is due: the regular one every `interval_s`,
    /// or one of a burst once three in a row are late (each burst ping skips a later
    /// regular one). Call it again until it says `None`, and next at
    /// [`Self::next_due`].
    pub fn poll(&mut self, now: f64, s: &Settings) -> Option<Vec<u8>> {
        if !self.burst_spent && self.answered > 0 {
            let late = self.late_in_row(now, s);
            if late >= SUSPECT_AFTER.min(s.down_after) && late < s.down_after {
                self.burst_spent = true;
                self.burst_left = s.down_after - late;
                self.burst_next = now;
            }
        }
        if self.burst_left > 0 && now >= self.burst_next {
            self.burst_left -= 1;
            self.skip += 1;
            self.burst_next = now + BURST_SPACING_S.min(s.interval_s / 4.0);
            return Some(self.ping(now));
        }
        let next = *self.next_at.get_or_insert(now);
        if now < next {
            return None;
        }
        // A pinger held up sends one ping, not those it missed.
        let after = next + s.interval_s;
        self.next_at = Some(if after <= now {
            now + s.interval_s
        } else {
            after
        });
        if self.skip > 0 {
            self.skip -= 1;
            return None;
        }
        self.slots += 1;
        if self.slots.is_multiple_of(STAMP_EVERY) && self.stamping(now, s) {
            return Some(self.stamped_ping(now));
        }
        (!self.only_stamps).then(|| self.ping(now))
    }

    /// Whether stamped pings go now: not while the member is taken to be of an
    /// earlier version (five unanswered in a row, each given twice the grace time,
    /// while regular ones were answered).
    fn stamping(&mut self, now: f64, s: &Settings) -> bool {
        let late = 2.0 * s.grace_s;
        while let Some(&(_, at, answered)) = self.stamped_out.front() {
            if at > now - late {
                break;
            }
            self.stamped_out.pop_front();
            if self.stamps_missed == 0 {
                self.answered_at_miss = answered;
            }
            self.stamps_missed += 1;
        }
        if self.stamps_missed >= STAMPS_UNANSWERED {
            // Missed while the member answered regular pings: it does not know them
            // (with stamps alone nothing tells, and they pause all the same).
            if self.answered > self.answered_at_miss || self.only_stamps {
                self.stamps_paused_until = Some(now + STAMPS_PAUSE_S);
            }
            self.stamps_missed = 0;
        }
        self.stamps_paused_until.is_none_or(|t| now >= t)
    }

    fn stamped_ping(&mut self, now: f64) -> Vec<u8> {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.stamped_sent += 1;
        if self.stamped_seqs.len() == MAX_OUTSTANDING {
            self.stamped_seqs.pop_front();
        }
        self.stamped_seqs.push_back(seq);
        if self.stamped_out.len() == MAX_STAMPED_OUT {
            self.stamped_out.pop_front();
        }
        self.stamped_out.push_back((seq, now, self.answered));
        Message::StampedPing { seq }.emit()
    }

    /// Takes in a stamped pong received at `now`. Returns whether it answered one of
    /// this pinger's stamped pings.
    pub fn stamped_pong(&mut self, now: f64, seq: u64, at_ns: u64, s: &Settings) -> bool {
        let Some(i) = self.stamped_out.iter().position(|(q, ..)| *q == seq) else {
            return false;
        };
        let (_, at, _) = self.stamped_out[i];
        self.stamped_out.remove(i);
        self.stamped_answered += 1;
        self.counts_stamps = true;
        self.stamps_missed = 0;
        self.stamps_paused_until = None;
        let stamp = at_ns as f64 / 1e9;
        let rtt = (now - at).max(0.0);
        self.stamps.push_back(Stamp {
            at,
            forward: stamp - at,
            back: now - stamp,
            rtt,
        });
        while self
            .stamps
            .front()
            .is_some_and(|x| x.at < now - DELAY_BASE_S.max(s.loss_window_s))
        {
            self.stamps.pop_front();
        }
        true
    }

    /// Each direction's delay at `now`, and the stamps in the window: the hop's
    /// round trip (the regular pongs' moving average; the stamped ones' median with
    /// stamps alone) split in the ratio of half the least round trip plus each
    /// direction's median change over its least. Medians, and a split of the
    /// smoothed round trip rather than a sum of its own, so that one stamped ping
    /// held up at either end (a few in a window) does not move a score.
    fn one_way(&self, now: f64, s: &Settings) -> (Option<f64>, Option<f64>, u64) {
        let recent: Vec<&Stamp> = self
            .stamps
            .iter()
            .filter(|x| x.at >= now - s.loss_window_s)
            .collect();
        if recent.is_empty() {
            return (None, None, 0);
        }
        let least = |f: fn(&Stamp) -> f64| self.stamps.iter().map(f).fold(f64::INFINITY, f64::min);
        let median = |f: &dyn Fn(&Stamp) -> f64| {
            let mut v: Vec<f64> = recent.iter().map(|x| f(x)).collect();
            v.sort_by(f64::total_cmp);
            let m = v.len() / 2;
            if v.len() % 2 == 1 {
                v[m]
            } else {
                (v[m - 1] + v[m]) / 2.0
            }
        };
        let (rtt0, f0, b0) = (least(|x| x.rtt), least(|x| x.forward), least(|x| x.back));
        let there = rtt0 / 2.0 + median(&|x| x.forward - f0);
        let back = rtt0 / 2.0 + median(&|x| x.back - b0);
        let rtt = self.rtt_s.unwrap_or_else(|| median(&|x| x.rtt));
        let (there, back) = if there + back > 0.0 {
            let k = rtt / (there + back);
            (there * k, back * k)
        } else {
            (rtt / 2.0, rtt / 2.0)
        };
        (Some(there), Some(back), recent.len() as u64)
    }

    /// When [`Self::poll`] may next have a ping to send (now, before the first).
    pub fn next_due(&self) -> Option<f64> {
        let regular = self.next_at?;
        Some(if self.burst_left > 0 {
            regular.min(self.burst_next)
        } else {
            regular
        })
    }

    /// The hop's state at `now`.
    pub fn state(&mut self, now: f64, s: &Settings) -> HopState {
        let highest = self.highest_answered;
        // Pings answered by nothing newer than them, once late, are lost in a row;
        // those older than every answered one were lost singly.
        self.outstanding
            .retain(|(q, at)| highest.is_none_or(|h| *q > h) || *at > now - 10.0 * s.grace_s);
        let lost_in_row = self.late_in_row(now, s);
        let (loss, loss_samples) = self.loss(now, s);
        let (forward_s, back_s, stamps) = self.one_way(now, s);
        HopState {
            forward_s,
            back_s,
            stamps,
            stamped_sent: self.stamped_sent,
            stamped_answered: self.stamped_answered,
            alive: self.answered > 0 && lost_in_row < s.down_after,
            rtt_s: self.rtt_s,
            rtt_var_s: self.rtt_var_s,
            loss,
            loss_samples,
            lost_in_row,
            sent: self.sent,
            answered: self.answered,
        }
    }

    /// Forward loss between the oldest pong at the window's start and the newest.
    fn loss(&self, now: f64, s: &Settings) -> (Option<f64>, u64) {
        let (Some(&(t0, s0, r0)), Some(&(t1, s1, r1))) = (self.pongs.front(), self.pongs.back())
        else {
            return (None, 0);
        };
        // A stale newest pong says nothing of now.
        if t1 < now - s.loss_window_s || s1 <= s0 || t1 <= t0 {
            return (None, 0);
        }
        // Stamped pings count where the member counts them; one of an earlier
        // version does not (nor answers them).
        let stamped = if self.counts_stamps {
            0
        } else {
            self.stamped_seqs
                .iter()
                .filter(|q| (s0 + 1..=s1).contains(*q))
                .count() as u64
        };
        let sent = (s1 - s0).saturating_sub(stamped);
        // The member restarted its count (or counts pings of an earlier pinger of the
        // same address): nothing to say until the window holds only new pongs.
        let Some(received) = r1.checked_sub(r0) else {
            return (None, 0);
        };
        if sent < MIN_LOSS_SAMPLES {
            return (None, sent);
        }
        let lost = sent.saturating_sub(received);
        (Some((lost as f64 + 0.5) / (sent as f64 + 1.0)), sent)
    }
}

/// The answering side: how many pings each sender's pinger has had received.
#[derive(Debug, Clone, Default)]
pub struct Echo {
    received: std::collections::HashMap<std::net::SocketAddr, Received>,
}

/// One sender's pings as the echo counts them.
#[derive(Debug, Clone, Copy)]
struct Received {
    count: u64,
    highest: u64,
    /// When its last ping came, s.
    last: f64,
}

/// Senders an echo keeps counts for at most (members are few; this bounds memory
/// against anyone else's datagrams).
const MAX_SENDERS: usize = 1024;

/// Senders (address and port) one network (an IPv4 address, an IPv6 /64) may hold at
/// once: a pinger that restarts on a new port takes its network's oldest, so one host
/// cannot fill the table, whatever addresses of its /64 it sends from.
const MAX_PER_HOST: usize = 8;

/// A sender silent this long is forgotten once the table is full, s.
const FORGET_AFTER_S: f64 = 60.0;

impl Echo {
    /// The pong for a ping `seq` from `from` at `now` (s); `None` when the table is
    /// full of other senders heard from within the last 60 s.
    pub fn answer(&mut self, from: std::net::SocketAddr, seq: u64, now: f64) -> Option<Vec<u8>> {
        let received = self.count(from, seq, now)?;
        Some(Message::Pong { seq, received }.emit())
    }

    /// The answer to stamped ping `seq` from `from`, arrived at `now` (s on this
    /// member's steady clock): its arrival time. Counted as a ping of that sender;
    /// `None` as for [`Self::answer`].
    pub fn answer_stamped(
        &mut self,
        from: std::net::SocketAddr,
        seq: u64,
        now: f64,
    ) -> Option<Vec<u8>> {
        self.count(from, seq, now)?;
        Some(
            Message::StampedPong {
                seq,
                at_ns: (now.max(0.0) * 1e9) as u64,
            }
            .emit(),
        )
    }

    /// Counts ping `seq` of `from`: its count of that sender's pings so far.
    fn count(&mut self, from: std::net::SocketAddr, seq: u64, now: f64) -> Option<u64> {
        if !self.received.contains_key(&from) {
            let mine: Vec<(std::net::SocketAddr, f64)> = self
                .received
                .iter()
                .filter(|(a, _)| Requester::of(a.ip(), 64) == Requester::of(from.ip(), 64))
                .map(|(a, r)| (*a, r.last))
                .collect();
            if mine.len() >= MAX_PER_HOST
                && let Some((oldest, _)) = mine.iter().min_by(|x, y| x.1.total_cmp(&y.1))
            {
                self.received.remove(oldest);
            }
            if self.received.len() >= MAX_SENDERS {
                self.received.retain(|_, r| now - r.last < FORGET_AFTER_S);
            }
            if self.received.len() >= MAX_SENDERS {
                return None;
            }
        }
        let r = self.received.entry(from).or_insert(Received {
            count: 0,
            highest: seq,
            last: now,
        });
        // A pinger that restarted begins again from 0: so does its count.
        if seq.saturating_add(1000) < r.highest {
            r.count = 0;
        }
        r.highest = r.highest.max(seq);
        r.count += 1;
        r.last = now;
        Some(r.count)
    }

    /// Senders it keeps counts for now.
    pub fn senders(&self) -> usize {
        self.received.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn settings() -> Settings {
        Settings::default()
    }

    proptest! {
        #[test]
        fn messages_round_trip(seq: u64, received: u64) {
            for m in [
                Message::Ping { seq },
                Message::Pong { seq, received },
                Message::StampedPing { seq },
                Message::StampedPong { seq, at_ns: received },
            ] {
                prop_assert_eq!(Message::parse(&m.emit()), Ok(m));
            }
        }

        #[test]
        fn parsing_never_panics(b in proptest::collection::vec(any::<u8>(), 0..40)) {
            let _ = Message::parse(&b);
        }
    }

    #[test]
    fn wrong_bytes_are_refused() {
        let mut p = Message::Ping { seq: 3 }.emit();
        p.push(0);
        assert_eq!(Message::parse(&p), Err(ParseError::NotHeartbeat));
        let mut p = Message::Ping { seq: 3 }.emit();
        p[4] = 9;
        assert_eq!(Message::parse(&p), Err(ParseError::Kind(9)));
        assert_eq!(
            Message::parse(b"MGRX123456789"),
            Err(ParseError::NotHeartbeat)
        );
    }

    /// Runs `n` pings at `interval_s`, the member receiving those `forward` keeps and
    /// the pinger hearing the pongs `back` keeps, round trip `rtt`.
    fn exchange(
        p: &mut Pinger,
        e: &mut Echo,
        t0: f64,
        n: u64,
        forward: impl Fn(u64) -> bool,
        back: impl Fn(u64) -> bool,
    ) -> f64 {
        let s = settings();
        let from: std::net::SocketAddr = "10.0.0.1:7701".parse().unwrap();
        let mut t = t0;
        for i in 0..n {
            let ping = p.ping(t);
            let Ok(Message::Ping { seq }) = Message::parse(&ping) else {
                panic!()
            };
            if forward(i) {
                let pong = e.answer(from, seq, t).unwrap();
                if back(i) {
                    let Ok(Message::Pong { seq, received }) = Message::parse(&pong) else {
                        panic!()
                    };
                    assert!(p.pong(t + 0.02, seq, received, &s));
                }
            }
            t += s.interval_s;
        }
        t
    }

    #[test]
    fn forward_loss_alone_is_counted() {
        let (mut p, mut e, s) = (Pinger::default(), Echo::default(), settings());
        // Every fifth ping lost on the way there, every third pong on the way back.
        let t = exchange(&mut p, &mut e, 0.0, 300, |i| i % 5 != 0, |i| i % 3 != 0);
        let h = p.state(t, &s);
        assert!(h.alive, "{h:?}");
        let loss = h.loss.unwrap();
        assert!((loss - 0.2).abs() < 0.03, "{h:?}");
        assert!((h.rtt_s.unwrap() - 0.02).abs() < 1e-9, "{h:?}");
        // The window is 10 s of 0.1 s pings.
        assert!((90..=100).contains(&h.loss_samples), "{h:?}");
    }

    #[test]
    fn no_loss_is_never_claimed_from_a_finite_count() {
        let (mut p, mut e, s) = (Pinger::default(), Echo::default(), settings());
        let t = exchange(&mut p, &mut e, 0.0, 200, |_| true, |_| true);
        let h = p.state(t, &s);
        let loss = h.loss.unwrap();
        assert!(loss > 0.0 && loss < 0.01, "{h:?}");
        assert_eq!(h.lost_in_row, 0);
    }

    #[test]
    fn a_hop_is_down_after_pings_lost_in_a_row_and_up_again_when_answered() {
        let (mut p, mut e, s) = (Pinger::default(), Echo::default(), settings());
        let mut t = exchange(&mut p, &mut e, 0.0, 50, |_| true, |_| true);
        assert!(p.state(t, &s).alive);
        // Nothing comes back from now on.
        t = exchange(&mut p, &mut e, t, 9, |_| false, |_| true);
        // The last few are within the grace time: not yet lost.
        assert!(p.state(t, &s).alive, "{:?}", p.state(t, &s));
        t = exchange(&mut p, &mut e, t, 10, |_| false, |_| true);
        let h = p.state(t, &s);
        assert!(!h.alive && h.lost_in_row >= s.down_after, "{h:?}");
        // Detected within down_after intervals plus the grace time.
        t = exchange(&mut p, &mut e, t, 1, |_| true, |_| true);
        assert!(p.state(t, &s).alive);
    }

    /// Drives `p` by [`Pinger::poll`] every millisecond from `t0` to `t1`, the member
    /// answering the pings `answers` keeps after `rtt` s: the pings sent and when
    /// the hop was first seen down.
    fn drive(
        p: &mut Pinger,
        e: &mut Echo,
        (t0, t1): (f64, f64),
        rtt: f64,
        answers: impl FnMut(f64) -> bool,
    ) -> (u64, Option<f64>) {
        let member = Member {
            stamps: true,
            offset: 1000.0,
        };
        drive_ways(p, e, member, (t0, t1), |_| (rtt / 2.0, rtt / 2.0), answers)
    }

    /// The member a pinger is driven against: whether it answers stamped pings (an
    /// earlier version does not), and how far its clock is ahead, s.
    #[derive(Clone, Copy)]
    struct Member {
        stamps: bool,
        offset: f64,
    }

    /// [`drive`] with the delay each way at each time.
    fn drive_ways(
        p: &mut Pinger,
        e: &mut Echo,
        member: Member,
        (t0, t1): (f64, f64),
        ways: impl Fn(f64) -> (f64, f64),
        mut answers: impl FnMut(f64) -> bool,
    ) -> (u64, Option<f64>) {
        let s = settings();
        let from: std::net::SocketAddr = "10.0.0.1:7701".parse().unwrap();
        // (arrives at, its bytes)
        let mut coming: Vec<(f64, Vec<u8>)> = Vec::new();
        let (mut sent, mut down) = (0, None);
        let steps = ((t1 - t0) * 1000.0).round() as u64;
        for i in 0..steps {
            let t = t0 + i as f64 / 1000.0;
            coming.sort_by(|a, b| a.0.total_cmp(&b.0));
            while coming.first().is_some_and(|c| c.0 <= t) {
                let (_, b) = coming.remove(0);
                match Message::parse(&b) {
                    Ok(Message::Pong { seq, received }) => {
                        p.pong(t, seq, received, &s);
                    }
                    Ok(Message::StampedPong { seq, at_ns }) => {
                        p.stamped_pong(t, seq, at_ns, &s);
                    }
                    m => panic!("{m:?}"),
                }
            }
            while let Some(b) = p.poll(t, &s) {
                sent += 1;
                if !answers(t) {
                    continue;
                }
                let (there, back) = ways(t);
                let answer = match Message::parse(&b) {
                    Ok(Message::Ping { seq }) => e.answer(from, seq, t + there + member.offset),
                    Ok(Message::StampedPing { seq }) if member.stamps => {
                        e.answer_stamped(from, seq, t + there + member.offset)
                    }
                    Ok(Message::StampedPing { .. }) => None,
                    m => panic!("{m:?}"),
                };
                if let Some(a) = answer {
                    coming.push((t + there + back, a));
                }
            }
            if down.is_none() && !p.state(t, &s).alive && p.answered > 0 {
                down = Some(t);
            }
        }
        (sent, down)
    }

    #[test]
    fn a_silent_hop_is_found_down_within_half_a_second() {
        let (mut p, mut e) = (Pinger::default(), Echo::default());
        let (sent, down) = drive(&mut p, &mut e, (0.0, 10.0), 0.001, |_| true);
        assert_eq!((sent, down), (100, None));
        // Silent from 10.0 s, at every phase of the ping schedule.
        let (_, down) = drive(&mut p, &mut e, (10.0, 12.0), 0.001, |_| false);
        let took = down.unwrap() - 10.0;
        // 3 pings late (up to 300 ms and 50 ms), then the 7 others 10 ms apart and
        // late: about 0.4 s, where 10 pings at 100 ms and 0.5 s of grace took 1.5.
        assert!(took < 0.5, "{took}");
        // Back: alive at its first answer.
        let (_, _) = drive(&mut p, &mut e, (12.0, 13.0), 0.001, |_| true);
        assert!(p.state(13.0, &settings()).alive);
        // A far hop (300 ms round trip) gets its round trip before a ping is late.
        let (mut far, mut e) = (Pinger::default(), Echo::default());
        let (_, down) = drive(&mut far, &mut e, (0.0, 10.0), 0.3, |_| true);
        assert_eq!(down, None, "a 300 ms hop is not down for being far");
        assert!((0.3..=0.5).contains(&far.late_after(&settings())));
    }

    #[test]
    fn bursts_cost_no_pings_and_loss_does_not_fake_a_silence() {
        // Ten minutes with a 3-second silence every 30 s: the bursts' pings are paid
        // for by the regular ones they skip.
        let (mut p, mut e) = (Pinger::default(), Echo::default());
        let (sent, _) = drive(&mut p, &mut e, (0.0, 600.0), 0.001, |t| t % 30.0 < 27.0);
        assert!(sent <= 6001, "{sent} pings where 6000 are due");
        // Ten minutes with 30 % of the pings unanswered at random (a run of 10, what makes
        // a hop down, is as likely as with pings at their regular times).
        let mut draws = crate::draw::Draws::new(1);
        let (mut p, mut e) = (Pinger::default(), Echo::default());
        let (sent, down) = drive(&mut p, &mut e, (0.0, 600.0), 0.001, |_| {
            draws.uniform() >= 0.3
        });
        assert!(sent <= 6001, "{sent}");
        assert_eq!(down, None);
    }

    #[test]
    fn each_direction_s_delay_change_is_seen_whatever_the_clocks_offset() {
        let s = settings();
        // 10 ms each way for a minute, then 80 ms more on the way there only; the
        // member's clock 1000 s ahead (or 7.5 s).
        for offset in [1000.0, 7.5] {
            let (mut p, mut e) = (Pinger::default(), Echo::default());
            let member = Member {
                stamps: true,
                offset,
            };
            let ways = |t: f64| (if t < 60.0 { 0.01 } else { 0.09 }, 0.01);
            drive_ways(&mut p, &mut e, member, (0.0, 60.0), ways, |_| true);
            let h = p.state(60.0, &s);
            let (f, b) = (h.forward_s.unwrap(), h.back_s.unwrap());
            assert!((f - 0.01).abs() < 1e-3 && (b - 0.01).abs() < 1e-3, "{h:?}");
            // About one ping in ten, over the 10-s window.
            assert!((8..=11).contains(&h.stamps), "{h:?}");
            drive_ways(&mut p, &mut e, member, (60.0, 80.0), ways, |_| true);
            let h = p.state(80.0, &s);
            let (f, b) = (h.forward_s.unwrap(), h.back_s.unwrap());
            assert!((f - 0.09).abs() < 1e-3, "the way there: {h:?}");
            assert!((b - 0.01).abs() < 1e-3, "the way back: {h:?}");
            // The round trip alone would have put half the rise on each side.
            assert!((h.rtt_s.unwrap() - 0.1).abs() < 0.01, "{h:?}");
        }
    }

    #[test]
    fn one_stamped_ping_held_up_does_not_move_a_direction() {
        let s = settings();
        let (mut p, mut e) = (Pinger::default(), Echo::default());
        let member = Member {
            stamps: true,
            offset: 3.0,
        };
        // 10 ms each way, but what leaves in the 100 ms about 29.9 s (a stamped ping
        // among them) is held up 60 ms on the way there.
        let held = |t: f64| (29.85..29.95).contains(&t);
        let ways = |t: f64| (if held(t) { 0.07 } else { 0.01 }, 0.01);
        drive_ways(&mut p, &mut e, member, (0.0, 35.0), ways, |_| true);
        let h = p.state(35.0, &s);
        let held_up = p.stamps.iter().filter(|x| x.forward - 3.0 > 0.05).count();
        assert_eq!(held_up, 1);
        let (f, b) = (h.forward_s.unwrap(), h.back_s.unwrap());
        // Within the drive's millisecond steps.
        assert!(
            (f - 0.01).abs() < 1.5e-3 && (b - 0.01).abs() < 1.5e-3,
            "{h:?}"
        );
    }

    #[test]
    fn stamped_pings_count_for_the_loss_where_the_member_counts_them() {
        let s = settings();
        for stamps in [true, false] {
            let (mut p, mut e) = (Pinger::default(), Echo::default());
            let member = Member {
                stamps,
                offset: 0.0,
            };
            // A fifth of the pings lost on the way there, at random.
            let mut draws = crate::draw::Draws::new(7);
            let mut lossy = |_| draws.uniform() >= 0.2;
            // 5.5 s: five stamped pings among the 55.
            drive_ways(
                &mut p,
                &mut e,
                member,
                (0.0, 5.5),
                |_| (0.01, 0.01),
                &mut lossy,
            );
            let h = p.state(5.5, &s);
            // A new member counts every ping; an earlier one not the stamped ones,
            // which the loss then leaves out.
            let samples = if stamps { 52..=55 } else { 47..=50 };
            assert!(samples.contains(&h.loss_samples), "stamps {stamps}: {h:?}");
            // Two minutes: an earlier member's stamps have paused.
            drive_ways(
                &mut p,
                &mut e,
                member,
                (5.5, 120.0),
                |_| (0.01, 0.01),
                &mut lossy,
            );
            let h = p.state(120.0, &s);
            assert!(
                (95..=101).contains(&h.loss_samples),
                "stamps {stamps}: {h:?}"
            );
            assert!(
                (h.loss.unwrap() - 0.2).abs() < 0.1,
                "stamps {stamps}: {h:?}"
            );
        }
    }

    #[test]
    fn a_member_of_an_earlier_version_costs_no_loss_and_stamps_pause() {
        let s = settings();
        let (mut p, mut e) = (Pinger::default(), Echo::default());
        let old = Member {
            stamps: false,
            offset: 0.0,
        };
        let (sent, down) = drive_ways(
            &mut p,
            &mut e,
            old,
            (0.0, 600.0),
            |_| (0.01, 0.01),
            |_| true,
        );
        let h = p.state(600.0, &s);
        assert_eq!(down, None);
        assert!(h.alive && h.forward_s.is_none() && h.stamps == 0, "{h:?}");
        // Its stamped pings unanswered are no loss.
        assert!(h.loss.unwrap() < 0.01, "{h:?}");
        // Five stamped pings, then a pause of five minutes, then five again: every
        // other slot regular.
        assert!(sent <= 6001, "{sent}");
        assert!(p.stamped_sent <= 15, "{} stamped pings", p.stamped_sent);
        // Stamped pings lost with everything else do not make a member old.
        let (mut p, mut e) = (Pinger::default(), Echo::default());
        let new = Member {
            stamps: true,
            offset: 0.0,
        };
        drive_ways(&mut p, &mut e, new, (0.0, 30.0), |_| (0.01, 0.01), |_| true);
        drive_ways(
            &mut p,
            &mut e,
            new,
            (30.0, 40.0),
            |_| (0.01, 0.01),
            |_| false,
        );
        drive_ways(
            &mut p,
            &mut e,
            new,
            (40.0, 60.0),
            |_| (0.01, 0.01),
            |_| true,
        );
        let h = p.state(60.0, &s);
        assert!(h.forward_s.is_some() && h.stamps >= 8, "{h:?}");
    }

    #[test]
    fn a_stamps_only_pinger_sends_a_tenth_and_measures_both_ways() {
        let s = settings();
        let (mut p, mut e) = (Pinger::stamps_only(), Echo::default());
        let member = Member {
            stamps: true,
            offset: 20.0,
        };
        let (sent, _) = drive_ways(
            &mut p,
            &mut e,
            member,
            (0.0, 60.0),
            |_| (0.15, 0.03),
            |_| true,
        );
        assert!((59..=61).contains(&sent), "{sent} pings in a minute");
        let h = p.state(60.0, &s);
        assert!(h.sent == 0 && h.stamps >= 9, "{h:?}");
        // All answered but the last, still on its way.
        assert_eq!((h.stamped_sent, h.stamped_answered), (sent, sent - 1));
        assert!((h.forward_s.unwrap() - 0.09).abs() < 1e-3, "{h:?}");
        // An earlier version's member: five, then a pause.
        let (mut p, mut e) = (Pinger::stamps_only(), Echo::default());
        let old = Member {
            stamps: false,
            ..member
        };
        let (sent, _) = drive_ways(
            &mut p,
            &mut e,
            old,
            (0.0, 120.0),
            |_| (0.01, 0.01),
            |_| true,
        );
        assert!(sent <= 6, "{sent}");
    }

    #[test]
    fn forged_stamps_only_split_the_measured_round_trip() {
        // A member (or anyone who guesses the sequence) answering with any arrival
        // time at all: each direction stays within the round trip the answers took.
        let s = settings();
        let mut p = Pinger::default();
        let mut draws = crate::draw::Draws::new(3);
        let mut t = 0.0;
        for _ in 0..600 {
            t += s.interval_s;
            let Some(b) = p.poll(t, &s) else { continue };
            match Message::parse(&b) {
                Ok(Message::Ping { seq }) => {
                    p.pong(t + 0.02, seq, seq + 1, &s);
                }
                Ok(Message::StampedPing { seq }) => {
                    let at_ns = match (draws.uniform() * 4.0) as u32 {
                        0 => 0,
                        1 => u64::MAX,
                        _ => (draws.uniform() * 1e18) as u64,
                    };
                    p.stamped_pong(t + 0.02, seq, at_ns, &s);
                }
                m => panic!("{m:?}"),
            }
            let h = p.state(t + 0.02, &s);
            if let (Some(f), Some(b), Some(r)) = (h.forward_s, h.back_s, h.rtt_s) {
                assert!(f >= 0.0 && b >= 0.0, "{h:?}");
                assert!((f + b - r).abs() < 1e-9, "{h:?}");
            }
        }
        assert!(p.state(t, &s).stamps > 0);
    }

    #[test]
    fn a_stamped_pong_for_no_stamped_ping_is_ignored() {
        let (mut p, s) = (Pinger::default(), settings());
        assert!(!p.stamped_pong(1.0, 3, 5, &s));
        let h = p.state(1.0, &s);
        assert_eq!((h.forward_s, h.stamps), (None, 0));
    }

    #[test]
    fn a_pinger_nobody_answered_is_not_alive() {
        let (mut p, s) = (Pinger::default(), settings());
        p.ping(0.0);
        assert!(!p.state(0.05, &s).alive);
        assert!(!p.pong(0.06, 77, 1, &s), "a pong for no ping of ours");
    }

    #[test]
    fn any_sequence_number_is_answered() {
        // Anyone may send a ping; one numbered near the end of u64 must not overflow
        // (the fuzz target found it).
        let mut e = Echo::default();
        let from: std::net::SocketAddr = "10.0.0.9:7701".parse().unwrap();
        for seq in [u64::MAX, u64::MAX - 1, 0, u64::MAX] {
            assert!(e.answer(from, seq, 0.0).is_some());
        }
    }

    #[test]
    fn one_host_cannot_fill_the_echo_and_silent_senders_are_forgotten() {
        let mut e = Echo::default();
        // One host from every port it has: it holds MAX_PER_HOST slots, no more.
        for port in 1..=1024u16 {
            let from = std::net::SocketAddr::from(([10, 0, 0, 66], port));
            assert!(e.answer(from, 1, 0.0).is_some());
        }
        assert_eq!(e.senders(), MAX_PER_HOST);
        // So does one IPv6 /64 from every address it has.
        let mut v6 = Echo::default();
        for host in 1..=1024u128 {
            let a = std::net::Ipv6Addr::from((0x2001_0db8_0000_0001u128 << 64) | host);
            assert!(
                v6.answer(std::net::SocketAddr::from((a, 7701)), 1, 0.0)
                    .is_some()
            );
        }
        assert_eq!(v6.senders(), MAX_PER_HOST);
        // A member is still answered.
        let member = std::net::SocketAddr::from(([10, 0, 0, 1], 7701));
        assert!(e.answer(member, 1, 0.0).is_some());
        // Many hosts fill the table; silent ones make room after FORGET_AFTER_S.
        let mut e = Echo::default();
        for i in 0..MAX_SENDERS as u32 {
            let from = std::net::SocketAddr::from(((0x0b00_0000 + i).to_be_bytes(), 7701));
            assert!(e.answer(from, 1, 0.0).is_some());
        }
        assert!(
            e.answer(member, 1, 1.0).is_none(),
            "full of senders heard just now"
        );
        assert!(e.answer(member, 1, FORGET_AFTER_S + 1.0).is_some());
    }

    #[test]
    fn an_echo_restarts_its_count_for_a_restarted_pinger() {
        let mut e = Echo::default();
        let from: std::net::SocketAddr = "10.0.0.1:7701".parse().unwrap();
        for seq in 5000..5010 {
            e.answer(from, seq, 0.0);
        }
        let Ok(Message::Pong { received, .. }) = Message::parse(&e.answer(from, 0, 0.0).unwrap())
        else {
            panic!()
        };
        assert_eq!(received, 1);
    }
}
