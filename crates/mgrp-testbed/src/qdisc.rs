//! The truth about loss at a bottleneck, from the qdisc itself: a thread in the
//! bottleneck's namespace reads the root qdisc's counters over rtnetlink every few
//! hundred microseconds (drops and backlog, as `tc -s qdisc` shows them, without
//! starting a process per reading), and [`slot_truth`] turns the readings into
//! congested slots and loss episodes, the quantities badabing estimates.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, bail};

use mgrp_tool::netlink;

use crate::Netns;
use crate::link::realtime_ns;

/// One reading of the root qdisc's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reading {
    /// When it was read, CLOCK_REALTIME ns (the clock of the tools' probe stamps).
    pub at_ns: i64,
    /// Packets dropped since the qdisc was made.
    pub drops: u32,
    /// Bytes queued.
    pub backlog: u32,
}

/// A running reader of one device's root qdisc; [`QdiscLog::stop`] returns what it
/// read. Readings are kept only when the drops or the backlog changed.
#[derive(Debug)]
pub struct QdiscLog {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<anyhow::Result<Vec<Reading>>>>,
}

impl QdiscLog {
    /// Starts reading `dev`'s root qdisc in `ns` every `every`.
    pub fn start(ns: &Netns, dev: &str, every: Duration) -> anyhow::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let (dev, flag) = (dev.to_owned(), stop.clone());
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = ns.spawn("qdisc-log", move || {
            let mut reader = match Reader::open(&dev) {
                Ok(r) => {
                    let _ = ready_tx.send(Ok(()));
                    r
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(format!("{e:#}")));
                    return Err(e);
                }
            };
            mgrp_rt::thread::set_timer_slack(1);
            let mut out: Vec<Reading> = Vec::with_capacity(1 << 16);
            while !flag.load(Ordering::Relaxed) {
                let (drops, backlog) = reader.read()?;
                let at_ns = realtime_ns();
                if out
                    .last()
                    .is_none_or(|l| l.drops != drops || l.backlog != backlog)
                {
                    out.push(Reading {
                        at_ns,
                        drops,
                        backlog,
                    });
                }
                std::thread::sleep(every);
            }
            Ok(out)
        })?;
        match ready_rx.recv_timeout(Duration::from_secs(5)) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => bail!("cannot read the qdisc: {e}"),
            Err(_) => bail!("the qdisc reader did not start"),
        }
        Ok(Self {
            stop,
            thread: Some(thread),
        })
    }

    /// Stops reading; returns the readings.
    pub fn stop(mut self) -> anyhow::Result<Vec<Reading>> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .context("stopped twice")?
            .join()
            .map_err(|_| anyhow::anyhow!("the qdisc reader panicked"))?
    }
}

impl Drop for QdiscLog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// An rtnetlink socket that dumps the qdiscs and picks one device's root.
struct Reader {
    socket: netlink::Socket,
    request: Vec<u8>,
    ifindex: i32,
}

const RTM_NEWQDISC: u16 = 36;
const RTM_GETQDISC: u16 = 38;
const TCA_STATS2: u16 = 7;
const TCA_STATS_QUEUE: u16 = 3;
const TC_H_ROOT: u32 = 0xffff_ffff;

impl Reader {
    fn open(dev: &str) -> anyhow::Result<Self> {
        let name = std::ffi::CString::new(dev)?;
        // SAFETY: a valid C string; the call only reads it.
        let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
        if ifindex == 0 {
            bail!("no device {dev} in this namespace");
        }
        Ok(Self {
            socket: netlink::Socket::open(libc::NETLINK_ROUTE)
                .context("cannot open an rtnetlink socket")?,
            // struct tcmsg, all zeros: every qdisc of every device.
            request: netlink::dump_request(RTM_GETQDISC, &[0u8; 20]),
            ifindex: i32::try_from(ifindex)?,
        })
    }

    /// The root qdisc's (drops, backlog bytes).
    fn read(&mut self) -> anyhow::Result<(u32, u32)> {
        let mut found = None;
        let ifindex = self.ifindex;
        self.socket
            .dump(&self.request, |kind, body| {
                if found.is_none() {
                    found = root_stats(kind, body, ifindex);
                }
            })
            .context("rtnetlink qdisc dump")?;
        found.context("the device has no root qdisc")
    }
}

/// What one buffer of a qdisc dump held: the device's root qdisc's (drops, backlog)
/// if it was in it, and whether the dump goes on, ended, or failed (errno).
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// More buffers follow.
    More(Option<(u32, u32)>),
    /// The dump ended.
    Done(Option<(u32, u32)>),
    /// The kernel refused the dump.
    Error(i32),
}

/// The messages of one buffer of an `RTM_GETQDISC` dump: the root qdisc of
/// `ifindex`'s (drops, backlog) if it was among them, and whether the dump ended.
pub fn parse_dump(buf: &[u8], ifindex: i32) -> Parsed {
    let mut found = None;
    let end = netlink::walk(buf, |kind, body| {
        if found.is_none() {
            found = root_stats(kind, body, ifindex);
        }
    });
    match end {
        netlink::End::More => Parsed::More(found),
        netlink::End::Done => Parsed::Done(found),
        netlink::End::Error(e) => Parsed::Error(e),
    }
}

/// (drops, backlog) of an `RTM_NEWQDISC` message (`body` after the netlink header)
/// if it is `ifindex`'s root qdisc: `struct tcmsg`, then TCA_STATS2 → TCA_STATS_QUEUE
/// (qlen, backlog, drops, …).
fn root_stats(kind: u16, body: &[u8], ifindex: i32) -> Option<(u32, u32)> {
    if kind != RTM_NEWQDISC
        || netlink::u32_at(body, 4)? as i32 != ifindex
        || netlink::u32_at(body, 12)? != TC_H_ROOT
    {
        return None;
    }
    let (_, stats) = netlink::attributes(body.get(20..)?).find(|(k, _)| *k == TCA_STATS2)?;
    let (_, q) = netlink::attributes(stats).find(|(k, _)| *k == TCA_STATS_QUEUE)?;
    Some((netlink::u32_at(q, 8)?, netlink::u32_at(q, 4)?))
}

/// The bottleneck's loss episodes over `[from_ns, to_ns)` in slots of `slot_ns`: a slot
/// is congested when the qdisc dropped a packet in it (a drop is placed at the reading
/// that first counted it), and an episode is a run of congested slots. With
/// `near_full` (bytes), a slot whose backlog reached it counts as congested too.
pub fn slot_truth(
    readings: &[Reading],
    from_ns: i64,
    to_ns: i64,
    slot_ns: i64,
    near_full: Option<u32>,
) -> SlotTruth {
    let slots = usize::try_from((to_ns - from_ns).max(0) / slot_ns.max(1)).unwrap_or(0);
    let mut congested = vec![false; slots];
    for w in readings.windows(2) {
        let (before, r) = (w[0], w[1]);
        if r.at_ns < from_ns || r.at_ns >= to_ns {
            continue;
        }
        let k = ((r.at_ns - from_ns) / slot_ns) as usize;
        let Some(c) = congested.get_mut(k) else {
            continue;
        };
        if r.drops != before.drops || near_full.is_some_and(|b| r.backlog >= b) {
            *c = true;
        }
    }
    let busy = congested.iter().filter(|c| **c).count();
    let episodes = congested
        .iter()
        .enumerate()
        .filter(|&(i, &c)| c && (i == 0 || !congested[i - 1]))
        .count();
    let drops = readings
        .iter()
        .filter(|r| r.at_ns >= from_ns && r.at_ns < to_ns)
        .map(|r| r.drops)
        .max()
        .zip(
            readings
                .iter()
                .rev()
                .find(|r| r.at_ns < from_ns)
                .map(|r| r.drops),
        )
        .map_or(0, |(end, start)| u64::from(end.wrapping_sub(start)));
    SlotTruth {
        slots: slots as u64,
        congested: busy as u64,
        episodes: episodes as u64,
        drops,
    }
}

/// Loss episodes counted at the bottleneck, per slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotTruth {
    /// Slots in the interval.
    pub slots: u64,
    /// Congested slots.
    pub congested: u64,
    /// Runs of congested slots.
    pub episodes: u64,
    /// Packets the qdisc dropped in the interval.
    pub drops: u64,
}

impl SlotTruth {
    /// The fraction of slots congested (badabing's frequency).
    pub fn frequency(&self) -> f64 {
        self.congested as f64 / self.slots.max(1) as f64
    }

    /// The mean episode length in slots, if there was an episode.
    pub fn duration_slots(&self) -> Option<f64> {
        (self.episodes > 0).then(|| self.congested as f64 / self.episodes as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(at_ns: i64, drops: u32, backlog: u32) -> Reading {
        Reading {
            at_ns,
            drops,
            backlog,
        }
    }

    #[test]
    fn drops_make_congested_slots_and_runs_make_episodes() {
        // Slots of 10 over [100, 200): drops counted at 125, 131 (slots 2, 3) and 175
        // (slot 7); the reading at 95 is before the interval and sets the start count.
        let readings = [
            r(95, 4, 0),
            r(125, 6, 100),
            r(131, 7, 100),
            r(150, 7, 0),
            r(175, 9, 50),
            r(205, 12, 0),
        ];
        let t = slot_truth(&readings, 100, 200, 10, None);
        assert_eq!(t.slots, 10);
        assert_eq!(t.congested, 3);
        assert_eq!(t.episodes, 2);
        assert_eq!(t.drops, 5);
        assert!((t.frequency() - 0.3).abs() < 1e-12);
        assert_eq!(t.duration_slots(), Some(1.5));
        // A near-full backlog adds slot 5 only when asked.
        let readings = [r(95, 4, 0), r(155, 4, 90), r(165, 4, 10)];
        assert_eq!(slot_truth(&readings, 100, 200, 10, None).congested, 0);
        let t = slot_truth(&readings, 100, 200, 10, Some(80));
        assert_eq!((t.congested, t.episodes), (1, 1));
    }

    #[test]
    fn a_quiet_interval_has_no_episode() {
        let t = slot_truth(&[r(0, 3, 0), r(50, 3, 20)], 10, 110, 10, None);
        assert_eq!((t.slots, t.congested, t.episodes), (10, 0, 0));
        assert_eq!(t.duration_slots(), None);
    }

    #[test]
    fn a_dump_buffer_is_parsed_for_one_device_root() {
        // One RTM_NEWQDISC for ifindex 7, root, with TCA_KIND and TCA_STATS2/QUEUE,
        // then NLMSG_DONE.
        let mut attrs = Vec::new();
        attrs.extend_from_slice(&8u16.to_ne_bytes());
        attrs.extend_from_slice(&1u16.to_ne_bytes());
        attrs.extend_from_slice(b"tbf\0");
        let mut queue = Vec::new();
        for v in [2u32, 3000, 41, 0, 9] {
            queue.extend_from_slice(&v.to_ne_bytes());
        }
        let mut nested = Vec::new();
        nested.extend_from_slice(&(4 + queue.len() as u16).to_ne_bytes());
        nested.extend_from_slice(&TCA_STATS_QUEUE.to_ne_bytes());
        nested.extend_from_slice(&queue);
        attrs.extend_from_slice(&(4 + nested.len() as u16).to_ne_bytes());
        attrs.extend_from_slice(&(TCA_STATS2 | 0x8000).to_ne_bytes());
        attrs.extend_from_slice(&nested);
        let mut msg = vec![0u8; 36];
        msg[0..4].copy_from_slice(&((36 + attrs.len()) as u32).to_ne_bytes());
        msg[4..6].copy_from_slice(&RTM_NEWQDISC.to_ne_bytes());
        msg[20..24].copy_from_slice(&7i32.to_ne_bytes());
        msg[28..32].copy_from_slice(&TC_H_ROOT.to_ne_bytes());
        msg.extend_from_slice(&attrs);
        let mut done = vec![0u8; 20];
        done[0..4].copy_from_slice(&20u32.to_ne_bytes());
        done[4..6].copy_from_slice(&netlink::NLMSG_DONE.to_ne_bytes());
        let mut buf = msg.clone();
        buf.extend_from_slice(&done);
        assert_eq!(parse_dump(&buf, 7), Parsed::Done(Some((41, 3000))));
        assert_eq!(parse_dump(&buf, 8), Parsed::Done(None));
        assert_eq!(parse_dump(&msg, 7), Parsed::More(Some((41, 3000))));
        // Cut anywhere, it does not panic.
        for n in 0..buf.len() {
            let _ = parse_dump(&buf[..n], 7);
        }
    }
}
