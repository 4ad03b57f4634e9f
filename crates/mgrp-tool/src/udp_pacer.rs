//! The one thread that paces every UDP batch of this process.
//!
//! A sender serving several receivers over UDP has several batches to send at once. A
//! real-time thread each would spin against each other on two CPUs; instead every
//! batch goes to this thread, which keeps one schedule of probe deadlines over all of
//! them, the earliest first, sleeps until shortly before the next and spins to it. Two
//! probes due closer together than one send takes cannot both leave on time: the later
//! one leaves right after the first, and its stamp says when. The thread starts on the
//! first batch and runs at real-time priority where it may.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use socket2::Socket;

use crate::control::{Batch, PROBE_HEADER_LEN, ProbeHeader, ProbeSpec, SentReport, Tag};
use crate::sys;

/// Sleep until this close to a deadline, then spin (the pacing this machine measured
/// best: timer wake-ups cost 20–50 µs, a 50 µs margin is too small).
const SPIN_MARGIN_NS: i64 = 150_000;

/// Longest the pacing thread spins without giving its CPU up, ns; a probe due after
/// that waits [`BREATHER_NS`] more (as mgrpd's pacer does).
const MAX_SPIN_RUN_NS: i64 = 2_000_000;

/// How long that wait lasts, ns.
const BREATHER_NS: i64 = 20_000;

/// The first probe leaves this long after the batch reaches the thread, so that probe
/// 0 is paced like every other one.
const LEAD_NS: i64 = 200_000;

/// How often a caller waiting for its batch looks at its stop flag (a stopped batch
/// sends on until then: 5 ms of probes).
const POLL: Duration = Duration::from_millis(5);

/// A batch for the pacing thread, and where its report goes.
struct Job {
    socket: Arc<Socket>,
    /// IP and UDP header bytes per probe.
    overhead: u32,
    tag: Tag,
    probes: Vec<ProbeSpec>,
    /// The next probe to send, and when it is due.
    next: usize,
    deadline: i64,
    stamps: Vec<Option<i64>>,
    cancel: Arc<AtomicBool>,
    done: mpsc::Sender<SentReport>,
}

impl Job {
    /// Gives the caller its report: a stamp per probe sent, none for the rest.
    fn report(self) {
        let mut stamps = self.stamps;
        stamps.resize(self.probes.len(), None);
        let _ = self.done.send(SentReport {
            tag: self.tag,
            sent: self.probes.len() as u32,
            sender_stamps: stamps,
            ..SentReport::default()
        });
    }
}

/// The pacing thread's mailbox, and why it runs without real-time priority if it does.
struct Pacer {
    jobs: mpsc::Sender<Job>,
    warning: Option<String>,
}

static PACER: OnceLock<Pacer> = OnceLock::new();

fn pacer() -> &'static Pacer {
    PACER.get_or_init(|| {
        let (jobs, rx) = mpsc::channel();
        let (ready_tx, ready_rx) = mpsc::channel();
        let started = std::thread::Builder::new()
            .name("udp-pacer".into())
            .spawn(move || {
                // At normal priority a real-time thread on its CPU (mgrpd's pacer)
                // delays the probes, and the stretched gaps read as a falling rate.
                let warning = sys::make_realtime().err().map(|e| {
                    format!(
                        "probes paced without real-time priority ({e}); run as root or with CAP_SYS_NICE for steadier gaps"
                    )
                });
                let _ = ready_tx.send(warning);
                run(&rx);
            });
        let warning = match started {
            Ok(_) => ready_rx.recv().unwrap_or(None),
            Err(e) => Some(format!("cannot start the UDP pacing thread: {e}")),
        };
        Pacer { jobs, warning }
    })
}

/// Why UDP probes are paced less steadily than they could be, if they are (the pacing
/// thread has no real-time priority); starts the thread.
pub(crate) fn udp_pacing_warning() -> Option<String> {
    pacer().warning.clone()
}

/// Sends `b` through `socket` at its gaps, beside every other batch of this process;
/// stops early once `stop` is set (the probes not sent have no stamp). Returns when
/// the last probe has left.
pub(crate) fn send(
    socket: &Arc<Socket>,
    overhead: u32,
    b: &Batch,
    stop: &AtomicBool,
) -> SentReport {
    let probes: Vec<ProbeSpec> = b.probes().collect();
    let unsent = |probes: &[ProbeSpec]| SentReport {
        tag: b.tag,
        sent: b.packets(),
        sender_stamps: vec![None; probes.len()],
        ..SentReport::default()
    };
    if probes.is_empty() {
        return unsent(&probes);
    }
    let cancel = Arc::new(AtomicBool::new(false));
    let (done, report) = mpsc::channel();
    let job = Job {
        socket: Arc::clone(socket),
        overhead,
        tag: b.tag,
        stamps: Vec::with_capacity(probes.len()),
        next: 0,
        deadline: 0,
        probes,
        cancel: Arc::clone(&cancel),
        done,
    };
    if let Err(mpsc::SendError(job)) = pacer().jobs.send(job) {
        return unsent(&job.probes);
    }
    loop {
        match report.recv_timeout(POLL) {
            Ok(r) => return r,
            Err(RecvTimeoutError::Timeout) => {
                if stop.load(Ordering::Relaxed) {
                    cancel.store(true, Ordering::Relaxed);
                }
            }
            Err(RecvTimeoutError::Disconnected) => {
                return SentReport {
                    tag: b.tag,
                    sent: b.packets(),
                    sender_stamps: vec![None; b.packets() as usize],
                    ..SentReport::default()
                };
            }
        }
    }
}

/// The pacing thread: every batch in flight in one schedule, the earliest deadline
/// first.
fn run(rx: &mpsc::Receiver<Job>) {
    let mut jobs: Vec<Job> = Vec::new();
    let mut buf = vec![0u8; 65_536];
    // When the thread last gave its CPU up: a real-time thread spinning through
    // batches of short gaps starves what the kernel runs on its CPU.
    let mut rested = sys::mono_now();
    let start = |mut j: Job, jobs: &mut Vec<Job>| {
        let first_gap = i64::try_from(j.probes[0].gap_ns).unwrap_or(i64::MAX / 4);
        j.deadline = sys::mono_now() + LEAD_NS + first_gap;
        jobs.push(j);
    };
    loop {
        if jobs.is_empty() {
            match rx.recv() {
                Ok(j) => start(j, &mut jobs),
                Err(_) => return,
            }
            rested = sys::mono_now();
        }
        while let Ok(j) = rx.try_recv() {
            start(j, &mut jobs);
        }
        // Batches whose caller stopped end here, their unsent probes without stamps.
        let mut i = 0;
        while i < jobs.len() {
            if jobs[i].cancel.load(Ordering::Relaxed) {
                jobs.swap_remove(i).report();
            } else {
                i += 1;
            }
        }
        let Some(i) = (0..jobs.len()).min_by_key(|&i| jobs[i].deadline) else {
            continue;
        };
        let deadline = jobs[i].deadline;
        let now = sys::mono_now();
        if deadline - now > SPIN_MARGIN_NS {
            // Asleep until shortly before, unless another batch comes meanwhile.
            let wait = Duration::from_nanos((deadline - SPIN_MARGIN_NS - now) as u64);
            match rx.recv_timeout(wait) {
                Ok(j) => start(j, &mut jobs),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            rested = sys::mono_now();
            continue;
        }
        if now - rested > MAX_SPIN_RUN_NS {
            sys::sleep_until(now + BREATHER_NS);
            rested = sys::mono_now();
        }
        let mut now = sys::mono_now();
        while now < deadline {
            std::hint::spin_loop();
            now = sys::mono_now();
        }
        let job = &mut jobs[i];
        let seq = job.next;
        let p = job.probes[seq];
        let gap = i64::try_from(p.gap_ns).unwrap_or(i64::MAX / 4);
        // Later than half a gap (the thread was kept from running): the rest keeps
        // its gaps from here. Catching up would send a burst, which queues on the
        // path and reads as a rate above the available bandwidth; the long gap
        // instead shows in the stamps, which the estimators judge by.
        let base = if now - deadline > gap / 2 {
            now
        } else {
            deadline
        };
        let payload =
            (p.size.saturating_sub(job.overhead) as usize).clamp(PROBE_HEADER_LEN, buf.len());
        let stamp = sys::wall_now();
        ProbeHeader {
            tag: job.tag,
            seq: seq as u32,
            sent_ns: stamp,
        }
        .emit(&mut buf);
        // A probe the kernel refuses (a full queue) has no departure stamp; the
        // receiver counts it lost. Never waited for: one receiver's full queue must not
        // hold up every other batch.
        job.stamps.push(
            job.socket
                .send_with_flags(&buf[..payload], libc::MSG_DONTWAIT)
                .is_ok()
                .then_some(stamp),
        );
        job.next += 1;
        if job.next == job.probes.len() {
            jobs.swap_remove(i).report();
        } else {
            let next_gap = i64::try_from(job.probes[job.next].gap_ns).unwrap_or(i64::MAX / 4);
            job.deadline = base + next_gap;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::{SocketAddr, UdpSocket};

    use super::*;
    use crate::transport::Sender;

    fn receiver() -> (UdpSocket, SocketAddr) {
        let r = UdpSocket::bind("127.0.0.1:0").unwrap();
        r.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        let a = r.local_addr().unwrap();
        (r, a)
    }

    fn tag(stream: u32) -> Tag {
        Tag {
            kind: 1,
            fleet: 0,
            stream,
        }
    }

    /// Two batches to two receivers at once, on loopback: both leave whole through
    /// the one thread, each with a stamp per probe in order, and each receiver gets
    /// its own batch only.
    #[test]
    fn batches_to_two_receivers_leave_side_by_side() {
        let (ra, a) = receiver();
        let (rb, b) = receiver();
        let batches = [
            Batch::even(tag(1), 200, 200, 300_000, 0),
            Batch::even(tag(2), 150, 300, 410_000, 0),
        ];
        let reports: Vec<SentReport> = std::thread::scope(|s| {
            let sends: Vec<_> = [a, b]
                .into_iter()
                .zip(&batches)
                .map(|(to, batch)| {
                    s.spawn(move || {
                        let mut sender = Sender::udp(to, 0).unwrap();
                        sender.send(batch).unwrap()
                    })
                })
                .collect();
            sends.into_iter().map(|t| t.join().unwrap()).collect()
        });
        for ((r, batch), rx) in reports.iter().zip(&batches).zip([&ra, &rb]) {
            assert_eq!(r.tag, batch.tag);
            let stamps: Vec<i64> = r.sender_stamps.iter().map(|s| s.unwrap()).collect();
            assert_eq!(stamps.len(), batch.packets() as usize);
            assert!(stamps.windows(2).all(|w| w[1] > w[0]), "stamps in order");
            // The whole batch took about its length: it ran beside the other, not
            // after it.
            let span = (stamps[stamps.len() - 1] - stamps[0]) as u64;
            assert!(
                span < 2 * batch.duration_ns(),
                "{span} ns for {}",
                batch.duration_ns()
            );
            let mut buf = [0u8; 2048];
            let mut got = 0;
            while let Ok(n) = rx.recv(&mut buf) {
                let h = ProbeHeader::parse(&buf[..n]).unwrap();
                assert_eq!(h.tag, batch.tag, "a probe of the other batch");
                got += 1;
            }
            assert_eq!(got, batch.packets());
        }
        let (first, second) = (&reports[0].sender_stamps, &reports[1].sender_stamps);
        let (a0, a1) = (first[0].unwrap(), first[first.len() - 1].unwrap());
        let (b0, b1) = (second[0].unwrap(), second[second.len() - 1].unwrap());
        assert!(
            a0 < b1 && b0 < a1,
            "the two batches ran one after the other"
        );
    }

    /// A batch's lead holds its first probe back: the send takes at least the lead.
    #[test]
    fn a_lead_holds_the_first_probe_back() {
        let (r, to) = receiver();
        let mut sender = Sender::udp(to, 0).unwrap();
        let batch = Batch {
            lead_ns: 80_000_000,
            ..Batch::even(tag(4), 3, 100, 1_000_000, 0)
        };
        let started = std::time::Instant::now();
        let report = sender.send(&batch).unwrap();
        assert!(
            started.elapsed() >= Duration::from_millis(82),
            "the last probe left {:?} after the send began, before the lead and gaps",
            started.elapsed()
        );
        assert!(report.sender_stamps.iter().all(Option::is_some));
        let mut buf = [0u8; 2048];
        assert!(r.recv(&mut buf).is_ok(), "the probes arrive");
    }

    /// A batch whose caller stops ends early: the probes not sent have no stamp.
    #[test]
    fn a_stopped_batch_ends_early_without_stamps_for_the_rest() {
        let (_r, to) = receiver();
        let mut sender = Sender::udp(to, 0).unwrap();
        let stop = AtomicBool::new(false);
        // 60 s of probes.
        let batch = Batch::even(tag(3), 600, 100, 100_000_000, 0);
        let report = std::thread::scope(|s| {
            let t = s.spawn(|| sender.send_unless(&batch, &stop).unwrap());
            std::thread::sleep(Duration::from_millis(300));
            stop.store(true, Ordering::Relaxed);
            t.join().unwrap()
        });
        assert_eq!(report.sender_stamps.len(), 600);
        let sent = report.sender_stamps.iter().filter(|s| s.is_some()).count();
        assert!((1..600).contains(&sent), "{sent} sent");
        assert!(report.sender_stamps[sent..].iter().all(Option::is_none));
    }
}
