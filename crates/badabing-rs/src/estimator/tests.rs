use super::*;

/// A path with loss episodes: inside one, each packet is lost with probability 1/2
/// and the survivors wait behind a full queue (20 ms); outside, 1 ms of delay and a
/// little jitter. Windows follow each other with 40 ms between them. Returns the
/// truth: the share of the windows' slots that overlap an episode, and the episodes'
/// mean length in slots.
fn run(est: &mut Estimator, episodes: &[(i64, i64)], windows: usize) -> (f64, f64) {
    let c = *est.config();
    let slot = c.slot_ns as i64;
    let mut rng = 7u64;
    let mut coin = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % 1000
    };
    let inside = |t: i64| episodes.iter().any(|&(a, b)| t >= a && t < b);
    let overlaps = |t: i64| episodes.iter().any(|&(a, b)| t < b && t + slot > a);
    let (mut t0, mut busy, mut all) = (0i64, 0u64, 0u64);
    for _ in 0..windows {
        let w = est.next_window();
        let mut r = WindowResult {
            id: w.id,
            ..WindowResult::default()
        };
        let mut seq = 0u32;
        for &s in &w.slots {
            let ts = t0 + i64::from(s) * slot;
            for j in 0..w.packets {
                let sent = ts + i64::from(j) * 10_000;
                r.sender_stamps.push(Some(sent));
                let (lost, delay) = if inside(sent) {
                    (coin() < 500, 20_000_000)
                } else {
                    (false, 1_000_000 + (coin() as i64) * 100)
                };
                if !lost {
                    r.arrivals.push(Arrival {
                        seq,
                        sent_ns: sent,
                        received_ns: sent + delay + 3_000_000_000,
                    });
                }
                seq += 1;
            }
        }
        for s in 0..c.window_slots {
            all += 1;
            busy += u64::from(overlaps(t0 + i64::from(s) * slot));
        }
        assert!(est.handle(&r));
        t0 += i64::from(c.window_slots) * slot + 40_000_000;
    }
    let mean_len = episodes
        .iter()
        .map(|&(a, b)| (b - a) as f64 / slot as f64)
        .sum::<f64>()
        / episodes.len().max(1) as f64;
    (busy as f64 / all as f64, mean_len)
}

/// Episodes of `len_ns` starting every `every_ns` (plus a little drift) over `until`.
fn episodes(len_ns: i64, every_ns: i64, until: i64) -> Vec<(i64, i64)> {
    let mut v = Vec::new();
    let mut t = every_ns / 3;
    let mut k = 0;
    while t < until {
        v.push((t, t + len_ns));
        k += 1;
        t += every_ns + (k % 7) * 3_000_000;
    }
    v
}

#[test]
fn episodes_are_found_with_their_frequency_and_duration() {
    for (len, every) in [(50_000_000, 700_000_000), (20_000_000, 300_000_000)] {
        let mut est = Estimator::new(Config::default(), 1e9).unwrap();
        // 300 windows of 1 s and 40 ms.
        let eps = episodes(len, every, 312_000_000_000);
        let (f, d) = run(&mut est, &eps, 300);
        let e = est.estimate();
        assert!(e.outcomes.total() > 10_000, "{e:?}");
        let ferr = e.frequency / f - 1.0;
        assert!(
            ferr.abs() < 0.25,
            "frequency {} vs truth {f}: {e:?}",
            e.frequency
        );
        // A slot that overlaps an episode's edge counts whole: the truth in slots is
        // the length plus about one.
        let dslots = e.duration_slots.unwrap();
        assert!(
            dslots > d * 0.75 && dslots < (d + 1.0) * 1.25,
            "duration {dslots} vs {d}: {e:?}"
        );
        assert!(
            e.congested_by_delay > 0,
            "the delay rule finds probes that lost nothing"
        );
        assert!(e.frequency_ci > 0.0 && e.frequency_ci < e.frequency);
        assert!((e.duration_s.unwrap() - dslots * 0.005).abs() < 1e-9);
    }
}

#[test]
fn a_clean_path_has_no_episode() {
    let mut est = Estimator::new(Config::default(), 1e9).unwrap();
    let _ = run(&mut est, &[], 50);
    let e = est.estimate();
    assert_eq!(e.frequency, 0.0);
    assert_eq!(e.duration_slots, None);
    assert_eq!(e.outcomes.n00, e.outcomes.total());
    assert_eq!((e.packets_lost, e.loss_rate), (0, 0.0));
    assert!(e.slots > 0 && e.probe_bytes == e.packets_sent * 600);
}

#[test]
fn the_process_starts_experiments_at_rate_p_and_probes_each_slot_once() {
    let cfg = Config {
        p: 0.1,
        ..Config::default()
    };
    let mut est = Estimator::new(cfg, 1e9).unwrap();
    let (mut starts, mut slots) = (0usize, 0usize);
    for _ in 0..200 {
        let w = est.next_window();
        starts += w.experiments.len();
        slots += w.slots.len();
        assert!(w.slots.windows(2).all(|p| p[0] < p[1]));
        assert!(w.experiments.iter().all(|&e| e + 2 <= 200));
        let gaps = w.gaps_ns();
        assert_eq!(gaps.len() as u32, w.probes());
        assert!(gaps.iter().all(|&g| g % 5_000_000 == 0));
    }
    // 199 possible starts per window at p = 0.1.
    let rate = starts as f64 / (200.0 * 199.0);
    assert!((rate - 0.1).abs() < 0.01, "{rate}");
    // Overlapping experiments share slots: fewer than 2 per experiment.
    assert!(slots < 2 * starts && slots > starts);
}

#[test]
fn a_result_of_another_window_is_refused() {
    let mut est = Estimator::new(Config::default(), 1e9).unwrap();
    let w = est.next_window();
    let r = WindowResult {
        id: w.id + 1,
        ..WindowResult::default()
    };
    assert!(!est.handle(&r));
    assert_eq!(est.estimate().slots, 0);
}

#[test]
fn bad_parameters_are_refused_naming_the_limit() {
    let refuse = |c: Config| Estimator::new(c, 10e6).unwrap_err().0;
    let d = Config::default();
    assert!(refuse(Config { p: 0.0, ..d }).contains("(0, 1]"));
    assert!(refuse(Config { p: 1.5, ..d }).contains("(0, 1]"));
    assert!(refuse(Config { p: f64::NAN, ..d }).contains("(0, 1]"));
    // 3 × 600 bytes at 10 Mbit/s take 1.44 ms.
    let m = refuse(Config {
        slot_ns: 1_000_000,
        ..d
    });
    assert!(
        m.contains("not longer than a probe") && m.contains("1440 µs"),
        "{m}"
    );
    assert!(refuse(Config { packets: 0, ..d }).contains("at least 1 packet"));
    assert!(refuse(Config { size: 10, ..d }).contains("probe size"));
    assert!(
        refuse(Config {
            slots_per_experiment: 1,
            ..d
        })
        .contains("at least 2 slots")
    );
    assert!(
        refuse(Config {
            window_slots: 1000,
            ..d
        })
        .contains("longer than the 1000 ms")
    );
    assert!(refuse(Config { alpha: 1.0, ..d }).contains("[0, 1)"));
    assert!(Estimator::new(Config { p: 1.0, ..d }, 10e6).is_ok());
}
