//! The global scheduler: sets each stream's level so that the streams together fit
//! the bandwidth it believes is available to them. It lowers that belief at once when
//! a local scheduler reports congestion, and sets it from the Measurement Overlay's
//! estimates (what the streams used while the estimate was measured plus the
//! available bandwidth the estimate found), which is what lets it raise the streams
//! again. No I/O and no clock: reports and estimates come in with their times.

use super::media::Level;

/// A local scheduler's report on one stream, once a second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LocalReport {
    /// Which stream.
    pub stream: usize,
    /// When, seconds from the run's start.
    pub at: f64,
    /// Bits per second the stream wrote into its connection over the last second.
    pub achieved_bps: f64,
    /// How long the oldest frame still waiting at the sender has waited, seconds.
    pub queue_delay: f64,
    /// Frames dropped at the sender over the last second because their deadline
    /// passed while they waited.
    pub stale: u32,
}

/// An estimate from the Measurement Overlay: the available bandwidth of the path the
/// streams take, besides what they themselves send.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OverlayEstimate {
    /// When the measurement started, seconds from the run's start.
    pub started: f64,
    /// When it ended.
    pub ended: f64,
    /// Its range, bits per second.
    pub low_bps: f64,
    /// Its range, bits per second.
    pub high_bps: f64,
}

/// Why the scheduler changed its belief.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// A local scheduler reported congestion.
    LocalReport,
    /// The Measurement Overlay reported an estimate.
    Estimate,
}

/// A change of the streams' levels.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    /// When, seconds from the run's start.
    pub at: f64,
    /// What made it.
    pub cause: Cause,
    /// The levels before.
    pub from: Vec<Level>,
    /// The levels after.
    pub to: Vec<Level>,
    /// The bandwidth believed available to the streams, bits per second.
    pub believed_bps: f64,
}

/// The scheduler's settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settings {
    /// A stream is congested when its oldest waiting frame has waited this long,
    /// seconds ("beyond reasonable buffering").
    pub congested_delay: f64,
    /// After a change, congestion reports are not acted on for this long, seconds:
    /// the sender's queue needs that long to drain at the new rate.
    pub settle: f64,
    /// Bytes on the path per byte of frames (TCP, IP and Ethernet headers).
    pub overhead: f64,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            congested_delay: 0.25,
            settle: 2.0,
            // 1448 bytes of payload per 1514-byte frame on the link.
            overhead: 1514.0 / 1448.0,
        }
    }
}

/// The global scheduler.
#[derive(Debug, Clone)]
pub struct GlobalScheduler {
    settings: Settings,
    levels: Vec<Level>,
    believed_bps: f64,
    /// The latest report of each stream.
    latest: Vec<Option<LocalReport>>,
    /// Reports kept to tell what the streams used during a measurement.
    history: Vec<LocalReport>,
    last_change: f64,
    last_lowered: f64,
    changes: Vec<Change>,
    beliefs: Vec<(f64, f64, Cause)>,
}

impl GlobalScheduler {
    /// A scheduler for `streams` streams that starts them all at `level` and believes
    /// `believed_bps` available.
    pub fn new(settings: Settings, streams: usize, level: Level, believed_bps: f64) -> Self {
        Self {
            settings,
            levels: vec![level; streams],
            believed_bps,
            latest: vec![None; streams],
            history: Vec::new(),
            last_change: f64::NEG_INFINITY,
            last_lowered: f64::NEG_INFINITY,
            changes: Vec::new(),
            beliefs: Vec::new(),
        }
    }

    /// The streams' levels now.
    pub fn levels(&self) -> &[Level] {
        &self.levels
    }

    /// The bandwidth believed available to the streams, bits per second.
    pub fn believed_bps(&self) -> f64 {
        self.believed_bps
    }

    /// Every change so far.
    pub fn changes(&self) -> &[Change] {
        &self.changes
    }

    /// Every belief so far: (time, bits per second, cause).
    pub fn beliefs(&self) -> &[(f64, f64, Cause)] {
        &self.beliefs
    }

    /// Bits per second on the path of `levels`.
    pub fn demand_bps(&self, levels: &[Level]) -> f64 {
        levels.iter().map(|l| l.bps()).sum::<f64>() * self.settings.overhead
    }

    /// The levels that fit `budget_bps` with the most utility; among equals the one
    /// whose streams are closest to each other, then the one that sends least.
    pub fn best_fit(&self, budget_bps: f64) -> Vec<Level> {
        let n = self.levels.len();
        let mut best: Option<(u32, i64, f64, Vec<Level>)> = None;
        let mut config = vec![Level::IOnly; n];
        let total = 3usize.pow(u32::try_from(n).unwrap_or(0));
        for code in 0..total {
            let mut c = code;
            for slot in &mut config {
                *slot = Level::ALL[c % 3];
                c /= 3;
            }
            let demand = self.demand_bps(&config);
            if demand > budget_bps && code != 0 {
                continue;
            }
            let utility: u32 = config.iter().map(|l| l.utility()).sum();
            let spread = i64::from(config.iter().map(|l| l.utility()).max().unwrap_or(0))
                - i64::from(config.iter().map(|l| l.utility()).min().unwrap_or(0));
            let better = match &best {
                None => true,
                Some((u, s, d, _)) => {
                    utility > *u
                        || (utility == *u && (spread < *s || (spread == *s && demand < *d)))
                }
            };
            if better {
                best = Some((utility, spread, demand, config.clone()));
            }
        }
        best.map_or_else(|| vec![Level::IOnly; n], |b| b.3)
    }

    fn apply(&mut self, at: f64, cause: Cause) {
        self.beliefs.push((at, self.believed_bps, cause));
        let to = self.best_fit(self.believed_bps);
        if to != self.levels {
            if self.demand_bps(&to) < self.demand_bps(&self.levels) {
                self.last_lowered = at;
            }
            self.changes.push(Change {
                at,
                cause,
                from: self.levels.clone(),
                to: to.clone(),
                believed_bps: self.believed_bps,
            });
            self.levels = to;
            self.last_change = at;
        }
    }

    /// Takes a local report; lowers the belief to what the streams achieved if the
    /// stream is congested (and the last change has had time to settle).
    pub fn handle_report(&mut self, r: LocalReport) {
        if let Some(slot) = self.latest.get_mut(r.stream) {
            *slot = Some(r);
        }
        self.history.push(r);
        let keep_from = r.at - 600.0;
        if self.history.first().is_some_and(|h| h.at < keep_from) {
            self.history.retain(|h| h.at >= keep_from);
        }
        let congested = r.queue_delay >= self.settings.congested_delay || r.stale > 0;
        if !congested || r.at - self.last_change < self.settings.settle {
            return;
        }
        // What the streams got through lately is what the path gives them now.
        let achieved: f64 = self
            .latest
            .iter()
            .flatten()
            .map(|l| l.achieved_bps)
            .sum::<f64>()
            * self.settings.overhead;
        let lowered = achieved.min(self.believed_bps);
        if lowered < self.believed_bps || self.best_fit(lowered) != self.levels {
            self.believed_bps = lowered;
            self.apply(r.at, Cause::LocalReport);
        }
    }

    /// What the streams sent on the path, bits per second, between `from` and `to`
    /// seconds (from the local reports; `None` without any).
    pub fn used_bps(&self, from: f64, to: f64) -> Option<f64> {
        let mut sum = vec![(0.0, 0u32); self.levels.len()];
        for r in self
            .history
            .iter()
            .filter(|r| r.at > from && r.at <= to + 1.0)
        {
            if let Some(s) = sum.get_mut(r.stream) {
                s.0 += r.achieved_bps;
                s.1 += 1;
            }
        }
        let streams: Vec<f64> = sum
            .iter()
            .filter(|s| s.1 > 0)
            .map(|s| s.0 / f64::from(s.1))
            .collect();
        (!streams.is_empty()).then(|| streams.iter().sum::<f64>() * self.settings.overhead)
    }

    /// Takes an estimate. An estimate whose measurement began before the streams were
    /// last lowered is out of date and ignored: it measured a path the streams have
    /// since left. Otherwise the belief becomes what the streams used while it was
    /// measured plus its low bound.
    pub fn handle_estimate(&mut self, e: OverlayEstimate, now: f64) -> bool {
        if e.started < self.last_lowered {
            return false;
        }
        let used = self
            .used_bps(e.started, e.ended)
            .unwrap_or_else(|| self.demand_bps(&self.levels));
        self.believed_bps = used + e.low_bps;
        self.apply(now, Cause::Estimate);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gs() -> GlobalScheduler {
        GlobalScheduler::new(Settings::default(), 3, Level::Full, 10e6)
    }

    fn report(stream: usize, at: f64, achieved_bps: f64, queue_delay: f64) -> LocalReport {
        LocalReport {
            stream,
            at,
            achieved_bps,
            queue_delay,
            stale: 0,
        }
    }

    #[test]
    fn best_fit_maximises_utility_then_fairness() {
        let g = gs();
        let o = Settings::default().overhead;
        assert_eq!(g.best_fit(10e6), vec![Level::Full; 3]);
        assert_eq!(
            g.best_fit(3.0 * 1.16e6 * o - 1.0)
                .iter()
                .filter(|l| **l == Level::Full)
                .count(),
            2
        );
        // Room for three "drop B" streams: preferred to full + drop B + I only.
        let b = 3.0 * 0.704e6 * o + 1.0;
        assert_eq!(g.best_fit(b), vec![Level::DropB; 3]);
        // Nothing fits: every stream at its lowest.
        assert_eq!(g.best_fit(0.0), vec![Level::IOnly; 3]);
    }

    #[test]
    fn congestion_lowers_at_once_and_settles() {
        let mut g = gs();
        for s in 0..3 {
            g.handle_report(report(s, 1.0, 1.16e6, 0.01));
        }
        assert!(g.changes().is_empty());
        g.handle_report(report(0, 2.0, 0.5e6, 0.4));
        let c = g.changes().last().cloned().unwrap();
        assert_eq!(c.cause, Cause::LocalReport);
        assert!(g.demand_bps(g.levels()) <= g.believed_bps());
        assert!(g.believed_bps() < 3.0 * 1.16e6 * 1.05);
        // Within the settling time more congestion changes nothing.
        let n = g.changes().len();
        g.handle_report(report(1, 3.0, 0.1e6, 0.9));
        assert_eq!(g.changes().len(), n);
    }

    #[test]
    fn an_estimate_raises_the_streams_and_a_stale_one_does_not() {
        let mut g = gs();
        for s in 0..3 {
            g.handle_report(report(s, 1.0, 0.3e6, 0.5));
        }
        let low = g.levels().to_vec();
        assert!(low.iter().all(|l| *l < Level::Full));
        // Measured before the streams were lowered: ignored.
        let stale = OverlayEstimate {
            started: 0.5,
            ended: 6.0,
            low_bps: 5e6,
            high_bps: 6e6,
        };
        assert!(!g.handle_estimate(stale, 6.0));
        assert_eq!(g.levels(), &low[..]);
        for s in 0..3 {
            g.handle_report(report(s, 5.0, 0.216e6, 0.0));
        }
        let fresh = OverlayEstimate {
            started: 4.0,
            ended: 8.0,
            low_bps: 5e6,
            high_bps: 6e6,
        };
        assert!(g.handle_estimate(fresh, 8.0));
        assert_eq!(g.levels(), &[Level::Full; 3]);
        let c = g.changes().last().unwrap();
        assert_eq!(c.cause, Cause::Estimate);
        // The belief is what the streams used during the measurement plus the low bound.
        let o = Settings::default().overhead;
        assert!((g.believed_bps() - (3.0 * 0.216e6 * o + 5e6)).abs() < 1.0);
    }
}
