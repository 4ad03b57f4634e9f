//! The loop every receiver runs, once: ask a tool's [`Method`] for its next batch, wait
//! for the batch's time, exchange it, hand the answer back, and stop when the method
//! is done, the caller's flag is set, the time limit passes or the sender fails or goes
//! away. What a tool measures is its method; how a run ends is the same for all.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::{BatchError, Exchange, Session};
use crate::control::Batch;
use crate::exit::Ending;

/// The longest sleep between looks at the caller's stop flag while a batch waits for
/// its time.
const STOP_POLL: Duration = Duration::from_millis(100);

/// What carries a run's batches: a [`Session`], or a stand-in in tests.
pub trait Probes {
    /// Asks for one batch and collects its answer.
    fn exchange(&mut self, batch: &Batch) -> Result<Exchange, BatchError>;
    /// Ends the run with the sender; returns the probes stamped on reading.
    fn finish(self) -> u64;
}

impl Probes for Session {
    fn exchange(&mut self, batch: &Batch) -> Result<Exchange, BatchError> {
        Self::exchange(self, batch)
    }

    fn finish(self) -> u64 {
        self.close()
    }
}

/// What a method does next.
#[derive(Debug, Clone)]
pub enum Next {
    /// Ask the sender for this batch.
    Ask(Batch),
    /// Let time pass until then (idle between batches), then ask again.
    Wait(Instant),
    /// The measurement is done.
    Done,
}

/// Why a run stopped before its method was done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Halt {
    /// The caller's stop flag was set.
    Interrupted,
    /// The run's time limit passed.
    TimeLimit,
    /// The sender could not send a batch, or went away (the [`Ending`] says which).
    Sender,
}

/// What a tool does with a run: which batches it asks for and what it makes of their
/// answers. The estimator behind it stays sans-IO; the method is the small adapter
/// between it and [`drive`].
pub trait Method<S = Session> {
    /// What to do next. An error ends the run as the sender's trouble would (a batch
    /// the sender's path cannot carry).
    fn next(&mut self) -> Result<Next, BatchError>;

    /// The sender's answer to `batch`. `probes` is there for a follow-up question (the
    /// sender's traffic); an error ends the run.
    fn answer(&mut self, batch: &Batch, x: Exchange, probes: &mut S) -> Result<(), BatchError>;

    /// The run stops before [`Method::next`] said it was done.
    fn halt(&mut self, _why: Halt) {}
}

/// The bounds of a run.
#[derive(Debug, Clone, Copy)]
pub struct Bounds<'a> {
    /// Set by the caller to stop (an interrupt, the overlay's shutdown).
    pub stop: &'a AtomicBool,
    /// What the time limit and the elapsed time count from.
    pub started: Instant,
    /// Longest the run may take; `None`: until the method is done.
    pub limit: Option<Duration>,
}

impl<'a> Bounds<'a> {
    /// A run from now, stopped by `stop` or after `limit`.
    pub fn new(stop: &'a AtomicBool, limit: Option<Duration>) -> Self {
        Self {
            stop,
            started: Instant::now(),
            limit,
        }
    }

    /// Why the run should stop now, if it should.
    fn halted(&self) -> Option<Halt> {
        if self.stop.load(Ordering::Relaxed) {
            Some(Halt::Interrupted)
        } else if self.limit.is_some_and(|l| self.started.elapsed() >= l) {
            Some(Halt::TimeLimit)
        } else {
            None
        }
    }

    /// Sleeps until `at` in short steps; says why it stopped early, if it did.
    fn wait_until(&self, at: Instant) -> Option<Halt> {
        loop {
            if let Some(h) = self.halted() {
                return Some(h);
            }
            let now = Instant::now();
            if now >= at {
                return None;
            }
            std::thread::sleep((at - now).min(STOP_POLL));
        }
    }
}

/// How a driven run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Driven {
    /// From [`Bounds::started`] to the last answer.
    pub elapsed: Duration,
    /// The sender's trouble, if any, and the probes stamped on reading.
    pub end: Ending,
    /// Why it stopped before the method was done, if it did.
    pub halted: Option<Halt>,
}

/// Runs `method` over `probes` within `bounds`, then ends the run with the sender.
pub fn drive<S: Probes, M: Method<S> + ?Sized>(
    mut probes: S,
    method: &mut M,
    bounds: Bounds<'_>,
) -> Driven {
    let mut end = Ending::default();
    let halted = loop {
        if let Some(h) = bounds.halted() {
            break Some(h);
        }
        let batch = match method.next() {
            Ok(Next::Ask(batch)) => batch,
            Ok(Next::Wait(at)) => match bounds.wait_until(at) {
                Some(h) => break Some(h),
                None => continue,
            },
            Ok(Next::Done) => break None,
            Err(e) => {
                end.note(e);
                break Some(Halt::Sender);
            }
        };
        let answered = probes
            .exchange(&batch)
            .and_then(|x| method.answer(&batch, x, &mut probes));
        if let Err(e) = answered {
            end.note(e);
            break Some(Halt::Sender);
        }
    };
    if let Some(h) = halted {
        method.halt(h);
    }
    let elapsed = bounds.started.elapsed();
    end.unstamped = probes.finish();
    Driven {
        elapsed,
        end,
        halted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::{SentReport, Tag};

    /// Answers every batch with an empty report, or fails at the `fail_at`th.
    struct Stand {
        asked: Vec<u32>,
        fail_at: Option<(usize, BatchError)>,
    }

    impl Probes for Stand {
        fn exchange(&mut self, batch: &Batch) -> Result<Exchange, BatchError> {
            if let Some((n, e)) = &self.fail_at
                && *n == self.asked.len()
            {
                return Err(e.clone());
            }
            self.asked.push(batch.tag.stream);
            Ok(Exchange {
                report: SentReport {
                    tag: batch.tag,
                    ..SentReport::default()
                },
                arrivals: Vec::new(),
                replied: Instant::now(),
            })
        }

        fn finish(self) -> u64 {
            self.asked.len() as u64
        }
    }

    /// Asks for `total` batches, the `wait`th after a pause; records what it saw.
    #[derive(Default)]
    struct Counting {
        total: u32,
        next: u32,
        wait: Option<(u32, Duration)>,
        waiting: Option<Instant>,
        answered: u32,
        halted: Option<Halt>,
    }

    impl Method<Stand> for Counting {
        fn next(&mut self) -> Result<Next, BatchError> {
            if self.next == self.total {
                return Ok(Next::Done);
            }
            if let Some((n, d)) = self.wait
                && n == self.next
            {
                let until = *self.waiting.get_or_insert_with(|| Instant::now() + d);
                if Instant::now() < until {
                    return Ok(Next::Wait(until));
                }
            }
            self.next += 1;
            Ok(Next::Ask(Batch::even(
                Tag {
                    kind: 1,
                    fleet: 0,
                    stream: self.next - 1,
                },
                1,
                100,
                0,
                0,
            )))
        }

        fn answer(&mut self, b: &Batch, x: Exchange, _: &mut Stand) -> Result<(), BatchError> {
            assert_eq!(x.report.tag, b.tag);
            self.answered += 1;
            Ok(())
        }

        fn halt(&mut self, why: Halt) {
            self.halted = Some(why);
        }
    }

    fn stand() -> Stand {
        Stand {
            asked: Vec::new(),
            fail_at: None,
        }
    }

    #[test]
    fn a_method_runs_to_its_end_and_every_answer_comes_back() {
        let stop = AtomicBool::new(false);
        let mut m = Counting {
            total: 5,
            ..Counting::default()
        };
        let d = drive(stand(), &mut m, Bounds::new(&stop, None));
        assert_eq!((m.answered, m.halted), (5, None));
        assert_eq!(d.halted, None);
        assert!(d.end.clean());
        assert_eq!(d.end.unstamped, 5, "the run was finished with the sender");
    }

    #[test]
    fn the_senders_trouble_ends_the_run_and_is_told_apart() {
        let stop = AtomicBool::new(false);
        for (e, gone) in [
            (BatchError::Gone("closed".into()), true),
            (BatchError::SenderFailed("refused".into()), false),
        ] {
            let mut m = Counting {
                total: 5,
                ..Counting::default()
            };
            let s = Stand {
                asked: Vec::new(),
                fail_at: Some((2, e)),
            };
            let d = drive(s, &mut m, Bounds::new(&stop, None));
            assert_eq!((m.answered, m.halted), (2, Some(Halt::Sender)));
            assert_eq!(d.end.peer_gone.is_some(), gone);
            assert_eq!(d.end.sender_failed.is_some(), !gone);
            assert_eq!(d.end.unstamped, 2);
        }
    }

    #[test]
    fn a_set_flag_or_a_passed_limit_stops_before_the_next_batch() {
        let stop = AtomicBool::new(true);
        let mut m = Counting {
            total: 5,
            ..Counting::default()
        };
        let d = drive(stand(), &mut m, Bounds::new(&stop, None));
        assert_eq!((m.next, m.answered), (0, 0));
        assert_eq!(d.halted, Some(Halt::Interrupted));
        assert_eq!(m.halted, Some(Halt::Interrupted));
        let stop = AtomicBool::new(false);
        let mut m = Counting {
            total: 5,
            ..Counting::default()
        };
        let d = drive(stand(), &mut m, Bounds::new(&stop, Some(Duration::ZERO)));
        assert_eq!((m.answered, d.halted), (0, Some(Halt::TimeLimit)));
    }

    #[test]
    fn a_short_wait_passes_and_the_run_goes_on() {
        let stop = AtomicBool::new(false);
        let mut m = Counting {
            total: 3,
            wait: Some((1, Duration::from_millis(20))),
            ..Counting::default()
        };
        let d = drive(stand(), &mut m, Bounds::new(&stop, None));
        assert_eq!((m.answered, d.halted), (3, None));
        assert!(d.elapsed >= Duration::from_millis(20));
    }

    #[test]
    fn a_batch_waiting_for_its_time_is_not_sent_past_the_limit() {
        let stop = AtomicBool::new(false);
        let mut m = Counting {
            total: 5,
            wait: Some((1, Duration::from_secs(3600))),
            ..Counting::default()
        };
        let started = Instant::now();
        let d = drive(
            stand(),
            &mut m,
            Bounds::new(&stop, Some(Duration::from_millis(50))),
        );
        // The first went at once; the second waited and the limit came first.
        assert_eq!((m.next, m.answered), (1, 1));
        assert_eq!(d.halted, Some(Halt::TimeLimit));
        assert!(started.elapsed() < Duration::from_secs(60));
    }
}
