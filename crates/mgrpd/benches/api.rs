//! Bench of the probe API over the loopback data path (the real server, planner and
//! pacer; MGRP packets looped back in-process), so it needs no root:
//!
//! - how many probes per second one client receives through the API;
//! - the time from a client submitting a train to the train's first departure.
//!
//! Run with `cargo bench -p mgrpd --bench api`.

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use mgrp_client::{Client, Train};
use mgrp_core::schedule::percentile;
use mgrpd::LoopbackDaemon;
use mgrpd::config::Config;

const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

fn wall_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let path = std::env::temp_dir().join(format!("mgrp-bench-api-{}.sock", std::process::id()));
        let toml = format!("socket = \"{}\"\n[limits]\nmax-probes-per-train = 65535\nprobes-per-second-per-user = 1e9\nprobes-per-second = 1e9\nprobe-bytes-per-second-per-user = 1e12\nprobe-bytes-per-second = 1e12", path.display());
        let d = LoopbackDaemon::start(Config::from_toml(&toml).unwrap()).await.unwrap();
        let client = Client::connect(&path).await.unwrap();
        println!("load before: {}", mgrp_testbed::host::load());

        // Receive rate: trains of 20,000 probes 4 µs and 2 µs apart (250,000 and
        // 500,000 probes/s offered); the first run warms up.
        let mut stream = client.listen(9100).await.unwrap();
        let mut dropped_before = 0;
        for gap_us in [4, 4, 4, 2, 2] {
            let train =
                Train::uniform(LOCAL, 20_000, 100, Duration::from_micros(gap_us)).ports(1, 9100);
            let send = tokio::spawn(async move { (sender_send(train).await, ()) });
            let mut n = 0u64;
            let mut first = None;
            let mut last = Instant::now();
            while let Some(_p) = stream.next_probe_timeout(Duration::from_millis(300)).await.unwrap() {
                first.get_or_insert_with(Instant::now);
                last = Instant::now();
                n += 1;
            }
            let _ = send.await;
            let secs = first.map_or(1.0, |f| last.duration_since(f).as_secs_f64());
            let dropped = client.stats().await.unwrap().daemon.probes_dropped_slow_listener;
            println!(
                "receive, {} probes/s offered: {n} probes in {secs:.3} s = {:.0} probes/s, {} dropped for a slow listener",
                1_000_000 / gap_us,
                n as f64 / secs,
                dropped - dropped_before
            );
            dropped_before = dropped;
        }

        // Submission to first departure, single-probe trains.
        let mut lat = Vec::new();
        for _ in 0..2000 {
            let t0 = wall_ns();
            let r = client.send_train(Train::uniform(LOCAL, 1, 100, Duration::ZERO)).await.unwrap();
            lat.push((r.departures[0].stamp.as_nanos() as i64 - t0) as f64 / 1e3);
        }
        lat.sort_by(f64::total_cmp);
        println!(
            "submit to first departure: median {:.1} µs, p99 {:.1} µs, max {:.0} µs ({} trains)",
            percentile(&lat, 50.0).unwrap(),
            percentile(&lat, 99.0).unwrap(),
            lat.last().unwrap(),
            lat.len()
        );
        println!("load after: {}", mgrp_testbed::host::load());
        d.stop().await;
    });
}

async fn sender_send(train: Train) {
    let path = std::env::temp_dir().join(format!("mgrp-bench-api-{}.sock", std::process::id()));
    let c = Client::connect(&path).await.unwrap();
    c.send_train(train).await.unwrap();
}
