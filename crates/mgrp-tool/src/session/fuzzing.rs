//! The receiver's side of a measurement against a sender that answers anything, for
//! the fuzz target `receiver_session`; not an API. The receiver opens (five pings,
//! the hello, a proof if asked), then asks for batches and collects their probes,
//! while the sender's answers, the time they take and the probes that come are read
//! from the input. After every answer: a ping is timed only by its pong, one address
//! proof at most is echoed, the run starts only on a hello; a batch's report is taken
//! only if it is that batch's, came before its deadline and claims no more probes or
//! stamps than were asked; no probe of another batch is counted, nor more than the
//! report says left.

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use super::steps::{Arrivals, Awaiting, Opened, Opening};
use crate::control::{Batch, MAX_BATCH_PROBES, Reply, SentReport, Tag};
use crate::transport::{Arrival, Seen};

/// The bytes still to read.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }

    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes([self.byte()?, self.byte()?]))
    }
}

/// A sender's answer as the input says, about a batch tagged `tag` (or another).
fn answer(input: &mut Input<'_>, tag: Tag) -> Option<Option<Reply>> {
    let what = input.byte()?;
    let n = input.u16()?;
    let other = Tag {
        stream: tag.stream ^ u32::from(n | 1),
        ..tag
    };
    Some(match what % 8 {
        0 => None,
        1 => Some(Reply::Pong),
        2 => Some(Reply::Hello {
            version: 1,
            max_size: u32::from(n),
            sender: String::new(),
            features: if n % 2 == 0 {
                Vec::new()
            } else {
                vec!["exclusive".into()]
            },
        }),
        3 => Some(Reply::Prove {
            address: IpAddr::V4(Ipv4Addr::from(u32::from(n))),
        }),
        4 | 5 => Some(Reply::Sent(SentReport {
            tag: if what % 8 == 4 { tag } else { other },
            sent: u32::from(n),
            sender_stamps: vec![Some(1); usize::from(input.byte()?)],
            competing_rider_bytes: 0,
            rider_bytes: 0,
            riding_probe_bytes: 0,
            kernel_stamps: false,
        })),
        6 => Some(Reply::Error {
            message: "no".into(),
        }),
        _ => Some(Reply::Traffic {
            bytes_per_second: 0,
            window_ms: 0,
            held_riders: 0,
            held_bytes: 0,
        }),
    })
}

/// Runs the receiver against the answers in `data`; returns the probes counted.
pub fn run(data: &[u8]) -> usize {
    let mut input = Input(data);
    let epoch = Instant::now();
    let mut t = Duration::ZERO;
    let mut opening = Opening::new();
    let mut fastest = Duration::MAX;
    let none = Tag {
        kind: 0,
        fleet: 0,
        stream: 0,
    };
    for _ in 0..5 {
        let Some(reply) = answer(&mut input, none) else {
            return 0;
        };
        let took = Duration::from_micros(u64::from(input.byte().unwrap_or(0)) + 1);
        let pong = reply == Some(Reply::Pong);
        match opening.pong(reply, took) {
            Ok(()) => {
                assert!(pong, "a ping timed by something else");
                fastest = fastest.min(took);
                assert_eq!(opening.rtt(), fastest);
            }
            Err(_) => return 0,
        }
    }
    let mut proofs = 0;
    loop {
        let Some(reply) = answer(&mut input, none) else {
            return 0;
        };
        let hello = matches!(reply, Some(Reply::Hello { .. }));
        match opening.hello_answer(reply) {
            Ok(Opened::Ready(..)) => {
                assert!(hello);
                break;
            }
            Ok(Opened::Prove(_)) => {
                proofs += 1;
                assert!(proofs <= 1, "a second address proof echoed");
            }
            Err(_) => return 0,
        }
    }
    let mut counted = 0;
    while let Some(b) = input.byte() {
        let packets = u32::from(b) % MAX_BATCH_PROBES.min(256) + 1;
        let tag = Tag {
            kind: 1,
            fleet: u32::from(b),
            stream: 7,
        };
        let batch = Batch::even(tag, packets, 200, 10_000, 0);
        let asked = epoch + t;
        let awaiting = Awaiting::new(
            &batch,
            asked,
            Duration::from_millis(1),
            Duration::from_secs(10),
        );
        let report = loop {
            let Some(reply) = answer(&mut input, tag) else {
                return counted;
            };
            // Each answer takes up to about 4 s to come.
            t += Duration::from_millis(u64::from(input.byte().unwrap_or(0)).pow(2) / 16);
            let now = epoch + t;
            match awaiting.answer(reply.clone(), now) {
                Ok(Some(r)) => {
                    assert!(now < awaiting.deadline(), "a report taken late");
                    assert_eq!(r.tag, tag, "another batch's report taken");
                    assert!(r.sent <= packets && r.sender_stamps.len() <= packets as usize);
                    break r;
                }
                Ok(None) => {
                    assert!(matches!(reply, Some(Reply::Sent(ref r)) if r.tag != tag));
                }
                Err(_) => return counted,
            }
        };
        let mut arrivals = Arrivals::new(tag, &report);
        let (mut ours, n) = (0usize, input.byte().unwrap_or(0));
        for seq in 0..u32::from(n) {
            let mine = input.byte().unwrap_or(0) & 1 == 0;
            ours += usize::from(mine);
            arrivals.take(Seen {
                tag: if mine { tag } else { Tag { stream: 8, ..tag } },
                arrival: Arrival {
                    seq,
                    sent_ns: 0,
                    received_ns: 0,
                },
            });
        }
        let got = arrivals.into_vec().len();
        assert!(got <= report.sent as usize && got <= ours);
        assert_eq!(got, ours.min(report.sent as usize));
        counted += got;
    }
    counted
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Five pongs, a proof, a hello; a batch answered by another batch's report and
    /// then its own (3 sent), and four probes of which three are its own.
    #[test]
    fn a_run_counts_only_its_batchs_probes() {
        let mut data = Vec::new();
        for _ in 0..5 {
            data.extend_from_slice(&[1, 0, 0, 9]);
        }
        data.extend_from_slice(&[3, 1, 2, 2, 0, 0]);
        data.extend_from_slice(&[9, 5, 3, 0, 0, 1, 4, 3, 0, 0, 1, 4, 0, 1, 0, 0]);
        assert_eq!(run(&data), 3);
        // A second proof ends it before any batch.
        let mut twice = data[..20].to_vec();
        twice.extend_from_slice(&[3, 1, 2, 3, 1, 2, 2, 0, 0]);
        twice.extend_from_slice(&data[26..]);
        assert_eq!(run(&twice), 0);
    }
}
