//! The MGRP paper's testbed (its Figure 4) in network namespaces: a measurement
//! source `m3` and sink `m5`, cross-traffic hosts `c1` and `c2`, and two routers `x1`
//! and `x2` joined by the bottleneck link.
//!
//! ```text
//!   m3 ──┐                                  ┌── m5
//!        x1 ══ tbf ══ [delay line, loss] ══ x2
//!   c1 ──┘                                  └── c2
//! ```
//!
//! Traffic from `m3` and `c1` to `m5` and `c2` crosses the bottleneck from `x1` to
//! `x2`: a token bucket (`tbf`) with a drop-tail queue of a given size on `x1`'s end,
//! then a [`DelayLine`] in a namespace of its own (`d`) that delays both directions
//! and may drop forward frames at random (this kernel has no netem). `x2` counts what
//! arrives ([`Testbed::account`]). Every host's default route leads to its router;
//! the routers forward (the forwarding switch is per namespace, so the host's own
//! setting is untouched).
//!
//! Every namespace has a unique name and is deleted when the [`Testbed`] is dropped,
//! a panic included.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use crate::accounting::{Accounting, Classifier};
use crate::delay::{Between, DelayConfig, DelayLine};
use crate::{Netns, veth_pair};

/// The bottleneck's settings.
#[derive(Debug, Clone)]
pub struct Bottleneck {
    /// Rate, in `tc` units, e.g. `10mbit`.
    pub rate: String,
    /// Token bucket size in bytes: at most about two MTUs, so probe streams meet the
    /// rate and not the bucket (see `MACHINE.md`).
    pub burst_bytes: u32,
    /// Drop-tail queue size in bytes.
    pub queue_bytes: u32,
    /// Round-trip delay added by the line (half each way); zero for none.
    pub rtt: Duration,
    /// Probability that a frame is lost after the queue, forward direction only.
    pub loss: f64,
}

impl Default for Bottleneck {
    /// The paper's: 10 Mbit/s, 40 ms round trip, with a queue of about 50 ms at that
    /// rate, no loss.
    fn default() -> Self {
        Self {
            rate: "10mbit".into(),
            burst_bytes: 3000,
            queue_bytes: 62_500,
            rtt: Duration::from_millis(40),
            loss: 0.0,
        }
    }
}

/// The testbed's namespaces, links and addresses.
#[derive(Debug)]
pub struct Testbed {
    /// The measurement source (its tools and mgrpd run here).
    pub m3: Netns,
    /// The measurement sink.
    pub m5: Netns,
    /// Cross-traffic source.
    pub c1: Netns,
    /// Cross-traffic sink.
    pub c2: Netns,
    /// The router before the bottleneck.
    pub x1: Netns,
    /// The router after it.
    pub x2: Netns,
    /// The delay line's namespace, between `x1` and `x2`.
    pub d: Netns,
    /// `x1`'s end of the bottleneck link, where the queue is.
    pub bottleneck_dev: String,
    /// `x2`'s end of the bottleneck link, where what crossed it arrives.
    pub arrival_dev: String,
    /// The bottleneck's settings.
    pub bottleneck: Bottleneck,
    /// The delay line (dropped before the namespaces).
    pub delay: Option<DelayLine>,
}

/// `m3`'s address.
pub const M3: Ipv4Addr = Ipv4Addr::new(10, 78, 1, 2);
/// `c1`'s address.
pub const C1: Ipv4Addr = Ipv4Addr::new(10, 78, 2, 2);
/// `m5`'s address.
pub const M5: Ipv4Addr = Ipv4Addr::new(10, 78, 3, 2);
/// `c2`'s address.
pub const C2: Ipv4Addr = Ipv4Addr::new(10, 78, 4, 2);

/// Joins `a` and `b` with a veth pair: `a_addr/24` on `a`'s end, `b_addr/24` on
/// `b`'s; returns the two device names.
fn link(a: &Netns, a_addr: &str, b: &Netns, b_addr: &str) -> anyhow::Result<(String, String)> {
    let (da, db) = veth_pair(a, b)?;
    for (ns, dev, addr) in [(a, &da, a_addr), (b, &db, b_addr)] {
        ns.ip(&["addr", "add", &format!("{addr}/24"), "dev", dev])?;
        ns.ip(&["link", "set", dev, "up"])?;
    }
    Ok((da, db))
}

impl Testbed {
    /// Builds the topology with `bottleneck` on the link from `x1` to `x2`.
    pub fn new(bottleneck: Bottleneck) -> anyhow::Result<Self> {
        let m3 = Netns::new("mgm3")?;
        let m5 = Netns::new("mgm5")?;
        let c1 = Netns::new("mgc1")?;
        let c2 = Netns::new("mgc2")?;
        let x1 = Netns::new("mgx1")?;
        let x2 = Netns::new("mgx2")?;
        link(&m3, "10.78.1.2", &x1, "10.78.1.1")?;
        link(&c1, "10.78.2.2", &x1, "10.78.2.1")?;
        link(&m5, "10.78.3.2", &x2, "10.78.3.1")?;
        link(&c2, "10.78.4.2", &x2, "10.78.4.1")?;
        // x1 and x2 share one subnet across the delay namespace.
        let Between {
            ns: d,
            line: delay,
            west_dev: bottleneck_dev,
            east_dev: arrival_dev,
        } = DelayLine::between(
            &x1,
            &x2,
            DelayConfig {
                one_way: bottleneck.rtt / 2,
                loss: bottleneck.loss,
                seed: 1,
            },
        )?;
        for (ns, dev, addr) in [
            (&x1, &bottleneck_dev, "10.78.0.1"),
            (&x2, &arrival_dev, "10.78.0.2"),
        ] {
            ns.ip(&["addr", "add", &format!("{addr}/24"), "dev", dev])?;
            ns.ip(&["link", "set", dev, "up"])?;
        }
        for (host, router) in [
            (&m3, "10.78.1.1"),
            (&c1, "10.78.2.1"),
            (&m5, "10.78.3.1"),
            (&c2, "10.78.4.1"),
        ] {
            host.ip(&["route", "add", "default", "via", router])?;
        }
        x1.ip(&["route", "add", "10.78.3.0/24", "via", "10.78.0.2"])?;
        x1.ip(&["route", "add", "10.78.4.0/24", "via", "10.78.0.2"])?;
        x2.ip(&["route", "add", "10.78.1.0/24", "via", "10.78.0.1"])?;
        x2.ip(&["route", "add", "10.78.2.0/24", "via", "10.78.0.1"])?;
        for router in [&x1, &x2] {
            router.exec(&["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"])?;
        }
        let tb = Self {
            m3,
            m5,
            c1,
            c2,
            x1,
            x2,
            d,
            bottleneck_dev,
            arrival_dev,
            bottleneck,
            delay: Some(delay),
        };
        tb.set_bottleneck()?;
        Ok(tb)
    }

    /// Starts counting, second by second, what crosses the bottleneck (at `x2`, after
    /// the queue's and the line's losses): `m3`'s packets are the source's.
    pub fn account(&self) -> anyhow::Result<Accounting> {
        Accounting::start(
            &self.x2,
            &self.arrival_dev,
            Classifier {
                source: vec![IpAddr::V4(M3)],
                mgrp_protocol: 253,
            },
        )
    }

    fn set_bottleneck(&self) -> anyhow::Result<()> {
        let b = &self.bottleneck;
        let (burst, limit) = (b.burst_bytes.to_string(), b.queue_bytes.to_string());
        self.x1.exec(&[
            "tc",
            "qdisc",
            "replace",
            "dev",
            &self.bottleneck_dev,
            "root",
            "tbf",
            "rate",
            &b.rate,
            "burst",
            &burst,
            "limit",
            &limit,
        ])?;
        Ok(())
    }

    /// Bytes and packets the bottleneck sent on, and packets it dropped, so far (its
    /// qdisc's counters: what crossed the link after its losses).
    pub fn bottleneck_counters(&self) -> anyhow::Result<LinkCounters> {
        let out = self
            .x1
            .exec(&["tc", "-s", "qdisc", "show", "dev", &self.bottleneck_dev])?;
        parse_tc_stats(&out)
            .ok_or_else(|| anyhow::anyhow!("no counters in `tc -s qdisc` output: {out}"))
    }
}

/// What a queueing discipline passed on and dropped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkCounters {
    /// Bytes sent on (IP packets plus their link header).
    pub bytes: u64,
    /// Packets sent on.
    pub packets: u64,
    /// Packets dropped.
    pub dropped: u64,
}

/// Reads ` Sent B bytes P pkt (dropped D, ...` from `tc -s qdisc show`.
fn parse_tc_stats(out: &str) -> Option<LinkCounters> {
    let line = out.lines().find(|l| l.trim_start().starts_with("Sent "))?;
    let words: Vec<&str> = line.split_whitespace().collect();
    let bytes = words.get(1)?.parse().ok()?;
    let packets = words.get(3)?.parse().ok()?;
    let dropped = words
        .iter()
        .position(|w| *w == "(dropped")
        .and_then(|i| words.get(i + 1))
        .and_then(|w| w.trim_end_matches(',').parse().ok())?;
    Some(LinkCounters {
        bytes,
        packets,
        dropped,
    })
}

impl Drop for Testbed {
    fn drop(&mut self) {
        // The line's thread holds sockets in `d`: stop it before the namespaces go.
        if let Some(line) = self.delay.take() {
            let _ = line.stop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tc_counters_are_read() {
        let out = "qdisc tbf 8001: root refcnt 2 rate 10Mbit burst 3000b lat 50ms \n Sent 123456 bytes 789 pkt (dropped 12, overlimits 34 requeues 0) \n backlog 0b 0p requeues 0\n";
        assert_eq!(
            parse_tc_stats(out),
            Some(LinkCounters {
                bytes: 123_456,
                packets: 789,
                dropped: 12
            })
        );
        assert_eq!(parse_tc_stats("nothing here"), None);
    }
}
