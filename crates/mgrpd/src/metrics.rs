//! The Prometheus exporter (`--metrics ADDR`, off by default): the counters the API's
//! `stats` request gives, at `http://ADDR/metrics` in Prometheus' text format. Each
//! counter of the daemon, the planners and reassembly becomes
//! `mgrpd_<part>_<name>_total`; the few that are levels (riders held, riders and
//! bytes pending reassembly) are gauges without `_total`. The API's `traffic` answer
//! becomes `mgrpd_peer_traffic_{packets,bytes}_total`, `mgrpd_peer_traffic_bytes_per_second`
//! and `mgrpd_peer_held_{riders,bytes}`, labelled `peer`. A plain HTTP/1.1 answer per
//! connection: nothing but `GET /metrics` is served, in OpenMetrics when the scraper
//! asks for it (Prometheus does) and in the Prometheus text format otherwise
//! (`mgrp_core::exposition`).

use std::net::SocketAddr;

use mgrp_core::api::{DaemonStats, PeerTraffic};
use mgrp_core::exposition::{self, Format};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tracing::{debug, info, warn};

use crate::counters::Stats;
use crate::lifecycle::Lifecycle;

/// Counters that are levels, not totals.
const GAUGES: [&str; 3] = ["riders_held", "riders_pending", "bytes_pending"];

type PeerLabel = Vec<(&'static str, String)>;

/// The exposition of `stats` and of the traffic to each peer in `format`.
pub(crate) fn render(stats: &DaemonStats, traffic: &[PeerTraffic], format: Format) -> String {
    let mut r = Registry::default();
    let packets = Family::<PeerLabel, Counter<u64>>::default();
    let bytes = Family::<PeerLabel, Counter<u64>>::default();
    let rate = Family::<PeerLabel, Gauge<i64>>::default();
    let held = Family::<PeerLabel, Gauge<i64>>::default();
    let held_bytes = Family::<PeerLabel, Gauge<i64>>::default();
    let level = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    for t in traffic {
        let l = vec![("peer", t.peer.to_string())];
        packets.get_or_create(&l).inc_by(t.packets);
        bytes.get_or_create(&l).inc_by(t.bytes);
        rate.get_or_create(&l).set(level(t.bytes_per_second));
        held.get_or_create(&l).set(level(t.held_riders));
        held_bytes.get_or_create(&l).set(level(t.held_bytes));
    }
    r.register(
        "mgrpd_peer_traffic_packets",
        "Application packets routed into the tunnel for the peer",
        packets,
    );
    r.register(
        "mgrpd_peer_traffic_bytes",
        "IP bytes of application packets routed into the tunnel for the peer",
        bytes,
    );
    r.register(
        "mgrpd_peer_traffic_bytes_per_second",
        "IP bytes per second routed into the tunnel for the peer, over the last 2 s",
        rate,
    );
    r.register(
        "mgrpd_peer_held_riders",
        "Riders held for the peer, waiting for a probe",
        held,
    );
    r.register(
        "mgrpd_peer_held_bytes",
        "Bytes of the riders held for the peer",
        held_bytes,
    );
    let value = serde_json::to_value(stats).unwrap_or_default();
    for part in ["daemon", "planner", "reassembly"] {
        let Some(fields) = value.get(part).and_then(serde_json::Value::as_object) else {
            continue;
        };
        for (name, v) in fields {
            let Some(n) = v.as_u64() else {
                continue;
            };
            let metric = format!("mgrpd_{part}_{name}");
            let help = format!("mgrpd {part} counter {name} (see `mgrpctl stats`)");
            if GAUGES.contains(&name.as_str()) {
                let g = Gauge::<i64>::default();
                g.set(i64::try_from(n).unwrap_or(i64::MAX));
                r.register(metric, help, g);
            } else {
                let c = Counter::<u64>::default();
                c.inc_by(n);
                r.register(metric, help, c);
            }
        }
    }
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = encode(&mut out, &r);
    exposition::render(out, format)
}

/// The value of header `name` in an HTTP request's head.
fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().skip(1).find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// Binds the exporter (an error says the address is taken or not allowed).
pub(crate) async fn bind(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr).await.map_err(|e| {
        anyhow::anyhow!("cannot serve metrics on {addr}: {e}; choose another --metrics address")
    })
}

/// Scrapes answered at once; a connection beyond them is closed unanswered.
const MAX_CONNECTIONS: usize = 16;

/// Longest an answer may take to write, after the 5 s its request may take to read.
const WRITE_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Serves `/metrics` until shutdown.
pub(crate) async fn serve(listener: TcpListener, stats: Stats, life: std::sync::Arc<Lifecycle>) {
    if let Ok(a) = listener.local_addr() {
        info!("metrics at http://{a}/metrics");
        if !a.ip().is_loopback() {
            warn!(
                "metrics on {a} answer every host that reaches it (peers, traffic rates, refusals); listen on 127.0.0.1 unless a Prometheus elsewhere scrapes it, and firewall the port to that Prometheus"
            );
        }
    }
    let open = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    loop {
        let (mut conn, peer) = tokio::select! {
            c = listener.accept() => match c {
                Ok(c) => c,
                Err(e) => {
                    debug!("metrics: accept failed: {e}");
                    continue;
                }
            },
            () = life.stopped() => return,
        };
        let stats = stats.clone();
        if open.fetch_add(1, std::sync::atomic::Ordering::SeqCst) >= MAX_CONNECTIONS {
            open.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
            debug!("metrics: {peer} turned away, {MAX_CONNECTIONS} scrapes in flight");
            continue;
        }
        let open = open.clone();
        tokio::spawn(async move {
            answer(&mut conn, &stats).await;
            open.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
            debug!("metrics: answered {peer}");
        });
    }
}

/// Reads one request from `conn` and answers it.
async fn answer(conn: &mut tokio::net::TcpStream, stats: &Stats) {
    // The request's head may come in pieces: read until its end (or 8 KB, or
    // 5 s, whichever first).
    let mut buf = Vec::with_capacity(512);
    let read = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        let mut chunk = [0u8; 1024];
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 8192 {
            match conn.read(&mut chunk).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        true
    });
    if !matches!(read.await, Ok(true)) {
        return;
    }
    let request = String::from_utf8_lossy(&buf);
    let (status, kind, body) =
        if request.starts_with("GET /metrics ") || request.starts_with("GET /metrics?") {
            let format = exposition::negotiate(header(&request, "accept"));
            (
                "200 OK",
                format.content_type(),
                render(&stats.get(), &stats.traffic(mgrp_rt::mono_now()).1, format),
            )
        } else {
            (
                "404 Not Found",
                "text/plain; charset=utf-8",
                "mgrpd serves only GET /metrics here\n".to_string(),
            )
        };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = tokio::time::timeout(WRITE_LIMIT, async {
        if conn.write_all(head.as_bytes()).await.is_ok() {
            let _ = conn.write_all(body.as_bytes()).await;
        }
        let _ = conn.shutdown().await;
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_totals_and_levels_are_gauges() {
        let mut s = DaemonStats::default();
        s.daemon.tun_packets_in = 7;
        s.planner.riders_held = 3;
        s.reassembly.bytes_pending = 1500;
        let t = PeerTraffic {
            peer: "10.0.0.2".parse().unwrap(),
            packets: 3,
            bytes: 4500,
            bytes_per_second: 2250,
            held_riders: 1,
            held_bytes: 1500,
        };
        let text = render(&s, &[t], Format::OpenMetrics);
        for line in [
            "mgrpd_peer_traffic_packets_total{peer=\"10.0.0.2\"} 3",
            "mgrpd_peer_traffic_bytes_total{peer=\"10.0.0.2\"} 4500",
            "mgrpd_peer_traffic_bytes_per_second{peer=\"10.0.0.2\"} 2250",
            "mgrpd_peer_held_riders{peer=\"10.0.0.2\"} 1",
            "mgrpd_peer_held_bytes{peer=\"10.0.0.2\"} 1500",
        ] {
            assert!(text.contains(line), "{line} not in {text}");
        }
        assert!(
            text.contains("# TYPE mgrpd_daemon_tun_packets_in counter"),
            "{text}"
        );
        assert!(
            text.contains("mgrpd_daemon_tun_packets_in_total 7"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE mgrpd_planner_riders_held gauge"),
            "{text}"
        );
        assert!(text.contains("mgrpd_planner_riders_held 3"), "{text}");
        assert!(
            text.contains("mgrpd_reassembly_bytes_pending 1500"),
            "{text}"
        );
        assert!(text.trim_end().ends_with("# EOF"));
        // The text format names a counter's HELP and TYPE by its sample.
        let plain = render(&s, &[], Format::Text);
        assert!(
            plain.contains("# HELP mgrpd_daemon_tun_packets_in_total ")
                && plain.contains("# TYPE mgrpd_daemon_tun_packets_in_total counter"),
            "{plain}"
        );
        assert!(!plain.contains("# EOF"), "{plain}");
    }

    #[test]
    fn headers_are_found_whatever_their_case() {
        let head = "GET /metrics HTTP/1.1\r\nHost: x\r\naccept: text/plain;q=0.5\r\n\r\n";
        assert_eq!(header(head, "Accept"), Some("text/plain;q=0.5"));
        assert_eq!(header(head, "cookie"), None);
    }
}
