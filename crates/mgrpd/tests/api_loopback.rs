//! The probe API against the real server, planners and pacer over an in-process
//! (loopback) data path: no root, no namespaces. Round trips through mgrp-client, and
//! what a daemon must survive from clients: malformed and oversized frames, a wrong
//! version, a client that stalls mid-frame, a flood of requests, a client that leaves
//! mid-train.

use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, Ipv4Addr};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

use mgrp_client::{Client, Error, Probe, Train};
use mgrpd::LoopbackDaemon;
use mgrpd::config::Config;

const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

fn socket_path(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("mgrp-loop-{tag}-{}.sock", std::process::id()))
}

async fn daemon(tag: &str, extra: &str) -> LoopbackDaemon {
    let path = socket_path(tag);
    let toml = format!("socket = \"{}\"\nrealtime = false\n{extra}", path.display());
    LoopbackDaemon::start(Config::from_toml(&toml).unwrap())
        .await
        .unwrap()
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// An IPv4 packet of `len` bytes to 127.0.0.1, its payload numbered by `n`.
fn rider(n: u8, len: usize) -> Vec<u8> {
    let mut p = vec![n; len];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
    p[9] = 17;
    p[12..16].copy_from_slice(&[127, 0, 0, 1]);
    p[16..20].copy_from_slice(&[127, 0, 0, 1]);
    p
}

#[test]
fn train_round_trip_with_stamps() {
    rt().block_on(async {
        let d = daemon("rt", "").await;
        let client = Client::connect(socket_path("rt")).await.unwrap();
        assert_eq!(client.last_report().await.unwrap(), None);
        let mut probes = client.listen(9000).await.unwrap();
        // Each probe with its own header: no two fold into one.
        let train = Train::new(LOCAL)
            .ports(8999, 9000)
            .probes((0..10u32).map(|i| {
                Probe::new(300)
                    .gap(Duration::from_micros(if i == 0 { 0 } else { 200 }))
                    .header(i.to_be_bytes())
            }));
        let report = client.send_train(train).await.unwrap();
        assert_eq!((report.probes_requested, report.probes_sent), (10, 10));
        assert_eq!(report.departures.len(), 10);
        assert!(
            report
                .departures
                .iter()
                .all(|d| d.departed.is_some() && d.stamp.as_nanos() > 0)
        );
        for seq in 0..10u16 {
            let p = probes
                .next_probe_timeout(Duration::from_secs(5))
                .await
                .unwrap()
                .unwrap();
            assert_eq!(p.seq, seq);
            assert_eq!(p.train_len, 10);
            assert_eq!(p.size, 300);
            assert_eq!(p.header, u32::from(seq).to_be_bytes());
            assert_eq!(p.transaction, report.transaction);
            assert!(p.sender_time.as_nanos() > 0 && p.receive_time >= p.sender_time);
            assert_eq!(p.sender_time, report.departures[usize::from(seq)].stamp);
        }
        assert_eq!(client.last_report().await.unwrap().unwrap(), report);
        d.stop().await;
        assert!(!socket_path("rt").exists());
    });
}

#[test]
fn riders_ride_and_are_delivered() {
    rt().block_on(async {
        // The paper's mode: riders wait for a train that has not come yet.
        let d = daemon("riders", "hold = \"500ms\"\nhold-mode = \"always\"").await;
        let client = Client::connect(socket_path("riders")).await.unwrap();
        let mut probes = client.listen(9001).await.unwrap();
        for i in 0..40 {
            d.daemon
                .handle_tun_packet(&rider(i, 100 + usize::from(i) * 20));
        }
        let mut claimed = 0;
        for _ in 0..4 {
            let train = Train::uniform(LOCAL, 20, 1000, Duration::from_micros(100)).ports(1, 9001);
            claimed += client.send_train(train).await.unwrap().rider_bytes;
        }
        let mut extracted = 0;
        for _ in 0..80 {
            let p = probes
                .next_probe_timeout(Duration::from_secs(5))
                .await
                .unwrap()
                .unwrap();
            extracted += u64::from(p.rider_bytes);
        }
        assert!(claimed > 0);
        assert_eq!(extracted, claimed);
        let s = client.stats().await.unwrap();
        assert_eq!(s.planner.riders_in, 40);
        assert_eq!(s.planner.riders_piggybacked, 40, "{s:#?}");
        assert_eq!(s.daemon.riders_delivered, 40);
        assert!(s.conserved());
        assert!(s.receive_conserved(), "{s:#?}");
        d.stop().await;
    });
}

#[test]
fn refused_trains_say_why() {
    rt().block_on(async {
        let d = daemon(
            "refuse",
            "[limits]\nmax-probes-per-train = 50\nmin-gap = \"10us\"",
        )
        .await;
        let client = Client::connect(socket_path("refuse")).await.unwrap();
        // Under the 36 bytes of an IPv4 header and a version-2 probe header.
        let small = Train::new(LOCAL).probe(Probe::new(30));
        match client.send_train(small).await {
            Err(Error::InvalidTrain(m)) => assert!(m.contains("needs at least"), "{m}"),
            r => panic!("{r:?}"),
        }
        let long = Train::uniform(LOCAL, 51, 100, Duration::from_micros(20));
        match client.send_train(long).await {
            Err(Error::InvalidTrain(m)) => assert!(m.contains("max-probes-per-train"), "{m}"),
            r => panic!("{r:?}"),
        }
        let tight = Train::uniform(LOCAL, 5, 100, Duration::from_micros(1));
        match client.send_train(tight).await {
            Err(Error::InvalidTrain(m)) => assert!(m.contains("min-gap"), "{m}"),
            r => panic!("{r:?}"),
        }
        let slow = Train::uniform(LOCAL, 2, 100, Duration::from_secs(2));
        match client.send_train(slow).await {
            Err(Error::InvalidTrain(m)) => assert!(m.contains("max-gap"), "{m}"),
            r => panic!("{r:?}"),
        }
        let empty = Train::new(LOCAL);
        assert!(matches!(
            client.send_train(empty).await,
            Err(Error::InvalidTrain(_))
        ));
        // The connection is still good.
        let ok = Train::uniform(LOCAL, 3, 100, Duration::from_micros(20));
        assert_eq!(client.send_train(ok).await.unwrap().probes_sent, 3);
        let _l = client.listen(9002).await.unwrap();
        let other = Client::connect(socket_path("refuse")).await.unwrap();
        assert!(matches!(other.listen(9002).await, Err(Error::PortInUse(_))));
        d.stop().await;
    });
}

#[test]
fn a_call_given_up_on_harms_no_other() {
    rt().block_on(async {
        let d = daemon("abandon", "").await;
        let c = Client::connect(socket_path("abandon")).await.unwrap();
        let long = Train::uniform(LOCAL, 200, 100, Duration::from_millis(1));
        let cut = tokio::time::timeout(Duration::from_millis(20), c.send_train(long)).await;
        assert!(cut.is_err(), "the call should have timed out");
        // The same client goes on; the given-up train's report is dropped when it comes.
        assert!(c.stats().await.is_ok());
        let r = c
            .send_train(Train::uniform(LOCAL, 3, 100, Duration::from_micros(100)))
            .await
            .unwrap();
        assert_eq!(r.probes_sent, 3);
        d.stop().await;
    });
}

#[test]
fn several_trains_in_flight_on_one_connection() {
    rt().block_on(async {
        let d = daemon("several", "").await;
        let c = Client::connect(socket_path("several")).await.unwrap();
        let train = |n| Train::uniform(LOCAL, n, 200, Duration::from_micros(300)).ports(1, 2);
        // Submitted together, answered each to its own call, whatever the order.
        let (a, b, s, l) = tokio::join!(
            c.send_train(train(30)),
            c.send_train(train(5)),
            c.stats(),
            c.last_report()
        );
        let (a, b) = (a.unwrap(), b.unwrap());
        assert_eq!((a.probes_requested, b.probes_requested), (30, 5));
        assert_eq!((a.probes_sent, b.probes_sent), (30, 5));
        assert_ne!(a.transaction, b.transaction);
        assert!(s.is_ok() && l.is_ok());
        d.stop().await;
    });
}

#[test]
fn long_uniform_trains_fit_a_short_request_and_long_varied_ones_are_refused() {
    rt().block_on(async {
        let d = daemon("runs", "[limits]\nmin-gap = \"1us\"").await;
        let c = Client::connect(socket_path("runs")).await.unwrap();
        assert_eq!(c.protocol_version(), mgrp_core::api::PROTOCOL_VERSION);
        // Version 4 answers what traffic goes to each peer (none here yet).
        let (window, peers) = c.traffic().await.unwrap();
        assert_eq!((window, peers.len()), (Duration::from_secs(2), 0));
        let limits = c.limits().unwrap();
        assert_eq!(limits.max_request_bytes, 65_536);
        // 10,000 equal probes travel as two runs.
        let long = Train::uniform(LOCAL, 10_000, 100, Duration::from_micros(1)).ports(1, 2);
        let r = c.send_train(long).await.unwrap();
        assert_eq!((r.probes_requested, r.probes_sent), (10_000, 10_000));
        // 2,000 probes with a header each do not fit 64 KiB: the client says so
        // before sending, and the connection stays usable.
        let varied = Train::new(LOCAL).ports(1, 2).probes((0..2000u32).map(|i| {
            Probe::new(100)
                .gap(Duration::from_micros(5))
                .header(i.to_be_bytes().repeat(4))
        }));
        let err = c.send_train(varied).await.unwrap_err();
        assert!(
            matches!(err, Error::RequestTooLarge { limit: 65_536, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("max-request-bytes"), "{err}");
        assert!(c.stats().await.is_ok());
        d.stop().await;
    });
    // Counts are checked before they are unfolded.
    let rt = rt();
    let d = rt.block_on(daemon("counts", ""));
    let (mut w, mut r) = raw(&socket_path("counts"));
    for (count, what) in [(4_000_000_000u64, "exceeds the limit"), (0, "count 0")] {
        let req = format!(
            "{{\"op\":\"submit_train\",\"destination\":\"127.0.0.1\",\"src_port\":1,\"dst_port\":2,\"probes\":[{{\"size\":200,\"gap_ns\":0}},{{\"size\":200,\"gap_ns\":1000000,\"count\":{count}}}]}}\n"
        );
        w.write_all(req.as_bytes()).unwrap();
        let answer = line(&mut r);
        assert!(
            answer.contains("invalid_train") && answer.contains(what),
            "{answer}"
        );
    }
    rt.block_on(d.stop());
}

#[test]
fn a_stopping_daemon_answers_what_is_in_flight_and_takes_nothing_new() {
    rt().block_on(async {
        let d = daemon("stopping", "").await;
        let c = Client::connect(socket_path("stopping")).await.unwrap();
        // Two seconds of probes: the shutdown comes in the middle.
        let long = Train::uniform(LOCAL, 200, 200, Duration::from_millis(10)).ports(1, 2);
        let train = tokio::spawn(async move {
            let r = c.send_train(long).await;
            (r, c)
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        let started = std::time::Instant::now();
        d.stop().await;
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "stopping took {:?}",
            started.elapsed()
        );
        let (r, c) = tokio::time::timeout(Duration::from_secs(1), train)
            .await
            .expect("the train's call was answered")
            .unwrap();
        match r {
            Ok(report) => {
                assert_eq!(report.outcome, mgrp_client::Outcome::Cancelled);
                assert!(report.probes_sent > 0 && report.probes_sent < 200);
            }
            Err(e) => assert!(matches!(e, Error::ShuttingDown(_)), "{e}"),
        }
        // The connection was closed: nothing more is taken.
        assert!(c.stats().await.is_err());
        assert!(Client::connect(socket_path("stopping")).await.is_err());
    });
}

#[test]
fn missing_daemon_is_explained() {
    rt().block_on(async {
        let err = Client::connect("/nonexistent/mgrpd.sock")
            .await
            .unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, Error::DaemonNotRunning { .. }));
        assert!(
            msg.contains("/nonexistent/mgrpd.sock") && msg.contains("mgrpd --socket"),
            "{msg}"
        );
    });
}

fn raw(path: &PathBuf) -> (UnixStream, BufReader<UnixStream>) {
    let s = UnixStream::connect(path).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let r = BufReader::new(s.try_clone().unwrap());
    (s, r)
}

fn line(r: &mut BufReader<UnixStream>) -> String {
    let mut l = String::new();
    r.read_line(&mut l).unwrap();
    l
}

#[test]
fn bad_frames_get_errors_and_never_disturb_others() {
    let rt = rt();
    let d = rt.block_on(daemon("frames", ""));
    let path = socket_path("frames");
    let (mut w, mut r) = raw(&path);
    w.write_all(b"{\"op\":\"hello\",\"version\":99}\n").unwrap();
    let l = line(&mut r);
    assert!(
        l.contains("\"kind\":\"version\"") && l.contains("99"),
        "{l}"
    );
    w.write_all(b"this is not json\n").unwrap();
    assert!(line(&mut r).contains("bad_request"));
    w.write_all(b"{\"op\":\"launch_missiles\"}\n").unwrap();
    assert!(line(&mut r).contains("bad_request"));
    w.write_all(b"{\"op\":\"stats\"}\n").unwrap();
    assert!(
        line(&mut r).contains("\"type\":\"stats\""),
        "connection survives bad requests"
    );

    // Half a frame, then silence: the daemon keeps serving everyone else.
    let (mut stalled, _sr) = raw(&path);
    stalled
        .write_all(b"{\"op\":\"submit_train\",\"destination\":\"127.0.")
        .unwrap();
    // A flood of pipelined requests on another connection, all answered in order.
    let (mut f, mut fr) = raw(&path);
    let flood = "{\"op\":\"stats\"}\n".repeat(5000);
    let writer = std::thread::spawn(move || f.write_all(flood.as_bytes()).map(|()| f));
    for _ in 0..5000 {
        assert!(line(&mut fr).contains("\"type\":\"stats\""));
    }
    let _f = writer.join().unwrap().unwrap();
    rt.block_on(async {
        let c = Client::connect(&path).await.unwrap();
        let t = Train::uniform(LOCAL, 5, 200, Duration::from_micros(50));
        assert_eq!(c.send_train(t).await.unwrap().probes_sent, 5);
    });

    // An oversized frame is refused and its connection closed.
    let (mut big, mut br) = raw(&path);
    let huge = vec![b' '; mgrp_core::api::DEFAULT_MAX_REQUEST + 10];
    let _ = big.write_all(&huge);
    assert!(line(&mut br).contains("longer than"));
    assert_eq!(line(&mut br), "", "connection should be closed");
    drop(stalled);
    rt.block_on(d.stop());
}

#[test]
fn client_leaving_mid_train_leaves_the_daemon_consistent() {
    rt().block_on(async {
        let d = daemon("leave", "").await;
        let path = socket_path("leave");
        {
            let (mut w, _r) = raw(&path);
            let probes: Vec<String> = (0..300)
                .map(|_| "{\"size\":200,\"gap_ns\":1000000}".to_string())
                .collect();
            let req = format!(
                "{{\"op\":\"submit_train\",\"destination\":\"127.0.0.1\",\"src_port\":1,\"dst_port\":2,\"probes\":[{}]}}\n",
                probes.join(",")
            );
            w.write_all(req.as_bytes()).unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // The train of the client that left is cancelled; the next client's train runs.
        let c = Client::connect(&path).await.unwrap();
        let r = c.send_train(Train::uniform(LOCAL, 4, 200, Duration::from_micros(50))).await;
        assert_eq!(r.unwrap().probes_sent, 4);
        let s = c.stats().await.unwrap();
        assert_eq!(s.planner.transactions_completed, 1, "{s:#?}");
        assert_eq!(s.planner.transactions_cancelled, 1, "{s:#?}");
        assert!(s.daemon.probes_sent > 4 && s.daemon.probes_sent < 304, "{s:#?}");
        assert!(s.conserved());
        d.stop().await;
    });
}

#[test]
fn mgrpctl_prints_counters() {
    let rt = rt();
    let d = rt.block_on(daemon("ctl", ""));
    rt.block_on(async {
        let c = Client::connect(socket_path("ctl")).await.unwrap();
        c.send_train(Train::uniform(LOCAL, 3, 100, Duration::from_micros(10)))
            .await
            .unwrap();
    });
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mgrpctl"))
        .arg("--socket")
        .arg(socket_path("ctl"))
        .arg("stats")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("daemon.probes_sent 3"), "{text}");
    assert!(text.contains("riders_balance ok"), "{text}");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mgrpctl"))
        .args(["--socket", "/nonexistent/x.sock", "stats"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("mgrpd is not running"));
    rt.block_on(d.stop());
}

/// A user's trains beyond its rate budget are refused as busy, with what to do, and
/// counted; the budget's burst is two of the largest trains.
#[test]
fn trains_over_the_users_rate_are_refused() {
    rt().block_on(async {
        let d = daemon(
            "rate",
            "[limits]\nmax-probes-per-train = 10\nprobes-per-second-per-user = 1.0\n",
        )
        .await;
        let client = Client::connect(socket_path("rate")).await.unwrap();
        let train = || Train::uniform(LOCAL, 10, 300, Duration::from_micros(100)).ports(1, 2);
        client.send_train(train()).await.unwrap();
        client.send_train(train()).await.unwrap();
        let e = client.send_train(train()).await.unwrap_err();
        assert!(matches!(e, Error::Busy(_)), "{e}");
        let text = e.to_string();
        assert!(text.contains("limits.probes-per-second-per-user"), "{text}");
        assert!(text.contains("retry in"), "{text}");
        let s = client.stats().await.unwrap();
        assert_eq!(s.daemon.trains_refused_rate_limit, 1);
        assert_eq!(s.daemon.trains_accepted, 2);
        drop(d);
    });
}

#[test]
fn a_train_that_spins_too_long_is_paced_by_the_timer_for_the_rest() {
    rt().block_on(async {
        let d = daemon(
            "spin",
            "busy-poll-margin = \"1ms\"\n[limits]\nmax-train-spin = \"2ms\"\n",
        )
        .await;
        let client = Client::connect(socket_path("spin")).await.unwrap();
        // Each probe spins through the last busy-poll margin (1 ms) before it, less
        // whatever the timer's wake-up was late: the cap comes within a few probes.
        let train = Train::uniform(LOCAL, 40, 300, Duration::from_millis(2)).ports(1, 2);
        let report = client.send_train(train).await.unwrap();
        assert_eq!(report.probes_sent, 40, "every probe still leaves");
        let s = client.stats().await.unwrap();
        assert_eq!(s.daemon.trains_spin_capped, 1, "{:#?}", s.daemon);
        // A train of one probe, due at once, does not spin at all.
        let train = Train::uniform(LOCAL, 1, 300, Duration::ZERO).ports(1, 2);
        client.send_train(train).await.unwrap();
        assert_eq!(client.stats().await.unwrap().daemon.trains_spin_capped, 1);
        drop(d);
    });
}

#[test]
fn clients_learn_the_train_limits_and_back_to_back_trains_fit_them() {
    rt().block_on(async {
        let d = daemon("limits", "[limits]\nmax-probes-per-train = 30\n").await;
        let client = Client::connect(socket_path("limits")).await.unwrap();
        let limits = client.limits().expect("this daemon tells its limits");
        assert_eq!(limits.max_probes, 30);
        assert_eq!(limits.min_gap(), mgrpd::config::DEFAULT_MIN_GAP);
        assert!(limits.min_gap() > Duration::ZERO);
        // Probes asked for with no gap at all are refused; at the smallest gap they go.
        let e = client
            .send_train(Train::uniform(LOCAL, 10, 300, Duration::ZERO))
            .await
            .unwrap_err();
        assert!(e.to_string().contains("min-gap"), "{e}");
        let r = client
            .send_train(Train::uniform(LOCAL, 10, 300, limits.min_gap()))
            .await
            .unwrap();
        assert_eq!(r.probes_sent, 10);
        drop(d);
    });
}

/// An IPv4 packet of `len` bytes from 127.0.0.1 to `dst`.
fn packet_to(dst: [u8; 4], len: usize) -> Vec<u8> {
    let mut p = rider(0, len);
    p[16..20].copy_from_slice(&dst);
    p
}

#[test]
fn held_riders_are_bounded_in_destinations_and_in_bytes() {
    rt().block_on(async {
        let d = daemon(
            "held",
            "hold-mode = \"always\"\nhold = \"300ms\"\n[piggyback]\nmax-held-bytes = 3000\n[limits]\nmax-destinations = 2\n",
        )
        .await;
        // Held for 300 ms (no train runs), long enough that none leaves before the last
        // is taken in: three fit in the total, the fourth does not, nor does the one to
        // the second destination.
        for _ in 0..4 {
            d.daemon.handle_tun_packet(&packet_to([127, 0, 0, 1], 1000));
        }
        d.daemon.handle_tun_packet(&packet_to([127, 0, 0, 2], 100));
        // A third destination would need a third planner: sent unchanged.
        d.daemon.handle_tun_packet(&packet_to([127, 0, 0, 3], 100));
        // Then the hold runs out and the three leave (waited for, not timed).
        let mut s = d.daemon.stats().get();
        for _ in 0..100 {
            if s.planner.riders_in == 5 && s.planner.riders_held == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            s = d.daemon.stats().get();
        }
        assert_eq!(s.daemon.riders_bypassed_too_many_destinations, 1, "{s:#?}");
        assert_eq!(s.planner.riders_dropped_queue_full, 2, "{s:#?}");
        assert_eq!(s.planner.riders_sent_unchanged, 3, "{s:#?}");
        assert_eq!(s.planner.riders_held, 0, "{s:#?}");
        assert!(s.conserved(), "{s:#?}");
        drop(d);
    });
}

#[test]
fn listeners_past_the_limit_are_refused() {
    rt().block_on(async {
        let d = daemon("listeners", "[limits]\nmax-listeners = 2\n").await;
        let client = Client::connect(socket_path("listeners")).await.unwrap();
        let first = client.listen(9101).await.unwrap();
        let _second = client.listen(9102).await.unwrap();
        let e = client.listen(9103).await.unwrap_err();
        assert!(matches!(e, Error::Busy(_)), "{e}");
        assert!(e.to_string().contains("limits.max-listeners"), "{e}");
        // Room again once one is closed.
        drop(first);
        tokio::time::sleep(Duration::from_millis(100)).await;
        client.listen(9103).await.unwrap();
        drop(d);
    });
}
