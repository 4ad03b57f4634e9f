//! The receiver's side of a measurement as steps without sockets: what it makes of
//! each answer of the sender's while it opens ([`Opening`]), waits for a batch's
//! report ([`Awaiting`]) and collects the batch's probes ([`Arrivals`]). A sender may
//! answer anything in any order; each step bounds what it takes (one address proof,
//! a report no larger than the batch asked for, no probe of another batch, nothing
//! after the batch's deadline). [`super::Session`] runs them over its connection and
//! probe listener; the fuzzing harness against any answers.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use super::{BatchError, MeasureError};
use crate::control::{Batch, Reply, SentReport, Tag};
use crate::transport::{Arrival, Seen};

/// The sender closed the control connection before the run began.
fn closed() -> MeasureError {
    MeasureError::Unreachable("the sender closed the connection".into())
}

/// Where the opening stands after the hello's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Opened {
    /// The measurement runs; probes up to this size (IP bytes), with the features
    /// the sender honours.
    Ready(u32, Vec<String>),
    /// The sender sent a proof probe to this address: echo its cookie.
    Prove(IpAddr),
}

/// The opening: pings timed, then the hello answered, with one address proof at
/// most.
#[derive(Debug, Clone)]
pub(crate) struct Opening {
    rtt: Duration,
    proved: bool,
}

impl Opening {
    pub(crate) fn new() -> Self {
        Self {
            rtt: Duration::MAX,
            proved: false,
        }
    }

    /// The smallest round trip timed.
    pub(crate) fn rtt(&self) -> Duration {
        self.rtt
    }

    /// The answer to a ping sent `took` before it came.
    pub(crate) fn pong(
        &mut self,
        reply: Option<Reply>,
        took: Duration,
    ) -> Result<(), MeasureError> {
        match reply {
            Some(Reply::Pong) => {
                self.rtt = self.rtt.min(took);
                Ok(())
            }
            Some(Reply::Error { message }) => Err(MeasureError::refusal(message)),
            Some(other) => Err(anyhow::anyhow!("the sender answered a ping with {other:?}").into()),
            None => Err(closed()),
        }
    }

    /// An answer to the hello (or to the proof).
    pub(crate) fn hello_answer(&mut self, reply: Option<Reply>) -> Result<Opened, MeasureError> {
        match reply {
            Some(Reply::Hello {
                max_size, features, ..
            }) => Ok(Opened::Ready(max_size, features)),
            // The hello named an address this connection does not come from: the
            // sender sent one probe there, whose cookie proves this end gets it.
            Some(Reply::Prove { address }) if !self.proved => {
                self.proved = true;
                Ok(Opened::Prove(address))
            }
            Some(Reply::Error { message }) => Err(MeasureError::refusal(message)),
            Some(other) => {
                Err(anyhow::anyhow!("unexpected answer from the sender: {other:?}").into())
            }
            None => Err(closed()),
        }
    }
}

/// Waiting for the report of a batch (with its tag as it travels): reports of
/// earlier batches are passed over, until the batch's deadline.
#[derive(Debug, Clone)]
pub(crate) struct Awaiting<'a> {
    batch: &'a Batch,
    deadline: Instant,
    allowed: Duration,
}

impl<'a> Awaiting<'a> {
    /// For `batch`, asked at `now` with the round trip `rtt`: its report is due
    /// within the batch's time, the round trip and `slack`.
    pub(crate) fn new(batch: &'a Batch, now: Instant, rtt: Duration, slack: Duration) -> Self {
        let takes = Duration::from_nanos(batch.duration_ns().saturating_add(batch.lead_ns));
        let allowed = takes.saturating_add(rtt).saturating_add(slack);
        Self {
            batch,
            deadline: now + allowed,
            allowed,
        }
    }

    /// How long the report may take from when the batch was asked for.
    pub(crate) fn allowed(&self) -> Duration {
        self.allowed
    }

    /// When the report must have come.
    pub(crate) fn deadline(&self) -> Instant {
        self.deadline
    }

    /// An answer that came at `now`: the batch's report (believed only as far as it
    /// matches what was asked), `None` for an earlier batch's, or why the batch
    /// brought nothing.
    pub(crate) fn answer(
        &self,
        reply: Option<Reply>,
        now: Instant,
    ) -> Result<Option<SentReport>, BatchError> {
        if now >= self.deadline {
            return Err(BatchError::Gone(format!(
                "the sender did not report the batch within {:.1} s",
                self.allowed.as_secs_f64()
            )));
        }
        match reply {
            Some(Reply::Sent(r)) if r.tag == self.batch.tag => match r.mismatch(self.batch) {
                Some(why) => Err(BatchError::Gone(why)),
                None => Ok(Some(r)),
            },
            Some(Reply::Sent(_)) => Ok(None),
            Some(Reply::Error { message }) => Err(BatchError::SenderFailed(message)),
            Some(other) => Err(BatchError::Gone(format!(
                "unexpected answer from the sender: {other:?}"
            ))),
            None => Err(BatchError::Gone("the sender closed the connection".into())),
        }
    }
}

/// A batch's probes as they come, up to as many as its report says left.
#[derive(Debug, Clone)]
pub(crate) struct Arrivals {
    tag: Tag,
    want: usize,
    got: Vec<Arrival>,
}

impl Arrivals {
    /// For the batch tagged `tag` whose report is `report`.
    pub(crate) fn new(tag: Tag, report: &SentReport) -> Self {
        let want = report.sent as usize;
        Self {
            tag,
            want,
            got: Vec::with_capacity(want),
        }
    }

    /// Whether every probe that left has come.
    pub(crate) fn complete(&self) -> bool {
        self.got.len() >= self.want
    }

    /// Takes a probe that came: counted only if it is of this batch and one is
    /// still missing.
    pub(crate) fn take(&mut self, seen: Seen) {
        if seen.tag == self.tag && !self.complete() {
            self.got.push(seen.arrival);
        }
    }

    /// The probes that came, in the order they came.
    pub(crate) fn into_vec(self) -> Vec<Arrival> {
        self.got
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The upgrade rule: a sender that lists no features is older, and what it
    /// ignores reads as not honoured; a newer sender's hello parses here whatever it
    /// adds.
    #[test]
    fn an_older_senders_hello_names_no_feature_and_a_newer_ones_extra_fields_pass() {
        let parse = |json: &str| {
            Opening::new()
                .hello_answer(Some(serde_json::from_str::<Reply>(json).unwrap()))
                .unwrap()
        };
        assert_eq!(
            parse(r#"{"msg":"hello","version":3,"max_size":1500,"sender":"pathload-rs 0.1.0"}"#),
            Opened::Ready(1500, Vec::new())
        );
        assert_eq!(
            parse(
                r#"{"msg":"hello","version":3,"max_size":1400,"sender":"x","features":["exclusive","lead_ns","some_later_one"],"some_later_field":{"a":1}}"#
            ),
            Opened::Ready(
                1400,
                vec![
                    "exclusive".into(),
                    "lead_ns".into(),
                    "some_later_one".into()
                ]
            )
        );
        // This version's sender names every feature; an older receiver's hello
        // (no fields of later versions) is what it answers.
        let ours = serde_json::to_string(&Reply::Hello {
            version: crate::control::CONTROL_VERSION,
            max_size: 1500,
            sender: "s".into(),
            features: crate::control::FEATURES.map(str::to_owned).to_vec(),
        })
        .unwrap();
        assert_eq!(
            parse(&ours),
            Opened::Ready(1500, vec!["exclusive".into(), "lead_ns".into()])
        );
        let old_hello =
            r#"{"msg":"hello","version":3,"transport":"udp","probe_port":5,"piggyback":false}"#;
        assert!(matches!(
            serde_json::from_str::<crate::control::Request>(old_hello).unwrap(),
            crate::control::Request::Hello {
                exclusive: false,
                ..
            }
        ));
    }

    /// A refusal is `Busy` exactly when the sender says it is busy, whatever the
    /// answer refused (a ping or the hello); the text stays the sender's.
    #[test]
    fn a_busy_sender_is_told_apart_by_its_answer() {
        let busy = format!("{}: this sender runs 32 measurements", crate::BUSY);
        let error = |m: &str| {
            Some(Reply::Error {
                message: m.to_owned(),
            })
        };
        let e = Opening::new().hello_answer(error(&busy)).unwrap_err();
        assert!(matches!(&e, MeasureError::Busy(m) if *m == busy) && e.is_busy());
        assert_eq!(e.to_string(), format!("the sender refused: {busy}"));
        let e = Opening::new()
            .pong(error(&busy), Duration::ZERO)
            .unwrap_err();
        assert!(e.is_busy());
        for other in [
            "refused: over this sender's budget",
            "its mgrpd refused the train",
            "busybox",
        ] {
            let e = Opening::new().hello_answer(error(other)).unwrap_err();
            assert!(
                matches!(e, MeasureError::Refused(_)) && !e.is_busy(),
                "{other}"
            );
        }
    }
}
