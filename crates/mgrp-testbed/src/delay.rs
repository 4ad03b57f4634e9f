//! A delay line with optional random loss, in user space (this kernel has no netem):
//! a thread in a namespace of its own between two devices moves every frame from one
//! to the other, releasing it at its kernel receive stamp plus the one-way delay.
//!
//! The namespace has no addresses and does not forward, so its kernel drops the frames
//! it sees (they are addressed to the routers' MACs); only the delay line passes them
//! on, ARP included, so the routers on either side see one Ethernet link. Frames keep
//! their order. Loss applies to the forward direction (west to east) only: it stands
//! for loss on the bottleneck, not on the acknowledgements' way back.
//!
//! The thread asks for `SCHED_FIFO` and a 1 ns timer slack (it goes on without them
//! where refused), sleeps until shortly before the next release and spins the rest.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::link::{Direction, LinkSocket, MAX_FRAME, realtime_ns, wait_any};
use crate::threads::{Stoppable, halt_checked};
use crate::{Netns, Seeded};

/// How the line delays and drops.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DelayConfig {
    /// One-way delay, the same in both directions (a round trip is twice this).
    pub one_way: Duration,
    /// Probability that a west-to-east frame is dropped, 0 to 1.
    pub loss: f64,
    /// Seed of the loss draws, so that runs repeat.
    pub seed: u64,
}

impl Default for DelayConfig {
    /// The paper's: 40 ms round trip, no loss.
    fn default() -> Self {
        Self {
            one_way: Duration::from_millis(20),
            loss: 0.0,
            seed: 1,
        }
    }
}

/// What the line did, readable while it runs.
#[derive(Debug, Default)]
pub struct DelayCounters {
    /// Frames passed on west to east.
    pub forward: AtomicU64,
    /// Frames passed on east to west.
    pub backward: AtomicU64,
    /// West-to-east frames dropped by the loss draw.
    pub lost: AtomicU64,
    /// Frames that could not be written (the device refused them).
    pub send_errors: AtomicU64,
    /// The largest lateness of a release the line saw itself, nanoseconds (its own
    /// view; the accuracy that counts is measured on the wire by the `delay_line` bench).
    pub max_late_ns: AtomicU64,
}

/// A running delay line; stopped and joined on drop.
#[derive(Debug)]
pub struct DelayLine {
    thread: Stoppable<anyhow::Result<()>>,
    /// Its counters.
    pub counters: Arc<DelayCounters>,
    /// The west-to-east loss probability now (an `f64`'s bits), changed while it runs.
    loss: Arc<AtomicU64>,
}

/// Sleep until this long before a release, then spin.
const SPIN: Duration = Duration::from_micros(60);
/// Frames held at most; beyond, the oldest direction is not read until it drains
/// (the kernel's socket buffer then holds, and at worst drops, the excess).
const MAX_HELD: usize = 200_000;

struct Held {
    release_ns: i64,
    len: usize,
    buf: Box<[u8]>,
}

/// A delay line in a namespace of its own between two hosts' namespaces, which then
/// share one Ethernet link through it ([`DelayLine::between`]).
#[derive(Debug)]
pub struct Between {
    /// The line's namespace: no addresses, no IPv6, so it sends nothing itself.
    pub ns: Netns,
    /// The running line.
    pub line: DelayLine,
    /// The west host's device towards the line (down, without an address).
    pub west_dev: String,
    /// The east host's device towards the line (down, without an address).
    pub east_dev: String,
}

impl DelayLine {
    /// A namespace of its own between `west` and `east`, joined to each by a veth
    /// pair, with the line running between its two devices.
    pub fn between(west: &Netns, east: &Netns, cfg: DelayConfig) -> anyhow::Result<Between> {
        let ns = Netns::new("mgd")?;
        ns.exec(&["sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1"])?;
        ns.exec(&["sysctl", "-q", "-w", "net.ipv6.conf.default.disable_ipv6=1"])?;
        let (west_dev, d_west) = crate::netns::veth_pair(west, &ns)?;
        let (d_east, east_dev) = crate::netns::veth_pair(&ns, east)?;
        for dev in [&d_west, &d_east] {
            ns.ip(&["link", "set", dev, "up"])?;
        }
        let line = Self::start(&ns, &d_west, &d_east, cfg)?;
        Ok(Between {
            ns,
            line,
            west_dev,
            east_dev,
        })
    }

    /// Starts the line in `ns` between its devices `west` and `east`.
    pub fn start(ns: &Netns, west: &str, east: &str, cfg: DelayConfig) -> anyhow::Result<Self> {
        anyhow::ensure!(
            (0.0..=1.0).contains(&cfg.loss),
            "loss must be between 0 and 1, got {}",
            cfg.loss
        );
        let sockets = [
            LinkSocket::open(ns, west, Direction::Incoming)?,
            LinkSocket::open(ns, east, Direction::Incoming)?,
        ];
        let stop = Arc::new(AtomicBool::new(false));
        let counters = Arc::new(DelayCounters::default());
        let loss = Arc::new(AtomicU64::new(cfg.loss.to_bits()));
        let thread = {
            let (stop, counters, loss) = (stop.clone(), counters.clone(), loss.clone());
            ns.spawn("delay-line", move || {
                run(&sockets, cfg, &loss, &stop, &counters)
            })?
        };
        Ok(Self {
            thread: Stoppable::new(stop, vec![thread]),
            counters,
            loss,
        })
    }

    /// Changes the west-to-east loss probability from the next frame on (a loss
    /// schedule's step).
    pub fn set_loss(&self, loss: f64) -> anyhow::Result<()> {
        anyhow::ensure!(
            (0.0..=1.0).contains(&loss),
            "loss must be between 0 and 1, got {loss}"
        );
        self.loss.store(loss.to_bits(), Ordering::Relaxed);
        Ok(())
    }

    /// Stops the line; an error if its thread failed.
    pub fn stop(mut self) -> anyhow::Result<()> {
        halt_checked(&mut self.thread, "delay line's")
    }
}

fn realtime_priority() {
    // Failure is harmless: the line runs on the normal scheduler, less precisely.
    mgrp_rt::thread::set_timer_slack(1);
    let _ = mgrp_rt::thread::set_realtime(40);
}

fn run(
    sockets: &[LinkSocket; 2],
    cfg: DelayConfig,
    loss: &AtomicU64,
    stop: &AtomicBool,
    counters: &DelayCounters,
) -> anyhow::Result<()> {
    realtime_priority();
    let delay_ns = i64::try_from(cfg.one_way.as_nanos()).unwrap_or(i64::MAX);
    let mut draw = Seeded::new(cfg.seed);
    let mut queues: [VecDeque<Held>; 2] = [VecDeque::new(), VecDeque::new()];
    let mut pool: Vec<Box<[u8]>> = Vec::new();
    let refs = [&sockets[0], &sockets[1]];
    while !stop.load(Ordering::Relaxed) {
        for (d, socket) in sockets.iter().enumerate() {
            while queues[d].len() < MAX_HELD {
                let mut buf = pool
                    .pop()
                    .unwrap_or_else(|| vec![0u8; MAX_FRAME].into_boxed_slice());
                let Some(r) = socket.recv(&mut buf)? else {
                    pool.push(buf);
                    break;
                };
                let p = f64::from_bits(loss.load(Ordering::Relaxed));
                if d == 0 && p > 0.0 && draw.next_f64() < p {
                    counters.lost.fetch_add(1, Ordering::Relaxed);
                    pool.push(buf);
                    continue;
                }
                let stamp = if r.stamp_ns > 0 {
                    r.stamp_ns
                } else {
                    realtime_ns()
                };
                queues[d].push_back(Held {
                    release_ns: stamp.saturating_add(delay_ns),
                    len: r.len,
                    buf,
                });
            }
        }
        let now = realtime_ns();
        for (d, queue) in queues.iter_mut().enumerate() {
            while queue.front().is_some_and(|h| h.release_ns <= now) {
                let Some(h) = queue.pop_front() else { break };
                let late = u64::try_from(now - h.release_ns).unwrap_or(0);
                counters.max_late_ns.fetch_max(late, Ordering::Relaxed);
                // A frame the device refuses (it went down, say) is counted and
                // dropped, as a link would.
                if sockets[1 - d].send(&h.buf[..h.len]).is_err() {
                    counters.send_errors.fetch_add(1, Ordering::Relaxed);
                } else if d == 0 {
                    counters.forward.fetch_add(1, Ordering::Relaxed);
                } else {
                    counters.backward.fetch_add(1, Ordering::Relaxed);
                }
                pool.push(h.buf);
            }
        }
        let next = queues
            .iter()
            .filter_map(|q| q.front().map(|h| h.release_ns))
            .min();
        let timeout = match next {
            // Nothing held: wake now and then to see the stop flag.
            None => Duration::from_millis(50),
            Some(t) => {
                let wait = Duration::from_nanos(u64::try_from(t - realtime_ns()).unwrap_or(0));
                if wait <= SPIN {
                    continue;
                }
                wait - SPIN
            }
        };
        wait_any(refs, Some(timeout))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loss_draws_are_uniform_and_repeat() {
        let mut a = Seeded::new(7);
        let draws: Vec<f64> = (0..100_000).map(|_| a.next_f64()).collect();
        assert!(draws.iter().all(|x| (0.0..1.0).contains(x)));
        let below = draws.iter().filter(|&&x| x < 0.01).count();
        assert!((800..1200).contains(&below), "{below} of 100000 below 0.01");
        let mean = draws.iter().sum::<f64>() / draws.len() as f64;
        assert!((0.49..0.51).contains(&mean), "mean {mean}");
        let mut b = Seeded::new(7);
        assert!(draws.iter().take(100).all(|&x| x == b.next_f64()));
        assert!(Seeded::new(0).next_f64() >= 0.0);
    }
}
