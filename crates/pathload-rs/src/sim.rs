//! A deterministic simulated path, to drive the whole estimator without a network.
//!
//! One drop-tail FIFO bottleneck of a given rate (counting a per-packet link overhead,
//! as tbf counts the Ethernet header), a propagation delay, cross traffic (constant
//! rate or Poisson) and seeded receive-stamp noise. Optionally an application stream
//! that, like MGRP riders, travels inside the probes while a stream is sent (and is
//! then reported as competing traffic) and on the link by itself otherwise.
//! Everything comes from a seed, so a run is the same every time.

use std::collections::VecDeque;

use crate::estimator::{Action, Estimator, Event, Outcome, StreamResult, TrainResult};
use crate::trend::Arrival;

/// The simulated path.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkConfig {
    /// Bottleneck rate, Mbit/s, counting `overhead` bytes per packet.
    pub capacity_mbps: f64,
    /// Bytes the bottleneck counts on top of each IP packet (14 for tbf on Ethernet).
    pub overhead: u32,
    /// Queue limit, bytes.
    pub queue_bytes: u64,
    /// One-way propagation delay, ns.
    pub delay_ns: i64,
    /// Cross traffic, Mbit/s of IP bytes.
    pub cross_mbps: f64,
    /// Cross-traffic packet size, IP bytes.
    pub cross_size: u32,
    /// Poisson cross-traffic arrivals instead of constant spacing.
    pub poisson: bool,
    /// Cross-traffic packets that arrive back to back, as one burst, at each arrival
    /// (1: one at a time). The rate stays `cross_mbps`: bursts come that many times
    /// further apart. A TCP flow whose sends the kernel sizes to several segments
    /// reaches a bottleneck like this.
    pub cross_burst: u32,
    /// An application stream from the prober's host, Mbit/s of IP bytes.
    pub app_mbps: f64,
    /// Whether the application stream rides in the probes while a stream is sent.
    pub app_rides: bool,
    /// Whether the sender's reports count none of the riders arriving in every other
    /// stream, as when the application paused during those streams and what it had
    /// sent before rode in them (a TCP flow stalled by its host).
    pub app_unaccounted: bool,
    /// Largest receive-stamp noise, ns (uniform).
    pub jitter_ns: i64,
    /// Sender cost per back-to-back packet, ns.
    pub send_cost_ns: i64,
    /// Seed.
    pub seed: u64,
}

impl Default for LinkConfig {
    fn default() -> Self {
        Self {
            capacity_mbps: 10.0,
            overhead: 14,
            queue_bytes: 125_000,
            delay_ns: 20_000_000,
            cross_mbps: 0.0,
            cross_size: 1500,
            poisson: false,
            cross_burst: 1,
            app_mbps: 0.0,
            app_rides: false,
            app_unaccounted: false,
            jitter_ns: 20_000,
            send_cost_ns: 3_000,
            seed: 1,
        }
    }
}

impl LinkConfig {
    /// The available bandwidth for `probe_size`-byte probes, at the IP level: what the
    /// bottleneck leaves of its rate after cross and application traffic, scaled from
    /// link bytes to the probes' IP bytes.
    pub fn truth(&self, probe_size: u32) -> f64 {
        let wire = |mbps: f64, size: u32| mbps * f64::from(size + self.overhead) / f64::from(size);
        let used = wire(self.cross_mbps, self.cross_size) + wire(self.app_mbps, 1500);
        (self.capacity_mbps - used).max(0.0) * f64::from(probe_size)
            / f64::from(probe_size + self.overhead)
    }
}

/// splitmix64: small, seeded, good enough for simulated noise.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A source of packets at a rate, in bursts of `burst` packets.
#[derive(Debug, Clone)]
struct Source {
    size: u32,
    burst: u32,
    mean_gap_ns: f64,
    poisson: bool,
    next_ns: f64,
}

impl Source {
    fn new(mbps: f64, size: u32, burst: u32, poisson: bool, rng: &mut Rng) -> Option<Self> {
        (mbps > 0.0).then(|| {
            let burst = burst.max(1);
            let mean_gap_ns = f64::from(size) * f64::from(burst) * 8.0 * 1_000.0 / mbps;
            Self {
                size,
                burst,
                mean_gap_ns,
                poisson,
                next_ns: rng.unit() * mean_gap_ns,
            }
        })
    }

    fn advance(&mut self, rng: &mut Rng) {
        self.next_ns += if self.poisson {
            -self.mean_gap_ns * (1.0 - rng.unit()).ln()
        } else {
            self.mean_gap_ns
        };
    }
}

/// The simulated path's state.
#[derive(Debug, Clone)]
pub struct Link {
    cfg: LinkConfig,
    rng: Rng,
    cross: Option<Source>,
    app: Option<Source>,
    /// Departure time and link bytes of everything still in the queue.
    queue: VecDeque<(i64, u64)>,
    busy_until: i64,
    now_ns: i64,
}

impl Link {
    /// A path, idle at time 0.
    pub fn new(cfg: LinkConfig) -> Self {
        let mut rng = Rng(cfg.seed);
        let cross = Source::new(
            cfg.cross_mbps,
            cfg.cross_size,
            cfg.cross_burst,
            cfg.poisson,
            &mut rng,
        );
        let app = Source::new(cfg.app_mbps, 1500, 1, false, &mut rng);
        Self {
            cfg,
            rng,
            cross,
            app,
            queue: VecDeque::new(),
            busy_until: 0,
            now_ns: 0,
        }
    }

    /// Its configuration.
    pub fn config(&self) -> &LinkConfig {
        &self.cfg
    }

    /// Offers a packet of `size` IP bytes to the bottleneck at `t`; its departure time,
    /// or `None` if the queue was full.
    fn offer(&mut self, t: i64, size: u32) -> Option<i64> {
        while self.queue.front().is_some_and(|&(d, _)| d <= t) {
            self.queue.pop_front();
        }
        let bytes = u64::from(size + self.cfg.overhead);
        let backlog: u64 = self.queue.iter().map(|&(_, b)| b).sum();
        if backlog + bytes > self.cfg.queue_bytes {
            return None;
        }
        let tx = (bytes as f64 * 8.0 * 1_000.0 / self.cfg.capacity_mbps) as i64;
        let dep = self.busy_until.max(t) + tx;
        self.busy_until = dep;
        self.queue.push_back((dep, bytes));
        Some(dep)
    }

    /// Runs the background sources up to (not including) `t`. Application packets
    /// inside `riding` are counted as riders instead of offered to the link.
    fn background_until(&mut self, t: i64, riding: Option<(i64, i64)>) -> u64 {
        let mut rider_bytes = 0;
        loop {
            let c = self.cross.as_ref().map_or(f64::INFINITY, |s| s.next_ns);
            let a = self.app.as_ref().map_or(f64::INFINITY, |s| s.next_ns);
            let next = c.min(a);
            if next >= t as f64 {
                break;
            }
            let when = next as i64;
            if c <= a {
                let (size, burst) = self.cross.as_ref().map_or((0, 0), |s| (s.size, s.burst));
                for _ in 0..burst {
                    self.offer(when, size);
                }
                if let Some(s) = self.cross.as_mut() {
                    s.advance(&mut self.rng);
                }
            } else {
                let size = self.app.as_ref().map_or(0, |s| s.size);
                if riding.is_some_and(|(from, to)| when >= from && when <= to) {
                    rider_bytes += u64::from(size);
                } else {
                    self.offer(when, size);
                }
                if let Some(s) = self.app.as_mut() {
                    s.advance(&mut self.rng);
                }
            }
        }
        rider_bytes
    }

    /// Sends probes of `size` IP bytes leaving at `departures` (ns, from now on the
    /// link's clock) and returns what the receiver stamps, plus the application bytes
    /// that rode in them.
    pub fn send(&mut self, departures: &[i64], size: u32) -> (Vec<Arrival>, u64) {
        let (Some(&first), Some(&last)) = (departures.first(), departures.last()) else {
            return (Vec::new(), 0);
        };
        let riding = (self.cfg.app_rides).then_some((first, last));
        let mut arrivals = Vec::with_capacity(departures.len());
        let mut riders = 0;
        for (i, &t) in departures.iter().enumerate() {
            riders += self.background_until(t, riding);
            if let Some(dep) = self.offer(t, size) {
                let noise = (self.rng.unit() * self.cfg.jitter_ns as f64) as i64;
                arrivals.push(Arrival {
                    seq: i as u32,
                    sent_ns: t,
                    received_ns: dep + self.cfg.delay_ns + noise,
                });
            }
        }
        self.now_ns = self.now_ns.max(last);
        (arrivals, riders)
    }

    /// Lets time pass until `t` with only background traffic.
    pub fn idle_until(&mut self, t: i64) {
        self.background_until(t, None);
        self.now_ns = self.now_ns.max(t);
    }

    /// The link's clock, ns.
    pub fn now(&self) -> i64 {
        self.now_ns
    }
}

/// Drives `est` over `link` until it is done, as the CLI does over a network: each
/// stream starts a round trip after the previous one's idle ended. Returns the outcome
/// and the simulated time it took, in seconds.
pub fn run(est: &mut Estimator, link: &mut Link) -> (Outcome, f64) {
    run_with(est, link, |_| {})
}

/// Like [`run`], handing every event to `on_event` as it happens.
pub fn run_with(
    est: &mut Estimator,
    link: &mut Link,
    mut on_event: impl FnMut(&Event),
) -> (Outcome, f64) {
    let rtt = 2 * link.config().delay_ns;
    let start = link.now();
    loop {
        match est.poll_action() {
            Action::Done(o) => return (o, (link.now() - start) as f64 / 1e9),
            Action::Train(t) => {
                let t0 = link.now() + rtt;
                let cost = link.config().send_cost_ns;
                let deps: Vec<i64> = (0..i64::from(t.packets)).map(|i| t0 + i * cost).collect();
                let (arrivals, _) = link.send(&deps, t.size);
                let end = deps.last().copied().unwrap_or(t0) + rtt;
                link.idle_until(end);
                est.handle_train(&TrainResult {
                    id: t.id,
                    sent: t.packets,
                    arrivals,
                });
            }
            Action::Stream(s) => {
                let t0 = link.now() + rtt;
                let spacing = i64::try_from(s.spacing_ns).unwrap_or(i64::MAX / 4);
                let deps: Vec<i64> = (0..i64::from(s.packets))
                    .map(|i| t0 + i * spacing)
                    .collect();
                let (arrivals, riders) = link.send(&deps, s.size);
                let padding = u64::from(s.packets) * u64::from(s.size.saturating_sub(60));
                let riders = riders.min(padding);
                let competing = if link.config().app_unaccounted && s.stream % 2 == 1 {
                    0
                } else {
                    riders
                };
                let end = deps.last().copied().unwrap_or(t0);
                link.idle_until(end + i64::try_from(s.idle_ns).unwrap_or(0));
                est.handle_stream(&StreamResult {
                    fleet: s.fleet,
                    stream: s.stream,
                    sent: s.packets,
                    sender_stamps: deps,
                    arrivals,
                    competing_rider_bytes: competing,
                    rider_bytes: riders,
                    riding_probe_bytes: if riders > 0 {
                        u64::from(s.packets) * u64::from(s.size)
                    } else {
                        0
                    },
                    kernel_stamps: false,
                });
            }
        }
        while let Some(ev) = est.poll_event() {
            on_event(&ev);
        }
    }
}
