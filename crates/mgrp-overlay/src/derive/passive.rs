//! Estimates from the applications' own traffic, when it flows (after Wren): what
//! the neighbour's kernel says of the TCP flows it sends to this node. A flow whose
//! sending was limited by the network — not by the application, the receiver's
//! window or the send buffer — is taking what the path leaves it: its rate is the
//! available bandwidth as that application sees it. A flow limited by its ends says
//! how fast the ends are, and is counted as such, never turned into an estimate.
//!
//! No I/O here: the node hands in two consecutive answers of the neighbour.

use mgrp_tool::control::TcpFlow;
pub use mgrp_views::passive::PassiveTcp;

/// The name of the source in estimates (`method`) and the API.
pub const PASSIVE_TCP: &str = "passive-tcp";

/// The flow's identity across answers.
fn same(a: &TcpFlow, b: &TcpFlow) -> bool {
    a.local == b.local && a.remote == b.remote
}

/// IP bytes per payload byte of a flow's full segments: the kernel counts payload,
/// the overlay's other estimates IP bytes (headers: IPv4 or IPv6, TCP with the
/// timestamp option).
fn ip_per_payload(f: &TcpFlow) -> f64 {
    let mss = f64::from(f.sample.snd_mss);
    let headers = if f.local.is_ipv6() { 72.0 } else { 52.0 };
    if mss > 0.0 {
        (mss + headers) / mss
    } else {
        1.0
    }
}

/// What the neighbour's answer `flows` at `at` says, given its previous answer
/// `prev` at `prev_at` (for rates over the time between them).
pub fn estimate(prev: Option<(&[TcpFlow], f64)>, flows: &[TcpFlow], at: f64) -> PassiveTcp {
    let mut p = PassiveTcp {
        at,
        bps: None,
        flows: flows.len(),
        network_limited: 0,
        app_limited: 0,
        end_limited: 0,
        from_bytes: 0,
        note: None,
    };
    let mut sum = 0.0;
    for f in flows {
        let s = &f.sample;
        if s.app_limited {
            p.app_limited += 1;
            continue;
        }
        if !s.network_limited() {
            p.end_limited += 1;
            continue;
        }
        // Bytes acknowledged since the last answer, when the flow was in it; else
        // the kernel's own latest sample.
        let over = prev.and_then(|(before, t0)| {
            let b = before.iter().find(|b| same(b, f))?;
            let (now, then) = (s.bytes_acked?, b.sample.bytes_acked?);
            let dt = at - t0;
            (dt > 0.2 && now >= then).then(|| (now - then) as f64 * 8.0 / dt)
        });
        let rate = match over {
            Some(r) => {
                p.from_bytes += 1;
                r
            }
            None => s.delivery_bps.unwrap_or(0.0),
        };
        if rate > 0.0 {
            p.network_limited += 1;
            sum += rate * ip_per_payload(f);
        }
    }
    if p.network_limited > 0 {
        p.bps = Some(sum);
    } else {
        p.note = Some(if flows.is_empty() {
            "no TCP flow from the neighbour to this node".to_string()
        } else {
            format!(
                "{} TCP flow(s), none network-limited: {} limited by the application, {} by the receiver's window or the send buffer; they say how fast the ends are, not the path",
                p.flows, p.app_limited, p.end_limited
            )
        });
    }
    p
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use mgrp_tool::tcpinfo::TcpSample;

    /// A flow to port `port` of 10.0.0.2 whose latest sample says `bps`, with
    /// `acked` bytes acknowledged and `rwnd_s` of its 10 busy seconds limited by the
    /// receiver's window.
    pub(crate) fn flow(port: u16, bps: f64, acked: u64, app_limited: bool, rwnd_s: f64) -> TcpFlow {
        TcpFlow {
            local: "10.0.0.1:5001".parse().unwrap(),
            remote: format!("10.0.0.2:{port}").parse().unwrap(),
            congestion: Some("cubic".into()),
            bbr: None,
            sample: TcpSample {
                delivery_bps: Some(bps),
                app_limited,
                rtt_s: 0.05,
                min_rtt_s: Some(0.04),
                total_retrans: 0,
                snd_mss: 1448,
                cwnd: 10,
                bytes_acked: Some(acked),
                busy_s: Some(10.0),
                rwnd_limited_s: Some(rwnd_s),
                sndbuf_limited_s: Some(0.0),
            },
        }
    }

    #[test]
    fn network_limited_flows_give_the_estimate_and_the_others_say_why_not() {
        // Nothing, then an application-limited and a receiver-limited flow.
        let p = estimate(None, &[], 10.0);
        assert_eq!(p.bps, None);
        assert!(p.note.unwrap().contains("no TCP flow"));
        let ends = [flow(1, 2e6, 0, true, 0.0), flow(2, 3e6, 0, false, 9.0)];
        let p = estimate(None, &ends, 10.0);
        assert_eq!((p.bps, p.app_limited, p.end_limited), (None, 1, 1));
        assert!(p.note.unwrap().contains("1 limited by the application"));
        // Two network-limited flows: first from the kernel's samples, then from the
        // bytes acknowledged between two answers.
        let a = [
            flow(1, 4e6, 1_000_000, false, 0.0),
            flow(2, 5e6, 0, false, 0.0),
        ];
        // The kernel counts payload; estimates are IP rates (1500 bytes a segment).
        let ip = |payload: f64| payload * 1500.0 / 1448.0;
        let near = |p: &PassiveTcp, payload: f64| (p.bps.unwrap() - ip(payload)).abs() < 1e-3;
        let p = estimate(None, &a, 10.0);
        assert!(near(&p, 9e6), "{p:?}");
        assert_eq!((p.network_limited, p.from_bytes), (2, 0));
        let b = [
            flow(1, 4e6, 2_000_000, false, 0.0),
            flow(3, 1e6, 0, false, 0.0),
        ];
        let p = estimate(Some((&a, 10.0)), &b, 12.0);
        // Flow 1: 1 MB in 2 s = 4 Mbit/s from bytes; flow 3 is new: its sample.
        assert!(near(&p, 5e6), "{p:?}");
        assert_eq!((p.network_limited, p.from_bytes), (2, 1));
        assert_eq!(p.note, None);
    }
}
